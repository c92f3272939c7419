"""The transition table: every RSA-state change is a row of data (seed 004 Figs. 2–5).

Owns :class:`Trigger` (job-state observations, action outcomes, timers, user and operator
commands), :class:`Cond` (per-job facts that pick a branch of a row), :class:`Effect`
(bookkeeping the machine does inside the core: allocation, timers, counters), :class:`Rule`
and ``TABLE``. Every (rsa-state, job-state) pair and every (rsa-state, TICK) pair has an
explicit row — the paper warns that an rsa-state "may have been set by the scheduler in a
different job-state and these transitions must be handled properly" (§3.1). Any other pair
not in the table is impossible and raises :class:`InvalidTransition`.

Must not import anything but the stdlib and other core leaf modules.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from rsa_scheduler.core.actions import ActionKind, Result
from rsa_scheduler.core.states import JobState, RsaState
from rsa_scheduler.errors import RsaError


class Trigger(enum.StrEnum):
    """What can move an RSA-state."""

    # job-state observations (level-triggered: fed every cycle)
    QUEUED = "queued"
    ON_DECK = "on-deck"
    DEMOTED = "demoted"
    RUNNING = "running"
    FINISHED = "finished"
    STARTED = "started"  # edge: the job began running this observation (running is the level)
    TICK = "tick"  # "nothing new": lets transient states move on
    # results of in-core effects
    NODES_ALLOCATED = "nodes-allocated"
    NODES_BUSY = "nodes-busy"  # not enough free RSA nodes: skip this cycle (§3.1)
    POLICY_VIOLATION = "policy-violation"  # the request can never be met
    GIVE_UP = "give-up"  # retry budget exhausted
    # action outcomes
    FS_BUILT = "fs-built"
    FS_BUILD_FAILED = "fs-build-failed"
    STAGE_IN_DONE = "stage-in-done"
    STAGE_IN_FAILED = "stage-in-failed"
    STAGE_IN_REFUSED = "stage-in-refused"
    LOCKED = "locked"
    LOCK_FAILED = "lock-failed"
    INPUT_MOUNTED = "input-mounted"
    INPUT_MOUNT_FAILED = "input-mount-failed"
    OUTPUT_MOUNTED = "output-mounted"
    OUTPUT_MOUNT_FAILED = "output-mount-failed"
    WRITEBACK_DONE = "writeback-done"
    WRITEBACK_FAILED = "writeback-failed"
    RESET_DONE = "reset-done"
    RESET_BUSY = "reset-busy"
    RESET_ERROR = "reset-error"
    STAGE_OUT_DONE = "stage-out-done"
    STAGE_OUT_FAILED = "stage-out-failed"
    VERIFIED = "verified"
    VERIFY_FAILED = "verify-failed"
    DESTROYED = "destroyed"
    DESTROY_FAILED = "destroy-failed"
    # timers
    RESET_DUE = "reset-due"
    WAIT_EXPIRED = "wait-expired"
    RETRY_DUE = "retry-due"
    # user and operator commands
    INPUT_DONE = "input-done"  # user: `rsa input-done` from inside the job
    CANCEL_STAGING = "cancel-staging"  # user: do not use the RSA for this run
    RETRY = "retry"  # operator: try the failed step again now
    DISCARD = "discard"  # operator: give up the output on the RAMDISK (explicit)
    FORCE_RELEASE = "force-release"  # operator: nodes are clean, return them
    # the RSA-node pool
    NODE_LOST = "node-lost"  # an RSA node of the job went down before its input was staged


JOB_TRIGGERS: Mapping[JobState, Trigger] = {
    JobState.QUEUED: Trigger.QUEUED,
    JobState.ON_DECK: Trigger.ON_DECK,
    JobState.DEMOTED: Trigger.DEMOTED,
    JobState.RUNNING: Trigger.RUNNING,
    JobState.FINISHED: Trigger.FINISHED,
}

#: (action kind, result) -> trigger
OUTCOME_TRIGGERS: Mapping[tuple[ActionKind, Result], Trigger] = {
    (ActionKind.BUILD_FS, Result.OK): Trigger.FS_BUILT,
    (ActionKind.BUILD_FS, Result.FAILED): Trigger.FS_BUILD_FAILED,
    (ActionKind.BUILD_FS, Result.REFUSED): Trigger.FS_BUILD_FAILED,
    (ActionKind.STAGE_IN, Result.OK): Trigger.STAGE_IN_DONE,
    (ActionKind.STAGE_IN, Result.FAILED): Trigger.STAGE_IN_FAILED,
    (ActionKind.STAGE_IN, Result.REFUSED): Trigger.STAGE_IN_REFUSED,
    (ActionKind.LOCK_IN, Result.OK): Trigger.LOCKED,
    (ActionKind.LOCK_IN, Result.FAILED): Trigger.LOCK_FAILED,
    (ActionKind.LOCK_IN, Result.REFUSED): Trigger.LOCK_FAILED,
    (ActionKind.MOUNT_INPUT, Result.OK): Trigger.INPUT_MOUNTED,
    (ActionKind.MOUNT_INPUT, Result.FAILED): Trigger.INPUT_MOUNT_FAILED,
    (ActionKind.MOUNT_INPUT, Result.REFUSED): Trigger.INPUT_MOUNT_FAILED,
    (ActionKind.MOUNT_OUTPUT, Result.OK): Trigger.OUTPUT_MOUNTED,
    (ActionKind.MOUNT_OUTPUT, Result.FAILED): Trigger.OUTPUT_MOUNT_FAILED,
    (ActionKind.MOUNT_OUTPUT, Result.REFUSED): Trigger.OUTPUT_MOUNT_FAILED,
    (ActionKind.WRITE_BACK, Result.OK): Trigger.WRITEBACK_DONE,
    (ActionKind.WRITE_BACK, Result.FAILED): Trigger.WRITEBACK_FAILED,
    (ActionKind.WRITE_BACK, Result.REFUSED): Trigger.WRITEBACK_FAILED,
    (ActionKind.RESET, Result.OK): Trigger.RESET_DONE,
    (ActionKind.RESET, Result.BUSY): Trigger.RESET_BUSY,
    (ActionKind.RESET, Result.FAILED): Trigger.RESET_ERROR,
    (ActionKind.RESET, Result.REFUSED): Trigger.RESET_ERROR,
    (ActionKind.STAGE_OUT, Result.OK): Trigger.STAGE_OUT_DONE,
    (ActionKind.STAGE_OUT, Result.FAILED): Trigger.STAGE_OUT_FAILED,
    (ActionKind.STAGE_OUT, Result.REFUSED): Trigger.STAGE_OUT_FAILED,
    (ActionKind.VERIFY, Result.OK): Trigger.VERIFIED,
    (ActionKind.VERIFY, Result.FAILED): Trigger.VERIFY_FAILED,
    (ActionKind.VERIFY, Result.REFUSED): Trigger.VERIFY_FAILED,
    (ActionKind.DESTROY_FS, Result.OK): Trigger.DESTROYED,
    (ActionKind.DESTROY_FS, Result.FAILED): Trigger.DESTROY_FAILED,
    (ActionKind.DESTROY_FS, Result.REFUSED): Trigger.DESTROY_FAILED,
}


class Cond(enum.StrEnum):
    """Per-job facts that select a branch of a rule."""

    NO_INPUT = "no DATA_IN"  # nothing to stage in or mount over an input path
    NO_OUTPUT = "no DATA_OUT"  # nothing to mount over an output path or stage out
    RW_INPUT = "writable input"  # #RSA_INPUT=rw: changes must be written back
    POLICY_WAIT = "early-start=wait"
    POLICY_UNION = "early-start=union"
    JOB_ENDED = "job not running"


class Effect(enum.StrEnum):
    """Bookkeeping the machine does inside the core when a rule fires."""

    TRY_ALLOCATE = "try-allocate"  # ask the pool; feeds back NODES_* / POLICY_VIOLATION / GIVE_UP
    RELEASE_NODES = "release-nodes"  # return the job's RSA nodes to the pool
    ARM_RESET = "arm-reset"  # start the input->output reset timer (if the job has DATA_OUT)
    DISARM_RESET = "disarm-reset"  # the reset is abandoned; output goes to the PFS (footnote 3)
    ARM_WAIT = "arm-wait"  # early-start=wait: start the wait deadline (once)
    END_WAIT = "end-wait"  # the wait deadline passed: fall back from now on
    ARM_RETRY = "arm-retry"  # count a failure; backoff timer, or GIVE_UP when out of budget
    RESET_ATTEMPTS = "reset-attempts"  # operator retry: fresh budget
    MARK_DECLINED = "mark-declined"  # never allocate for this job again
    LOCKED = "locked"  # remember that lock-in is in place
    UNLOCKED = "unlocked"


@dataclass(frozen=True, slots=True)
class Branch:
    """An alternative destination taken when ``cond`` holds for the job."""

    cond: Cond
    dst: RsaState
    actions: tuple[ActionKind, ...] = ()
    effects: tuple[Effect, ...] = ()
    note: str = ""  # why; empty: the rule's note (it is also the tell-user/alert text)
    ref: str = ""  # where in seed 004 (or "ext: ..."); empty: the rule's ref


@dataclass(frozen=True, slots=True)
class Rule:
    """What happens on ``trigger`` in ``src``: the first branch whose condition holds, else
    the default (``dst``/``actions``/``effects``)."""

    src: RsaState
    trigger: Trigger
    dst: RsaState
    actions: tuple[ActionKind, ...] = ()
    effects: tuple[Effect, ...] = ()
    branches: tuple[Branch, ...] = ()
    note: str = ""  # why this row exists; also the text of its tell-user/alert actions
    #: where in seed 004 this comes from ("§3.1 Fig. 3", "§3.2 fn. 3"), or "ext: <what>
    #: (<closest passage>)" for our own additions the paper does not cover
    ref: str = ""

    @property
    def is_stay(self) -> bool:
        """True when the default does nothing at all."""
        return (self.dst is self.src and not self.actions and not self.effects
                and not self.branches)


class InvalidTransition(RsaError):
    """An event that cannot happen in the current state."""

    def __init__(self, state: RsaState, trigger: Trigger, job_id: str = "") -> None:
        self.state = state
        self.trigger = trigger
        who = f"job {job_id}: " if job_id else ""
        super().__init__(f"{who}can't {trigger.value} from {state.value}")


S, T, A, E, C = RsaState, Trigger, ActionKind, Effect, Cond
B = Branch
JOB_STATE_TRIGGERS = (T.QUEUED, T.ON_DECK, T.DEMOTED, T.RUNNING, T.FINISHED, T.TICK)


# Refs for rows seed 004 does not cover: "ext: <what> (<closest passage or 'silent'>)".
_FAIL = "ext: failure handling (§3 is silent)"
_OPERATOR = "ext: operator command (§3 is silent)"
_USER_CANCEL = "ext: user command cancel-staging (§3 is silent)"
_REQUEUE = "ext: requeue of a started job (§3 is silent)"
_CANCELLED = "ext: cancelled before it ran (§3.1: jobs 'may be canceled'); tear-down as Fig. 3"
_NOTHING_HELD = "§3.3 (nothing held to stage out or release)"
_UNSERVABLE = "ext: unservable request (cf. §2 fn. 1)"
_WAIT = "§3.1 fn. 2 (job option to wait); ext: wait deadline, RAMDISK kept for output"
_EARLY_OUT = "§3.1 fn. 2 (RAMDISK ignored for input); ext: RAMDISK kept for output"
_EARLY = "§3.1 fn. 2"
_EARLY_NO_OUT = "§3.1 (RAMDISK ignored); ext: no DATA_OUT"
_NO_IN = "ext: no DATA_IN (§3.4 assumes one)"
_NO_OUT = "ext: no DATA_OUT (§3.4 assumes one)"
_RW_IN = "ext: writable input (§2 assumes input stays on disk)"
_QUARANTINE = "ext: quarantine (§3 is silent)"
_VERIFY = "ext: output verification (§3.3 is silent)"
_LOST = "ext: RSA node lost while the RAMDISK is prepared (§3 is silent; cf. §3.1 fn. 2)"


def _stay(src: RsaState, *triggers: Trigger, note: str = "") -> list[Rule]:
    return [Rule(src, t, src, note=note) for t in triggers]


def _left(finished_ref: str) -> dict[Trigger, str]:
    """Refs for the four ways a started job leaves the compute nodes: it finished (the paper
    case, ``finished_ref``) or it was requeued (pending again: ours)."""
    return {T.QUEUED: _REQUEUE, T.ON_DECK: _REQUEUE, T.DEMOTED: _REQUEUE,
            T.FINISHED: finished_ref}


def _rows() -> list[Rule]:
    r: list[Rule] = []
    teardown = (A.DESTROY_FS,)
    cancel_teardown = (A.CANCEL, A.DESTROY_FS)
    fallback_actions = (A.CANCEL, A.TELL_USER, A.RESET)
    fallback_note = "early start: input read from the PFS; RAMDISK recreated for output"
    wait_note = "wait: the Prolog holds the start until staged"
    early_no_out = "started before staging finished and has no DATA_OUT: the job uses the PFS"
    wait_no_out = "waited too long for stage-in and has no DATA_OUT: the job uses the PFS"
    rw_teardown = "writable input: write the changes back before tear-down"
    no_in_out = "no DATA_IN: mount the RAMDISK over DATA_OUT"

    # ---- NONE: no RSA resources ------------------------------------------------------
    r += _stay(S.NONE, T.QUEUED, T.DEMOTED, T.TICK)
    r += [
        Rule(S.NONE, T.ON_DECK, S.NONE, effects=(E.TRY_ALLOCATE,),
             ref="§3.1; ext: on-deck settle time",
             note="on-deck: allocate RSA nodes in proportion to the job"),
        Rule(S.NONE, T.RUNNING, S.DECLINED, actions=(A.TELL_USER,), ref="§3.2",
             note="started before RSA nodes were free: the job reads the PFS"),
        Rule(S.NONE, T.FINISHED, S.RELEASED, note="ended without ever being on-deck",
             ref=_NOTHING_HELD),
        Rule(S.NONE, T.NODES_ALLOCATED, S.ALLOCATED, actions=(A.ALLOCATE,), ref="§3.1",
             note="nodes removed from the free list and marked as the job's"),
        Rule(S.NONE, T.NODES_BUSY, S.NONE, ref="§3.1",
             note="not enough free RSA nodes: skip this cycle"),
        Rule(S.NONE, T.POLICY_VIOLATION, S.DECLINED, actions=(A.TELL_USER,),
             effects=(E.MARK_DECLINED,), ref=_UNSERVABLE,
             note="the RSA cannot serve this job; it uses the PFS"),
        Rule(S.NONE, T.GIVE_UP, S.DECLINED, actions=(A.TELL_USER,),
             effects=(E.MARK_DECLINED,), ref=_FAIL,
             note="the RSA gave up on this job; it uses the PFS"),
        Rule(S.NONE, T.CANCEL_STAGING, S.DECLINED, actions=(A.TELL_USER,),
             effects=(E.MARK_DECLINED,), ref=_USER_CANCEL,
             note="staging cancelled by the user; job uses the PFS"),
    ]

    # ---- ALLOCATED: nodes held, nothing started --------------------------------------
    r += _stay(S.ALLOCATED, T.ON_DECK)
    r += [
        Rule(S.ALLOCATED, T.QUEUED, S.RELEASED, actions=(A.RELEASE,),
             effects=(E.RELEASE_NODES,), ref="§3.1 Fig. 3",
             note="demoted: release the nodes (nothing built yet)"),
        Rule(S.ALLOCATED, T.DEMOTED, S.RELEASED, actions=(A.RELEASE,),
             effects=(E.RELEASE_NODES,), ref="§3.1 Fig. 3",
             note="demoted: release the nodes (nothing built yet)"),
        Rule(S.ALLOCATED, T.RUNNING, S.FS_BUILDING, actions=(A.BUILD_FS,),
             ref=_EARLY_OUT,
             note="early start: build the RAMDISK for output",
             branches=(
                 B(C.POLICY_WAIT, S.ALLOCATED, effects=(E.ARM_WAIT,),
                   note=wait_note, ref=_EARLY),
                 B(C.NO_OUTPUT, S.RELEASED, (A.TELL_USER, A.RELEASE), (E.RELEASE_NODES,),
                   note=early_no_out, ref=_EARLY_NO_OUT),
             )),
        Rule(S.ALLOCATED, T.FINISHED, S.RELEASED, actions=(A.RELEASE,),
             effects=(E.RELEASE_NODES,), ref=_CANCELLED,
             note="cancelled before it ran: release the nodes"),
        Rule(S.ALLOCATED, T.TICK, S.FS_BUILDING, actions=(A.BUILD_FS,), ref="§3.1",
             note="a separate process constructs the parallel RAMDISK"),
        Rule(S.ALLOCATED, T.CANCEL_STAGING, S.DECLINED, actions=(A.TELL_USER, A.RELEASE),
             effects=(E.RELEASE_NODES, E.MARK_DECLINED), ref=_USER_CANCEL,
             note="staging cancelled by the user; job uses the PFS"),
        Rule(S.ALLOCATED, T.WAIT_EXPIRED, S.FS_BUILDING, actions=(A.BUILD_FS,),
             effects=(E.END_WAIT,), ref=_WAIT,
             note="waited too long for stage-in: the job reads the PFS",
             branches=(B(C.NO_OUTPUT, S.RELEASED, (A.TELL_USER, A.RELEASE),
                         (E.RELEASE_NODES,), ref=_NO_OUT),)),
    ]

    # ---- FS_BUILDING: BUILD_FS outstanding --------------------------------------------
    r += _stay(S.FS_BUILDING, T.ON_DECK, T.TICK)
    r += [
        Rule(S.FS_BUILDING, T.QUEUED, S.TEARING_DOWN, actions=cancel_teardown,
             ref="§3.1 Fig. 3", note="demoted: stop the build, destroy, release the nodes"),
        Rule(S.FS_BUILDING, T.DEMOTED, S.TEARING_DOWN, actions=cancel_teardown,
             ref="§3.1 Fig. 3", note="demoted: stop the build, destroy, release the nodes"),
        Rule(S.FS_BUILDING, T.RUNNING, S.FS_BUILDING, ref=_EARLY_OUT,
             note="early start: let the build finish, then use it for output",
             effects=(),
             branches=(
                 B(C.POLICY_WAIT, S.FS_BUILDING, effects=(E.ARM_WAIT,),
                   note=wait_note, ref=_EARLY),
                 B(C.NO_OUTPUT, S.TEARING_DOWN, (A.CANCEL, A.TELL_USER, A.DESTROY_FS),
                   note=early_no_out, ref=_EARLY_NO_OUT),
             )),
        Rule(S.FS_BUILDING, T.FINISHED, S.TEARING_DOWN, actions=cancel_teardown,
             ref=_CANCELLED, note="cancelled before it ran: stop the build and tear down"),
        Rule(S.FS_BUILDING, T.FS_BUILT, S.FS_READY, ref="§3.1",
             note="the RAMDISK is marked ready for use"),
        Rule(S.FS_BUILDING, T.FS_BUILD_FAILED, S.FS_FAILED, actions=(A.ALERT,),
             effects=(E.ARM_RETRY,), ref=_FAIL, note="RAMDISK build failed"),
        Rule(S.FS_BUILDING, T.CANCEL_STAGING, S.TEARING_DOWN, actions=cancel_teardown,
             effects=(E.MARK_DECLINED,), ref=_USER_CANCEL,
             note="staging cancelled by the user: stop the build and tear down"),
        Rule(S.FS_BUILDING, T.WAIT_EXPIRED, S.FS_BUILDING, effects=(E.END_WAIT,), ref=_WAIT,
             note="waited too long for stage-in: the job reads the PFS",
             branches=(B(C.NO_OUTPUT, S.TEARING_DOWN, (A.CANCEL, A.TELL_USER, A.DESTROY_FS),
                         ref=_NO_OUT),)),
    ]

    # ---- FS_FAILED: the build failed; clean up whatever half exists -------------------
    for t in JOB_STATE_TRIGGERS:
        r.append(Rule(S.FS_FAILED, t, S.TEARING_DOWN, actions=teardown, ref=_FAIL,
                      note="remove the half-built RAMDISK; a later cycle may try again"))
    r.append(Rule(S.FS_FAILED, T.GIVE_UP, S.TEARING_DOWN, actions=(A.TELL_USER, A.DESTROY_FS),
                  effects=(E.MARK_DECLINED,), ref=_FAIL,
                  note="the RAMDISK could not be built; the job uses the PFS"))

    # ---- FS_READY: empty RAMDISK, nothing outstanding --------------------------------
    r += _stay(S.FS_READY, T.ON_DECK)
    r += [
        Rule(S.FS_READY, T.QUEUED, S.TEARING_DOWN, actions=teardown, ref="§3.1 Fig. 3",
             note="demoted: destroy the RAMDISK, release the nodes"),
        Rule(S.FS_READY, T.DEMOTED, S.TEARING_DOWN, actions=teardown, ref="§3.1 Fig. 3",
             note="demoted: destroy the RAMDISK, release the nodes"),
        Rule(S.FS_READY, T.RUNNING, S.MOUNTING_OUTPUT, actions=(A.TELL_USER, A.MOUNT_OUTPUT),
             ref=_EARLY_OUT,
             note="early start: nothing staged yet; the empty RAMDISK takes the output",
             branches=(
                 B(C.NO_INPUT, S.MOUNTING_OUTPUT, (A.MOUNT_OUTPUT,),
                   note="no input to stage: the RAMDISK takes the output",
                   ref=f"§3.2; {_NO_IN}"),
                 B(C.POLICY_WAIT, S.STAGING_IN, (A.STAGE_IN,), (E.ARM_WAIT,),
                   note="wait: stage in while the Prolog holds the start", ref=_EARLY),
                 B(C.NO_OUTPUT, S.TEARING_DOWN, (A.TELL_USER, A.DESTROY_FS),
                   note=early_no_out, ref=_EARLY_NO_OUT),
             )),
        Rule(S.FS_READY, T.FINISHED, S.TEARING_DOWN, actions=teardown, ref=_CANCELLED,
             note="cancelled before it ran: destroy the RAMDISK"),
        Rule(S.FS_READY, T.TICK, S.STAGING_IN, actions=(A.STAGE_IN,), ref="§3.1",
             note="the RAMDISK is ready: start the data stage-in",
             branches=(B(C.NO_INPUT, S.STAGED_IN, (A.LOCK_IN,),
                         note="nothing to stage in: lock the job in at once",
                         ref=f"§3.1; {_NO_IN}"),)),
        Rule(S.FS_READY, T.CANCEL_STAGING, S.TEARING_DOWN, actions=teardown,
             effects=(E.MARK_DECLINED,), ref=_USER_CANCEL,
             note="staging cancelled by the user: destroy the RAMDISK"),
        Rule(S.FS_READY, T.WAIT_EXPIRED, S.MOUNTING_OUTPUT,
             actions=(A.TELL_USER, A.MOUNT_OUTPUT), effects=(E.END_WAIT,), ref=_WAIT,
             note="waited too long for stage-in: input from the PFS, RAMDISK for output",
             branches=(B(C.NO_OUTPUT, S.TEARING_DOWN, (A.TELL_USER, A.DESTROY_FS),
                         note=wait_no_out, ref=_NO_OUT),)),
    ]

    # ---- STAGING_IN: STAGE_IN outstanding ---------------------------------------------
    r += _stay(S.STAGING_IN, T.ON_DECK, T.TICK)
    r += [
        Rule(S.STAGING_IN, T.QUEUED, S.TEARING_DOWN, actions=cancel_teardown, ref="§3.1 Fig. 3",
             note="demoted: stop staging, destroy the RAMDISK, release the nodes"),
        Rule(S.STAGING_IN, T.DEMOTED, S.TEARING_DOWN, actions=cancel_teardown,
             ref="§3.1 Fig. 3",
             note="demoted: stop staging, destroy the RAMDISK, release the nodes"),
        Rule(S.STAGING_IN, T.RUNNING, S.RESETTING, fallback_actions, ref=_EARLY_OUT,
             note=fallback_note,
             branches=(
                 B(C.POLICY_WAIT, S.STAGING_IN, effects=(E.ARM_WAIT,),
                   note=wait_note, ref=_EARLY),
                 B(C.POLICY_UNION, S.MOUNTING_INPUT, (A.CANCEL, A.TELL_USER, A.MOUNT_INPUT),
                   note="union: overlay what is staged over the PFS directory", ref=_EARLY),
                 B(C.NO_OUTPUT, S.TEARING_DOWN, (A.CANCEL, A.TELL_USER, A.DESTROY_FS),
                   note=early_no_out, ref=_EARLY_NO_OUT),
             )),
        Rule(S.STAGING_IN, T.FINISHED, S.TEARING_DOWN, actions=cancel_teardown,
             ref=_CANCELLED, note="cancelled before it ran: stop staging and tear down"),
        Rule(S.STAGING_IN, T.STAGE_IN_DONE, S.STAGED_IN, actions=(A.LOCK_IN,), ref="§3.1",
             note="staged: lock the job in"),
        Rule(S.STAGING_IN, T.STAGE_IN_FAILED, S.STAGE_IN_FAILED, actions=(A.ALERT,),
             effects=(E.ARM_RETRY,), ref=_FAIL, note="stage-in failed; will retry"),
        Rule(S.STAGING_IN, T.STAGE_IN_REFUSED, S.TEARING_DOWN,
             actions=(A.TELL_USER, A.DESTROY_FS), effects=(E.MARK_DECLINED,),
             ref="§3.4 (scripts run as the user); ext: refusal",
             note="the user cannot read DATA_IN (or PREPROCESS failed): job uses the PFS"),
        Rule(S.STAGING_IN, T.CANCEL_STAGING, S.TEARING_DOWN, actions=cancel_teardown,
             effects=(E.MARK_DECLINED,), ref=_USER_CANCEL,
             note="staging cancelled by the user: stop staging and tear down"),
        Rule(S.STAGING_IN, T.WAIT_EXPIRED, S.RESETTING, fallback_actions,
             effects=(E.END_WAIT,), ref=_WAIT, note=fallback_note,
             branches=(B(C.NO_OUTPUT, S.TEARING_DOWN, (A.CANCEL, A.TELL_USER, A.DESTROY_FS),
                         note=wait_no_out, ref=_NO_OUT),)),
    ]

    # ---- an RSA node lost before the input is staged (Scheduler.set_node_state) -------
    # The RAMDISK holds at most a partial copy of DATA_IN: it is torn down (the lost node
    # is skipped and cleaned when it comes back, daemon/service.py). Under wait the job is
    # staged again on healthy nodes when it is next; otherwise it reads the PFS.
    lost_note = "an RSA node was lost while the input was staged"
    r.append(Rule(S.ALLOCATED, T.NODE_LOST, S.RELEASED, actions=(A.RELEASE,), ref=_LOST,
                  note=f"{lost_note}: other nodes are allocated when the job is next"))
    for src, acts in ((S.FS_BUILDING, cancel_teardown), (S.FS_READY, teardown),
                      (S.STAGING_IN, cancel_teardown), (S.STAGE_IN_FAILED, teardown),
                      (S.FS_FAILED, teardown)):
        r.append(Rule(src, T.NODE_LOST, S.TEARING_DOWN, actions=(A.TELL_USER, *acts),
                      effects=(E.MARK_DECLINED,), ref=_LOST,
                      note=f"{lost_note}: the job reads the PFS",
                      branches=(B(C.POLICY_WAIT, S.TEARING_DOWN, (A.TELL_USER, *acts),
                                  note=f"{lost_note}: it is staged again on other RSA "
                                       "nodes"),)))

    # ---- STAGE_IN_FAILED: waiting to retry -------------------------------------------
    r += _stay(S.STAGE_IN_FAILED, T.ON_DECK, T.TICK)
    r += [
        Rule(S.STAGE_IN_FAILED, T.QUEUED, S.TEARING_DOWN, actions=teardown,
             ref="§3.1 Fig. 3", note="demoted: destroy the RAMDISK, release the nodes"),
        Rule(S.STAGE_IN_FAILED, T.DEMOTED, S.TEARING_DOWN, actions=teardown,
             ref="§3.1 Fig. 3", note="demoted: destroy the RAMDISK, release the nodes"),
        Rule(S.STAGE_IN_FAILED, T.RUNNING, S.RESETTING, actions=(A.TELL_USER, A.RESET),
             ref=f"§3.1 fn. 2; {_FAIL}",
             note="started while stage-in was failing: input from the PFS",
             branches=(B(C.NO_OUTPUT, S.TEARING_DOWN, (A.TELL_USER, A.DESTROY_FS),
                         ref=_NO_OUT),)),
        Rule(S.STAGE_IN_FAILED, T.FINISHED, S.TEARING_DOWN, actions=teardown, ref=_CANCELLED,
             note="cancelled before it ran: destroy the RAMDISK"),
        Rule(S.STAGE_IN_FAILED, T.RETRY_DUE, S.STAGING_IN, actions=(A.STAGE_IN,), ref=_FAIL,
             note="back-off over: stage in again"),
        Rule(S.STAGE_IN_FAILED, T.RETRY, S.STAGING_IN, actions=(A.STAGE_IN,),
             effects=(E.RESET_ATTEMPTS,), ref=_OPERATOR,
             note="operator: stage in again now, with a fresh retry budget"),
        Rule(S.STAGE_IN_FAILED, T.GIVE_UP, S.TEARING_DOWN, actions=(A.TELL_USER, A.DESTROY_FS),
             effects=(E.MARK_DECLINED,), ref=_FAIL,
             note="stage-in kept failing; the job uses the PFS"),
        Rule(S.STAGE_IN_FAILED, T.CANCEL_STAGING, S.TEARING_DOWN, actions=teardown,
             effects=(E.MARK_DECLINED,), ref=_USER_CANCEL,
             note="staging cancelled by the user: destroy the RAMDISK"),
    ]

    # ---- STAGED_IN: LOCK_IN outstanding; LOCKED_IN / LOCK_FAILED: waiting to start ------
    r += _stay(S.STAGED_IN, T.ON_DECK, T.TICK)
    r += [
        Rule(S.STAGED_IN, T.QUEUED, S.TEARING_DOWN, actions=(A.CANCEL, A.UNLOCK, A.DESTROY_FS),
             ref="§3.1 Fig. 3", note="demoted: undo the lock-in, destroy, release the nodes"),
        Rule(S.STAGED_IN, T.DEMOTED, S.TEARING_DOWN,
             actions=(A.CANCEL, A.UNLOCK, A.DESTROY_FS), ref="§3.1 Fig. 3",
             note="demoted: undo the lock-in, destroy, release the nodes"),
        Rule(S.STAGED_IN, T.RUNNING, S.MOUNTING_INPUT, actions=(A.CANCEL, A.MOUNT_INPUT),
             ref="§3.2",
             note="started during lock-in: Prolog bind-mounts the RAMDISK over DATA_IN",
             branches=(B(C.NO_INPUT, S.MOUNTING_OUTPUT, (A.CANCEL, A.MOUNT_OUTPUT),
                         note=no_in_out, ref=f"§3.2; {_NO_IN}"),)),
        Rule(S.STAGED_IN, T.FINISHED, S.TEARING_DOWN, actions=cancel_teardown, ref=_CANCELLED,
             note="cancelled before it ran: destroy the RAMDISK"),
        Rule(S.STAGED_IN, T.LOCKED, S.LOCKED_IN, effects=(E.LOCKED,), ref="§3.1",
             note="lock-in QOS set: a demotion is now unlikely"),
        Rule(S.STAGED_IN, T.LOCK_FAILED, S.LOCK_FAILED, actions=(A.ALERT,),
             ref=f"§3.1 (lock-in); {_FAIL}",
             note="lock-in failed: the job may be demoted and lose its RAMDISK"),
        Rule(S.STAGED_IN, T.CANCEL_STAGING, S.TEARING_DOWN,
             actions=(A.CANCEL, A.UNLOCK, A.DESTROY_FS), effects=(E.MARK_DECLINED,),
             ref=_USER_CANCEL,
             note="staging cancelled by the user: undo the lock-in, destroy the RAMDISK"),
    ]
    for src, unlock in ((S.LOCKED_IN, (A.UNLOCK,)), (S.LOCK_FAILED, ())):
        r += _stay(src, T.ON_DECK, T.TICK)
        r += [
            Rule(src, T.QUEUED, S.TEARING_DOWN, actions=(*unlock, A.DESTROY_FS),
                 effects=(E.UNLOCKED,), ref="§3.1 Fig. 3",
                 note="demoted despite lock-in: tear down"),
            Rule(src, T.DEMOTED, S.TEARING_DOWN, actions=(*unlock, A.DESTROY_FS),
                 effects=(E.UNLOCKED,), ref="§3.1 Fig. 3",
                 note="demoted despite lock-in: tear down"),
            Rule(src, T.RUNNING, S.MOUNTING_INPUT, actions=(A.MOUNT_INPUT,), ref="§3.2",
                 note="Prolog bind-mounts the RAMDISK over DATA_IN",
                 branches=(B(C.NO_INPUT, S.MOUNTING_OUTPUT, (A.MOUNT_OUTPUT,),
                             note=no_in_out, ref=f"§3.2; {_NO_IN}"),)),
            Rule(src, T.FINISHED, S.TEARING_DOWN, actions=teardown, ref=_CANCELLED,
                 note="cancelled before it started"),
            Rule(src, T.CANCEL_STAGING, S.TEARING_DOWN, actions=(*unlock, A.DESTROY_FS),
                 effects=(E.UNLOCKED, E.MARK_DECLINED), ref=_USER_CANCEL,
                 note="staging cancelled by the user: undo the lock-in, destroy the RAMDISK"),
        ]
    r.append(Rule(S.LOCK_FAILED, T.RETRY, S.STAGED_IN, actions=(A.LOCK_IN,), ref=_OPERATOR,
                  note="operator: try the lock-in again"))

    # ---- MOUNTING_INPUT: Prolog mounting the RAMDISK over DATA_IN ----------------------
    r += _stay(S.MOUNTING_INPUT, T.RUNNING, T.TICK)
    for t, ref in _left("§3.3 (input only: nothing to stage out)").items():
        r.append(Rule(S.MOUNTING_INPUT, t, S.TEARING_DOWN, actions=cancel_teardown, ref=ref,
                      note="the job left the compute nodes before its mounts were confirmed",
                      branches=(B(C.RW_INPUT, S.INPUT_WRITEBACK, (A.CANCEL, A.WRITE_BACK),
                                  note=rw_teardown, ref=_RW_IN),)))
    r += [
        Rule(S.MOUNTING_INPUT, T.INPUT_MOUNTED, S.MOUNTED_INPUT, effects=(E.ARM_RESET,),
             ref="§3.2", note="input bind-mounted: arm the input→output reset"),
        Rule(S.MOUNTING_INPUT, T.INPUT_MOUNT_FAILED, S.RESETTING, actions=(A.TELL_USER, A.RESET),
             ref=f"{_FAIL}; PFS fallback as §3.2",
             note="input read from the PFS; RAMDISK reset for output",
             branches=(B(C.NO_OUTPUT, S.TEARING_DOWN, (A.TELL_USER, A.DESTROY_FS),
                         note="input mount failed and there is no DATA_OUT: the job uses "
                              "the PFS", ref=_NO_OUT),)),
    ]

    # ---- MOUNTED_INPUT: job reading its input from the RAMDISK --------------------------
    r += _stay(S.MOUNTED_INPUT, T.RUNNING, T.TICK)
    for t, ref in _left("§3.2 fn. 3").items():
        r.append(Rule(S.MOUNTED_INPUT, t, S.TEARING_DOWN, actions=teardown, ref=ref,
                      note="ended before the reset: the RAMDISK holds only input",
                      branches=(B(C.RW_INPUT, S.INPUT_WRITEBACK, (A.WRITE_BACK,),
                                  note=rw_teardown, ref=_RW_IN),)))
    for t, ref in ((T.RESET_DUE, "§3.2 Fig. 4, §3.4"),
                   (T.INPUT_DONE, "§3.2 Fig. 4; ext: user command input-done")):
        r.append(Rule(S.MOUNTED_INPUT, t, S.RESETTING, actions=(A.RESET,), ref=ref,
                      note="reset: release input mounts, recreate empty, mount over DATA_OUT",
                      branches=(B(C.RW_INPUT, S.INPUT_WRITEBACK, (A.WRITE_BACK,),
                                  note="writable input: write the changes back, then reset",
                                  ref=_RW_IN),
                                B(C.NO_OUTPUT, S.MOUNTED_INPUT,
                                  note="no DATA_OUT: nothing to reset for; input stays "
                                       "mounted", ref=_NO_OUT))))

    # ---- INPUT_WRITEBACK / WRITEBACK_FAILED: modified input is user data ---------------
    r += _stay(S.INPUT_WRITEBACK, *JOB_STATE_TRIGGERS, note="holds user data")
    r += [
        Rule(S.INPUT_WRITEBACK, T.WRITEBACK_DONE, S.RESETTING, actions=(A.RESET,), ref=_RW_IN,
             note="modified input is on disk: go on with the reset",
             branches=(B(C.JOB_ENDED, S.TEARING_DOWN, teardown,
                         note="modified input is on disk and the job has ended: tear down"),
                       B(C.NO_OUTPUT, S.MOUNTED_INPUT,
                         note="modified input is on disk; no DATA_OUT: input stays mounted"))),
        Rule(S.INPUT_WRITEBACK, T.WRITEBACK_FAILED, S.WRITEBACK_FAILED, actions=(A.ALERT,),
             effects=(E.ARM_RETRY,), ref=_FAIL,
             note="writing modified input back failed; will retry"),
    ]
    r += _stay(S.WRITEBACK_FAILED, *JOB_STATE_TRIGGERS, note="holds user data")
    r += [
        Rule(S.WRITEBACK_FAILED, T.RETRY_DUE, S.INPUT_WRITEBACK, actions=(A.WRITE_BACK,),
             ref=_FAIL, note="back-off over: write the modified input back again"),
        Rule(S.WRITEBACK_FAILED, T.RETRY, S.INPUT_WRITEBACK, actions=(A.WRITE_BACK,),
             effects=(E.RESET_ATTEMPTS,), ref=_OPERATOR,
             note="operator: write back again now, with a fresh retry budget"),
        Rule(S.WRITEBACK_FAILED, T.GIVE_UP, S.WRITEBACK_FAILED,
             actions=(A.ALERT, A.TELL_USER), ref=_QUARANTINE,
             note="kept for the operator: retry or discard"),
        Rule(S.WRITEBACK_FAILED, T.DISCARD, S.TEARING_DOWN, actions=(A.ALERT, A.DESTROY_FS),
             ref=_OPERATOR, note="operator discarded the modified input"),
    ]

    # ---- RESETTING: RESET outstanding (never cancelled: it may already hold output) ----
    r += _stay(S.RESETTING, *JOB_STATE_TRIGGERS,
               note="waits for the reset to report: output may already be there")
    r += [
        Rule(S.RESETTING, T.RESET_DONE, S.MOUNTED_OUTPUT, ref="§3.2 Fig. 4",
             note="the fresh RAMDISK is bind-mounted over DATA_OUT"),
        Rule(S.RESETTING, T.RESET_BUSY, S.RESET_FAILED, effects=(E.ARM_RETRY,),
             ref="§3.2 fn. 3", note="input still open: retry later"),
        Rule(S.RESETTING, T.RESET_ERROR, S.TEARING_DOWN, actions=(A.TELL_USER, A.ALERT,
                                                                  A.DESTROY_FS),
             ref=_FAIL, note="no RAMDISK for output: the job writes to the PFS"),
    ]

    # ---- RESET_FAILED: input mounts busy, waiting to retry ----------------------------
    r += _stay(S.RESET_FAILED, T.RUNNING, T.TICK)
    for t, ref in _left("§3.2 fn. 3").items():
        r.append(Rule(S.RESET_FAILED, t, S.TEARING_DOWN, actions=teardown, ref=ref,
                      note="the job ended with its input still mounted: no output here",
                      branches=(B(C.RW_INPUT, S.INPUT_WRITEBACK, (A.WRITE_BACK,),
                                  note=rw_teardown, ref=_RW_IN),)))
    r += [
        Rule(S.RESET_FAILED, T.RETRY_DUE, S.RESETTING, actions=(A.RESET,),
             ref="§3.2 fn. 3; ext: retry back-off",
             note="back-off over: try the reset again (the input may be closed now)",
             branches=(B(C.JOB_ENDED, S.TEARING_DOWN, teardown,
                         note="the job ended with its input still mounted: no output here"),)),
        Rule(S.RESET_FAILED, T.RETRY, S.RESETTING, actions=(A.RESET,),
             effects=(E.RESET_ATTEMPTS,), ref=_OPERATOR,
             note="operator: try the reset again now, with a fresh retry budget"),
        Rule(S.RESET_FAILED, T.GIVE_UP, S.MOUNTED_INPUT, actions=(A.TELL_USER,),
             effects=(E.DISARM_RESET,), ref="§3.2 fn. 3",
             note="input never released: output goes straight to the PFS"),
    ]

    # ---- MOUNTING_OUTPUT: Prolog mounting the empty RAMDISK over DATA_OUT --------------
    r += _stay(S.MOUNTING_OUTPUT, T.RUNNING, T.TICK)
    for t, ref in _left("§3.3 Fig. 5; ext: mounts unconfirmed").items():
        r.append(Rule(S.MOUNTING_OUTPUT, t, S.STAGING_OUT, actions=(A.CANCEL, A.STAGE_OUT),
                      ref=ref,
                      note="unconfirmed mounts may have taken output: stage out to be safe"))
    r += [
        Rule(S.MOUNTING_OUTPUT, T.OUTPUT_MOUNTED, S.MOUNTED_OUTPUT, ref="§3.2 Fig. 4",
             note="the RAMDISK is bind-mounted over DATA_OUT: the job writes results there"),
        Rule(S.MOUNTING_OUTPUT, T.OUTPUT_MOUNT_FAILED, S.MOUNTED_OUTPUT,
             actions=(A.TELL_USER,), ref=_FAIL,
             note="nodes without the mount write to the PFS; nodes that did mount it may "
                  "write to the RAMDISK: stage out only after the job has ended"),
    ]

    # ---- MOUNTED_OUTPUT: job writing results to the RAMDISK ----------------------------
    r += _stay(S.MOUNTED_OUTPUT, T.RUNNING, T.TICK, note="§3.2: no changes until finished")
    for t, ref in _left("§3.3 Fig. 5").items():
        r.append(Rule(S.MOUNTED_OUTPUT, t, S.STAGING_OUT, actions=(A.STAGE_OUT,), ref=ref,
                      note="job ended (or was requeued): stage the output out"))

    # ---- STAGING_OUT / VERIFYING / STAGE_OUT_FAILED / QUARANTINED: output at risk -----
    r += _stay(S.STAGING_OUT, *JOB_STATE_TRIGGERS, note="holds user data")
    r += [
        Rule(S.STAGING_OUT, T.STAGE_OUT_DONE, S.VERIFYING, actions=(A.VERIFY,),
             ref=f"§3.3; {_VERIFY}",
             note="output copied out: check it before the RAMDISK is destroyed"),
        Rule(S.STAGING_OUT, T.STAGE_OUT_FAILED, S.STAGE_OUT_FAILED, actions=(A.ALERT,),
             effects=(E.ARM_RETRY,), ref=_FAIL, note="stage-out failed; will retry, data kept"),
    ]
    r += _stay(S.VERIFYING, *JOB_STATE_TRIGGERS, note="holds user data")
    r += [
        Rule(S.VERIFYING, T.VERIFIED, S.OUTPUT_VERIFIED, actions=(A.TELL_USER,), ref="§3.3",
             note="stage-out finished"),  # the verify step's summary says what is where
        Rule(S.VERIFYING, T.VERIFY_FAILED, S.STAGE_OUT_FAILED, actions=(A.ALERT,),
             effects=(E.ARM_RETRY,), ref=_VERIFY,
             note="copy differs from the RAMDISK: stage out again"),
    ]
    r += _stay(S.STAGE_OUT_FAILED, *JOB_STATE_TRIGGERS, note="holds user data")
    r += [
        Rule(S.STAGE_OUT_FAILED, T.RETRY_DUE, S.STAGING_OUT, actions=(A.STAGE_OUT,), ref=_FAIL,
             note="back-off over: stage out again"),
        Rule(S.STAGE_OUT_FAILED, T.RETRY, S.STAGING_OUT, actions=(A.STAGE_OUT,),
             effects=(E.RESET_ATTEMPTS,), ref=_OPERATOR,
             note="operator: stage out again now, with a fresh retry budget"),
        Rule(S.STAGE_OUT_FAILED, T.GIVE_UP, S.QUARANTINED, actions=(A.ALERT, A.TELL_USER),
             ref=_QUARANTINE, note="kept on the RSA nodes for the operator"),
        Rule(S.STAGE_OUT_FAILED, T.DISCARD, S.TEARING_DOWN, actions=(A.ALERT, A.DESTROY_FS),
             ref=_OPERATOR, note="operator discarded the output"),
    ]
    r += _stay(S.QUARANTINED, *JOB_STATE_TRIGGERS, note="data kept until an operator acts")
    r += [
        Rule(S.QUARANTINED, T.RETRY, S.STAGING_OUT, actions=(A.STAGE_OUT,),
             effects=(E.RESET_ATTEMPTS,), ref=_OPERATOR,
             note="operator: stage out again, with a fresh retry budget"),
        Rule(S.QUARANTINED, T.DISCARD, S.TEARING_DOWN, actions=(A.ALERT, A.DESTROY_FS),
             ref=_OPERATOR, note="operator discarded the output"),
    ]

    # ---- OUTPUT_VERIFIED -> TEARING_DOWN -> RELEASED ------------------------------------
    r += _stay(S.OUTPUT_VERIFIED, T.QUEUED, T.ON_DECK, T.DEMOTED, T.RUNNING, T.FINISHED)
    r.append(Rule(S.OUTPUT_VERIFIED, T.TICK, S.TEARING_DOWN, actions=teardown, ref="§3.3",
                  note="output safe on persistent storage: destroy the RAMDISK"))
    r += _stay(S.TEARING_DOWN, *JOB_STATE_TRIGGERS)
    r += [
        Rule(S.TEARING_DOWN, T.DESTROYED, S.RELEASED, actions=(A.RELEASE,),
             effects=(E.RELEASE_NODES,), ref="§3.3",
             note="RAMDISK destroyed: the nodes go back to the free list"),
        Rule(S.TEARING_DOWN, T.DESTROY_FAILED, S.TEARDOWN_FAILED, actions=(A.ALERT,),
             effects=(E.ARM_RETRY,), ref=_FAIL,
             note="RAMDISK teardown failed; nodes held, will retry"),
    ]
    r += _stay(S.TEARDOWN_FAILED, *JOB_STATE_TRIGGERS,
               note="nodes stay held: never hand a dirty node to another job")
    r += [
        Rule(S.TEARDOWN_FAILED, T.RETRY_DUE, S.TEARING_DOWN, actions=teardown, ref=_FAIL,
             note="back-off over: try the teardown again"),
        Rule(S.TEARDOWN_FAILED, T.RETRY, S.TEARING_DOWN, actions=teardown,
             effects=(E.RESET_ATTEMPTS,), ref=_OPERATOR,
             note="operator: try the teardown again now, with a fresh retry budget"),
        Rule(S.TEARDOWN_FAILED, T.GIVE_UP, S.TEARDOWN_FAILED, actions=(A.ALERT,), ref=_FAIL,
             note="an operator must clean the nodes and force-release"),
        Rule(S.TEARDOWN_FAILED, T.FORCE_RELEASE, S.RELEASED, actions=(A.ALERT, A.RELEASE),
             effects=(E.RELEASE_NODES,), ref=_OPERATOR,
             note="operator vouches the nodes are clean"),
    ]

    # ---- RELEASED / DECLINED --------------------------------------------------------------
    r += _stay(S.RELEASED, T.QUEUED, T.DEMOTED, T.RUNNING, T.FINISHED, T.TICK)
    r += [
        Rule(S.RELEASED, T.STARTED, S.DECLINED, actions=(A.TELL_USER,), ref="§3.2",
             note="started before its RSA nodes were allocated again (after a demotion or "
                  "a requeue): the job reads and writes the PFS"),
        Rule(S.RELEASED, T.ON_DECK, S.RELEASED, effects=(E.TRY_ALLOCATE,),
             ref="§3.1 (jobs move between job-states); ext: on-deck settle time",
             note="on-deck again (after a demotion or requeue): new cycle"),
        Rule(S.RELEASED, T.NODES_ALLOCATED, S.ALLOCATED, actions=(A.ALLOCATE,), ref="§3.1",
             note="nodes allocated again: a new cycle"),
        Rule(S.RELEASED, T.NODES_BUSY, S.RELEASED),
        Rule(S.RELEASED, T.POLICY_VIOLATION, S.DECLINED, actions=(A.TELL_USER,),
             effects=(E.MARK_DECLINED,), ref=_UNSERVABLE,
             note="the RSA cannot serve this job; it uses the PFS"),
        Rule(S.RELEASED, T.GIVE_UP, S.DECLINED, effects=(E.MARK_DECLINED,), ref=_FAIL,
             note="declined earlier (the user was told why then): no new message"),
        Rule(S.RELEASED, T.CANCEL_STAGING, S.DECLINED, effects=(E.MARK_DECLINED,),
             ref=_USER_CANCEL,
             note="staging cancelled by the user: never allocate for this job again"),
    ]
    r += _stay(S.DECLINED, T.QUEUED, T.DEMOTED, T.RUNNING, T.TICK, T.CANCEL_STAGING,
               T.NODES_BUSY, T.GIVE_UP, T.POLICY_VIOLATION)
    r += [
        Rule(S.DECLINED, T.FINISHED, S.RELEASED, note="nothing was held", ref=_NOTHING_HELD),
        Rule(S.DECLINED, T.ON_DECK, S.DECLINED, effects=(E.TRY_ALLOCATE,), ref=_REQUEUE,
             note="on-deck again after a requeue: a job declined only because it started "
                  "before RSA nodes were free gets a new cycle (TRY_ALLOCATE gives up at "
                  "once for a job the RSA declined for good)"),
        Rule(S.DECLINED, T.NODES_ALLOCATED, S.ALLOCATED, actions=(A.ALLOCATE,),
             ref=f"§3.1; {_REQUEUE}", note="nodes allocated after a requeue: a new cycle"),
    ]
    # The start edge matters only to a released job; everywhere else the running level
    # (fed on every settle) does the work.
    for state in RsaState:
        if state is not S.RELEASED:
            r += _stay(state, T.STARTED)
    return r


def _index(rows: list[Rule]) -> dict[tuple[RsaState, Trigger], Rule]:
    table: dict[tuple[RsaState, Trigger], Rule] = {}
    for rule in rows:
        key = (rule.src, rule.trigger)
        if key in table:
            raise AssertionError(f"duplicate transition row {key}")
        table[key] = rule
    return table


#: The transition table: (rsa-state, trigger) -> rule.
TABLE: Mapping[tuple[RsaState, Trigger], Rule] = _index(_rows())


def lookup(state: RsaState, trigger: Trigger, job_id: str = "") -> Rule:
    """The rule for ``trigger`` in ``state``; InvalidTransition if it cannot happen."""
    try:
        return TABLE[(state, trigger)]
    except KeyError:
        raise InvalidTransition(state, trigger, job_id) from None
