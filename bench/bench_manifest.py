"""rsad's memory and event loop while a huge tree is staged (issue 16: manifests out of rsad).

Stages a tree of N small files (default 1,000,000 x 16 bytes, in 1,000 directories) from
one local directory into another with the staging engine, run the way rsad runs it: in a
worker thread while the main thread's asyncio event loop keeps ticking. LocalHost
"RSA nodes" (2 x 2 streams) as the unprivileged user `nobody` (needs root). Measures this
process only — rsad's part: the node-side listing and copying run in child processes,
which is the point. Prints one JSON line:

    {"files": N, "mode": "streamed", "seconds": S, "files_s": R, "max_rss_mb": M,
     "max_stall_ms": L, "control_stall_ms": C, "rss_before_mb": B}

`max_rss_mb` is this process's peak RSS (ru_maxrss), `max_stall_ms` the largest lateness
of a 10 ms timer on the event loop, `control_stall_ms` the same in an idle process
running alongside (the machine's own scheduling delay under the copy's load).
`--out` then stages the tree out again and verifies it (content), as rsad does after a
job, all under the same measurement. `--listed` forces the listed mode (every object's
entry in this process, as before issue 16) for comparison. `--copies-nice 19` runs the
node-side commands at nice 19: on a site they run on the RSA nodes, not on rsad's host,
and here they would otherwise share its cores with this process; the stall then
measures what rsad's own process adds (its threads, the GIL), not the machine.
`--copies-cpus 1 --rsad-cpus 0` goes further: the node-side commands run on CPU 1 only,
this process, its worker and the control process on CPU 0 only (the copies' CPU work
never runs where rsad's does; they still share the kernel, memory and the tmpfs).
`--workers` runs the engine in the product's staging worker, as rsad does
(`staging.engine_process`, at `--engine-nice`, 10 as shipped): `max_rss_mb` and the
stall are then rsad's process alone, and `workers_max_rss_mb` the worker's peak RSS.

    .venv/bin/python bench/bench_manifest.py --files 1000000 --root /dev/shm
    .venv/bin/python bench/bench_manifest.py --files 1000000 --root /dev/shm --workers
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil

from rsa_scheduler.daemon.engines import WORKER_ARGV, EnginePool, WorkerEngine
from rsa_scheduler.hosts import LocalHost
from rsa_scheduler.runner import Completed, Identity
from rsa_scheduler.staging import StagingEngine, Stats
from rsa_scheduler.staging.stream import STREAM_OBJECTS

MAKE_TREE = """
import os, sys
root, n, per = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for i in range(n):
    if i % per == 0:
        d = os.path.join(root, f"d{i // per:05d}")
        os.mkdir(d)
    with open(os.path.join(d, f"f{i:07d}"), "wb") as f:
        f.write(b"0123456789abcdef")
"""


# The same 10 ms timer in a process of its own that does nothing else, until its stdin
# closes: how late this machine's scheduler alone makes a timer under the copy's load
# (the copy's tar processes share the cores), to tell that apart from rsad's own stalls.
CONTROL = """
import asyncio, sys, threading
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
async def main():
    loop, worst = asyncio.get_running_loop(), 0.0
    while not stop.is_set():
        t0 = loop.time()
        await asyncio.sleep(0.01)
        worst = max(worst, loop.time() - t0 - 0.01)
    print(round(worst * 1000, 1))
asyncio.run(main())
"""


def copies_prefix(nice: int = 0, cpus: str = "") -> list[str]:
    """What the bench puts before each node-side command: ``taskset -c CPUS`` and
    ``nice -n NICE`` (either may be absent)."""
    return ((["taskset", "-c", cpus] if cpus else []) +
            (["nice", "-n", str(nice)] if nice else []))


class NicedHost(LocalHost):
    """A LocalHost whose commands run at ``nice`` (``--copies-nice``) and on ``cpus``
    (``--copies-cpus``): the copies then take only the CPU the bench's own process
    leaves, or none of its CPUs at all, as on a site, where they run on the RSA nodes
    and rsad's host has its cores to itself. 0 and "": as LocalHost."""

    def __init__(self, name: str, nice: int = 0, cpus: str = "") -> None:
        super().__init__(name)
        self.prefix = copies_prefix(nice, cpus)

    def run(self, argv: Sequence[str], **kw: Any) -> Completed:
        return super().run([*self.prefix, *argv], **kw)


