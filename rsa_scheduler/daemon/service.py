"""rsad's service: one loop thread owns the core; worker threads run actions.

Owns :class:`Daemon`, the composition root of rsad and its loop: start-up (replay the
event log from the newest snapshot, re-issue outstanding actions), the cycle (ONE
squeue call → observations → core decision → commit events and projections in one
transaction → dispatch actions), the inbox (requests from other threads, handled in
groups with one commit: outcomes, progress, milestones, user/operator commands, node
states, hook events from PrologSlurmctld/EpilogSlurmctld and burst_buffer.lua), the
write-ahead commit, snapshots and retention. Everything that changes the core goes
through the inbox and the loop thread, so the core never sees two callers at once;
external operations never block the loop.

Its collaborators, each owned by the Daemon and each importing nothing of this module:
:mod:`~rsa_scheduler.daemon.cycle` (which queue lines changed),
:mod:`~rsa_scheduler.daemon.specs` (a job's ``#RSA_*`` directives),
:mod:`~rsa_scheduler.daemon.starthold` (the start hold),
:mod:`~rsa_scheduler.daemon.dispatch` (the worker lanes, actions in flight),
:mod:`~rsa_scheduler.daemon.memory` (facts, node notes, debris, aliases) and
:mod:`~rsa_scheduler.daemon.views` (what the API shows).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from rsa_scheduler.core.actions import Action, Outcome
from rsa_scheduler.core.events import Event
from rsa_scheduler.core.machine import JobRecord
from rsa_scheduler.core.policy import NodeState
from rsa_scheduler.core.scheduler import (
    POOL_STREAM,
    CommandRefused,
    Decision,
    Hook,
    Observation,
    Scheduler,
    StaleOutcome,
    another_submission,
)
from rsa_scheduler.core.states import AWAITING_NODES, IDLE, JobState, RsaState
from rsa_scheduler.core.transitions import Trigger
from rsa_scheduler.daemon import views
from rsa_scheduler.daemon.cycle import FIRST_SIGHTS_PER_CYCLE, EndStates, QueueReader
from rsa_scheduler.daemon.dephold import DepHold
from rsa_scheduler.daemon.dispatch import Dispatcher, Lane, Running
from rsa_scheduler.daemon.executors import Registry
from rsa_scheduler.daemon.health import HEALTH_BY
from rsa_scheduler.daemon.inbox import Inbox, Request
from rsa_scheduler.daemon.mail import QUARANTINED, VERIFIED, Mailer
from rsa_scheduler.daemon.memory import Memory, SnapshotCadence
from rsa_scheduler.daemon.metrics import Metrics, StagingWorkers
from rsa_scheduler.daemon.native import NativeDriver
from rsa_scheduler.daemon.nodeside import nodeside_of
from rsa_scheduler.daemon.published import Published
from rsa_scheduler.daemon.specs import ADMIN_COMMENT_PREFIX, SpecReader
from rsa_scheduler.daemon.starthold import StartHold
from rsa_scheduler.errors import RsaError, StoreError
from rsa_scheduler.node.plan import HookProtocols
from rsa_scheduler.slurm.parse import QueueRow, merge_hetjobs
from rsa_scheduler.slurm.port import MailSource, SlurmError, SlurmPort
from rsa_scheduler.store import JobRow, Store

log = logging.getLogger(__name__)
#: seconds between looks for quarantined jobs to remind the operator of
REMIND_EVERY = 60.0
#: rsa-states whose reaching mails the job's user, when the job asked Slurm for mail
MAIL_ON = {"output-verified": VERIFIED, "quarantined": QUARANTINED}


class LogWriteFailed(StoreError):
    """The event log could not be written: rsad's memory holds decisions its log does not.
    Never answered and forgotten: rsad stops (its callers told first), and its restart
    (systemd: ``Restart=on-failure``) replays the log, which has every decision before
    this one; nothing of the failed one was dispatched (write-ahead)."""


class Daemon:
    """The RSA scheduler daemon, minus its transports (API, systemd) — see main.py."""

    def __init__(self, scheduler: Scheduler, *, slurm: SlurmPort, store: Store,
                 registry: Registry, workers: int = 8, urgent_workers: int = 8,
                 poll_interval: float = 5.0, retention: float = 3600.0,
                 snapshot_every: int = 10_000,
                 script_source: str = "job_submit",
                 clock: Callable[[], float] = time.time) -> None:
        self.sched = scheduler
        self.slurm = slurm
        self.store = store
        self.registry = registry
        self.poll_interval = poll_interval
        # a finished job leaves memory this long after its RSA cycle ended (its history
        # stays in the store: rsa job / rsa events read it there)
        self.retention = retention
        self._last_forget = 0.0
        # a snapshot of the state every ``snapshot_every`` events (at least): a restart
        # replays only what came after the newest one
        self.cadence = SnapshotCadence(snapshot_every)
        self.script_source = script_source
        self.clock = clock
        self.inbox = Inbox()
        self.dispatcher = Dispatcher(self, registry=registry, slurm=slurm, clock=clock,
                                     workers=workers, urgent_workers=urgent_workers)
        self.memory = Memory()
        self.progress: dict[str, dict[str, Any]] = {}
        # the RSA's mail to users (a backend that cannot say a job's mail request: none)
        self.mailer = (Mailer(slurm, self.dispatcher.messages)
                       if isinstance(slurm, MailSource) else None)
        self.specs = SpecReader(slurm, self.dispatcher.tell)
        self.queue_reader = QueueReader(slurm)
        self.end_states = EndStates(slurm)  # ended jobs' end states from accounting
        self._hook_seen: dict[str, float] = {}  # job -> time of its latest hook event
        self._last_poll = 0.0
        self._last_remind = 0.0
        self.last_cycle_seconds = 0.0
        #: new quiet RSA jobs one cycle takes on (defer_first_sights)
        self.first_sights_per_cycle = FIRST_SIGHTS_PER_CYCLE
        self.slurm_ok = True
        self.metrics: Metrics | None = None
        self.published = Published()  # what other threads read (metrics): one per cycle
        self._group: Decision | None = None  # decisions of the request group being handled
        self.hosts: Mapping[str, Any] | None = None  # the RSA nodes (None: no data path)
        # the staging-worker pool, for its metrics (None: no data path, or
        # staging.engine_process off: the engines run in rsad's threads)
        self.staging_workers: WorkerPool | None = None
        # early start wait: the jobs Slurm holds for the RSA (daemon/starthold.py)
        self.holds = StartHold(slurm=slurm, clock=clock, scheduler=lambda: self.sched,
                               commit=self._commit, tell=self.dispatcher.tell,
                               lane=self.dispatcher.urgent, split=self.specs.split_hold,
                               told_before=self._rerun_told)
        # dependents of RSA jobs wait for their parents' output (daemon/dephold.py)
        self.deps = DepHold(slurm=slurm, clock=clock, scheduler=lambda: self.sched,
                            commit=self._commit, tell=self.dispatcher.tell,
                            lane=self.dispatcher.urgent,
                            native=lambda: self.native is not None,
                            aliases=lambda: self.memory.aliases,
                            history=self._history)
        # native mode (slurm.mode: native): Slurm's burst_buffer/lua hooks start stage-in
        # and stage-out (daemon/native.py); None in queue mode
        self.native: NativeDriver | None = None
        # set once start() has replayed the log, fenced the RSA nodes and re-issued what
        # was in flight: before that the API answers "rsad is starting" (api.Routes)
        self.ready = threading.Event()
        # compute nodes whose hooks speak an older hook protocol than ours (the API hears
        # them; rsa status shows them): a rolling upgrade not finished
        self.hook_protocols = HookProtocols()

    def _history(self, job: str) -> tuple[str | None, bool]:
        """Loop thread: ``job``'s user as the store's projection has it (None: none) and
        whether its output was verified after its last end (the dependency hold's
        release message)."""
        try:
            row = self.store.job(job)
            return (row.user if row is not None else None), self.store.verified_since_end(job)
        except StoreError as e:
            log.warning("job %s: cannot read its history: %s", job, e)
            return None, False

    def _rerun_told(self, job: str) -> bool:
        """Loop thread: whether the log says ``job``'s user was told of the rerun hold
        Slurm has it under: a ``job.rerun-held`` after its last ``job.rerun-released``
        (read once per hold, after a restart: daemon/starthold.py). A log that cannot be
        read says yes: nothing is told twice."""
        last = ""
        try:
            for ev in self.store.events(job):
                if ev.name in ("job.rerun-held", "job.rerun-released"):
                    last = ev.name
        except StoreError as e:
            log.warning("job %s: cannot read its history: %s", job, e)
            return True
        return last == "job.rerun-held"

    # ---- the collaborators' state, as the API, tests and benchmarks know it ---------------
    @property
    def facts(self) -> dict[str, dict[str, Any]]:
        return self.memory.facts

    @property
    def node_notes(self) -> dict[str, dict[str, Any]]:
        return self.memory.node_notes

    @property
    def debris(self) -> dict[str, list[dict[str, Any]]]:
        return self.memory.debris

    @property
    def aliases(self) -> dict[str, str]:
        return self.memory.aliases

    @property
    def running(self) -> dict[str, Running]:
        return self.dispatcher.running

    @property
    def alerts(self) -> list[dict[str, Any]]:
        return self.dispatcher.alerts

    @property
    def workers(self) -> Lane:
        return self.dispatcher.workers

    @property
    def urgent(self) -> Lane:
        return self.dispatcher.urgent

    @property
    def parse_timeout(self) -> float:
        return self.specs.parse_timeout

    @parse_timeout.setter
    def parse_timeout(self, seconds: float) -> None:
        self.specs.parse_timeout = seconds

    # ---- start-up -----------------------------------------------------------------------
    def start(self) -> None:
        """Rebuild state from the newest snapshot and the log after it (or the whole log)
        and re-issue whatever was in flight."""
        snap = self.store.latest_snapshot()
        since, base = snap if snap is not None else (0, None)
        events = list(self.store.events(since=since))
        pool = self.sched.pool
        self.sched = Scheduler.replay(pool, self.sched.policy, events, base=base)
        # jobs in flight were started in the mode the log was written in: a switch of
        # slurm.mode under them is refused (their holds, hooks and RAMDISKs are its)
        refused, switched = self.sched.mode_switch(
            "native" if self.native is not None else "queue", self.clock())
        if refused:
            raise RsaError(refused)
        self._commit(switched)
        self.cadence.seq = since
        if base is not None:
            self.memory.restore(base)
            if self.native is not None:
                self.native.load(dict(base.get("bb") or {}))
            log.info("loaded the snapshot at event %d: %d jobs", since, len(self.sched.records))
        for ev in events:
            self.memory.learn(ev)
            if self.native is not None:
                self.native.learn(ev)
        # jobs that ended before this start without Slurm's end state: ask accounting
        self.end_states.tries.update((j, 0) for j, r in self.sched.records.items()
                                     if r.job_state is JobState.FINISHED and not r.end_state)
        outstanding = self.sched.outstanding()
        log.info("replayed %d events: %d jobs tracked, %d actions to re-issue",
                 len(events), len(self.sched.records), len(outstanding))
        self.registry.starting()  # fence: what an earlier rsad left running is killed
        self._dispatch(outstanding)
        self.ready.set()
        # the API answers the compute nodes' agents from now on: a re-issued step gives
        # them time to reconnect from here, not from rsad's construction (NodeSide.opened)
        self.registry.ready()

    # ---- the loop -------------------------------------------------------------------------
    def run(self, stop: threading.Event, on_cycle: Callable[[], None] | None = None,
            on_beat: Callable[[], None] | None = None) -> None:
        """Serve until ``stop`` is set. ``on_cycle`` after every poll of Slurm;
        ``on_beat`` on every turn of the loop (at least once a second while it is not
        stuck): systemd's watchdog, whatever ``poll_interval`` is."""
        while not stop.is_set():
            if on_beat:
                on_beat()
            now = self.clock()
            if now - self._last_poll >= self.poll_interval:
                self.poll()
                self.published.publish(self.status_view())
                if on_cycle:
                    on_cycle()
            wake = self._last_poll + self.poll_interval
            timer = self.sched.next_wake(self.clock())
            if timer is not None:
                wake = min(wake, timer)
            self.drain(timeout=max(0.0, min(wake - self.clock(), 1.0)))
            self._commit(self.sched.tick(self.clock()))

    def drain(self, timeout: float = 0.0) -> int:
        """Handle the requests queued now (those that come meanwhile are the next turn's:
        :meth:`Inbox.batches`); wait up to ``timeout`` for the first one.

        Requests that only change state (outcomes, hooks, commands, node states) are
        handled in groups: their decisions are written in ONE store transaction before
        any of their actions runs or any caller is answered (group commit), so a burst of
        outcomes or hook events costs one fsync, not one each. A ``call`` (an API read)
        is handled alone, after everything before it is committed.
        """
        handled = 0
        for batch in self.inbox.batches(timeout):
            if isinstance(batch, Request):
                self._handle(batch)
                handled += 1
            else:
                self._handle_group(batch)
                handled += len(batch)
        return handled

    def _handle_group(self, group: list[Request]) -> None:
        self._group = Decision()
        answers: list[tuple[Request, bool, Any]] = []
        try:
            for req in group:
                if not self.inbox.take(req):
                    continue  # withdrawn by its caller (Inbox.submit)
                try:
                    answers.append((req, True, self._handle_one(req)))
                except Exception as e:  # answered to its caller, never fatal to the loop
                    answers.append((req, False, e))
        finally:
            decision, self._group = self._group, None
        failed: LogWriteFailed | None = None
        try:
            self._commit(decision)
        except LogWriteFailed as e:
            log.error("cannot commit %d requests' decisions", len(group))
            answers = [(r, False, e) for r, _, _ in answers]
            failed = e
        for req, ok, value in answers:
            if req.reply is None:
                if not ok:
                    log.error("request %s failed: %s", req.kind, value, exc_info=value)
            elif ok:
                req.reply.set_result(value)
            else:
                req.reply.set_exception(value)
        if failed is not None:
            raise failed  # after every caller has its answer: rsad stops (LogWriteFailed)

    # ---- the cycle ----------------------------------------------------------------------
    def poll(self) -> None:
        """One cycle: read the whole queue once and let the core decide. With
        job_submit.lua marking RSA jobs (any ``script_source`` but ``scontrol``) only the
        RSA jobs that changed are observed (:class:`~rsa_scheduler.daemon.cycle.QueueReader`);
        else every row, and the directives of the jobs that matter are read from their
        batch scripts (:class:`~rsa_scheduler.daemon.specs.SpecReader`)."""
        started = self.clock()
        incremental = self.script_source != "scontrol"
        # native mode: jobs set up by Slurm whose directives rsad has not read, grace over
        asked = self.native.due(started, self.sched.records) if self.native else set()
        try:
            if incremental:
                waiting = self.sched.waiting | asked if asked else self.sched.waiting
                got = self.queue_reader.changes(waiting, self.sched.records,
                                                self.first_sights_per_cycle)
                rows, present = got.rows, got.present
                self.cadence.catching_up = bool(got.later)
            else:
                rows = merge_hetjobs(self.slurm.queue())
                present = {r.job_id for r in rows}
        except SlurmError as e:
            if self.slurm_ok:
                log.error("cannot read the Slurm queue: %s", e)
            self.slurm_ok = False
            if self.native is not None:  # nothing was read of them: due again next poll
                self.native.unread(asked)
            self._last_poll = self.clock()
            return
        self.slurm_ok = True
        self.holds.note(rows, present)
        obs = [o for o in (self._observation(r, started) for r in rows) if o is not None]
        now = self.clock()
        fresh = {j for j, t in self._hook_seen.items() if t > started}
        if incremental:
            dec = self.sched.observe(obs, now, complete=False, present=present | fresh)
        else:
            dec = self.sched.observe(obs, now, complete=not fresh)
        self._commit(dec)
        ended = self.end_states.due(self.sched.records, present | fresh)
        if ended:  # Slurm's accounting: how the jobs the queue no longer lists ended
            records = self.sched.records
            self._commit(self.sched.observe(
                [Observation(j, records[j].user, s, "None", records[j].priority,
                             records[j].compute_nodes) for j, s in sorted(ended.items())],
                now, complete=False))
        if asked:
            self._read_directives(asked, rows, obs, present, incremental)
        if self.native is not None:
            self.native.observed(started)
        if self.native is None:  # native mode: Slurm holds a requeued job for its stage-in
            self.holds.requeued(dec)
        self.holds.check()
        if self.native is None:  # native mode: data_in waits for the earlier run instead
            self.holds.check_reruns()
        self.deps.check()
        if now - self._last_remind >= REMIND_EVERY:  # quarantined output not forgotten
            self._last_remind = now
            self.dispatcher.remind([r for r in self.sched.records.values()
                                    if r.rsa_state is RsaState.QUARANTINED], now)
        if not incremental:
            self.specs.prune(rows, self.sched.records)
        self._forget(now, present | fresh)
        self._maybe_snapshot()
        self._write_pools()
        self._last_poll = now
        self.last_cycle_seconds = self.clock() - started
        if self.metrics is not None:
            self.metrics.cycle.observe(self.last_cycle_seconds)

    def _read_directives(self, asked: set[str], rows: list[QueueRow], obs: list[Observation],
                         present: set[str], incremental: bool) -> None:
        """Native mode: what this poll read of the directives of set-up jobs rsad does not
        track (``asked``), for data_in's answer. Only what was read counts: a job whose
        row this poll did not observe stays unread (data_in waits)."""
        native = self.native
        assert native is not None
        seen = {o.job_id: o.spec for o in obs}
        marked = {r.job_id for r in rows if (r.admin_comment or "").startswith(
            ADMIN_COMMENT_PREFIX)}
        for job in asked:
            if job in self.sched.records:
                continue
            if job in seen:
                spec = seen[job]
                if spec is not None:  # read: it asks for no data (e.g. #RSA_NODES only)
                    native.read(job, "none")
                elif incremental and job in marked:
                    native.read(job, "unreadable")
                elif incremental or job in self.specs.cache:
                    # no RSA marker (job_submit.lua found no directive), or its batch
                    # script was read and has none (or none rsad accepts: the user was told)
                    native.read(job, "none")
            elif incremental and job not in present:
                # the queue was read whole: no line of this job carries job_submit.lua's
                # marker (or the job left the queue)
                native.read(job, "none")
            elif not incremental and job not in present:
                native.read(job, "none")  # not in the queue any more

    def _observation(self, row: QueueRow, poll_started: float) -> Observation | None:
        if self._hook_seen.get(row.job_id, 0.0) > poll_started:
            return None  # a hook told us something newer than this snapshot
        native = self.native
        rec = self.sched.records.get(row.job_id)
        if native is not None and not native.tracks(row.job_id) and rec is None:
            return None  # native mode: a job is the RSA's once Slurm sets its buffer up
        # a record of another user's job of this id (Slurm lost its state, or its ids
        # wrapped) is not this job's: its own directives are read (native mode: once
        # Slurm sets its buffer up), the core ends the earlier job's cycle first
        user = row.user
        if rec is not None and not users_differ(rec.user, user):
            user = rec.user  # the same user, perhaps as a uid squeue could not resolve
        tracked = rec is not None and (rec.user == user or (
            native is not None and not native.tracks(row.job_id)))
        if tracked and rec is not None and (rec.superseded or another_submission(
                rec, row.submitted, row.restarts)):
            # the same user's new job under the id (core.scheduler.another_job): its
            # own directives, never the earlier job's read batch script (read again
            # once: while the earlier job's cycle ends the id stays displaced)
            tracked = False
            if row.job_id not in self.sched.displaced:
                self.specs.forget(row.job_id)
        spec = self.specs.spec_of(row, tracked=tracked,
                                  from_script=self.script_source == "scontrol",
                                  staged=native is not None and native.tracks(row.job_id))
        _, deadline = self.specs.split_hold(row.admin_comment or "")
        if native is not None:
            # held by Slurm in stage-in (BurstBufferStageIn ...): on-deck, never demoted
            held = native.held(row.job_id, row.state, self.clock(), row.reason,
                               awaiting=rec is None or rec.rsa_state in AWAITING_NODES)
            reason = row.reason
        else:
            held = self.holds.counts_on_deck(row)
            reason = self.holds.reason_of(row)
        return Observation(job_id=row.job_id, user=user, state=row.state,
                           reason=reason, priority=row.priority,
                           compute_nodes=row.num_nodes, spec=spec,
                           hold_until=None if deadline is None else float(deadline),
                           held=held, partition=row.partition, time_limit=row.time_limit,
                           submitted=row.submitted, restarts=row.restarts,
                           account=row.account)

    def _write_pools(self) -> None:
        """Native mode: the free RSA capacity per tier for slurm_bb_pools."""
        if self.native is None:
            return
        pool = self.sched.pool
        self.native.write_pools((n.tier.value, n.capacity, pool.state(n.name),
                                 pool.owner(n.name)) for n in pool.nodes())

    # ---- snapshots and retention --------------------------------------------------------
    def snapshot(self) -> int:
        """Write the state as of the newest committed event (loop thread: every event up
        to it is folded in); returns its seq."""
        seq = self.store.last_seq()
        data = {**self.sched.durable_state(), **self.memory.to_json(),
                "bb": self.native.to_json() if self.native is not None else {}}
        self.store.write_snapshot(seq, self.clock(), data)
        self.cadence.seq = seq
        log.info("snapshot at event %d: %d jobs", seq, len(self.sched.records))
        return seq

    def _maybe_snapshot(self) -> None:
        """Write a snapshot when one is due (:meth:`SnapshotCadence.due`)."""
        if self.cadence.due(self.store.last_seq, len(self.sched.records)):
            try:
                self.snapshot()
            except (StoreError, ValueError) as e:  # the log stays the truth: go on
                log.error("could not write a snapshot: %s", e)

    def _forget(self, now: float, present: set[str]) -> None:
        """Bound memory by live jobs: at most once a minute, finished jobs whose cycle
        ended over ``retention`` ago and that Slurm no longer lists leave memory."""
        if now - self._last_forget < 60.0:
            return
        self._last_forget = now
        gone = self.sched.forget_finished(now, self.retention, present)
        for job in gone:
            self.progress.pop(job, None)
            self._hook_seen.pop(job, None)
            self.specs.forget(job)
        idle: list[str] = []
        if self.native is not None:
            # and burst buffer jobs without RSA work, once Slurm no longer lists them
            idle = [j for j, bb in self.native.jobs.items() if j not in self.sched.records
                    and j not in present and now - bb.setup >= self.retention]
            self.native.forget([*gone, *idle])
        self.memory.forget([*gone, *idle])  # their facts and aliases
        if gone:
            log.info("%d finished jobs left memory (retention %.0fs); their history stays "
                     "in the store", len(gone), self.retention)


    # ---- requests from other threads ----------------------------------------------------
    def submit(self, kind: str, payload: Any, *, wait: bool = False,
               timeout: float = 10.0) -> Any:
        """Queue a request for the loop thread; optionally wait for its answer."""
        return self.inbox.submit(kind, payload, wait=wait, timeout=timeout)

    def _handle(self, req: Request) -> None:
        if not self.inbox.take(req):
            return  # its caller stopped waiting and was told so: nothing of it is done
        try:
            result = self._handle_one(req)
        except Exception as e:  # answered to the caller, never fatal to the loop...
            if req.reply is not None:
                req.reply.set_exception(e)
            else:
                log.exception("request %s failed", req.kind)
            if isinstance(e, LogWriteFailed):
                raise  # ...but for the log's: memory is ahead of it (LogWriteFailed)
            return
        if req.reply is not None:
            req.reply.set_result(result)

    def _handle_one(self, req: Request) -> Any:
        now = self.clock()
        if req.kind == "outcome":
            outcome: Outcome = req.payload
            run = self.running.pop(outcome.action_id, None)
            if (self.progress.get(outcome.job_id) or {}).get("action") == outcome.action_id:
                del self.progress[outcome.job_id]  # progress is shown while staging only
            if self.metrics is not None and run is not None:
                self.metrics.action_done(run.action.kind.value, outcome.result.value,
                                         now - run.started, outcome.detail)
            try:
                dec = self.sched.outcome(outcome, now)
            except StaleOutcome:
                log.info("stale outcome %s ignored", outcome.action_id)
                self._commit(Decision(events=[Event(now, outcome.job_id, "action.stale", {
                    "action": outcome.action_id, "result": outcome.result.value})]))
                return None
            for ev in dec.events:
                self.memory.learn_facts(ev)
            self._commit(dec)
            left = [dict(x) for x in outcome.detail.get("left_on") or ()]
            if left:
                self._left_on(left, now)
            silent = [str(n) for n in outcome.detail.get("silent") or ()]
            if silent:
                self._unconfirmed(outcome.job_id, silent, now)
            if outcome.job_id in self.holds:
                self.holds.check()
            return None
        if req.kind == "progress":
            job, data = req.payload
            # "time": when rsad heard it, so clients can count the ETA down between reports
            self.progress[job] = {**data, "time": now}
            return None
        if req.kind == "milestone":
            # durable before the executor goes on: a re-issued action after a crash
            # finds it in its facts and does not redo (or undo) what is behind it
            job, action_id, data = req.payload
            ev = Event(now, job, "action.milestone", {"action": action_id, "detail": data})
            self._commit(Decision(events=[ev]))
            self.memory.learn_facts(ev)
            return {"recorded": True}
        if req.kind == "command":
            job, trigger, by, operator = req.payload
            dec = self.sched.command(job, Trigger(trigger), now, by=by, operator=operator)
            self._commit(dec)
            if job in self.holds:
                self.holds.check()
            if self.native is None:  # e.g. rsa retry of a quarantined stage-out
                self.holds.watch_rerun(job)
            rec = self.sched.records[job]
            return {"job_id": job, "rsa_state": rec.rsa_state.value}
        if req.kind == "hook":
            # the loop's own (injected) clock, read on the loop thread: when rsad heard it
            return self._hook(req.payload, self.clock())
        if req.kind == "node-state":
            node, state, by, *rest = req.payload
            reason = str(rest[0]) if rest else ""
            if state == NodeState.UP.value and self.debris.get(node) and by != HEALTH_BY:
                jobs = ", ".join(sorted({str(d["job_id"]) for d in self.debris[node]}))
                raise CommandRefused(
                    f"{node} still holds what job(s) {jobs} left there while it was down "
                    "(RAMDISK servers, mounts, pool files): the health loop cleans it and "
                    "brings the node back as soon as it answers (health.interval)")
            self._commit(self.sched.set_node_state(node, NodeState(state), now, by=by,
                                                   reason=reason))
            self.node_notes[node] = {"by": by, "reason": reason, "time": now}
            return {"node": node, "state": state}
        if req.kind == "rsa-drain":  # rsa admin drain / resume
            on, by, reason, to_pfs = req.payload
            self._commit(self.sched.set_draining(on, now, by=by, reason=reason,
                                                 to_pfs=to_pfs))
            log.warning("RSA %s by %s%s", "draining: no new jobs" if on else "resumed", by,
                        f" ({reason})" if reason else "")
            return {"draining": self.sched.draining, "in_flight": sum(
                1 for r in self.sched.records.values() if r.rsa_state not in IDLE)}
        if req.kind == "call":
            fn: Callable[[], Any] = req.payload
            return fn()
        raise ValueError(f"unknown request {req.kind!r}")

    def _hook(self, payload: Mapping[str, Any], received: float) -> dict[str, Any]:
        """PrologSlurmctld (job starting) / EpilogSlurmctld (job ended) from slurmctld."""
        kind = str(payload["hook"])
        job = str(payload["job_id"])
        if kind == "prolog_slurmctld":
            hook = Hook.STARTED
        elif kind == "epilog_slurmctld":
            hook = Hook.ended(payload.get("exit_code"))
        else:
            raise ValueError(f"unknown hook {kind!r}")
        rec = self.sched.records.get(job)
        if rec is not None and users_differ(rec.user, str(payload.get("user") or "")):
            # another user's job has this id now (Slurm lost its state, or its ids
            # wrapped): not this record's news; the next poll reads the queue
            return {"job_id": job, "tracked": False}
        if job in self.sched.displaced:
            # the queue showed another job under this id (the same user's, by Slurm's
            # submit time): the hook is that job's news, and it has no record yet
            return {"job_id": job, "tracked": False}
        self._hook_seen[job] = received
        if rec is None:
            return {"job_id": job, "tracked": False}
        if payload.get("alias"):
            self.memory.aliases[str(payload["alias"])] = job
        if hook is Hook.STARTED and payload.get("nodes"):
            side = nodeside_of(self.registry)
            if side is not None:  # a hetjob's steps wait for every component's nodes
                side.expect(job, str(payload["nodes"]))
        if str(payload.get("het_job_offset") or "0") != "0":
            # a heterogeneous job's other component: it starts and ends with the leader,
            # whose hooks say so (its batch script's exit code is the leader's)
            return {"job_id": job, "tracked": True, "rsa_state": rec.rsa_state.value}
        obs = Observation.heard(hook, rec, payload.get("exit_code"))
        now = self.clock()
        dec = Decision(events=[Event(now, job, "job.hook", {
            k: payload[k] for k in ("hook", "nodes", "exit_code", "alias") if k in payload})])
        dec.add(self.sched.observe([obs], now, complete=False))
        self._commit(dec)
        return {"job_id": job, "tracked": True, "rsa_state": rec.rsa_state.value}

    # ---- native mode: Slurm's burst_buffer/lua hooks (daemon/native.py) -------------------
    def bb(self, hook: str, job: str, payload: Mapping[str, Any]) -> dict[str, Any]:
        """One ``rsa-bb`` call from burst_buffer.lua (loop thread). Answers at once;
        data_in, data_out and teardown are asked again until done or failed."""
        native = self.native
        if native is None:
            raise CommandRefused("rsad runs in queue mode (slurm.mode: queue): set "
                                 "slurm.mode: native in rsa.yaml and restart rsad to "
                                 "serve burst_buffer.lua")
        now = self.clock()
        rec = self.sched.records.get(job)
        if job in self.sched.displaced:
            rec = None  # the id is another user's job's now: the record is the earlier job's
        got = native.serve(hook, job, payload, rec, now, capacity=lambda: {
            n.name: n.capacity for n in self.sched.pool.nodes()})
        if got.events:
            self._commit(Decision(events=got.events))
        if got.poll_now:
            self._last_poll = 0.0
        return {"job_id": job, **got.answer.to_json(),
                "rsa_state": rec.rsa_state.value if rec else None}

    # ---- commit and dispatch ------------------------------------------------------------
    def _commit(self, dec: Decision) -> None:
        """Write-ahead: events and projections are durable before any action runs.
        Inside a group (see :meth:`drain`) the decision joins the group's, written and
        dispatched once the whole group is decided."""
        if self._group is not None:
            self._group.add(dec)
            return
        if not dec.events and not dec.actions:
            return
        self.end_states.learn(dec.events)
        touched = {e.job_id for e in dec.events if not e.job_id.startswith("@")}
        rows = [self._row(self.sched.records[j]) for j in sorted(touched)
                if j in self.sched.records]
        if dec.events:
            try:
                self.store.append(dec.events, rows)
            except Exception as e:
                raise LogWriteFailed(
                    f"cannot write rsad's event log ({e}): rsad stops; its restart replays "
                    "the log, which holds every decision before this one (none of this one "
                    "was carried out)") from e
        for ev in dec.events:
            if ev.name in ("job.tracked", "job.untracked"):
                # a new record of this id: nothing an earlier job of it left is its own
                self.memory.learn_facts(ev)
                self.progress.pop(ev.job_id, None)
                side = nodeside_of(self.registry)
                if side is not None:
                    side.forget(ev.job_id)
        if self.native is not None:
            # what a replay learns too (the bb.* events were learned as they were made)
            for ev in dec.events:
                if ev.name in ("rsa.transition", "job.state"):
                    self.native.learn(ev)
        for ev in dec.events:
            if ev.name == "rsa.transition":
                log.info("job %s: %s -> %s on %s", ev.job_id, ev.context.get("from"),
                         ev.context.get("to"), ev.context.get("trigger"))
                if self.mailer is not None:
                    self._mail(ev)
        self._dispatch(dec.actions)

    def _mail(self, ev: Event) -> None:
        """The RSA's mail on a transition (daemon/mail.py): what the job asked for is
        remembered when its stage-out begins, the outcome's mail sent when verified or
        quarantined."""
        assert self.mailer is not None
        to = str(ev.context.get("to"))
        asked = self.memory.facts.get(ev.job_id, {}).get("mail")
        if to == RsaState.STAGING_OUT and asked is None:
            job = ev.job_id
            self.mailer.remember(job, lambda j, a: self.submit(
                "milestone", (j, f"{j}/mail", {"mail": list(a)})))
            return
        outcome = MAIL_ON.get(to)
        rec = self.sched.records.get(ev.job_id)
        if outcome is not None and rec is not None:
            known = (str(asked[0]), str(asked[1])) if asked else None
            self.mailer.notify(ev.job_id, rec.user, outcome, rec.message or "", known)

    def _row(self, rec: JobRecord) -> JobRow:
        data = rec.to_json()
        data["progress"] = self.progress.get(rec.job_id)
        return JobRow(rec.job_id, rec.user, data["job_state"] or "", data["rsa_state"],
                      rec.since, data)

    def _dispatch(self, actions: Iterable[Action]) -> None:
        self.dispatcher.dispatch(actions)

    def _left_on(self, left: list[dict[str, Any]], now: float) -> None:
        """A teardown skipped RSA nodes that were down: remember what it left on each
        (cleaned before the node is up again, :meth:`scrubbed`)."""
        events = []
        for item in left:
            node = str(item.pop("node"))
            self.debris.setdefault(node, []).append(item)
            events.append(Event(now, POOL_STREAM, "node.debris", {"node": node, **item}))
        self._commit(Decision(events=events))

    def scrubbed(self, node: str) -> None:
        """Loop thread: ``node`` was cleaned of what teardowns left there."""
        if self.debris.pop(node, None) is not None:
            self._commit(Decision(events=[Event(self.clock(), POOL_STREAM, "node.scrubbed",
                                                {"node": node})]))

    def _unconfirmed(self, job_id: str, nodes: list[str], now: float) -> None:
        """Compute nodes of ``job_id`` that did not confirm a release of its RAMDISK: the
        RAMDISK is kept (the step is retried), the nodes are drained in Slurm with the
        reason (no new job lands on a node whose mounts are in doubt) and the operator is
        alerted. Resume them with ``scontrol update NodeName=... State=RESUME`` once
        checked."""
        reason = f"rsa: did not confirm release of job {job_id}'s RAMDISK"
        self._commit(Decision(events=[Event(now, job_id, "compute.unconfirmed", {
            "nodes": nodes, "drain": reason})]))
        self.dispatcher.drain(job_id, nodes, reason)

    def mount_noted(self, job_id: str, node: str, held: bool, message: str,
                    at: object = None) -> None:
        """Loop thread: ``node`` holds the job's RAMDISK mounted (a late Prolog's mount)
        or no longer does (its Prolog took back the mount it had reported: ``message``),
        outside any node step whose outcome records it: ``compute.mounted`` /
        ``compute.unmounted``, which the job's facts (``mounted``) follow, so a restarted
        rsad asks the right nodes to release it (daemon/nodeside.py). ``at``: what the
        change is as of (``NodeSide._as_of``): a step's outcome committed after it that
        did not see it does not undo it (daemon/memory.py)."""
        ev = Event(self.clock(), job_id, "compute.mounted" if held else "compute.unmounted",
                   {"node": node, **({} if held else {"message": message}),
                    **({"at": at} if at is not None else {})})
        self._commit(Decision(events=[ev]))
        self.memory.learn_facts(ev)
        if not held:
            log.warning("job %s: compute node %s took back its mount of the RAMDISK: %s",
                        job_id, node, message)

    def epilog_noted(self, job_id: str, node: str, counted: bool, at: object) -> None:
        """Loop thread: ``node``'s Epilog took every mount of the job down. Recorded
        (``compute.epilog``) when the node was counted among those that hold the mount
        (``counted``, by NodeSide) or the job's facts count it: otherwise a restarted
        rsad, the job not over for it (a requeue, or its end not yet seen), waited for a
        release from the node, which no agent gives: its reset failed busy after its
        wait and drained the node. Nothing for the other nodes: one event per node that
        held the mount, not per Epilog."""
        facts = self.memory.facts.get(job_id)
        if facts is None or not (counted or node in (facts.get("mounted") or ())):
            return
        ev = Event(self.clock(), job_id, "compute.epilog",
                   {"node": node, **({"at": at} if at is not None else {})})
        self._commit(Decision(events=[ev]))
        self.memory.learn_facts(ev)

    def mount_left(self, job_id: str, node: str, message: str) -> None:
        """Loop thread: ``node``'s Epilog could not take every mount of ``job_id``'s
        RAMDISK down (``message``: why; its record stays on the node). On the job's
        timeline and alerted. The teardown goes on: the job is over and its output is
        staged from the RSA nodes, so the mount left (in the user's own directories,
        where the user moved or covered it) only holds a RAMDISK that is gone."""
        self._commit(Decision(events=[Event(self.clock(), job_id, "compute.left", {
            "node": node, "message": message})]))
        self.dispatcher.alert(job_id, (
            f"compute node {node} could not unmount the job's RAMDISK in its Epilog: "
            f"{message}; the mount stays on {node} (its record in the node directory's "
            f"{node}/<job id>/mounts.json) after the RAMDISK is torn down: unmount it "
            "there, then remove the record"))

    def shutdown(self, timeout: float = 30.0) -> None:
        """Stop workers: running transfers are cancelled and resume after restart. Waits
        at most ``timeout`` seconds for the workers to end, then returns (what still runs
        is logged)."""
        self.dispatcher.shutdown(timeout)
        self.specs.shutdown()
        if self.staging_workers is not None:  # idle workers exit now, not at rsad's exit
            self.staging_workers.close()

    # ---- reads for the API (loop thread via "call"): daemon/views.py ---------------------
    def job_view(self, rec: JobRecord) -> dict[str, Any]:
        return views.job_view(self, rec)

    def jobs_view(self, user: str | None = None) -> list[dict[str, Any]]:
        return views.jobs_view(self, user)

    def status_view(self) -> dict[str, Any]:
        return views.status_view(self)

    def tendable(self) -> list[tuple[str, Mapping[str, Any]]]:
        """(job, mount spec) of every RAMDISK no step is working on (loop thread): the
        RAMDISK tender checks these (core.states.TENDED)."""
        return views.tendable(self)


def users_differ(known: str, seen: str) -> bool:
    """Whether Slurm names a job's user ``seen`` where rsad knows ``known``: another
    user's job has the id (Slurm lost its state, or its ids wrapped). Only two different
    names count: squeue and slurmctld's hooks give a uid they could not resolve to a name
    (a name service hiccup), and an empty name says nothing, so either is taken for the
    same user rather than end a running job's cycle under it."""
    return bool(known and seen) and known != seen and not (
        known.isdigit() or seen.isdigit())


class WorkerPool(StagingWorkers, Protocol):
    """The staging-worker pool as the daemon holds it (``daemon.engines.EnginePool``):
    its figures for the metrics, and closed when rsad stops."""

    def close(self) -> None: ...


__all__ = ["CommandRefused", "Daemon", "Request"]
