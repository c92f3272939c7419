"""The job shapes and troubles of issue 31's compatibility set, in the cluster lab (every
node its own host; run on each Debian release: ``make test-compat RSA_LAB_DEBIAN=...``).
What tests/cluster already has is not repeated here: a whole lifecycle with checksums in
queue mode (test_hosts, test_directory, test_spank) and in native mode (test_native),
and the security tests (test_attacks, test_shared_node, test_networks). Here, in queue
mode: a job array (each task its own RSA job and RAMDISK, ``%a`` in its paths), a
heterogeneous job (one RAMDISK on both components' nodes), ``rsa wait`` right after
``sbatch`` on an idle cluster, a job that fails (its output still staged out and
verified), and one chaos round (rsad SIGKILLed on its host in the middle of a stage-in,
restarted as its unit would: the job completes with verified output, nothing leaks).

Every job is rsauser's, submitted on the login node; data are small (kilobytes, tens of
MB for the chaos round's stage-in) and every wait is a poll."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.cluster.conftest import CTL, RSAD, Cluster, pool_left

HOME = "/pfs/home/rsauser"
USER = "rsauser"
RSA_NODES = ("rsa1", "rsa2")
COMPUTE = ("c1", "c2")


def _submit(c: Cluster, name: str, script: str, *extra: str) -> str:
    c.run("login", ["sh", "-ec", f"cat > {HOME}/{name}.sh"], user=USER, input=script)
    job = c.out("login", ["sbatch", "--parsable", *extra, f"--chdir={HOME}", "-o",
                          f"{HOME}/{name}-%j.log", f"{HOME}/{name}.sh"], user=USER).strip()
    assert job.isdigit(), job
    return job


def _job(c: Cluster, job: str) -> dict[str, Any] | None:
    done = c.run("ctl", ["rsa", "job", "--json", job], check=False)
    return json.loads(done.stdout) if done.returncode == 0 else None


def _released(c: Cluster, job: str, timeout: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    data: dict[str, Any] | None = None
    while time.monotonic() < deadline:
        data = _job(c, job)
        if data is not None and data["rsa_state"] in ("released", "quarantined"):
            break
        time.sleep(0.5)
    assert data is not None and data["rsa_state"] == "released", (
        job, data and data["rsa_state"], data and data["events"][-8:],
        c.out("ctl", ["squeue", "-h", "-t", "all", "-o", "%i %T %r"]))
    return data


def _reached(data: dict[str, Any]) -> list[str]:
    return [e.get("to", "") for e in data["events"] if e["name"] == "rsa.transition"]


def _verified(data: dict[str, Any]) -> str:
    """The message of the job's verification (``ok content verified: ...``)."""
    lines = [str(e.get("message", "")) for e in data["events"]
             if "content verified" in str(e.get("message", ""))]
    assert lines, data["events"][-10:]
    return lines[-1]


def _sha(c: Cluster, path: str) -> str:
    return c.out("rsa2", ["sh", "-c", f"sha256sum < {path}"], user=USER)


def _owner(c: Cluster, path: str) -> str:
    return c.out("rsa2", ["stat", "-c", "%U", path]).strip()


def _nothing_left(c: Cluster) -> None:
    """No RAMDISK of any job is left: the RSA nodes' pools empty, no MooseFS server or
    process of the user on them, no RAMDISK mounted on any node, both RSA nodes free."""
    for node in RSA_NODES:
        assert pool_left(c, node) == "", node
        # the pool's standby chunkservers hold nothing (pool_left): not a RAMDISK's
        procs = c.out(node, ["ps", "-e", "-o", "user=,comm=,args="]).splitlines()
        left = [p for p in procs if p.split()[0] == USER
                or (p.split()[1] in ("mfsmaster", "mfschunkserver")
                    and "/rsa-mfs-.standby-" not in p)]
        assert left == [], (node, left)
    for node in (*RSA_NODES, *COMPUTE):
        mounts = c.out(node, ["findmnt", "-rn", "-o", "TARGET,SOURCE"]).splitlines()
        assert [m for m in mounts if "-data:" in m] == [], (node, mounts)
    deadline = time.monotonic() + 30
    while True:
        nodes = c.out("ctl", ["rsa", "nodes"]).splitlines()[1:]
        # NODE TIER STATE CAPACITY JOB [REASON]: up, no job
        if all(n.split()[2] == "up" and n.split()[4] == "-" for n in nodes):
            break
        assert time.monotonic() < deadline, nodes
        time.sleep(0.5)


