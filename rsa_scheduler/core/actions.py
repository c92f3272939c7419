"""Actions the core asks for, and the outcomes that come back.

Owns :class:`ActionKind`, :class:`Action` (with its stable id) and :class:`Outcome`. The
core never performs an action; the daemon executes them and reports outcomes. An action's
id is a pure function of (job, cycle, kind, attempt), so a restarted daemon re-issuing an
action it finds outstanding in the log uses the same id, and executors can make the
operation idempotent on it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class ActionKind(enum.StrEnum):
    """What the daemon is asked to do."""

    ALLOCATE = "allocate"  # record: RSA nodes taken from the pool (done in the core)
    BUILD_FS = "build-fs"  # construct the parallel RAMDISK on the job's RSA nodes
    STAGE_IN = "stage-in"  # DATA_IN -> RAMDISK (or the user's PREPROCESS), as the user
    LOCK_IN = "lock-in"  # QOS / priority so Slurm keeps the job on-deck
    UNLOCK = "unlock"  # undo lock-in after a demotion
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


def action_id(job_id: str, cycle: int, kind: ActionKind, serial: int) -> str:
    """The stable id of an action: ``JOB/CYCLE/KIND/SERIAL``.

    ``serial`` counts the actions issued for the job and is part of the logged record, so
    the id is the same when a restarted daemon re-issues the action from the log.
    """
    return f"{job_id}/{cycle}/{kind.value}/{serial}"


@dataclass(frozen=True, slots=True)
class Action:
    """One thing the daemon must do for one job."""

    id: str
    job_id: str
    kind: ActionKind
    args: Mapping[str, Any] = field(default_factory=dict)

    @property
    def tracked(self) -> bool:
        return self.kind in TRACKED

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "job_id": self.job_id, "kind": self.kind.value,
                "args": dict(self.args)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Action:
        return cls(id=str(data["id"]), job_id=str(data["job_id"]),
                   kind=ActionKind(data["kind"]), args=dict(data.get("args") or {}))


class Result(enum.StrEnum):
    """How an action ended."""

    OK = "ok"
    FAILED = "failed"  # may succeed if retried
    REFUSED = "refused"  # will never succeed as asked (e.g. the user cannot read DATA_IN)
    BUSY = "busy"  # RESET only: input mounts still in use, nothing changed


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
