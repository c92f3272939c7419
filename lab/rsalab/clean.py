"""check-clean: prove that nothing of the lab is left (processes, mounts, namespaces,
routes, links, qdiscs, listeners, ssd loop devices and their caps, state). Read-only: it
reports, lab-down removes."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from . import nodecpu, ssd
from .common import (
    CTLD_ADDR,
    CTLD_PORT,
    DATA,
    DBD_PORT,
    ENV_FILE,
    MYSQL_PORT,
    PFS_GUARD,
    PFS_VETH,
    PIDS,
    RSA_NET,
    SLURMD_PORT0,
    Settings,
    alive,
    listening,
    mounts,
    run,
)
from .rsad import CLIENT_CONF, ETC_CLIENT
from .slurm import ETC_CONF, ETC_MARK

DAEMONS = {"munged", "slurmctld", "slurmd", "slurmdbd", "slurmstepd", "mariadbd", "mysqld",
           "mfsmaster", "mfschunkserver", "mfsmount", "rsad"}


# The nftables table RAMDISK mounts load to guard mfsmount's master proxy
# (rsa_scheduler/fs/mfsproxy.py); the lab's nodes share the host's network namespace, so
# theirs is the host's, and lab-down removes it.
NFT_GUARD = "rsa_mfsproxy"
# the compute nodes' state directory (rsa_scheduler/node/mounts.py DEFAULT_BASE), where
# each node records what its guard loads named: removed with the table
NODE_DIR = Path("/run/rsa/node")


def nft_guard_loaded() -> bool:
    nft = shutil.which("nft", path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin"]))
    return nft is not None and run([nft, "list", "table", "inet", NFT_GUARD],
                                   check=False).returncode == 0


def job_cgroups() -> list[Path]:
    """The per-job cgroups rsad's commands made on the lab's RSA nodes
    (``<cgroup2>/rsa.jobs/<job>``, rsa_scheduler/contain.py): the nodes share this host's
    cgroup tree, so a job the lab did not see to its end leaves its cgroup here."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        if right.split()[:1] == ["cgroup2"]:
            top = Path(left.split()[4]) / "rsa.jobs"
            return sorted(d for d in top.glob("*") if d.is_dir()) if top.is_dir() else []
    return []


def _not_the_labs(proc: Path, cmd: str) -> bool:
    """A process of a test that runs beside the lab in a root of its own (the install
    test, tests/mfs4, tests/slurm_release): chrooted (the lab never chroots a process), or the
    install test's shell that mounts its root under RSA_INSTALL_WORK (the root's path is
    in its command line)."""
    work = os.environ.get("RSA_INSTALL_WORK", "/var/tmp/rsa-install-test").rstrip("/")
    try:
        root = os.readlink(proc / "root")
    except OSError:
        return False
    return root != "/" or f" {work}/root " in f" {cmd} "


#: what the holders of the namespaces beside the lab carry in their environment: the
#: cluster lab's nodes (lab/cluster/rsacluster.py: RSACL_NODE=, a second cluster's
#: RSACL_NODE_<NAME>=) and the sandboxes of tests/mfs4 and tests/slurm_release (make test
#: runs them beside the lab phases; each ends its own)
CLUSTER_MARKS = (b"RSACL_NODE=", b"RSACL_NODE_", b"RSA_SANDBOX=")


