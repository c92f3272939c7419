"""The state vocabulary (seed 004 §3, Figs. 1–5): every job-state, rsa-state and trigger,
their named groups, who may give which command, and how Slurm observations map to
job-states.

Owns :class:`JobState`, :class:`RsaState` and :class:`Trigger`; the groups every other
part reads instead of keeping its own list (the machine, the transition table, the
diagrams, the scheduler, rsad's API, node side, native mode and start holds, the CLI, the
simulator): ``HOLDING_NODES``, ``PRE_RUN``/``RUN``/``POST_RUN``, ``HOLDS_USER_DATA``,
``TENDED``, ``FAILURES``, ...; ``TIMER_STATES`` (where each timer stays armed);
``USER_COMMANDS``/``OPERATOR_COMMANDS`` (the permission sets); and the documented table of
Slurm job states / pending reasons that make a job *on-deck* or *demoted*. Which
(rsa-state, trigger) pairs may happen is the transition table's
(:mod:`rsa_scheduler.core.transitions`), written in this vocabulary.

Stdlib only: this is the leaf of the core and must not import anything else from
rsa_scheduler but the error tree.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

from rsa_scheduler.errors import RsaError


class JobState(enum.StrEnum):
    """The RSA's view of a Slurm job (seed 004 Fig. 1), derived from state + pending reason."""

    QUEUED = "queued"  # pending behind higher-priority jobs, never on-deck (reason Priority, ...)
    ON_DECK = "on-deck"  # pending on Resources: next to run (§3.1)
    DEMOTED = "demoted"  # was on-deck, pending on something else now (§3.1)
    RUNNING = "running"  # executing on the compute system (§3.2)
    FINISHED = "finished"  # ended, any way (§3.3)


class RsaState(enum.StrEnum):
    """Where a job's RSA allocation is in its life (seed 004 Figs. 2–5)."""

    NONE = "none"  # no RSA resources (ideal start)
    ALLOCATED = "allocated"  # RSA nodes taken from the pool (§3.1)
    FS_BUILDING = "fs-building"  # parallel RAMDISK being constructed
    FS_FAILED = "fs-failed"
    FS_READY = "fs-ready"  # empty RAMDISK ready for stage-in
    STAGING_IN = "staging-in"
    STAGE_IN_FAILED = "stage-in-failed"  # waiting to retry
    STAGED_IN = "staged-in"  # input on the RAMDISK, lock-in under way
    LOCKED_IN = "locked-in"  # lock-in done (§3.1, QOS/priority)
    LOCK_FAILED = "lock-failed"  # staged but lock-in could not be set
    MOUNTING_INPUT = "mounting-input"  # Prolog bind-mounting RAMDISK over DATA_IN (§3.2)
    MOUNTED_INPUT = "mounted-input"
    INPUT_WRITEBACK = "input-writeback"  # writable input written back to DATA_IN
    WRITEBACK_FAILED = "writeback-failed"
    RESETTING = "resetting"  # §3.2: unmount input, recreate empty, mount over DATA_OUT
    RESET_FAILED = "reset-failed"  # input mount busy: waiting to retry (footnote 3)
    MOUNTING_OUTPUT = "mounting-output"  # no input: Prolog mounts the RAMDISK over DATA_OUT
    MOUNTED_OUTPUT = "mounted-output"
    STAGING_OUT = "staging-out"  # §3.3
    STAGE_OUT_FAILED = "stage-out-failed"  # waiting to retry
    VERIFYING = "verifying"  # output compared with the RAMDISK manifest
    OUTPUT_VERIFIED = "output-verified"
    QUARANTINED = "quarantined"  # stage-out gave up: data kept, operator alerted
    TEARING_DOWN = "tearing-down"  # RAMDISK being destroyed
    TEARDOWN_FAILED = "teardown-failed"
    RELEASED = "released"  # nodes back in the pool (ideal end)
    DECLINED = "declined"  # the RSA will not serve this run; the job uses the PFS


# --- named groups of rsa-states (Supervisor states.py style) --------------------------------
# RsaState is a StrEnum: a group answers ``in`` for a state's string as well (the API's
# JSON, the CLI, the node side's answers), so every reader uses these, never a list of
# names of its own.

