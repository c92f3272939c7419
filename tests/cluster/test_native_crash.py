"""Native mode in the cluster lab, rsad SIGKILLed on its host at the two moments Slurm
polls it: right after Slurm set the job up (on Slurm 24.05+ data_in has returned at once
and test_data_in polls rsad: ``rsa-bb --once``; on 22.05 data_in blocks), and while the
job's output stages out (test_data_out polling, or 22.05's blocking data_out).

rsad is restarted as its unit would (``clusterctl restart-rsad``) each time. Slurm must
hold the job in stage-in while rsad is down and start it only with its whole input on a
RAMDISK; it must keep the job in stage-out while rsad is down and end it only once rsad's
log holds ``output-verified``; the RAMDISK goes only after that; the output on the PFS is
the job's, whole and the user's; nothing is left anywhere. Run on each Debian release
(``make cluster-test RSA_LAB_DEBIAN=13 CLUSTER_TESTS=tests/cluster/test_native_crash.py``:
Slurm 24.11's polled protocol)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator

import pytest

from tests.cluster.conftest import CTL, RSAD, Cluster
from tests.cluster.test_compat import (
    HOME,
    USER,
    _job,
    _nothing_left,
    _owner,
    _reached,
    _released,
    _sha,
    _submit,
)
from tests.cluster.test_compat_native import _idle
from tests.cluster.test_native import switch_mode

JOB = """#!/bin/bash
#SBATCH -N 1 -t 10
#RSA_DATA_IN={base}/in
#RSA_DATA_OUT={base}/out
#RSA_RESET=input-done
{{ findmnt -n -o SOURCE --target {base}/in; (cd {base}/in && sha256sum f1 f2 f3); }} \\
  > {base}/res/report
rsa input-done > /dev/null
head -c 150000000 /dev/urandom > {base}/out/o
sha256sum < {base}/out/o > {base}/res/osha
"""
# on rsad's host: SIGKILL rsad the moment job $1 is in one of the rsa-states $2 (words
# of `rsa job`), fail if it is seen in one of $3 first; prints the state it was killed
# in. The pid is the one its store lock names, checked to be rsad's.
KILL_IN = """job=$1; states=" $2 "; late=" $3 "
for i in $(seq 1500); do
  s=$(rsa job "$job" 2>/dev/null | sed -n 's/^ *rsa_state: //p')
  case "$states" in *" $s "*)
    p=$(cat /var/lib/rsa/rsa.db.lock)
    [ "$(cat /proc/$p/comm)" = rsad ] && kill -KILL "$p" && echo "$s" && exit 0 ;;
  esac
  case "$late" in *" $s "*)
    echo "job $job was $s before rsad could be killed" >&2; exit 1 ;;
  esac
  sleep 0.1
done
echo "never saw job $job in$states" >&2; exit 1
"""
AFTER_STAGE_IN = ("staged-in locked-in mounting-input mounted-input resetting "
                  "mounting-output mounted-output staging-out verifying")
AFTER_STAGE_OUT = "output-verified tearing-down released quarantined"


@pytest.fixture
def native(cluster: Cluster) -> Iterator[Cluster]:
    base = f"{HOME}/ncrash"
    cluster.run("login", ["sh", "-ec", f"rm -rf {base}\nmkdir -p {base}/res"], user=USER)
    try:
        switch_mode("native")
        yield cluster
    finally:  # a failed test's jobs end before the cluster goes back to queue mode
        cluster.run("ctl", ["scancel", "-u", USER], check=False)
        _idle(cluster)
        switch_mode("queue")
        cluster.run("login", ["rm", "-rf", base], user=USER, check=False, timeout=120)


def _slurm_state(c: Cluster, job: str) -> tuple[str, str]:
    line = c.out("ctl", ["squeue", "-h", "-t", "all", "-j", job, "-o", "%T|%r"]).strip()
    state, _, reason = line.partition("|")
    return state, reason


def _restart_rsad() -> None:
    done = subprocess.run([str(CTL), "restart-rsad"], capture_output=True, text=True,
                          timeout=180, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_rsad_killed_after_setup_and_during_stage_out_loses_nothing(
        native: Cluster) -> None:
    c = native
    base = f"{HOME}/ncrash"
    c.run("login", ["sh", "-ec", f"mkdir -p {base}/in {base}/out\n"
                    f"for f in f1 f2 f3; do head -c 40000000 /dev/urandom > {base}/in/$f; "
                    "done"], user=USER, timeout=120)
    job = _submit(c, "ncrash", JOB.format(base=base))
    # 1. Slurm has set the job up (rsad tracks it), its input is not staged yet
    killed = c.run(RSAD, ["sh", "-c", KILL_IN, "sh", job,
                            "none allocated fs-building fs-ready staging-in",
                            AFTER_STAGE_IN], timeout=200)
    try:
        time.sleep(20)  # past burst_buffer.conf's PollInterval (15 s): polled while down
        assert _slurm_state(c, job) == ("PENDING", "BurstBufferStageIn"), (
            killed.stdout, _slurm_state(c, job))
    finally:
        _restart_rsad()
    # 2. the job ran; its output stages out
    killed = c.run(RSAD, ["sh", "-c", KILL_IN, "sh", job, "staging-out verifying",
                            AFTER_STAGE_OUT], timeout=400)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            state = _slurm_state(c, job)[0]
            assert state not in ("COMPLETED", "FAILED", "CANCELLED"), (
                f"Slurm ended job {job} ({state}) while rsad was down in "
                f"{killed.stdout.strip()}: its output was not verified")
            time.sleep(1)
    finally:
        _restart_rsad()
    deadline = time.monotonic() + 300
    while (state := _slurm_state(c, job)[0]) != "COMPLETED":
        assert time.monotonic() < deadline and state not in ("FAILED", "CANCELLED"), state
        time.sleep(1)
    data = _job(c, job)  # Slurm ended the stage-out: rsad's log says verified
    assert data is not None and "output-verified" in _reached(data), data
    data = _released(c, job, timeout=120)
    reached = _reached(data)
    assert "quarantined" not in reached, reached
    assert reached.index("staged-in") < reached.index("mounted-input"), reached
    assert reached.index("output-verified") < reached.index("tearing-down"), reached
    report = c.out("rsa2", ["cat", f"{base}/res/report"], user=USER).splitlines()
    assert report[0].startswith("mfs#rsa"), report  # read from a RAMDISK, not the PFS
    want = c.out("rsa2", ["sh", "-c", f"cd {base}/in && sha256sum f1 f2 f3"], user=USER)
    assert "\n".join(report[1:]) + "\n" == want
    assert _sha(c, f"{base}/out/o") == c.out("rsa2", ["cat", f"{base}/res/osha"], user=USER)
    assert _owner(c, f"{base}/out/o") == USER
    _nothing_left(c)
