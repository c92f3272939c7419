"""RSA-node and RAMDISK health: a probe per node, a pure verdict, automatic drain/down
and resume; and the RAMDISK tender, which has the dead servers of live RAMDISKs restarted.

Owns :data:`PROBE` (one fixed shell program run as root on a node: free space of its pool
directory's filesystem, its clock, and whether users can write that filesystem:
:mod:`rsa_scheduler.fs.poolcheck`), :func:`parse_probe`, :func:`verdict` (pure: the probe history of
one node and the thresholds in, the state it should be in and why out) and
:class:`HealthLoop` (a thread that probes every node each ``health.interval`` and asks
the loop thread to change a node's state through the same ``node-state`` request an
operator's ``rsa drain`` uses, with ``by="health"``), and :class:`RamdiskTender` (a
thread that checks every live RAMDISK each ``health.ramdisk_interval``).

The loop only ever undoes what it did: a node an operator drained stays drained until
an operator resumes it; a node the health loop took out comes back by itself once its
probe is healthy again. The allocator never hands out a node that is not ``up``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from rsa_scheduler.core.policy import NodeState
from rsa_scheduler.core.units import format_size
from rsa_scheduler.errors import RsaError
from rsa_scheduler.fs.poolcheck import POOL_CHECK, parse_pool_check
from rsa_scheduler.hosts import Host

log = logging.getLogger(__name__)

HEALTH_BY = "health"
#: how the reason of every verdict begins: those are about the node alone (its free
#: space, clock, reachability) and are shown to every user
VERDICT = "health: "
#: what a user who is not an operator sees instead of any other reason the health loop
#: gave: the one that names the jobs whose leftovers keep a node out (rsad's wiring)
LEFT_OVER = "health: kept out until what earlier jobs left on it is cleaned"


def public_reason(reason: str) -> str:
    """A reason the health loop gave, as a user who is not an operator sees it."""
    return reason if reason.startswith(VERDICT) else LEFT_OVER

#: argv: sh -c PROBE POOL_DIR POOL_CHECK (run as root); ``free`` is what statvfs says is
#: available to the pool's filesystem (``df``'s avail, f_bavail), plus what the pool's
#: standby servers take there (``STANDBYS``: a backend's server started ahead, which a
#: create takes over; fs/moosefs.py STANDBY): the RSA's own, free for the next job, and
#: never "something outside the RSA" (the allocator's short nodes)
STANDBYS = "rsa-*-.standby-*"
PROBE = ('f=$(df -PB1 -- "$0" 2>/dev/null | awk \'NR==2{print $4}\'); '
         's=$(du -sB1 -- "$0"/' + STANDBYS + ' 2>/dev/null | awk \'{t += $1} END {print t + 0}\'); '
         '[ -z "$f" ] || f=$((f + s)); '
         'echo "free ${f:--1}"; echo "clock $(date +%s.%N)"; sh -c "$1" "$0"; '
         'echo "probe ok"')


def probe_argv(pool_dir: str) -> list[str]:
    """The probe of a node whose pool is ``pool_dir``."""
    return ["sh", "-c", PROBE, pool_dir, POOL_CHECK]


@dataclass(frozen=True, slots=True)
class Probe:
    """What one probe of one node found."""

    ok: bool  # the node answered
    free: int | None = None  # bytes free in its pool directory (None: unknown)
    skew: float | None = None  # its clock minus ours, seconds (round trip halved)
    error: str = ""
    shared: tuple[str, ...] = ()  # how users can write its pool's filesystem (poolcheck)
    epoch: int | None = None  # the node's allocation epoch when the probe began


@dataclass(frozen=True, slots=True)
class Thresholds:
    down_after: int = 2  # consecutive failed probes before a node is down
    min_free: int = 1 << 30
    max_skew: float = 30.0


def parse_probe(stdout: str, sent: float, received: float) -> Probe:
    """The probe's output (``sent``/``received``: our clock around the call)."""
    vals = dict(line.split(" ", 1) for line in stdout.splitlines() if " " in line)
    if vals.get("probe") != "ok":
        return Probe(False, error=f"probe output incomplete: {stdout[-200:]!r}")
    free = int(vals["free"]) if vals.get("free", "-1").lstrip("-").isdigit() else -1
    skew = float(vals["clock"]) - (sent + received) / 2 if "clock" in vals else None
    return Probe(True, free if free >= 0 else None, skew,
                 shared=parse_pool_check(stdout))