#: no RSA nodes held: a new cycle may start (``rsa top`` shows these dim)
IDLE: frozenset[RsaState] = frozenset({RsaState.NONE, RsaState.RELEASED, RsaState.DECLINED})

#: no RSA nodes held and the RSA has not refused the job: an on-deck job is allocated
#: (seed 004 §3.1)
AWAITING_NODES: frozenset[RsaState] = frozenset({RsaState.NONE, RsaState.RELEASED})

#: states in which the RSA holds RSA nodes
HOLDING_NODES: frozenset[RsaState] = frozenset(RsaState) - IDLE

#: states where a job's RSA cycle has ended
TERMINAL: frozenset[RsaState] = frozenset({RsaState.RELEASED, RsaState.DECLINED})

#: the RAMDISK is being made and filled for the job's input, nothing has failed: the
#: early-start ``wait`` deadline runs here
STAGING: frozenset[RsaState] = frozenset(
    {RsaState.ALLOCATED, RsaState.FS_BUILDING, RsaState.FS_READY, RsaState.STAGING_IN}
)

#: the RAMDISK is being prepared and holds no more than a partial copy of the input: an
#: RSA node going down sends the job ``Trigger.NODE_LOST``
PREPARING: frozenset[RsaState] = STAGING | {RsaState.FS_FAILED, RsaState.STAGE_IN_FAILED}

#: the input is on the RAMDISK (locked in, or the lock-in failed): the job may start
READY: frozenset[RsaState] = frozenset(
    {RsaState.STAGED_IN, RsaState.LOCKED_IN, RsaState.LOCK_FAILED}
)

#: states before the job runs, in which the allocation exists for a future start (seed
#: 004 Figs. 2 and 3)
PRE_RUN: frozenset[RsaState] = PREPARING | READY

#: states of a started job with its RAMDISK mounted or being reset (seed 004 Fig. 4)
RUN: frozenset[RsaState] = frozenset(
    {
        RsaState.MOUNTING_INPUT,
        RsaState.MOUNTED_INPUT,
        RsaState.INPUT_WRITEBACK,
        RsaState.WRITEBACK_FAILED,
        RsaState.RESETTING,
        RsaState.RESET_FAILED,
        RsaState.MOUNTING_OUTPUT,
        RsaState.MOUNTED_OUTPUT,
    }
)

#: the RAMDISK being destroyed (or that failed)
TEARDOWN: frozenset[RsaState] = frozenset({RsaState.TEARING_DOWN, RsaState.TEARDOWN_FAILED})

#: states after the job: output staged out, verified, kept or the RAMDISK destroyed (seed
#: 004 Fig. 5)
POST_RUN: frozenset[RsaState] = TEARDOWN | {
    RsaState.STAGING_OUT,
    RsaState.STAGE_OUT_FAILED,
    RsaState.VERIFYING,
    RsaState.OUTPUT_VERIFIED,
    RsaState.QUARANTINED,
}

#: the job's input is on its RAMDISK (or it needs none) and it may start, runs or has
#: run with it: native mode's ``data_in`` is done
STAGED: frozenset[RsaState] = READY | RUN | (POST_RUN - TEARDOWN)

#: the input is on its way to the job's mount (the simulator's I/O model)
INPUT_COMING: frozenset[RsaState] = STAGING | {
    RsaState.STAGED_IN, RsaState.LOCKED_IN, RsaState.MOUNTING_INPUT, RsaState.MOUNTED_INPUT
}

#: the core is about to ask the compute nodes for a mount (or, under early-start wait,
#: staging goes on): the node Prolog waits
MOUNT_COMING: frozenset[RsaState] = (PRE_RUN - {RsaState.FS_FAILED}) | {
    RsaState.MOUNTING_INPUT, RsaState.MOUNTING_OUTPUT
}

#: the job may get node instructions later: its compute nodes keep a node agent
NODE_AGENT: frozenset[RsaState] = MOUNT_COMING | RUN

#: the input->output reset is under way (``rsa input-done`` waits for its end)
RESET_UNDER_WAY: frozenset[RsaState] = frozenset(
    {
        RsaState.INPUT_WRITEBACK,
        RsaState.WRITEBACK_FAILED,
        RsaState.RESETTING,
        RsaState.RESET_FAILED,
        RsaState.MOUNTING_OUTPUT,
    }
)

