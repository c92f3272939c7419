"""The cluster lab (issue 30): every node its own host, booted from one installed image.

Owns the node table (read from the image's ``/etc/hosts``, ``lab/cluster/files``), the
nodes' namespaces, the network between them, the daemons each role runs, and their
teardown and leak check. Entry point: ``lab/cluster/clusterctl``; docs/lab.md, "The
cluster lab".

Each node is a holder process (``unshare --pid --fork --mount --uts --ipc --net``) whose
child is PID 1 of the node's PID namespace. In its private mount namespace that child
mounts a tmpfs, an overlay of the shared image (``lab/cluster/image``) with a writable
upper layer in that tmpfs, and fresh ``/proc``, ``/sys``, ``/run``, ``/tmp`` and
``/dev/shm``; sets the node's hostname; pivots into the overlay and waits as init (it
reaps orphans). Every command on a node enters all of its namespaces and its root
(:func:`node_argv`), as ssh would put it there.

The networks, as a site has them (:data:`NETWORKS`): a "switch" namespace holding one
bridge per network, management (``rsacl0``), RSA data (``rsacl1``: compute and RSA nodes
only; the RSA nodes' firewall, :data:`FIREWALL`, takes the data addresses and the RAMDISK
ports from it alone) and storage (``rsacl2``: the PFS and its clients); one veth pair per
node and network (``rsacl<n>-<node>`` on the bridge, ``eth<n>`` in the node). Nothing is
made in the host's own network or mount namespace: when a node's PID 1 dies, the kernel
kills every process of the node, and its mounts, veth and namespaces go with them. Every
holder carries ``RSACL_NODE=<name>`` in its environment, which :func:`leftovers` looks
for.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import nodecgroup  # the RSA nodes' cgroup v2 subtrees
import ssdpool  # the ssd tier of RSA_CLUSTER_TIERS=mixed

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
WORK = Path(os.environ.get("RSA_CLUSTER_WORK", "/var/tmp/rsa-cluster"))
# RSA_CLUSTER_NAME: a second cluster lab beside the first (its own state, mark and nodes;
# the same image); its networks are its own namespaces, so the same addresses serve both
INSTANCE = os.environ.get("RSA_CLUSTER_NAME", "")
if INSTANCE and not re.fullmatch(r"[a-z0-9]{1,8}", INSTANCE):
    sys.exit(f"cluster: RSA_CLUSTER_NAME={INSTANCE!r}: 1 to 8 of a-z, 0-9")
SUFFIX = f"-{INSTANCE}" if INSTANCE else ""
MNT = WORK / f"mnt{SUFFIX}"  # an empty directory: each node mounts its own tmpfs on it
# the PFS's chunks: on the host's disk (as the shared lab's), bound into the pfs node at
# the same path; made empty at up, removed at down (a node's tmpfs would hold 2G at most,
# and the tests' inputs and outputs are GiBs)
PFS_CHUNKS = WORK / f"pfs-chunks{SUFFIX}"
STATE = Path(f"/run/rsa-cluster{SUFFIX}")
STATE_FILE = STATE / "state.json"
COMPLETE = STATE / "up"  # written last by an up that finished
LOGS = STATE / "log"
DOOR_DIR = STATE / "door"  # the harness's door (lab/cluster/harness.py), on rsad's host too
MARK = "RSACL_NODE" + (f"_{INSTANCE.upper()}" if INSTANCE else "")
PREFIX = "rsacl"  # every link name (the shared lab's start with rsalab)
NETMASK = 24
# network -> (its bridge in the switch, the node's interface on it, the suffix of a
# node's name on it in /etc/hosts); which node is on which: lab/cluster/files/etc/hosts
NETWORKS: dict[str, tuple[str, str, str]] = {
    "mgmt": ("rsacl0", "eth0", ""),  # Slurm, SSH, rsad's API, the directory
    "data": ("rsacl1", "eth1", "-data"),  # RAMDISK servers and clients: no login node
    "storage": ("rsacl2", "eth2", "-st"),  # the PFS
}
HOST_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
ENV = (f"PATH={HOST_PATH}", "LC_ALL=C.UTF-8", "HOME=/root")

# the roles: what each node runs (start order: this table's order, then daemons' order)
# (pfs-client: each node mounts the PFS at PFS with its own mfsmount)
# (nslcd: the node resolves users and groups through the directory, slapd on ldap, which
# therefore starts first; the lab's users are in no node's /etc/passwd. rsad: on the
# controller beside slurmctld and slurmdbd (RSA_CLUSTER_RSAD=ctl, the default: the
# issue's controller, a site's usual place; slurmctld's hooks reach it by its socket) or
# on a host of its own (RSA_CLUSTER_RSAD=own: its hooks over the network), started last
# either way: it reaches the RSA nodes' sshd and is reached by the compute nodes over the
# network; the name "rsad" resolves to whichever host runs it. firewall: the operator
# guide's rules for the RSA data network, loaded before anything listens, as at boot)
# The cluster's shape: RSA_CLUSTER_NODES compute nodes and as many RSA nodes (c1.., rsa1..;
# 2 by default, at most the 4 of each that lab/cluster/files/etc/hosts names), each RSA
# node's pool a tmpfs of RSA_CLUSTER_POOL (1G by default), rsad where RSA_CLUSTER_RSAD
# says (ctl by default, or own). The harness's lab-test brings
# up 4 and 2G, the host lab's shape, for the host lab's tests. An up records the shape in
# its state (SHAPE_FILE): every later command on that cluster reads it from there.
SHAPE_FILE = STATE / "shape.json"
IMAGE_FILE = STATE / "image"  # the image this cluster's nodes boot from, while it is up
MAX_NODES = 4
DEFAULT_SHAPE = {"nodes": 2, "pool": "1G", "rsad": "ctl"}
RSAD_PLACES = ("ctl", "own")  # RSA_CLUSTER_RSAD: the controller, or a host of its own


def _shape() -> dict[str, object]:
    """The cluster's shape: the recorded one of a cluster that is up, else the
    environment's (RSA_CLUSTER_NODES, RSA_CLUSTER_POOL), else the default."""
    with contextlib.suppress(OSError, ValueError):
        if not STATE_FILE.exists():  # a record without a cluster is a stale one
            raise OSError
        recorded = json.loads(SHAPE_FILE.read_text())
        if isinstance(recorded, dict) and set(recorded) == set(DEFAULT_SHAPE):
            return recorded
    return wanted_shape()


def wanted_shape() -> dict[str, object]:
    """The shape the environment asks for (:func:`_shape`)."""
    nodes = os.environ.get("RSA_CLUSTER_NODES", str(DEFAULT_SHAPE["nodes"]))
    pool = os.environ.get("RSA_CLUSTER_POOL", str(DEFAULT_SHAPE["pool"]))
    rsad = os.environ.get("RSA_CLUSTER_RSAD", str(DEFAULT_SHAPE["rsad"]))
    if rsad not in RSAD_PLACES:
        sys.exit(f"cluster: RSA_CLUSTER_RSAD={rsad!r}: ctl (on the controller) or own "
                 "(a host of its own)")
    if not nodes.isdigit() or not 1 <= int(nodes) <= MAX_NODES:
        sys.exit(f"cluster: RSA_CLUSTER_NODES={nodes!r}: 1 to {MAX_NODES}")
    if not re.fullmatch(r"[1-9][0-9]{0,2}[MG]", pool):
        sys.exit(f"cluster: RSA_CLUSTER_POOL={pool!r}: a size such as 512M or 2G")
    return {"nodes": int(nodes), "pool": pool, "rsad": rsad}


