"""Native mode, rsad crashed (SIGKILL) at each step of a stage-out, and a job requeued
while its output stages out, in the lab: Slurm never ends a job's stage-out before its
output is verified on the PFS, and no RAMDISK goes before that.

1. rsad killed, then started again, at every step of a stage-out it is seen in: the
   copy (``staging-out``), the verification (``verifying``), between the verification
   and the teardown (``output-verified``) and during the teardown (``tearing-down``).
   While rsad is down Slurm asks data_out (22.05: blocking; 24.05+: test_data_out) and
   teardown: the job stays in ``STAGE_OUT`` until rsad's log holds ``output-verified``,
   the RAMDISK is torn down only after that, and the output matches what the job wrote.
2. ``scontrol requeue`` while the first run's output stages out: Slurm does not set the
   job up again before that stage-out is over (its burst buffer is still staging out);
   the first run's output is verified before its RAMDISK goes, the second run writes its
   own, which is verified too.
3. A job that fails: its output is verified before Slurm shows it FAILED, its user's
   ``scancel`` during the stage-out notwithstanding.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from rsa_scheduler.store import Store
from tests.e2e.conftest import input_area
from tests.e2e.test_native_trouble import queue_line, rsad_store
from tests.integration.conftest import as_user
from tests.integration.slurmkit import (
    make_jobs,
    past_requeue_delay,
    root,
    start_lab_rsad,
    stop_lab_rsad,
    wait_for,
)
from tests.integration.test_rsad_staging import rsa_job, wait_state

pytestmark = pytest.mark.native

#: the steps of a stage-out rsad is killed in, in their order
STEPS = ("staging-out", "verifying", "output-verified", "tearing-down")



@pytest.fixture
def area(lab: Mapping[str, str]) -> Iterator[Path]:
    with input_area(lab, "native-crash") as base:
        yield base


def reached(job: str) -> list[str]:
    """The rsa-states ``job`` went to, in order, as rsad's log holds them (read while
    rsad is down too)."""
    with Store.open(rsad_store(), readonly=True) as ro:
        return [str(e.context.get("to")) for e in ro.events(job)
                if e.name == "rsa.transition"]


def slurm_ended_after_verify(lab: Mapping[str, str], job: str) -> None:
    """Slurm may show the job done only once rsad's log says its output is verified."""
    state = queue_line(lab, job)[0]
    if state in ("COMPLETED", "FAILED", "CANCELLED"):
        assert "output-verified" in reached(job), \
            f"Slurm ended job {job} ({state}) before its output was verified"


def in_order(states: list[str]) -> None:
    """No RAMDISK torn down before the output was verified, nothing quarantined."""
    assert "quarantined" not in states, states
    assert "output-verified" in states, states
    assert states.index("tearing-down") > states.index("output-verified"), states


def test_rsad_killed_at_every_step_of_a_stage_out_loses_nothing(
        lab: Mapping[str, str], area: Path) -> None:
    out = area / "out"
    script = (f"#!/bin/bash\n#SBATCH -t 10\n#RSA_DATA_OUT={out}\n"
              f"head -c $((160 << 20)) /dev/urandom > {out}/big\n"
              f"for i in 1 2 3 4 5 6 7 8; do echo $i > {out}/s$i; done\n"
              f"(cd {out} && md5sum big s*) > {area}/res/md5.out\n")
    killed: list[str] = []
    with make_jobs(lab) as jobs:
        job = jobs.submit(script=script)
        wait_state(lab, job, "mounted-output", timeout=240)
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            states = reached(job)
            now = states[-1] if states else ""
            if now == "released":
                break
            if now in STEPS and now not in killed:
                killed.append(now)
                try:
                    stop_lab_rsad(signal.SIGKILL)
                    time.sleep(5)  # Slurm asks data_out / teardown while rsad is down
                    slurm_ended_after_verify(lab, job)
                finally:
                    start_lab_rsad()
            slurm_ended_after_verify(lab, job)
            time.sleep(0.05)
        wait_for("Slurm's end of the job", lambda: queue_line(lab, job)[0] == "COMPLETED",
                 timeout=300)
        wait_state(lab, job, "released", timeout=120)
    states = reached(job)
    in_order(states)
    # the copy and its verification take seconds: those two are always caught
    assert {"staging-out", "verifying"} <= set(killed), (killed, states)
    got = root(lab, "bash", "-c", f"cd {out} && md5sum big s*")
    assert got == (area / "res" / "md5.out").read_text()