@pytest.fixture
def area(cluster: Cluster) -> Iterator[str]:
    base = f"{HOME}/compat"
    cluster.run("login", ["sh", "-ec", f"rm -rf {base}\nmkdir -p {base}/res"], user=USER)
    try:
        yield base
    finally:  # a failed test's jobs end here (rsad then tears their RAMDISKs down)
        cluster.run("ctl", ["scancel", "-u", USER], check=False)
        cluster.run("login", ["rm", "-rf", base], user=USER, check=False, timeout=120)


ARRAY = """#!/bin/bash
#SBATCH -N 1 -t 5
#SBATCH --array=0-1
#RSA_DATA_IN={base}/in/%a
#RSA_DATA_OUT={base}/out/%a
#RSA_RESET=input-done
t=$SLURM_ARRAY_TASK_ID
r={base}/res/$t
{{ findmnt -n -o SOURCE --target {base}/in/$t; (cd {base}/in/$t && sha256sum f)
   rsa job --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["job_id"])'
   rsa input-done >/dev/null; findmnt -n -o SOURCE --target {base}/out/$t; }} > $r.report
head -c $((t * 4096 + 3000)) /dev/urandom > {base}/out/$t/o
sha256sum < {base}/out/$t/o > $r.osha
"""


def test_an_array_gives_each_task_its_own_ramdisk(cluster: Cluster, area: str) -> None:
    # the user guide: every task is its own RSA job `<array>_<task>`, %a in DATA_IN and
    # DATA_OUT is its task id, each task its own RAMDISK, messages and timeline
    c = cluster
    c.run("login", ["sh", "-ec", "\n".join(
        f"mkdir -p {area}/in/{t} {area}/out/{t}\n"
        f"head -c {1000 + 777 * t} /dev/urandom > {area}/in/{t}/f" for t in (0, 1))],
        user=USER)
    array = _submit(c, "compat-array", ARRAY.format(base=area))
    for t in (0, 1):
        data = _released(c, f"{array}_{t}", timeout=180)
        reached = _reached(data)
        assert "mounted-input" in reached and "mounted-output" in reached, reached
        assert f"in {area}/out/{t}" in _verified(data), _verified(data)
        report = c.out("rsa2", ["cat", f"{area}/res/{t}.report"], user=USER).splitlines()
        assert report[0].startswith("mfs#rsa") and report[3].startswith("mfs#rsa"), report
        # the task read its own input from its RAMDISK, and rsa job inside it is the task
        assert report[1].split()[0] == _sha(c, f"{area}/in/{t}/f").split()[0], report
        assert report[2] == f"{array}_{t}", report
        # its output on the PFS, whole, the user's
        assert _sha(c, f"{area}/out/{t}/o") == c.out(
            "rsa2", ["cat", f"{area}/res/{t}.osha"], user=USER)
        assert _owner(c, f"{area}/out/{t}/o") == USER
    assert _job(c, array) is None  # one RSA job per task: none under the bare id
    _nothing_left(c)


HETJOB = """#!/bin/bash
#SBATCH -t 5 -N 1
#SBATCH hetjob
#SBATCH -N 1
#RSA_DATA_IN={base}/in
#RSA_DATA_OUT={base}/out
#RSA_RESET=input-done
srun --het-group=0,1 bash -c 'n=$(hostname); r={base}/res/$n
  {{ findmnt -n -o SOURCE --target {base}/in; cd {base}/in && sha256sum f; }} > $r.in'
rsa input-done > {base}/res/input-done 2>&1
srun --het-group=0,1 bash -c 'n=$(hostname); r={base}/res/$n
  findmnt -n -o SOURCE --target {base}/out > $r.out
  head -c 5000 /dev/urandom > {base}/out/o.$n; sha256sum < {base}/out/o.$n > $r.osha'
"""


