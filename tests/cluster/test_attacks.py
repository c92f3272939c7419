"""rsaother against rsauser's RAMDISK across hosts (issue 30): while rsauser's job runs on
c1 with its input staged to a RAMDISK on the RSA nodes, rsaother tries from the login
node and from a job of its own on c2 (a plain one: c2 never mounted a RAMDISK) to reach
the RAMDISK's servers on the RSA data network, to drive rsauser's job through rsad's API
(``rsa job``, ``rsa input-done``, cancel-staging, release, retry), and to read the staged
data (on the PFS, through the job's mounts on c1 and on the RSA node, and by staging it
in for an RSA job of its own). Every attempt
fails and nothing of the job changes. On main, rsaother's job on c2 connected to every
server of the RAMDISK: a compute node loaded the servers' guard only when it mounted a
RAMDISK; now every job's Prolog loads it (docs/security.md)."""

from __future__ import annotations

import time

from tests.cluster.conftest import Cluster, ramdisk_listeners

HOME = "/pfs/home/rsauser"
THEIRS = "/pfs/home/rsaother"
VICTIM = f"""#!/bin/bash
#SBATCH -N 1 -t 5
#RSA_DATA_IN={HOME}/ain
t=0; while [ ! -e {HOME}/attack.stop ] && [ $t -lt 1800 ]; do sleep 0.1; t=$((t+1)); done
"""
# what rsaother tries (argv: rsauser's job, the servers host:port,..., files to read,...)
ATTACK = """import os, socket, subprocess, sys
job, servers, files = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(",")
for t in servers:
    s = socket.socket(); s.settimeout(2)
    try:
        s.connect((t.rsplit(":", 1)[0], int(t.rsplit(":", 1)[1]))); print(t, "connected")
    except OSError as e:
        print(t, type(e).__name__, e.errno)
for argv, env in ((["job", job], {}), (["input-done", job], {}), (["input-done"],
                  {"SLURM_JOB_ID": job}), (["cancel-staging", job], {}),
                  (["release", job], {}), (["retry", job], {})):
    done = subprocess.run(["rsa", *argv], capture_output=True, text=True,
                          env={**os.environ, **env})
    print("rsa", *argv, "->", done.returncode, (done.stderr + done.stdout).strip())
# rsad's hooks straight (the node Prolog's answer would carry the RAMDISK's secret)
from rsa_scheduler.client import ApiClient
for hook, body in (("prolog", {"job_id": job, "node": "c1", "nodes": "c1",
                               "user": "rsauser"}), ("epilog", {"job_id": job, "node": "c1"}),
                   ("epilog_slurmctld", {"job_id": job, "exit_code": 0})):
    try:
        print("hook", hook, "->", ApiClient().post(f"/v1/hooks/{hook}", body))
    except Exception as e:
        print("hook", hook, "->", type(e).__name__, e)
for f in files:
    try:
        print(f, "read", len(open(f, "rb").read()))
    except OSError as e:
        print(f, type(e).__name__)
print("end")
"""
# rsaother's own RSA job naming rsauser's input: its stage-in runs as rsaother
STEAL = f"""#!/bin/bash
#SBATCH -N 1 -t 2
#RSA_DATA_IN={HOME}/ain
cat {HOME}/ain/secret > {THEIRS}/steal.out 2>&1
"""
ATTACKER = f"""#!/bin/bash
#SBATCH -N 1 -t 2
python3 {THEIRS}/attack.py "$@" > {THEIRS}/attack.report 2>&1
"""


def _state(cluster: Cluster, job: str) -> str:
    shown = cluster.run("ctl", ["rsa", "job", job], check=False).stdout
    return next((line.split(":", 1)[1].strip() for line in shown.splitlines()
                 if line.strip().startswith("rsa_state:")), "")


def _check(report: list[str], job: str, servers: list[str], refused: str) -> None:
    """Each server refused (``refused``: the error), each command refused with the
    line a job rsaother may not see gets, each hook refused, each file unreadable."""
    assert report[:len(servers)] == [f"{t} {refused}" for t in servers], report
    calls = [line for line in report if line.startswith("rsa ")]
    assert len(calls) == 6, report
    for line in calls:
        assert " -> 1 rsa: error: " in line and (f"job {job} is not tracked by the RSA"
                                                 in line or "is not allowed for rsaother"
                                                 in line), line
    hooks = [line for line in report if line.startswith("hook ")]
    assert len(hooks) == 3 and all(
        "ApiRefused" in h and "accepted from root or SlurmUser only" in h for h in hooks), hooks
    files = report[len(servers) + 9:-1]
    assert files and all(line.endswith("PermissionError") for line in files), report
    assert report[-1] == "end", report


