"""A node whose SPANK plugin was built for another Slurm release (issue 31): the window of
a Slurm upgrade in which slurmd and sbatch already run the new Slurm and the plugin
package is the old one's (or the other way round). c2 and the login node name, in
plugstack.conf (``optional``, as the package's docs recommend), a plugin built for
another release: on Debian 13 and testing make deb's real 22.05 build
(``rsa-scheduler-spank_*+slurm22.05``); on Debian 12 a 24.11 or 26.05 build of
lab/deb-release when dist/ has one, else a copy of the plugin whose ``plugin_version``
says 23.11 (tests/cluster/test_spank.py's). Then:

- ``rsa nodes check --compute`` on c2 exits 1 naming the plugin, both releases and the
  fix; and slurmd's log on c2 shows that it is true (slurmstepd refuses the plugin);
- on the login node ``sbatch --rsa-data-in=...`` is refused as an unknown option (the
  options come from the plugin), while
- a job whose script holds ``#RSA_DATA_IN`` (no option), submitted there, is staged and
  runs on c2 with its input read whole from the RAMDISK the Prolog mounted (job_submit.lua
  and the node hooks need no plugin), without ``RSA_STATE`` (the plugin sets it), and
- a plain job runs on c2 beside it.

With ``required`` in place of ``optional`` a plain job's script never runs on c2:
slurmstepd aborts its batch step ("Plugin stack initialization failed") and slurmctld
drains the node ("batch job complete failure"): the node refusing jobs that the operator
guide's Slurm upgrade order avoids."""

from __future__ import annotations

import base64
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.conftest import Cluster
from tests.cluster.test_spank import OTHER, PLUGIN

ROOT = Path(__file__).resolve().parents[2]
HOME = "/pfs/home/rsauser"
D = f"{HOME}/spank-rel"
RSA_JOB = f"""#!/bin/bash
#SBATCH -N 1 -t 5
#RSA_DATA_IN={D}/in
{{ echo "state=${{RSA_STATE:-unset}}"; findmnt -n -o FSTYPE,SOURCE {D}/in
   sha256sum < {D}/in/f; }} > {D}/rsa.report 2>&1
"""
PLAIN = f"""#!/bin/bash
#SBATCH -N 1 -t 5
{{ echo ran; env | grep '^RSA_' || true; }} > {D}/plain.report 2>&1
"""


def _so_of(deb: Path) -> bytes:
    """rsa_spank.so out of a package, as dpkg would unpack it."""
    tar = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True,
                         check=True, timeout=60).stdout
    return subprocess.run(["tar", "-xOf", "-", f".{PLUGIN}"], input=tar,
                          capture_output=True, check=True, timeout=60).stdout


def _other_build(cluster: Cluster) -> tuple[str, str]:
    """(path on c2 and login, release) of a plugin built for a Slurm release not the
    image's: a real build where dist/ has one, else the patched copy."""
    release = os.environ.get("RSA_LAB_DEBIAN", "13")
    found = [(d, f"rsa-scheduler-spank_*+slurm{r}_amd64.deb", r) for d, r in
             (("", "22.05"), ("debian13", "24.11"), ("debiantesting", "26.05"))
             if d != ("" if release == "12" else f"debian{release}")]
    for sub, pattern, rel in found:
        debs = sorted((ROOT / "dist" / sub).glob(pattern))
        if debs:
            path = f"/usr/local/lib/rsa_spank-{rel}.so"
            data = base64.b64encode(_so_of(debs[-1])).decode()
            for node in ("c2", "login"):
                cluster.run(node, ["sh", "-ec", f"mkdir -p /usr/local/lib\n"
                                   f"base64 -d > {path}"], input=data)
            return path, rel
    path = "/usr/local/lib/rsa_spank-23.11.so"
    for node in ("c2", "login"):
        cluster.run(node, ["sh", "-ec", f"mkdir -p /usr/local/lib\npython3 -c '{OTHER}' "
                           f"{PLUGIN} {path}"])
    return path, "23.11"


@pytest.fixture
def other_plugin(cluster: Cluster) -> Iterator[tuple[str, str]]:
    """c2's and the login node's plugstack.conf name another release's plugin, optional;
    put back after."""
    path, rel = _other_build(cluster)
    for node in ("c2", "login"):
        cluster.run(node, ["sh", "-ec", "cp /etc/slurm/plugstack.conf /root/plugstack.conf\n"
                           f"echo 'optional {path}' > /etc/slurm/plugstack.conf"])
    try:
        yield path, rel
    finally:
        for node in ("c2", "login"):
            cluster.run(node, ["sh", "-ec", "cat /root/plugstack.conf > "
                               f"/etc/slurm/plugstack.conf\nrm -f {path}"])


def _state(cluster: Cluster, job: str) -> str:
    return cluster.out("ctl", ["squeue", "-h", "-t", "all", "-j", job, "-o", "%T"]).strip()


