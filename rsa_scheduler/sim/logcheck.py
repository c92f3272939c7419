"""The replay-equals-live check of a trace replay, window by window.

Owns :class:`LogWindow`: the events the core committed since the last check point and
the durable state the window began with. Closing a window replays its log onto that
state with a fresh :class:`~rsa_scheduler.core.scheduler.Scheduler` and pool and
compares them with the live ones (the property the event log exists for: replaying the
log reproduces the state, docs/architecture.md), then lets the live core forget finished
jobs, so memory stays bounded by the active jobs. With ``stride`` > 1 only every
stride-th window is logged and checked (the others cost nothing but the forgetting).

Must not import the engine (:mod:`rsa_scheduler.sim.replay`) nor read the clock.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping, Sequence
from typing import Any

from rsa_scheduler.core.allocator import Pool, RsaNode
from rsa_scheduler.core.events import Event
from rsa_scheduler.core.policy import AllocationPolicy, StagingPolicy
from rsa_scheduler.core.scheduler import Scheduler


class LogWindow:
    """The event log of the current window and the checks that close it."""

    def __init__(self, every: int, stride: int) -> None:
        self.every = every  # events per window
        self.stride = stride  # check every stride-th window
        self.log: list[Event] = []
        self.logged = 0  # events of the current window (logged or not)
        self.window = 0
        self.base: Mapping[str, Any] | None = None  # durable state the window began with

    def record(self, events: Sequence[Event]) -> None:
        self.logged += len(events)
        if self.window % self.stride == 0:
            self.log.extend(events)

    @property
    def full(self) -> bool:
        return self.logged >= self.every

    def close(self, sched: Scheduler, pool: Pool, nodes: Sequence[RsaNode],
              allocation: AllocationPolicy, staging: StagingPolicy, now: float,
              present: Container[str], broken: Callable[[str], Exception]) -> bool:
        """End the window: if it was logged, replay its log onto the state it began with
        and compare with the live ``sched`` and ``pool`` (``broken(what)`` is raised on a
        difference); then forget finished jobs and begin the next window, logged from a
        fresh durable state or not at all. True when a check was made."""
        checked = self.window % self.stride == 0
        if checked:
            again_pool = Pool(nodes, allocation)
            try:
                again = Scheduler.replay(again_pool, staging, self.log, base=self.base)
            except Exception as e:
                raise broken(f"replay of the log raised {type(e).__name__}: {e}") from e
            if again.snapshot() != sched.snapshot():
                raise broken("replay of the log differs from the live scheduler")
            if again_pool.jobs() != pool.jobs():
                raise broken("replay of the log gives a different RSA node pool")
        sched.forget_finished(now, 0.0, present)
        self.window += 1
        self.logged = 0
        self.log = []
        self.base = sched.durable_state() if self.window % self.stride == 0 else None
        return checked
