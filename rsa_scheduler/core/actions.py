"""Actions the core asks for, and the outcomes that come back.

Owns :class:`ActionKind`, :class:`Action` (with its stable id), which payload class
each kind carries (:data:`PAYLOADS`, the classes are in ``core.payloads``) and
:class:`Outcome`. The core never performs an action; the daemon executes them and reports
outcomes. An action's id is a pure function of (job, cycle, kind, attempt), so a
restarted daemon re-issuing an action it finds outstanding in the log uses the same id,
and executors can make the operation idempotent on it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from rsa_scheduler.core.payloads import (
    AlertArgs,
    AllocateArgs,
    BuildFsArgs,
    CancelArgs,
    DestroyFsArgs,
    LockInArgs,
    MountInputArgs,
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
)


class ActionKind(enum.StrEnum):
    """What the daemon is asked to do."""

    ALLOCATE = "allocate"  # record: RSA nodes taken from the pool (done in the core)
    BUILD_FS = "build-fs"  # construct the parallel RAMDISK on the job's RSA nodes
    STAGE_IN = "stage-in"  # DATA_IN -> RAMDISK (or the user's PREPROCESS), as the user
    LOCK_IN = "lock-in"  # QOS / priority so Slurm keeps the job on-deck
    UNLOCK = "unlock"  # restore the job's own QOS / priority: at its start and every other exit
    MOUNT_INPUT = "mount-input"  # Prolog: RAMDISK over DATA_IN (read-only, or union overlay)
    MOUNT_OUTPUT = "mount-output"  # Prolog: RAMDISK over DATA_OUT (job without input)
    WRITE_BACK = "write-back"  # writable input: RAMDISK -> DATA_IN, verified
    RESET = "reset"  # §3.2: release input mounts, recreate empty, mount over DATA_OUT
    STAGE_OUT = "stage-out"  # RAMDISK -> DATA_OUT (rsync/tar) or POSTPROCESS, as the user
    VERIFY = "verify"  # compare DATA_OUT with the RAMDISK manifest
    DESTROY_FS = "destroy-fs"  # tear the RAMDISK down
    RELEASE = "release"  # record: RSA nodes back to the pool (done in the core)
    CANCEL = "cancel"  # kill the process tree of an outstanding action
    TELL_USER = "tell-user"  # a message for the job's owner (job comment, rsa jobs)
    ALERT = "alert"  # something an operator must look at


#: bulk work (builds, copies, verification): run in its own lane of workers, so a job's
#: mount, reset, lock-in, teardown or message never waits behind other jobs' stage-outs
#: (a mount that waits longer than the Prolog does sends the job to the PFS)
BULK: frozenset[ActionKind] = frozenset(
    {
        ActionKind.BUILD_FS,
        ActionKind.STAGE_IN,
        ActionKind.WRITE_BACK,
        ActionKind.STAGE_OUT,
        ActionKind.VERIFY,
    }
)

#: kinds whose completion the core waits for (an Outcome must come back)
TRACKED: frozenset[ActionKind] = frozenset(
    {
        ActionKind.BUILD_FS,
        ActionKind.STAGE_IN,
        ActionKind.LOCK_IN,
        ActionKind.MOUNT_INPUT,
        ActionKind.MOUNT_OUTPUT,
        ActionKind.WRITE_BACK,
        ActionKind.RESET,
        ActionKind.STAGE_OUT,
        ActionKind.VERIFY,
        ActionKind.DESTROY_FS,
    }
)


#: kinds tracked beside the job's one outstanding action (``JobRecord.unlock``): the
#: restore of a job's own QOS or priority after a lock-in may run while the job's mount
#: or teardown does; its outcome comes back, a failure is retried (core.machine)
RESTORES: frozenset[ActionKind] = frozenset({ActionKind.UNLOCK})


def action_id(job_id: str, cycle: int, kind: ActionKind, serial: int) -> str:
    """The stable id of an action: ``JOB/CYCLE/KIND/SERIAL``.

    ``serial`` counts the actions issued for the job and is part of the logged record, so
    the id is the same when a restarted daemon re-issues the action from the log.
    """
    return f"{job_id}/{cycle}/{kind.value}/{serial}"


#: the payload class of each kind: an action of that kind carries exactly this class
PAYLOADS: Mapping[ActionKind, type[Payload]] = {
    ActionKind.ALLOCATE: AllocateArgs,
    ActionKind.BUILD_FS: BuildFsArgs,
    ActionKind.STAGE_IN: StageInArgs,
    ActionKind.LOCK_IN: LockInArgs,
    ActionKind.UNLOCK: UnlockArgs,
    ActionKind.MOUNT_INPUT: MountInputArgs,
    ActionKind.MOUNT_OUTPUT: MountOutputArgs,
    ActionKind.WRITE_BACK: WriteBackArgs,
    ActionKind.RESET: ResetArgs,
    ActionKind.STAGE_OUT: StageOutArgs,
    ActionKind.VERIFY: VerifyArgs,
    ActionKind.DESTROY_FS: DestroyFsArgs,
    ActionKind.RELEASE: ReleaseArgs,
    ActionKind.CANCEL: CancelArgs,
    ActionKind.TELL_USER: TellUserArgs,
    ActionKind.ALERT: AlertArgs,
}

P = TypeVar("P", bound=Payload)


@dataclass(frozen=True, slots=True)
class Action:
    """One thing the daemon must do for one job; ``args`` is the kind's payload class
    (:data:`PAYLOADS`), checked at construction."""

    id: str
    job_id: str
    kind: ActionKind
    args: Payload

    def __post_init__(self) -> None:
        if not isinstance(self.kind, ActionKind):
            raise TypeError(f"Action.kind must be an ActionKind, got {self.kind!r}")
        want = PAYLOADS[self.kind]
        if type(self.args) is not want:
            raise TypeError(f"a {self.kind.value} action carries {want.__name__}, "
                            f"got {self.args!r}")

    @property
    def tracked(self) -> bool:
        return self.kind in TRACKED

    def args_as(self, cls: type[P]) -> P:
        """The payload, typed: ``action.args_as(StageInArgs).data_in``. Raises TypeError
        when the action is of another kind (an executor registered for the wrong one)."""
        args = self.args
        if not isinstance(args, cls):
            raise TypeError(f"action {self.id} carries {type(args).__name__}, "
                            f"not {cls.__name__}")
        return args

    def to_json(self) -> dict[str, Any]:
        """The logged form (the ``pending`` of a record in events and snapshots): the
        payload's JSON as ``args``, the keys and values earlier versions wrote."""
        return {"id": self.id, "job_id": self.job_id, "kind": self.kind.value,
                "args": self.args.to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Action:
        """Inverse of :meth:`to_json`; also reads what earlier versions wrote
        (``core.payloads``). Raises ValueError naming the action on a bad record."""
        ident = str(data["id"])
        try:
            kind = ActionKind(data["kind"])
            args = PAYLOADS[kind].from_json(data.get("args") or {})
        except (TypeError, ValueError) as e:
            raise ValueError(f"action {ident} in the log: {e}") from e
        return cls(id=ident, job_id=str(data["job_id"]), kind=kind, args=args)


class Result(enum.StrEnum):
    """How an action ended."""

    OK = "ok"
    FAILED = "failed"  # may succeed if retried
    REFUSED = "refused"  # will never succeed as asked (e.g. the user cannot read DATA_IN)
    # RESET: input mounts still in use (or a node silent), nothing changed; UNLOCK (the
    # restore of a lock-in): Slurm changes no running job's QOS, owed until the job's
    # next change of job-state (core.machine.unlock_outcome)
    BUSY = "busy"


@dataclass(frozen=True, slots=True)
class Outcome:
    """The result of a tracked action, reported by the daemon."""

    action_id: str
    result: Result
    message: str = ""
    detail: Mapping[str, Any] = field(default_factory=dict)

    @property
    def job_id(self) -> str:
        return self.action_id.rsplit("/", 3)[0]

    @property
    def kind(self) -> ActionKind:
        return ActionKind(self.action_id.rsplit("/", 3)[2])
