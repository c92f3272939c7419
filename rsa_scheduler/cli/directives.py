"""``rsa directives``: check the ``#RSA_*`` directives of a batch script.

Owns reading the script (a file or ``-`` for stdin), exit codes and output format; the
grammar itself is :mod:`rsa_scheduler.core.directives`, the same parser the daemon uses.

Exit codes (sysexits.h): 0 valid, 65 (EX_DATAERR) directive errors, one
``SCRIPT:LINE: message`` line each on stderr, 66 (EX_NOINPUT) script unreadable.

Warnings are not errors: likely mistakes in the lines, and (:func:`path_warnings`, when
the site's configuration is readable) a DATA_IN/DATA_OUT the node Prolog would refuse
to mount over, checked here as the user by the Prolog's own rule (issue 36: not the
user's own directory, a symlink component, outside ``staging.allowed_roots``).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from collections.abc import Sequence

import click

from rsa_scheduler.core.directives import (
    DirectiveErrors,
    DirectiveSpec,
    decode_script,
    directive_warnings,
    parse_directives,
)
from rsa_scheduler.core.units import format_duration, format_size
from rsa_scheduler.errors import RsaError

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
    for line, message in site_path_warnings(text, spec):
        click.echo(f"{script}:{line}: warning: {message}", err=True)
    click.echo(summary(script, spec))


def site_path_warnings(text: str, spec: DirectiveSpec) -> list[tuple[int, str]]:
    """:func:`path_warnings` with this site's roots and shared directories, for the
    calling user; none when the configuration cannot be read (the Prolog still checks)."""
    from rsa_scheduler.config import load_config

    if spec.data_in is None and spec.data_out is None:
        return []
    try:
        staging = load_config().staging
    except (RsaError, OSError):  # no readable site configuration: nothing to check against
        return []
    return path_warnings(text, spec, [str(r) for r in staging.allowed_roots],
                         [str(d) for d in staging.shared_dirs])


def path_warnings(text: str, spec: DirectiveSpec, allowed_roots: Sequence[str],
                  shared_dirs: Sequence[str]) -> list[tuple[int, str]]:
    """(line, message) for each of DATA_IN/DATA_OUT the node would refuse to mount over
    for the calling user. A path that does not exist yet (the job may create it) and
    one with ``%A``/``%a`` (an array task's, known only when it runs) are not checked."""
    from rsa_scheduler.node.paths import UnsafePath, Who, open_target

    who = Who(os.getuid(), frozenset(os.getgroups()) | {os.getgid()})
    out: list[tuple[int, str]] = []
    for name, path in (("DATA_IN", spec.data_in), ("DATA_OUT", spec.data_out)):
        if path is None or "%" in path or not os.path.lexists(path):
            continue
        directive = f"#RSA_{name}"
        try:
            os.close(open_target(path, who, allowed_roots, shared_dirs,
                                 directive=directive))
        except UnsafePath as e:
            why = str(e) if str(e).startswith(directive) else f"{directive}: {e}"
            out.append((_line_of(text, name),
                        f"{why} (the job would use it on the PFS, without the RAMDISK)"))
    return out


def _line_of(text: str, name: str) -> int:
    match = re.search(rf"^#RSA_{name}=", text, re.M)
    return text.count("\n", 0, match.start()) + 1 if match else 0


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
