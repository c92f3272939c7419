"""A job's RAMDISK servers killed with SIGKILL while the job runs (issue 13): the data is
still in the RSA nodes' RAM pools, so rsad's RAMDISK tender restarts what died (the master
with metadata recovery from its change logs, every chunkserver, the RSA node's own
mfsmount) while the job still runs; the job's writes after the kill wait for it and go
on; the output is staged out, verified, and rsad says what it restarted. Nothing is lost,
nothing leaks."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.e2e.test_prolog_lifecycle import nothing_of_job_mounted, run_to_start
from tests.e2e.test_stage_out_failures import area, events, wait_for_file
from tests.integration.slurmkit import (
    make_jobs,
    on_lab_node,
    ramdisk_servers,
)
from tests.integration.test_rsad_staging import rsa_job, wait_state

pytestmark = pytest.mark.once  # the RAMDISK's repair is rsad's own, whichever mode drives staging

__all__ = ["area"]  # the fixture, shared with the stage-out tests


def servers_of(lab: Mapping[str, str], fs_id: str) -> dict[tuple[str, int], str]:
    """(RSA node, PID) -> command line of the RAMDISK's processes: its master,
    chunkservers and the RSA nodes' own mfsmounts (ramdisk_servers: node "" in the host
    lab, whose RSA nodes share this host's PID view)."""
    return {(node, pid): f"{prog} {rest}"
            for node, pid, prog, rest in ramdisk_servers(lab, re.escape(fs_id))}


def kill9(node: str, pid: int) -> None:
    """SIGKILL to ``pid`` on RSA node ``node`` (servers_of's)."""
    if node:
        done = on_lab_node(node, ["kill", "-KILL", str(pid)], timeout=30)
        assert done.returncode == 0, (node, pid, done.stderr)
    else:
        os.kill(pid, signal.SIGKILL)


def test_servers_killed_during_the_run_are_restarted_and_the_output_kept(
        lab: Mapping[str, str], area: Path) -> None:
    out, res = area / "out", area / "res"
    script = f"""#!/bin/bash
#SBATCH -t 5
#RSA_DATA_OUT={out}
mkdir -p {out}/sub
head -c 48M /dev/urandom > {out}/sub/result.bin
for i in $(seq 1 20); do echo "line $i" > {out}/small-$i; done
sync
(cd {out} && md5sum sub/result.bin small-*) > {res}/md5-before
while [ ! -e {res}/go ]; do sleep 0.5; done
mkdir {out}/after
head -c 8M /dev/urandom > {out}/after/late.bin
for i in $(seq 1 10); do echo "late $i" > {out}/after/small-$i; done
sync
(cd {out} && md5sum sub/result.bin small-* after/*) > {res}/md5
"""
    with make_jobs(lab) as jobs:
        job = run_to_start(lab, jobs, script)
        wait_for_file(res / "md5-before")
        fs_id = f"job{job}-c1"
        time.sleep(2)  # let the master write its change log
        procs = servers_of(lab, fs_id)
        master = [p for p, c in procs.items() if c.startswith("mfsmaster")]
        chunkservers = [p for p, c in procs.items() if c.startswith("mfschunkserver")]
        own_mounts = [p for p, c in procs.items() if c.startswith("mfsmount")]
        assert len(master) == 1 and chunkservers and own_mounts, procs
        # what the lab started for this job, by PID: its master, every chunkserver and
        # the first RSA node's own mount
        for node, pid in [*master, *chunkservers, own_mounts[0]]:
            kill9(node, pid)
        (res / "go").touch()
        wait_for_file(res / "md5", timeout=180)  # the late writes waited for the repair
        wait_state(lab, job, "released", timeout=300)
    want = (res / "md5").read_text()
    assert want.startswith((res / "md5-before").read_text()) and "after/late.bin" in want
    got = subprocess.run(["bash", "-c", "md5sum sub/result.bin small-* after/*"], cwd=out,
                         capture_output=True, text=True, timeout=120, check=True).stdout
    assert got == want
    repaired = [e for e in events(lab, job, "action.milestone")
                if "repaired" in (e.get("detail") or {})]  # type: ignore[operator]
    assert repaired, events(lab, job, "action.milestone")
    restarted = [r for e in repaired
                 for r in e["detail"]["repaired"]["restarted"]]  # type: ignore[index]
    assert any(r.startswith("master on ") for r in restarted), restarted
    assert sum(r.startswith("chunkserver on ") for r in restarted) == len(chunkservers)
    assert any(r.startswith("mount on ") for r in restarted), restarted
    verified = [e for e in events(lab, job, "action.outcome")
                if "/verify/" in str(e["action"]) and e["result"] == "ok"]
    assert verified
    assert servers_of(lab, fs_id) == {}
    assert nothing_of_job_mounted(job)
    status = rsa_job(lab, job)
    assert status is not None and status["rsa_state"] == "released"
