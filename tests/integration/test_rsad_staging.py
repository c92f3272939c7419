"""rsad driving real RAMDISKs in the lab (issue 4): a job's input staged as its user into a
MooseFS RAMDISK on its RSA nodes; demotion during stage-in; a root-only file refused; rsad
SIGKILLed during stage-in resumes without re-building or leaking anything."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from rsa_scheduler.remote import SshHost
from tests.integration.conftest import as_user
from tests.integration.slurmkit import (
    Jobs,
    in_cluster,
    lab_nodes,
    make_jobs,
    on_node,
    pfs_reads_at,
    restart_lab_rsad,
    root,
    wait_for,
)
from tests.integration.test_slurm_adapter import lockin_method

FILL = ("-t", "5", "--wrap", "sleep 300")


def rsa_job(lab: Mapping[str, str], job: str) -> dict[str, Any] | None:
    out = subprocess.run([f"{lab['RSA_LAB_VENV']}/bin/rsa", "job", job, "--json"],
                         capture_output=True, text=True, timeout=30, check=False)
    return json.loads(out.stdout) if out.returncode == 0 else None


def state_of(lab: Mapping[str, str], job: str) -> str:
    data = rsa_job(lab, job)
    return data["rsa_state"] if data else ""


def wait_state(lab: Mapping[str, str], job: str, *states: str, timeout: float = 90) -> str:
    try:
        return wait_for(f"job {job} in {tuple(map(str, states))}",
                        lambda: s if (s := state_of(lab, job)) in states else None, timeout=timeout)
    except AssertionError as exc:  # say where the job got stuck, and why
        data = rsa_job(lab, job) or {}
        tail = [{k: v for k, v in e.items() if k != "seq"} for e in data.get("events", [])[-12:]]
        queue = root(lab, "squeue", "-h", "-t", "all", "-o", "%i %T %r %u")
        raise AssertionError(f"{exc}; job is {data.get('job_state')}/{data.get('rsa_state')}, "
                             f"last events {json.dumps(tail)}; queue:\n{queue}") from None


@pytest.fixture(scope="module")
def area(lab: Mapping[str, str]) -> Iterator[Path]:
    """The lab user's test data on the PFS: a small tree and a slow big input."""
    base = Path(lab["RSA_LAB_PFS"]) / f"rsad-it-{os.getpid()}"
    user = lab["RSA_LAB_USER"]
    script = (f"set -e; mkdir -p {base}/small/sub {base}/big {base}/out; "
              f"for i in $(seq 1 40); do head -c $((i*1000)) /dev/urandom "
              f"> {base}/small/f$i; done; "
              f"echo hi > '{base}/small/sub/name with space'; ln -s f1 {base}/small/link; "
              f"head -c 900M /dev/zero > {base}/big/blob")
    done = as_user(lab, user, ["bash", "-c", script], timeout=300)
    assert done.returncode == 0, done.stderr
    yield base
    subprocess.run(["rm", "-rf", str(base)], check=False, timeout=120)


def fill(jobs: Jobs) -> None:
    """Occupy every compute node so the next job waits on Resources (on-deck)."""
    for _ in lab_nodes(jobs.lab, "RSA_LAB_COMPUTE_NODES"):
        jobs.fillers.append(jobs.submit(*FILL))


def submit_rsa(jobs: Jobs, data_in: Path, data_out: Path, tmp: Path) -> str:
    script = tmp / "rsa-job.sh"
    script.write_text(f"#!/bin/bash\n#SBATCH -t 5\n#RSA_DATA_IN={data_in}\n"
                      f"#RSA_DATA_OUT={data_out}\nsleep 1\n")
    script.chmod(0o644)
    tmp.chmod(0o755)
    return jobs.submit(script=script.read_text())


def rsa_node_procs(lab: Mapping[str, str], pgrep: list[str]) -> list[str]:
    """``pgrep -a`` with ``pgrep``'s arguments over the RSA nodes: the host lab's share
    this host's processes; the cluster lab's are asked each through the door."""
    if in_cluster():
        return [f"{node}: {line}" for node in lab_nodes(lab, "RSA_LAB_RSA_NODES")
                for line in on_node(node, ["pgrep", "-a", *pgrep],
                                    check=False).stdout.splitlines()]
    return subprocess.run(["pgrep", "-a", *pgrep], capture_output=True,
                          text=True).stdout.splitlines()


def ssh(lab: Mapping[str, str], node: int) -> SshHost:
    addr = lab["RSA_LAB_RSA_ADDRESSES"].split(",")[node - 1]
    return SshHost(f"rsa{node}", addr, key=lab["RSA_LAB_SSH_KEY"],
                   known_hosts=lab["RSA_LAB_SSH_KNOWN_HOSTS"])


def hashes(host: SshHost, root_dir: str) -> str:
    cmd = (f"cd {root_dir} && find . -type f -print0 | sort -z | xargs -0 b2sum; "
           "find . -type l -printf '%p -> %l\\n' | sort")
    return host.run(["bash", "-c", cmd], timeout=120).stdout


