"""The project's one exception tree.

Every exception class of the package derives from :class:`RsaError` and renders as one
actionable line (``str(err)``; an error raised without a message says what its class's
docstring says); causes are chained with ``raise ... from``. The commands print it as
one line (:func:`user_line`: ``rsa: error: ...``, ``rsad: error: ...``, ``rsa sim: ...``);
``--debug`` shows the traceback. A unit test (``tests/unit/test_errors.py``) walks the
package and keeps every exception class in this tree.

The tree (where each is defined; the classes a module owns stay beside its code):

- here: :class:`ConfigError` (:class:`ConfigIssue`, :class:`ConfigErrors`),
  :class:`FsError`, :class:`StoreError` (``store.lock.AlreadyRunning``),
  :class:`ScenarioError` (``sim.swf.TraceError``),
  :class:`InternalError` (a bug: ``core.machine.InvariantViolation``)
- core: ``allocator.PolicyViolation``, ``allocator.UnknownNode``,
  ``states.UnknownSlurmState``, ``transitions.InvalidTransition``,
  ``scheduler.StaleOutcome``/``InvalidOutcome``/``CommandRefused``,
  ``directives.DirectiveErrors``/``SubmissionErrors``, ``directive_values.SplitError``
- running things: ``runner.CommandError``, ``hosts.HostError``, ``hosts.Cancelled``,
  ``munge.MungeError``, ``slurm.port.SlurmError``, ``slurm.parse.ParseError``,
  ``fs.mfsproxy.ProxyAddressError``, ``staging.report.StagingError``
- rsad: ``daemon.executors.PermanentError``/``BusyError``, ``daemon.wiring.LockinUnusable``,
  ``daemon.httpd.ApiError``/``HttpError``, ``sim.engine.SimulationBroken``
- clients and nodes: ``client.ApiUnavailable``/``ApiRefused``, ``bb.Unreachable``/
  ``Refused``, ``node.hooks.HookTimeout``, ``node.mounts.MountError``,
  ``node.paths.UnsafePath``, ``node.namespace.NamespaceError``,
  ``node.handles.MountApiMissing``

An error that still is a ``ValueError``/``KeyError``/``AssertionError`` to older callers
keeps that base beside :class:`RsaError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class RsaError(Exception):
    """Base of every error rsa-scheduler raises on purpose."""

    def __str__(self) -> str:
        text = super().__str__()
        if text:
            return text
        doc = (type(self).__doc__ or "").strip()
        return doc.splitlines()[0] if doc else type(self).__name__


class InternalError(RsaError):
    """rsa-scheduler broke one of its own rules: a bug, never the user's input."""


def user_line(err: RsaError, traceback_at: str = "run again with --debug to see it") -> str:
    """The line a command prints for ``err``: its message, and for a bug what to do
    (``traceback_at``: where the reporter finds the traceback)."""
    text = str(err)
    if isinstance(err, InternalError):
        text += f" (a bug in rsa-scheduler: report it with its traceback; {traceback_at})"
    return text


class ConfigError(RsaError):
    """A configuration file is unreadable or invalid. The message names file, key and reason."""

    def __init__(self, file: str, key: str, reason: str) -> None:
        self.file = file
        self.key = key
        self.reason = reason
        where = f"{file}: {key}" if key else file
        super().__init__(f"{where}: {reason}")


class FsError(RsaError):
    """A RAMDISK could not be created, mounted, reset or destroyed, or its backend is
    missing or cannot be loaded."""


class ConfigIssue(ConfigError):
    """One located problem, rendered ``FILE[:LINE]: KEY: REASON``."""

    def __init__(self, file: str, key: str, reason: str, line: int | None = None) -> None:
        super().__init__(file, key, reason)
        self.line = line

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.key}: {self.reason}" if self.key else f"{where}: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "key": self.key, "reason": self.reason}


class ConfigErrors(ConfigError):
    """Every problem found in one load; ``issues`` holds them in file order."""

    def __init__(self, issues: Sequence[ConfigIssue]) -> None:
        if not issues:
            raise ValueError("ConfigErrors needs at least one issue")
        self.issues = tuple(issues)
        first = self.issues[0]
        super().__init__(first.file, first.key, first.reason)

    def __str__(self) -> str:
        if len(self.issues) == 1:
            return str(self.issues[0])
        lines = "\n".join(f"  {issue}" for issue in self.issues)
        return f"{len(self.issues)} errors in the configuration:\n{lines}"


class StoreError(RsaError):
    """The durable store cannot be opened, migrated or written."""


class ScenarioError(RsaError):
    """A simulator scenario file is invalid."""
