"""Job-states and RSA-states (seed 004 §3, Figs. 1–5), and how Slurm observations map to job-states.

Owns the two state enums, their named groups, and the documented table of Slurm job
states / pending reasons that make a job *on-deck* or *demoted*. Stdlib only: this is the
leaf of the core and must not import anything else from rsa_scheduler.
"""

from __future__ import annotations

import enum

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


# --- named groups (Supervisor states.py style) ---------------------------------------------

#: states in which the RSA holds RSA nodes
HOLDING_NODES: frozenset[RsaState] = frozenset(RsaState) - {
    RsaState.NONE,
    RsaState.RELEASED,
    RsaState.DECLINED,
}

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

#: states before the job runs, in which the allocation exists for a future start
PRE_RUN: frozenset[RsaState] = frozenset(
    {
        RsaState.ALLOCATED,
        RsaState.FS_BUILDING,
        RsaState.FS_FAILED,
        RsaState.FS_READY,
        RsaState.STAGING_IN,
        RsaState.STAGE_IN_FAILED,
        RsaState.STAGED_IN,
        RsaState.LOCKED_IN,
        RsaState.LOCK_FAILED,
    }
)

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

#: failure states an operator may need to look at
FAILURES: frozenset[RsaState] = frozenset(
    {
        RsaState.FS_FAILED,
        RsaState.STAGE_IN_FAILED,
        RsaState.LOCK_FAILED,
        RsaState.WRITEBACK_FAILED,
        RsaState.RESET_FAILED,
        RsaState.STAGE_OUT_FAILED,
        RsaState.QUARANTINED,
        RsaState.TEARDOWN_FAILED,
    }
)

#: states where a job's RSA cycle has ended
TERMINAL: frozenset[RsaState] = frozenset({RsaState.RELEASED, RsaState.DECLINED})


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
        if state == "PENDING" and reason in UNSETTLED_REASONS and previous in (
                JobState.ON_DECK, JobState.DEMOTED, JobState.QUEUED):
            return previous
        if previous in (JobState.ON_DECK, JobState.DEMOTED):
            return JobState.DEMOTED
        return JobState.QUEUED
    raise UnknownSlurmState(
        f"unknown Slurm job state {slurm_state!r}: add it to rsa_scheduler.core.states"
    )
