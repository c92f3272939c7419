"""The ``#RSA_*`` directive grammar: batch script text in, a typed :class:`DirectiveSpec` out.

Owns which lines are directives, how values are split and validated, every user-facing
directive error message, and the two serialised forms of a spec (``to_json`` for tools and
``to_admin_comment`` for the compact line job_submit.lua stores in Slurm's admin_comment).
The same rules are written down as shared vectors in ``tests/data/directives/``.

Pure: stdlib string logic plus ``core.policy`` and ``core.units``. It must not import
os, pathlib, io, logging, time or anything that reads files or the clock (import-linter).

Which lines are read mirrors sbatch (Slurm 22.05, ``src/sbatch/opt.c:_opt_batch_script``
and ``next_line``; ``src/sbatch/sbatch.c:_get_script_buffer``):

* the script is split on ``\\n`` only; a directive must start at column 0
  (``xstrncmp(line, "#SBATCH", 7)``), so an indented ``#RSA_`` is a plain comment;
* any other line whose first character that is not C ``isspace`` (`` \\t\\n\\v\\f\\r``,
  ASCII only) is ``#`` is a comment, a line of only such whitespace is blank, and the
  first line that is neither stops the scan -- later ``#RSA_`` lines are ignored;
* sbatch refuses a whole script containing ``\\r\\n`` or a NUL byte anywhere, so do we
  (reported once, on the first offending line).

Unlike sbatch's ``get_argument`` (which also ends an argument at an unquoted ``#``), a
value is split by :func:`split_words`, which gives exactly what :func:`shlex.split` (POSIX
rules) gives, so ``#`` is an ordinary character.

The same grammar runs inside slurmctld (job_submit.lua) on every submission, so every
step is linear in the script's size and the work and output are bounded whatever the
script: a directive line (or ``--rsa-*`` value) longer than :data:`MAX_LINE` bytes is an
error without being split, checking stops after :data:`MAX_ERRORS` errors, and user text
quoted in a message is cut at :data:`QUOTE_MAX` characters. The three ports (this module,
job_submit.lua, the SPANK plugin's C) share these numbers and messages.
"""

from __future__ import annotations

import difflib
import enum
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, NamedTuple

from rsa_scheduler.core.policy import EarlyStart, StageOut, Tier
from rsa_scheduler.core.units import parse_duration, parse_size

PREFIX = "#RSA_"
C_SPACE = " \t\n\v\f\r"  # isspace() in the "C" locale, as sbatch uses it
PATH_MAX = 4096  # Linux limit including the terminating NUL
NAME_MAX = 255
MAX_NODES = 2**31 - 1
MAX_CAPACITY = 2**53  # exact in a Lua 5.1 number (double)
MAX_RESET = 365 * 86400
ADMIN_COMMENT_PREFIX = "rsa1:"
# The start hold of early-start `wait` (docs/architecture.md, "Holding a job until its
# RAMDISK is ready"): job_submit.lua (or rsad, when the job becomes on-deck) sets the
# job's begin time to the deadline and appends `` hold=<deadline, epoch seconds>`` to
# the admin_comment; rsad removes it when it releases the job. The spec's encoding never
# contains a space, so the marker cannot be confused with a spec field.
HOLD_MARK = " hold="
MAX_LINE = 16384  # bytes of one #RSA_ line (without its newline), or of one option value
MAX_ERRORS = 20  # a script's scan stops after this many errors (and says so)
MAX_SCRIPT = 4 << 20  # bytes of a script scanned for directives (Slurm's default script cap)
MAX_WARNINGS = 20  # warnings listed; the rest are counted in one last warning
QUOTE_MAX = 200  # characters of user text quoted in one message


class DirectiveError(NamedTuple):
    """One problem in a script: 1-based line number and one actionable sentence."""

    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.line}: {self.message}"


class DirectiveWarning(NamedTuple):
    """Something probably unintended that is not an error (e.g. ``# RSA_DATA_IN``)."""

    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.line}: warning: {self.message}"


