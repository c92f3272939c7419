"""The vocabulary of the transition table's rows: what a row is and what it may say.

Owns :class:`Cond` (per-job facts that pick a branch of a row), :class:`Effect`
(bookkeeping the machine does inside the core: allocation, timers, counters),
:class:`Branch`, :class:`Rule`, :class:`InvalidTransition`, ``OUTCOME_TRIGGERS`` (which
trigger an action's outcome is), and what both halves of the table are written with: the
``REF_*`` citations of rows seed 004 does not cover, the shared action tuples and notes,
:func:`stay` and :func:`left`. The states, triggers and their groups are
:mod:`rsa_scheduler.core.states`'; the rows are in :mod:`rsa_scheduler.core.rows_prerun`
and :mod:`rsa_scheduler.core.rows_run`, indexed by :mod:`rsa_scheduler.core.transitions`.

Must not import anything but the stdlib and other core leaf modules.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from rsa_scheduler.core.actions import ActionKind, Result
from rsa_scheduler.core.states import RsaState, Trigger
from rsa_scheduler.errors import RsaError

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
    #: the job ended after its write-back began: what it changed last may be missing
    STALE_WRITEBACK = "job ended during the write-back"
    #: the RSA declined the job (its user was told why then)
    DECLINED = "declined"


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
    #: arm the lock-in's bound (StagingPolicy.lockin_timeout), once per lock-in
    ARM_LOCKIN = "arm-lockin"
    #: quarantined: arm the rescue (StagingPolicy.rescue_after), no rescue under way
    ARM_RESCUE = "arm-rescue"
    #: the rescue begins: the stage-out goes to the rescue area (JobRecord.rescue_to)
    START_RESCUE = "start-rescue"
    #: an operator's retry of a quarantined stage-out: to DATA_OUT again, not a rescue
    END_RESCUE = "end-rescue"


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


T, A = Trigger, ActionKind

# Refs for rows seed 004 does not cover: "ext: <what> (<closest passage or 'silent'>)".
REF_FAIL = "ext: failure handling (§3 is silent)"
REF_OPERATOR = "ext: operator command (§3 is silent)"
REF_USER_CANCEL = "ext: user command cancel-staging (§3 is silent)"
REF_REQUEUE = "ext: requeue of a started job (§3 is silent)"
REF_CANCELLED = "ext: cancelled before it ran (§3.1: jobs 'may be canceled'); tear-down as Fig. 3"
REF_NOTHING_HELD = "§3.3 (nothing held to stage out or release)"
REF_UNSERVABLE = "ext: unservable request (cf. §2 fn. 1)"
REF_WAIT = "§3.1 fn. 2 (job option to wait); ext: wait deadline, RAMDISK kept for output"
REF_EARLY_OUT = "§3.1 fn. 2 (RAMDISK ignored for input); ext: RAMDISK kept for output"
REF_EARLY = "§3.1 fn. 2"
REF_EARLY_NO_OUT = "§3.1 (RAMDISK ignored); ext: no DATA_OUT"
REF_NO_IN = "ext: no DATA_IN (§3.4 assumes one)"
REF_NO_OUT = "ext: no DATA_OUT (§3.4 assumes one)"
REF_RW_IN = "ext: writable input (§2 assumes input stays on disk)"
REF_QUARANTINE = "ext: quarantine (§3 is silent)"
REF_VERIFY = "ext: output verification (§3.3 is silent)"
REF_LOCKIN_END = "ext: a lock-in always ends (§3.1 is silent on its end)"
REF_LIMIT = "ext: limits per user and per account (§3.1 is silent)"
#: the OVER_LIMIT rows' note: what a job's user reads first when a limit (or maintenance)
#: makes it wait
OVER_LIMIT_NOTE = "waits for RSA nodes"
REF_LOST = "ext: RSA node lost while the RAMDISK is prepared (§3 is silent; cf. §3.1 fn. 2)"

# Actions and notes rows of both halves share.
TEARDOWN = (A.DESTROY_FS,)
CANCEL_TEARDOWN = (A.CANCEL, A.DESTROY_FS)
EARLY_NO_OUT = "started before staging finished and has no DATA_OUT: the job uses the PFS"
WAIT_NO_OUT = "waited too long for stage-in and has no DATA_OUT: the job uses the PFS"
#: what squeue's comment says while the output is staged out (queue mode: the job shows
#: its end state at once, the compute nodes are free)
STAGING_OUT_NOTE = ("the run ended: its output is being staged out to the PFS, not "
                    "complete in DATA_OUT until verified")


def stay(src: RsaState, *triggers: Trigger, note: str = "") -> list[Rule]:
    return [Rule(src, t, src, note=note) for t in triggers]


def left(finished_ref: str) -> dict[Trigger, str]:
    """Refs for the four ways a started job leaves the compute nodes: it finished (the paper
    case, ``finished_ref``) or it was requeued (pending again: ours)."""
    return {T.QUEUED: REF_REQUEUE, T.ON_DECK: REF_REQUEUE, T.DEMOTED: REF_REQUEUE,
            T.FINISHED: finished_ref}