def verdict(history: list[Probe], current: NodeState, set_by_health: bool,
            limits: Thresholds) -> tuple[NodeState, str] | None:
    """The state a node should move to now, and why; None: leave it as it is.

    ``history`` is newest last. Only a node that is up, or that the health loop itself
    took out, is changed.
    """
    if not history or (current is not NodeState.UP and not set_by_health):
        return None
    last = history[-1]
    failing = 0
    for p in reversed(history):
        if p.ok:
            break
        failing += 1
    want: tuple[NodeState, str] | None = None
    if failing >= limits.down_after:
        want = (NodeState.DOWN, f"{VERDICT}unreachable in {failing} probes in a row "
                                f"({last.error})")
    elif not last.ok:
        return None  # one failure: wait for the next probe
    elif last.shared:
        want = (NodeState.DRAINED, f"health: users can fill its pool: {last.shared[0]}; "
                                   "give the pool a filesystem of its own (rsa nodes check)")
    elif last.free is not None and last.free < limits.min_free:
        want = (NodeState.DRAINED, f"{VERDICT}only {format_size(last.free)} free in its "
                                   f"pool directory (needs {format_size(limits.min_free)})")
    elif last.skew is not None and abs(last.skew) > limits.max_skew:
        want = (NodeState.DRAINED, f"{VERDICT}clock off by {last.skew:+.0f}s "
                                   f"(limit {limits.max_skew:.0f}s)")
    if want is None:
        return (NodeState.UP, f"{VERDICT}healthy again") if current is not NodeState.UP \
            else None
    return want if want[0] is not current else None


