"""A centre's own history, end to end: the lab's real Slurm 22.05 runs two jobs, the
sacct command docs/simulator.md gives reads them back from slurmdbd, and
``rsa sim replay --sacct -`` replays that output from standard input, saying on stderr
what it inferred of the cluster.

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
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 1))
    with make_jobs(lab) as jobs:
        one = jobs.submit("-t", "1", "--wrap", "true")
        two = jobs.submit("-N", "2", "-t", "1", "--wrap", "true")
        ids = f"{one},{two}"

        def ended() -> bool:
            states = root(lab, "sacct", "-X", "-n", "-P", "-j", ids, "-o", "State").split()
            return len(states) == 2 and all(s == "COMPLETED" for s in states)

        wait_for("both jobs COMPLETED in sacct", ended, timeout=60, every=0.5)
    # the documented command, narrowed to this test's jobs
    out = root(lab, "sacct", "--allusers", "--parsable2", "--starttime", since,
               "--endtime", "now", "--jobs", ids, "--format", ",".join(FIELDS))
    assert out.startswith("JobIDRaw|JobID|State|"), out
    done = subprocess.run([f"{lab['RSA_LAB_VENV']}/bin/rsa", "sim", "replay", "--sacct", "-",
                           "--rsa-nodes", "2", "--json"], input=out, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["trace"] == "<stdin>" and report["jobs"] == 2 and report["skipped"] == 0
    assert report["baseline"]["jobs"] == 2
    work = report["workload"]
    assert work["format"] == "sacct" and work["unfinished"] == 0
    assert work["steps"] >= 2  # each job's .batch step (and .extern, if the lab has it)
    # the two-node job held 2 CPUs on 2 one-CPU nodes: the cluster is inferred, and said
    assert work["procs"] >= 2 and work["procs_per_node"] == 1
    volumes = report["io_volumes"]
    assert volumes["trace"] + volumes["synthetic"] == 2
    assert volumes["trace"] == work["jobs_with_io"]
    said = [line for line in done.stderr.splitlines()
            if line.startswith("rsa sim replay: note: cluster: ")]
    assert said == [f"rsa sim replay: note: {report['notes'][0]}"], done.stderr
    assert "inferred from the trace" in said[0]
