"""The user guide's table of every message a user can see (issue 32) holds every
``"RSA: ..."`` line the daemon and the core write into a job's comment: each such string
literal's fixed start (up to its first placeholder) is in the generated table. (That the
guide's copy is the generated one: tests/unit/test_docs.py.)"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from rsa_scheduler import usermessages

pytestmark = pytest.mark.unit

PKG = Path(usermessages.__file__).resolve().parent


def rsa_lines() -> list[tuple[str, str]]:
    """(file, fixed start) of every string literal starting ``RSA: `` in daemon/ and
    core/ (an f-string's first constant part)."""
    found = []
    for path in sorted([*PKG.glob("daemon/*.py"), *PKG.glob("core/*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            text = None
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value
            elif isinstance(node, ast.JoinedStr) and node.values and isinstance(
                    node.values[0], ast.Constant) and isinstance(node.values[0].value, str):
                text = node.values[0].value
            if text and text.startswith("RSA: ") and len(text) > len("RSA: "):
                found.append((path.name, text.split("{")[0].strip()))
    return found


def test_every_comment_line_of_the_code_is_in_the_table() -> None:
    table = usermessages.table().replace("\\|", "|")
    lines = rsa_lines()
    assert len(lines) > 10
    missing = [(f, t) for f, t in lines if t not in table]
    assert missing == [], "add them to rsa_scheduler/usermessages.py, then run docgen"


def test_a_user_is_told_to_run_only_what_rsad_lets_them() -> None:
    """``rsa retry`` is an operator's command (core.states: a user's is refused, 403 ``retry
    is not allowed for alice``), yet the job's owner was told to run it: in ``rsa job``'s
    output line, the quarantine mail, a dependent's held comment and the user guide's
    table (found by review); and native mode named ``rsa discard``, which no ``rsa``
    command is. Every such line now says whose command it is."""
    import re

    from rsa_scheduler.cli.main import COMMANDS
    from rsa_scheduler.cli.where import where_output
    from rsa_scheduler.core.dependency import Waiting, held_message
    from rsa_scheduler.core.states import USER_COMMANDS, Trigger
    from rsa_scheduler.daemon import mail, native

    assert Trigger.RETRY not in USER_COMMANDS
    told = [where_output({"job_id": "7", "rsa_state": "quarantined", "nodes": "rsa1",
                          "job_state": "finished", "spec": {"data_out": "/o"}}) or "",
            mail.body("7", "quarantined", "stage-out gave up"),
            held_message([Waiting("7", "quarantined")]),
            usermessages.table()]
    for text in told:
        for clause in re.split(r"[;.|]", text):
            if "rsa retry" in clause:
                assert "operator" in clause, clause
    source = Path(native.__file__).read_text()
    for name in re.findall(r"`rsa ([a-z-]+)", source):
        assert name in COMMANDS, name
