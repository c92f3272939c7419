"""The cluster lab's RSA nodes' cgroup v2 (issue 30): each RSA node gets a subtree of this
host's cgroup2 hierarchy of its own, delegated to it, as an RSA node of its own runs
systemd on cgroup v2 and rsad's commands there (rsa_scheduler/contain.py: CONTAIN, REAP,
FENCE) make their jobs' cgroups ``<cgroup2>/rsa.jobs/<job>`` in it.

Owns where those subtrees are, their making at ``up``, their removal at ``down`` and their
report by ``check-clean``. rsacluster.py calls it at a few points: ``up`` (:func:`prepare`
before the nodes boot, :func:`make` for each node: an RSA node's path goes to the node's
PID 1, which joins it and binds it at :data:`IN_NODE`), ``down`` (:func:`release`, once the
nodes are gone) and ``leftovers`` (:func:`leftovers`).

Where: below the lab's own cgroup of this host's cgroup2 hierarchy (``clusterctl``'s, from
``/proc/self/cgroup``), a directory of this cluster's (``rsa-cluster[-NAME]``: other
clusters and the sandboxes' labs have their own beside it), and in it one per RSA node
(``rsa1``...). This host is hybrid (v1 controllers, cgroup2 at
``/sys/fs/cgroup/unified``, no controller enabled in it): a node sees its subtree there
too, as the root of the only cgroup2 mount in its mount namespace, and nothing above it.
The node's PID 1 is in it; the commands the door (``nsenter``) starts on the node, its
sshd among them, stay in the host cgroup they were started from, and a command of rsad's
moves itself into its job's cgroup as root (the node is not in a cgroup namespace of its
own: nothing about nsdelegate's boundaries stops that move). Processes in the subtree are
the cluster's own (only its nodes put any there): ``down`` kills what is left
(``cgroup.kill``) and removes it deepest first.

Without a cgroup2 hierarchy on this host the nodes get none, as before, and ``up`` says so.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

import rsacluster as rc

LAB = Path(__file__).resolve().parent.parent  # <repo>/lab: the host lab's package
if str(LAB) not in sys.path:
    sys.path.append(str(LAB))
# where the kernel's files are (tests use a scratch tree): the host lab's RSA-node cgroup's
from rsalab.nodecpu import Paths  # noqa: E402

#: where an RSA node sees its subtree (a hybrid host's place for cgroup2; the node's
#: /sys/fs/cgroup is a tmpfs with the v1 name=systemd hierarchy Slurm wants)
IN_NODE = "/sys/fs/cgroup/unified"

HOST = Paths()


def own_cgroup2(mountinfo: str, proc_cgroup: str) -> Path | None:
    """This process's cgroup in the cgroup2 hierarchy as a path of the file system (its
    first cgroup2 mount joined with the ``0::`` line of ``/proc/self/cgroup``), or None
    without a cgroup2 mount or that line."""
    mount = None
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields = left.split()
        if right.split()[:1] == ["cgroup2"] and len(fields) > 4:
            mount = fields[4]
            break
    own = next((line[3:] for line in proc_cgroup.splitlines() if line.startswith("0::")),
               None)
    if mount is None or own is None or not own.startswith("/"):
        return None
    return Path(mount) / own.lstrip("/")


def top(where: Paths = HOST) -> Path | None:
    """This cluster's directory of node cgroups, None without cgroup2 on this host."""
    own = own_cgroup2(where.mountinfo.read_text(), where.proc_cgroup.read_text())
    if own is None:
        return None
    return where.root / own.relative_to("/") / f"rsa-cluster{rc.SUFFIX}"


def prepare(where: Paths = HOST) -> None:
    """Before the nodes boot: what a killed cluster of this name left removed (its nodes
    are gone: ``up`` found none), this cluster's directory made; says when there is no
    cgroup2 to make it in."""
    release(where)
    base = top(where)
    if base is None:
        rc.log("no cgroup2 hierarchy on this host: the RSA nodes get no cgroup v2 (rsad's "
               "commands there are killed by their environment tag at the job's end)")
        return
    base.mkdir(mode=0o755)


def make(name: str, where: Paths = HOST) -> Path | None:
    """Node ``name``'s cgroup, made, if it is an RSA node and the host has cgroup2."""
    base = top(where)
    if name not in rc.RSA_NODES or base is None or not base.is_dir():
        return None
    path = base / name
    path.mkdir(mode=0o755)
    return path


def members(path: Path) -> list[int]:
    """The processes in ``path`` and below (PIDs as this host sees them)."""
    found: list[int] = []
    for procs in sorted(path.rglob("cgroup.procs")):
        with contextlib.suppress(OSError, ValueError):
            found += [int(p) for p in procs.read_text().split()]
    return found


def release(where: Paths = HOST, wait: float = 10.0) -> list[str]:
    """Kill what is left in this cluster's directory (only its nodes put processes there)
    and remove it, deepest first; what could not be removed (check-clean reports it)."""
    base = top(where)
    if base is None or not base.is_dir():
        return []
    kill = base / "cgroup.kill"
    if kill.exists():
        kill.write_text("1\n")
    else:  # kernels before 5.14
        for pid in members(base):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + wait
    while members(base) and time.monotonic() < deadline:  # a killed process leaves later
        time.sleep(0.1)
    problems: list[str] = []
    for d in sorted((p for p in base.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        try:
            d.rmdir()
        except OSError as e:
            problems.append(f"cgroup {d}: {e.strerror}")
    try:
        base.rmdir()
    except OSError as e:
        problems.append(f"cgroup {base}: {e.strerror}")
    return problems


def plant(where: Paths = HOST) -> Path | None:
    """For verify-check-clean (the cluster down): this cluster's directory as a killed
    cluster leaves it (a node's and a job's cgroup in it); None without cgroup2 here.
    :func:`release` removes it."""
    base = top(where)
    if base is None:
        return None
    (base / rc.RSA_NODES[0] / "rsa.jobs" / "1").mkdir(parents=True)
    return base


def leftovers(where: Paths = HOST) -> list[str]:
    """What check-clean reports: this cluster's cgroup directory, if ``down`` left it."""
    base = top(where)
    if base is None or not base.is_dir():
        return []
    return [f"cgroup {base} (processes: {members(base) or 'none'})"]
