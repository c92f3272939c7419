"""Sockets and devices: one rule in every direction (issue 37, item 3), in the lab.

They are never staged, neither into the RAMDISK from DATA_IN nor out of it to DATA_OUT,
and no verify expects them; the user is told which and how many, in the stage-in's and
the stage-out's outcome (``rsa job``'s timeline) and in the message the job ends with.
Before, the stage-in dropped them without a word and the listed and tar verifies
expected them at DATA_OUT: every retry of the stage-out failed until quarantine.

The user makes a socket in DATA_IN; the character device 1:3 is made by root (a user
cannot); in DATA_OUT the job makes its own socket and root adds a device node on the
RAMDISK while the job runs."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from tests.e2e.test_prolog_lifecycle import nothing_of_job_mounted
from tests.e2e.test_stage_out_failures import events, wait_for_file
from tests.integration.conftest import as_user
from tests.integration.slurmkit import make_jobs
from tests.integration.test_rsad_staging import rsa_job, ssh, wait_state

SOCKET = "import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])"


@pytest.fixture
def area(lab: Mapping[str, str]) -> Iterator[Path]:
    base = Path(lab["RSA_LAB_PFS"]) / f"special-e2e-{os.getpid()}-{time.monotonic_ns()}"
    script = (f"set -e; mkdir -p {base}/in {base}/out {base}/res; "
              f"head -c 5000 /dev/urandom > {base}/in/data; mkfifo {base}/in/fifo; "
              f"python3 -c '{SOCKET}' {base}/in/sock")
    done = as_user(lab, lab["RSA_LAB_USER"], ["bash", "-c", script])
    assert done.returncode == 0, done.stderr
    subprocess.run(["mknod", "-m", "666", str(base / "in" / "null"), "c", "1", "3"],
                   check=True, timeout=30)
    yield base
    subprocess.run(["rm", "-rf", str(base)], check=False, timeout=120)


@pytest.mark.once  # the staging engine's rule, the same whichever mode drives staging
def test_sockets_and_devices_are_skipped_both_ways_and_the_user_is_told(
        lab: Mapping[str, str], area: Path) -> None:
    inp, out, res = area / "in", area / "out", area / "res"
    rsa = f"{lab['RSA_LAB_VENV']}/bin/rsa"
    script = f"""#!/bin/bash
#SBATCH -t 5
#RSA_DATA_IN={inp}
#RSA_DATA_OUT={out}
#RSA_RESET=input-done
findmnt -n -o TARGET --target {inp} > {res}/inmnt
(cd {inp} && find . -mindepth 1 -printf '%y %p\\n' | sort) > {res}/input
{rsa} input-done > {res}/input-done 2>&1
findmnt -n -o TARGET --target {out} > {res}/outmnt
head -c 3000 /dev/urandom > {out}/result
python3 -c '{SOCKET}' {out}/job.sock
touch {res}/ready
for i in $(seq 1 240); do [ -e {res}/go ] && break; sleep 0.5; done
"""
    with make_jobs(lab) as jobs:
        job = jobs.submit(script=script)
        wait_for_file(res / "ready", timeout=240)
        data = rsa_job(lab, job)
        assert data is not None and data["ramdisk"], data
        mount = data["ramdisk"]["rsa_mountpoint"]
        first = data["nodes"].strip("rsa[").split("-")[0].split(",")[0].rstrip("]")
        host = ssh(lab, int(first))
        try:  # a device node in the job's output (root: a user cannot make one)
            host.run(["mknod", "-m", "666", f"{mount}/dev", "c", "1", "3"], timeout=30)
        finally:
            host.close()
        done = as_user(lab, lab["RSA_LAB_USER"], ["touch", str(res / "go")])
        assert done.returncode == 0, done.stderr
        wait_state(lab, job, "released", timeout=240)
    # the job's input on the RAMDISK: the file and the FIFO, no socket, no device
    assert (res / "inmnt").read_text().strip() == str(inp)
    assert (res / "input").read_text() == "f ./data\np ./fifo\n"
    outcomes = {str(e["action"]).split("/")[2]: e for e in events(lab, job, "action.outcome")
                if e["result"] == "ok"}
    said_in = str(outcomes["stage-in"]["message"])
    assert said_in.startswith("2 special files (sockets, devices) in DATA_IN not staged "
                              "(never are): "), said_in
    assert "'sock'" in said_in and "'null'" in said_in, said_in
    said_out = str(outcomes["stage-out"]["message"])
    assert said_out.startswith("2 special files (sockets, devices) on the RAMDISK not "
                               "staged (never are): "), said_out
    assert "'job.sock'" in said_out and "'dev'" in said_out, said_out
    verifies = [e["result"] for e in events(lab, job, "action.outcome")
                if "/verify/" in str(e["action"])]
    assert verifies == ["ok"], verifies  # before: failed until quarantine
    data = rsa_job(lab, job)
    assert data is not None
    assert "2 special files" in str(data["message"]), data["message"]
    assert str(data["message"]).startswith(  # what was checked, exactly (item 5)
        f"stage-out finished: content verified: 1 object (2.93K) in {out} (every file's "
        "bytes hashed on both sides;"), data["message"]
    shown = subprocess.run([rsa, "job", job], capture_output=True, text=True, timeout=30,
                           check=True).stdout
    assert "in DATA_IN not staged (never are)" in shown, shown
    assert sorted(os.listdir(out)) == ["result"]
    assert nothing_of_job_mounted(job)