SHAPE = _shape()
COUNT = int(str(SHAPE["nodes"]))
POOL_SIZE = str(SHAPE["pool"])
RSAD_ON_CTL = SHAPE.get("rsad", "ctl") == "ctl"
ROLES: dict[str, tuple[str, ...]] = {
    "ldap": ("slapd",),
    "pfs": ("nslcd", "mfsmaster", "mfschunkserver"),
    "ctl": ("nslcd", "munged", "pfs-client", "mariadb", "slurmdbd", "slurmctld",
            *(("rsad",) if RSAD_ON_CTL else ())),
    **{f"c{i}": ("nslcd", "munged", "pfs-client", "slurmd") for i in range(1, COUNT + 1)},
    **{f"rsa{i}": ("firewall", "nslcd", "munged", "pfs-client", "sshd")
       for i in range(1, COUNT + 1)},
    "login": ("nslcd", "munged", "pfs-client"),  # users' door: sbatch, rsa, the PFS
    **({} if RSAD_ON_CTL else {"rsad": ("nslcd", "munged", "pfs-client", "rsad")}),
}
# the service name every client finds rsad by (client.conf's ``api = rsad:7820``): with
# rsad on the controller, an alias of ctl's addresses in every node's /etc/hosts
RSAD_NAME = "rsad"
# the process a role's name stands for, when not its own ("": none, a ruleset)
COMM = {"pfs-client": "mfsmount", "firewall": "", "mariadb": "mariadbd"}
# accounting (slurmdbd and its MariaDB, on the controller as the issue has it: a site's
# usual place, and no host more to boot); RSA_CLUSTER_ACCOUNTING=0 brings the cluster up
# without it (slurm.conf's accounting lines taken out on every host), as a site without
# slurmdbd runs
ACCOUNTING = ("mariadb", "slurmdbd")
ACCOUNT = "rsa"  # the lab users' account (sacctmgr), associations enforced
LOCKIN_QOS = "rsa-lockin"  # slurm.lockin.qos's default: for slurm.lockin.method qos
PFS = "/pfs"  # the PFS's mount point, the same on every node that mounts it
# RSA_LAB_DEBIAN: the Debian release the image is built from (lab/cluster/image, issue 31)
# -> its MooseFS's major version (4.x names its storage classes: no class "1" for goal 1)
RELEASES = {"12": 3, "13": 4, "testing": 4}
PFS_HOST = "pfs-st"  # the PFS's master, on the storage network
PFS_CLASS = "lab1"  # the PFS's storage class of one copy on MooseFS 4.x
USERS = ("rsauser", "rsaother")  # the directory's (lab/cluster/directory.ldif); PFS homes
PROJECT_GROUP = "proj1"  # rsauser's project group, in the directory only (directory.ldif)

# PID 1 of a node: its mounts, its hostname, then init (reaps what daemonizes under it)
SETUP = r"""set -e
name=$1 image=$2 m=$3 binds=$4 ro_binds=$5 cg=$6
mount -t tmpfs -o mode=0755,size=2g "rsacl-$name" "$m"
mkdir "$m/upper" "$m/work" "$m/root"
mount -t overlay -o "lowerdir=$image,upperdir=$m/upper,workdir=$m/work" "rsacl-$name" "$m/root"
r=$m/root
mount -t proc proc "$r/proc"
mount -t sysfs -o ro sysfs "$r/sys"
# Slurm 22.05 loads a cgroup plugin even with proctrack/linuxproc and task/none: it wants
# a tmpfs on /sys/fs/cgroup and a cgroup hierarchy at its systemd/ (v1). The node gets the
# host's name=systemd hierarchy there, read-only: nothing in a node writes v1 cgroups
mount -t tmpfs -o mode=0755,size=1m cgroup "$r/sys/fs/cgroup"
mkdir "$r/sys/fs/cgroup/systemd"
mount --bind /sys/fs/cgroup/systemd "$r/sys/fs/cgroup/systemd"
mount -o remount,bind,ro "$r/sys/fs/cgroup/systemd"
# an RSA node's cgroup v2 subtree of its own (lab/cluster/nodecgroup.py), where rsad's
# commands make their jobs' cgroups: PID 1 joins it; the node sees it at unified/
if [ -n "$cg" ]; then
  echo $$ > "$cg/cgroup.procs"
  mkdir "$r/sys/fs/cgroup/unified"
  mount --bind "$cg" "$r/sys/fs/cgroup/unified"
fi
mount --rbind /dev "$r/dev"
mount -t tmpfs -o mode=1777 shm "$r/dev/shm"
mount -t tmpfs -o mode=0755 run "$r/run"
mount -t tmpfs -o mode=1777 tmp "$r/tmp"
# the test harness's (lab/cluster/harness.py): on rsad's host the repository and the door
# directory, on the compute nodes the workflow tools' venv read-only (software a site
# shares), each at its own path
for d in $binds; do mkdir -p "$r$d"; mount --bind "$d" "$r$d"; done
for d in $ro_binds; do
  mkdir -p "$r$d"; mount --bind "$d" "$r$d"; mount -o remount,bind,ro "$r$d"
done
hostname "$name"
echo "$name" > "$r/etc/hostname"
cd "$r"
mkdir -p .oldroot
pivot_root . .oldroot
umount -l /.oldroot
rmdir /.oldroot
exec /usr/bin/python3 -c "$INIT"
"""
INIT = """import os, time
print("ready", flush=True)
while True:
    try:
        os.waitpid(-1, 0)
    except ChildProcessError:
        time.sleep(0.2)
"""
# a daemon keeps no pipe of ours open (its own log says what it did)
QUIET = " </dev/null >/dev/null 2>&1"
SWITCH = 'ip link set lo up; echo ready; exec sleep infinity'


class ClusterError(RuntimeError):
    pass


def log(msg: str) -> None:
    print(f"cluster: {msg}", flush=True)


def addresses() -> dict[str, dict[str, str]]:
    """Node name -> network -> its address there, from the image's /etc/hosts (one table
    for both: NAME on the management network, NAME-data, NAME-st; NETWORKS)."""
    table: dict[str, dict[str, str]] = {}
    for line in (HERE / "files/etc/hosts").read_text().splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) < 2:
            continue
        for net, (_bridge, _dev, suffix) in NETWORKS.items():
            node = fields[1].removesuffix(suffix) if suffix else fields[1]
            if node in ROLES and (not suffix or fields[1].endswith(suffix)):
                table.setdefault(node, {})[net] = fields[0]
                break
    missing = {n for n in ROLES if "mgmt" not in table.get(n, {})}
    if missing:
        raise ClusterError(f"lab/cluster/files/etc/hosts names no address for {missing}")
    return table


def hosts_file(text: str, rsad_on: str) -> str:
    """The image's /etc/hosts as a node of this cluster has it: with rsad on the
    controller (``rsad_on`` "ctl") the lines of the host of its own dropped and the names
    ``rsad``, ``rsad-st`` added to ctl's (every client finds rsad by that name, as a site
    names a service by an alias of the host that runs it); else as it is."""
    if rsad_on != "ctl":
        return text
    out = []
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split()
        name = fields[1] if len(fields) >= 2 else ""
        if name in (RSAD_NAME, f"{RSAD_NAME}{NETWORKS['storage'][2]}"):
            continue
        if name == "ctl" or name == f"ctl{NETWORKS['storage'][2]}":
            line = f"{line}\t{RSAD_NAME}{name.removeprefix('ctl')}"
        out.append(line)
    return "\n".join(out) + "\n"


def hosts() -> dict[str, str]:
    """Node name -> its address on the management network."""
    return {n: nets["mgmt"] for n, nets in addresses().items()}


def net_of(name: str) -> str:
    """A network's address range (e.g. 10.231.0.0/24), from its first address."""
    first = next(a[name] for a in addresses().values() if name in a)
    return f"{first.rsplit('.', 1)[0]}.0/{NETMASK}"


def run(argv: Sequence[str], *, timeout: float = 60, check: bool = True,
        input: str | None = None, node: str | None = None) -> subprocess.CompletedProcess[str]:
    """argv to completion; ``node``: it enters that node (its nsenter carries the mark)."""
    env = {"PATH": HOST_PATH, "LC_ALL": "C.UTF-8", **({MARK: node} if node else {})}
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                              input=input, check=False, env=env)
    except subprocess.TimeoutExpired as e:
        raise ClusterError(f"timed out after {timeout}s: {shlex.join(argv)}") from e
    if check and done.returncode != 0:
        tail = (done.stderr or done.stdout).strip()[-800:]
        raise ClusterError(f"exit {done.returncode}: {shlex.join(argv)}\n{tail}")
    return done


