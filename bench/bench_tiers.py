"""Staging into and out of each tier of the lab (seed 000): DRAM RAMDISKs against SSD ones.

The lab's rsa1-2 have their RAM pool (tmpfs) and rsa3-4 an "ssd" pool each (an ext4 image
on its own loop device, capped at RSA_LAB_SSD_RATE each way, docs/lab.md): a 2-node
MooseFS RAMDISK is built on each pair, and the real engine (as the lab user, over SSH,
two streams per node) stages a big file and a tree of small files in from local disk and
out again; one ``dd`` as the user on the first node gives the big file's path speed. Before
a stage-out the RAMDISK's chunks are dropped from the page cache (``dd iflag=nocache
count=0`` on every chunk file, as root on each node), so the SSD's reads are the device's,
as they are for output a job wrote an hour ago. Each trial starts after a sync.

What it gives an operator: the per-node bandwidth of each tier as a job's staging sees
it, the figure ``allocation.tiers.<tier>.bandwidth`` asks for (docs/allocation.md).
Needs the lab (``make lab-up``, any RSA_LAB_TIERS: the ssd pools exist in every lab) and
root. Prints one JSON line per trial and a markdown table for docs/benchmarks.md.

    .venv/bin/python bench/bench_tiers.py [--gib 1] [--files 2000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_staging import Bench, lab_env, make_big

from rsa_scheduler.fs.base import FsRequest, MountSpec
from rsa_scheduler.staging import StagingEngine, scripts

TREE_FILE_SIZE = 4096


class TierBench(Bench):
    def __init__(self, lab: dict[str, str], parallel: int) -> None:
        super().__init__(lab, parallel)
        ssd = set(lab["RSA_LAB_RSA_SSD_NODES"].split(","))
        self.by_tier = {"ram": [h for h in self.hosts if h.name not in ssd][:2],
                        "ssd": [h for h in self.hosts if h.name in ssd][:2]}
        self.pools = {"ram": lab["RSA_LAB_POOL_RAM"], "ssd": lab["RSA_LAB_POOL_SSD"]}

    @contextmanager
    def tier_ramdisk(self, tier: str) -> Iterator[MountSpec]:
        self._n += 1
        nodes = self.by_tier[tier]
        req = FsRequest(fs_id=f"tierbench{os.getpid()}-{self._n}", job_id="tierbench",
                        nodes=tuple(h.name for h in nodes), tier=tier,
                        pool_dirs={h.name: self.pools[tier] for h in nodes},
                        mount_root="/run/rsa-staging-bench",
                        owner=(self.user.uid, self.user.gid))
        try:
            yield self.backend.create(req)
        finally:
            self.backend.destroy(req)

    def tier_engine(self, tier: str) -> StagingEngine:
        """The engine as rsad runs it for a RAMDISK of ``tier``: on its own nodes."""
        return StagingEngine(self.by_tier[tier], self.user, parallel_per_node=self.parallel,
                             job_id="tierbench")

    def drop_chunks(self, tier: str) -> None:
        """Drop every chunk file of ``tier``'s pools from the page cache (root, per node)."""
        for h in self.by_tier[tier]:
            h.run(["bash", "-c", 'find "$1" -xdev -type f -name "chunk_*" -exec '
                   'dd if={} iflag=nocache count=0 status=none \\;', "bash",
                   self.pools[tier]], timeout=600)

    def dd(self, tier: str, src: str, dst: str, out: bool) -> None:
        """One ``dd`` of the big file as the user on the first node of ``tier``."""
        block = scripts.big_block("stage-out" if out else "stage-in")
        self.by_tier[tier][0].run(["bash", "-c", 'mkdir -p "$2" && dd if="$1/big" '
                                   'of="$2/big" bs="$3" status=none', "bash", src, dst,
                                   block], timeout=3600, as_user=self.user,
                                  env=self.user.env())


def make_small_tree(root: Path, files: int, uid: int, gid: int) -> None:
    for i in range(files):
        d = root / f"d{i // 500:02d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i:05d}").write_bytes(os.urandom(TREE_FILE_SIZE))
    for dirpath, dirs, names in os.walk(root):
        for n in [*dirs, *names]:
            os.chown(os.path.join(dirpath, n), uid, gid)
    os.chown(root, uid, gid)


