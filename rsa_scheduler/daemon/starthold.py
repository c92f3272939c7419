"""The start hold at work: which jobs Slurm holds for the RSA now, and releasing them.

Owns :class:`StartHold`, the daemon's memory of the early start wait (docs/architecture.md,
"Holding a job until its RAMDISK is ready"): which jobs Slurm holds (pending
``BeginTime`` with the hold marker, deadline ahead), whether each could start now
(judged once), the releases asked for and the jobs whose users were told; and the Slurm
calls that hold a requeued job again and release a hold (on the urgent lane, never on
the loop thread). The decisions themselves (could it start, may it go) are
:mod:`rsa_scheduler.daemon.holds`'s.

Imports nothing of the daemon but ``holds``: the daemon (service.py) hands it the
scheduler, its commit and the user's comment as callables.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Executor

from rsa_scheduler.core.directives import HOLD_MARK, split_hold
from rsa_scheduler.core.events import Event
from rsa_scheduler.core.scheduler import Decision, Scheduler
from rsa_scheduler.core.states import LEFT_QUEUE, PENDING, JobState
from rsa_scheduler.daemon.holds import held_message, hold_verdict, startable
from rsa_scheduler.slurm.parse import ELIGIBLE_REASONS, QueueRow
from rsa_scheduler.slurm.port import SlurmError, SlurmPort

log = logging.getLogger(__name__)

#: seconds after rsad released a job's start hold in which Slurm still showing it pending
#: for ``BeginTime`` is not news (it has not rescheduled it yet)
RELEASE_SETTLE = 60.0

#: seconds before a release that did not take is asked for again
RELEASE_RETRY = 30

#: pending reasons of a job that still carries a live hold marker: ``BeginTime`` once
#: Slurm applied the begin time, and what slurmctld's first try of a new submission says
#: before that (it tries every submission at once: ``Resources`` on a full cluster, seen in
#: the lab for over 3 s on a slow machine). A marked job pending for any of these is held;
#: its Slurm reason says nothing about whether it could start (``note`` judges that).
HELD_REASONS = frozenset({"BeginTime", "Resources", "Priority", "None"})


class StartHold:
    """The held jobs (loop thread); Slurm is called on ``lane``."""

    def __init__(self, *, slurm: SlurmPort, clock: Callable[[], float],
                 scheduler: Callable[[], Scheduler], commit: Callable[[Decision], None],
                 tell: Callable[[str, str], None], lane: Executor,
                 split: Callable[[str], tuple[str, int | None]]) -> None:
        self.slurm = slurm
        self.clock = clock
        self.scheduler = scheduler  # the daemon's current one (replaced at start-up)
        self.commit = commit
        self.tell = tell
        self.lane = lane
        self.split = split  # SpecReader.split_hold (cached per admin_comment)
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
            spec_text, deadline = self.split(row.admin_comment or "")
            if deadline is not None and row.state == "PENDING" and \
                    row.reason in HELD_REASONS and deadline > now:
                if row.job_id not in self.held:
                    new.append(row)
                self.held[row.job_id] = (float(deadline), spec_text)
            else:
                self.forget(row.job_id)
        for job in [j for j in self.held if j not in present]:
            self.forget(job)
        for job in [j for j, t in self.released.items() if now - t >= RELEASE_SETTLE]:
            del self.released[job]
        if not new:
            return
        new.sort(key=lambda r: (-r.priority, r.job_id))
        try:
            idle = self.slurm.idle_nodes()
            mine = {r.job_id for r in new}
            ahead = [(parts, nodes) for job, nodes, reason, parts in self.slurm.pending_jobs()
                     if reason in ELIGIBLE_REASONS and job.split("+", 1)[0] not in mine]
            # the partition comes with the cycle's one queue read: no Slurm call per held
            # job on rsad's loop (a big held array cost one each, issue 39); a backend
            # that does not give it (pyslurm without it) asks for the job's identity
            judged = [(r.job_id, r.partition or self.slurm.job_info(r.job_id).partition,
                       r.num_nodes) for r in new]
            fits = startable(judged, idle, ahead)
        except SlurmError as e:  # unsure: release (the job then behaves as unheld)
            log.warning("cannot tell whether held jobs could start now: %s", e)
            fits = set()
        records = self.scheduler().records
        for r in new:
            rec = records.get(r.job_id)
            # judged before an rsad restart (this memory is not kept): its RAMDISK is on
            # its way, so it was judged able to start; judging it busy now would read as
            # a demotion and tear the RAMDISK down
            going = rec is not None and rec.nodes != "" and rec.job_state is JobState.ON_DECK
            self.can_start[r.job_id] = r.job_id in fits or going
            log.info("job %s: held by Slurm for the RSA until %s; %s", r.job_id,
                     self.held[r.job_id][0], "it could start now: staging while held"
                     if r.job_id in fits else "the cluster is busy: releasing the hold")

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
                    self.told.add(job)
                    self.tell(job, held_message(deadline))
                continue
            self.releasing[job] = now
            if self.can_start[job]:
                self.released[job] = now
            if rec is not None:
                self.commit(Decision(events=[Event(now, job, "job.hold-released", {
                    "deadline": deadline, "why": verdict.message})]))
            self.lane.submit(self._release, job, spec_text, verdict.message)

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
            early = rec.spec.early_start or sched.policy.early_start
            if early.value != "wait":
                continue
            self.lane.submit(self._hold, ev.job_id, int(sched.policy.wait_timeout))

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
