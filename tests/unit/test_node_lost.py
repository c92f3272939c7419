"""An RSA node lost while a job's input is staged (issue 13): the job follows its
early-start policy — under ``wait`` its RAMDISK is torn down and it is staged again on
healthy nodes when it is next; otherwise it reads the PFS. A staged job is left alone."""

from __future__ import annotations

import pytest
from ClusterShell.NodeSet import NodeSet

from rsa_scheduler.core.actions import ActionKind
from rsa_scheduler.core.payloads import TellUserArgs
from rsa_scheduler.core.policy import EarlyStart, NodeState
from rsa_scheduler.core.scheduler import Scheduler
from rsa_scheduler.core.states import RsaState
from tests.unit.corekit import Driver, make_scheduler, make_spec, obs


def staging(early: EarlyStart) -> tuple[Scheduler, Driver, str]:
    """Job 7 on-deck, its RAMDISK built, its stage-in outstanding; returns a held node."""
    sched = make_scheduler(on_deck_settle=0.0, early_start=early)
    d = Driver(sched)
    d.observe(obs("7", "PENDING", "Resources", make_spec(), nodes=2))
    d.answer("7")  # build-fs
    rec = sched.records["7"]
    assert rec.rsa_state is RsaState.STAGING_IN
    return sched, d, next(iter(NodeSet(rec.nodes)))


def test_under_wait_a_lost_node_means_staging_again_on_healthy_nodes() -> None:
    sched, d, lost = staging(EarlyStart.WAIT)
    dec = d.take(sched.set_node_state(lost, NodeState.DOWN, d.now, by="health",
                                      reason="ssh: no route"))
    rec = sched.records["7"]
    assert rec.rsa_state is RsaState.TEARING_DOWN and not rec.declined
    kinds = [a.kind for a in dec.actions]
    assert ActionKind.CANCEL in kinds and ActionKind.DESTROY_FS in kinds
    told = [a.args_as(TellUserArgs).message for a in dec.actions if a.kind is ActionKind.TELL_USER]
    assert told and "staged again on other RSA nodes" in told[0] and lost in told[0]
    d.answer("7")  # destroy-fs (the lost node skipped: daemon side)
    # released, and (still on-deck) allocated again at once, without the lost node
    rec = sched.records["7"]
    assert rec.rsa_state in (RsaState.FS_BUILDING, RsaState.ALLOCATED), rec.rsa_state
    assert lost not in NodeSet(rec.nodes) and rec.cycle == 2


def test_under_fallback_a_lost_node_means_the_pfs() -> None:
    sched, d, lost = staging(EarlyStart.FALLBACK)
    d.take(sched.set_node_state(lost, NodeState.DOWN, d.now, by="health"))
    rec = sched.records["7"]
    assert rec.rsa_state is RsaState.TEARING_DOWN and rec.declined
    assert "the job reads the PFS" in rec.message
    d.answer("7")
    d.observe(obs("7", "PENDING", "Resources", make_spec(), nodes=2), at=d.now + 1)
    rec = sched.records["7"]  # never allocated again
    assert rec.rsa_state in (RsaState.RELEASED, RsaState.DECLINED) and rec.nodes == ""


@pytest.mark.parametrize("state", [NodeState.DRAINED, NodeState.UP])
def test_a_drain_is_not_a_loss(state: NodeState) -> None:
    sched, d, node = staging(EarlyStart.WAIT)
    dec = sched.set_node_state(node, state, d.now, by="operator")
    assert sched.records["7"].rsa_state is RsaState.STAGING_IN and not dec.actions


def test_a_job_whose_input_is_staged_keeps_its_ramdisk() -> None:
    sched, d, node = staging(EarlyStart.WAIT)
    d.answer("7")  # stage-in done -> staged-in, lock-in
    d.answer("7")  # locked
    assert sched.records["7"].rsa_state is RsaState.LOCKED_IN
    dec = sched.set_node_state(node, NodeState.DOWN, d.now, by="health")
    assert sched.records["7"].rsa_state is RsaState.LOCKED_IN and not dec.actions


def test_the_loss_replays_to_the_same_state() -> None:
    sched, d, lost = staging(EarlyStart.WAIT)
    d.take(sched.set_node_state(lost, NodeState.DOWN, d.now, by="health"))
    again = Scheduler.replay(make_scheduler().pool, sched.policy, d.log)
    assert again.snapshot() == sched.snapshot()
    assert again.pool.state(lost) is NodeState.DOWN
