"""The daemon's state as other threads may read it: an immutable snapshot, published by the
loop once per cycle.

Owns :class:`StatusSnapshot` (frozen: the pool's nodes, jobs by rsa-state, actions in
flight, whether Slurm answered, the last cycle's duration) and :class:`Published`, the one
place it is handed over. The loop thread builds a snapshot from its live state
(``Daemon.status_view``, on the loop thread) and replaces the published one by reference;
a reader (the Prometheus collector, on the metrics HTTP server's thread) takes
:attr:`Published.latest` once and reads only that object. No lock is needed: rebinding
one attribute is atomic in CPython, and nothing reachable from a snapshot can change, so
a reader sees one whole cycle's state or the previous one, never a mix, and never touches
the loop's dicts while the loop changes them.

Imports nothing of the daemon (the loop imports this module).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class NodeStatus:
    """One RSA node as the last cycle saw it."""

    name: str
    tier: str
    state: str  # the pool's node state: up, down, drain, ...
    job: str | None  # the job holding it, if any


@dataclass(frozen=True, slots=True)
class StatusSnapshot:
    """What the gauges show, as of the cycle ``cycle`` (0: before the first one)."""

    cycle: int = 0
    nodes: tuple[NodeStatus, ...] = ()
    jobs_by_rsa_state: tuple[tuple[str, int], ...] = ()  # sorted by state
    running_actions: int = 0
    slurm_ok: bool = False
    last_cycle_seconds: float = 0.0

    @classmethod
    def of(cls, view: Mapping[str, Any], cycle: int) -> StatusSnapshot:
        """A snapshot of ``view`` (``Daemon.status_view()``'s shape), copied into
        immutable values: nothing of ``view`` is kept."""
        return cls(
            cycle=cycle,
            nodes=tuple(NodeStatus(str(n["name"]), str(n["tier"]), str(n["state"]),
                                   None if n["job"] is None else str(n["job"]))
                        for n in view["nodes"]),
            jobs_by_rsa_state=tuple(sorted((str(s), int(c))
                                           for s, c in view["jobs_by_rsa_state"].items())),
            running_actions=int(view["running_actions"]),
            slurm_ok=bool(view["slurm_ok"]),
            last_cycle_seconds=float(view["last_cycle_seconds"]),
        )


class Published:
    """The latest :class:`StatusSnapshot`: written by the loop thread only, read by any."""

    def __init__(self) -> None:
        self._latest = StatusSnapshot()

    @property
    def latest(self) -> StatusSnapshot:
        return self._latest

    def publish(self, view: Mapping[str, Any]) -> StatusSnapshot:
        """Loop thread: replace the published snapshot with one of ``view``."""
        snap = StatusSnapshot.of(view, self._latest.cycle + 1)
        self._latest = snap  # one reference rebound: readers see the old or the new
        return snap
