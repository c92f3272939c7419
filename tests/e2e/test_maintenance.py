"""Maintenance in the lab (issue 33): with a job in flight, an rsad configured for the
other ``slurm.mode`` refuses to start; ``rsa admin drain`` then lets that job finish (its
output staged out and verified) while a new job gets no RSA nodes and its user reads why;
``rsad --check`` beside the live rsad reports the drain and the refused mode switch;
the drain survives an rsad restart; ``rsa admin resume`` gives the waiting job its
RAMDISK.

On main (6dee349) there was no drain of the whole RSA, and rsad started in another mode
under jobs in flight.
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_stage_out_failures import area, md5_of, output_job
from tests.integration.conftest import as_user, slurm_env
from tests.integration.slurmkit import (
    make_jobs,
    restart_lab_rsad,
    show_job,
    start_lab_rsad,
    stop_lab_rsad,
    wait_for,
)
from tests.integration.test_rsad_staging import rsa_job, wait_state

__all__ = ["area"]

pytestmark = pytest.mark.queue  # the start hold under wait is queue mode's

DRAINED = ("RSA: waits for RSA nodes: RSA maintenance (rsa admin drain by root: lab "
           "maintenance), until rsa admin resume; held meanwhile, at most "
           "staging.wait_timeout, then it reads the PFS")


def rsa(lab: Mapping[str, str], *args: str) -> str:
    done = subprocess.run([f"{lab['RSA_LAB_VENV']}/bin/rsa", *args], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


def status(lab: Mapping[str, str]) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(rsa(lab, "status", "--json"))
    return data


def reached(lab: Mapping[str, str], job: str) -> list[str]:
    data = rsa_job(lab, job) or {"events": []}
    return [str(e.get("to")) for e in data["events"] if e["name"] == "rsa.transition"]


#: a job's wait for the test's go (at most 5 min: its time limit)
GO_WAIT = ("t=0; while [ ! -e {go} ] && [ $t -lt 2800 ]; do sleep 0.1; t=$((t+1)); "
           "done")


def go(lab: Mapping[str, str], res: Path) -> None:
    """Let the job waiting in GO_WAIT go on."""
    done = as_user(lab, lab["RSA_LAB_USER"], ["touch", str(res / "go")])
    assert done.returncode == 0, done.stderr


@contextmanager
def _resumed_after(lab: Mapping[str, str]) -> Iterator[None]:
    """Whatever happens, no drain is left for the next test (a failure here left one, and
    the next test's jobs were held by it)."""
    try:
        yield
    finally:
        subprocess.run([f"{lab['RSA_LAB_VENV']}/bin/rsa", "admin", "resume"],
                       capture_output=True, text=True, timeout=60, check=False)


def test_a_drain_finishes_what_is_in_flight_and_holds_new_jobs_off_across_a_restart(
        lab: Mapping[str, str], area: Path, tmp_path: Path) -> None:
    out, res = area / "out", area / "res"
    made = as_user(lab, lab["RSA_LAB_USER"], ["bash", "-c", f"mkdir {area}/in && "
                                                   f"head -c 10000 /dev/urandom > {area}/in/f1"])
    assert made.returncode == 0, made.stderr
    with make_jobs(lab) as jobs, _resumed_after(lab):
        # in flight until the test says go (a sleep of 30 s ended under load before the
        # checks below, which need it in flight)
        first = jobs.submit(script=output_job(out, res, 2).replace(
            f"(cd {out}", f"{GO_WAIT.format(go=res / 'go')}\n(cd {out}"))
        wait_state(lab, first, "mounted-output", timeout=120)
        # an rsad for the other mode refuses to start under it, and says why
        conf = Path(lab["RSA_LAB_RSA_CONFIG"]).read_text()
        assert conf.count("  mode: queue\n") == 1
        native = tmp_path / "rsa-native.yaml"
        native.write_text(conf.replace("  mode: queue\n", "  mode: native\n"))
        stop_lab_rsad(signal.SIGTERM)
        try:
            done = subprocess.run([f"{lab['RSA_LAB_VENV']}/bin/rsad", "--config",
                                   str(native)], capture_output=True, text=True,
                                  timeout=60, env=slurm_env(lab))
        finally:
            start_lab_rsad()
        assert done.returncode == 1, (done.stdout, done.stderr)
        assert done.stderr.strip().splitlines()[-1].startswith(
            f"rsad: error: slurm.mode is native but 1 job(s) rsad started in queue mode are "
            f"in flight ({first}): set slurm.mode back to queue"), done.stderr
        # drain: the job in flight goes on, a new one gets no RSA nodes
        said = rsa(lab, "admin", "drain", "--reason", "lab maintenance")
        assert said.startswith("RSA draining: no new jobs; ") and \
            not said.startswith("RSA draining: no new jobs; 0 "), said
        # rsad --check (read-only, beside the live rsad) says both: the drain in force,
        # and that a start in the other mode is refused while the job is in flight
        for config, line in ((lab["RSA_LAB_RSA_CONFIG"], "rsad: drain: in force: RSA "
                              "maintenance (rsa admin drain by root: lab maintenance), until "
                              "rsa admin resume; jobs in flight finish"),
                             (str(native), "rsad: mode: a start is refused: slurm.mode is "
                              f"native but 1 job(s) rsad started in queue mode are in "
                              f"flight ({first}): set slurm.mode back to queue")):
            checked = subprocess.run([f"{lab['RSA_LAB_VENV']}/bin/rsad", "--config", config,
                                      "--check"], capture_output=True, text=True, timeout=60,
                                     env=slurm_env(lab))
            assert checked.returncode == 0, checked.stderr
            assert any(ln.startswith(line) for ln in checked.stdout.splitlines()), \
                checked.stdout
        second = jobs.submit(script=f"""#!/bin/bash
#SBATCH -t 5
#RSA_DATA_IN={area}/in
findmnt -n -o TARGET --target {area}/in > {res}/second
""")
        try:
            wait_for(f"job {second}'s comment says the drain",
                     lambda: show_job(lab, second)["Comment"] == DRAINED, timeout=60)
        except AssertionError as exc:  # say what it says instead
            raise AssertionError(f"{exc}: {show_job(lab, second)['Comment']!r}; rsa job: "
                                 f"{rsa_job(lab, second)}") from None
        assert status(lab)["draining"].startswith("RSA maintenance (rsa admin drain by root")
        go(lab, res)
        wait_state(lab, first, "released", timeout=120)
        assert "output-verified" in reached(lab, first)
        assert md5_of(out) == (res / "md5").read_text()  # staged out during the drain
        # the drain survives a restart of rsad
        restart_lab_rsad(signal.SIGTERM)
        assert status(lab)["draining"].startswith("RSA maintenance (rsa admin drain by root")
        assert not (rsa_job(lab, second) or {}).get("nodes")
        assert show_job(lab, second)["JobState"] == "PENDING"
        rsa(lab, "admin", "resume")
        wait_state(lab, second, "released", timeout=120)
    assert "mounted-input" in reached(lab, second), reached(lab, second)
    assert (res / "second").read_text().strip() == f"{area}/in"
    assert status(lab)["draining"] == ""


def test_a_drain_to_the_pfs_starts_held_jobs_from_the_pfs_and_finishes_what_is_in_flight(
        lab: Mapping[str, str], area: Path) -> None:
    """Removing the RSA (operator guide): a job held through a plain drain starts from
    the PFS once the drain goes to the PFS (``--pfs``), told why, while the job in
    flight finishes on its RAMDISK and its output is verified. On main a drained RSA
    kept new jobs held until ``staging.wait_timeout``."""
    out, res = area / "out", area / "res"
    made = as_user(lab, lab["RSA_LAB_USER"], ["bash", "-c", f"mkdir {area}/in && "
                                                   f"head -c 10000 /dev/urandom > {area}/in/f1"])
    assert made.returncode == 0, made.stderr
    try:
        with make_jobs(lab) as jobs:
            first = jobs.submit(script=output_job(out, res, 2).replace(
                f"(cd {out}", f"{GO_WAIT.format(go=res / 'go')}\n(cd {out}"))
            wait_state(lab, first, "mounted-output", timeout=120)
            rsa(lab, "admin", "drain", "--reason", "lab maintenance")
            second = jobs.submit(script=f"""#!/bin/bash
#SBATCH -t 5
#RSA_DATA_IN={area}/in
findmnt -n -o TARGET --target {area}/in > {res}/second
""")
            wait_for(f"job {second} held by the drain",
                     lambda: show_job(lab, second)["Comment"] == DRAINED, timeout=60)
            said = rsa(lab, "admin", "drain", "--pfs", "--reason", "removal")
            assert said.startswith("RSA draining: new jobs run from the PFS"), said
            wait_for(f"job {second} run from the PFS", lambda: (res / "second").exists(),
                     timeout=90)
            comment = show_job(lab, second)["Comment"]
            assert "rsa admin drain --pfs by root: removal" in comment, comment
            assert (rsa_job(lab, first) or {}).get("rsa_state") == "mounted-output"  # in flight
            go(lab, res)
            wait_state(lab, first, "released", timeout=120)
        assert (res / "second").read_text().strip() != f"{area}/in"  # the PFS's mount
        assert "output-verified" in reached(lab, first)
        assert md5_of(out) == (res / "md5").read_text()
        assert "mounted-input" not in reached(lab, second)
    finally:
        rsa(lab, "admin", "resume")
    assert status(lab)["draining"] == ""
