"""A stage-out never replaces a PFS file changed after the job's RAMDISK was built
(issue 35 item 2), in the lab.

The job writes ``common`` and ``mine`` on its RAMDISK (over DATA_OUT); while it runs,
the user (on a login node: here the host, which sees the PFS) writes a newer ``common``
into DATA_OUT on the PFS. The stage-out keeps that file and places the job's copy beside
it as ``common.rsa-<job>``; verify compares that copy and the user reads which file was
kept aside. On main the stage-out renamed the job's older copy over the newer file.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.e2e.test_prolog_lifecycle import nothing_of_job_mounted, run_to_start
from tests.e2e.test_stage_out_failures import area
from tests.integration.conftest import as_user
from tests.integration.slurmkit import make_jobs, wait_for
from tests.integration.test_rsad_staging import rsa_job, wait_state

__all__ = ["area"]


def _job(out: Path, res: Path) -> str:
    return f"""#!/bin/bash
#SBATCH -t 5
#RSA_DATA_OUT={out}
echo job > {out}/common
echo job > {out}/mine
touch {res}/written
while [ ! -e {res}/go ]; do sleep 0.2; done
"""


@pytest.mark.once  # the staging engine and rsad: the same whichever mode drives staging
def test_a_pfs_file_newer_than_the_ramdisk_is_kept_at_stage_out(
        lab: Mapping[str, str], area: Path) -> None:
    out, res = area / "out", area / "res"
    with make_jobs(lab) as jobs:
        job = run_to_start(lab, jobs, _job(out, res))
        wait_for("the job's output", lambda: (res / "written").exists(), timeout=120)
        done = as_user(lab, lab["RSA_LAB_USER"], ["bash", "-c",
                       f"echo newer > {out}/common && touch {res}/go"])
        assert done.returncode == 0, done.stderr
        wait_state(lab, job, "released", timeout=240)
    assert (out / "common").read_text() == "newer\n"
    assert (out / f"common.rsa-{job}").read_text() == "job\n"
    assert (out / "mine").read_text() == "job\n"
    assert not (out / f"mine.rsa-{job}").exists()
    data = rsa_job(lab, job)
    assert data is not None
    said = str(data["message"])
    assert f"1 file kept aside in {out}" in said, said
    assert f"'common' as 'common.rsa-{job}'" in said, said
    assert nothing_of_job_mounted(job)
