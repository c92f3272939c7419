"""Native mode in the cluster lab (issue 30): Slurm's burst_buffer/lua with the package's
burst_buffer.lua on slurmctld's host (ctl), rsad with ``slurm.mode: native`` on a host of
its own. The test switches the running cluster to native mode as the operator guide has
a site do it (``clusterctl mode native``: one session keeps ``make cluster-test`` short)
and back to queue mode at its end, also when it fails.

slurm_bb_pools runs inside slurmctld and reads a local file only; rsad writes it on its
own host. Without ``rsa-bb pools`` (the package's rsa-bb-pools.service) on ctl, Slurm saw
no space (``scontrol show burst``: TotalSpace=0) and the job pended for ever with
``BurstBufferResources`` (found here, 2026-11-29). One DATA_IN/DATA_OUT job then goes
through its whole lifecycle: Slurm holds it in ``BurstBufferStageIn`` while rsad stages
its input (Slurm 22.05's blocking data_in), it starts with the input on its RAMDISK
(checksums), writes its output there, and Slurm's data_out returns once rsad has
staged it out and verified it (checksums, owner)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator

import pytest

from tests.cluster.conftest import CTL, Cluster

HOME = "/pfs/home/rsauser"
JOB = f"""#!/bin/bash
#SBATCH -N 1 -t 5
#RSA_DATA_IN={HOME}/nin
#RSA_DATA_OUT={HOME}/nout
r={HOME}/native.report
{{ findmnt -n -o FSTYPE,SOURCE {HOME}/nin; (cd {HOME}/nin && sha256sum a b)
   echo "mode=$RSA_MODE"; }} > $r 2>&1
rsa input-done >> $r 2>&1
head -c 200000 /dev/urandom > {HOME}/nout/o
sha256sum < {HOME}/nout/o > {HOME}/native.osha
"""


def switch_mode(which: str) -> None:
    """`clusterctl mode WHICH` on the running cluster, as the operator guide has a site do it."""
    done = subprocess.run([str(CTL), "mode", which], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, f"clusterctl mode {which}: {done.stdout}{done.stderr}"


@pytest.fixture
def native(cluster: Cluster) -> Iterator[Cluster]:
    try:
        switch_mode("native")
        yield cluster
    finally:
        switch_mode("queue")


def test_a_native_job_through_its_whole_lifecycle(native: Cluster) -> None:
    c = native
    # rsad's pools reach slurmctld on another host: 2 RSA nodes of 1 GiB, all free
    burst = c.out("ctl", ["scontrol", "show", "burst"])
    assert "PoolName[0]=ram Granularity=1MiB TotalSpace=2GiB FreeSpace=2GiB" in burst, burst
    c.run("login", ["sh", "-ec", f"rm -rf {HOME}/nin {HOME}/nout {HOME}/native.*\n"
                    f"mkdir -p {HOME}/nin {HOME}/nout\n"
                    f"head -c 300000 /dev/urandom > {HOME}/nin/a\n"
                    f"head -c 5000 /dev/urandom > {HOME}/nin/b\n"
                    f"(cd {HOME}/nin && sha256sum a b) > {HOME}/native.isha\n"
                    f"cat > {HOME}/native.sh"], user="rsauser", input=JOB)
    job = c.out("login", ["sbatch", "--parsable", f"--chdir={HOME}", "-o",
                          f"{HOME}/native.log", f"{HOME}/native.sh"], user="rsauser").strip()
    assert job.isdigit(), job
    seen: set[str] = set()
    deadline = time.monotonic() + 120
    while True:
        line = c.out("ctl", ["squeue", "-h", "-t", "all", "-j", job, "-o", "%T|%r"]).strip()
        seen.add(line)
        if line.startswith("COMPLETED"):
            break
        assert time.monotonic() < deadline and not line.startswith(
            ("FAILED", "CANCELLED")), (seen, c.out("ctl", ["rsa", "job", job]))
        time.sleep(0.3)
    # Slurm held the job while rsad staged it in (22.05: its data_in blocked until then)
    assert "PENDING|BurstBufferStageIn" in seen, seen
    shown = ""
    deadline = time.monotonic() + 90
    while "rsa_state: released" not in shown:
        assert time.monotonic() < deadline, shown
        time.sleep(0.5)
        shown = c.out("ctl", ["rsa", "job", job])
    lines = shown.splitlines()

    def at(start: str, text: str) -> int:
        found = [i for i, x in enumerate(lines)
                 if x.strip().split("  ", 1)[-1].startswith(start) and text in x]
        assert found, (start, text, shown)
        return found[0]
    # staged in before Slurm let it start (whether rsad's poll or slurmctld's hook told
    # it first); data_out answered only once verified
    assert at("", "-> staged-in") < at("job ", "-> running"), shown
    assert "ok content verified: 1 object" in shown and f"in {HOME}/nout" in shown, shown
    # its input was on the RAMDISK when it started, whole; its output on the PFS, whole
    report = c.out("c2", ["cat", f"{HOME}/native.report"], user="rsauser").splitlines()
    assert report[0].split()[0] == "fuse" and report[0].split()[1].startswith("mfs#rsa")
    assert "\n".join(report[1:3]) + "\n" == c.out("c2", ["cat", f"{HOME}/native.isha"],
                                                   user="rsauser")
    assert report[3] == "mode=native", report
    assert c.out("rsa2", ["sh", "-c", f"sha256sum < {HOME}/nout/o"], user="rsauser") == \
        c.out("rsa2", ["cat", f"{HOME}/native.osha"], user="rsauser")
    assert c.out("rsa2", ["stat", "-c", "%U %s", f"{HOME}/nout/o"]) == "rsauser 200000\n"
    # Slurm's view: the burst buffer torn down, every MiB free again
    deadline = time.monotonic() + 60
    while "FreeSpace=2GiB" not in (burst := c.out("ctl", ["scontrol", "show", "burst"])):
        assert time.monotonic() < deadline, burst
        time.sleep(1)
