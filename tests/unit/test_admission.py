"""A burst of jobs held for the RSA gets its RAMDISKs too (issue 32, core/admission.py).

On the idle lab (4 compute nodes, 4 RSA nodes, early start ``wait``) 23 of 24 jobs
submitted at once ran from the PFS: all but the first four were judged "busy" (the held
jobs before them counted on the idle nodes), released, and started at once on the nodes
the held ones left idle, with no RSA node free. Now a held job whose RSA nodes are not
free stays held and waits for them in priority order, told why; one Slurm would not start
anyway queues as usual while RSA nodes are left for it. The daemon's side is in
tests/unit/test_daemon.py, the lab's in tests/e2e/test_burst.py.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rsa_scheduler.core.actions import ActionKind
from rsa_scheduler.core.admission import Admission, Candidate, admit
from rsa_scheduler.core.effects import NO_FREE_NODES
from rsa_scheduler.core.payloads import TellUserArgs
from rsa_scheduler.core.policy import EarlyStart, NodeState
from rsa_scheduler.core.scheduler import Decision, Observation
from rsa_scheduler.core.states import RsaState
from rsa_scheduler.daemon.dispatch import COMMENT_MAX
from tests.unit.corekit import Driver, make_pool, make_scheduler, make_spec, obs

pytestmark = pytest.mark.unit

S, W, Q = Admission.START, Admission.WAIT, Admission.QUEUE
HOLD = 1e9  # the hold marker's deadline (job_submit.lua: submit time + wait_timeout)


def held(job: str, priority: int = 100, early: EarlyStart | None = None,
         nodes: int = 2) -> Observation:
    """A job Slurm holds for the RSA, judged to wait on-deck (starthold: START or WAIT)."""
    o = obs(job, "PENDING", "BeginTime", make_spec(early=early), nodes=nodes,
            priority=priority)
    return dataclasses.replace(o, hold_until=HOLD, held=True)


def told(dec: Decision, job: str) -> list[str]:
    return [a.args_as(TellUserArgs).message for a in dec.actions
            if a.kind is ActionKind.TELL_USER and a.job_id == job]


# ---- admit: the decision alone ------------------------------------------------------------

def test_jobs_slurm_would_start_now_stay_held_whatever_the_rsa_has() -> None:
    jobs = [Candidate(str(n), True, 1) for n in range(24)]
    assert set(admit(jobs, 4).values()) == {S}
    assert set(admit(jobs, 0).values()) == {S}


def test_a_busy_job_queues_while_rsa_nodes_are_left_for_it_else_waits_held() -> None:
    jobs = [Candidate("1", True, 2), Candidate("2", False, 1), Candidate("3", False, 2),
            Candidate("4", False, 1), Candidate("5", False, 0)]
    # 1 takes 2 of 4; 2 queues (1 of 2 left, takes none); 3 needs 2: left; 4 too
    assert admit(jobs, 4) == {"1": S, "2": Q, "3": Q, "4": Q, "5": Q}
    # 1 takes the 2 left; 2 and 4 find none: held, waiting (4 after 3, which took 2 more)
    assert admit(jobs, 2) == {"1": S, "2": W, "3": W, "4": W, "5": Q}
    # what the on-deck jobs already waiting need comes first (rsa_free can be < 0)
    assert admit(jobs, -3) == {"1": S, "2": W, "3": W, "4": W, "5": Q}
    assert S.held and W.held and not Q.held


candidates = st.lists(st.tuples(st.booleans(), st.integers(0, 4)), max_size=12).map(
    lambda xs: [Candidate(str(i), fits, need) for i, (fits, need) in enumerate(xs)])


@settings(max_examples=300, deadline=None)
@given(jobs=candidates, free=st.integers(-4, 12), more=st.integers(0, 8))
def test_admission_properties(jobs: list[Candidate], free: int, more: int) -> None:
    got = admit(jobs, free)
    assert set(got) == {c.job_id for c in jobs}  # every job judged, once
    left = free
    for c in jobs:
        # a job Slurm would start now is never let go (it would read the PFS); a busy
        # one queues exactly when what the held jobs before it left covers its need
        assert (got[c.job_id] is S) == c.fits
        if not c.fits:
            assert (got[c.job_id] is Q) == (c.need <= max(left, 0))
        if got[c.job_id].held:
            left -= c.need
    # priority order: no busy job waits while one after it needing no more is let go
    for i, a in enumerate(jobs):
        for b in jobs[i + 1:]:
            if got[a.job_id] is W and got[b.job_id] is Q:
                assert b.need < a.need
    # more free RSA nodes never make a job wait that did not
    richer = admit(jobs, free + more)
    assert {j for j, v in richer.items() if v is W} <= {j for j, v in got.items() if v is W}


# ---- the core: held jobs wait for RSA nodes in priority order, told why ----------------------

def test_a_burst_of_held_jobs_waits_for_rsa_nodes_in_priority_order() -> None:
    """24 held jobs, 4 RSA nodes (one each): four get theirs, the others wait, each told
    once why; as RSA nodes come back the next in priority order gets them; none is
    declined while it waits."""
    d = Driver(make_scheduler(make_pool(n_ram=4)))
    jobs = [held(str(n), priority=1000 - n) for n in range(1, 25)]
    dec = d.observe(*jobs)
    holders = {j for j, r in d.sched.records.items() if r.nodes}
    assert holders == {"1", "2", "3", "4"}
    for n in range(5, 25):
        (msg,) = told(dec, str(n))
        assert msg == (f"waits for RSA nodes: {NO_FREE_NODES}; held meanwhile, at most "
                       "staging.wait_timeout, then it reads the PFS")
        assert len(f"RSA: {msg}") <= COMMENT_MAX  # the job's comment holds it whole
        assert d.sched.records[str(n)].message == msg
    assert not told(d.tick(5), "5")  # told once: the next cycles retry quietly
    # job 1 is cancelled before it ran: its RSA node goes to job 5, the next in order
    d.observe(dataclasses.replace(jobs[0], state="CANCELLED", reason="None"), *jobs[1:],
              at=10)
    d.answer_all("1")
    d.tick(11)
    holders = {j for j, r in d.sched.records.items() if r.nodes}
    assert holders == {"2", "3", "4", "5"}
    assert not any(r.rsa_state is RsaState.DECLINED for r in d.sched.records.values())


def test_a_job_slurm_does_not_hold_finds_no_rsa_node_quietly_as_before() -> None:
    """Not held (a busy cluster: queued as usual, on-deck on Resources): nothing is said
    of a wait it may not get (if it starts first it reads the PFS, and is told so then)."""
    d = Driver(make_scheduler(make_pool(n_ram=1)))
    dec = d.observe(obs("1", "PENDING", "Resources", make_spec(), priority=9),
                    obs("2", "PENDING", "Resources", make_spec(), priority=8))
    assert d.sched.records["1"].nodes and not told(dec, "2")
    assert d.sched.records["2"].message == ""


def test_a_limit_says_held_only_of_a_job_slurm_holds() -> None:
    """A limit's (or a drain's) message says "held meanwhile" only when Slurm holds the
    job; on-deck without a hold, it may start first and read the PFS."""
    d = Driver(make_scheduler(make_pool(n_ram=4)))
    d.take(d.sched.set_draining(True, 0.0, by="root"))
    dec = d.observe(held("1", early=EarlyStart.WAIT),
                    obs("2", "PENDING", "Resources", make_spec(early=EarlyStart.WAIT)))
    (one,) = told(dec, "1")
    (two,) = told(dec, "2")
    assert one.endswith("; held meanwhile, at most staging.wait_timeout, then it reads the PFS")
    assert two.endswith("; if it starts first, it reads the PFS")


def test_rsa_free_counts_what_the_waiting_jobs_need_and_nothing_during_a_drain() -> None:
    sched = make_scheduler(make_pool(n_ram=4))
    d = Driver(sched)
    assert sched.rsa_free() == 4
    # three 2-node jobs on 4 RSA nodes with ratio 2: one each; a 6-node job needs 3
    d.observe(held("1"), held("2"), held("3"), held("4", nodes=6))
    assert {j for j, r in sched.records.items() if r.nodes} == {"1", "2", "3"}
    assert sched.rsa_free() == 1 - 3  # 1 free, job 4 waits for 3
    assert sched.rsa_need("9", 2, make_spec()) == 1
    assert sched.rsa_need("9", 2, dataclasses.replace(make_spec(), nodes=99)) == 0
    assert sched.rsa_need("9", 2, None) == 0
    sched.set_node_state("rsa4", NodeState.DRAINED, 1.0, by="root")
    d.take(sched.set_draining(True, 1.0, by="root"))
    assert sched.rsa_free() == 0
