"""Trace replay: a workload trace through a compute cluster, the PFS and the real RSA core.

Owns the discrete-event :class:`Replay`: its event queue, the compute cluster, the PFS
flows and how it drives the core. A job's own state is :mod:`rsa_scheduler.sim.tracejob`'s,
the replay-equals-live check :mod:`rsa_scheduler.sim.logcheck`'s, the run with the RSA
against the baseline :mod:`rsa_scheduler.sim.comparison`'s. One run streams the trace's
jobs through

* a compute cluster of ``procs`` processors scheduled first-come-first-served (no
  backfill): the queue's head, blocked for lack of processors, is what Slurm shows as
  pending with reason ``Resources`` (on-deck); every job holds its processors for
  ``read + run time + write`` (the trace's run time is taken as compute time);
* the I/O model of :mod:`rsa_scheduler.sim.iomodel`: reads and writes on the PFS are
  flows sharing its bandwidth, reads and writes on a job's own RSA nodes are not shared
  (the nodes are dedicated to the job: seed 004 §2), per-file create costs model the
  file-per-process penalty of seed 004 §5.2;
* with the RSA: the real :class:`~rsa_scheduler.core.scheduler.Scheduler`, transition
  table and :class:`~rsa_scheduler.core.allocator.Pool`, driven as rsad drives them
  (observations of job state changes, action outcomes when the action is done, ``tick``
  at the core's next wake and at the poll after RSA nodes are released). Stage-in and
  stage-out are PFS flows capped by the job's RSA nodes' bandwidth; the other actions
  take the fixed times of :class:`~rsa_scheduler.sim.iomodel.IoParams`.

A job that starts with its input staged (the core mounting it) reads from its RSA nodes;
one that starts earlier reads the PFS (seed 004 §3.1, early start fallback). It writes to
its RSA nodes if the RAMDISK is mounted over its output by then, else to the PFS.

Cost and memory: each job costs O(1) core calls and O(active flows) I/O work; the engine
keeps only active jobs (queued, running or still held by the RSA) and an event log since
the last check point (``check_every`` events), where it checks that replaying the log
from the previous durable state reproduces the live scheduler, then lets the core forget
finished jobs (:class:`~rsa_scheduler.sim.logcheck.LogWindow`). Invariants are checked on
every step for the jobs it touched; a violation raises
:class:`~rsa_scheduler.sim.engine.SimulationBroken` (exit 70 in the CLI).

Must not read the clock, sleep, or touch Slurm or processes; reads only the trace.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from rsa_scheduler.core.actions import RESTORES, Action, ActionKind, Outcome, Result
from rsa_scheduler.core.allocator import Pool, RsaNode
from rsa_scheduler.core.payloads import AllocateArgs, CancelArgs, ReleaseArgs
from rsa_scheduler.core.policy import EarlyStart, StageOut
from rsa_scheduler.core.scheduler import Decision, Observation, Scheduler
from rsa_scheduler.core.states import HOLDING_NODES, INPUT_COMING, STAGING, TERMINAL, RsaState
from rsa_scheduler.core.transitions import Trigger
from rsa_scheduler.sim.cluster import ReplayConfig, TierSpec
from rsa_scheduler.sim.engine import SimulationBroken
from rsa_scheduler.sim.iomodel import FlowNet, job_volumes
from rsa_scheduler.sim.logcheck import LogWindow
from rsa_scheduler.sim.report import Totals
from rsa_scheduler.sim.swf import SwfJob
from rsa_scheduler.sim.tracejob import InFlight, SpecCache, TraceJob

#: observer(what, now, detail): "read" (a job starts reading), "outcome" (an action's
#: outcome is delivered to the core), "job" (a job is done: off its compute nodes and, with
#: the RSA, its RSA nodes released or never held)
Observer = Callable[[str, float, Mapping[str, Any]], None]
# event classes: lower runs first at equal times
_DONE, _PHASE, _SUBMIT, _TIMER, _POLL = 0, 1, 2, 3, 4


class Replay:
    """One run over one trace, with the RSA (``rsa=True``) or without (the baseline)."""

    def __init__(self, jobs: Iterable[SwfJob], cfg: ReplayConfig, *, rsa: bool,
                 source: str = "<trace>",
                 observer: Observer | None = None) -> None:
        self.cfg = cfg
        self.rsa = rsa
        self.source = source
        self.trace: Iterator[SwfJob] = iter(jobs)
        self.observer = observer
        self.now = 0.0
        self.cause = "start"
        self.queue: list[tuple[float, int, int, str, Any]] = []
        self.seq = 0
        self.jobs: dict[str, TraceJob] = {}
        self.waiting: deque[str] = deque()  # compute queue (FCFS)
        self.free = cfg.procs
        self.on_deck: set[str] = set()  # queued jobs Slurm shows pending on Resources
        self.net = FlowNet(cfg.io.pfs_bw)
        self.flow_owner: dict[str, tuple[str, str]] = {}  # flow id -> (kind, id)
        self.totals = Totals()
        self.read = 0
        self.tier_of: dict[str, TierSpec] = {}
        nodes: list[RsaNode] = []
        width = len(str(sum(t.count for t in cfg.tiers)))
        i = 0
        for t in cfg.tiers:
            for _ in range(t.count):
                i += 1
                name = f"rsa{i:0{width}d}"
                nodes.append(RsaNode(name, t.tier, t.capacity))
                self.tier_of[name] = t
        self.node_count = len(nodes)
        self.pool = Pool(nodes, cfg.allocation)
        self.sched = Scheduler(self.pool, cfg.staging)
        self._nodes = nodes
        self.owner: dict[str, str] = {}  # RSA node -> job, as the actions said
        self.inflight: dict[str, InFlight] = {}  # job -> its tracked action
        self.slots: list[tuple[TraceJob, InFlight]] = []  # stage-outs waiting for a PFS slot
        self.flowing_outs = 0
        self.checks = LogWindow(cfg.check_every, cfg.check_stride)
        self.timer_at: float | None = None
        self.core_moved = False
        self.last_tick = -1.0
        self.poll_at: float | None = None
        self.specs = SpecCache(cfg.stage_out, len(cfg.tiers))

    # ---- plumbing ---------------------------------------------------------------------
    def _push(self, at: float, cls: int, kind: str, payload: Any) -> int:
        self.seq += 1
        heapq.heappush(self.queue, (at, cls, self.seq, kind, payload))
        return self.seq

    def broken(self, what: str) -> SimulationBroken:
        return SimulationBroken(f"{self.source}: t={self.now:g} ({self.cause}): {what}")

    def _next_submit(self) -> None:
        limit = self.cfg.limit
        if limit is not None and self.read >= limit:
            return
        for job in self.trace:
            self.read += 1
            self._push(job.submit, _SUBMIT, "submit", job)
            return

    # ---- main loop ----------------------------------------------------------------------
    def run(self) -> Totals:
        self._next_submit()
        queue = self.queue
        t = self.totals
        while queue:
            at, _cls, _seq, kind, payload = heapq.heappop(queue)
            if at < self.now - 1e-6:
                raise self.broken(f"event {kind} at {at:g} is in the past")
            self.now = max(self.now, at)
            t.events += 1
            if kind == "submit":
                self.cause = f"submit {payload.job}"
                self._submit(payload)
                self._next_submit()
            elif kind == "phase":
                jid, tok = payload
                job = self.jobs.get(jid)
                if job is not None and job.token == tok:
                    self.cause = f"job {jid} {job.phase} done"
                    self._phase_done(job)
            elif kind == "flow":
                if payload == self.net.version:
                    self._flow_done()
            elif kind == "done":
                jid, tok = payload
                fl = self.inflight.get(jid)
                if fl is not None and fl.token == tok:
                    self._action_stage_done(jid, fl)
            elif kind == "timer":
                if self.timer_at == at:
                    self.timer_at = None
                    self.cause = "timer"
                    self.last_tick = self.now
                    self._apply(self.sched.tick(self.now))
            elif kind == "poll":
                self.poll_at = None
                if self.sched.has_waiting():
                    self.cause = "poll"
                    self.last_tick = self.now
                    self._apply(self.sched.tick(self.now))
            if self.rsa and (self.core_moved or kind in ("timer", "poll")):
                # the core's next wake changes only when it did something, or a wake passed
                self.core_moved = False
                self._arm_timer()
            active = len(self.jobs)
            if active > t.max_active:
                t.max_active = active
        self.cause = "end"
        self._finish()
        return t

    def _finish(self) -> None:
        t = self.totals
        if self.jobs:
            stuck = sorted(self.jobs)[:5]
            raise self.broken(f"{len(self.jobs)} jobs never finished (e.g. {stuck})")
        if self.rsa:
            self._checkpoint()
            if self.pool.jobs() or self.owner:
                raise self.broken(f"RSA nodes still held at the end: {self.pool.jobs()}")
            if self.inflight:
                raise self.broken(f"actions still in flight: {sorted(self.inflight)}")
        if len(self.net):
            raise self.broken("PFS flows still running at the end")
        t.pfs_peak = self.net.peak
        t.pfs_bytes = self.net.busy_bytes

    # ---- the compute cluster --------------------------------------------------------------
    def _submit(self, swf: SwfJob) -> None:
        t = self.totals
        procs = swf.procs
        if procs < 1 or swf.run < 0 or procs > self.cfg.procs:
            t.skipped += 1  # never ran, or too big for this cluster
            return
        if t.first_submit is None:
            t.first_submit = swf.submit
        vol = job_volumes(swf, self.cfg.io)
        t.volumes[vol.source] = t.volumes.get(vol.source, 0) + 1
        jid = str(swf.job)
        if jid in self.jobs:
            raise self.broken(f"job {jid} submitted twice (line {swf.line})")
        nodes = -(-procs // self.cfg.procs_per_node)
        job = TraceJob(swf, jid, vol, procs, nodes, swf.submit,
                       self.specs.spec(vol) if self.rsa else None)
        self.jobs[jid] = job
        self.waiting.append(jid)
        self._schedule()

    def _schedule(self) -> None:
        waiting, jobs = self.waiting, self.jobs
        while waiting and jobs[waiting[0]].procs <= self.free:
            self._start(jobs[waiting.popleft()])
        for i in range(min(self.cfg.on_deck, len(waiting))):
            jid = waiting[i]
            if jid not in self.on_deck:
                self.on_deck.add(jid)
                job = jobs[jid]
                if job.spec is not None:
                    self.cause = f"job {jid} on-deck"
                    self._observe(job, "PENDING", "Resources")

    def _observe(self, job: TraceJob, state: str, reason: str = "") -> None:
        obs = Observation(job.jid, f"u{job.swf.user}", state, reason,
                          priority=0, compute_nodes=job.nodes, spec=job.spec)
        self._apply(self.sched.observe([obs], self.now, complete=False))

    def _start(self, job: TraceJob) -> None:
        self.free -= job.procs
        self.on_deck.discard(job.jid)
        job.start = self.now
        self.cause = f"job {job.jid} starts"
        rec = None
        if job.spec is not None:
            self._observe(job, "RUNNING")
            rec = self.sched.records.get(job.jid)
        job.phase_at = self.now
        if rec is not None and (rec.rsa_state is RsaState.MOUNTING_INPUT or (
                rec.rsa_state in STAGING and not rec.wait_over and rec.spec.data_in
                and (rec.spec.early_start or self.cfg.staging.early_start)
                is EarlyStart.WAIT)):
            # the Prolog's bind mount (or, under early start "wait", the Prolog holding the
            # start until the stage-in is done): reading starts when the mount is done
            job.phase = "mounting"
            return
        self._read(job, rsa=False)

    def _read(self, job: TraceJob, *, rsa: bool) -> None:
        vol = job.vol
        job.phase = "reading"
        job.phase_at = self.now
        if self.observer:
            self.observer("read", self.now, {"job": job.jid, "rsa": rsa,
                                             "bytes": vol.input_bytes})
        if vol.input_bytes <= 0:
            job.read_from = "-"
            self._phase_done(job)
            return
        if rsa:
            if job.staged_at is None or job.staged_at > self.now:
                raise self.broken(f"job {job.jid} reads its RSA nodes before its stage-in "
                                  "is done")
            job.read_from = "rsa"
            self.totals.read_rsa += 1
            rate = min(job.rsa_bw, job.nodes * self.cfg.io.client_bw)
            self._phase_in(job, vol.input_bytes / rate)
        else:
            job.read_from = "pfs"
            self._flow(f"{job.jid}/read", vol.input_bytes, job.nodes * self.cfg.io.client_bw,
                       ("phase", job.jid))

    def _phase_in(self, job: TraceJob, seconds: float) -> None:
        job.token = self.seq + 1  # the token of the event pushed next
        self._push(self.now + seconds, _PHASE, "phase", (job.jid, job.token))

    def _phase_done(self, job: TraceJob) -> None:
        io = self.cfg.io
        if job.phase == "reading":
            job.io_s += self.now - job.phase_at
            rec = self.sched.records.get(job.jid) if job.spec is not None else None
            if rec is not None and rec.rsa_state is RsaState.MOUNTED_INPUT:
                self.cause = f"job {job.jid} input-done"
                self._apply(self.sched.command(job.jid, Trigger.INPUT_DONE, self.now,
                                               by=f"u{job.swf.user}", operator=False))
            job.phase = "computing"
            job.phase_at = self.now
            self._phase_in(job, job.swf.run)
        elif job.phase == "computing":
            job.phase = "writing"
            job.phase_at = self.now
            vol = job.vol
            rec = self.sched.records.get(job.jid) if job.spec is not None else None
            if vol.output_bytes <= 0:
                job.write_to = "-"
                self._phase_done(job)
            elif rec is not None and rec.rsa_state is RsaState.MOUNTED_OUTPUT:
                job.write_to = "rsa"
                job.rsa_out = vol.output_bytes
                self.totals.write_rsa += 1
                rate = min(job.rsa_bw, job.nodes * io.client_bw)
                self._phase_in(job, vol.output_files * io.rsa_create_s
                               + vol.output_bytes / rate)
            else:
                job.write_to = "pfs"
                job.phase = "creating"
                per = io.pfs_create_shared_s if vol.output_files > 1 else io.pfs_create_seq_s
                self._phase_in(job, vol.output_files * per)
        elif job.phase == "creating":
            job.phase = "writing"
            self._flow(f"{job.jid}/write", job.vol.output_bytes, job.nodes * io.client_bw,
                       ("phase", job.jid))
        elif job.phase == "writing":
            job.io_s += self.now - job.phase_at
            self._end(job)

    def _end(self, job: TraceJob) -> None:
        job.phase = "ended"
        job.ended_at = self.now
        self.free += job.procs
        t = self.totals
        hold = self.now - job.start
        t.jobs += 1
        t.wait += job.start - job.submit
        t.hold += hold
        t.io += job.io_s
        t.io_bytes += job.vol.input_bytes + job.vol.output_bytes
        t.compute_node_s += hold * job.nodes
        t.last_end = max(t.last_end, self.now)
        if job.spec is not None:
            self.cause = f"job {job.jid} completed"
            self._observe(job, "COMPLETED")
        self._maybe_forget(job)
        self._schedule()

    def _maybe_forget(self, job: TraceJob) -> None:
        if job.phase != "ended" or self.jobs.get(job.jid) is not job:
            return
        rec = self.sched.records.get(job.jid) if job.spec is not None else None
        if rec is not None and rec.rsa_state not in TERMINAL:
            return
        if rec is not None:
            t = self.totals
            t.tracked += 1
            if rec.declined:
                t.declined += 1
            if rec.cycle == 0:
                t.no_nodes += 1
            if job.released_at is not None and job.rsa_out:
                t.stage_outs += 1
                t.stage_out_s += job.released_at - job.ended_at
        if self.observer:
            self.observer("job", self.now, {"job": job.jid, "submit": job.submit,
                                            "start": job.start, "end": job.ended_at,
                                            "read": job.read_from, "write": job.write_to,
                                            "staged_at": job.staged_at, "io_s": job.io_s,
                                            "tier": job.tier, "rsa_nodes": job.rsa_nodes,
                                            "input_bytes": job.vol.input_bytes,
                                            "output_bytes": job.vol.output_bytes,
                                            "output_files": job.vol.output_files,
                                            "released": job.released_at})
        del self.jobs[job.jid]

    # ---- the PFS ------------------------------------------------------------------------------
    def _flow(self, fid: str, size: float, cap: float, owner: tuple[str, str]) -> None:
        self.flow_owner[fid] = owner
        self.net.start(fid, size, cap, self.now)
        self._arm_flow()

    def _arm_flow(self) -> None:
        nxt = self.net.next_done()
        if nxt is not None:
            self._push(max(nxt[0], self.now), _DONE, "flow", self.net.version)

    def _flow_done(self) -> None:
        nxt = self.net.next_done()
        assert nxt is not None
        fid = nxt[1]
        self.net.stop(fid, self.now)
        kind, key = self.flow_owner.pop(fid)
        self._arm_flow()
        if kind == "phase":
            job = self.jobs[key]
            self.cause = f"job {key} {job.phase} done"
            self._phase_done(job)
        else:
            fl = self.inflight[key]
            if fl.action.kind is ActionKind.STAGE_OUT:
                self.flowing_outs -= 1
                self._next_slot()
            self._deliver(key, fl)

    # ---- the RSA core ---------------------------------------------------------------------------
    def _apply(self, dec: Decision) -> None:
        if not dec.events and not dec.actions:
            return
        self.core_moved = True
        self.checks.record(dec.events)
        for act in dec.actions:
            kind = act.kind
            jid = act.job_id
            if kind is ActionKind.ALLOCATE:
                self._allocated(act)
            elif kind is ActionKind.RELEASE:
                for n in act.args_as(ReleaseArgs).nodes:
                    if self.owner.pop(n, None) != jid:
                        raise self.broken(f"{act.id} releases {n}, which {jid} did not hold")
                job = self.jobs.get(jid)
                if job is not None:
                    job.released_at = self.now
                    for tier, k in job.per_tier:
                        self.totals.held(tier, k * (self.now - job.alloc_at))
                if self.sched.has_waiting():
                    self._arm_poll()
            elif kind is ActionKind.CANCEL:
                fl = self.inflight.pop(jid, None)
                target = act.args_as(CancelArgs).target
                if fl is None or fl.action.id != target:
                    raise self.broken(f"{act.id} cancels {target}, which is not in flight")
                self._cancel(jid, fl)
            elif act.tracked:
                self._issue(act)
        # the restore of a job's own QOS/priority takes one Slurm command: done at once
        for act in dec.actions:
            if act.kind in RESTORES:
                self._apply(self.sched.outcome(Outcome(act.id, Result.OK), self.now))
        touched = {e.job_id for e in dec.events}
        records = self.sched.records
        unheld: list[TraceJob] = []
        for jid in touched:
            rec = records.get(jid)
            if rec is None:
                continue
            fl = self.inflight.get(jid)
            mine = fl.action.id if fl else None
            theirs = rec.pending.id if rec.pending else None
            if mine != theirs:
                raise self.broken(f"job {jid}: the core's outstanding action is {theirs}, "
                                  f"the engine runs {mine}")
            if bool(rec.nodes) != (rec.rsa_state in HOLDING_NODES):
                raise self.broken(f"job {jid} is {rec.rsa_state.value} but holds "
                                  f"{rec.nodes or 'no RSA nodes'}")
            job = self.jobs.get(jid)
            if job is not None and job.phase == "ended":
                self._maybe_forget(job)
            elif job is not None and job.phase == "mounting" and (
                    rec.rsa_state not in INPUT_COMING
                    or (rec.wait_over and rec.rsa_state in STAGING)):
                unheld.append(job)  # no RSA input will come (the wait expired): the PFS
        if self.checks.full:
            self._checkpoint()
        for job in unheld:
            if job.phase == "mounting":
                self._read(job, rsa=False)

    def _allocated(self, act: Action) -> None:
        jid = act.job_id
        names = act.args_as(AllocateArgs).nodes.names
        for n in names:
            if n in self.owner:
                raise self.broken(f"RSA node {n} given to {jid} is held by {self.owner[n]}")
            self.owner[n] = jid
        job = self.jobs.get(jid)
        if job is not None:
            specs = [self.tier_of[n] for n in names]
            job.rsa_nodes, job.alloc_at = len(names), self.now
            # one filesystem striped evenly: its slowest node paces it (a mix of tiers)
            job.rsa_bw = len(names) * min(s.bw for s in specs)
            counts: dict[str, int] = {}
            for s in specs:
                counts[s.tier.value] = counts.get(s.tier.value, 0) + 1
            job.per_tier = tuple(sorted(counts.items()))
            job.tier = "+".join(t for t, _ in job.per_tier)

    def _issue(self, act: Action) -> None:
        jid = act.job_id
        if jid in self.inflight:
            raise self.broken(f"{act.id} issued while {self.inflight[jid].action.id} runs")
        io = self.cfg.io
        job = self.jobs.get(jid)
        fl = InFlight(act, 0)
        self.inflight[jid] = fl
        kind = act.kind
        if kind is ActionKind.STAGE_IN and job is not None and job.rsa_bw:
            fl.stage = "flow"
            self._flow(act.id, job.vol.input_bytes, job.rsa_bw, ("action", jid))
            return
        if kind is ActionKind.STAGE_OUT and job is not None and job.rsa_bw:
            files = job.vol.output_files if job.rsa_out else 0
            method = job.spec.stage_out if job.spec and job.spec.stage_out else \
                self.cfg.staging.stage_out
            if method is StageOut.TAR:
                files = min(files, 1)
            fl.stage = "meta"
            self._timed(fl, files * io.pfs_create_seq_s)
            return
        seconds = {ActionKind.BUILD_FS: io.build_fs_s, ActionKind.LOCK_IN: io.lock_s,
                   ActionKind.MOUNT_INPUT: io.mount_s, ActionKind.MOUNT_OUTPUT: io.mount_s,
                   ActionKind.RESET: io.reset_s, ActionKind.VERIFY: io.verify_s,
                   ActionKind.DESTROY_FS: io.destroy_s}.get(kind, io.mount_s)
        self._timed(fl, seconds)

    def _timed(self, fl: InFlight, seconds: float) -> None:
        fl.token = self.seq + 1
        self._push(self.now + seconds, _DONE, "done", (fl.action.job_id, fl.token))

    def _action_stage_done(self, jid: str, fl: InFlight) -> None:
        if fl.stage == "meta":
            job = self.jobs[jid]
            fl.stage = "queued"
            self.slots.append((job, fl))
            self._next_slot()
            return
        self._deliver(jid, fl)

    def _next_slot(self) -> None:
        order = self.cfg.ordering
        while self.slots and (order == "fifo" or self.flowing_outs < self.cfg.alpha):
            if order == "fifo":
                i = 0
            elif order == "sjf":
                i = min(range(len(self.slots)), key=lambda k: (self.slots[k][0].rsa_out,
                                                               self.slots[k][0].submit))
            else:  # trio: Slurm priority (submit order here), then the smallest
                i = min(range(len(self.slots)), key=lambda k: (self.slots[k][0].submit,
                                                               self.slots[k][0].rsa_out))
            job, fl = self.slots.pop(i)
            fl.stage = "flow"
            self.flowing_outs += 1
            self._flow(fl.action.id, job.rsa_out, job.rsa_bw, ("action", job.jid))

    def _cancel(self, jid: str, fl: InFlight) -> None:
        if fl.stage == "flow" and fl.action.id in self.net:
            self.net.stop(fl.action.id, self.now)
            self.flow_owner.pop(fl.action.id, None)
            if fl.action.kind is ActionKind.STAGE_OUT:
                self.flowing_outs -= 1
                self._next_slot()
            self._arm_flow()
        elif fl.stage == "queued":
            self.slots = [s for s in self.slots if s[1] is not fl]

    def _deliver(self, jid: str, fl: InFlight) -> None:
        del self.inflight[jid]
        act = fl.action
        self.cause = f"outcome {act.id} ok"
        job = self.jobs.get(jid)
        if act.kind is ActionKind.STAGE_IN and job is not None:
            job.staged_at = self.now
        if self.observer:
            self.observer("outcome", self.now, {"job": jid, "kind": act.kind.value,
                                                "action": act.id})
        self._apply(self.sched.outcome(Outcome(act.id, Result.OK), self.now))
        if job is None:
            return
        if act.kind is ActionKind.MOUNT_INPUT and job.phase == "mounting":
            self._read(job, rsa=True)

    def _arm_timer(self) -> None:
        wake = self.sched.next_wake(self.now, self.last_tick)
        if wake is not None and wake != self.timer_at:
            self.timer_at = wake
            self._push(wake, _TIMER, "timer", None)

    def _arm_poll(self) -> None:
        poll = self.cfg.poll
        at = -(-self.now // poll) * poll if poll > 0 else self.now
        if self.poll_at is None or self.poll_at > at:
            self.poll_at = at
            self._push(at, _POLL, "poll", None)

    def _checkpoint(self) -> None:
        """End a check window (:class:`~rsa_scheduler.sim.logcheck.LogWindow`): replay
        its log against the live scheduler and pool, forget finished jobs."""
        present = {jid for jid, job in self.jobs.items() if job.phase != "ended"}
        if self.checks.close(self.sched, self.pool, self._nodes, self.cfg.allocation,
                             self.cfg.staging, self.now, present, self.broken):
            self.totals.checks += 1
