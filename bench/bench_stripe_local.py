"""Local striped big-file benchmark: the engine's striped copy against one `dd`.

Copies one big file of random data on this machine (LocalHost "RSA nodes", as an
unprivileged user, so it needs root) between two directories — e.g. a tmpfs and a disk
directory — with `dd` (the same block size the engine uses for the direction) and with
the engine, striped and not striped, and times `verify` of the striped copy (ranged
over every stream, and whole-file hashing); every trial starts after `sync` with the source
dropped from the page cache (posix_fadvise DONTNEED; nothing to drop on tmpfs). Prints
one JSON row per trial and the ratios to dd. A local figure only: the lab's RSA nodes are
what docs/benchmarks.md reports (bench/bench_staging.py).

    .venv/bin/python bench/bench_stripe_local.py --gib 2 --src /dev/shm --dst /var/tmp
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rsa_scheduler.hosts import LocalHost
from rsa_scheduler.runner import Identity
from rsa_scheduler.staging import StagingEngine


def drop(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--gib", type=float, default=2.0, help="file size in GiB")
    ap.add_argument("--src", default="/dev/shm", help="directory of the source")
    ap.add_argument("--dst", default="/var/tmp", help="directory of the destination")
    ap.add_argument("--nodes", type=int, default=2, help="LocalHost nodes")
    ap.add_argument("--parallel", type=int, default=2, help="streams per node")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--user", default="nobody")
    args = ap.parse_args()
    user = Identity.of(args.user)
    size = int(args.gib * (1 << 30))
    src = Path(tempfile.mkdtemp(prefix="rsa-stripe-bench-", dir=args.src))
    dst = Path(tempfile.mkdtemp(prefix="rsa-stripe-bench-", dir=args.dst))
    rows: list[dict[str, object]] = []
    try:
        for d in (src, dst):
            os.chown(d, user.uid, user.gid)
        subprocess.run(["dd", "if=/dev/urandom", f"of={src}/big", "bs=16M",
                        f"count={size >> 24}", "status=none"], check=True)
        os.chown(src / "big", user.uid, user.gid)
        hosts = [LocalHost(f"rsa{i + 1}") for i in range(args.nodes)]

        def engine(stripe: int, verify_ranges: int = 256 << 20) -> StagingEngine:
            return StagingEngine(hosts, user, parallel_per_node=args.parallel,
                                 job_id="bench", stripe_bytes=stripe,
                                 verify_range_bytes=verify_ranges)

        def dd(out: Path) -> None:
            subprocess.run(["dd", f"if={src}/big", f"of={out}/big", "bs=16M",
                            "status=none"], check=True, user=user.uid)

        def striped(out: Path) -> None:
            engine(256 << 20).stage_in(str(src), str(out))

        def one_stream(out: Path) -> None:
            engine(0).stage_in(str(src), str(out))

        trials: dict[str, Callable[[Path], None]] = {
            "dd": dd, "engine-striped": striped, "engine-one-stream": one_stream}
        for rnd in range(args.rounds):
            order = list(trials) if rnd % 2 == 0 else list(reversed(trials))
            for name in order:
                out = dst / name
                shutil.rmtree(out, ignore_errors=True)
                out.mkdir()
                os.chown(out, user.uid, user.gid)
                os.sync()
                drop(src / "big")
                t0 = time.monotonic()
                trials[name](out)
                os.sync()  # the data is on the destination, not only in memory
                secs = time.monotonic() - t0
                row = {"tool": name, "round": rnd, "seconds": round(secs, 3),
                       "mb_s": round(size / secs / 1e6, 1)}
                rows.append(row)
                print(json.dumps(row), flush=True)
                if name == "engine-striped":  # verify the copy: ranged, then whole files
                    for vname, stripe in (("verify-ranged", 256 << 20), ("verify-whole", 0)):
                        os.sync()
                        t0 = time.monotonic()
                        v = engine(0, verify_ranges=stripe).verify(str(src), str(out))
                        secs = time.monotonic() - t0
                        if not v.ok:
                            raise SystemExit(v.summary(str(out)))
                        vrow = {"tool": vname, "round": rnd, "seconds": round(secs, 3),
                                "mb_s": round(size / secs / 1e6, 1)}
                        rows.append(vrow)
                        print(json.dumps(vrow), flush=True)
                shutil.rmtree(out, ignore_errors=True)
    finally:
        shutil.rmtree(src, ignore_errors=True)
        shutil.rmtree(dst, ignore_errors=True)
    best = {str(r["tool"]): min(float(str(q["seconds"])) for q in rows
                                if q["tool"] == r["tool"]) for r in rows}
    for t in trials:
        print(f"{t}: {best['dd'] / best[t]:.2f}x dd (best of {args.rounds})")
    for t in ("verify-ranged", "verify-whole"):
        print(f"{t}: {best[t]:.2f}s (best of {args.rounds})")


if __name__ == "__main__":
    main()
