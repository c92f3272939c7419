"""slurmctld loses its state and gives a running RSA job's id to the same user's next job
(issue 35): rsad tells the two apart by Slurm's own identity of each (squeue's SubmitTime
and RestartCnt), never takes the new job for a requeue of the old one, stages the old
job's output out as its own first, and serves the new job with its own directives, on a
RAMDISK named with a cycle the old job never had.

The lab's slurmctld is restarted with its StateSaveLocation emptied (as when it is lost;
``slurmctld -c`` alone keeps the id sequence): slurmd kills the orphaned job, and ids
start again at FirstJobId. rsad is down across it (SIGKILL), so its first look at the
queue shows the new job under the old job's id. It is marked ``wipes_slurm_state`` and
runs last in its lab run (tests/conftest.py): every later job would otherwise reuse an
earlier test's id.
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import input_area
from tests.integration.conftest import as_user, slurm_env
from tests.integration.slurmkit import (
    make_jobs,
    restart_lab_slurmctld,
    root,
    start_lab_rsad,
    stop_lab_rsad,
    wait_for,
)
from tests.integration.test_rsad_staging import rsa_job, wait_state

pytestmark = [pytest.mark.queue, pytest.mark.wipes_slurm_state]


@pytest.fixture
def area(lab: Mapping[str, str]) -> Iterator[Path]:
    with input_area(lab, "reused") as base:
        yield base


def _script(name: str, out: Path, res: Path, run: str) -> str:
    return f"""#!/bin/bash
#SBATCH -t 5
#RSA_DATA_OUT={out}
#RSA_EARLY_START=wait
findmnt -n -o SOURCE,TARGET --target {out} > {res}/{name}.mnt || true
echo "job {name}" > {out}/{name}
touch {res}/{name}.started
{run}
"""


def test_the_same_users_job_under_a_reused_id_is_a_new_job_of_its_own(
        lab: Mapping[str, str], area: Path) -> None:
    out_a, out_b, res = area / "out", area / "outb", area / "res"
    as_user(lab, lab["RSA_LAB_USER"], ["mkdir", str(out_b)])
    with make_jobs(lab) as jobs:
        job = jobs.submit(script=_script("a", out_a, res, "sleep 300"))
        wait_for("job a running on its RAMDISK", lambda: (res / "a.started").exists(),
                 timeout=120)
        assert str(out_a) in (res / "a.mnt").read_text()  # its RAMDISK over DATA_OUT
        wait_for("rsad to see job a run", lambda: (rsa_job(lab, job) or {}).get(
            "job_state") == "running", timeout=30)
        stop_lab_rsad(signal.SIGKILL)
        try:
            restart_lab_slurmctld(clean=True)
            dummies = []
            while True:  # the ids below job a's go to held jobs without RSA work
                got = jobs.submit("-H", "--wrap", "true") if int(job) > 1 else job
                if got == job or int(got) >= int(job) - 1:
                    break
                dummies.append(got)
            assert int(job) == 1 or got == str(int(job) - 1), \
                f"slurmctld without its state numbered from {got}, not from FirstJobId"
            if int(job) > 1:
                subprocess.run(["scancel", *dummies, got], env=slurm_env(lab), check=True,
                               timeout=60)
            # the same user's next job: held, so it starts once the test has looked
            again = jobs.submit("-H", script=_script("b", out_b, res, "true"))
            assert again == job, f"job {again} did not get job {job}'s id"
        finally:
            start_lab_rsad()
        # the old job's output is its own: staged out and verified into ITS DATA_OUT
        wait_for("job a's output on the PFS", lambda: (out_a / "a").exists(), timeout=180)
        assert (out_a / "a").read_text() == "job a\n"

        def own_record() -> dict[str, Any] | None:
            data = rsa_job(lab, job) or {}
            spec = data.get("spec") or {}
            return data if isinstance(spec, dict) and spec.get("data_out") == str(out_b) \
                else None

        data = wait_for("job b's own record", own_record, timeout=180)
        names = [e["name"] for e in data["events"]]
        assert "job.untracked" in names, names[-20:]
        earlier = data["events"][:len(names) - names[::-1].index("job.tracked") - 1]
        assert "output-verified" in [e.get("to") for e in earlier
                                     if e["name"] == "rsa.transition"], names[-20:]
        root(lab, "scontrol", "release", job)
        wait_state(lab, job, "released", "quarantined", timeout=240)
        data = rsa_job(lab, job) or {}
        assert data["rsa_state"] == "released", data["events"][-10:]
        assert (out_b / "b").read_text() == "job b\n"
        assert str(out_b) in (res / "b.mnt").read_text()  # on a RAMDISK of its own
        own = data["events"][len(data["events"]) - [e["name"] for e in data["events"]][
            ::-1].index("job.tracked") - 1:]
        actions = [a for e in own if e["name"] == "rsa.transition" for a in e["actions"]]
        assert actions and all(a.startswith(f"{job}/2/") for a in actions), actions
        assert "output-verified" in [e.get("to") for e in own
                                     if e["name"] == "rsa.transition"]
        assert not (out_a / "b").exists() and not (out_b / "a").exists()


def test_an_array_tasks_own_id_reused_by_a_new_job_is_that_jobs_own(
        lab: Mapping[str, str], area: Path) -> None:
    """rsauser's array task ran under its own job id N (rsad matched the two from
    slurmctld's hooks) and is released; slurmctld loses its state and gives N to
    rsauser's next RSA job. rsad still remembered N as the task's (until the task leaves
    its memory): the new job's hooks were the task's, its node Prolog was told "nothing"
    and it ran from the PFS, its RAMDISK never mounted. A job the queue lists under a
    plain id is no task's: the new job is mounted on its own RAMDISK."""
    out_a, out_b, res = area / "out", area / "outb", area / "res"
    as_user(lab, lab["RSA_LAB_USER"], ["mkdir", str(out_b)])
    with make_jobs(lab) as jobs:
        array = jobs.submit("--array=0", script=_script("a", out_a, res, "true"))
        task = f"{array}_0"
        wait_state(lab, task, "released", "quarantined", timeout=240)
        hooks = [e for e in (rsa_job(lab, task) or {}).get("events", [])
                 if e["name"] == "job.hook" and e.get("alias")]
        assert hooks, "rsad never matched the task to its own job id"
        own = str(hooks[0]["alias"])
        restart_lab_slurmctld(clean=True)
        dummies = []
        while True:  # the ids below the task's own go to held jobs without RSA work
            got = jobs.submit("-H", "--wrap", "true") if int(own) > 1 else own
            if got == own or int(got) >= int(own) - 1:
                break
            dummies.append(got)
        if int(own) > 1:
            subprocess.run(["scancel", *dummies, got], env=slurm_env(lab), check=True,
                           timeout=60)
        wait_for("the nodes back in slurmctld without its state", lambda: all(
            line.split("|")[1] == "idle"
            for line in root(lab, "sinfo", "-h", "-N", "-o", "%N|%T").splitlines()),
            timeout=60)
        job = jobs.submit(script=_script("b", out_b, res, "true"))
        assert job == own, f"job {job} did not get the task's own id {own}"
        wait_state(lab, job, "released", "quarantined", timeout=240)
        data = rsa_job(lab, job) or {}
        assert data["rsa_state"] == "released", data["events"][-10:]
    assert (out_b / "b").read_text() == "job b\n"
    assert str(out_b) in (res / "b.mnt").read_text(), json.dumps(data["events"])
