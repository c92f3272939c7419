"""What a transition rule's effects do to a job's record, and what its conditions ask.

Owns the dispatch tables the machine fires rules through: ``EFFECTS`` (each
:class:`~rsa_scheduler.core.rules.Effect` -> the handler that does it: allocate, release,
arm or drop a timer, count a failure, mark the job) and ``CONDITIONS`` (each
:class:`~rsa_scheduler.core.rules.Cond` -> the predicate that picks a branch), with
:class:`Firing` (one rule firing in progress: what a handler reads and may set),
:class:`PoolPort` (what the handlers need from the RSA node pool) and the retry and
allocation bookkeeping. Both tables cover every member of their enum (checked at import).
Pure; time comes in as ``now``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from rsa_scheduler.core.actions import ActionKind
from rsa_scheduler.core.allocator import PolicyViolation, Request
from rsa_scheduler.core.hostlist import Hostlist
from rsa_scheduler.core.policy import EarlyStart, ResetTrigger, StagingPolicy
from rsa_scheduler.core.record import JobRecord
from rsa_scheduler.core.rules import OVER_LIMIT_NOTE, Cond, Effect
from rsa_scheduler.core.states import JobState, RsaState, Trigger


class PoolPort(Protocol):
    """What the machine needs from the RSA node pool (``core.allocator.Pool``)."""

    def allocate(self, req: Request) -> Any: ...  # NodeSet | None; raises PolicyViolation
    def release(self, job_id: str) -> Any: ...  # NodeSet
    def explain(self, job_id: str) -> str: ...  # why tier auto chose them ("" otherwise)
    def refusal(self, job_id: str) -> str: ...  # why it refused beyond "none free" (limits)
    def limit_now(self, req: Request) -> str: ...  # a limit ``req`` is over now ("" if none)



@dataclass(slots=True)
class Firing:
    """One rule firing in progress: the job, the state it fires from, and what the effect
    handlers report back (a follow-up trigger, the detail its message gets)."""

    rec: JobRecord
    src: RsaState
    now: float
    policy: StagingPolicy
    pool: PoolPort
    detail: str = ""  # said by this transition's tell-user/alert actions
    follow: Trigger | None = None  # fired next (the allocation's answer, GIVE_UP)
    follow_detail: str = ""  # said only by the follow-up transition (why tier auto chose)


# ---- effects -----------------------------------------------------------------------------

def _try_allocate_effect(f: Firing) -> None:
    f.follow, why = _try_allocate(f.rec, f.pool, f.policy, f.now)
    if f.follow is Trigger.NODES_ALLOCATED:
        f.follow_detail = why
    else:
        f.detail = f.detail or why


def _release_nodes(f: Firing) -> None:
    f.pool.release(f.rec.job_id)


def _arm_reset(f: Firing) -> None:
    rec = f.rec
    if rec.spec.data_out is not None and _reset_trigger(rec, f.policy) is ResetTrigger.DELAY:
        delay = rec.spec.reset.after if rec.spec.reset and rec.spec.reset.after \
            else f.policy.reset_delay
        rec.timers[Trigger.RESET_DUE.value] = f.now + float(delay)


def _disarm_reset(f: Firing) -> None:
    f.rec.timers.pop(Trigger.RESET_DUE.value, None)


def _end_wait(f: Firing) -> None:
    f.rec.wait_over = True


def _arm_wait(f: Firing) -> None:
    # a job Slurm held before it started has spent its wait there already
    rec, now, timeout = f.rec, f.now, f.policy.wait_timeout
    due = now + timeout if rec.hold_until is None else \
        min(now + timeout, max(now, rec.hold_until))
    rec.timers.setdefault(Trigger.WAIT_EXPIRED.value, due)


def _arm_retry_effect(f: Firing) -> None:
    rec = f.rec
    f.follow = _arm_retry(rec, f.now, f.policy)
    if f.src is RsaState.FS_BUILDING and f.follow is None:
        rec.not_before = f.now + f.policy.retry_delay(
            rec.failures.get(ActionKind.BUILD_FS.value, 1))


def _reset_attempts(f: Firing) -> None:
    f.rec.failures = {k: v for k, v in f.rec.failures.items()
                      if k == ActionKind.BUILD_FS.value}


def _mark_declined(f: Firing) -> None:
    f.rec.declined = True


def _locked(f: Firing) -> None:
    f.rec.locked = True


def _arm_lockin(f: Firing) -> None:
    # the bound counts from the first lock-in of this stage-in: a retried lock-in
    # (LOCK_FAILED, RETRY) does not restart it
    timeout = f.policy.lockin_timeout
    if timeout > 0:
        f.rec.timers.setdefault(Trigger.LOCKIN_EXPIRED.value, f.now + timeout)


def rescue_path(rec: JobRecord, policy: StagingPolicy) -> str:
    """Where a quarantined RAMDISK's content goes on the PFS: one directory per user
    (made private by the user) and per run of the job: ``<job>.<cycle>-<submitted>``,
    its RSA cycle and Slurm's submit time of the run (compact, ``20261129T043512``;
    without it when Slurm never said). A later job given the same id (Slurm lost its
    state, or its ids wrapped) after rsad forgot the earlier one starts at cycle 1
    again: by ``<job>.<cycle>`` alone its rescue went into the earlier job's rescued
    copy, replacing its files of the same names (the rescue keeps nothing aside)."""
    base = f"{policy.rescue_dir.rstrip('/')}/{rec.user}/{rec.job_id}.{rec.cycle}"
    stamp = "".join(c for c in rec.submitted if c.isascii() and c.isalnum())
    return f"{base}-{stamp}" if stamp[:8].isdigit() else base


def _arm_rescue(f: Firing) -> None:
    f.rec.rescue_to = ""
    if f.policy.rescue_after > 0 and f.policy.rescue_dir:
        f.rec.timers[Trigger.RESCUE_DUE.value] = f.now + f.policy.rescue_after


def _start_rescue(f: Firing) -> None:
    f.rec.rescue_to = rescue_path(f.rec, f.policy)
    f.detail = (f"copied as the job's user to {f.rec.rescue_to}, verified before the "
                "RAMDISK is released (a failed rescue keeps the quarantine)")


def _end_rescue(f: Firing) -> None:
    f.rec.rescue_to = ""


#: Effect -> what it does; a rule's effects run in the order the rule lists them
EFFECTS: Mapping[Effect, Callable[[Firing], None]] = {
    Effect.TRY_ALLOCATE: _try_allocate_effect,
    Effect.RELEASE_NODES: _release_nodes,
    Effect.ARM_RESET: _arm_reset,
    Effect.DISARM_RESET: _disarm_reset,
    Effect.ARM_WAIT: _arm_wait,
    Effect.END_WAIT: _end_wait,
    Effect.ARM_RETRY: _arm_retry_effect,
    Effect.RESET_ATTEMPTS: _reset_attempts,
    Effect.MARK_DECLINED: _mark_declined,
    Effect.LOCKED: _locked,
    Effect.ARM_LOCKIN: _arm_lockin,
    Effect.ARM_RESCUE: _arm_rescue,
    Effect.START_RESCUE: _start_rescue,
    Effect.END_RESCUE: _end_rescue,
}


#: why a job Slurm holds for the RSA waits, when no limit refused it but the pool has not
#: enough free RSA nodes for it (issue 32: told as a limit's reason is, once)
NO_FREE_NODES = "not enough RSA nodes are free now (jobs get them in priority order)"


def over_limit_detail(why: str, held: bool) -> str:
    """What the user of a job over a limit (or held off by maintenance, or held by Slurm
    for the RSA while no RSA node is free) reads after the OVER_LIMIT rows' note: why, and
    what the job does meanwhile: held, if Slurm holds it for the RSA (``held``: early start
    wait, job_submit.lua's begin time, at most ``staging.wait_timeout``); else it may
    start first, and then reads the PFS (early start fallback, or a job that queued as
    usual on a busy cluster)."""
    then = ("held meanwhile, at most staging.wait_timeout, then it reads the PFS"
            if held else "if it starts first, it reads the PFS")
    return f"{why}; {then}"


# ---- conditions --------------------------------------------------------------------------

def _early(rec: JobRecord, policy: StagingPolicy) -> EarlyStart:
    return rec.spec.early_start or policy.early_start


#: Cond -> whether it holds for a job (the first branch of a rule whose condition holds is
#: taken)
CONDITIONS: Mapping[Cond, Callable[[JobRecord, StagingPolicy], bool]] = {
    Cond.NO_INPUT: lambda rec, _: rec.spec.data_in is None and rec.spec.preprocess is None,
    Cond.NO_OUTPUT: lambda rec, _: rec.spec.data_out is None and rec.spec.postprocess is None,
    Cond.RW_INPUT: lambda rec, _: bool(rec.spec.input_writable) and rec.spec.data_in is not None,
    Cond.POLICY_WAIT: lambda rec, policy: (_early(rec, policy) is EarlyStart.WAIT
                                           and not rec.wait_over),
    Cond.POLICY_UNION: lambda rec, policy: _early(rec, policy) is EarlyStart.UNION,
    Cond.JOB_ENDED: lambda rec, _: rec.job_state is not JobState.RUNNING,
    Cond.STALE_WRITEBACK: lambda rec, _: rec.writeback_live and
    rec.job_state is not JobState.RUNNING,
    Cond.DECLINED: lambda rec, _: rec.declined,
}

for _table, _enum in ((EFFECTS, Effect), (CONDITIONS, Cond)):
    if set(_table) != set(_enum):  # a new member without its handler is a bug: fail loud
        raise AssertionError(f"no handler for {sorted(set(_enum) - set(_table))}")


# ---- retry and allocation bookkeeping ------------------------------------------------------

def failed_kind(src: RsaState) -> str:
    """The action kind whose failure led out of ``src`` (for retry accounting)."""
    return {
        RsaState.FS_BUILDING: ActionKind.BUILD_FS,
        RsaState.STAGING_IN: ActionKind.STAGE_IN,
        RsaState.INPUT_WRITEBACK: ActionKind.WRITE_BACK,
        RsaState.RESETTING: ActionKind.RESET,
        RsaState.STAGING_OUT: ActionKind.STAGE_OUT,
        RsaState.VERIFYING: ActionKind.STAGE_OUT,
        RsaState.TEARING_DOWN: ActionKind.DESTROY_FS,
    }.get(src, ActionKind.STAGE_OUT).value


def _arm_retry(rec: JobRecord, now: float, policy: StagingPolicy) -> Trigger | None:
    kind = failed_kind(rec.rsa_state)
    rec.failures[kind] = rec.failures.get(kind, 0) + 1
    budget = policy.fs_build_attempts if kind == ActionKind.BUILD_FS.value else policy.retries
    if kind == ActionKind.BUILD_FS.value:
        # A failed build is always torn down; a later cycle allocates again.
        return Trigger.GIVE_UP if rec.failures[kind] >= budget else None
    if rec.failures[kind] > budget:
        return Trigger.GIVE_UP
    return None


def _reset_trigger(rec: JobRecord, policy: StagingPolicy) -> ResetTrigger:
    if rec.spec.reset is not None:
        return ResetTrigger.INPUT_DONE if rec.spec.reset.after is None else ResetTrigger.DELAY
    return policy.reset_trigger


def _try_allocate(rec: JobRecord, pool: PoolPort, policy: StagingPolicy, now: float
                  ) -> tuple[Trigger, str]:
    if now < rec.not_before:
        return Trigger.NODES_BUSY, ""  # backing off after a failed RAMDISK build
    if rec.declined:
        return Trigger.GIVE_UP, "the RSA was declined for this job earlier"
    if rec.failures.get(ActionKind.BUILD_FS.value, 0) >= policy.fs_build_attempts:
        return Trigger.GIVE_UP, "the RAMDISK could not be built"
    req = Request(job_id=rec.job_id, compute_nodes=max(rec.compute_nodes, 1),
                  nodes=rec.spec.nodes, tier=rec.spec.tier, capacity=rec.spec.capacity)
    try:
        got = pool.allocate(req)
    except PolicyViolation as e:
        return Trigger.POLICY_VIOLATION, str(e)
    if got is None:
        why = pool.refusal(rec.job_id)
        held = rec.hold_until is not None and rec.hold_until > now  # Slurm holds it
        if not why and rec.message.startswith(f"{OVER_LIMIT_NOTE}: "):
            # no free nodes, so no limit was judged: the limit it was told of may be gone
            # (the others gave some back) or be another's (its account changed): judged
            # again on what it needs at least, its message kept true
            why = pool.limit_now(req) or NO_FREE_NODES
        if not why and held:
            why = NO_FREE_NODES  # waits for RSA nodes as one over a limit does (issue 32)
        if why:
            detail = over_limit_detail(why, held)
            if rec.message != f"{OVER_LIMIT_NOTE}: {detail}":
                return Trigger.OVER_LIMIT, detail  # told once (again if the reason changes)
        return Trigger.NODES_BUSY, ""
    rec.nodes = Hostlist.from_nodeset(got).folded  # its actions' nodes: no parse
    rec.cycle += 1
    rec.failures = {k: v for k, v in rec.failures.items() if k == ActionKind.BUILD_FS.value}
    return Trigger.NODES_ALLOCATED, pool.explain(rec.job_id)
