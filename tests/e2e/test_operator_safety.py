"""What an operator does beside a live rsad, against the lab's (issue 33): ``rsad --check``
during a stage-out leaves it untouched; a second rsad on the same store is refused; a job
its user cancelled reads CANCELLED, as Slurm records it."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest
from ClusterShell.NodeSet import NodeSet

from tests.e2e.test_prolog_lifecycle import run_to_start
from tests.e2e.test_stage_out_failures import area, events, md5_of, output_job
from tests.integration.conftest import as_user, slurm_env
from tests.integration.slurmkit import lab_rsad_pid, make_jobs, make_slurm, wait_for
from tests.integration.test_rsad_staging import rsa_job, wait_state

__all__ = ["area"]

def rsad(lab: Mapping[str, str], *args: str,
         timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The lab's rsad program run again beside the lab's rsad, on its configuration."""
    return subprocess.run([f"{lab['RSA_LAB_VENV']}/bin/rsad", "--config",
                           lab["RSA_LAB_RSA_CONFIG"], *args], capture_output=True, text=True,
                          timeout=timeout, env=slurm_env(lab))


def store_of(lab: Mapping[str, str]) -> str:
    return lab["RSA_LAB_RSAD_STORE"]


@pytest.mark.once  # rsad and the RSA nodes alone
def test_rsad_check_during_a_stage_out_leaves_it_untouched(
        lab: Mapping[str, str], area: Path) -> None:
    out, res = area / "out", area / "res"
    pid = lab_rsad_pid()
    with make_jobs(lab) as jobs:
        job = run_to_start(lab, jobs, output_job(out, res, 500))
        wait_state(lab, job, "staging-out", timeout=240)
        done = rsad(lab, "--check")  # what the unit's ExecStartPre and an operator run
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert (f"rsad: rsad (pid {pid}) runs on this store in queue mode; the check left "
                "it alone") in lines
        assert "rsad: drain: none (jobs get RSA nodes)" in lines
        outstanding = next(ln for ln in lines if ln.startswith("rsad: actions outstanding:"))
        assert f"{job}/1/stage-out/" in outstanding, done.stdout
        wait_state(lab, job, "released", timeout=240)
    # the stage-out ran once, to the end: nothing of it was killed or retried
    outcomes = [(str(e["action"]), e["result"], e.get("message"))
                for e in events(lab, job, "action.outcome")]
    assert [r for a, r, _ in outcomes if "/stage-out/" in a] == ["ok"], outcomes
    assert md5_of(out) == (res / "md5").read_text()
    assert lab_rsad_pid() == pid


@pytest.mark.once  # rsad alone
def test_a_second_rsad_on_the_same_store_is_refused_at_once(lab: Mapping[str, str]) -> None:
    pid = lab_rsad_pid()
    done = rsad(lab, timeout=30)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stderr.strip().splitlines()[-1] == (
        f"rsad: error: rsad (pid {pid}) already runs on {store_of(lab)}")
    # it touched nothing of the first: same process, its socket, and it answers
    assert lab_rsad_pid() == pid and Path(f"/proc/{pid}").exists()
    status = subprocess.run([f"{lab['RSA_LAB_VENV']}/bin/rsa", "status", "--json"],
                            capture_output=True, text=True, timeout=30)
    assert status.returncode == 0, status.stderr


@pytest.mark.once  # rsad and the RSA nodes alone
def test_rsad_check_nodes_runs_each_rsa_nodes_read_only_check(lab: Mapping[str, str]) -> None:
    done = rsad(lab, "--check", "--nodes")
    assert done.returncode == 0, (done.stdout, done.stderr)
    lines = done.stdout.splitlines()
    for node in NodeSet(lab["RSA_LAB_RSA_NODES"]):
        assert f"rsad: {node}: ok" in lines, done.stdout


def test_a_job_its_user_cancelled_reads_cancelled(lab: Mapping[str, str], area: Path) -> None:
    out, res = area / "out", area / "res"
    script = f"""#!/bin/bash
#SBATCH -t 5
#RSA_DATA_OUT={out}
echo kept > {out}/kept
touch {res}/written
exec sleep 300
"""
    with make_jobs(lab) as jobs:
        job = run_to_start(lab, jobs, script)
        wait_for("the job's output written", (res / "written").exists, timeout=120,
                 every=0.5)
        done = as_user(lab, lab["RSA_LAB_USER"], ["scancel", job])
        assert done.returncode == 0, done.stderr
        wait_state(lab, job, "released", timeout=180)
        data = wait_for("Slurm's end state in rsa job", lambda: (
            d if (d := rsa_job(lab, job)) and d.get("end_state") else None), timeout=60,
            every=0.5)
    assert (data["job_state"], data["end_state"]) == ("finished", "CANCELLED")
    shown = subprocess.run([f"{lab['RSA_LAB_VENV']}/bin/rsa", "job", job],
                           capture_output=True, text=True, timeout=30, check=True).stdout
    assert " job_state: finished (CANCELLED)" in shown, shown
    assert "COMPLETED" not in shown, shown
    assert "job ended CANCELLED (Slurm's record" in shown or "(CANCELLED/" in shown, shown
    # and what it wrote before it was cancelled still went to the PFS
    assert (out / "kept").read_text() == "kept\n"
    if lab.get("RSA_LAB_ACCOUNTING") == "1":  # what rsad asks once the queue forgot it
        assert make_slurm(lab).end_states([job]) == {job: "CANCELLED"}
