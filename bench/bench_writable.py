"""Latency of urgent actions (mounts) while a writable input's base scan and write-back
run (issue 34: nothing an urgent action needs waits behind bulk work in rsad's process).

A job with ``#RSA_INPUT=rw`` makes rsad scan its DATA_IN before the stage-in (the base)
and, at each write-back, scan the RAMDISK and DATA_IN, plan, record the base (a JSON
document of every name) and scan again after the copy. For a large tree that is seconds
of Python (parsing the scans, the plan, the base's JSON: ~2.5 CPU-s for 200,000 files),
and a JSON document of the base is encoded and decoded in one C call each that holds the
GIL throughout (~0.3 s each at 200,000 names).

This builds the real ``Daemon`` and its ``Dispatcher`` (as bench_lanes.py does: scripted
Slurm, ``normal`` store, 8 urgent workers) and runs ``--jobs`` writable jobs on the bulk
lane, one cycle after the other each: the stage-in's base scan of DATA_IN
(``StageIn``), then the job's change (``--changed`` files of the RAMDISK rewritten, by a
child process as the user), then a write-back (``WriteBack``), through the executors'
own code (``rsa_scheduler.daemon.data.record_base`` and ``write_back_of``, as
``DataPath.stage_in``/``write_back_to`` call them; a copy of the trees is not made:
the "RAMDISK" is a directory beside DATA_IN). Meanwhile ``--mounts`` mounts are
dispatched ``--spacing`` s apart on the urgent lane; each runs one ``true`` through the
runner (not rsad's node-side mount: see bench_lanes.py). "start" = dispatch -> the
mount's executor entered, "done" = dispatch -> its future done. Controls as in
bench_lanes.py: a 10 ms timer's lateness in a thread of this process and in a process
of its own.

Each job's DATA_IN is ``--files`` empty files (directories of 1,000) under ``--dst``,
its "RAMDISK" a copy (``cp -a``) beside it; the trees are the user's (``--user``).
``--lab`` runs the engine's commands (the scans, the copies, the deletions) on the
lab's first RSA node over SSH, as rsad does (that node sees ``--dst``);
``RSA_LAB_NODE_CPU_WEIGHT=1`` keeps the node's processes at the CPU share another
machine would give them (docs/benchmarks.md). ``--workers`` runs the engines in the
product's staging workers at ``--engine-nice`` (rsad's default, nice 10); without it,
in this process: rsad with ``engine_process: false``, and where every rsad ran a
writable input's base scan and write-back before issue 34 moved them to the workers
(only their fallback's copies went there).

    .venv/bin/python bench/bench_writable.py --files 200000 --workers --engine-nice 10 \
        --lab                                                       # the lab up, as root

Inside ``make lab-test`` (``RSA_BENCH_WRITABLE``: the runs' file counts, default
``200000,200000``; the trees are made once per count)::

    RSA_BENCH=writable RSA_LAB_NODE_CPU_WEIGHT=1 RSA_BENCH_OUT=/tmp/writable.json \
        flock /tmp/rsa-lab.lock make lab-test LAB_TESTS='-s bench/bench_writable.py'

Not a test: nothing asserts on the figures, but a failed action is reported and exits
non-zero.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_daemon_commit import Queue  # noqa: I001 (bench/ is on sys.path when run)
from bench_lanes import CONTROL, URGENT_WORKERS, ThreadControl, lab_nodes, node_cgroup, pct
from rsa_scheduler.core.actions import ActionKind, Outcome, Result
from rsa_scheduler.core.allocator import Pool, RsaNode
from rsa_scheduler.core.policy import AllocationPolicy, StagingPolicy, Tier
from rsa_scheduler.core.scheduler import Scheduler
from rsa_scheduler.daemon.data import record_base, write_back_of
from rsa_scheduler.daemon.engines import WORKER_ARGV, EnginePool, WorkerEngine
from rsa_scheduler.daemon.executors import ActionContext, Registry
from rsa_scheduler.daemon.service import Daemon
from rsa_scheduler.daemon.writeback import Bases
from rsa_scheduler.hosts import Host, LocalHost
from rsa_scheduler.runner import Identity, run
from rsa_scheduler.staging import StagingEngine
from rsa_scheduler.store import Store
from tests.unit.corekit import make_action

# DATA_IN: n empty files in directories of 1,000, every mtime an old second (the job's
# changes are then never in a write-back's "racy" second by accident)
MAKE_TREE = """
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    d = os.path.join(root, f"d{i // 1000:04d}")
    if i % 1000 == 0:
        os.makedirs(d)
    p = os.path.join(d, f"f{i:07d}")
    open(p, "wb").close()
    os.utime(p, (1_600_000_000, 1_600_000_000))
