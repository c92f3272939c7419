"""Native mode (``slurm.mode: native``): Slurm's burst_buffer/lua hooks drive the core.

Owns :class:`NativeDriver`: which jobs Slurm has set a burst buffer up for (``bb.setup``
and ``bb.teardown`` events in the job's log, so a restarted rsad knows), how such a job
is observed while pending (held: on-deck for the core, never demoted while Slurm holds it
in stage-in), what rsad read of the directives of a set-up job it does not track (none, or
unreadable: not durable, read again after a restart), the answer to each hook as a pure
function of the job's record and of that (:func:`answer_data_in`, :func:`answer_data_out`,
:func:`answer_teardown`: "done" only from what rsad knows for sure; one call in all,
:meth:`NativeDriver.serve`: the answer, the events the daemon commits), and the pools
file ``burst_buffer.lua``'s ``slurm_bb_pools`` reports to Slurm (:func:`pools_json`).

The core, allocator, backends, staging, verification and fencing are the queue-watching
mode's own: only *when* stage-in starts differs (Slurm's ``slurm_bb_setup`` instead of the
on-deck observation). Runs on the daemon's loop thread; must not call Slurm or the
network (the API thread does what needs Slurm).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ClusterShell.NodeSet import NodeSet

from rsa_scheduler.bb import replace_pools_file
from rsa_scheduler.core.events import Event
from rsa_scheduler.core.machine import JobRecord
from rsa_scheduler.core.policy import NodeState
from rsa_scheduler.core.states import (
    AWAITING_NODES,
    LEFT_QUEUE,
    POST_RUN,
    STAGED,
    TEARDOWN,
    TERMINAL,
    JobState,
    RsaState,
    slurm_withholds,
)
from rsa_scheduler.daemon.holds import without_pfs_clause

log = logging.getLogger(__name__)

#: the hooks burst_buffer.lua forwards to rsad (``rsa-bb HOOK JOB ...``)
HOOKS = ("setup", "data_in", "real_size", "pre_run", "post_run", "data_out", "teardown")

#: Slurm's pool granularity we report: sizes are counted in MiB, as Slurm's bb TRES is
GRANULARITY = 1 << 20

#: what a waiting stage-in is doing, for ``rsa-bb``'s progress line
WAITING_FOR: Mapping[RsaState, str] = {
    RsaState.NONE: "waiting for free RSA nodes",
    RsaState.RELEASED: "waiting for free RSA nodes",
    RsaState.ALLOCATED: "RSA nodes allocated",
    RsaState.FS_BUILDING: "building the RAMDISK",
    RsaState.FS_FAILED: "RAMDISK build failed, retrying",
    RsaState.FS_READY: "RAMDISK ready",
    RsaState.STAGING_IN: "staging in",
    RsaState.STAGE_IN_FAILED: "stage-in failed, retrying",
}


@dataclass(frozen=True, slots=True)
class Answer:
    """rsad's answer to one hook call: ``done``, ``wait`` (ask again) or ``failed``."""

    status: str
    message: str = ""

    def to_json(self) -> dict[str, str]:
        return {"status": self.status, "message": self.message}


@dataclass(frozen=True, slots=True)
class Served:
    """What one hook call comes to: the answer, events to commit, read the queue now."""

    answer: Answer
    events: list[Event]
    poll_now: bool


@dataclass(slots=True)
class BbJob:
    """What Slurm said about one job's burst buffer."""

    setup: float  # when slurm_bb_setup came (the latest one)
    torn: float | None = None  # when slurm_bb_job_teardown came for it while pending
    verified: bool = False  # its output was verified on persistent storage
    #: what that verification checked, as the user was told it ("stage-out finished:
    #: content verified: ...", "...: exit status only: ..."); "" when not known
    checked: str = ""
    discarded: bool = False  # an operator discarded the output on its RAMDISK
    expired: bool = False  # torn and past bb_grace: no longer held
    #: the job started since this setup: a verification or discard is this run's (a
    #: requeued job's new setup can come while the previous run's output stages out)
    ran: bool = False
    #: the run that started since this setup is over (ended or requeued): Slurm holds
    #: the job for this burst buffer no more; a requeued run gets a new setup first
    over: bool = False
    # what rsad read of the job's own directives since its setup (not durable: read again
    # after a restart): None not read yet; "none" read, no #RSA_DATA_IN/OUT; "unreadable"
    # its admin_comment carries the RSA marker but cannot be read
    directives: str | None = None
    #: rsad read the queue after this setup: what it knows of the job is not its previous
    #: run's (not durable: a restarted rsad reads the queue first)
    polled: bool = False
    #: the pending reason for which Slurm holds the job whatever the RSA does (a limit of
    #: its association or QOS, a hold: core.states.slurm_withholds), as rsad last read
    #: it; "" when none. Not durable: read again at every poll
    withheld: str = ""


