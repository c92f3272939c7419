"""Snapshots (issue 16): a restart loads the newest snapshot and replays only the events
after it, and ends in exactly the state a replay of the whole log gives."""

from __future__ import annotations

import itertools
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from rsa_scheduler.core.policy import StagingPolicy
from rsa_scheduler.core.scheduler import Scheduler
from rsa_scheduler.daemon.service import Daemon
from rsa_scheduler.store import Store
from tests.unit.corekit import make_pool
from tests.unit.test_daemon import ScriptedSlurm, instant_registry, settle, with_slurm


def daemon(db: Path, slurm: ScriptedSlurm, snapshot_every: int = 0) -> Daemon:
    store = Store.open(db, durability="normal")
    clock = iter(float(t) for t in range(1000, 10**6))
    d = Daemon(Scheduler(make_pool(), StagingPolicy()), slurm=slurm, store=store,
               registry=with_slurm(instant_registry([]), slurm), workers=2, poll_interval=0,
               snapshot_every=snapshot_every, clock=lambda: next(clock))
    d.start()
    return d


def state(d: Daemon) -> dict[str, Any]:
    return {"records": d.sched.snapshot(), "pool": d.sched.pool.snapshot(),
            "facts": d.facts, "notes": d.node_notes}


def test_store_keeps_the_newest_snapshots(tmp_path: Path) -> None:
    from rsa_scheduler.core.events import Event

    store = Store.open(tmp_path / "rsa.db", durability="normal")
    assert store.latest_snapshot() is None
    store.append([Event(1.0, "7", "job.hook", {}) for _ in range(5)])
    for seq in (1, 3, 5):
        store.write_snapshot(seq, 2.0, {"at": seq})
    assert store.latest_snapshot() == (5, {"at": 5})
    rows = sqlite3.connect(tmp_path / "rsa.db").execute(
        "SELECT seq FROM snapshots ORDER BY seq").fetchall()
    assert rows == [(3,), (5,)]
    with pytest.raises(ValueError, match="ahead of the log"):
        store.write_snapshot(6, 2.0, {})
    store.close()


def test_snapshots_skip_the_first_cycle_and_wait_for_as_many_events_as_jobs(
        tmp_path: Path) -> None:
    """The first cycle after a start (every job of the queue at once) writes none; later
    ones write one once ``snapshot_every`` events, and at least as many as jobs in
    memory, came after the last: a snapshot's cost (one record each) is spread over as
    many events as it spares a restart's replay."""
    slurm = ScriptedSlurm()
    d = daemon(tmp_path / "rsa.db", slurm, snapshot_every=5)
    for job in range(100, 120):  # 20 queued jobs: 40 events (after the start's rsad.mode)
        slurm.set(str(job), "PENDING", "Priority")
    d.poll()
    assert d.store.last_seq() == 41 and d.store.latest_snapshot() is None
    taken: list[tuple[int, int]] = []  # (seq of each snapshot, jobs in memory then)
    for i in range(12):  # 3 new jobs per cycle: 6 events, more than snapshot_every
        for job in range(200 + 3 * i, 203 + 3 * i):
            slurm.set(str(job), "PENDING", "Priority")
        d.poll()
        snap = d.store.latest_snapshot()
        if snap is not None and (not taken or snap[0] != taken[-1][0]):
            taken.append((snap[0], len(snap[1]["records"])))
    assert taken[0][0] > 41  # the first cycle's 40 events, in the second cycle's snapshot
    assert len(taken) >= 2
    for (before, _), (seq, jobs) in itertools.pairwise(taken):
        assert seq - before >= jobs > 5  # as many events as jobs in memory, not 5
    d.shutdown()
    d.store.close()


def test_a_restart_from_a_snapshot_equals_a_full_replay(tmp_path: Path) -> None:
    db = tmp_path / "rsa.db"
    slurm = ScriptedSlurm()
    d = daemon(db, slurm, snapshot_every=5)
    for job in ("7", "8", "9"):
        slurm.set(job, "PENDING", "Resources")
    d.poll()
    settle(d)
    slurm.set("7", "RUNNING")
    slurm.set("8", "PENDING", "Priority")  # demoted: its RAMDISK is torn down
    d.poll()
    settle(d)
    d.submit("node-state", ("rsa2", "drained", "root", "disk check"))
    d.drain(timeout=0.5)
    assert d.node_notes["rsa2"]["reason"] == "disk check"
    snap_seq = d.snapshot()  # then more happens after the snapshot
    slurm.set("7", "COMPLETED")
    slurm.set("10", "PENDING", "Resources")
    d.poll()
    settle(d)
    live = state(d)
    last = d.store.last_seq()
    d.shutdown()
    d.store.close()
    assert last > snap_seq

    # the same log without its snapshots: a full replay
    full_db = tmp_path / "full.db"
    shutil.copy(db, full_db)
    con = sqlite3.connect(full_db)
    con.execute("DELETE FROM snapshots")
    con.commit()
    con.close()

    slurm2 = ScriptedSlurm()
    from_snap = daemon(db, slurm2)
    assert from_snap.cadence.seq >= snap_seq  # it started from a snapshot
    full = daemon(full_db, ScriptedSlurm())
    assert full.cadence.seq == 0
    assert state(from_snap) == state(full)
    assert from_snap.sched.pool.state("rsa2").value == "drained"
    assert state(full)["records"] == live["records"]
    for d2 in (from_snap, full):
        d2.shutdown()
        d2.store.close()
