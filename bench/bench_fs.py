"""Benchmark of RAMDISK create and destroy on the lab's RSA nodes (real MooseFS over SSH).

For each run: ``MooseFsBackend.create`` on N RSA nodes (master on the first, one
chunkserver per node, mfsmount on every node, one copy, no trash) and ``destroy``
(unmount everywhere, SIGKILL the servers, free the pools), timed separately, through one
:class:`HostPool` whose SSH connections are opened (and timed) before the first run, as
in rsad. Also reports SSH connect and per-command latency on the same connections, and
what each step of a create and a destroy costs (the steps the backend logs: probe,
servers, mounts, spec; teardown), and the CPU seconds a create cost this process (rsad's
side: SSH, configs) and the whole host (every node's side too, and whatever else runs).
``--trace`` prints every SSH round trip of the last run (node, when it began and how long
it took, from the start of the create or destroy).
Targets (issue 34): create < 1 s on 4 nodes, 16 nodes < 1.5x 4 nodes.

A chunkserver's space reaches the master on a whole second of its node's clock (MooseFS's
``REPORT_SPACE_FREQ``), so a create's time depends on where in the second it began, and
back-to-back runs fall into step with the second: their median says little of the
create a job gets. ``--phases`` starts run i at (i + 0.5) / runs of a second of the
wall clock (the lab's RSA nodes share this host's clock), so the runs cover the second
evenly and their mean is what a create costs on average.

Standby chunkservers (``filesystem.moosefs_standby``, on by default): a create claims each
node's standby, which a teardown started; it is ready (its folder scanned) 1-2 s after
that teardown. ``--idle S`` waits S seconds after each destroy (default 2: the time an RSA
node is idle between two jobs is longer), and a first create and destroy, not counted,
leaves every pool its standby. ``--no-standby`` times creates that start every
chunkserver (``moosefs_standby: false``). The table says how many chunkservers came
from standbys.

Needs the lab (``make lab-up``; ``RSA_LAB_RSA_COUNT=16`` for 16 nodes) and root. Prints a
markdown table for docs/benchmarks.md. Not a test: nothing asserts.

    .venv/bin/python bench/bench_fs.py [--nodes 4] [--runs 5] [--tier ram] [--trace]
        [--phases] [--idle 2] [--no-standby]
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import shlex
import statistics
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rsa_scheduler.fs.base import FsRequest
from tests.integration.conftest import LAB_ENV, read_lab_env
from tests.integration.fskit import lab_hosts, lab_moosefs

CREATE_STEPS = ("probe", "servers", "mounts", "spec")


def _fmt(xs: list[float]) -> str:
    return (f"{statistics.median(xs):.2f} s (min {min(xs):.2f}, max {max(xs):.2f})"
            if xs else "-")


def phase_delay(now: float, phase: float) -> float:
    """Seconds from ``now`` (wall clock, seconds) until the clock is ``phase`` (0 <= phase
    < 1) of the way through one of its seconds."""
    return (phase - now % 1.0) % 1.0


def host_busy() -> float:
    """CPU seconds the whole host spent busy (every CPU, /proc/stat: all but idle and
    iowait) since it started."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def run_phase(i: int, runs: int) -> float:
    """Where in the second run ``i`` of ``runs`` starts with ``--phases``: the middles of
    ``runs`` equal slices of a second."""
    return (i + 0.5) / runs


