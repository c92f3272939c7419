"""Per-job filesystem access control (issue 12, point 1): every route to another job's
RAMDISK, tried for real against a running job of the lab user.

The attacker is the second lab user (``rsaother``) on the job's own compute node and on
its RSA node, and root on a node outside the job (the host: a MooseFS client speaks the
same protocol whether root runs ``mfsmount`` or a user links ``libmfsio``). The job's
directories are world-traversable on purpose, so that once the RAMDISK is mounted over
DATA_IN/DATA_OUT only the RAMDISK's own access control stands in the way. Each route has
a control (the job's user, or the right secret) proving that the route itself works.

On the cluster lab (every node a host of its own) the outside node is another compute
node (on the RSA data network, not in the job), the proxy is probed on the RSA node whose
staging mount it is, and the RAMDISK's servers from a compute node where a plain job of
rsaother's runs (its Prolog loaded the guard), each through the harness's door.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from rsa_scheduler.runner import Identity
from tests.integration.conftest import as_user
from tests.integration.fskit import lab_hosts
from tests.integration.slurmkit import in_cluster, lab_nodes, make_jobs, root, wait_for
from tests.integration.slurmkit import on_node as door
from tests.integration.test_rsad_staging import fill, rsa_job, wait_state
from tests.security.where import run_as

PIDS = Path("/run/rsa-lab/pids")
SECRET_WORDS = "the job's private input\n"


@pytest.fixture
def area(lab: Mapping[str, str]) -> Iterator[Path]:
    """A directory of the lab user under the PFS homes, mode 0755 all the way down."""
    user = lab["RSA_LAB_USER"]
    base = Path(lab["RSA_LAB_PFS_ROOT"]) / "home" / f"fsacl-{os.getpid()}-{time.monotonic_ns()}"
    base.mkdir(mode=0o755)
    os.chown(base, *_ids(user))
    script = (f"set -e; umask 022; mkdir {base}/in {base}/out {base}/in/sub; "
              f"printf %s \"$0\" > {base}/in/private; "
              f"printf %s \"$0\" > {base}/in/sub/deep; "
              f"for i in 1 2 3; do head -c 20000 /dev/urandom > {base}/in/f$i; done")
    done = as_user(lab, user, ["bash", "-c", script, SECRET_WORDS], timeout=120)
    assert done.returncode == 0, done.stderr
    yield base
    subprocess.run(["rm", "-rf", str(base)], check=False, timeout=120)


def _ids(user: str) -> tuple[int, int]:
    ident = Identity.of(user)
    return ident.uid, ident.gid


def on_node(node: str, user: str, argv: list[str]) -> subprocess.CompletedProcess[str]:
    """``argv`` in compute node ``node``'s mount namespace (the cluster lab's: on that
    host), as ``user``."""
    drop = [] if user == "root" else ["setpriv", f"--reuid={user}", f"--regid={user}",
                                      "--init-groups"]
    if in_cluster():
        return door(node, [*drop, *argv], check=False)
    pid = (PIDS / f"slurmd-{node}.pid").read_text().strip()
    return subprocess.run(["nsenter", "-t", pid, "-m", "--", *drop, *argv],
                          capture_output=True, text=True, timeout=60, cwd="/", check=False)


def refused(done: subprocess.CompletedProcess[str]) -> bool:
    return done.returncode != 0 and "Permission denied" in done.stderr


def job_script(lab: Mapping[str, str], base: Path) -> str:
    rsa = f"{lab['RSA_LAB_VENV']}/bin/rsa"
    return f"""#!/bin/bash
