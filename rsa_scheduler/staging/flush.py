"""The order in which stage-outs take the PFS (seed 003, TRIO).

Owns :class:`FlushGate`, which a stage-out passes after it scanned its RAMDISK (so it
knows its bytes) and before it copies, and the pure rules behind it (:func:`target_of`,
:func:`rank`, :func:`admit`). ``staging.stage_out_order``:

* ``fifo``: no gate (every stage-out copies as soon as a bulk worker runs it);
* ``sjf``: at most ``staging.flushes_per_target`` stage-outs copy to one PFS target at
  once; a free slot goes to the waiting stage-out with the fewest bytes;
* ``trio``: the same cap, a free slot goes to the oldest job (Slurm's submit order: the
  lower job id), then the fewest bytes (seed 003: at most alpha flushers per storage
  server, by priority then smallest job first).

A PFS target is the longest of ``staging.pfs_targets`` that holds the destination (path
components, not characters), else ``/``: stage-outs to different targets never wait for
each other. Waiting is cancellable (the stage-out's cancel token); the time a stage-out
waited is not counted against its copy timeout.

Pure rules, one lock: the gate runs nothing remote and never touches user files.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import posixpath
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

ORDERS = ("fifo", "sjf", "trio")
POLL = 0.5  # seconds between looks at the cancel token while waiting


@dataclass(frozen=True, slots=True)
class Waiter:
    """One stage-out asking for a slot."""

    job: str
    target: str
    nbytes: int
    arrived: int  # arrival order (ties, and fifo)


def target_of(path: str, targets: Iterable[str]) -> str:
    """The PFS target holding ``path``: the longest of ``targets`` that is ``path`` or
    one of its parent directories, else ``/``."""
    norm = posixpath.normpath(path)
    best = "/"
    for t in targets:
        t = posixpath.normpath(t)
        if (norm == t or norm.startswith(t.rstrip("/") + "/")) and len(t) > len(best):
            best = t
    return best


_JOB = re.compile(r"(\d+)(?:[_+](\d+))?")


def submit_order(job: str) -> tuple[float, int, str]:
    """Slurm's submit order of a job id (``123``, array task ``123_4``, het component
    ``123+1``): lower first; an id that is not numeric last."""
    m = _JOB.match(job)
    if m is None:
        return (math.inf, 0, job)
    return (float(m.group(1)), int(m.group(2) or 0), job)


def rank(w: Waiter, order: str) -> tuple[object, ...]:
    """The sort key of a waiter under ``order`` (smaller goes first)."""
    if order == "sjf":
        return (w.nbytes, w.arrived)
    if order == "trio":
        return (submit_order(w.job), w.nbytes, w.arrived)
    return (w.arrived,)


def admit(waiting: Sequence[Waiter], running: Mapping[str, int], order: str,
          alpha: int) -> list[Waiter]:
    """Which waiters may copy now: per target, the best ``alpha - running`` by
    :func:`rank`. ``fifo`` (or ``alpha`` < 1) admits everyone."""
    if order == "fifo" or alpha < 1:
        return list(waiting)
    out: list[Waiter] = []
    by_target: dict[str, list[Waiter]] = {}
    for w in waiting:
        by_target.setdefault(w.target, []).append(w)
    for target, ws in by_target.items():
        free = alpha - running.get(target, 0)
        if free > 0:
            out += sorted(ws, key=lambda w: rank(w, order))[:free]
    return out


class Gate(Protocol):
    """What the engine needs of a gate: :class:`FlushGate`, or a worker's stand-in for
    rsad's (``daemon.stagingworker.RemoteGate``)."""

    order: str

    @property
    def gates(self) -> bool: ...

    def slot(self, job: str, path: str, nbytes: int,
             check: Callable[[], None] = ...) -> contextlib.AbstractContextManager[float]: ...


class FlushGate:
    """Slots on the PFS targets for the stage-outs of every job (thread-safe: one per
    rsad, shared by the bulk workers)."""

    def __init__(self, order: str = "fifo", alpha: int = 2, targets: Sequence[str] = (),
                 clock: Callable[[], float] = time.monotonic) -> None:
        if order not in ORDERS:
            raise ValueError(f"stage-out order {order!r}: expected one of {ORDERS}")
        self.order = order
        self.alpha = alpha
        self.targets = tuple(targets)
        self.clock = clock
        self._cond = threading.Condition()
        self._waiting: list[Waiter] = []
        self._running: dict[str, int] = {}
        self._seq = itertools.count()

    @property
    def gates(self) -> bool:
        return self.order != "fifo" and self.alpha >= 1

    @contextlib.contextmanager
    def slot(self, job: str, path: str, nbytes: int,
             check: Callable[[], None] = lambda: None) -> Iterator[float]:
        """Hold a slot of ``path``'s target while the block copies; yields the seconds
        waited. ``check`` is called every :data:`POLL` s while waiting; what it raises
        (a cancelled step: ``CancelToken.check``) ends the wait."""
        if not self.gates:
            yield 0.0
            return
        w = Waiter(job, target_of(path, self.targets), max(0, nbytes), next(self._seq))
        start = self.clock()
        with self._cond:
            self._waiting.append(w)
            try:
                while w not in admit(self._waiting, self._running, self.order, self.alpha):
                    check()
                    self._cond.wait(POLL)
            finally:
                self._waiting.remove(w)
                self._cond.notify_all()
            self._running[w.target] = self._running.get(w.target, 0) + 1
        try:
            yield self.clock() - start
        finally:
            with self._cond:
                self._running[w.target] -= 1
                if not self._running[w.target]:
                    del self._running[w.target]
                self._cond.notify_all()

    def state(self) -> dict[str, dict[str, int]]:
        """Per target: stage-outs copying and waiting (for status and metrics)."""
        with self._cond:
            out: dict[str, dict[str, int]] = {
                t: {"copying": n, "waiting": 0} for t, n in self._running.items()}
            for w in self._waiting:
                out.setdefault(w.target, {"copying": 0, "waiting": 0})["waiting"] += 1
            return out

