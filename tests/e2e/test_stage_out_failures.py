"""Stage-out when things go wrong, through whole jobs in the lab (issue 4, seed 004 §3.4):
a stage-out that keeps failing is retried with backoff, then quarantined with the RAMDISK
and its data intact, and an operator's ``rsa retry`` finishes it once the cause is fixed;
rsad SIGKILLed in the middle of a stage-out resumes it, verifies the output and leaks no
filesystem. The lab's rsa.yaml retries stage-out twice, 2 s then 4 s apart."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import psutil
import pytest

from tests.e2e.conftest import lab_mode
from tests.e2e.test_prolog_lifecycle import nothing_of_job_mounted, run_to_start
from tests.integration.conftest import as_user
from tests.integration.slurmkit import (
    lab_rsad_pid,
    make_jobs,
    ramdisk_servers,
    restart_lab_rsad,
    root,
)
from tests.integration.test_rsad_staging import rsa_job, ssh, wait_state


@pytest.fixture
def area(lab: Mapping[str, str]) -> Iterator[Path]:
    base = Path(lab["RSA_LAB_PFS"]) / f"stage-out-e2e-{os.getpid()}-{time.monotonic_ns()}"
    done = as_user(lab, lab["RSA_LAB_USER"], ["mkdir", "-p", f"{base}/out", f"{base}/res"])
    assert done.returncode == 0, done.stderr
    yield base
    subprocess.run(["chmod", "-R", "u+rwx", str(base)], check=False, timeout=60)
    subprocess.run(["rm", "-rf", str(base)], check=False, timeout=120)


def output_job(out: Path, res: Path, size_mib: int) -> str:
    """A job that writes ``size_mib`` MiB of random data through DATA_OUT (the RAMDISK
    from the start: no DATA_IN) and records its checksum where the test can read it."""
    return f"""#!/bin/bash
#SBATCH -t 5
#RSA_DATA_OUT={out}
findmnt -n -o TARGET --target {out} > {res}/outmnt
mkdir -p {out}/sub
head -c {size_mib}M /dev/urandom > {out}/sub/result.bin
for i in $(seq 1 20); do echo "line $i" > {out}/small-$i; done
(cd {out} && md5sum sub/result.bin small-*) > {res}/md5
"""


def md5_of(out: Path) -> str:
    return subprocess.run(["bash", "-c", "md5sum sub/result.bin small-*"], cwd=out,
                          capture_output=True, text=True, timeout=120, check=True).stdout


def on_ramdisk(lab: Mapping[str, str], job: str) -> str:
    """The checksums of the job's output as its RAMDISK holds it (on its first RSA node)."""
    data = rsa_job(lab, job)
    assert data is not None and data["ramdisk"], data
    mount = data["ramdisk"]["rsa_mountpoint"]
    first = data["nodes"].strip("rsa[").split("-")[0].split(",")[0].rstrip("]")
    host = ssh(lab, int(first))
    try:
        return host.run(["bash", "-c", f"cd {mount} && md5sum sub/result.bin small-*"],
                        timeout=120).stdout
    finally:
        host.close()


def events(lab: Mapping[str, str], job: str, name: str) -> list[dict[str, object]]:
    data = rsa_job(lab, job)
    assert data is not None
    return [e for e in data["events"] if e["name"] == name]


def test_failing_stage_out_is_retried_then_quarantined_with_the_data_intact(
        lab: Mapping[str, str], area: Path) -> None:
    out, res = area / "out", area / "res"
    rsa = f"{lab['RSA_LAB_VENV']}/bin/rsa"
    with make_jobs(lab) as jobs:
        job = run_to_start(lab, jobs, output_job(out, res, 64))
        wait_for_file(res / "outmnt")
        # the PFS side of DATA_OUT (the host does not see the job's mounts) refuses writes
        out.chmod(0o555)
        wait_state(lab, job, "quarantined", timeout=240)
        failures = [e for e in events(lab, job, "action.outcome")
                    if "/stage-out/" in str(e["action"])]
        assert len(failures) == 3 and all(e["result"] != "ok" for e in failures), failures
        assert all("ermission" in str(e.get("message", "")) for e in failures), failures
        # the compute node was released long ago (native mode: the job stays in Slurm's
        # stage-out, its nodes free); the RAMDISK still holds every byte
        state = root(lab, "squeue", "-h", "-j", job, "-o", "%T").strip()
        if lab_mode(lab) == "queue":
            assert state in ("", "COMPLETED")
        else:
            assert state == "STAGE_OUT"
            assert root(lab, "squeue", "-h", "-t", "running", "-o", "%i").strip() == ""
        expected = (res / "md5").read_text()
        assert on_ramdisk(lab, job) == expected
        # not forgotten: rsa status names it, with its age and what it holds (issue 33)
        shown = subprocess.run([rsa, "status"], capture_output=True, text=True, timeout=60,
                               check=True).stdout
        held = [ln for ln in shown.splitlines()
                if ln.startswith(f"  job {job} ({lab['RSA_LAB_USER']}) for ")]
        assert len(held) == 1 and held[0].endswith(" held"), shown
        assert "held by quarantined output" in shown, shown
        # what the user's rsa wait says: not in place, exit status 2
        waited = as_user(lab, lab["RSA_LAB_USER"], [rsa, "wait", "--timeout", "60", job])
        assert waited.returncode == 2, (waited.stdout, waited.stderr)
        assert waited.stdout.startswith(f"{job}: quarantined: "), waited.stdout
        # a user may not force it; the operator fixes the cause and retries
        refused = as_user(lab, lab["RSA_LAB_USER"], [rsa, "release", job, "--yes"])
        assert refused.returncode != 0
        out.chmod(0o755)
        subprocess.run([rsa, "retry", job], check=True, capture_output=True, timeout=60)
        waited = as_user(lab, lab["RSA_LAB_USER"], [rsa, "wait", "--timeout", "180", job],
                         timeout=200)
        assert waited.returncode == 0 and waited.stdout.startswith(f"{job}: verified: "), \
            (waited.stdout, waited.stderr)
        assert md5_of(out) == expected  # in place the moment rsa wait says so
        wait_state(lab, job, "released", timeout=180)
    assert md5_of(out) == expected
    verified = [e for e in events(lab, job, "action.outcome")
                if "/verify/" in str(e["action"]) and e["result"] == "ok"]
    assert verified
    assert nothing_of_job_mounted(job)


