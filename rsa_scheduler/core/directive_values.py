"""The values of ``#RSA_*`` directives: words in, typed values or one message out.

Owns how user text is quoted in messages (:func:`quote`), how a value is split into words
(:func:`split_words`, shlex's rules in linear time), path normalisation, and one parser per
value kind of ``core.grammar`` (:data:`PARSERS`) with its user-facing messages. The Lua
and C ports (slurm_plugins/) mirror each function named here.

Pure: stdlib string logic plus ``core.grammar``, ``core.policy`` and ``core.units``; no
I/O, no clock (import-linter).
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rsa_scheduler.core.grammar import (
    MAX_CAPACITY,
    MAX_LINE,
    MAX_NODES,
    MAX_RESET,
    NAME_MAX,
    PATH_MAX,
    QUOTE_MAX,
    Directive,
    Kind,
)
from rsa_scheduler.core.policy import EarlyStart, StageOut, Tier
from rsa_scheduler.core.units import parse_duration, parse_size
from rsa_scheduler.errors import RsaError


class _Bad(RsaError, ValueError):
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


class SplitError(RsaError, ValueError):
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


#: The parser of each value kind: (directive name, words) -> value, or :class:`_Bad`.
PARSERS: Mapping[Kind, Callable[[str, list[str]], Any]] = {
    Kind.PATH: _path,
    Kind.ARGV: _argv,
    Kind.NODES: _nodes,
    Kind.CAPACITY: _capacity,
    Kind.RESET: _reset,
}

#: A CHOICE directive's value as DirectiveSpec holds it (others keep the string).
CHOICE_TYPES: Mapping[str, Callable[[str], Any]] = {
    "TIER": Tier,
    "STAGE_OUT": StageOut,
    "EARLY_START": EarlyStart,
    "INPUT": lambda text: text == "rw",
}


def parse_words(directive: Directive, tokens: list[str]) -> Any:
    """The typed value of ``directive`` from its words; raises :class:`_Bad`."""
    if directive.kind is Kind.CHOICE:
        value = _choice(directive.name, tokens, directive.choices)
        return CHOICE_TYPES.get(directive.name, str)(value)
    return PARSERS[directive.kind](directive.name, tokens)
