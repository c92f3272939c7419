"""One job's RSA state machine: rule firing, timers, settling.

Owns :func:`fire` (apply one trigger to one job: the rule from the transition table by
(rsa-state, trigger), its branch by ``effects.CONDITIONS``, its effects by
``effects.EFFECTS``, then its actions), :func:`settle` (feed due timers, the level-
triggered job-state and TICK until nothing moves), :class:`Step` and the safety invariant
(:class:`InvariantViolation`). Pure: time comes in as ``now``; the RSA node pool comes in
through the small :class:`~rsa_scheduler.core.effects.PoolPort` protocol. Every change to
a record is emitted as an event whose context carries a ``set`` patch, so replaying the
log (:mod:`rsa_scheduler.core.record`) reproduces the record exactly. Re-exports the
record's names its readers have always taken from here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rsa_scheduler.core.actions import TRACKED, Action, ActionKind, Outcome, Result, action_id
from rsa_scheduler.core.effects import CONDITIONS, EFFECTS, Firing, PoolPort, failed_kind
from rsa_scheduler.core.events import Event
from rsa_scheduler.core.hostlist import Hostlist
from rsa_scheduler.core.payloads import (
    AlertArgs,
    AllocateArgs,
    BuildFsArgs,
    CancelArgs,
    DestroyFsArgs,
    LockInArgs,
    MessageArgs,
    MountInputArgs,
    MountMode,
    MountOutputArgs,
    OnNodes,
    OutputArgs,
    OutputMountArgs,
    Payload,
    ReleaseArgs,
    ResetArgs,
    StageInArgs,
    StageOutArgs,
    TellUserArgs,
    UnlockArgs,
    VerifyArgs,
    WriteBackArgs,
    as_path,
)
from rsa_scheduler.core.policy import NODE_TIERS, EarlyStart, StagingPolicy
from rsa_scheduler.core.record import JobRecord, apply_event, new_record_event, state_diff
from rsa_scheduler.core.rules import Effect, InvalidTransition, Rule
from rsa_scheduler.core.states import (
    JOB_TRIGGERS,
    READY,
    TIMER_STATES,
    JobState,
    RsaState,
    Trigger,
    holds_user_data,
)
from rsa_scheduler.core.transitions import lookup
from rsa_scheduler.errors import InternalError

__all__ = [
    "MAX_SETTLE", "InvariantViolation", "JobRecord", "PoolPort", "Step", "apply_event",
    "choose", "due_timers", "fire", "new_record_event", "owed_unlock", "retry_unlock", "settle",
    "unlock_delay", "unlock_outcome",
]

MAX_SETTLE = 32  # more rule firings than this for one job in one step is a table bug


class InvariantViolation(InternalError, AssertionError):
    """The machine was about to break a safety rule (a bug, never user error)."""


@dataclass(slots=True)
class Step:
    """What one call into the machine produced."""

    events: list[Event] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)

    def extend(self, other: Step) -> None:
        self.events.extend(other.events)
        self.actions.extend(other.actions)


def choose(rule: Rule, rec: JobRecord, policy: StagingPolicy
           ) -> tuple[RsaState, tuple[ActionKind, ...], tuple[Effect, ...], str]:
    """The (destination, actions, effects, note) a rule gives for this job: its first
    branch whose condition holds (``effects.CONDITIONS``), else its default."""
    for br in rule.branches:
        if CONDITIONS[br.cond](rec, policy):
            return br.dst, br.actions, br.effects, br.note or rule.note
    return rule.dst, rule.actions, rule.effects, rule.note


# ---- action arguments ------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class _Ask:
    """One action whose payload is to be built: the job, the policy, and what the
    transition says (its note, the effects' detail, the state it leads to)."""

    rec: JobRecord
    policy: StagingPolicy
    note: str
    detail: str
    dst: RsaState

    def on_nodes(self) -> tuple[str, Hostlist]:
        """The job's user and RSA nodes, parsed (only payloads that run on nodes ask)."""
        return self.rec.user, Hostlist.parse(self.rec.nodes)


_Builder = Callable[[_Ask], Payload]


def _message(cls: type[MessageArgs]) -> _Builder:
    def build(a: _Ask) -> Payload:
        note, detail = a.note, a.detail
        text = note if not detail else (f"{note}: {detail}" if note else detail)
        return cls(message=text, rsa_state=a.dst)
    return build


def _plain(cls: type[OnNodes]) -> _Builder:
    def build(a: _Ask) -> Payload:
        user, nodes = a.on_nodes()
        return cls(user, nodes)
    return build


def _build_fs(a: _Ask) -> Payload:
    user, nodes = a.on_nodes()
    # a tier a node can be in; `auto` (the allocator chose): the nodes' own, None here
    tier = a.rec.spec.tier if a.rec.spec.tier in NODE_TIERS else None
    return BuildFsArgs(user, nodes, tier)


def _stage_in(a: _Ask) -> Payload:
    spec = a.rec.spec
    user, nodes = a.on_nodes()
    # union: the job may read the RAMDISK while it fills, so files appear atomically
    atomic = (spec.early_start or a.policy.early_start) is EarlyStart.UNION
    return StageInArgs(user, nodes, as_path(spec.data_in), atomic, spec.preprocess,
                       writable=a.rec.writable_input())


def _mount_input(a: _Ask) -> Payload:
    spec = a.rec.spec
    user, nodes = a.on_nodes()
    union = (spec.early_start or a.policy.early_start) is EarlyStart.UNION and (
        a.rec.rsa_state is RsaState.STAGING_IN)
    mode = MountMode.UNION if union else (
        MountMode.RW if spec.input_writable else MountMode.RO)
    return MountInputArgs(user, nodes, as_path(spec.data_in), mode)


def _output_mount(cls: type[OutputMountArgs]) -> _Builder:
    def build(a: _Ask) -> Payload:
        spec = a.rec.spec
        user, nodes = a.on_nodes()
        return cls(user, nodes, as_path(spec.data_in), as_path(spec.data_out))
    return build


def _reset(a: _Ask) -> Payload:
    spec = a.rec.spec
    user, nodes = a.on_nodes()
    data_in = as_path(spec.data_in)
    return ResetArgs(user, nodes, data_in, as_path(spec.data_out),
                     write_back=bool(spec.input_writable) and data_in is not None)


def _write_back(a: _Ask) -> Payload:
    user, nodes = a.on_nodes()
    data_in = as_path(a.rec.spec.data_in)
    if data_in is None:
        raise InvariantViolation(f"job {a.rec.job_id}: write-back without DATA_IN")
    return WriteBackArgs(user, nodes, data_in)


def _output(cls: type[OutputArgs]) -> _Builder:
    def build(a: _Ask) -> Payload:
        spec = a.rec.spec
        user, nodes = a.on_nodes()
        method = spec.stage_out or a.policy.stage_out
        if a.rec.rescue_to:  # the RAMDISK's content, whatever the job's POSTPROCESS did
            return cls(user, nodes, as_path(a.rec.rescue_to), method, None, rescue=True)
        return cls(user, nodes, as_path(spec.data_out), method, spec.postprocess)
    return build


#: ActionKind -> the builder of its typed payload (``core.payloads``): paths, nodes and
#: choices are parsed there, once, for every executor. CANCEL has none here: fire() names
#: the action it cancels.
_PAYLOADS: Mapping[ActionKind, _Builder] = {
    ActionKind.TELL_USER: _message(TellUserArgs),
    ActionKind.ALERT: _message(AlertArgs),
    ActionKind.BUILD_FS: _build_fs,
    ActionKind.STAGE_IN: _stage_in,
    ActionKind.MOUNT_INPUT: _mount_input,
    ActionKind.MOUNT_OUTPUT: _output_mount(MountOutputArgs),
    ActionKind.RESET: _reset,
    ActionKind.WRITE_BACK: _write_back,
    ActionKind.STAGE_OUT: _output(StageOutArgs),
    ActionKind.VERIFY: _output(VerifyArgs),
    ActionKind.ALLOCATE: _plain(AllocateArgs),
    ActionKind.RELEASE: _plain(ReleaseArgs),
    ActionKind.DESTROY_FS: _plain(DestroyFsArgs),
    ActionKind.LOCK_IN: _plain(LockInArgs),
    ActionKind.UNLOCK: _plain(UnlockArgs),
}
if set(_PAYLOADS) != set(ActionKind) - {ActionKind.CANCEL}:  # a new kind without a builder
    raise AssertionError(f"no payload for {sorted(set(ActionKind) - set(_PAYLOADS))}")


def _args(kind: ActionKind, rec: JobRecord, policy: StagingPolicy, note: str,
          detail: str, dst: RsaState) -> Payload:
    """The typed payload of one action, by its kind's builder (``_PAYLOADS``)."""
    build = _PAYLOADS.get(kind)
    if build is None:
        raise AssertionError(f"no payload for {kind.value} actions")  # CANCEL: see fire()
    return build(_Ask(rec, policy, note, detail, dst))


# ---- firing ----------------------------------------------------------------------------

def fire(rec: JobRecord, trigger: Trigger, now: float, policy: StagingPolicy,
         pool: PoolPort, *, detail: str = "", by: str = "") -> Step:
    """Apply one trigger to one job: look up the rule, run its effects, emit its actions.

    Raises InvalidTransition when the trigger cannot happen in the job's rsa-state.
    """
    rule = lookup(rec.rsa_state, trigger, rec.job_id)
    step = Step()
    is_timer = trigger in TIMER_STATES
    if rule.is_stay and not (is_timer and trigger.value in rec.timers):
        return step
    before = rec.state_json()  # job_id, user and spec never change here
    if is_timer:
        rec.timers.pop(trigger.value, None)  # a timer fires once
    src = rec.rsa_state
    dst, kinds, effects, note = choose(rule, rec, policy)
    if dst is not src:
        _check_invariant(rec, src, dst, trigger, kinds)

    # each effect by its handler, in the rule's order (they may answer with a follow-up)
    firing = Firing(rec, src, now, policy, pool, detail)
    for eff in effects:
        EFFECTS[eff](firing)
    follow, detail = firing.follow, firing.detail

    actions: list[Action] = []
    # Leaving a state cancels its outstanding action (CANCEL is in the rule's actions).
    cancelled = rec.pending
    if dst is not src or ActionKind.CANCEL in kinds:
        rec.pending = None
    for kind in kinds:
        if kind is ActionKind.CANCEL:
            if cancelled is None:
                continue
            rec.serial += 1
            actions.append(Action(action_id(rec.job_id, rec.cycle, kind, rec.serial),
                                  rec.job_id, kind, CancelArgs(cancelled.id)))
            continue
        if kind is ActionKind.UNLOCK and (not rec.locked or rec.unlock is not None):
            continue  # never locked in, or its restore is outstanding already
        if kind is ActionKind.RELEASE and not rec.nodes:
            continue
        rec.serial += 1
        act = Action(action_id(rec.job_id, rec.cycle, kind, rec.serial), rec.job_id, kind,
                     _args(kind, rec, policy, note, detail, dst))
        if kind is ActionKind.LOCK_IN:
            # from now until a restore is confirmed Slurm may hold the job locked in
            rec.locked = True
            _drop_unlock(rec)  # a lock-in again supersedes a restore still retrying
        elif kind is ActionKind.UNLOCK:
            rec.unlock = act  # tracked beside rec.pending (RESTORES)
        if kind in TRACKED:
            if rec.pending is not None:
                raise InvariantViolation(
                    f"job {rec.job_id}: two tracked actions outstanding "
                    f"({rec.pending.id}, {act.id})")
            rec.pending = act
        if kind is ActionKind.TELL_USER:
            rec.message = act.args_as(TellUserArgs).message
        elif kind is ActionKind.WRITE_BACK:
            # a write-back while the job runs may miss its last changes (STALE_WRITEBACK)
            rec.writeback_live = rec.job_state is JobState.RUNNING
        actions.append(act)
    if any(a.kind is ActionKind.RELEASE for a in actions) or Effect.RELEASE_NODES in effects:
        rec.nodes = ""

    if dst is not src:
        rec.rsa_state = dst
        rec.since = now
        for name in list(rec.timers):
            if dst not in TIMER_STATES.get(Trigger(name), frozenset()):
                del rec.timers[name]
    # RETRY_DUE belongs to the failure state just entered; re-add after the sweep.
    if (Effect.ARM_RETRY in effects and follow is None
            and rec.rsa_state in TIMER_STATES[Trigger.RETRY_DUE]):
        delay = policy.retry_delay(rec.failures.get(failed_kind(src), 1))
        rec.timers[Trigger.RETRY_DUE.value] = now + delay

    patch = state_diff(before, rec.state_json())
    if patch or actions:
        ctx: dict[str, Any] = {"from": src.value, "to": rec.rsa_state.value,
                               "trigger": trigger.value, "actions": [a.id for a in actions],
                               "set": patch}
        if detail:
            ctx["detail"] = detail
        if by:
            ctx["by"] = by
        step.events.append(Event(now, rec.job_id, "rsa.transition", ctx))
        step.actions.extend(actions)
    if follow is not None:
        step.extend(fire(rec, follow, now, policy, pool,
                         detail=firing.follow_detail or detail))
    return step


def _check_invariant(rec: JobRecord, src: RsaState, dst: RsaState, trigger: Trigger,
                     kinds: tuple[ActionKind, ...]) -> None:
    """Output/modified input on the RAMDISK is never destroyed before it is verified on
    persistent storage, unless an operator discards it explicitly."""
    rw = rec.writable_input()
    if not holds_user_data(src, rw) or holds_user_data(dst, rw):
        return
    destroying = ActionKind.DESTROY_FS in kinds or dst in (RsaState.RELEASED,
                                                          RsaState.TEARING_DOWN)
    # a reset that failed held only input (read-only: on the PFS as it was)
    allowed = trigger in (Trigger.VERIFIED, Trigger.DISCARD, Trigger.WRITEBACK_DONE) or (
        trigger is Trigger.RESET_ERROR and not rw)
    if destroying and not allowed:
        raise InvariantViolation(
            f"job {rec.job_id}: {trigger.value} would destroy unverified data in {src.value}")


def _drop_timer(rec: JobRecord, trig: Trigger, now: float) -> Step:
    rec.timers.pop(trig.value, None)
    return Step(events=[Event(now, rec.job_id, "timer.dropped", {
        "timer": trig.value, "set": {"timers": dict(rec.timers)}})])


# ---- the restore of a job's own QOS / priority (UNLOCK) ---------------------------------

#: the restore's first retry comes after this many seconds, doubling up to UNLOCK_DELAY_MAX:
#: a job runs under the lock-in until it is done, so sooner than StagingPolicy's backoff
UNLOCK_DELAY = 5.0
UNLOCK_DELAY_MAX = 300.0


def unlock_delay(failures: int) -> float:
    """Seconds before the restore is tried again after ``failures`` failures (>= 1)."""
    return float(min(UNLOCK_DELAY * (2 ** max(failures - 1, 0)), UNLOCK_DELAY_MAX))


def _drop_unlock(rec: JobRecord) -> None:
    rec.unlock = None
    rec.unlock_failures = 0
    rec.timers.pop(Trigger.UNLOCK_DUE.value, None)


def unlock_outcome(rec: JobRecord, outcome: Outcome, now: float,
                   policy: StagingPolicy) -> Step:
    """The outcome of the job's outstanding restore (``rec.unlock``).

    Done, or refused (the job has ended: nothing is left to restore): the lock-in has
    ended. Busy (Slurm changes no running job's QOS): the restore waits for the job's
    next change of job-state (:func:`owed_unlock`: a requeue makes it pending again, an
    end makes it moot). Failed: tried again after :func:`unlock_delay`, for as long as
    it takes (a lock-in always ends); the operator is alerted once it has failed
    ``policy.retries`` times (at least once)."""
    before = rec.state_json()
    step = Step()
    actions: list[Action] = []
    if outcome.result is Result.FAILED:
        rec.unlock_failures += 1
        rec.timers[Trigger.UNLOCK_DUE.value] = now + unlock_delay(rec.unlock_failures)
        if rec.unlock_failures == max(policy.retries, 1):
            rec.serial += 1
            text = (f"the job's own QOS/priority could not be restored after its lock-in "
                    f"({rec.unlock_failures} attempts; rsad keeps trying, every "
                    f"{UNLOCK_DELAY_MAX:.0f}s at most): {outcome.message}")
            actions.append(Action(action_id(rec.job_id, rec.cycle, ActionKind.ALERT,
                                            rec.serial), rec.job_id, ActionKind.ALERT,
                                  AlertArgs(message=text, rsa_state=rec.rsa_state)))
    elif outcome.result is Result.BUSY:
        rec.unlock = None  # owed: issued again at the job's next change (owed_unlock)
        rec.timers.pop(Trigger.UNLOCK_DUE.value, None)
    else:
        _drop_unlock(rec)
        rec.locked = False
    step.events.append(Event(now, rec.job_id, "action.outcome", {
        "action": outcome.action_id, "result": outcome.result.value,
        "message": outcome.message, "detail": dict(outcome.detail),
        "actions": [a.id for a in actions],
        "set": state_diff(before, rec.state_json())}))
    step.actions.extend(actions)
    return step


def retry_unlock(rec: JobRecord, now: float) -> Step:
    """The restore's retry timer is due: a new UNLOCK (a new id: the failed one ended)."""
    return _issue_unlock(rec, now, "unlock.retry")


def owed_unlock(rec: JobRecord, now: float) -> Step:
    """The job's job-state changed: if a lock-in of it still owes a restore and none is
    outstanding (Slurm refused it while the job ran), one now. Nothing otherwise."""
    if not rec.locked or rec.unlock is not None or rec.rsa_state in READY \
            or Trigger.UNLOCK_DUE.value in rec.timers:
        return Step()
    return _issue_unlock(rec, now, "unlock.owed")


def _issue_unlock(rec: JobRecord, now: float, name: str) -> Step:
    before = rec.state_json()
    rec.timers.pop(Trigger.UNLOCK_DUE.value, None)
    if not rec.locked:
        return Step(events=[Event(now, rec.job_id, "timer.dropped", {
            "timer": Trigger.UNLOCK_DUE.value, "set": state_diff(before, rec.state_json())})])
    rec.serial += 1
    act = Action(action_id(rec.job_id, rec.cycle, ActionKind.UNLOCK, rec.serial),
                 rec.job_id, ActionKind.UNLOCK, UnlockArgs(rec.user, Hostlist.parse(rec.nodes)))
    rec.unlock = act
    return Step(events=[Event(now, rec.job_id, name, {
        "actions": [act.id], "failures": rec.unlock_failures,
        "set": state_diff(before, rec.state_json())})], actions=[act])


# ---- settling --------------------------------------------------------------------------

def due_timers(rec: JobRecord, now: float) -> list[Trigger]:
    """Timer triggers due at ``now``, earliest first."""
    if not rec.timers:
        return []  # most jobs, at every settle
    due = sorted((t, name) for name, t in rec.timers.items() if t <= now)
    return [Trigger(name) for _, name in due]


def settle(rec: JobRecord, now: float, policy: StagingPolicy, pool: PoolPort) -> Step:
    """Feed due timers, the job's current job-state and TICK until the record stops moving."""
    step = Step()
    for _ in range(MAX_SETTLE):
        moved = False
        for trig in due_timers(rec, now):
            if trig is Trigger.UNLOCK_DUE:
                step.extend(retry_unlock(rec, now))
                moved = True
                continue
            try:
                sub = fire(rec, trig, now, policy, pool)
            except InvalidTransition:
                sub = _drop_timer(rec, trig, now)  # armed in a state the job has left
            step.extend(sub)
            moved = True
        level = [JOB_TRIGGERS[rec.job_state]] if rec.job_state else []
        for trig in (*level, Trigger.TICK):
            state = rec.rsa_state
            sub = fire(rec, trig, now, policy, pool)
            if sub.events:
                step.extend(sub)
                if rec.rsa_state is not state or sub.actions:
                    moved = True
                    break
        if not moved:
            return step
    raise InvariantViolation(f"job {rec.job_id}: state machine did not settle "
                             f"(last state {rec.rsa_state.value})")