#: states in which the RAMDISK may hold data that exists nowhere else (job output, or
#: modified writable input). Nothing may destroy or release it until verified or discarded.
HOLDS_USER_DATA: frozenset[RsaState] = frozenset(
    {
        RsaState.INPUT_WRITEBACK,
        RsaState.WRITEBACK_FAILED,
        RsaState.RESETTING,
        RsaState.MOUNTING_OUTPUT,
        RsaState.MOUNTED_OUTPUT,
        RsaState.STAGING_OUT,
        RsaState.STAGE_OUT_FAILED,
        RsaState.VERIFYING,
        RsaState.QUARANTINED,
    }
)

#: states in which the RAMDISK is (or may be) mounted read-write over the job's DATA_IN,
#: or holds what the job wrote there: for a job with writable input (``#RSA_INPUT=rw``)
#: they hold user data too (``JobRecord.holds_user_data``) until written back
HOLDS_WRITABLE_INPUT: frozenset[RsaState] = frozenset(
    {
        RsaState.MOUNTING_INPUT,
        RsaState.MOUNTED_INPUT,
        RsaState.RESET_FAILED,
    }
)

def holds_user_data(state: RsaState, writable_input: bool) -> bool:
    """Whether a job in ``state`` may have data on its RAMDISK that exists nowhere else."""
    return state in HOLDS_USER_DATA or (writable_input and state in HOLDS_WRITABLE_INPUT)


#: states in which rsad looks after the RAMDISK between steps (restarts its servers if
#: they die): it exists, may hold the job's input or output, and no step is building,
#: staging into or out of, resetting or destroying it (staging steps look after it
#: themselves)
TENDED: frozenset[RsaState] = frozenset(
    {
        RsaState.STAGE_IN_FAILED,
        RsaState.STAGED_IN,
        RsaState.LOCKED_IN,
        RsaState.LOCK_FAILED,
        RsaState.MOUNTED_INPUT,
        RsaState.WRITEBACK_FAILED,
        RsaState.RESET_FAILED,
        RsaState.MOUNTED_OUTPUT,
        RsaState.STAGE_OUT_FAILED,
        RsaState.QUARANTINED,
    }
)

#: an action is running for the job right now, or about to start (``rsa top`` shows
#: these cyan)
MOVING: frozenset[RsaState] = frozenset(
    {
        RsaState.ALLOCATED,
        RsaState.FS_BUILDING,
        RsaState.STAGING_IN,
        RsaState.MOUNTING_INPUT,
        RsaState.INPUT_WRITEBACK,
        RsaState.RESETTING,
        RsaState.MOUNTING_OUTPUT,
        RsaState.STAGING_OUT,
        RsaState.VERIFYING,
        RsaState.TEARING_DOWN,
    }
)

#: a failed step waiting for its back-off to end (``Trigger.RETRY_DUE``)
RETRYING: frozenset[RsaState] = frozenset(
    {
        RsaState.STAGE_IN_FAILED,
        RsaState.WRITEBACK_FAILED,
        RsaState.RESET_FAILED,
        RsaState.STAGE_OUT_FAILED,
        RsaState.TEARDOWN_FAILED,
    }
)

#: failure states an operator may need to look at
FAILURES: frozenset[RsaState] = RETRYING | {
    RsaState.FS_FAILED, RsaState.LOCK_FAILED, RsaState.QUARANTINED
}

# --- named groups of job-states ---------------------------------------------------------

#: the job waits in Slurm's queue
PENDING: frozenset[JobState] = frozenset({JobState.QUEUED, JobState.ON_DECK, JobState.DEMOTED})

#: the job has left the queue: it runs or has ended
LEFT_QUEUE: frozenset[JobState] = frozenset({JobState.RUNNING, JobState.FINISHED})


