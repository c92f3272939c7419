"""Every job shape gets its RAMDISK, in the lab (issue 14): a job array on a full cluster,
each task its own RSA job end to end (``<array>_<task>`` everywhere, ``%a`` in its
paths), input read through its RAMDISK and output staged out; ``rsa job`` and ``rsa
input-done`` from inside the task; a requeued job; a heterogeneous job."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from rsa_scheduler.core.states import RsaState
from tests.e2e.conftest import lab_mode
from tests.integration.conftest import as_user
from tests.integration.slurmkit import make_jobs, past_requeue_delay, root, wait_for
from tests.integration.test_rsad_staging import fill, rsa_job, wait_state

TASKS = 4
# staged: locked in, or already on its way further (not core.states.STAGED: that also has
# staged-in, lock-failed, mounting-output, the writeback and the failures, and not the
# teardown)
STAGED = (RsaState.LOCKED_IN, RsaState.MOUNTING_INPUT, RsaState.MOUNTED_INPUT,
          RsaState.RESETTING, RsaState.MOUNTED_OUTPUT, RsaState.STAGING_OUT, RsaState.VERIFYING,
          RsaState.OUTPUT_VERIFIED, RsaState.TEARING_DOWN, RsaState.RELEASED)


@pytest.fixture
def area(lab: Mapping[str, str]) -> Iterator[Path]:
    base = Path(lab["RSA_LAB_PFS"]) / f"shapes-e2e-{os.getpid()}-{time.monotonic_ns()}"
    script = (f"set -e; mkdir -p {base}/res; for t in $(seq 0 {TASKS - 1}); do "
              f"mkdir -p {base}/in/$t {base}/out/$t; for i in 1 2 3; do "
              f"head -c $((t*1000 + i*777)) /dev/urandom > {base}/in/$t/f$i; done; done")
    done = as_user(lab, lab["RSA_LAB_USER"], ["bash", "-c", script], timeout=120)
    assert done.returncode == 0, done.stderr
    yield base
    subprocess.run(["rm", "-rf", str(base)], check=False, timeout=120)


def md5(path: Path) -> str:
    return subprocess.run(["bash", "-c", "md5sum f*"], cwd=path, capture_output=True,
                          text=True, timeout=30, check=True).stdout


def test_an_array_on_a_full_cluster_gives_every_task_its_ramdisk(
        lab: Mapping[str, str], area: Path) -> None:
    rsa = f"{lab['RSA_LAB_VENV']}/bin/rsa"
    res = area / "res"
    script = f"""#!/bin/bash
#SBATCH -t 5
#SBATCH --array=0-{TASKS - 1}
#RSA_DATA_IN={area}/in/%a
#RSA_DATA_OUT={area}/out/%a
#RSA_RESET=input-done
t=$SLURM_ARRAY_TASK_ID
sleep 15  # a task ends only after the test freed the next node: tasks start one by one
findmnt -n -o TARGET --target {area}/in/$t > {res}/inmnt.$t
(cd {area}/in/$t && md5sum f*) > {res}/md5.$t
{rsa} job --json > {res}/job.$t 2>&1
{rsa} input-done > {res}/input-done.$t 2>&1
findmnt -n -o TARGET --target {area}/out/$t > {res}/outmnt.$t
head -c $((t*4096 + 100)) /dev/urandom > {area}/out/$t/result
md5sum {area}/out/$t/result | cut -d' ' -f1 > {res}/result.$t
"""
    with make_jobs(lab) as jobs:
        fill(jobs)
        array = jobs.submit(script=script)
        tasks = [f"{array}_{t}" for t in range(TASKS)]
        # Slurm reaches the tasks one by one: each is on-deck, staged and locked in, then
        # a node frees and it starts with its RAMDISK
        for t, task in enumerate(tasks):
            wait_state(lab, task, *STAGED, timeout=180)
            root(lab, "scancel", jobs.ids[t])
        for task in tasks:
            wait_state(lab, task, "released", timeout=240)
    for t, task in enumerate(tasks):
        assert (res / f"inmnt.{t}").read_text().strip() == f"{area}/in/{t}"
        assert (res / f"md5.{t}").read_text() == md5(area / "in" / str(t))
        assert (res / f"outmnt.{t}").read_text().strip() == f"{area}/out/{t}"
        got = subprocess.run(["md5sum", str(area / "out" / str(t) / "result")],
                             capture_output=True, text=True, timeout=30, check=True)
        assert got.stdout.split()[0] == (res / f"result.{t}").read_text().strip()
        seen = (res / f"job.{t}").read_text()
        assert f'"job_id": "{task}"' in seen, seen  # rsa job inside the task: the task
        data = rsa_job(lab, task)
        assert data is not None
        reached = [e.get("to") for e in data["events"] if e["name"] == "rsa.transition"]
        assert "mounted-input" in reached and "output-verified" in reached, reached
    assert rsa_job(lab, array) is None  # one key per task: no record under the bare id


def test_a_requeued_job_stages_its_first_runs_output_and_gets_a_new_ramdisk(
        lab: Mapping[str, str], area: Path) -> None:
    """``scontrol requeue`` of a running job: what the first run wrote to its RAMDISK is
    staged out and verified, the job is held again and gets a new RAMDISK for its second
    run (on an idle cluster too), and nothing is left behind."""
    res, out = area / "res", area / "out" / "0"
    script = f"""#!/bin/bash
