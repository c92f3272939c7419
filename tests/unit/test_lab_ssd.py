"""The lab's ssd pools (lab/rsalab/ssd.py, issue 17): the rate setting, what is read from
the kernel's files, the preflight that decides whether the ssd tier can be capped, and the
bookkeeping that lets lab-down reset exactly what lab-up set — on a scratch tree standing in
for /sys and /proc (the lab itself is not started, nothing real is attached)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "lab"))
try:
    from rsalab import common, ssd  # type: ignore[import-not-found]
finally:
    sys.path.remove(str(ROOT / "lab"))

MAJMIN = "7:5"
RATE = 50 << 20


@pytest.fixture(autouse=True)
def _not_told_by_a_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests run in lab/sandbox under make test, which tells the lab about the host's
    blkio hierarchy: these tests say what the fake host is themselves."""
    monkeypatch.delenv("RSA_LAB_HOST_BLKIO_ROOT", raising=False)


def fake_host(tmp: Path, cgroup: str = "/") -> Any:
    """A blkio root with kthreadd, the bdi of 7:5 and loop5 attached to the lab's rsa3.img."""
    blkio = tmp / "blkio"
    blkio.mkdir()
    for name in ssd.THROTTLE_FILES:
        (blkio / name).write_text("")
    (blkio / "tasks").write_text("1\n2\n3\n")
    bdi = tmp / "bdi" / MAJMIN
    bdi.mkdir(parents=True)
    for name, value in (("strict_limit", "0"), ("max_bytes", "4303298560"),
                        ("max_ratio", "100")):
        (bdi / name).write_text(f"{value}\n")
    images = tmp / "images"
    images.mkdir()
    loop = tmp / "block" / "loop5"
    (loop / "loop").mkdir(parents=True)
    (loop / "dev").write_text(f"{MAJMIN}\n")
    (loop / "loop" / "backing_file").write_text(f"{images}/rsa3.img\n")
    (tmp / "cgroup").write_text(f"9:name=systemd:/\n7:blkio:{cgroup}\n0::/\n")
    return ssd.Paths(blkio=blkio, bdi=tmp / "bdi", block=tmp / "block",
                     proc_cgroup=tmp / "cgroup", images=images, records=tmp / "records",
                     dev=tmp / "dev")


def device(where: Any) -> Any:
    return ssd.Device("rsa3", "/dev/loop5", MAJMIN, f"{where.images}/rsa3.img")


def detach_fake(where: Any, seen: list[str]) -> Any:
    def detach(dev: str) -> str | None:
        seen.append(dev)
        (where.block / Path(dev).name / "loop" / "backing_file").unlink()
        return None
    return detach


@pytest.mark.parametrize(("text", "value"), [
    ("50M", 50 << 20), ("50MiB", 50 << 20), ("50mb", 50 << 20), ("0", 0),
    ("1048576", 1 << 20), ("2G", 2 << 30), (" 512k ", 512 << 10)])
def test_rates_are_whole_numbers_with_binary_units(text: str, value: int) -> None:
    assert common.parse_bytes(text) == value


@pytest.mark.parametrize("text", ["fast", "1.5G", "", "M", "50X", "-1M"])
def test_a_rate_that_is_no_number_is_refused_naming_the_setting(text: str) -> None:
    with pytest.raises(ValueError, match="RSA_LAB_SSD_RATE"):
        common.parse_bytes(text, "RSA_LAB_SSD_RATE")


def test_settings_cap_the_ssd_pools_at_50m_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RSA_LAB_SSD_RATE", raising=False)
    assert common.Settings().ssd_rate == 50 << 20
    monkeypatch.setenv("RSA_LAB_SSD_RATE", "0")
    assert common.Settings().ssd_rate == 0


def test_kernel_files_are_read_as_the_kernel_writes_them() -> None:
    assert ssd.blkio_cgroup("9:name=systemd:/\n7:blkio:/\n") == "/"
    assert ssd.blkio_cgroup("7:cpu,blkio:/lab/x\n") == "/lab/x"
    assert ssd.blkio_cgroup("0::/user.slice\n") == "/"  # no blkio line: the root
    assert ssd.parse_rules("7:5 52428800\n8:0 1000\n7:6 0\n") == {"7:5": RATE, "8:0": 1000}
    stats = ("7:5 Read 4096\n7:5 Write 67108864\n7:5 Sync 1\n7:5 Total 67112960\n"
             "Total 67112960\n")
    assert ssd.service_bytes(stats, MAJMIN) == 64 << 20
    assert ssd.service_bytes(stats, MAJMIN, "Read") == 4096
    assert ssd.service_bytes(stats, "7:9") == 0