def wait_for(what: str, ok: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.2)


# ---- state: which processes are ours, by PID and start time ----

def _start_time(pid: int) -> str | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
    except OSError:
        return None
    return fields[19] if len(fields) > 19 else None


def _marked(pid: int) -> str | None:
    """The RSACL_NODE value in a process's environment, or None."""
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for item in env:
        if item.startswith(MARK.encode() + b"="):
            return item.split(b"=", 1)[1].decode(errors="replace")
    return None


def _comm(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def load_state() -> dict[str, dict[str, object]]:
    try:
        data = json.loads(STATE_FILE.read_text())
    except FileNotFoundError:
        return {}
    return data if isinstance(data, dict) else {}


def _save_state(state: dict[str, dict[str, object]]) -> None:
    STATE.mkdir(parents=True, exist_ok=True)
    tmp = STATE_FILE.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1))
    tmp.replace(STATE_FILE)


def ours(entry: dict[str, object], name: str) -> int | None:
    """The node's PID 1 if that very process still runs (PID, start time and mark)."""
    pid = entry.get("init")
    if not isinstance(pid, int):
        return None
    if _start_time(pid) != entry.get("start") or _marked(pid) != name:
        return None
    return pid


# ---- nodes and the network ----

def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def _hold(name: str, argv: Sequence[str], extra_env: dict[str, str]) -> dict[str, object]:
    """Start a holder (recorded before anything waits on it); return its state entry
    once its PID 1 said ready."""
    LOGS.mkdir(parents=True, exist_ok=True)
    out = LOGS / f"{name}.holder"
    with open(out, "wb") as f:
        holder = subprocess.Popen(
            list(argv), stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
            start_new_session=True, env={"PATH": HOST_PATH, MARK: name, **extra_env})
    entry: dict[str, object] = {"holder": holder.pid}
    state = load_state()
    state[name] = entry
    _save_state(state)

    def ready() -> bool:
        if holder.poll() is not None:
            raise ClusterError(f"{name}: holder exited {holder.returncode}: "
                               f"{out.read_text(errors='replace').strip()[-600:]}")
        return out.read_text(errors="replace").startswith("ready") or \
            "\nready" in out.read_text(errors="replace")
    wait_for(f"node {name} to boot", ready, timeout=30)
    if argv[0] == "unshare" and "--fork" in argv:
        kids = _children(holder.pid)
        if len(kids) != 1:
            raise ClusterError(f"{name}: holder {holder.pid} has children {kids}")
        init = kids[0]
    else:
        init = holder.pid
    entry.update(init=init, start=_start_time(init))
    state[name] = entry
    _save_state(state)
    return entry


def node_argv(init: int, argv: Sequence[str]) -> list[str]:
    """argv run on a node: in all its namespaces and its root, a clean environment."""
    return ["nsenter", "-t", str(init), "-m", "-u", "-i", "-n", "-p", "-r", "-w", "--",
            "/usr/bin/env", "-i", *ENV, *argv]


def release() -> str:
    """The Debian release of the image (``RSA_LAB_DEBIAN``: 13, the default, 12, testing)."""
    wanted = os.environ.get("RSA_LAB_DEBIAN", "13")
    if wanted not in RELEASES:
        raise ClusterError(f"RSA_LAB_DEBIAN={wanted}: no such release here (one of "
                           f"{', '.join(RELEASES)})")
    return wanted


def image() -> Path:
    env = {k: os.environ[k] for k in ("RSA_CLUSTER_WORK", "RSA_DEBIAN_MIRROR",
                                       "RSA_INSTALL_WORK", "RSA_LAB_DEBIAN")
           if k in os.environ}
    done = run(["env", *(f"{k}={v}" for k, v in env.items()), str(HERE / "image")],
               timeout=1800)
    return Path(done.stdout.strip().splitlines()[-1])


def _boot(name: str, root: Path, binds: Sequence[Path] = (),
          ro_binds: Sequence[Path] = (), cgroup: Path | None = None) -> dict[str, object]:
    for path in (*binds, *ro_binds, *([cgroup] if cgroup else [])):
        if not path.is_absolute() or not re.fullmatch(r"[\w./-]+", str(path)):
            raise ClusterError(f"{path}: a bind into a node must be an absolute path of "
                               "letters, digits, '.', '_', '-' and '/'")
    return _hold(name, ["unshare", "--pid", "--fork", "--mount", "--uts", "--ipc", "--net",
                        "--propagation", "private", "--", "sh", "-c", SETUP, "sh", name,
                        str(root), str(MNT), " ".join(map(str, binds)),
                        " ".join(map(str, ro_binds)), str(cgroup or "")], {"INIT": INIT})


# the repository's venvs for the image's Python, by Debian release (lab/host-root builds
# .venv-debian13 and .venv-debiantesting; Debian 12's is the repository's own .venv)
VENVS = {"12": ".venv", "13": ".venv-debian13", "testing": ".venv-debiantesting"}


def wf_venv(repo: Path) -> Path:
    """The repository's workflow tools' venv for the image's Python (make's WF_VENV)."""
    return repo / VENVS[release()].replace(".venv", ".venv-wf", 1)


def harness_binds(name: str) -> tuple[list[Path], list[Path]]:
    """What a node gets bound in (read-write, read-only) when ``RSA_CLUSTER_HARNESS``
    names a repository (lab/cluster/harness.py runs that repository's lab tests on
    rsad's host): there the repository and the door's directory; on each compute node the
    workflow tools' venv, read-only, where a job of a workflow manager runs it again
    (a site shares such software on every node). Nothing else, or without the variable."""
    repo = os.environ.get("RSA_CLUSTER_HARNESS")
    if not repo:
        return [], []
    if name == RSAD:
        DOOR_DIR.mkdir(parents=True, exist_ok=True, mode=0o700)
        return [Path(repo).resolve(), DOOR_DIR], []
    wf = wf_venv(Path(repo).resolve())
    if name in COMPUTE and wf.is_dir():
        return [], [wf]
    return [], []


def _wire(switch: int, name: str, init: int, net: str, addr: str) -> None:
    """A veth pair on network ``net``: rsacl<n>-<name> on its bridge, eth<n> with the
    node's address there in the node."""
    bridge, dev, _suffix = NETWORKS[net]
    link = f"{bridge}-{name}"
    run(["nsenter", "-t", str(switch), "-n", "--", "ip", "link", "add", link, "type", "veth",
         "peer", "name", dev, "netns", str(init)], node="switch")
    run(["nsenter", "-t", str(switch), "-n", "--", "ip", "link", "set", link, "master",
         bridge, "up"], node="switch")
    for cmd in (["ip", "link", "set", "lo", "up"],
                ["ip", "addr", "add", f"{addr}/{NETMASK}", "dev", dev],
                ["ip", "link", "set", dev, "up"]):
        run(["nsenter", "-t", str(init), "-n", "--", *cmd], node=name)


def _init(name: str) -> int:
    entry = load_state().get(name)
    init = ours(entry, name) if entry else None
    if init is None:
        raise ClusterError(f"node {name} is not up (lab/cluster/clusterctl up)")
    return init


