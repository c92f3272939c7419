"""What atomic placement costs a stage-out: the same RAMDISK tree staged out with every
file copied into ``DATA_OUT/.rsa-staging-<job>-<random>/`` and renamed into place (what rsad
does) and written straight to its final name (what it did before), alternately, in one
run, to local disk and to the lab's throttled MooseFS PFS.

A 10k x 4 KiB tree and 64 files of 8 MiB are staged into a real 4-node MooseFS RAMDISK
(rsa[1-4] of the lab, as the lab user); then each round stages them out once each way,
the order alternating between rounds, into a fresh directory. Needs the lab
(`make lab-up`) and root.

    .venv/bin/python bench/bench_stageout_atomic.py [--rounds 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import time
from pathlib import Path

from bench_staging import Bench, lab_env, make_tree

from rsa_scheduler.runner import Identity

MID_FILES, MID_SIZE = 64, 8 << 20


def make_mid(root: Path, user: Identity) -> None:
    root.mkdir(parents=True)
    for i in range(MID_FILES):
        (root / f"m{i:03d}").write_bytes(os.urandom(MID_SIZE))
    for p in (root, *root.iterdir()):
        os.chown(p, user.uid, user.gid)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--parallel", type=int, default=2, help="streams per RSA node")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()
    lab = lab_env()
    b = Bench(lab, args.parallel)
    local = Path(f"/var/tmp/rsa-atomic-bench-{os.getpid()}")
    pfs = Path(lab["RSA_LAB_PFS"]) / f"rsa-atomic-bench-{os.getpid()}"
    rows: list[dict[str, object]] = []
    try:
        for d in (local, pfs):
            d.mkdir()
            os.chown(d, b.user.uid, b.user.gid)
        make_tree(local / "src" / "tree", b.user)
        make_mid(local / "src" / "mid", b.user)
        os.chown(local / "src", b.user.uid, b.user.gid)
        with b.ramdisk() as fs:
            ram = f"{fs.rsa_mountpoint}/j"
            b.hosts[0].run(["install", "-d", "-o", str(b.user.uid), "-g", str(b.user.gid),
                            ram], timeout=60)
            b.engine().stage_in(str(local / "src"), ram)
            for where, base in (("local", local), ("pfs", pfs)):
                for r in range(args.rounds):
                    order = ["atomic", "direct"] if r % 2 == 0 else ["direct", "atomic"]
                    for how in order:
                        dst = base / f"out-{how}-{r}"
                        eng = b.engine()
                        os.sync()
                        t0 = time.monotonic()
                        if how == "atomic":
                            eng.stage_out(ram, str(dst))
                        else:  # the placement before atomic stage-out
                            eng._copy("stage-out", ram, str(dst), resume=True, atomic=False)
                        secs = time.monotonic() - t0
                        row = {"where": where, "placement": how, "round": r,
                               "seconds": round(secs, 3)}
                        rows.append(row)
                        print(json.dumps(row), flush=True)
                        shutil.rmtree(dst, ignore_errors=True)
    finally:
        for d in (local, pfs):
            shutil.rmtree(d, ignore_errors=True)
        for h in b.hosts:
            h.close()
    for where in ("local", "pfs"):
        med = {how: statistics.median(float(str(r["seconds"])) for r in rows
                                      if r["where"] == where and r["placement"] == how)
               for how in ("atomic", "direct")}
        print(f"{where}: atomic {med['atomic']:.2f} s, direct {med['direct']:.2f} s "
              f"(median of {args.rounds}): atomic/direct {med['atomic'] / med['direct']:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
