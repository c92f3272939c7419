"""A rolling upgrade with jobs in flight (issue 33), as the operator guide's "Upgrades"
has a site do it: compute nodes first, rsad last, each host by ``apt-get install`` of the
new packages, rsad restarted as its unit does. The previous release is an older commit's
``make deb`` (lab/cluster/previous, cached), installed on c2 and rsad's host before the
jobs start; c1 runs the new one already (upgraded first).

One job on each compute node, each with its input staged to a RAMDISK and its output
written to one, stays in flight across both upgrades: c2's job keeps the node agent its
old Prolog started (an old node agent against the new rsad, the window every rolling
upgrade has); c1's job is a new Prolog against the old rsad (the guide's order). Both
jobs' input is read whole from the RAMDISK, their output staged out and verified. rsad
says, once, that c2's hooks are older than its own (the node, the job, the fix), rsa
status shows it until c2's hooks speak rsad's protocol (the job's new Epilog)."""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.cluster.conftest import CTL, Cluster

ROOT = Path(__file__).resolve().parents[2]
HOME = "/pfs/home/rsauser"
JOB = """#!/bin/bash
#SBATCH -N 1 -t 5
#RSA_DATA_IN={d}/in
#RSA_DATA_OUT={d}/out
d={d}
sha256sum < $d/in/input.bin > $d/read.sha
findmnt -n -o FSTYPE,SOURCE $d/in > $d/in.mnt
touch $d/running
while [ ! -e $d/go ]; do sleep 0.2; done
rsa input-done > $d/input-done.txt 2>&1
head -c 1048576 /dev/urandom > $d/out/data.bin
sha256sum < $d/out/data.bin > $d/written.sha
findmnt -n -o FSTYPE,SOURCE $d/out > $d/out.mnt
"""


def _ctl(*args: str, timeout: float = 600) -> str:
    done = subprocess.run([str(CTL), *args], capture_output=True, text=True,
                          timeout=timeout, check=False)
    assert done.returncode == 0, f"clusterctl {' '.join(args)}: {done.stdout}{done.stderr}"
    return done.stdout.strip()


def _install(pairs: list[tuple[str, list[str]]]) -> dict[str, str]:
    """apt-get install on several nodes at once; each node's rsa-scheduler version."""
    procs = {node: subprocess.Popen([str(CTL), "install", node, *debs], text=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for node, debs in pairs}
    versions = {}
    for node, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"install on {node}: {out}{err}"
        versions[node] = out.strip().splitlines()[-1]
    return versions


@pytest.fixture(scope="module")
def releases() -> Iterator[tuple[list[str], list[str]]]:
    """(previous, new): the .debs of each release, on the host. A shallow clone (CI may
    make one) lacks the previous release's commit and cannot fetch it: skipped then,
    saying so; any other clone without it fails."""
    script = (ROOT / "lab" / "cluster" / "previous").read_text()
    commit = os.environ.get("RSA_CLUSTER_PREVIOUS") or re.search(
        r"^PREVIOUS=(\w+)$", script, re.MULTILINE).group(1)  # type: ignore[union-attr]
    have = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "-q", "--verify",
                           f"{commit}^{{commit}}"], capture_output=True, check=False)
    shallow = subprocess.run(["git", "-C", str(ROOT), "rev-parse",
                              "--is-shallow-repository"], capture_output=True, text=True,
                             check=False).stdout.strip() == "true"
    if have.returncode != 0 and shallow:
        pytest.skip(f"the previous release's commit {commit[:7]} is not in this shallow "
                    "clone: the upgrade test needs the repository's history")
    release = os.environ.get("RSA_LAB_DEBIAN", "12")
    if release != "12":
        # the previous release is built on Debian 12 (its SPANK package pinned to Slurm
        # 22.05) and its RAMDISK builds fail on MooseFS 4 in this lab (seen on Debian 13:
        # "only 0/1 chunkservers registered with the master and reported their space
        # within 60s" on every try: it looked for rsa1-data in mfscli's JSON, which lists
        # the address; fixed since): an upgrade from it on Debian 13 is not one a site
        # with named data addresses can make
        pytest.skip(f"the upgrade test runs on Debian 12 only (RSA_LAB_DEBIAN={release}): "
                    "the previous release's RAMDISK builds fail on MooseFS 4 here and its "
                    "SPANK package is pinned to Slurm 22.05")
    prev = Path(_ctl("previous", timeout=1800))
    old = sorted(str(p) for p in prev.glob("*.deb"))
    new = sorted(str(p) for pattern in ("rsa-scheduler_*_all.deb",
                                        "rsa-scheduler-spank_*_amd64.deb")
                 for p in (ROOT / "dist").glob(pattern))  # as lab/cluster/image
    assert len(old) == 2 and len(new) == 2, (old, new)
    yield old, new


def _log_size(cluster: Cluster) -> int:
    return int(cluster.out("rsad", ["stat", "-c", "%s", "/var/log/rsad.log"]))


def _log_since(cluster: Cluster, offset: int) -> str:
    return cluster.out("rsad", ["tail", "-c", f"+{offset + 1}", "/var/log/rsad.log"])


def _wait(what: str, ok: Callable[[], bool], timeout: float,
          why: Callable[[], str] = str) -> None:
    """Poll ``ok``; on time-out say ``what`` and, from ``why``, what was seen."""
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s: {what}\n{why()}")
        time.sleep(0.5)


