"""Benchmark: one core decision step (``Scheduler.observe`` over a full queue snapshot).

Issue 2 target: < 100 ms per step at 100k jobs with 1,000 RSA nodes, growing linearly.
Not a timed test: run it by hand and copy the table into docs/benchmarks.md.

The queue is a realistic mix (deterministic, seeded): most jobs pending on Priority,
a share with ``#RSA_*`` directives, a few hundred on-deck (Resources), a tenth running.
Before measuring, the scheduler is warmed up the way the daemon would get there: every
on-deck RSA job is allocated and its actions answered until it is locked in.

Two steps are measured:

* ``steady`` — the next poll sees the same queue (the common case: almost nothing
  changed), median of ``--rounds`` polls;
* ``churn`` — a poll in which many jobs changed: every on-deck job starts running,
  a fifth of the running jobs end, as many queued jobs go on-deck, 5% of the pending
  jobs change pending reason, and 5% get a new priority. Median of ``--rounds`` fresh
  warmed-up schedulers.

Each step is measured in two forms:

* ``snapshot`` — ``observe`` gets every job of the queue (``complete=True``): what rsad
  passes with ``slurm.script_source: scontrol`` (no job_submit.lua);
* ``changes`` — ``observe`` gets only the RSA jobs whose squeue line changed (and the
  on-deck ones still waiting for nodes) plus ``present``, the ids of every RSA job Slurm
  lists: what rsad's default cycle passes (``daemon/cycle.py`` ``QueueReader.changes``;
  job_submit.lua marks RSA jobs, so non-RSA jobs never reach the core).

Only ``observe`` is timed; building its arguments (the squeue parse, picking the changed
lines) is not (bench/bench_first_cycle.py times rsad's whole cycle). ``core MB`` is the
growth of the process's resident set from building the scheduler to the end of its
warm-up (records, last observations, indices, the pool; the queue itself excluded),
``peak MB`` the process's VmHWM after the size ran.

    .venv/bin/python bench/bench_core.py                 # 1k, 10k, 100k jobs
    .venv/bin/python bench/bench_core.py --sizes 100000 --profile churn
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import platform
import pstats
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rsa_scheduler.core.actions import Outcome, Result
from rsa_scheduler.core.allocator import Pool, RsaNode
from rsa_scheduler.core.directives import DirectiveSpec
from rsa_scheduler.core.policy import AllocationPolicy, StagingPolicy, Tier
from rsa_scheduler.core.scheduler import Decision, Observation, Scheduler

RSA_NODES = 1000
RSA_SHARE = 0.30  # jobs with #RSA_ directives
RUNNING_SHARE = 0.10
PENDING_REASONS = ("Priority",) * 8 + ("Dependency", "JobHeldUser", "QOSMaxJobsPerUserLimit")


@dataclass
class Queue:
    """A snapshot plus the indices of its jobs by role."""

    obs: list[Observation]
    on_deck: list[int]
    running: list[int]
    pending: list[int]


def make_queue(n: int, seed: int = 4) -> Queue:
    rng = random.Random(seed)
    specs = [
        DirectiveSpec(data_in="/scratch/u/in", data_out="/scratch/u/out"),
        DirectiveSpec(data_out="/scratch/u/out"),
        DirectiveSpec(data_in="/scratch/u/in"),
    ]
    n_deck = max(10, min(300, n // 10))
    n_run = int(n * RUNNING_SHARE)
    obs: list[Observation] = []
    q = Queue(obs, [], [], [])
    for i in range(n):
        jid = str(1_000_000 + i)
        spec = rng.choice(specs) if rng.random() < RSA_SHARE else None
        cn = rng.choice((1, 1, 2, 4, 8, 16, 32, 64))
        prio = rng.randrange(1, 100_000)
        if i < n_run:
            state, reason = "RUNNING", "None"
            q.running.append(i)
        elif i < n_run + n_deck:
            state, reason = "PENDING", "Resources"
            q.on_deck.append(i)
        else:
            state, reason = "PENDING", rng.choice(PENDING_REASONS)
            q.pending.append(i)
        obs.append(Observation(jid, f"user{i % 500}", state, reason, prio, cn, spec))
    return q


def make_scheduler() -> Scheduler:
    pool = Pool([RsaNode(f"rsa{i:04d}", Tier.RAM, 512 << 30) for i in range(RSA_NODES)],
                AllocationPolicy(ratio=32, max_nodes=8))
    return Scheduler(pool, StagingPolicy())


def warm_up(sched: Scheduler, queue: Queue, now: float) -> float:
    """Observe the queue and answer every action until nothing is outstanding."""
    sched.observe(queue.obs, now)
    for _ in range(10):
        pending = sched.outstanding()
        if not pending:
            break
        now += 1
        for act in pending:
            sched.outcome(Outcome(act.id, Result.OK), now)
    now += 5
    sched.observe(queue.obs, now)
    return now


def churn(queue: Queue, rng: random.Random) -> list[Observation]:
    """The next snapshot after a busy scheduling interval."""
    obs = list(queue.obs)
    for i in queue.on_deck:
        obs[i] = replace(obs[i], state="RUNNING", reason="None")
    for i in rng.sample(queue.running, len(queue.running) // 5):
        obs[i] = replace(obs[i], state="COMPLETED", reason="None")
    for i in rng.sample(queue.pending, min(len(queue.on_deck), len(queue.pending))):
        obs[i] = replace(obs[i], reason="Resources")
    for i in rng.sample(queue.pending, len(queue.pending) // 20):
        if obs[i].reason != "Resources":
            obs[i] = replace(obs[i], reason="Priority" if obs[i].reason != "Priority"
                             else "Dependency")
    for i in rng.sample(range(len(obs)), len(obs) // 20):
        obs[i] = replace(obs[i], priority=obs[i].priority + 1)
    return obs


def timed(fn: Callable[..., Decision], *args: Any,
          **kwargs: Any) -> tuple[float, float, Decision]:
    """(wall seconds, CPU seconds of this process, result); the heap is collected first."""
    gc.collect()
    c0, t0 = time.process_time(), time.perf_counter()
    out = fn(*args, **kwargs)
    return time.perf_counter() - t0, time.process_time() - c0, out


def proc_mb(key: str) -> float:
    """A /proc/self/status memory line (VmRSS, VmHWM) in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def changes(sched: Scheduler, before: list[Observation], after: list[Observation],
            by_id: dict[str, Observation]) -> list[Observation]:
    """What rsad's incremental cycle hands the core for ``after``: the RSA jobs whose
    line changed since ``before``, and the on-deck ones still waiting for nodes."""
    out = [b for a, b in zip(before, after, strict=True) if b.spec is not None and a != b]
    ids = {o.job_id for o in out}
    out += [by_id[j] for j in sched.waiting if j not in ids and j in by_id]
    return out