def _wait_state(cluster: Cluster, job: str, states: tuple[str, ...], timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while (state := _state(cluster, job)) not in states:
        assert time.monotonic() < deadline, f"job {job}: {state}"
        time.sleep(0.3)
    return state


def _sbatch(cluster: Cluster, *argv: str) -> str:
    job = cluster.out("login", ["sbatch", "--parsable", "-w", "c2", f"--chdir={D}", *argv],
                      user="rsauser").strip()
    assert job.isdigit(), job
    return job


def test_a_node_with_another_releases_plugin_runs_plain_and_rsa_jobs(
        cluster: Cluster, other_plugin: tuple[str, str]) -> None:
    c = cluster
    path, rel = other_plugin
    slurm = ".".join(c.out("c2", ["slurmd", "-V"]).split()[1].split(".")[:2])
    assert rel != slurm
    done = c.run("c2", ["rsa", "nodes", "check", "--compute"], check=False)
    assert done.returncode == 1 and done.stdout.splitlines() == [
        f"c2: lacks the SPANK plugin {path} for Slurm {slurm} (it was built for {rel}; "
        "slurmstepd refuses it; plugstack.conf has it optional: jobs run here without it, "
        "with no RSA_* variables and no private mounts): rebuild it on this node's image "
        "against this Slurm "
        "(make -C slurm_plugins/spank install, or the rsa-scheduler-spank package built "
        "for it)"], done
    c.run("login", ["sh", "-ec", f"rm -rf {D}\nmkdir -p {D}/in\n"
                    f"head -c 100000 /dev/urandom > {D}/in/f\n"
                    f"sha256sum < {D}/in/f > {D}/want.sha\n"
                    f"cat > {D}/rsa.sh"], user="rsauser", input=RSA_JOB)
    c.run("login", ["sh", "-ec", f"cat > {D}/plain.sh"], user="rsauser", input=PLAIN)
    # the options are the plugin's: sbatch without it does not know them
    refused = c.run("login", ["sbatch", "-w", "c2", f"--rsa-data-in={D}/in", "--wrap",
                              "true"], user="rsauser", check=False)
    assert refused.returncode != 0 and "unrecognized option" in refused.stderr, refused
    rsa = _sbatch(c, "-o", f"{D}/rsa.log", f"{D}/rsa.sh")
    plain = _sbatch(c, "-o", f"{D}/plain.log", f"{D}/plain.sh")
    shown = ""
    deadline = time.monotonic() + 120
    while "rsa_state: released" not in shown:
        assert time.monotonic() < deadline, shown
        time.sleep(0.5)
        shown = c.run("ctl", ["rsa", "job", rsa], check=False).stdout
    assert "mounted-input (input-mounted)" in shown, shown  # the Prolog mounted it
    for job in (rsa, plain):
        assert _wait_state(c, job, ("COMPLETED", "FAILED"), 60) == "COMPLETED", job
    report = c.out("login", ["cat", f"{D}/rsa.report"], user="rsauser").splitlines()
    assert report[0] == "state=unset", report  # no plugin in the step: no RSA_* variables
    assert report[1].split()[0] == "fuse" and report[1].split()[1].startswith("mfs#rsa")
    assert report[2] + "\n" == c.out("login", ["cat", f"{D}/want.sha"], user="rsauser")
    assert c.out("login", ["cat", f"{D}/plain.report"], user="rsauser") == "ran\n"
    log = c.out("c2", ["cat", "/var/log/slurm/slurmd.log"])
    assert f"Incompatible Slurm plugin {path} version" in log, log[-2000:]


def test_a_required_plugin_of_another_release_refuses_every_step(
        cluster: Cluster, other_plugin: tuple[str, str]) -> None:
    c = cluster
    path, _ = other_plugin
    c.run("c2", ["sh", "-ec", f"echo 'required {path}' > /etc/slurm/plugstack.conf"])
    c.run("login", ["sh", "-ec", f"rm -rf {D}\nmkdir -p {D}\ncat > {D}/plain.sh"],
          user="rsauser", input=PLAIN)
    job = _sbatch(c, "-o", f"{D}/plain.log", f"{D}/plain.sh")
    try:
        # slurmstepd aborts the batch step before the script runs and slurmctld drains
        # the node (22.05 ends the job, 24.11 requeues it)
        node = ""
        deadline = time.monotonic() + 60
        while "DRAIN" not in node:
            assert time.monotonic() < deadline, node
            time.sleep(0.3)
            node = c.out("ctl", ["scontrol", "show", "node", "c2"])
        assert "Reason=batch job complete failure" in node, node
        assert c.run("login", ["test", "-e", f"{D}/plain.report"], user="rsauser",
                     check=False).returncode != 0  # the script never ran
        log = c.out("c2", ["cat", "/var/log/slurm/slurmd.log"])
        assert f"[{job}.batch] error: Plugin stack initialization failed" in log, log[-2000:]
    finally:
        c.run("c2", ["sh", "-ec", "cat /root/plugstack.conf > /etc/slurm/plugstack.conf"])
        c.run("ctl", ["sh", "-c", f"scancel {job}; scontrol update nodename=c2 "
                      "state=resume; true"])
