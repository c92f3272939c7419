"""The transition table as data: completeness, structure, safety, and every row fired."""

from __future__ import annotations

import re
from typing import Any

import pytest

from rsa_scheduler.core.actions import TRACKED, ActionKind
from rsa_scheduler.core.allocator import Pool, Request
from rsa_scheduler.core.machine import InvariantViolation, JobRecord, choose, fire
from rsa_scheduler.core.policy import EarlyStart, StagingPolicy
from rsa_scheduler.core.states import HOLDS_USER_DATA, JobState, RsaState
from rsa_scheduler.core.transitions import (
    JOB_STATE_TRIGGERS,
    OUTCOME_TRIGGERS,
    TABLE,
    Cond,
    InvalidTransition,
    Rule,
    Trigger,
    lookup,
)
from tests.unit.corekit import make_action, make_pool, make_spec

S, T, A, C = RsaState, Trigger, ActionKind, Cond


def test_every_rsa_state_and_job_state_pair_is_explicit() -> None:
    missing = [(s.value, t.value) for s in RsaState for t in JOB_STATE_TRIGGERS
               if (s, t) not in TABLE]
    assert missing == []


def test_impossible_event_raises_clear_error() -> None:
    with pytest.raises(InvalidTransition, match="job 7: can't verified from staging-in"):
        lookup(S.STAGING_IN, T.VERIFIED, "7")


def _pending_kind_by_state() -> dict[RsaState, set[ActionKind]]:
    """Which tracked action is outstanding on entering each state (from the rows)."""
    out: dict[RsaState, set[ActionKind]] = {}
    for rule in TABLE.values():
        for dst, kinds in [(rule.dst, rule.actions)] + [(b.dst, b.actions)
                                                         for b in rule.branches]:
            for k in kinds:
                if k in TRACKED:
                    out.setdefault(dst, set()).add(k)
    return out


def test_each_state_waits_for_at_most_one_kind_of_action() -> None:
    for state, kinds in _pending_kind_by_state().items():
        assert len(kinds) == 1, (state, kinds)


def test_every_outcome_of_an_outstanding_action_has_a_row() -> None:
    for state, kinds in _pending_kind_by_state().items():
        (kind,) = kinds
        for (k, _result), trig in OUTCOME_TRIGGERS.items():
            if k is kind:
                assert (state, trig) in TABLE, f"{state.value} lacks {trig.value}"


def test_leaving_a_state_with_an_action_running_cancels_it() -> None:
    pending = _pending_kind_by_state()
    outcome_triggers = set(OUTCOME_TRIGGERS.values())
    for rule in TABLE.values():
        if rule.src not in pending or rule.trigger in outcome_triggers:
            continue
        for dst, kinds in [(rule.dst, rule.actions)] + [(b.dst, b.actions)
                                                         for b in rule.branches]:
            if dst is not rule.src:
                assert A.CANCEL in kinds or rule.src in (S.RESETTING, S.INPUT_WRITEBACK,
                                                         S.STAGING_OUT, S.VERIFYING,
                                                         S.TEARING_DOWN), (
                    f"{rule.src.value} --{rule.trigger.value}--> {dst.value} leaks "
                    "its running action")


def test_states_holding_user_data_never_stay_running_actions_cancelled() -> None:
    """A running stage-out/verify/reset/write-back is never cancelled: it may hold data."""
    for rule in TABLE.values():
        if rule.src in (S.RESETTING, S.INPUT_WRITEBACK, S.STAGING_OUT, S.VERIFYING):
            for kinds in [rule.actions] + [b.actions for b in rule.branches]:
                assert A.CANCEL not in kinds, rule


def test_user_data_is_never_destroyed_unverified_statically() -> None:
    allowed = {T.VERIFIED, T.DISCARD, T.WRITEBACK_DONE, T.RESET_ERROR}
    for rule in TABLE.values():
        if rule.src not in HOLDS_USER_DATA:
            continue
        for dst, kinds in [(rule.dst, rule.actions)] + [(b.dst, b.actions)
                                                         for b in rule.branches]:
            if dst in HOLDS_USER_DATA:
                continue
            destroys = A.DESTROY_FS in kinds or dst in (S.TEARING_DOWN, S.RELEASED)
            assert not destroys or rule.trigger in allowed, (rule.src, rule.trigger, dst)


