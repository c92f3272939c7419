"""The state vocabulary has one owner (core.states): its groups agree with the transition
table, the dispatch tables cover their enums, and no other module spells a state group."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from rsa_scheduler.core import states
from rsa_scheduler.core.effects import CONDITIONS, EFFECTS
from rsa_scheduler.core.rules import Cond, Effect
from rsa_scheduler.core.states import JobState, RsaState, Trigger
from rsa_scheduler.core.transitions import TABLE

pytestmark = pytest.mark.unit

PACKAGE = Path(states.__file__).resolve().parent.parent
OWNER = PACKAGE / "core" / "states.py"
#: modules that write the table's rows, state by state (not groups of states)
ROWS = {PACKAGE / "core" / "rows_prerun.py", PACKAGE / "core" / "rows_run.py"}


def _sources(trigger: Trigger) -> frozenset[RsaState]:
    return frozenset(src for (src, t), rule in TABLE.items() if t is trigger
                     and not rule.is_stay)


def test_the_phases_partition_the_rsa_states() -> None:
    phases = (states.IDLE, states.PRE_RUN, states.RUN, states.POST_RUN)
    assert sum(len(p) for p in phases) == len(RsaState)
    assert frozenset().union(*phases) == frozenset(RsaState)
    assert frozenset(RsaState) - states.IDLE == states.HOLDING_NODES


def test_groups_agree_with_the_table() -> None:
    assert _sources(Trigger.NODE_LOST) == states.PREPARING
    for timer, armed in states.TIMER_STATES.items():
        if timer is Trigger.UNLOCK_DUE:
            continue  # the restore's retry: in every state, by core.machine.retry_unlock
        # a timer stays armed only where a row handles it
        assert armed <= _sources(timer), timer
    assert _sources(Trigger.RETRY_DUE) == states.RETRYING
    assert _sources(Trigger.WAIT_EXPIRED) == states.STAGING


def test_commands_are_triggers_with_rows_and_operators_may_give_the_users() -> None:
    assert states.USER_COMMANDS < states.OPERATOR_COMMANDS
    for command in states.OPERATOR_COMMANDS:
        assert _sources(command), command


def test_a_group_answers_for_the_state_name_as_the_api_and_cli_see_it() -> None:
    assert "mounted-output" in states.HOLDS_USER_DATA
    assert "retry" in states.OPERATOR_COMMANDS and "retry" not in states.USER_COMMANDS
    assert "on-deck" in states.PENDING and None not in states.LEFT_QUEUE


def test_every_effect_and_condition_has_its_handler() -> None:
    assert set(EFFECTS) == set(Effect)
    assert set(CONDITIONS) == set(Cond)


def _names() -> frozenset[str]:
    return frozenset(s.value for s in RsaState) | frozenset(
        t.value for t in states.OPERATOR_COMMANDS)


def _spells_a_group(node: ast.expr) -> bool:
    """A set, list or tuple literal of two or more rsa-states (``RsaState.X``, ``S.X``,
    or their names as strings) or command names."""
    if isinstance(node, ast.Call) and node.args:
        return _spells_a_group(node.args[0])
    if isinstance(node, ast.BinOp):
        return _spells_a_group(node.left) or _spells_a_group(node.right)
    if not isinstance(node, (ast.Set, ast.List, ast.Tuple)) or len(node.elts) < 2:
        return False
    names = _names()
    members = {e.attr for e in node.elts if isinstance(e, ast.Attribute)
               and e.attr in RsaState.__members__}
    strings = {e.value for e in node.elts if isinstance(e, ast.Constant)
               and isinstance(e.value, str) and e.value in names}
    return len(members) + len(strings) == len(node.elts)


def test_no_module_but_core_states_spells_a_state_group() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == OWNER or path in ROWS:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:  # module-level names: the duplicated sets were these
            value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
            if value is not None and _spells_a_group(value):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert found == [], "use (or add) a group of rsa_scheduler.core.states"


def test_the_job_state_groups_cover_the_job_states() -> None:
    assert frozenset(JobState) == states.PENDING | states.LEFT_QUEUE
    assert not states.PENDING & states.LEFT_QUEUE