"""

# The job's change: rewrite ``k`` files of the RAMDISK (a different one each cycle),
# mtime two seconds ago
CHANGE = """
import os, sys, time
root, n, k, cycle = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
t = int(time.time()) - 2
for j in range(k):
    i = (cycle * k + j) * 997 % n
    p = os.path.join(root, f"d{i // 1000:04d}", f"f{i:07d}")
    with open(p, "wb") as f:
        f.write(f"cycle {cycle}\\n".encode())
    os.utime(p, (t, t))
"""


@dataclass
class Phase:
    """What one run saw."""

    started: dict[str, float] = field(default_factory=dict)  # mount id -> executor entry
    dispatched: dict[str, float] = field(default_factory=dict)
    done: dict[str, float] = field(default_factory=dict)
    bulk_at: dict[str, str] = field(default_factory=dict)  # mount id -> bulk step then
    steps: dict[str, list[float]] = field(default_factory=dict)  # step -> seconds each
    now: dict[int, str] = field(default_factory=dict)  # job -> its step now
    failures: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class Bench:
    """The executors: a writable job's base scan and write-back, mounts as one run."""

    def __init__(self, top: Path, files: int, changed: int, user: Identity,
                 node: Host, pool: EnginePool | None) -> None:
        self.top, self.files, self.changed, self.user = top, files, changed, user
        self.node, self.pool = node, pool
        self.bases = Bases(top / "state")
        self.phase = Phase()
        self.ended: queue.Queue[tuple[int, str]] = queue.Queue()  # (job, step) ended

    def registry(self) -> Registry:
        reg = Registry()
        reg.register(ActionKind.STAGE_IN, self.stage_in)
        reg.register(ActionKind.WRITE_BACK, self.write_back)
        reg.register(ActionKind.MOUNT_INPUT, self.mount)
        return reg

    def engine(self, ctx: ActionContext) -> StagingEngine | WorkerEngine:
        eng = StagingEngine([self.node], self.user, job_id=ctx.action.job_id,
                            cancel=ctx.cancel, timeout=3600)
        return WorkerEngine.of(self.pool, eng)

    def _timed(self, job: int, step: str, fn: Callable[[], object]) -> None:
        ph = self.phase
        with ph.lock:
            ph.now[job] = step
        t0 = time.monotonic()
        try:
            fn()
        finally:
            with ph.lock:
                ph.steps.setdefault(step, []).append(time.monotonic() - t0)
                ph.now.pop(job, None)

    def stage_in(self, ctx: ActionContext) -> Mapping[str, Any]:
        job = int(ctx.action.job_id)
        d = self.top / f"job{job}"
        eng = self.engine(ctx)
        self._timed(job, "base scan", lambda: record_base(
            self.bases, eng, f"job{job}-c1", str(d / "in")))
        return {}

    def write_back(self, ctx: ActionContext) -> Mapping[str, Any]:
        job = int(ctx.action.job_id)
        d = self.top / f"job{job}"
        cycle = int(ctx.action.id.split("/")[3])
        # the job's change, by the user in a child (none of this process's Python)
        subprocess.run([sys.executable, "-c", CHANGE, str(d / "ram"), str(self.files),
                        str(self.changed), str(cycle)], check=True,
                       user=self.user.uid, group=self.user.gid, extra_groups=[])
        eng = self.engine(ctx)
        got: dict[str, Any] = {}
        self._timed(job, "write-back", lambda: got.update(write_back_of(
            self.bases, eng, f"job{job}-c1", str(d / "ram"), str(d / "in")) or {}))
        # more: what a write-back cancelled at the end of an earlier run left (trees reused)
        copied = int(dict(got.get("written_back") or {}).get("copied", -1))
        if copied < self.changed:
            raise RuntimeError(f"job {job}: {copied} copied, not {self.changed}: {got}")
        return {}

    def mount(self, ctx: ActionContext) -> Mapping[str, Any]:
        self.phase.started[ctx.action.id] = time.monotonic()
        run(["true"], timeout=30)
        return {}


