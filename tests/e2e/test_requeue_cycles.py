"""A requeued job's runs never touch each other's RAMDISK or output (issue 35), in both
modes.

An output-only job writes to its RAMDISK, then requeues itself (``scontrol requeue``, as
its owner may). Its second run starts while (or after) the first run's output is staged
out. Both runs' output must end on the PFS; in native mode Slurm must not count the job
done before the second run's output is verified (a new setup is a new run: the first
run's "verified" never answers for it).

Queue mode (rsad's rerun hold): with the PFS slowed for the test, the second run never
starts before the first run's output is verified, under ``fallback`` (an admin's own hold
of it kept when rsad lifts its own) and under ``wait`` with ``tar`` archives (rsad
SIGKILLed while it holds the job); each run's output complete.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import input_area, lab_mode, rsad_configured
from tests.integration.slurmkit import (
    make_jobs,
    past_requeue_delay,
    pfs_writes_at,
    restart_lab_rsad,
    root,
    show_job,
    start_lab_rsad,
    stop_lab_rsad,
    wait_for,
)
from tests.integration.test_cli_top import fill
from tests.integration.test_rsad_staging import rsa_job, wait_state


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
        # native mode: Slurm's own requeue delay (121 s) is not this test's point; it
        # is ended as an admin could (queue mode: rsad's rerun hold decides)
        wait_for("the second run", past_requeue_delay(
            lab, job, lambda: (res / "md5.1").exists()), timeout=400)
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
    for n in (0, 1):  # each run wrote through a RAMDISK mounted over DATA_OUT
        assert (res / f"outmnt.{n}").read_text().strip() == str(out), n
    reached = [e.get("to") for e in data["events"] if e["name"] == "rsa.transition"]
    assert reached.count("output-verified") == 2, reached  # each run's own stage-out


RERUN_MARK = " hold=rerun"  # rsad's rerun hold (core/directive_spec.py RERUN_MARK)
MB = 40  # each run's output: 40 MiB through 8 Mbit/s, a stage-out of about 40 s


def rerun_script(out: Path, res: Path, early: str, method: str) -> str:
    """Run 0 writes its output to the RAMDISK, then requeues itself once the test says
    go; every run writes when it started (res/ is on the PFS)."""
    return f"""#!/bin/bash
#SBATCH -t 5
#SBATCH --requeue
#RSA_DATA_OUT={out}
#RSA_EARLY_START={early}
#RSA_STAGE_OUT={method}
n=${{SLURM_RESTART_COUNT:-0}}
date +%s.%N > {res}/start.$n
findmnt -n -o TARGET --target {out} > {res}/outmnt.$n || true
head -c $(({MB} << 20)) /dev/urandom > {out}/blob-$n
md5sum {out}/blob-$n | cut -d' ' -f1 > {res}/md5.$n
echo run$n > {out}/common
touch {res}/written.$n
if [ "$n" = 0 ]; then
  while [ ! -e {res}/go ]; do sleep 0.5; done
  scontrol requeue $SLURM_JOB_ID
  sleep 120
