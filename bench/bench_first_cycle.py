"""Benchmark: rsad's first cycle after a start, and its steady cycle, on a synthetic
squeue output shaped like bench_cycle.py's real one, without the lab.

bench_cycle.py measures the same cycle against a real Slurm queue (it needs the lab and
submits 100k jobs into it). This one feeds a real ``Daemon`` (real core, real SQLite
store with the shipped ``full`` durability in a throw-away directory) the text a real
``squeue -h -r -t all -O ...`` prints for that queue: held job arrays of 1,000 tasks
(one line each), every 10th array with the admin_comment job_submit.lua writes (the
``rsa1:`` spec and the start hold marker). Only the squeue call itself is missing, so
the times here are rsad's own cost of a cycle; divide by the squeue time measured on
the lab (docs/benchmarks.md) for the issue's ratio. The machine is shared: the
process's CPU time is given in brackets (the daemon's worker threads are idle here).

    .venv/bin/python bench/bench_first_cycle.py                      # 110k lines, 11k RSA jobs
    .venv/bin/python bench/bench_first_cycle.py --lines 110000 --profile first
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

from rsa_scheduler.core.allocator import Pool, RsaNode
from rsa_scheduler.core.directives import HOLD_MARK, DirectiveSpec
from rsa_scheduler.core.policy import AllocationPolicy, StagingPolicy, Tier
from rsa_scheduler.core.scheduler import Scheduler
from rsa_scheduler.daemon.executors import Registry
from rsa_scheduler.daemon.service import Daemon
from rsa_scheduler.slurm.parse import JobInfo, QueueRow, parse_queue
from rsa_scheduler.store import Store

ARRAY = 1000
RSA_EVERY = 10  # every 10th array carries #RSA_ directives (as bench_cycle.py)
PFS = "/pfs/home/rsauser"


def queue_text(lines: int, now: float) -> str:
    """What squeue prints for ``lines // ARRAY`` held arrays of ARRAY tasks."""
    spec = DirectiveSpec(data_in=f"{PFS}/in", data_out=f"{PFS}/out")
    comment = f"{spec.to_admin_comment()}{HOLD_MARK}{int(now) + 600}"
    out: list[str] = []
    for a in range(lines // ARRAY):
        array = 1000 + a * (ARRAY + 1)
        tail = f"{comment}|" if a % RSA_EVERY == 0 else "(null)|"
        out.extend(f"{array}_{t}|PENDING|JobHeldUser|0|1|rsauser|debug|10:00|{tail}"
                   for t in range(ARRAY))
    return "\n".join(out) + "\n"


class TextSlurm:
    """A Slurm port whose queue is fixed text (what ``CliSlurm.queue_text`` returns)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def queue_text(self) -> str:
        return self.text

    def queue(self) -> list[QueueRow]:
        return parse_queue(self.text)

    def idle_nodes(self) -> dict[str, int]:
        return {}

    def pending_jobs(self) -> list[tuple[str, int, str, str]]:
        return []

    def job_info(self, job_id: str) -> JobInfo:
        return JobInfo(job_id, job_id, "N/A", "alice", "debug", "")

    def batch_script(self, job_id: str) -> str:
        return ""

    def lock_original(self, job_id: str) -> str:
        return ""

    def lock_in(self, job_id: str) -> None:
        pass

    def unlock(self, job_id: str, original: str = "") -> str:
        return ""

    def set_comment(self, job_id: str, text: str) -> None:
        pass

    def drain_nodes(self, nodes: object, reason: str) -> None:
        pass

    def hold(self, job_id: str, seconds: int, admin_comment: str) -> None:
        pass

    def release_hold(self, job_id: str, admin_comment: str) -> None:
        pass


def rss_mb() -> float:
    """Resident set size now (VmRSS), MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def measure(lines: int, repeats: int, profile: bool) -> dict[str, float]:
    now = time.time()
    text = queue_text(lines, now)
    pool = Pool([RsaNode(f"rsa{i}", Tier.RAM, 2 << 30) for i in range(1, 5)],
                AllocationPolicy(ratio=32, max_nodes=4))
    with tempfile.TemporaryDirectory(prefix="rsa-bench-") as tmp:
        store = Store.open(Path(tmp) / "bench.db", durability="full")
        daemon = Daemon(Scheduler(pool, StagingPolicy()), slurm=TextSlurm(text),
                        store=store, registry=Registry(), poll_interval=0)
        try:
            daemon.start()  # as rsad does before its first cycle (an empty log here)
            gc.freeze()  # as rsad's main does after start()
            gc.collect()
            rss0 = rss_mb()
            c0, t0 = time.process_time(), time.perf_counter()
            if profile:
                prof = cProfile.Profile(time.process_time)
                prof.enable()
                daemon.poll()
                prof.disable()
            else:
                daemon.poll()
            first = time.perf_counter() - t0
            first_cpu = time.process_time() - c0
            rss1 = rss_mb()
            # a fresh rsad takes quiet new jobs on over several cycles
            # (daemon/cycle.py defer_first_sights): the cycles until it tracks them all
            expected = -(-(lines // ARRAY) // RSA_EVERY) * ARRAY
            catch_up = [first]
            while len(daemon.sched.records) < expected and len(catch_up) < 10_000:
                t0 = time.perf_counter()
                daemon.poll()
                catch_up.append(time.perf_counter() - t0)
            cycles = len(catch_up)
            t0 = time.perf_counter()
            daemon.poll()  # the cycle after: the snapshot held back while catching up
            catch_up.append(time.perf_counter() - t0)
            steady = []
            for _ in range(repeats):
                gc.collect()
                t0 = time.perf_counter()
                daemon.poll()
                steady.append(time.perf_counter() - t0)
            tracked = len(daemon.sched.records)
            events = store.last_seq()
        finally:
            daemon.shutdown()
            store.close()
            gc.unfreeze()
    if profile:
        print(f"\n--- profile: first cycle, {lines} lines ---", file=sys.stderr)
        pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(25)
        pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(30)
    return {"lines": lines, "tracked": tracked, "events": events, "first": first,
            "first_cpu": first_cpu, "cycles": cycles, "slowest": max(catch_up),
            "all_in": sum(catch_up[:cycles]),
            "steady": statistics.median(steady), "rss_growth": rss1 - rss0,
            "maxrss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, nargs="+", default=[110_000])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--profile", action="store_true", help="cProfile the first cycle")
    args = ap.parse_args()
    print("| squeue lines | RSA jobs tracked | events | first cycle (cpu) | cycles to track "
          "all | slowest of them and the next | their sum | steady cycle "
          "| RSS growth in the first cycle | peak RSS |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in args.lines:
        r = measure(n, args.repeats, args.profile)
        print(f"| {r['lines']:,} | {r['tracked']:,} | {r['events']:,} | "
              f"{r['first'] * 1000:.0f} ms ({r['first_cpu'] * 1000:.0f}) | "
              f"{r['cycles']} | {r['slowest'] * 1000:.0f} ms | {r['all_in'] * 1000:.0f} ms | "
              f"{r['steady'] * 1000:.1f} ms | "
              f"{r['rss_growth']:.0f} MB | {r['maxrss']:.0f} MB |", flush=True)


if __name__ == "__main__":
    main()