class DirectiveErrors(ValueError):
    """All errors of one script, sorted by line. ``str()`` gives ``SOURCE:LINE: message`` lines."""

    def __init__(self, errors: Sequence[DirectiveError], source: str = "<script>") -> None:
        self.errors: list[DirectiveError] = sorted(errors, key=lambda e: e.line)
        self.source = source
        super().__init__("\n".join(f"{source}:{e}" for e in self.errors))


class _Bad(ValueError):
    """A value failed validation; the message is the user-facing sentence."""


@dataclass(frozen=True, slots=True)
class Reset:
    """When the input RAMDISK is reset to receive output (seed 004 §3.2).

    ``after`` is seconds after the job started; ``None`` means "when the job reports its
    input is done" (``#RSA_RESET=input-done``). Text form: ``input-done`` or ``600s``.
    """

    after: int | None = None

    def __post_init__(self) -> None:
        if self.after is not None and (
            isinstance(self.after, bool)
            or not isinstance(self.after, int)
            or not 1 <= self.after <= MAX_RESET
        ):
            raise ValueError(f"reset delay must be 1..{MAX_RESET} seconds, got {self.after!r}")

    @property
    def on_input_done(self) -> bool:
        return self.after is None

    def __str__(self) -> str:
        return "input-done" if self.after is None else f"{self.after}s"

    @classmethod
    def from_str(cls, text: str) -> Reset:
        """Parse the canonical text form produced by ``str()``."""
        if text == "input-done":
            return cls(None)
        m = re.fullmatch(r"([1-9][0-9]{0,9})s", text)
        if not m:
            raise ValueError(f"invalid reset {text!r}: expected 'input-done' or e.g. '600s'")
        return cls(int(m.group(1)))


RESET_ON_INPUT_DONE = Reset(None)


# ---------------------------------------------------------------------------------------
# Messages quote user text the same way everywhere (and the Lua port must too): in single
# quotes, with \\ and \' escaped, control characters as \xNN and undecodable bytes (which
# arrive as surrogate escapes U+DC80..U+DCFF) as \xNN of the original byte.


def quote(text: str) -> str:
    """Quote user text for a one-line message; beyond :data:`QUOTE_MAX` characters it is
    cut and ``...`` follows the closing quote."""
    out = []
    tail = ""
    if len(text) > QUOTE_MAX:
        text, tail = text[:QUOTE_MAX], "..."
    for ch in text:
        o = ord(ch)
        if ch in "\\'":
            out.append("\\" + ch)
        elif o < 0x20 or 0x7F <= o <= 0x9F:
            out.append(f"\\x{o:02x}")
        elif 0xDC80 <= o <= 0xDCFF:
            out.append(f"\\x{o - 0xDC00:02x}")
        elif 0xD800 <= o <= 0xDFFF:
            out.append(f"\\u{o:04x}")
        else:
            out.append(ch)
    return "'" + "".join(out) + "'" + tail


def _undecodable(text: str) -> str | None:
    """The first byte that was not valid UTF-8, as ``0xNN`` (or a lone surrogate), or None."""
    for ch in text:
        o = ord(ch)
        if 0xDC80 <= o <= 0xDCFF:
            return f"0x{o - 0xDC00:02x}"
        if 0xD800 <= o <= 0xDFFF:
            return f"U+{o:04X}"
    return None


def _is_control(ch: str) -> bool:
    o = ord(ch)
    return o < 0x20 or 0x7F <= o <= 0x9F


def normalise_path(label: str, raw: str) -> str:
    """Validate an absolute path and drop repeated and trailing slashes.

    ``.``/``..`` components are refused rather than resolved: the daemon mounts over the
    path as root, so it must be the literal directory the user means. ``/`` is refused.
    """
    bad = _undecodable(raw)
    if bad:
        raise _Bad(f"{label} must be valid UTF-8, found byte {bad} in {quote(raw)}")
    if any(_is_control(ch) for ch in raw):
        raise _Bad(f"{label} must not contain control characters, got {quote(raw)}")
    if not raw.startswith("/"):
        raise _Bad(f"{label} must be an absolute path, got {quote(raw)}")
    parts = [p for p in raw.split("/") if p]
    if any(p in (".", "..") for p in parts):
        raise _Bad(
            f"{label} must not contain '.' or '..' components, got {quote(raw)}; "
            "write the direct path"
        )
    if not parts:
        raise _Bad(f"{label} must not be the root directory '/'; name a directory below it")
    for p in parts:
        if len(p.encode()) > NAME_MAX:
            raise _Bad(f"{label} has a path component longer than {NAME_MAX} bytes")
    path = "/" + "/".join(parts)
    if len(path.encode()) >= PATH_MAX:
        raise _Bad(f"{label} is longer than {PATH_MAX - 1} bytes")
    return path


