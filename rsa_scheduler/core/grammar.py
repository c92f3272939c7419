"""The ``#RSA_*`` directive grammar as data: the one source of its names, kinds, limits.

Owns everything the three ports of the grammar share as data -- the Python parser
(``core/directives.py``), job_submit.lua and the SPANK plugin's C: the directives in
declaration order with their value kind, accepted values, example, ``--help`` text and
serialised keys; the bounds on the work done per script; the fixed messages. The Lua
and C copies are generated from this module (``python -m rsa_scheduler.grammargen``,
``make grammar``) and a unit test fails when they are stale. The rules that turn a
value's words into a typed value (one function per :class:`Kind`) stay hand-written in
each port.

Adding a directive or a value: docs/architecture.md, "Adding a directive".

Pure data: stdlib plus ``core.policy``; must not import anything that does I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from rsa_scheduler.core.policy import EarlyStart, StageOut, Tier

PREFIX = "#RSA_"
OPTION_PREFIX = "--rsa-"
ADMIN_COMMENT_PREFIX = "rsa1:"
C_SPACE = " \t\n\v\f\r"  # isspace() in the "C" locale, as sbatch uses it
PATH_MAX = 4096  # Linux limit including the terminating NUL
NAME_MAX = 255
MAX_NODES = 2**31 - 1
MAX_CAPACITY = 2**53  # exact in a Lua 5.1 number (double)
MAX_RESET = 365 * 86400
MAX_LINE = 16384  # bytes of one #RSA_ line (without its newline), or of one option value
MAX_ERRORS = 20  # a script's scan stops after this many errors (and says so)
MAX_SCRIPT = 4 << 20  # bytes of a script scanned for directives (Slurm's default script cap)
MAX_WARNINGS = 20  # warnings listed; the rest are counted in one last warning
QUOTE_MAX = 200  # characters of user text quoted in one message

#: The integer limits every port declares, in the order they are generated.
LIMITS: Mapping[str, int] = {
    "PATH_MAX": PATH_MAX,
    "NAME_MAX": NAME_MAX,
    "MAX_NODES": MAX_NODES,
    "MAX_CAPACITY": MAX_CAPACITY,
    "MAX_RESET": MAX_RESET,
    "MAX_LINE": MAX_LINE,
    "MAX_ERRORS": MAX_ERRORS,
    "MAX_SCRIPT": MAX_SCRIPT,
    "QUOTE_MAX": QUOTE_MAX,
}

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
MSG_NO_NAME = "directive name missing after #RSA_; write e.g. #RSA_DATA_IN=/path/to/input"

#: The fixed messages (the Lua port declares each as a local of this name).
MESSAGES: Mapping[str, str] = {
    "MSG_BOM": MSG_BOM,
    "MSG_CRLF": MSG_CRLF,
    "MSG_NUL": MSG_NUL,
    "MSG_TOO_FAR": MSG_TOO_FAR,
    "MSG_TOO_MANY": MSG_TOO_MANY,
    "MSG_NO_NAME": MSG_NO_NAME,
}


class Kind(enum.StrEnum):
    """How a directive's words become its value: one parser per kind in every port."""

    PATH = "path"  # one absolute path, normalised
    ARGV = "argv"  # an absolute program path and its arguments
    NODES = "nodes"  # a whole number of RSA nodes
    CAPACITY = "capacity"  # a size with a unit, in bytes
    CHOICE = "choice"  # one of `choices`, case-insensitive
    RESET = "reset"  # input-done or a duration


@dataclass(frozen=True, slots=True)
class Directive:
    """One ``#RSA_<name>`` directive (and its ``--rsa-<name>`` option)."""

    name: str  # "DATA_IN"
    kind: Kind
    field: str  # the DirectiveSpec attribute
    json_key: str  # its key in DirectiveSpec.to_json()
    admin_key: str  # its key in the admin_comment encoding
    example: str  # shown when the value is empty
    help: str  # --help text of the option (after "RSA: ")
    arginfo: str = ""  # --help word for the value; a CHOICE lists its choices
    choices: tuple[str, ...] = ()  # CHOICE only, in the order messages list them
    needs: tuple[str, ...] = ()  # directives without which this one has no effect

    @property
    def option(self) -> str:
        """``--rsa-data-in``"""
        return OPTION_PREFIX + self.name.lower().replace("_", "-")

    @property
    def usage(self) -> str:
        """The option's full ``--help`` line."""
        return f"RSA: {self.help} (#RSA_{self.name})"

    @property
    def value_word(self) -> str:
        return "|".join(self.choices) if self.kind is Kind.CHOICE else self.arginfo


def _values(cls: type[enum.StrEnum]) -> tuple[str, ...]:
    return tuple(m.value for m in cls)


_DATA = ("DATA_IN", "DATA_OUT")

#: Every directive, in declaration order (messages list names in this order).
GRAMMAR: tuple[Directive, ...] = (
    Directive("DATA_IN", Kind.PATH, "data_in", "data_in", "i", "/gpfs/alice/input",
              "stage this directory into a RAMDISK and mount it there", "path"),
    Directive("DATA_OUT", Kind.PATH, "data_out", "data_out", "o", "/gpfs/alice/output",
              "write output to a RAMDISK mounted here, staged out after the job", "path"),
    Directive("PREPROCESS", Kind.ARGV, "preprocess", "preprocess", "pre",
              "/home/alice/bin/unpack.sh --fast",
              "run this program instead of the default stage-in copy", "command",
              needs=("DATA_IN",)),
    Directive("POSTPROCESS", Kind.ARGV, "postprocess", "postprocess", "post",
              "/home/alice/bin/pack.sh out.tar",
              "run this program instead of the default stage-out", "command",
              needs=("DATA_OUT",)),
    Directive("NODES", Kind.NODES, "nodes", "nodes", "n", "2", "number of RSA nodes", "n",
              needs=_DATA),
    Directive("TIER", Kind.CHOICE, "tier", "tier", "t", "ram", "kind of RSA nodes",
              choices=_values(Tier), needs=_DATA),
    Directive("CAPACITY", Kind.CAPACITY, "capacity", "capacity", "c", "512G",
              "RAMDISK space the job needs, e.g. 512G", "size", needs=_DATA),
    Directive("STAGE_OUT", Kind.CHOICE, "stage_out", "stage_out", "so", "rsync",
              "how output is staged out", choices=_values(StageOut), needs=("DATA_OUT",)),
    Directive("EARLY_START", Kind.CHOICE, "early_start", "early_start", "es", "fallback",
              "if the job starts before its stage-in finished",
              choices=_values(EarlyStart), needs=("DATA_IN",)),
    Directive("INPUT", Kind.CHOICE, "input_writable", "input", "im", "ro",
              "staged input read-only or writable", choices=("ro", "rw"),
              needs=("DATA_IN",)),
    Directive("RESET", Kind.RESET, "reset", "reset", "r", "input-done",
              "when the RAMDISK switches from input to output", "input-done|time",
              needs=_DATA),
)

BY_NAME: Mapping[str, Directive] = {d.name: d for d in GRAMMAR}

#: Two directives that both choose how output is staged out: at most one per job.
EXCLUSIVE = ("STAGE_OUT", "POSTPROCESS")


def exclusive_message(where: str) -> str:
    """The error for RSA_STAGE_OUT together with RSA_POSTPROCESS (``where``: the lines)."""
    return ("RSA_STAGE_OUT and RSA_POSTPROCESS both choose how output is staged "
            f"out ({where}); keep one")