#SBATCH -t 5
#SBATCH --requeue
#RSA_DATA_OUT={out}
n=${{SLURM_RESTART_COUNT:-0}}
findmnt -n -o TARGET --target {out} > {res}/outmnt.$n
echo "run $n" > {out}/run$n
touch {res}/wrote.$n
[ "$n" -gt 0 ] || sleep 300
"""
    with make_jobs(lab) as jobs:
        job = jobs.submit(script=script)
        wait_for("the first run wrote", lambda: (res / "wrote.0").exists(), timeout=180)
        root(lab, "scontrol", "requeue", job)
        wait_for("the second run wrote", past_requeue_delay(
            lab, job, lambda: (res / "wrote.1").exists()), timeout=300)
        wait_state(lab, job, "released", timeout=240)
    assert (out / "run0").read_text() == "run 0\n"  # the first run's output, staged out
    assert (out / "run1").read_text() == "run 1\n"
    for n in (0, 1):  # both runs wrote through a RAMDISK
        assert (res / f"outmnt.{n}").read_text().strip() == str(out)
    data = rsa_job(lab, job)
    assert data is not None and data["cycle"] == 2 and data["nodes"] == ""
    verified = [e for e in data["events"]
                if e["name"] == "rsa.transition" and e.get("to") == "output-verified"]
    assert len(verified) == 2


def test_a_heterogeneous_job_gets_one_ramdisk_on_every_components_nodes(
        lab: Mapping[str, str], area: Path) -> None:
    """A hetjob (1 + 2 nodes) submitted to an idle cluster: held, staged, one RSA job
    under the leader's id; every node of both components reads its input through the
    RAMDISK and, after ``rsa input-done``, writes its output to it; staged out."""
    rsa = f"{lab['RSA_LAB_VENV']}/bin/rsa"
    res, data_in, out = area / "res", area / "in" / "1", area / "out" / "1"
    step = (f"n=$(hostname); findmnt -n -o TARGET --target {data_in} > {res}/inmnt.$n; "
            f"(cd {data_in} && md5sum f*) > {res}/md5.$n")
    write = (f"n=$(hostname); findmnt -n -o TARGET --target {out} > {res}/outmnt.$n; "
             f"head -c 5000 /dev/urandom > {out}/r.$n; md5sum < {out}/r.$n > {res}/r.$n")
    script = f"""#!/bin/bash
#SBATCH -t 5 -N 1
#SBATCH hetjob
#SBATCH -N 2
#RSA_DATA_IN={data_in}
#RSA_DATA_OUT={out}
#RSA_RESET=input-done
srun --het-group=0,1 bash -c '{step}'
{rsa} job --json > {res}/job 2>&1
{rsa} input-done > {res}/input-done 2>&1
srun --het-group=0,1 bash -c '{write}'
"""
    with make_jobs(lab) as jobs:
        job = jobs.submit(script=script)
        wait_state(lab, job, "released", timeout=300)
    nodes = sorted(p.name.split(".", 1)[1] for p in res.glob("inmnt.*"))
    assert len(nodes) == 3, nodes  # every node of both components ran the steps
    for n in nodes:
        assert (res / f"inmnt.{n}").read_text().strip() == str(data_in)  # the RAMDISK
        assert (res / f"md5.{n}").read_text() == md5(data_in)
        assert (res / f"outmnt.{n}").read_text().strip() == str(out)
        got = subprocess.run(["bash", "-c", f"md5sum < {out}/r.{n}"], capture_output=True,
                             text=True, timeout=30, check=True).stdout
        assert got == (res / f"r.{n}").read_text()
    assert f'"job_id": "{job}"' in (res / "job").read_text()
    data = rsa_job(lab, job)
    assert data is not None
    reached = [e.get("to") for e in data["events"] if e["name"] == "rsa.transition"]
    assert "mounted-input" in reached and "output-verified" in reached, reached
    # no RSA job of its own for the second component: its own job id is the hetjob's
    # (once slurmctld's hooks taught rsad the match) or untracked, never another record
    component = rsa_job(lab, str(int(job) + 1))
    assert rsa_job(lab, f"{job}+1") is None
    assert component is None or component["job_id"] == job, component
    # idle cluster: held until its RAMDISK was ready (queue mode: the start hold, released
    # by rsad; native mode: Slurm's stage-in, set up by the bb hooks)
    held_by = "job.hold-released" if lab_mode(lab) == "queue" else "bb.setup"
    assert any(e["name"] == held_by for e in data["events"]), data["events"]