# --workers: the product's staging workers (staging.engine_process, daemon/engines.py).
# With --copies-nice or --copies-cpus the worker is the product's, its LocalHost commands
# prefixed as NicedHost does here (the bench's stand-in for RSA nodes of their own).
# argv: PREFIX-JSON [--nice N]
NICED_WORKER = """
import json, sys
from rsa_scheduler.hosts import LocalHost
plain = LocalHost.run
prefix = json.loads(sys.argv[1])
def run(self, argv, **kw):
    return plain(self, [*prefix, *argv], **kw)
LocalHost.run = run
from rsa_scheduler.daemon.stagingworker import main
sys.exit(main(sys.argv[2:]))
"""


def worker_pool(engine_nice: int, prefix: Sequence[str] = ()) -> EnginePool:
    """The product's staging workers, their node-side commands after ``prefix``."""
    argv = (sys.executable, "-c", NICED_WORKER, json.dumps(list(prefix))) if prefix else \
        WORKER_ARGV
    return EnginePool(argv, nice=engine_nice)


def workers_rss_mb() -> float:
    """The summed RSS of this process's staging workers now."""
    total = 0
    for c in psutil.Process().children():
        try:
            if "rsa_scheduler.daemon.stagingworker" in " ".join(c.cmdline()):
                total += c.memory_info().rss
        except psutil.Error:
            continue
    return total / 2**20


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def staged(eng: StagingEngine | WorkerEngine, src: str, dst: str, out: str
                 ) -> tuple[Stats, dict[str, float], float]:
    loop = asyncio.get_running_loop()
    stall = 0.0
    done = False
    phases: dict[str, float] = {}
    workers = isinstance(eng, WorkerEngine)

    async def watch() -> None:
        nonlocal stall
        ticks = 0
        while not done:
            t0 = loop.time()
            await asyncio.sleep(0.01)
            stall = max(stall, loop.time() - t0 - 0.01)
            ticks += 1
            if workers and ticks % 10 == 0:  # every ~0.1 s, between the timings
                phases["workers_max_rss_mb"] = max(phases.get("workers_max_rss_mb", 0),
                                                   round(workers_rss_mb()))

    def work() -> Stats:
        t0 = time.monotonic()
        stats = eng.stage_in(src, dst)
        phases["stage_in_s"] = round(time.monotonic() - t0, 1)
        if out:  # then out again and verified, as rsad does after the job
            t0 = time.monotonic()
            eng.stage_out(dst, out)
            phases["stage_out_s"] = round(time.monotonic() - t0, 1)
            t0 = time.monotonic()
            v = eng.verify(dst, out)
            phases["verify_s"] = round(time.monotonic() - t0, 1)
            if not v.ok or v.checked < stats.files:
                raise SystemExit(f"verify: {v.summary(out)}")
        return stats

    watcher = asyncio.create_task(watch())
    try:
        stats = await loop.run_in_executor(None, work)
    finally:
        done = True
        await watcher
    return stats, phases, stall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--files", type=int, default=1_000_000)
    ap.add_argument("--per-dir", type=int, default=1000)
    ap.add_argument("--root", default="/dev/shm", help="where the trees are made")
    ap.add_argument("--listed", action="store_true", help="force the listed mode")
    ap.add_argument("--user", default="nobody")
    ap.add_argument("--out", action="store_true",
                    help="then stage the tree out again and verify it (all measured)")
    ap.add_argument("--copies-nice", type=int, default=0,
                    help="run the node-side commands at this nice (19: as if on RSA "
                         "nodes of their own; 0: compete with this process)")
    ap.add_argument("--copies-cpus", default="",
                    help="run the node-side commands on these CPUs only (taskset -c, "
                         "e.g. 1), as if on RSA nodes of their own")
    ap.add_argument("--rsad-cpus", default="",
                    help="run this process (rsad's stand-in), its staging worker and the "
                         "idle control process on these CPUs only (e.g. 0)")
    ap.add_argument("--workers", action="store_true",
                    help="run the engine in a staging worker, as rsad does "
                         "(staging.engine_process); without it, in this process")
    ap.add_argument("--engine-nice", type=int, default=10,
                    help="with --workers: the workers' nice (staging.engine_nice)")
    ap.add_argument("--stream-objects", type=int, default=0,
                    help="the engine's stream_objects (0: its default)")
    args = ap.parse_args()
    if args.rsad_cpus:  # before any thread or child: they inherit it
        os.sched_setaffinity(0, {int(c) for c in args.rsad_cpus.split(",")})
    user = Identity.of(args.user)
    base = Path(tempfile.mkdtemp(prefix="rsa-manifest-bench-", dir=args.root))
    try:
        base.chmod(0o755)
        src, dst = base / "src", base / "dst"
        src.mkdir()
        # made by a child process: this process's peak RSS is the engine's
        subprocess.run([sys.executable, "-c", MAKE_TREE, str(src), str(args.files),
                        str(args.per_dir)], check=True)
        subprocess.run(["chown", "-R", f"{user.uid}:{user.gid}", str(src)], check=True)
        dst.mkdir()
        os.chown(dst, user.uid, user.gid)
        before = rss_mb()
        prefix = copies_prefix(args.copies_nice, args.copies_cpus)
        pool = worker_pool(args.engine_nice, prefix) if args.workers else None
        hosts: list[LocalHost] = ([LocalHost("rsa1"), LocalHost("rsa2")] if pool else
                                  [NicedHost("rsa1", args.copies_nice, args.copies_cpus),
                                   NicedHost("rsa2", args.copies_nice, args.copies_cpus)])
        eng = WorkerEngine.of(pool, StagingEngine(
            hosts, user, job_id="bench", timeout=6 * 3600,
            stream_objects=(args.files * 2 if args.listed else
                            args.stream_objects or STREAM_OBJECTS)))
        control = subprocess.Popen([sys.executable, "-c", CONTROL], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, text=True)
        t0 = time.monotonic()
        out = base / "out" if args.out else None
        if out is not None:
            out.mkdir()
            os.chown(out, user.uid, user.gid)
        try:
            stats, phases, stall = asyncio.run(staged(eng, str(src), str(dst),
                                                      str(out / "o") if out else ""))
        finally:
            if pool is not None:
                pool.close()
        secs = time.monotonic() - t0
        control_ms = float(control.communicate("")[0])
        copied = sum(len(names) for _, _, names in os.walk(dst))
        if copied != args.files or stats.files != args.files:
            raise SystemExit(f"staged {stats.files} files, {copied} at the destination, "
                             f"expected {args.files}")
        print(json.dumps({"files": args.files, "mode": "listed" if args.listed else
                          "streamed", "seconds": round(secs, 1),
                          "files_s": round(args.files / secs), "max_rss_mb": round(rss_mb()),
                          "max_stall_ms": round(stall * 1000, 1),
                          "control_stall_ms": control_ms, **phases,
                          "copies_nice": args.copies_nice,
                          "copies_cpus": args.copies_cpus, "rsad_cpus": args.rsad_cpus,
                          "engine": (f"worker at nice {args.engine_nice}" if args.workers
                                     else "in this process"),
                          "rss_before_mb": round(before)}), flush=True)
    finally:
        subprocess.run(["rm", "-rf", "--", str(base)], check=False)
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