class Steps(logging.Handler):
    """Collects the step marks the backend logs (``rsa_step``, ``rsa_at``)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.marks: list[tuple[str, float]] = []
        self.standbys: list[int] = []  # per create: its chunkservers from standbys

    def emit(self, record: logging.LogRecord) -> None:
        warm = getattr(record, "rsa_standbys", None)
        if warm is not None:
            self.standbys.append(int(warm))
        step = getattr(record, "rsa_step", None)
        if step is not None:
            self.marks.append((str(step), float(getattr(record, "rsa_at", 0.0))))

    def take(self) -> dict[str, float]:
        """Step -> its own cost (from the mark before it), and clear."""
        out: dict[str, float] = {}
        last = 0.0
        for step, at in self.marks:
            out[step] = at - last
            last = at
        self.marks.clear()
        return out


class Traced:
    """A Host that records every round trip (node, start, seconds, command head)."""

    def __init__(self, host: Any, log: list[tuple[str, float, float, str]],
                 lock: threading.Lock) -> None:
        self._host, self._log, self._lock, self.name = host, log, lock, host.name
        self.address = getattr(host, "address", None)

    def run(self, argv: Sequence[str], **kw: Any) -> Any:
        t = time.monotonic()
        try:
            return self._host.run(argv, **kw)
        finally:
            what = " ".join(a for a in argv if "\n" not in a)[:90]
            with self._lock:
                self._log.append((self.name, t, time.monotonic() - t, what))


def _print_trace(title: str, trace: list[tuple[str, float, float, str]], t0: float) -> None:
    print(f"--- {title}", file=sys.stderr)
    for node, t, secs, what in sorted(trace, key=lambda x: x[1]):
        print(f"  {node:6} +{t - t0:6.3f} {secs:6.3f}s  {shlex.quote(what)[:100]}",
              file=sys.stderr)
    trace.clear()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--tier", choices=("ram", "ssd"), default="ram")
    ap.add_argument("--trace", action="store_true",
                    help="print every SSH round trip of the last run to stderr")
    ap.add_argument("--phases", action="store_true",
                    help="start run i at (i + 0.5) / runs of a wall-clock second")
    ap.add_argument("--idle", type=float, default=2.0,
                    help="seconds between a destroy and the next create (default 2)")
    ap.add_argument("--no-standby", action="store_true",
                    help="every create starts its chunkservers (moosefs_standby: false)")
    args = ap.parse_args()
    if not LAB_ENV.exists():
        print(f"lab is not up ({LAB_ENV} missing): run `make lab-up` as root", file=sys.stderr)
        return 2
    lab = read_lab_env()
    pool_dir = lab["RSA_LAB_POOL_RAM"] if args.tier == "ram" else lab["RSA_LAB_POOL_SSD"]
    steps = Steps()
    fslog = logging.getLogger("rsa_scheduler.fs.moosefs")
    fslog.setLevel(logging.DEBUG)
    fslog.addHandler(steps)
    load0 = os.getloadavg()[0]  # the host's, before and after (a shared host moves it)
    with lab_hosts(lab) as hosts:
        nodes = tuple(list(hosts)[:args.nodes])
        if args.tier == "ssd":
            nodes = tuple(lab["RSA_LAB_RSA_SSD_NODES"].split(","))[:args.nodes]
        if len(nodes) < args.nodes:
            print(f"the lab has {len(nodes)} RSA nodes ({args.tier}), not {args.nodes}: "
                  "bring it up with RSA_LAB_RSA_COUNT", file=sys.stderr)
            return 2
        connect = []
        for n in nodes:
            t = time.monotonic()
            hosts[n].connect()
            connect.append(time.monotonic() - t)
        latency = []
        for _ in range(10):
            t = time.monotonic()
            hosts[nodes[0]].run(["true"], timeout=30)
            latency.append(time.monotonic() - t)
        trace: list[tuple[str, float, float, str]] = []
        lock = threading.Lock()
        used: Mapping[str, Any] = ({n: Traced(hosts[n], trace, lock) for n in hosts}
                                   if args.trace else hosts)
        backend = lab_moosefs(lab, used, standby=not args.no_standby)  # type: ignore[arg-type]
        if not args.no_standby:  # not counted: leaves every pool its standby
            warm = FsRequest(f"bench-{os.getpid()}-warm", "0", nodes, args.tier,
                             {n: pool_dir for n in nodes}, "/run/rsa/mnt")
            try:
                backend.create(warm)
            finally:
                backend.destroy(warm)
            steps.take()
            steps.standbys.clear()
            trace.clear()
        creates, destroys = [], []
        own_cpu, host_cpu = [], []  # per create: this process's (rsad's side), the host's
        create_steps: dict[str, list[float]] = {}
        destroy_steps: dict[str, list[float]] = {}
        for i in range(args.runs):
            req = FsRequest(f"bench-{os.getpid()}-{i}", "0", nodes, args.tier,
                            {n: pool_dir for n in nodes}, "/run/rsa/mnt")
            last = i == args.runs - 1
            time.sleep(args.idle)
            if args.phases:
                time.sleep(phase_delay(time.time(), run_phase(i, args.runs)))
            started = time.time() % 1.0
            try:
                t, c, h = time.monotonic(), time.process_time(), host_busy()
                backend.create(req)
                creates.append(time.monotonic() - t)
                own_cpu.append(time.process_time() - c)
                host_cpu.append(host_busy() - h)
                for k, secs in steps.take().items():
                    create_steps.setdefault(k, []).append(secs)
                if last and args.trace:
                    _print_trace(f"create, {len(nodes)} nodes", trace, t)
            finally:
                trace.clear()
                t = time.monotonic()
                backend.destroy(req)
                destroys.append(time.monotonic() - t)
                for k, secs in steps.take().items():
                    destroy_steps.setdefault(k, []).append(secs)
                if last and args.trace:
                    _print_trace(f"destroy, {len(nodes)} nodes", trace, t)
                trace.clear()
            print(f"run {i + 1}: create {creates[-1]:.2f} s, destroy {destroys[-1]:.2f} s "
                  f"(began {started:.2f} into a second)", file=sys.stderr)
    print(f"Host: {platform.node()}, {os.cpu_count()} CPUs, load (1 min) "
          f"{load0:.1f} before, {os.getloadavg()[0]:.1f} after; "
          f"{len(nodes)} RSA nodes ({args.tier}), {args.runs} runs, "
          f"{'no standbys' if args.no_standby else 'standby chunkservers'}, "
          f"{args.idle:g} s idle after each destroy")
    print()
    print("| step | median (min, max) |")
    print("|---|---|")
    print(f"| SSH connect + auth (paramiko) | {_fmt(connect)} |")
    print(f"| one command on a reused connection | {_fmt(latency)} |")
    print(f"| **RAMDISK create, {len(nodes)} nodes** | **{_fmt(creates)}** |")
    if creates:
        print(f"| &nbsp; create: mean of the runs | {statistics.fmean(creates):.2f} s |")
    for k in [*CREATE_STEPS, *(k for k in create_steps if k not in CREATE_STEPS)]:
        if k in create_steps:
            print(f"| &nbsp; create: {k} | {_fmt(create_steps[k])} |")
    if creates:
        print(f"| &nbsp; create: CPU of this process (rsad's side) | {_fmt(own_cpu)} |")
        print(f"| &nbsp; create: CPU of the whole host ({os.cpu_count()} CPUs) | "
              f"{_fmt(host_cpu)} |")
    if steps.standbys:
        print(f"| &nbsp; chunkservers from standbys | {sum(steps.standbys)} of "
              f"{len(nodes) * len(steps.standbys)} |")
    print(f"| **RAMDISK destroy, {len(nodes)} nodes** | **{_fmt(destroys)}** |")
    for k, xs in destroy_steps.items():
        print(f"| &nbsp; destroy: {k} | {_fmt(xs)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
