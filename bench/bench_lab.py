"""Benchmark: the lab's bring-up and tear-down (`labctl up`, `labctl down`), N rounds.

Run as root with the lab down; it leaves the lab down (and runs lab/check-clean at the
end). Each set-up named by --setups is measured for --rounds rounds: up, then down,
timed from outside (the wall time a user waits, including labctl's own package check).
`acct` is the default lab (slurmdbd + MariaDB), `noacct` is RSA_LAB_ACCOUNTING=0 (the
second phase of `make test` also sets PrologFlags=Alloc,Contain, which costs nothing here).

    .venv/bin/python bench/bench_lab.py --rounds 2
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LABCTL = REPO / "lab" / "labctl"
ENV_FILE = Path("/run/rsa-lab/env")
SETUPS = {"acct": {"RSA_LAB_ACCOUNTING": "1"}, "noacct": {"RSA_LAB_ACCOUNTING": "0"}}


def timed(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.monotonic()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600,
                          check=False)
    took = time.monotonic() - t0
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return took


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2, help="up/down rounds per set-up")
    ap.add_argument("--setups", default="acct,noacct",
                    help=f"comma-separated, of {', '.join(SETUPS)}")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_lab: run as root")
    if ENV_FILE.exists():
        sys.exit("bench_lab: the lab is up; take it down first (make lab-down)")
    rows = []
    for name in args.setups.split(","):
        env = {**os.environ, **SETUPS[name]}
        ups, downs = [], []
        for _ in range(args.rounds):
            try:
                ups.append(timed([str(LABCTL), "up"], env))
            finally:
                downs.append(timed([str(LABCTL), "down"], env))
        rows.append((name, ups, downs))
    clean = subprocess.run([str(REPO / "lab" / "check-clean")], check=False).returncode
    print(f"\n{'set-up':<8} {'step':<5} {'rounds':>6} {'min s':>7} {'median s':>9} "
          f"{'max s':>7}  each")
    for name, ups, downs in rows:
        for step, times in (("up", ups), ("down", downs)):
            each = " ".join(f"{t:.1f}" for t in times)
            print(f"{name:<8} {step:<5} {len(times):>6} {min(times):>7.1f} "
                  f"{statistics.median(times):>9.1f} {max(times):>7.1f}  {each}")
    return clean


if __name__ == "__main__":
    sys.exit(main())
