"""Latency of urgent actions (mounts) while N stage-outs copy (issue 16: the two lanes).

Issue 16's target: the action latency of a mount under 8 and 32 concurrent stage-outs
stays < 0.5 s. This builds the real ``Daemon`` and its ``Dispatcher`` (a scripted
in-memory Slurm queue, a ``normal`` store in a temporary directory) with
``daemon.workers = N``, so all N stage-outs copy at once, and the default
``urgent_workers`` (8). The bench's main thread plays rsad's loop thread: it dispatches
every action (``Dispatcher.dispatch``), and when a stage-out ends it dispatches the next
one (another job's), so N copies run from before the first mount to the last one's
dispatch (the copy count at each dispatch is reported).

Each stage-out is real work: the staging engine (``StagingEngine.stage_out``, LocalHost
"RSA node", 2 streams, as the unprivileged ``--user``, so the bench runs as root) copies
a tree (``--files`` small files of 4 KiB in directories of 500, plus ``--big`` files of
``--big-mib`` MiB) from a tmpfs ``--src`` (the "RAMDISK") to a fresh directory under
``--dst`` (the "PFS"), then the tree is removed. The mount executor is NOT rsad's: rsad's
mount (``daemon/nodeside.py``) publishes an instruction and waits for the compute nodes'
Prologs to report over HTTP, which needs the node side; here it runs one real short
subprocess through the runner (``rsa_scheduler.runner.run(["true"])``), so what is
measured is the lane: how long a mount waits for a thread, plus a fork/exec under load.

``--mounts`` mounts (default 30) are dispatched ``--spacing`` s apart (0.3) once every
copy runs; for each: dispatch -> its executor started ("start"), and dispatch -> its
future done ("done"). Then the same with ONE lane (the "before" the lanes: for that run
the bench adds mount-input to the dispatcher's ``BULK``, so mounts queue behind the
copies; the product is not changed). Also reported: the load average, the stage-outs
copying at each mount's dispatch (min), and two idle controls of a 10 ms timer's
lateness: a thread in this process (what the GIL and the machine add to any of rsad's
threads) and a process of its own (the machine alone). ``--copies-nice 19`` runs the
copies' commands at nice 19: on a site they run on the RSA nodes, not on rsad's host,
and here they would otherwise share its two cores with the bench's process. ``--workers``
runs each stage-out's engine in the product's staging workers (``staging.engine_process``,
rsad's default since they exist); without it the engines run in the bench's threads (rsad
with ``engine_process: false``).

``--lab`` runs the copies where rsad runs them: on the lab's RSA nodes, over SSH (the
product's ``SshHost``, the lab's key), stage-out ``i`` on node ``i`` mod the node count,
the source tree in each node's RAM pool and the copies under ``--dst`` (the host's, seen by
the nodes), removed by the node after each copy. Brought up with
``RSA_LAB_NODE_CPU_WEIGHT=1``, the nodes' processes (sshd's sessions, rsync, tar, rm) run
in a cpu cgroup of their own with that weight (lab/rsalab/nodecpu.py): they get the CPU
rsad's host leaves, as on a site, where they have machines of their own. The header says
which cgroup the nodes were in. ``--lanes two`` skips the one-lane run.

    .venv/bin/python bench/bench_lanes.py --copies 8          # as root
    .venv/bin/python bench/bench_lanes.py --copies 32 --json out.json
    .venv/bin/python bench/bench_lanes.py --copies 32 --workers      # as rsad runs them
    .venv/bin/python bench/bench_lanes.py --copies 32 --workers --engine-nice 10 --lab \
        --lanes two                                                  # the lab up

Inside ``make lab-test`` (the lab comes up and down around it), N = 8 and 32 three times
each, two lanes, staging workers at nice 10, copies on the lab's nodes::

    RSA_BENCH=lanes RSA_LAB_NODE_CPU_WEIGHT=1 RSA_BENCH_OUT=/tmp/lanes.json \
        flock /tmp/rsa-lab.lock make lab-test LAB_TESTS='bench/bench_lanes.py'

Prints a table per lane mode and the ratios; ``--json`` writes the figures. Not a test:
nothing asserts, but a failed stage-out or mount is reported and exits non-zero.
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
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_daemon_commit import Queue  # noqa: I001 (bench/ is on sys.path when run)
from bench_manifest import NICED_WORKER, NicedHost, copies_prefix
from rsa_scheduler.core.actions import BULK, ActionKind, Outcome, Result
from rsa_scheduler.core.allocator import Pool, RsaNode
from rsa_scheduler.core.policy import AllocationPolicy, StagingPolicy, Tier
from rsa_scheduler.core.scheduler import Scheduler
from rsa_scheduler.daemon import dispatch
from rsa_scheduler.daemon.engines import WORKER_ARGV, EnginePool, WorkerEngine
from rsa_scheduler.daemon.executors import ActionContext, Registry
from rsa_scheduler.daemon.service import Daemon
from rsa_scheduler.hosts import Host, LocalHost
from rsa_scheduler.remote import SshHost
from rsa_scheduler.runner import Identity, run
from rsa_scheduler.staging import StagingEngine
from rsa_scheduler.store import Store
from tests.integration.conftest import LAB_ENV, read_lab_env
from tests.unit.corekit import make_action

URGENT_WORKERS = 8  # daemon.urgent_workers' default, the Daemon's too

MAKE_TREE = """
import os, sys
root, n, big, mib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
small = os.urandom(4096)
for i in range(n):
    d = os.path.join(root, f"d{i // 500:03d}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i:06d}"), "wb") as f:
        f.write(small)