class HealthLoop:
    """Probes every RSA node each ``interval`` s from its own thread."""

    def __init__(self, hosts: Mapping[str, Host], pool_dirs: Mapping[str, str], *,
                 state_of: Callable[[str], NodeState],
                 set_state: Callable[[str, NodeState, str], None],
                 limits: Thresholds, interval: float = 30.0, timeout: float = 10.0,
                 taken_out: set[str] | None = None,
                 before_up: Callable[[str], str | None] = lambda _node: None,
                 epoch_of: Callable[[str], int] | None = None,
                 observe: Callable[[str, int | None, int], str | None] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.hosts = hosts
        self.pool_dirs = pool_dirs
        self.state_of = state_of
        self.set_state = set_state
        self.limits = limits
        self.interval = interval
        self.timeout = timeout
        self.clock = clock
        self.history: dict[str, list[Probe]] = {n: [] for n in hosts}
        self.taken_out: set[str] = set(taken_out or ())  # nodes this loop took out
        self.reasons: dict[str, str] = {}
        # runs before a node is brought back up: cleans what teardowns left there while
        # it was down; a non-empty answer keeps it out, with that reason
        self.before_up = before_up
        # the allocator's side: its epoch of a node, and where a free-space figure goes
        # (it answers why the node is short, or None); rsa_scheduler.core.allocator
        self.epoch_of = epoch_of
        self.observe = observe
        self.short: dict[str, str] = {}  # node -> why it was short, as last logged
        self._thread: threading.Thread | None = None

    def probe(self, node: str) -> Probe:
        epoch = self.epoch_of(node) if self.epoch_of is not None else None
        sent = self.clock()
        try:
            done = self.hosts[node].run(probe_argv(self.pool_dirs[node]),
                                        timeout=self.timeout, check=False)
        except RsaError as e:
            return Probe(False, error=str(e)[:300])
        return replace(parse_probe(done.stdout, sent, self.clock()), epoch=epoch)

    def counted(self, node: str, probe: Probe) -> None:
        """Hand the node's real free space to the allocator; log once when it finds
        the node short (something outside the RSA uses its pool) and when that ends."""
        if self.observe is None or not probe.ok or probe.epoch is None:
            return
        why = self.observe(node, probe.free, probe.epoch)
        if why and self.short.get(node) != why:
            log.warning("RSA node %s: %s", node, why)
        elif not why and node in self.short:
            log.info("RSA node %s: its pool is free again", node)
        if why:
            self.short[node] = why
        else:
            self.short.pop(node, None)

    def check(self, node: str, probe: Probe) -> None:
        """Record ``probe`` and move the node if the verdict says so."""
        hist = self.history.setdefault(node, [])
        hist.append(probe)
        del hist[:-10]
        self.counted(node, probe)
        current = self.state_of(node)
        if node in self.taken_out and current is NodeState.UP:
            self.taken_out.discard(node)  # an operator resumed it meanwhile
        want = verdict(hist, current, node in self.taken_out, self.limits)
        if want is None:
            return
        state, reason = want
        if state is NodeState.UP:
            kept = self.before_up(node)
            if kept:
                if self.reasons.get(node) != kept:
                    log.warning("RSA node %s answers again but stays %s: %s", node,
                                current.value, kept)
                    self.set_state(node, current, kept)
                    self.reasons[node] = kept
                return
        log.warning("RSA node %s: %s -> %s (%s)", node, current.value, state.value, reason)
        self.set_state(node, state, reason)
        self.reasons[node] = reason
        if state is NodeState.UP:
            self.taken_out.discard(node)
        else:
            self.taken_out.add(node)

    def round(self) -> None:
        """Probe every node at once, then judge each."""
        found: dict[str, Probe] = {}

        def one(node: str) -> None:
            found[node] = self.probe(node)

        threads = [threading.Thread(target=one, args=(n,), name=f"health-{n}")
                   for n in self.hosts]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for node in sorted(found):
            try:
                self.check(node, found[node])
            except Exception:  # a health round must never kill rsad
                log.exception("health check of %s failed", node)

    def start(self, stop: threading.Event) -> None:
        def loop() -> None:
            while not stop.wait(self.interval):
                self.round()

        self._thread = threading.Thread(target=loop, name="rsa-health", daemon=True)
        self._thread.start()


class RamdiskTender:
    """Checks every live RAMDISK each ``interval`` s from its own thread and has what
    died restarted (``tend``: DataPath.tend through the registry). ``tendable`` asks the
    loop thread which jobs hold a RAMDISK no step is working on (core.states.TENDED);
    RAMDISKs are checked a few at a time, so one that hangs cannot hold up the rest."""

    def __init__(self, tendable: Callable[[], list[tuple[str, Mapping[str, Any]]]],
                 tend: Callable[[str, Mapping[str, Any]], None], *,
                 interval: float = 15.0, parallel: int = 4) -> None:
        self.tendable = tendable
        self.tend = tend
        self.interval = interval
        self.parallel = max(1, parallel)
        self._thread: threading.Thread | None = None

    def round(self) -> int:
        """Check each RAMDISK once; returns how many were checked."""
        try:
            items = self.tendable()
        except Exception as e:  # the loop is busy or stopping: try next round
            log.warning("RAMDISK checks: cannot list the live RAMDISKs: %s", e)
            return 0

        def one(item: tuple[str, Mapping[str, Any]]) -> None:
            job, mount = item
            try:
                self.tend(job, mount)
            except Exception:  # a check must never kill rsad
                log.exception("RAMDISK check of job %s failed", job)

        with ThreadPoolExecutor(max_workers=self.parallel,
                                thread_name_prefix="rsa-tend") as pool:
            list(pool.map(one, items))
        return len(items)

    def start(self, stop: threading.Event) -> None:
        """Check at once, then every ``interval``: a RAMDISK whose server died while
        rsad was down is repaired as soon as rsad is back, not one interval later."""
        def loop() -> None:
            while not stop.is_set():
                self.round()
                if stop.wait(self.interval):
                    break

        self._thread = threading.Thread(target=loop, name="rsa-tender", daemon=True)
        self._thread.start()
