"""The user's own job left alone, and told where its data is (issue 32): a job submitted
with ``--comment`` keeps that comment exact through its whole RSA lifecycle (stage-out and
its verification included), in ``scontrol show job`` and in accounting (``sacct -o
Comment``); rsad's status of it is in ``rsa job``, whose ``output:`` line says where the
output is; and, as it asked Slurm for mail (``--mail-type=END``), its user gets the RSA's
mail once the output is verified, through the site's MailProg (the lab's captures it)."""

from __future__ import annotations

import json
import os
import re
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


def _mail_to(lab: Mapping[str, str], to: str, subject: str) -> str | None:
    """The body of the mail MailProg was given for ``to`` with ``subject``, if any."""
    for f in Path(lab["RSA_LAB_MAIL_DIR"]).glob("mail-*"):
        head, _, body = f.read_text().partition("\n\n")
        if head.splitlines() == ["-s", subject, to]:
            return body
    return None


@pytest.mark.once
def test_the_jobs_own_comment_is_kept_and_the_verified_output_mailed(lab: Mapping[str, str],
                                                                     area: Path) -> None:
    out = area / "out"
    script = (f"#!/bin/bash\n#SBATCH -t 5\n#RSA_DATA_OUT={out}\n"
              f"for i in 1 2 3; do echo $i > {out}/f$i; done\n")
    rsa = f"{lab['RSA_LAB_VENV']}/bin/rsa"
    with make_jobs(lab) as jobs:
        to = f"rsa-test-{os.getpid()}@example.org"
        job = jobs.submit(f"--comment={MINE}", "--mail-type=END", f"--mail-user={to}",
                          script=script)
        done = as_user(lab, lab["RSA_LAB_USER"], [rsa, "wait", "--timeout", "240", job],
                       timeout=260)
        assert done.returncode == 0, (done.stdout, done.stderr)
        shown = _slurm(lab, "scontrol", "show", "job", job)
        record = json.loads(as_user(lab, lab["RSA_LAB_USER"],
                                    [rsa, "job", job, "--json"]).stdout)
        told = as_user(lab, lab["RSA_LAB_USER"], [rsa, "job", job]).stdout
    # scontrol ends the line with a space (26.05: without)
    assert re.search(rf"^   Comment={re.escape(MINE)} ?$", shown, re.MULTILINE), shown
    # rsad told its status, just not in the comment
    assert record["message"] and record["message"] != MINE, record["message"]
    got = wait_for("the job's comment in accounting", lambda: _slurm(
        lab, "sacct", "-n", "-X", "-P", "-o", "Comment", "-j", job).strip(), timeout=30)
    assert got == MINE
    assert f"    output: on the PFS in {out}, verified" in told, told
    body = wait_for("the RSA's mail", lambda: _mail_to(
        lab, to, f"Slurm Job_id={job} RSA: output verified on the PFS"), timeout=30)
    assert "verified" in body and f"rsa job {job}" in body, body