def test_writable_input_is_never_destroyed_before_it_is_written_back() -> None:
    """Issue 35: for a job with ``#RSA_INPUT=rw``, the states that may have the input
    mounted read-write hold user data too; whichever branch a rule takes for such a job
    (its job ended or not, with or without DATA_OUT, any early-start policy), nothing
    destroys the RAMDISK before a write-back or an operator's discard."""
    import itertools

    from rsa_scheduler.core.states import holds_user_data

    allowed = {T.VERIFIED, T.DISCARD, T.WRITEBACK_DONE}
    free = (C.JOB_ENDED, C.NO_OUTPUT, C.POLICY_WAIT, C.POLICY_UNION)
    for rule in TABLE.values():
        if not holds_user_data(rule.src, True) or rule.trigger in allowed:
            continue
        for values in itertools.product((False, True), repeat=len(free)):
            facts = {C.RW_INPUT: True, C.NO_INPUT: False, **dict(zip(free, values,
                                                                      strict=True))}
            dst, kinds = next(((b.dst, b.actions) for b in rule.branches if facts[b.cond]),
                              (rule.dst, rule.actions))
            if holds_user_data(dst, True):
                continue
            destroys = A.DESTROY_FS in kinds or dst in (S.TEARING_DOWN, S.RELEASED)
            assert not destroys, (rule.src.value, rule.trigger.value, dst.value, facts)


def test_every_message_to_users_and_operators_has_text() -> None:
    for rule in TABLE.values():
        for kinds, note in [(rule.actions, rule.note)] + [(b.actions, b.note or rule.note)
                                                          for b in rule.branches]:
            if A.TELL_USER in kinds or A.ALERT in kinds:
                assert note, (rule.src.value, rule.trigger.value)


#: Sections, footnotes and figures that exist in seed 004 (the ROSS'12 paper).
SEED_004_SECTIONS = {"1", "1.1", "2", "2.1", "3", "3.1", "3.2", "3.3", "3.4", "4", "5", "5.1",
                     "5.2", "5.3", "6"}
SEED_004_FOOTNOTES = {"1", "2", "3"}
SEED_004_FIGURES = {"1", "2", "3", "4", "5"}


def _resolved(rule: Rule) -> list[tuple[str, str, str]]:
    """(label, why, ref) for the rule's default and each branch, as the reference shows them."""
    out = [(f"{rule.src.value} {rule.trigger.value}", rule.note, rule.ref)]
    out += [(f"{rule.src.value} {rule.trigger.value} [{br.cond.value}]",
             br.note or rule.note, br.ref or rule.ref) for br in rule.branches]
    return out


def test_every_row_that_does_something_says_why_and_where_in_seed_004() -> None:
    """docs/architecture.md explains each transition with a reference to seed 004 (issue 2);
    our own additions say so with an "ext: ..." reference."""
    no_why, no_ref, bad_ref = [], [], []
    for rule in TABLE.values():
        if rule.is_stay:
            continue
        for label, why, ref in _resolved(rule):
            if not why.strip():
                no_why.append(label)
            if not ref.strip():
                no_ref.append(label)
            elif not (ref.startswith("§") or ref.startswith("ext: ")):
                bad_ref.append(f"{label}: {ref}")
    assert no_why == [], "rows without a note (why)"
    assert no_ref == [], "rows without a seed 004 ref (use 'ext: ...' for our own additions)"
    assert bad_ref == [], "a ref starts with '§N' or 'ext: '"


def test_seed_004_refs_name_places_that_exist_in_the_paper() -> None:
    refs = {ref for rule in TABLE.values() for _label, _why, ref in _resolved(rule) if ref}
    for ref in refs:
        for sec in re.findall(r"§(\d+(?:\.\d+)?)", ref):
            assert sec in SEED_004_SECTIONS, ref
        for fn in re.findall(r"fn\. (\d+)", ref):
            assert fn in SEED_004_FOOTNOTES, ref
        for fig in re.findall(r"Fig\. (\d+)", ref):
            assert fig in SEED_004_FIGURES, ref