fi
"""


def held_for_its_earlier_run(lab: Mapping[str, str], job: str, res: Path) -> dict[str, str]:
    """Wait until rsad holds the requeued job for its first run's output (or its second
    run starts, which must not happen: on main it did, under both policies)."""
    def probe() -> dict[str, str] | None:
        if (res / "start.1").exists():
            return {"started": "yes"}
        info = show_job(lab, job)
        return info if RERUN_MARK in info["AdminComment"] else None

    info = wait_for("the rerun hold", probe, timeout=240, every=0.5)
    assert "started" not in info, "the second run started while the first run's output " \
                                  "was staged out"
    assert info["JobState"] == "PENDING", info
    def told() -> str | None:
        comment = show_job(lab, job)["Comment"]
        return comment if "held until the previous run's output" in comment else None

    comment = wait_for("the user told why", told, timeout=90)
    assert "verified" in comment, comment
    begin = root(lab, "squeue", "-h", "-j", job, "-O", "StartTime:0").strip()
    done = subprocess.run(["date", "-d", begin, "+%s"], capture_output=True, text=True,
                          check=False)
    if done.returncode == 0:  # Slurm's own requeue delay (121 s) never replaced the hold
        assert int(done.stdout) > time.time() + 86400, begin
    return info


def first_verified(data: Mapping[str, Any]) -> float:
    return min(float(e["time"]) for e in data["events"]
               if e["name"] == "rsa.transition" and e.get("to") == "output-verified")


def ended_and_released(lab: Mapping[str, str], job: str) -> dict[str, Any]:
    wait_for("the job's end", lambda: _slurm_state(lab, job) in (
        "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"), timeout=300)
    wait_state(lab, job, "released", "quarantined", "declined", timeout=300)
    data = rsa_job(lab, job)
    assert data is not None and data["rsa_state"] == "released", data
    return data


@pytest.mark.queue
def test_a_rerun_under_fallback_waits_for_the_first_runs_output_and_keeps_an_admins_hold(
        lab: Mapping[str, str], area: Path) -> None:
    """On main nothing held it: Slurm's requeue delay over (brought to 30 s here, as a
    site with a shorter credential lifetime has it; 121 s by default), the second run
    started during the first run's stage-out and wrote ``common`` on the PFS, which that
    stage-out then replaced with the first run's."""
    out, res = area / "out", area / "res"
    with make_jobs(lab) as jobs:
        fill(jobs)  # the first run gets its RAMDISK while it is on-deck (fallback)
        job = jobs.submit(script=rerun_script(out, res, "fallback", "rsync"))
        wait_state(lab, job, "locked-in", timeout=120)
        for filler in jobs.fillers:
            root(lab, "scancel", filler)
        wait_for("the first run's output", lambda: (res / "written.0").exists(),
                 timeout=120)
        assert (res / "outmnt.0").read_text().strip() == str(out)  # on its RAMDISK
        with pfs_writes_at(lab, "8mbit"):
            stop_lab_rsad(signal.SIGKILL)  # rsad learns of the requeue when it is back
            try:
                (res / "go").touch()
                wait_for("the requeue", lambda: show_job(lab, job)["JobState"] == "PENDING",
                         timeout=120)
                root(lab, "scontrol", "update", f"JobId={job}", "StartTime=now+30")
            finally:
                start_lab_rsad()
            held_for_its_earlier_run(lab, job, res)
            root(lab, "scontrol", "hold", job)  # an admin's own hold
            wait_for("rsad's release", lambda: RERUN_MARK not in show_job(
                lab, job)["AdminComment"], timeout=240)
        for _ in range(3):  # rsad lifted its own hold only: the admin's stays
            info = show_job(lab, job)
            assert info["JobState"] == "PENDING" and info["Reason"] == "JobHeldAdmin", info
            assert not (res / "start.1").exists()
            time.sleep(1)
        root(lab, "scontrol", "release", job)
        wait_for("the second run", lambda: (res / "written.1").exists(), timeout=120)
        data = ended_and_released(lab, job)
    assert float((res / "start.1").read_text()) > first_verified(data)
    for n in (0, 1):
        got = root(lab, "md5sum", str(out / f"blob-{n}")).split()[0]
        assert got == (res / f"md5.{n}").read_text().strip(), n
    assert (out / "common").read_text() == "run1\n"  # the later run's, not replaced
    names = [e["name"] for e in data["events"]]
    assert "job.rerun-held" in names and "job.rerun-released" in names


@pytest.mark.queue
def test_a_requeued_tar_job_under_wait_keeps_both_runs_archives_across_an_rsad_crash(
        lab: Mapping[str, str], area: Path) -> None:
    """On main the requeued job was held for staging.wait_timeout only (25 s here): its
    second run started during the first run's stage-out, wrote to the PFS without a
    RAMDISK and left no archive of its own. Now it waits for the first run's archives to
    be verified (rsad SIGKILLed meanwhile), then gets a RAMDISK: each run's archives
    verified, none replacing the other's."""
    out, res = area / "out", area / "res"
    with rsad_configured(lab, "  wait_timeout: 25s\n"), make_jobs(lab) as jobs:
        job = jobs.submit(script=rerun_script(out, res, "wait", "tar"))
        wait_for("the first run's output", lambda: (res / "written.0").exists(),
                 timeout=180)
        assert (res / "outmnt.0").read_text().strip() == str(out)
        with pfs_writes_at(lab, "8mbit"):
            (res / "go").touch()
            held_for_its_earlier_run(lab, job, res)
            wait_state(lab, job, "staging-out", timeout=60)
            restart_lab_rsad(signal.SIGKILL)  # a crash while rsad holds the rerun
            info = show_job(lab, job)
            assert info["JobState"] == "PENDING" and RERUN_MARK in info["AdminComment"]
            wait_for("the second run", lambda: (res / "start.1").exists(), timeout=300)
        wait_for("the second run's output", lambda: (res / "written.1").exists(),
                 timeout=120)
        data = ended_and_released(lab, job)
    assert float((res / "start.1").read_text()) > first_verified(data)
    assert (res / "outmnt.1").read_text().strip() == str(out)  # a RAMDISK of its own
    reached = [e.get("to") for e in data["events"] if e["name"] == "rsa.transition"]
    assert reached.count("output-verified") == 2, reached
    first = sorted(out.glob(f"rsa-{job}-*.tar"))
    second = sorted(out.glob(f"rsa-{job}.c2-*.tar"))
    assert first and second, sorted(p.name for p in out.iterdir())
    for n, archives in ((0, first), (1, second)):
        got = ""
        for archive in archives:
            names = root(lab, "tar", "-tf", str(archive)).split()
            member = next((m for m in names if m.rstrip("/").endswith(f"blob-{n}")), None)
            if member is not None:
                got = subprocess.run(f"tar -xOf {archive} {member} | md5sum", shell=True,
                                     capture_output=True, text=True, check=True,
                                     timeout=120).stdout.split()[0]
        assert got == (res / f"md5.{n}").read_text().strip(), (n, archives)