# --- splitting a value into words --------------------------------------------------------


class SplitError(ValueError):
    """A value :func:`split_words` cannot split; ``str()`` is shlex's own message."""


_SPLIT_SPACE = " \t\r\n"  # shlex's whitespace: not \v or \f
_RUN = re.compile(r"[^ \t\r\n'\"\\]+")  # unquoted ordinary characters
_SPACES = re.compile(r"[ \t\r\n]*")
_DQ_RUN = re.compile(r'[^"\\]*')  # inside double quotes, up to the next " or backslash


def split_words(text: str) -> list[str]:
    """``shlex.split(text)`` (POSIX mode, no comments), in time linear in ``len(text)``.

    CPython's shlex reads one character at a time through several method calls, about
    7 us each: a 4 MB script would take half a minute. This takes runs at once with
    regular expressions and gives exactly the same words and the same errors (raised as
    :class:`SplitError` with shlex's message: ``No closing quotation`` or ``No escaped
    character``); tests/unit/test_directives.py checks that with generated input.
    """
    words: list[str] = []
    n = len(text)
    i = _SPACES.match(text, 0).end()  # type: ignore[union-attr]
    while i < n:
        parts: list[str] = []
        while i < n:
            c = text[i]
            if c in _SPLIT_SPACE:
                break
            if c == "'":
                end = text.find("'", i + 1)
                if end < 0:
                    raise SplitError("No closing quotation")
                parts.append(text[i + 1 : end])
                i = end + 1
            elif c == '"':
                i += 1
                while True:
                    m = _DQ_RUN.match(text, i)
                    assert m is not None
                    parts.append(m.group())
                    i = m.end()
                    if i >= n:
                        raise SplitError("No closing quotation")
                    if text[i] == '"':
                        i += 1
                        break
                    if i + 1 >= n:  # a backslash at the very end, inside the quotes
                        raise SplitError("No escaped character")
                    nxt = text[i + 1]
                    parts.append(nxt if nxt in '"\\' else "\\" + nxt)
                    i += 2
            elif c == "\\":
                if i + 1 >= n:
                    raise SplitError("No escaped character")
                parts.append(text[i + 1])
                i += 2
            else:
                m = _RUN.match(text, i)
                assert m is not None
                parts.append(m.group())
                i = m.end()
        words.append("".join(parts))  # never an unquoted "": a word starts with a character
        i = _SPACES.match(text, i).end()  # type: ignore[union-attr]
    return words


def _nbytes(text: str) -> int:
    """Bytes of script text as the user wrote them: an undecodable byte (a surrogate
    escape) is one."""
    try:
        return len(text.encode("utf-8", "surrogateescape"))
    except UnicodeEncodeError:  # a lone surrogate that was never a byte
        return len(text.encode("utf-8", "surrogatepass"))


def _over_max_line(text: str) -> int | None:
    """The size in bytes of script text longer than :data:`MAX_LINE` bytes, else None."""
    if len(text) * 4 <= MAX_LINE:  # even 4-byte characters only: not over
        return None
    size = _nbytes(text)
    return size if size > MAX_LINE else None


# --- value parsers: words -> typed value, raising _Bad ----------------------------------


def _one(name: str, tokens: list[str], hint: str = "remove the extra words") -> str:
    if len(tokens) != 1:
        words = " ".join(quote(t) for t in tokens)
        raise _Bad(f"RSA_{name} takes one value, got {len(tokens)} words ({words}); {hint}")
    return tokens[0]


