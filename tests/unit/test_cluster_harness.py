"""lab/cluster/harness.py's pure parts: the host lab's keys in the cluster's lab env file,
the test timings in the cluster's rsa.yaml, and the door's answers (a real unix socket,
a fake node runner)."""

from __future__ import annotations

import json
import re
import socket
import sys
from pathlib import Path
from typing import Any

import pytest

from rsa_scheduler.config.loader import load_config_text

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "lab" / "cluster"))
try:
    import harness  # type: ignore[import-not-found]
    import rsacluster  # type: ignore[import-not-found]
finally:
    sys.path.remove(str(ROOT / "lab" / "cluster"))


def _host_lab_keys() -> set[str]:
    text = (ROOT / "lab" / "rsalab" / "facts.py").read_text()
    return set(re.findall(r'"(RSA_LAB_[A-Z_]+|SLURM_CONF)": ', text))


#: the host lab's keys the cluster has no value for: its PFS throttle and its hooks' log
#: (the ssd tier's keys are the cluster's too: lab/cluster/ssdpool.py)
HOST_ONLY = {"RSA_LAB_PFS_RATE", "RSA_LAB_HOOKS_LOG"}


def test_the_cluster_writes_every_key_of_the_host_labs_but_its_pfs_throttle_and_hooks_log(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(harness, "mode", lambda: "queue")
    env = harness.lab_env()
    assert len(_host_lab_keys()) > 30  # the parse found them
    assert _host_lab_keys() - HOST_ONLY <= set(env), _host_lab_keys() - HOST_ONLY - set(env)
    assert env["RSA_LAB_KIND"] == "cluster" and env["RSA_LAB_MODE"] == "queue"
    n = rsacluster.COUNT  # 2, or a cluster lab's that is up on this host
    assert env["RSA_LAB_COMPUTE_NODES"] == f"c[1-{n}]"
    assert env["RSA_LAB_RSA_NODES"] == f"rsa[1-{n}]"
    assert env["RSA_LAB_RAM_SIZE"] == rsacluster.POOL_SIZE
    assert env["RSA_LAB_DOOR"] == str(rsacluster.DOOR_DIR / "door.sock")


@pytest.mark.parametrize("native", [False, True])
def test_the_tuned_rsa_yaml_is_a_valid_config_with_the_labs_timings(native: bool) -> None:
    text = harness.tuned_yaml(native)
    assert text.startswith(harness.TUNED + "\n")
    config = load_config_text(text)
    assert config.health.interval == 2 and config.health.ramdisk_interval == 5
    assert config.daemon.poll_interval == 1 and config.ssh.connect_timeout == 3
    assert config.staging.retries == 2 and config.staging.on_deck_settle == 3
    assert config.hooks.max_hold == 30 and config.allocation.array_share == 1
    assert config.slurm.mode == ("native" if native else "queue")
    # the site's own settings stay
    assert config.health.min_free == 64 << 20
    assert [str(r) for r in config.staging.allowed_roots] == ["/pfs/home"]


def _ask(path: Path, request: bytes) -> dict[str, Any]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(str(path))
        s.sendall(request)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    answer: dict[str, Any] = json.loads(data)
    return answer


def test_the_door_runs_a_command_on_a_named_node_and_refuses_anything_else(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    ran: list[tuple[str, list[str], str | None, float]] = []

    def on(node: str, argv: list[str], *, timeout: float, check: bool,
           input: str | None) -> Any:
        ran.append((node, argv, input, timeout))
        if argv == ["slow"]:
            raise rsacluster.ClusterError("timed out after 1s: slow")
        return type("Done", (), {"returncode": 3, "stdout": "out", "stderr": "err"})()

    monkeypatch.setattr(rsacluster, "on", on)
    monkeypatch.setattr(harness, "DOOR", tmp_path / "door.sock")
    with harness.door():
        assert (harness.DOOR.stat().st_mode & 0o777) == 0o600
        ask = {"node": "rsa1", "argv": ["cat", "/x"], "input": "in", "timeout": 5}
        assert _ask(harness.DOOR, json.dumps(ask).encode() + b"\n") == {
            "rc": 3, "stdout": "out", "stderr": "err"}
        assert ran == [("rsa1", ["cat", "/x"], "in", 5.0)]
        other = _ask(harness.DOOR, b'{"node": "host", "argv": ["id"]}\n')
        assert other["rc"] == 2 and "'host' is no node of the cluster lab" in other["stderr"]
        bad = _ask(harness.DOOR, b"not json\n")
        assert bad["rc"] == 2 and bad["stderr"].startswith("door: a bad request")
        slow = _ask(harness.DOOR, b'{"node": "c1", "argv": ["slow"]}\n')
        assert slow["rc"] == 124 and "timed out" in slow["stderr"]
        assert len(ran) == 2  # nothing ran for the refused ones
    assert not harness.DOOR.exists()


def test_slurm_conf_names_every_compute_node_of_a_cluster_of_four(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rsacluster, "COMPUTE", ("c1", "c2", "c3", "c4"))
    image = (ROOT / "lab/cluster/files/etc/slurm/slurm.conf").read_text()
    text = rsacluster.slurm_conf(image)
    nodes = [ln.split()[0] for ln in text.splitlines() if ln.startswith("NodeName=")]
    assert nodes == ["NodeName=c1", "NodeName=c2", "NodeName=c3", "NodeName=c4"]
    assert "NodeName=c3 NodeAddr=c3 CPUs=1 RealMemory=1000 State=UNKNOWN" in text
    parts = [ln for ln in text.splitlines() if ln.startswith("PartitionName=")]
    assert len(parts) == 2 and all(" Nodes=c1,c2,c3,c4 " in p for p in parts), parts
    # everything else as the image has it
    rest = [ln for ln in image.splitlines() if not ln.startswith(("NodeName=", "Partition"))]
    assert [ln for ln in text.splitlines()
            if not ln.startswith(("NodeName=", "Partition"))] == rest


def test_the_image_hosts_file_names_four_compute_and_four_rsa_nodes_on_their_networks(
        monkeypatch: pytest.MonkeyPatch) -> None:
    four = {**{f"c{i}": ("slurmd",) for i in range(1, 5)},
            **{f"rsa{i}": ("sshd",) for i in range(1, 5)}}
    monkeypatch.setattr(rsacluster, "ROLES", four)
    table = rsacluster.addresses()
    assert set(table) == set(four)
    for name, nets in table.items():
        assert set(nets) == {"mgmt", "data", "storage"}, name
    assert len({nets["data"] for nets in table.values()}) == 8  # no address twice


@pytest.mark.parametrize("nodes,pool", [("0", "1G"), ("5", "1G"), ("x", "1G"),
                                        ("2", "1T"), ("2", "-1G"), ("2", "1G; rm")])
def test_a_cluster_shape_out_of_range_is_refused_with_its_bounds(
        monkeypatch: pytest.MonkeyPatch, nodes: str, pool: str) -> None:
    monkeypatch.setenv("RSA_CLUSTER_NODES", nodes)
    monkeypatch.setenv("RSA_CLUSTER_POOL", pool)
    with pytest.raises(SystemExit, match=r"RSA_CLUSTER_(NODES|POOL)="):
        rsacluster.wanted_shape()


def test_the_shape_asked_for_is_read_from_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RSA_CLUSTER_NODES", raising=False)
    monkeypatch.delenv("RSA_CLUSTER_POOL", raising=False)
    monkeypatch.delenv("RSA_CLUSTER_RSAD", raising=False)
    assert rsacluster.wanted_shape() == {"nodes": 2, "pool": "1G", "rsad": "ctl"}
    monkeypatch.setenv("RSA_CLUSTER_NODES", "4")
    monkeypatch.setenv("RSA_CLUSTER_POOL", "2G")
    monkeypatch.setenv("RSA_CLUSTER_RSAD", "own")
    assert rsacluster.wanted_shape() == {"nodes": 4, "pool": "2G", "rsad": "own"}


def test_the_harness_binds_the_repository_into_rsads_host_and_the_wf_venv_read_only(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    monkeypatch.setattr(rsacluster, "release", lambda: "13")
    monkeypatch.setattr(rsacluster, "DOOR_DIR", tmp_path / "door")
    monkeypatch.delenv("RSA_CLUSTER_HARNESS", raising=False)
    assert rsacluster.harness_binds(rsacluster.RSAD) == ([], [])  # no harness: nothing
    monkeypatch.setenv("RSA_CLUSTER_HARNESS", str(repo))
    assert rsacluster.harness_binds(rsacluster.RSAD) == ([repo, tmp_path / "door"], [])
    assert (tmp_path / "door").stat().st_mode & 0o777 == 0o700
    compute = rsacluster.COMPUTE[0]
    assert rsacluster.harness_binds(compute) == ([], [])  # no workflow venv built
    (repo / ".venv-wf-debian13").mkdir(parents=True)
    assert rsacluster.harness_binds(compute) == ([], [repo / ".venv-wf-debian13"])
    for other in {"ctl", "login", rsacluster.RSA_NODES[0]} - {rsacluster.RSAD}:
        assert rsacluster.harness_binds(other) == ([], [])


def test_prolog_flags_are_read_from_the_environment_and_reach_the_labs_facts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(harness, "mode", lambda: "queue")
    monkeypatch.delenv("RSA_CLUSTER_PROLOG_FLAGS", raising=False)
    assert rsacluster.prolog_flags() == ""
    assert harness.lab_env()["RSA_LAB_PROLOG_FLAGS"] == ""
    monkeypatch.setenv("RSA_CLUSTER_PROLOG_FLAGS", "Alloc,Contain")
    assert rsacluster.prolog_flags() == "Alloc,Contain"
    assert harness.lab_env()["RSA_LAB_PROLOG_FLAGS"] == "Alloc,Contain"


@pytest.mark.parametrize("flags", ["Alloc;reboot", "Alloc Contain", "Alloc,", "$(id)"])
def test_prolog_flags_other_than_flag_names_are_refused(
        monkeypatch: pytest.MonkeyPatch, flags: str) -> None:
    monkeypatch.setenv("RSA_CLUSTER_PROLOG_FLAGS", flags)
    with pytest.raises(rsacluster.ClusterError, match="RSA_CLUSTER_PROLOG_FLAGS="):
        rsacluster.prolog_flags()


def test_with_rsad_on_the_controller_every_node_finds_it_by_its_name_at_ctls_address() -> None:
    image = (ROOT / "lab" / "cluster" / "files" / "etc" / "hosts").read_text()
    on_ctl = rsacluster.hosts_file(image, "ctl")
    names = {f[1]: f[0] for line in on_ctl.splitlines()
             if len(f := line.split("#", 1)[0].split()) >= 2}
    aliases = {a: f[0] for line in on_ctl.splitlines()
               if len(f := line.split("#", 1)[0].split()) >= 3 for a in f[2:]}
    # rsad's own host is gone; its names are ctl's, on the management and storage networks
    assert "rsad" not in names and "rsad-st" not in names
    assert aliases["rsad"] == names["ctl"] == "10.230.0.10"
    assert aliases["rsad-st"] == names["ctl-st"] == "10.232.0.10"
    # every other line as the image has it
    assert [line.replace("\trsad-st", "").replace("\trsad", "")
            for line in on_ctl.splitlines()] == [
        line for line in image.splitlines() if line.split("#", 1)[0].split()[1:2] not in (
            ["rsad"], ["rsad-st"])]
    # a host of its own: the image's file unchanged
    assert rsacluster.hosts_file(image, "own") == image


def test_rsad_runs_on_the_controller_unless_asked_for_a_host_of_its_own() -> None:
    # this process's shape (no cluster up here, no RSA_CLUSTER_RSAD): the default
    assert rsacluster.DEFAULT_SHAPE["rsad"] == "ctl"
    if rsacluster.RSAD_ON_CTL:
        assert rsacluster.RSAD == "ctl" and "rsad" not in rsacluster.ROLES
        assert "rsad" in rsacluster.ROLES["ctl"]
        assert rsacluster.SLURM_NODES.count("ctl") == 1
    else:
        assert rsacluster.RSAD == "rsad" and "rsad" not in rsacluster.ROLES["ctl"]


def test_an_rsad_place_other_than_ctl_or_own_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RSA_CLUSTER_RSAD", "login")
    with pytest.raises(SystemExit, match=r"RSA_CLUSTER_RSAD='login': ctl .* or own"):
        rsacluster.wanted_shape()


def test_the_native_modes_poll_interval_is_slurms_default_unless_asked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rsacluster, "release", lambda: "13")
    monkeypatch.delenv("RSA_CLUSTER_BB_POLL", raising=False)
    assert rsacluster.bb_poll_line() == ""  # Slurm's 15 s, as a site that leaves it
    monkeypatch.setenv("RSA_CLUSTER_BB_POLL", "5")
    assert rsacluster.bb_poll_line() == "PollInterval=5\n"
    for bad in ("0", "x", "5s", "99999"):
        monkeypatch.setenv("RSA_CLUSTER_BB_POLL", bad)
        with pytest.raises(rsacluster.ClusterError, match="seconds, 1 to 3600"):
            rsacluster.bb_poll_line()
    # Slurm 22.05 has no such key (its slurmctld stops on it): refused, not written
    monkeypatch.setattr(rsacluster, "release", lambda: "12")
    monkeypatch.setenv("RSA_CLUSTER_BB_POLL", "5")
    with pytest.raises(rsacluster.ClusterError, match=r"Slurm 22\.05"):
        rsacluster.bb_poll_line()
