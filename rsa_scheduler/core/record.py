"""One job's record: what the RSA knows about it, its JSON form and its replay.

Owns :class:`JobRecord` (everything the RSA knows about one job), its JSON (projections,
snapshots, the ``set`` patches of events), :func:`new_record_event` (the event that starts
a job's log) and :func:`apply_event` (fold one logged event into the records: replay).
Only :mod:`rsa_scheduler.core.machine` (and its :mod:`rsa_scheduler.core.effects`) change a
record's fields; pure, like the rest of the core.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rsa_scheduler.core.actions import Action
from rsa_scheduler.core.directives import DirectiveSpec
from rsa_scheduler.core.events import Event
from rsa_scheduler.core.policy import EarlyStart
from rsa_scheduler.core.states import JobState, RsaState, holds_user_data


@dataclass(slots=True)
class JobRecord:
    """Everything the RSA knows about one job. Mutated only by the machine."""

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
    locked: bool = False  # a lock-in was issued and its restore is not yet done
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
    #: writable input: the write-back outstanding (or the last one) began while the job
    #: ran, so the job may have changed its input after the copy passed that file
    writeback_live: bool = False
    #: how the job ended by Slurm's own record (squeue's last state, as sacct has it:
    #: ``COMPLETED``, ``CANCELLED``, ``TIMEOUT``, ...); "" until a poll showed it
    end_state: str = ""
    #: the restore of the job's own QOS / priority outstanding (an UNLOCK action, tracked
    #: beside ``pending``); ``locked`` stays True until it is done. ``unlock_failures``:
    #: its failures so far (the UNLOCK_DUE timer tries it again)
    unlock: Action | None = None
    unlock_failures: int = 0
    #: Slurm's identity of the job behind the id: its submit time as squeue prints it
    #: (a requeue sets a new one) and its restart count; "" when not known (a log from
    #: before these fields). A new job given the id differs (core.scheduler.another_job)
    submitted: str = ""
    restarts: int = 0
    #: Slurm gave this job's id to another job (core.scheduler.another_job): this job is
    #: gone for good, whatever the queue shows under its id from now on (that job's
    #: requeues may count more restarts than this one's)
    superseded: bool = False
    #: the job's Slurm account (squeue's): limits per account count it (core.limits)
    account: str = ""
    #: a quarantined RAMDISK rescued (quarantine.rescue_after): where its content goes on
    #: the PFS instead of DATA_OUT; "" when none is under way. The RAMDISK's fact: whose
    #: run it tells of, :meth:`rescued` says
    rescue_to: str = ""
    #: a later run of the job started while its RAMDISK still held an earlier run's data
    #: (quarantined, staging out, being rescued: HOLDS_USER_DATA): what becomes of that
    #: RAMDISK (its rescue) is the earlier run's, never this run's. The next start on no
    #: such RAMDISK clears it (with ``rescue_to``)
    rerun_started: bool = False

    # ---- derived --------------------------------------------------------------------
    @property
    def early_start(self) -> EarlyStart | None:
        return self.spec.early_start

    def holds_user_data(self) -> bool:
        """The RAMDISK may hold data that exists nowhere else: output, or writable input
        the job may have changed (HOLDS_WRITABLE_INPUT, for ``#RSA_INPUT=rw`` only)."""
        return holds_user_data(self.rsa_state, self.writable_input())

    def rescued(self) -> bool:
        """The latest run's output was (or is being) rescued to ``rescue_to`` instead of
        DATA_OUT: no later run has started since that run's RAMDISK was quarantined (a
        later run's output is its own: issue 33)."""
        return bool(self.rescue_to) and not self.rerun_started

    def writable_input(self) -> bool:
        return bool(self.spec.input_writable) and self.spec.data_in is not None

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
            "writeback_live": self.writeback_live,
            "end_state": self.end_state,
            "unlock": self.unlock.to_json() if self.unlock is not None else None,
            "unlock_failures": self.unlock_failures,
            "submitted": self.submitted,
            "restarts": self.restarts,
            "superseded": self.superseded,
            "account": self.account,
            "rescue_to": self.rescue_to,
            "rerun_started": self.rerun_started,
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
        elif key in ("pending", "unlock"):
            setattr(rec, key, Action.from_json(value) if value is not None else None)
        elif key == "spec":
            rec.spec = DirectiveSpec.from_json(value)
        elif key in ("failures", "timers"):
            setattr(rec, key, dict(value))
        elif key in JobRecord.__slots__:
            setattr(rec, key, value)
        else:
            raise ValueError(f"unknown JobRecord field {key!r} in event")


def state_diff(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON fields of a record that changed: an event's ``set`` patch."""
    return {k: v for k, v in after.items() if before.get(k) != v}


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
    if event.name == "job.untracked":  # its id names another job now
        records.pop(event.job_id, None)
        return
    if patch:
        rec = records.get(event.job_id)
        if rec is None:
            raise ValueError(f"event {event.seq} for job {event.job_id} before job.tracked")
        _patch(rec, copy.deepcopy(dict(patch)))
