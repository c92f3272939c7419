"""Stage-out ordering on the lab's throttled PFS (seed 003, TRIO): mean job stage-out
completion time under ``fifo``, ``sjf`` and ``trio`` (rsa_scheduler/staging/flush.py).

N jobs end together: each has its output (one directory of files, sizes growing job by
job) on one real 4-node MooseFS RAMDISK of the lab, and a stage-out engine (the real
copy tools, as the lab user, over SSH) stages it out to its own directory on the PFS
(MooseFS throttled to ~1 Gbit/s: where concurrent stage-outs compete). All N start at
once, largest job first; for each ordering the per-job time from the common start to
its stage-out's end is measured, and every copy is checked against its source (sizes
and contents, md5 of the whole tree). Needs the lab (``make lab-up``) and root.
Prints one JSON line per run and a markdown table for docs/benchmarks.md.

    .venv/bin/python bench/bench_flush.py [--jobs 8] [--mib 16] [--alpha 2] [--rounds 1]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_staging import Bench, lab_env

from rsa_scheduler.staging import StagingEngine
from rsa_scheduler.staging.flush import ORDERS, FlushGate

MD5 = 'cd "$0" && find . -type f -print0 | sort -z | xargs -0 -r md5sum | md5sum'


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=8)
    ap.add_argument("--mib", type=int, default=16, help="job k writes k x MIB MiB")
    ap.add_argument("--files", type=int, default=4, help="files per job")
    ap.add_argument("--alpha", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    lab = lab_env()
    b = Bench(lab, parallel=2)
    pfs = Path(lab["RSA_LAB_PFS"]) / f"bench-flush-{int(time.time())}"
    b.as_user(["mkdir", "-p", str(pfs)])
    rows: list[dict[str, object]] = []
    try:
        with b.ramdisk() as spec:
            ram = spec.rsa_mountpoint
            for k in range(1, args.jobs + 1):
                size = k * args.mib // args.files
                b.as_user(["bash", "-c", f'mkdir -p "$0/j{k}" && for i in $(seq '
                          f'{args.files}); do head -c {size}M /dev/urandom > "$0/j{k}/f$i"; '
                          "done", ram])
            sums = {k: b.hosts[0].run(["sh", "-c", MD5, f"{ram}/j{k}"], timeout=600,
                                      as_user=b.user).stdout
                    for k in range(1, args.jobs + 1)}
            for rnd in range(args.rounds):
                for order in ORDERS:
                    gate = FlushGate(order, args.alpha)
                    done: dict[int, float] = {}
                    start = threading.Event()
                    t0 = [0.0]

                    def one(k: int, order: str = order, gate: FlushGate = gate,
                            done: dict[int, float] = done, start: threading.Event = start,
                            rnd: int = rnd, t0: list[float] = t0) -> None:
                        eng = StagingEngine(b.hosts, b.user, parallel_per_node=1,
                                            job_id=str(1000 + k), gate=gate)
                        dst = pfs / f"{order}-{rnd}" / f"j{k}"
                        start.wait()
                        eng.stage_out(f"{ram}/j{k}", str(dst))
                        done[k] = time.monotonic() - t0[0]

                    threads = [threading.Thread(target=one, args=(k,))
                               for k in range(args.jobs, 0, -1)]  # largest first
                    for t in threads:
                        t.start()
                    t0[0] = time.monotonic()
                    start.set()
                    for t in threads:
                        t.join()
                    bad = [k for k in done if b.hosts[0].run(
                        ["sh", "-c", MD5, str(pfs / f"{order}-{rnd}" / f"j{k}")],
                        timeout=600, as_user=b.user).stdout != sums[k]]
                    if len(done) != args.jobs or bad:
                        print(f"{order}: {args.jobs - len(done)} failed, {bad} differ",
                              file=sys.stderr)
                        return 1
                    row = {"order": order, "round": rnd, "alpha": args.alpha,
                           "mean_s": round(statistics.mean(done.values()), 2),
                           "max_s": round(max(done.values()), 2),
                           "per_job_s": {k: round(v, 2) for k, v in sorted(done.items())}}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    finally:
        shutil.rmtree(pfs, ignore_errors=True)
    print(f"\n| order | mean job stage-out (s) | last job (s) |  ({args.jobs} jobs, "
          f"{args.mib}..{args.jobs * args.mib} MiB, alpha {args.alpha}) |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['order']} | {r['mean_s']} | {r['max_s']} | round {r['round']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
