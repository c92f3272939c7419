"""One job's RSA state machine: the record, rule firing, effects, timers, replay.

Owns :class:`JobRecord` (everything the RSA knows about one job), :func:`fire` (apply one
trigger through the transition table), :func:`settle` (feed level-triggered job-state and
TICK triggers until nothing moves) and :func:`apply_event` (rebuild a record from its
event log). Pure: time comes in as ``now``; the RSA node pool comes in through the small
:class:`PoolPort` protocol. Every change to a record is emitted as an event whose context
carries a ``set`` patch, so replaying the log reproduces the record exactly.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from rsa_scheduler.core.actions import TRACKED, Action, ActionKind, action_id
from rsa_scheduler.core.allocator import PolicyViolation, Request
from rsa_scheduler.core.directives import DirectiveSpec
from rsa_scheduler.core.events import Event
from rsa_scheduler.core.hostlist import Hostlist
from rsa_scheduler.core.payloads import (
    AlertArgs,
    AllocateArgs,
    BuildFsArgs,
    CancelArgs,
    DestroyFsArgs,
    LockInArgs,
    MountInputArgs,
    MountMode,
    MountOutputArgs,
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
from rsa_scheduler.core.policy import (
    NODE_TIERS,
    EarlyStart,
    ResetTrigger,
    StagingPolicy,
)
from rsa_scheduler.core.states import HOLDS_USER_DATA, JobState, RsaState
from rsa_scheduler.core.transitions import (
    JOB_TRIGGERS,
    Cond,
    Effect,
    InvalidTransition,
    Rule,
    Trigger,
    lookup,
)
from rsa_scheduler.errors import InternalError

MAX_SETTLE = 32  # more rule firings than this for one job in one step is a table bug


class InvariantViolation(InternalError, AssertionError):
    """The machine was about to break a safety rule (a bug, never user error)."""


class PoolPort(Protocol):
    """What the machine needs from the RSA node pool (``core.allocator.Pool``)."""

    def allocate(self, req: Request) -> Any: ...  # NodeSet | None; raises PolicyViolation
    def release(self, job_id: str) -> Any: ...  # NodeSet
    def explain(self, job_id: str) -> str: ...  # why tier auto chose them ("" otherwise)


#: which timers stay armed in which states; a state change drops the others
TIMER_STATES: Mapping[Trigger, frozenset[RsaState]] = {
    Trigger.RESET_DUE: frozenset({RsaState.MOUNTED_INPUT}),
    Trigger.WAIT_EXPIRED: frozenset({RsaState.ALLOCATED, RsaState.FS_BUILDING,
                                     RsaState.FS_READY, RsaState.STAGING_IN}),
    Trigger.RETRY_DUE: frozenset({RsaState.STAGE_IN_FAILED, RsaState.WRITEBACK_FAILED,
                                  RsaState.RESET_FAILED, RsaState.STAGE_OUT_FAILED,
                                  RsaState.TEARDOWN_FAILED}),
}


@dataclass(slots=True)
class JobRecord:
    """Everything the RSA knows about one job. Mutated only by this module."""

    job_id: str
    user: str
    spec: DirectiveSpec
    compute_nodes: int = 1
    priority: int = 0
    job_state: JobState | None = None
    rsa_state: RsaState = RsaState.NONE
    cycle: int = 0
    nodes: str = ""  # NodeSet of RSA nodes held, "" when none
    pending: Action | None = None  # the one tracked action outstanding
    failures: dict[str, int] = field(default_factory=dict)  # per action kind
    timers: dict[str, float] = field(default_factory=dict)  # trigger value -> due time
    locked: bool = False
    declined: bool = False
    message: str = ""  # the last thing the user was told
    since: float = 0.0  # time of the last rsa-state change
    wait_over: bool = False  # early-start=wait deadline passed
    not_before: float = 0.0  # no new allocation before this time (after a failed build)
    serial: int = 0  # actions issued so far: makes every action id unique and stable
    #: early start `wait`: the deadline of the start hold Slurm keeps the job in (its
    #: admin_comment's hold marker, seconds since the epoch); None when not held. The
    #: wait at start ends then too: a job is never held longer than its wait_timeout.
    hold_until: float | None = None

    # ---- derived --------------------------------------------------------------------
    @property
    def early_start(self) -> EarlyStart | None:
        return self.spec.early_start

    def holds_user_data(self) -> bool:
        return self.rsa_state in HOLDS_USER_DATA

    # ---- JSON (projections and replay) ------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "user": self.user, "spec": _spec_json(self.spec),
                **self.state_json()}

    def state_json(self) -> dict[str, Any]:
        """What :func:`fire` may change: the JSON of every field but job_id, user and the
        (frozen) spec. Enum values are read as ``_value_``: the ``value`` property costs
        a Python call, and this runs for every changed job in every decision step."""
        job_state = self.job_state
        pending = self.pending
        return {
            "compute_nodes": self.compute_nodes,
            "priority": self.priority,
            "job_state": job_state._value_ if job_state is not None else None,
            "rsa_state": self.rsa_state._value_,
            "cycle": self.cycle,
            "nodes": self.nodes,
            "pending": pending.to_json() if pending is not None else None,
            "failures": dict(self.failures),
            "timers": dict(self.timers),
            "locked": self.locked,
            "declined": self.declined,
            "message": self.message,
            "since": self.since,
            "serial": self.serial,
            "wait_over": self.wait_over,
            "not_before": self.not_before,
            "hold_until": self.hold_until,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> JobRecord:
        rec = cls(job_id=str(data["job_id"]), user=str(data["user"]),
                  spec=DirectiveSpec.from_json(data["spec"]))
        _patch(rec, {k: v for k, v in data.items() if k not in ("job_id", "user", "spec")})
        return rec


#: a new record's state_json(): what a ``job.tracked`` event may leave out
_NEW_STATE: Mapping[str, Any] = JobRecord("", "", DirectiveSpec()).state_json()


#: id(spec) -> (spec, its JSON, the same without unset keys). Specs are frozen and
#: shared (every task of an array, every job of one admin_comment): keyed by identity, a
#: hit costs no hash of the spec's fields (a dataclass hash in Python); the spec is kept
#: so its id is not reused.
_SPEC_JSON: dict[int, tuple[DirectiveSpec, dict[str, Any], dict[str, Any]]] = {}


def _spec_jsons(spec: DirectiveSpec) -> tuple[DirectiveSpec, dict[str, Any], dict[str, Any]]:
    hit = _SPEC_JSON.get(id(spec))
    if hit is None or hit[0] is not spec:
        if len(_SPEC_JSON) >= 65536:
            _SPEC_JSON.clear()
        full = spec.to_json()
        hit = _SPEC_JSON[id(spec)] = (spec, full,
                                      {k: v for k, v in full.items() if v is not None})
    return hit


def _spec_json(spec: DirectiveSpec) -> dict[str, Any]:
    """The spec's JSON (computed once per spec object)."""
    return dict(_spec_jsons(spec)[1])