def _path(name: str, tokens: list[str]) -> str:
    value = _one(name, tokens, "put a path that contains spaces in double quotes")
    return normalise_path(f"RSA_{name}", value)


def _argv(name: str, tokens: list[str]) -> tuple[str, ...]:
    prog = tokens[0]
    if not prog.startswith("/") and _undecodable(prog) is None:
        raise _Bad(f"RSA_{name} must start with the absolute path of a program, got {quote(prog)}")
    argv = [normalise_path(f"RSA_{name}", prog)]
    for i, arg in enumerate(tokens[1:], start=1):
        bad = _undecodable(arg)
        if bad:
            raise _Bad(f"RSA_{name} argument {i} must be valid UTF-8, found byte {bad}")
        if "\0" in arg:
            raise _Bad(f"RSA_{name} argument {i} must not contain a NUL character")
        argv.append(arg)
    return tuple(argv)


def _choice(name: str, tokens: list[str], choices: Sequence[str]) -> str:
    value = _one(name, tokens)
    if value.lower() in choices:
        return value.lower()
    hint = difflib.get_close_matches(value.lower(), choices, n=1, cutoff=0.6)
    tail = f"; did you mean {hint[0]}?" if hint else ""
    raise _Bad(f"RSA_{name} must be one of {', '.join(choices)}, got {quote(value)}{tail}")


def _enum_parser(cls: type[enum.StrEnum]) -> Callable[[str, list[str]], Any]:
    def parse(name: str, tokens: list[str]) -> Any:
        return cls(_choice(name, tokens, [m.value for m in cls]))

    return parse


def _nodes(name: str, tokens: list[str]) -> int:
    value = _one(name, tokens)
    if re.fullmatch(r"[0-9]{1,10}", value) and 1 <= int(value) <= MAX_NODES:
        return int(value)
    raise _Bad(f"RSA_{name} must be a whole number of RSA nodes, at least 1, got {quote(value)}")


_SIZE_RE = re.compile(r"[0-9]{1,20}(?:\.[0-9]{1,20})?([KMGTPkmgtp](?:i?[Bb])?)?")


def _capacity(name: str, tokens: list[str]) -> int:
    value = _one(name, tokens)
    m = _SIZE_RE.fullmatch(value)  # ASCII only: units.parse_size would take any \d
    if m and not m.group(1):
        raise _Bad(f"RSA_{name} needs a unit K, M, G, T or P, e.g. 512G; got {quote(value)}")
    if not m:
        raise _Bad(f"RSA_{name} must be a size such as 512G or 3.5T, got {quote(value)}")
    try:
        size = parse_size(value)
    except (ValueError, OverflowError) as e:
        raise _Bad(f"RSA_{name} must be a size such as 512G or 3.5T, got {quote(value)}") from e
    if size < 1:
        raise _Bad(f"RSA_{name} must be greater than 0, got {quote(value)}")
    if size > MAX_CAPACITY:
        raise _Bad(f"RSA_{name} is too large, got {quote(value)}")
    return size


_DURATION_RE = re.compile(
    r"[0-9]{1,12}(?:\.[0-9]{1,12})?(?:ms|s|m|h|d)|[0-9]{1,12}(?:-[0-9]{1,12})?(?::[0-9]{1,12}){0,2}",
    re.IGNORECASE,
)


def _reset(name: str, tokens: list[str]) -> Reset:
    value = _one(name, tokens)
    if value.lower() == "input-done":
        return RESET_ON_INPUT_DONE
    usage = (
        f"RSA_{name} must be input-done or a duration such as 30s, 10m, 2h or "
        f"HH:MM:SS, got {quote(value)}"
    )
    if not _DURATION_RE.fullmatch(value):
        raise _Bad(usage)
    try:
        seconds = parse_duration(value)
    except (ValueError, OverflowError) as e:
        raise _Bad(usage) from e
    if not 1 <= seconds <= MAX_RESET or not math.isfinite(seconds):
        raise _Bad(f"RSA_{name} must be between 1s and 365 days, got {quote(value)}")
    if seconds != int(seconds):
        raise _Bad(f"RSA_{name} must be whole seconds, got {quote(value)}")
    return Reset(int(seconds))


