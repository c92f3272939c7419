"""Benchmark: ``rsa sim replay`` on synthetic SWF traces of growing length.

Issue 17 target: a 1M-job trace replays (with the RSA and the baseline) in < 10 min, with
memory bounded by the active jobs, so time per job stays flat as the trace grows. Each
size runs in a fresh process (``rsa sim replay --json``) whose wall time and peak RSS
(``ru_maxrss`` of the child) and CPU time (user + system: the honest figure on a
shared machine, where wall time depends on the neighbours) are measured; the trace is
written by bench/gen_swf.py first (not timed). Not a timed test: run it by hand and copy
the table into docs/benchmarks.md.

    .venv/bin/python bench/bench_replay.py                          # 10k, 100k jobs
    .venv/bin/python bench/bench_replay.py --sizes 1000000 --check-stride 10
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GEN = ROOT / "bench" / "gen_swf.py"


def run_one(jobs: int, args: argparse.Namespace, workdir: Path) -> dict[str, object]:
    trace = workdir / f"bench-{jobs}-{args.seed}-{args.interarrival:g}.swf"
    if not trace.exists():
        subprocess.run([sys.executable, str(GEN), "--jobs", str(jobs), "--seed",
                        str(args.seed), "--interarrival", str(args.interarrival),
                        "-o", str(trace)], check=True)
    argv = [sys.executable, "-m", "rsa_scheduler", "sim", "replay", "--swf", str(trace),
            "--rsa-nodes", str(args.rsa_nodes), "--on-deck", str(args.on_deck),
            "--check-stride", str(args.check_stride), "--json"]
    with tempfile.TemporaryFile("w+") as stdout, tempfile.TemporaryFile("w+") as stderr:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=stdout, stderr=stderr)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak RSS
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        stdout.seek(0)
        stderr.seek(0)
        if proc.returncode != 0:
            raise SystemExit(f"replay failed ({proc.returncode}): {stderr.read().strip()}")
        out = json.loads(stdout.read())
    return {"jobs": jobs, "replayed": out["jobs"], "wall_s": round(wall, 1),
            "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
            "us_per_job": round(wall / jobs * 1e6), "peak_rss_mb": round(usage.ru_maxrss / 1024),
            "max_active_jobs": out["max_active_jobs"],
            "replay_checks": out["rsa"]["replay_checks"],
            "mean_hold_s": out["mean_hold_s"], "baseline_mean_hold_s":
            out["baseline"]["mean_hold_s"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")],
                    default=[10_000, 100_000])
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--interarrival", type=float, default=600.0)
    ap.add_argument("--rsa-nodes", type=int, default=16)
    ap.add_argument("--on-deck", type=int, default=1)
    ap.add_argument("--check-stride", type=int, default=1)
    ap.add_argument("--workdir", default=os.environ.get("TMPDIR", tempfile.gettempdir()))
    args = ap.parse_args(argv)
    print(f"# {platform.python_implementation()} {platform.python_version()}, "
          f"{os.cpu_count()} CPUs, check-stride {args.check_stride}, "
          f"on-deck {args.on_deck}, {args.rsa_nodes} RSA nodes")
    print("| jobs | wall (s) | CPU (s) | wall µs/job | peak RSS (MB) | max active jobs "
          "| replay checks |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n in args.sizes:
        r = run_one(n, args, Path(args.workdir))
        print(f"| {r['jobs']} | {r['wall_s']} | {r['cpu_s']} | {r['us_per_job']} | "
              f"{r['peak_rss_mb']} | "
              f"{r['max_active_jobs']} | {r['replay_checks']} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
