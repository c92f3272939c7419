"""A job's RSA request as a typed value, and its two serialised forms.

Owns :class:`DirectiveSpec` (canonical by construction), ``to_json``/``from_json`` for
tools and ``to_admin_comment``/``from_admin_comment`` for the compact line job_submit.lua
stores in Slurm's admin_comment (job_submit.lua writes the same bytes), and the start
hold's marker on that line (:func:`split_hold`, :func:`with_hold`) and the rerun hold's
(:data:`RERUN_MARK`, :func:`rerun_held`).

Pure: stdlib plus ``core.grammar``, ``core.directive_values`` and ``core.policy``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from rsa_scheduler.core.directive_values import Reset, _argv, normalise_path
from rsa_scheduler.core.grammar import ADMIN_COMMENT_PREFIX, GRAMMAR, MAX_CAPACITY, MAX_NODES
from rsa_scheduler.core.policy import EarlyStart, StageOut, Tier

# The start hold of early-start `wait` (docs/architecture.md, "Holding a job until its
# RAMDISK is ready"): job_submit.lua (or rsad, when the job becomes on-deck) sets the
# job's begin time to the deadline and appends `` hold=<deadline, epoch seconds>`` to
# the admin_comment; rsad removes it when it releases the job. The spec's encoding never
# contains a space, so the marker cannot be confused with a spec field.
HOLD_MARK = " hold="

# The rerun hold (issue 35): rsad holds a requeued job whose earlier run's output is not
# yet verified (begin time far ahead) and marks its admin_comment with this in place of
# the start hold's deadline; it removes it when it releases the job. It marks what rsad
# holds, so that rsad releases only that (never a begin time or hold of anyone else's),
# also after a restart.
RERUN_MARK = f"{HOLD_MARK}rerun"

# The dependency hold (issue 32, core/dependency.py DEP_MARK = HOLD_MARK + DEP_TAG + the
# parents): rsad holds a job that depends on an RSA job until that job's output is
# verified on the PFS. No deadline either.
DEP_TAG = "after:"


@dataclass(frozen=True, slots=True)
class DirectiveSpec:
    """What a job asked of the RSA. ``None`` everywhere means "not given": site default.

    Construction validates, so every instance is canonical (normalised paths, bounds).
    """

    data_in: str | None = None
    data_out: str | None = None
    preprocess: tuple[str, ...] | None = None
    postprocess: tuple[str, ...] | None = None
    nodes: int | None = None
    tier: Tier | None = None
    capacity: int | None = None
    stage_out: StageOut | None = None
    early_start: EarlyStart | None = None
    input_writable: bool | None = None
    reset: Reset | None = None

    def __post_init__(self) -> None:
        for name in ("data_in", "data_out"):
            value = getattr(self, name)
            if value is not None and (
                not isinstance(value, str) or normalise_path(name, value) != value
            ):
                raise ValueError(f"{name} must be a normalised absolute path, got {value!r}")
        for name in ("preprocess", "postprocess"):
            argv = getattr(self, name)
            if argv is None:
                continue
            if not isinstance(argv, tuple) or not argv or not all(isinstance(a, str) for a in argv):
                raise ValueError(f"{name} must be a non-empty tuple of strings, got {argv!r}")
            if _argv(name.upper(), list(argv)) != argv:
                raise ValueError(f"{name} must start with a normalised absolute path")
        for name, lo, hi in (("nodes", 1, MAX_NODES), ("capacity", 1, MAX_CAPACITY)):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi
            ):
                raise ValueError(f"{name} must be an integer in {lo}..{hi}, got {value!r}")
        for name, cls in (
            ("tier", Tier),
            ("stage_out", StageOut),
            ("early_start", EarlyStart),
            ("input_writable", bool),
            ("reset", Reset),
        ):
            value = getattr(self, name)
            if value is not None and not isinstance(value, cls):
                raise ValueError(f"{name} must be a {cls.__name__}, got {value!r}")
        if self.stage_out is not None and self.postprocess is not None:
            raise ValueError("stage_out and postprocess are exclusive")

    @property
    def is_empty(self) -> bool:
        """True when the script has no directive: the job does not use the RSA."""
        return all(getattr(self, f.name) is None for f in fields(self))

    # --- JSON ------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """Plain JSON types, stable keys in a fixed order, enums as their strings."""
        return {
            "data_in": self.data_in,
            "data_out": self.data_out,
            "preprocess": None if self.preprocess is None else list(self.preprocess),
            "postprocess": None if self.postprocess is None else list(self.postprocess),
            "nodes": self.nodes,
            "tier": _str_or_none(self.tier),
            "capacity": self.capacity,
            "stage_out": _str_or_none(self.stage_out),
            "early_start": _str_or_none(self.early_start),
            "input": None if self.input_writable is None else _INPUT[self.input_writable],
            "reset": _str_or_none(self.reset),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DirectiveSpec:
        """Inverse of :meth:`to_json`; missing keys are ``None``, unknown keys an error."""
        unknown = set(data) - set(_JSON_KEYS)
        if unknown:
            raise ValueError(f"unknown directive spec keys: {', '.join(sorted(unknown))}")

        def text(key: str, conv: Callable[[str], Any]) -> Any:
            value = data.get(key)
            if value is not None and not isinstance(value, str):
                raise ValueError(f"{key} must be a string, got {value!r}")
            return None if value is None else conv(value)

        def argv(key: str) -> tuple[str, ...] | None:
            value = data.get(key)
            if value is not None and not isinstance(value, list):
                raise ValueError(f"{key} must be a list of strings, got {value!r}")
            return None if value is None else tuple(value)

        return cls(
            data_in=data.get("data_in"),
            data_out=data.get("data_out"),
            preprocess=argv("preprocess"),
            postprocess=argv("postprocess"),
            nodes=data.get("nodes"),
            tier=text("tier", Tier),
            capacity=data.get("capacity"),
            stage_out=text("stage_out", StageOut),
            early_start=text("early_start", EarlyStart),
            input_writable=text("input", _input_from_str),
            reset=text("reset", Reset.from_str),
        )

    # --- admin_comment -----------------------------------------------------------------

    def for_array_task(self, array_job: str, task: str) -> DirectiveSpec:
        """The spec of one array task: ``%A`` in DATA_IN/DATA_OUT becomes the array's job
        id and ``%a`` the task id, as in sbatch's ``--output`` (nothing else is replaced;
        a job that is not an array task uses its paths as written)."""
        if not (array_job.isdigit() and task.isdigit()):
            raise ValueError(f"bad array task {array_job!r}_{task!r}")

        def fill(path: str | None) -> str | None:
            if path is None or "%" not in path:
                return path
            return path.replace("%A", array_job).replace("%a", task)
        data_in, data_out = fill(self.data_in), fill(self.data_out)
        if (data_in, data_out) == (self.data_in, self.data_out):
            return self
        return replace(self, data_in=data_in, data_out=data_out)

    def to_admin_comment(self) -> str:
        """Compact canonical one-line ASCII form, e.g. ``rsa1:i=/gpfs/in;o=/gpfs/out;n=2``.

        Fields in fixed order, ``;``-separated ``key=value``, absent fields omitted; values
        are UTF-8 percent-encoded keeping only ``A-Za-z0-9-._~/``; an argv is its encoded
        words joined by ``,``.
        """
        js = self.to_json()
        out = []
        for key, short in _ADMIN_KEYS:
            value = js[key]
            if value is None:
                continue
            if isinstance(value, list):
                encoded = ",".join(_pct_encode(v) for v in value)
            else:
                encoded = _pct_encode(str(value))
            out.append(f"{short}={encoded}")
        return ADMIN_COMMENT_PREFIX + ";".join(out)

    @classmethod
    def from_admin_comment(cls, text: str) -> DirectiveSpec:
        """Inverse of :meth:`to_admin_comment`; anything not canonical is a ValueError."""
        if not text.startswith(ADMIN_COMMENT_PREFIX):
            raise ValueError(f"not an RSA admin comment (no {ADMIN_COMMENT_PREFIX!r} prefix)")
        body = text[len(ADMIN_COMMENT_PREFIX) :]
        by_short = {short: key for key, short in _ADMIN_KEYS}
        data: dict[str, Any] = {}
        for item in body.split(";") if body else []:
            short, sep, value = item.partition("=")
            key = by_short.get(short)
            if not sep or key is None or key in data:
                raise ValueError(f"bad RSA admin comment field {item!r}")
            if key in ("preprocess", "postprocess"):
                data[key] = [_pct_decode(v) for v in value.split(",")]
            elif key in ("nodes", "capacity"):
                if not re.fullmatch(r"[1-9][0-9]{0,15}", value):
                    raise ValueError(f"bad RSA admin comment number {item!r}")
                data[key] = int(value)
            else:
                data[key] = _pct_decode(value)
        spec = cls.from_json(data)
        if spec.to_admin_comment() != text:
            raise ValueError(f"RSA admin comment is not in canonical form: {text!r}")
        return spec


def split_hold(comment: str) -> tuple[str, int | None]:
    """An admin_comment as (the spec's encoding, the hold deadline or None). The rerun
    hold's marker has no deadline (:func:`rerun_held`), nor has the dependency hold's
    (:data:`DEP_TAG`). Any other marker that is not a whole number of seconds is no hold
    (and is left in the spec part, which then fails to parse loudly)."""
    spec, sep, deadline = comment.partition(HOLD_MARK)
    if sep and (deadline == RERUN_MARK[len(HOLD_MARK):] or deadline.startswith(DEP_TAG)):
        return spec, None
    if not sep or not re.fullmatch(r"[1-9][0-9]{0,11}", deadline):
        return comment, None
    return spec, int(deadline)


def rerun_held(comment: str) -> bool:
    """Whether an admin_comment carries the rerun hold's marker (:data:`RERUN_MARK`)."""
    return comment.endswith(RERUN_MARK)


def with_hold(comment: str, deadline: int | None) -> str:
    """The admin_comment ``comment`` with its hold marker set to ``deadline`` (None:
    removed)."""
    spec, _ = split_hold(comment)
    return spec if deadline is None else f"{spec}{HOLD_MARK}{int(deadline)}"


# to_json keys in order, with their admin_comment abbreviations
_ADMIN_KEYS = tuple((d.json_key, d.admin_key) for d in GRAMMAR)
_JSON_KEYS = tuple(key for key, _ in _ADMIN_KEYS)
_INPUT = {False: "ro", True: "rw"}
_PCT_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~/")


def _str_or_none(value: object) -> str | None:
    return None if value is None else str(value)


def _input_from_str(text: str) -> bool:
    if text not in ("ro", "rw"):
        raise ValueError(f"input must be 'ro' or 'rw', got {text!r}")
    return text == "rw"


def _pct_encode(text: str) -> str:
    return "".join(chr(b) if b in _PCT_SAFE else f"%{b:02X}" for b in text.encode())


def _pct_decode(text: str) -> str:
    out = bytearray()
    i = 0
    while i < len(text):
        if text[i] == "%" and re.fullmatch(r"[0-9A-F]{2}", text[i + 1 : i + 3]):
            out.append(int(text[i + 1 : i + 3], 16))
            i += 3
        elif ord(text[i]) < 128 and ord(text[i]) in _PCT_SAFE:
            out.append(ord(text[i]))
            i += 1
        else:
            raise ValueError(f"bad character {text[i]!r} in RSA admin comment")
    return out.decode("utf-8")  # strict: UnicodeDecodeError is a ValueError