def _input(name: str, tokens: list[str]) -> bool:
    return _choice(name, tokens, ["ro", "rw"]) == "rw"


class _Directive(NamedTuple):
    field: str  # DirectiveSpec attribute
    parse: Callable[[str, list[str]], Any]
    example: str  # shown when the value is empty


DIRECTIVES: Mapping[str, _Directive] = {
    "DATA_IN": _Directive("data_in", _path, "/gpfs/alice/input"),
    "DATA_OUT": _Directive("data_out", _path, "/gpfs/alice/output"),
    "PREPROCESS": _Directive("preprocess", _argv, "/home/alice/bin/unpack.sh --fast"),
    "POSTPROCESS": _Directive("postprocess", _argv, "/home/alice/bin/pack.sh out.tar"),
    "NODES": _Directive("nodes", _nodes, "2"),
    "TIER": _Directive("tier", _enum_parser(Tier), "ram"),
    "CAPACITY": _Directive("capacity", _capacity, "512G"),
    "STAGE_OUT": _Directive("stage_out", _enum_parser(StageOut), "rsync"),
    "EARLY_START": _Directive("early_start", _enum_parser(EarlyStart), "fallback"),
    "INPUT": _Directive("input_writable", _input, "ro"),
    "RESET": _Directive("reset", _reset, "input-done"),
}
_KNOWN = [f"RSA_{n}" for n in DIRECTIVES]
_NAME_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_"
_NEEDS: Mapping[str, tuple[str, ...]] = {  # directive -> directives it is useless without
    "PREPROCESS": ("DATA_IN",),
    "EARLY_START": ("DATA_IN",),
    "INPUT": ("DATA_IN",),
    "POSTPROCESS": ("DATA_OUT",),
    "STAGE_OUT": ("DATA_OUT",),
    "NODES": ("DATA_IN", "DATA_OUT"),
    "TIER": ("DATA_IN", "DATA_OUT"),
    "CAPACITY": ("DATA_IN", "DATA_OUT"),
    "RESET": ("DATA_IN", "DATA_OUT"),
}


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
    """An admin_comment as (the spec's encoding, the hold deadline or None). A marker
    that is not a whole number of seconds is no hold (and is left in the spec part, which
    then fails to parse loudly)."""
    spec, sep, deadline = comment.partition(HOLD_MARK)
    if not sep or not re.fullmatch(r"[1-9][0-9]{0,11}", deadline):
        return comment, None
    return spec, int(deadline)


def with_hold(comment: str, deadline: int | None) -> str:
    """The admin_comment ``comment`` with its hold marker set to ``deadline`` (None:
    removed)."""
    spec, _ = split_hold(comment)
    return spec if deadline is None else f"{spec}{HOLD_MARK}{int(deadline)}"


# to_json keys in order, with their admin_comment abbreviations
_ADMIN_KEYS = (
    *[("data_in", "i"), ("data_out", "o"), ("preprocess", "pre"), ("postprocess", "post")],
    *[("nodes", "n"), ("tier", "t"), ("capacity", "c"), ("stage_out", "so")],
    *[("early_start", "es"), ("input", "im"), ("reset", "r")],
)
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


# ---------------------------------------------------------------------------------------
# The scan


@dataclass(slots=True)
class _Scan:
    values: dict[str, Any]
    first_line: dict[str, int]
    errors: list[DirectiveError]
    warnings: list[DirectiveWarning]
    raw: dict[str, str] = field(default_factory=dict)  # value text of each valid directive


def _is_blank_or_comment(line: str) -> bool:
    stripped = line.lstrip(C_SPACE)
    return not stripped or stripped[0] == "#"


_NEAR_MISS = re.compile(r"[ \t]*#[ \t]*rsa_", re.IGNORECASE)


