"""``rsad --check`` touches nothing, and one rsad per store (daemon/check.py,
store/lock.py, daemon/main.py)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from rsa_scheduler.config import load_config
from rsa_scheduler.core.scheduler import Observation, Scheduler
from rsa_scheduler.daemon.check import inspect_store
from rsa_scheduler.daemon.main import rsad as rsad_command
from rsa_scheduler.store import Store
from rsa_scheduler.store.lock import AlreadyRunning, StoreLock, holder, lock_path
from rsa_scheduler.store.migrations import MIGRATIONS, migrate
from tests.unit.corekit import make_spec

CONFIG = """\
pool:
  nodes:
    - names: "rsa[1-2]"
      tier: ram
      capacity: 2G
      address: "192.0.2.{num}"
allocation:
  max_nodes: 2
daemon:
  state_dir: {state}
slurm:
  lockin:
    method: none
staging:
  allowed_roots: [/pfs]
"""


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "rsa.yaml"
    path.write_text(CONFIG.replace("{state}", str(tmp_path / "state")))
    path.chmod(0o600)
    return path


def _store_with_work(config: Path) -> Path:
    """A store as a live rsad leaves it: a job on-deck with its first action issued and
    not answered."""
    cfg = load_config(config, env={})
    sched = Scheduler(cfg.make_pool(), cfg.staging_policy())
    dec = sched.observe([Observation("7", "alice", "PENDING", "Resources",
                                     spec=make_spec())], 1000.0)
    dec.add(sched.tick(2000.0))  # past the on-deck settle time: allocated, built
    assert sched.outstanding()
    with Store.open(cfg.daemon.db_path, durability="normal") as store:
        store.append(dec.events)
    return Path(cfg.daemon.db_path)


def _digest(paths: list[Path]) -> dict[str, tuple[str, int]]:
    return {p.name: (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for p in paths if p.exists()}


def test_check_reports_the_store_and_changes_no_byte_of_it(
        config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = _store_with_work(config)
    files = [db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")]
    before = _digest(files)
    # no SSH without --nodes: a check that reached for the RSA nodes fails here
    import rsa_scheduler.remote as remote

    def no_ssh(*_a: object, **_k: object) -> None:
        raise AssertionError("rsad --check opened SSH to the RSA nodes")

    monkeypatch.setattr(remote.HostPool, "from_config", no_ssh)
    got = CliRunner().invoke(rsad_command, ["--config", str(config), "--check"])
    assert got.exit_code == 0, got.output
    lines = got.output.splitlines()
    assert lines[0] == f"rsad: config {config}: ok"
    assert f"rsad: store {db}: schema version {MIGRATIONS[-1].version} (current)" in lines
    assert any(line.startswith("rsad: events: ") and line.endswith("; jobs tracked: 1 (1 "
               "fs-building)") for line in lines), lines
    assert any(line.startswith("rsad: actions outstanding: 1 (7/1/") for line in lines)
    assert "rsad: no rsad runs on this store" in lines
    assert _digest(files) == before
    assert not lock_path(db).exists()  # not even the lock file


def test_check_of_a_store_behind_names_the_migrations_and_leaves_it_behind(
        config: Path) -> None:
    cfg = load_config(config, env={})
    db = Path(cfg.daemon.db_path)
    db.parent.mkdir()
    import sqlite3

    conn = sqlite3.connect(db, isolation_level=None)
    migrate(conn, str(db), target=3)
    conn.close()
    report = inspect_store(cfg)
    assert report.schema == 3
    assert report.pending == ("4 (snapshots)",)
    assert "a start migrates it: 4 (snapshots)" in report.lines()[0]
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 3
    conn.close()


def test_check_without_a_store_says_so_and_creates_nothing(config: Path) -> None:
    cfg = load_config(config, env={})
    assert inspect_store(cfg).lines() == [
        f"store {cfg.daemon.db_path}: none yet (rsad creates it when it first starts)",
        "mode: queue (slurm.mode; no store yet)"]
    assert not Path(cfg.daemon.db_path).parent.exists()


def test_check_reports_a_drain_in_force_and_the_mode_against_slurm_mode(
        config: Path) -> None:
    """On main ``rsad --check`` said neither: an operator could not see that rsad was
    drained (``rsa admin drain``) nor that a start in the other slurm.mode would be
    refused, without starting it."""
    db = _store_with_work(config)
    cfg = load_config(config, env={})
    with Store.open(db, readonly=True) as store:
        sched = Scheduler.replay(cfg.make_pool(), cfg.staging_policy(), store.events())
    _, switched = sched.mode_switch("queue", 3000.0)
    switched.add(sched.set_draining(True, 3001.0, by="root", reason="upgrade"))
    with Store.open(db, durability="normal") as store:
        store.append(switched.events)
    files = [db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")]
    before = _digest(files)
    got = CliRunner().invoke(rsad_command, ["--config", str(config), "--check"])
    assert got.exit_code == 0, got.output
    lines = got.output.splitlines()
    assert "rsad: mode: queue (slurm.mode, and the store's last rsad's)" in lines
    assert ("rsad: drain: in force: RSA maintenance (rsa admin drain by root: upgrade), "
            "until rsa admin resume; jobs in flight finish") in lines
    native = config.with_name("native.yaml")
    native.write_text(config.read_text().replace("slurm:\n", "slurm:\n  mode: native\n"))
    native.chmod(0o600)
    got = CliRunner().invoke(rsad_command, ["--config", str(native), "--check"])
    assert got.exit_code == 0, got.output
    assert ("rsad: mode: a start is refused: slurm.mode is native but 1 job(s) rsad "
            "started in queue mode are in flight (7): set slurm.mode back to queue and let "
            "them finish first (rsa admin drain; rsa status shows when none holds RSA "
            "nodes), then switch") in got.output.splitlines()
    assert _digest(files) == before  # read-only: neither check logged a mode or anything
    first = subprocess.Popen([sys.executable, "-c", _HOLD, str(db)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True,
                             cwd=Path(__file__).parents[2])
    try:  # an rsad runs on the store: the mode it started in is the store's
        assert first.stdout is not None and first.stdout.readline() == "held\n"
        assert (f"rsad (pid {first.pid}) runs on this store in queue mode; the check left "
                "it alone") in inspect_store(cfg).lines()
    finally:
        assert first.stdin is not None
        first.stdin.close()
        first.wait(timeout=30)
    with Store.open(db, durability="normal") as store:
        store.append(sched.set_draining(False, 3002.0, by="root").events)
    report = inspect_store(cfg)
    assert report.lines()[-2:] == ["mode: queue (slurm.mode, and the store's last rsad's)",
                                   "drain: none (jobs get RSA nodes)"]


_HOLD = """
import sys
from pathlib import Path
from rsa_scheduler.store.lock import StoreLock
lock = StoreLock.acquire(Path(sys.argv[1]))
print("held", flush=True)
sys.stdin.read()
"""


def test_a_second_rsad_on_a_store_is_refused_naming_the_first(tmp_path: Path) -> None:
    db = tmp_path / "state" / "rsa.db"
    first = subprocess.Popen([sys.executable, "-c", _HOLD, str(db)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True,
                             cwd=Path(__file__).parents[2])
    try:
        assert first.stdout is not None and first.stdout.readline() == "held\n"
        assert holder(db) == first.pid
        with pytest.raises(AlreadyRunning) as err:
            StoreLock.acquire(db)
        assert str(err.value) == f"rsad (pid {first.pid}) already runs on {db}"
    finally:
        assert first.stdin is not None
        first.stdin.close()
        first.wait(timeout=30)
    # the holder gone (however it ended), the store is free again
    assert holder(db) is None
    lock = StoreLock.acquire(db)
    assert lock_path(db).read_text() == f"{os.getpid()}\n"
    lock.release()


def test_the_real_rsad_refuses_a_store_another_holds(config: Path, tmp_path: Path) -> None:
    cfg = load_config(config, env={})
    db = Path(cfg.daemon.db_path)
    first = subprocess.Popen([sys.executable, "-c", _HOLD, str(db)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True,
                             cwd=Path(__file__).parents[2])
    try:
        assert first.stdout is not None and first.stdout.readline() == "held\n"
        done = subprocess.run([str(Path(sys.executable).parent / "rsad"),
                               "--config", str(config)], capture_output=True, text=True,
                              timeout=60, cwd=Path(__file__).parents[2])
        assert done.returncode == 1
        assert done.stderr.strip().splitlines()[-1] == (
            f"rsad: error: rsad (pid {first.pid}) already runs on {db}")
        assert not db.exists()  # it stopped before opening the store
        got = CliRunner().invoke(rsad_command, ["--config", str(config), "--check"])
        assert f"rsad: store {db}: none yet" in got.output
    finally:
        assert first.stdin is not None
        first.stdin.close()
        first.wait(timeout=30)


def test_check_shows_the_limits_per_name(config: Path) -> None:
    """Issue 33: an operator sees what the per-name limits came to before rsad runs."""
    named = config.with_name("named.yaml")
    named.write_text(config.read_text().replace("  max_nodes: 2\n", (
        "  max_nodes: 2\n  user_nodes: 1\n  account_limits:\n    bigproj: {nodes: 2}\n"
        "    students: {nodes: 1, stage_ins: 1}\n")))
    named.chmod(0o600)
    got = CliRunner().invoke(rsad_command, ["--config", str(named), "--check"])
    assert got.exit_code == 0, got.output
    lines = got.output.splitlines()
    assert lines[:3] == [
        f"rsad: config {named}: ok",
        "rsad: limits per user: 1 RSA node for all",
        "rsad: limits per account: no limit for all; bigproj: 2 RSA nodes; students: 1 RSA "
        "node, 1 stage-in"], lines
