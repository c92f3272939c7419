"""The transition table: every RSA-state change is a row of data (seed 004 Figs. 2–5).

Owns ``TABLE`` ((rsa-state, trigger) -> :class:`~rsa_scheduler.core.rules.Rule`) and
:func:`lookup`. Every (rsa-state, job-state) pair and every (rsa-state, TICK) pair has an
explicit row — the paper warns that an rsa-state "may have been set by the scheduler in a
different job-state and these transitions must be handled properly" (§3.1). Any other pair
not in the table is impossible and raises :class:`InvalidTransition`. The rows are written
in :mod:`rsa_scheduler.core.rows_prerun` (before the job runs) and
:mod:`rsa_scheduler.core.rows_run` (from its start on), in the vocabulary of
:mod:`rsa_scheduler.core.states` (states, triggers, groups) and
:mod:`rsa_scheduler.core.rules` (rows, branches, conditions, effects); this module
re-exports the names its readers have always taken from here.

Must not import anything but the stdlib and other core leaf modules.
"""

from __future__ import annotations

from collections.abc import Mapping

from rsa_scheduler.core import rows_prerun, rows_run
from rsa_scheduler.core.rules import (
    OUTCOME_TRIGGERS,
    Branch,
    Cond,
    Effect,
    InvalidTransition,
    Rule,
)
from rsa_scheduler.core.states import JOB_STATE_TRIGGERS, JOB_TRIGGERS, RsaState, Trigger

__all__ = [
    "JOB_STATE_TRIGGERS", "JOB_TRIGGERS", "OUTCOME_TRIGGERS", "TABLE", "Branch", "Cond",
    "Effect", "InvalidTransition", "Rule", "Trigger", "lookup",
]


def _index(rows: list[Rule]) -> dict[tuple[RsaState, Trigger], Rule]:
    table: dict[tuple[RsaState, Trigger], Rule] = {}
    for rule in rows:
        key = (rule.src, rule.trigger)
        if key in table:
            raise AssertionError(f"duplicate transition row {key}")
        table[key] = rule
    return table


#: The transition table: (rsa-state, trigger) -> rule.
TABLE: Mapping[tuple[RsaState, Trigger], Rule] = _index(rows_prerun.rows() + rows_run.rows())


def lookup(state: RsaState, trigger: Trigger, job_id: str = "") -> Rule:
    """The rule for ``trigger`` in ``state``; InvalidTransition if it cannot happen."""
    try:
        return TABLE[(state, trigger)]
    except KeyError:
        raise InvalidTransition(state, trigger, job_id) from None