def on(name: str, argv: Sequence[str], *, timeout: float = 60, check: bool = True,
       input: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run argv on node ``name`` (as root; ``runuser -u USER --`` for a user)."""
    return run(node_argv(_init(name), argv), timeout=timeout, check=check, input=input,
               node=name)


def on_switch(argv: Sequence[str], *, timeout: float = 60,
              check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run argv (as root) in the switch's network namespace, where every node's veth has
    its bridge end (``rsacl<n>-<node>``): e.g. ``tc`` shaping what a bridge sends a node."""
    return run(["nsenter", "-t", str(_init("switch")), "-n", "--", *argv], timeout=timeout,
               check=check, node="switch")


def sh(name: str, script: str, *, timeout: float = 60) -> str:
    return on(name, ["sh", "-ec", script], timeout=timeout).stdout


# ---- the daemons of each role ----

# The RSA nodes' firewall for the RSA data network, as the operator guide has a site load
# it ("The RSA data network"): their data addresses only through the data network's
# interface, the ports RAMDISK servers take only from the data network. (Login nodes are
# not on it and have no route to it; compute nodes' users are kept off the servers by
# the guard every job's Prolog loads, docs/security.md.)
FIREWALL = """table inet rsa_data_net
delete table inet rsa_data_net
table inet rsa_data_net {{
  chain input {{
    type filter hook input priority 0; policy accept;
    ip daddr {data} iifname != {{ "lo", "{dev}" }} counter drop
    tcp dport 20000-29983 ip saddr != {data} iifname != "lo" counter drop
  }}
}}
"""


def _start(name: str, daemon: str) -> None:
    if daemon == "firewall":
        on(name, ["nft", "-f", "-"], input=FIREWALL.format(
            data=net_of("data"), dev=NETWORKS["data"][1]))
    elif daemon == "munged":
        sh(name, "install -d -o munge -g munge -m 0755 /run/munge\n"
                 "runuser -u munge -- /usr/sbin/munged" + QUIET)
        wait_for(f"munged on {name}", lambda: on(
            name, ["munge", "-n"], check=False).returncode == 0, timeout=15)
    elif daemon == "rsad":
        _rsad(name)
    elif daemon == "slapd":
        # the directory server, as Debian's unit runs it (its database made by the image)
        sh(name, "install -d -o openldap -g openldap /run/slapd\n"
                 "slapd -h 'ldap:/// ldapi:///' -g openldap -u openldap -F /etc/ldap/slapd.d"
                 + QUIET)
        wait_for("slapd on ldap", lambda: "uid: rsauser" in on(
            name, ["ldapsearch", "-x", "-LLL", "-H", "ldap://ldap/", "-b", "dc=rsa,dc=lab",
                   "uid=rsauser", "uid"], check=False).stdout, timeout=30)
    elif daemon == "nslcd":
        # the node's directory client (/etc/nslcd.conf: slapd on ldap, no enumeration)
        sh(name, "install -d -o nslcd -g nslcd /run/nslcd\n/usr/sbin/nslcd" + QUIET)
        wait_for(f"rsauser through nslcd on {name}", lambda: on(
            name, ["getent", "passwd", "rsauser"], check=False).returncode == 0, timeout=30)
    elif daemon == "mariadb":
        _mariadb(name)
    elif daemon == "slurmdbd":
        _slurmdbd(name)
    elif daemon == "slurmctld":
        # through its own name: Slurm picks its role from argv[0] (notes/slurm-lab.md)
        sh(name, "install -d -o slurm -g slurm /run/slurm\n/usr/sbin/slurmctld" + QUIET)
        wait_for(f"slurmctld on {name}", lambda: on(
            name, ["scontrol", "ping"], check=False).stdout.count("UP") > 0, timeout=30)
    elif daemon == "slurmd":
        sh(name, "install -d -o slurm -g slurm /run/slurm\n/usr/sbin/slurmd" + QUIET)
    elif daemon == "sshd":
        # every host its own host keys (the image's would be one key for all)
        sh(name, "rm -f /etc/ssh/ssh_host_*\nssh-keygen -q -A\n"
                 "install -d -m 0755 /run/sshd\n/usr/sbin/sshd" + QUIET)
    elif daemon == "mfsmaster":
        # the PFS's master: its own config on its own host (pfs), on the storage network
        # only, exported to it
        st = addresses()[name]["storage"]
        sh(name, f"""echo '{net_of("storage")} / \
rw,alldirs,admin,maproot=0:0' > /etc/mfs/mfsexports.cfg
printf 'MATOML_LISTEN_HOST = {st}\nMATOCS_LISTEN_HOST = {st}\nMATOCL_LISTEN_HOST = {st}\n' \
  > /etc/mfs/mfsmaster.cfg
install -o mfs -g mfs -m 0644 /var/lib/mfs/metadata.mfs.empty /var/lib/mfs/metadata.mfs
mfsmaster -c /etc/mfs/mfsmaster.cfg start""" + QUIET)
    elif daemon == "mfschunkserver":
        st = addresses()[name]["storage"]
        sh(name, f"""install -d -o mfs -g mfs -m 0700 {PFS_CHUNKS}
echo {PFS_CHUNKS} > /etc/mfs/mfshdd.cfg
printf 'MASTER_HOST = {PFS_HOST}\nBIND_HOST = {st}\nCSSERV_LISTEN_HOST = {st}\n\
HDD_LEAVE_SPACE_DEFAULT = 256MiB\n' > /etc/mfs/mfschunkserver.cfg
mfschunkserver -c /etc/mfs/mfschunkserver.cfg start""" + QUIET)
        wait_for("the PFS's chunkserver", lambda: "\t9422\t" in on(
            name, ["mfscli", "-H", PFS_HOST, "-SCS", "-p"], check=False).stdout, timeout=30)
    elif daemon == "pfs-client":
        sh(name, f"mkdir -p {PFS}\nmfsmount {PFS} -H {PFS_HOST} -o mfsioretries=5,"
                 f"default_permissions" + QUIET)
        wait_for(f"the PFS on {name}", lambda: on(
            name, ["mountpoint", "-q", PFS], check=False).returncode == 0, timeout=30)
        if name == "ctl":  # once, from the first client: one copy, the users' homes
            homes = " ".join(f"{PFS}/home/{u}" for u in USERS)
            if RELEASES[release()] >= 4:  # a class of one copy, made (the export: admin)
                one = [f"mfscreatesclass -M {PFS} -K '*' -c 'the lab PFS: one copy' "
                       f"{PFS_CLASS} >/dev/null", f"mfssetsclass -r {PFS_CLASS} {PFS} >/dev/null"]
            else:
                one = [f"mfssetgoal -r 1 {PFS} >/dev/null"]
            script = [*one, f"mkdir -p {homes}"]
            script += [f"chown {u}: {PFS}/home/{u}; chmod 0700 {PFS}/home/{u}" for u in USERS]
            sh(name, "\n".join(script))
    else:
        raise ClusterError(f"no such daemon {daemon}")


def accounting() -> bool:
    """Whether the cluster runs slurmdbd (``RSA_CLUSTER_ACCOUNTING``, default 1)."""
    return os.environ.get("RSA_CLUSTER_ACCOUNTING", "1") not in ("0", "no", "false")


def prolog_flags() -> str:
    """slurm.conf's PrologFlags on every host (``RSA_CLUSTER_PROLOG_FLAGS``, e.g.
    ``Alloc,Contain``, as the host lab's RSA_LAB_PROLOG_FLAGS for make test's variant;
    default none: each node's Prolog runs at its first step)."""
    flags = os.environ.get("RSA_CLUSTER_PROLOG_FLAGS", "").strip()
    if flags and not re.fullmatch(r"[A-Za-z]+(,[A-Za-z]+)*", flags):
        raise ClusterError(f"RSA_CLUSTER_PROLOG_FLAGS={flags!r}: Slurm's flag names, comma "
                           "separated (e.g. Alloc,Contain)")
    return flags


def daemons_of(name: str) -> tuple[str, ...]:
    """What node ``name`` runs in this cluster (ROLES, less accounting when it is off)."""
    return tuple(d for d in ROLES[name] if accounting() or d not in ACCOUNTING)


def _sql(name: str, text: str) -> subprocess.CompletedProcess[str]:
    # root by MariaDB's unix_socket authentication, as Debian installs it
    return on(name, ["mariadb", "-u", "root", "-e", text], check=False)


def _mariadb(name: str) -> None:
    """MariaDB as Debian's unit runs it (its datadir from the package's postinst, in the
    image; the cluster's settings in /etc/mysql/mariadb.conf.d/60-rsa-cluster.cnf), and
    the database and user slurmdbd needs, as the Slurm accounting guide has a site make
    them (the password: a new one each up, in slurmdbd.conf only)."""
    sh(name, "install -d -o mysql -g mysql -m 0755 /run/mysqld\n"
             "setsid /usr/sbin/mariadbd --user=mysql </dev/null >/dev/null 2>&1 &")
    wait_for(f"mariadbd on {name}", lambda: _sql(name, "SELECT 1").returncode == 0,
             timeout=60)
    secret = os.urandom(12).hex()
    done = _sql(name, "CREATE DATABASE IF NOT EXISTS slurm_acct_db;"
                f"CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '{secret}';"
                "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';")
    if done.returncode != 0:
        raise ClusterError(f"{name}: MariaDB's slurm_acct_db: {done.stderr.strip()}")
    on(name, ["sh", "-ec", "umask 077\ncat > /etc/slurm/slurmdbd.conf\n"
              "chown slurm:slurm /etc/slurm/slurmdbd.conf"], input=SLURMDBD_CONF.format(
                  host=name, secret=secret))


# slurmdbd.conf on the controller (slurm:slurm 0600: slurmdbd refuses others' reading it)
SLURMDBD_CONF = """# the cluster lab's slurmdbd (lab/cluster/rsacluster.py), MariaDB on this host
AuthType=auth/munge
DbdHost={host}
SlurmUser=slurm
LogFile=/var/log/slurm/slurmdbd.log
PidFile=/run/slurm/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass={secret}
StorageLoc=slurm_acct_db
"""


def _slurmdbd(name: str) -> None:
    """slurmdbd, then what the operator guide's accounting wants in it before slurmctld
    registers: the cluster, the lab users in one account (associations enforced), the
    lock-in QOS (for slurm.lockin.method qos)."""
    sh(name, "install -d -o slurm -g slurm /run/slurm\n/usr/sbin/slurmdbd" + QUIET)
    wait_for(f"slurmdbd on {name}", lambda: on(
        name, ["sacctmgr", "-n", "list", "cluster"], check=False).returncode == 0, timeout=60)
    cluster = next(line.split("=", 1)[1].strip() for line in (
        HERE / "files/etc/slurm/slurm.conf").read_text().splitlines()
        if line.startswith("ClusterName="))
    # one sacctmgr for the four (from its standard input), then the associations checked
    done = on(name, ["sacctmgr", "-i"], input="\n".join([
        f"add cluster {cluster}",
        f"add qos {LOCKIN_QOS} Priority=1000000",
        f"add account {ACCOUNT} Cluster={cluster}",
        f"add user {','.join((*USERS, 'root'))} Account={ACCOUNT} Cluster={cluster}", ""]))
    users = on(name, ["sacctmgr", "-n", "-P", "list", "assoc", f"account={ACCOUNT}",
                      "format=user"]).stdout.split()
    if sorted(users) != sorted((*USERS, "root")):
        raise ClusterError(f"{name}: sacctmgr made the associations {users}: "
                           f"{(done.stdout + done.stderr).strip()[-600:]}")


RSA_NODES = tuple(n for n, r in ROLES.items() if "sshd" in r)
RSAD = next(n for n, r in ROLES.items() if "rsad" in r)  # rsad's host
COMPUTE = tuple(n for n, r in ROLES.items() if "slurmd" in r)
POOL = "/var/lib/rsa-ram"  # the ram tier's pool: a tmpfs of its own on each RSA node
# above every ordinary job's: priority/basic's (no accounting) and multifactor's sum of
# weights (slurm.conf: 100000)
LOCKIN_PRIORITY = 4_294_967_000


def rsa_yaml() -> str:
    """/etc/rsa/rsa.yaml on rsad's host, as the operator guide has a site write it."""
    names = ssdpool.ram_names()  # every RSA node, or the ram tier's (RSA_CLUSTER_TIERS)
    return f"""\
# /etc/rsa/rsa.yaml of the cluster lab (lab/cluster/rsacluster.py; docs/lab.md)
pool:
  nodes:
    - names: "{names}"
      tier: ram
      capacity: {POOL_SIZE}
      pool_dir: {POOL}
      # the RAMDISKs' servers on the RSA data network (resolved by rsad: /etc/hosts)
      data_address: "{{name}}{NETWORKS["data"][2]}"
{ssdpool.ssd_group(NETWORKS["data"][2])}filesystem:
  # the compute nodes mount RAMDISKs from the RSA data network only
  client_networks: ["{net_of("data")}"]
ssh:
  key: /etc/rsa/id_ed25519
  known_hosts: /etc/rsa/known_hosts
health:
  # the pool is a small tmpfs: the default (1G free) drained a node whenever a probe found
  # anything in it, a live RAMDISK or what a teardown had not yet removed
  min_free: 64M
allocation:
  max_nodes: {len(RSA_NODES)}
  max_request: {len(RSA_NODES)}
staging:
  allowed_roots: [{PFS}/home]
slurm:
  lockin:
    # the default: a locked-in job keeps its own QOS (and is accounted under it)
    method: priority
    priority: {LOCKIN_PRIORITY}
daemon:
  api:
    # compute nodes reach rsad over the management network
    listen: "{hosts()[RSAD]}:7820"
"""


def _rsad(host: str) -> None:
    """The operator guide's steps 2 and 3 on rsad's host and the RSA nodes, then rsad as
    its unit runs it (ExecStartPre=rsad --check, ExecStart=rsad)."""
    sh(host, "ssh-keygen -q -t ed25519 -N '' -f /etc/rsa/id_ed25519\n"
              "chmod 600 /etc/rsa/id_ed25519")
    pub = on(host, ["cat", "/etc/rsa/id_ed25519.pub"]).stdout
    for node in RSA_NODES:
        on(node, ["sh", "-ec", "install -d -m 0700 /root/.ssh\n"
                  "cat > /root/.ssh/authorized_keys\n"
                  f"mkdir -p {POOL}\n"
                  f"mount -t tmpfs -o size={POOL_SIZE.lower()},mode=0700,nosuid,nodev,"
                  f"noexec rsa-ram {POOL}"],
           input=pub)
    # (the lab is its own admin: the host keys it scans are the ones sshd made just now)
    known = on(host, ["ssh-keyscan", "-t", "ed25519", *RSA_NODES]).stdout
    on(host, ["sh", "-ec", "cat > /etc/rsa/known_hosts"], input=known)
    # the package's rsa.yaml is root:root 0640 (its postinst): rewritten in place, kept
    # so; the same file on the compute nodes (their Prolog and Epilog read it)
    # (with rsad on a host of its own ctl keeps the package's: slurmctld's hooks find
    # rsad by client.conf)
    for node in (host, *COMPUTE):
        on(node, ["sh", "-ec", "cat > /etc/rsa/rsa.yaml"], input=rsa_yaml())
    sh(host, "rsa config check /etc/rsa/rsa.yaml >/dev/null\nrsad --check >/var/log/rsad.log 2>&1")
    sh(host, "setsid /usr/bin/rsad </dev/null >>/var/log/rsad.log 2>&1 &")
    wait_for(f"rsad's API on {host}", lambda: on(
        host, ["rsa", "nodes"], check=False).returncode == 0, timeout=30)


STORE_LOCK = "/var/lib/rsa/rsa.db.lock"  # rsad's store lock: holds its pid as text


def _rsad_pid(host: str) -> int | None:
    """The pid of the rsad holding the store on ``host`` (its lock file names it), if that
    process is rsad; None when none runs."""
    done = on(host, ["sh", "-c", f"p=$(cat {STORE_LOCK} 2>/dev/null) && "
                     "[ \"$(cat /proc/$p/comm 2>/dev/null)\" = rsad ] && echo $p"],
              check=False)
    text = done.stdout.strip()
    return int(text) if text.isdigit() else None


def restart_rsad(host: str = "") -> None:
    """``systemctl restart rsad`` as its unit does it (the lab runs no systemd): SIGTERM
    to the running rsad (the store lock's pid, checked to be rsad), wait for it to end
    (TimeoutStopSec=90), then ExecStartPre (``rsad --check``) and ExecStart, and wait
    for its API. The operator guide's upgrade restarts rsad so."""
    host = host or RSAD
    pid = _rsad_pid(host)
    if pid is not None:
        on(host, ["kill", "-TERM", str(pid)])
        wait_for(f"rsad (pid {pid}) on {host} to end", lambda: on(
            host, ["test", "-e", f"/proc/{pid}"], check=False).returncode != 0, timeout=90)
    sh(host, "rsad --check >>/var/log/rsad.log 2>&1")
    sh(host, "setsid /usr/bin/rsad </dev/null >>/var/log/rsad.log 2>&1 &")
    wait_for(f"rsad's API on {host}", lambda: on(
        host, ["rsa", "nodes"], check=False).returncode == 0, timeout=60)


# every host with slurm.conf's clients
SLURM_NODES = tuple(dict.fromkeys(("ctl", *COMPUTE, "login", RSAD)))
BB_CONF = """# burst_buffer.conf of the cluster lab's native mode (the operator guide's)
Directive=BB_LUA
StageInTimeout=86400
StageOutTimeout=86400
OtherTimeout=300
"""
BB_TYPE = "BurstBufferType=burst_buffer/lua"
# with slurmdbd, the burst buffer's TRES accounted (the operator guide's "Native mode"):
# sacct's bb/lua, and GrpTRES=bb/lua limits
BB_TRES = "AccountingStorageTRES=bb/lua"
# the operator guide's rsa-bb-pools.service, as its ExecStart runs it (no systemd here)
POOLS_SYNC = "/usr/bin/rsa-bb pools /run/rsa/bb-pools.json --every {every}"


def _pools_sync_pid() -> int | None:
    done = on("ctl", ["pgrep", "-f", "-o", "^/usr/bin/python3 /usr/bin/rsa-bb pools "],
              check=False)
    text = done.stdout.strip()
    return int(text) if text.isdigit() else None


def _restart_slurmctld() -> None:
    sh("ctl", "kill $(cat /run/slurm/slurmctld.pid)\n"
              "t=0; while [ -e /proc/$(cat /run/slurm/slurmctld.pid) ] && [ $t -lt 100 ]; "
              "do sleep 0.1; t=$((t+1)); done")
    _start("ctl", "slurmctld")
    wait_for("slurmd on every compute node idle", _slurm_nodes_idle, timeout=60)


def bb_poll_line() -> str:
    """burst_buffer.conf's ``PollInterval`` line from ``RSA_CLUSTER_BB_POLL`` (seconds):
    on Slurm 24.05+ a native job starts up to one poll after its stage-in and its
    stage-out ends up to one poll after rsad verified it. Unset: no line, Slurm's default
    (15 s), as a site that leaves it gets. Slurm 22.05 (Debian 12) knows no such key and
    its slurmctld stops on it: refused there."""
    every = os.environ.get("RSA_CLUSTER_BB_POLL", "")
    if not every:
        return ""
    if not every.isdigit() or not 1 <= int(every) <= 3600:
        raise ClusterError(f"RSA_CLUSTER_BB_POLL={every!r}: seconds, 1 to 3600")
    if release() == "12":
        raise ClusterError("RSA_CLUSTER_BB_POLL: Slurm 22.05 (Debian 12) has no PollInterval "
                           "(its burst_buffer/lua blocks in data_in); leave it unset there")
    return f"PollInterval={int(every)}\n"


def mode(which: str, every: int = 15) -> None:
    """Switch the running cluster between rsad's queue mode (as ``up`` makes it) and
    native mode, as the operator guide's "Native mode" has a site do it: on ctl the
    package's burst_buffer.lua next to slurm.conf, burst_buffer.conf, job_submit.lua's
    ``bb_directive = "BB_LUA"``, and rsa-bb-pools (the unit's ExecStart) writing rsad's
    pools where burst_buffer.lua reads them when rsad runs on a host of its own (on ctl
    rsad writes them there itself, ``slurm.bb_pools_file``); every
    host's slurm.conf ``BurstBufferType=burst_buffer/lua`` (and, with slurmdbd,
    ``AccountingStorageTRES=bb/lua``); rsa.yaml ``slurm.mode:
    native`` on rsad's host (and the compute nodes'). Then rsad restarted, then
    slurmctld (a new burst buffer plugin needs a restart). ``queue`` undoes all of it."""
    if which not in ("native", "queue"):
        raise ClusterError(f"mode {which!r}: native or queue")
    native = which == "native"
    conf = "/etc/slurm/slurm.conf"
    for node in SLURM_NODES:
        lines = [f"grep -v '^BurstBufferType=\\|^AccountingStorageTRES=' {conf} "
                 f"> {conf}.new || true", f"cat {conf}.new > {conf}", f"rm {conf}.new"]
        if native:
            lines.append(f"echo '{BB_TYPE}' >> {conf}")
            lines.append(f"! grep -q '^AccountingStorageType=accounting_storage/slurmdbd' "
                         f"{conf} || echo '{BB_TRES}' >> {conf}")
        sh(node, "\n".join(lines))
    directive = '"BB_LUA"' if native else "nil"
    sh("ctl", "\n".join([
        f"sed -i 's/^  bb_directive = .*,$/  bb_directive = {directive},/' "
        "/etc/slurm/job_submit.lua",
        f"grep -q '^  bb_directive = {directive},$' /etc/slurm/job_submit.lua"]))
    pid = _pools_sync_pid()
    if pid is not None:
        on("ctl", ["kill", str(pid)])
    if native:
        sh("ctl", "cp /usr/share/rsa-scheduler/slurm/burst_buffer.lua /etc/slurm/")
        on("ctl", ["sh", "-ec", "cat > /etc/slurm/burst_buffer.conf"],
           input=BB_CONF + bb_poll_line())
    else:
        sh("ctl", "rm -f /etc/slurm/burst_buffer.lua /etc/slurm/burst_buffer.conf "
                  "/run/rsa/bb-pools.json")
    for node in (RSAD, *COMPUTE):
        lines = ["sed -i '/^  mode: native$/d' /etc/rsa/rsa.yaml"]
        if native:
            lines.append("sed -i 's/^slurm:$/slurm:\\n  mode: native/' /etc/rsa/rsa.yaml")
            lines.append("grep -q '^  mode: native$' /etc/rsa/rsa.yaml")
        sh(node, "\n".join(lines))
    restart_rsad()
    if native and RSAD_ON_CTL:  # rsad writes slurm.bb_pools_file itself, on ctl
        wait_for("rsad's pools on ctl", lambda: on(
            "ctl", ["test", "-s", "/run/rsa/bb-pools.json"], check=False).returncode == 0,
            timeout=30)
    elif native:
        sh("ctl", "\n".join([
            "install -d -m 0755 /run/rsa",
            f"setsid {POOLS_SYNC.format(every=every)} </dev/null "
            ">>/var/log/rsa-bb-pools.log 2>&1 &"]))
        wait_for("rsad's pools on ctl", lambda: on(
            "ctl", ["test", "-s", "/run/rsa/bb-pools.json"], check=False).returncode == 0,
            timeout=30)
    _restart_slurmctld()
    log(f"mode {which}")


def install(node: str, debs: Sequence[str]) -> str:
    """``apt-get install ./PKG.deb ...`` on ``node``, as a site upgrades a host (the
    operator guide: the conffile /etc/rsa/rsa.yaml kept; an older version allowed too,
    for the previous release). The .debs are copied into the node's /tmp first. Returns
    the installed rsa-scheduler version."""
    names = []
    for deb in debs:
        name = Path(deb).name
        with open(deb, "rb") as f:
            done = subprocess.run(node_argv(_init(node), ["sh", "-c", f"cat > /tmp/{name}"]),
                                  stdin=f, capture_output=True, timeout=60, check=False,
                                  env={"PATH": HOST_PATH, MARK: node})
        if done.returncode != 0:
            raise ClusterError(f"{node}: copying {name}: {done.stderr.decode()[-300:]}")
        names.append(f"/tmp/{name}")
    on(node, ["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-qq",
              "--no-install-recommends", "--allow-downgrades",
              "-o", "Dpkg::Options::=--force-confdef", "-o", "Dpkg::Options::=--force-confold",
              *names], timeout=300)
    on(node, ["rm", "-f", *names])
    return on(node, ["dpkg-query", "-W", "-f", "${Version}", "rsa-scheduler"]).stdout


def previous() -> Path:
    """The previous release's .debs (lab/cluster/previous: an older commit's make deb,
    its SPANK package built for the release under test, cached)."""
    env = [f"{k}={os.environ[k]}" for k in ("RSA_CLUSTER_WORK", "RSA_CLUSTER_PREVIOUS",
                                            "RSA_LAB_DEBIAN", "RSA_DEBIAN_MIRROR",
                                            "RSA_DEB_WORK")
           if k in os.environ]
    done = run(["env", *env, str(HERE / "previous")], timeout=1800)
    return Path(done.stdout.strip().splitlines()[-1])


def _without_accounting() -> None:
    """slurm.conf on every host as a site without slurmdbd has it, and as the host lab's
    RSA_LAB_ACCOUNTING=0: no other Accounting* or Priority* line,
    accounting_storage/none, priority/basic, said: current Slurm's default is
    priority/multifactor (SchedMD's priority_multifactor page), and without the line the
    cluster on Debian 13 (Slurm 24.11) ran that, its weights all 0, not basic."""
    conf = "/etc/slurm/slurm.conf"
    for node in SLURM_NODES:
        sh(node, f"sed -i -e '/^Accounting/d' -e '/^Priority/d' {conf}\n"
                 f"echo AccountingStorageType=accounting_storage/none >> {conf}\n"
                 f"echo PriorityType=priority/basic >> {conf}")
    log("without accounting (RSA_CLUSTER_ACCOUNTING=0)")


def _with_prolog_flags(flags: str) -> None:
    """slurm.conf on every host with ``PrologFlags=flags`` (:func:`prolog_flags`)."""
    conf = "/etc/slurm/slurm.conf"
    for node in SLURM_NODES:
        sh(node, f"sed -i '/^PrologFlags=/d' {conf}\necho PrologFlags={flags} >> {conf}")
    log(f"PrologFlags={flags} (RSA_CLUSTER_PROLOG_FLAGS)")


def slurm_conf(text: str) -> str:
    """The image's slurm.conf with this cluster's compute nodes: one NodeName line per
    node (the first one's the pattern) and every partition on all of them."""
    node_lines = [ln for ln in text.splitlines() if ln.startswith("NodeName=")]
    pattern = node_lines[0].split()[0].removeprefix("NodeName=")
    out: list[str] = []
    for line in text.splitlines():
        if line.startswith("NodeName="):
            if line == node_lines[0]:
                out += [line.replace(pattern, node) for node in COMPUTE]
            continue
        if line.startswith("PartitionName="):
            line = re.sub(r"\bNodes=\S+", f"Nodes={','.join(COMPUTE)}", line)
        out.append(line)
    return "\n".join(out) + "\n"


def _slurm_conf_nodes() -> None:
    """slurm.conf on every host with the cluster's compute nodes (:func:`slurm_conf`)."""
    text = slurm_conf((HERE / "files/etc/slurm/slurm.conf").read_text())
    for node in SLURM_NODES:
        on(node, ["sh", "-ec", "cat > /etc/slurm/slurm.conf"], input=text)


def _slurm_nodes_idle() -> bool:
    out = on("ctl", ["sinfo", "-h", "-N", "-o", "%N %T"], check=False).stdout
    states = dict(line.split() for line in out.splitlines() if len(line.split()) == 2)
    return all(states.get(n) == "idle" for n, r in ROLES.items() if "slurmd" in r)


# ---- the commands ----

def up() -> None:
    t0 = time.monotonic()
    state = load_state()
    asked = {k: v for k, v in wanted_shape().items()
             if f"RSA_CLUSTER_{k.upper()}" in os.environ}
    if state and any(SHAPE[k] != v for k, v in asked.items()):
        raise ClusterError(f"a cluster lab of {COUNT} compute and {COUNT} RSA nodes, "
                           f"{POOL_SIZE} pools, is up: lab/cluster/clusterctl down first "
                           "to bring it up in another shape")
    ssdpool.check_asked()  # nor other tiers (RSA_CLUSTER_TIERS)
    if state:
        if COMPLETE.exists() and set(state) == {"switch", *ROLES} and all(
                ours(e, n) for n, e in state.items()):
            log("already up")
            return
        raise ClusterError(f"a cluster lab was left half up ({STATE_FILE}): run "
                           "lab/cluster/clusterctl down first")
    table = addresses()
    debian = release()
    root = image()
    MNT.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(PFS_CHUNKS, ignore_errors=True)  # ours: what a killed lab left
    PFS_CHUNKS.mkdir(mode=0o700)
    STATE.mkdir(parents=True, exist_ok=True)
    SHAPE_FILE.write_text(json.dumps(SHAPE) + "\n")
    IMAGE_FILE.write_text(f"{root}\n")  # lab/cluster/image rebuilds no image in use
    try:
        ssdpool.prepare()  # the ssd pools' devices and caps (RSA_CLUSTER_TIERS=mixed)
        nodecgroup.prepare()  # the RSA nodes' cgroup v2 subtrees' directory
        sw = _hold("switch", ["unshare", "--net", "--", "sh", "-c", SWITCH], {})
        switch = int(str(sw["init"]))
        for bridge, _dev, _suffix in NETWORKS.values():
            for cmd in (["ip", "link", "add", bridge, "type", "bridge"],
                        ["ip", "link", "set", bridge, "up"]):
                run(["nsenter", "-t", str(switch), "-n", "--", *cmd], node="switch")
        for name in ROLES:
            binds, ro_binds = harness_binds(name)
            if "mfschunkserver" in ROLES[name]:
                binds.append(PFS_CHUNKS)
            ssdpool.add_binds(name, binds, ro_binds)
            entry = _boot(name, root, binds, ro_binds, nodecgroup.make(name))
            for net, addr in table[name].items():
                _wire(switch, name, int(str(entry["init"])), net, addr)
            if RSAD_ON_CTL:
                on(name, ["sh", "-ec", "cat > /etc/hosts"], input=hosts_file(
                    (HERE / "files/etc/hosts").read_text(), "ctl"))
        ssdpool.mount_pools()
        if COMPUTE != ("c1", "c2"):
            _slurm_conf_nodes()
        if not accounting():
            _without_accounting()
        if prolog_flags():
            _with_prolog_flags(prolog_flags())
        for name in ROLES:  # rsad last, wherever it runs (it reaches every other)
            for daemon in daemons_of(name):
                if daemon != "rsad":
                    _start(name, daemon)
        _start(RSAD, "rsad")
        wait_for("slurmd on every compute node idle", _slurm_nodes_idle, timeout=60)
    except BaseException:
        log("up failed: the nodes' daemon logs are kept in " + str(LOGS))
        _save_logs()
        log("taking down what was started")
        down()
        raise
    COMPLETE.write_text("up\n")
    where = ", ".join(f"{n} {table[n]['mgmt']}" for n in ROLES)
    log(f"up (Debian {debian}) in {time.monotonic() - t0:.1f}s: {where}")


def _save_logs() -> None:
    """Each node's daemon logs, copied out before the node goes (LOGS/<node>.logs)."""
    for name, entry in load_state().items():
        if name == "switch" or ours(entry, name) is None:
            continue
        done = on(name, ["sh", "-c", "tail -n 30 /var/log/slurm/*.log /var/log/munge/*.log"
                         " /var/log/rsad.log 2>/dev/null"], check=False)
        (LOGS / f"{name}.logs").write_text(done.stdout)


def _all_gone(pids: list[int]) -> bool:
    return all(_marked(pid) is None for pid in pids)


def down() -> None:
    """Kill every node's PID 1 (the kernel kills the rest of its PID namespace; its
    mounts, veth and namespaces go with its last process), then the switch."""
    state = load_state()
    holders: list[int] = []
    for name, entry in state.items():
        init = ours(entry, name)
        if init is not None:
            os.kill(init, signal.SIGKILL)
        holder = entry.get("holder")
        if isinstance(holder, int) and _marked(holder) == name:
            holders.append(holder)
    deadline = time.monotonic() + 30
    for holder in holders:
        while _marked(holder) is not None and time.monotonic() < deadline:
            time.sleep(0.1)
    # then every process that still carries the lab's mark (a node whose PID 1 an up
    # killed half-way never recorded, a holder that did not end): each is the lab's own
    for _ in range(3):
        marked = [int(p.name) for p in Path("/proc").iterdir()
                  if p.name.isdigit() and _marked(int(p.name)) is not None]
        if not marked:
            break
        for pid in marked:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        wait_for("the lab's processes to end", functools.partial(_all_gone, marked),
                 timeout=30)
    shutil.rmtree(PFS_CHUNKS, ignore_errors=True)
    ssdpool.release()  # the nodes' mounts are gone: the ssd pools' devices can go
    nodecgroup.release()  # and the RSA nodes' cgroups (leftovers reports what is left)
    left = leftovers()
    if left:
        raise ClusterError("down left:\n  " + "\n  ".join(left))
    COMPLETE.unlink(missing_ok=True)
    STATE_FILE.unlink(missing_ok=True)
    SHAPE_FILE.unlink(missing_ok=True)
    IMAGE_FILE.unlink(missing_ok=True)
    shutil.rmtree(DOOR_DIR, ignore_errors=True)
    log("down")


def leftovers() -> list[str]:
    """Everything of the cluster lab still there: marked processes (a node's holder or
    PID 1), links named rsacl* in the host's network namespace, mounts of the lab's in
    the host's mount namespace, the PFS's chunk directory, the ssd pools' devices, the RSA
    nodes' cgroups."""
    left: list[str] = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and (name := _marked(int(proc.name))) is not None:
            try:
                comm = (proc / "comm").read_text().strip()
            except OSError:
                continue
            left.append(f"process {proc.name} ({comm}) of node {name}")
    links = run(["ip", "-o", "link", "show"], check=False).stdout  # the host's
    for line in links.splitlines():
        fields = line.split(":")
        if len(fields) > 1 and fields[1].strip().split("@")[0].startswith(PREFIX):
            left.append(f"link {fields[1].strip()} in the host's network namespace")
    for mountinfo in (Path("/proc/self/mountinfo"), Path("/proc/1/mountinfo")):
        for line in mountinfo.read_text().splitlines():
            if str(WORK) in line or f"{PREFIX}-" in line:
                left.append(f"mount {line.split()[4]} ({mountinfo})")
    if PFS_CHUNKS.exists():
        left.append(f"the PFS's chunks {PFS_CHUNKS}")
    left += ssdpool.leftovers()
    left += nodecgroup.leftovers()
    return left


def status() -> int:
    state = load_state()
    if not state:
        print("cluster: down")
        return 1
    bad = 0
    table = hosts()
    for name in ROLES:
        daemons = daemons_of(name)
        entry = state.get(name)
        if not entry or ours(entry, name) is None:
            print(f"{name}: DOWN")
            bad = 1
            continue
        comms = set(on(name, ["ps", "-e", "-o", "comm="]).stdout.split())
        missing = [d for d in daemons if COMM.get(d, d) and COMM.get(d, d) not in comms]
        bad |= bool(missing)
        print(f"{name} {table[name]}: {'up' if not missing else 'MISSING ' + ' '.join(missing)}"
              f" ({', '.join(daemons) or 'no daemons yet'})")
    if ours(state.get("ctl", {}), "ctl"):
        print(on("ctl", ["sinfo"], check=False).stdout.rstrip())
    return bad


def check_clean() -> int:
    left = leftovers()
    if STATE_FILE.exists():
        left.append(f"state file {STATE_FILE}")
    for item in left:
        print(f"cluster check-clean: left: {item}")
    if not left:
        print("cluster check-clean: clean")
    return 1 if left else 0


def verify_check_clean() -> int:
    """check-clean must see what it is for: with the cluster down, a planted marked
    process in a network namespace of its own (as a node's holder) makes it fail naming
    the process, and so does a planted cgroup directory of the RSA nodes'
    (nodecgroup.plant); once they are removed (the process killed by PID) it passes
    again."""
    if STATE_FILE.exists():
        print("cluster: verify-check-clean runs with the cluster down", file=sys.stderr)
        return 2
    if check_clean() != 0:
        return 1
    plant = subprocess.Popen(["unshare", "--net", "--", "sleep", "300"],
                             stdin=subprocess.DEVNULL, env={"PATH": HOST_PATH, MARK: "plant"})
    try:
        # past unshare's exec of sleep: during an exec /proc/PID/environ can be unreadable
        wait_for("the planted process", lambda: _marked(plant.pid) == "plant" and _comm(
            plant.pid) == "sleep", timeout=10)
        seen = [x for x in leftovers() if f"process {plant.pid} " in x]
    finally:
        os.kill(plant.pid, signal.SIGKILL)
        plant.wait(timeout=30)
    if not seen:
        print(f"cluster verify-check-clean: FAILED: a planted process {plant.pid} was not "
              "seen", file=sys.stderr)
        return 1
    if (cgroup := nodecgroup.plant()) is not None:  # the RSA nodes' cgroups, as left
        try:
            seen += [x for x in leftovers() if x.startswith(f"cgroup {cgroup} ")][:1]
        finally:
            nodecgroup.release()
        if len(seen) < 2:
            print(f"cluster verify-check-clean: FAILED: a planted cgroup {cgroup} was not "
                  "seen", file=sys.stderr)
            return 1
    if check_clean() != 0:
        return 1
    print(f"cluster verify-check-clean: ok (saw {'; '.join(seen)}; clean once they were "
          "removed)")
    return 0


USAGE = """usage: lab/cluster/clusterctl up|down|status|check-clean|verify-check-clean|image
       lab/cluster/clusterctl node NAME CMD...   (run CMD on node NAME, as root)
       lab/cluster/clusterctl install NAME DEB...   (apt-get install the .debs on NAME)
       lab/cluster/clusterctl restart-rsad   (as systemctl restart rsad would)
       lab/cluster/clusterctl lab-test PYTEST-ARGS...   (the repository's lab tests on
           rsad's host: up with RSA_CLUSTER_HARNESS=<repository>; docs/lab.md)
       lab/cluster/clusterctl lab-run CMD...   (the same way, any command: the demo)
       lab/cluster/clusterctl previous   (build or find the previous release's .debs)
       lab/cluster/clusterctl mode native|queue   (switch rsad and Slurm's burst buffer)"""


def main(argv: Sequence[str]) -> int:
    if os.geteuid() != 0:
        print("cluster: run as root (namespaces, mounts)", file=sys.stderr)
        return 2
    if not argv:
        print(USAGE, file=sys.stderr)
        return 2
    try:
        cmd, rest = argv[0], list(argv[1:])
        if cmd == "up":
            up()
        elif cmd == "down":
            down()
        elif cmd == "status":
            return status()
        elif cmd == "check-clean":
            return check_clean()
        elif cmd == "verify-check-clean":
            return verify_check_clean()
        elif cmd == "image":
            print(image())
        elif cmd == "install" and len(rest) >= 2:
            print(install(rest[0], rest[1:]))
        elif cmd == "restart-rsad" and not rest:
            restart_rsad()
        elif cmd == "mode" and len(rest) == 1:
            mode(rest[0])
        elif cmd == "lab-test":
            import harness  # the repository's lab tests on rsad's host (docs/lab.md)
            return harness.lab_test(rest)
        elif cmd == "lab-run" and rest:
            import harness
            return harness.lab_run(rest)
        elif cmd == "previous" and not rest:
            print(previous())
        elif cmd == "node" and len(rest) >= 2:
            entry = load_state().get(rest[0])
            init = ours(entry, rest[0]) if entry else None
            if init is None:
                print(f"cluster: node {rest[0]} is not up", file=sys.stderr)
                return 2
            os.environ[MARK] = rest[0]  # nsenter, in the node's namespaces, is the lab's
            os.execvp("nsenter", node_argv(init, rest[1:]))
        else:
            print(USAGE, file=sys.stderr)
            return 2
    except ClusterError as e:
        print(f"cluster: {e}", file=sys.stderr)
        return 1
    return 0
