"""One rsad per store: the exclusive lock a running rsad holds on its store.

Owns :class:`StoreLock` (taken by rsad before it opens its store, its API socket or
anything else, held until the process ends) and :func:`holder` (who holds it, asked
without taking it: ``rsad --check`` reports it). The lock is a POSIX record lock
(``fcntl``, ``F_SETLK``) on ``<store>.lock`` beside the store file, which also holds the
holder's pid as text for the operator:

* the kernel releases it when the holder dies, however it dies (no stale lock after a
  crash or a SIGKILL);
* it is not inherited by child processes (staging workers, ssh), unlike ``flock``: a
  worker that outlives a killed rsad never keeps the next one out;
* ``F_GETLK`` names the holder's pid without taking the lock, so a check never makes a
  starting rsad fail.

SQLite's own locking does not exclude a second rsad: both open the store, and each takes
the write lock only for one transaction at a time.

Imports only the stdlib and :mod:`rsa_scheduler.errors`.
"""

from __future__ import annotations

import fcntl
import os
import struct
from pathlib import Path

from rsa_scheduler.errors import StoreError

# struct flock on Linux (x86_64, aarch64): short l_type, short l_whence, off_t l_start,
# off_t l_len, pid_t l_pid (native alignment; 32 bytes with the trailing padding)
_FLOCK = "@hhqqi4x"


class AlreadyRunning(StoreError):
    """Another rsad holds this store (one rsad per store)."""

    def __init__(self, pid: int | None, store: Path) -> None:
        who = f"rsad (pid {pid})" if pid else "another rsad"
        super().__init__(f"{who} already runs on {store}")
        self.pid = pid
        self.store = store


def lock_path(store: Path) -> Path:
    """The lock file of the store at ``store``: ``<store>.lock``, beside it."""
    return store.with_name(store.name + ".lock")


def _getlk(fd: int) -> int | None:
    """The pid holding a lock that conflicts with a write lock on ``fd``'s file, or None."""
    query = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
    answer = fcntl.fcntl(fd, fcntl.F_GETLK, query)
    kind, _whence, _start, _len, pid = struct.unpack(_FLOCK, answer)
    return None if kind == fcntl.F_UNLCK else int(pid)


def holder(store: Path) -> int | None:
    """The pid of the rsad holding ``store`` (None: none does). Takes no lock."""
    path = lock_path(store)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise StoreError(f"{path}: cannot read the store's lock: {e.strerror}; run as "
                         "rsad's user (root)") from e
    try:
        return _getlk(fd)
    finally:
        os.close(fd)


class StoreLock:
    """The exclusive lock of one store, held by this process until :meth:`release` or
    its end. Create with :meth:`acquire`."""

    def __init__(self, fd: int, path: Path, store: Path) -> None:
        self._fd: int | None = fd
        self.path = path
        self.store = store

    @classmethod
    def acquire(cls, store: Path) -> StoreLock:
        """Take the lock of ``store`` at once or raise :class:`AlreadyRunning` naming the
        holder. Creates the store's directory (0700) and the lock file (0600) if
        missing."""
        path = lock_path(store)
        parent = path.parent
        try:
            if not parent.exists():
                parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                os.chmod(parent, 0o700)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as e:
            raise StoreError(f"{path}: cannot open the store's lock: {e.strerror}; check "
                             f"that {parent} exists and rsad's user may write it") from e
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            try:
                pid = _getlk(fd)
                if pid is None:  # released in between: the pid written there, if any
                    text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
                    pid = int(text) if text.isdigit() else None
            finally:
                os.close(fd)
            raise AlreadyRunning(pid, store) from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass  # the pid in the file is for the operator only; F_GETLK is the truth
        return cls(fd, path, store)

    def release(self) -> None:
        """Let the lock go (idempotent); the file stays."""
        if self._fd is not None:
            os.close(self._fd)  # closing releases this process's record locks on it
            self._fd = None
