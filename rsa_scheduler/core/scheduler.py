"""The RSA scheduler core: every tracked job's machine plus the shared RSA node pool.

Owns :class:`Observation` (one job as Slurm reports it), :class:`Scheduler` (observe a
queue snapshot, take action outcomes and user/operator commands, fire timers — each call
takes ``now`` and returns a :class:`Decision` of events to log and actions to run) and
replay of the event log into a scheduler. Pure; no I/O.

A decision step costs O(changed jobs) after one pass over the snapshot: jobs whose Slurm
(state, reason) did not change and that have nothing due are skipped with one dict lookup,
so a 100k-job queue is classified in tens of milliseconds.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from itertools import filterfalse
from typing import Any

from rsa_scheduler.core.actions import Action, Outcome
from rsa_scheduler.core.admission import rsa_free, rsa_need
from rsa_scheduler.core.allocator import Pool
from rsa_scheduler.core.directives import DirectiveSpec
from rsa_scheduler.core.events import POOL, Event
from rsa_scheduler.core.machine import (
    JobRecord,
    Step,
    apply_event,
    fire,
    new_record_event,
    owed_unlock,
    settle,
    unlock_outcome,
)
from rsa_scheduler.core.policy import NodeState, StagingPolicy
from rsa_scheduler.core.rules import OUTCOME_TRIGGERS, InvalidTransition
from rsa_scheduler.core.share import FairShare
from rsa_scheduler.core.states import (
    AWAITING_NODES,
    HOLDS_USER_DATA,
    IDLE,
    OPERATOR_COMMANDS,
    PREPARING,
    READY,
    SLURM_END_STATES,
    TERMINAL,
    USER_COMMANDS,
    JobState,
    Trigger,
    derive_job_state,
)
from rsa_scheduler.errors import RsaError

POOL_STREAM = POOL  # event stream of RSA nodes and the whole RSA (not a job)


@dataclass(frozen=True, slots=True)
class Observation:
    """One job as Slurm reports it in one poll (squeue/scontrol) or hook event.

    ``spec`` is None for a job without ``#RSA_*`` directives: such jobs are ignored
    unless already tracked. ``state`` is Slurm's job state string (``PENDING``,
    ``RUNNING``, ...); ``reason`` its pending reason.
    """

    job_id: str
    user: str
    state: str
    reason: str = ""
    priority: int = 0
    compute_nodes: int = 1
    spec: DirectiveSpec | None = None
    #: early start `wait`: Slurm holds the job (begin time) for the RSA until this time
    #: (its admin_comment's hold marker); None: no hold
    hold_until: float | None = None
    #: the hold counts as on-deck: the job could start now, it waits only for the RSA
    #: (rsad releases a hold that does not: the job then queues as any other)
    held: bool = False
    #: who told: "" for Slurm's queue (its own record of the job), else the hook whose
    #: news this is (:meth:`heard`), whose ``state`` is only what the news implies
    by: str = ""
    #: where and how long it asks to run (squeue's Partition and TimeLimit); "" when the
    #: observation does not say (a hook's): a change ends a lock-in (issue 39)
    partition: str = ""
    time_limit: str = ""
    #: Slurm's identity of the job behind the id (squeue's SubmitTime and RestartCnt):
    #: "" when the observation does not say (a hook's). See :func:`another_job`
    submitted: str = ""
    restarts: int = 0
    #: the job's Slurm account (squeue's); "" when the observation does not say: limits
    #: per account count it (core.limits)
    account: str = ""

    def changes(self, prev: Observation | None) -> str:
        """What changed since ``prev`` that a lock-in depends on, in words ("" if
        nothing, or if either observation does not say)."""
        if prev is None:
            return ""
        said = []
        if prev.partition and self.partition and prev.partition != self.partition:
            said.append(f"partition {prev.partition} -> {self.partition}")
        if prev.time_limit and self.time_limit and prev.time_limit != self.time_limit:
            said.append(f"time limit {prev.time_limit} -> {self.time_limit}")
        # only growth: its RSA nodes were sized for fewer (Slurm's own estimate of a
        # pending job's node count may move too; a smaller job is served all the same)
        if self.compute_nodes > prev.compute_nodes:
            said.append(f"nodes {prev.compute_nodes} -> {self.compute_nodes}")
        return ", ".join(said)

    @classmethod
    def heard(cls, hook: Hook, rec: JobRecord, exit_code: object = None) -> Observation:
        """A hook event about the tracked job ``rec``, observed as what Slurm's queue
        shows for the same news. A start reads as ``RUNNING``/``None``, as squeue prints
        it: the next poll that shows it reads as no change. An end reads as ``COMPLETED``
        or ``FAILED`` from EpilogSlurmctld's exit code, which is no end state (a job its
        user cancelled ends with exit code 0): its reason is the hook's name, which no
        poll shows, so the next poll that lists the job ended gives Slurm's own end state
        (``end_state``, the ``job.ended`` event)."""
        if hook is Hook.STARTED:
            return cls(job_id=rec.job_id, user=rec.user, state="RUNNING", reason="None",
                       priority=rec.priority, compute_nodes=rec.compute_nodes,
                       by="PrologSlurmctld")
        said = end_text(exit_code)
        return cls(job_id=rec.job_id, user=rec.user, state=_HOOK_STATE[hook],
                   reason="EpilogSlurmctld", priority=rec.priority,
                   compute_nodes=rec.compute_nodes,
                   by=f"EpilogSlurmctld, {said}" if said else "EpilogSlurmctld")


def end_text(exit_code: object) -> str:
    """EpilogSlurmctld's ``SLURM_JOB_EXIT_CODE`` (the batch script's wait status, as
    wait(2) gives it) as the user knows it: ``exit code 3`` for 768, ``signal 9`` for 9
    (``sacct`` writes them 3:0 and 0:9); "" when the hook said nothing. Anything else is
    shown as it came."""
    text = str(exit_code or "").strip()
    if not text.isdigit():
        return f"exit code {text}" if text else ""
    status = int(text)
    if status & 0x7F:
        return f"signal {status & 0x7F}"
    return f"exit code {(status >> 8) & 0xFF}"


def another_job(rec: JobRecord, obs: Observation) -> bool:
    """True when ``obs`` shows another job than ``rec`` under its Slurm id: slurmctld lost
    its state (or its ids wrapped) and gave the id to a new job. Another user's job
    always is. The same user's is when Slurm's identity of the job differs: another
    submit time with no restart counted since (a requeue sets a new submit time too, but
    raises RestartCnt; a new job starts at 0). An observation, or a record, that does not
    say (a hook's news, a log from before these fields) is never another job by it.

    Seen in the lab (tests/data/slurm/squeue_requeue.txt): right after ``scontrol
    requeue`` the job is COMPLETING with RestartCnt raised and its old submit time, and
    only once PENDING has it a new one. So the record takes the restart count only
    together with a new submit time (:meth:`Scheduler._observe_one`): a count taken
    alone would make the requeue's new submit time look like a new job's."""
    if obs.user and rec.user != obs.user:
        return True
    return another_submission(rec, obs.submitted, obs.restarts)


def another_submission(rec: JobRecord, submitted: str, restarts: int) -> bool:
    """True when a job under ``rec``'s id, submitted at ``submitted`` (squeue's
    SubmitTime; "" if not known) and restarted ``restarts`` times, is not ``rec``'s job
    (whoever's it is): another submit time and no restart counted since."""
    if not submitted or not rec.submitted or submitted == rec.submitted:
        return False
    return restarts <= rec.restarts


class Hook(Enum):
    """What slurmctld's hooks say of a job: PrologSlurmctld, it starts; EpilogSlurmctld,
    it ended, and whether its batch script failed."""

    STARTED = "started"
    ENDED = "ended"
    FAILED = "failed"

    @classmethod
    def ended(cls, exit_code: object) -> Hook:
        """EpilogSlurmctld's news: FAILED when its ``SLURM_JOB_EXIT_CODE`` (the batch
        script's wait status: 768 is exit 3, 9 is SIGKILL) is not 0; unknown counts as
        success, as Slurm's COMPLETED does, and the next queue poll has the final word."""
        text = str(exit_code or "").strip()
        return cls.FAILED if text.isdigit() and int(text) != 0 else cls.ENDED


_HOOK_STATE = {Hook.STARTED: "RUNNING", Hook.ENDED: "COMPLETED", Hook.FAILED: "FAILED"}


@dataclass(slots=True)
class Decision:
    """Events to commit (before anything is executed) and actions to run after."""

    events: list[Event] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)

    def add(self, step: Step | Decision) -> None:
        self.events.extend(step.events)
        self.actions.extend(step.actions)


