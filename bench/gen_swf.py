"""Write a synthetic Standard Workload Format (SWF) trace, deterministic for a seed.

For tests and benchmarks of ``rsa sim replay``; real traces (Parallel Workloads Archive)
are the user's. The workload: Poisson arrivals (``--interarrival`` mean seconds),
processor counts a power of two up to ``--procs`` (small jobs more likely), log-normal run
times (median ``--runtime`` s), requested time 1-3x the run time, the full SWF header.
Memory (field 7) is -1 unless ``--memory`` gives KB per processor. ``--io-columns`` adds
rsa-scheduler's 3 extension fields (input bytes, output bytes, output files); with
``--fpp`` a share of the jobs write one file per processor.

    .venv/bin/python bench/gen_swf.py --jobs 500 --seed 1 -o tests/data/swf/small.swf
    .venv/bin/python bench/gen_swf.py --jobs 1000000 --seed 7 -o /tmp/1m.swf
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from collections.abc import Iterator
from typing import TextIO


def generate(jobs: int, *, seed: int = 1, procs: int = 1024, procs_per_node: int = 16,
             interarrival: float = 240.0, runtime: float = 1800.0,
             memory_kb: int = -1, io_columns: bool = False, fpp: float = 0.0,
             io_per_proc: float = 256 * 2**20) -> Iterator[str]:
    """The trace's lines (without newlines): header comments, then one line per job."""
    if jobs < 0 or procs < 1 or procs_per_node < 1 or procs % procs_per_node:
        raise ValueError("jobs >= 0, procs >= 1 and a multiple of procs_per_node")
    rng = random.Random(seed)
    yield "; Version: 2.2"
    yield "; Computer: rsa-scheduler synthetic cluster"
    cmd = (f"bench/gen_swf.py --jobs {jobs} --seed {seed} --procs {procs} "
           f"--procs-per-node {procs_per_node} --interarrival {interarrival:g} "
           f"--runtime {runtime:g}" + (f" --memory {memory_kb}" if memory_kb >= 0 else "")
           + (f" --io-columns --fpp {fpp:g}" if io_columns else ""))
    yield f"; Installation: {cmd}"
    yield f"; MaxJobs: {jobs}"
    yield f"; MaxRecords: {jobs}"
    yield "; UnixStartTime: 1700000000"
    yield "; TimeZoneString: UTC"
    yield f"; MaxNodes: {procs // procs_per_node}"
    yield f"; MaxProcs: {procs}"
    yield f"; Note: synthetic, seed {seed}" + (
        "; fields 19-21 are rsa-scheduler I/O columns" if io_columns else "")
    yield ";"
    sizes = [2**k for k in range(int(math.log2(procs)) + 1)]
    weights = [1.0 / (k + 1) for k in range(len(sizes))]
    t = 0.0
    for job in range(1, jobs + 1):
        t += rng.expovariate(1.0 / interarrival)
        p = rng.choices(sizes, weights)[0]
        run = max(1, int(runtime * math.exp(rng.gauss(0.0, 1.0))))
        req = int(run * rng.uniform(1.0, 3.0)) + 60
        fields = [job, int(t), -1, run, p, -1, memory_kb, p, req, -1, 1,
                  rng.randrange(1, 200), 1, -1, 1, 1, -1, -1]
        if io_columns:
            inp = int(io_per_proc * p * math.exp(rng.gauss(0.0, 1.0)))
            out = int(inp * 0.5)
            files = p if rng.random() < fpp else 1
            fields += [inp, out, files]
        yield " ".join(str(f) for f in fields)


def write(out: TextIO, lines: Iterator[str]) -> int:
    n = 0
    for line in lines:
        out.write(line + "\n")
        n += 1
    return n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=500)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--procs", type=int, default=1024)
    ap.add_argument("--procs-per-node", type=int, default=16)
    ap.add_argument("--interarrival", type=float, default=240.0)
    ap.add_argument("--runtime", type=float, default=1800.0)
    ap.add_argument("--memory", type=int, default=-1, help="KB per processor (field 7)")
    ap.add_argument("--io-columns", action="store_true")
    ap.add_argument("--fpp", type=float, default=0.0)
    ap.add_argument("-o", "--output", default="-")
    a = ap.parse_args(argv)
    lines = generate(a.jobs, seed=a.seed, procs=a.procs, procs_per_node=a.procs_per_node,
                     interarrival=a.interarrival, runtime=a.runtime, memory_kb=a.memory,
                     io_columns=a.io_columns, fpp=a.fpp)
    if a.output == "-":
        write(sys.stdout, lines)
    else:
        with open(a.output, "w", encoding="utf-8") as f:
            write(f, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
