"""The deterministic discrete-event engine that drives the real core with a scenario.

Owns simulated time (no clock, no sleeping), the scripted Slurm view of every job, the
in-flight external actions and their scripted outcomes, daemon crashes (replay of the
event log into a fresh pool, then re-issue of the outstanding actions), the invariant
checks run after every step, the per-job timelines and the evaluation of the scenario's
``expect:`` block. The core (:class:`~rsa_scheduler.core.scheduler.Scheduler`, the
transition table and the allocator) is used exactly as the daemon uses it.

Order of things happening at the same simulated time: action outcomes (in issue order),
then timeline entries (in file order; consecutive Slurm observations form one snapshot),
then due timers, then the periodic poll.

Must not read the clock, sleep, or touch Slurm, files or processes.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet

from rsa_scheduler.core.actions import RESTORES, Action, ActionKind, Outcome, Result
from rsa_scheduler.core.allocator import Pool, RsaNode
from rsa_scheduler.core.events import Event
from rsa_scheduler.core.payloads import AllocateArgs, CancelArgs
from rsa_scheduler.core.policy import NodeState
from rsa_scheduler.core.scheduler import (
    POOL_STREAM,
    CommandRefused,
    Decision,
    Observation,
    Scheduler,
    StaleOutcome,
)
from rsa_scheduler.core.states import HOLDING_NODES, RsaState
from rsa_scheduler.errors import RsaError
from rsa_scheduler.sim.model import (
    GONE,
    CommandEntry,
    CrashEntry,
    Entry,
    NodeEntry,
    Scenario,
    SlurmEntry,
    Step,
)
from rsa_scheduler.sim.result import JobResult, Row, SimResult, describe, job_key, num, pool_view

MAX_STEPS = 1_000_000
# queue classes: lower runs first at equal times
_OUTCOME, _TIMELINE, _TIMER, _POLL = 0, 1, 2, 3


class SimulationBroken(RsaError):
    """An invariant was violated or the core raised: a bug in the core (or the engine).

    The message is one line: simulated time, the step being processed and what broke.
    """


# ---- the engine --------------------------------------------------------------------------------

@dataclass(slots=True)
class _SlurmJob:
    state: str
    reason: str
    priority: int
    compute_nodes: int


@dataclass(slots=True)
class _InFlight:
    action: Action
    due: float
    token: int
    step: Step


def simulate(scenario: Scenario, *, replay_every_step: bool = False) -> SimResult:
    """Run ``scenario`` to its end. Raises SimulationBroken when an invariant breaks.

    ``replay_every_step`` also checks replay == live after every step that logged events
    (always checked at the end and at each crash).
    """
    return Engine(scenario, replay_every_step=replay_every_step).run()


class Engine:
    """One run of one scenario. Use :func:`simulate`."""

    def __init__(self, scenario: Scenario, *, replay_every_step: bool = False) -> None:
        self.sc = scenario
        self.replay_every_step = replay_every_step
        self.pool = self._new_pool()
        self.sched = Scheduler(self.pool, scenario.staging)
        self.log: list[Event] = []
        self.now = 0.0
        self.cause = "start"
        self.steps = 0
        self.slurm: dict[str, _SlurmJob] = {}
        self.inflight: dict[str, _InFlight] = {}
        self.attempts: dict[tuple[str, ActionKind], int] = {}
        self.attempt_of: dict[str, int] = {}
        self.queue: list[tuple[float, int, int, Any]] = []
        self.seq = 0
        self.dirty = False
        self.next_poll = scenario.poll or 0.0
        self.last_tick = -1.0  # when tick last ran: a hold-off ending then is over
        self.jobs = {jid: JobResult(jid, tracked=False) for jid in scenario.jobs}
        self.current: dict[str, tuple[str, str]] = {}
        self.notes: list[dict[str, Any]] = []
        self.failures: list[str] = []
        for at, batch in _batches(scenario.timeline):
            self._push(at, _TIMELINE, batch)

    # -- plumbing ---------------------------------------------------------------------------
    def _new_pool(self) -> Pool:
        nodes = [RsaNode(name, g.tier, g.capacity) for g in self.sc.pool
                 for name in NodeSet(g.names, resolver=RESOLVER_NOGROUP)]
        return Pool(nodes, self.sc.allocation)

    def _push(self, at: float, cls: int, payload: Any) -> None:
        self.seq += 1
        heapq.heappush(self.queue, (at, cls, self.seq, payload))

    def broken(self, what: str) -> SimulationBroken:
        return SimulationBroken(f"{self.sc.source}: t={num(self.now)} ({self.cause}): {what}")

    # -- main loop --------------------------------------------------------------------------
    def run(self) -> SimResult:
        self.cause = "initial node states"
        for g in self.sc.pool:
            if g.state is not NodeState.UP:
                for name in NodeSet(g.names, resolver=RESOLVER_NOGROUP):
                    self._apply(self.sched.set_node_state(name, g.state, 0.0, by="scenario"))
        while True:
            self.steps += 1
            if self.steps > MAX_STEPS:
                raise self.broken(f"no end after {MAX_STEPS} steps")
            self._drop_stale()
            candidates: list[tuple[float, int]] = []
            if self.queue:
                candidates.append(self.queue[0][:2])
            timer = self.sched.next_wake(self.now, self.last_tick)
            if timer is not None:
                if timer < self.now:
                    raise self.broken(f"a timer due at {num(timer)} was not fired")
                candidates.append((timer, _TIMER))
            # Slurm changes only at timeline entries, so a poll of the unchanged queue can
            # only retry the allocation of on-deck jobs waiting for nodes; a retry timer
            # hours away does not need thousands of empty polls.
            if self.sc.poll and self.sched.has_waiting() and (
                    self.queue or timer is not None or self.dirty):
                if self.next_poll < self.now:
                    self.next_poll = -(-self.now // self.sc.poll) * self.sc.poll
                candidates.append((self.next_poll, _POLL))
            if not candidates:
                break
            at, cls = min(candidates)
            if at > self.sc.until:
                self.notes.append({"t": num(self.sc.until), "event": "until",
                                   "detail": "stopped at the scenario's 'until'"})
                self.now = self.sc.until
                break
            self.now = at
            if cls == _TIMER:
                self.cause = "timer"
                self.last_tick = self.now
                self._call(lambda: self.sched.tick(self.now))
            elif cls == _POLL:
                self.cause = "poll"
                self.next_poll = self.now + (self.sc.poll or 0.0)
                self.dirty = False
                self._call(lambda: self.sched.observe(self._snapshot(), self.now))
            else:
                _, _, _, payload = heapq.heappop(self.queue)
                if isinstance(payload, str):
                    self._outcome(payload)
                else:
                    self._timeline(payload)
        self.cause = "end"
        self._check_replay()
        return self._result()

    def _drop_stale(self) -> None:
        while self.queue and isinstance(self.queue[0][3], str):
            fl = self.inflight.get(self.queue[0][3])
            if fl is not None and fl.token == self.queue[0][2]:
                return
            heapq.heappop(self.queue)  # cancelled, or lost in a crash

    # -- steps ------------------------------------------------------------------------------
    def _call(self, fn: Callable[[], Decision]) -> None:
        try:
            dec = fn()
        except (SimulationBroken, StaleOutcome, CommandRefused):
            raise
        except Exception as e:
            raise self.broken(f"the core raised {type(e).__name__}: {e}") from e
        self._apply(dec)

    def _outcome(self, aid: str) -> None:
        fl = self.inflight.pop(aid)
        self.cause = f"outcome {aid} {fl.step.result.value}"
        try:
            self._call(lambda: self.sched.outcome(
                Outcome(aid, fl.step.result, fl.step.message), self.now))
        except StaleOutcome as e:
            raise self.broken(f"outcome refused as stale: {e}") from e

    def _timeline(self, batch: list[Entry]) -> None:
        first = batch[0]
        self.cause = first.key if len(batch) == 1 else f"{first.key}..{batch[-1].key}"
        if isinstance(first, SlurmEntry):
            for e in batch:
                assert isinstance(e, SlurmEntry)
                self._slurm(e)
            self._call(lambda: self.sched.observe(self._snapshot(), self.now))
        elif isinstance(first, NodeEntry):
            for name in NodeSet(first.nodes, resolver=RESOLVER_NOGROUP):
                self._call(_node_change(self.sched, name, first.state, self.now))
        elif isinstance(first, CommandEntry):
            self._command(first)
        elif isinstance(first, CrashEntry):
            self._crash()

    def _slurm(self, e: SlurmEntry) -> None:
        job = self.sc.jobs[e.job]
        if e.state == GONE:
            self.slurm.pop(e.job, None)
            return
        old = self.slurm.get(e.job)
        prio = e.priority if e.priority is not None else (old.priority if old else job.priority)
        cn = e.compute_nodes if e.compute_nodes is not None else (
            old.compute_nodes if old else job.compute_nodes)
        self.slurm[e.job] = _SlurmJob(e.state, e.reason, prio, cn)

    def _snapshot(self) -> list[Observation]:
        out = []
        for jid in sorted(self.slurm, key=job_key):
            s, job = self.slurm[jid], self.sc.jobs[jid]
            out.append(Observation(jid, job.user, s.state, s.reason, s.priority,
                                   s.compute_nodes, job.spec))
        return out

    def _command(self, e: CommandEntry) -> None:
        try:
            self._call(lambda: self.sched.command(e.job, e.command, self.now, by=e.by,
                                                  operator=e.operator))
        except CommandRefused as err:
            cur = self.current.get(e.job, ("-", RsaState.NONE.value))
            self.jobs[e.job].rows.append(Row(self.now, cur[0], cur[1],
                                             f"{e.command.value} (refused)", detail=str(err)))
            if not e.refused:
                self.failures.append(f"{e.key}: command {e.command.value} for job {e.job} "
                                     f"was refused: {err}")
            return
        if e.refused:
            self.failures.append(f"{e.key}: command {e.command.value} for job {e.job} was "
                                 "accepted, expected refused")

    def _crash(self) -> None:
        self._check_replay()
        lost = sorted(self.inflight)
        self.inflight.clear()
        self.pool = self._new_pool()
        try:
            self.sched = Scheduler.replay(self.pool, self.sc.staging, list(self.log))
        except Exception as e:
            raise self.broken(f"replay after the crash raised {type(e).__name__}: {e}") from e
        reissued = []
        for act in self.sched.outstanding():
            if act.id not in self.attempt_of:
                raise self.broken(f"replay lists {act.id} as outstanding; it was never issued")
            self._issue(act, reissue=True)
            reissued.append(act.id)
            cur = self.current.get(act.job_id, ("-", "-"))
            self.jobs[act.job_id].rows.append(Row(self.now, cur[0], cur[1], "daemon restart",
                                                  [describe(act)], "re-issued from the log"))
        self.notes.append({"t": num(self.now), "event": "crash", "lost": lost,
                           "reissued": reissued})
        # the new daemon's first poll
        self._call(lambda: self.sched.observe(self._snapshot(), self.now))

    # -- decisions ----------------------------------------------------------------------------
    def _apply(self, dec: Decision) -> None:
        self.log.extend(dec.events)
        by_id = {a.id: a for a in dec.actions}
        for ev in dec.events:
            self._record(ev, by_id)
        for act in dec.actions:
            job = self.jobs.get(act.job_id)
            if job is None:
                raise self.broken(f"action {act.id} for unknown job {act.job_id}")
            job.counts[act.kind.value] = job.counts.get(act.kind.value, 0) + 1
            if act.kind is ActionKind.CANCEL:
                target = act.args_as(CancelArgs).target
                if self.inflight.pop(target, None) is None:
                    raise self.broken(f"{act.id} cancels {target}, which is not in flight")
            elif act.kind is ActionKind.ALLOCATE:
                nodes = act.args_as(AllocateArgs).nodes
                bad = [n for n in nodes if self.pool.state(n) is not NodeState.UP]
                if bad:
                    raise self.broken(f"{act.id} allocated {','.join(bad)}, which is not up")
                job.allocations.append(nodes.folded)
            if act.tracked:
                self._issue(act)
        # the restore of a job's own QOS/priority takes one Slurm command: done at once
        restores = [a for a in dec.actions if a.kind in RESTORES]
        if restores:
            self._call(partial(self._restored, restores))
        if dec.events:
            # A step that logged nothing changed no record and no node: nothing to check.
            self.dirty = True
            self._check()

    def _restored(self, restores: list[Action]) -> Decision:
        dec = Decision()
        for act in restores:
            dec.add(self.sched.outcome(Outcome(act.id, Result.OK, "restored"), self.now))
        return dec

    def _issue(self, act: Action, *, reissue: bool = False) -> None:
        if not reissue:
            key = (act.job_id, act.kind)
            self.attempts[key] = self.attempts.get(key, 0) + 1
            self.attempt_of[act.id] = self.attempts[key]
        script = self.sc.jobs[act.job_id].actions.get(act.kind)
        step = script.step(self.attempt_of[act.id]) if script else None
        step = step or Step()
        duration = step.duration if step.duration is not None else self.sc.durations[act.kind]
        self.seq += 1
        fl = _InFlight(act, self.now + duration, self.seq, step)
        self.inflight[act.id] = fl
        heapq.heappush(self.queue, (fl.due, _OUTCOME, fl.token, act.id))

    def _record(self, ev: Event, by_id: Mapping[str, Action]) -> None:
        ctx = ev.context
        if ev.job_id == POOL_STREAM:
            self.notes.append({"t": num(ev.time), "event": ev.name, "node": ctx.get("node"),
                               "from": ctx.get("from"), "to": ctx.get("to")})
            return
        job = self.jobs[ev.job_id]
        if ev.name == "job.tracked":
            job.tracked = True
            self.current[ev.job_id] = ("-", RsaState.NONE.value)
            return
        js, rs = self.current.get(ev.job_id, ("-", RsaState.NONE.value))
        if ev.name == "job.state":
            js = str(ctx["to"])
            slurm, reason = str(ctx.get("slurm_state")), str(ctx.get("reason") or "")
            trigger = f"{slurm} ({reason})" if slurm == "PENDING" and reason else slurm
            job.rows.append(Row(ev.time, js, rs, trigger))
        elif ev.name == "rsa.transition":
            rs = str(ctx["to"])
            acts = [describe(by_id[str(a)]) for a in ctx.get("actions", [])]
            detail = str(ctx.get("detail") or "")
            if ctx.get("by"):
                detail = f"by {ctx['by']}" + (f": {detail}" if detail else "")
            job.rows.append(Row(ev.time, js, rs, str(ctx["trigger"]), acts, detail))
        self.current[ev.job_id] = (js, rs)

    # -- checks -------------------------------------------------------------------------------
    def _check(self) -> None:
        owner: dict[str, str] = {}
        with_nodes = set()
        for jid, rec in self.sched.records.items():
            nodes = NodeSet(rec.nodes, resolver=RESOLVER_NOGROUP)
            if bool(rec.nodes) != (rec.rsa_state in HOLDING_NODES):
                raise self.broken(f"job {jid} is {rec.rsa_state.value} but holds "
                                  f"{rec.nodes or 'no RSA nodes'}")
            for n in nodes:
                if n in owner:
                    raise self.broken(f"RSA node {n} is held by jobs {owner[n]} and {jid}")
                owner[n] = jid
            if rec.nodes:
                with_nodes.add(jid)
            held = self.pool.holding(jid)
            if held != nodes:
                raise self.broken(f"job {jid} records RSA nodes {rec.nodes or '(none)'} but "
                                  f"the pool has it holding {held or '(none)'}")
        leaked = set(self.pool.jobs()) - with_nodes
        if leaked:
            raise self.broken(f"the pool holds nodes for {', '.join(sorted(leaked))}, "
                              "which no record holds (leak)")
        outstanding = {a.id for a in self.sched.outstanding()}
        if outstanding != set(self.inflight):
            gone = sorted(set(self.inflight) - outstanding)
            extra = sorted(outstanding - set(self.inflight))
            raise self.broken(f"actions in flight {gone} are no longer outstanding without "
                              f"a cancel; outstanding but never run: {extra}")
        if self.replay_every_step:
            self._check_replay()

    def _check_replay(self) -> None:
        pool = self._new_pool()
        try:
            replayed = Scheduler.replay(pool, self.sc.staging, list(self.log))
        except Exception as e:
            raise self.broken(f"replay of the log raised {type(e).__name__}: {e}") from e
        live, again = self.sched.snapshot(), replayed.snapshot()
        if live != again:
            raise self.broken("replay of the log differs from the live scheduler: "
                              + _first_difference(live, again))
        if pool.snapshot() != self.pool.snapshot():
            raise self.broken("replay of the log gives a different RSA node pool")

    # -- result ---------------------------------------------------------------------------------
    def _result(self) -> SimResult:
        for jid, job in self.jobs.items():
            rec = self.sched.records.get(jid)
            if rec is not None:
                job.final = {"job_state": rec.job_state.value if rec.job_state else None,
                             "rsa_state": rec.rsa_state.value, "cycle": rec.cycle,
                             "nodes": rec.nodes, "declined": rec.declined,
                             "message": rec.message}
            else:
                job.final = {"job_state": None, "rsa_state": None, "cycle": 0, "nodes": "",
                             "declined": False, "message": ""}
        pool = pool_view(self.pool)
        checked = self._expectations(pool)
        return SimResult(self.sc, self.now, self.steps, self.jobs, pool, self.notes,
                         self.failures, checked)

    def _expectations(self, pool: Mapping[str, Any]) -> int:
        n = 0
        fail = self.failures.append
        for jid, exp in self.sc.expect.jobs.items():
            job = self.jobs[jid]
            fin = job.final
            for name, want in (("rsa_state", exp.rsa_state), ("job_state", exp.job_state)):
                if want is not None:
                    n += 1
                    if fin[name] != want.value:
                        fail(f"job {jid}: {name} is {fin[name]}, expected {want.value}")
            visited = job.visited()
            if exp.visits:
                n += 1
                it = iter(visited)
                missing = [s.value for s in exp.visits if s.value not in it]
                if missing:
                    fail(f"job {jid}: never visited {', '.join(missing)} in the expected "
                         f"order (visited: {' > '.join(visited)})")
            for s in exp.never:
                n += 1
                if s.value in visited:
                    fail(f"job {jid}: visited {s.value}, expected never to")
            if exp.cycles is not None:
                n += 1
                if fin["cycle"] != exp.cycles:
                    fail(f"job {jid}: {fin['cycle']} RSA cycles, expected {exp.cycles}")
            if exp.allocations is not None:
                n += 1
                if tuple(job.allocations) != exp.allocations:
                    fail(f"job {jid}: allocated {list(job.allocations)}, "
                         f"expected {list(exp.allocations)}")
            if exp.declined is not None:
                n += 1
                if fin["declined"] != exp.declined:
                    fail(f"job {jid}: declined is {fin['declined']}, expected {exp.declined}")
            for kind, count in exp.actions.items():
                n += 1
                got = job.counts.get(kind.value, 0)
                if got != count:
                    fail(f"job {jid}: {kind.value} issued {got} times, expected {count}")
        pe = self.sc.expect.pool
        if pe is not None:
            for name in ("free", "drained", "down"):
                want = getattr(pe, name)
                if want is not None:
                    n += 1
                    if pool[name] != want:
                        fail(f"pool: {name} nodes are {pool[name] or '(none)'}, "
                             f"expected {want or '(none)'}")
            if pe.held is not None:
                n += 1
                if pool["held"] != dict(sorted(pe.held.items())):
                    fail(f"pool: held {pool['held']}, expected {dict(pe.held)}")
        return n


def _node_change(sched: Scheduler, node: str, state: NodeState, now: float
                 ) -> Callable[[], Decision]:
    return lambda: sched.set_node_state(node, state, now, by="operator")


def _batches(timeline: Iterable[Entry]) -> list[tuple[float, list[Entry]]]:
    """Timeline entries as steps: consecutive Slurm observations at one time are one."""
    out: list[tuple[float, list[Entry]]] = []
    for e in timeline:
        if (out and isinstance(e, SlurmEntry) and out[-1][0] == e.at
                and isinstance(out[-1][1][-1], SlurmEntry)):
            out[-1][1].append(e)
        else:
            out.append((e.at, [e]))
    return out


def _first_difference(a: Mapping[str, Any], b: Mapping[str, Any]) -> str:
    for jid in sorted(set(a) | set(b)):
        if jid not in a or jid not in b:
            return f"job {jid} only in {'replay' if jid in b else 'live'}"
        for k in sorted(set(a[jid]) | set(b[jid])):
            if a[jid].get(k) != b[jid].get(k):
                return f"job {jid} {k}: live {a[jid].get(k)!r}, replayed {b[jid].get(k)!r}"
    return "(no field differs)"