# Script-level errors, worded after sbatch's own (src/sbatch/sbatch.c:_get_script_buffer).
MSG_BOM = "script starts with a byte order mark (BOM); save it as UTF-8 without BOM"
MSG_CRLF = (
    "script contains DOS line breaks (\\r\\n) instead of expected UNIX line breaks (\\n); "
    "convert it with dos2unix"
)
MSG_NUL = "script contains a NULL character '\\0', which Slurm does not allow; remove it"
MSG_TOO_FAR = (f"#RSA_ line starts after the first {MAX_SCRIPT} bytes of the script, where "
               "checking stops; move the #RSA_ lines to the top")
MSG_TOO_MANY = (f"more than {MAX_ERRORS} errors, checking stopped at this line; fix the ones "
                "above and submit again")


def _scan(text: str, *, exclusive: bool = True) -> _Scan:
    scan = _Scan({}, {}, [], [])

    def error(line: int, message: str) -> None:
        scan.errors.append(DirectiveError(line, message))

    unlisted = 0  # warnings beyond MAX_WARNINGS

    def warning(line: int, message: str) -> None:
        nonlocal unlisted
        if len(scan.warnings) < MAX_WARNINGS:
            scan.warnings.append(DirectiveWarning(line, message))
        else:
            unlisted += 1

    if text.startswith("\ufeff"):  # sbatch refuses it: the first line is not "#!"
        error(1, MSG_BOM)
        text = text[1:]
    for needle, message in (("\r\n", MSG_CRLF), ("\0", MSG_NUL)):
        if (at := text.find(needle)) >= 0:
            error(text.count("\n", 0, at) + 1, message)

    lines = text.split("\n")
    stop = len(lines)
    chars = 0  # characters before this line; exact bytes once they might matter:
    size: int | None = None  # bytes before this line, or None while chars * 4 <= MAX_SCRIPT
    for index, line in enumerate(lines):
        if size is None and chars * 4 > MAX_SCRIPT:
            size = _nbytes(text[:chars])
        if line.startswith(PREFIX):
            if size is not None and size >= MAX_SCRIPT:
                error(index + 1, MSG_TOO_FAR)
                stop = len(lines)
                break
            if len(scan.errors) >= MAX_ERRORS:
                error(index + 1, MSG_TOO_MANY)
                stop = len(lines)  # nothing after this line is looked at
                break
            if (long := _over_max_line(line)) is not None:
                error(index + 1, f"directive line is {long} bytes long, more than the "
                      f"{MAX_LINE} allowed; shorten it")
            else:
                _directive(scan, index + 1, line[len(PREFIX) :])
        elif not _is_blank_or_comment(line):
            stop = index
            break
        elif _NEAR_MISS.match(line):
            shown = quote(line.strip(C_SPACE)[:40])
            warning(index + 1, f"{shown} is a plain comment; directives start exactly with #RSA_")
        chars += len(line) + 1
        if size is not None:
            size += _nbytes(line) + 1
    for index in range(stop + 1, len(lines)):
        if lines[index].startswith(PREFIX):
            warning(
                index + 1,
                f"#RSA_ line after the first command (line {stop + 1}) is "
                "ignored, as sbatch does; move it to the top of the script",
            )
    for name, needs in _NEEDS.items():
        if name in scan.values and not any(n in scan.values for n in needs):
            want = " or ".join(f"RSA_{n}" for n in needs)
            warning(scan.first_line[name], f"RSA_{name} has no effect without {want}")
    if unlisted:
        scan.warnings.append(DirectiveWarning(
            max(w.line for w in scan.warnings), f"{unlisted} more warnings not listed"))
    if exclusive and "STAGE_OUT" in scan.values and "POSTPROCESS" in scan.values:
        first, second = sorted((scan.first_line["STAGE_OUT"], scan.first_line["POSTPROCESS"]))
        error(second, _exclusive(f"lines {first} and {second}"))
    return scan


def _exclusive(where: str) -> str:
    return ("RSA_STAGE_OUT and RSA_POSTPROCESS both choose how output is staged "
            f"out ({where}); keep one")


