"""Another user's job never passes for yours (issue 36), in both modes.

rsaother, with only ``sbatch``, names jobs ``x ArrayJobId=<A> ArrayTaskId=<T>`` after
rsauser's array tasks, one running and one still pending (``scontrol show job -o``
prints that name where the fields would be). In queue mode a held RSA array of rsaother's
keeps rsad asking Slurm about jobs it has not matched (the node hooks of an array task
know only its own id); in native mode the forged job has directives of its own, so its
burst buffer setup asks too. The victim's tasks must go through their whole lifecycle
untouched: no forged job's hook reaches them, and every byte they wrote is staged out.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator, Mapping
from functools import partial
from pathlib import Path

import pytest

from rsa_scheduler.core.states import RsaState
from tests.e2e.conftest import input_area
from tests.integration.conftest import as_user
from tests.integration.slurmkit import make_jobs, root, wait_for
from tests.integration.test_rsad_staging import rsa_job, wait_state


@pytest.fixture
def area(lab: Mapping[str, str]) -> Iterator[Path]:
    with input_area(lab, "forged") as base:
        yield base


@pytest.fixture
def other_area(lab: Mapping[str, str]) -> Iterator[Path]:
    user = lab["RSA_LAB_OTHER_USER"]
    base = Path(lab["RSA_LAB_OTHER_PFS"]) / f"forged-{time.monotonic_ns()}"
    done = as_user(lab, user, ["mkdir", "-p", f"{base}/out/0", f"{base}/out/1",
                               f"{base}/own"])
    assert done.returncode == 0, done.stderr
    yield base
    subprocess.run(["rm", "-rf", str(base)], check=False, timeout=120)


def _ended(lab: Mapping[str, str], job: str) -> bool:
    state = root(lab, "squeue", "-h", "-t", "all", "-j", job, "-O", "State:0").strip()
    return state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")


def _hooks_of(lab: Mapping[str, str], key: str) -> list[dict[str, object]]:
    data = rsa_job(lab, key) or {}
    return [e for e in data.get("events", []) if e["name"] in ("job.hook", "bb.setup")]


def test_a_job_named_like_another_users_array_task_never_acts_for_it(
        lab: Mapping[str, str], area: Path, other_area: Path) -> None:
    user, other = lab["RSA_LAB_USER"], lab["RSA_LAB_OTHER_USER"]
    res = area / "res"
    for t in (0, 1):
        made = as_user(lab, user, ["mkdir", "-p", f"{area}/out/{t}"])
        assert made.returncode == 0, made.stderr

    def victim(t: int, wait: bool) -> str:
        return f"""#!/bin/bash
#SBATCH -t 5
#SBATCH --array=0
#RSA_DATA_OUT={area}/out/{t}
#RSA_EARLY_START=wait
echo "first {t}" > {area}/out/{t}/part1
touch {res}/started.{t}
{f"while [ ! -e {res}/go.{t} ]; do sleep 0.5; done" if wait else ""}
echo "second {t}" > {area}/out/{t}/part2
"""
    # rsaother's own RSA array, held: rsad tracks tasks it has not matched yet
    held = f"""#!/bin/bash
#SBATCH -t 5
#SBATCH --array=0-1
#RSA_DATA_OUT={other_area}/out/%a
true
"""
    forged_rsa = f"""#!/bin/bash
