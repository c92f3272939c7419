"""rsad's service: one loop thread owns the core; worker threads run actions.

Owns :class:`Daemon`: start-up (replay the event log, re-issue outstanding actions),
the cycle (ONE squeue call → observations → core decision → commit events and
projections in one transaction → dispatch actions), hook events from
PrologSlurmctld/EpilogSlurmctld, user/operator commands, action outcomes and progress.
Everything that changes the core goes through the inbox and the loop thread, so the
core never sees two callers at once; external operations never block the loop.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass
from typing import Any, cast

from ClusterShell.NodeSet import NodeSet

from rsa_scheduler.core.actions import BULK, Action, ActionKind, Outcome
from rsa_scheduler.core.directives import (
    HOLD_MARK,
    DirectiveErrors,
    DirectiveSpec,
    parse_directives,
    split_hold,
)
from rsa_scheduler.core.events import Event
from rsa_scheduler.core.machine import JobRecord
from rsa_scheduler.core.payloads import AlertArgs, CancelArgs, DestroyFsArgs, OnNodes, TellUserArgs
from rsa_scheduler.core.policy import NodeState
from rsa_scheduler.core.scheduler import (
    POOL_STREAM,
    CommandRefused,
    Decision,
    Observation,
    Scheduler,
    StaleOutcome,
)
from rsa_scheduler.core.states import LEFT_QUEUE, PENDING, TENDED, TERMINAL, JobState
from rsa_scheduler.core.transitions import Trigger
from rsa_scheduler.daemon.executors import ActionContext, Registry
from rsa_scheduler.daemon.health import HEALTH_BY
from rsa_scheduler.daemon.holds import held_message, hold_verdict, startable
from rsa_scheduler.daemon.metrics import Metrics
from rsa_scheduler.daemon.native import (
    Answer,
    NativeDriver,
    answer_data_in,
    answer_data_out,
    answer_teardown,
)
from rsa_scheduler.daemon.nodeside import nodeside_of
from rsa_scheduler.daemon.published import Published
from rsa_scheduler.errors import StoreError
from rsa_scheduler.hosts import CancelToken
from rsa_scheduler.slurm.parse import ELIGIBLE_REASONS, QueueRow, merge_hetjobs, parse_queue
from rsa_scheduler.slurm.port import SlurmError, SlurmPort
from rsa_scheduler.store import JobRow, Store

log = logging.getLogger(__name__)
#: how long a teardown waits for the job's other steps to wind down (they were cancelled)
SIBLING_WAIT = 120.0

ADMIN_COMMENT_PREFIX = "rsa1:"
# outcome (and milestone) details worth remembering
FACT_KEYS = ("mount", "lock_token", "manifest", "mounted", "reset_of", "script_started")


#: seconds after rsad released a job's start hold in which Slurm still showing it pending
#: for ``BeginTime`` is not news (it has not rescheduled it yet)
RELEASE_SETTLE = 60.0

#: request kinds handled in groups with one commit (group commit); the rest one by one
GROUPED = frozenset({"outcome", "command", "hook", "progress", "node-state"})
MAX_GROUP = 256


@dataclass
class Request:
    """Something for the loop thread to do on behalf of another thread."""

    kind: str  # "outcome" | "command" | "hook" | "progress" | "node-state" | "call"
    payload: Any
    reply: Future[Any] | None = None


@dataclass
class Running:
    action: Action
    cancel: CancelToken
    future: Future[Outcome]
    started: float = 0.0


def _failed(exit_code: object) -> bool:
    """Whether EpilogSlurmctld's ``SLURM_JOB_EXIT_CODE`` (a wait status: 768 is exit 3,
    9 is SIGKILL) says the job did not succeed; unknown counts as success, as Slurm's
    COMPLETED does, and the next queue poll has the final word."""
    text = str(exit_code or "").strip()
    return text.isdigit() and int(text) != 0


_UNREAD = object()  # a batch script that could not be read this cycle

#: new RSA jobs a cycle takes on at most, of those that need nothing yet (see
#: :func:`defer_first_sights`): a fresh rsad on a queue of 100k jobs takes them on over a
#: few cycles instead of stalling its loop for one long first cycle
FIRST_SIGHTS_PER_CYCLE = 2000

#: pending reasons of a job that is not about to start: rsad has nothing to do for it yet
NOT_YET = frozenset({"Priority", "JobHeldUser", "JobHeldAdmin", "Dependency"})


def defer_first_sights(rows: list[QueueRow], known: Mapping[str, object],
                       waiting: Iterable[str],
                       limit: int = FIRST_SIGHTS_PER_CYCLE) -> tuple[list[QueueRow], set[str]]:
    """(the rows to observe this cycle, the job ids left for a later cycle).

    A job rsad already tracks, a job that runs, ends or may start soon (any reason but
    :data:`NOT_YET`: on-deck, a start hold, a burst buffer set-up), one the core waits
    on, and a heterogeneous job's leader are always observed; of the other new jobs, at
    most ``limit``, highest priority first, then lowest job id. The rest are observed in
    a later cycle (rsad has nothing to do for them until they near the front)."""
    quiet: list[QueueRow] = []
    out: list[QueueRow] = []
    hold = set(waiting)
    for row in rows:
        if (row.state == "PENDING" and row.reason in NOT_YET and "+" not in row.job_id
                and row.job_id not in known and row.job_id not in hold):
            quiet.append(row)
        else:
            out.append(row)
    if len(quiet) <= limit:
        return rows, set()
    quiet.sort(key=lambda r: (-r.priority, submit_key(r.job_id)))
    return out + quiet[:limit], {r.job_id for r in quiet[limit:]}


def submit_key(job: str) -> tuple[int, int, str]:
    """Slurm's submit order of ``123`` / ``123_4`` (lower first; anything else last)."""
    head, _, task = job.partition("_")
    if head.isdigit() and (not task or task.isdigit()):
        return (int(head), int(task or 0), "")
    return (1 << 62, 0, job)


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
        # a snapshot of the state every ``snapshot_every`` events: a restart replays only
        # what came after the newest one
        self.snapshot_every = snapshot_every
        self._snap_seq = 0
        self._first_cycle = True  # no snapshot in it (see _maybe_snapshot)
        self._catching_up = False  # new jobs left for later cycles (defer_first_sights)
        self.script_source = script_source
        self.clock = clock
        self.inbox: queue.Queue[Request] = queue.Queue()
        # two lanes: bulk work (core.actions.BULK) on ``workers`` threads, everything
        # else (mounts, reset, lock-in, teardown, messages) on its own ``urgent_workers``
        self.workers = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rsa-bulk")
        self.urgent = ThreadPoolExecutor(max_workers=urgent_workers,
                                         thread_name_prefix="rsa-urgent")
        self.running: dict[str, Running] = {}
        self.facts: dict[str, dict[str, Any]] = {}
        self.progress: dict[str, dict[str, Any]] = {}
        self.alerts: list[dict[str, Any]] = []
        self._specs: dict[str, DirectiveSpec | None] = {}  # script_source=scontrol cache
        # scripts being read and parsed off the loop thread: job -> (future, started)
        self._parser = ThreadPoolExecutor(max_workers=2, thread_name_prefix="rsa-parse")
        self._parsing: dict[str, tuple[Future[tuple[Any, str]], float]] = {}
        self.parse_timeout = 30.0
        self._comment_specs: dict[str, DirectiveSpec | None] = {}  # admin_comment -> spec
        self._holds_split: dict[str, tuple[str, int | None]] = {}  # admin_comment -> split
        self._prev_lines: dict[str, object] = {}  # job -> its squeue line (row) last cycle
        self._hook_seen: dict[str, float] = {}  # job -> time of its latest hook event
        self._last_poll = 0.0
        self.last_cycle_seconds = 0.0
        #: new quiet RSA jobs one cycle takes on (defer_first_sights)
        self.first_sights_per_cycle = FIRST_SIGHTS_PER_CYCLE
        self.slurm_ok = True
        self.metrics: Metrics | None = None
        self.published = Published()  # what other threads read (metrics): one per cycle
        self._group: Decision | None = None  # decisions of the request group being handled
        self.hosts: Mapping[str, Any] | None = None  # the RSA nodes (None: no data path)
        # node -> who set its state last, why and when (from the log, then live)
        self.node_notes: dict[str, dict[str, Any]] = {}
        # early start wait, the start hold (daemon/holds.py): job -> (deadline, its
        # admin_comment without the marker) while Slurm holds it for the RSA; whether it
        # could start now (judged once); releases asked for (job -> when); jobs told
        self._held: dict[str, tuple[float, str]] = {}
        self._can_start: dict[str, bool] = {}
        self._releasing: dict[str, float] = {}
        self._told_held: set[str] = set()
        # jobs released to start (job -> when): Slurm may show BeginTime for a moment
        # after the release; it must not read as a demotion of a staged job
        self._released: dict[str, float] = {}
        # an array task's own job id -> its key (<array>_<task>): a node's hooks know only
        # the former (core.jobkey); learned from slurmctld's hooks, kept in their events
        self.aliases: dict[str, str] = {}
        # RSA node -> what teardowns left there while it was down (each: fs_id, job_id,
        # tier); cleaned before it is up again (daemon/data.py DataPath.scrub)
        self.debris: dict[str, list[dict[str, Any]]] = {}
        # native mode (slurm.mode: native): Slurm's burst_buffer/lua hooks start stage-in
        # and stage-out (daemon/native.py); None in queue mode
        self.native: NativeDriver | None = None

    # ---- start-up -----------------------------------------------------------------------
    def start(self) -> None:
        """Rebuild state from the newest snapshot and the log after it (or the whole log)
        and re-issue whatever was in flight."""
        snap = self.store.latest_snapshot()
        since, base = snap if snap is not None else (0, None)
        events = list(self.store.events(since=since))
        pool = self.sched.pool
        self.sched = Scheduler.replay(pool, self.sched.policy, events, base=base)
        self._snap_seq = since
        if base is not None:
            self.facts = {str(j): dict(f) for j, f in dict(base.get("facts") or {}).items()}
            self.node_notes = {str(n): dict(v)
                               for n, v in dict(base.get("node_notes") or {}).items()}
            self.debris = {str(n): [dict(x) for x in v]
                           for n, v in dict(base.get("debris") or {}).items()}
            if self.native is not None:
                self.native.load(dict(base.get("bb") or {}))
            log.info("loaded the snapshot at event %d: %d jobs", since, len(self.sched.records))
        for ev in events:
            self._learn_facts(ev)
            if self.native is not None:
                self.native.learn(ev)
            if ev.name == "node.debris":
                item = {k: v for k, v in ev.context.items() if k != "node"}
                self.debris.setdefault(str(ev.context["node"]), []).append(item)
            elif ev.name == "node.scrubbed":
                self.debris.pop(str(ev.context["node"]), None)
            if ev.name == "job.hook" and ev.context.get("alias"):
                self.aliases[str(ev.context["alias"])] = ev.job_id
            if ev.name == "node.state":
                self.node_notes[str(ev.context["node"])] = {
                    "by": ev.context.get("by", ""), "reason": ev.context.get("reason", ""),
                    "time": ev.time}
        outstanding = self.sched.outstanding()
        log.info("replayed %d events: %d jobs tracked, %d actions to re-issue",
                 len(events), len(self.sched.records), len(outstanding))
        self.registry.starting()  # fence: what an earlier rsad left running is killed
        self._dispatch(outstanding)

    def _learn_facts(self, ev: Event) -> None:
        if not (ev.name == "action.milestone" or (
                ev.name == "action.outcome" and ev.context.get("result") == "ok")):
            return
        detail = ev.context.get("detail") or {}
        for key in FACT_KEYS:
            if key in detail:
                self.facts.setdefault(ev.job_id, {})[key] = detail[key]

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
        """Handle queued requests; wait up to ``timeout`` for the first one.

        Requests that only change state (outcomes, hooks, commands, node states) are
        handled in groups: their decisions are written in ONE store transaction before
        any of their actions runs or any caller is answered (group commit), so a burst of
        outcomes or hook events costs one fsync, not one each. A ``call`` (an API read)
        is handled alone, after everything before it is committed.
        """
        try:
            req: Request | None = (self.inbox.get(timeout=timeout) if timeout > 0
                                   else self.inbox.get_nowait())
        except queue.Empty:
            return 0
        handled = 0
        while req is not None:
            if req.kind not in GROUPED:
                self._handle(req)
                handled += 1
                req = self._next_request()
                continue
            group: list[Request] = []
            while req is not None and req.kind in GROUPED and len(group) < MAX_GROUP:
                group.append(req)
                req = self._next_request()
            self._handle_group(group)
            handled += len(group)
        return handled

    def _next_request(self) -> Request | None:
        try:
            return self.inbox.get_nowait()
        except queue.Empty:
            return None

    def _handle_group(self, group: list[Request]) -> None:
        self._group = Decision()
        answers: list[tuple[Request, bool, Any]] = []
        try:
            for req in group:
                try:
                    answers.append((req, True, self._handle_one(req)))
                except Exception as e:  # answered to its caller, never fatal to the loop
                    answers.append((req, False, e))
        finally:
            decision, self._group = self._group, None
        try:
            self._commit(decision)
        except Exception as e:
            log.exception("cannot commit %d requests' decisions", len(group))
            answers = [(r, False, e) for r, _, _ in answers]
        for req, ok, value in answers:
            if req.reply is None:
                if not ok:
                    log.error("request %s failed: %s", req.kind, value, exc_info=value)
            elif ok:
                req.reply.set_result(value)
            else:
                req.reply.set_exception(value)

    def poll(self) -> None:
        """One cycle: read the whole queue once and let the core decide."""
        started = self.clock()
        try:
            if self.script_source != "scontrol":
                self._poll_incremental(started)
                return
            rows = merge_hetjobs(self.slurm.queue())
        except SlurmError as e:
            if self.slurm_ok:
                log.error("cannot read the Slurm queue: %s", e)
            self.slurm_ok = False
            self._last_poll = self.clock()
            return
        self.slurm_ok = True
        if self.native is not None:
            self.native.due(started)  # every row is observed on this path
        self._note_holds(rows, {r.job_id for r in rows})
        obs = [o for o in (self._observation(r, started) for r in rows) if o is not None]
        now = self.clock()
        fresh = {j for j, t in self._hook_seen.items() if t > started}
        dec = self.sched.observe(obs, now, complete=not fresh)
        self._commit(dec)
        self._hold_requeued(dec)
        self._check_holds()
        self._prune_specs(rows)
        self._forget(now, {r.job_id for r in rows} | fresh)
        self._maybe_snapshot()
        self._write_pools()
        self._last_poll = now
        self.last_cycle_seconds = self.clock() - started
        if self.metrics is not None:
            self.metrics.cycle.observe(self.last_cycle_seconds)

    def _poll_incremental(self, started: float) -> None:
        """The cycle when job_submit.lua marks RSA jobs: only jobs carrying an ``rsa1:``
        admin_comment can matter, and only the ones that changed since the last cycle are
        observed. With the CLI backend that is a substring test per squeue line, and only
        the changed lines are parsed (a 100k-job queue costs little); other backends give
        rows, compared the same way."""
        queue_text = getattr(self.slurm, "queue_text", None)
        prev = self._prev_lines
        lines: dict[str, object] = {}
        changed: list[str] = []
        waiting = self.sched._waiting
        if self.native is not None:  # set up by Slurm since the last poll, grace ended
            waiting = waiting | self.native.due(started)
        # a heterogeneous job's components (N+K): only the leader carries the marker, all
        # are needed (slurm.parse.merge_hetjobs); when one changed, all are parsed
        hets: set[str] = set()
        if queue_text is not None:
            marker = "|" + ADMIN_COMMENT_PREFIX
            for line in queue_text().split("\n"):
                if marker not in line and "+" not in line:
                    continue  # the common case, two substring tests: not split at all
                jid = line.split("|", 1)[0]
                het = "+" in jid
                if not het and marker not in line:
                    continue
                lines[jid] = line
                key = jid.split("+", 1)[0]
                if prev.get(jid) != line or key in waiting:
                    if het:
                        hets.add(key)
                    else:
                        changed.append(line)
            changed += [str(v) for j, v in lines.items()
                        if "+" in j and j.split("+", 1)[0] in hets]
            rows = merge_hetjobs(parse_queue("\n".join(changed))) if changed else []
        else:
            rows = []
            for row in self.slurm.queue():
                het = "+" in row.job_id
                if not het and not (row.admin_comment or "").startswith(
                        ADMIN_COMMENT_PREFIX):
                    continue
                lines[row.job_id] = row
                key = row.job_id.split("+", 1)[0]
                if prev.get(row.job_id) != row or key in waiting:
                    if het:
                        hets.add(key)
                    else:
                        rows.append(row)
            rows = merge_hetjobs(rows + [r for j, r in lines.items() if "+" in j and isinstance(
                r, QueueRow) and j.split("+", 1)[0] in hets])
        keys = {j.split("+", 1)[0] for j in lines}
        rows, later = defer_first_sights(rows, self.sched.records, waiting,
                                         self.first_sights_per_cycle)
        if later:  # seen as changed again next cycle
            lines = {j: v for j, v in lines.items() if j not in later}
        self._catching_up = bool(later)
        self._prev_lines = lines
        self.slurm_ok = True
        self._note_holds(rows, keys)
        obs = [o for o in (self._observation(r, started) for r in rows) if o is not None]
        now = self.clock()
        fresh = {j for j, t in self._hook_seen.items() if t > started}
        dec = self.sched.observe(obs, now, complete=False, present=keys | fresh)
        self._commit(dec)
        self._hold_requeued(dec)
        self._check_holds()
        self._forget(now, keys | fresh)
        self._maybe_snapshot()
        self._write_pools()
        self._last_poll = now
        self.last_cycle_seconds = self.clock() - started
        if self.metrics is not None:
            self.metrics.cycle.observe(self.last_cycle_seconds)

    def _write_pools(self) -> None:
        """Native mode: the free RSA capacity per tier for slurm_bb_pools."""
        if self.native is None:
            return
        pool = self.sched.pool
        self.native.write_pools((n.tier.value, n.capacity, pool.state(n.name),
                                 pool.owner(n.name)) for n in pool.nodes())

    def tendable(self) -> list[tuple[str, Mapping[str, Any]]]:
        """(job, mount spec) of every RAMDISK no step is working on (loop thread): the
        RAMDISK tender checks these (core.states.TENDED)."""
        busy = {r.action.job_id for r in self.running.values()}
        out: list[tuple[str, Mapping[str, Any]]] = []
        for job, rec in self.sched.records.items():
            mount = self.facts.get(job, {}).get("mount")
            if mount and rec.rsa_state in TENDED and job not in busy:
                out.append((job, dict(mount)))
        return out

    def snapshot(self) -> int:
        """Write the state as of the newest committed event (loop thread: every event up
        to it is folded in); returns its seq."""
        seq = self.store.last_seq()
        data = {**self.sched.durable_state(), "facts": self.facts,
                "node_notes": self.node_notes, "debris": self.debris,
                "bb": self.native.to_json() if self.native is not None else {}}
        self.store.write_snapshot(seq, self.clock(), data)
        self._snap_seq = seq
        log.info("snapshot at event %d: %d jobs", seq, len(self.sched.records))
        return seq

    def _maybe_snapshot(self) -> None:
        """Write a snapshot once ``snapshot_every`` events, and at least as many events
        as there are jobs in memory, came after the last one. A snapshot costs about as
        much per job as the replay of an event (docs/benchmarks.md): so its cost is spread
        over at least as many events as it saves from a restart's replay, whatever the
        number of jobs (at 300k live jobs a snapshot every 10,000 events would cost more
        than the cycles that wrote them). Not in the first cycle after a start: that one
        sees every job of the queue at once, mostly first sights a restart replays
        cheaply; the next due cycle takes it. Nor while new jobs are still being taken on
        over several cycles (:func:`defer_first_sights`): one snapshot after them, not one
        of every size on the way."""
        if self._catching_up:
            return
        if self._first_cycle:
            self._first_cycle = False
            return
        due = max(self.snapshot_every, len(self.sched.records))
        if self.snapshot_every and self.store.last_seq() - self._snap_seq >= due:
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
            for table in (self.facts, self.progress, self._hook_seen, self._specs):
                table.pop(job, None)
        if self.native is not None:
            # and burst buffer jobs without RSA work, once Slurm no longer lists them
            idle = [j for j, bb in self.native.jobs.items() if j not in self.sched.records
                    and j not in present and now - bb.setup >= self.retention]
            self.native.forget([*gone, *idle])
        if gone and self.aliases:
            left = set(gone)
            self.aliases = {k: v for k, v in self.aliases.items() if v not in left}
        if gone:
            log.info("%d finished jobs left memory (retention %.0fs); their history stays "
                     "in the store", len(gone), self.retention)

    def _observation(self, row: QueueRow, poll_started: float) -> Observation | None:
        if self._hook_seen.get(row.job_id, 0.0) > poll_started:
            return None  # a hook told us something newer than this snapshot
        native = self.native
        if native is not None and not native.tracks(row.job_id) and \
                row.job_id not in self.sched.records:
            return None  # native mode: a job is the RSA's once Slurm sets its buffer up
        spec = self._spec_of(row)
        _, deadline = self._split_hold(row.admin_comment or "")
        if native is not None:
            # held by Slurm in stage-in (BurstBufferStageIn ...): on-deck, never demoted
            held = native.held(row.job_id, row.state, self.clock())
        else:
            held = (row.job_id in self._held and self._can_start.get(row.job_id, False)) or (
                row.reason == "BeginTime"
                and self.clock() - self._released.get(row.job_id, -1e18) < RELEASE_SETTLE)
        return Observation(job_id=row.job_id, user=row.user, state=row.state,
                           reason=row.reason, priority=row.priority,
                           compute_nodes=row.num_nodes, spec=spec,
                           hold_until=None if deadline is None else float(deadline),
                           held=held)

    # ---- the start hold (early start wait; daemon/holds.py) -----------------------------
    def _note_holds(self, rows: Iterable[QueueRow], present: set[str]) -> None:
        """Learn which jobs Slurm holds for the RSA (pending ``BeginTime`` with the hold
        marker, deadline ahead) from this cycle's rows; judge the new ones once: could
        they start now (daemon/holds.py ``startable``)?"""
        now = self.clock()
        new: list[QueueRow] = []
        for row in rows:
            spec_text, deadline = self._split_hold(row.admin_comment or "")
            if deadline is not None and row.state == "PENDING" and \
                    row.reason == "BeginTime" and deadline > now:
                if row.job_id not in self._held:
                    new.append(row)
                self._held[row.job_id] = (float(deadline), spec_text)
            else:
                self._forget_hold(row.job_id)
        for job in [j for j in self._held if j not in present]:
            self._forget_hold(job)
        for job in [j for j, t in self._released.items() if now - t >= RELEASE_SETTLE]:
            del self._released[job]
        if not new:
            return
        new.sort(key=lambda r: (-r.priority, r.job_id))
        try:
            idle = self.slurm.idle_nodes()
            mine = {r.job_id for r in new}
            ahead = [(parts, nodes) for job, nodes, reason, parts in self.slurm.pending_jobs()
                     if reason in ELIGIBLE_REASONS and job.split("+", 1)[0] not in mine]
            judged = [(r.job_id, self.slurm.job_fields(r.job_id).get("Partition", ""),
                       r.num_nodes) for r in new]
            fits = startable(judged, idle, ahead)
        except SlurmError as e:  # unsure: release (the job then behaves as unheld)
            log.warning("cannot tell whether held jobs could start now: %s", e)
            fits = set()
        for r in new:
            rec = self.sched.records.get(r.job_id)
            # judged before an rsad restart (this memory is not kept): its RAMDISK is on
            # its way, so it was judged able to start; judging it busy now would read as
            # a demotion and tear the RAMDISK down
            going = rec is not None and rec.nodes != "" and rec.job_state is JobState.ON_DECK
            self._can_start[r.job_id] = r.job_id in fits or going
            log.info("job %s: held by Slurm for the RSA until %s; %s", r.job_id,
                     self._held[r.job_id][0], "it could start now: staging while held"
                     if r.job_id in fits else "the cluster is busy: releasing the hold")

    def _forget_hold(self, job: str) -> None:
        if job not in self._held and job not in self._can_start and \
                job not in self._releasing and job not in self._told_held:
            return  # most jobs, every time their line changes
        self._held.pop(job, None)
        self._can_start.pop(job, None)
        self._releasing.pop(job, None)
        self._told_held.discard(job)

    def _check_holds(self) -> None:
        """Release every held job whose RAMDISK is ready, that the RSA will not serve, or
        that could not start now anyway; tell the others' users they are held."""
        if not self._held:
            return
        now = self.clock()
        for job, (deadline, spec_text) in list(self._held.items()):
            if job not in self._can_start or now - self._releasing.get(job, -1e18) < 30:
                continue
            rec = self.sched.records.get(job)
            verdict = hold_verdict(job, rec, self._can_start[job])
            if verdict is None:
                if job not in self._told_held:
                    self._told_held.add(job)
                    self._tell(job, held_message(deadline))
                continue
            self._releasing[job] = now
            if self._can_start[job]:
                self._released[job] = now
            if rec is not None:
                self._commit(Decision(events=[Event(now, job, "job.hold-released", {
                    "deadline": deadline, "why": verdict.message})]))
            self.urgent.submit(self._release_hold, job, spec_text, verdict.message)

    def _hold_requeued(self, dec: Decision) -> None:
        """A requeued job under early start wait is held again, as at submission: on an
        idle cluster it would start before its first run's output is staged and its
        RAMDISK built again (docs/architecture.md, "Holding a job ...")."""
        for ev in dec.events:
            if ev.name != "job.state" or ev.context.get("from") not in LEFT_QUEUE:
                continue
            if ev.context.get("to") not in PENDING:
                continue
            rec = self.sched.records.get(ev.job_id)
            if rec is None or ev.job_id in self._held:
                continue
            early = rec.spec.early_start or self.sched.policy.early_start
            if early.value != "wait":
                continue
            self.urgent.submit(self._hold, ev.job_id, int(self.sched.policy.wait_timeout))

    def _hold(self, job: str, seconds: int) -> None:
        """Worker: hold ``job`` for ``seconds`` (its admin_comment gets the marker)."""
        try:
            # (scontrol show job -o cuts AdminComment at a " hold=" marker: either way
            # this is the spec's part)
            spec_text, _ = split_hold(self.slurm.job_fields(job).get("AdminComment", ""))
            deadline = int(time.time()) + seconds
            self.slurm.hold(job, seconds, f"{spec_text}{HOLD_MARK}{deadline}")
        except SlurmError as e:
            log.warning("job %s: requeued, but could not hold it for its RAMDISK: %s", job,
                        e)
            return
        log.info("job %s: requeued: held for its RAMDISK until %d", job, deadline)

    def _release_hold(self, job: str, spec_text: str, message: str) -> None:
        """Worker: begin time now, hold marker removed; then the user's comment."""
        try:
            self.slurm.release_hold(job, spec_text)
        except SlurmError as e:  # tried again in 30 s while Slurm still holds it
            log.warning("job %s: could not release its start hold: %s", job, e)
            return
        log.info("job %s: start hold released: %s", job, message)
        try:
            self.slurm.set_comment(job, message[:250])
        except SlurmError as e:
            log.info("job %s: could not set the comment: %s", job, e)

    def _spec_of(self, row: QueueRow) -> DirectiveSpec | None:
        if row.job_id in self.sched.records:
            return None  # already tracked: the record holds the spec
        spec = self._spec_of_job(row)
        array, sep, task = row.job_id.partition("_")
        if spec is not None and sep and task.isdigit():
            try:  # %A / %a in an array task's paths
                return spec.for_array_task(array, task)
            except ValueError as e:
                log.error("job %s: %s", row.job_id, e)
                return None
        return spec

    def _split_hold(self, comment: str) -> tuple[str, int | None]:
        """``split_hold`` of an admin_comment, once per distinct comment: all tasks of an
        array share theirs, and the first cycle after a start reads every RSA job's."""
        got = self._holds_split.get(comment)
        if got is None:
            if len(self._holds_split) > 100_000:
                self._holds_split.clear()
            got = self._holds_split[comment] = split_hold(comment)
        return got

    def _spec_of_job(self, row: QueueRow) -> DirectiveSpec | None:
        comment = row.admin_comment or ""
        if comment.startswith(ADMIN_COMMENT_PREFIX):
            # Pending jobs keep their comment for many cycles: parse each distinct one once.
            if comment in self._comment_specs:
                return self._comment_specs[comment]
            try:
                parsed: DirectiveSpec | None = DirectiveSpec.from_admin_comment(
                    split_hold(comment)[0])
            except ValueError as e:
                log.error("job %s: unreadable RSA admin_comment: %s", row.job_id, e)
                parsed = None
            if len(self._comment_specs) > 100_000:
                self._comment_specs.clear()
            self._comment_specs[comment] = parsed
            return parsed
        if self.script_source != "scontrol":
            return None
        # Without job_submit.lua: read the script once, only when the job matters
        # (on-deck or started), never for the whole queue; read and parsed by a worker,
        # never on this thread (a huge script must not stall the loop or the watchdog).
        if row.job_id in self._specs:
            return self._specs[row.job_id]
        if not (row.state == "RUNNING" or (row.state == "PENDING" and
                                           row.reason == "Resources") or (
                self.native is not None and self.native.tracks(row.job_id))):
            return None
        now = time.monotonic()
        job = row.job_id
        if job not in self._parsing:
            self._parsing[job] = (self._parser.submit(self._read_spec, job), now)
            return None
        fut, started = self._parsing[job]
        if not fut.done():
            if now - started > self.parse_timeout:
                del self._parsing[job]
                self._specs[job] = None
                log.error("job %s: reading its #RSA_ directives took over %.0fs: ignored",
                          job, self.parse_timeout)
                self._tell(job, "RSA: directives ignored: the batch script took too long "
                                "to read; shorten it or move the #RSA_ lines to its top")
            return None
        del self._parsing[job]
        spec, told = fut.result()
        if told:
            self._tell(job, told)
        if spec is _UNREAD:
            return None
        self._specs[job] = spec
        return cast("DirectiveSpec | None", spec)

    def _read_spec(self, job: str) -> tuple[Any, str]:
        """Worker thread: the job's directives (None: none), and what to tell the user.
        ``_UNREAD``: the script could not be read now (tried again next cycle)."""
        try:
            spec: DirectiveSpec | None = parse_directives(self.slurm.batch_script(job),
                                                          f"job {job}")
        except DirectiveErrors as e:
            log.warning("job %s: invalid #RSA_ directives, ignored: %s", job, e)
            return None, f"RSA: directives ignored: {e}"
        except SlurmError as e:
            log.error("job %s: cannot read the batch script: %s", job, e)
            return _UNREAD, ""
        return (None if spec == DirectiveSpec() else spec), ""

    def _prune_specs(self, rows: Iterable[QueueRow]) -> None:
        """Forget the scripts read for jobs that left the queue, and for jobs now tracked
        (their record holds the spec): the cache is as large as the queue's running and
        on-deck jobs, not every job rsad ever read."""
        queued = {r.job_id for r in rows}
        for job in [j for j in self._parsing if j not in queued]:
            del self._parsing[job]  # left the queue while its script was read
        if not self._specs:
            return
        records = self.sched.records
        self._specs = {j: spec for j, spec in self._specs.items()
                       if j in queued and j not in records}

    # ---- requests from other threads ----------------------------------------------------
    def submit(self, kind: str, payload: Any, *, wait: bool = False,
               timeout: float = 10.0) -> Any:
        """Queue a request for the loop thread; optionally wait for its answer."""
        reply: Future[Any] | None = Future() if wait else None
        self.inbox.put(Request(kind, payload, reply=reply))
        return reply.result(timeout=timeout) if reply else None

    def _handle(self, req: Request) -> None:
        try:
            result = self._handle_one(req)
        except Exception as e:  # answered to the caller, never fatal to the loop
            if req.reply is not None:
                req.reply.set_exception(e)
            else:
                log.exception("request %s failed", req.kind)
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
                self._learn_facts(ev)
            self._commit(dec)
            left = [dict(x) for x in outcome.detail.get("left_on") or ()]
            if left:
                self._left_on(left, now)
            silent = [str(n) for n in outcome.detail.get("silent") or ()]
            if silent:
                self._unconfirmed(outcome.job_id, silent, now)
            if outcome.job_id in self._held:
                self._check_holds()
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
            self._learn_facts(ev)
            return {"recorded": True}
        if req.kind == "command":
            job, trigger, by, operator = req.payload
            dec = self.sched.command(job, Trigger(trigger), now, by=by, operator=operator)
            self._commit(dec)
            if job in self._held:
                self._check_holds()
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
        if req.kind == "call":
            fn: Callable[[], Any] = req.payload
            return fn()
        raise ValueError(f"unknown request {req.kind!r}")

    def _hook(self, payload: Mapping[str, Any], received: float) -> dict[str, Any]:
        """PrologSlurmctld (job starting) / EpilogSlurmctld (job ended) from slurmctld."""
        kind = str(payload["hook"])
        job = str(payload["job_id"])
        state = {"prolog_slurmctld": "RUNNING", "epilog_slurmctld": "COMPLETED"}.get(kind)
        if state is None:
            raise ValueError(f"unknown hook {kind!r}")
        if kind == "epilog_slurmctld" and _failed(payload.get("exit_code")):
            state = "FAILED"  # SLURM_JOB_EXIT_CODE is the batch script's wait status
        self._hook_seen[job] = received
        rec = self.sched.records.get(job)
        if rec is None:
            return {"job_id": job, "tracked": False}
        if payload.get("alias"):
            self.aliases[str(payload["alias"])] = job
        if kind == "prolog_slurmctld" and payload.get("nodes"):
            side = nodeside_of(self.registry)
            if side is not None:  # a hetjob's steps wait for every component's nodes
                side.expect(job, str(payload["nodes"]))
        if str(payload.get("het_job_offset") or "0") != "0":
            # a heterogeneous job's other component: it starts and ends with the leader,
            # whose hooks say so (its batch script's exit code is the leader's)
            return {"job_id": job, "tracked": True, "rsa_state": rec.rsa_state.value}
        obs = Observation(job_id=job, user=rec.user, state=state, reason="None",
                          priority=rec.priority, compute_nodes=rec.compute_nodes)
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
        answer: Answer
        if hook == "setup":
            events = native.setup(job, now, {k: str(payload[k]) for k in (
                "uid", "gid", "pool", "size", "alias") if k in payload})
            if events:
                self._commit(Decision(events=events))
            if rec is None or rec.job_state is not JobState.FINISHED:
                self._last_poll = 0.0  # read the queue now: the job is the RSA's
            answer = Answer("done", "set up")
        elif hook == "data_in":
            bb = native.jobs.get(job)
            seen = bb is not None and self._last_poll > bb.setup and \
                job not in native.fresh and job not in self._parsing
            if bb is None:  # rsad lost the setup (its state was reset): take it now
                self._commit(Decision(events=native.setup(job, now, {})))
                self._last_poll = 0.0
            answer = answer_data_in(rec, seen)
        elif hook == "real_size":
            size = 0
            if rec is not None and rec.nodes:
                caps = {n.name: n.capacity for n in self.sched.pool.nodes()}
                size = sum(caps.get(n, 0) for n in NodeSet(rec.nodes))
            answer = Answer("done", str(size))
        elif hook in ("pre_run", "post_run"):
            answer = Answer("done", rec.rsa_state.value if rec else "not an RSA job")
        elif hook == "data_out":
            answer = answer_data_out(rec, native.jobs.get(job))
        elif hook == "teardown":
            hurry = str(payload.get("hurry", "false")) == "true"
            if rec is not None and rec.job_state is not JobState.FINISHED and \
                    rec.rsa_state not in TERMINAL:
                # still pending (a restarted slurmctld tears down, then sets up again):
                # kept bb_grace seconds, then torn down as a demotion would
                events = native.teardown_pending(job, now, hurry)
                if events:
                    self._commit(Decision(events=events))
                answer = Answer("done", f"kept {native.grace:.0f}s for a new setup, then "
                                        "torn down unless the job starts")
            else:
                answer = answer_teardown(rec)
        else:
            raise ValueError(f"unknown burst buffer hook {hook!r}")
        return {"job_id": job, **answer.to_json(),
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
        touched = {e.job_id for e in dec.events if not e.job_id.startswith("@")}
        rows = [self._row(self.sched.records[j]) for j in sorted(touched)
                if j in self.sched.records]
        if dec.events:
            self.store.append(dec.events, rows)
        if self.native is not None:
            for ev in dec.events:
                if ev.name == "rsa.transition":
                    self.native.learn(ev)
        for ev in dec.events:
            if ev.name == "rsa.transition":
                log.info("job %s: %s -> %s on %s", ev.job_id, ev.context.get("from"),
                         ev.context.get("to"), ev.context.get("trigger"))
        self._dispatch(dec.actions)

    def _row(self, rec: JobRecord) -> JobRow:
        data = rec.to_json()
        data["progress"] = self.progress.get(rec.job_id)
        return JobRow(rec.job_id, rec.user, data["job_state"] or "", data["rsa_state"],
                      rec.since, data)

    def _dispatch(self, actions: Iterable[Action]) -> None:
        for action in actions:
            if action.kind is ActionKind.CANCEL:
                target = self.running.get(action.args_as(CancelArgs).target)
                if target is not None:
                    target.cancel.cancel(f"superseded ({action.job_id})")
            elif action.kind is ActionKind.ALERT:
                self._alert(action.job_id, action.args_as(AlertArgs).message)
            elif action.kind is ActionKind.TELL_USER:
                self._tell(action.job_id, f"RSA: {action.args_as(TellUserArgs).message}")
            elif action.kind in (ActionKind.ALLOCATE, ActionKind.RELEASE):
                log.info("job %s: %s %s", action.job_id, action.kind.value,
                         action.args_as(OnNodes).nodes)
            elif action.kind is ActionKind.UNLOCK:
                self._start(action, tracked=False)
            elif action.tracked:
                self._start(action, tracked=True)

    def _start(self, action: Action, *, tracked: bool) -> None:
        if action.id in self.running:
            return  # already in flight (idempotent re-dispatch)
        cancel = CancelToken()
        job = action.job_id

        def progress(data: Mapping[str, Any]) -> None:
            self.inbox.put(Request("progress", (job, {**data, "action": action.id})))

        def milestone(data: Mapping[str, Any]) -> None:
            self.submit("milestone", (job, action.id, dict(data)), wait=True, timeout=60)

        rec = self.sched.records.get(job)
        down: frozenset[str] = frozenset()
        if action.kind is ActionKind.DESTROY_FS:
            pool = self.sched.pool
            down = frozenset(n for n in action.args_as(DestroyFsArgs).nodes
                             if pool.state(n) is NodeState.DOWN)
        ctx = ActionContext(action=action, cancel=cancel, progress=progress,
                            facts=dict(self.facts.get(job, {})), milestone=milestone,
                            job_ended=rec is not None and rec.job_state is JobState.FINISHED,
                            down=down)
        lane = self.workers if action.kind in BULK else self.urgent
        run: Callable[[ActionContext], Outcome] = self.registry.run
        if action.kind is ActionKind.DESTROY_FS:
            # a step of the job still winding down (a stage-in cancelled by a demotion)
            # may start one more command as the user on the RSA nodes, which makes the
            # job's cgroup again after the teardown reaped it (seen in the chaos run):
            # the teardown waits for it (bounded; the other lane, so no deadlock)
            before = [r.future for r in self.running.values()
                      if r.action.job_id == job and r.action.id != action.id]
            if before:
                def run(c: ActionContext, before: list[Future[Outcome]] = before) -> Outcome:
                    wait_futures(before, timeout=SIBLING_WAIT)
                    return self.registry.run(c)
        future = lane.submit(run, ctx)
        if tracked:
            self.running[action.id] = Running(action, cancel, future, self.clock())
            future.add_done_callback(lambda f: self.inbox.put(Request("outcome", f.result())))

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

    def _alert(self, job_id: str, msg: str) -> None:
        log.warning("ALERT job %s: %s", job_id, msg)
        if self.metrics is not None:
            self.metrics.alerts.inc()
        self.alerts.append({"time": self.clock(), "job_id": job_id, "message": msg})
        del self.alerts[:-100]

    def _unconfirmed(self, job_id: str, nodes: list[str], now: float) -> None:
        """Compute nodes of ``job_id`` that did not confirm a release of its RAMDISK: the
        RAMDISK is kept (the step is retried), the nodes are drained in Slurm with the
        reason (no new job lands on a node whose mounts are in doubt) and the operator is
        alerted. Resume them with ``scontrol update NodeName=... State=RESUME`` once
        checked."""
        reason = f"rsa: did not confirm release of job {job_id}'s RAMDISK"
        self._commit(Decision(events=[Event(now, job_id, "compute.unconfirmed", {
            "nodes": nodes, "drain": reason})]))

        def work() -> None:
            try:
                self.slurm.drain_nodes(nodes, reason)
                what = "drained"
            except SlurmError as e:
                what = f"could not be drained ({e})"
            self.inbox.put(Request("call", lambda: self._alert(
                job_id, f"compute node(s) {', '.join(nodes)} did not confirm the release "
                        f"of the job's RAMDISK (kept; retried): {what}; check them, then "
                        "scontrol update NodeName=... State=RESUME")))

        self.urgent.submit(work)

    def _tell(self, job_id: str, text: str) -> None:
        def work() -> None:
            try:
                self.slurm.set_comment(job_id, text[:250])
            except SlurmError as e:
                log.info("job %s: could not set the comment: %s", job_id, e)

        self.urgent.submit(work)

    def shutdown(self, timeout: float = 30.0) -> None:
        """Stop workers: running transfers are cancelled and resume after restart."""
        for run in self.running.values():
            run.cancel.cancel("rsad stopping")
        self.workers.shutdown(wait=True, cancel_futures=True)
        self.urgent.shutdown(wait=True, cancel_futures=True)
        self._parser.shutdown(wait=False, cancel_futures=True)

    # ---- reads for the API (loop thread via "call") ---------------------------------------
    def job_view(self, rec: JobRecord) -> dict[str, Any]:
        view = rec.to_json()
        view["progress"] = self.progress.get(rec.job_id)
        mount = self.facts.get(rec.job_id, {}).get("mount")
        view["ramdisk"] = mount if rec.nodes else None  # where it lives while held
        view["running"] = [r.action.id for r in self.running.values()
                           if r.action.job_id == rec.job_id]
        return view

    def jobs_view(self, user: str | None = None) -> list[dict[str, Any]]:
        return [self.job_view(r) for r in sorted(self.sched.records.values(),
                                                 key=lambda r: r.job_id)
                if user is None or r.user == user]

    def status_view(self) -> dict[str, Any]:
        pool = self.sched.pool
        nodes = []
        for node in pool.nodes():
            note = self.node_notes.get(node.name, {})
            state = pool.state(node.name).value
            nodes.append({"name": node.name, "tier": node.tier.value,
                          "capacity": node.capacity, "state": state,
                          "job": pool.owner(node.name),
                          "reason": note.get("reason", "") if state != "up" else "",
                          "by": note.get("by", "") if state != "up" else ""})
        by_state: dict[str, int] = {}
        for rec in self.sched.records.values():
            by_state[rec.rsa_state.value] = by_state.get(rec.rsa_state.value, 0) + 1
        return {"nodes": nodes, "jobs_by_rsa_state": by_state,
                "alerts": self.alerts[-20:], "slurm_ok": self.slurm_ok,
                "last_cycle_seconds": self.last_cycle_seconds,
                "running_actions": len(self.running),
                "on_deck": [r.job_id for r in self.sched.records.values()
                            if r.job_state is JobState.ON_DECK]}


__all__ = ["CommandRefused", "Daemon"]
