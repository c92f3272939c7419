"""Maintenance (issue 33): ``rsa admin drain`` stops new RSA jobs while what is in flight
finishes, ``rsa admin resume`` undoes it, both survive a restart; a ``slurm.mode`` switch
under jobs in flight is refused (core/scheduler.py, core/share.py).

On main (6dee349) there was no drain of the whole RSA (only node by node, which a job in
flight did not notice either), and rsad started in another mode under jobs in flight.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from rsa_scheduler.core.actions import ActionKind
from rsa_scheduler.core.payloads import TellUserArgs
from rsa_scheduler.core.policy import EarlyStart
from rsa_scheduler.core.scheduler import Scheduler
from rsa_scheduler.daemon.api import ApiError, Routes
from tests.unit.corekit import Driver, make_pool, make_scheduler, make_spec, obs
from tests.unit.test_daemon import (
    ALICE,
    HOLD,
    ROOT,
    ScriptedSlurm,
    flush_urgent,
    make_daemon,
    released,
    routes,
    settle,
)

__all__ = ["routes"]

pytestmark = pytest.mark.unit


def test_a_drain_holds_new_jobs_off_and_lets_jobs_in_flight_finish() -> None:
    d = Driver(make_scheduler())
    d.observe(obs("10", "PENDING", "Resources", make_spec()))
    d.answer("10")  # built; stage-in outstanding
    d.take(d.sched.set_draining(True, d.now, by="root", reason="upgrade"))
    # held by Slurm for the RSA (job_submit.lua's begin time, judged able to start)
    held = dataclasses.replace(obs("11", "PENDING", "BeginTime",
                                   make_spec(early=EarlyStart.WAIT)), hold_until=1e9, held=True)
    dec = d.observe(obs("10", "PENDING", "Resources", make_spec()), held, at=5)
    assert not d.sched.records["11"].nodes and d.state("11") == "none"
    (told,) = [a.args_as(TellUserArgs).message for a in dec.actions
               if a.kind is ActionKind.TELL_USER and a.job_id == "11"]
    assert told == ("waits for RSA nodes: RSA maintenance (rsa admin drain by root: "
                    "upgrade), until rsa admin resume; held meanwhile, at most "
                    "staging.wait_timeout, then it reads the PFS")
    # the job in flight goes on: staged, locked in, run, staged out, released
    d.answer_all("10")
    d.observe(obs("10", "RUNNING"), obs("11", "PENDING", "Resources",
                                        make_spec(early=EarlyStart.WAIT)), at=10)
    d.answer_all("10")
    d.observe(obs("10", "COMPLETED"), obs("11", "PENDING", "Resources",
                                          make_spec(early=EarlyStart.WAIT)), at=20)
    d.answer_all("10")
    assert d.state("10") == "released" and not d.sched.records["11"].nodes
    # a restart keeps the drain
    again = Scheduler.replay(make_pool(), d.sched.policy, d.log)
    assert again.draining.startswith("RSA maintenance (rsa admin drain by root")
    snap = Scheduler.replay(make_pool(), d.sched.policy, [], base=d.sched.durable_state())
    assert snap.draining == again.draining
    # resumed: the held-off job gets its RSA nodes at the next try
    d.take(d.sched.set_draining(False, 30, by="root"))
    d.tick(31)
    assert d.sched.records["11"].nodes
    assert Scheduler.replay(make_pool(), d.sched.policy, d.log).draining == ""


def test_a_mode_switch_under_jobs_in_flight_is_refused() -> None:
    d = Driver(make_scheduler())
    why, dec = d.sched.mode_switch("queue", 0)
    assert why == "" and [e.name for e in dec.events] == ["rsad.mode"]
    d.take(dec)
    d.observe(obs("10", "PENDING", "Resources", make_spec()), at=1)  # holds RSA nodes
    again = Scheduler.replay(make_pool(), d.sched.policy, d.log)
    why, dec = again.mode_switch("native", 2)
    assert why.startswith("slurm.mode is native but 1 job(s) rsad started in queue mode "
                          "are in flight (10): set slurm.mode back to queue")
    assert not dec.events
    assert again.mode_switch("queue", 2) == ("", dec)  # the same mode: nothing to say


def test_a_mode_switch_with_nothing_in_flight_is_recorded() -> None:
    d = Driver(make_scheduler())
    d.take(d.sched.mode_switch("queue", 0)[1])
    why, dec = Scheduler.replay(make_pool(), d.sched.policy, d.log).mode_switch("native", 1)
    assert why == "" and dec.events[0].context == {"mode": "native"}
    # a log from before the mode was recorded: nothing to compare with
    assert make_scheduler().mode_switch("native", 0)[0] == ""


def test_only_an_operator_may_drain_the_rsa(routes: Routes) -> None:
    with pytest.raises(ApiError, match="only root or SlurmUser may drain the RSA"):
        routes.dispatch(ALICE, "POST", "/v1/admin/drain", {"on": True})
    with pytest.raises(ApiError, match="on must be true or false"):
        routes.dispatch(ROOT, "POST", "/v1/admin/drain", {"on": "yes"})
    out = routes.dispatch(ROOT, "POST", "/v1/admin/drain", {"on": True, "reason": "x"})
    assert out["draining"] == "RSA maintenance (rsa admin drain by root: x), until rsa admin resume"
    assert out["in_flight"] == 1
    assert routes.dispatch(ALICE, "GET", "/v1/status", None)["draining"] == out["draining"]
    assert routes.dispatch(ROOT, "POST", "/v1/admin/drain", {"on": False})["draining"] == ""


def test_a_held_jobs_comment_keeps_the_reason_it_waits(tmp_path: Path) -> None:
    """The start hold's general words ("held until its input is staged ...") never
    replace why a job gets no RSA nodes (a drain here; a limit alike)."""
    slurm = ScriptedSlurm()
    d = make_daemon(tmp_path, slurm, [])
    d._commit(d.sched.set_draining(True, 0, by="root", reason="upgrade"))
    slurm.set("7", "PENDING", "BeginTime", hold=HOLD)
    for _ in range(3):
        d.poll()
        settle(d)
    flush_urgent(d)
    comments = [v for k, v in slurm.calls if k == "comment"]
    assert comments and comments[-1].startswith(
        "RSA: waits for RSA nodes: RSA maintenance (rsa admin drain by root: upgrade)"), comments
    assert not any(c.startswith("RSA: held until its input is staged") for c in comments)
    assert released(slurm) == [] and not d.sched.records["7"].nodes


def test_a_drain_to_the_pfs_declines_new_jobs_and_survives_a_restart() -> None:
    """Issue 33, a clean removal: ``rsa admin drain --pfs`` lets every job that holds no
    RSA nodes run from the PFS now (declined, told why) instead of waiting for a resume
    that will not come; the job in flight still finishes; a restart keeps the drain."""
    d = Driver(make_scheduler())
    d.observe(obs("10", "PENDING", "Resources", make_spec()))
    d.answer("10")  # in flight
    d.take(d.sched.set_draining(True, d.now, by="root", reason="removal", to_pfs=True))
    dec = d.observe(obs("10", "PENDING", "Resources", make_spec()),
                    obs("11", "PENDING", "Resources", make_spec(early=EarlyStart.WAIT)),
                    at=5)
    rec = d.sched.records["11"]
    assert d.state("11") == "declined" and rec.declined and not rec.nodes
    told = [a.args_as(TellUserArgs).message for a in dec.actions
            if a.kind is ActionKind.TELL_USER and a.job_id == "11"]
    assert told and "rsa admin drain --pfs by root: removal" in told[0]
    assert "new jobs run from the PFS" in told[0]
    d.answer_all("10")
    assert d.sched.records["10"].nodes  # the job in flight keeps its RSA nodes
    for again in (Scheduler.replay(make_pool(), d.sched.policy, d.log),
                  Scheduler.replay(make_pool(), d.sched.policy, [],
                                   base=d.sched.durable_state())):
        assert again.share.drain_to_pfs and "drain --pfs" in again.draining
    d.take(d.sched.set_draining(False, 30, by="root"))
    assert not d.sched.share.drain_to_pfs
    assert not Scheduler.replay(make_pool(), d.sched.policy, d.log).share.drain_to_pfs


def test_a_held_job_is_released_to_the_pfs_by_a_drain_to_the_pfs(tmp_path: Path) -> None:
    """The start hold of a job that waited through a plain drain is released once the
    drain goes to the PFS: the job starts now, its comment says why."""
    slurm = ScriptedSlurm()
    d = make_daemon(tmp_path, slurm, [])
    d._commit(d.sched.set_draining(True, 0, by="root", reason="upgrade"))
    slurm.set("7", "PENDING", "BeginTime", hold=HOLD)
    for _ in range(2):
        d.poll()
        settle(d)
    assert released(slurm) == []
    d._commit(d.sched.set_draining(True, 1, by="root", reason="removal", to_pfs=True))
    for _ in range(3):
        d.poll()
        settle(d)
    flush_urgent(d)
    assert [r.split(":")[0] for r in released(slurm)] == ["7"]
    assert d.sched.records["7"].declined
    comments = [v for k, v in slurm.calls if k == "comment"]
    assert any("rsa admin drain --pfs by root: removal" in c for c in comments), comments


def test_the_api_takes_pfs_only_as_a_flag(routes: Routes) -> None:
    with pytest.raises(ApiError, match="pfs must be true or false"):
        routes.dispatch(ROOT, "POST", "/v1/admin/drain", {"on": True, "pfs": "yes"})
    out = routes.dispatch(ROOT, "POST", "/v1/admin/drain", {"on": True, "pfs": True})
    assert "drain --pfs by root" in out["draining"]
