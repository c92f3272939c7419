"""What the ``rsa`` CLI prints of rsad's answers: text whose bytes other people chose.

Owns :func:`printable` and :func:`echo`, the one way the commands that print rsad's
answers as text (``rsa jobs``, ``job``, ``events``, ``status``, ``nodes``, ``wait``,
``selftest``, their error lines) write a line. A job's message quotes the last line a
user's PREPROCESS or POSTPROCESS wrote to stderr, a copy tool's error, a path; an
operator's ``rsa jobs`` shows every user's. Written raw, a user's escape sequences reached
the operator's terminal (set its title, write its clipboard through OSC 52, move the
cursor to overwrite lines above, hide text), and a newline in a message forged whole lines
(a timeline entry, a job row). :func:`printable` makes one line of visible text: a tab,
newline or carriage return is a space, every other control character (C0, DEL, C1: the
bytes terminals act on) is written out as ``\\xNN``, so what was there is still said.
JSON output needs nothing: ``json.dumps`` escapes them itself. ``rsa top`` cuts its cells
the same way (``cli/dashboard.py``).

Pure and quick to import: no rich, nothing of the daemon.
"""

from __future__ import annotations

import re

import click

#: the characters a terminal acts on: C0, DEL, C1 (also ``rsa top``'s, cli/dashboard.py)
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_SPACE = frozenset("\t\n\r")


def _visible(found: re.Match[str]) -> str:
    ch = found.group(0)
    return " " if ch in _SPACE else f"\\x{ord(ch):02x}"


def printable(text: str) -> str:
    """``text`` as one line a terminal only shows: no control character acts."""
    return CONTROL.sub(_visible, text)


def echo(text: str = "", *, err: bool = False) -> None:
    """:func:`click.echo` of one :func:`printable` line."""
    click.echo(printable(text), err=err)


__all__ = ["CONTROL", "echo", "printable"]