def trial(b: TierBench, tier: str, what: str, local: Path, files: int, nbytes: int,
          tools: tuple[str, ...]) -> None:
    """Stage ``local/what-src`` into a fresh RAMDISK of ``tier`` and out again, per tool."""
    nodes = len(b.by_tier[tier])
    for tool in tools:
        with b.tier_ramdisk(tier) as fs:
            ram = fs.rsa_mountpoint
            b.by_tier[tier][0].run(["install", "-d", "-o", str(b.user.uid), "-g",
                                    str(b.user.gid), f"{ram}/j"], timeout=60)
            src, into = str(local / f"{what}-src"), f"{ram}/j/{what}"
            out = local / f"{what}-out-{tier}-{tool}"
            for direction in ("in", "out"):
                if direction == "out":
                    b.drop_chunks(tier)
                os.sync()
                t0 = time.monotonic()
                if tool == "dd" and direction == "in":
                    b.dd(tier, src, into, False)
                elif tool == "dd":
                    b.dd(tier, into, str(out), True)
                elif direction == "in":
                    b.tier_engine(tier).stage_in(src, into)
                else:
                    b.tier_engine(tier).stage_out(into, str(out))
                secs = time.monotonic() - t0
                row = {"tier": tier, "nodes": nodes, "what": what, "direction": direction,
                       "tool": tool, "seconds": round(secs, 2),
                       "mb_s": round(nbytes / secs / 1e6, 1),
                       "mb_s_per_node": round(nbytes / secs / 1e6 / nodes, 1),
                       "files_s": round(files / secs, 1)}
                b.results.append(row)
                print(json.dumps(row), flush=True)
            shutil.rmtree(out, ignore_errors=True)


def table(rows: list[dict[str, object]]) -> str:
    lines = ["| tier | what | direction | tool | seconds | MB/s | MB/s per node |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['tier']} | {r['what']} | {r['direction']} | {r['tool']} | "
                     f"{r['seconds']} | {r['mb_s']} | {r['mb_s_per_node']} |")
    ram = {(r["what"], r["direction"], r["tool"]): float(r["seconds"])  # type: ignore[arg-type]
           for r in rows if r["tier"] == "ram"}
    for r in rows:
        key = (r["what"], r["direction"], r["tool"])
        if r["tier"] == "ssd" and key in ram:
            lines.append(f"- {r['what']} {r['direction']} ({r['tool']}): ssd takes "
                         f"{float(r['seconds']) / ram[key]:.1f}x the ram tier's time")  # type: ignore[arg-type]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gib", type=float, default=1.0, help="the big file's size in GiB")
    ap.add_argument("--files", type=int, default=2000, help="files of 4 KiB in the tree")
    ap.add_argument("--parallel", type=int, default=2, help="streams per RSA node")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()
    lab = lab_env()
    if lab.get("RSA_LAB_SSD_POOL") != "loop" or lab.get("RSA_LAB_SSD_THROTTLE") != "on":
        print(f"note: the ssd pools are {lab.get('RSA_LAB_SSD_POOL')!r}, throttle "
              f"{lab.get('RSA_LAB_SSD_THROTTLE')!r}: the ssd tier is not capped",
              file=sys.stderr)
    b = TierBench(lab, args.parallel)
    local = Path(f"/var/tmp/rsa-tier-bench-{os.getpid()}")
    size = int(args.gib * (1 << 30)) >> 24 << 24
    try:
        local.mkdir()
        os.chown(local, b.user.uid, b.user.gid)
        make_big(local / "big-src" / "big", b.user, size)
        make_small_tree(local / "tree-src", args.files, b.user.uid, b.user.gid)
        for tier in ("ram", "ssd"):
            trial(b, tier, "big", local, 1, size, ("dd", "engine"))
            trial(b, tier, "tree", local, args.files, args.files * TREE_FILE_SIZE,
                  ("engine",))
    finally:
        shutil.rmtree(local, ignore_errors=True)
        for h in b.hosts:
            h.close()
    print(table(b.results))
    if args.json:
        Path(args.json).write_text(json.dumps(b.results, indent=1))


if __name__ == "__main__":
    main()
