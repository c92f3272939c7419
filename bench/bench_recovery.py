"""Restart cost of rsad: time and memory of ``Daemon.start()`` on a realistic log.

Builds a store of about ``--events`` events with the real ``Daemon`` (core, store,
worker threads) driving batches of RSA jobs through whole lifecycles (on-deck, staged,
locked in, running, reset, finished, staged out, verified, torn down, released) with
executors that succeed at once, then restarts a fresh ``Daemon`` on it in a child process
three ways:

* ``full``: no snapshot, the whole log replayed (what rsad did before snapshots);
* ``snapshot``: from the newest snapshot, taken after the last batch while every job
  is still in memory (retention not yet passed): the events after it replayed;
* ``snapshot+retention``: finished jobs forgotten (``daemon.retention`` passed), then a
  snapshot: what a long-running rsad restarts from.

Prints one JSON line per way: ``{"events": N, "way": ..., "seconds": S,
"max_rss_mb": M, "jobs_in_memory": J}``. Not a test: nothing asserts.

    .venv/bin/python bench/bench_recovery.py --events 100000 [--dir /tmp]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rsa_scheduler.core.allocator import Pool, RsaNode
from rsa_scheduler.core.policy import AllocationPolicy, ResetTrigger, StagingPolicy, Tier
from rsa_scheduler.core.scheduler import Scheduler
from rsa_scheduler.daemon.service import Daemon
from rsa_scheduler.daemon.wiring import slurm_executors
from rsa_scheduler.store import Store

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_daemon_commit import Queue, instant, settle

BATCH = 200


def make_daemon(path: Path, slurm: Queue, clock: list[float]) -> Daemon:
    pool = Pool([RsaNode(f"rsa{i:05d}", Tier.RAM, 512 << 30) for i in range(BATCH)],
                AllocationPolicy(ratio=1, max_nodes=1))
    policy = StagingPolicy(reset_trigger=ResetTrigger.DELAY, reset_delay=0.001)
    registry = instant()
    slurm_executors(registry, slurm)
    return Daemon(Scheduler(pool, policy), slurm=slurm, store=Store.open(path, durability="normal"),
                  registry=registry, workers=4, poll_interval=0, retention=3600.0,
                  snapshot_every=0, clock=lambda: clock[0])


def build(path: Path, events: int) -> None:
    clock = [1_000_000.0]
    slurm = Queue(0)
    d = make_daemon(path, slurm, clock)
    d.start()
    first = 100_000
    while d.store.last_seq() < events:
        rows = Queue(BATCH).rows.values()
        slurm.rows = {}
        for i, r in enumerate(rows):
            job = str(first + i)
            slurm.rows[job] = dataclasses.replace(r, job_id=job)
        first += BATCH
        deadline = time.monotonic() + 600
        for state in ("PENDING", "RUNNING", "COMPLETED"):
            slurm.set_all(state, "Resources" if state == "PENDING" else "None")
            clock[0] += 1
            d.poll()
            settle(d, deadline)
            clock[0] += 1
            d._commit(d.sched.tick(d.clock()))
            settle(d, deadline)
        slurm.rows = {}
        clock[0] += 1
        d.poll()  # Slurm forgot the batch
    d.snapshot()  # every job still in memory
    d.shutdown()
    d.store.close()


def forget_and_snapshot(path: Path) -> None:
    clock = [1e12]  # long after every job ended: retention has passed
    d = make_daemon(path, Queue(0), clock)
    d.start()
    d._last_forget = -1e18
    d.poll()  # forgets the finished jobs
    d.snapshot()
    d.shutdown()
    d.store.close()


def _peak_rss_mb() -> float:
    """This process's peak RSS (VmHWM: per address space, so unlike getrusage's maxrss it
    does not carry the forking parent's peak across exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def restart(path: Path) -> dict[str, float | int]:
    """In this (child) process: time Daemon.start() on the store at ``path``."""
    clock = [1e12]
    d = make_daemon(path, Queue(0), clock)
    t0 = time.perf_counter()
    d.start()
    seconds = time.perf_counter() - t0
    rss = _peak_rss_mb()
    jobs = len(d.sched.records)
    d.shutdown()
    return {"seconds": round(seconds, 3), "max_rss_mb": round(rss, 1), "jobs_in_memory": jobs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--restart", type=Path, help=argparse.SUPPRESS)  # the child's job
    args = ap.parse_args()
    if args.restart:
        print(json.dumps(restart(args.restart)))
        return
    with tempfile.TemporaryDirectory(prefix="rsa-bench-recovery-", dir=args.dir) as tmp:
        base = Path(tmp) / "log.db"
        build(base, args.events)
        n = int(sqlite3.connect(base).execute("SELECT max(seq) FROM events").fetchone()[0])
        ways: dict[str, Path] = {}
        for way in ("full", "snapshot", "snapshot+retention"):
            p = Path(tmp) / f"{way.replace('+', '_')}.db"
            shutil.copy(base, p)
            ways[way] = p
        con = sqlite3.connect(ways["full"])
        con.execute("DELETE FROM snapshots")
        con.commit()
        con.close()
        forget_and_snapshot(ways["snapshot+retention"])
        for way, p in ways.items():
            out = subprocess.run([sys.executable, __file__, "--restart", str(p)],
                                 capture_output=True, text=True, check=True)
            print(json.dumps({"events": n, "way": way, **json.loads(out.stdout)}))


if __name__ == "__main__":
    main()