def _directive(scan: _Scan, lineno: int, rest: str) -> None:
    """Parse one ``#RSA_`` line (``rest`` is what follows the prefix) into ``scan``."""

    def fail(message: str) -> None:
        scan.errors.append(DirectiveError(lineno, message))

    n = 0
    while n < len(rest) and rest[n] not in C_SPACE and rest[n] != "=":
        n += 1
    name, rest = rest[:n], rest[n:].lstrip(C_SPACE)
    known = name[: len(name) - len(name.lstrip(_NAME_CHARS))]
    if known in DIRECTIVES and name != known:  # "#RSA_DATA_IN/x": say what is missing
        fail(f"RSA_{known} must be followed by '=' or a space, got {quote(name[len(known)])}")
        return
    if rest.startswith("="):
        rest = rest[1:]
    if not name:
        fail("directive name missing after #RSA_; write e.g. #RSA_DATA_IN=/path/to/input")
        return
    spec = DIRECTIVES.get(name)
    if spec is None:
        # compare bare names: the shared "RSA_" would make everything look close
        hint = difflib.get_close_matches(name.upper(), list(DIRECTIVES), n=1, cutoff=0.6)
        tail = f"; did you mean RSA_{hint[0]}?" if hint else f"; known: {', '.join(_KNOWN)}"
        fail(f"unknown directive {quote('RSA_' + name)[1:-1]}{tail}")
        return
    if name in scan.first_line:
        fail(f"RSA_{name} given more than once (first on line {scan.first_line[name]}); keep one")
        return
    scan.first_line[name] = lineno
    try:
        scan.values[name] = _value(name, rest)
    except _Bad as e:
        fail(str(e))
    else:
        scan.raw[name] = rest


def _value(name: str, rest: str) -> Any:
    """The typed value of ``#RSA_<name>=<rest>`` (``rest``: the text after ``=``); _Bad."""
    spec = DIRECTIVES[name]
    if (size := _over_max_line(rest)) is not None:  # only an option's value can be
        raise _Bad(f"RSA_{name} is {size} bytes long, more than the {MAX_LINE} allowed; "
                   "shorten it")
    try:
        tokens = split_words(rest)
    except SplitError as e:
        if "escaped" in str(e):
            raise _Bad(f"RSA_{name} ends with a lone backslash; remove it or quote the value"
                       ) from e
        raise _Bad(
            f"RSA_{name} has an unmatched quote in {quote(rest.strip(C_SPACE))}; "
            "close it or escape it with a backslash"
        ) from e
    if not tokens or tokens == [""]:
        raise _Bad(f"RSA_{name} has an empty value; write e.g. #RSA_{name}={spec.example}")
    return spec.parse(name, tokens)


def parse_directives(text: str, source: str = "<script>") -> DirectiveSpec:
    """Parse the ``#RSA_*`` directives of a batch script.

    Raises :class:`DirectiveErrors` with every error found. Undecodable bytes may be
    passed as surrogate escapes (see :func:`parse_directives_bytes`).
    """
    scan = _scan(text)
    if scan.errors:
        raise DirectiveErrors(scan.errors, source)
    return DirectiveSpec(**{DIRECTIVES[n].field: v for n, v in scan.values.items()})


def parse_directives_bytes(data: bytes, source: str = "<script>") -> DirectiveSpec:
    """Parse raw script bytes; a directive that is not valid UTF-8 is an error on its line."""
    return parse_directives(decode_script(data), source)


def decode_script(data: bytes) -> str:
    """Decode script bytes as UTF-8, keeping invalid bytes as surrogate escapes."""
    return data.decode("utf-8", "surrogateescape")


def directive_warnings(text: str) -> list[DirectiveWarning]:
    """Likely mistakes that are not errors: ``# RSA_X`` comments, late or useless directives."""
    return sorted(_scan(text).warnings, key=lambda w: w.line)


# ---------------------------------------------------------------------------------------
# Options: `sbatch/salloc/srun --rsa-data-in=...` (the SPANK plugin in slurm_plugins/spank/)
#
# An option's value is written exactly as the directive's value after `=`: the same
# shlex splitting, the same checks, the same messages, located at the option instead of
# a line (`--rsa-tier: RSA_TIER must be one of ram, ssd, got 'nvme'`). The plugin checks
# each option in sbatch before anything is sent; job_submit.lua merges the options
# (job_desc.spank_job_env, `RSA_<NAME>=<value>`) with the script's directives exactly as
# :func:`check_submission` does, which is the reference both ports are tested against.