def test_input_is_staged_into_a_real_ramdisk_with_identical_contents(
        lab: Mapping[str, str], area: Path, tmp_path: Path) -> None:
    with make_jobs(lab) as jobs:
        fill(jobs)
        job = submit_rsa(jobs, area / "small", area / "out", tmp_path)
        wait_state(lab, job, "locked-in")
        data = rsa_job(lab, job)
        assert data is not None
        mount = data["ramdisk"]["rsa_mountpoint"]
        nodes = data["nodes"]
        host = ssh(lab, int(nodes.strip("rsa[").split("-")[0].split(",")[0].rstrip("]")))
        try:
            assert hashes(host, mount) == hashes(host, str(area / "small"))
            owner = host.run(["stat", "-c", "%U", mount], timeout=30).stdout.strip()
            assert owner == lab["RSA_LAB_USER"]
        finally:
            host.close()
        # locked in after the stage-in: by the lab's QOS, or by priority (the variant lab
        # and the cluster lab)
        if lockin_method(lab) == "qos":
            qos = root(lab, "squeue", "-h", "-j", job, "-O", "QOS:0").strip()
            assert qos.startswith("rsa-lockin")
        else:
            prio = root(lab, "squeue", "-h", "-j", job, "-o", "%Q").strip()
            assert int(prio) == int(lab["RSA_LAB_LOCKIN_PRIORITY"])


def test_demotion_during_stage_in_stops_the_transfer_and_frees_the_nodes(
        lab: Mapping[str, str], area: Path, tmp_path: Path) -> None:
    # 900 MB at 100 Mbit/s: 72 s of stage-in, far more than Slurm takes to demote the job
    # (unshaped, the cluster lab's PFS gave it in 7.5 s once, before the demotion was seen)
    with make_jobs(lab) as jobs, pfs_reads_at(lab, "100mbit"):
        fill(jobs)
        job = submit_rsa(jobs, area / "big", area / "out", tmp_path)
        wait_state(lab, job, "staging-in")
        urgent = jobs.submit(*FILL)
        root(lab, "scontrol", "update", f"jobid={urgent}", "priority=500000")
        wait_state(lab, job, "released", timeout=60)
        data = rsa_job(lab, job)
        assert data is not None and data["job_state"] == "demoted"
        names = [e["name"] for e in data["events"]]
        assert "job.state" in names
        transitions = [(e["from"], e["to"]) for e in data["events"]
                       if e["name"] == "rsa.transition"]
        assert ("staging-in", "tearing-down") in transitions
        # nothing of the transfer survives on the RSA nodes
        time.sleep(1)
        assert rsa_node_procs(lab, ["-u", lab["RSA_LAB_USER"], "-f", str(area / "big")]) == []
        status = json.loads(subprocess.run(
            [lab["RSA_LAB_PYTHON"], "-c",
             "import json; from rsa_scheduler.client import ApiClient; "
             "print(json.dumps(ApiClient().get('/v1/status')))"],
            capture_output=True, text=True, check=True).stdout)
        assert all(n["job"] != job for n in status["nodes"])


def test_a_user_cannot_stage_a_file_only_root_can_read(
        lab: Mapping[str, str], area: Path, tmp_path: Path) -> None:
    secret_dir = area / "secret"
    as_user(lab, lab["RSA_LAB_USER"], ["mkdir", "-p", str(secret_dir)])
    secret = secret_dir / "root-only"
    secret.write_text("not for users\n")
    secret.chmod(0o600)  # created by root: owned by root
    with make_jobs(lab) as jobs:
        fill(jobs)
        job = submit_rsa(jobs, secret_dir, area / "out", tmp_path)
        wait_state(lab, job, "declined", "released", timeout=90)
        data = rsa_job(lab, job)
        assert data is not None and data["declined"]
        refused = [e for e in data["events"] if e["name"] == "action.outcome"
                   and e["result"] == "refused"]
        assert refused and "root-only" in refused[0]["message"]
        assert "Permission denied" in refused[0]["message"] or "cannot read" in \
            refused[0]["message"]



def test_rsad_killed_during_stage_in_resumes_without_rebuilding(
        lab: Mapping[str, str], area: Path, tmp_path: Path) -> None:
    with make_jobs(lab) as jobs:
        fill(jobs)
        job = submit_rsa(jobs, area / "big", area / "out", tmp_path)
        wait_state(lab, job, "staging-in")
        before = rsa_job(lab, job)
        assert before is not None
        stage_in = before["pending"]["id"]
        restart_lab_rsad(signal.SIGKILL)
        wait_state(lab, job, "locked-in", timeout=120)
        data = rsa_job(lab, job)
        assert data is not None
        outcomes = [(e["action"], e["result"]) for e in data["events"]
                    if e["name"] == "action.outcome"]
        assert (stage_in, "ok") in outcomes  # the same action, re-issued after the crash
        assert sum(1 for a, _ in outcomes if "/build-fs/" in a) == 1  # not rebuilt
        fs_id = f"job{job}-c1"
        masters = rsa_node_procs(lab, ["-f", f"mfsmaster.*{fs_id}"])
        assert len(masters) == 1, masters  # one RAMDISK, nothing leaked
    wait_state(lab, job, "released", timeout=90)
    assert rsa_node_procs(lab, ["-f", f"mfsmaster.*{fs_id}"]) == []
