"""The one seam through which rsa-scheduler runs local processes.

Owns :func:`run` (argv list in, :class:`Completed` out; hard timeout, and optionally a
caller's "stop now", that kill the whole process group; optional identity switch to a
user's uid/gid/groups with a clean environment) and :class:`CommandError`, which carries
argv, exit code and the tail of stderr. Tests swap the :class:`Runner` seam, never
``subprocess`` itself.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Protocol

from rsa_scheduler.errors import RsaError

STDERR_TAIL = 2000
STOP_POLL = 0.1  # seconds between looks at a caller's stop condition (run(stopped=...))
CLEAN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a command runs as: the job's user, never root, for anything touching user data."""

    user: str
    uid: int
    gid: int
    groups: tuple[int, ...] = ()
    home: str = "/"
    #: the job whose processes these are: commands run in its cgroup on the node and are
    #: killed when they end and when the job's RAMDISK goes (rsa_scheduler.contain)
    scope: str = ""
    #: with ``scope``: bytes of the private tmpfs the command sees as /tmp, /var/tmp and
    #: /dev/shm (0: rsa_scheduler.contain's default)
    private_tmp: int = 0

    @classmethod
    def of(cls, user: str) -> Identity:
        """Look a user up through NSS (LDAP and SSSD users work too). The supplementary
        groups are the user's as ``initgroups`` gives them at login (getgrouplist, which
        asks each group source for this user): ``getgrall`` lists only what a directory
        enumerates, and SSSD does not by default, so it missed the project groups."""
        import pwd

        try:
            pw = pwd.getpwnam(user)
        except KeyError as e:
            raise RsaError(f"unknown user {user!r}: not in the passwd database") from e
        groups = tuple(sorted(set(os.getgrouplist(user, pw.pw_gid)) | {pw.pw_gid}))
        return cls(user=user, uid=pw.pw_uid, gid=pw.pw_gid, groups=groups, home=pw.pw_dir)

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """A clean environment for this user (no inherited daemon variables)."""
        env = {"PATH": CLEAN_PATH, "HOME": self.home, "USER": self.user,
               "LOGNAME": self.user, "LANG": "C.UTF-8"}
        if self.scope:
            env["RSA_SCOPE"] = self.scope
        env.update(extra or {})
        return env

    def setpriv(self) -> list[str]:
        """argv prefix that switches to this user (uid, gid, groups): no shell, no PAM."""
        return ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}",
                *([f"--groups={','.join(str(g) for g in self.groups)}"]
                  if self.groups else ["--clear-groups"]), "--"]