def test_preflight_passes_on_a_host_that_can_cap(tmp_path: Path) -> None:
    assert ssd.preflight(MAJMIN, fake_host(tmp_path)) is None


def test_preflight_says_why_not(tmp_path: Path) -> None:
    where = fake_host(tmp_path)
    (where.bdi / MAJMIN / "max_bytes").unlink()
    assert "kernel >= 6.2" in ssd.preflight(MAJMIN, where)
    (where.blkio / "tasks").write_text("1\n3\n")  # a namespaced blkio "root"
    assert "kthreadd (pid 2)" in ssd.preflight(MAJMIN, where)
    (where.blkio / ssd.THROTTLE_FILES[1]).unlink()
    assert "blkio.throttle.write_bps_device" in ssd.preflight(MAJMIN, where)


def test_in_a_sandbox_kthreadd_is_looked_for_by_the_sandbox(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """lab/sandbox's PID namespace cannot see pid 2: the sandbox, which leaves the blkio
    hierarchy as it is, looked in the host's and says so (RSA_LAB_HOST_BLKIO_ROOT)."""
    where = fake_host(tmp_path)
    (where.blkio / "tasks").write_text("1\n3\n")  # as seen from a PID namespace
    monkeypatch.setenv("RSA_LAB_HOST_BLKIO_ROOT", "1")
    assert ssd.preflight(MAJMIN, where) is None
    monkeypatch.setenv("RSA_LAB_HOST_BLKIO_ROOT", "0")  # the host's is not the root either
    assert "kthreadd (pid 2)" in ssd.preflight(MAJMIN, where)


def test_the_rule_also_goes_in_the_labs_own_blkio_cgroup(tmp_path: Path) -> None:
    where = fake_host(tmp_path, cgroup="/lab/slice")
    assert ssd.rule_dirs(where) == [where.blkio, where.blkio / "lab/slice"]
    assert "lab/slice/blkio.throttle.read_bps_device" in ssd.preflight(MAJMIN, where)
    own = where.blkio / "lab/slice"
    own.mkdir(parents=True)
    for name in ssd.THROTTLE_FILES:
        (own / name).write_text("")
    assert ssd.preflight(MAJMIN, where) is None
    d = device(where)
    ssd.throttle(d, RATE, where)
    for name in ssd.THROTTLE_FILES:
        assert ssd.parse_rules((own / name).read_text()) == {MAJMIN: RATE}
        assert ssd.parse_rules((where.blkio / name).read_text()) == {MAJMIN: RATE}


def test_throttle_sets_rules_and_dirty_limit_and_records_them(tmp_path: Path) -> None:
    where = fake_host(tmp_path)
    d = device(where)
    ssd.throttle(d, RATE, where)
    for name in ssd.THROTTLE_FILES:
        assert (where.blkio / name).read_text() == f"{MAJMIN} {RATE}\n"
    bdi = where.bdi / MAJMIN
    assert (bdi / "strict_limit").read_text() == "1\n"
    assert (bdi / "max_bytes").read_text() == f"{16 << 20}\n"
    record = json.loads((where.records / "rsa3.json").read_text())
    assert record["cgroups"] == [str(where.blkio)] and record["bdi"] is True
    assert ssd.unthrottle(d, where) == []
    for name in ssd.THROTTLE_FILES:
        assert (where.blkio / name).read_text() == f"{MAJMIN} 0\n"  # removes the rule
    assert (bdi / "strict_limit").read_text() == "0\n"
    assert (bdi / "max_ratio").read_text() == "100\n"


def test_what_is_set_is_recorded_before_it_is_set(tmp_path: Path) -> None:
    """A lab-up that dies half-way through leaves a record that covers what it set."""
    where = fake_host(tmp_path)
    (where.bdi / MAJMIN / "strict_limit").unlink()
    (where.bdi / MAJMIN / "strict_limit").mkdir()  # writing it fails
    d = device(where)
    with pytest.raises(OSError):
        ssd.throttle(d, RATE, where)
    (loaded,) = ssd.recorded(where)
    assert loaded.cgroups == [str(where.blkio)] and loaded.bdi is True


def test_a_failed_cap_is_undone_and_reported(tmp_path: Path) -> None:
    where = fake_host(tmp_path)
    (where.bdi / MAJMIN / "max_bytes").unlink()
    (where.bdi / MAJMIN / "max_bytes").mkdir()  # exists (preflight passes), not writable
    d = device(where)
    why = ssd._cap([d], RATE, where)
    assert why is not None and why.startswith("setting the cap failed")
    assert ssd.leftovers(where) == [  # the device itself is still there, nothing set on it
        f"ssd device record {where.records}/rsa3.json (/dev/loop5 {MAJMIN})",
        f"loop device /dev/loop5 ({MAJMIN}) on {where.images}/rsa3.img"]
    assert ssd._cap([d], 0, where) == "RSA_LAB_SSD_RATE=0"
    assert ssd._cap([d], 0, where, "RSA_CLUSTER_SSD_RATE") == "RSA_CLUSTER_SSD_RATE=0"


def test_check_clean_sees_the_device_rules_and_dirty_limit_and_down_removes_them(
        tmp_path: Path) -> None:
    where = fake_host(tmp_path)
    d = device(where)
    d.save(where)
    ssd.throttle(d, RATE, where)
    found = ssd.leftovers(where)
    assert f"loop device /dev/loop5 ({MAJMIN}) on {where.images}/rsa3.img" in found
    assert f"ssd device record {where.records}/rsa3.json (/dev/loop5 {MAJMIN})" in found
    assert (f"blkio throttle rule {MAJMIN} {RATE} in "
            f"{where.blkio}/blkio.throttle.write_bps_device") in found
    assert f"bdi {MAJMIN} strict_limit 1" in found
    assert len(found) == 5
    seen: list[str] = []
    ssd.release(where, detach=detach_fake(where, seen))
    assert seen == ["/dev/loop5"]
    assert ssd.leftovers(where) == []
    assert not where.records.exists()
    ssd.release(where, detach=detach_fake(where, seen))  # idempotent: nothing left to do
    assert seen == ["/dev/loop5"]


def test_down_also_finds_a_device_attached_before_its_record(tmp_path: Path) -> None:
    """lab-up killed between losetup and the record: the device is found by its image."""
    where = fake_host(tmp_path)
    (where.bdi / MAJMIN / "strict_limit").write_text("1\n")
    assert ssd.leftovers(where) == [
        f"loop device /dev/loop5 ({MAJMIN}) on {where.images}/rsa3.img",
        f"bdi {MAJMIN} strict_limit 1"]
    seen: list[str] = []
    ssd.release(where, detach=detach_fake(where, seen))
    assert seen == ["/dev/loop5"] and ssd.leftovers(where) == []


def test_a_device_since_given_to_another_file_is_left_alone(tmp_path: Path) -> None:
    where = fake_host(tmp_path)
    d = device(where)
    ssd.throttle(d, RATE, where)
    (where.block / "loop5" / "loop" / "backing_file").write_text("/srv/someone-else.img\n")
    seen: list[str] = []
    ssd.release(where, detach=detach_fake(where, seen))
    assert seen == []
    assert (where.bdi / MAJMIN / "strict_limit").read_text() == "1\n"  # not ours to reset
    assert not (where.records / "rsa3.json").exists()


def test_a_node_mounts_its_recorded_device_else_its_directory(tmp_path: Path) -> None:
    where = fake_host(tmp_path)
    pool = Path("/var/lib/rsa-node/ssd")
    assert ssd.mount_setup("rsa4", pool, where) == (
        f"mount --bind {where.images}/rsa4 {pool}")
    assert (where.images / "rsa4").is_dir()
    device(where).save(where)  # a restarted node reuses the device as it is
    assert ssd.mount_setup("rsa3", pool, where) == (
        f"mount -t ext4 -o noinit_itable /dev/loop5 {pool}")


def test_the_status_for_the_facts(tmp_path: Path) -> None:
    where = fake_host(tmp_path)
    assert ssd.status(where)["throttle"].startswith("off: ")
    where.records.mkdir()
    where.status.write_text(json.dumps({"pool": "loop", "throttle": "on", "rate": RATE}))
    assert ssd.status(where) == {"pool": "loop", "throttle": "on", "rate": str(RATE)}