#SBATCH -t 5
#RSA_DATA_OUT={other_area}/own
sleep 2
"""
    with make_jobs(lab) as jobs:
        # the victim's task 0 runs while the attack happens; its other array waits, held
        running = jobs.submit(script=victim(0, wait=True))
        pending = jobs.submit("-H", script=victim(1, wait=False))
        task0, task1 = f"{running}_0", f"{pending}_0"
        wait_for("task 0 writing", lambda: (res / "started.0").exists(), timeout=240)
        wait_state(lab, task0, RsaState.MOUNTED_OUTPUT, timeout=60)
        jobs.submit("-H", script=held, user=other)
        forged = []
        for array in (running, pending):
            name = f"x ArrayJobId={array} ArrayTaskId=0"
            forged.append(jobs.submit("-J", name, "--wrap", "sleep 2", user=other))
            forged.append(jobs.submit("-J", name, script=forged_rsa, user=other))
        # every forged job ran and ended (its Prolog, Epilog and, native, bb hooks)
        for job in forged:
            wait_for(f"forged job {job} ended", partial(_ended, lab, job), timeout=240)
        time.sleep(3)  # the Epilogs' hooks, after the job left the queue
        data0 = rsa_job(lab, task0) or {}
        assert data0.get("rsa_state") == RsaState.MOUNTED_OUTPUT, data0.get("events")
        assert data0.get("job_state") == "running", data0.get("events")
        data1 = rsa_job(lab, task1) or {}  # native mode: not tracked before Slurm's setup
        assert data1.get("job_state") in (None, "queued"), data1.get("events")
        for key in (task0, task1):
            for ev in _hooks_of(lab, key):
                assert ev.get("alias") not in forged, (key, ev)
        for job in forged:  # each forged job is known to rsad as itself, if at all
            seen = rsa_job(lab, job)
            assert seen is None or seen["job_id"] == job, seen
        (res / "go.0").touch()
        wait_state(lab, task0, "released", timeout=240)
        done = as_user(lab, user, ["scontrol", "release", pending])
        assert done.returncode == 0, done.stderr
        wait_state(lab, task1, "released", timeout=240)
    for t, key in ((0, task0), (1, task1)):
        assert (area / "out" / str(t) / "part1").read_text() == f"first {t}\n"
        assert (area / "out" / str(t) / "part2").read_text() == f"second {t}\n"
        data = rsa_job(lab, key)
        assert data is not None
        reached = [e.get("to") for e in data["events"] if e["name"] == "rsa.transition"]
        assert "mounted-output" in reached and "output-verified" in reached, " ".join(
            map(str, reached))


@pytest.mark.queue
def test_an_alias_in_a_hooks_body_never_makes_another_job_the_running_ones(
        lab: Mapping[str, str], area: Path) -> None:
    """Root on any compute node (or SlurmUser) posts one PrologSlurmctld hook of rsauser's
    running job naming ``alias`` = the id of another job, a held plain one of the same
    user. On the code before, rsad kept that alias (logged, replayed): when the plain job
    ran and ended, its EpilogSlurmctld ended the running job's lifecycle; its output so
    far was staged out and its RAMDISK destroyed under it. Only the pair Slurm gives its
    hooks, or Slurm's own answer, matches an own job id to an array task now."""
    from rsa_scheduler.client import ApiClient

    out, res = area / "out", area / "res"
    victim = f"""#!/bin/bash
#SBATCH -t 5
#RSA_DATA_OUT={out}
#RSA_EARLY_START=wait
echo first > {out}/part1
touch {res}/started
while [ ! -e {res}/go ]; do sleep 0.5; done
echo second > {out}/part2
"""
    with make_jobs(lab) as jobs:
        job = jobs.submit(script=victim)
        wait_for("the job writing", lambda: (res / "started").exists(), timeout=240)
        wait_state(lab, job, RsaState.MOUNTED_OUTPUT, timeout=60)
        plain = jobs.submit("-H", "--wrap", "true")
        ApiClient(lab["RSA_LAB_API_TCP"], trust_uid=0).post(
            "/v1/hooks/prolog_slurmctld",
            {"job_id": job, "alias": plain, "user": lab["RSA_LAB_USER"]})
        done = as_user(lab, lab["RSA_LAB_USER"], ["scontrol", "release", plain])
        assert done.returncode == 0, done.stderr
        wait_for(f"plain job {plain} ended", partial(_ended, lab, plain), timeout=120)
        time.sleep(3)  # its EpilogSlurmctld's hook, after it left the queue
        data = rsa_job(lab, job) or {}
        assert data.get("rsa_state") == RsaState.MOUNTED_OUTPUT, data.get("events")
        assert data.get("job_state") == "running", data.get("events")
        assert not [e for e in _hooks_of(lab, job) if e.get("alias") == plain]
        (res / "go").touch()
        wait_state(lab, job, "released", timeout=240)
    assert (out / "part1").read_text() == "first\n"
    assert (out / "part2").read_text() == "second\n"