def run_size(n: int, rounds: int, profile: str | None) -> dict[str, float]:
    queue = make_queue(n)
    rsa_ids = {o.job_id for o in queue.obs if o.spec is not None}  # present, every poll
    gc.collect()
    rss0 = proc_mb("VmRSS")
    sched = make_scheduler()
    now = warm_up(sched, queue, 1_000.0)
    gc.collect()
    core_mb = proc_mb("VmRSS") - rss0
    tracked = len(sched.records)
    steady: list[float] = []
    steady_cpu: list[float] = []
    for _ in range(rounds):
        now += 5
        dt, cpu, _dec = timed(sched.observe, queue.obs, now)
        steady.append(dt)
        steady_cpu.append(cpu)
    if profile == "steady":
        _profile(sched.observe, (queue.obs, now + 5), {}, f"steady, {n} jobs")
    by_id = {o.job_id: o for o in queue.obs}
    delta_steady: list[float] = []
    for _ in range(rounds):
        now += 5
        delta = changes(sched, queue.obs, queue.obs, by_id)
        dt, _cpu, _dec = timed(sched.observe, delta, now, complete=False, present=rsa_ids)
        delta_steady.append(dt)
    if profile == "steady-changes":
        _profile(sched.observe, (changes(sched, queue.obs, queue.obs, by_id), now + 5),
                 {"complete": False, "present": rsa_ids}, f"steady, changes only, {n} jobs")
    churns: list[float] = []
    churns_cpu: list[float] = []
    delta_churns: list[float] = []
    delta_churns_cpu: list[float] = []
    events = delta_events = 0
    decided: list[tuple[str, str, Any]] | None = None
    for r in range(rounds):
        nxt = churn(queue, random.Random(r))
        for form in ("snapshot", "changes"):
            sched = make_scheduler()
            t = warm_up(sched, queue, 1_000.0) + 5
            args: tuple[Any, ...] = (nxt, t)
            kwargs: dict[str, Any] = {}
            if form == "changes":
                args = (changes(sched, queue.obs, nxt, {o.job_id: o for o in nxt}), t)
                kwargs = {"complete": False, "present": rsa_ids}
            if profile == f"churn{'-changes' if form == 'changes' else ''}" and \
                    r == rounds - 1:
                _profile(sched.observe, args, kwargs, f"churn ({form}), {n} jobs")
                decided = None
                continue
            dt, cpu, dec = timed(sched.observe, *args, **kwargs)
            got = [(e.job_id, e.name, e.context) for e in dec.events]
            if form == "snapshot":
                churns.append(dt)
                churns_cpu.append(cpu)
                events, decided = len(dec.events), got
            else:
                delta_churns.append(dt)
                delta_churns_cpu.append(cpu)
                delta_events = len(dec.events)
                assert decided is None or got == decided, "the two forms decided differently"
    changed = sum(1 for a, b in zip(queue.obs, nxt, strict=True)
                  if (a.state, a.reason, a.priority) != (b.state, b.reason, b.priority))
    med = statistics.median
    return {"jobs": n, "tracked": tracked,
            "steady_ms": med(steady) * 1e3, "steady_cpu_ms": med(steady_cpu) * 1e3,
            "churn_ms": med(churns) * 1e3 if churns else float("nan"),
            "churn_cpu_ms": med(churns_cpu) * 1e3 if churns_cpu else float("nan"),
            "changed": changed, "events": events, "delta_events": delta_events,
            "delta_steady_ms": med(delta_steady) * 1e3,
            "delta_churn_ms": med(delta_churns) * 1e3 if delta_churns else float("nan"),
            "delta_churn_cpu_ms": med(delta_churns_cpu) * 1e3 if delta_churns else float("nan"),
            "core_mb": core_mb, "peak_mb": proc_mb("VmHWM")}