def copying_into(out: Path, timeout: float = 120) -> None:
    """Until the stage-out has written bytes under ``out`` on the PFS (its part
    directory): the copy is under way, whatever the machine's speed. The 900 MiB go over
    the lab's PFS link (1 Gbit/s, ~9 s), so it is still copying when this returns; a
    fixed wait after "staging-out" came before the copy on a slow machine."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if any(p.is_file() and p.stat().st_size > 0 for p in out.rglob("*")):
                return
        except OSError:
            pass  # a part directory renamed or removed under the walk
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s: nothing copied into {out}")
        time.sleep(0.1)


def test_rsad_killed_during_stage_out_resumes_verifies_and_leaks_nothing(
        lab: Mapping[str, str], area: Path) -> None:
    out, res = area / "out", area / "res"
    with make_jobs(lab) as jobs:
        job = run_to_start(lab, jobs, output_job(out, res, 900))
        wait_state(lab, job, "staging-out", timeout=240)
        copying_into(out)
        restart_lab_rsad(signal.SIGKILL)
        wait_state(lab, job, "released", timeout=240)
    assert md5_of(out) == (res / "md5").read_text()
    outcomes = [(str(e["action"]), e["result"]) for e in events(lab, job, "action.outcome")]
    assert [r for a, r in outcomes if "/verify/" in a] == ["ok"]
    assert sum(1 for a, _ in outcomes if "/build-fs/" in a) == 1
    fs_id = f"job{job}-c1"
    assert ramdisk_servers(lab, fs_id, "mfsmaster|mfschunkserver") == []
    assert nothing_of_job_mounted(job)
    status = rsa_job(lab, job)
    assert status is not None and status["rsa_state"] == "released"


def staging_workers() -> list[psutil.Process]:
    """The lab rsad's staging workers (staging.engine_process)."""
    rsad = psutil.Process(lab_rsad_pid())
    found = []
    for p in rsad.children():  # also rsad's short-lived children (squeue, scontrol)
        try:
            if "rsa_scheduler.daemon.stagingworker" in " ".join(p.cmdline()):
                found.append(p)
        except psutil.Error:
            continue  # gone meanwhile
    return found


@pytest.mark.once  # rsad's workers; rsad killed mid-stage-out (above) runs in both modes
def test_a_staging_worker_killed_mid_stage_out_is_replaced_and_its_copies_killed(
        lab: Mapping[str, str], area: Path) -> None:
    """kill -9 of the process that runs a stage-out's engine (out of memory, a bug): the
    copies it started on the RSA nodes are killed before the action fails (no stale
    writer beside the retry), the retry, in a new worker, stages and verifies it all."""
    out, res = area / "out", area / "res"
    with make_jobs(lab) as jobs:
        job = run_to_start(lab, jobs, output_job(out, res, 900))
        wait_state(lab, job, "staging-out", timeout=240)
        deadline = time.monotonic() + 60
        while not staging_workers():  # the stage-out's worker (idle ones may be there too)
            assert time.monotonic() < deadline, "rsad started no staging worker"
            time.sleep(0.2)
        copying_into(out)
        assert not any("/stage-out/" in str(e["action"])  # it still copies
                       for e in events(lab, job, "action.outcome"))
        killed = staging_workers()
        for p in killed:
            p.send_signal(signal.SIGKILL)
        wait_state(lab, job, "released", timeout=240)
        assert not {p.pid for p in killed} & {p.pid for p in staging_workers()}
    assert md5_of(out) == (res / "md5").read_text()
    outcomes = [e for e in events(lab, job, "action.outcome")
                if "/stage-out/" in str(e["action"])]
    assert [e["result"] for e in outcomes] == ["failed", "ok"], outcomes
    why = str(outcomes[0]["message"])
    assert "ended during stage-out (exit -9)" in why and "were killed" in why, why
    assert "will retry" in why
    assert [e["result"] for e in events(lab, job, "action.outcome")
            if "/verify/" in str(e["action"])] == ["ok"]
    assert nothing_of_job_mounted(job)


def wait_for_file(path: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {path}")
        time.sleep(0.5)
