"""A centre's own history, end to end: the lab's real Slurm 22.05 runs a few jobs, the
sacct command docs/simulator.md gives reads them back from slurmdbd, and
``rsa sim replay --sacct -`` replays that output from standard input, saying on stderr
what it inferred of the cluster.

The jobs: one holding every node, one that waits for it and then runs, and one cancelled
while it waits (it never ran: the replay must skip it, though sacct gives it a Start).
Needs accounting (``make lab-test``'s lab); about the simulator alone, so marked ``once``.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Mapping

import pytest

from rsa_scheduler.sim.sacct import FIELDS
from tests.integration.slurmkit import make_jobs, root, wait_for

pytestmark = pytest.mark.once


def test_the_labs_own_sacct_replayed(lab: Mapping[str, str]) -> None:
    if lab.get("RSA_LAB_ACCOUNTING", "1") == "0":
        pytest.skip("this lab runs without accounting (no slurmdbd): sacct has nothing")
    partition = lab.get("RSA_LAB_PARTITION") or root(
        lab, "sinfo", "-h", "-o", "%P").split()[0].rstrip("*")
    per_node = dict(line.split() for line in root(
        lab, "sinfo", "-h", "-N", "-p", partition, "-o", "%N %c").splitlines())
    nodes, total_cpus = str(len(per_node)), sum(int(c) for c in per_node.values())
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 1))
    with make_jobs(lab) as jobs:
        whole = jobs.submit("-p", partition, "-N", nodes, "--exclusive", "-t", "1",
                            "--wrap", "sleep 2")
        after = jobs.submit("-p", partition, "-N", "1", "-t", "1", "--wrap", "true")
        never = jobs.submit("-p", partition, "-N", "1", "-t", "1", "--wrap", "true")

        def reason(job: str) -> str:
            return root(lab, "squeue", "-h", "-j", job, "-o", "%T %r").strip()

        # cancelled once the scheduler has looked at it (eligible: sacct's window lists it)
        wait_for(f"job {never} pending on the busy cluster",
                 lambda: reason(never) in ("PENDING Resources", "PENDING Priority"),
                 timeout=30, every=0.2)
        root(lab, "scancel", never)
        ids = f"{whole},{after},{never}"

        def ended() -> bool:
            # one line per job; a cancelled one's is "CANCELLED by UID"
            states = [line.split(" ")[0] for line in root(
                lab, "sacct", "-X", "-n", "-P", "-j", ids, "-o", "State").splitlines()]
            return len(states) == 3 and all(s in ("COMPLETED", "CANCELLED") for s in states)

        wait_for("the three jobs ended in sacct", ended, timeout=60, every=0.5)
    # the documented command, narrowed to this test's jobs
    out = root(lab, "sacct", "--allusers", "--parsable2", "--starttime", since,
               "--endtime", "now", "--jobs", ids, "--format", ",".join(FIELDS))
    assert out.startswith("JobIDRaw|JobID|State|"), out
    rows = {r.split("|")[0]: r.split("|") for r in out.splitlines()[1:]}
    assert {whole, after, never} <= set(rows), out
    # as Slurm 22.05 records a job cancelled while pending: no step, ElapsedRaw 0 (its
    # Start is its cancel time, its AllocCPUS its request)
    assert rows[never][FIELDS.index("ElapsedRaw")] == "0", out
    assert not [r for r in rows if r.startswith(f"{never}.")], out
    done = subprocess.run([f"{lab['RSA_LAB_VENV']}/bin/rsa", "sim", "replay", "--sacct", "-",
                           "--rsa-nodes", "2", "--json"], input=out, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["trace"] == "<stdin>", out
    # two jobs ran; the cancelled one is read and skipped
    assert (report["jobs"], report["skipped"]) == (2, 1), out
    assert report["baseline"]["jobs"] == 2
    work = report["workload"]
    assert work["format"] == "sacct" and work["unfinished"] == 0
    assert work["steps"] >= 2  # each job's .batch step (and .extern, if the lab has it)
    # the cluster inferred from the job that held all of it: the lab's own size
    assert work["procs"] == total_cpus, out
    assert work["procs_per_node"] == total_cpus // int(nodes)
    volumes = report["io_volumes"]
    assert volumes["trace"] + volumes["synthetic"] == 2
    assert volumes["trace"] == work["jobs_with_io"]
    said = [line for line in done.stderr.splitlines()
            if line.startswith("rsa sim replay: note: cluster: ")]
    assert said == [f"rsa sim replay: note: {report['notes'][0]}"], done.stderr
    assert f"{total_cpus} processors, inferred from the sacct output" in said[0]