def _profile(fn: Callable[..., Decision], args: tuple[Any, ...], kwargs: dict[str, Any],
             title: str) -> None:
    prof = cProfile.Profile(time.process_time)  # CPU time: the reference VM is shared
    prof.enable()
    fn(*args, **kwargs)
    prof.disable()
    print(f"\n--- profile: {title} ---", file=sys.stderr)
    pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(15)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--profile", choices=("steady", "churn", "steady-changes",
                                          "churn-changes"))
    args = ap.parse_args()
    print(f"# Python {platform.python_version()}, {platform.machine()}, "
          f"{RSA_NODES} RSA nodes, {int(RSA_SHARE * 100)}% of jobs with #RSA_ directives")
    print("| jobs | tracked | core MB | peak MB | steady: snapshot ms (cpu) | changes ms "
          "| churn: changed jobs | snapshot ms (cpu) | events | changes ms (cpu) | events |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        r = run_size(n, args.rounds, args.profile)
        rows.append(r)
        print(f"| {n:,} | {r['tracked']:,.0f} | {r['core_mb']:,.0f} | {r['peak_mb']:,.0f} | "
              f"{r['steady_ms']:.1f} ({r['steady_cpu_ms']:.1f}) | {r['delta_steady_ms']:.1f} | "
              f"{r['changed']:,.0f} | {r['churn_ms']:.1f} ({r['churn_cpu_ms']:.1f}) | "
              f"{r['events']:,.0f} | {r['delta_churn_ms']:.1f} ({r['delta_churn_cpu_ms']:.1f}) | "
              f"{r['delta_events']:,.0f} |",
              flush=True)
    if len(rows) > 1:
        a, b = rows[0], rows[-1]
        k = b["jobs"] / a["jobs"]
        print(f"\ngrowth {a['jobs']:,} -> {b['jobs']:,} jobs (x{k:.0f}): steady "
              f"x{b['steady_ms'] / a['steady_ms']:.1f}, churn x{b['churn_ms'] / a['churn_ms']:.1f}")


if __name__ == "__main__":
    main()
