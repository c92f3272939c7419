"""How long a MooseFS client waits for a dead server before it fails the I/O, per
``mfsioretries`` value (real MooseFS on the lab's RSA nodes).

For each value: a 1-node RAMDISK built by ``MooseFsBackend`` with that client option,
then (a) its master SIGKILLed and a new file written on the RSA node's mount, (b) on a
second RAMDISK its only chunkserver SIGKILLed and a file written before the kill read
back. Each side reports the seconds until the command failed (or ``> LIMIT`` when it still
waited). The RAMDISK tender is not involved: nothing repairs the server, so this is the
client's own budget, the time rsad has to restart a dead server before a job's I/O fails.

Needs the lab (``make lab-up``) and root. Prints a markdown table for docs/filesystems.md.
Not a test: nothing asserts.

    .venv/bin/python bench/bench_mfs_outage.py [--retries 12 20] [--limit 240]
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rsa_scheduler.fs.base import FsRequest
from rsa_scheduler.fs.moosefs import CLIENT_OPTIONS, MooseFsBackend
from rsa_scheduler.remote import HostPool
from tests.integration.conftest import LAB_ENV, read_lab_env
from tests.integration.fskit import lab_hosts, lab_moosefs


def one(backend: MooseFsBackend, hosts: HostPool, pool: str, node: str, fs_id: str,
        kill: str, limit: float) -> str:
    """Build, kill ``kill`` (master|chunkserver), time the failing I/O, destroy."""
    req = FsRequest(fs_id, "0", (node,), "ram", {node: pool}, "/run/rsa/mnt")
    try:
        spec = backend.create(req)
        mnt = spec.rsa_mountpoint
        host = hosts[node]
        host.run(["sh", "-c", 'head -c 1M /dev/urandom > "$0/old" && sync', mnt], timeout=60)
        d = backend.layout(req).dir(node)
        daemon = "mfsmaster" if kill == "master" else "mfschunkserver"
        host.run([daemon, "-c", f"{d}/{daemon}.cfg", "kill"], timeout=30)
        io = (f'echo new > "{mnt}/new"' if kill == "master"
              else f'echo 3 > /proc/sys/vm/drop_caches; cat "{mnt}/old" > /dev/null')
        start = time.monotonic()
        r = host.run(["timeout", "-s", "KILL", str(int(limit)), "sh", "-c", io],
                     timeout=limit + 30, check=False)
        took = time.monotonic() - start
        if r.returncode in (124, 137):
            return f"> {limit:.0f} s"
        if r.returncode == 0:
            return f"succeeded after {took:.0f} s"
        return f"{took:.0f} s ({(r.stderr.strip().splitlines() or ['?'])[-1][-60:]})"
    finally:
        backend.destroy(req)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--retries", type=int, nargs="+", default=[12, 20])
    ap.add_argument("--limit", type=float, default=240.0)
    args = ap.parse_args()
    if not LAB_ENV.exists():
        print(f"lab is not up ({LAB_ENV} missing): run `make lab-up` as root", file=sys.stderr)
        return 2
    lab = read_lab_env()
    pool = lab["RSA_LAB_POOL_RAM"]
    rest = tuple(o for o in CLIENT_OPTIONS if not o.startswith("mfsioretries="))
    print("| `mfsioretries` | write, master dead | read, chunkserver dead |")
    print("|---|---|---|")
    with lab_hosts(lab) as hosts, cf.ThreadPoolExecutor(max_workers=4) as ex:
        nodes = list(hosts)
        jobs = {}
        for i, n in enumerate(args.retries):
            backend = lab_moosefs(lab, hosts, client_options=(f"mfsioretries={n}", *rest))
            for j, kill in enumerate(("master", "chunkserver")):
                node = nodes[(2 * i + j) % len(nodes)]
                jobs[(n, kill)] = ex.submit(one, backend, hosts, pool, node,
                                            f"bench-outage-{n}-{kill}", kill, args.limit)
        for n in args.retries:
            print(f"| {n} | {jobs[(n, 'master')].result()} | "
                  f"{jobs[(n, 'chunkserver')].result()} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
