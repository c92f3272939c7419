"""The job's own mount namespace on a compute node (``hooks.mounts: job``).

Owns :class:`JobNamespace`. In private-mount mode the node Prolog makes, per job and node,
one mount namespace P -- a copy of the node's, with every mount a slave (host mounts such
as a PFS remount still appear in P; nothing mounted in P leaks out) -- and keeps it alive
with a bind mount of its nsfs file at ``<job dir>/mnt``, as job_container/tmpfs keeps its
``.ns``. The Prolog and the job's node agent make every RAMDISK mount of the job inside P
(:meth:`JobNamespace.entered`), so only processes in P see them; the SPANK plugin moves
each task of the job into P (``slurm_plugins/spank/rsa_jobenv.c:rsa_ns_join``). The
Epilog undoes the mounts inside P and drops the handle; P then goes away with its last
process. The per-node directory ``<node dir>/<node>`` is made a private mount once, so the
handle never propagates anywhere (a namespace file may not be mounted where it would
propagate into its own namespace).

Linux only, root only; the mount system calls go through ctypes like
:mod:`rsa_scheduler.node.mounts`. Must not import the daemon or the CLI.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
from collections.abc import Iterator
from pathlib import Path

from rsa_scheduler.errors import RsaError
from rsa_scheduler.node.mounts import _c  # one libc handle for the node side

CLONE_NEWNS = 0x00020000
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_SLAVE = 1 << 19
MNT_DETACH = 2
HANDLE = "mnt"



class NamespaceError(RsaError):
    """The job's mount namespace could not be made, entered or dropped."""


def _check(rc: int, what: str) -> None:
    if rc != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")


def _mount(source: str | None, target: str, flags: int) -> None:
    _check(_c().mount(source.encode() if source else None, target.encode(), None,
                      ctypes.c_ulong(flags), None), f"mount {target}")


def _setns(fd: int) -> None:
    _check(_c().setns(fd, CLONE_NEWNS), "setns")


def _unescape(field: str) -> str:
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


def propagation(mountinfo: str, path: str) -> str | None:
    """``shared``, ``slave``, ``private`` of the mount at ``path`` (the last one listed,
    i.e. the top of the stack), or None when ``path`` is not a mount point."""
    found: str | None = None
    for line in mountinfo.splitlines():
        fields = line.split(" ")
        if len(fields) < 7 or _unescape(fields[4]) != path:
            continue
        optional = fields[6:fields.index("-")] if "-" in fields else []
        if any(o.startswith("shared:") for o in optional):
            found = "shared"
        elif any(o.startswith("master:") for o in optional):
            found = "slave"
        else:
            found = "private"
    return found


def ensure_private(path: Path) -> None:
    """Make ``path`` a mount point that propagates nothing (self-bind, then private).

    mountinfo names mount points without symlinks, so ``path`` is resolved first: else a
    node directory reached through one (``/var/run`` -> ``/run``) never looks like a mount
    point and every job binds it over itself again, hiding the running jobs' handles.
    """
    real = os.path.realpath(path)
    with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
        state = propagation(f.read(), real)
    if state == "private":
        return
    if state is None:
        _mount(real, real, MS_BIND)
    _mount(None, real, MS_PRIVATE)


class JobNamespace:
    """The mount namespace of one job on one node, held at ``<jobdir>/mnt``."""

    def __init__(self, jobdir: Path, attempts: int | None = None) -> None:
        self.dir = jobdir
        self.handle = jobdir / HANDLE
        self.attempts = attempts

    def exists(self) -> bool:
        try:
            return os.stat(self.handle).st_dev != os.stat(self.dir).st_dev
        except OSError:
            return False

    def create(self) -> None:
        """Make the namespace (idempotent: a retried Prolog keeps the first one)."""
        if self.exists():
            return
        try:
            ensure_private(self.dir.parent)
            fd = os.open(self.handle, os.O_CREAT | os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o600)
            os.close(fd)
            self._bind_new_namespace()
        except OSError as e:
            raise NamespaceError(f"cannot make the job's mount namespace: {e}") from e

    def _bind_new_namespace(self) -> None:
        # Linux refuses (EINVAL) to mount a namespace file unless the namespace is newer
        # than the mounting one. Some kernels (seen on 6.18) number namespaces from
        # per-CPU batches, so a new namespace may look older; another CPU helps.
        cpus = sorted(os.sched_getaffinity(0))
        tries = self.attempts or min(2 * len(cpus) + 1, 17)
        for attempt in range(tries):
            cpu = cpus[attempt % len(cpus)] if attempt else None
            try:
                self._try_bind(cpu)
                return
            except OSError as e:
                if e.errno != errno.EINVAL or attempt == tries - 1:
                    raise

    def _try_bind(self, cpu: int | None) -> None:
        ready_r, ready_w = os.pipe()
        done_r, done_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the namespace's first (and only, briefly) process
            code = 1
            try:
                os.close(ready_r)
                os.close(done_w)
                if cpu is not None:
                    os.sched_setaffinity(0, {cpu})
                _check(_c().unshare(CLONE_NEWNS), "unshare")
                _mount(None, "/", MS_REC | MS_SLAVE)
                os.write(ready_w, b"1")
                os.read(done_r, 1)
                code = 0
            finally:
                os._exit(code)
        os.close(ready_w)
        os.close(done_r)
        try:
            if os.read(ready_r, 1) != b"1":
                raise OSError(errno.ECHILD, "the namespace's process failed")
            _mount(f"/proc/{pid}/ns/mnt", str(self.handle), MS_BIND)
        finally:
            os.close(ready_r)
            os.close(done_w)  # the child exits; the bind keeps the namespace
            os.waitpid(pid, 0)

    @contextlib.contextmanager
    def entered(self) -> Iterator[None]:
        """Run the block inside the namespace, then return to the caller's own.

        The process must be single-threaded (setns refuses otherwise); the working
        directory becomes ``/``.
        """
        home = os.open("/proc/self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
        try:
            self.enter()
            try:
                yield
            finally:
                _setns(home)
        finally:
            os.close(home)

    def enter(self) -> None:
        """Move this process into the namespace for good (the node agent)."""
        try:
            fd = os.open(self.handle, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as e:
            raise NamespaceError(f"cannot open the job's mount namespace: {e}") from e
        try:
            _setns(fd)
        except OSError as e:
            raise NamespaceError(f"cannot enter the job's mount namespace: {e}") from e
        finally:
            os.close(fd)
        os.chdir("/")

    def destroy(self) -> None:
        """Drop the handle; the namespace ends with its last process."""
        try:
            _check(_c().umount2(str(self.handle).encode(), MNT_DETACH), "umount")
        except OSError as e:
            if e.errno not in (errno.EINVAL, errno.ENOENT):
                raise NamespaceError(f"cannot drop the job's mount namespace: {e}") from e
        with contextlib.suppress(FileNotFoundError):
            self.handle.unlink()
