"""How a staging command reaches an RSA node: the shell, its prelude, the list transport.

Owns ``BASH`` and ``PRELUDE`` (every program runs ``set -o pipefail`` in the C locale),
``PIN`` (enter a directory checked to be where it should be, physically),
:func:`bash` (a fixed program as ``bash -c PROGRAM bash ARG...``: paths are positional
arguments, never code), the stdin/stdout encodings of the list-reading programs
(:func:`encode_list`, :func:`decode_output`) and the argv of a user's own PRE/POSTPROCESS
(no shell at all).

Pure: builds lists, runs nothing. A leaf: imports no other module of ``scripts``.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Sequence

BASH = "/bin/bash"
PRELUDE = "set -o pipefail; export LC_ALL=C TZ=UTC; "
# ``pin DIR WANT``: cd into DIR and succeed only if the directory it reached is WANT
# physically (``pwd -P``; a name ending in a newline survives). A program then names what
# it writes, renames or deletes there relative to ".", never through the path again: a
# component another user renames and replaces with a symlink after the check cannot send
# the operation elsewhere (the working directory is the directory itself, not a name).
PIN = ('pin() { cd -P -- "$1" 2>/dev/null || return 1; local w; '
       'w=$(pwd -P; echo x); [ "${w%?x}" = "$2" ]; }; ')


def encode_list(paths: Iterable[bytes]) -> str:
    """stdin for the list-reading programs: base64 of ``./<path>\\0`` records."""
    return base64.b64encode(b"".join(b"./" + p + b"\0" for p in paths)).decode("ascii")


def decode_output(stdout: str) -> bytes:
    return base64.b64decode(stdout.strip() or b"")


def bash(program: str, *args: str) -> list[str]:
    return [BASH, "-c", program, "bash", *args]


def script_argv(argv: Sequence[str], cwd: str) -> list[str]:
    """A user's PRE/POSTPROCESS argv, started in ``cwd`` (the RAMDISK), no shell."""
    if not argv:
        raise ValueError("empty PREPROCESS/POSTPROCESS argv")
    return ["env", "-C", cwd, "--", *argv]
