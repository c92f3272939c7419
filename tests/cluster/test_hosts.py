"""Every node of the cluster lab is a host of its own, and Slurm runs across them: a
plain batch job submitted on ctl runs on c1 (slurmctld and slurmd talk over the lab's
bridge, each node with its own munged and one shared key)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from tests.cluster.conftest import RSAD, Cluster, pool_left

ROOT = Path(__file__).resolve().parents[2]

# rsad's own host only with RSA_CLUSTER_RSAD=own; by default rsad runs on ctl
NODES = ("ctl", "c1", "c2", "rsa1", "rsa2", "pfs", "ldap", "login",
         *(("rsad",) if RSAD == "rsad" else ()))
ADDRESS = {"ctl": "10.230.0.10", "c1": "10.230.0.11", "c2": "10.230.0.12",
           "rsa1": "10.230.0.21", "rsa2": "10.230.0.22", "pfs": "10.230.0.30",
           "ldap": "10.230.0.40", "rsad": "10.230.0.41", "login": "10.230.0.50"}


def test_each_node_is_its_own_host(cluster: Cluster) -> None:
    for node in NODES:
        assert cluster.out(node, ["hostname"]).strip() == node
        addrs = cluster.out(node, ["ip", "-o", "-4", "addr", "show", "dev", "eth0"])
        assert f"inet {ADDRESS[node]}/24" in addrs
        # the package's config as its postinst leaves it, in every node's own /etc
        assert cluster.out(node, ["stat", "-c", "%U:%G:%a", "/etc/rsa/rsa.yaml"]).strip() \
            == "root:root:640"
    # a private /run: a file made on ctl is not on c1; own PID namespace: c1 sees no
    # slurmctld, ctl no slurmd
    cluster.run("ctl", ["touch", "/run/rsacl-probe"])
    assert cluster.run("c1", ["test", "-e", "/run/rsacl-probe"], check=False).returncode == 1
    assert "slurmctld" not in cluster.out("c1", ["ps", "-e", "-o", "comm="]).split()
    assert "slurmd" not in cluster.out("ctl", ["ps", "-e", "-o", "comm="]).split()
    # names resolve by the image's /etc/hosts, and the nodes reach each other
    assert ADDRESS["c1"] in cluster.out("ctl", ["getent", "hosts", "c1"])
    assert cluster.run("ctl", ["bash", "-c", "exec 3<>/dev/tcp/c1/6818"]).returncode == 0


def test_one_munge_key_across_hosts(cluster: Cluster) -> None:
    cred = cluster.out("c1", ["munge", "-n"], user="rsauser")
    decoded = cluster.run("ctl", ["unmunge"], check=False)
    assert decoded.returncode != 0  # no credential given: unmunge refuses
    done = cluster.run("ctl", ["sh", "-c", f"printf '%s' '{cred.strip()}' | unmunge"])
    assert "STATUS:          Success" in done.stdout
    assert "ENCODE_HOST:     c1" in done.stdout


def test_sbatch_hostname_runs_on_c1(cluster: Cluster) -> None:
    job = cluster.out("ctl", ["sbatch", "--parsable", "-w", "c1", "--chdir=/tmp",
                              "-o", "/tmp/hostname-%j.out", "--wrap", "hostname"],
                      user="rsauser").strip()
    assert job.isdigit(), job
    deadline = time.monotonic() + 60
    state = ""
    while time.monotonic() < deadline:
        state = cluster.out("ctl", ["squeue", "-h", "-t", "all", "-j", job, "-o", "%T %N"])
        if state.split()[:1] == ["COMPLETED"]:
            break
        time.sleep(0.5)
    assert state.split() == ["COMPLETED", "c1"], state
    # the job ran on c1 as rsauser: its output is in c1's /tmp, and only there
    out = cluster.run("c1", ["stat", "-c", "%U %s", f"/tmp/hostname-{job}.out"]).stdout
    assert out.split()[0] == "rsauser"
    assert cluster.out("c1", ["cat", f"/tmp/hostname-{job}.out"]).strip() == "c1"
    for other in ("ctl", "c2"):
        assert cluster.run(other, ["test", "-e", f"/tmp/hostname-{job}.out"],
                           check=False).returncode == 1


def test_pfs_is_one_filesystem_at_the_same_path(cluster: Cluster) -> None:
    # each node mounts the PFS (on its own host pfs, over the storage network) with its
    # own client at /pfs: a file
    # rsauser writes on c1 is on rsa2, with its owner; rsaother cannot read rsauser's home
    cluster.run("c1", ["sh", "-c", "echo from-c1 > /pfs/home/rsauser/pfs-probe"],
                user="rsauser")
    for node in ("ctl", "c2", "rsa1", "rsa2", "login"):
        assert cluster.out(node, ["findmnt", "-n", "-o", "FSTYPE,SOURCE", "/pfs"]).split() \
            == ["fuse", "mfs#pfs-st:9421"]
        assert cluster.out(node, ["cat", "/pfs/home/rsauser/pfs-probe"]) == "from-c1\n"
        assert cluster.out(node, ["stat", "-c", "%U", "/pfs/home/rsauser/pfs-probe"]) \
            == "rsauser\n"
    denied = cluster.run("rsa2", ["cat", "/pfs/home/rsauser/pfs-probe"], user="rsaother",
                         check=False)
    assert denied.returncode != 0 and "Permission denied" in denied.stderr


def test_rsad_runs_on_its_host_only(cluster: Cluster) -> None:
    # rsad runs on its host (the controller beside slurmctld, or the host rsad of its
    # own with RSA_CLUSTER_RSAD=own, slurmctld not there), and there only; its socket is
    # on its host alone, its API listens on its address (daemon.api.listen); every node
    # finds it by the name rsad
    comms = cluster.out(RSAD, ["ps", "-e", "-o", "comm="]).split()
    assert "rsad" in comms
    assert ("slurmctld" in comms) == (RSAD == "ctl")
    assert ADDRESS[RSAD] in cluster.out("c1", ["getent", "hosts", "rsad"])
    for node in ("ctl", "c1", "rsa1", "login"):
        if node == RSAD:
            continue
        assert "rsad" not in cluster.out(node, ["ps", "-e", "-o", "comm="]).split()
        assert cluster.run(node, ["test", "-e", "/run/rsa/rsad.sock"],
                           check=False).returncode == 1
    assert cluster.run(RSAD, ["test", "-S", "/run/rsa/rsad.sock"]).returncode == 0
    assert f"{ADDRESS[RSAD]}:7820" in cluster.out(RSAD, ["ss", "-Hltn"])
    # every other host reaches it over the management network by /etc/rsa/client.conf,
    # MUNGE-authenticated: root on ctl (slurmctld's host: by the socket when rsad runs
    # there) and a user on a compute node
    assert "rsa1" in cluster.out("ctl", ["rsa", "nodes"])
    assert cluster.run("c1", ["rsa", "status"], user="rsauser").returncode == 0
    # the compute node's own check: rsad's API answers c1 with replies signed for root,
    # as the node hooks require (the operator guide's `rsa nodes check --compute`)
    assert cluster.out("c1", ["rsa", "nodes", "check", "--compute"]) == "c1: ok\n"
    # and rsad reaches slurmctld on ctl (its squeue/scontrol, as root, with MUNGE)
    assert "UP" in cluster.out(RSAD, ["scontrol", "ping"])


def test_rsad_reaches_rsa_nodes_by_ssh(cluster: Cluster) -> None:
    # rsad on its host, configured as the operator guide says (its key and known_hosts in
    # /etc/rsa, rsa.yaml root's 0640), sees both RSA nodes over SSH across the bridge, and
    # `rsa nodes check` finds every tool and the PFS at the same paths on each
    assert cluster.out(RSAD, ["stat", "-c", "%U:%G:%a", "/etc/rsa/rsa.yaml"]) \
        == "root:root:640\n"
    nodes = cluster.out(RSAD, ["rsa", "nodes"])
    assert [line.split()[:3] for line in nodes.splitlines()[1:]] == [
        ["rsa1", "ram", "up"], ["rsa2", "ram", "up"]]
    check = cluster.out(RSAD, ["rsa", "nodes", "check"], timeout=120)
    # each with the MooseFS its Debian release installed (12: 3.0.117, 13: 4.57.5, ...)
    installed = {n: cluster.out(n, ["dpkg-query", "-W", "-f", "${Version}", "moosefs-master"])
                 .split("-")[0] for n in ("rsa1", "rsa2")}
    assert all(installed.values()), installed
    assert check.splitlines() == [f"{n}: ok (MooseFS {v})" for n, v in installed.items()]
    # real sshd, real host keys: each RSA node has its own, and ctl's known_hosts has both
    keys = {cluster.out(n, ["cut", "-d", " ", "-f2", "/etc/ssh/ssh_host_ed25519_key.pub"])
            for n in ("rsa1", "rsa2")}
    assert len(keys) == 2
    assert cluster.out(RSAD, ["ssh", "-i", "/etc/rsa/id_ed25519", "-o", "BatchMode=yes",
                               "-o", "UserKnownHostsFile=/etc/rsa/known_hosts",
                               "-o", "StrictHostKeyChecking=yes", "root@rsa2",
                               "hostname"]) == "rsa2\n"


JOB = """#!/bin/bash
#SBATCH -N 1 -t 5
#RSA_DATA_OUT=/pfs/home/rsauser/out
head -c 1048576 /dev/urandom > /pfs/home/rsauser/out/data.bin
hostname > /pfs/home/rsauser/out/host.txt
sha256sum < /pfs/home/rsauser/out/data.bin > /pfs/home/rsauser/data.sha
findmnt -n -o FSTYPE,SOURCE /pfs/home/rsauser/out > /pfs/home/rsauser/out.mnt
"""


def test_rsa_data_out_job_through_its_lifecycle(cluster: Cluster) -> None:
    # the whole RSA path across hosts: job_submit.lua and the hooks from the package,
    # rsad on its own host builds the RAMDISK on an RSA node over ssh, c1's Prolog mounts it over
    # RSA_DATA_OUT (MooseFS over the RSA data network), the job writes there, the RSA node stages
    # it out to the PFS as rsauser and verifies it
    cluster.run("ctl", ["sh", "-c", "mkdir -p /pfs/home/rsauser/out && cat > "
                        "/pfs/home/rsauser/out-job.sh"], user="rsauser", input=JOB)
    job = cluster.out("ctl", ["sbatch", "--parsable", "-w", "c1", "--chdir=/pfs/home/rsauser",
                              "-o", "/pfs/home/rsauser/out-%j.log",
                              "/pfs/home/rsauser/out-job.sh"], user="rsauser").strip()
    assert job.isdigit(), job
    shown = _wait_released(cluster, job)
    assert "ok content verified: 2 objects (1M) in /pfs/home/rsauser/out" in shown, shown
    assert "staging-out -> verifying" in shown and "-> mounted-output" in shown
    # slurmctld's hooks ran on ctl as SlurmUser, who cannot read rsa.yaml (root's 0640),
    # and found rsad on its host by /etc/rsa/client.conf (TCP, MUNGE): rsad heard both
    # (which of a hook and rsad's own look at the queue moved the job first is a race:
    # under load the poll may see it running before PrologSlurmctld's news arrives)
    told = json.loads(cluster.out("ctl", ["rsa", "job", job, "--json"]))["events"]
    hooks = {(e.get("hook"), e.get("exit_code")) for e in told if e["name"] == "job.hook"}
    assert ("prolog_slurmctld", None) in hooks and ("epilog_slurmctld", "0") in hooks, hooks
    denied = cluster.run("ctl", ["cat", "/etc/rsa/rsa.yaml"], user="slurm", check=False)
    assert denied.returncode != 0 and "Permission denied" in denied.stderr
    # the job wrote to a RAMDISK served by an RSA node, not to the PFS
    fstype, source = cluster.out("c1", ["cat", "/pfs/home/rsauser/out.mnt"]).split()
    assert fstype == "fuse" and source.startswith(("mfs#rsa1-data:", "mfs#rsa2-data:")), source
    # ... and its output is on the PFS, whole, as rsauser's, seen from another host
    assert cluster.out("rsa2", ["cat", "/pfs/home/rsauser/out/host.txt"]) == "c1\n"
    want = cluster.out("rsa2", ["cat", "/pfs/home/rsauser/data.sha"])
    got = cluster.out("rsa2", ["sh", "-c", "sha256sum < /pfs/home/rsauser/out/data.bin"])
    assert got == want
    assert cluster.out("rsa2", ["stat", "-c", "%U %s", "/pfs/home/rsauser/out/data.bin"]) \
        == "rsauser 1048576\n"
    # nothing of the RAMDISK is left on the RSA nodes
    for node in ("rsa1", "rsa2"):
        assert pool_left(cluster, node) == ""


IO_JOB = """#!/bin/bash
#SBATCH -N 1 -t 5
#RSA_DATA_IN=/pfs/home/rsauser/in
#RSA_DATA_OUT=/pfs/home/rsauser/res
r=/pfs/home/rsauser/report
{ cat /pfs/home/rsauser/in/a.txt; findmnt -n -o FSTYPE,SOURCE /pfs/home/rsauser/in
  test -e /run/rsa/rsad.sock && echo "socket here"
  rsa job; echo "rsa job: $?"
  rsa input-done; echo "input-done: $?"
  findmnt -n -o FSTYPE,SOURCE /pfs/home/rsauser/res; } > $r 2>&1