#SBATCH -t 5
#RSA_DATA_IN={base}/in
#RSA_DATA_OUT={base}/out
#RSA_RESET=input-done
while [ ! -e {base}/go ]; do sleep 0.5; done
{rsa} input-done > {base}/input-done.log 2>&1
echo result > {base}/out/result
while [ ! -e {base}/stop ]; do sleep 0.5; done
"""


def as_root(node: str | None, argv: list[str]) -> subprocess.CompletedProcess[str]:
    """``argv`` as root on ``node`` (None: this host)."""
    if node is not None:
        return door(node, argv, check=False)
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def mfsmount(mnt: Path, spec: Mapping[str, Any], *opts: str, node: str | None = None
             ) -> subprocess.CompletedProcess[str]:
    c = spec["client"]
    return as_root(node, ["mfsmount", str(mnt), "-H", str(c["master_host"]), "-P",
                          str(c["master_port"]), "-o", ",".join(["mfsioretries=2", *opts])])


def is_mount(mnt: Path, node: str | None = None) -> bool:
    return as_root(node, ["mountpoint", "-q", str(mnt)]).returncode == 0


def umount(mnt: Path, node: str | None = None) -> None:
    if is_mount(mnt, node):
        as_root(node, ["umount", "-l", str(mnt)])


def outside(lab: Mapping[str, str], job_node: str) -> str | None:
    """The node outside the job root mounts from: this host in the host lab, another
    compute node (on the RSA data network) in the cluster lab."""
    if not in_cluster():
        return None
    return next(n for n in lab_nodes(lab, "RSA_LAB_COMPUTE_NODES") if n != job_node)


def test_another_users_job_ramdisk_cannot_be_mounted_read_or_written(
        lab: Mapping[str, str], area: Path, tmp_path: Path) -> None:
    user, other = lab["RSA_LAB_USER"], lab["RSA_LAB_OTHER_USER"]
    data_in, data_out = str(area / "in"), str(area / "out")
    mnt = tmp_path / "outside"
    mnt.mkdir()
    with make_jobs(lab) as jobs, lab_hosts(lab) as hosts:
        fill(jobs)
        job = jobs.submit(script=job_script(lab, area))
        wait_state(lab, job, "locked-in", timeout=120)
        for filler in jobs.fillers:
            root(lab, "scancel", filler)
        wait_state(lab, job, "mounted-input", timeout=120)
        node = root(lab, "squeue", "-h", "-j", job, "-o", "%N").strip()
        info = rsa_job(lab, job)
        assert info is not None and info["ramdisk"], info
        spec = info["ramdisk"]
        assert spec["backend"] == "moosefs", spec
        rsa_node = spec["nodes"][0]

        # -- the mount over DATA_IN on the job's compute node ----------------------------
        assert on_node(node, "root", ["findmnt", "-n", "-o", "TARGET", "--target",
                                      data_in]).stdout.strip() == data_in
        mine = on_node(node, user, ["cat", f"{data_in}/private"])
        assert mine.returncode == 0 and mine.stdout == SECRET_WORDS, mine.stderr
        for argv in (["ls", data_in], ["cat", f"{data_in}/private"],
                     # a 0644 file in a 0755 directory below the 0700 root: the kernel
                     # checks the root's search permission (MooseFS alone did not)
                     ["cat", f"{data_in}/sub/deep"],
                     ["touch", f"{data_in}/planted"],
                     ["ls", f"/run/rsa/node/{node}/{job}/ramdisk"]):
            done = on_node(node, other, argv)
            assert refused(done), (argv, done.returncode, done.stdout, done.stderr)

        # -- a client mount from a node outside the job ----------------------------------
        there = outside(lab, node)
        as_root(there, ["mkdir", "-p", str(mnt)])
        try:
            bare = mfsmount(mnt, spec, node=there)
            assert bare.returncode != 0 and not is_mount(mnt, there), (
                f"mounted job {job}'s RAMDISK without a secret: {bare.stderr}")
            wrong = mfsmount(mnt, spec, "mfspassword=" + "0" * 32, node=there)
            assert wrong.returncode != 0 and not is_mount(mnt, there), wrong.stderr
            # control: with the secret (root on the RSA node can read it) the route works
            secret = hosts[rsa_node].run(["cat", "--", spec["client"]["pass_file"]],
                                         timeout=30).stdout.strip().split("=", 1)[1]
            assert secret and secret not in json.dumps(info)  # never in what rsad shows
            right = mfsmount(mnt, spec, f"mfspassword={secret}", node=there)
            assert right.returncode == 0, right.stderr
            assert as_root(there, ["cat", str(mnt / "private")]).stdout == SECRET_WORDS
        finally:
            umount(mnt, there)
            if there is not None:
                as_root(there, ["rmdir", str(mnt)])

        # -- the RAMDISK's backing files and staging mount on its RSA node ---------------
        pool = lab["RSA_LAB_POOL_RAM"]
        d = f"{pool}/rsa-mfs-{spec['fs_id']}"
        assert hosts[rsa_node].run(["test", "-s", f"{d}/mfsmount.cfg"], timeout=30,
                                   check=False).returncode == 0
        ident = Identity.of(other)
        for argv in (["ls", d], ["ls", f"{d}/chunks"], ["cat", f"{d}/mfsmount.cfg"],
                     ["cat", f"{d}/spec.json"], ["ls", f"{d}/master"],
                     ["ls", spec["rsa_mountpoint"]],
                     ["cat", f"{spec['rsa_mountpoint']}/private"],
                     ["cat", f"{spec['rsa_mountpoint']}/sub/deep"],
                     ["touch", f"{spec['rsa_mountpoint']}/planted"]):
            r = hosts[rsa_node].run(argv, timeout=30, check=False, as_user=ident)
            assert r.returncode != 0 and "Permission denied" in r.stderr, (argv, r.stderr)
        # right after the job's user looked the path up: the RSA node's mount caches names
        # for 1 s (mfsentrycacheto), and a cached name went past MooseFS's own check
        deep = f"{spec['rsa_mountpoint']}/sub/deep"
        r = hosts[rsa_node].run(["bash", "-c", 'runuser -u "$1" -- cat -- "$3" >/dev/null '
                                 '&& runuser -u "$2" -- cat -- "$3"', "bash", user, other,
                                 deep], timeout=30, check=False)
        assert r.returncode != 0 and "Permission denied" in r.stderr, (r.stdout, r.stderr)
        assert SECRET_WORDS not in r.stdout

        # -- the fresh RAMDISK over DATA_OUT after the reset -----------------------------
        (area / "go").touch()
        wait_state(lab, job, "mounted-output", timeout=120)
        assert on_node(node, "root", ["findmnt", "-n", "-o", "TARGET", "--target",
                                      data_out]).stdout.strip() == data_out
        wait_for("the job's output", lambda: on_node(
            node, user, ["cat", f"{data_out}/result"]).stdout == "result\n", timeout=60)
        for argv in (["ls", data_out], ["cat", f"{data_out}/result"],
                     ["touch", f"{data_out}/planted"]):
            done = on_node(node, other, argv)
            assert refused(done), (argv, done.returncode, done.stdout, done.stderr)
        (area / "stop").touch()
        # to its end: the stage-out waits for the node's Epilog, and the area (DATA_OUT's
        # parent) is removed once the test returns (a stage-out then found no DATA_OUT,
        # was quarantined and held an RSA node into the next tests)
        wait_state(lab, job, "released", timeout=120)


# -- mfsmount's master proxy ------------------------------------------------------------
# Every mfsmount listens on a loopback address (a random port) for MooseFS tools and
# forwards any request on its own authenticated session (mfsmount/masterproxy.c), with
# the uid the request names. Unguarded, a local user of a node where a RAMDISK is
# mounted could act as root on it without the secret. RAMDISK mounts put the proxy on a
# dedicated address only root may reach (fs/mfsproxy.py). In the host lab every node
# shares the host's network namespace, so rsaother on the host tries every loopback
# listener there, the RSA node's staging mount among them; in the cluster lab rsaother
# tries them on the RSA node itself, where the staging mount is.
PROXY_PROBE = r"""
import socket, struct
def readn(s, n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            raise EOFError
        b += c
    return b
for line in open("/proc/net/tcp").read().splitlines()[1:]:
    f = line.split()
    ip, port = f[1].split(":")
    if f[3] != "0A" or int(ip, 16) & 0xFF != 127:  # every listener on 127.0.0.0/8
        continue
    addr = ".".join(str(int(ip, 16) >> s & 0xFF) for s in (0, 8, 16, 24))
    try:
        s = socket.create_connection((addr, int(port, 16)), timeout=2)
        # CLTOMA_FUSE_READDIR of inode 1 as uid 0: msgid inode uid gcnt gid flags max nedge
        body = struct.pack(">IIIIIBIQ", 1, 1, 0, 1, 0, 0, 0xFFFFFFFF, 0)
        s.sendall(struct.pack(">II", 428, len(body)) + body)
        cmd, size = struct.unpack(">II", readn(s, 8))
        data, i = readn(s, size), 12
        while cmd == 429 and size > 5 and i < len(data):
            n = data[i]
            print(data[i + 1:i + 1 + n].decode(errors="replace"))
            i += n + 6
    except (OSError, EOFError, struct.error):
        pass
"""


def test_a_local_user_cannot_use_a_mounts_master_proxy(lab: Mapping[str, str]) -> None:
    from rsa_scheduler.fs.base import FsRequest
    from tests.integration.fskit import lab_moosefs

    other = lab["RSA_LAB_OTHER_USER"]
    nodes = ("rsa1",)
    req = FsRequest(f"sec-proxy-{os.getpid()}", "0", nodes, "ram",
                    {n: lab["RSA_LAB_POOL_RAM"] for n in nodes}, "/run/rsa/mnt",
                    owner=_ids(lab["RSA_LAB_USER"]))
    with lab_hosts(lab) as hosts:
        backend = lab_moosefs(lab, hosts)
        try:
            spec = backend.create(req)
            hosts["rsa1"].run(["touch", f"{spec.rsa_mountpoint}/victim-file"], timeout=30)
            # the probe works: root, whom the guard lets through, lists the RAMDISK
            where = "rsa1" if in_cluster() else None
            ctl = run_as(lab, "root", ["python3", "-c", PROXY_PROBE], node=where)
            assert "victim-file" in ctl.stdout.split(), (ctl.stdout, ctl.stderr)
            seen = run_as(lab, other, ["python3", "-c", PROXY_PROBE], node=where)
            assert seen.returncode == 0, seen.stderr
            assert "victim-file" not in seen.stdout.split(), (
                f"{other} listed the RAMDISK through an mfsmount proxy")
        finally:
            backend.destroy(req)


# -- the RAMDISK's servers --------------------------------------------------------------
# MooseFS chunkservers authenticate nobody: whoever reaches one and names a chunk reads
# or writes it, bypassing the master's password. Every node where a job runs keeps
# everyone but root off the RSA nodes' server ports (fs/mfsproxy.py, rsaguard=: loaded by
# the RAMDISK's mounts and by every job's Prolog). rsaother tries to connect to every
# listener the RAMDISK's master and chunkservers opened; root, the control, does. In the
# host lab from the host (the lab's nodes share its network namespace); in the cluster
# lab from a compute node where a plain job of rsaother's runs.
LISTENERS = r"""
import sys
low, high = int(sys.argv[1]), int(sys.argv[2])
for line in open("/proc/net/tcp").read().splitlines()[1:]:
    f = line.split()
    ip, port = f[1].split(":")
    port = int(port, 16)
    if f[3] == "0A" and low <= port <= high:
        print(".".join(str(int(ip, 16) >> s & 0xFF) for s in (0, 8, 16, 24)), port)
"""
CONNECT = r"""
import socket, sys
for target in sys.argv[1:]:
    addr, port = target.rsplit(":", 1)
    try:
        socket.create_connection((addr, int(port)), timeout=3).close()
        print("connected", addr, port)
    except OSError as e:
        print("refused", addr, port, e.errno)
"""


def test_a_local_user_cannot_reach_the_ramdisks_servers(lab: Mapping[str, str]) -> None:
    from rsa_scheduler.fs.base import FsRequest
    from tests.integration.fskit import lab_moosefs

    other = lab["RSA_LAB_OTHER_USER"]
    nodes = ("rsa1", "rsa2")
    req = FsRequest(f"sec-servers-{os.getpid()}", "0", nodes, "ram",
                    {n: lab["RSA_LAB_POOL_RAM"] for n in nodes}, "/run/rsa/mnt",
                    owner=_ids(lab["RSA_LAB_USER"]))
    with lab_hosts(lab) as hosts, make_jobs(lab) as jobs:
        backend = lab_moosefs(lab, hosts)
        servers = backend.servers()
        where: str | None = None
        if in_cluster():  # rsaother's plain job: its Prolog loaded the node's guard
            job = jobs.submit("-t", "5", "--wrap", "sleep 300", user=other)
            where = wait_for(f"job {job} running", lambda: root(
                lab, "squeue", "-h", "-j", job, "-t", "R", "-o", "%N").strip(), timeout=120)
        try:
            spec = backend.create(req)
            port = int(spec.client["master_port"])
            listing = "".join(
                run_as(lab, "root", ["python3", "-c", LISTENERS, str(servers.low),
                                     str(servers.high)],
                       node=n if in_cluster() else None).stdout
                for n in (nodes if in_cluster() else ("here",)))
            targets = sorted({f"{a}:{p}" for a, p in (ln.split() for ln in
                                                        listing.splitlines())
                              if a in servers.addresses})
            probe = ["python3", "-c", CONNECT, *targets]
            mine = run_as(lab, "root", probe, node=where, timeout=120).stdout.splitlines()
            # the control: root reaches the master's port and the chunkservers'
            assert len(mine) >= 3 and all(ln.startswith("connected") for ln in mine), \
                (listing, mine)
            assert any(ln.endswith(f" {port}") for ln in mine), (port, mine)
            seen = run_as(lab, other, probe, node=where, timeout=120)
            assert seen.returncode == 0, seen.stderr
            theirs = seen.stdout.splitlines()
            assert len(theirs) == len(mine) and all(
                ln.startswith("refused") for ln in theirs), (
                f"{other} reached a RAMDISK server from {where or 'the host'}: {seen.stdout}")
        finally:
            backend.destroy(req)
