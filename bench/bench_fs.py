"""Benchmark of RAMDISK create and destroy on the lab's RSA nodes (real MooseFS over SSH).

For each run: ``MooseFsBackend.create`` on N RSA nodes (master on the first, one
chunkserver per node, mfsmount on every node, goal 1, trash time 0) and ``destroy``
(unmount everywhere, SIGKILL the servers, free the pools), timed separately, through one
:class:`HostPool` whose SSH connections are opened (and timed) before the first run, as
in rsad. Also reports SSH connect and per-command latency on the same connections.
Target (issue 4): create < 5 s on 4 nodes.

Needs the lab (``make lab-up``) and root. Prints a markdown table for docs/benchmarks.md.
Not a test: nothing asserts.

    .venv/bin/python bench/bench_fs.py [--nodes 4] [--runs 5] [--tier ram]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rsa_scheduler.fs.base import FsRequest
from tests.integration.conftest import LAB_ENV, read_lab_env
from tests.integration.fskit import lab_hosts, lab_moosefs


def _fmt(xs: list[float]) -> str:
    return (f"{statistics.median(xs):.2f} s (min {min(xs):.2f}, max {max(xs):.2f})"
            if xs else "-")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--tier", choices=("ram", "ssd"), default="ram")
    args = ap.parse_args()
    if not LAB_ENV.exists():
        print(f"lab is not up ({LAB_ENV} missing): run `make lab-up` as root", file=sys.stderr)
        return 2
    lab = read_lab_env()
    pool_dir = lab["RSA_LAB_POOL_RAM"] if args.tier == "ram" else lab["RSA_LAB_POOL_SSD"]
    with lab_hosts(lab) as hosts:
        nodes = tuple(list(hosts)[:args.nodes])
        if args.tier == "ssd":
            nodes = tuple(lab["RSA_LAB_RSA_SSD_NODES"].split(","))[:args.nodes]
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
        backend = lab_moosefs(lab, hosts)
        creates, destroys = [], []
        for i in range(args.runs):
            req = FsRequest(f"bench-{os.getpid()}-{i}", "0", nodes, args.tier,
                            {n: pool_dir for n in nodes}, "/run/rsa/mnt")
            try:
                t = time.monotonic()
                backend.create(req)
                creates.append(time.monotonic() - t)
            finally:
                t = time.monotonic()
                backend.destroy(req)
                destroys.append(time.monotonic() - t)
            print(f"run {i + 1}: create {creates[-1]:.2f} s, destroy {destroys[-1]:.2f} s",
                  file=sys.stderr)
    print(f"Host: {platform.node()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; "
          f"{len(nodes)} RSA nodes ({args.tier}), {args.runs} runs")
    print()
    print("| step | median (min, max) |")
    print("|---|---|")
    print(f"| SSH connect + auth (paramiko) | {_fmt(connect)} |")
    print(f"| one command on a reused connection | {_fmt(latency)} |")
    print(f"| RAMDISK create, {len(nodes)} nodes | {_fmt(creates)} |")
    print(f"| RAMDISK destroy, {len(nodes)} nodes | {_fmt(destroys)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
