"""A lock-in always ends (issue 39): the core's rules and the restore's bookkeeping.

Every way out of the lock-in states restores the job's own QOS / priority (its start
included); the restore is a tracked action, retried with backoff, alerted when it keeps
failing, re-issued after a restart; a locked-in job that does not start within the bound
is unlocked and its RSA nodes freed; a change in Slurm ends the lock-in.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from rsa_scheduler.core.actions import ActionKind, Outcome, Result
from rsa_scheduler.core.machine import UNLOCK_DELAY, unlock_delay
from rsa_scheduler.core.payloads import MessageArgs
from rsa_scheduler.core.rows_prerun import rows
from rsa_scheduler.core.scheduler import Decision, Observation, Scheduler
from rsa_scheduler.core.states import READY, RsaState, Trigger
from tests.unit.corekit import Driver, make_pool, make_scheduler, make_spec, obs

pytestmark = pytest.mark.unit


def kinds(dec: Decision) -> list[str]:
    return [a.kind.value for a in dec.actions]


def to_locked_in(d: Driver, job: str = "10", **kw: object) -> None:
    d.observe(obs(job, "PENDING", "Resources", make_spec(**kw)))  # type: ignore[arg-type]
    for _ in range(3):  # build, stage in (unless no input), lock in
        if d.state(job) == "locked-in":
            return
        d.answer(job)
    assert d.state(job) == "locked-in"


def answer_unlock(d: Driver, job: str, result: Result = Result.OK,
                  msg: str = "") -> Decision:
    rec = d.sched.records[job]
    assert rec.unlock is not None, f"job {job}: no restore outstanding"
    d.now += 1
    return d.take(d.sched.outcome(Outcome(rec.unlock.id, result, msg), d.now))


# ---- the table ------------------------------------------------------------------------

def test_every_way_out_of_a_lock_in_restores_the_jobs_own_qos() -> None:
    """On d0d1991 a locked-in job that started, or was cancelled, kept rsa-lockin."""
    missing = []
    for rule in rows():
        if rule.src not in READY:
            continue
        outs = [(rule.dst, rule.actions, "")] + [(b.dst, b.actions, b.cond.value)
                                                   for b in rule.branches]
        for dst, actions, cond in outs:
            if dst not in READY and ActionKind.UNLOCK not in actions:
                missing.append(f"{rule.src.value} --{rule.trigger.value}{cond}--> {dst.value}")
    assert missing == []


# ---- the start, and the restore as a tracked action -----------------------------------

def test_the_lock_in_ends_when_the_job_starts() -> None:
    d = Driver(make_scheduler())
    to_locked_in(d)
    dec = d.observe(obs("10", "RUNNING"), at=50)
    assert kinds(dec) == ["unlock", "mount-input"]
    rec = d.sched.records["10"]
    assert rec.locked and rec.unlock is not None and rec.pending is not None
    assert rec.pending.kind is ActionKind.MOUNT_INPUT  # both outstanding at once
    assert rec.unlock in d.sched.outstanding()  # re-issued after a restart
    answer_unlock(d, "10")
    assert not rec.locked and rec.unlock is None
    # replay of the log gives the same record
    again = Scheduler.replay(make_pool(), d.sched.policy, d.log)
    assert again.snapshot() == d.sched.snapshot()


def test_a_failed_restore_is_retried_with_backoff_and_alerted() -> None:
    d = Driver(make_scheduler(retries=2))
    to_locked_in(d)
    d.observe(obs("10", "RUNNING"), at=50)
    first = d.sched.records["10"].unlock
    assert first is not None
    dec = answer_unlock(d, "10", Result.FAILED, "slurmctld timed out")
    assert kinds(dec) == []  # once: no alert yet
    rec = d.sched.records["10"]
    due = rec.timers[Trigger.UNLOCK_DUE.value]
    assert due == d.now + UNLOCK_DELAY and rec.locked
    assert rec.unlock not in d.sched.outstanding()  # waiting for its timer
    assert kinds(d.tick(due - 0.5)) == []
    dec = d.tick(due)
    assert kinds(dec) == ["unlock"] and dec.actions[0].id != first.id
    dec = answer_unlock(d, "10", Result.FAILED, "slurmctld timed out")
    assert kinds(dec) == ["alert"]
    assert "could not be restored" in dec.actions[0].args_as(MessageArgs).message
    assert rec.timers[Trigger.UNLOCK_DUE.value] == d.now + unlock_delay(2)
    # it goes on until it is done: a lock-in always ends
    d.tick(rec.timers[Trigger.UNLOCK_DUE.value])
    answer_unlock(d, "10")
    assert not rec.locked and Trigger.UNLOCK_DUE.value not in rec.timers
    again = Scheduler.replay(make_pool(), d.sched.policy, d.log)
    assert again.snapshot() == d.sched.snapshot()


def test_a_restore_of_a_job_slurm_no_longer_has_ends_the_lock_in() -> None:
    d = Driver(make_scheduler())
    to_locked_in(d)
    d.observe(obs("10", "CANCELLED"), at=50)
    answer_unlock(d, "10", Result.REFUSED, "job 10 is no longer in Slurm's queue")
    assert not d.sched.records["10"].locked


@pytest.mark.parametrize("how", ["demoted", "cancel-staging", "finished", "requeued"])
def test_every_exit_restores(how: str) -> None:
    d = Driver(make_scheduler())
    to_locked_in(d)
    if how == "demoted":
        dec = d.observe(obs("10", "PENDING", "Priority"), at=50)
    elif how == "cancel-staging":
        dec = d.take(d.sched.command("10", Trigger.CANCEL_STAGING, 50, by="alice",
                                     operator=False))
    elif how == "finished":
        dec = d.observe(obs("10", "CANCELLED"), at=50)
    else:  # started, then requeued by its owner (scontrol requeue): pending again
        d.observe(obs("10", "RUNNING"), at=50)
        answer_unlock(d, "10")
        d.answer_all("10")
        dec = d.observe(obs("10", "PENDING", "BeginTime"), at=60)
        assert "unlock" not in kinds(dec)  # restored when it started
        assert not d.sched.records["10"].locked
        return
    assert "unlock" in kinds(dec)
    assert d.sched.records["10"].locked  # until the restore is done


def test_a_restore_racing_the_lock_in_is_issued() -> None:
    """`rsa cancel-staging` while LOCK_IN runs: the restore is issued too (the dispatcher
    runs it after the lock-in, with the job's own QOS the lock-in recorded)."""
    d = Driver(make_scheduler())
    d.observe(obs("10", "PENDING", "Resources", make_spec()))
    d.answer("10")
    d.answer("10")
    assert d.state("10") == "staged-in"
    dec = d.take(d.sched.command("10", Trigger.CANCEL_STAGING, 5, by="alice", operator=False))
    assert kinds(dec)[:2] == ["cancel", "unlock"]


def test_a_new_lock_in_supersedes_a_restore_still_retrying() -> None:
    d = Driver(make_scheduler())
    to_locked_in(d)
    d.observe(obs("10", "PENDING", "Priority"), at=50)
    answer_unlock(d, "10", Result.FAILED, "timeout")
    d.answer_all("10")  # torn down
    assert d.sched.records["10"].timers.get(Trigger.UNLOCK_DUE.value)
    # on-deck again (a new cycle) before the retry: staged, locked in again
    d.observe(obs("10", "PENDING", "Resources"), at=52)
    for _ in range(3):
        if d.state("10") == "staged-in":
            break
        d.answer("10")
    rec = d.sched.records["10"]
    assert d.state("10") == "staged-in" and rec.locked
    assert rec.unlock is None and Trigger.UNLOCK_DUE.value not in rec.timers


# ---- the bound ------------------------------------------------------------------------

def test_a_locked_in_job_that_does_not_start_is_unlocked_after_the_bound() -> None:
    """On d0d1991 a locked-in job that could not start kept its RSA nodes forever."""
    d = Driver(make_scheduler(lockin_timeout=600))
    d.observe(obs("10", "PENDING", "Resources", make_spec()), at=0)
    d.answer("10")
    d.answer("10")  # staged in at t=2: the bound starts with the lock-in
    d.answer("10")
    assert d.state("10") == "locked-in"
    rec = d.sched.records["10"]
    assert rec.timers[Trigger.LOCKIN_EXPIRED.value] == 602
    d.observe(obs("10", "PENDING", "Resources"), at=300)
    assert kinds(d.tick(601)) == []
    dec = d.tick(602)
    assert kinds(dec) == ["tell-user", "unlock", "destroy-fs"]
    assert "slurm.lockin.timeout" in dec.actions[0].args_as(MessageArgs).message
    assert d.state("10") == "tearing-down" and rec.declined
    d.answer_all("10")
    answer_unlock(d, "10")
    assert d.state("10") == "declined" and not rec.nodes and not rec.locked
    assert not d.sched.pool.holding("10")
    # still pending on Resources: it is not staged again (it reads the PFS)
    assert kinds(d.observe(obs("10", "PENDING", "Resources"), at=700)) == []


def test_a_retried_lock_in_keeps_the_bound_of_the_first() -> None:
    d = Driver(make_scheduler(lockin_timeout=600))
    d.observe(obs("10", "PENDING", "Resources", make_spec()), at=0)
    d.answer("10")
    d.answer("10")
    d.answer("10", Result.FAILED, "slurmctld busy")
    assert d.state("10") == "lock-failed"
    due = d.sched.records["10"].timers[Trigger.LOCKIN_EXPIRED.value]
    d.now = 100
    d.take(d.sched.command("10", Trigger.RETRY, 100, by="root", operator=True))
    assert d.sched.records["10"].timers[Trigger.LOCKIN_EXPIRED.value] == due


def test_no_bound_when_it_is_zero() -> None:
    d = Driver(make_scheduler(lockin_timeout=0))
    to_locked_in(d)
    assert Trigger.LOCKIN_EXPIRED.value not in d.sched.records["10"].timers


def test_a_started_job_drops_the_bound() -> None:
    d = Driver(make_scheduler(lockin_timeout=600))
    to_locked_in(d)
    d.observe(obs("10", "RUNNING"), at=50)
    assert Trigger.LOCKIN_EXPIRED.value not in d.sched.records["10"].timers
    assert d.sched.records["10"].rsa_state is RsaState.MOUNTING_INPUT


def test_the_policy_refuses_a_negative_bound() -> None:
    with pytest.raises(ValueError, match="lockin_timeout"):
        replace(make_scheduler().policy, lockin_timeout=-1)


# ---- method qos: Slurm changes no running job's QOS ------------------------------------

def test_a_restore_slurm_refuses_while_the_job_runs_is_done_when_it_is_requeued() -> None:
    """A job that requeues itself (scontrol requeue, as its owner may) must not come back
    to the queue locked in: on d0d1991 it did, and its next lock-in recorded rsa-lockin as
    its own QOS."""
    d = Driver(make_scheduler())
    to_locked_in(d)
    d.observe(obs("10", "RUNNING"), at=50)
    dec = answer_unlock(d, "10", Result.BUSY, "Slurm changes no running job's QOS")
    rec = d.sched.records["10"]
    assert kinds(dec) == [] and rec.locked and rec.unlock is None
    assert Trigger.UNLOCK_DUE.value not in rec.timers  # no polling while it runs
    d.answer_all("10")
    # requeued: pending again, the owed restore at once
    dec = d.observe(obs("10", "PENDING", "BeginTime"), at=60)
    assert "unlock" in kinds(dec) and rec.unlock is not None
    answer_unlock(d, "10")
    assert not rec.locked
    again = Scheduler.replay(make_pool(), d.sched.policy, d.log)
    assert again.snapshot() == d.sched.snapshot()


def test_a_restore_owed_to_a_job_that_ends_running_is_moot() -> None:
    d = Driver(make_scheduler())
    to_locked_in(d)
    d.observe(obs("10", "RUNNING"), at=50)
    answer_unlock(d, "10", Result.BUSY, "running")
    dec = d.observe(obs("10", "COMPLETED"), at=90)
    assert "unlock" in kinds(dec)
    answer_unlock(d, "10", Result.REFUSED, "job 10 has ended: nothing to restore")
    assert not d.sched.records["10"].locked


# ---- a change in Slurm ends the lock-in ------------------------------------------------

def shaped(state: str, reason: str = "None", *, partition: str = "debug",
           limit: str = "5:00", nodes: int = 2, spec: object = None) -> Observation:
    return replace(obs("10", state, reason, spec, nodes=nodes),  # type: ignore[arg-type]
                   partition=partition, time_limit=limit)


@pytest.mark.parametrize(("change", "said"), [
    ({"partition": "big"}, "partition debug -> big"),
    ({"limit": "1-00:00:00"}, "time limit 5:00 -> 1-00:00:00"),
    ({"nodes": 8}, "nodes 2 -> 8"),
])
def test_a_change_to_a_locked_in_job_ends_its_lock_in_and_it_is_judged_again(
        change: dict[str, Any], said: str) -> None:
    """On d0d1991 a locked-in job moved to another partition kept its lock-in there."""
    d = Driver(make_scheduler())
    d.observe(shaped("PENDING", "Resources", spec=make_spec()))
    for _ in range(3):
        d.answer("10")
    assert d.state("10") == "locked-in"
    d.now = 40
    dec = d.observe(shaped("PENDING", "Resources", **change), at=40)
    assert kinds(dec) == ["tell-user", "unlock", "destroy-fs"]
    assert said in dec.actions[0].args_as(MessageArgs).message
    rec = d.sched.records["10"]
    assert not rec.declined
    answer_unlock(d, "10")
    assert not rec.locked
    # judged again: still next to start, so staged again (for what it asks now)
    dec = d.answer("10")  # destroyed
    assert kinds(dec)[:3] == ["release", "allocate", "build-fs"] and rec.cycle == 2
    assert rec.compute_nodes == change.get("nodes", 2)


def test_an_observation_that_does_not_say_is_no_change() -> None:
    d = Driver(make_scheduler())
    to_locked_in(d)
    d.observe(shaped("PENDING", "Resources"), at=30)
    d.observe(replace(shaped("PENDING", "None"), partition="", time_limit=""), at=31)
    assert d.state("10") == "locked-in"
    d.observe(shaped("PENDING", "Resources", nodes=1), at=32)  # fewer nodes: still served
    assert d.state("10") == "locked-in"
