"""Mounts by handle: make a mount from descriptors, name it by id, undo exactly it.

Owns the Linux mount API calls the node side needs beyond ``mount(2)``: a detached copy
of a mount (``open_tree``), an overlayfs built from descriptors (``fsopen``/``fsconfig``/
``fsmount``), attaching it on a directory held by an ``O_PATH`` descriptor
(``move_mount``), the identity of a mount behind a descriptor (:class:`MountRef`: the
mount id from ``/proc/self/fdinfo`` plus its filesystem's device from mountinfo, so a
recycled mount id is never taken for ours; never a call into the filesystem), where a
mount id sits now (``/proc/self/mountinfo``), and unmounting through a descriptor
(``umount2("/proc/self/fd/N")``), never through a path a user could have changed since.
The system call numbers of this API are the same on every Linux architecture (424 and
up); it needs Linux 5.2. Standard library only; must not import the daemon or the CLI.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass

from rsa_scheduler.errors import RsaError

SYS_OPEN_TREE = 428
SYS_MOVE_MOUNT = 429
SYS_FSOPEN = 430
SYS_FSCONFIG = 431
SYS_FSMOUNT = 432
OPEN_TREE_CLONE = 1
AT_EMPTY_PATH = 0x1000
MOVE_MOUNT_F_EMPTY_PATH = 0x4
MOVE_MOUNT_T_EMPTY_PATH = 0x40
FSOPEN_CLOEXEC = 1
FSMOUNT_CLOEXEC = 1
FSCONFIG_SET_FLAG = 0
FSCONFIG_SET_STRING = 1
FSCONFIG_CMD_CREATE = 6
MOUNT_ATTR_RDONLY = 1
MOUNT_ATTR_NOSUID = 2
MOUNT_ATTR_NODEV = 4
MOUNT_ATTR_NOEXEC = 8
MNT_DETACH = 2
UMOUNT_NOFOLLOW = 8

_libc: ctypes.CDLL | None = None


class MountApiMissing(RsaError):
    """The kernel has no open_tree/move_mount (Linux < 5.2): no mount by handle."""


def _c() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def _sys(nr: int, what: str, *args: object) -> int:
    rc = int(_c().syscall(ctypes.c_long(nr), *args))
    if rc < 0:
        e = ctypes.get_errno()
        if e == 38:  # ENOSYS
            raise MountApiMissing(f"{what}: this kernel has no mount-by-handle API "
                                  "(Linux 5.2 or later is needed)")
        raise OSError(e, f"{what}: {os.strerror(e)}")
    return rc


def _s(text: str | None) -> ctypes.c_char_p:
    return ctypes.c_char_p(text.encode() if text is not None else None)


def clone(path: str) -> int:
    """A detached copy of the mount at ``path`` (a root-only place): its descriptor."""
    flags = OPEN_TREE_CLONE | os.O_CLOEXEC
    return _sys(SYS_OPEN_TREE, f"open_tree {path}", ctypes.c_int(-100), _s(path),
                ctypes.c_uint(flags))


def overlay(lowerdirs: list[str], source: str = "rsa-union", attrs: int = 0) -> int:
    """A detached, read-only overlayfs of ``lowerdirs`` (first on top): its descriptor.
    A lower directory may be ``/proc/self/fd/N``: it is looked up here, once. ``attrs``:
    more ``MOUNT_ATTR_*`` flags of the mount (``MOUNT_ATTR_NOSUID`` ...)."""
    fs = _sys(SYS_FSOPEN, "fsopen overlay", _s("overlay"), ctypes.c_uint(FSOPEN_CLOEXEC))
    try:
        for key, value in (("source", source), ("lowerdir", ":".join(lowerdirs))):
            _sys(SYS_FSCONFIG, f"overlay {key}={value}", ctypes.c_int(fs),
                 ctypes.c_uint(FSCONFIG_SET_STRING), _s(key), _s(value), ctypes.c_int(0))
        _sys(SYS_FSCONFIG, "overlay ro", ctypes.c_int(fs), ctypes.c_uint(FSCONFIG_SET_FLAG),
             _s("ro"), _s(None), ctypes.c_int(0))
        _sys(SYS_FSCONFIG, "overlay create", ctypes.c_int(fs),
             ctypes.c_uint(FSCONFIG_CMD_CREATE), _s(None), _s(None), ctypes.c_int(0))
        return _sys(SYS_FSMOUNT, "fsmount overlay", ctypes.c_int(fs),
                    ctypes.c_uint(FSMOUNT_CLOEXEC), ctypes.c_uint(MOUNT_ATTR_RDONLY | attrs))
    finally:
        os.close(fs)


def attach(tree: int, onto: int) -> None:
    """Mount the detached ``tree`` on the directory held by descriptor ``onto``."""
    _sys(SYS_MOVE_MOUNT, "move_mount", ctypes.c_int(tree), _s(""), ctypes.c_int(onto),
         _s(""), ctypes.c_uint(MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH))


@dataclass(frozen=True, slots=True)
class MountRef:
    """Which mount: its id, and its filesystem's device (``major:minor``), since mount
    ids are recycled. Both come from procfs: naming a mount never asks its filesystem
    (a RAMDISK whose servers are gone would hang the caller)."""

    mnt_id: int
    dev: str

    def to_json(self) -> dict[str, object]:
        return {"mnt_id": self.mnt_id, "dev": self.dev}

    @classmethod
    def from_json(cls, data: object) -> MountRef | None:
        if not isinstance(data, dict):
            return None
        try:
            return cls(int(data["mnt_id"]), str(data["dev"]))
        except (KeyError, TypeError, ValueError):
            return None


def mount_id(fd: int) -> int:
    """The id of the mount that descriptor ``fd`` is on (``/proc/self/fdinfo``)."""
    with open(f"/proc/self/fdinfo/{fd}", encoding="ascii") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key == "mnt_id":
                return int(value)
    raise OSError(f"/proc/self/fdinfo/{fd} has no mnt_id")


def ref_of(fd: int) -> MountRef:
    """The attached mount descriptor ``fd`` is on, named from procfs only."""
    mnt = mount_id(fd)
    for line in read_mountinfo().splitlines():
        fields = line.split(" ")
        if len(fields) > 4 and fields[0] == str(mnt):
            return MountRef(mnt, fields[2])
    raise OSError(f"mount {mnt} is not in this mount namespace")


def detached_ref(tree: int) -> MountRef:
    """The name a detached mount (``clone``, ``overlay``) will have once attached: its
    id, kept by ``move_mount``, and its filesystem's device (``fstat``: the superblock's,
    as mountinfo gives it; a RAMDISK just mounted, so it answers). Lets the caller
    record a mount before it exists."""
    dev = os.fstat(tree).st_dev
    return MountRef(mount_id(tree), f"{os.major(dev)}:{os.minor(dev)}")


def unescape(field: str) -> str:
    """A mountinfo path: octal escapes (``\\040`` for a space) decoded."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def mount_point(mountinfo: str, mnt_id: int, dev: str | None = None) -> str | None:
    """Where mount ``mnt_id`` is mounted now (as this process sees it), or None; with
    ``dev``, only if its filesystem is that one (a recycled id is someone else's)."""
    for line in mountinfo.splitlines():
        fields = line.split(" ")
        if len(fields) > 4 and fields[0] == str(mnt_id):
            return unescape(fields[4]) if dev is None or fields[2] == dev else None
    return None


def read_mountinfo() -> str:
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        return f.read()


def detach(fd: int) -> None:
    """Lazily detach the mount whose root descriptor ``fd`` holds (never a path lookup:
    ``/proc/self/fd/N`` jumps to exactly that mount)."""
    rc = _c().umount2(f"/proc/self/fd/{fd}".encode(), ctypes.c_int(MNT_DETACH))
    if rc != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"umount (detach) of descriptor {fd}: {os.strerror(e)}")


def unmount_at(dirfd: int, name: str) -> None:
    """Unmount, not lazily, the mount on ``name`` in the directory held by ``dirfd``
    without following a symlink there. Busy gives EBUSY. (A descriptor of the mount
    itself would count as a user and make it busy, hence the directory and the name.)"""
    rc = _c().umount2(f"/proc/self/fd/{dirfd}/{name}".encode(), ctypes.c_int(UMOUNT_NOFOLLOW))
    if rc != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"umount {name}: {os.strerror(e)}")
