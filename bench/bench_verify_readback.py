"""What it costs verify to read DATA_OUT's copies back from the PFS rather than from the
RSA nodes' page cache (issue 37, item 5).

Since then each of DATA_OUT's files below the ranged size is dropped from the hashing
node's page cache (``scripts.DROP_HASH``: one ``dd iflag=nocache count=0`` per file,
after a syncfs per command) just before it is hashed. This stages a 10k x 4 KiB tree out
of a local-disk directory into the lab's throttled MooseFS PFS (rsa[1-4], as the lab
user) and times the verify that follows, with the drop (as shipped) and without it (the
hash as before: what the writing client kept in its page cache is read from memory),
alternately, each into a fresh DATA_OUT, in the listed mode and the streamed mode
(``stream_objects`` 1000). Needs the lab and root.

    .venv/bin/python bench/bench_verify_readback.py [--rounds 2] [--json out.json]
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

from rsa_scheduler.staging.scripts import manifests, streamed

NO_DROP = 'exec b2sum -l 128 -z -- "$@"'  # the hash of before: no drop


def use(program: str) -> None:
    """The program DATA_OUT's side hashes with, listed and streamed."""
    manifests.DROP_HASH = program
    setattr(streamed, "DROP_HASH", program)  # noqa: B010 (imported there by name)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--parallel", type=int, default=2, help="streams per RSA node")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()
    lab = lab_env()
    b = Bench(lab, args.parallel)
    local = Path(f"/var/tmp/rsa-readback-bench-{os.getpid()}")
    pfs = Path(lab["RSA_LAB_PFS"]) / f"rsa-readback-bench-{os.getpid()}"
    shipped = manifests.DROP_HASH
    rows: list[dict[str, object]] = []
    try:
        for d in (local, pfs):
            d.mkdir()
            os.chown(d, b.user.uid, b.user.gid)
        make_tree(local / "tree", b.user)
        for r in range(args.rounds):
            for mode, stream in (("listed", 0), ("streamed", 1000)):
                order = ("drop", "no-drop") if r % 2 == 0 else ("no-drop", "drop")
                for variant in order:
                    use(shipped if variant == "drop" else NO_DROP)
                    eng = b.engine()
                    eng.stream_objects = stream
                    out = pfs / f"out-{r}-{mode}-{variant}"
                    t0 = time.monotonic()
                    eng.stage_out(str(local / "tree"), str(out))
                    t1 = time.monotonic()
                    v = eng.verify(str(local / "tree"), str(out))
                    t2 = time.monotonic()
                    assert v.ok and v.checked >= 10_000, v.summary(str(out))
                    row = {"round": r, "mode": mode, "variant": variant,
                           "stage_out_s": round(t1 - t0, 2), "verify_s": round(t2 - t1, 2),
                           "objects": v.checked}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    finally:
        use(shipped)
        shutil.rmtree(local, ignore_errors=True)
        shutil.rmtree(pfs, ignore_errors=True)
        for h in b.hosts:
            h.close()
    for mode in ("listed", "streamed"):
        med = {v: statistics.median(float(str(x["verify_s"])) for x in rows
                                    if x["mode"] == mode and x["variant"] == v)
               for v in ("drop", "no-drop")}
        print(f"{mode}: verify of 10k x 4 KiB on the PFS: {med['drop']:.2f} s with the drop, "
              f"{med['no-drop']:.2f} s without ({med['drop'] / med['no-drop']:.2f}x)")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
