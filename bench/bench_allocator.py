"""Micro-benchmark of the RSA node allocator on a pool of 1,000 nodes.

Measures, on a pool of 800 RAM + 200 SSD nodes kept nearly full:

* allocate+release pairs per second for proportional requests (1–8 nodes) and for
  capacity requests, releasing the oldest holders whenever a request does not fit (so
  the pool stays nearly full and some allocate calls return ``None``);
* ``allocate`` calls per second that return ``None`` (the pool is full: the job is skipped
  this cycle), the common case for a deep on-deck queue;
* one daemon-cycle pattern: a few hundred on-deck jobs tried against the pool.

Prints a markdown table for ``docs/benchmarks.md``. Not a test: nothing asserts.

    .venv/bin/python bench/bench_allocator.py [--ops 20000]
"""

from __future__ import annotations

import argparse
import platform
import random
import sys
import time
from collections import deque

from rsa_scheduler.core.allocator import Pool, Request, RsaNode
from rsa_scheduler.core.policy import AllocationPolicy, Tier

G = 1 << 30
POLICY = AllocationPolicy(ratio=32, min_nodes=1, max_nodes=8, max_request=16)


def make_pool() -> Pool:
    nodes = [RsaNode(f"rsa{i:04d}", Tier.RAM, 256 * G) for i in range(800)]
    nodes += [RsaNode(f"ssd{i:04d}", Tier.SSD, 4096 * G) for i in range(200)]
    return Pool(nodes, POLICY)


def churn(pool: Pool, requests: list[Request]) -> tuple[float, int]:
    """Allocate each request, releasing the oldest holders until it fits; release all."""
    window: deque[str] = deque()
    pairs = 0
    t0 = time.perf_counter()
    for req in requests:
        while pool.allocate(req) is None:
            pool.release(window.popleft())
            pairs += 1
        window.append(req.job_id)
    for job in window:
        pool.release(job)
        pairs += 1
    return time.perf_counter() - t0, pairs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=20_000, help="requests per measurement")
    args = ap.parse_args()
    rng = random.Random(4)
    rows: list[tuple[str, str]] = []

    t0 = time.perf_counter()
    pool = make_pool()
    rows.append(("build a 1,000-node pool", f"{(time.perf_counter() - t0) * 1e3:.1f} ms"))

    prop = [Request(str(i), rng.randint(1, 256)) for i in range(args.ops)]
    secs, done = churn(pool, prop)
    rows.append(("allocate+release, proportional (1–8 nodes)", f"{done / secs:,.0f} pairs/s"))

    cap = [
        Request(str(i), 1, tier=Tier.SSD, capacity=rng.randint(1, 16 * 1024) * G)
        for i in range(args.ops)
    ]
    secs, done = churn(make_pool(), cap)
    rows.append(("allocate+release, capacity on ssd (1–4 nodes)", f"{done / secs:,.0f} pairs/s"))

    full = make_pool()
    for i in range(100):
        full.allocate(Request(f"hold{i}", 1, nodes=8))  # 800 RAM nodes all held
    skip = [Request(str(i), rng.randint(1, 256)) for i in range(args.ops)]
    t0 = time.perf_counter()
    for req in skip:
        full.allocate(req)
    secs = time.perf_counter() - t0
    rows.append(("allocate → None (pool full, skip)", f"{len(skip) / secs:,.0f} calls/s"))

    cycle = make_pool()
    ondeck = [Request(str(i), rng.randint(1, 512)) for i in range(300)]
    t0 = time.perf_counter()
    got = [cycle.allocate(req) for req in ondeck]
    secs = time.perf_counter() - t0
    placed = sum(g is not None for g in got)
    rows.append((f"one cycle: 300 on-deck jobs ({placed} placed)", f"{secs * 1e3:.1f} ms"))

    t0 = time.perf_counter()
    for i in range(300):
        cycle.release(str(i))
    rows.append(("release all of them", f"{(time.perf_counter() - t0) * 1e3:.1f} ms"))

    print(f"Python {platform.python_version()} on {platform.machine()}, {args.ops} requests\n")
    print("| allocator, 1,000 RSA nodes | result |")
    print("|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