# ---- the answers (pure) -------------------------------------------------------------------

def native_text(message: str) -> str:
    """A core message as it is true in native mode: the core's messages say where a
    declined job's data comes from in queue mode ("the job uses the PFS"); in native
    mode Slurm holds such a job instead, so that clause is dropped."""
    return without_pfs_clause(message)


def answer_data_in(rec: JobRecord | None, bb: BbJob | None, job: str = "") -> Answer:
    """``slurm_bb_data_in``: done once the job's input is on its RAMDISK.

    A job rsad does not track is done only once rsad read the job's own directives
    (its admin_comment, or its batch script) and found no ``#RSA_DATA_IN``/
    ``#RSA_DATA_OUT`` (``bb.directives == "none"``); anything else is unknown: wait."""
    if rec is None:
        return _untracked(bb, job, "stage")
    if bb is not None and not bb.polled:
        # what rsad knows of the job may be its previous run's (a requeued job's setup
        # comes before rsad's next read of the queue): never "done" or "failed" from it
        return Answer("wait", "rsad has not read the job from the queue since its setup")
    state = rec.rsa_state
    if state is RsaState.DECLINED or rec.declined:
        why = native_text(rec.message) or "the RSA will not serve this job"
        return Answer("failed", f"stage-in of job {rec.job_id} failed: {why}; fix it, then "
                                "scancel the job and submit it again")
    if rec.rescued() and not rec.holds_user_data() and rec.job_state not in LEFT_QUEUE:
        # requeued after its previous run's output was rescued (issue 33): it is on the
        # PFS, not in DATA_OUT; this run is not started as if it were (Slurm holds it)
        return Answer("failed", f"job {rec.job_id}'s previous run's output was "
                                f"quarantined, then rescued to {rec.rescue_to}, not to its "
                                "DATA_OUT: this run is not started without it; put what it "
                                "needs in place, then scancel the job and submit it again")
    if state in POST_RUN - TEARDOWN and rec.job_state not in LEFT_QUEUE:
        # requeued: the RAMDISK is the previous run's, its output not yet safe; this
        # run's input is staged on a new one after it (never "done" from the old run)
        if state is RsaState.QUARANTINED:
            return Answer("wait", f"the previous run's output is quarantined on its RAMDISK "
                                  f"({native_text(rec.message)}); this run is staged once "
                                  f"an operator runs `rsa retry {rec.job_id}` or "
                                  f"`rsa release {rec.job_id} --discard-output`")
        return Answer("wait", f"the previous run's output is being staged out "
                              f"({state.value}); this run's input is staged after it")
    if state in STAGED:
        return Answer("done", f"staged in on {rec.nodes}" if rec.nodes else "staged in")
    if state in AWAITING_NODES and bb is not None and bb.withheld and \
            rec.job_state not in LEFT_QUEUE:
        # Slurm set the buffer up, but holds the job for a limit or a hold of its own:
        # no RSA nodes are taken for a job that cannot start (issue 33)
        return Answer("wait", f"Slurm holds job {rec.job_id} for {bb.withheld} (a limit of "
                              "its association or QOS, or a hold), not for the RSA: its "
                              "RAMDISK is built once Slurm no longer holds it for that")
    if state in (RsaState.TEARING_DOWN, RsaState.RELEASED) and \
            rec.job_state not in LEFT_QUEUE:
        # not declined and still pending: the RAMDISK is rebuilt (an RSA node was lost
        # while the input was staged: the core stages it again on other nodes)
        why = native_text(rec.message)
        return Answer("wait", f"staging again: {why}" if why else "waiting for free RSA nodes")
    if state in AWAITING_NODES and rec.job_state is JobState.FINISHED and not rec.cycle:
        # cancelled (or gone) before any RSA node was taken: a data_in still waiting
        # would hold its slurmscriptd helper until StageInTimeout (a day by default)
        return Answer("failed", f"job {rec.job_id} left the queue before its stage-in "
                                "began: nothing was staged")
    if state in TEARDOWN or (
            state is RsaState.RELEASED and rec.job_state is JobState.FINISHED):
        return Answer("failed", f"job {rec.job_id}'s RAMDISK was torn down before it "
                                f"started: {native_text(rec.message) or state.value}")
    return Answer("wait", WAITING_FOR.get(state, state.value))


