"""Benchmark: node Prolog latency when there is nothing to do (issue 5 target < 100 ms).

Runs the node Prolog (``python -m rsa_scheduler.node.hooks prolog``, as slurmd would, as
root) ``--runs`` times against the running rsad for job ids rsad does not track, and
prints p50/p99/max of the whole process's wall time, plus the same for a bare
``python -c pass`` (the interpreter's floor) and for the import alone. Needs a running
rsad (the lab) and root (MUNGE credentials from uid 0, as slurmd's).

    .venv/bin/python bench/bench_prolog.py --runs 200
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time


def timed(argv: list[str], env: dict[str, str], runs: int) -> list[float]:
    out = []
    for i in range(runs):
        e = {**env, "SLURM_JOB_ID": str(990_000_000 + i)}
        t0 = time.perf_counter()
        subprocess.run(argv, env=e, check=True, stdout=subprocess.DEVNULL)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def row(name: str, ms: list[float]) -> str:
    ms = sorted(ms)
    p99 = ms[min(len(ms) - 1, round(0.99 * (len(ms) - 1)))]
    return (f"| {name} | {len(ms)} | {statistics.median(ms):.1f} | {p99:.1f} | "
            f"{ms[-1]:.1f} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--api", default=os.environ.get("RSA_API", "/run/rsa/rsad.sock"))
    args = ap.parse_args()
    py = sys.executable
    env = {"PATH": "/usr/bin:/bin", "RSA_API": args.api, "RSA_ALLOWED_ROOTS": "/home",
           "SLURMD_NODENAME": "c1", "SLURM_NODELIST": "c1", "SLURM_JOB_UID": "1001",
           "RSA_NODE_DIR": "/run/rsa/node-bench"}
    print("| what | runs | p50 ms | p99 ms | max ms |")
    print("|---|---|---|---|---|")
    print(row("python -c pass (floor)", timed([py, "-c", "pass"], env, args.runs)))
    print(row("import rsa_scheduler.node.hooks + client",
              timed([py, "-c", "import rsa_scheduler.node.hooks, rsa_scheduler.client"],
                    env, args.runs)))
    print(row("rsa-prolog, job not tracked (API via " +
              ("TCP" if ":" in args.api else "unix socket") + ")",
              timed([py, "-m", "rsa_scheduler.node.hooks", "prolog"], env, args.runs)))
    print(row("rsa-epilog, job not tracked",
              timed([py, "-m", "rsa_scheduler.node.hooks", "epilog"], env, args.runs)))


if __name__ == "__main__":
    main()