def marked(mark: Callable[[bytes], bool]) -> tuple[set[int], set[str]]:
    """The processes with an environment item that is ``mark``'s (the holders of
    namespaces beside the lab) and the PID namespaces other than ours they are in: every
    process of a node or sandbox lives in its PID 1's."""
    holders: set[int] = set()
    pidns: set[str] = set()
    host_pidns = os.readlink("/proc/self/ns/pid")
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            env = (d / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(mark(item) for item in env):
            holders.add(int(d.name))
            ns = _pidns(d)
            if ns and ns != host_pidns:  # a node's PID 1, not a holder in ours
                pidns.add(ns)
    return holders, pidns


def _cluster_lab() -> tuple[set[int], set[str]]:
    """The holders of namespaces beside the lab (the cluster lab's, lab/cluster, whose
    own check-clean watches them, and the sandboxes') and the PID namespaces they made."""
    return marked(lambda item: item.startswith(CLUSTER_MARKS))


def _pidns(proc: Path) -> str:
    try:
        return os.readlink(proc / "ns" / "pid")
    except OSError:
        return ""


def leftovers(s: Settings) -> list[str]:
    found: list[str] = []
    cluster_holders, cluster_pidns = _cluster_lab()
    my_mnt = os.readlink("/proc/self/ns/mnt")
    my_uts = os.readlink("/proc/self/ns/uts")
    my_net = os.readlink("/proc/self/ns/net")
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if not cmd:  # kernel thread or zombie
                continue
            comm = (d / "comm").read_text().strip()
            ns = {k: os.readlink(d / "ns" / k) for k in ("mnt", "uts", "net")}
        except OSError:
            continue
        if ns["mnt"] != my_mnt and _not_the_labs(d, cmd):
            continue  # make test runs the install test beside the lab: not the lab's
        if int(d.name) in cluster_holders or _pidns(d) in cluster_pidns:
            continue  # the cluster lab's (lab/cluster): not this lab's
        if ns["mnt"] != my_mnt or ns["uts"] != my_uts or ns["net"] != my_net:
            found.append(f"process {d.name} in a namespace of its own: {cmd.strip()[:120]}")
        elif comm in DAEMONS or "/run/rsa-lab/" in cmd:
            found.append(f"process {d.name}: {cmd.strip()[:120]}")
    if PIDS.exists():
        for f in PIDS.glob("*.pid"):
            try:
                pid = int(f.read_text())
            except ValueError:
                continue
            if alive(pid):
                found.append(f"pidfile {f.name}: pid {pid} alive")
    roots = (str(s.pfs_mount), str(s.pool_root), "/var/lib/rsa-lab", "/run/rsa-lab",
             "/sys/fs/fuse/connections")
    in_sandbox = bool(os.environ.get("RSA_LAB_SANDBOX"))  # lab/sandbox: DATA is its mount
    for mnt, fstype, src in mounts():
        if in_sandbox and mnt == str(DATA):
            continue
        if mnt.startswith(roots) or fstype.startswith("fuse") or "mfs" in src:
            found.append(f"mount {mnt} ({fstype} {src})")
    routes = run(["ip", "route", "show", "table", "all"], check=False).stdout
    for line in routes.splitlines():
        if PFS_GUARD.split(".")[0] + "." + PFS_GUARD.split(".")[1] in line:
            found.append(f"route {line.strip()}")
    if nft_guard_loaded():
        found.append(f"nftables table inet {NFT_GUARD}")
    found += [f"job cgroup {d}" for d in job_cgroups()]
    found += nodecpu.leftovers()  # the RSA nodes' cpu cgroup (RSA_LAB_NODE_CPU_WEIGHT)
    found += ssd.leftovers()  # loop devices, throttle rules, bdi strict_limit
    if run(["ip", "link", "show", PFS_VETH], check=False).returncode == 0:
        found.append(f"link {PFS_VETH}")
    qdisc = run(["tc", "qdisc", "show", "dev", "lo"], check=False).stdout
    if qdisc.strip() and "noqueue" not in qdisc:
        found.append(f"qdisc on lo: {qdisc.strip()}")
    ports = [(CTLD_ADDR, p) for p in (CTLD_PORT, DBD_PORT, MYSQL_PORT)]
    ports += [(CTLD_ADDR, SLURMD_PORT0 + i) for i in range(s.n_compute)]
    ports += [(f"{RSA_NET}.{i}", 22) for i in range(1, s.n_rsa + 1)]
    ports += [("127.0.0.1", 7820), ("127.0.0.1", 9465)]  # rsad's TCP API and metrics
    if Path("/run/rsa/rsad.sock").exists():
        found.append("rsad socket /run/rsa/rsad.sock")
    for addr, port in ports:
        if listening(addr, port):
            found.append(f"listener {addr}:{port}")
    if ENV_FILE.exists():
        found.append(f"{ENV_FILE} still exists")
    if ETC_MARK.exists() or (ETC_CONF.is_symlink() and "rsa-lab" in os.readlink(ETC_CONF)):
        found.append(f"{ETC_CONF} symlink of the lab")
    if ETC_CLIENT.is_symlink() and os.readlink(ETC_CLIENT) == str(CLIENT_CONF):
        found.append(f"{ETC_CLIENT} symlink of the lab")
    return found
