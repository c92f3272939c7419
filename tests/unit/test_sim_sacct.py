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
from rsa_scheduler.sim.swf import TraceError, guess_size
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
        "procs_inferred": "4 processors, inferred from the sacct output: its jobs held 4 at "
                          "once (at 0 s); its largest job (line 4) uses 2",
        "procs_per_node_inferred": "1 per node, the most CPUs per node any job held"}
    assert out["notes"] == [
        "cluster: 4 processors, inferred from the sacct output: its jobs held 4 at once (at "
        "0 s); its largest job (line 4) uses 2 (--procs sets it)",
        "processors: 1 per node, the most CPUs per node any job held (--procs-per-node "
        "sets it)"]
    text = cli_runner().invoke(sim, ["replay", "--sacct", str(LAB), "--rsa-nodes", "2"])
    assert text.exit_code == 0, text.stderr
    assert f"sacct output {LAB}: 7 jobs replayed (0 skipped)" in text.stdout
    assert text.stderr.splitlines() == [f"rsa sim replay: note: {n}" for n in out["notes"]]
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


def test_every_bad_row_is_reported_not_only_the_first() -> None:
    text = (f"{HEADER}\n"
            + GOOD.replace("|4|4|", "|x|4|") + "\n"  # line 2
            + GOOD.replace("7|7|", "8|8|") + "\n"  # line 3: good
            + GOOD.replace("7|7|", "9|9|").replace("|600|", "|10m|") + "|extra\n"  # 4
            + GOOD.replace("7|7|COMPLETED|2026-03-02T09:00:00", "10|10|DONE|Unknown")
            + "\n"  # line 5: two problems
            + GOOD.replace("7|7|", "8|8|") + "\n"  # line 6: 8 again
            + GOOD.replace("7|7|", "8.batch|8.batch|") + "cpu=0,fs/disk=lots\n")  # 7
    with pytest.raises(TraceError) as err:
        parse_sacct(io.StringIO(text), "s.txt")
    assert str(err.value).splitlines() == [
        "s.txt:2: AllocCPUS is 'x', not a whole number >= 0",
        "s.txt:4: 17 fields, the header has 16",
        "s.txt:5: State is 'DONE', not a state of sacct's; Submit is unknown: a job cannot "
        "be replayed without it",
        "s.txt:6: job 8 listed twice (line 3): run sacct without --duplicates",
        "s.txt:7: TRES usage fs/disk=lots: not a byte count"]


def test_arrays_hetjobs_steps_and_unknown_times() -> None:
    # as Slurm 22.05 lists them: an array task 123_4 (its own raw id 127), a het job's
    # components 130+0 and 130+1 (raw ids 130 and 131), each with .batch/.extern/.0 steps
    # (skipped as jobs: only their I/O counts), a job cancelled before it started (Start
    # None, End its cancel time) and one that never got an end (End None, as the
    # accounting of a job lost with its node shows it)
    rows = [
        "127|123_4|COMPLETED|2026-03-02T09:00:00|2026-03-02T09:00:10|2026-03-02T09:01:10|"
        "60|5|2|2|1|1001|batch|normal||",
        "127.batch|123_4.batch|COMPLETED|2026-03-02T09:00:10|2026-03-02T09:00:10|"
        "2026-03-02T09:01:10|60||2|2|1||||cpu=0,fs/disk=1000|fs/disk=2000",
        "127.extern|123_4.extern|COMPLETED|2026-03-02T09:00:10|2026-03-02T09:00:10|"
        "2026-03-02T09:01:10|60||2|2|1||||cpu=0,fs/disk=24|fs/disk=0",
        "130|130+0|COMPLETED|2026-03-02T09:00:20|2026-03-02T09:00:20|2026-03-02T09:00:50|"
        "30|5|4|4|1|1002|batch|normal||",
        "130.batch|130+0.batch|COMPLETED|2026-03-02T09:00:20|2026-03-02T09:00:20|"
        "2026-03-02T09:00:50|30||4|4|1|||||",
        "131|130+1|COMPLETED|2026-03-02T09:00:20|2026-03-02T09:00:20|2026-03-02T09:00:50|"
        "30|5|8|8|2|1002|batch|normal||",
        "131.0|130+1.0|COMPLETED|2026-03-02T09:00:21|2026-03-02T09:00:21|"
        "2026-03-02T09:00:49|28||8|8|2||||cpu=0,fs/disk=1K|fs/disk=3M",
        "140|140|CANCELLED by 1001|2026-03-02T09:00:30|None|2026-03-02T09:00:40|0|5|0|4|0|"
        "1001|batch|normal||",
        "141|141|NODE_FAIL|2026-03-02T09:00:40|2026-03-02T09:00:41|None|15|5|1|1|1|"
        "1001|batch|normal||",
        # cancelled while pending, its cancel time as its Start: it held no CPUs, so it
        # never ran (and its request, 64 CPUs on 1 node, says nothing of the nodes' size)
        "142|142|CANCELLED by 1001|2026-03-02T09:00:50|2026-03-02T09:01:00|"
        "2026-03-02T09:01:00|0|5|0|64|1|1001|batch|normal||",
    ]
    log = parse_sacct(io.StringIO(HEADER + "\n" + "\n".join(rows) + "\n"), "s.txt")
    assert [(j.job, j.submit, j.wait, j.run, j.procs, j.status) for j in log.jobs] == [
        (127, 0, 10, 60, 2, 1), (130, 20, 0, 30, 4, 1), (131, 20, 0, 30, 8, 1),
        (140, 30, -1, -1, 4, 5), (141, 40, 1, 15, 1, 0), (142, 50, -1, -1, 64, 5)]
    io_of = {j.job: (j.input_bytes, j.output_bytes) for j in log.jobs}
    # the steps' figures summed (.batch and .extern of the array task; the het
    # component's MPI step); a component whose steps list no fs/disk has none
    assert io_of == {127: (1024, 2000), 130: (None, None), 131: (1024, 3 * 2**20),
                     140: (None, None), 141: (None, None), 142: (None, None)}
    assert log.steps == 4 and log.with_io == 2 and log.unfinished == 0
    assert log.cpus_per_node == 4  # 130+0: 4 CPUs on 1 node (131: 8 on 2; 142 none)
    # the cluster inferred from the jobs that ran: 142's 64 CPUs asked count for nothing
    guess = guess_size(log.jobs)
    # (127, 130, 131 and 141 all run at 41 s: 2 + 4 + 8 + 1)
    assert guess is not None and guess.largest == 8 and guess.procs == 15


def test_a_job_cancelled_while_pending_never_ran_in_the_labs_own_accounting() -> None:
    # real Slurm 22.05.8 output (tests/integration/test_sim_sacct.py's jobs): job 1 held the
    # whole lab (4 one-CPU nodes), 2 waited for it, 3 was cancelled while pending: sacct
    # gives 3 its cancel time as Start and End, ElapsedRaw 0, AllocCPUS 1 and no step
    log = read_sacct(str(DATA / "lab-cancelled-pending.txt"))
    assert [(j.job, j.wait, j.run, j.procs, j.status) for j in log.jobs] == [
        (1, 1, 2, 4, 1), (2, 3, 1, 1, 1), (3, -1, -1, 1, 5)]
    assert log.cpus_per_node == 1 and log.steps == 2
    result = cli_runner().invoke(sim, ["replay", "--sacct", str(DATA / "lab-cancelled-pending"
                                                                      ".txt"), "--json"])
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert (out["jobs"], out["skipped"]) == (2, 1)
    assert out["workload"]["procs"] == 4  # the lab's size: job 1 held all of it
