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


def test_rsa_wait_of_an_arrays_id_waits_for_every_tasks_output(
        lab: Mapping[str, str], area: Path) -> None:
    """``rsa wait <array id>`` (what ``sbatch --parsable --array`` prints) right after the
    submission: one line per task, each once its output is on the PFS; and ``rsa wait``
    of a task's own job id (``$SLURM_JOB_ID`` in the task) is that task's. On the code
    before, rsad tracked no job under the array's id and squeue printed one line per
    task: ``rsa wait`` answered ``no RSA`` at once, exit 0, before any output was there;
    a task's own id was not tracked either."""
    out, res = area / "out", area / "res"
    for task in ("0", "1"):
        made = as_user(lab, lab["RSA_LAB_USER"], ["mkdir", "-p", str(out / task)])
        assert made.returncode == 0, made.stderr
    writer = (f"#!/bin/bash\n#SBATCH -t 5\n#RSA_DATA_OUT={out}/%a\n"
              f"echo $SLURM_JOB_ID > {res}/own.$SLURM_ARRAY_TASK_ID\n"
              f"head -c $((16 << 20)) /dev/urandom > {out}/$SLURM_ARRAY_TASK_ID/big\n"
              f"(cd {out}/$SLURM_ARRAY_TASK_ID && md5sum big) > "
              f"{res}/md5.$SLURM_ARRAY_TASK_ID\n")
    rsa = f"{lab['RSA_LAB_VENV']}/bin/rsa"
    with make_jobs(lab) as jobs:
        array = jobs.submit("--array=0-1", script=writer)
        done = as_user(lab, lab["RSA_LAB_USER"], [rsa, "wait", "--timeout", "400", array],
                       timeout=420)
        on_pfs = {t: md5_of(out / t, "big") for t in ("0", "1")}
        own = next(o for t in ("0", "1")  # a task's own id that is not the array's
                   if (o := (res / f"own.{t}").read_text().strip()) != array)
        again = as_user(lab, lab["RSA_LAB_USER"], [rsa, "wait", "--timeout", "60", own],
                        timeout=90)
    assert done.returncode == 0, (done.stdout, done.stderr)
    lines = sorted(done.stdout.splitlines())
    assert [line.split(": ")[:2] for line in lines] == [
        [f"{array}_0", "verified"], [f"{array}_1", "verified"]], lines
    for t in ("0", "1"):
        assert on_pfs[t] == (res / f"md5.{t}").read_text()
    assert again.returncode == 0, (again.stdout, again.stderr)
    assert again.stdout.startswith(f"{own}: verified: "), again.stdout


def test_rsa_wait_of_another_users_job_says_whose_it_is(
        lab: Mapping[str, str], area: Path) -> None:
    """rsaother's ``rsa wait`` of rsauser's RSA job: rsad tells rsaother nothing of it
    (as of an unknown job); Slurm says whose it is. On the code before the line was ``no
    RSA: ... its files are where it wrote them``, exit 0, as soon as Slurm ended the job,
    while its output was still on its RAMDISK."""
    out = area / "out"
    writer = (f"#!/bin/bash\n#SBATCH -t 5\n#RSA_DATA_OUT={out}\n"
              f"head -c $((4 << 20)) /dev/urandom > {out}/big\n")
    rsa = f"{lab['RSA_LAB_VENV']}/bin/rsa"
    with make_jobs(lab) as jobs:
        job = jobs.submit(script=writer)
        theirs = as_user(lab, lab["RSA_LAB_OTHER_USER"], [rsa, "wait", "--timeout", "60",
                                                          job], timeout=90)
        mine = as_user(lab, lab["RSA_LAB_USER"], [rsa, "wait", "--timeout", "400", job],
                       timeout=420)
    assert theirs.returncode == 1, (theirs.stdout, theirs.stderr)
    assert theirs.stdout.startswith(
        f"{job}: not yours: job {job} is {lab['RSA_LAB_USER']}'s"), theirs.stdout
    assert str(out) not in theirs.stdout + theirs.stderr  # nothing of the job's paths
    assert mine.returncode == 0 and mine.stdout.startswith(f"{job}: verified: "), mine
