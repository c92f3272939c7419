"""``rsa wait`` in the lab, both modes (issue 32): run by the job's user right after
``sbatch``, it returns only once the output job's files are on the PFS, every byte as the
job wrote it, and says "no RSA" for a job without directives. (A quarantined job's
``rsa wait`` is in tests/e2e/test_stage_out_failures.py.)"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from tests.e2e.conftest import input_area, md5_of
from tests.integration.conftest import as_user
from tests.integration.slurmkit import make_jobs


@pytest.fixture
def area(lab: Mapping[str, str]) -> Iterator[Path]:
    with input_area(lab, "rsa-wait") as base:
        yield base


def test_rsa_wait_returns_once_the_output_is_on_the_pfs_and_says_no_rsa_for_a_plain_job(
        lab: Mapping[str, str], area: Path) -> None:
    out, res = area / "out", area / "res"
    writer = (f"#!/bin/bash\n#SBATCH -t 5\n#RSA_DATA_OUT={out}\n"
              f"head -c $((24 << 20)) /dev/urandom > {out}/big\n"
              f"for i in 1 2 3 4 5 6; do echo $i > {out}/small-$i; done\n"
              f"(cd {out} && md5sum big small-*) > {res}/md5\n")
    rsa = f"{lab['RSA_LAB_VENV']}/bin/rsa"
    with make_jobs(lab) as jobs:
        job = jobs.submit(script=writer)
        plain = jobs.submit("--wrap", "true")
        done = as_user(lab, lab["RSA_LAB_USER"], [rsa, "wait", "--timeout", "400", job,
                                                  plain], timeout=420)
        # the moment rsa wait returns, every byte is on the PFS
        on_pfs = md5_of(out, "big small-*")
    assert done.returncode == 0, (done.stdout, done.stderr)
    lines = done.stdout.splitlines()
    assert len(lines) == 2, lines
    assert any(line.startswith(f"{job}: verified: ") for line in lines), lines
    assert any(line.startswith(f"{plain}: no RSA: ") for line in lines), lines
    assert on_pfs == (res / "md5").read_text()
