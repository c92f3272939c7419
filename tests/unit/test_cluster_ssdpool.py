"""lab/cluster/ssdpool.py's pure parts: which RSA nodes are in the ssd tier, the ssd group of
the cluster's rsa.yaml, the facts, what up records and binds into a node, and what
check-clean reports — on a scratch state directory (nothing is attached or mounted: the
devices' part is lab/rsalab/ssd.py's, tested in test_lab_ssd.py)."""

from __future__ import annotations

import json
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
    import ssdpool  # type: ignore[import-not-found]
finally:
    sys.path.remove(str(ROOT / "lab" / "cluster"))

FOUR = ("rsa1", "rsa2", "rsa3", "rsa4")


@pytest.fixture(autouse=True)
def _scratch(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A cluster of four RSA nodes, its state and work directories in tmp_path, down."""
    monkeypatch.setattr(rsacluster, "RSA_NODES", FOUR)
    monkeypatch.setattr(rsacluster, "STATE", tmp_path / "run")
    monkeypatch.setattr(rsacluster, "STATE_FILE", tmp_path / "run" / "state.json")
    monkeypatch.setattr(rsacluster, "WORK", tmp_path / "work")
    monkeypatch.setattr(rsacluster, "SUFFIX", "-t")
    monkeypatch.delenv("RSA_CLUSTER_TIERS", raising=False)
    monkeypatch.delenv("RSA_CLUSTER_SSD_RATE", raising=False)


@pytest.mark.parametrize("names,ram,ssd", [
    (FOUR, ("rsa1", "rsa2"), ("rsa3", "rsa4")),
    (FOUR[:2], ("rsa1",), ("rsa2",)),
    (FOUR[:3], ("rsa1", "rsa2"), ("rsa3",)),
])
def test_mixed_puts_the_upper_half_of_the_rsa_nodes_in_the_ssd_tier(
        names: tuple[str, ...], ram: tuple[str, ...], ssd: tuple[str, ...]) -> None:
    assert ssdpool.split(names, "mixed") == (ram, ssd)
    assert ssdpool.split(names, "ram") == (names, ())


def test_mixed_needs_two_rsa_nodes_and_tiers_are_ram_or_mixed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(rsacluster.ClusterError, match="2 RSA nodes or more"):
        ssdpool.split(("rsa1",), "mixed")
    assert ssdpool.wanted() == "ram"
    monkeypatch.setenv("RSA_CLUSTER_TIERS", "ssd")
    with pytest.raises(rsacluster.ClusterError, match="RSA_CLUSTER_TIERS='ssd': ram or mixed"):
        ssdpool.wanted()
    monkeypatch.setenv("RSA_CLUSTER_TIERS", "mixed")
    monkeypatch.setenv("RSA_CLUSTER_SSD_RATE", "lots")
    with pytest.raises(rsacluster.ClusterError, match="RSA_CLUSTER_SSD_RATE"):
        ssdpool.record()


def test_nodesets_of_consecutive_names() -> None:
    assert ssdpool.nodeset(("rsa3",)) == "rsa3"
    assert ssdpool.nodeset(("rsa3", "rsa4")) == "rsa[3-4]"
    with pytest.raises(ValueError, match="not consecutive"):
        ssdpool.nodeset(("rsa1", "rsa3"))


def _tiers(text: str) -> dict[str, tuple[str, str]]:
    """node -> (tier, pool_dir) of a valid rsa.yaml."""
    config = load_config_text(text)
    return {n.name: (str(n.tier.value), str(n.pool_dir)) for n in config.pool.members()}


def test_one_tier_rsa_yaml_is_the_ram_tier_on_every_rsa_node() -> None:
    text = rsacluster.rsa_yaml()
    assert "tier: ssd" not in text
    assert '    - names: "rsa[1-4]"\n      tier: ram\n' in text
    assert _tiers(text) == {n: ("ram", "/var/lib/rsa-ram") for n in FOUR}


def test_mixed_rsa_yaml_is_a_valid_config_with_the_ssd_nodes_in_the_ssd_tier(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RSA_CLUSTER_TIERS", "mixed")
    text = rsacluster.rsa_yaml()
    assert '    - names: "rsa[1-2]"\n      tier: ram\n' in text
    assert ('    - names: "rsa[3-4]"\n      tier: ssd\n      capacity: 4G\n' in text)
    assert "      pool_dir: /var/lib/rsa-ssd\n      data_address: \"{name}-data\"\n" in text
    assert _tiers(text) == {"rsa1": ("ram", "/var/lib/rsa-ram"),
                            "rsa2": ("ram", "/var/lib/rsa-ram"),
                            "rsa3": ("ssd", "/var/lib/rsa-ssd"),
                            "rsa4": ("ssd", "/var/lib/rsa-ssd")}
    # the harness's tuned copy keeps both groups
    tuned = load_config_text(harness.tuned_yaml(False))
    assert tuned.slurm.mode == "queue"
    assert "tier: ssd" in harness.tuned_yaml(False)


def test_prepare_records_the_tiers_and_makes_the_ssd_nodes_pools(
        monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[Any] = []
    monkeypatch.setattr(ssdpool.ssd, "prepare", lambda s, where, rate_setting: asked.append((
        s.ssd_nodes, s.n_rsa, s.ssd_size, s.ssd_rate, where, rate_setting)))
    monkeypatch.setenv("RSA_CLUSTER_TIERS", "mixed")
    monkeypatch.setenv("RSA_CLUSTER_SSD_RATE", "20M")
    ssdpool.prepare()
    [(nodes, n_rsa, size, rate, where, setting)] = asked
    assert setting == "RSA_CLUSTER_SSD_RATE"  # named when 0 (not throttled)
    assert (nodes, n_rsa, size, rate) == ([3, 4], 4, "4G", 20 << 20)
    assert where.images == rsacluster.WORK / "ssd-t"
    assert where.records == rsacluster.STATE / "ssd"
    assert where.blkio == Path("/sys/fs/cgroup/blkio")  # the host's kernel files
    recorded = json.loads(ssdpool.record_file().read_text())
    assert recorded == {"tiers": "mixed", "ssd_nodes": ["rsa3", "rsa4"], "size": "4G",
                        "rate": 20 << 20}
    # a later command reads the record, whatever its environment says
    monkeypatch.delenv("RSA_CLUSTER_TIERS")
    assert ssdpool.record().ssd_nodes == ["rsa3", "rsa4"]
    assert ssdpool.ram_names() == "rsa[1-2]"


def test_one_tier_prepare_records_ram_and_makes_no_pool(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ssdpool.ssd, "prepare", lambda *a, **k: pytest.fail("made"))
    ssdpool.prepare()
    assert ssdpool.record().tiers == "ram"
    # a cluster that is up without a record (brought up before tiers) runs one tier
    ssdpool.record_file().unlink()
    rsacluster.STATE_FILE.write_text("{}")
    monkeypatch.setenv("RSA_CLUSTER_TIERS", "mixed")
    assert ssdpool.record().ssd_nodes == []


def _status(pool: str, throttle: str = "on") -> None:
    where = ssdpool.paths()
    where.records.mkdir(parents=True)
    where.status.write_text(json.dumps({"pool": pool, "throttle": throttle,
                                        "rate": 50 << 20}) + "\n")


def test_ssd_nodes_get_the_blkio_hierarchy_read_only_and_their_directory_without_loop(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RSA_CLUSTER_TIERS", "mixed")
    _status("loop")
    binds: list[Path] = []
    ro: list[Path] = []
    for name in ("rsa1", "rsa2", "c1", "rsad"):
        ssdpool.add_binds(name, binds, ro)
    assert (binds, ro) == ([], [])
    ssdpool.add_binds("rsa3", binds, ro)
    assert (binds, ro) == ([], [Path("/sys/fs/cgroup/blkio")])
    ssdpool.paths().status.write_text('{"pool": "dir", "throttle": "off: x", "rate": 0}')
    ssdpool.add_binds("rsa4", binds, ro)
    assert binds == [rsacluster.WORK / "ssd-t" / "rsa4"]


def test_the_facts_say_the_ssd_tier_as_the_host_labs_do(
        monkeypatch: pytest.MonkeyPatch) -> None:
    one = ssdpool.facts()
    assert one["RSA_LAB_TIERS"] == "ram" and one["RSA_LAB_RSA_SSD_NODES"] == ""
    assert one["RSA_LAB_SSD_POOL"] == "none"
    assert one["RSA_LAB_SSD_THROTTLE"].startswith("off: the cluster has no ssd tier")
    monkeypatch.setenv("RSA_CLUSTER_TIERS", "mixed")
    _status("loop")
    assert ssdpool.facts() == {
        "RSA_LAB_TIERS": "mixed", "RSA_LAB_RSA_SSD_NODES": "rsa3,rsa4",
        "RSA_LAB_POOL_SSD": "/var/lib/rsa-ssd", "RSA_LAB_SSD_SIZE": "4G",
        "RSA_LAB_SSD_POOL": "loop", "RSA_LAB_SSD_RATE": str(50 << 20),
        "RSA_LAB_SSD_THROTTLE": "on"}
    monkeypatch.setattr(harness, "mode", lambda: "queue")
    env = harness.lab_env()
    assert env["RSA_LAB_TIERS"] == "mixed" and env["RSA_LAB_SSD_POOL"] == "loop"


def test_check_clean_reports_the_images_the_record_and_a_device_record() -> None:
    assert ssdpool.leftovers() == []
    ssdpool.paths().images.mkdir(parents=True)
    ssdpool.record_file().parent.mkdir(parents=True)
    ssdpool.record_file().write_text("{}")
    ssdpool.ssd.Device("rsa3", "/dev/loop99", "7:99", "x").save(ssdpool.paths())
    left = ssdpool.leftovers()
    assert f"ssd device record {ssdpool.paths().records}/rsa3.json (/dev/loop99 7:99)" in left
    assert f"the ssd pools' images {rsacluster.WORK / 'ssd-t'}" in left
    assert f"the tiers record {rsacluster.STATE / 'tiers.json'}" in left


def test_an_up_asking_for_other_tiers_than_the_running_clusters_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ssdpool.ssd, "prepare", lambda *a, **k: None)
    ssdpool.check_asked()  # nothing up
    ssdpool.prepare()  # ram
    rsacluster.STATE_FILE.write_text("{}")
    ssdpool.check_asked()  # nothing asked
    monkeypatch.setenv("RSA_CLUSTER_TIERS", "ram")
    ssdpool.check_asked()  # what runs
    monkeypatch.setenv("RSA_CLUSTER_TIERS", "mixed")
    with pytest.raises(rsacluster.ClusterError,
                       match=r"RSA_CLUSTER_TIERS=ram is up: .* down first"):
        ssdpool.check_asked()
