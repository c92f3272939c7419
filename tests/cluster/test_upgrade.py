"""A rolling upgrade with jobs in flight (issue 33), as the operator guide's "Upgrades"
has a site do it: compute nodes first, rsad last, each host by ``apt-get install`` of the
new packages, rsad restarted as its unit does. The previous release is an older commit's
packages (lab/cluster/previous, cached; per Debian release: on 12 one from before the hook
protocol, on 13 and testing main's last landing, the first that runs on MooseFS 4; its
SPANK package built for the release's Slurm), installed on c2 and rsad's host before the
jobs start; c1 runs the new one already (upgraded first). apt upgrades the SPANK package
from the previous ``0.1.0~git...`` to today's, whose version names the node's Slurm.

One job on each compute node, each with its input staged to a RAMDISK and its output
written to one, stays in flight across both upgrades: c2's job keeps the node agent its
old Prolog started (an old node agent against the new rsad, the window every rolling
upgrade has); c1's job is a new Prolog against the old rsad (the guide's order). Both
jobs' input is read whole from the RAMDISK, their output staged out and verified. When
the previous release speaks an older hook protocol, rsad says, once, that c2's hooks are
older than its own (the node, the job, the fix), rsa status shows it until c2's hooks
speak rsad's protocol (the job's new Epilog); when it speaks rsad's, nothing is said."""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from rsa_scheduler.node.plan import PROTOCOL
from tests.cluster.conftest import CTL, RSAD, Cluster, pool_left

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


@dataclass(frozen=True)
class Releases:
    old: list[str]  # the previous release's .debs, on the host
    new: list[str]  # this tree's: make deb's rsa-scheduler, the SPANK package of the release
    protocol: int  # the hook protocol the previous release's node side speaks


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                          check=False, timeout=60)


@pytest.fixture(scope="module")
def releases() -> Iterator[Releases]:
    """The previous release (lab/cluster/previous: per Debian release, its SPANK package
    built for that release's Slurm) and this one. A shallow clone (CI may make one) lacks
    the previous release's commit and cannot fetch it: skipped then, saying so; any other
    clone without it fails."""
    commit = subprocess.run([str(ROOT / "lab" / "cluster" / "previous"), "--commit"],
                            capture_output=True, text=True, check=True,
                            timeout=30).stdout.strip()
    have = _git("rev-parse", "-q", "--verify", f"{commit}^{{commit}}")
    shallow = _git("rev-parse", "--is-shallow-repository").stdout.strip() == "true"
    if have.returncode != 0 and shallow:
        pytest.skip(f"the previous release's commit {commit[:7]} is not in this shallow "
                    "clone: the upgrade test needs the repository's history")
    plan = _git("show", f"{commit}:rsa_scheduler/node/plan.py").stdout
    said = re.search(r"^PROTOCOL = (\d+)$", plan, re.MULTILINE)
    prev = Path(_ctl("previous", timeout=1800))
    old = sorted(str(p) for p in prev.glob("*.deb"))
    release = os.environ.get("RSA_LAB_DEBIAN", "13")
    spank = ROOT / "dist" / ("" if release == "12" else f"debian{release}")
    new = sorted([*map(str, (ROOT / "dist").glob("rsa-scheduler_*_all.deb")),
                  *map(str, spank.glob("rsa-scheduler-spank_*_amd64.deb"))])  # as the image
    assert len(old) == 2 and len(new) == 2, (old, new)
    yield Releases(old, new, int(said.group(1)) if said else 1)


def _log_size(cluster: Cluster) -> int:
    return int(cluster.out(RSAD, ["stat", "-c", "%s", "/var/log/rsad.log"]))


def _log_since(cluster: Cluster, offset: int) -> str:
    return cluster.out(RSAD, ["tail", "-c", f"+{offset + 1}", "/var/log/rsad.log"])


def _wait(what: str, ok: Callable[[], bool], timeout: float,
          why: Callable[[], str] = str) -> None:
    """Poll ``ok``; on time-out say ``what`` and, from ``why``, what was seen."""
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s: {what}\n{why()}")
        time.sleep(0.5)


def _spank(cluster: Cluster, node: str) -> str:
    return cluster.out(node, ["dpkg-query", "-W", "-f", "${Version}", "rsa-scheduler-spank"])


def test_rolling_upgrade_with_jobs_in_flight(cluster: Cluster, releases: Releases) -> None:
    old, new = releases.old, releases.new
    # the previous release on c2 and on rsad's host (rsad restarted into it); c1 has the
    # new one already: the upgrade is under way, compute nodes first
    versions = _install([("c2", old), (RSAD, old)])
    previous = versions["c2"]
    assert previous == versions[RSAD] and "~git" in previous, versions
    current = cluster.out("c1", ["dpkg-query", "-W", "-f", "${Version}", "rsa-scheduler"])
    assert current != previous and "~" not in current
    # the SPANK package: the previous one (0.1.0~git..., built for this node's Slurm)
    # and today's, whose version names that Slurm release
    slurm = ".".join(cluster.out("c2", ["slurmd", "-V"]).split()[1].split(".")[:2])
    assert _spank(cluster, "c2") == previous
    assert _spank(cluster, "c1") == f"{current}+slurm{slurm}"
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
                          cluster.run(RSAD, ["tail", "-n", "30", "/var/log/rsad.log"],
                                      check=False).stdout])

    _wait(f"jobs {', '.join(jobs.values())} running", running, timeout=120, why=seen)
    # compute node c2 upgraded in place under its job (whose node agent, started by the
    # old Prolog, keeps running), then rsad's host, and rsad restarted: rsad last
    assert _install([("c2", new)]) == {"c2": current}
    assert _spank(cluster, "c2") == f"{current}+slurm{slurm}"  # apt upgraded it
    assert _install([(RSAD, new)]) == {RSAD: current}
    mark = _log_size(cluster)
    _ctl("restart-rsad")
    behind = (f"c2: the node agent of job {jobs['c2']} speaks hook protocol "
              f"{releases.protocol}, rsad {PROTOCOL}: its rsa-scheduler package is older than "
              "rsad's; upgrade it on c2")
    if releases.protocol < PROTOCOL:
        # c2's old agent asks the new rsad: one line naming the node, the job and the
        # fix, and rsa status shows it while it lasts
        _wait("rsad's line on c2's old agent", lambda: behind in _log_since(cluster, mark),
              timeout=60)
        status = cluster.out(RSAD, ["rsa", "status"])
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
    # c2's new Epilog spoke rsad's protocol: the line is gone from rsa status (a
    # previous release of rsad's protocol: no line at any time)
    back = (f"c2: its node hooks speak hook protocol {PROTOCOL} now (the Epilog of job "
            f"{jobs['c2']})")
    if releases.protocol < PROTOCOL:
        assert back in _log_since(cluster, mark)
    else:
        assert "hook protocol" not in _log_since(cluster, mark)
    assert "UPGRADE:" not in cluster.out(RSAD, ["rsa", "status"])
    for node in ("rsa1", "rsa2"):
        assert pool_left(cluster, node) == ""


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