def test_a_job_requeued_while_its_output_stages_out_keeps_both_runs_output(
        lab: Mapping[str, str], area: Path) -> None:
    out = area / "out"
    script = (f"#!/bin/bash\n#SBATCH -t 10\n#SBATCH --requeue\n#RSA_DATA_OUT={out}\n"
              "n=${SLURM_RESTART_COUNT:-0}\n"
              f"head -c $((120 << 20)) /dev/urandom > {out}/big$n\n"
              f"(cd {out} && md5sum big$n) > {area}/res/md5.$n\n")
    with make_jobs(lab) as jobs:
        job = jobs.submit(script=script)
        wait_state(lab, job, "staging-out", timeout=240)
        root(lab, "scontrol", "requeue", job)
        assert "output-verified" not in reached(job), "the requeue came after the stage-out"
        wait_for("the second run's output", past_requeue_delay(
            lab, job, lambda: (area / "res" / "md5.1").exists()), timeout=400)
        wait_for("Slurm's end of the job", lambda: queue_line(lab, job)[0] == "COMPLETED",
                 timeout=300)
        wait_state(lab, job, "released", timeout=120)
        data = rsa_job(lab, job) or {}
    states = reached(job)
    # two cycles, each verified before its RAMDISK went
    assert states.count("output-verified") == 2, states
    first, second = states[:states.index("released") + 1], states[states.index("released") + 1:]
    in_order(first)
    in_order(second)
    assert data.get("rsa_state") == "released", data.get("rsa_state")
    for n in ("0", "1"):
        got = root(lab, "bash", "-c", f"cd {out} && md5sum big{n}")
        assert got == (area / "res" / f"md5.{n}").read_text(), n


def test_a_failed_jobs_output_is_verified_before_slurm_ends_it_even_if_cancelled(
        lab: Mapping[str, str], area: Path) -> None:
    """A job that writes its output and fails (exit 3): its output is staged out and
    verified like any, and Slurm shows it FAILED only after that; its user's plain
    ``scancel`` while the output stages out ends nothing early (Slurm refuses to signal
    a job that ended; ``--hurry`` is tests/e2e/test_native_trouble.py's)."""
    out = area / "out"
    script = (f"#!/bin/bash\n#SBATCH -t 10\n#RSA_DATA_OUT={out}\n"
              f"head -c $((120 << 20)) /dev/urandom > {out}/big\n"
              f"(cd {out} && md5sum big) > {area}/res/md5.out\n"
              "exit 3\n")
    with make_jobs(lab) as jobs:
        job = jobs.submit(script=script)
        wait_state(lab, job, "staging-out", timeout=240)
        as_user(lab, lab["RSA_LAB_USER"], ["scancel", job])
        deadline = time.monotonic() + 300
        while (state := queue_line(lab, job)[0]) != "FAILED":
            slurm_ended_after_verify(lab, job)
            assert time.monotonic() < deadline and state not in ("COMPLETED",
                                                                 "CANCELLED"), state
            time.sleep(0.2)
        slurm_ended_after_verify(lab, job)
        wait_state(lab, job, "released", timeout=120)
    in_order(reached(job))
    got = root(lab, "bash", "-c", f"cd {out} && md5sum big")
    assert got == (area / "res" / "md5.out").read_text()