def _patch(rec: JobRecord, values: Mapping[str, Any]) -> None:
    """Apply a JSON patch (field -> JSON value) to a record."""
    for key, value in values.items():
        if key == "job_state":
            rec.job_state = JobState(value) if value is not None else None
        elif key == "rsa_state":
            rec.rsa_state = RsaState(value)
        elif key == "pending":
            rec.pending = Action.from_json(value) if value is not None else None
        elif key == "spec":
            rec.spec = DirectiveSpec.from_json(value)
        elif key in ("failures", "timers"):
            setattr(rec, key, dict(value))
        elif key in JobRecord.__slots__:
            setattr(rec, key, value)
        else:
            raise ValueError(f"unknown JobRecord field {key!r} in event")


def _diff(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in after.items() if before.get(k) != v}


@dataclass(slots=True)
class Step:
    """What one call into the machine produced."""

    events: list[Event] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)

    def extend(self, other: Step) -> None:
        self.events.extend(other.events)
        self.actions.extend(other.actions)


# ---- conditions ------------------------------------------------------------------------

def _holds(cond: Cond, rec: JobRecord, policy: StagingPolicy) -> bool:
    spec = rec.spec
    if cond is Cond.NO_INPUT:
        return spec.data_in is None and spec.preprocess is None
    if cond is Cond.NO_OUTPUT:
        return spec.data_out is None and spec.postprocess is None
    if cond is Cond.RW_INPUT:
        return bool(spec.input_writable) and spec.data_in is not None
    if cond is Cond.POLICY_WAIT:
        return (spec.early_start or policy.early_start) is EarlyStart.WAIT and not rec.wait_over
    if cond is Cond.POLICY_UNION:
        return (spec.early_start or policy.early_start) is EarlyStart.UNION
    if cond is Cond.JOB_ENDED:
        return rec.job_state is not JobState.RUNNING
    raise AssertionError(f"unhandled condition {cond}")


def choose(rule: Rule, rec: JobRecord, policy: StagingPolicy
           ) -> tuple[RsaState, tuple[ActionKind, ...], tuple[Effect, ...], str]:
    """The (destination, actions, effects, note) a rule gives for this job."""
    for br in rule.branches:
        if _holds(br.cond, rec, policy):
            return br.dst, br.actions, br.effects, br.note or rule.note
    return rule.dst, rule.actions, rule.effects, rule.note


# ---- action arguments ------------------------------------------------------------------

