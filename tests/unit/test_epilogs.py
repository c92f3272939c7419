"""core/epilogs.py: which nodes' Epilogs rsad must still wait for, from what it heard and
what Slurm says (pure)."""

from __future__ import annotations

import pytest

from rsa_scheduler.core.epilogs import (
    EpilogWait,
    epilogs_left,
    slurm_due,
    slurm_holds,
    unconfirmed_words,
)
from rsa_scheduler.daemon.wiring import slurm_nodes
from rsa_scheduler.slurm.parse import JobNodesRow
from rsa_scheduler.slurm.port import SlurmError

pytestmark = pytest.mark.unit


def test_a_running_or_completing_job_holds_its_listed_nodes() -> None:
    assert slurm_holds([("RUNNING", "c[1-2]")]) == frozenset({"c1", "c2"})
    # COMPLETING lists only the nodes that have not finished the job (squeue(1) %N)
    assert slurm_holds([("COMPLETING", "c2")]) == frozenset({"c2"})
    for state in ("SUSPENDED", "CONFIGURING", "STOPPED", "SIGNALING", "RESIZING"):
        assert slurm_holds([(state, "c3")]) == frozenset({"c3"}), state


def test_a_pending_finished_or_forgotten_job_holds_no_node() -> None:
    for state in ("PENDING", "REQUEUED", "COMPLETED", "CANCELLED", "TIMEOUT", "FAILED",
                  "NODE_FAIL", "OUT_OF_MEMORY", "STAGE_OUT", "CANCELLED by 1001"):
        assert slurm_holds([(state, "c1")]) == frozenset(), state
    assert slurm_holds([]) == frozenset()  # purged after MinJobAge: done everywhere


def test_a_hetjob_holds_every_components_nodes() -> None:
    assert slurm_holds([("COMPLETING", "c1"), ("RUNNING", "c[3-4]"),
                        ("COMPLETED", "c2")]) == frozenset({"c1", "c3", "c4"})


def test_an_unknown_state_or_node_list_confirms_nothing() -> None:
    assert slurm_holds([("RUNNING", "c1"), ("WEIRD_NEW_STATE", "c2")]) is None
    assert slurm_holds([("", "c1")]) is None
    assert slurm_holds([("RUNNING", "c[1-")]) is None


def test_a_silent_agent_is_no_epilog() -> None:
    """The decision the old code got wrong: c2 recorded as holding the mount, no agent,
    no Epilog heard. Only Slurm's word makes it done."""
    holders = {"c1", "c2"}
    assert epilogs_left(holders, {"c1"}, None) == EpilogWait(frozenset({"c2"}), frozenset())
    assert epilogs_left(holders, {"c1"}, frozenset({"c2"})) == \
        EpilogWait(frozenset({"c2"}), frozenset())
    assert epilogs_left(holders, {"c1"}, frozenset()) == \
        EpilogWait(frozenset(), frozenset({"c2"}))
    # a node Slurm has the job on (a requeued run's) but whose Epilog rsad heard is done
    assert epilogs_left(holders, {"c1", "c2"}, frozenset({"c1"})).waiting == frozenset()


def test_slurm_is_asked_again_every_few_seconds() -> None:
    assert slurm_due(None, 100.0)
    assert not slurm_due(100.0, 104.0, 5.0)
    assert slurm_due(100.0, 105.0, 5.0)


def test_why_a_node_is_not_confirmed_is_said_truly() -> None:
    assert unconfirmed_words(None) == "Slurm could not be asked whether it ran"
    assert unconfirmed_words(frozenset({"c2"})) == "Slurm still has the job there"


class Placed:
    """A Slurm port's ``job_nodes`` (slurm.port.JobPlaces) answering from a table, or
    failing as an unreachable slurmctld does."""

    def __init__(self, rows: dict[str, list[JobNodesRow]] | None) -> None:
        self.rows = rows
        self.asked: list[str] = []

    def job_nodes(self, job_id: str) -> list[JobNodesRow]:
        self.asked.append(job_id)
        if self.rows is None:
            raise SlurmError("Slurm command failed: squeue ...: timed out after 30s")
        return self.rows.get(job_id, [])


def test_rsad_asks_its_slurm_port_where_the_job_still_is() -> None:
    port = Placed({"7": [JobNodesRow("7", "COMPLETING", "c2")]})
    assert slurm_nodes(port, "7") == frozenset({"c2"})
    assert slurm_nodes(port, "8") == frozenset()
    assert port.asked == ["7", "8"]
    # slurmctld unreachable, or a port that cannot say: nothing is confirmed
    assert slurm_nodes(Placed(None), "7") is None
    assert slurm_nodes(object(), "7") is None