def test_a_hetjob_gets_one_ramdisk_on_both_components_nodes(
        cluster: Cluster, area: str) -> None:
    # the user guide: one RSA job for the whole hetjob, under its leader's id, mounted on
    # every component's nodes; each node reads the input and writes output through it
    c = cluster
    c.run("login", ["sh", "-ec", f"mkdir -p {area}/in {area}/out\n"
                    f"head -c 20000 /dev/urandom > {area}/in/f"], user=USER)
    job = _submit(c, "compat-het", HETJOB.format(base=area))
    data = _released(c, job, timeout=180)
    reached = _reached(data)
    assert "mounted-input" in reached and "mounted-output" in reached, reached
    assert "content verified: 2 objects" in _verified(data), _verified(data)
    want = _sha(c, f"{area}/in/f").split()[0]
    for node in COMPUTE:  # both components ran, one on each compute node
        got = c.out("rsa2", ["cat", f"{area}/res/{node}.in"], user=USER).splitlines()
        assert got[0].startswith("mfs#rsa") and got[1].split()[0] == want, (node, got)
        assert c.out("rsa2", ["cat", f"{area}/res/{node}.out"], user=USER).startswith(
            "mfs#rsa"), node
        assert _sha(c, f"{area}/out/o.{node}") == c.out(
            "rsa2", ["cat", f"{area}/res/{node}.osha"], user=USER)
        assert _owner(c, f"{area}/out/o.{node}") == USER
    # no RSA job of its own for the second component: its own job id is the hetjob's
    # (when slurmctld's hooks taught rsad the match) or untracked, never another record
    component = _job(c, str(int(job) + 1))
    assert _job(c, f"{job}+1") is None
    assert component is None or component["job_id"] == job, component
    _nothing_left(c)


WRITER = """#!/bin/bash
#SBATCH -N 1 -t 5
#RSA_DATA_OUT={base}/out
head -c 3000000 /dev/urandom > {base}/out/big
for i in 1 2 3; do echo $i > {base}/out/s$i; done
(cd {base}/out && sha256sum big s1 s2 s3) > {base}/res/sha
exit {code}
"""


def test_rsa_wait_right_after_sbatch_on_an_idle_cluster(cluster: Cluster, area: str) -> None:
    # the user guide ("Before you read a job's output"): a job still pending or running
    # is waited for too; rsa wait returns once the output is on the PFS, verified, and
    # says "no RSA" for a job without directives
    c = cluster
    c.run("login", ["mkdir", "-p", f"{area}/out"], user=USER)
    job = _submit(c, "compat-wait", WRITER.format(base=area, code=0))
    plain = c.out("login", ["sbatch", "--parsable", "-o", "/dev/null", "--wrap", "true"],
                  user=USER).strip()
    done = c.run("login", ["sh", "-c", f"rsa wait --timeout 150 {job} {plain}; echo rc=$?\n"
                           f"cd {area}/out && sha256sum big s1 s2 s3"], user=USER,
                 timeout=180)
    lines = done.stdout.splitlines()
    assert lines[2] == "rc=0", (lines, done.stderr)
    assert {x.split(":")[0] for x in lines[:2]} == {job, plain}, lines
    assert any(x.startswith(f"{job}: verified: ") for x in lines[:2]), lines
    assert any(x.startswith(f"{plain}: no RSA: ") for x in lines[:2]), lines
    # the moment rsa wait returned, every byte was on the PFS
    assert "\n".join(lines[3:]) + "\n" == c.out("rsa2", ["cat", f"{area}/res/sha"],
                                                user=USER)
    _nothing_left(c)


def test_a_failed_jobs_output_is_staged_out_and_verified(
        cluster: Cluster, area: str) -> None:
    # a job that exits 3 after writing its output: Slurm says FAILED 3:0; the RSA stages
    # its output out all the same, verified, the user's
    c = cluster
    c.run("login", ["mkdir", "-p", f"{area}/out"], user=USER)
    job = _submit(c, "compat-fail", WRITER.format(base=area, code=3))
    data = _released(c, job)
    # rsad heard the job's end, with its status, from slurmctld's EpilogSlurmctld
    assert "(EpilogSlurmctld, exit code 3)" in c.out("ctl", ["rsa", "job", job])
    assert f"content verified: 4 objects (2.86M) in {area}/out" in _verified(data), \
        _verified(data)
    state = c.out("ctl", ["squeue", "-h", "-t", "all", "-j", job, "-o", "%T"])
    assert state.strip() == "FAILED", state
    got = c.out("rsa2", ["sh", "-c", f"cd {area}/out && sha256sum big s1 s2 s3"], user=USER)
    assert got == c.out("rsa2", ["cat", f"{area}/res/sha"], user=USER)
    for name in ("big", "s1", "s2", "s3"):
        assert _owner(c, f"{area}/out/{name}") == USER
    _nothing_left(c)


