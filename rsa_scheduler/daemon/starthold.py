"""The start hold at work: which jobs Slurm holds for the RSA now, and releasing them.

Owns :class:`StartHold`, the daemon's memory of the early start wait (docs/architecture.md,
"Holding a job until its RAMDISK is ready"): which jobs Slurm holds (pending
``BeginTime`` with the hold marker, deadline ahead), whether each could start now
(judged once), the releases asked for and the jobs whose users were told; and the Slurm
calls that hold a requeued job again and release a hold (on the urgent lane, never on
the loop thread). And the rerun hold of a requeued job whose earlier run's output is not
yet safe, under every early-start policy (issue 35; :meth:`StartHold.check_reruns`):
which jobs need it, which Slurm holds (their admin_comment's rerun marker, so a restarted
rsad knows them), and the Slurm calls, one at a time per job. The decisions themselves
(could it start, may it go) are :mod:`rsa_scheduler.daemon.holds`'s.

Imports nothing of the daemon but ``holds``: the daemon (service.py) hands it the
scheduler, its commit and the user's comment as callables.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

from rsa_scheduler.core.admission import Admission, Candidate, admit
from rsa_scheduler.core.directive_spec import DirectiveSpec
from rsa_scheduler.core.directives import HOLD_MARK, RERUN_MARK, rerun_held, split_hold
from rsa_scheduler.core.events import JSON, Event
from rsa_scheduler.core.machine import JobRecord
from rsa_scheduler.core.policy import EarlyStart
from rsa_scheduler.core.rules import OVER_LIMIT_NOTE
from rsa_scheduler.core.scheduler import Decision, Scheduler, job_sort_key
from rsa_scheduler.core.states import (
    AWAITING_NODES,
    LEFT_QUEUE,
    PENDING,
    READY,
    SLURM_PENDING,
    UNSETTLED_REASONS,
    JobState,
    RsaState,
)
from rsa_scheduler.daemon.holds import (
    held_message,
    hold_verdict,
    rerun_held_message,
    rerun_released_message,
    rerun_waits,
    startable,
)
from rsa_scheduler.slurm.parse import ELIGIBLE_REASONS, QueueRow
from rsa_scheduler.slurm.port import SlurmError, SlurmPort

log = logging.getLogger(__name__)

_T = TypeVar("_T")

#: seconds after rsad released a job's start hold in which Slurm still showing it pending
#: for ``BeginTime`` is not news (it has not rescheduled it yet)
RELEASE_SETTLE = 60.0

#: what rsad's log says of a newly held job, by its admission (core/admission.py)
_SAID = {
    Admission.START: "it could start now: staging while held",
    Admission.WAIT: "the cluster is busy and no RSA node is left for it: held, waits for "
                    "RSA nodes in priority order",
    Admission.QUEUE: "the cluster is busy: releasing the hold",
}

#: seconds before a release that did not take is asked for again
RELEASE_RETRY = 30

#: pending reasons of a job that still carries a live hold marker: ``BeginTime`` once
#: Slurm applied the begin time, and what slurmctld's first try of a new submission says
#: before that (it tries every submission at once: ``Resources`` on a full cluster, seen in
#: the lab for over 3 s on a slow machine). A marked job pending for any of these is held;
#: its Slurm reason says nothing about whether it could start (``note`` judges that).
HELD_REASONS = frozenset({"BeginTime", "Resources", "Priority", "None"})

#: of those, the reasons that say the begin time was moved (by the job's user, ``scontrol
#: update JobId=N StartTime=now``, or an admin) once Slurm showed the job pending on
#: ``BeginTime`` for its hold: a begin time ahead always reads ``BeginTime`` (``None``
#: stays ambiguous: Slurm shows it after any update, rsad's lock-in of a held job too)
MOVED_REASONS = frozenset({"Resources", "Priority"})

#: seconds ahead a rerun hold sets the job's begin time: rsad releases it as soon as the
#: earlier run's output is verified or quarantined; only if rsad is gone that long does
#: Slurm start the job by itself (an operator can: ``scontrol update JobId=N
#: StartTime=now``)
RERUN_HOLD = 7 * 86400



def end_hold(slurm: SlurmPort, job: str, spec_text: str, wait: int | None,
             after: int | None = None) -> int | None:
    """Lift a begin time rsad set on ``job`` (only that and the marker: an admin's or
    user's hold stays): released to start now, or, under early start ``wait`` (``wait``
    seconds), held for its RAMDISK as at submission. A job with a begin time of its own
    ``after`` seconds ahead (its user's ``--begin``, kept through the hold) gets that
    back instead, and no start hold (as job_submit.lua at submission). Returns the start
    hold's deadline (None: released). Raises :class:`SlurmError`. Used by the rerun hold
    and the dependency hold (daemon/dephold.py)."""
    if after is not None and after > 0:
        slurm.hold(job, after, spec_text)
        return None
    if wait is None:
        slurm.release_hold(job, spec_text)
        return None
    deadline = int(time.time()) + wait
    slurm.hold(job, wait, f"{spec_text}{HOLD_MARK}{deadline}")
    return deadline


class StartHold:
    """The held jobs (loop thread); Slurm is called on ``lane``."""

    def __init__(self, *, slurm: SlurmPort, clock: Callable[[], float],
                 scheduler: Callable[[], Scheduler], commit: Callable[[Decision], None],
                 tell: Callable[[str, str], None], lane: Executor,
                 split: Callable[[str], tuple[str, int | None]],
                 told_before: Callable[[str], bool] = lambda _job: True) -> None:
        self.slurm = slurm
        self.clock = clock
        self.scheduler = scheduler  # the daemon's current one (replaced at start-up)
        self.commit = commit
        self.tell = tell
        self.lane = lane
        self.split = split  # SpecReader.split_hold (cached per admin_comment)
        # whether the log says a job's user was told of the rerun hold Slurm has it under
        # (an earlier rsad's job.rerun-held after its last job.rerun-released)
        self.told_before = told_before
        # job -> (deadline, its admin_comment without the marker) while Slurm holds it for
        # the RSA; whether it could start now (judged once); releases asked for (job ->
        # when); jobs told
        self.held: dict[str, tuple[float, str]] = {}
        self.can_start: dict[str, bool] = {}
        self.releasing: dict[str, float] = {}
        self.told: set[str] = set()
        # jobs released to start (job -> when): Slurm may show BeginTime for a moment
        # after the release; it must not read as a demotion of a staged job
        self.released: dict[str, float] = {}
        # the rerun hold: jobs that may need it or hold it (requeued, or seen marked);
        # those Slurm holds for it (job -> its admin_comment without the marker, from the
        # queue or the call that placed it); the Slurm call in flight per job (never two
        # at once: the lane has several workers); when each was last asked; jobs told
        self.rerun_due: set[str] = set()
        self.rerun_held: dict[str, str] = {}
        self.rerun_calls: dict[str, Future[tuple[bool, str] | None]] = {}
        self.rerun_asked: dict[str, tuple[float, bool]] = {}  # job -> (when, to hold)
        self.rerun_told: dict[str, str] = {}  # job -> what its user was told
        # jobs Slurm showed held for their rerun whose told_before was read (once each)
        self.rerun_looked: set[str] = set()
        # rerun holds ended (job -> when): a queue line read before the release still
        # shows the marker for a moment; it must not read as a new hold
        self.rerun_ended: dict[str, float] = {}
        self._rerun_scanned = False  # the records looked at once after a start
        # jobs Slurm shows pending but not yet plainly PENDING (REQUEUED, ...): it may
        # still set the requeue's own begin time, which would replace a hold set now
        self.requeueing: set[str] = set()
        # job -> the hold (its deadline) Slurm showed it pending on BeginTime for: pending
        # on Resources or Priority after that, its begin time was moved, it is not held
        self.began: dict[str, int] = {}
        # requeued jobs under early start wait, to be held for their RAMDISK once Slurm has
        # finished the requeue (:meth:`requeued`)
        self.rehold: set[str] = set()
        # every Slurm call handed to the lane, until seen done (:meth:`calls_in_flight`)
        self._calls: list[Future[Any]] = []

    def calls_in_flight(self) -> list[Future[Any]]:
        """The Slurm calls (holds, releases) handed to the lane and not yet done. Done
        once each of these is: the lane has several workers, so work submitted behind
        them may finish first and says nothing of them."""
        self._calls = [c for c in self._calls if not c.done()]
        return list(self._calls)

    def _submit(self, fn: Callable[..., _T], *args: object) -> Future[_T]:
        """Hand a Slurm call to the lane (loop thread), kept in :meth:`calls_in_flight`."""
        call = self.lane.submit(fn, *args)
        self._calls = [c for c in self._calls if not c.done()]
        self._calls.append(call)
        return call

    def __contains__(self, job: object) -> bool:
        """Whether Slurm holds ``job`` for the RSA (as of the last cycle)."""
        return job in self.held

    def reason_of(self, row: QueueRow) -> str:
        """``row``'s pending reason as the core should read it: a job Slurm holds for the
        RSA pends for its begin time whatever slurmctld's first try of it said (else a
        spurious ``Resources`` would read as on-deck, and the job be staged while held on
        a busy cluster, judged startable by the restart rule of :meth:`note`)."""
        if row.job_id in self.held and row.reason != "BeginTime":
            return "BeginTime"
        return row.reason

    def counts_on_deck(self, row: QueueRow) -> bool:
        """Whether ``row`` is held for the RSA and counts as on-deck: it could start now,
        or it was released a moment ago and Slurm still shows its begin time."""
        job = row.job_id
        return (job in self.held and self.can_start.get(job, False)) or (
            row.reason == "BeginTime"
            and self.clock() - self.released.get(job, -1e18) < RELEASE_SETTLE)

    def note(self, rows: Iterable[QueueRow], present: set[str]) -> None:
        """Learn which jobs Slurm holds for the RSA (pending ``BeginTime`` with the hold
        marker, deadline ahead) from this cycle's rows; judge the new ones once: could
        they start now (daemon/holds.py ``startable``)?"""
        now = self.clock()
        new: list[QueueRow] = []
        for row in rows:
            comment = row.admin_comment or ""
            spec_text, deadline = self.split(comment)
            if row.state != "PENDING" and row.state in SLURM_PENDING:
                self.requeueing.add(row.job_id)
            elif self.requeueing:
                self.requeueing.discard(row.job_id)
            if rerun_held(comment) and row.state == "PENDING":
                if now - self.rerun_ended.get(row.job_id, -1e18) >= RELEASE_SETTLE:
                    self.rerun_held[row.job_id] = spec_text
                    self.rerun_due.add(row.job_id)
            elif self.rerun_held:
                self.rerun_held.pop(row.job_id, None)
            if deadline is not None and row.state == "PENDING" and \
                    row.reason in HELD_REASONS and deadline > now and not (
                        row.reason in MOVED_REASONS and self.began.get(row.job_id) == deadline):
                if row.reason == "BeginTime":
                    self.began[row.job_id] = deadline
                if row.job_id not in self.held:
                    new.append(row)
                self.held[row.job_id] = (float(deadline), spec_text)
            else:
                self.forget(row.job_id)
                if self.released and (row.state != "PENDING" or (
                        row.reason != "BeginTime" and row.reason not in UNSETTLED_REASONS)):
                    # rescheduled (or started): a BeginTime from now on is a begin time
                    # moved ahead again (its user's), a demotion, not Slurm being late
                    self.released.pop(row.job_id, None)
                if self.began and (deadline is None or row.state != "PENDING"):
                    self.began.pop(row.job_id, None)
                if deadline is None and row.reason == "BeginTime" and \
                        row.state == "PENDING" and row.job_id not in self.released:
                    self._released_before(row.job_id, now)
        for job in [j for j in self.held if j not in present]:
            self.forget(job)
        for job in [j for j in self.rerun_due if j not in present]:
            self._rerun_over(job)
        self.requeueing &= present
        for job in [j for j in self.began if j not in present]:
            del self.began[job]
        self.rehold &= present
        for job in [j for j, t in self.released.items() if now - t >= RELEASE_SETTLE]:
            del self.released[job]
        for job in [j for j, t in self.rerun_ended.items() if now - t >= RELEASE_SETTLE]:
            del self.rerun_ended[job]
        if not new:
            return
        # the core's order (Scheduler.tick hands RSA nodes out in it): as text, "10" came
        # before "9", and a job admitted to take the node another got it
        new.sort(key=lambda r: (-r.priority, job_sort_key(r.job_id)))
        try:
            idle = self.slurm.idle_nodes()
            # a job held for the RSA takes no node while held, whatever its reason says
            # (slurmctld's first try of a submission: None, Priority, Resources)
            held = self.held
            ahead = [(parts, nodes) for job, nodes, reason, parts in self.slurm.pending_jobs()
                     if reason in ELIGIBLE_REASONS and job.split("+", 1)[0] not in held]
            # the partition comes with the cycle's one queue read: no Slurm call per held
            # job on rsad's loop (a big held array cost one each, issue 39); a backend
            # that does not give it (pyslurm without it) asks for the job's identity
            judged = [(r.job_id, r.partition or self.slurm.job_info(r.job_id).partition,
                       r.num_nodes) for r in new]
            fits = startable(judged, idle, ahead)
        except SlurmError as e:  # unsure: judged busy (released if RSA nodes are free)
            log.warning("cannot tell whether held jobs could start now: %s", e)
            fits = set()
        sched = self.scheduler()
        records = sched.records
        # busy or not, a job whose RSA nodes are not free waits for them, held, in
        # priority order (core/admission.py, issue 32)
        verdicts = admit((Candidate(r.job_id, r.job_id in fits, self._need(r))
                          for r in new), sched.rsa_free({r.job_id for r in new}))
        for r in new:
            rec = records.get(r.job_id)
            # judged before an rsad restart (this memory is not kept): its RAMDISK is on
            # its way, so it was judged able to start; judging it busy now would read as
            # a demotion and tear the RAMDISK down
            going = rec is not None and rec.nodes != "" and rec.job_state is JobState.ON_DECK
            verdict = verdicts[r.job_id]
            self.can_start[r.job_id] = verdict.held or going
            log.info("job %s: held by Slurm for the RSA until %s; %s", r.job_id,
                     self.held[r.job_id][0], _SAID[verdict])

    def _released_before(self, job: str, now: float) -> None:
        """``job`` pends on ``BeginTime`` without the hold marker: if its record says it
        was held and it is staged, rsad released it (only a release removes the marker
        of a staged job) and Slurm has not rescheduled it yet; a restarted rsad does not
        remember the release, which would read as a demotion and tear the RAMDISK down
        (the job then reads the PFS, its comment saying it was staged). Remembered as
        released now: on-deck for :data:`RELEASE_SETTLE` more seconds."""
        rec = self.scheduler().records.get(job)
        if rec is not None and rec.hold_until is not None and rec.rsa_state in READY:
            self.released[job] = now

    def _need(self, row: QueueRow) -> int:
        """The RSA nodes the held job of ``row`` needs (read from its admin_comment; 1
        when it cannot be read: its record, made this cycle, says the rest)."""
        spec_text, _ = self.split(row.admin_comment or "")
        try:
            spec = DirectiveSpec.from_admin_comment(spec_text)
        except ValueError:
            return 1
        return self.scheduler().rsa_need(row.job_id, row.num_nodes, spec)

    def forget(self, job: str) -> None:
        """``job`` is no longer held (or no longer queued)."""
        if job not in self.held and job not in self.can_start and \
                job not in self.releasing and job not in self.told:
            return  # most jobs, every time their line changes
        self.held.pop(job, None)
        self.can_start.pop(job, None)
        self.releasing.pop(job, None)
        self.told.discard(job)

    def check(self) -> None:
        """Release every held job whose RAMDISK is ready, that the RSA will not serve, or
        that could not start now anyway; tell the others' users they are held."""
        if not self.held:
            return
        now = self.clock()
        records = self.scheduler().records
        for job, (deadline, spec_text) in list(self.held.items()):
            if job not in self.can_start or \
                    now - self.releasing.get(job, -1e18) < RELEASE_RETRY:
                continue
            rec = records.get(job)
            verdict = hold_verdict(job, rec, self.can_start[job])
            if verdict is None:
                if job not in self.told:
                    # a job that waits for RSA nodes (a limit, a drain, none free) was
                    # told why by the core: the general words would replace the reason in
                    # its comment; they are told once it has its nodes
                    if rec is not None and rec.rsa_state in AWAITING_NODES and \
                            rec.message.startswith(OVER_LIMIT_NOTE):
                        continue
                    self.told.add(job)
                    self.tell(job, held_message(deadline))
                continue
            self.releasing[job] = now
            if self.can_start[job]:
                self.released[job] = now
            if rec is not None:
                self.commit(Decision(events=[Event(now, job, "job.hold-released", {
                    "deadline": deadline, "why": verdict.message})]))
            self._submit(self._release, job, spec_text, verdict.message)

    def requeued(self, dec: Decision) -> None:
        """A requeued job under early start wait is held again, as at submission: on an
        idle cluster it would start before its first run's output is staged and its
        RAMDISK built again (docs/architecture.md, "Holding a job ...")."""
        sched = self.scheduler()
        for ev in dec.events:
            if ev.name != "job.state" or ev.context.get("from") not in LEFT_QUEUE:
                continue
            if ev.context.get("to") not in PENDING:
                continue
            rec = sched.records.get(ev.job_id)
            if rec is None or ev.job_id in self.held:
                continue
            if rerun_waits(rec):  # its earlier run's output first (check_reruns)
                self.rerun_due.add(ev.job_id)
                continue
            early = rec.spec.early_start or sched.policy.early_start
            if early.value != "wait":
                continue
            self.rehold.add(ev.job_id)
        if self.rehold:
            self._rehold()

    def _rehold(self) -> None:
        """Hold the jobs :meth:`requeued` found once Slurm shows each plainly ``PENDING``:
        while it still finishes the requeue (``REQUEUED``, ...) it sets the requeue's own
        begin time when done (121 s ahead by default), which would replace a hold set now
        (the job held 121 s, not until its RAMDISK is ready). Not kept across a restart."""
        sched = self.scheduler()
        for job in sorted(self.rehold):
            if job in self.requeueing:
                continue
            self.rehold.discard(job)
            rec = sched.records.get(job)
            if rec is None or job in self.held or rec.job_state not in PENDING:
                continue  # gone, held already, or started meanwhile
            self._submit(self._hold, job, int(sched.policy.wait_timeout))

    def check_reruns(self) -> None:
        """The rerun hold (issue 35): hold every requeued job whose earlier run's output
        is not yet verified (:func:`~rsa_scheduler.daemon.holds.rerun_waits`), under every
        early-start policy; once it is verified or quarantined, release the job, or under
        early start ``wait`` hold it for its new RAMDISK as at submission. Every cycle,
        after its decisions are committed (so the job's comment ends with the release,
        after the stage-out's own message); level-triggered, so a hold or release a crash
        cut off is done by the next rsad: Slurm keeps the marker, the log the job's state."""
        sched = self.scheduler()
        if not self._rerun_scanned:  # after a start: requeues seen before a crash
            self._rerun_scanned = True
            self.rerun_due.update(j for j, r in sched.records.items() if rerun_waits(r))
        if not self.rerun_due:
            return
        now = self.clock()
        for job in sorted(self.rerun_due):
            call = self.rerun_calls.get(job)
            placed = False  # the call that just came back placed the hold
            if call is not None:
                if not call.done():
                    continue  # one Slurm call at a time per job, in order
                del self.rerun_calls[job]
                done = call.result()  # None: failed (asked again after RELEASE_RETRY)
                if done is not None and done[0]:
                    self.rerun_held[job] = done[1]
                    placed = True
                elif done is not None:
                    self.rerun_held.pop(job, None)
            rec = sched.records.get(job)
            held = job in self.rerun_held
            when, holding = self.rerun_asked.get(job, (-1e18, False))
            if rec is not None and rerun_waits(rec):
                if held:
                    self._tell_rerun_held(job, rec, now, placed)
                elif job not in self.requeueing and not (
                        holding and now - when < RELEASE_RETRY):
                    self._ask(job, now, True, self._hold_rerun, job)
            elif not held:
                if job not in self.rerun_calls:
                    if job in self.rerun_asked and not holding:
                        self.rerun_ended[job] = now
                    self._rerun_over(job)
            elif holding or now - when >= RELEASE_RETRY:
                quarantined = rec is not None and rec.rsa_state is RsaState.QUARANTINED
                wait = None if quarantined else self._waits_for_ramdisk(rec)
                self._ask(job, now, False, self._end_rerun, job, self.rerun_held[job],
                          quarantined, wait)
                self.commit(Decision(events=[Event(now, job, "job.rerun-released", {
                    "why": rerun_released_message(job, quarantined, None),
                    "then": "held for its new RAMDISK" if wait else "released"})]))

    def _tell_rerun_held(self, job: str, rec: JobRecord, now: float, placed: bool) -> None:
        """Tell the user of ``job``, which Slurm holds for its rerun hold, why: once
        Slurm placed the hold (``placed``: never when it is only asked for, a call that
        fails would leave a comment saying "held" on a job that is not), and again when
        the reason changes (its earlier run's output goes, or went, to the rescue area
        instead: the user must act; told again once the rescue is over, after its own
        "stage-out finished"). A hold Slurm keeps across an rsad restart is told again
        only for a rescue (the user's comment may say the stage-out is under way), or
        when no rsad told it: the log has no ``job.rerun-held`` since the job's last
        rerun hold ended (``told_before``: an rsad killed after Slurm placed the hold,
        before its next cycle read that; before, the hold was never told, and the job's
        comment said nothing of why it waited until its release)."""
        rescued = rec.rescue_to if rec.rescued() else ""  # the earlier run's, not older
        message = rerun_held_message(job, rescued, rec.holds_user_data())
        told = self.rerun_told.get(job)
        if told is None and not placed and job not in self.rerun_looked:
            self.rerun_looked.add(job)
            placed = not self.told_before(job)
        if message == told or not (placed or told is not None or rescued):
            return
        self.rerun_told[job] = message
        context: dict[str, JSON] = {"rsa_state": rec.rsa_state.value}
        if rescued:
            context["rescue_to"] = rescued
        self.commit(Decision(events=[Event(now, job, "job.rerun-held", context)]))
        self.tell(job, message)

    def watch_rerun(self, job: str) -> None:
        """An operator's command moved ``job``: its rerun hold may be due again (``rsa
        retry`` of a quarantined stage-out makes the earlier run's output unsafe again).
        The next cycle's :meth:`check_reruns` holds or releases it, after the command's
        own messages to the job."""
        rec = self.scheduler().records.get(job)
        if rec is not None and rerun_waits(rec):
            self.rerun_due.add(job)

    def _waits_for_ramdisk(self, rec: JobRecord | None) -> int | None:
        """Under early start ``wait``, a released rerun is held for its new RAMDISK as at
        submission: for how many seconds (None: released to start)."""
        sched = self.scheduler()
        if rec is None or rec.job_state not in PENDING or rec.declined:
            return None
        early = rec.spec.early_start or sched.policy.early_start
        return int(sched.policy.wait_timeout) if early is EarlyStart.WAIT else None

    def _ask(self, job: str, now: float, holding: bool,
             fn: Callable[..., tuple[bool, str] | None], *args: object) -> None:
        self.rerun_asked[job] = (now, holding)
        self.rerun_calls[job] = self._submit(fn, *args)

    def _rerun_over(self, job: str) -> None:
        """``job`` needs no rerun hold and Slurm holds none for it (or it left the
        queue): forgotten."""
        self.rerun_due.discard(job)
        self.rerun_held.pop(job, None)
        self.rerun_asked.pop(job, None)
        self.rerun_told.pop(job, None)
        self.rerun_looked.discard(job)

    def _hold_rerun(self, job: str) -> tuple[bool, str] | None:
        """Worker: hold ``job`` for its earlier run's output (begin time ``RERUN_HOLD``
        ahead, the rerun marker in place of any start hold's). Once held: (True, its
        admin_comment without a marker)."""
        try:
            spec_text, _ = split_hold(self.slurm.job_info(job).admin_comment)
            self.slurm.hold(job, RERUN_HOLD, f"{spec_text}{RERUN_MARK}")
        except SlurmError as e:
            log.warning("job %s: requeued, but could not hold it for its earlier run's "
                        "output: %s", job, e)
            return None
        log.info("job %s: requeued: held until its earlier run's output is verified", job)
        return True, spec_text

    def _end_rerun(self, job: str, spec_text: str, quarantined: bool,
                   wait: int | None) -> tuple[bool, str] | None:
        """Worker: end ``job``'s rerun hold (only its begin time and the marker: an
        admin's or user's hold of it stays): released to start, or under early start
        ``wait`` held ``wait`` seconds for its new RAMDISK. (False, ...) once done."""
        try:
            deadline = end_hold(self.slurm, job, spec_text, wait)
        except SlurmError as e:  # asked again in 30 s while Slurm still holds it
            log.warning("job %s: could not end its rerun hold: %s", job, e)
            return None
        message = rerun_released_message(job, quarantined, deadline)
        log.info("job %s: rerun hold ended: %s", job, message)
        self.tell(job, message)  # in order with the job's other messages
        return False, spec_text

    def _hold(self, job: str, seconds: int) -> None:
        """Worker: hold ``job`` for ``seconds`` (its admin_comment gets the marker)."""
        try:
            spec_text, _ = split_hold(self.slurm.job_info(job).admin_comment)
            deadline = int(time.time()) + seconds
            self.slurm.hold(job, seconds, f"{spec_text}{HOLD_MARK}{deadline}")
        except SlurmError as e:
            log.warning("job %s: requeued, but could not hold it for its RAMDISK: %s", job,
                        e)
            return
        log.info("job %s: requeued: held for its RAMDISK until %d", job, deadline)

    def _release(self, job: str, spec_text: str, message: str) -> None:
        """Worker: begin time now, hold marker removed; then the user's comment."""
        try:
            self.slurm.release_hold(job, spec_text)
        except SlurmError as e:  # tried again in 30 s while Slurm still holds it
            log.warning("job %s: could not release its start hold: %s", job, e)
            return
        log.info("job %s: start hold released: %s", job, message)
        self.tell(job, message)  # in order with the job's other messages
