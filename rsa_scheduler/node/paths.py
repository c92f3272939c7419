"""Path safety: may root mount over this user path? (seed 004 §3.2, issue 5)

Owns :func:`check_target`, :func:`open_target`, :func:`mount_refusal`,
:func:`open_nofollow` and :class:`UnsafePath`. Root mounts the RAMDISK over a path a
user wrote into a job script, so before that the path must: be absolute and normalised
(no ``..``), exist as a directory, have no symlink component (checked with ``lstat`` on
every prefix, so a symlink anywhere cannot redirect the mount into ``/etc``), lie strictly
inside one of ``staging.allowed_roots`` (never a root itself, never a system directory),
and be the job's user's own directory (:func:`mount_refusal`, issue 36). The mount hides
the directory (node-wide in ``hooks.mounts: node``), so a directory another user owns,
even one the job's user may write (a group project directory, a world-writable one),
is refused: teammates' jobs on that node would see the RAMDISK instead of it. Only
under one of ``staging.shared_dirs``, which the operator lists, may it be a directory
of the job's group that the group can write. To unmount, root finds its mount again the
same way (:func:`open_nofollow`), never through a symlink the user planted since.
Imports only the standard library.
"""

from __future__ import annotations

import errno
import os
import pwd
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from rsa_scheduler.errors import RsaError

#: never mounted over, whatever the configuration says
SYSTEM_PATHS = frozenset({
    "/", "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/opt", "/proc",
    "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/var",
})
SYSTEM_PREFIXES = ("/bin/", "/boot/", "/dev/", "/etc/", "/lib/", "/lib32/", "/lib64/",
                   "/proc/", "/root/", "/run/", "/sbin/", "/sys/", "/usr/", "/var/")


class UnsafePath(RsaError):
    """Root refuses to mount over this path; the message says why, for the user."""

    permanent = True


@dataclass(frozen=True, slots=True)
class Who:
    """The job's user as the node sees it."""

    uid: int
    gids: frozenset[int]


def _under(path: PurePosixPath, root: PurePosixPath) -> bool:
    return path != root and root in path.parents


def lexical_check(path: str, allowed_roots: Sequence[str]) -> PurePosixPath:
    """The checks that need no filesystem: absolute, normalised, inside a root, not system."""
    if not path or not path.startswith("/"):
        raise UnsafePath(f"{path!r} is not an absolute path")
    if "\0" in path or any(part in ("..", ".") for part in path.split("/")):
        raise UnsafePath(f"{path} contains '.' or '..' components")
    p = PurePosixPath(os.path.normpath(path))
    if str(p) in SYSTEM_PATHS or (str(p) + "/").startswith(SYSTEM_PREFIXES):
        raise UnsafePath(f"{p} is a system path; the RSA never mounts over it")
    roots = [PurePosixPath(os.path.normpath(str(r))) for r in allowed_roots]
    roots = [r for r in roots if str(r) != "/"]
    if not any(_under(p, r) for r in roots):
        allowed = ", ".join(str(r) for r in roots) or "(none configured)"
        raise UnsafePath(f"{p} is outside the allowed roots ({allowed})")
    return p


def _prefixes(p: PurePosixPath) -> Iterable[str]:
    parts = p.parts[1:]
    for i in range(1, len(parts) + 1):
        yield "/" + "/".join(parts[:i])


def _within(p: PurePosixPath, roots: Sequence[str]) -> bool:
    for r in roots:
        root = PurePosixPath(os.path.normpath(str(r)))
        if str(root) != "/" and (p == root or root in p.parents):
            return True
    return False


