"""The lab itself: Slurm runs jobs, RSA nodes answer over SSH, the PFS is shared and slow."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Mapping
from contextlib import nullcontext
from pathlib import Path

import paramiko
import pytest

from .conftest import as_user, slurm_env
from .slurmkit import in_cluster, pfs_writes_at

REQUIRED_KEYS = (
    "RSA_LAB_USER", "RSA_LAB_OTHER_USER", "RSA_LAB_PFS", "RSA_LAB_COMPUTE_NODES",
    "RSA_LAB_RSA_NODES", "RSA_LAB_SSH_KEY", "RSA_LAB_SSH_KNOWN_HOSTS", "RSA_LAB_ACCOUNTING",
    "RSA_LAB_SLURM_CONF", "RSA_LAB_VENV",
)


def _slurm(lab: Mapping[str, str], *argv: str) -> str:
    return subprocess.run(
        list(argv), capture_output=True, text=True, timeout=60, env=slurm_env(lab),
        check=True,
    ).stdout


def _nodes(hostlist: str) -> list[str]:
    # "c[1-4]" -> c1..c4; the lab only writes this simple form.
    prefix, _, rng = hostlist.rstrip("]").partition("[")
    lo, _, hi = rng.partition("-")
    return [f"{prefix}{i}" for i in range(int(lo), int(hi or lo) + 1)]


def test_env_has_the_keys(lab: Mapping[str, str]) -> None:
    missing = [k for k in REQUIRED_KEYS if not lab.get(k)]
    assert not missing, f"/run/rsa-lab/env lacks {missing}"
    assert lab["RSA_LAB_ACCOUNTING"] in ("0", "1")
    assert Path(lab["RSA_LAB_PYTHON"]).exists()  # the venv's (the cluster lab: the package's)


def test_compute_nodes_idle(lab: Mapping[str, str]) -> None:
    out = _slurm(lab, "sinfo", "-h", "-N", "-o", "%N %t")
    states = dict(line.split() for line in out.splitlines())
    for node in _nodes(lab["RSA_LAB_COMPUTE_NODES"]):
        assert states.get(node) in ("idle", "mix", "alloc"), f"{node}: {states.get(node)}"


def test_sbatch_as_user_completes(lab: Mapping[str, str]) -> None:
    user, pfs = lab["RSA_LAB_USER"], lab["RSA_LAB_PFS"]
    out = Path(pfs) / f"test-lab-{os.getpid()}.out"
    r = as_user(lab, user, ["sbatch", "--parsable", f"--chdir={pfs}", f"--output={out}",
                            "-t", "1", "--wrap", "hostname; id -un"])
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 90
    state = ""
    while time.monotonic() < deadline:
        line = _slurm(lab, "scontrol", "show", "job", "-o", job)
        state = next(f.split("=", 1)[1] for f in line.split() if f.startswith("JobState="))
        if state not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING"):
            break
        time.sleep(0.5)
    assert state == "COMPLETED"
    host, who = out.read_text().split()
    assert host in _nodes(lab["RSA_LAB_COMPUTE_NODES"])  # the node's own UTS namespace
    assert who == user
    out.unlink()


def _ssh(lab: Mapping[str, str], address: str) -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    client.load_host_keys(lab["RSA_LAB_SSH_KNOWN_HOSTS"])
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(address, username=lab.get("RSA_LAB_SSH_USER", "root"),
                   key_filename=lab["RSA_LAB_SSH_KEY"], allow_agent=False,
                   look_for_keys=False, timeout=10)
    return client


def _run(client: paramiko.SSHClient, cmd: str) -> str:
    _, out, err = client.exec_command(cmd, timeout=30)
    rc = out.channel.recv_exit_status()
    text = out.read().decode()
    assert rc == 0, f"{cmd}: {err.read().decode()}"
    return text


def test_rsa_nodes_by_key_with_private_pools(lab: Mapping[str, str]) -> None:
    names = _nodes(lab["RSA_LAB_RSA_NODES"])
    addresses = lab["RSA_LAB_RSA_ADDRESSES"].split(",")
    pool = lab["RSA_LAB_POOL_RAM"]
    tag = f"probe-{os.getpid()}"
    clients = [_ssh(lab, a) for a in addresses]
    try:
        for name, client in zip(names, clients, strict=True):
            assert _run(client, "hostname").strip() == name
            assert "tmpfs" in _run(client, f"stat -f -c %T {pool}")
            _run(client, f"echo {name} > {pool}/{tag}")
        for name, client in zip(names, clients, strict=True):
            # each node sees only its own file: the pools are node-private
            assert _run(client, f"cat {pool}/{tag}").strip() == name
            _run(client, f"rm -f {pool}/{tag}")
            assert "fuse" in _run(client, f"stat -f -c %T {lab['RSA_LAB_PFS_ROOT']}")
        assert not Path(pool, tag).exists()  # nor does the host see them
    finally:
        for client in clients:
            client.close()


def test_ssd_pool_only_on_ssd_nodes(lab: Mapping[str, str]) -> None:
    if not lab.get("RSA_LAB_RSA_SSD_NODES"):
        pytest.skip("the cluster lab has no ssd pools without RSA_CLUSTER_TIERS=mixed "
                    "(lab/cluster/ssdpool.py): its RSA nodes have a RAM pool only")
    ssd_nodes = set(lab["RSA_LAB_RSA_SSD_NODES"].split(","))
    for name, address in zip(_nodes(lab["RSA_LAB_RSA_NODES"]),
                             lab["RSA_LAB_RSA_ADDRESSES"].split(","), strict=True):
        client = _ssh(lab, address)
        try:
            _, out, _ = client.exec_command(
                f"touch {lab['RSA_LAB_POOL_SSD']}/.probe && rm {lab['RSA_LAB_POOL_SSD']}/.probe")
            writable = out.channel.recv_exit_status() == 0
        finally:
            client.close()
        assert writable == (name in ssd_nodes), name


def test_pfs_is_a_network_fs_private_to_its_user(lab: Mapping[str, str]) -> None:
    root = lab["RSA_LAB_PFS_ROOT"]
    fstype = subprocess.run(["findmnt", "-n", "-o", "FSTYPE,SOURCE", root],
                            capture_output=True, text=True, check=True).stdout
    assert "fuse" in fstype and "mfs" in fstype, fstype
    user, other = lab["RSA_LAB_USER"], lab["RSA_LAB_OTHER_USER"]
    probe = f"{lab['RSA_LAB_PFS']}/probe-{os.getpid()}"
    assert as_user(lab, user, ["sh", "-c", f"echo ok > {probe}"]).returncode == 0
    assert as_user(lab, other, ["cat", probe]).returncode != 0  # 0700 home
    assert as_user(lab, user, ["rm", probe]).returncode == 0


def test_pfs_bandwidth_is_limited(lab: Mapping[str, str]) -> None:
    """512 MiB written with fsync must take about the configured rate (1 Gbit/s). The
    cluster lab's PFS is not throttled: there its writes are shaped to 1 Gbit/s for the
    test, as the tests that need a slow PFS shape them (slurmkit pfs_writes_at)."""
    path = Path(lab["RSA_LAB_PFS_ROOT"], f"bw-{os.getpid()}")
    size = 512 * 2**20
    with pfs_writes_at(lab, "1gbit") if in_cluster() else nullcontext():
        t0 = time.monotonic()
        subprocess.run(["dd", "if=/dev/zero", f"of={path}", "bs=1M", f"count={size >> 20}",
                        "conv=fsync", "status=none"], check=True, timeout=300)
        secs = time.monotonic() - t0
    path.unlink()
    mb_s = size / secs / 1e6
    rate = lab.get("RSA_LAB_PFS_RATE", "1gbit")
    if rate != "1gbit":
        pytest.skip(f"bandwidth bounds are for the default 1gbit, lab runs {rate}")
    print(f"PFS write: {mb_s:.0f} MB/s")
    assert mb_s < 140, f"PFS not throttled: {mb_s:.0f} MB/s (1 Gbit/s is 125 MB/s)"
    assert mb_s > 40, f"PFS far slower than its 1 Gbit/s limit: {mb_s:.0f} MB/s"
