"""Executors: how rsad carries out each kind of action the core asks for.

Owns :class:`ActionContext` (what an executor gets: the action, a cancel token, a progress
callback, the job's facts), the :class:`Registry` of executors by action kind, and the
mapping of exceptions to outcomes (a permanent error is REFUSED, anything else FAILED —
never silently OK). Executors run in rsad's worker threads; they must not touch the core.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rsa_scheduler.core.actions import Action, ActionKind, Outcome, Result
from rsa_scheduler.errors import RsaError
from rsa_scheduler.hosts import Cancelled, CancelToken

log = logging.getLogger(__name__)


class PermanentError(RsaError):
    """Retrying will not help (the user cannot read DATA_IN, a path is refused...)."""


@dataclass
class ActionContext:
    """Everything an executor may use."""

    action: Action
    cancel: CancelToken
    progress: Callable[[Mapping[str, Any]], None]
    facts: Mapping[str, Any] = field(default_factory=dict)  # e.g. {"mount": {...}}
    #: record a step durably (returns once it is in the event log): the facts of this
    #: action when it is re-issued after a crash
    milestone: Callable[[Mapping[str, Any]], None] = lambda _data: None
    #: Slurm had reported the job over when the action was dispatched (a step re-issued
    #: after an rsad restart must not wait for the job's nodes to answer)
    job_ended: bool = False
    #: the job was running when the action was dispatched (False: it ended, or was
    #: requeued: its processes may still be winding down, daemon/data.py write_back)
    job_running: bool = True
    #: RSA nodes of the job the health loop has marked down when the action was
    #: dispatched (a teardown skips them; they are cleaned when they come back)
    down: frozenset[str] = frozenset()


Executor = Callable[[ActionContext], Mapping[str, Any] | None]

#: actions carried out on the job's compute nodes (Prolog, mid-job reset)
NODE_SIDE = frozenset({ActionKind.MOUNT_INPUT, ActionKind.MOUNT_OUTPUT, ActionKind.RESET})


class Registry:
    """Executors by action kind."""

    def __init__(self) -> None:
        self._by_kind: dict[ActionKind, Executor] = {}
        self._on_start: list[Callable[[], None]] = []
        self._on_ready: list[Callable[[], None]] = []
        self._tend: Callable[[str, Mapping[str, Any],
                              Callable[[Mapping[str, Any]], None]], Any] | None = None
        self._scrub: Callable[[str, list[Mapping[str, Any]]], None] | None = None

    def register(self, kind: ActionKind, fn: Executor) -> None:
        self._by_kind[kind] = fn

    def on_start(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` when rsad starts, before it re-issues any outstanding action."""
        self._on_start.append(fn)

    def on_ready(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` once rsad is ready: its API answers every request from then on (the
        compute nodes' hooks and agents among them), after its start re-issued what was
        outstanding."""
        self._on_ready.append(fn)

    def on_scrub(self, fn: Callable[[str, list[Mapping[str, Any]]], None]) -> None:
        """``fn(node, leftovers)`` cleans what teardowns left on ``node`` while it was down
        (each leftover: ``fs_id``, ``job_id``, ``tier``); raises if it cannot."""
        self._scrub = fn

    def scrub(self, node: str, leftovers: list[Mapping[str, Any]]) -> None:
        if self._scrub is None:
            raise RsaError("rsad has no data path to clean RSA nodes with")
        self._scrub(node, leftovers)

    def on_tend(self, fn: Callable[[str, Mapping[str, Any],
                                    Callable[[Mapping[str, Any]], None]], Any]) -> None:
        """``fn(job, mount, record)`` checks one live RAMDISK and repairs it if it can
        (``record`` keeps an event of the job); the RAMDISK tender calls it."""
        self._tend = fn

    def tend(self, job: str, mount: Mapping[str, Any],
             record: Callable[[Mapping[str, Any]], None]) -> Any:
        return self._tend(job, mount, record) if self._tend is not None else None

    @property
    def tends(self) -> bool:
        return self._tend is not None

    def starting(self) -> None:
        for fn in self._on_start:
            fn()

    def ready(self) -> None:
        for fn in self._on_ready:
            fn()

    def kinds(self) -> frozenset[ActionKind]:
        return frozenset(self._by_kind)

    def run(self, ctx: ActionContext) -> Outcome:
        """Run the executor for ``ctx.action`` and turn what happened into an Outcome.

        The executor returns a detail mapping (recorded in the event log) or raises.
        """
        action = ctx.action
        fn = self._by_kind.get(action.kind)
        if fn is None:
            why = ("the compute-node side (rsa Prolog/Epilog) is not available"
                   if action.kind in NODE_SIDE else
                   "check the filesystem/staging configuration")
            return Outcome(action.id, Result.FAILED,
                           f"rsad cannot {action.kind.value}: {why}")
        try:
            ctx.cancel.check()
            detail = dict(fn(ctx) or {})
            # an executor may say in one line what it did (it reaches the user's message)
            return Outcome(action.id, Result.OK, str(detail.pop("summary", "")), detail)
        except Cancelled as e:
            return Outcome(action.id, Result.FAILED, f"cancelled: {e}")
        except PermanentError as e:
            return Outcome(action.id, Result.REFUSED, str(e))
        except BusyError as e:
            return Outcome(action.id, Result.BUSY, str(e),
                           {"silent": list(e.silent)} if e.silent else {})
        except RsaError as e:
            if getattr(e, "permanent", False):
                return Outcome(action.id, Result.REFUSED, str(e))
            return Outcome(action.id, Result.FAILED, str(e))
        except Exception as e:  # an executor bug must not kill rsad; it is a failure
            log.error("executor for %s crashed:\n%s", action.id, traceback.format_exc())
            return Outcome(action.id, Result.FAILED, f"internal error: {e!r}")


class BusyError(RsaError):
    """Nothing was changed, and the action is owed again: a RESET whose input mounts are
    still in use, or not every node that holds one confirmed its release (``silent``:
    those nodes); an UNLOCK (the restore of a lock-in) of a job Slurm runs, whose QOS it
    does not change (``slurm.port.UnlockLater``)."""

    def __init__(self, message: str, *, silent: Iterable[str] = ()) -> None:
        super().__init__(message)
        self.silent = tuple(silent)
