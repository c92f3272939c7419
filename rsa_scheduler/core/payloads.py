"""What each kind of action carries: typed, immutable payloads, and their logged JSON.

Owns one frozen dataclass per :class:`~rsa_scheduler.core.actions.ActionKind` (the
core builds them in ``core.machine``; executors, the simulators and the daemon's
dispatch read their fields) and their JSON form, which is the ``args`` of an action in
the event log and in snapshots. Nodes are a :class:`~rsa_scheduler.core.hostlist.Hostlist`,
paths ``PurePosixPath``, choices enums: nothing downstream parses a string again.
Construction checks every field's type, so a wrong payload fails where it is made.

The JSON keeps the keys and values earlier versions wrote (``tests/data/actions/``), and
:meth:`Payload.from_json` reads those too: ``atomic`` missing (before 2026-11-22) means
false; a build's tier ``auto`` (before 2026-11-26) means the nodes' own, as now.

Pure: stdlib, ``core.hostlist``, ``core.policy`` and ``core.states``; never imports
``core.actions`` (which maps kinds to these classes). The one module of the core that
imports ``pathlib`` (an exception in the import-linter contract, pyproject.toml): for
``PurePosixPath`` only, which never touches a filesystem; a concrete ``Path`` stays out.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, ClassVar, Self, TypeVar

from rsa_scheduler.core.hostlist import Hostlist
from rsa_scheduler.core.policy import NODE_TIERS, StageOut, Tier
from rsa_scheduler.core.states import RsaState

E = TypeVar("E", bound=enum.Enum)


class MountMode(enum.StrEnum):
    """How the RAMDISK is mounted over DATA_IN (``node.plan`` instructions)."""

    RO = "ro"  # read-only bind
    RW = "rw"  # writable input: read-write bind, written back before tear-down
    UNION = "union"  # early start union: read-only overlay over the PFS directory


def as_path(text: str | None) -> PurePosixPath | None:
    """A directive spec's path (normalised and absolute by construction), typed; one
    object per distinct text (a job's actions, an array's tasks, share it)."""
    if text is None:
        return None
    path = _PATHS.get(text)
    if path is None:
        if len(_PATHS) >= 65536:
            _PATHS.clear()
        path = _PATHS[text] = PurePosixPath(text)
    return path


_PATHS: dict[str, PurePosixPath] = {}


# ---- checks at construction -------------------------------------------------------------

def _need(owner: object, name: str, value: object, kind: type | tuple[type, ...],
          what: str) -> None:
    if not isinstance(value, kind):
        raise TypeError(f"{type(owner).__name__}.{name} must be {what}, got {value!r}")


def _path(owner: object, name: str, value: object, optional: bool) -> None:
    if value is None and optional:
        return
    if not isinstance(value, PurePosixPath):
        raise TypeError(f"{type(owner).__name__}.{name} must be an absolute PurePosixPath"
                        f"{' or None' if optional else ''}, got {value!r}")
    if not value.is_absolute():
        raise ValueError(f"{type(owner).__name__}.{name} must be absolute, got {value!r}")


def _argv(owner: object, name: str, value: object) -> None:
    if value is None:
        return
    if not isinstance(value, tuple) or not value or not all(
            isinstance(a, str) for a in value):
        raise TypeError(f"{type(owner).__name__}.{name} must be a non-empty tuple of str "
                        f"or None, got {value!r}")


# ---- reading the logged JSON ------------------------------------------------------------

class _Reader:
    """Typed reads of one payload's JSON, naming the class and key in every error."""

    def __init__(self, cls: type[Payload], data: Mapping[str, Any]) -> None:
        if not isinstance(data, Mapping):
            raise ValueError(f"{cls.__name__}: args must be an object, got {data!r}")
        unknown = set(data) - set(cls.KEYS)
        if unknown:
            raise ValueError(f"{cls.__name__}: unknown keys {', '.join(sorted(unknown))}")
        self.cls, self.data = cls, data

    def _get(self, key: str, conv: Callable[[Any], Any], what: str, *,
             optional: bool = False, default: Any = None) -> Any:
        if key not in self.data:
            if optional:
                return default
            raise ValueError(f"{self.cls.__name__}: {key!r} missing")
        value = self.data[key]
        if value is None and optional:
            return None
        try:
            return conv(value)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{self.cls.__name__}: {key} must be {what}, "
                             f"got {value!r}") from e

    def text(self, key: str) -> str:
        return str(self._get(key, _str, "a string"))

    def nodes(self, key: str = "nodes") -> Hostlist:
        got = self._get(key, lambda v: Hostlist.parse(_str(v)), "a hostlist")
        assert isinstance(got, Hostlist)
        return got

    def path(self, key: str, *, optional: bool) -> PurePosixPath | None:
        got = self._get(key, lambda v: PurePosixPath(_str(v)), "a path",
                        optional=optional)
        assert got is None or isinstance(got, PurePosixPath)
        return got

    def flag(self, key: str, default: bool) -> bool:
        return bool(self._get(key, _bool, "true or false", optional=True, default=default))

    def choice(self, key: str, enum_cls: type[E]) -> E:
        got = self._get(key, enum_cls, f"one of {', '.join(str(m.value) for m in enum_cls)}")
        assert isinstance(got, enum_cls)
        return got

    def argv(self, key: str) -> tuple[str, ...] | None:
        got = self._get(key, _strings, "a list of strings", optional=True)
        assert got is None or isinstance(got, tuple)
        return got


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("not a string")
    return value


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError("not a boolean")
    return value


