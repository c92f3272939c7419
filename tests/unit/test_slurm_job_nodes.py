"""Where Slurm still has a job (``CliSlurm.job_nodes``, ``parse_job_nodes``,
``core.epilogs.slurm_holds``), on real Slurm 24.11 output captured in the lab by
``tests/e2e/test_late_write.py::test_a_node_whose_agent_died_before_an_rsad_restart_is_waited_for``
(``RSA_NODES_CAPTURE``; tests/data/slurm/24.11/README.md): a two-node job pending, running,
cancelled while one node's task still wrote for 3.5 s (COMPLETING there alone), ended;
and a job id slurmctld has no record of."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from rsa_scheduler.core.epilogs import slurm_holds
from rsa_scheduler.runner import CommandError, Completed
from rsa_scheduler.slurm.cli import CliSlurm, job_nodes_argv
from rsa_scheduler.slurm.parse import (
    JOB_NODES_FORMAT,
    JobNodesRow,
    ParseError,
    parse_job_nodes,
)
from rsa_scheduler.slurm.port import JobPlaces, SlurmError

pytestmark = pytest.mark.unit

DATA = Path(__file__).parent.parent / "data" / "slurm" / "24.11"


def captured() -> tuple[dict[str, str], list[str]]:
    """The capture's facts (job, victim node, nodes) and each distinct squeue output
    from just before the cancel until the job had ended, in order."""
    env = dict(line.split("=", 1) for line in (DATA / "job_nodes.env").read_text().split())
    text = (DATA / "squeue_job_nodes_ending.txt").read_text()
    outputs = [chunk.split("\n", 1)[1] for chunk in text.split("=== ")[1:]]
    return env, outputs


def holds(text: str, job: str) -> frozenset[str] | None:
    return slurm_holds((r.state, r.nodes) for r in parse_job_nodes(text, job))


def test_the_format_names_no_field_a_user_chose() -> None:
    assert JOB_NODES_FORMAT == "JobArrayID:0|,State:0|,NodeList:0|"
    assert job_nodes_argv(Path("/usr/bin"), "5") == [
        "/usr/bin/squeue", "-h", "-t", "all", "-j", "5", "-O", JOB_NODES_FORMAT]


def test_a_completing_job_lists_only_the_nodes_still_ending_it() -> None:
    """The case rsad relies on: after the cancel, the node whose task wrote on for 3.5 s
    (``VICTIM``) is the only one Slurm still lists while the job is COMPLETING; the
    other's Epilog had run."""
    env, outputs = captured()
    job, victim = env["JOB"], env["VICTIM"]
    nodes = frozenset(env["NODES"].split(","))
    rows = [parse_job_nodes(text, job) for text in outputs]
    assert [[r.state for r in rs] for rs in rows] == [
        ["RUNNING"], ["COMPLETING"], ["COMPLETING"], ["CANCELLED"]]
    assert [holds(text, job) for text in outputs] == [
        nodes, nodes, frozenset({victim}), frozenset()]
    # an ended job still names its nodes: they hold nothing of it
    assert rows[-1] == [JobNodesRow(job, "CANCELLED", "c[1-2]")]


def test_a_pending_or_running_job() -> None:
    env, _ = captured()
    job = env["JOB"]
    pending = (DATA / "squeue_job_nodes_pending.txt").read_text()
    assert parse_job_nodes(pending, job) == [JobNodesRow(job, "PENDING", "")]
    assert holds(pending, job) == frozenset()
    running = (DATA / "squeue_job_nodes_running.txt").read_text()
    assert holds(running, job) == frozenset(env["NODES"].split(","))
    # another job's line is not this job's; a hetjob's components are
    assert parse_job_nodes(running, "55") == []
    het = "7+0|COMPLETING|c1|\n7+1|RUNNING|c[3-4]|\n"
    assert holds(het, "7") == frozenset({"c1", "c3", "c4"})


def test_a_line_of_another_shape_is_refused() -> None:
    for text in ("5|RUNNING\n", "garbage|RUNNING|c1|\n", "5||c1|\n",
                 "5|RUNNING|c1|extra|\n"):
        with pytest.raises(ParseError):
            parse_job_nodes(text, "5")


class Squeue:
    """The runner seam, answering the one squeue call as the lab's Slurm did."""

    def __init__(self, returncode: int, stdout: str, stderr: str = "",
                 timed_out: bool = False) -> None:
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr
        self.timed_out = timed_out

    def __call__(self, argv: Sequence[str], *, timeout: float, check: bool = True,
                 input: str | None = None, as_user: object = None,
                 env: Mapping[str, str] | None = None, cwd: str | None = None) -> Completed:
        if self.timed_out:
            raise CommandError(argv, None, "", timeout=timeout)
        if self.returncode != 0:
            raise CommandError(argv, self.returncode, self.stderr)
        return Completed(tuple(argv), 0, self.stdout, self.stderr, 0.01)


def test_a_job_slurmctld_no_longer_knows_is_on_no_node() -> None:
    """squeue's answer for a job id slurmctld has no record of (captured): exit 1,
    ``slurm_load_jobs error: Invalid job id specified``. slurmctld purges a job's record
    only once every node finished it: no row. Any other failure is Slurm unreadable."""
    said = (DATA / "squeue_job_nodes_unknown.txt").read_text()
    assert said.startswith("exit 1\n")
    stderr = said.split("stderr:\n", 1)[1]
    gone = CliSlurm(runner=Squeue(1, "", stderr))
    assert isinstance(gone, JobPlaces)
    assert gone.job_nodes("99999999") == []
    for broken in (Squeue(1, "", "slurm_load_jobs error: Unable to contact slurm "
                                 "controller (connect failure)\n"),
                   Squeue(0, "", timed_out=True)):
        with pytest.raises(SlurmError):
            CliSlurm(runner=broken).job_nodes("5")
    env, _ = captured()
    running = (DATA / "squeue_job_nodes_running.txt").read_text()
    assert CliSlurm(runner=Squeue(0, running)).job_nodes(env["JOB"]) == [
        JobNodesRow(env["JOB"], "RUNNING", "c[1-2]")]
