"""A requeued job's runs never touch each other's RAMDISK or output (issue 35), in both
modes.

An output-only job writes to its RAMDISK, then requeues itself (``scontrol requeue``, as
its owner may). Its second run starts while (or after) the first run's output is staged
out. Both runs' output must end on the PFS; in native mode Slurm must not count the job
done before the second run's output is verified (a new setup is a new run: the first
run's "verified" never answers for it).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from tests.e2e.conftest import input_area, lab_mode
from tests.integration.slurmkit import make_jobs, root, wait_for
from tests.integration.test_rsad_staging import rsa_job


@pytest.fixture
def area(lab: Mapping[str, str]) -> Iterator[Path]:
    with input_area(lab, "requeue") as base:
        yield base


def _slurm_state(lab: Mapping[str, str], job: str) -> str:
    return root(lab, "squeue", "-h", "-t", "all", "-j", job, "-O", "State:0").strip()


def test_a_requeued_output_jobs_runs_each_keep_their_output(
        lab: Mapping[str, str], area: Path) -> None:
    out, res = area / "out", area / "res"
    script = f"""#!/bin/bash
#SBATCH -t 5
#SBATCH --requeue
#RSA_DATA_OUT={out}
#RSA_EARLY_START=wait
n=${{SLURM_RESTART_COUNT:-0}}
findmnt -n -o TARGET --target {out} > {res}/outmnt.$n || true
head -c $((40 << 20)) /dev/urandom > {out}/blob-$n
md5sum {out}/blob-$n | cut -d' ' -f1 > {res}/md5.$n
echo "run $n" > {out}/run-$n
if [ "$n" = 0 ]; then
  scontrol requeue $SLURM_JOB_ID
  sleep 120
fi
"""
    native = lab_mode(lab) == "native"
    with make_jobs(lab) as jobs:
        job = jobs.submit(script=script)
        wait_for("the second run", lambda: (res / "md5.1").exists(), timeout=400)
        wait_for("the job's end", lambda: _slurm_state(lab, job) in (
            "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"), timeout=400)
        # native mode: Slurm ends the job only once data_out said done
        ended_with = {n: (out / f"run-{n}").exists() for n in (0, 1)}
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            data = rsa_job(lab, job) or {}
            if data.get("rsa_state") in ("released", "quarantined", "declined"):
                break
            time.sleep(1)
    assert data.get("rsa_state") == "released", data.get("events", [])[-10:]
    for n in (0, 1):
        assert (out / f"run-{n}").read_text() == f"run {n}\n", n
        got = root(lab, "md5sum", str(out / f"blob-{n}")).split()[0]
        assert got == (res / f"md5.{n}").read_text().strip(), n
    if native:
        assert ended_with[1], "Slurm ended the job before its second run's output was " \
                              "on the PFS"
    reached = [e.get("to") for e in data["events"] if e["name"] == "rsa.transition"]
    assert reached.count("output-verified") >= 1, reached