def _strings(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        raise TypeError("not a list of strings")
    return tuple(value)


def _opt_str(value: PurePosixPath | None) -> str | None:
    return None if value is None else str(value)


def _opt_list(value: tuple[str, ...] | None) -> list[str] | None:
    return None if value is None else list(value)


# ---- the payloads -----------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Payload:
    """The arguments of one action. Subclasses: one per action kind."""

    #: the keys of the JSON form, in the order they are written
    KEYS: ClassVar[tuple[str, ...]] = ()

    def to_json(self) -> dict[str, Any]:
        raise NotImplementedError

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class OnNodes(Payload):
    """An action on the job's RSA nodes, for the job's user."""

    user: str
    nodes: Hostlist

    KEYS: ClassVar[tuple[str, ...]] = ("user", "nodes")

    def __post_init__(self) -> None:
        # every action of every transition passes here: the common case in one test
        if self.user.__class__ is not str or self.nodes.__class__ is not Hostlist:
            _need(self, "user", self.user, str, "a user name (str)")
            _need(self, "nodes", self.nodes, Hostlist, "a Hostlist")

    def to_json(self) -> dict[str, Any]:
        return {"user": self.user, "nodes": self.nodes.folded}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        r = _Reader(cls, data)
        return cls(user=r.text("user"), nodes=r.nodes())


@dataclass(frozen=True, slots=True)
class AllocateArgs(OnNodes):
    """ALLOCATE (done in the core; a record for the log and the simulators)."""


@dataclass(frozen=True, slots=True)
class ReleaseArgs(OnNodes):
    """RELEASE (done in the core): these nodes go back to the pool."""


@dataclass(frozen=True, slots=True)
class DestroyFsArgs(OnNodes):
    """DESTROY_FS: tear the job's RAMDISK down on these nodes."""


@dataclass(frozen=True, slots=True)
class LockInArgs(OnNodes):
    """LOCK_IN: keep the job on-deck in Slurm (the executor needs only the job id)."""


@dataclass(frozen=True, slots=True)
class UnlockArgs(OnNodes):
    """UNLOCK: undo the lock-in."""


@dataclass(frozen=True, slots=True)
class BuildFsArgs(OnNodes):
    """BUILD_FS. ``tier`` None: the nodes' own (tier ``auto``: the allocator chose)."""

    tier: Tier | None

    KEYS: ClassVar[tuple[str, ...]] = ("user", "nodes", "tier")

    def __post_init__(self) -> None:
        OnNodes.__post_init__(self)
        if self.tier is not None:
            _need(self, "tier", self.tier, Tier, "a node Tier or None")
            if self.tier not in NODE_TIERS:
                raise ValueError(f"BuildFsArgs.tier must be a node tier "
                                 f"({', '.join(sorted(NODE_TIERS))}) or None, "
                                 f"got {self.tier.value!r}")

    def to_json(self) -> dict[str, Any]:
        return {"user": self.user, "nodes": self.nodes.folded,
                "tier": None if self.tier is None else self.tier._value_}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        r = _Reader(cls, data)
        raw = data.get("tier")
        tier = r.choice("tier", Tier) if raw is not None else None
        # written before 2026-11-26 for tier `auto`: the nodes' own tier, as now
        return cls(user=r.text("user"), nodes=r.nodes(),
                   tier=tier if tier in NODE_TIERS else None)


@dataclass(frozen=True, slots=True)
class StageInArgs(OnNodes):
    """STAGE_IN: copy ``data_in`` into the RAMDISK, or run ``preprocess`` instead.

    ``atomic``: files appear in the RAMDISK whole (the union policy: the job may read
    the RAMDISK while it fills). ``writable``: the input is ``#RSA_INPUT=rw``: what is
    staged in is recorded, the base its write-backs compare with (staging.writeback)."""

    data_in: PurePosixPath | None
    atomic: bool
    preprocess: tuple[str, ...] | None
    writable: bool = False

    KEYS: ClassVar[tuple[str, ...]] = ("user", "nodes", "data_in", "atomic", "preprocess",
                                       "writable")

    def __post_init__(self) -> None:
        OnNodes.__post_init__(self)
        _path(self, "data_in", self.data_in, optional=True)
        _need(self, "atomic", self.atomic, bool, "a bool")
        _need(self, "writable", self.writable, bool, "a bool")
        _argv(self, "preprocess", self.preprocess)
        if self.data_in is None and self.preprocess is None:
            raise ValueError("StageInArgs needs data_in or preprocess")

    def to_json(self) -> dict[str, Any]:
        base = {"user": self.user, "nodes": self.nodes.folded,
                "data_in": _opt_str(self.data_in), "atomic": self.atomic,
                "preprocess": _opt_list(self.preprocess)}
        # written only when set: a read-only input's stage-in logs as it always did
        return {**base, "writable": True} if self.writable else base

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        r = _Reader(cls, data)
        return cls(user=r.text("user"), nodes=r.nodes(),
                   data_in=r.path("data_in", optional=True),
                   atomic=r.flag("atomic", False),  # not written before 2026-11-22
                   preprocess=r.argv("preprocess"),
                   writable=r.flag("writable", False))


@dataclass(frozen=True, slots=True)
class MountInputArgs(OnNodes):
    """MOUNT_INPUT: the RAMDISK over ``data_in`` on the job's compute nodes."""

    data_in: PurePosixPath | None
    mode: MountMode

    KEYS: ClassVar[tuple[str, ...]] = ("user", "nodes", "data_in", "mode")

    def __post_init__(self) -> None:
        OnNodes.__post_init__(self)
        _path(self, "data_in", self.data_in, optional=True)
        _need(self, "mode", self.mode, MountMode, "a MountMode")

    def to_json(self) -> dict[str, Any]:
        return {"user": self.user, "nodes": self.nodes.folded,
                "data_in": _opt_str(self.data_in), "mode": self.mode._value_}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        r = _Reader(cls, data)
        return cls(user=r.text("user"), nodes=r.nodes(),
                   data_in=r.path("data_in", optional=True),
                   mode=r.choice("mode", MountMode))


@dataclass(frozen=True, slots=True)
class OutputMountArgs(OnNodes):
    """The RAMDISK goes over ``data_out`` on the job's compute nodes."""

    data_in: PurePosixPath | None
    data_out: PurePosixPath | None

    KEYS: ClassVar[tuple[str, ...]] = ("user", "nodes", "data_in", "data_out")

    def __post_init__(self) -> None:
        OnNodes.__post_init__(self)
        _path(self, "data_in", self.data_in, optional=True)
        _path(self, "data_out", self.data_out, optional=True)

    def to_json(self) -> dict[str, Any]:
        return {"user": self.user, "nodes": self.nodes.folded,
                "data_in": _opt_str(self.data_in), "data_out": _opt_str(self.data_out)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        r = _Reader(cls, data)
        return cls(user=r.text("user"), nodes=r.nodes(),
                   data_in=r.path("data_in", optional=True),
                   data_out=r.path("data_out", optional=True))


@dataclass(frozen=True, slots=True)
class MountOutputArgs(OutputMountArgs):
    """MOUNT_OUTPUT: a job without input gets the RAMDISK over DATA_OUT at its start."""


@dataclass(frozen=True, slots=True)
class ResetArgs(OutputMountArgs):
    """RESET (§3.2): release the input mounts, recreate empty, mount over DATA_OUT.
    ``write_back`` (writable input): once the input mounts are released (no compute node
    can write to the RAMDISK any more), write the input back to ``data_in`` again, then
    recreate: what the job wrote after the write-back before the reset is not lost."""

    write_back: bool = False

    KEYS: ClassVar[tuple[str, ...]] = ("user", "nodes", "data_in", "data_out", "write_back")

    def __post_init__(self) -> None:
        OutputMountArgs.__post_init__(self)
        _need(self, "write_back", self.write_back, bool, "a bool")
        if self.write_back and self.data_in is None:
            raise ValueError("ResetArgs: write_back needs data_in")

    def to_json(self) -> dict[str, Any]:
        # written only when set: a reset of read-only input logs as it always did
        base = OutputMountArgs.to_json(self)
        return {**base, "write_back": True} if self.write_back else base

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        r = _Reader(cls, data)
        return cls(user=r.text("user"), nodes=r.nodes(),
                   data_in=r.path("data_in", optional=True),
                   data_out=r.path("data_out", optional=True),
                   write_back=r.flag("write_back", False))


@dataclass(frozen=True, slots=True)
class WriteBackArgs(OnNodes):
    """WRITE_BACK: writable input, RAMDISK -> ``data_in``, verified."""

    data_in: PurePosixPath

    KEYS: ClassVar[tuple[str, ...]] = ("user", "nodes", "data_in")

    def __post_init__(self) -> None:
        OnNodes.__post_init__(self)
        _path(self, "data_in", self.data_in, optional=False)

    def to_json(self) -> dict[str, Any]:
        return {"user": self.user, "nodes": self.nodes.folded, "data_in": str(self.data_in)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        r = _Reader(cls, data)
        path = r.path("data_in", optional=False)
        assert path is not None
        return cls(user=r.text("user"), nodes=r.nodes(), data_in=path)


@dataclass(frozen=True, slots=True)
class OutputArgs(OnNodes):
    """The RAMDISK's output to ``data_out`` by ``method``, or the user's ``postprocess``."""

    data_out: PurePosixPath | None
    method: StageOut
    postprocess: tuple[str, ...] | None
    #: the rescue of a quarantined RAMDISK (issue 33): ``data_out`` is
    #: ``quarantine.rescue_dir/<user>/<job>.<cycle>-<submitted>``, whose parent the user
    #: makes private
    rescue: bool = False

    KEYS: ClassVar[tuple[str, ...]] = ("user", "nodes", "data_out", "method", "postprocess",
                                       "rescue")

    def __post_init__(self) -> None:
        OnNodes.__post_init__(self)
        _path(self, "data_out", self.data_out, optional=True)
        _need(self, "method", self.method, StageOut, "a StageOut")
        _argv(self, "postprocess", self.postprocess)
        if self.data_out is None and self.postprocess is None:
            raise ValueError(f"{type(self).__name__} needs data_out or postprocess")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "user": self.user, "nodes": self.nodes.folded,
            "data_out": _opt_str(self.data_out), "method": self.method._value_,
            "postprocess": _opt_list(self.postprocess)}
        if self.rescue:  # only then: the actions of every other stage-out read as before
            out["rescue"] = True
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        r = _Reader(cls, data)
        return cls(user=r.text("user"), nodes=r.nodes(),
                   data_out=r.path("data_out", optional=True),
                   method=r.choice("method", StageOut), postprocess=r.argv("postprocess"),
                   rescue=r.flag("rescue", False))


@dataclass(frozen=True, slots=True)
class StageOutArgs(OutputArgs):
    """STAGE_OUT: RAMDISK -> ``data_out`` (rsync/tar), or POSTPROCESS, as the user."""


@dataclass(frozen=True, slots=True)
class VerifyArgs(OutputArgs):
    """VERIFY: compare ``data_out`` with the RAMDISK (a POSTPROCESS's exit status counts)."""


@dataclass(frozen=True, slots=True)
class MessageArgs(Payload):
    """A message, and the rsa-state the transition that says it leads to."""

    message: str
    rsa_state: RsaState

    KEYS: ClassVar[tuple[str, ...]] = ("message", "rsa_state")

    def __post_init__(self) -> None:
        _need(self, "message", self.message, str, "a str")
        _need(self, "rsa_state", self.rsa_state, RsaState, "an RsaState")

    def to_json(self) -> dict[str, Any]:
        return {"message": self.message, "rsa_state": self.rsa_state._value_}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        r = _Reader(cls, data)
        return cls(message=r.text("message"), rsa_state=r.choice("rsa_state", RsaState))


@dataclass(frozen=True, slots=True)
class TellUserArgs(MessageArgs):
    """TELL_USER: for the job's owner (job comment, ``rsa jobs``)."""


@dataclass(frozen=True, slots=True)
class AlertArgs(MessageArgs):
    """ALERT: for an operator."""


@dataclass(frozen=True, slots=True)
class CancelArgs(Payload):
    """CANCEL: kill the process tree of the action ``target`` (its id)."""

    target: str

    KEYS: ClassVar[tuple[str, ...]] = ("target",)

    def __post_init__(self) -> None:
        _need(self, "target", self.target, str, "an action id (str)")
        if self.target.count("/") != 3:
            raise ValueError(f"CancelArgs.target must be an action id JOB/CYCLE/KIND/SERIAL, "
                             f"got {self.target!r}")

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        return cls(target=_Reader(cls, data).text("target"))