def _owner(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def mount_refusal(st: os.stat_result, who: Who, p: PurePosixPath,
                  shared_dirs: Sequence[str] = (), *, directive: str = "") -> str | None:
    """Why root must not mount over the directory ``p`` (its ``st``) for ``who``; None
    if it may. The user's own directory always; a directory of one of the user's groups
    that the group may write, only under an operator's ``shared_dirs``; never one that
    is writable only through its other-bits (world-writable), sticky or not."""
    if st.st_uid == who.uid:
        return None
    shared = _within(p, shared_dirs)
    if shared and st.st_gid in who.gids and st.st_mode & stat.S_IWGRP:
        return None
    name = f"{directive}={p}" if directive else str(p)
    if shared:
        return (f"{name} is owned by {_owner(st.st_uid)}, not you, and is not a directory "
                f"your group may write: the RAMDISK is mounted only over your own "
                f"directories or, under {', '.join(map(str, shared_dirs))}, a directory "
                f"of one of your groups with group write permission")
    return (f"{name} is owned by {_owner(st.st_uid)}, not you: the RAMDISK is mounted only "
            f"over your own directories; use a directory of your own, or ask the operator "
            f"to list a parent of it in staging.shared_dirs")


def _walk(p: PurePosixPath, *, keep_parent: bool = False,
          advice: str = "") -> tuple[int, int]:
    """Open ``p`` one component at a time from ``/`` with
    ``openat(O_PATH|O_NOFOLLOW|O_DIRECTORY)``: a symlink anywhere fails the walk. Returns
    (descriptor of ``p``, descriptor of its parent or -1); the caller closes both."""
    flags = os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC
    fd = os.open("/", flags)
    parent = -1
    try:
        for prefix, name in zip(_prefixes(p), p.parts[1:], strict=True):
            try:
                nfd = os.open(name, flags, dir_fd=fd)
            except FileNotFoundError as e:
                raise UnsafePath(f"{p} does not exist ({prefix} is missing)") from e
            except NotADirectoryError as e:
                try:
                    is_link = stat.S_ISLNK(os.lstat(prefix).st_mode)
                except OSError:
                    is_link = False
                why = (f"has a symlink component ({prefix}){advice}" if is_link
                       else f"is not a directory ({prefix})")
                raise UnsafePath(f"{p} {why}") from e
            except OSError as e:
                if e.errno == errno.ELOOP:
                    raise UnsafePath(f"{p} has a symlink component ({prefix})") from e
                raise UnsafePath(f"{p}: cannot inspect {prefix}: {e.strerror}") from e
            if parent >= 0:
                os.close(parent)
                parent = -1
            if keep_parent:
                parent = fd
            else:
                os.close(fd)
            fd = nfd
        return fd, parent
    except BaseException:
        os.close(fd)
        if parent >= 0:
            os.close(parent)
        raise


def open_nofollow(path: str) -> tuple[int, int, str]:
    """(descriptor of the directory ``path``, descriptor of its parent, last name), all
    reached without following a symlink (``UnsafePath`` otherwise). Root uses this to
    find again a mount it made over a user's directory: whatever the user renamed or
    replaced since, it never leads elsewhere. The caller closes both descriptors."""
    p = PurePosixPath(os.path.normpath(path))
    if not p.is_absolute() or len(p.parts) < 2:
        raise UnsafePath(f"{path!r} is not an absolute path below /")
    fd, parent = _walk(p, keep_parent=True)
    return fd, parent, p.name


def open_target(path: str, who: Who, allowed_roots: Sequence[str],
                shared_dirs: Sequence[str] = (), *, directive: str = "") -> int:
    """Open ``path`` (O_PATH) if root may mount over it for ``who``; else raise.

    Walks the path one component at a time (:func:`_walk`), so a symlink anywhere fails
    the walk and the checked directory is the one the returned descriptor holds:
    mounting onto it (``move_mount`` to the descriptor) leaves no window in which a user
    could swap a component for a symlink; its owner is checked on that descriptor too
    (:func:`mount_refusal`). ``directive`` (``#RSA_DATA_OUT``) names the path the way
    the user wrote it. The caller closes the descriptor.
    """
    p = lexical_check(path, allowed_roots)
    fd, _ = _walk(p, advice="; use the real path")
    try:
        try:
            st = os.fstat(fd)
        except OSError as e:  # e.g. a user's FUSE mount there whose daemon is gone
            name = f"{directive}={p}" if directive else str(p)
            raise UnsafePath(f"{name}: cannot inspect it ({e.strerror})") from e
        why = mount_refusal(st, who, p, shared_dirs, directive=directive)
        if why is not None:
            raise UnsafePath(why)
        return fd
    except BaseException:
        os.close(fd)
        raise


def check_target(path: str, who: Who, allowed_roots: Sequence[str],
                 shared_dirs: Sequence[str] = ()) -> str:
    """Return the normalised ``path`` if root may mount over it for ``who``; else raise."""
    os.close(open_target(path, who, allowed_roots, shared_dirs))
    return str(PurePosixPath(os.path.normpath(path)))
