"""An RSA node lost while a job's input is staged, in the lab (issue 13): under early
start ``wait`` the job's RAMDISK is torn down without the lost node and the input is staged
again on a healthy node; the job starts with it. What the teardown left on the lost node
is cleaned before the node is used again."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from ClusterShell.NodeSet import NodeSet

from rsa_scheduler.core.states import RsaState
from tests.e2e.conftest import md5_of
from tests.e2e.test_health import nodes, sshd_frozen
from tests.integration.conftest import as_user
from tests.integration.slurmkit import (
    make_jobs,
    ramdisk_servers,
    wait_for,
)
from tests.integration.test_rsad_staging import rsa_job, wait_state

BIG = 700 << 20  # seconds to stage through the lab's throttled PFS


@pytest.fixture
def area(lab: Mapping[str, str]) -> Iterator[Path]:
    base = Path(lab["RSA_LAB_PFS"]) / f"lost-e2e-{os.getpid()}-{time.monotonic_ns()}"
    script = (f"set -e; mkdir -p {base}/in {base}/out {base}/res; "
              f"head -c {BIG} /dev/zero > {base}/in/blob; "
              f"for i in 1 2 3; do head -c $((i*5000)) /dev/urandom > {base}/in/f$i; done")
    done = as_user(lab, lab["RSA_LAB_USER"], ["bash", "-c", script], timeout=300)
    assert done.returncode == 0, done.stderr
    yield base
    subprocess.run(["rm", "-rf", str(base)], check=False, timeout=120)


def transitions(lab: Mapping[str, str], job: str) -> list[tuple[str, str, str]]:
    data = rsa_job(lab, job) or {}
    return [(e.get("from", ""), e.get("to", ""), e.get("trigger", ""))
            for e in data.get("events", []) if e["name"] == "rsa.transition"]


def test_a_node_lost_while_staging_in_means_staging_again_on_a_healthy_node(
        lab: Mapping[str, str], area: Path) -> None:
    script = f"""#!/bin/bash
#SBATCH -t 10
#RSA_DATA_IN={area}/in
#RSA_NODES=1
findmnt -n -o TARGET --target {area}/in > {area}/res/inmnt
(cd {area}/in && md5sum f* blob) > {area}/res/md5
"""
    with make_jobs(lab) as jobs:
        job = jobs.submit(script=script)
        wait_state(lab, job, "staging-in", timeout=120)
        lost = str((rsa_job(lab, job) or {})["nodes"])
        assert len(NodeSet(lost)) == 1
        # the node hangs: its sshd and every session through it stop
        with sshd_frozen(lost):
            wait_for("the node lost", lambda: any(
                t == "node-lost" for _, _, t in transitions(lab, job)), timeout=120)
            wait_for("staged again elsewhere", lambda: (d := rsa_job(lab, job)) and
                     d["rsa_state"] in (RsaState.LOCKED_IN, RsaState.MOUNTING_INPUT,
                                        RsaState.MOUNTED_INPUT, RsaState.TEARING_DOWN,
                                        RsaState.RELEASED)
                     and d["cycle"] == 2, timeout=240)
        wait_state(lab, job, "released", timeout=240)
        # back: what the teardown left on it is cleaned before it is up again
        wait_for(f"{lost} up again", lambda: nodes(lab)[lost]["state"] == "up", timeout=120)
    assert (area / "res" / "inmnt").read_text().strip() == f"{area}/in"  # the RAMDISK
    assert (area / "res" / "md5").read_text() == md5_of(area / "in", "f* blob")
    data = rsa_job(lab, job) or {}
    told = [e for e in data.get("events", []) if e["name"] == "rsa.transition"
            and e.get("trigger") == "node-lost"]
    assert told and told[0]["to"] == "tearing-down"
    assert not data.get("declined")
    # (on every RSA node: in the cluster lab each is a host of its own)
    left = ramdisk_servers(lab, f"job{job}-c1", "mfsmaster|mfschunkserver")
    assert not left, f"the first RAMDISK's servers are still running: {left}"
    events = subprocess.run([f"{lab['RSA_LAB_VENV']}/bin/rsa", "events", "--json"],
                            capture_output=True, text=True, timeout=30).stdout
    assert '"node.scrubbed"' in events and f"job{job}-c1" in events