def test_rsaother_reaches_nothing_of_rsausers_ramdisk(cluster: Cluster) -> None:
    cluster.run("ctl", ["sh", "-c", f"rm -f {HOME}/attack.stop && mkdir -p {HOME}/ain && "
                        f"head -c 65536 /dev/urandom > {HOME}/ain/secret && "
                        f"cat > {HOME}/victim.sh"], user="rsauser", input=VICTIM)
    job = cluster.out("ctl", ["sbatch", "--parsable", "-w", "c1", f"--chdir={HOME}",
                              "-o", f"{HOME}/victim-%j.log", f"{HOME}/victim.sh"],
                      user="rsauser").strip()
    assert job.isdigit(), job
    # rsaother's job that would stage rsauser's input in (it runs on c2 before the next)
    cluster.run("login", ["sh", "-c", f"rm -f {THEIRS}/steal.out && cat > "
                          f"{THEIRS}/steal.sh"], user="rsaother", input=STEAL)
    steal = cluster.out("login", ["sbatch", "--parsable", "-w", "c2", f"--chdir={THEIRS}",
                                  "-o", "/dev/null", f"{THEIRS}/steal.sh"],
                        user="rsaother").strip()
    try:
        deadline = time.monotonic() + 90
        while _state(cluster, job) != "mounted-input":
            assert time.monotonic() < deadline, cluster.out("ctl", ["rsa", "job", job])
            time.sleep(0.5)
        # the RAMDISK's servers (master and chunkservers) on the RSA data network, and
        # where its data is: the job's mounts on c1, the staging mount on the RSA node
        servers = ramdisk_listeners(cluster)
        assert len(servers) >= 4, servers  # master's 3 ports, a chunkserver
        mounts = cluster.out("c1", ["findmnt", "-n", "-r", "-t", "fuse", "-o",
                                    "TARGET,SOURCE"]).splitlines()
        ramdisk = [m.split()[0] for m in mounts if "mfs#rsa" in m]
        assert f"{HOME}/ain" in ramdisk, mounts  # and the node's own mounts
        staging = cluster.out("rsa1", ["findmnt", "-n", "-r", "-t", "fuse", "-o",
                                       "TARGET"]).split()
        staging = [m for m in staging if m != "/pfs"]
        files = [f"{HOME}/ain/secret"]

        # from the login node (no route to the data network; rsad's API over management)
        cluster.run("login", ["sh", "-c", f"rm -f {THEIRS}/attack.report && cat > "
                              f"{THEIRS}/attack.py"], user="rsaother", input=ATTACK)
        login = cluster.out("login", ["python3", f"{THEIRS}/attack.py", job,
                                      ",".join(servers), ",".join(files)], user="rsaother")
        _check(login.splitlines(), job, servers, "OSError 101")
        # from a job of rsaother's on c2, a compute node that mounted no RAMDISK: its
        # Prolog loaded the servers' guard all the same (on main: connected to each)
        cluster.run("login", ["sh", "-c", f"cat > {THEIRS}/attacker.sh"], user="rsaother",
                    input=ATTACKER)
        other = cluster.out("login", ["sbatch", "--parsable", "-w", "c2",
                                      f"--chdir={THEIRS}", "-o", "/dev/null",
                                      f"{THEIRS}/attacker.sh", job, ",".join(servers),
                                      ",".join(files)], user="rsaother")
        assert other.strip().isdigit(), other
        deadline = time.monotonic() + 60
        report: list[str] = []
        while report[-1:] != ["end"]:
            assert time.monotonic() < deadline, report
            time.sleep(0.3)
            report = cluster.run("c2", ["cat", f"{THEIRS}/attack.report"],
                                 check=False).stdout.splitlines()
        _check(report, job, servers, "ConnectionRefusedError 111")
        # on the nodes that hold the data (a user beside the job on a shared node): the
        # job's mounts on c1 and the staging mount on the RSA node
        for node, paths in (("c1", ramdisk), ("rsa1", staging)):
            for path in paths:
                denied = cluster.run(node, ["ls", path], user="rsaother", check=False)
                assert denied.returncode != 0 and "Permission denied" in denied.stderr, \
                    (node, path, denied)
        # the stage-in of rsaother's job ran as rsaother: refused, nothing staged
        shown = cluster.out("ctl", ["rsa", "job", steal])
        assert f"scanning {HOME}/ain refused on rsa" in shown and "Permission denied" in \
            shown and "staging-in -> tearing-down (stage-in-refused)" in shown, shown
        assert "Permission denied" in cluster.out("c2", ["cat", f"{THEIRS}/steal.out"])
        # nothing of rsauser's job changed: its input still mounted, no input-done
        shown = cluster.out("ctl", ["rsa", "job", job])
        assert _state(cluster, job) == "mounted-input", shown
        assert "input-done" not in shown and "cancel" not in shown, shown
    finally:
        cluster.run("ctl", ["touch", f"{HOME}/attack.stop"], user="rsauser", check=False)


