"""The user's own job left alone (issue 32): a job submitted with ``--comment`` keeps
that comment exact through its whole RSA lifecycle (stage-out and its verification
included), in ``scontrol show job`` and in accounting (``sacct -o Comment``); rsad's
status of it is in ``rsa job``."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from tests.e2e.conftest import input_area
from tests.integration.conftest import as_user, slurm_env
from tests.integration.slurmkit import make_jobs, wait_for

MINE = "mine: run 42, do not touch"


@pytest.fixture
def area(lab: Mapping[str, str]) -> Iterator[Path]:
    with input_area(lab, "users-job") as base:
        yield base


def _slurm(lab: Mapping[str, str], *argv: str) -> str:
    return subprocess.run(list(argv), env=slurm_env(lab), capture_output=True, text=True,
                          timeout=60, check=False).stdout


@pytest.mark.once
def test_the_jobs_own_comment_is_kept_through_its_rsa_lifecycle(lab: Mapping[str, str],
                                                                area: Path) -> None:
    out = area / "out"
    script = (f"#!/bin/bash\n#SBATCH -t 5\n#RSA_DATA_OUT={out}\n"
              f"for i in 1 2 3; do echo $i > {out}/f$i; done\n")
    rsa = f"{lab['RSA_LAB_VENV']}/bin/rsa"
    with make_jobs(lab) as jobs:
        job = jobs.submit(f"--comment={MINE}", script=script)
        done = as_user(lab, lab["RSA_LAB_USER"], [rsa, "wait", "--timeout", "240", job],
                       timeout=260)
        assert done.returncode == 0, (done.stdout, done.stderr)
        shown = _slurm(lab, "scontrol", "show", "job", job)
        record = json.loads(as_user(lab, lab["RSA_LAB_USER"],
                                    [rsa, "job", job, "--json"]).stdout)
    assert f"Comment={MINE}\n" in shown, shown
    # rsad told its status, just not in the comment
    assert record["message"] and record["message"] != MINE, record["message"]
    got = wait_for("the job's comment in accounting", lambda: _slurm(
        lab, "sacct", "-n", "-X", "-P", "-o", "Comment", "-j", job).strip(), timeout=30)
    assert got == MINE
