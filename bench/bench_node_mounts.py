"""Benchmark: one job's mount over DATA_IN and its release on a node (issue 12: by handle).

Times ``JobMounts.mount`` (client mount, path checks, attach) and ``JobMounts.release``
(lazy, as the Epilog) ``--runs`` times, in a throwaway mount namespace on a tmpfs over
/media (nothing is left behind). The "client mount" is a ``mount --bind`` of a prepared
tmpfs, so the numbers are the node side's own cost, not a FUSE client's start-up. Give
``--tree`` another checkout (e.g. the commit before) to compare. Needs root and unshare.

    .venv/bin/python bench/bench_node_mounts.py --runs 200 --mode ro
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import textwrap
from pathlib import Path

SCENARIO = textwrap.dedent('''
    import statistics, subprocess, sys, time
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    from rsa_scheduler.node.mounts import JobMounts
    from rsa_scheduler.node.paths import Who
    runs, mode, R = int(sys.argv[2]), sys.argv[3], Path("/media")
    subprocess.run(["mount", "-t", "tmpfs", "bench", str(R)], check=True)
    pfs, src = R / "pfs", R / "src"
    (pfs / "u" / "in").mkdir(parents=True)
    src.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "ram", str(src)], check=True)
    took = {"mount": [], "release": []}
    for i in range(runs):
        jm = JobMounts(str(i), "c1", str(R / "node"))
        ins = {"seq": 1, "do": "mount", "role": "input", "target": str(pfs / "u" / "in"),
               "mode": mode, "client_argv": ["mount", "--bind", str(src), "@MOUNTPOINT@"],
               "client_umount_argv": ["umount", "@MOUNTPOINT@"]}
        t = time.perf_counter()
        jm.mount(ins, Who(0, frozenset({0})), [str(pfs)])
        took["mount"].append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        assert jm.release(lazy=True).ok
        took["release"].append((time.perf_counter() - t) * 1000)
        jm.remove()
    for name, ms in took.items():
        ms.sort()
        p99 = ms[min(len(ms) - 1, round(0.99 * (len(ms) - 1)))]
        print(f"| {name} ({mode}) | {runs} | {statistics.median(ms):.2f} | {p99:.2f} | "
              f"{ms[-1]:.2f} |")
''')


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--mode", choices=("ro", "rw", "union"), default="ro")
    ap.add_argument("--tree", default=str(Path(__file__).resolve().parents[1]),
                    help="the rsa-scheduler checkout to measure")
    args = ap.parse_args()
    print("| what | runs | p50 ms | p99 ms | max ms |")
    print("|---|---|---|---|---|")
    subprocess.run(["unshare", "--mount", "--propagation", "private", sys.executable, "-c",
                    SCENARIO, args.tree, str(args.runs), args.mode], check=True)


if __name__ == "__main__":
    main()