echo result > /pfs/home/rsauser/res/b.txt
"""


def test_rsa_in_a_job_on_a_compute_node(cluster: Cluster) -> None:
    # the user guide's `rsa job` and `rsa input-done`, bare, inside a job on c1: no rsad
    # socket there; rsa is on the job's PATH and finds rsad by /etc/rsa/client.conf over
    # the management network, authenticated with MUNGE as rsauser
    cluster.run("ctl", ["sh", "-c", "mkdir -p /pfs/home/rsauser/in /pfs/home/rsauser/res && "
                        "echo input > /pfs/home/rsauser/in/a.txt && "
                        "cat > /pfs/home/rsauser/io-job.sh"], user="rsauser", input=IO_JOB)
    job = cluster.out("ctl", ["sbatch", "--parsable", "-w", "c1", "--chdir=/pfs/home/rsauser",
                              "-o", "/pfs/home/rsauser/io-%j.log",
                              "/pfs/home/rsauser/io-job.sh"], user="rsauser").strip()
    _wait_released(cluster, job)
    report = cluster.out("c2", ["cat", "/pfs/home/rsauser/report"]).splitlines()
    assert report[0] == "input"  # read from the RAMDISK the input was staged to
    assert report[1].split()[0] == "fuse" and report[1].split()[1].startswith("mfs#rsa")
    assert "socket here" not in report
    assert f"    job_id: {job}" in report and "rsa job: 0" in report
    assert "job " + job + ": input done; the RAMDISK is mounted over /pfs/home/rsauser/res:" \
        " write there" in report and "input-done: 0" in report
    assert report[-1].split()[0] == "fuse" and report[-1].split()[1].startswith("mfs#rsa")
    assert cluster.out("rsa2", ["cat", "/pfs/home/rsauser/res/b.txt"]) == "result\n"


def _wait_released(cluster: Cluster, job: str, timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    shown = ""
    while time.monotonic() < deadline:
        shown = cluster.run("ctl", ["rsa", "job", job], check=False).stdout  # tracked soon
        if "rsa_state: released" in shown or "quarantine" in shown:
            break
        time.sleep(1)
    assert "rsa_state: released" in shown, shown
    return shown


def test_the_shared_labs_check_clean_leaves_the_cluster_alone(cluster: Cluster) -> None:
    # the lab of lab/rsalab lists every process in a namespace of its own as its
    # leftover: the cluster lab's (marked, in its nodes' PID namespaces) are not its own,
    # so a lab-test beside a running cluster lab must not fail on them
    sys.path.insert(0, str(ROOT / "lab"))
    try:
        from rsalab import clean, common  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(ROOT / "lab"))
    ours = {str(p) for p in _cluster_pids()}
    assert ours, "no process of the cluster lab found"
    listed = [line for line in clean.leftovers(common.Settings())
              if line.startswith("process ") and line.split()[1] in ours]
    assert listed == []


def _cluster_pids() -> list[int]:
    """Every process of the cluster lab as the host sees it: the marked holders and every
    process in a marked node's PID namespace (a named cluster's mark is RSACL_NODE_<NAME>,
    lab/cluster/rsacluster.py MARK)."""
    name = os.environ.get("RSA_CLUSTER_NAME", "")
    mark = ("RSACL_NODE" + (f"_{name.upper()}" if name else "") + "=").encode()
    marked: set[int] = set()
    namespaces: set[str] = set()
    host = os.readlink("/proc/self/ns/pid")
    # this cluster's mark (rsacluster.MARK): a named cluster's (RSA_CLUSTER_NAME) its own
    name = os.environ.get("RSA_CLUSTER_NAME", "")
    mark = f"RSACL_NODE{'_' + name.upper() if name else ''}=".encode()
    procs = [p for p in Path("/proc").iterdir() if p.name.isdigit()]
    for p in procs:
        try:
            if any(e.startswith(mark) for e in (p / "environ").read_bytes().split(b"\0")):
                marked.add(int(p.name))
                if (ns := os.readlink(p / "ns" / "pid")) != host:
                    namespaces.add(ns)
        except OSError:
            continue
    for p in procs:
        try:
            if os.readlink(p / "ns" / "pid") in namespaces:
                marked.add(int(p.name))
        except OSError:
            continue
    return sorted(marked)


# the cgroup2 mount of a node: "ROOT MOUNT-POINT" (root: its path in the host's hierarchy)
_CG2 = ("awk '{for(i=7;i<=NF;i++) if($i==\"-\"){if($(i+1)==\"cgroup2\")"
        "{print $4, $5} break}}' /proc/self/mountinfo")


def _host_cgroup2() -> Path:
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        if right.split()[:1] == ["cgroup2"]:
            return Path(left.split()[4])
    raise AssertionError("this host has no cgroup2 hierarchy")


def test_each_rsa_node_has_a_cgroup2_subtree_of_its_own(cluster: Cluster) -> None:
    """An RSA node sees a cgroup v2 subtree of its own at /sys/fs/cgroup/unified
    (lab/cluster/nodecgroup.py), where root makes, fills, kills and removes cgroups as
    rsad's commands do (rsa_scheduler/contain.py), and a user can do none of that; the
    other nodes have no cgroup2."""
    name = os.environ.get("RSA_CLUSTER_NAME", "")
    tops = {}
    for node in ("rsa1", "rsa2"):
        root, at = cluster.out(node, ["sh", "-c", _CG2]).split()
        assert at == "/sys/fs/cgroup/unified"
        assert root.endswith(f"/rsa-cluster{'-' + name if name else ''}/{node}"), root
        tops[node] = _host_cgroup2() / root.lstrip("/")
    assert cluster.out("c1", ["sh", "-c", _CG2]).strip() == ""
    probe = "/sys/fs/cgroup/unified/rsa.jobs/probe/p1"
    cluster.run("rsa1", ["mkdir", "-p", probe])
    cluster.run("rsa1", ["sh", "-c", f'echo $$ > {probe}/cgroup.procs; exec setsid sleep 301 '
                         '</dev/null >/dev/null 2>&1 &'])
    try:
        # the host sees it in rsa1's subtree; rsa2 does not see it at all
        host_leaf = tops["rsa1"] / "rsa.jobs/probe/p1"
        assert len((host_leaf / "cgroup.procs").read_text().split()) == 1
        assert cluster.run("rsa2", ["test", "-e", probe], check=False).returncode == 1
        # a user cannot create cgroups there, nor move a process of its own in
        assert cluster.run("rsa1", ["mkdir", "/sys/fs/cgroup/unified/rsa.jobs/mine"],
                           user="rsauser", check=False).returncode != 0
        assert cluster.run("rsa1", ["sh", "-c", f"echo $$ > {probe}/cgroup.procs"],
                           user="rsauser", check=False).returncode != 0
    finally:
        cluster.run("rsa1", ["sh", "-c", f"echo 1 > {probe}/cgroup.kill; i=0; "
                             f'while grep -q "populated 1" {probe}/cgroup.events && '
                             "[ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done; "
                             "rmdir $0 ${0%/p1} ${0%/probe/p1}", probe])
    assert "sleep 301" not in cluster.out("rsa1", ["ps", "-e", "-o", "args="])
    assert not host_leaf.exists()