def _args(kind: ActionKind, rec: JobRecord, policy: StagingPolicy, note: str,
          detail: str, dst: RsaState) -> Payload:
    """The typed payload of one action (``core.payloads``): paths, nodes and choices are
    parsed here, once, for every executor."""
    spec = rec.spec
    if kind in (ActionKind.TELL_USER, ActionKind.ALERT):
        text = note if not detail else (f"{note}: {detail}" if note else detail)
        cls = TellUserArgs if kind is ActionKind.TELL_USER else AlertArgs
        return cls(message=text, rsa_state=dst)
    user, nodes = rec.user, Hostlist.parse(rec.nodes)
    if kind is ActionKind.BUILD_FS:
        # a tier a node can be in; `auto` (the allocator chose): the nodes' own, None here
        tier = spec.tier if spec.tier in NODE_TIERS else None
        return BuildFsArgs(user, nodes, tier)
    if kind is ActionKind.STAGE_IN:
        # union: the job may read the RAMDISK while it fills, so files appear atomically
        atomic = (spec.early_start or policy.early_start) is EarlyStart.UNION
        return StageInArgs(user, nodes, as_path(spec.data_in), atomic, spec.preprocess)
    if kind is ActionKind.MOUNT_INPUT:
        union = (spec.early_start or policy.early_start) is EarlyStart.UNION and (
            rec.rsa_state is RsaState.STAGING_IN)
        mode = MountMode.UNION if union else (
            MountMode.RW if spec.input_writable else MountMode.RO)
        return MountInputArgs(user, nodes, as_path(spec.data_in), mode)
    if kind in (ActionKind.MOUNT_OUTPUT, ActionKind.RESET):
        out_cls = MountOutputArgs if kind is ActionKind.MOUNT_OUTPUT else ResetArgs
        return out_cls(user, nodes, as_path(spec.data_in), as_path(spec.data_out))
    if kind is ActionKind.WRITE_BACK:
        data_in = as_path(spec.data_in)
        if data_in is None:
            raise InvariantViolation(f"job {rec.job_id}: write-back without DATA_IN")
        return WriteBackArgs(user, nodes, data_in)
    if kind in (ActionKind.STAGE_OUT, ActionKind.VERIFY):
        method = spec.stage_out or policy.stage_out
        copy_cls = StageOutArgs if kind is ActionKind.STAGE_OUT else VerifyArgs
        return copy_cls(user, nodes, as_path(spec.data_out), method, spec.postprocess)
    plain = {ActionKind.ALLOCATE: AllocateArgs, ActionKind.RELEASE: ReleaseArgs,
             ActionKind.DESTROY_FS: DestroyFsArgs, ActionKind.LOCK_IN: LockInArgs,
             ActionKind.UNLOCK: UnlockArgs}
    if kind in plain:
        return plain[kind](user, nodes)
    raise AssertionError(f"no payload for {kind.value} actions")  # CANCEL: see fire()


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
    follow: Trigger | None = None
    follow_detail = ""  # said only by the follow-up transition (why tier auto chose)

    if dst is not src:
        _check_invariant(rec, src, dst, trigger, kinds)

    for eff in effects:
        if eff is Effect.TRY_ALLOCATE:
            follow, why = _try_allocate(rec, pool, policy, now)
            if follow is Trigger.NODES_ALLOCATED:
                follow_detail = why
            else:
                detail = detail or why
        elif eff is Effect.RELEASE_NODES:
            pool.release(rec.job_id)
        elif eff is Effect.ARM_RESET:
            if (rec.spec.data_out is not None
                    and _reset_trigger(rec, policy) is ResetTrigger.DELAY):
                delay = rec.spec.reset.after if rec.spec.reset and rec.spec.reset.after \
                    else policy.reset_delay
                rec.timers[Trigger.RESET_DUE.value] = now + float(delay)
        elif eff is Effect.DISARM_RESET:
            rec.timers.pop(Trigger.RESET_DUE.value, None)
        elif eff is Effect.END_WAIT:
            rec.wait_over = True
        elif eff is Effect.ARM_WAIT:
            # a job Slurm held before it started has spent its wait there already
            due = now + policy.wait_timeout if rec.hold_until is None else \
                min(now + policy.wait_timeout, max(now, rec.hold_until))
            rec.timers.setdefault(Trigger.WAIT_EXPIRED.value, due)
        elif eff is Effect.ARM_RETRY:
            follow = _arm_retry(rec, now, policy)
            if src is RsaState.FS_BUILDING and follow is None:
                rec.not_before = now + policy.retry_delay(
                    rec.failures.get(ActionKind.BUILD_FS.value, 1))
        elif eff is Effect.RESET_ATTEMPTS:
            rec.failures = {k: v for k, v in rec.failures.items()
                            if k == ActionKind.BUILD_FS.value}
        elif eff is Effect.MARK_DECLINED:
            rec.declined = True
        elif eff is Effect.LOCKED:
            rec.locked = True
        elif eff is Effect.UNLOCKED:
            rec.locked = False

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
        if kind is ActionKind.UNLOCK and not rec.locked and src not in (
                RsaState.STAGED_IN, RsaState.LOCKED_IN):
            continue
        if kind is ActionKind.RELEASE and not rec.nodes:
            continue
        rec.serial += 1
        act = Action(action_id(rec.job_id, rec.cycle, kind, rec.serial), rec.job_id, kind,
                     _args(kind, rec, policy, note, detail, dst))
        if kind in TRACKED:
            if rec.pending is not None:
                raise InvariantViolation(
                    f"job {rec.job_id}: two tracked actions outstanding "
                    f"({rec.pending.id}, {act.id})")
            rec.pending = act
        if kind is ActionKind.TELL_USER:
            rec.message = act.args_as(TellUserArgs).message
        actions.append(act)
    if any(a.kind is ActionKind.RELEASE for a in actions) or Effect.RELEASE_NODES in effects:
        rec.nodes = ""
    if ActionKind.UNLOCK in kinds:
        rec.locked = False

    if dst is not src:
        rec.rsa_state = dst
        rec.since = now
        for name in list(rec.timers):
            if dst not in TIMER_STATES.get(Trigger(name), frozenset()):
                del rec.timers[name]
    # RETRY_DUE belongs to the failure state just entered; re-add after the sweep.
    if (Effect.ARM_RETRY in effects and follow is None
            and rec.rsa_state in TIMER_STATES[Trigger.RETRY_DUE]):
        delay = policy.retry_delay(rec.failures.get(_failed_kind(src), 1))
        rec.timers[Trigger.RETRY_DUE.value] = now + delay

    patch = _diff(before, rec.state_json())
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
        step.extend(fire(rec, follow, now, policy, pool, detail=follow_detail or detail))
    return step