def one_run(bench: Bench, jobs: int, mounts: int, spacing: float) -> dict[str, Any]:
    """``jobs`` writable jobs cycling, ``mounts`` mounts dispatched among them."""
    bench.phase = ph = Phase()
    pool = Pool([RsaNode("rsa1", Tier.RAM, 512 << 30)], AllocationPolicy(ratio=1, max_nodes=1))
    store_dir = Path(tempfile.mkdtemp(prefix="bench-writable-", dir=bench.top))
    store = Store.open(store_dir / "bench.db", durability="normal")
    d = Daemon(Scheduler(pool, StagingPolicy()), slurm=Queue(0), store=store,
               registry=bench.registry(), workers=max(2, jobs),
               urgent_workers=URGENT_WORKERS, poll_interval=0)
    serial = 0

    def dispatch_step(job: int, kind: str) -> None:  # the loop thread
        nonlocal serial
        serial += 1
        action = make_action(f"{job}/1/{kind}/{serial}")
        d.dispatcher.dispatch([action])

        def ended(f: Future[Outcome]) -> None:
            if f.cancelled():
                return
            o = f.result()
            if o.result is not Result.OK and "cancelled" not in o.message:
                ph.failures.append(f"{o.action_id}: {o.message}")
            bench.ended.put((job, kind))
        d.dispatcher.running[action.id].future.add_done_callback(ended)

    def mount_ended(action_id: str) -> Callable[[Future[Outcome]], None]:
        def ended(f: Future[Outcome]) -> None:
            ph.done[action_id] = time.monotonic()
            if not f.cancelled() and f.result().result is not Result.OK:
                ph.failures.append(f"{action_id}: {f.result().message}")
        return ended

    thread_control = ThreadControl()
    control = subprocess.Popen([sys.executable, "-c", CONTROL], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    load: list[float] = []
    try:
        for j in range(1, jobs + 1):
            dispatch_step(j, "stage-in")
        time.sleep(0.5)
        fired = 0
        due = time.monotonic()
        deadline = due + 600
        while fired < mounts or len(ph.done) < mounts:
            if fired < mounts and time.monotonic() >= due:
                action = make_action(f"{90000 + fired}/1/mount-input/1")
                with ph.lock:
                    ph.bulk_at[action.id] = ",".join(sorted(set(ph.now.values()))) or "-"
                ph.dispatched[action.id] = time.monotonic()
                d.dispatcher.dispatch([action])
                d.dispatcher.running[action.id].future.add_done_callback(
                    mount_ended(action.id))
                fired += 1
                due += spacing
                load.append(os.getloadavg()[0])
            try:  # a step ended: the job's next (base scan -> write-back -> base scan)
                job, kind = bench.ended.get(timeout=max(0.0, min(0.05, due - time.monotonic())))
                if fired < mounts and not ph.failures:
                    dispatch_step(job, "write-back" if kind == "stage-in" else "stage-in")
            except queue.Empty:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("mounts did not finish in 10 min")
    finally:
        d.shutdown(timeout=600)
        store.close()
        thread_control_ms = thread_control.stop()
        control_ms = [float(x) for x in control.communicate("")[0].split()]
        subprocess.run(["rm", "-rf", "--", str(store_dir)], check=False)
    never = [a for a in ph.dispatched if a not in ph.started]
    if never:
        ph.failures.append(f"mounts that never ran: {never}")
    start = [ph.started[a] - ph.dispatched[a] for a in ph.dispatched if a in ph.started]
    done = [ph.done[a] - ph.dispatched[a] for a in ph.dispatched]
    during = [a for a in ph.dispatched if ph.bulk_at[a] != "-"]
    worst = max(ph.dispatched, key=lambda a: ph.done[a] - ph.dispatched[a])
    return {
        "jobs": jobs, "mounts": mounts,
        "start_p50_ms": pct(start, 50), "start_p90_ms": pct(start, 90),
        "start_max_ms": pct(start, 100),
        "done_p50_ms": pct(done, 50), "done_p90_ms": pct(done, 90),
        "done_max_ms": pct(done, 100),
        "done_max_during": ph.bulk_at[worst],
        "mounts_during_bulk": len(during),
        "steps": {k: {"n": len(v), "mean_s": round(statistics.mean(v), 2),
                      "max_s": round(max(v), 2)} for k, v in ph.steps.items()},
        "load_mean": round(statistics.mean(load), 2),
        "control_thread_ms": list(thread_control_ms), "control_process_ms": control_ms,
        "failures": ph.failures,
    }


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=200_000, help="files in each DATA_IN")
    ap.add_argument("--changed", type=int, default=100,
                    help="files the job rewrites before each write-back")
    ap.add_argument("--jobs", type=int, default=1, help="writable jobs at once")
    ap.add_argument("--mounts", type=int, default=100)
    ap.add_argument("--spacing", type=float, default=0.3, help="seconds between mounts")
    ap.add_argument("--dst", default="/var/tmp", help="where the trees go")
    ap.add_argument("--user", default="nobody")
    ap.add_argument("--workers", action="store_true",
                    help="bulk engines in staging workers, as rsad runs them")
    ap.add_argument("--engine-nice", type=int, default=0,
                    help="with --workers: the workers' nice (staging.engine_nice)")
    ap.add_argument("--lab", action="store_true",
                    help="the engine's commands on the lab's first RSA node (the lab up)")
    ap.add_argument("--json", help="write the figures to this file")
    return ap