def _untracked(bb: BbJob | None, job: str, verb: str) -> Answer:
    """data_in / data_out of a job rsad does not track: done only when its directives
    were read and ask nothing of the RSA."""
    if bb is not None and bb.directives == "none":
        if verb == "stage":
            return Answer("done", f"job {job} has no #RSA_DATA_IN or #RSA_DATA_OUT: "
                                  "nothing to stage")
        return Answer("done", f"job {job} has no #RSA_DATA_OUT: nothing to stage out")
    if bb is not None and bb.directives == "unreadable":
        return Answer("wait", f"rsad cannot read job {job}'s #RSA_ directives (its "
                              "admin_comment; rsad's log says why): waiting for them")
    return Answer("wait", f"waiting for rsad to read job {job}'s #RSA_ directives from "
                          "the queue")


def answer_data_out(rec: JobRecord | None, bb: BbJob | None, job: str = "") -> Answer:
    """``slurm_bb_data_out``: done once the job's output is verified on persistent
    storage; failed (output kept on the RAMDISK) once the stage-out is quarantined."""
    if rec is None:
        return _untracked(bb, job, "stage out")
    if rec.rescued():
        # quarantined, then rescued (issue 33): the verification that ends a rescue is of
        # the copy in the rescue area, never of DATA_OUT; "done" would tell Slurm (and its
        # record of the job) that the output was staged out where the job asked
        if rec.holds_user_data():
            return Answer("wait", f"job {rec.job_id}'s output, quarantined, is being "
                                  f"rescued to {rec.rescue_to} (quarantine.rescue_after), "
                                  "not staged out to its DATA_OUT")
        return Answer("failed", f"job {rec.job_id}'s output was quarantined, then rescued "
                                f"to {rec.rescue_to} (quarantine.rescue_after), not staged "
                                "out to its DATA_OUT: it is verified there; "
                                f"scancel --hurry {rec.job_id} ends the stage-out")
    if bb is not None and bb.verified:
        # what was checked, exactly (a POSTPROCESS: its exit status only), as rsa job says
        return Answer("done", bb.checked or "output staged out and verified")
    state = rec.rsa_state
    has_output = rec.spec.data_out is not None or rec.spec.postprocess is not None
    if state is RsaState.QUARANTINED:
        return Answer("failed", f"stage-out of job {rec.job_id} failed: {rec.message}; the "
                                "output stays on its RAMDISK (quarantined): an operator "
                                f"fixes the cause and runs `rsa retry {rec.job_id}`")
    if state in TERMINAL or state in TEARDOWN:
        if not has_output:
            return Answer("done", "no #RSA_DATA_OUT: nothing to stage out")
        if bb is not None and bb.discarded:
            return Answer("failed", f"job {rec.job_id}'s output on its RAMDISK was discarded "
                                    "by an operator (rsa release --discard-output): it is "
                                    f"not on the PFS; scancel --hurry {rec.job_id} ends the "
                                    "stage-out")
        # the core never destroys a RAMDISK holding unverified output (HOLDS_USER_DATA):
        # released without a verification, the job wrote its output to the PFS itself
        # (it ended before its RAMDISK was reset for output, or never got one), or rsad
        # verified it in a record it has since forgotten (Slurm asking again, after a
        # slurmctld restart, about a job older than daemon.retention)
        return Answer("done", "no RAMDISK of rsad's holds the job's output: it was written "
                              "to the PFS directly, or (a job rsad has forgotten, older "
                              "than daemon.retention) staged out and verified earlier")
    if rec.job_state is not JobState.FINISHED:
        return Answer("wait", "waiting for rsad to see the job end")
    return Answer("wait", state.value)


#: what rsad does with an ended job's RAMDISK before it tears it down
_BEFORE_TEARDOWN: Mapping[RsaState, str] = {
    RsaState.STAGING_OUT: "staging its output out",
    RsaState.STAGE_OUT_FAILED: "staging its output out (retrying)",
    RsaState.VERIFYING: "verifying its output on persistent storage",
    RsaState.OUTPUT_VERIFIED: "output verified; tearing its RAMDISK down next",
}