# --- triggers: what can move an rsa-state -----------------------------------------------

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
    OVER_LIMIT = "over-limit"  # its user's / account's limit: skip, the user told why once
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
    #: a locked-in job did not start within slurm.lockin.timeout (StagingPolicy.lockin_timeout)
    LOCKIN_EXPIRED = "lockin-expired"
    #: a failed restore of the job's own QOS / priority is due again (JobRecord.unlock);
    #: armed in every state: a lock-in always ends (core.machine.retry_unlock)
    UNLOCK_DUE = "unlock-due"
    #: a RAMDISK quarantined for quarantine.rescue_after (StagingPolicy.rescue_after): its
    #: content is rescued to the PFS
    RESCUE_DUE = "rescue-due"
    # user and operator commands
    INPUT_DONE = "input-done"  # user: `rsa input-done` from inside the job
    CANCEL_STAGING = "cancel-staging"  # user: do not use the RSA for this run
    RETRY = "retry"  # operator: try the failed step again now
    DISCARD = "discard"  # operator: give up the output on the RAMDISK (explicit)
    FORCE_RELEASE = "force-release"  # operator: nodes are clean, return them
    # the RSA-node pool
    NODE_LOST = "node-lost"  # an RSA node of the job went down before its input was staged
    #: Slurm: the locked-in job was changed (its partition or time limit; more nodes):
    #: its lock-in ends and it is judged again like any other pending job
    JOB_CHANGED = "job-changed"


JOB_TRIGGERS: Mapping[JobState, Trigger] = {
    JobState.QUEUED: Trigger.QUEUED,
    JobState.ON_DECK: Trigger.ON_DECK,
    JobState.DEMOTED: Trigger.DEMOTED,
    JobState.RUNNING: Trigger.RUNNING,
    JobState.FINISHED: Trigger.FINISHED,
}

#: the level-triggered triggers every (rsa-state, trigger) pair of which has a row: the
#: job-states and TICK
JOB_STATE_TRIGGERS: tuple[Trigger, ...] = (
    Trigger.QUEUED, Trigger.ON_DECK, Trigger.DEMOTED, Trigger.RUNNING, Trigger.FINISHED,
    Trigger.TICK,
)

#: which timers stay armed in which states; a state change drops the others
TIMER_STATES: Mapping[Trigger, frozenset[RsaState]] = {
    Trigger.RESET_DUE: frozenset({RsaState.MOUNTED_INPUT}),
    Trigger.WAIT_EXPIRED: STAGING,
    Trigger.RETRY_DUE: RETRYING,
    Trigger.LOCKIN_EXPIRED: READY,
    Trigger.UNLOCK_DUE: frozenset(RsaState),
    Trigger.RESCUE_DUE: frozenset({RsaState.QUARANTINED}),
}

#: commands a job's user may give (``rsa input-done``, ``rsa cancel-staging``)
USER_COMMANDS: frozenset[Trigger] = frozenset({Trigger.INPUT_DONE, Trigger.CANCEL_STAGING})
#: commands an operator (root, the Slurm user) may give: the users' and their own
OPERATOR_COMMANDS: frozenset[Trigger] = USER_COMMANDS | {
    Trigger.RETRY, Trigger.DISCARD, Trigger.FORCE_RELEASE
}


# --- Slurm observation -> job-state --------------------------------------------------------

#: Slurm job states (squeue %T / scontrol JobState) that mean the job is executing or
#: still holds its compute nodes. COMPLETING counts as running: the Epilog, which releases
#: the RAMDISK mounts, has not finished on every node yet (seed 004 §3.3).
SLURM_RUNNING: frozenset[str] = frozenset(
    {"RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING",
     "RESIZING"}
)

#: Slurm job states that are pending in the queue.
SLURM_PENDING: frozenset[str] = frozenset(
    {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SPECIAL_EXIT"}
)

#: Slurm job states that mean the job has ended.
SLURM_FINISHED: frozenset[str] = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
     "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "REVOKED", "STAGE_OUT"}
)

#: The states Slurm's own record ends a job in (what squeue shows until MinJobAge, and
#: sacct): every finished state but STAGE_OUT (native mode: the burst buffer's stage-out
#: runs, the job has not ended yet). EpilogSlurmctld's exit code is no such record: a job
#: its user cancelled ends with exit code 0 there, and CANCELLED here.
SLURM_END_STATES: frozenset[str] = SLURM_FINISHED - {"STAGE_OUT"}

