"""Slurm output parsers, on output captured from the lab's real Slurm 22.05."""

from __future__ import annotations

from pathlib import Path

import pytest

from rsa_scheduler.core.directives import DirectiveSpec
from rsa_scheduler.core.states import JobState, derive_job_state
from rsa_scheduler.slurm.cli import batch_script_argv, squeue_argv, update_argv
from rsa_scheduler.slurm.parse import QUEUE_FORMAT, ParseError, parse_queue, parse_show_job

DATA = Path(__file__).parent.parent / "data" / "slurm"


def test_queue_format_is_one_call_with_admin_comment_last() -> None:
    argv = squeue_argv(Path("/usr/bin"))
    assert argv[:6] == ["/usr/bin/squeue", "-h", "-r", "-t", "all", "-O"]
    assert argv[6] == QUEUE_FORMAT and QUEUE_FORMAT.endswith("admin_comment:0|")


def test_parse_captured_queue() -> None:
    rows = {r.job_id: r for r in parse_queue((DATA / "squeue_rsa.txt").read_text())}
    assert sorted(rows) == ["1", "2", "3", "4", "5", "6", "7", "8_1", "8_2", "8_3"]
    five = rows["5"]
    assert (five.state, five.reason, five.priority, five.num_nodes, five.user) == (
        "PENDING", "Resources", 1, 1, "rsauser")
    spec = DirectiveSpec.from_admin_comment(five.admin_comment or "")
    assert spec.data_in == "/pfs/home/rsauser/in" and spec.data_out == "/pfs/x|y"
    assert rows["7"].num_nodes == 2 and rows["7"].admin_comment is None
    assert rows["1"].state == "RUNNING"


def test_captured_demotion_and_lockin() -> None:
    before = {r.job_id: r for r in parse_queue((DATA / "squeue_rsa.txt").read_text())}
    after = {r.job_id: r for r in parse_queue((DATA / "squeue_rsa_2.txt").read_text())}
    js = {j: derive_job_state(None, r.state, r.reason) for j, r in before.items()}
    assert js["5"] is JobState.ON_DECK
    js2 = {j: derive_job_state(js.get(j), r.state, r.reason) for j, r in after.items()}
    assert js2["5"] is JobState.DEMOTED and js2["6"] is JobState.ON_DECK
    assert js2["7"] is JobState.QUEUED  # held, never on-deck
    assert after["8_2"].priority == 100000


def test_every_captured_job_state_is_known() -> None:
    """Each Slurm state and reason in the captures maps to a job-state."""
    for name in ("squeue_basic.txt", "squeue_all_states.txt"):
        for line in (DATA / name).read_text().splitlines():
            _id, state, reason = line.split("|")[:3]
            derive_job_state(None, state, reason)


def test_multiline_admin_comment_is_joined() -> None:
    rows = parse_queue("5|PENDING|Resources|1|1|u|first\nsecond|\n6|RUNNING|None|1|1|u|(null)|\n")
    assert rows[0].admin_comment == "first\nsecond" and rows[1].admin_comment is None


@pytest.mark.parametrize("text", ["garbage\n", "5|PENDING|Resources|x|1|u|(null)|\n"])
def test_bad_queue_output_is_a_parse_error(text: str) -> None:
    with pytest.raises(ParseError, match="squeue line"):
        parse_queue(text)


def test_parse_show_job_keeps_values_with_spaces() -> None:
    jobs = parse_show_job((DATA / "scontrol_show_job.txt").read_text())
    by_id = {j["JobId"]: j for j in jobs}
    assert by_id["13"]["JobName"] == "name with spaces"
    assert by_id["11"]["AdminComment"].startswith("rsa=")
    assert by_id["12"]["QOS"] == "rsa-lockin"
    for name, state in (("completed", "COMPLETED"), ("failed", "FAILED"),
                        ("cancelled", "CANCELLED"), ("timeout", "TIMEOUT")):
        (job,) = parse_show_job((DATA / f"scontrol_show_job_{name}.txt").read_text())
        assert job["JobState"] == state
        assert derive_job_state(JobState.RUNNING, job["JobState"], job["Reason"]) is \
            JobState.FINISHED


def test_update_and_script_argv() -> None:
    assert update_argv(Path("/usr/bin"), "8_2", qos="rsa-lockin") == [
        "/usr/bin/scontrol", "update", "jobid=8_2", "qos=rsa-lockin"]
    assert batch_script_argv(Path("/b"), "9") == ["/b/scontrol", "write", "batch_script",
                                                  "9", "-"]
