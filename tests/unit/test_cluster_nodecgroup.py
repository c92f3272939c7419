"""lab/cluster/nodecgroup.py's pure parts: where the RSA nodes' cgroup v2 subtrees go on
this host's layouts, which nodes get one, what ``down`` removes and what check-clean
reports, and what a node's PID 1 is handed — on a scratch tree (no cgroup is made: the
cluster lab's own run, tests/security/test_reap.py there, is the real one)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "lab" / "cluster"))
try:
    import nodecgroup  # type: ignore[import-not-found]
    import rsacluster  # type: ignore[import-not-found]
finally:
    sys.path.remove(str(ROOT / "lab" / "cluster"))

# this host's layout: hybrid, cgroup2 at /sys/fs/cgroup/unified (lines of its mountinfo)
HYBRID = """\
25 1 0:23 / / rw,relatime - overlay overlay rw
30 29 0:26 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
31 30 0:27 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate
32 30 0:28 / /sys/fs/cgroup/cpu rw,nosuid,nodev,noexec,relatime - cgroup cgroup rw,cpu
"""
UNIFIED = "40 1 0:30 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
V1_ONLY = "32 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"


@pytest.mark.parametrize("mountinfo,proc_cgroup,own", [
    (HYBRID, "1:cpu:/\n0::/\n", "/sys/fs/cgroup/unified"),
    (HYBRID, "1:cpu:/x\n0::/rsa-sandbox-a\n", "/sys/fs/cgroup/unified/rsa-sandbox-a"),
    (UNIFIED, "0::/user.slice/session-1.scope\n",
     "/sys/fs/cgroup/user.slice/session-1.scope"),
])
def test_own_cgroup2_is_the_mount_joined_with_the_process_s_path(
        mountinfo: str, proc_cgroup: str, own: str) -> None:
    assert nodecgroup.own_cgroup2(mountinfo, proc_cgroup) == Path(own)


@pytest.mark.parametrize("mountinfo,proc_cgroup", [
    (V1_ONLY, "1:cpu:/\n"),  # a v1-only host
    (HYBRID, "1:cpu:/\n"),  # no 0:: line
    (HYBRID, "0::garbage\n"),
])
def test_no_own_cgroup2_without_a_mount_or_a_path(mountinfo: str, proc_cgroup: str) -> None:
    assert nodecgroup.own_cgroup2(mountinfo, proc_cgroup) is None


@pytest.fixture
def scratch(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> nodecgroup.Paths:
    """A hybrid host in tmp_path (the lab in its cgroup2 root) and a cluster named t with
    RSA nodes rsa1, rsa2."""
    (tmp_path / "mountinfo").write_text(HYBRID)
    (tmp_path / "cgroup").write_text("1:cpu:/\n0::/lab\n")
    (tmp_path / "sys/fs/cgroup/unified/lab").mkdir(parents=True)
    monkeypatch.setattr(rsacluster, "SUFFIX", "-t")
    monkeypatch.setattr(rsacluster, "RSA_NODES", ("rsa1", "rsa2"))
    return nodecgroup.Paths(mountinfo=tmp_path / "mountinfo",
                            proc_cgroup=tmp_path / "cgroup", root=tmp_path)


def test_each_rsa_node_gets_its_own_cgroup_below_the_cluster_s(
        scratch: nodecgroup.Paths) -> None:
    top = scratch.root / "sys/fs/cgroup/unified/lab/rsa-cluster-t"
    assert nodecgroup.top(scratch) == top
    nodecgroup.prepare(scratch)
    assert nodecgroup.make("rsa1", scratch) == top / "rsa1"
    assert nodecgroup.make("rsa2", scratch) == top / "rsa2"
    # the other nodes (slurmd's, rsad's, the PFS's) get none
    assert nodecgroup.make("c1", scratch) is None
    assert nodecgroup.make("ctl", scratch) is None
    assert sorted(p.name for p in top.iterdir()) == ["rsa1", "rsa2"]


def test_check_clean_reports_what_down_left_and_down_removes_it(
        scratch: nodecgroup.Paths) -> None:
    top = scratch.root / "sys/fs/cgroup/unified/lab/rsa-cluster-t"
    assert nodecgroup.leftovers(scratch) == []
    nodecgroup.prepare(scratch)
    nodecgroup.make("rsa1", scratch)
    (top / "rsa1" / "rsa.jobs" / "42" / "p7").mkdir(parents=True)  # a job's, never reaped
    assert nodecgroup.leftovers(scratch) == [f"cgroup {top} (processes: none)"]
    assert nodecgroup.release(scratch) == []
    assert not top.exists() and nodecgroup.leftovers(scratch) == []
    assert (scratch.root / "sys/fs/cgroup/unified/lab").is_dir()  # the lab's own stays


def test_up_removes_what_a_killed_cluster_left(scratch: nodecgroup.Paths) -> None:
    top = scratch.root / "sys/fs/cgroup/unified/lab/rsa-cluster-t"
    (top / "rsa2" / "rsa.jobs").mkdir(parents=True)
    nodecgroup.prepare(scratch)
    assert top.is_dir() and list(top.iterdir()) == []


def test_another_cluster_s_cgroups_are_left_alone(scratch: nodecgroup.Paths) -> None:
    other = scratch.root / "sys/fs/cgroup/unified/lab/rsa-cluster-u/rsa1"
    other.mkdir(parents=True)
    nodecgroup.prepare(scratch)
    nodecgroup.release(scratch)
    assert other.is_dir() and nodecgroup.leftovers(scratch) == []


def test_members_are_every_process_of_the_subtree(tmp_path: Path) -> None:
    (tmp_path / "rsa1/rsa.jobs/42/p7").mkdir(parents=True)
    (tmp_path / "cgroup.procs").write_text("")
    (tmp_path / "rsa1/cgroup.procs").write_text("100\n")
    (tmp_path / "rsa1/rsa.jobs/42/p7/cgroup.procs").write_text("7\n8\n")
    assert sorted(nodecgroup.members(tmp_path)) == [7, 8, 100]


def test_a_host_without_cgroup2_boots_its_nodes_without(
        scratch: nodecgroup.Paths, capsys: pytest.CaptureFixture[str]) -> None:
    scratch.mountinfo.write_text(V1_ONLY)
    nodecgroup.prepare(scratch)
    assert "no cgroup2 hierarchy on this host" in capsys.readouterr().out
    assert nodecgroup.make("rsa1", scratch) is None
    assert nodecgroup.leftovers(scratch) == []


def test_a_node_s_pid_1_is_handed_its_cgroup(monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
    seen: list[list[str]] = []

    def hold(name: str, argv: list[str], env: dict[str, str]) -> dict[str, object]:
        seen.append(argv)
        return {}
    monkeypatch.setattr(rsacluster, "_hold", hold)
    rsacluster._boot("rsa1", tmp_path, cgroup=Path("/sys/fs/cgroup/unified/rsa-cluster/rsa1"))
    rsacluster._boot("c1", tmp_path)
    assert seen[0][-1] == "/sys/fs/cgroup/unified/rsa-cluster/rsa1"
    assert seen[1][-1] == ""
    assert 'mount --bind "$cg" "$r/sys/fs/cgroup/unified"' in rsacluster.SETUP
    with pytest.raises(rsacluster.ClusterError, match="absolute path"):
        rsacluster._boot("rsa1", tmp_path, cgroup=Path("/sys/fs/cgroup/a b"))


def test_verify_check_clean_plants_what_a_killed_cluster_leaves(
        scratch: nodecgroup.Paths) -> None:
    top = scratch.root / "sys/fs/cgroup/unified/lab/rsa-cluster-t"
    assert nodecgroup.plant(scratch) == top
    assert (top / "rsa1" / "rsa.jobs" / "1").is_dir()
    assert nodecgroup.leftovers(scratch) == [f"cgroup {top} (processes: none)"]
    assert nodecgroup.release(scratch) == [] and nodecgroup.leftovers(scratch) == []
    scratch.mountinfo.write_text(V1_ONLY)
    assert nodecgroup.plant(scratch) is None
