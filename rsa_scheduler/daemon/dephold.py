"""The dependency hold at work: dependents wait for their parents' output (issue 32).

Owns :class:`DepHold`: each cycle, in both modes, one ``squeue`` of the pending jobs
that have a dependency (or carry the hold's marker, or a begin time ahead), which of them
depend on an RSA job
whose output is not yet verified on the PFS (:mod:`rsa_scheduler.core.dependency`
decides), and the Slurm calls that hold and release them (on the urgent lane, one at a
time per job). A held job's begin time is :data:`DEP_HOLD` ahead and its admin_comment
carries ``core.dependency.DEP_MARK`` and the parents it waits for: a restarted rsad (or
slurmctld, which keeps both) knows what it holds, and rsad lifts only its own begin
time, never an admin's or user's hold (``scontrol hold``: its priority stays 0).

Level-triggered: every cycle looks again, so a hold or release a crash cut off is done by
the next rsad. A job is held from the first cycle that sees it pending with a dependency
on an RSA job that has (or may have) output to stage out: before that job ends, since
Slurm may start the dependent within one scheduling pass of it.

job_submit.lua marks every job submitted with such a dependency the same way (its
``dependency_hold``, the marker without parents), so that a dependent submitted just as
its parent ends is held too: rsad releases it at its next cycle when no parent has output
on a RAMDISK. A dependency added later (``scontrol update``) it holds by the begin time
alone (``core.dependency.later_hold``: it cannot write the marker in a user's update):
rsad replaces that hold with its own at its next cycle (a parent's output on a RAMDISK)
or lifts it, keeping the begin time the update asked for, or, if none, the one the job had
before (job_modify cannot see it): rsad's squeue lists every pending job with a begin time
ahead, and it remembers the last one of each job's own.

Imports nothing of the daemon; the daemon (service.py) hands it the scheduler, its
commit and the user's comment as callables.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Executor, Future
from dataclasses import dataclass

from rsa_scheduler.core.dependency import (
    ANOTHER,
    DEP_MARK,
    DependencyError,
    Waiting,
    dep_marker,
    ended_unsettled,
    held_message,
    later_begin,
    later_hold,
    loose_dependency,
    named_dependency,
    own_begin,
    parent_verdict,
    parents_of,
    parse_dependency,
    read_dep_mark,
    released_message,
    without_dep_marker,
)
from rsa_scheduler.core.directives import rerun_held, split_hold
from rsa_scheduler.core.events import Event
from rsa_scheduler.core.machine import JobRecord
from rsa_scheduler.core.policy import EarlyStart
from rsa_scheduler.core.scheduler import Decision, Scheduler
from rsa_scheduler.core.states import PENDING, RsaState
from rsa_scheduler.daemon.starthold import end_hold
from rsa_scheduler.slurm.parse import DependentRow
from rsa_scheduler.slurm.port import SlurmError, SlurmPort

log = logging.getLogger(__name__)

#: seconds ahead the dependency hold sets the job's begin time: rsad releases it as soon
#: as its parents' output is verified. A year: a dependent never starts on half its
#: input because rsad was gone; an operator can start it (``scontrol update JobId=N
#: StartTime=now``)
DEP_HOLD = 365 * 86400

#: seconds before a hold or release that did not take is asked for again
RETRY = 30.0


@dataclass(frozen=True, slots=True)
class Outcomes:
    """The parents a released dependent waited for, by what it is told of each."""

    verified: list[str]  #: their output is verified on the PFS (after their last end)
    unverified: list[str]  #: its user's, nothing left on a RAMDISK, no verified output
    others: list[str]  #: another user's jobs: told nothing more

    def any(self) -> bool:
        return bool(self.verified or self.unverified or self.others)


def no_history(job: str) -> tuple[str | None, bool]:
    """A store without the history of ``job``: its user unknown, its output not
    verified."""
    return None, False


class DepHold:
    """The dependents rsad holds (loop thread); Slurm is called on ``lane``."""

    def __init__(self, *, slurm: SlurmPort, clock: Callable[[], float],
                 scheduler: Callable[[], Scheduler], commit: Callable[[Decision], None],
                 tell: Callable[[str, str], None], lane: Executor,
                 native: Callable[[], bool] = lambda: False,
                 aliases: Callable[[], Mapping[str, str]] = dict,
                 history: Callable[[str], tuple[str | None, bool]] = no_history) -> None:
        self.slurm = slurm
        # a parent job's user as the store has it (None: unknown) and whether its output
        # was verified after its last end (a record's rsa-state no longer says so once
        # its RAMDISK is torn down: discarded output is torn down too)
        self.history = history
        # an array task's own job id -> its key (Memory.aliases): a dependency may name a
        # task by the former (afterok:$SLURM_JOB_ID in a task's script)
        self.aliases = aliases
        self.native = native  # native mode: no start hold (Slurm holds it in stage-in)
        self.clock = clock
        self.scheduler = scheduler
        self.commit = commit
        self.tell = tell
        self.lane = lane
        self.calls: dict[str, Future[bool]] = {}  # job -> the Slurm call in flight
        # job -> (when its last call was asked for, whether to hold): the same call is not
        # asked again within RETRY (Slurm may not show its effect at once)
        self.asked: dict[str, tuple[float, bool]] = {}
        self.told: dict[str, str] = {}  # job -> the last reason its user was told
        # job -> the begin time of its own a pending job had when last seen (job_modify's
        # hold of a dependency added later replaces it; given back at the release). In
        # memory only: one set while rsad was down is not known
        self.begins: dict[str, int] = {}
        self._unsupported = False

    def check(self) -> None:
        """Hold every pending dependent of an RSA job whose output is not yet verified;
        release those rsad holds whose parents' output is (or that no longer wait); tell
        the held ones' users why they wait when that changes."""
        read = getattr(self.slurm, "dependents", None)
        if read is None:
            if not self._unsupported:
                self._unsupported = True
                log.error("this Slurm backend cannot list dependencies: dependents of RSA "
                          "jobs may start before their parents' output is on the PFS")
            return
        try:
            now = self.clock()
            rows: list[DependentRow] = read(DEP_MARK.lstrip(), int(now))
        except SlurmError as e:  # level-triggered: the next cycle looks again
            log.warning("cannot read the pending jobs' dependencies: %s", e)
            return
        records = self.scheduler().records
        seen: set[str] = set()
        for row in rows:
            seen.add(row.job_id)
            self._one(row, records, now)
        for job in [j for j in self.asked if j not in seen and j not in self.calls]:
            self.asked.pop(job, None)
            self.told.pop(job, None)
        for job in [j for j in self.begins if j not in seen]:
            del self.begins[job]  # started, gone, or its begin time passed or was moved

    def _one(self, row: DependentRow, records: dict[str, JobRecord], now: float) -> None:
        job = row.job_id
        call = self.calls.get(job)
        if call is not None:
            if not call.done():
                return  # one Slurm call at a time per job
            del self.calls[job]
        if rerun_held(row.admin_comment):
            return  # the rerun hold keeps it (starthold.py); this one looks again later
        mark = read_dep_mark(row.admin_comment)
        marked = None if mark is None else mark.parents
        # the begin time of its own the job keeps (its user's --begin, a StartTime set
        # while it was held): recorded in the marker, given back at the release
        _, start_hold = split_hold(without_dep_marker(row.admin_comment))
        keep = own_begin(mark, row.begin, now, start_hold)
        later = later_hold(row.begin)
        if not later:
            if keep is None or (mark is not None and keep == mark.begin):
                self.begins.pop(job, None)
            else:
                self.begins[job] = keep
        elif later_begin(row.begin) is None and keep is None:
            # the update that added the dependency asked for no begin time: the one the
            # job had before, which job_modify could not see (its job record has none)
            had = self.begins.get(job)
            keep = had if had is not None and had > now else None
        try:
            deps = parse_dependency(row.dependency)
        except DependencyError as e:
            # unsure is never released: every job id the text names is waited for (on
            # the code before: none, and the job started on a parent's half-staged
            # output if the text was a form this parser does not know)
            deps = loose_dependency(row.dependency)
            log.error("job %s: %s: held for the output of every job it names (%s)", job, e,
                      ", ".join(d.job or d.kind for d in deps) or "none")
        # the dependent's own record only if it is this job's: a record of another user
        # under the same id is an earlier job's (Slurm lost its state or its ids wrapped;
        # core/scheduler.py ``observe`` displaces or untracks it), never this one's
        own = records.get(job)
        if own is not None and own.user != row.user:
            own = None
        named = parents_of(job, row.user, deps, records, self.aliases())
        # job_submit.lua's hold (at submission: the marker without parents; added later:
        # the begin time alone), before rsad has looked: Slurm no longer prints a parent
        # it counts fulfilled (it ended: before the submission or the update, or while
        # rsad was down), so the text names only the parents still to end, or none, and
        # which the others were is gone. Every RSA job of its user that ended with its
        # output on its way to the PFS may be one: waited for as well (on the code before,
        # only when the text named none: ``afterok:7:8`` after 7 ended, its output still
        # staging, read ``afterok:8`` and was released once 8, a job without RSA output,
        # was the only parent left)
        if later or marked == []:
            if not later and mark is not None and mark.named is not None:
                # job_submit.lua named them at submission: exactly those, whoever's
                extra = parents_of(job, row.user, named_dependency(mark.named), records,
                                   self.aliases())
            else:  # not named (an update, singleton, an older plugin): its user's
                extra = ended_unsettled(job, row.user, records)
            named = sorted(set(named) | set(extra), key=lambda k: (len(k), k))
        waits = [w for p in sorted(set(named) | set(marked or []))
                 if (w := parent_verdict(records.get(p))) is not None]
        # another user's job: its dependent is held as well, but told nothing of how
        # that job's stage-out fares (failed, quarantined): that is its owner's
        waits = [w if records[w.parent].user == row.user else Waiting(w.parent, ANOTHER)
                 for w in waits]
        # job_submit.lua's hold of a dependency added later (scontrol update, its begin time
        # alone says so): rsad holds the job in its own way now, or releases it
        when, holding = self.asked.get(job, (-1e18, False))
        recent = now - when < RETRY
        if waits:
            blocking = [w.parent for w in waits]
            message = held_message(waits)
            moved = mark is not None and keep is not None and keep != mark.begin
            if marked is None or not set(blocking) <= set(marked) or moved or later:
                if recent and holding:
                    return
                self.asked[job] = (now, True)
                parents = sorted(set(blocking) | set(marked or []))
                self._event(own, now, "job.dependency-held", parents)
                self.told[job] = message
                marker = dep_marker(parents, keep, int(now) + DEP_HOLD)
                self.calls[job] = self.lane.submit(self._hold, job, row.admin_comment,
                                                   marker, parents, message)
            elif self.told.get(job) != message:
                self.told[job] = message
                self.tell(job, message)
        elif (marked is not None or later) and not (recent and not holding):
            self.asked[job] = (now, False)
            wait = None if keep is not None else self._waits_for_ramdisk(own)
            after = None if keep is None else int(keep - now) + 1
            self._event(own, now, "job.dependency-released", marked or [])
            told = self._outcomes(marked or [], row.user, records)
            self.calls[job] = self.lane.submit(self._release, job, row.admin_comment,
                                               told, wait, after)

    def _outcomes(self, parents: list[str], user: str,
                  records: dict[str, JobRecord]) -> Outcomes:
        """What the released dependent of ``user`` is told of each parent it waited for
        (loop thread: the store is read here): verified (its output, after its last
        end), not verified (its own), or another user's (nothing more)."""
        verified: list[str] = []
        unverified: list[str] = []
        others: list[str] = []
        for p in parents:
            rec = records.get(p)
            if rec is not None and rec.user != user:
                others.append(p)
                continue
            owner, done = self.history(p)
            if rec is None and owner is not None and owner != user:
                others.append(p)  # left memory: its user from the store
            elif (rec is not None and rec.rsa_state is RsaState.OUTPUT_VERIFIED) or done:
                verified.append(p)
            else:
                unverified.append(p)
        return Outcomes(verified, unverified, others)

    def _event(self, own: JobRecord | None, now: float, name: str,
               parents: list[str]) -> None:
        if own is not None:  # a dependent with RSA work of its own: in its history too
            self.commit(Decision(events=[Event(now, own.job_id, name,
                                               {"parents": parents})]))

    def _waits_for_ramdisk(self, rec: JobRecord | None) -> int | None:
        """A released dependent under early start ``wait`` is held for its RAMDISK as at
        submission: for how many seconds (None: released to start)."""
        sched = self.scheduler()
        if rec is None or rec.job_state not in PENDING or rec.declined or self.native():
            return None
        early = rec.spec.early_start or sched.policy.early_start
        return int(sched.policy.wait_timeout) if early is EarlyStart.WAIT else None

    def _hold(self, job: str, comment: str, marker: str, parents: list[str],
              message: str) -> bool:
        """Worker: begin time :data:`DEP_HOLD` ahead, ``marker`` (naming ``parents``)
        in place of any start hold's."""
        spec_text, _ = split_hold(without_dep_marker(comment))
        try:
            self.slurm.hold(job, DEP_HOLD, f"{spec_text}{marker}")
        except SlurmError as e:  # asked again after RETRY while it still waits
            log.warning("job %s: could not hold it for its parents' output: %s", job, e)
            return False
        log.info("job %s: held until the output of job %s is verified on the PFS", job,
                 ",".join(parents))
        self.tell(job, message)
        return True

    def _release(self, job: str, comment: str, told: Outcomes,
                 wait: int | None, after: int | None) -> bool:
        """Worker: the begin time rsad set lifted (now; under early start ``wait`` the
        start hold's deadline; the job's own begin time, ``after`` seconds ahead, when it
        has one) and the marker removed; an admin's hold stays."""
        spec_text, _ = split_hold(without_dep_marker(comment))
        try:
            end_hold(self.slurm, job, spec_text, wait, after)
        except SlurmError as e:
            log.warning("job %s: could not end its dependency hold: %s", job, e)
            return False
        if not told.any():  # marked at submission, no parent with RSA output: not told
            log.info("job %s: released: no parent of it has output on a RAMDISK%s", job,
                     "" if after is None else f"; its own begin time is in {after} s")
            return True
        begin = None
        if after is not None:
            begin = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() + after))
        message = released_message(told.verified, begin, unverified=told.unverified,
                                   others=told.others)
        log.info("job %s: dependency hold ended: %s", job, message)
        self.tell(job, message)
        return True