OPTION_PREFIX = "--rsa-"


def option_of(name: str) -> str:
    """``DATA_IN`` -> ``--rsa-data-in``: the command line option of a directive."""
    return OPTION_PREFIX + name.lower().replace("_", "-")


class OptionError(NamedTuple):
    """A bad ``--rsa-*`` option: the option and one actionable sentence."""

    option: str
    message: str

    def __str__(self) -> str:
        return f"{self.option}: {self.message}"


class SubmissionErrors(ValueError):
    """Every problem of one submission, one ``LINE: message`` or ``--rsa-x: message`` each.

    Option errors come first (in directive declaration order), then the script's errors
    sorted by line (stable) -- the order job_submit.lua prints them in.
    """

    def __init__(self, errors: Sequence[OptionError | DirectiveError]) -> None:
        opts = [e for e in errors if isinstance(e, OptionError)]
        lines = sorted((e for e in errors if isinstance(e, DirectiveError)), key=lambda e: e.line)
        self.errors: list[OptionError | DirectiveError] = [*opts, *lines]
        self.lines = [str(e) for e in self.errors]
        super().__init__("\n".join(self.lines))


def parse_option(name: str, value: str) -> Any:
    """The typed value of ``--rsa-<name>=<value>``; raises :class:`SubmissionErrors`."""
    if name not in DIRECTIVES:
        raise ValueError(f"no directive RSA_{name}")
    try:
        return _value(name, value)
    except _Bad as e:
        raise SubmissionErrors([OptionError(option_of(name), str(e))]) from e


def check_submission(text: str | None, options: Mapping[str, str]) -> DirectiveSpec:
    """A job's RSA request: its script's directives merged with its ``--rsa-*`` options.

    ``options`` maps a directive name (``DATA_IN``) to the option's value text. An option
    naming the same directive as a script line must give the same value (compared after
    normalisation, so ``/a//`` equals ``/a``); a different value is an error on that line
    naming both. ``text`` None or empty: a job without a batch script (salloc, srun).
    Raises :class:`SubmissionErrors`.
    """
    unknown = sorted(set(options) - set(DIRECTIVES))
    if unknown:
        raise ValueError(f"unknown directive names: {', '.join(unknown)}")
    # the script-only exclusivity check is made below, with the options in view
    scan = _scan(text, exclusive=False) if text else _Scan({}, {}, [], [])
    errors: list[OptionError | DirectiveError] = list(scan.errors)
    given: dict[str, Any] = {}
    for name in DIRECTIVES:
        if name in options:
            try:
                given[name] = _value(name, options[name])
            except _Bad as e:
                errors.append(OptionError(option_of(name), str(e)))
    for name, value in given.items():
        if name in scan.values and scan.values[name] != value:
            line = scan.first_line[name]
            errors.append(DirectiveError(line, (
                f"#RSA_{name}={quote(scan.raw[name].strip(C_SPACE))} conflicts with "
                f"{option_of(name)}={quote(options[name])}; keep one")))
    where = {n: (scan.first_line[n] if n in scan.values else option_of(n))
             for n in ("STAGE_OUT", "POSTPROCESS") if n in scan.values or n in given}
    if len(where) == 2:
        so, post = where["STAGE_OUT"], where["POSTPROCESS"]
        if isinstance(so, int) and isinstance(post, int):
            first, second = sorted((so, post))
            errors.append(DirectiveError(second, _exclusive(f"lines {first} and {second}")))
        elif isinstance(so, int):
            errors.append(DirectiveError(so, _exclusive(f"line {so} and {post}")))
        elif isinstance(post, int):
            errors.append(DirectiveError(post, _exclusive(f"line {post} and {so}")))
        else:
            errors.append(OptionError(option_of("POSTPROCESS"),
                                      _exclusive(f"{so} and {post}")))
    if errors:
        raise SubmissionErrors(errors)
    merged = {**scan.values, **given}
    return DirectiveSpec(**{DIRECTIVES[n].field: v for n, v in merged.items()})