def _failed_kind(src: RsaState) -> str:
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
    kind = _failed_kind(rec.rsa_state)
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
        return Trigger.NODES_BUSY, ""
    rec.nodes = Hostlist.from_nodeset(got).folded  # its actions' nodes: no parse
    rec.cycle += 1
    rec.failures = {k: v for k, v in rec.failures.items() if k == ActionKind.BUILD_FS.value}
    return Trigger.NODES_ALLOCATED, pool.explain(rec.job_id)


def _check_invariant(rec: JobRecord, src: RsaState, dst: RsaState, trigger: Trigger,
                     kinds: tuple[ActionKind, ...]) -> None:
    """Output/modified input on the RAMDISK is never destroyed before it is verified on
    persistent storage, unless an operator discards it explicitly."""
    if src not in HOLDS_USER_DATA or dst in HOLDS_USER_DATA:
        return
    destroying = ActionKind.DESTROY_FS in kinds or dst in (RsaState.RELEASED,
                                                          RsaState.TEARING_DOWN)
    allowed = trigger in (Trigger.VERIFIED, Trigger.DISCARD, Trigger.WRITEBACK_DONE,
                          Trigger.RESET_ERROR)
    if destroying and not allowed:
        raise InvariantViolation(
            f"job {rec.job_id}: {trigger.value} would destroy unverified data in {src.value}")


def _drop_timer(rec: JobRecord, trig: Trigger, now: float) -> Step:
    rec.timers.pop(trig.value, None)
    return Step(events=[Event(now, rec.job_id, "timer.dropped", {
        "timer": trig.value, "set": {"timers": dict(rec.timers)}})])


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


# ---- replay ----------------------------------------------------------------------------

def new_record_event(rec: JobRecord, now: float) -> Event:
    """The event that starts a job's log: everything needed to recreate the record.

    It names the job, its user and spec (without the keys it leaves unset), and only the
    other fields that differ from a new record's defaults (a job's first sight is the
    bulk of rsad's first cycle after a start: thousands of these in one transaction).
    Logs written before carry every field; :func:`apply_event` reads both."""
    ctx: dict[str, Any] = {"job_id": rec.job_id, "user": rec.user,
                           "spec": dict(_spec_jsons(rec.spec)[2])}
    for key, value in rec.state_json().items():
        if value != _NEW_STATE[key]:
            ctx[key] = value
    return Event(now, rec.job_id, "job.tracked", {"set": ctx})


def apply_event(records: dict[str, JobRecord], event: Event) -> None:
    """Fold one logged event into ``records`` (replay)."""
    patch = event.context.get("set")
    if event.name == "job.tracked":
        assert isinstance(patch, Mapping)
        records[event.job_id] = JobRecord.from_json(patch)
        return
    if patch:
        rec = records.get(event.job_id)
        if rec is None:
            raise ValueError(f"event {event.seq} for job {event.job_id} before job.tracked")
        _patch(rec, copy.deepcopy(dict(patch)))
