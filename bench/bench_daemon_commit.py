"""Benchmark: transitions rsad commits per second, durably, as it really commits them.

``bench_store.py`` measures the store alone, one ``append`` per transition: that is
bounded by the disk's fsync rate (``durability="full"`` fsyncs the WAL at every
commit). rsad does not commit that way: a poll's decisions are one append, and outcomes,
hooks and commands that queue up while the loop is busy are decided one by one and
written in one append (group commit, ``Daemon.drain``). This runs the real ``Daemon``
(core, store with the shipped ``full`` durability, worker threads, inbox) over ``--jobs``
RSA jobs going through their whole lifecycle (on-deck, staged, locked in, running with
the input mounted, reset, output mounted, finished, staged out, verified, torn down,
released) with executors that succeed at once, so what is measured is rsad's own cost:
deciding, committing and dispatching. Slurm is a scripted in-memory queue.

    .venv/bin/python bench/bench_daemon_commit.py [--jobs 2000] [--rounds 3] [--dir /tmp]

Prints committed transitions/s (``rsa.transition`` events), all events/s, and events
per commit. Not a test: nothing asserts.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rsa_scheduler.core.actions import ActionKind
from rsa_scheduler.core.allocator import Pool, RsaNode
from rsa_scheduler.core.directives import DirectiveSpec
from rsa_scheduler.core.events import Event
from rsa_scheduler.core.policy import AllocationPolicy, ResetTrigger, StagingPolicy, Tier
from rsa_scheduler.core.scheduler import Scheduler
from rsa_scheduler.daemon.executors import ActionContext, Registry
from rsa_scheduler.daemon.service import Daemon
from rsa_scheduler.daemon.wiring import slurm_executors
from rsa_scheduler.slurm.parse import JobInfo, QueueRow
from rsa_scheduler.store import JobRow, Store

SPEC = DirectiveSpec(data_in="/pfs/in", data_out="/pfs/out")


class Queue:
    """The Slurm port over an in-memory queue the benchmark scripts."""

    def __init__(self, jobs: int) -> None:
        comment = SPEC.to_admin_comment()
        self.rows = {str(100_000 + i): QueueRow(str(100_000 + i), "PENDING", "Resources",
                                                100, 1, f"user{i % 50}", comment)
                     for i in range(jobs)}

    def set_all(self, state: str, reason: str = "None") -> None:
        self.rows = {j: QueueRow(j, state, reason, r.priority, r.num_nodes, r.user,
                                 r.admin_comment) for j, r in self.rows.items()}

    def queue(self) -> list[QueueRow]:
        return list(self.rows.values())

    def batch_script(self, job_id: str) -> str:
        return ""

    def lock_original(self, job_id: str) -> str:
        return "normal"

    def lock_in(self, job_id: str) -> None:
        pass

    def unlock(self, job_id: str, original: str = "") -> str:
        return ""

    def set_comment(self, job_id: str, text: str) -> None:
        pass

    def drain_nodes(self, nodes: Sequence[str], reason: str) -> None:
        pass

    def job_info(self, job_id: str) -> JobInfo:
        return JobInfo(job_id, job_id, "N/A", "alice", "debug", "")

    def idle_nodes(self) -> dict[str, int]:
        return {}

    def pending_jobs(self) -> list[tuple[str, int, str, str]]:
        return []

    def hold(self, job_id: str, seconds: int, admin_comment: str) -> None:
        pass

    def release_hold(self, job_id: str, admin_comment: str) -> None:
        pass


def instant() -> Registry:
    reg = Registry()
    for kind in ActionKind:
        def run(ctx: ActionContext, kind: ActionKind = kind) -> Mapping[str, Any]:
            return {"mount": {"fs_id": "x"}} if kind is ActionKind.BUILD_FS else {}
        reg.register(kind, run)
    return reg


class Counting:
    """Wraps the store's append to count commits and events."""

    def __init__(self, store: Store) -> None:
        self.store, self.commits, self.events, self.transitions = store, 0, 0, 0
        self._append = store.append

    def __call__(self, events: Sequence[Event], rows: Sequence[JobRow] = ()) -> list[Event]:
        self.commits += 1
        self.events += len(events)
        self.transitions += sum(1 for e in events if e.name == "rsa.transition")
        return self._append(events, rows)


def settle(d: Daemon, deadline: float) -> None:
    while time.monotonic() < deadline:
        handled = d.drain(timeout=0.01)
        if handled == 0 and not d.running and d.inbox.empty():
            return
    raise SystemExit("the daemon did not settle in time")


def one_round(directory: Path, jobs: int) -> dict[str, float]:
    path = directory / "bench-daemon.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    store = Store.open(path)  # the shipped durability: full
    pool = Pool([RsaNode(f"rsa{i:05d}", Tier.RAM, 512 << 30) for i in range(jobs)],
                AllocationPolicy(ratio=1, max_nodes=1))
    policy = StagingPolicy(reset_trigger=ResetTrigger.DELAY, reset_delay=0.001)
    slurm = Queue(jobs)
    registry = instant()
    slurm_executors(registry, slurm)
    d = Daemon(Scheduler(pool, policy), slurm=slurm, store=store,
               registry=registry, workers=4, poll_interval=0)
    d.start()
    count = Counting(store)
    store.append = count  # type: ignore[method-assign]
    deadline = time.monotonic() + 600
    t0 = time.perf_counter()
    for state in ("PENDING", "RUNNING", "COMPLETED"):
        slurm.set_all(state, "Resources" if state == "PENDING" else "None")
        d.poll()
        settle(d, deadline)
        d._commit(d.sched.tick(d.clock()))  # the loop's tick: the reset delay has passed
        settle(d, deadline)
    elapsed = time.perf_counter() - t0
    released = sum(1 for r in d.sched.records.values() if r.rsa_state.value == "released")
    d.shutdown()
    store.close()
    if released != jobs:
        raise SystemExit(f"only {released} of {jobs} jobs ended released")
    return {"seconds": elapsed, "transitions_per_s": count.transitions / elapsed,
            "events_per_s": count.events / elapsed, "commits": count.commits,
            "events_per_commit": count.events / count.commits,
            "transitions": count.transitions}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default=tempfile.gettempdir(),
                    help="where the database goes (same disk as the deployment)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        runs = [one_round(Path(tmp), args.jobs) for _ in range(args.rounds)]
    runs.sort(key=lambda r: r["transitions_per_s"])
    med = runs[len(runs) // 2]
    print(f"# {args.jobs} jobs, whole lifecycle, durability full, median of {args.rounds}")
    print("| jobs | transitions | s | transitions/s | events/s | commits | events/commit |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| {args.jobs:,} | {med['transitions']:,} | {med['seconds']:.2f} | "
          f"{med['transitions_per_s']:,.0f} | {med['events_per_s']:,.0f} | "
          f"{med['commits']:,} | {med['events_per_commit']:.1f} |")
    print("transitions/s per round: " + ", ".join(
        f"{r['transitions_per_s']:,.0f}" for r in runs)
          + f" (spread {statistics.pstdev(r['transitions_per_s'] for r in runs):,.0f})")


if __name__ == "__main__":
    main()