REFUSED = f"""#!/bin/bash
#SBATCH -N 1 -t 3
#RSA_DATA_IN=/pfs/home/pub
touch {THEIRS}/refused.running
t=0; while [ ! -e {THEIRS}/refused.stop ] && [ $t -lt 900 ]; do sleep 0.1; t=$((t+1)); done
"""
PROBE = """import socket, sys
for t in sys.argv[1].split(","):
    s = socket.socket(); s.settimeout(2)
    try:
        s.connect((t.rsplit(":", 1)[0], int(t.rsplit(":", 1)[1]))); print(t, "connected")
    except OSError as e:
        print(t, type(e).__name__, e.errno)
"""


def test_a_job_whose_mount_the_node_refuses_is_guarded_all_the_same(
        cluster: Cluster) -> None:
    """rsaother's RSA job names as DATA_IN a directory it may read but does not own: rsad
    stages it, c2 refuses the mount (the job runs from the PFS). c2 starts without the
    guard (as after a reboot): the job's Prolog loads it all the same, and rsaother on
    c2 is refused at a server port of an RSA node (root, the control, connects). On
    main only the mount loaded it, after the checks: no table on c2, and rsaother
    connected."""
    addr = cluster.out("rsa1", ["sh", "-c", "ip -4 -o addr show | awk '{print $4}' | "
                                "cut -d/ -f1 | grep '^10\\.231\\.' | head -1"]).strip()
    assert addr, "rsa1 has no data address"
    cluster.run("ctl", ["sh", "-ec", "install -d -m 0755 /pfs/home/pub && "
                        "head -c 4096 /dev/urandom > /pfs/home/pub/f"])
    cluster.run("login", ["sh", "-c", f"rm -f {THEIRS}/refused.* && cat > "
                          f"{THEIRS}/refused.sh"], user="rsaother", input=REFUSED)
    cluster.run("c2", ["sh", "-c", "nft delete table inet rsa_mfsproxy; "
                       "rm -f /run/rsa/node/guard.json"], check=False)
    assert cluster.run("c2", ["nft", "list", "table", "inet", "rsa_mfsproxy"],
                       check=False).returncode != 0
    # a server port on rsa1's data address (a RAMDISK's, as far as the guard knows)
    listener = cluster.out("rsa1", ["sh", "-c", (
        "timeout 60 python3 -c 'import socket, sys, time; s = socket.socket(); "
        f"s.bind((\"{addr}\", 29001)); s.listen(8); time.sleep(60)' "
        "</dev/null >/dev/null 2>&1 & echo $!")]).strip()
    job = cluster.out("login", ["sbatch", "--parsable", "-w", "c2", f"--chdir={THEIRS}",
                                "-o", "/dev/null", f"{THEIRS}/refused.sh"],
                      user="rsaother").strip()
    assert job.isdigit(), job
    try:
        deadline = time.monotonic() + 90
        while cluster.run("c2", ["test", "-e", f"{THEIRS}/refused.running"],
                          check=False).returncode != 0:
            assert time.monotonic() < deadline, cluster.out("ctl", ["rsa", "job", job])
            time.sleep(0.3)
        shown = cluster.out("ctl", ["rsa", "job", job])
        assert "#RSA_DATA_IN=/pfs/home/pub is owned by root, not you" in shown, shown
        table = cluster.run("c2", ["nft", "list", "table", "inet", "rsa_mfsproxy"],
                            check=False)
        target = f"{addr}:29001"
        probes = [cluster.out("c2", ["python3", "-c", PROBE, target], user=u).strip()
                  for u in (None, "rsaother")]
        assert probes == [f"{target} connected", f"{target} ConnectionRefusedError 111"], \
            probes
        assert table.returncode == 0 and "meta skuid != 0" in table.stdout, table.stderr
    finally:
        cluster.run("ctl", ["touch", f"{THEIRS}/refused.stop"], user="rsaother",
                    check=False)
        cluster.run("ctl", ["rm", "-rf", "/pfs/home/pub"], check=False)
        if listener.isdigit():
            cluster.run("rsa1", ["kill", listener], check=False)
