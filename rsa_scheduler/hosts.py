"""The remote-execution port: running argv on RSA nodes.

Owns :class:`Host` (the protocol every backend and the staging engine use to run a
command on one RSA node), :class:`CancelToken` (set it and running commands are killed,
whole process tree) and :class:`HostError`. Implementations: ``rsa_scheduler.remote``
(paramiko, production) and :class:`LocalHost` (this machine, for single-host sites and
unit tests).
"""

from __future__ import annotations

import shlex
import threading
import weakref
from collections.abc import Mapping, Sequence
from typing import Protocol

from rsa_scheduler.contain import contain_argv, issued_now
from rsa_scheduler.errors import RsaError
from rsa_scheduler.runner import CommandError, Completed, Identity, LocalRunner


class HostError(RsaError):
    """An RSA node could not be reached or a command on it failed."""


class Cancelled(RsaError):
    """The operation was cancelled (demotion, job cancelled, daemon stopping)."""


class CancelToken:
    """A flag shared between the daemon and a running operation.

    :meth:`child` makes a token cancelled with this one that can also be cancelled
    alone: a part of an operation (one staging command, a copy stopped by the RAMDISK's
    watch) is stopped without stopping its owner."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason = ""
        self._lock = threading.Lock()
        # weak: a child its holder dropped needs no cancelling (an engine makes one per
        # operation); a child holds its parent, so a chain lives as long as its last link
        self._children: weakref.WeakSet[CancelToken] = weakref.WeakSet()
        self._parent: CancelToken | None = None

    def cancel(self, reason: str = "cancelled") -> None:
        with self._lock:
            self.reason = reason
            self._event.set()
            children = list(self._children)
        for child in children:
            child.cancel(reason)

    def child(self) -> CancelToken:
        """A new token, cancelled (with this one's reason) when this one is, at once if
        it already is; cancelling the child leaves this one alone."""
        token = CancelToken()
        token._parent = self
        with self._lock:
            if not self._event.is_set():
                self._children.add(token)
                return token
            reason = self.reason
        token.cancel(reason)
        return token

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float) -> bool:
        return self._event.wait(timeout)

    def check(self) -> None:
        if self._event.is_set():
            raise Cancelled(self.reason)


class Host(Protocol):
    """One RSA node."""

    name: str

    def run(self, argv: Sequence[str], *, timeout: float, check: bool = True,
            input: str | None = None, as_user: Identity | None = None,
            env: Mapping[str, str] | None = None,
            cancel: CancelToken | None = None, keep: int = 0) -> Completed:
        """Run argv (no shell) on the node, as root or as ``as_user`` (uid, gid, groups,
        clean environment). Raise CommandError on failure when ``check``; on timeout or
        cancellation kill the whole remote process tree. ``keep`` > 0: hold only about
        the last ``keep`` bytes of stdout and of stderr (a user's script may print
        without end)."""
        ...


class LocalHost:
    """This machine as an RSA node (tmpfs backend, tests). A cancel kills the running
    command's process group, as :class:`~rsa_scheduler.remote.SshHost` kills its remote
    tree, and raises :class:`Cancelled`."""

    def __init__(self, name: str = "localhost") -> None:
        self.name = name
        self._runner = LocalRunner()

    def run(self, argv: Sequence[str], *, timeout: float, check: bool = True,
            input: str | None = None, as_user: Identity | None = None,
            env: Mapping[str, str] | None = None,
            cancel: CancelToken | None = None, keep: int = 0) -> Completed:
        if cancel is not None:
            cancel.check()
        stopped = None if cancel is None else (lambda: cancel.cancelled)
        try:
            if as_user is None or not as_user.scope:
                return self._runner(argv, timeout=timeout, check=check, input=input,
                                    as_user=as_user, env=env, stopped=stopped, keep=keep)
            # in the job's cgroup, as on a remote node: root joins it, then drops to the user
            wrapped = contain_argv(as_user.scope, "077", [
                *as_user.setpriv(), "env", "-i",
                *(f"{k}={v}" for k, v in as_user.env(env).items()), *argv],
                as_user.private_tmp, issued=issued_now())
            done = self._runner(wrapped, timeout=timeout, check=check, input=input,
                                stopped=stopped, keep=keep)
        except CommandError as e:
            if e.stopped and cancel is not None:
                raise Cancelled(f"{self.name}: {shlex.join(argv[:4])}: "
                                f"{cancel.reason}") from None
            if as_user is None or not as_user.scope:
                raise
            raise CommandError(argv, e.returncode, e.stderr_tail,
                               timeout=timeout if e.timed_out else None) from None
        out = done.stdout.partition("\n")[2] if done.stdout.startswith(
            "RSA-PGID ") else done.stdout
        return Completed(tuple(argv), done.returncode, out, done.stderr, done.seconds)
