"""A centre's own history: sacct output read into replay jobs (real output of the lab's
Slurm 22.05 in tests/data/sacct/lab.txt, and a hand-written file in sacct's format with the
I/O figures a jobacct_gather plugin records), bad rows named ``FILE:LINE`` with every
problem, and ``rsa sim replay --sacct`` end to end."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from rsa_scheduler.cli.sim import sim
from rsa_scheduler.sim.sacct import COMMAND, FIELDS, parse_sacct, read_sacct
from rsa_scheduler.sim.swf import TraceError
from tests.clirunner import cli_runner

DATA = Path(__file__).parent.parent / "data" / "sacct"
LAB = DATA / "lab.txt"
WITH_IO = DATA / "with-io.txt"
HEADER = "|".join(FIELDS)
GOOD = ("7|7|COMPLETED|2026-03-02T09:00:00|2026-03-02T09:00:05|2026-03-02T09:10:05|600|30|"
        "4|4|1|1001|batch|normal||")


def parse(text: str) -> list[tuple[int, float, float, float, int, int]]:
    log = parse_sacct(io.StringIO(text), "s.txt")
    return [(j.job, j.submit, j.wait, j.run, j.procs, j.status) for j in log.jobs]


def test_the_documented_command_asks_for_every_field() -> None:
    assert COMMAND.startswith("sacct --allusers --parsable2 ")
    assert COMMAND.endswith("--format " + ",".join(FIELDS))
    assert "sacct --allusers --parsable2 --starttime 2026-01-01 --endtime now --format " \
        "JobIDRaw,JobID,State,Submit,Start,End,ElapsedRaw,TimelimitRaw,AllocCPUS,ReqCPUS," \
        "NNodes,UID,Partition,QOS,TRESUsageInTot,TRESUsageOutTot" in \
        (Path(__file__).parent.parent.parent / "docs" / "simulator.md").read_text()


def test_the_labs_own_accounting() -> None:
    env = dict(re.findall(r"(\w+)=(\d+)", (DATA / "lab.env").read_text()))
    log = read_sacct(str(LAB))
    by_id = {j.job: j for j in log.jobs}
    plain, two, failed = (by_id[int(env[k])] for k in ("PLAIN", "TWO_NODES", "FAILED"))
    assert plain.status == 1 and plain.run == 2 and plain.procs == 1 and plain.wait == 0
    assert two.procs == 2 and two.status == 1
    assert failed.status == 0 and failed.run == 1
    running = by_id[int(env["CANCELLED_RUNNING"])]
    # "CANCELLED by 0": it ran 2 s, then root cancelled it
    assert running.status == 5 and (running.wait, running.run) == (2, 2)
    # the job held and cancelled before it started never became eligible: sacct's time
    # window does not list it
    assert int(env["CANCELLED_PENDING"]) not in by_id
    # the array's 3 tasks (5_0, 5_1, 5_2) each have their own raw id (7, 8, and 5)
    assert sorted(j.job for j in log.jobs if j.job >= int(env["ARRAY"])) == [5, 7, 8]
    assert all(by_id[t].status == 1 and by_id[t].wait == 2 for t in (5, 7, 8))
    assert len(log.jobs) == 7 and log.unfinished == 0
    assert log.steps == 7 and log.with_io == 0  # the lab gathers no I/O (jobacct none)
    assert log.cpus_per_node == 1  # the lab's nodes have 1 CPU each
    submits = [j.submit for j in log.jobs]
    assert submits == [0] * 7  # all submitted within the same second
    assert [j.job for j in log.jobs] == [1, 2, 3, 4, 5, 7, 8]  # then by raw id
    assert all(j.input_bytes is None and j.output_bytes is None for j in log.jobs)
    assert all(j.user == 1001 and j.requested_time == 120 for j in log.jobs)


def test_io_figures_of_the_steps_are_the_jobs_volumes() -> None:
    log = read_sacct(str(WITH_IO))
    jobs = [(j.job, j.submit, j.wait, j.run, j.procs, j.status) for j in log.jobs]
    assert jobs == [(101, 0, 5, 600, 64, 1), (102, 60, 30, 601, 8, 0),
                    (103, 60, 0, 60, 8, 0), (104, 180, -1, -1, 16, 5)]
    first = log.jobs[0]
    assert first.input_bytes == 1048576 + 2012 + 2 * 2**30
    assert first.output_bytes == 4096 + 0 + 512 * 2**20
    assert first.requested_time == 30 * 60 and first.user == 1001 and first.line == 2
    # a step whose TRES lists no fs/disk says nothing about I/O: synthetic model
    assert [j.input_bytes for j in log.jobs[1:]] == [None, None, None]
    assert log.unfinished == 2 and log.with_io == 1 and log.steps == 4
    assert log.cpus_per_node == 32 and log.jobs[3].requested_time == -1


@pytest.mark.parametrize(("text", "message"), [
    ("", "s.txt: no sacct output (empty): run the command docs/simulator.md gives"),
    ("\n\n", "s.txt: no sacct output (empty)"),
    (GOOD + "\n", "s.txt:1: the header lacks JobIDRaw, State, Submit, Start, ElapsedRaw, "
     "AllocCPUS: the first line must be sacct's header"),
    (HEADER + "\n", "s.txt: no jobs, only the header: widen --starttime/--endtime"),
    (f"{HEADER}\n{GOOD}|extra\n", "s.txt:2: 17 fields, the header has 16"),
    (f"{HEADER}\n" + GOOD.replace("COMPLETED|2026-03-02T09:00:00", "DONE|yesterday")
     .replace("|4|4|", "|x|4|") + "\n",
     "s.txt:2: State is 'DONE', not a state of sacct's; Submit is 'yesterday', not a time "
     "(YYYY-MM-DDTHH:MM:SS); AllocCPUS is 'x', not a whole number >= 0"),
    (f"{HEADER}\n" + GOOD.replace("7|7|", "7a|7|", 1) + "\n",
     "s.txt:2: JobIDRaw is '7a', not a job id (123 or 123.batch)"),
    (f"{HEADER}\n" + GOOD.replace("|600|", "|-3|") + "\n",
     "s.txt:2: ElapsedRaw is '-3', not a whole number >= 0"),
    (f"{HEADER}\n{GOOD}\n{GOOD}\n", "s.txt:3: job 7 listed twice (line 2): run sacct "
     "without --duplicates"),
    (f"{HEADER}\n" + GOOD.replace("7|7|", "7.batch|7.batch|") + "cpu=0,fs/disk=lots\n",
     "s.txt:2: TRES usage fs/disk=lots: not a byte count"),
])
def test_bad_input(text: str, message: str) -> None:
    with pytest.raises(TraceError) as err:
        parse_sacct(io.StringIO(text), "s.txt")
    assert str(err.value).startswith(message)


def test_odd_fields() -> None:
    # fields in another order, unknown extra fields, a hetjob component's raw id,
    # CANCELLED with its "by UID", the header's own trailing spaces
    text = ("State|JobIDRaw|Extra|Submit|Start|ElapsedRaw|AllocCPUS \n"
            "CANCELLED by 0|9|x|2026-01-01T00:00:10|2026-01-01T00:00:20|5|2\n"
            "OUT_OF_MEMORY|8|y|2026-01-01T00:00:00|2026-01-01T00:00:00|7|1\n"
            "\n"
            "NODE_FAIL|10|z|2026-01-01T00:00:30|Unknown|0|0\n")
    assert parse(text) == [(8, 0, 0, 7, 1, 0), (9, 10, 10, 5, 2, 5), (10, 30, -1, -1, -1, 0)]
    # only unfinished jobs: nothing to replay, said by the caller (no error here)
    log = parse_sacct(io.StringIO(f"{HEADER}\n" + GOOD.replace("COMPLETED", "RUNNING")),
                      "s.txt")
    assert log.jobs == [] and log.unfinished == 1


def test_unreadable(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"nope\.txt: cannot read sacct output"):
        read_sacct(str(tmp_path / "nope.txt"))
    binary = tmp_path / "bin.txt"
    binary.write_bytes(HEADER.encode() + b"\n\xff\xfe|\n")
    with pytest.raises(TraceError, match=r"bin\.txt: cannot read sacct output: not UTF-8"):
        read_sacct(str(binary))


def test_replay_of_the_labs_sacct_end_to_end() -> None:
    result = cli_runner().invoke(sim, ["replay", "--sacct", str(LAB), "--rsa-nodes", "2",
                                       "--json"])
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["jobs"] == out["baseline"]["jobs"] == 7 and out["skipped"] == 0
    assert out["io_volumes"] == {"trace": 0, "memory": 0, "synthetic": 7}
    # the lab's 4 one-CPU nodes, inferred from the 4 CPUs its jobs held at once
    assert out["workload"] == {
        "format": "sacct", "procs": 4, "procs_per_node": 1, "unfinished": 0, "steps": 7,
        "jobs_with_io": 0,
        "procs_inferred": "4 processors, inferred from the trace: its jobs held 4 at once "
                          "(at 0 s); its largest job (line 4) uses 2",
        "procs_per_node_inferred": "1 per node, the most CPUs per node any job held"}
    assert out["notes"] == [
        "cluster: 4 processors, inferred from the trace: its jobs held 4 at once (at 0 s); "
        "its largest job (line 4) uses 2 (--procs sets it)",
        "processors: 1 per node, the most CPUs per node any job held (--procs-per-node "
        "sets it)"]
    text = cli_runner().invoke(sim, ["replay", "--sacct", str(LAB), "--rsa-nodes", "2"])
    assert text.exit_code == 0, text.stderr
    assert f"sacct output {LAB}: 7 jobs replayed (0 skipped)" in text.output
    assert "I/O volumes: 0 jobs from the workload's own figures, 0 from their memory, 7 " \
        "from the synthetic model" in text.output


def test_replay_reads_standard_input() -> None:
    result = cli_runner().invoke(sim, ["replay", "--sacct", "-", "--json"],
                                 input=WITH_IO.read_text())
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["trace"] == "<stdin>" and out["jobs"] == 3 and out["skipped"] == 1
    assert out["io_volumes"] == {"trace": 1, "memory": 0, "synthetic": 2}
    assert "2 jobs still pending or running when sacct ran: left out" in out["notes"]
    bad = cli_runner().invoke(sim, ["replay", "--sacct", "-"], input="JobIDRaw|State\n")
    assert bad.exit_code == 65
    assert bad.stderr.startswith("rsa sim replay: <stdin>:1: the header lacks Submit, ")
    both = cli_runner().invoke(sim, ["replay", "--sacct", "-", "--swf", str(WITH_IO)])
    assert both.exit_code == 2 and "--swf TRACE or --sacct FILE (one)" in both.stderr


def test_real_output_of_another_format_is_refused_naming_what_it_lacks() -> None:
    # the lab's captured `sacct -P -X -o JobID,JobName,State,ExitCode,Start,End,...`
    other = Path(__file__).parent.parent / "data" / "slurm" / "sacct_finished.txt"
    with pytest.raises(TraceError) as err:
        read_sacct(str(other))
    assert str(err.value).startswith(f"{other}:1: the header lacks JobIDRaw, Submit, "
                                     "ElapsedRaw, AllocCPUS: the first line must be sacct's "
                                     "header naming the fields of --format JobIDRaw,JobID,")