for i in range(big):
    with open(os.path.join(root, f"big{i}"), "wb") as f:
        for _ in range(mib):
            f.write(os.urandom(1 << 20))
"""

# A 10 ms timer in a process of its own until its stdin closes: the machine's own
# scheduling lateness under the copies' load (p50 and max, ms).
CONTROL = """
import sys, threading, time
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
late = []
while not stop.is_set():
    t0 = time.monotonic()
    time.sleep(0.01)
    late.append(time.monotonic() - t0 - 0.01)
late.sort()
print(round(late[len(late) // 2] * 1000, 1), round(late[-1] * 1000, 1))
"""


def pct(values: list[float], p: float) -> float:
    """The ``p``-th percentile (nearest rank) of ``values``, in ms."""
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(p / 100 * len(ordered) + 0.5) - 1))
    return round(ordered[k] * 1000, 1)


class ThreadControl:
    """A thread of this process timing its own 10 ms sleeps (p50, max lateness)."""

    def __init__(self) -> None:
        self.late: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-control", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            t0 = time.monotonic()
            time.sleep(0.01)
            self.late.append(time.monotonic() - t0 - 0.01)

    def stop(self) -> tuple[float, float]:
        self._stop.set()
        self._thread.join()
        return pct(self.late, 50), pct(self.late, 100)


@dataclass
class Phase:
    """What one lane mode's run saw."""

    started: dict[str, float] = field(default_factory=dict)  # mount id -> executor entry
    dispatched: dict[str, float] = field(default_factory=dict)
    done: dict[str, float] = field(default_factory=dict)
    copying_at: dict[str, int] = field(default_factory=dict)  # stage-outs copying then
    busy_at: dict[str, int] = field(default_factory=dict)  # mounts on the lane then
    copying: int = 0
    copies_done: int = 0
    copies_finished: int = 0  # of those, ended by themselves (not cancelled at the end)
    failures: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def lab_nodes() -> list[SshHost]:
    """The lab's RSA nodes as rsad reaches them (its key, its known hosts, as root)."""
    from ClusterShell.NodeSet import NodeSet

    env = read_lab_env(LAB_ENV)
    return [SshHost(name, addr, user=env["RSA_LAB_SSH_USER"], key=env["RSA_LAB_SSH_KEY"],
                    known_hosts=env["RSA_LAB_SSH_KNOWN_HOSTS"])
            for name, addr in zip(NodeSet(env["RSA_LAB_RSA_NODES"]),
                                  env["RSA_LAB_RSA_ADDRESSES"].split(","), strict=True)]


def node_cgroup(node: str) -> str:
    """The cpu cgroup the lab's ``node`` runs in (its sshd's) and its weight, in words."""
    try:
        pid = int(Path(f"/run/rsa-lab/pids/sshd-{node}.pid").read_text())
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except (OSError, ValueError) as e:
        return f"unknown ({e})"
    for line in lines:
        _n, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):  # cgroup v1's cpu hierarchy
            shares = Path(f"/sys/fs/cgroup/cpu{path}/cpu.shares")
            return f"cpu:{path} (cpu.shares {shares.read_text().strip()})"
    for line in lines:
        if line.startswith("0::"):
            path = line[3:]
            weight = Path(f"/sys/fs/cgroup{path}/cpu.weight")
            return f"{path} (cpu.weight {weight.read_text().strip() if weight.exists() else '-'})"
    return "none"


class Bench:
    """The executors: stage-outs with the real engine, mounts as one real subprocess."""

    def __init__(self, src: Path, out: Path, user: Identity, nice: int = 0,
                 workers: bool = False, engine_nice: int = 0,
                 nodes: list[SshHost] | None = None) -> None:
        self.nice = nice
        self.nodes = nodes  # --lab: the copies run there, over SSH
        self.pool: EnginePool | None = None  # --workers
        if workers:
            self.pool = EnginePool(
                (sys.executable, "-c", NICED_WORKER, json.dumps(copies_prefix(nice)))
                if nice and nodes is None else WORKER_ARGV,
                nice=engine_nice)
        self.src, self.out, self.user = src, out, user
        self.phase = Phase()
        self.ended: queue.Queue[str] = queue.Queue()  # the loop's inbox: copies that ended

    def registry(self) -> Registry:
        reg = Registry()
        reg.register(ActionKind.STAGE_OUT, self.stage_out)
        reg.register(ActionKind.MOUNT_INPUT, self.mount)
        return reg

    def stage_out(self, ctx: ActionContext) -> Mapping[str, Any]:
        ph = self.phase
        dst = self.out / ctx.action.id.replace("/", "-")
        dst.mkdir()
        os.chown(dst, self.user.uid, self.user.gid)
        with ph.lock:
            ph.copying += 1
        node: Host
        if self.nodes is not None:  # --lab: job N's copy on node N mod the node count
            node = self.nodes[int(ctx.action.job_id) % len(self.nodes)]
        elif self.pool is not None:
            node = LocalHost("rsa1")
        else:
            node = NicedHost("rsa1", self.nice)
        try:
            eng = StagingEngine([node], self.user, job_id=ctx.action.job_id,
                                cancel=ctx.cancel, timeout=3600)
            # with a pool, the engine's Python in a staging worker
            files = WorkerEngine.of(self.pool, eng).stage_out(str(self.src),
                                                              str(dst / "o")).files
        finally:
            # bulk work too (the worker stays busy), in a child process: rsad never
            # removes a tree itself, and shutil.rmtree here would add ~40 ms of this
            # process's Python per copy (a third of what the engine's own costs); on the
            # lab's node that made the copy (its CPU share, not rsad's host's)
            if self.nodes is not None:
                node.run(["rm", "-rf", "--", str(dst)], timeout=600, check=False)
            else:
                subprocess.run(["rm", "-rf", "--", str(dst)], check=False)
            with ph.lock:
                ph.copying -= 1
        return {"files": files}

    def mount(self, ctx: ActionContext) -> Mapping[str, Any]:
        ph = self.phase
        ph.started[ctx.action.id] = time.monotonic()
        run(["true"], timeout=30)
        return {}


def one_mode(bench: Bench, tmp: Path, copies: int, mounts: int, spacing: float,
             one_lane: bool) -> dict[str, Any]:
    """N copies running, ``mounts`` mounts dispatched among them; the figures."""
    bench.phase = ph = Phase()
    pool = Pool([RsaNode("rsa1", Tier.RAM, 512 << 30)], AllocationPolicy(ratio=1, max_nodes=1))
    db = tmp / f"bench-lanes-{copies}-{int(one_lane)}.db"
    store = Store.open(db, durability="normal")
    d = Daemon(Scheduler(pool, StagingPolicy()), slurm=Queue(0), store=store,
               registry=bench.registry(), workers=copies, urgent_workers=URGENT_WORKERS,
               poll_interval=0)
    lanes = BULK | {ActionKind.MOUNT_INPUT} if one_lane else BULK
    serial = 0

    def next_copy() -> None:  # loop thread: the next job's stage-out
        nonlocal serial
        serial += 1
        action = make_action(f"{1000 + serial}/1/stage-out/1")
        d.dispatcher.dispatch([action])
        future: Future[Outcome] = d.dispatcher.running[action.id].future

        def ended(f: Future[Outcome]) -> None:
            if f.cancelled():
                return
            o = f.result()
            if o.result is not Result.OK and "cancelled" not in o.message:
                ph.failures.append(f"{o.action_id}: {o.message}")
            with ph.lock:
                ph.copies_done += 1
                ph.copies_finished += o.result is Result.OK
            bench.ended.put(action.id)
        future.add_done_callback(ended)

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
        with mock.patch.object(dispatch, "BULK", lanes):
            for _ in range(copies):
                next_copy()
            deadline = time.monotonic() + 120
            while ph.copying < copies and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(1.0)  # the copies past their start (scan, first files)
            fired = 0
            due = time.monotonic()
            while fired < mounts or len(ph.done) < mounts:
                if fired < mounts and time.monotonic() >= due:
                    action = make_action(f"{fired + 1}/1/mount-input/1")
                    with ph.lock:
                        ph.copying_at[action.id] = ph.copying
                    # mounts on the lane now (queued or running): below its workers, this
                    # mount has an idle thread, and any wait to start is the CPU's or GIL's
                    ph.busy_at[action.id] = sum(1 for a in ph.dispatched if a not in ph.done)
                    ph.dispatched[action.id] = time.monotonic()
                    d.dispatcher.dispatch([action])
                    d.dispatcher.running[action.id].future.add_done_callback(
                        mount_ended(action.id))
                    fired += 1
                    due += spacing
                    load.append(os.getloadavg()[0])
                # the loop thread: stage-outs that ended are followed by the next job's
                # (not after the last mount's dispatch: a copy queued then would be
                # cancelled at the shutdown, and the product's callback logs that loudly)
                try:
                    bench.ended.get(timeout=max(0.0, min(0.05, due - time.monotonic())))
                    if fired < mounts:
                        next_copy()
                except queue.Empty:
                    pass
                if time.monotonic() > deadline + 600:
                    raise SystemExit("mounts did not finish in 10 min")
    finally:
        d.shutdown(timeout=60)
        store.close()
        thread_control_ms = thread_control.stop()
        control_ms = [float(x) for x in control.communicate("")[0].split()]
    failed = [a for a in ph.dispatched if a not in ph.started]
    if failed:
        ph.failures.append(f"mounts that never ran: {failed}")
    start = [ph.started[a] - ph.dispatched[a] for a in ph.dispatched]
    done = [ph.done[a] - ph.dispatched[a] for a in ph.dispatched]
    return {
        "lanes": 1 if one_lane else 2, "copies": copies, "mounts": mounts,
        "start_p50_ms": pct(start, 50), "start_p90_ms": pct(start, 90),
        "start_max_ms": pct(start, 100),
        "done_p50_ms": pct(done, 50), "done_p90_ms": pct(done, 90),
        "done_max_ms": pct(done, 100),
        "urgent_busy_max": max(ph.busy_at.values()),
        "start_max_idle_thread_ms": pct([ph.started[a] - ph.dispatched[a] for a in ph.dispatched
                                         if ph.busy_at[a] < URGENT_WORKERS] or [0.0], 100)
        if not one_lane else None,  # one lane: the copies hold every thread
        "copying_min": min(ph.copying_at.values()),
        "copying_mean": round(statistics.mean(ph.copying_at.values()), 1),
        "copies_done": ph.copies_done, "copies_finished": ph.copies_finished,
        "load_mean": round(statistics.mean(load), 2),
        "control_thread_ms": list(thread_control_ms), "control_process_ms": control_ms,
        "failures": ph.failures,
    }


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| lanes | copies | start p50 | p90 | max | done p50 | p90 | max | copying min/mean "
             "| load | control thread p50/max | control process p50/max |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    extra: list[str] = []
    for r in rows:
        ct, cp = r["control_thread_ms"], r["control_process_ms"]
        if r["lanes"] == 2:
            extra.append(f"two lanes: at most "
                         f"{r['urgent_busy_max']} mounts on the urgent lane at a dispatch; "
                         f"the slowest start of a mount that had an idle thread "
                         f"{r['start_max_idle_thread_ms']} ms; copies that ended by "
                         f"themselves meanwhile {r['copies_finished']}")
        lines.append(
            f"| {'two (shipped)' if r['lanes'] == 2 else 'one (mounts as bulk)'} "
            f"| {r['copies']} | {r['start_p50_ms']} ms | {r['start_p90_ms']} ms "
            f"| {r['start_max_ms']} ms | {r['done_p50_ms']} ms | {r['done_p90_ms']} ms "
            f"| {r['done_max_ms']} ms | {r['copying_min']}/{r['copying_mean']} | {r['load_mean']} "
            f"| {ct[0]}/{ct[1]} ms | {cp[0]}/{cp[1]} ms |")
    return "\n".join(lines + extra)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--copies", type=int, default=8,
                    help="concurrent stage-outs (= daemon.workers)")
    ap.add_argument("--mounts", type=int, default=30)
    ap.add_argument("--spacing", type=float, default=0.3, help="seconds between mounts")
    ap.add_argument("--files", type=int, default=3000, help="small files in the tree")
    ap.add_argument("--big", type=int, default=4, help="big files in the tree")
    ap.add_argument("--big-mib", type=int, default=4, help="size of each big file (MiB)")
    ap.add_argument("--src", default="/dev/shm",
                    help="where the source tree is (tmpfs; --lab: each node's RAM pool)")
    ap.add_argument("--dst", default="/var/tmp", help="where the copies go")
    ap.add_argument("--user", default="nobody")
    ap.add_argument("--copies-nice", type=int, default=0,
                    help="run the copies' commands at this nice (19: as if on RSA nodes "
                         "of their own; 0: compete with the bench's process; not --lab)")
    ap.add_argument("--workers", action="store_true",
                    help="run each stage-out's engine in a staging worker, as rsad does "
                         "(staging.engine_process); without it, in this process's threads")
    ap.add_argument("--engine-nice", type=int, default=0,
                    help="with --workers: the workers' nice (staging.engine_nice)")
    ap.add_argument("--lab", action="store_true",
                    help="the copies on the lab's RSA nodes over SSH (the lab up)")
    ap.add_argument("--lanes", choices=("both", "two"), default="both",
                    help="two: the shipped two lanes only, without the one-lane run")
    ap.add_argument("--json", help="write the figures to this file")
    return ap


def bench(args: argparse.Namespace) -> dict[str, Any]:
    """One run of the bench with ``args`` (parser()'s); prints its table, returns the
    figures (``failures``: what failed)."""
    user = Identity.of(args.user)
    nodes = lab_nodes() if args.lab else None
    where = f"{node_cgroup(nodes[0].name)}" if nodes else ""
    if nodes:  # the tree in each node's RAM pool, as root, then the user's
        src_top = Path(read_lab_env(LAB_ENV)["RSA_LAB_POOL_RAM"]) / \
            f"rsa-lanes-bench-{os.getpid()}"
        for n in nodes:
            n.run(["/usr/bin/python3", "-c", MAKE_TREE, str(src_top / "tree"),
                   str(args.files), str(args.big), str(args.big_mib)], timeout=600)
            n.run(["chown", "-R", f"{user.uid}:{user.gid}", str(src_top)], timeout=600)
    else:
        src_top = Path(tempfile.mkdtemp(prefix="rsa-lanes-bench-", dir=args.src))
    out = Path(tempfile.mkdtemp(prefix="rsa-lanes-bench-", dir=args.dst))
    try:
        out.chmod(0o755)
        tree = src_top / "tree"
        if not nodes:
            src_top.chmod(0o755)
            tree.mkdir()
            subprocess.run([sys.executable, "-c", MAKE_TREE, str(tree), str(args.files),
                            str(args.big), str(args.big_mib)], check=True)
            subprocess.run(["chown", "-R", f"{user.uid}:{user.gid}", str(tree)], check=True)
        b = Bench(tree, out, user, args.copies_nice, args.workers, args.engine_nice, nodes)
        modes = (False, True) if args.lanes == "both" else (False,)
        try:
            rows = [one_mode(b, out, args.copies, args.mounts, args.spacing, one_lane)
                    for one_lane in modes]
        finally:
            if b.pool is not None:
                b.pool.close()
    finally:
        subprocess.run(["rm", "-rf", "--", str(out)], check=False)
        if nodes:
            for n in nodes:
                n.run(["rm", "-rf", "--", str(src_top)], timeout=600, check=False)
        else:
            subprocess.run(["rm", "-rf", "--", str(src_top)], check=False)
    two, one = rows[0], rows[-1]
    ratios = {k: round(one[k] / two[k], 1) if two[k] else None
              for k in ("start_p50_ms", "start_p90_ms", "start_max_ms",
                        "done_p50_ms", "done_p90_ms", "done_max_ms")} if len(rows) > 1 else {}
    tree_mib = (args.files * 4096 + args.big * (args.big_mib << 20)) / (1 << 20)
    copies_where = (f"on the lab's {', '.join(n.name for n in nodes)} over SSH, their "
                    f"cgroup {where}" if nodes else
                    f"{args.src} -> {args.dst}, copies at nice {args.copies_nice}")
    print(f"# {args.copies} stage-outs copying ({args.files} x 4 KiB + {args.big} x "
          f"{args.big_mib} MiB = {tree_mib:.1f} MiB each, {copies_where}), "
          f"{args.mounts} mounts {args.spacing} s apart, engines "
          f"{f'in staging workers at nice {args.engine_nice}' if args.workers else 'here'}"
          f"; load avg (1 min) now "
          f"{os.getloadavg()[0]:.2f}")
    print(table(rows))
    if ratios:
        print("one lane / two lanes: " + ", ".join(f"{k.removesuffix('_ms')} {v}x"
                                                   for k, v in ratios.items()))
    failures = [f for r in rows for f in r["failures"]]
    for f in failures:
        print(f"FAILED: {f}")
    return {"copies": args.copies, "mounts": args.mounts, "spacing": args.spacing,
            "copies_nice": args.copies_nice, "workers": args.workers,
            "engine_nice": args.engine_nice, "lab": args.lab, "nodes_cgroup": where,
            "tree_mib": round(tree_mib, 1), "files": args.files + args.big,
            "rows": rows, "ratios_one_over_two": ratios, "failures": failures}


def main() -> None:
    args = parser().parse_args()
    got = bench(args)
    if args.json:
        Path(args.json).write_text(json.dumps(got, indent=1) + "\n")
    if got["failures"]:
        raise SystemExit(1)


def test_lanes_benchmark() -> None:
    """``make lab-test LAB_TESTS='bench/bench_lanes.py'`` with ``RSA_BENCH=lanes``: the
    bench on the lab's nodes, two lanes, staging workers at nice 10, for each N of
    ``RSA_BENCH_LANES`` (default ``8,32,8,32,8,32``), ``RSA_BENCH_MOUNTS`` mounts each
    (default 30); every run's figures to ``RSA_BENCH_OUT`` (JSON), its table to stdout."""
    import pytest

    if os.environ.get("RSA_BENCH") != "lanes" or not LAB_ENV.exists():
        pytest.skip("a benchmark: RSA_BENCH=lanes and the lab up")
    runs = []
    for n in os.environ.get("RSA_BENCH_LANES", "8,32,8,32,8,32").split(","):
        args = parser().parse_args(["--copies", n, "--workers", "--engine-nice", "10",
                                    "--lab", "--lanes", "two", "--mounts",
                                    os.environ.get("RSA_BENCH_MOUNTS", "30")])
        runs.append(bench(args))
        Path(os.environ.get("RSA_BENCH_OUT", "/tmp/bench_lanes.json")).write_text(
            json.dumps(runs, indent=1) + "\n")
    assert not [f for r in runs for f in r["failures"]]


if __name__ == "__main__":
    main()