CHAOS = """#!/bin/bash
#SBATCH -N 1 -t 5
#RSA_DATA_IN={base}/in
#RSA_DATA_OUT={base}/out
#RSA_RESET=input-done
{{ findmnt -n -o SOURCE --target {base}/in; (cd {base}/in && sha256sum f1 f2 f3); }} \\
  > {base}/res/report
rsa input-done > /dev/null
head -c 100000 /dev/urandom > {base}/out/o
sha256sum < {base}/out/o > {base}/res/osha
"""
# on rsad's host: kill rsad with SIGKILL the moment its job is staging in (the pid its
# store lock names, checked to be rsad); prints the pid killed
KILL_MID_STAGE_IN = """job=$1
for i in $(seq 600); do
  case "$(rsa job "$job" 2>/dev/null)" in
    *"rsa_state: staging-in"*)
      p=$(cat /var/lib/rsa/rsa.db.lock)
      [ "$(cat /proc/$p/comm)" = rsad ] && kill -KILL "$p" && echo "$p" && exit 0 ;;
    *"rsa_state: staged-in"*|*"rsa_state: locked-in"*|*"rsa_state: mounted"*)
      echo "the stage-in was over before rsad could be killed" >&2; exit 1 ;;
  esac
  sleep 0.1
done
echo "never saw job $job staging in" >&2; exit 1
"""


def test_rsad_killed_mid_stage_in_the_job_completes_and_nothing_leaks(
        cluster: Cluster, area: str) -> None:
    # one chaos round (issue 31's compatibility set): rsad SIGKILLed on its host while it
    # stages a job's input in, then restarted as its unit would (clusterctl restart-rsad:
    # rsad --check, rsad); the job still reads its whole input from a RAMDISK, its
    # output is staged out and verified, and nothing of it is left anywhere
    c = cluster
    c.run("login", ["sh", "-ec", f"mkdir -p {area}/in {area}/out\n"
                    f"for f in f1 f2 f3; do head -c 40000000 /dev/urandom > {area}/in/$f; "
                    "done"], user=USER, timeout=120)
    job = _submit(c, "compat-chaos", CHAOS.format(base=area))
    killed = c.run(RSAD, ["sh", "-c", KILL_MID_STAGE_IN, "sh", job], timeout=90)
    pid = killed.stdout.strip()
    assert pid.isdigit(), killed
    assert c.run(RSAD, ["test", "-e", f"/proc/{pid}"], check=False).returncode != 0
    restart = subprocess.run([str(CTL), "restart-rsad"], capture_output=True, text=True,
                             timeout=180, check=False)
    assert restart.returncode == 0, restart.stdout + restart.stderr
    # the restarted rsad found the stage-in outstanding in its store and issued it again
    log = c.out(RSAD, ["cat", "/var/log/rsad.log"])
    assert f"({job}/1/stage-in/" in log.split("actions outstanding:")[-1].split("\n")[0], \
        log[-3000:]
    data = _released(c, job, timeout=240)
    reached = _reached(data)
    assert "mounted-input" in reached and "mounted-output" in reached, reached
    assert f"content verified: 1 object (97.66K) in {area}/out" in _verified(data), \
        _verified(data)
    report = c.out("rsa2", ["cat", f"{area}/res/report"], user=USER).splitlines()
    assert report[0].startswith("mfs#rsa"), report  # read from a RAMDISK, not the PFS
    want = c.out("rsa2", ["sh", "-c", f"cd {area}/in && sha256sum f1 f2 f3"], user=USER)
    assert "\n".join(report[1:]) + "\n" == want
    assert _sha(c, f"{area}/out/o") == c.out("rsa2", ["cat", f"{area}/res/osha"], user=USER)
    assert _owner(c, f"{area}/out/o") == USER
    _nothing_left(c)