class StaleOutcome(RsaError):
    """An outcome for an action that is no longer outstanding (cancelled or re-issued)."""


class InvalidOutcome(RsaError, ValueError):
    """An executor reported a result its action kind cannot have (e.g. build-fs busy)."""


class CommandRefused(RsaError):
    """A user/operator command that is not allowed now; the message says why."""


class UnknownJob(CommandRefused):
    """A command for a job rsad does not track, or not the caller's: one answer for both."""


class Scheduler:
    """All tracked jobs and the RSA node pool."""

    def __init__(self, pool: Pool, policy: StagingPolicy) -> None:
        self.pool = pool
        self.policy = policy
        # what the machine allocates through: the pool within each user's / array's share
        self.records: dict[str, JobRecord] = {}
        self.share = FairShare(pool, lambda job: self.records[job].user, self.records)
        self._last_obs: dict[str, Observation] = {}  # job -> its last observation that counted
        self._waiting: set[str] = set()  # on-deck, waiting for free RSA nodes
        self._timed: set[str] = set()  # jobs with an armed timer
        # job ids Slurm now gives another job (another_job) while the RSA still holds
        # nodes for the earlier job of that id: observed every poll until that cycle ends
        self._displaced: set[str] = set()
        # job id -> (cycle, serial) of the earlier job of that id untracked (logged in
        # its job.untracked): the next record of the id goes on from them, also past a
        # job with no RSA work in between (no RAMDISK, action id or file name of two
        # jobs is the same: they are named after the job id and the cycle)
        self._untracked: dict[str, tuple[int, int]] = {}
        self._changed: dict[str, str] = {}  # locked-in job -> what changed in Slurm
        self.mode = ""  # the slurm.mode the log was last written in ("": not recorded)

    # ---- queries ----------------------------------------------------------------------
    def outstanding(self) -> list[Action]:
        """Tracked actions issued but not yet answered (re-issue these after a restart):
        each job's pending action and its restore after a lock-in (one not waiting for
        its retry timer)."""
        out = [r.pending for r in self.records.values() if r.pending is not None]
        out += [r.unlock for r in self.records.values() if r.unlock is not None
                and Trigger.UNLOCK_DUE.value not in r.timers]
        return out

    def next_timer(self) -> float | None:
        """Earliest armed timer, so the daemon knows when to wake up."""
        times = [t for j in self._timed for t in self.records[j].timers.values()]
        return min(times) if times else None

    @property
    def waiting(self) -> frozenset[str]:
        """The on-deck jobs waiting for free RSA nodes (a snapshot: ``tick`` retries their
        allocation, so rsad's incremental cycle observes them every poll), and the job
        ids another user's job took over while the earlier job's cycle ends."""
        return frozenset(self._waiting | self._displaced)

    @property
    def displaced(self) -> frozenset[str]:
        """Job ids Slurm gives another user's job now while their records still hold the
        earlier job's RSA nodes (its output is staged out first): no record is the new
        job's yet."""
        return frozenset(self._displaced)

    def has_waiting(self) -> bool:
        """True while an on-deck job waits for RSA nodes (or a job id is displaced):
        only then can a poll of an unchanged queue change anything (it retries the
        allocation)."""
        return bool(self._waiting or self._displaced)

    def rsa_free(self, judged: Container[str] = frozenset()) -> int:
        """RSA nodes free for a job held from now on, after the on-deck jobs already
        waiting for RSA nodes (core/admission.py: which held jobs wait for them) but those
        ``judged`` with it (after an rsad restart the held jobs waiting are judged again:
        :func:`admit` takes their nodes in turn, they must not be counted twice)."""
        records = self.records
        return rsa_free(self.pool, (records[j] for j in self._waiting
                                    if j in records and j not in judged),
                        bool(self.share.draining))

    def rsa_need(self, job_id: str, compute_nodes: int, spec: DirectiveSpec | None) -> int:
        """RSA nodes a job of ``compute_nodes`` with ``spec`` needs (0: none it could get)."""
        return rsa_need(self.pool, job_id, compute_nodes, spec)

    def next_wake(self, now: float, ticked_at: float | None = None) -> float | None:
        """Earliest time the core can act with no new input: an armed timer, or the end
        of a waiting on-deck job's hold-off (the on-deck settle time, the back-off after
        a failed RAMDISK build), when ``tick`` retries its allocation. A hold-off ending
        at ``now`` itself counts only if the last ``tick`` (``ticked_at``) was earlier."""
        records = self.records
        last = now if ticked_at is None else ticked_at
        times = [nb for j in self._waiting if (nb := records[j].not_before) >= now and nb > last]
        timer = self.next_timer()
        if timer is not None:
            times.append(timer)
        return min(times) if times else None

    # ---- inputs -----------------------------------------------------------------------
    def observe(self, snapshot: Iterable[Observation], now: float, *,
                complete: bool = True, present: set[str] | None = None) -> Decision:
        """Take one view of the Slurm queue.

        ``complete`` means the snapshot lists every job Slurm still knows: tracked jobs
        missing from it have finished (purged from the controller). ``present``, when
        given, is the set of job ids Slurm still knows while ``snapshot`` holds only the
        jobs that changed (rsad's incremental cycle): tracked jobs not in it have ended.
        """
        dec = Decision()
        seen: set[str] = set()
        changed: list[tuple[JobRecord, Observation | None]] = []
        obs: Observation | None
        # The per-job loop runs for every job in the queue (100k at a large centre): names
        # are bound locally and an unchanged job costs two lookups and two compares.
        records, last, waiting = self.records, self._last_obs, self._waiting
        get_record, get_last, seen_add = records.get, last.get, seen.add
        for obs in snapshot:
            jid = obs.job_id
            rec = get_record(jid)
            if rec is not None and (rec.superseded or another_job(rec, obs)):
                # the id names another job: Slurm lost its state (or its ids wrapped).
                # The earlier job is gone; the new one is never served with its record
                # (its user, directives, RAMDISK, messages)
                if not rec.superseded:
                    rec.superseded = True
                    dec.events.append(Event(now, jid, "job.updated", {
                        "superseded_by": obs.user, "submitted": obs.submitted,
                        "set": {"superseded": True}}))
                if rec.rsa_state not in IDLE:
                    self._displaced.add(jid)
                    seen_add(jid)
                    changed.append((rec, None))  # gone: its output is staged out first
                    continue
                dec.events.append(self._untrack(rec, obs, now))
                rec = None
            if rec is None:
                if obs.spec is None or not _has_work(obs.spec):
                    continue
                cycle, serial = self._untracked.pop(jid, (0, 0))
                rec = JobRecord(job_id=jid, user=obs.user, spec=obs.spec,
                                compute_nodes=obs.compute_nodes, priority=obs.priority,
                                since=now, submitted=obs.submitted, restarts=obs.restarts,
                                cycle=cycle, serial=serial, account=obs.account)
                records[jid] = rec
                dec.events.append(new_record_event(rec, now))
            seen_add(jid)  # only tracked jobs: the other 70-90% of a queue cost one lookup
            prev = get_last(jid)
            if prev is not None and prev.state == obs.state and prev.reason == obs.reason \
                    and prev.held == obs.held and prev.hold_until == obs.hold_until \
                    and prev.compute_nodes == obs.compute_nodes \
                    and (prev.partition, prev.time_limit) == (obs.partition, obs.time_limit) \
                    and (prev.submitted, prev.restarts) == (obs.submitted, obs.restarts) \
                    and prev.account == obs.account and jid not in waiting:
                continue
            if prev is not None and rec.rsa_state in READY:
                what = obs.changes(prev)
                if what:
                    self._changed[jid] = what
            last[jid] = obs
            changed.append((rec, obs))
        if present is not None:
            # the records not present, found in C: at 300k tracked jobs a Python loop over
            # every record was most of a steady step (bench/bench_core.py, changes form)
            for jid in filterfalse(present.__contains__, records):
                rec = records[jid]
                if jid not in seen and rec.job_state is not JobState.FINISHED:
                    changed.append((rec, None))
        elif complete and len(seen) != len(records):
            for jid, rec in records.items():
                if jid not in seen and rec.job_state is not JobState.FINISHED:
                    changed.append((rec, None))
        # Higher Slurm priority first: it gets RSA nodes first (then job id, for determinism).
        changed.sort(key=lambda ro: (-(ro[1].priority if ro[1] else ro[0].priority),
                                     job_sort_key(ro[0].job_id)))
        for rec, obs in changed:
            dec.add(self._observe_one(rec, obs, now))
        dec.add(self.tick(now, exclude={r.job_id for r, _ in changed}))
        return dec

    def _observe_one(self, rec: JobRecord, obs: Observation | None, now: float) -> Step:
        step = Step()
        state, reason = (obs.state, obs.reason) if obs else ("GONE", "")
        held = obs is not None and obs.held and state == "PENDING"
        # held for the RSA: on-deck in all but name (Slurm would start it now)
        job_state = JobState.ON_DECK if held else derive_job_state(rec.job_state, state,
                                                                    reason)
        updates: dict[str, object] = {}
        if job_state is not rec.job_state:
            updates["job_state"] = job_state._value_  # (.value is a slower property)
        if obs is not None and obs.hold_until != rec.hold_until:
            updates["hold_until"] = obs.hold_until
        if obs is not None and obs.submitted and obs.submitted != rec.submitted:
            # a requeue (another_job tells it from a new job of the id), or the first
            # poll that says, of a record from before these fields. The restart count
            # only with the submit time: Slurm raises it first (another_job)
            updates["submitted"] = obs.submitted
            updates["restarts"] = obs.restarts
        if obs is not None and obs.priority != rec.priority:
            updates["priority"] = obs.priority
        if obs is not None and obs.account and obs.account != rec.account:
            updates["account"] = obs.account
        if obs is not None and obs.compute_nodes != rec.compute_nodes and \
                rec.rsa_state in AWAITING_NODES | READY:
            updates["compute_nodes"] = obs.compute_nodes
        started = job_state is JobState.RUNNING and rec.job_state is not JobState.RUNNING
        if started and rec.rsa_state in HOLDS_USER_DATA:
            # a new run while the RAMDISK holds the earlier run's data (its rerun released
            # by its user, or not held: quarantined): whatever becomes of that RAMDISK (a
            # rescue, before or after this start) is the earlier run's, never this run's
            # (rsa wait, dependents). rescue_to stays: a retry of the rescue reads it
            if not rec.rerun_started:
                updates["rerun_started"] = True
        elif started and (rec.rescue_to or rec.rerun_started):
            # a new run, the rescue over: this run's output goes to DATA_OUT; the earlier
            # run's rescued output no longer holds it (daemon/holds.py rerun_rescued) nor
            # reads as its own
            updates["rescue_to"] = ""
            updates["rerun_started"] = False
        wait = self.policy.on_deck_settle
        not_before: float | None = None
        if wait and not held and job_state is JobState.ON_DECK \
                and rec.job_state is not JobState.ON_DECK \
                and rec.rsa_state in IDLE:
            # on-deck only from now: allocate if it still is after the settle time
            not_before = updates["not_before"] = max(rec.not_before, now + wait)
        if job_state is JobState.FINISHED:
            end = state.split()[0].rstrip("+").upper() if obs is not None and not obs.by \
                else ""
            if end in SLURM_END_STATES and end != rec.end_state:
                # Slurm's own record of how the job ended (a hook's exit code is none)
                updates["end_state"] = end
        elif rec.end_state:  # requeued: this run has not ended
            updates["end_state"] = ""
        if "job_state" in updates:
            ctx: dict[str, object] = {
                "from": rec.job_state._value_ if rec.job_state else None,
                "to": job_state._value_}
            if obs is not None and obs.by:
                ctx["by"] = obs.by
            else:
                ctx.update(slurm_state=state, reason=reason)
            ctx["set"] = updates
            step.events.append(Event(now, rec.job_id, "job.state", ctx))
            rec.job_state = job_state
        elif "end_state" in updates:
            step.events.append(Event(now, rec.job_id, "job.ended", {
                "slurm_state": updates["end_state"], "reason": reason,
                "was": rec.end_state or None, "set": updates}))
        elif updates:
            step.events.append(Event(now, rec.job_id, "job.updated", {"set": updates}))
        if "end_state" in updates:
            rec.end_state = str(updates["end_state"])
        if "submitted" in updates and obs is not None:
            rec.submitted, rec.restarts = obs.submitted, obs.restarts
        if "priority" in updates and obs is not None:
            rec.priority = obs.priority
        if "compute_nodes" in updates and obs is not None:
            rec.compute_nodes = obs.compute_nodes
        if "hold_until" in updates and obs is not None:
            rec.hold_until = obs.hold_until
        if "account" in updates and obs is not None:
            rec.account = obs.account
        if "rescue_to" in updates:
            rec.rescue_to = ""
        if "rerun_started" in updates:
            rec.rerun_started = bool(updates["rerun_started"])
        if not_before is not None:
            rec.not_before = not_before
        if started:
            step.extend(fire(rec, Trigger.STARTED, now, self.policy, self.share))
        what = self._changed.pop(rec.job_id, "")
        if what and rec.rsa_state in READY and rec.job_state in (
                JobState.ON_DECK, JobState.QUEUED, JobState.DEMOTED):
            # its lock-in was for the job as it was: it ends, and the job is judged again
            step.extend(fire(rec, Trigger.JOB_CHANGED, now, self.policy, self.share,
                             detail=what))
        step.extend(settle(rec, now, self.policy, self.share))
        if "job_state" in updates:
            # a restore Slurm refused while the job ran: now it is pending again (a
            # requeue, which must not come back locked in) or over
            step.extend(owed_unlock(rec, now))
        self._note_waiting(rec)
        return step

    def _note_waiting(self, rec: JobRecord) -> None:
        if rec.timers:
            self._timed.add(rec.job_id)
        else:
            self._timed.discard(rec.job_id)
        if rec.job_state is JobState.ON_DECK and rec.rsa_state in IDLE \
                and not rec.declined:
            self._waiting.add(rec.job_id)
        else:
            self._waiting.discard(rec.job_id)

    def _untrack(self, rec: JobRecord, obs: Observation, now: float) -> Event:
        """Stop tracking ``rec``: its job id now names ``obs``'s job, another job
        (:func:`another_job`). Its cycle has ended (it holds no RSA nodes); its history
        stays in the log, before this event (``job.untracked``: replay drops the record).
        A record for the new job made in this step goes on from its cycle and serial."""
        jid = rec.job_id
        cycle, serial = self._untracked[jid] = (rec.cycle, rec.serial)
        del self.records[jid]
        self._last_obs.pop(jid, None)
        for group in (self._waiting, self._timed, self._displaced):
            group.discard(jid)
        whose = "another user's job" if obs.user and obs.user != rec.user else \
            f"a new job of {rec.user}'s" + (f" (submitted {obs.submitted})"
                                            if obs.submitted else "")
        return Event(now, jid, "job.untracked", {
            "user": rec.user, "reason": f"job id {jid} now names {whose} (Slurm's state "
                                         "was lost, or its job ids wrapped)",
            "cycle": cycle, "serial": serial})

    def tick(self, now: float, *, exclude: set[str] | None = None) -> Decision:
        """Fire due timers and retry allocation for on-deck jobs still waiting for nodes."""
        dec = Decision()
        exclude = exclude or set()
        records = self.records
        todo = [records[j] for j in self._waiting | self._timed if j not in exclude and (
            j in self._waiting or any(t <= now for t in records[j].timers.values()))]
        todo.sort(key=lambda r: (-r.priority, job_sort_key(r.job_id)))
        for rec in todo:
            dec.add(settle(rec, now, self.policy, self.share))
            self._note_waiting(rec)
        return dec

    def outcome(self, outcome: Outcome, now: float) -> Decision:
        """An action finished. Raises StaleOutcome if it is not the job's outstanding one."""
        rec = self.records.get(outcome.job_id)
        if rec is not None and rec.unlock is not None and rec.unlock.id == outcome.action_id:
            step = unlock_outcome(rec, outcome, now, self.policy)
            self._note_waiting(rec)
            return Decision(events=step.events, actions=step.actions)
        if rec is None or rec.pending is None or rec.pending.id != outcome.action_id:
            raise StaleOutcome(f"no outstanding action {outcome.action_id}")
        trigger = OUTCOME_TRIGGERS.get((rec.pending.kind, outcome.result))
        if trigger is None:
            possible = sorted(r.value for k, r in OUTCOME_TRIGGERS if k is rec.pending.kind)
            raise InvalidOutcome(
                f"job {rec.job_id}: a {rec.pending.kind.value} action cannot end "
                f"{outcome.result.value!r} (only {', '.join(possible)}): executor bug")
        dec = Decision()
        dec.events.append(Event(now, rec.job_id, "action.outcome", {
            "action": outcome.action_id, "result": outcome.result.value,
            "message": outcome.message, "detail": dict(outcome.detail),
            "set": {"pending": None}}))
        rec.pending = None
        dec.add(fire(rec, trigger, now, self.policy, self.share, detail=outcome.message))
        dec.add(settle(rec, now, self.policy, self.share))
        self._note_waiting(rec)
        return dec

    def command(self, job_id: str, trigger: Trigger, now: float, *, by: str,
                operator: bool) -> Decision:
        """A user (``rsa input-done``, ``rsa cancel-staging``) or operator command.

        A user's command acts only on a record of their own (``by``), judged here, in the
        same step as the command: the API's look at the job came a moment before, and a
        cycle in between may have given the id to another user's job (Slurm lost its
        state, or its ids wrapped). Refused in the words of an unknown job."""
        allowed = OPERATOR_COMMANDS if operator else USER_COMMANDS
        if trigger not in allowed:
            raise CommandRefused(f"{trigger.value} is an operator command")
        rec = self.records.get(job_id)
        if rec is None or (not operator and rec.user != by):
            raise UnknownJob(f"job {job_id} is not tracked by the RSA")
        dec = Decision()
        try:
            dec.add(fire(rec, trigger, now, self.policy, self.share, by=by))
        except InvalidTransition as e:
            raise CommandRefused(str(e)) from e
        dec.add(settle(rec, now, self.policy, self.share))
        self._note_waiting(rec)
        return dec

    def set_node_state(self, node: str, state: NodeState, now: float, *, by: str,
                       reason: str = "") -> Decision:
        """Drain/resume/down of an RSA node by an operator or the health loop."""
        before = self.pool.state(node)
        self.pool.set_state(node, state)
        ctx = {"node": node, "from": before.value, "to": state.value, "by": by}
        if reason:
            ctx["reason"] = reason
        dec = Decision(events=[Event(now, POOL_STREAM, "node.state", ctx)])
        owner = self.pool.owner(node)
        rec = self.records.get(owner) if owner else None
        if state is NodeState.DOWN and rec is not None and rec.rsa_state in PREPARING:
            # its input was not staged yet: tear the RAMDISK down (core/transitions.py)
            dec.add(fire(rec, Trigger.NODE_LOST, now, self.policy, self.share,
                         detail=f"{node}: {reason}" if reason else node))
            dec.add(settle(rec, now, self.policy, self.share))
            self._note_waiting(rec)
        return dec

    @property
    def draining(self) -> str:
        """Why the RSA takes no new jobs now (``rsa admin drain``); "" when it does."""
        return self.share.draining

    def set_draining(self, on: bool, now: float, *, by: str, reason: str = "",
                     to_pfs: bool = False) -> Decision:
        """Maintenance: stop (``on``) or resume giving RSA nodes to jobs that hold none.
        Jobs in flight go on (stage-ins, stage-outs, teardowns); a job that would get RSA
        nodes waits as one over a limit does, its user told why; with ``to_pfs`` it is
        declined instead (the RSA will not serve it: it starts from the PFS, its hold
        released; the way to remove the RSA). Logged, so it survives a restart."""
        to_pfs = to_pfs and on
        text = drain_reason(by, reason, to_pfs=to_pfs) if on else ""
        ctx = {"on": on, "by": by, **({"reason": reason} if reason else {}),
               **({"pfs": True} if to_pfs else {})}
        self.share.draining = text
        self.share.drain_to_pfs = to_pfs
        return Decision(events=[Event(now, POOL_STREAM, "rsa.drain", ctx)])

    def forget_finished(self, now: float | None = None, older_than: float = 0.0,
                        present: Container[str] = frozenset()) -> list[str]:
        """Drop finished jobs whose RSA cycle has ended from memory (their log stays).

        With ``now``: only those whose last RSA-state change is at least ``older_than``
        seconds old and that Slurm no longer lists (``present``: the job ids it does), so a
        job still shown as COMPLETING never comes back as a new record.
        """
        done = [j for j, r in self.records.items()
                if r.job_state is JobState.FINISHED and r.rsa_state in TERMINAL
                and (now is None or (now - r.since >= older_than and j not in present))]
        for jid in done:
            del self.records[jid]
            self._last_obs.pop(jid, None)
            self._waiting.discard(jid)
            self._timed.discard(jid)
            self._displaced.discard(jid)
        return done

    # ---- replay -----------------------------------------------------------------------
    @classmethod
    def replay(cls, pool: Pool, policy: StagingPolicy, events: Iterable[Event],
               base: Mapping[str, Any] | None = None) -> Scheduler:
        """Rebuild a scheduler from its event log (Flux RFC 21: replay reproduces state).

        ``base``: a :meth:`durable_state` taken when the log ended at some event; then
        ``events`` are only those after it. The result is the same as a replay of the
        whole log (tests/unit/test_snapshots.py)."""
        sched = cls(pool, policy)
        if base is not None:
            sched.share.draining = str(base.get("draining") or "")
            sched.share.drain_to_pfs = bool(base.get("drain_to_pfs"))
            sched.mode = str(base.get("mode") or "")
            for name, state in dict(base.get("pool") or {}).items():
                pool.set_state(str(name), NodeState(str(state)))
            for jid, data in dict(base.get("records") or {}).items():
                sched.records[str(jid)] = JobRecord.from_json(data)
            for jid, (cycle, serial) in dict(base.get("untracked") or {}).items():
                sched._untracked[str(jid)] = (int(cycle), int(serial))
        for ev in events:
            if ev.job_id == POOL_STREAM:
                if ev.name == "node.state":
                    pool.set_state(str(ev.context["node"]), NodeState(ev.context["to"]))
                elif ev.name == "rsa.drain":
                    c = ev.context
                    pfs = bool(c.get("on") and c.get("pfs"))
                    sched.share.draining = drain_reason(str(c.get("by", "")),
                                                        str(c.get("reason", "")),
                                                        to_pfs=pfs) \
                        if c.get("on") else ""
                    sched.share.drain_to_pfs = pfs
                elif ev.name == "rsad.mode":
                    sched.mode = str(ev.context.get("mode", ""))
                continue
            if ev.name == "job.untracked" and "cycle" in ev.context:
                sched._untracked[ev.job_id] = (int(ev.context["cycle"]),
                                               int(ev.context["serial"]))
            elif ev.name == "job.tracked":
                sched._untracked.pop(ev.job_id, None)
            apply_event(sched.records, ev)
        for rec in sched.records.values():
            if rec.nodes:
                pool.adopt(rec.job_id, rec.nodes)
                sched.share.track(rec.job_id, rec.user, len(pool.holding(rec.job_id)))
            sched._note_waiting(rec)
            if rec.superseded and rec.rsa_state not in IDLE:
                sched._displaced.add(rec.job_id)
        return sched

    def durable_state(self) -> dict[str, Any]:
        """What :meth:`replay` needs to start from instead of an empty log: every record
        and the pool's node states, and the counters of untracked job ids (JSON)."""
        return {"records": {jid: rec.to_json() for jid, rec in self.records.items()},
                "untracked": {jid: list(cs) for jid, cs in self._untracked.items()},
                "pool": {n.name: self.pool.state(n.name).value for n in self.pool.nodes()},
                "draining": self.share.draining, "mode": self.mode,
                **({"drain_to_pfs": True} if self.share.drain_to_pfs else {})}

    def mode_switch(self, mode: str, now: float) -> tuple[str, Decision]:
        """rsad starts in ``mode`` (``slurm.mode``): refused ("why", nothing logged) while
        jobs an rsad of another mode started are in flight (their RAMDISKs, holds and
        hooks are that mode's); else the mode is logged when it is new."""
        if self.mode == mode:
            return "", Decision()
        busy = sorted((j for j, r in self.records.items() if r.rsa_state not in IDLE),
                      key=job_sort_key)
        if self.mode and busy:
            shown = ", ".join(busy[:5]) + (f" and {len(busy) - 5} more" if len(busy) > 5
                                           else "")
            return (f"slurm.mode is {mode} but {len(busy)} job(s) rsad started in "
                    f"{self.mode} mode are in flight ({shown}): set slurm.mode back to "
                    f"{self.mode} and let them finish first (rsa admin drain; rsa status "
                    f"shows when none holds RSA nodes), then switch"), Decision()
        self.mode = mode
        return "", Decision(events=[Event(now, POOL_STREAM, "rsad.mode", {"mode": mode})])

    def snapshot(self) -> Mapping[str, dict[str, object]]:
        """Every record as JSON (for comparisons and projections)."""
        return {jid: rec.to_json() for jid, rec in self.records.items()}


def drain_reason(by: str, reason: str, *, to_pfs: bool = False) -> str:
    """What a job that would get RSA nodes during maintenance is told."""
    why = f": {reason[:60]}" if reason else ""
    if to_pfs:
        return f"RSA maintenance (rsa admin drain --pfs by {by}{why}): new jobs run from the PFS"
    return f"RSA maintenance (rsa admin drain by {by}{why}), until rsa admin resume"


def _has_work(spec: DirectiveSpec) -> bool:
    """A spec with neither input nor output (e.g. only #RSA_NODES) gives the RSA nothing
    to do: such jobs are not tracked."""
    return spec.data_in is not None or spec.preprocess is not None or \
        spec.data_out is not None or spec.postprocess is not None


def job_sort_key(job_id: str) -> tuple[int, str]:
    """The order of jobs of one priority: by job number, then id (the start hold admits
    held jobs in it too: daemon/starthold.py)."""
    head = job_id.split("_", 1)[0]
    return (int(head), job_id) if head.isdigit() else (1 << 62, job_id)
