"""``rsa directives``: check the ``#RSA_*`` directives of a batch script.

Owns reading the script (a file or ``-`` for stdin), exit codes and output format; the
grammar itself is :mod:`rsa_scheduler.core.directives`, the same parser the daemon uses.

Exit codes (sysexits.h): 0 valid, 65 (EX_DATAERR) directive errors, one
``SCRIPT:LINE: message`` line each on stderr, 66 (EX_NOINPUT) script unreadable.
"""

from __future__ import annotations

import json
import shlex
import sys

import click

from rsa_scheduler.core.directives import (
    DirectiveErrors,
    DirectiveSpec,
    decode_script,
    directive_warnings,
    parse_directives,
)
from rsa_scheduler.core.units import format_duration, format_size

EX_DATAERR = 65
EX_NOINPUT = 66


@click.group()
def directives() -> None:
    """Check the #RSA_* directives of batch scripts."""


@directives.command()
@click.argument("script")
@click.option("--json", "as_json", is_flag=True, help="Print the parsed directives as JSON.")
def check(script: str, as_json: bool) -> None:
    """Check the #RSA_* directives of SCRIPT (- reads standard input).

    Exit 0 when they are valid; 65 with one SCRIPT:LINE: message per error on stderr;
    66 when SCRIPT cannot be read.
    """
    # sys.exit rather than ctx.exit: rsa's main() runs click with standalone_mode=False,
    # where click turns ctx.exit(code) into a return value and the code would be lost.
    try:
        if script == "-":
            data = sys.stdin.buffer.read()
        else:
            with open(script, "rb") as f:
                data = f.read()
    except OSError as e:
        click.echo(f"{script}: cannot read script: {e.strerror or e}", err=True)
        sys.exit(EX_NOINPUT)
    text = decode_script(data)
    try:
        spec = parse_directives(text, source=script)
    except DirectiveErrors as e:
        for error in e.errors:
            click.echo(f"{script}:{error}", err=True)
        sys.exit(EX_DATAERR)
    if as_json:
        click.echo(json.dumps(spec.to_json(), ensure_ascii=False))
        return
    for warning in directive_warnings(text):
        click.echo(f"{script}:{warning}", err=True)
    click.echo(summary(script, spec))


def summary(script: str, spec: DirectiveSpec) -> str:
    """A short human summary of a valid spec."""
    if spec.is_empty:
        return f"{script}: no #RSA_ directives; the job does not use the RSA"
    rows: list[tuple[str, str]] = []
    for key, value in spec.to_json().items():
        if value is None:
            continue
        if key == "capacity":
            text = format_size(value)
        elif key == "reset" and spec.reset is not None and spec.reset.after is not None:
            text = f"{format_duration(spec.reset.after)} after the job starts"
        elif key == "reset":
            text = "when the job reports its input done"
        elif isinstance(value, list):
            text = " ".join(shlex.quote(v) for v in value)
        else:
            text = str(value)
        rows.append((key, text))
    width = max(len(k) for k, _ in rows)
    lines = [f"{script}: RSA directives OK"]
    lines += [f"  {k:<{width}}  {v}" for k, v in rows]
    return "\n".join(lines)