def test_rolling_upgrade_with_jobs_in_flight(cluster: Cluster,
                                             releases: tuple[list[str], list[str]]) -> None:
    old, new = releases
    # the previous release on c2 and on rsad's host (rsad restarted into it); c1 has the
    # new one already: the upgrade is under way, compute nodes first
    versions = _install([("c2", old), ("rsad", old)])
    previous = versions["c2"]
    assert previous == versions["rsad"] and "~git" in previous, versions
    current = cluster.out("c1", ["dpkg-query", "-W", "-f", "${Version}", "rsa-scheduler"])
    assert current != previous and "~" not in current
    _ctl("restart-rsad")
    jobs: dict[str, str] = {}
    want: dict[str, str] = {}
    for node in ("c2", "c1"):
        d = f"{HOME}/upg-{node}"
        cluster.run("ctl", ["sh", "-ec", f"rm -rf {d}; mkdir -p {d}/in {d}/out; "
                            f"head -c 1048576 /dev/urandom > {d}/in/input.bin; "
                            f"cat > {d}/job.sh"], user="rsauser", input=JOB.format(d=d))
        want[node] = cluster.out("ctl", ["sh", "-c", f"sha256sum < {d}/in/input.bin"],
                                 user="rsauser")
        jobs[node] = cluster.out("ctl", ["sbatch", "--parsable", "-w", node, "--chdir", d,
                                         "-o", f"{d}/job.log", f"{d}/job.sh"],
                                 user="rsauser").strip()
    def running() -> bool:
        return all(cluster.run("c1", ["test", "-e", f"{HOME}/upg-{n}/running"],
                               check=False).returncode == 0 for n in jobs)

    # each job runs, its input on a RAMDISK, when the upgrade starts
    def seen() -> str:
        return "\n".join([cluster.run("ctl", ["squeue"], check=False).stdout,
                          *(cluster.run("ctl", ["rsa", "job", j], check=False).stdout
                            for j in jobs.values()),
                          cluster.run("rsad", ["tail", "-n", "30", "/var/log/rsad.log"],
                                      check=False).stdout])

    _wait(f"jobs {', '.join(jobs.values())} running", running, timeout=120, why=seen)
    # compute node c2 upgraded in place under its job (whose node agent, started by the
    # old Prolog, keeps running), then rsad's host, and rsad restarted: rsad last
    assert _install([("c2", new)]) == {"c2": current}
    assert _install([("rsad", new)]) == {"rsad": current}
    mark = _log_size(cluster)
    _ctl("restart-rsad")
    # c2's old agent asks the new rsad: one line naming the node, the job and the fix,
    # and rsa status shows it while it lasts
    behind = (f"c2: the node agent of job {jobs['c2']} speaks hook protocol 1, rsad 2: "
              "its rsa-scheduler package is older than rsad's; upgrade it on c2")
    _wait("rsad's line on c2's old agent", lambda: behind in _log_since(cluster, mark),
          timeout=60)
    status = cluster.out("rsad", ["rsa", "status"])
    assert f"UPGRADE: {behind}" in status, status
    said = [line for line in _log_since(cluster, mark).splitlines() if "hook protocol" in line]
    assert not [line for line in said if "c1: " in line], said  # c1's hooks are rsad's
    # the jobs go on: input done (c2's old agent releases the input and mounts the
    # output under the new rsad), output written, staged out, verified
    for node in jobs:
        cluster.run("ctl", ["touch", f"{HOME}/upg-{node}/go"], user="rsauser")
    shown = {node: _released(cluster, job) for node, job in jobs.items()}
    for node, job in jobs.items():
        d = f"{HOME}/upg-{node}"
        assert "ok content verified" in shown[node], shown[node]
        assert f"job {job}: input done" in cluster.out("ctl", ["cat", f"{d}/input-done.txt"])
        # the input was read whole from a RAMDISK, the output written to one ...
        assert cluster.out("ctl", ["cat", f"{d}/read.sha"]) == want[node]
        for mnt in ("in.mnt", "out.mnt"):
            fstype, source = cluster.out("ctl", ["cat", f"{d}/{mnt}"]).split()
            assert fstype == "fuse" and source.startswith("mfs#rsa"), (node, mnt, source)
        # ... and is on the PFS whole, as rsauser's
        got = cluster.out("ctl", ["sh", "-c", f"sha256sum < {d}/out/data.bin"])
        assert got == cluster.out("ctl", ["cat", f"{d}/written.sha"])
        assert cluster.out("ctl", ["stat", "-c", "%U %s", f"{d}/out/data.bin"]) \
            == "rsauser 1048576\n"
    # c2's new Epilog spoke rsad's protocol: the line is gone from rsa status
    assert (f"c2: its node hooks speak hook protocol 2 now (the Epilog of job "
            f"{jobs['c2']})") in _log_since(cluster, mark)
    assert "UPGRADE:" not in cluster.out("rsad", ["rsa", "status"])
    for node in ("rsa1", "rsa2"):
        assert cluster.out(node, ["sh", "-c", "ls -A /var/lib/rsa-ram"]) == ""


def _released(cluster: Cluster, job: str, timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    shown = ""
    while time.monotonic() < deadline:
        shown = cluster.run("ctl", ["rsa", "job", job], check=False).stdout
        if "rsa_state: released" in shown or "quarantine" in shown:
            break
        time.sleep(1)
    assert "rsa_state: released" in shown, shown
    return shown

