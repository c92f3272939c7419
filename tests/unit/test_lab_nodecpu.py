"""The lab's cpu cgroup for its RSA nodes (lab/rsalab/nodecpu.py, issue 34): the setting,
where the cgroup goes on a cgroup v1 cpu hierarchy (this host's) and on a cgroup2 one, the
weight each is written as, and the wrapper that starts a node's sshd in it — on a scratch
tree standing in for /proc and /sys/fs/cgroup (nothing of the host's is touched)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "lab"))
try:
    from rsalab import common, nodecpu  # type: ignore[import-not-found]
finally:
    sys.path.remove(str(ROOT / "lab"))

# this host's layout: cpu on a v1 hierarchy, cgroup2 with hugetlb only
V1_MOUNTINFO = """\
25 1 0:22 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
26 25 0:23 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
27 25 0:24 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
28 25 0:25 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate
"""
V2_MOUNTINFO = "30 1 0:26 / /sys/fs/cgroup rw,nosuid shared:9 - cgroup2 cgroup2 rw\n"


def host(tmp: Path, mountinfo: str, proc_cgroup: str) -> Any:
    (tmp / "mountinfo").write_text(mountinfo)
    (tmp / "cgroup").write_text(proc_cgroup)
    return nodecpu.Paths(mountinfo=tmp / "mountinfo", proc_cgroup=tmp / "cgroup", root=tmp)


def v1_host(tmp: Path, own: str = "/") -> Any:
    for d in ("cpu", "cpuacct", "unified"):
        (tmp / "sys/fs/cgroup" / d / own.lstrip("/")).mkdir(parents=True)
    (tmp / "sys/fs/cgroup/unified/cgroup.controllers").write_text("hugetlb\n")
    return host(tmp, V1_MOUNTINFO, f"2:cpuacct:/\n1:cpu:{own}\n0::/\n")


def v2_host(tmp: Path, enabled: str) -> Any:
    top = tmp / "sys/fs/cgroup"
    (top / "lab.slice").mkdir(parents=True)
    (top / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (top / "lab.slice/cgroup.subtree_control").write_text(enabled + "\n")
    return host(tmp, V2_MOUNTINFO, "0::/lab.slice\n")


@pytest.mark.parametrize("text,want", [("", None), ("  ", None), ("1", 1), ("100", 100),
                                       ("10000", 10000)])
def test_weight_setting(text: str, want: int | None) -> None:
    assert nodecpu.parse_weight(text) == want


@pytest.mark.parametrize("text", ["0", "10001", "-5", "low", "1.5"])
def test_a_bad_weight_says_what_to_use(text: str) -> None:
    with pytest.raises(ValueError, match=r"RSA_LAB_NODE_CPU_WEIGHT=.*1 to 10000"):
        nodecpu.parse_weight(text)


def test_v1_cpu_hierarchy_gets_cpu_shares(tmp_path: Path) -> None:
    where = v1_host(tmp_path)
    slot = nodecpu.locate(where)
    assert (slot.parent, slot.version) == (tmp_path / "sys/fs/cgroup/cpu", 1)
    assert nodecpu.existing(where) is None and nodecpu.leftovers(where) == []
    made = nodecpu.make(1, where)
    assert made == tmp_path / "sys/fs/cgroup/cpu" / nodecpu.NAME
    # the kernel's map of cpu.weight to shares: 1 -> 10, 100 -> 1024 (a plain process)
    assert (made / "cpu.shares").read_text() == "10\n"
    assert slot.value(100) == 1024 and slot.value(10000) == 102400
    assert nodecpu.existing(where) == made
    assert nodecpu.leftovers(where) == [f"cpu cgroup {made} (processes: none)"]


def test_v1_below_the_labs_own_cgroup(tmp_path: Path) -> None:
    where = v1_host(tmp_path, own="/ci/runner")
    assert nodecpu.locate(where).path == (tmp_path / "sys/fs/cgroup/cpu/ci/runner"
                                          / nodecpu.NAME)


def test_v2_with_cpu_enabled_gets_cpu_weight(tmp_path: Path) -> None:
    where = v2_host(tmp_path, "cpu memory")
    made = nodecpu.make(50, where)
    assert made == tmp_path / "sys/fs/cgroup/lab.slice" / nodecpu.NAME
    assert (made / "cpu.weight").read_text() == "50\n"


def test_v2_without_cpu_enabled_is_one_line_and_changes_nothing(tmp_path: Path) -> None:
    where = v2_host(tmp_path, "memory")
    with pytest.raises(common.LabError, match=r"cpu is not enabled in .*lab.slice/cgroup"
                                              r"\.subtree_control"):
        nodecpu.make(50, where)
    assert not (tmp_path / "sys/fs/cgroup/lab.slice" / nodecpu.NAME).exists()
    assert nodecpu.wrap(["/bin/true"], where) == ["/bin/true"]


def test_wrap_starts_the_command_in_the_cgroup(tmp_path: Path) -> None:
    """The wrapper moves itself (same PID) into the cgroup, then execs the command."""
    where = v1_host(tmp_path)
    assert nodecpu.wrap(["/bin/true"], where) == ["/bin/true"]  # none made: as before
    made = nodecpu.make(1, where)
    (made / "cgroup.procs").write_text("")
    argv = nodecpu.wrap(["/bin/sh", "-c", "echo $$"], where)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True)
    assert (made / "cgroup.procs").read_text().split() == [done.stdout.strip()]
    assert nodecpu.members(made) == [int(done.stdout)]
