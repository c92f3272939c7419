"""The RSA nodes' CPU share: their processes in a cgroup of their own with a lower CPU
weight (issue 34), standing in for the separate machines they are on a site.

On a site the RSA nodes' copies (rsync, tar, the MooseFS servers) run on machines of their
own; in the lab they share this host's cores with rsad. With ``RSA_LAB_NODE_CPU_WEIGHT``
set (cgroup v2 ``cpu.weight`` units, 1..10000: 100 is a plain process's), lab-up makes the
cgroup :data:`NAME` below the lab's own cgroup of the host's cpu controller and starts
every RSA node's sshd in it, so whatever rsad runs there (an SSH session's commands and
the servers they start) inherits it. Empty (the default): no cgroup, as before.

Where the cpu controller is: a cgroup2 hierarchy that offers it (``cgroup.controllers``)
with ``cpu`` enabled in the lab's own cgroup's ``cgroup.subtree_control`` gets
``cpu.weight``; otherwise a cgroup v1 ``cpu`` hierarchy gets ``cpu.shares`` (the same CFS
weight: weight × 1024 / 100, as the kernel maps it; at least 2). This host's cgroup2
offers no cpu controller (it is bound to the v1 hierarchy at ``/sys/fs/cgroup/cpu``), so
here it is v1's. The per-job cgroups of rsa_scheduler/contain.py are cgroup2's and
independent of this one there; on a host whose cpu controller is cgroup2's a contained
command leaves this cgroup for its job's (``<cgroup2>/rsa.jobs/<job>``) and runs at the
root's weight.

lab-down kills what is left in the cgroup (only the lab puts processes there) and removes
it; check-clean reports it when it is left (:func:`leftovers`). Nothing else of the host's
cgroups is changed: a controller that is not enabled where the lab would need it fails
lab-up with one line saying so.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .common import LabError

#: the lab's cgroup for its RSA nodes, below the lab's own cgroup of the cpu controller
NAME = "rsa-lab.nodes"


@dataclass(frozen=True)
class Paths:
    """Where the kernel's files are (tests use a scratch tree)."""

    mountinfo: Path = Path("/proc/self/mountinfo")
    proc_cgroup: Path = Path("/proc/self/cgroup")
    # prepended to every mount point read from mountinfo (tests: the scratch tree)
    root: Path = Path("/")


HOST = Paths()


@dataclass(frozen=True)
class Slot:
    """Where the cgroup goes and how its weight is written."""

    parent: Path  # the lab's own cgroup in the hierarchy with the cpu controller
    version: int  # 2: cpu.weight; 1: cpu.shares

    @property
    def path(self) -> Path:
        return self.parent / NAME

    @property
    def weight_file(self) -> str:
        return "cpu.weight" if self.version == 2 else "cpu.shares"

    def value(self, weight: int) -> int:
        """``weight`` (cpu.weight units) as this hierarchy writes it."""
        return weight if self.version == 2 else max(2, round(weight * 1024 / 100))


def parse_weight(text: str) -> int | None:
    """RSA_LAB_NODE_CPU_WEIGHT: None when empty (off), else 1..10000."""
    t = text.strip()
    if not t:
        return None
    if not t.isdigit() or not 1 <= int(t) <= 10000:
        raise ValueError(f"RSA_LAB_NODE_CPU_WEIGHT={text!r}: use a cpu.weight from 1 to "
                         "10000 (100 is a plain process's; empty: no cgroup)")
    return int(t)


def _mounts(where: Paths) -> list[tuple[Path, str, set[str]]]:
    """(mount point, fs type, super options) of each cgroup mount."""
    found = []
    for line in where.mountinfo.read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if len(fields) < 5 or len(rest) < 3 or rest[0] not in ("cgroup", "cgroup2"):
            continue
        found.append((where.root / fields[4].lstrip("/"), rest[0], set(rest[2].split(","))))
    return found


def _own(where: Paths, v1_controller: str | None) -> str | None:
    """The lab's own cgroup path: in the v1 hierarchy with ``v1_controller``, or the v2 one
    (None)."""
    for line in where.proc_cgroup.read_text().splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if v1_controller is None and parts[0] == "0" and parts[1] == "":
            return parts[2]
        if v1_controller is not None and v1_controller in parts[1].split(","):
            return parts[2]
    return None


def locate(where: Paths = HOST) -> Slot:
    """Where the lab's node cgroup goes; raises LabError (one line) when it cannot."""
    mounts = _mounts(where)
    v2_why = ""
    for mnt, fstype, _opts in mounts:
        if fstype != "cgroup2":
            continue
        own = _own(where, None)
        try:
            offered = (mnt / "cgroup.controllers").read_text().split()
        except OSError:
            offered = []
        if "cpu" not in offered or own is None:
            v2_why = f"{mnt} offers no cpu controller"
            break
        parent = mnt / own.lstrip("/")
        if "cpu" in (parent / "cgroup.subtree_control").read_text().split():
            return Slot(parent, 2)
        v2_why = (f"cpu is not enabled in {parent}/cgroup.subtree_control "
                  f"(echo +cpu > that file, or leave RSA_LAB_NODE_CPU_WEIGHT empty)")
        break
    for mnt, fstype, opts in mounts:
        if fstype == "cgroup" and "cpu" in opts:
            own = _own(where, "cpu")
            if own is not None:
                return Slot(mnt / own.lstrip("/"), 1)
    raise LabError("RSA_LAB_NODE_CPU_WEIGHT: no cgroup with the cpu controller for the "
                   f"RSA nodes: {v2_why or 'no cgroup2 hierarchy'}, and no cgroup v1 cpu "
                   "hierarchy")


def existing(where: Paths = HOST) -> Path | None:
    """The lab's node cgroup, if it exists (a host without a cpu controller has none)."""
    try:
        path = locate(where).path
    except (LabError, OSError):
        return None
    return path if path.is_dir() else None


def make(weight: int, where: Paths = HOST) -> Path:
    """Create the cgroup with ``weight``; its path."""
    slot = locate(where)
    slot.path.mkdir(exist_ok=True)
    (slot.path / slot.weight_file).write_text(f"{slot.value(weight)}\n")
    return slot.path


def wrap(argv: Sequence[str], where: Paths = HOST) -> list[str]:
    """``argv`` started in the lab's node cgroup when there is one (same PID: the shell
    moves itself, then execs), else ``argv`` itself."""
    path = existing(where)
    if path is None:
        return list(argv)
    return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(path / "cgroup.procs"),
            *argv]


def members(path: Path) -> list[int]:
    try:
        return [int(p) for p in (path / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def release(where: Paths = HOST, wait: float = 10.0) -> None:
    """Kill what is left in the cgroup (the lab's RSA nodes' processes: only the lab puts
    any there), then remove it."""
    path = existing(where)
    if path is None:
        return
    for pid in members(path):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + wait
    while True:  # a killed process leaves its cgroup a moment later
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as e:
            if time.monotonic() > deadline:
                raise LabError(f"cannot remove {path}: {e} (left: {members(path)})") from e
            time.sleep(0.1)


def leftovers(where: Paths = HOST) -> list[str]:
    """What check-clean reports: the cgroup, if lab-down did not remove it."""
    path = existing(where)
    return [f"cpu cgroup {path} (processes: {members(path) or 'none'})"] if path else []
