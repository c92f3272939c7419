"""Benchmark of the durable store: committed transitions/s and replay time of a large log.

Measures, on a temporary directory (default: the system temp dir, which must be on the
same disk as the deployment for the numbers to mean anything):

* transitions/s for ``durability`` full vs normal, with 1, 10 and 100 events per
  ``Store.append`` (each event with its projection row, as a daemon cycle writes them);
* replay of an N-event log (default 1M): time to read and decode every event through
  ``Store.events()``; the log is built with batched appends (not timed as a target).

Prints a markdown table for ``docs/benchmarks.md``. Not a test: nothing asserts.

    .venv/bin/python bench/bench_store.py [--transitions 5000] [--replay 1000000]
"""

from __future__ import annotations

import argparse
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

from rsa_scheduler.core.events import Event
from rsa_scheduler.store import JobRow, Store

STATES = ("allocated", "fs_building", "fs_ready", "staging_in", "staged_in", "locked_in")


def _batch(i0: int, size: int, now: float) -> tuple[list[Event], list[JobRow]]:
    """``size`` transitions of distinct jobs, with realistic small contexts."""
    events, rows = [], []
    for i in range(i0, i0 + size):
        job = str(1_000_000 + i % 5_000)
        state = STATES[i % len(STATES)]
        events.append(Event(now, job, state, {"action": f"{job}:{state}:{i}",
                                              "nodes": "rsa[001-004]", "attempt": 1}))
        rows.append(JobRow(job, f"user{i % 50}", "pending", state, now,
                           {"nodes": "rsa[001-004]", "tier": "ram"}))
    return events, rows


def bench_append(directory: Path, durability: str, batch: int, transactions: int,
                 rounds: int) -> dict[str, float]:
    """Median over ``rounds`` fresh databases of ``transactions`` appends each.

    Batches are built before the clock starts: only ``Store.append`` is timed.
    """
    work = [_batch((t + 1) * batch, batch, 1.7e9 + t) for t in range(transactions)]
    runs: list[dict[str, float]] = []
    for rnd in range(rounds):
        path = directory / f"append-{durability}-{batch}-{rnd}.db"
        lat: list[float] = []
        with Store.open(path, durability=durability) as store:  # type: ignore[arg-type]
            store.append(*_batch(0, batch, 1.7e9))  # warm up: schema, caches
            t0 = time.perf_counter()
            for events, rows in work:
                s = time.perf_counter()
                store.append(events, rows)
                lat.append(time.perf_counter() - s)
            elapsed = time.perf_counter() - t0
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        lat.sort()
        runs.append({
            "tx_per_s": transactions / elapsed,
            "events_per_s": transactions * batch / elapsed,
            "p50_ms": statistics.median(lat) * 1e3,
            "p99_ms": lat[int(len(lat) * 0.99) - 1] * 1e3,
        })
    runs.sort(key=lambda r: r["tx_per_s"])
    return runs[len(runs) // 2]


def bench_replay(directory: Path, n: int) -> dict[str, float]:
    path = directory / "replay.db"
    batch = 1_000
    t0 = time.perf_counter()
    with Store.open(path, durability="normal") as store:
        for i in range(0, n, batch):
            store.append(*_batch(i, min(batch, n - i), 1.7e9 + i))
    build = time.perf_counter() - t0
    size = path.stat().st_size
    with Store.open(path, readonly=True) as store:
        t0 = time.perf_counter()
        count = sum(1 for _ in store.events())
        replay = time.perf_counter() - t0
        t0 = time.perf_counter()
        one = sum(1 for _ in store.events("1000042"))
        one_job = time.perf_counter() - t0
    assert count == n, (count, n)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return {"build_s": build, "replay_s": replay, "events_per_s": n / replay,
            "size_mb": size / 1e6, "one_job_events": one, "one_job_ms": one_job * 1e3}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transactions", type=int, default=5_000,
                    help="append() calls per configuration (default 5000)")
    ap.add_argument("--batches", default="1,10,100",
                    help="events per append(), comma-separated (default 1,10,100)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="fresh databases per configuration; the median is shown (default 3)")
    ap.add_argument("--replay", type=int, default=1_000_000,
                    help="events in the replay log; 0 skips it (default 1000000)")
    ap.add_argument("--dir", type=Path, default=None,
                    help="where to put the temporary databases (default: system temp dir)")
    args = ap.parse_args(argv)
    batches = [int(b) for b in args.batches.split(",")]

    with tempfile.TemporaryDirectory(prefix="rsa-bench-store-", dir=args.dir) as tmp:
        directory = Path(tmp)
        print(f"<!-- {platform.node()} {platform.machine()} cpus={os.cpu_count()} "
              f"python={platform.python_version()} sqlite={sqlite3.sqlite_version} "
              f"dir={directory} dev={os.stat(directory).st_dev} -->")
        print("| durability | events/append | appends/s | events/s | p50 ms | p99 ms |")
        print("|---|---:|---:|---:|---:|---:|")
        results: dict[tuple[str, int], dict[str, float]] = {}
        for batch in batches:
            # fewer big transactions so every configuration runs a few seconds at most
            n = max(200, args.transactions // max(1, batch // 10))
            for durability in ("full", "normal"):
                r = bench_append(directory, durability, batch, n, args.rounds)
                results[durability, batch] = r
                print(f"| {durability} | {batch} | {r['tx_per_s']:,.0f} | "
                      f"{r['events_per_s']:,.0f} | {r['p50_ms']:.3f} | {r['p99_ms']:.3f} |",
                      flush=True)
        print()
        for batch in batches:
            full, normal = results["full", batch], results["normal", batch]
            print(f"- batch {batch}: normal/full = "
                  f"{normal['tx_per_s'] / full['tx_per_s']:.2f}x")
        if args.replay:
            r = bench_replay(directory, args.replay)
            print()
            print("| replay | events | build s | DB MB | read+decode s | events/s "
                  "| one job's stream |")
            print("|---|---:|---:|---:|---:|---:|---:|")
            print(f"| all events | {args.replay:,} | {r['build_s']:.1f} | "
                  f"{r['size_mb']:.0f} | {r['replay_s']:.2f} | {r['events_per_s']:,.0f} | "
                  f"{r['one_job_events']:.0f} events in {r['one_job_ms']:.1f} ms |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
