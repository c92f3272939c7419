"""A burst of RSA jobs on the idle lab gets its RAMDISKs too (issue 32).

Tried as a user: 24 RSA jobs submitted at once to the idle lab (4 compute nodes, 4 RSA
nodes, queue mode, the default early start ``wait``): 23 of them ran from the PFS
("started before RSA nodes were free"). All were held at submission; rsad judged the
first four able to start and the rest "busy" (the held jobs before them counted on the
idle nodes), released those, and Slurm started them at once on the nodes the held jobs
left idle, with every RSA node taken. Now a held job waits, held, for its RSA nodes in
priority order (core/admission.py), told why; ``fallback`` still starts at once.

The burst's makespan and compute-node hold under both policies: bench/bench_burst.py
(docs/benchmarks.md, "A burst of jobs").
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import input_area, md5_of
from tests.integration.conftest import as_user
from tests.integration.slurmkit import Jobs, make_jobs, wait_for
from tests.integration.test_rsad_staging import rsa_job

pytestmark = pytest.mark.queue  # native mode: Slurm holds them for capacity itself

N = 24
#: the whole burst's bound: six rounds of the 4 RSA nodes (build, stage-in, run, tear
#: down); the test took 38 s in the lab (2026-11-28; native mode's burst of the issue: 97 s)
BOUND = 360


@pytest.fixture
def area(lab: Mapping[str, str]) -> Iterator[Path]:
    with input_area(lab, "burst-e2e") as base:
        yield base


def script(base: Path, extra: str = "") -> str:
    """A tiny job: where DATA_IN is mounted from, its files' checksums, when it started
    (each written whole: a file that exists is complete)."""
    res = f"{base}/res/$SLURM_JOB_ID"
    return f"""#!/bin/bash
#SBATCH -t 2
#RSA_DATA_IN={base}/in
{extra}
date +%s.%N > {res}.start
findmnt -n -o TARGET --target {base}/in > {res}.mnt
(cd {base}/in && md5sum f*) > {res}.tmp && mv {res}.tmp {res}.md5
"""


def rsa_nodes(lab: Mapping[str, str]) -> list[dict[str, Any]]:
    out = subprocess.run([f"{lab['RSA_LAB_VENV']}/bin/rsa", "nodes", "--json"],
                         capture_output=True, text=True, timeout=30, check=True).stdout
    nodes: list[dict[str, Any]] = json.loads(out)["nodes"]
    return nodes


def submit_at_once(lab: Mapping[str, str], jobs: Jobs, text: str, n: int) -> list[str]:
    """Submit ``n`` copies of the job ``text`` as the lab user in one go (one shell, one
    sbatch after the other, ~0.1 s each); their ids are cancelled with ``jobs``'."""
    path = Path(f"/tmp/rsa-burst-{os.getpid()}-{time.monotonic_ns()}.sh")
    path.write_text(text)
    path.chmod(0o644)
    try:
        loop = (f"for i in $(seq {n}); do sbatch --parsable -o /dev/null "
                f"--chdir={lab['RSA_LAB_PFS']} {path} || exit 1; done")
        done = as_user(lab, lab["RSA_LAB_USER"], ["bash", "-c", loop], timeout=120)
    finally:
        path.unlink()
    ids = [line.split(";")[0] for line in done.stdout.split()]
    jobs.ids.extend(ids)
    assert done.returncode == 0 and len(ids) == n, done.stderr
    return ids


def test_a_burst_under_wait_reads_every_input_from_a_ramdisk_fallback_starts_at_once(
        lab: Mapping[str, str], area: Path) -> None:
    res = area / "res"
    with make_jobs(lab) as jobs:
        began = time.time()
        burst = submit_at_once(lab, jobs, script(area), N)
        (fallback,) = submit_at_once(lab, jobs, script(area, "#RSA_EARLY_START=fallback"), 1)
        submitted = time.time()
        wait_for(f"the {N} jobs of the burst to run", lambda: all(
            (res / f"{j}.md5").exists() for j in burst), timeout=BOUND, every=2)
        took = time.time() - began
        last = rsa_job(lab, burst[-1])  # before make_jobs cancels: its record is whole
        # the last RAMDISKs torn down: the next test finds every RSA node free
        wait_for("every RSA node free", lambda: not any(
            n.get("job") for n in rsa_nodes(lab)), timeout=120)
    pfs = md5_of(area / "in")
    mounts = {j: (res / f"{j}.mnt").read_text().strip() for j in burst}
    # every job of the burst read its input from its RAMDISK (mounted over DATA_IN), and
    # read all of it
    assert [j for j, m in mounts.items() if m != f"{area}/in"] == [], (mounts, took)
    assert [j for j in burst if (res / f"{j}.md5").read_text() != pfs] == []
    # fallback still starts at once (Slurm runs it on a compute node the held jobs leave
    # idle), from the PFS
    wait_for("the fallback job ran", lambda: (res / f"{fallback}.md5").exists(), timeout=60)
    started = float((res / f"{fallback}.start").read_text())
    assert started - submitted < 15, started - submitted
    assert (res / f"{fallback}.mnt").read_text().strip() != f"{area}/in"
    assert (res / f"{fallback}.md5").read_text() == pfs
    # the last job of the burst waited for RSA nodes, held, and was told why
    assert last is not None
    waited = [e for e in last["events"] if e["name"] == "rsa.transition"
              and e["trigger"] == "over-limit"]
    assert waited and waited[0]["detail"].startswith("not enough RSA nodes are free now"), \
        last["events"][:12]
    assert "declined" not in [e.get("to") for e in last["events"]]
    print(f"burst of {N} under wait: {took:.0f} s")