#: Pending reasons that make a job on-deck: Slurm has picked it as the next to start and
#: is only waiting for compute nodes to free up (seed 004 §3.1: RESOURCES).
ON_DECK_REASONS: frozenset[str] = frozenset({"Resources"})

#: Pending reasons that carry no information: Slurm sets ``None`` on a pending job right
#: after ``scontrol update`` (e.g. our own lock-in) or submission, until its next
#: scheduling pass. Seen in the lab: a locked-in on-deck job showed ``PENDING/None`` for
#: a few seconds. Such an observation keeps the previous job-state, or a false demotion
#: would tear down a staged RAMDISK.
UNSETTLED_REASONS: frozenset[str] = frozenset({"None", ""})

#: Pending reasons for which a previously on-deck job counts as *demoted* — every pending
#: reason other than the on-deck ones. Listed for documentation: the paper's case is
#: ``Priority``; holds, dependencies, reservations and limits also push a job back.
DEMOTING_REASONS_EXAMPLES: tuple[str, ...] = (
    "Priority",
    "JobHeldUser",
    "JobHeldAdmin",
    "Dependency",
    "BeginTime",
    "Reservation",
    "QOSMaxJobsPerUserLimit",
    "AssocGrpCpuLimit",
    "PartitionDown",
    "ReqNodeNotAvail",
)


#: Pending reasons of a job Slurm will not start whatever the RSA does: the limits of
#: its association or QOS (Slurm's ``WAIT_ASSOC_*`` and ``WAIT_QOS_*`` reasons, e.g.
#: ``AssocGrpBB`` for ``GrpTRES=bb/lua``, ``QOSMaxJobsPerUserLimit``; the older
#: ``AssociationJobLimit``, ``QOSResourceLimit``) and holds. Native mode: rsad builds no
#: RAMDISK for a job while it reads one of these as its reason. (Slurm 22.05 shows a bb
#: TRES limit, ``AssocGrpBB``, only once the job's stage-in is done: such a job keeps its
#: RAMDISK until the lock-in bound.)
SLURM_WITHHOLDING_PREFIXES: tuple[str, ...] = ("Assoc", "QOS")
SLURM_WITHHOLDING_REASONS: frozenset[str] = frozenset({"JobHeldUser", "JobHeldAdmin"})


def slurm_withholds(reason: str) -> bool:
    """Whether a pending job's ``reason`` says Slurm holds it for a limit of its
    association or QOS, or a hold (:data:`SLURM_WITHHOLDING_PREFIXES`)."""
    return reason in SLURM_WITHHOLDING_REASONS or reason.startswith(SLURM_WITHHOLDING_PREFIXES)


class UnknownSlurmState(RsaError, ValueError):
    """A Slurm job state this table does not know (a newer Slurm?)."""


def derive_job_state(previous: JobState | None, slurm_state: str, reason: str) -> JobState:
    """Map a Slurm (state, reason) observation to a job-state.

    ``previous`` is the job-state derived last time (None for a job seen for the first
    time); it decides between *queued* and *demoted* for a job pending on something other
    than Resources. A job that vanished from Slurm is reported by the caller as state
    ``"GONE"`` and counts as finished.
    """
    state = slurm_state.split()[0].rstrip("+").upper() if slurm_state else ""
    if state in SLURM_RUNNING:
        # EpilogSlurmctld reports the end while squeue still shows COMPLETING (seen in
        # the lab): a finished job comes back only through a requeue (pending states).
        return JobState.FINISHED if previous is JobState.FINISHED else JobState.RUNNING
    if state in SLURM_FINISHED or state == "GONE":
        return JobState.FINISHED
    if state in SLURM_PENDING:
        if state == "PENDING" and reason in ON_DECK_REASONS:
            return JobState.ON_DECK
        if state == "PENDING" and reason in UNSETTLED_REASONS and previous in PENDING:
            return previous
        if previous in (JobState.ON_DECK, JobState.DEMOTED):
            return JobState.DEMOTED
        return JobState.QUEUED
    raise UnknownSlurmState(
        f"unknown Slurm job state {slurm_state!r}: add it to rsa_scheduler.core.states"
    )