def test_operator_discard_only_where_output_is_held() -> None:
    for (src, trig) in TABLE:
        if trig is T.DISCARD:
            assert src in HOLDS_USER_DATA


# ---- every row fired through the machine ---------------------------------------------

def _record_in(rule: Rule, pool: Pool, cond: Cond | None) -> JobRecord:
    """A record sitting in ``rule.src`` whose facts make ``cond`` (or no branch) hold."""
    spec_kw: dict[str, Any] = {}
    job_state = JobState.RUNNING
    if cond is Cond.NO_INPUT:
        spec_kw["data_in"] = None
    elif cond is Cond.NO_OUTPUT:
        spec_kw["data_out"] = None
    elif cond is Cond.RW_INPUT:
        spec_kw["rw"] = True
    elif cond is Cond.POLICY_WAIT:
        spec_kw["early"] = EarlyStart.WAIT
    elif cond is Cond.POLICY_UNION:
        spec_kw["early"] = EarlyStart.UNION
    elif cond is Cond.JOB_ENDED:
        job_state = JobState.FINISHED
    rec = JobRecord(job_id="42", user="alice", spec=make_spec(**spec_kw),
                    compute_nodes=2, job_state=job_state, rsa_state=rule.src, cycle=1)
    if rule.src not in (S.NONE, S.RELEASED, S.DECLINED):
        got = pool.allocate(_request(rec))
        assert got is not None
        rec.nodes = str(got)
    kinds = [k for (k, _result), trig in OUTCOME_TRIGGERS.items() if trig is rule.trigger]
    if kinds:
        rec.pending = make_action(f"42/1/{kinds[0].value}/1")
    return rec


def _request(rec: JobRecord) -> Request:
    return Request(job_id=rec.job_id, compute_nodes=2)


CASES = [(rule, None) for rule in TABLE.values()] + [
    (rule, br.cond) for rule in TABLE.values() for br in rule.branches]


@pytest.mark.parametrize(("rule", "cond"), CASES,
                         ids=[f"{r.src.value}:{r.trigger.value}:{c.value if c else 'default'}"
                              for r, c in CASES])
def test_row(rule: Rule, cond: Cond | None) -> None:
    pool = make_pool()
    policy = StagingPolicy()
    rec = _record_in(rule, pool, cond)
    want_dst, want_kinds, _effects, _note = choose(rule, rec, policy)
    if cond is not None:
        br = next(b for b in rule.branches if b.cond is cond)
        if (want_dst, want_kinds) != (br.dst, br.actions):
            pytest.skip("an earlier branch wins for this record; covered by its own case")
    step = fire(rec, rule.trigger, 100.0, policy, pool)
    follow_ups = {T.NODES_ALLOCATED, T.NODES_BUSY, T.POLICY_VIOLATION, T.GIVE_UP}
    if any(e.context.get("trigger") in {f.value for f in follow_ups} for e in step.events[1:]):
        return  # an effect fed a follow-up trigger; that row has its own case
    assert rec.rsa_state is want_dst
    issued = [a.kind for a in step.actions]
    for kind in want_kinds:
        if kind in (A.CANCEL, A.UNLOCK, A.RELEASE):
            continue  # conditional on what is outstanding / held
        assert kind in issued, (kind, issued)
    tracked = [k for k in want_kinds if k in TRACKED]
    if tracked:
        assert rec.pending is not None and rec.pending.kind is tracked[0]
    if rec.rsa_state in (S.RELEASED, S.DECLINED, S.NONE):
        assert rec.nodes == "" or rule.is_stay
    # Replaying the emitted patch on a copy of the original reproduces the record.


def test_invariant_violation_is_detected_at_runtime() -> None:
    """A (deliberately wrong) rule that destroys unverified output is refused."""
    from rsa_scheduler.core import machine

    pool = make_pool()
    rec = JobRecord(job_id="1", user="u", spec=make_spec(), rsa_state=S.STAGING_OUT,
                    job_state=JobState.FINISHED)
    with pytest.raises(InvariantViolation, match="unverified"):
        machine._check_invariant(rec, S.STAGING_OUT, S.TEARING_DOWN, T.FINISHED,
                                 (A.DESTROY_FS,))
    assert pool.free()
