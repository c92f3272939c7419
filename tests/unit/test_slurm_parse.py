"""Slurm output parsers, on output captured from the lab's real Slurm 22.05."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rsa_scheduler.core.directives import DirectiveSpec
from rsa_scheduler.core.policy import StagingPolicy
from rsa_scheduler.core.scheduler import Observation, Scheduler
from rsa_scheduler.core.states import JobState, derive_job_state
from rsa_scheduler.slurm.cli import batch_script_argv, job_info_argv, squeue_argv, update_argv
from rsa_scheduler.slurm.parse import (
    JOB_INFO_FORMAT,
    NULL,
    QUEUE_FORMAT,
    JobInfo,
    ParseError,
    QueueRow,
    parse_job_info,
    parse_queue,
)
from tests.unit.corekit import make_pool

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
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", r.submitted)
               and r.restarts == 0 for r in rows.values())
    assert five.account == "rsa"  # limits per account (issue 33)


def test_a_captured_requeue_is_never_taken_for_a_new_job() -> None:
    """Real requeues (tests/data/slurm/squeue_requeue.txt: by root, and by the job
    itself): RestartCnt rises while the job is still COMPLETING with its old submit time,
    the new submit time comes once it is pending. Fed to the core poll by poll, neither
    is ever another job (which would end its cycle: output staged out and destroyed
    while the next run writes into it); the same rows with no restart counted would be."""
    rows = parse_queue((DATA / "squeue_requeue.txt").read_text())
    runs: dict[str, list[QueueRow]] = {}
    for row in rows:
        runs.setdefault(row.job_id, []).append(row)
    assert len(runs) == 2
    for run in runs.values():
        assert run[0].restarts == 0 and run[-1].restarts == 1
        assert run[-1].state == "PENDING" and run[-1].submitted != run[0].submitted
        assert not taken_for_a_new_job(run), run
        assert taken_for_a_new_job([replace(r, restarts=0) for r in run])


def taken_for_a_new_job(rows: list[QueueRow]) -> bool:
    sched = Scheduler(make_pool(), StagingPolicy())
    for t, row in enumerate(rows):
        dec = sched.observe([Observation(
            job_id=row.job_id, user=row.user, state=row.state, reason=row.reason,
            spec=DirectiveSpec(data_out="/pfs/out"), submitted=row.submitted,
            restarts=row.restarts)], float(t))
        rec = sched.records.get(row.job_id)
        if rec is None or rec.superseded or any(e.name == "job.untracked"
                                                for e in dec.events):
            return True
    return False


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
    rows = parse_queue("5|PENDING|Resources|1|1|u|debug|5:00|acct|2026-11-28T13:16:43|0|"
                       "first\nsecond|\n"
                       "6|RUNNING|None|1|1|u|debug|5:00|acct|2026-11-28T13:16:43|0|(null)|\n")
    assert rows[0].admin_comment == "first\nsecond" and rows[1].admin_comment is None


@pytest.mark.parametrize("text", [
    "garbage\n", "5|PENDING|Resources|x|1|u|debug|5:00|acct|2026-11-28T13:16:43|0|(null)|\n",
    "5|PENDING|Resources|1|1|u|debug|5:00|acct|2026-11-28T13:16:43|x|(null)|\n"])
def test_bad_queue_output_is_a_parse_error(text: str) -> None:
    with pytest.raises(ParseError, match="squeue line"):
        parse_queue(text)


def test_job_info_asks_only_fields_no_user_can_write() -> None:
    assert job_info_argv(Path("/usr/bin"), "12") == [
        "/usr/bin/squeue", "-h", "-t", "all", "-j", "12", "-O", JOB_INFO_FORMAT]
    assert JOB_INFO_FORMAT == ("JobID:0|,ArrayJobID:0|,ArrayTaskID:0|,UserName:0|,"
                               "Partition:0|,admin_comment:0|")


def test_a_job_name_cannot_forge_an_array_task() -> None:
    """Issue 36, captured: rsaother's job 2 named ``x ArrayJobId=1 ArrayTaskId=0``.
    scontrol's line carries the forged fields; squeue's fields say what the job is."""
    forged = (DATA / "scontrol_show_job_forged_name.txt").read_text()
    assert "JobName=x ArrayJobId=1 ArrayTaskId=0 UserId=rsaother" in forged
    info = parse_job_info((DATA / "squeue_job_info_forged_name.txt").read_text(), "2")
    assert info == JobInfo("2", "2", "N/A", "rsaother", "debug", "")
    assert info.array_key is None


def test_job_info_of_array_tasks_and_admin_comments() -> None:
    # -j of the array's id lists every task: only the line of that own id counts
    text = (DATA / "squeue_job_info_array.txt").read_text()
    assert parse_job_info(text, "1").array_key == "1_2"
    assert parse_job_info(text, "4").array_key == "1_1"
    assert parse_job_info(text, "1_0").job_id == "3"
    task = parse_job_info((DATA / "squeue_job_info_task.txt").read_text(), "4")
    assert (task.array_key, task.user) == ("1_1", "rsauser")
    pending = parse_job_info((DATA / "squeue_job_info_pending_array.txt").read_text(), "5")
    assert pending.array_task_id == "0-5" and pending.array_key is None
    multi = parse_job_info((DATA / "squeue_job_info_multiline.txt").read_text(), "6")
    assert multi.admin_comment == "multi\nline|x" and multi.array_key is None
    with pytest.raises(ParseError, match="no line for job 9"):
        parse_job_info(text, "9")


_LINE = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)


@given(own=st.integers(1, 99), array=st.integers(1, 99),
       task=st.one_of(st.just("N/A"), st.integers(0, 9).map(str)),
       comment=st.lists(_LINE, max_size=3).map("\n".join),
       sibling_comment=st.lists(_LINE, max_size=3).map("\n".join))
def test_no_admin_comment_changes_whose_job_it_is(own: int, array: int, task: str,
                                                   comment: str,
                                                   sibling_comment: str) -> None:
    """Whatever an admin_comment holds (``|``, newlines, whole forged lines), the job's
    own line gives its identity, or the parse fails: never another identity."""
    def line(job: int, arr: int, t: str, user: str, c: str) -> str:
        return f"{job}|{arr}|{t}|{user}|debug|{c or NULL}|\n"

    text = line(own + 100, array, "7", "other", sibling_comment) + \
        line(own, array, task, "rsauser", comment)
    try:
        info = parse_job_info(text, str(own))
    except ParseError:
        return
    assert (info.job_id, info.array_job_id, info.array_task_id, info.user) == (
        str(own), str(array), task, "rsauser")


def test_update_and_script_argv() -> None:
    assert update_argv(Path("/usr/bin"), "8_2", qos="rsa-lockin") == [
        "/usr/bin/scontrol", "update", "jobid=8_2", "qos=rsa-lockin"]
    assert batch_script_argv(Path("/b"), "9") == ["/b/scontrol", "write", "batch_script",
                                                  "9", "-"]


def test_sacct_end_states_are_read_per_job() -> None:
    from rsa_scheduler.slurm.cli import end_states_argv
    from rsa_scheduler.slurm.parse import parse_end_states

    assert end_states_argv(Path("/usr/bin"), ["7", "8_2"]) == [
        "/usr/bin/sacct", "-n", "-X", "-P", "-o", "JobID,State", "-j", "7,8_2"]
    text = ("7|CANCELLED by 1001\n8_2|COMPLETED\n9+0|TIMEOUT\n9+1|TIMEOUT\n"
            "10|NODE_FAIL\n\nnot a line\n")
    assert parse_end_states(text) == {"7": "CANCELLED", "8_2": "COMPLETED", "9": "TIMEOUT",
                                      "10": "NODE_FAIL"}


#: a real row (tests/data/slurm/squeue_rsa.txt, job 5), its Reason replaced by what a
#: site's other plugin may write there: a ``|``, a newline, or text shaped like fields
_CAPTURED_5 = next(line for line in (DATA / "squeue_rsa.txt").read_text().splitlines()
                   if line.startswith("5|"))


@pytest.mark.parametrize("reason", [
    "burst_buffer/other: a|b failed", "first line\nsecond line", "x|\n|y",
    "7|1|root|debug|5:00|acct|2026-01-01T00:00:00|0"])
def test_a_reason_with_a_bar_or_a_newline_is_read_whole(reason: str) -> None:
    """A ``|`` or a newline in one job's Reason failed the whole queue read (rsad blind
    every cycle): it is read as that job's Reason, every other field where it was. A
    Reason shaped like fields is read as one too, and moves nothing after it."""
    line = _CAPTURED_5.replace("|Resources|", f"|{reason}|", 1)
    other = "6|RUNNING|None|1|1|rsaother|debug|5:00|rsa|2026-11-28T13:16:43|0|(null)|"
    rows = {r.job_id: r for r in parse_queue(f"{line}\n{other}\n")}
    clean = parse_queue(_CAPTURED_5 + "\n")[0]
    assert rows["5"] == replace(clean, reason=reason)
    assert rows["6"].user == "rsaother" and rows["6"].admin_comment is None


def test_a_comment_shaped_like_fields_never_moves_the_reason() -> None:
    """The comment comes after the Reason and a user's directives reach it (a DATA_OUT
    path may hold ``|1|1|root|...``): the row splits at the first place that fits, so
    text in the comment cannot change the Reason, user or any field before it."""
    forged = "|0|1|root|debug|5:00|acct|2026-01-01T00:00:00|0|rsa1:o=/x"
    line = _CAPTURED_5.replace("o=/pfs/x%7Cy", "o=/pfs/x" + forged.replace("|", "%7C"))
    raw = _CAPTURED_5.rstrip("|") + forged + "|"
    for text in (line, raw):
        row = parse_queue(text + "\n")[0]
        assert (row.reason, row.user, row.priority) == ("Resources", "rsauser", 1)
        assert (row.admin_comment or "").startswith("rsa1:i=/pfs/home/rsauser/in")
