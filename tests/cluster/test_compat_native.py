"""Native mode's share of issue 31's compatibility set, in the cluster lab: a job array
whose tasks Slurm's burst_buffer/lua stages in and out through the package's
burst_buffer.lua and rsad on its own host, each task its own RSA job and RAMDISK.

On Slurm 24.05 and later (Debian 13's 24.11, testing's 26.05) burst_buffer.lua's data_in
and data_out return at once and Slurm polls test_data_in/test_data_out (``rsa-bb
--once``); on 22.05 (Debian 12) they block. Either way a task starts only once its
input is on its RAMDISK and Slurm ends it only once its output is verified on the PFS
(checksums, owner). On the polling releases slurmctld's log has burst_buffer.lua's line
for an answer of "still staging" (BUSY, which only ``rsa-bb --once`` gives: the second
task waits for the RSA node the first holds, ``allocation.array_share``), and no ``rsa-bb
data_in`` without ``--once`` (a slurmscriptd helper held for a whole stage-in) is seen
on ctl, whose processes are sampled every 0.2 s while the tasks stage in; on 22.05 that
blocking one is seen, and no BUSY line."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from tests.cluster.conftest import Cluster
from tests.cluster.test_compat import HOME, USER, _job, _nothing_left, _owner, _sha
from tests.cluster.test_native import switch_mode

ARRAY = """#!/bin/bash
#SBATCH -N 1 -t 5
#SBATCH --array=0-1
#RSA_DATA_IN={base}/in/%a
#RSA_DATA_OUT={base}/out/%a
#RSA_RESET=input-done
t=$SLURM_ARRAY_TASK_ID
r={base}/res/$t
{{ findmnt -n -o SOURCE --target {base}/in/$t; (cd {base}/in/$t && sha256sum f)
   echo "mode=$RSA_MODE"; rsa input-done >/dev/null; }} > $r.report 2>&1
head -c $((t * 4096 + 3000)) /dev/urandom > {base}/out/$t/o
sha256sum < {base}/out/$t/o > $r.osha
"""
# on ctl, while the tasks stage in: every rsa-bb data_in command line seen (a blocking
# one lives for the whole stage-in, a --once one for one question)
WATCH = """end=$(( $(date +%s) + $1 ))
while [ $(date +%s) -lt $end ] && squeue -h -r -t PD -j "$2" | grep -q .; do
  ps -e -o args= | grep '[r]sa-bb.*data_in' || true
  sleep 0.2
done
"""


@pytest.fixture
def native(cluster: Cluster) -> Iterator[Cluster]:
    try:
        switch_mode("native")
        yield cluster
    finally:  # a failed test's jobs end before the cluster goes back to queue mode
        cluster.run("ctl", ["scancel", "-u", USER], check=False)
        _idle(cluster)  # rsad refuses to start in another mode with jobs in flight
        switch_mode("queue")


def _idle(c: Cluster, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = c.run("ctl", ["rsa", "jobs", "--json"], check=False)
        if done.returncode == 0 and all(
                j["rsa_state"] in ("none", "released", "declined")
                for j in json.loads(done.stdout)["jobs"]):
            return
        time.sleep(1)


def _slurm(c: Cluster) -> tuple[int, int]:
    """The Slurm release on ctl (major, minor): ``slurmctld -V`` says e.g. slurm 24.11.5."""
    version = c.out("ctl", ["slurmctld", "-V"]).split()[-1].split("-")[0].split(".")
    return int(version[0]), int(version[1])


def test_a_native_arrays_tasks_each_stage_in_and_out_through_slurms_hooks(
        native: Cluster) -> None:
    c = native
    base = f"{HOME}/ncompat"
    c.run("login", ["sh", "-ec", f"rm -rf {base}\nmkdir -p {base}/res\n" + "\n".join(
        f"mkdir -p {base}/in/{t} {base}/out/{t}\n"
        f"head -c {8000000 + 777 * t} /dev/urandom > {base}/in/{t}/f" for t in (0, 1))],
        user=USER)
    log_from = int(c.out("ctl", ["stat", "-c", "%s", "/var/log/slurm/slurmctld.log"]))
    c.run("login", ["sh", "-ec", f"cat > {base}/array.sh"], user=USER,
          input=ARRAY.format(base=base))
    array = c.out("login", ["sbatch", "--parsable", f"--chdir={base}", "-o",
                            f"{base}/array-%a.log", f"{base}/array.sh"], user=USER).strip()
    assert array.isdigit(), array
    seen = c.out("ctl", ["sh", "-c", WATCH, "sh", "90", array], timeout=120)
    tasks = [f"{array}_{t}" for t in (0, 1)]
    polls = _slurm(c) >= (24, 5)
    deadline = time.monotonic() + 180
    while True:  # Slurm ends a task only once data_out answered: output verified
        states = c.out("ctl", ["squeue", "-h", "-r", "-t", "all", "-j", array, "-o",
                               "%i %T"]).split()
        got = dict(zip(states[::2], states[1::2], strict=True))
        if all(got.get(t) == "COMPLETED" for t in tasks):
            break
        assert time.monotonic() < deadline and not any(
            s in ("FAILED", "CANCELLED") for s in got.values()), got
        time.sleep(0.5)
    for t, task in enumerate(tasks):
        data = _job(c, task)
        assert data is not None, task
        reached = [e.get("to", "") for e in data["events"] if e["name"] == "rsa.transition"]
        assert "staged-in" in reached and "mounted-input" in reached, reached
        assert reached.index("staged-in") < reached.index("mounted-input"), reached
        assert any("content verified: 1 object" in str(e.get("message", ""))
                   and f"in {base}/out/{t}" in str(e.get("message", ""))
                   for e in data["events"]), data["events"][-10:]
        report = c.out("rsa2", ["cat", f"{base}/res/{t}.report"], user=USER).splitlines()
        assert report[0].startswith("mfs#rsa"), report  # its input from its RAMDISK
        assert report[1].split()[0] == _sha(c, f"{base}/in/{t}/f").split()[0], report
        # 22.05 gives every task RSA_MODE; 24.11 and 26.05 no path file to a task split
        # off the array (burst_buffer.lua's slurm_bb_paths: the user guide says so)
        assert report[2] == "mode=native" or (polls and report[2] == "mode="), report
        assert _sha(c, f"{base}/out/{t}/o") == c.out(
            "rsa2", ["cat", f"{base}/res/{t}.osha"], user=USER)
        assert _owner(c, f"{base}/out/{t}/o") == USER
    assert _job(c, array) is None
    blocking = [x for x in seen.splitlines() if "--once" not in x]
    log = c.out("ctl", ["tail", "-c", f"+{log_from + 1}", "/var/log/slurm/slurmctld.log"])
    busy = [x for x in log.splitlines() if "rsa: data_in of job " in x]
    if polls:
        # Slurm polled test_data_in: burst_buffer.lua logs each answer of "still staging"
        # (BUSY, only `rsa-bb --once` gives one): the task waiting for the RSA node the
        # other held was asked again and again; and no slurmscriptd helper was seen held
        # by a blocking data_in
        assert busy, log[-3000:]
        assert blocking == [], blocking
    else:
        assert blocking, seen  # 22.05: data_in blocks for the stage-in
        assert busy == [], busy
    _nothing_left(c)
    c.run("login", ["rm", "-rf", base], user=USER, check=False, timeout=120)