@dataclass(frozen=True, slots=True)
class Completed:
    """A finished command."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float


# util-linux ``setsid -w`` (every RSA-node command's wrapper, rsa_scheduler.remote) when
# its child died of a signal: "setsid: child N did not exit normally: <strerror of a
# stale errno>" (often "Success"), exit status = the signal's number
_SETSID_SIGNALLED = re.compile(r"^setsid: child \d+ did not exit normally")


def killed_by(stderr: str, returncode: int | None) -> str | None:
    """The signal (``SIGKILL``, ...) that killed a wrapped node command, from what
    ``setsid -w`` says of it, or None when it ended by itself."""
    lines = stderr.strip().splitlines()
    if not lines or returncode is None or not _SETSID_SIGNALLED.match(lines[-1]):
        return None
    try:
        return signal.Signals(returncode).name
    except ValueError:
        return f"signal {returncode}"


#: who kills a node command other than its own rsad (whose timeouts and cancels say so)
KILLED_FROM_OUTSIDE = ("not by this rsad's timeout or cancel: by the job's teardown or "
                       "cancel, a starting rsad fencing the node, an operator, or the "
                       "kernel's OOM killer")


class CommandError(RsaError):
    """A command failed or timed out; carries what an operator needs to debug it."""

    def __init__(self, argv: Sequence[str], returncode: int | None, stderr: str,
                 *, timeout: float | None = None, stopped: bool = False) -> None:
        self.argv = tuple(argv)
        self.returncode = returncode
        self.stderr_tail = stderr[-STDERR_TAIL:]
        self.timed_out = timeout is not None
        #: the caller stopped it (``run(stopped=...)``) before it ended
        self.stopped = stopped
        cmd = " ".join(self.argv[:6]) + (" ..." if len(self.argv) > 6 else "")
        if timeout is not None:
            msg = f"{cmd}: timed out after {timeout:g}s (process group killed)"
        elif stopped:
            msg = f"{cmd}: stopped before it ended (process group killed)"
        elif (sig := killed_by(self.stderr_tail, returncode)) is not None:
            msg = f"{cmd}: killed by {sig} ({KILLED_FROM_OUTSIDE})"
        else:
            last = self.stderr_tail.strip().splitlines()[-1:] or ["no error output"]
            msg = f"{cmd}: exit {returncode}: {last[0]}"
        super().__init__(msg)


class Runner(Protocol):
    """The seam: anything that can run an argv."""

    def __call__(self, argv: Sequence[str], *, timeout: float, check: bool = True,
                 input: str | None = None, as_user: Identity | None = None,
                 env: Mapping[str, str] | None = None, cwd: str | None = None
                 ) -> Completed: ...


@dataclass
class LocalRunner:
    """Runs commands on this host."""

    base_env: Mapping[str, str] = field(default_factory=lambda: {"PATH": CLEAN_PATH,
                                                                  "LANG": "C.UTF-8"})

    def __call__(self, argv: Sequence[str], *, timeout: float, check: bool = True,
                 input: str | None = None, as_user: Identity | None = None,
                 env: Mapping[str, str] | None = None, cwd: str | None = None,
                 stopped: Callable[[], bool] | None = None, keep: int = 0) -> Completed:
        return run(argv, timeout=timeout, check=check, input=input, as_user=as_user,
                   env=env if env is not None else (
                       as_user.env() if as_user else dict(self.base_env)),
                   cwd=cwd, stopped=stopped, keep=keep)


def run(argv: Sequence[str], *, timeout: float, check: bool = True, input: str | None = None,
        as_user: Identity | None = None, env: Mapping[str, str] | None = None,
        cwd: str | None = None, stopped: Callable[[], bool] | None = None,
        keep: int = 0) -> Completed:
    """Run ``argv`` (never through a shell) and wait at most ``timeout`` seconds.

    The child gets its own session, so on timeout the whole process group is killed
    (SIGTERM, then SIGKILL after 2 s). ``stopped``, looked at every :data:`STOP_POLL`
    seconds while the child runs, true: the group is killed the same way and
    :class:`CommandError` raised with ``stopped`` set (a cancelled operation). With
    ``as_user`` the child runs with that user's uid, gid and supplementary groups and
    umask 077 (switched by the kernel in the child, not by a Python ``preexec_fn``).
    ``keep`` > 0: of stdout and of stderr only about the last ``keep`` bytes are held,
    however much the command prints (a user's PRE/POSTPROCESS may print without end: all
    of it would be held in rsad's memory until it ends or times out).
    """
    if not argv:
        raise ValueError("empty argv")
    kwargs: dict[str, object] = {}
    if as_user is not None:
        kwargs.update(user=as_user.uid, group=as_user.gid, extra_groups=list(as_user.groups),
                      umask=0o077)
    start = time.monotonic()
    try:
        proc = subprocess.Popen(  # argv list, no shell
            list(argv), stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
            env=dict(env) if env is not None else None, cwd=cwd, start_new_session=True,
            **kwargs,  # type: ignore[call-overload]
        )
    except OSError as e:
        raise CommandError(argv, None, f"cannot execute: {e}") from e
    try:
        if keep > 0:
            out, err, was_stopped = _communicate_kept(proc, input, timeout, stopped, keep)
        else:
            out, err, was_stopped = _communicate(proc, input, timeout, stopped)
    except subprocess.TimeoutExpired as e:
        kill_group(proc)
        if keep > 0:  # the readers hold what they kept (the pipes close with the group)
            err = e.stderr if isinstance(e.stderr, str) else ""
        else:
            out, err = proc.communicate()
        raise CommandError(argv, None, err or "", timeout=timeout) from None
    except BaseException:
        kill_group(proc)
        raise
    if was_stopped:
        raise CommandError(argv, None, err or "", stopped=True)
    done = Completed(tuple(argv), proc.returncode, out, err, time.monotonic() - start)
    if check and proc.returncode != 0:
        raise CommandError(argv, proc.returncode, err)
    return done


def _communicate(proc: subprocess.Popen[str], input: str | None, timeout: float,
                 stopped: Callable[[], bool] | None) -> tuple[str, str, bool]:
    """``proc.communicate`` within ``timeout`` (else TimeoutExpired), and (out, err,
    whether ``stopped`` ended it). A watcher looks at ``stopped`` every STOP_POLL seconds
    and kills the process group once it is true; communicate then returns what the child
    wrote. (Not communicate's own timeout in a loop: after a timeout CPython's
    communicate neither sends the rest of the input nor closes stdin, and a child still
    reading it would wait for ever.)"""
    if stopped is None:
        out, err = proc.communicate(input=input, timeout=timeout)
        return out, err, False
    ended, fired = threading.Event(), threading.Event()

    def watch() -> None:
        while not ended.wait(STOP_POLL):
            if stopped():
                fired.set()
                kill_group(proc)
                return

    watcher = threading.Thread(target=watch, name=f"stop-{proc.pid}", daemon=True)
    watcher.start()
    try:
        out, err = proc.communicate(input=input, timeout=timeout)
    finally:
        ended.set()
        watcher.join()
    return out, err, fired.is_set()


class _Tail:
    """The last ``keep`` bytes of one of a child's pipes, read by a thread of its own as
    they come until EOF: held memory stays bounded however much the child writes."""

    def __init__(self, pipe: IO[str], keep: int) -> None:
        self.keep = keep
        self._buf = bytearray()
        self._lock = threading.Lock()
        self._pipe = pipe.buffer  # type: ignore[attr-defined]
        self.thread = threading.Thread(target=self._read, name="tail", daemon=True)
        self.thread.start()

    @property
    def text(self) -> str:
        """What was kept so far (decoded as the runner decodes: ``errors="replace"``)."""
        with self._lock:
            return bytes(self._buf[-self.keep:]).decode(errors="replace")

    def _read(self) -> None:
        # read1: what the pipe holds now, so the tail is current if the child is killed
        while chunk := self._pipe.read1(65536):
            with self._lock:
                self._buf += chunk
                if len(self._buf) > 2 * self.keep:  # trimmed in batches
                    del self._buf[:-self.keep]


def _communicate_kept(proc: subprocess.Popen[str], input: str | None, timeout: float,
                      stopped: Callable[[], bool] | None, keep: int
                      ) -> tuple[str, str, bool]:
    """:func:`_communicate` holding only the last ``keep`` bytes of each pipe. On
    timeout kills the process group and raises TimeoutExpired with what stderr kept
    (``.stderr``)."""
    assert proc.stdout is not None and proc.stderr is not None
    tails = (_Tail(proc.stdout, keep), _Tail(proc.stderr, keep))
    if proc.stdin is not None:
        def feed() -> None:
            with contextlib.suppress(OSError, ValueError):
                assert proc.stdin is not None
                if input:
                    proc.stdin.write(input)
                proc.stdin.close()
        threading.Thread(target=feed, name="feed", daemon=True).start()
    deadline = time.monotonic() + timeout

    def expired() -> subprocess.TimeoutExpired:
        kill_group(proc)
        for t in tails:  # what the killed group wrote last
            t.thread.join(1.0)
        if not any(t.thread.is_alive() for t in tails):  # else a reader still holds them
            closed()
        return subprocess.TimeoutExpired(proc.args, timeout, stderr=tails[1].text)

    def closed() -> None:  # at EOF: as communicate() leaves them
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()

    fired = False
    while True:
        try:
            proc.wait(timeout=min(STOP_POLL, max(0.0, deadline - time.monotonic())))
            break
        except subprocess.TimeoutExpired:
            if stopped is not None and stopped():
                fired = True
                kill_group(proc)
                break
            if time.monotonic() >= deadline:
                raise expired() from None
    for t in tails:  # the pipes' writers may outlive the child (a daemon it started)
        t.thread.join(max(0.0, deadline - time.monotonic()))
        if t.thread.is_alive():
            raise expired()
    closed()
    return tails[0].text, tails[1].text, fired


def kill_group(proc: subprocess.Popen[str], grace: float = 2.0) -> None:
    """Terminate a child's whole process group: SIGTERM, then SIGKILL after ``grace``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue
