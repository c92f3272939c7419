"""The ``#RSA_*`` directive grammar: batch script text in, a typed :class:`DirectiveSpec` out.

Owns which lines are directives, the scan's errors and warnings, and how ``--rsa-*``
options merge with a script (:func:`check_submission`). The grammar's data (names, kinds,
limits, fixed messages) is ``core.grammar``; values are parsed by ``core.directive_values``;
the typed result and its serialised forms are ``core.directive_spec``. This module
re-exports their public names, so callers import the grammar from here. The same rules
are written down as shared vectors in ``tests/data/directives/``.

Pure: stdlib string logic plus those ``core`` modules. It must not import os, pathlib,
io, logging, time or anything that reads files or the clock (import-linter).

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
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from rsa_scheduler.core.directive_spec import (
    HOLD_MARK,
    RERUN_MARK,
    DirectiveSpec,
    rerun_held,
    split_hold,
    with_hold,
)
from rsa_scheduler.core.directive_values import (
    RESET_ON_INPUT_DONE,
    Reset,
    SplitError,
    _Bad,
    _nbytes,
    _over_max_line,
    normalise_path,
    parse_words,
    quote,
    split_words,
)
from rsa_scheduler.core.grammar import (
    ADMIN_COMMENT_PREFIX,
    BY_NAME,
    C_SPACE,
    GRAMMAR,
    MAX_CAPACITY,
    MAX_ERRORS,
    MAX_LINE,
    MAX_NODES,
    MAX_RESET,
    MAX_SCRIPT,
    MAX_WARNINGS,
    MSG_BOM,
    MSG_CRLF,
    MSG_NO_NAME,
    MSG_NUL,
    MSG_TOO_FAR,
    MSG_TOO_MANY,
    NAME_MAX,
    OPTION_PREFIX,
    PATH_MAX,
    PREFIX,
    QUOTE_MAX,
    Directive,
    exclusive_message,
)
from rsa_scheduler.errors import RsaError

__all__ = [
    "ADMIN_COMMENT_PREFIX", "C_SPACE", "DIRECTIVES", "HOLD_MARK", "MAX_CAPACITY",
    "MAX_ERRORS", "MAX_LINE", "MAX_NODES", "MAX_RESET", "MAX_SCRIPT", "MAX_WARNINGS",
    "MSG_BOM", "MSG_CRLF", "MSG_NUL", "MSG_TOO_FAR", "MSG_TOO_MANY", "NAME_MAX",
    "OPTION_PREFIX", "PATH_MAX", "PREFIX", "QUOTE_MAX", "RERUN_MARK", "RESET_ON_INPUT_DONE",
    "DirectiveError", "DirectiveErrors", "DirectiveSpec", "DirectiveWarning", "OptionError",
    "Reset", "SplitError", "SubmissionErrors", "check_submission", "decode_script",
    "directive_warnings", "normalise_path", "option_of", "parse_directives",
    "parse_directives_bytes", "parse_option", "quote", "rerun_held", "split_hold",
    "split_words", "with_hold",
]

#: The directives by name, in declaration order (``core.grammar.GRAMMAR``).
DIRECTIVES: Mapping[str, Directive] = BY_NAME
_KNOWN = [f"RSA_{d.name}" for d in GRAMMAR]
_NAME_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_"
# directive -> directives it is useless without; checked (and warned about, up to
# MAX_WARNINGS) those needing DATA_IN first, then DATA_OUT, then either
_NEEDS: Mapping[str, tuple[str, ...]] = {
    d.name: d.needs for d in sorted((d for d in GRAMMAR if d.needs),
                                    key=lambda d: (len(d.needs), d.needs))}


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


class DirectiveErrors(RsaError, ValueError):
    """All errors of one script, sorted by line. ``str()`` gives ``SOURCE:LINE: message`` lines."""

    def __init__(self, errors: Sequence[DirectiveError], source: str = "<script>") -> None:
        self.errors: list[DirectiveError] = sorted(errors, key=lambda e: e.line)
        self.source = source
        super().__init__("\n".join(f"{source}:{e}" for e in self.errors))



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


_exclusive = exclusive_message


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
        fail(MSG_NO_NAME)
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
    return parse_words(spec, tokens)


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
# a line (`--rsa-nodes: RSA_NODES must be a whole number of RSA nodes, at least 1, got
# 'two'`). The plugin checks each option in sbatch before anything is sent;
# job_submit.lua merges the options
# (job_desc.spank_job_env, `RSA_<NAME>=<value>`) with the script's directives exactly as
# :func:`check_submission` does, which is the reference both ports are tested against.

def option_of(name: str) -> str:
    """``DATA_IN`` -> ``--rsa-data-in``: the command line option of a directive."""
    return OPTION_PREFIX + name.lower().replace("_", "-")


class OptionError(NamedTuple):
    """A bad ``--rsa-*`` option: the option and one actionable sentence."""

    option: str
    message: str

    def __str__(self) -> str:
        return f"{self.option}: {self.message}"


class SubmissionErrors(RsaError, ValueError):
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