def make_trees(args: argparse.Namespace, user: Identity) -> tuple[Path, float]:
    """``--jobs`` pairs of trees (DATA_IN and its "RAMDISK") under a new directory of
    ``--dst``; that directory and the seconds it took."""
    top = Path(tempfile.mkdtemp(prefix="rsa-writable-bench-", dir=args.dst))
    top.chmod(0o755)
    t0 = time.monotonic()
    for j in range(1, args.jobs + 1):
        d = top / f"job{j}"
        d.mkdir()
        subprocess.run([sys.executable, "-c", MAKE_TREE, str(d / "in"), str(args.files)],
                       check=True)
        subprocess.run(["cp", "-a", str(d / "in"), str(d / "ram")], check=True)
        subprocess.run(["chown", "-R", f"{user.uid}:{user.gid}", str(d)], check=True)
    return top, time.monotonic() - t0


def bench(args: argparse.Namespace,
          trees: tuple[Path, float] | None = None) -> dict[str, Any]:
    """One run with ``args`` (parser()'s) on ``trees`` (make_trees'; made and removed
    here when None): prints its line, returns the figures."""
    user = Identity.of(args.user)
    node: Host = lab_nodes()[0] if args.lab else LocalHost("rsa1")
    where = node_cgroup(node.name) if args.lab else "this host"
    top, made = trees or make_trees(args, user)
    pool = (EnginePool(WORKER_ARGV, nice=args.engine_nice) if args.workers else None)
    try:
        b = Bench(top, args.files, args.changed, user, node, pool)
        row = one_run(b, args.jobs, args.mounts, args.spacing)
    finally:
        if pool is not None:
            pool.close()
        if trees is None:
            subprocess.run(["rm", "-rf", "--", str(top)], check=False)
    print(f"# {args.jobs} writable job(s), DATA_IN {args.files} files each, "
          f"{args.changed} changed per write-back, commands on {node.name} ({where}), "
          f"engines {f'in staging workers at nice {args.engine_nice}' if args.workers else 'here'}"
          f"; {args.mounts} mounts {args.spacing} s apart; trees made in {made:.0f} s")
    print("| start p50 | p90 | max | done p50 | p90 | max | slowest during | mounts during bulk "
          "| steps (n, mean, max) | load | control thread p50/max | control process p50/max |")
    ct, cp = row["control_thread_ms"], row["control_process_ms"]
    steps = "; ".join(f"{k} {v['n']}, {v['mean_s']} s, {v['max_s']} s"
                      for k, v in row["steps"].items())
    print(f"| {row['start_p50_ms']} ms | {row['start_p90_ms']} ms | {row['start_max_ms']} ms "
          f"| {row['done_p50_ms']} ms | {row['done_p90_ms']} ms | {row['done_max_ms']} ms "
          f"| {row['done_max_during']} | {row['mounts_during_bulk']}/{row['mounts']} "
          f"| {steps} | {row['load_mean']} | {ct[0]}/{ct[1]} ms | {cp[0]}/{cp[1]} ms |",
          flush=True)
    for f in row["failures"]:
        print(f"FAILED: {f}")
    return {"files": args.files, "changed": args.changed, "jobs": args.jobs,
            "workers": args.workers, "engine_nice": args.engine_nice, "lab": args.lab,
            "node_cgroup": where, **row}


def main() -> None:
    args = parser().parse_args()
    got = bench(args)
    if args.json:
        Path(args.json).write_text(json.dumps(got, indent=1) + "\n")
    if got["failures"]:
        raise SystemExit(1)


def test_writable_benchmark() -> None:
    """``make lab-test LAB_TESTS='-s bench/bench_writable.py'`` with
    ``RSA_BENCH=writable``: for each count of ``RSA_BENCH_WRITABLE`` (default
    ``200000,200000``), one run on the lab's first RSA node, staging workers at nice 10,
    ``RSA_BENCH_MOUNTS`` mounts (default 100); the figures to ``RSA_BENCH_OUT``."""
    import pytest

    from tests.integration.conftest import LAB_ENV

    if os.environ.get("RSA_BENCH") != "writable" or not LAB_ENV.exists():
        pytest.skip("a benchmark: RSA_BENCH=writable and the lab up")
    runs = []
    trees: dict[str, tuple[Path, float]] = {}
    try:
        for n in os.environ.get("RSA_BENCH_WRITABLE", "200000,200000").split(","):
            args = parser().parse_args(["--files", n, "--workers", "--engine-nice", "10",
                                        "--lab", "--mounts",
                                        os.environ.get("RSA_BENCH_MOUNTS", "100")])
            if n not in trees:
                trees[n] = make_trees(args, Identity.of(args.user))
            runs.append(bench(args, trees[n]))
            Path(os.environ.get("RSA_BENCH_OUT", "/tmp/bench_writable.json")).write_text(
                json.dumps(runs, indent=1) + "\n")
    finally:
        for top, _s in trees.values():
            subprocess.run(["rm", "-rf", "--", str(top)], check=False)
    assert not [f for r in runs for f in r["failures"]]


if __name__ == "__main__":
    main()