def answer_teardown(rec: JobRecord | None, job: str = "") -> Answer:
    """``slurm_bb_job_teardown`` of a job that ended (or was cancelled): done once its
    RAMDISK is gone; never before its output is verified (quarantined output is kept)."""
    if rec is None:
        return Answer("done", f"rsad holds no RAMDISK for job {job}")
    if rec.rsa_state in TERMINAL:
        return Answer("done", "no RAMDISK left")
    if rec.rsa_state is RsaState.QUARANTINED:
        return Answer("failed", f"job {rec.job_id}'s output is quarantined on its RAMDISK "
                                f"({rec.message}); kept until an operator runs `rsa retry "
                                f"{rec.job_id}` or `rsa release {rec.job_id} --discard-output`")
    if rec.rsa_state in TEARDOWN:
        return Answer("wait", f"tearing job {rec.job_id}'s RAMDISK down")
    doing = _BEFORE_TEARDOWN.get(rec.rsa_state)
    if doing is not None:
        return Answer("wait", f"job {rec.job_id}: {doing}; its RAMDISK is kept until the "
                              "output is verified")
    return Answer("wait", f"job {rec.job_id}: its RAMDISK is torn down once rsad is done "
                          f"with it ({rec.rsa_state.value})")


def pools_json(nodes: Iterable[tuple[str, int, NodeState, str | None]]) -> str:
    """slurm_bb_pools' JSON: one pool per tier, in MiB (granularity 1 MiB). ``nodes``:
    (tier, capacity in bytes, state, owning job or None). A node that is down counts in
    no pool; a drained or busy one is not free."""
    total: dict[str, int] = {}
    free: dict[str, int] = {}
    for tier, capacity, state, owner in nodes:
        if state is NodeState.DOWN:
            total.setdefault(tier, 0)
            free.setdefault(tier, 0)
            continue
        total[tier] = total.get(tier, 0) + capacity // GRANULARITY
        free[tier] = free.get(tier, 0) + (
            capacity // GRANULARITY if state is NodeState.UP and owner is None else 0)
    pools = [{"id": tier, "quantity": total[tier], "granularity": GRANULARITY,
              "free": free[tier]} for tier in sorted(total)]
    return json.dumps({"pools": pools}, sort_keys=True)


# ---- the driver ---------------------------------------------------------------------------

class NativeDriver:
    """Slurm's burst buffer view of rsad's jobs (loop thread only)."""

    def __init__(self, pools_file: Path, grace: float) -> None:
        self.pools_file = pools_file
        self.grace = grace
        self.jobs: dict[str, BbJob] = {}
        self.fresh: set[str] = set()  # set up or expired since the last poll: observe them
        self._pools_text = ""

    # -- what the log says ------------------------------------------------------------------
    def learn(self, ev: Event) -> None:
        """Fold one logged event in (replay, and every commit)."""
        if ev.name == "bb.setup":
            # a new setup is a new run: nothing of an earlier run's output counts for it
            self.jobs[ev.job_id] = BbJob(setup=ev.time)
        elif ev.name == "job.state" and ev.context.get("to") == JobState.RUNNING.value:
            bb = self.jobs.get(ev.job_id)
            if bb is not None:
                bb.ran = True
        elif ev.name == "job.state" and ev.context.get("from") == JobState.RUNNING.value:
            bb = self.jobs.get(ev.job_id)
            if bb is not None and bb.ran:
                bb.over = True
        elif ev.name == "bb.teardown":
            bb = self.jobs.get(ev.job_id)
            if bb is not None and bb.torn is None:
                bb.torn = ev.time
        elif ev.name == "rsa.transition" and \
                ev.context.get("to") == RsaState.OUTPUT_VERIFIED.value:
            bb = self.jobs.setdefault(ev.job_id, BbJob(setup=ev.time, ran=True))
            if bb.ran:
                bb.verified = True
                told = str((ev.context.get("set") or {}).get("message") or "")
                bb.checked = told if ": " in told else ""  # without a summary: unknown
        elif ev.name == "rsa.transition" and ev.context.get("trigger") == "discard":
            bb = self.jobs.setdefault(ev.job_id, BbJob(setup=ev.time, ran=True))
            bb.discarded = bb.discarded or bb.ran

    def verified(self, job: str) -> bool:
        bb = self.jobs.get(job)
        return bb is not None and bb.verified

    def to_json(self) -> dict[str, Any]:
        return {j: {"setup": b.setup, "torn": b.torn, "verified": b.verified,
                    "discarded": b.discarded, "ran": b.ran, "over": b.over,
                    "checked": b.checked}
                for j, b in self.jobs.items()}

    def load(self, data: Mapping[str, Any]) -> None:
        for job, b in data.items():
            self.jobs[str(job)] = BbJob(setup=float(b["setup"]), torn=b.get("torn"),
                                        verified=bool(b.get("verified")),
                                        discarded=bool(b.get("discarded")),
                                        # snapshots before "ran": as they behaved
                                        ran=bool(b.get("ran", True)),
                                        over=bool(b.get("over")),
                                        checked=str(b.get("checked") or ""))

    # -- observation ------------------------------------------------------------------------
    def tracks(self, job: str) -> bool:
        """Slurm has set a burst buffer up for ``job``: rsad may track it."""
        return job in self.jobs

    def held(self, job: str, slurm_state: str, now: float, reason: str = "",
             awaiting: bool = True) -> bool:
        """Whether a pending job is held by Slurm for its burst buffer (on-deck for the
        core: no demotion). After Slurm's teardown of a pending job, ``grace`` more
        seconds (a restarted slurmctld sets it up again).

        Not while Slurm holds the job for a limit of its association or QOS, or a hold
        (``reason``, :func:`slurm_withholds`), and rsad has taken no RSA nodes for it yet
        (``awaiting``): such a job cannot start (issue 33). A job that has its nodes
        keeps them (Slurm 22.05 shows a bb TRES limit only after the stage-in): the
        lock-in bound (``slurm.lockin.timeout``) frees them if it does not start."""
        bb = self.jobs.get(job)
        if bb is None or slurm_state != "PENDING" or bb.over:
            return False
        bb.withheld = reason if slurm_withholds(reason) and awaiting else ""
        if bb.withheld:
            return False
        return bb.torn is None or now - bb.torn < self.grace

    def due(self, now: float, tracked: Container[str]) -> set[str]:
        """Jobs to observe this poll even if their queue line did not change: new set-ups,
        pending jobs whose grace after a teardown just ended, and every set-up job rsad
        neither tracks (``tracked``) nor has read the directives of (after a restart, and
        after a poll that failed). Put them back with :meth:`unread` if the read fails."""
        out = set(self.fresh)
        self.fresh.clear()
        for job, bb in self.jobs.items():
            if bb.torn is not None and not bb.expired and now - bb.torn >= self.grace:
                bb.expired = True
                out.add(job)
            elif bb.directives != "none" and job not in tracked:
                out.add(job)
        return out

    def observed(self, since: float) -> None:
        """A poll that started at ``since`` read the queue: every job set up before it
        is known to rsad as it is now, not as its previous run left it."""
        for bb in self.jobs.values():
            if bb.setup <= since:
                bb.polled = True

    def unread(self, jobs: Iterable[str]) -> None:
        """The queue read of a poll failed: ``jobs`` (its :meth:`due` set) are due again."""
        self.fresh.update(j for j in jobs if j in self.jobs)

    def read(self, job: str, directives: str) -> None:
        """rsad read the directives of ``job`` (not tracked): ``"none"`` (no
        #RSA_DATA_IN/OUT) or ``"unreadable"``."""
        bb = self.jobs.get(job)
        if bb is not None:
            bb.directives = directives

    def setup(self, job: str, now: float, context: Mapping[str, Any]) -> list[Event]:
        """slurm_bb_setup: the job is Slurm's to stage now. Idempotent: a re-run setup of
        a job already set up (slurmctld restarted) changes nothing but the teardown mark."""
        bb = self.jobs.get(job)
        self.fresh.add(job)
        if bb is not None and bb.torn is None and not bb.over:
            return []  # set up again for the same run (slurmctld restarted)
        ev = Event(now, job, "bb.setup", dict(context))
        self.learn(ev)
        return [ev]

    def teardown_pending(self, job: str, now: float, hurry: bool) -> list[Event]:
        """slurm_bb_job_teardown of a job still pending: kept ``grace`` seconds."""
        bb = self.jobs.get(job)
        if bb is None or bb.torn is not None:
            return []
        ev = Event(now, job, "bb.teardown", {"hurry": hurry, "kept_for": self.grace})
        self.learn(ev)
        return [ev]

    def forget(self, jobs: Iterable[str]) -> None:
        for job in jobs:
            self.jobs.pop(job, None)
            self.fresh.discard(job)

    # -- one hook call ----------------------------------------------------------------------
    def serve(self, hook: str, job: str, payload: Mapping[str, Any], rec: JobRecord | None,
              now: float, *, capacity: Callable[[], Mapping[str, int]]) -> Served:
        """One ``rsa-bb`` call from burst_buffer.lua: the answer, the events to commit and
        whether the queue is to be read now. ``capacity``: each RSA node's size. Every
        answer comes from what rsad knows for sure (its log, and the job's directives as
        read since its setup): what it does not know yet is "wait", never "done"."""
        events: list[Event] = []
        poll_now = False
        if hook == "setup":
            events = self.setup(job, now, {k: str(payload[k]) for k in (
                "uid", "gid", "pool", "size", "alias") if k in payload})
            # read the queue now: the job is the RSA's
            poll_now = rec is None or rec.job_state is not JobState.FINISHED
            answer = Answer("done", "set up")
        elif hook in ("data_in", "data_out"):
            if job not in self.jobs:  # rsad lost the setup (its state was reset): take it now
                events, poll_now = self.setup(job, now, {}), True
            bb = self.jobs[job]
            answer = answer_data_in(rec, bb, job) if hook == "data_in" else \
                answer_data_out(rec, bb, job)
        elif hook == "real_size":
            size = 0
            if rec is not None and rec.nodes:
                caps = capacity()
                size = sum(caps.get(n, 0) for n in NodeSet(rec.nodes))
            answer = Answer("done", str(size))
        elif hook in ("pre_run", "post_run"):
            answer = Answer("done", rec.rsa_state.value if rec else
                            f"rsad tracks no RSA work for job {job}")
        elif hook == "teardown":
            hurry = str(payload.get("hurry", "false")) == "true"
            if rec is not None and rec.rsa_state not in TERMINAL and \
                    rec.job_state is JobState.RUNNING:
                # Slurm tears down only a job that ended or never started: rsad has not
                # seen this one end yet; its output is staged out before the RAMDISK goes
                poll_now = True
                answer = Answer("wait", f"job {job} ended; rsad has not seen it end yet: "
                                        "its output is staged out before its RAMDISK goes")
            elif rec is not None and rec.job_state is not JobState.FINISHED and \
                    rec.rsa_state not in TERMINAL:
                # still pending (a restarted slurmctld tears down, then sets up again):
                # kept bb_grace seconds, then torn down as a demotion would
                events = self.teardown_pending(job, now, hurry)
                if rec.rsa_state in POST_RUN - TEARDOWN:
                    # requeued: the RAMDISK is the earlier run's, with its output; nothing
                    # of this run is on it, and it goes only once that output is safe
                    answer = Answer("done", f"job {job}'s RAMDISK holds its earlier run's "
                                            "output: kept until that is verified on "
                                            "persistent storage or an operator discards "
                                            "it (nothing of this run is on it)")
                else:
                    answer = Answer("done", f"kept {self.grace:.0f}s for a new setup, "
                                            "then torn down unless the job starts")
            else:
                answer = answer_teardown(rec, job)
        else:
            raise ValueError(f"unknown burst buffer hook {hook!r}")
        return Served(answer, events, poll_now)

    # -- pools ------------------------------------------------------------------------------
    @property
    def pools_text(self) -> str:
        """The pools JSON as last written ("" before the first write): what ``GET
        /v1/bb/pools`` gives ``rsa-bb pools`` on a slurmctld host without rsad."""
        return self._pools_text

    def write_pools(self, nodes: Iterable[tuple[str, int, NodeState, str | None]]) -> bool:
        """Rewrite the pools file when the free capacity changed (atomically, mode 0644:
        SlurmUser reads it). Returns whether it wrote."""
        text = pools_json(nodes)
        if text == self._pools_text:
            return False
        try:
            replace_pools_file(self.pools_file, text)
        except OSError as e:
            log.error("cannot write the burst buffer pools file %s: %s (slurm_bb_pools "
                      "reports no pools)", self.pools_file, e)
            return False
        self._pools_text = text
        return True
