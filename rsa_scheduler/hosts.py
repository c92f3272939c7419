"""The remote-execution port: running argv on RSA nodes.

Owns :class:`Host` (the protocol every backend and the staging engine use to run a
command on one RSA node), :class:`CancelToken` (set it and running commands are killed,
whole process tree) and :class:`HostError`. Implementations: ``rsa_scheduler.remote``
(paramiko, production) and :class:`LocalHost` (this machine, for single-host sites and
unit tests).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Protocol

from rsa_scheduler.contain import contain_argv
from rsa_scheduler.errors import RsaError
from rsa_scheduler.runner import CommandError, Completed, Identity, LocalRunner


class HostError(RsaError):
    """An RSA node could not be reached or a command on it failed."""


class Cancelled(RsaError):
    """The operation was cancelled (demotion, job cancelled, daemon stopping)."""


class CancelToken:
    """A flag shared between the daemon and a running operation."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason = ""

    def cancel(self, reason: str = "cancelled") -> None:
        self.reason = reason
        self._event.set()

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
            cancel: CancelToken | None = None) -> Completed:
        """Run argv (no shell) on the node, as root or as ``as_user`` (uid, gid, groups,
        clean environment). Raise CommandError on failure when ``check``; on timeout or
        cancellation kill the whole remote process tree."""
        ...


class LocalHost:
    """This machine as an RSA node (tmpfs backend, tests)."""

    def __init__(self, name: str = "localhost") -> None:
        self.name = name
        self._runner = LocalRunner()

    def run(self, argv: Sequence[str], *, timeout: float, check: bool = True,
            input: str | None = None, as_user: Identity | None = None,
            env: Mapping[str, str] | None = None,
            cancel: CancelToken | None = None) -> Completed:
        if cancel is not None:
            cancel.check()
        if as_user is None or not as_user.scope:
            return self._runner(argv, timeout=timeout, check=check, input=input,
                                as_user=as_user, env=env)
        # in the job's cgroup, as on a remote node: root joins it, then drops to the user
        wrapped = contain_argv(as_user.scope, "077", [
            *as_user.setpriv(), "env", "-i",
            *(f"{k}={v}" for k, v in as_user.env(env).items()), *argv])
        try:
            done = self._runner(wrapped, timeout=timeout, check=check, input=input)
        except CommandError as e:
            raise CommandError(argv, e.returncode, e.stderr_tail,
                               timeout=timeout if e.timed_out else None) from None
        out = done.stdout.partition("\n")[2] if done.stdout.startswith(
            "RSA-PGID ") else done.stdout
        return Completed(tuple(argv), done.returncode, out, done.stderr, done.seconds)
