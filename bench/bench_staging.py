"""Staging benchmark: the engine against single-stream rsync -a and tar c | tar x.

Stages a 10k x 4 KiB tree and big files (2 GiB; `--big-gib 2,10` adds 10 GiB) into and
out of a real 4-node MooseFS RAMDISK (rsa[1-4] of the lab, as the lab user), from and to
a local-disk directory (measures the engine) and the throttled PFS (~100 MB/s: what a
site sees), every tool on the same paths in the same run. Each big-file trial gets a
fresh RAMDISK (MooseFS frees deleted chunks lazily). The RSA nodes' RAM pools are warmed
first (first touch of fresh RAM in this VM is slow). Needs the lab (`make lab-up`) and
root.

Every tool reads data that is not in the reading client's page cache, as a real stage-in
(a job's input on the PFS) and stage-out (output the compute nodes wrote) do: a MooseFS
client keeps what it read in its page cache, and a second reader of the same tree on
the same node reads 3-5x faster. So the PFS sources are dropped from the page cache
(posix_fadvise DONTNEED, file by file) before each tool reads them, and each tool stages
out the RAMDISK copy its own stage-in wrote after every RSA node dropped it from its
client's page cache: the node that wrote a file reads it back faster than a cold node
(10k x 4 KiB by one tar: 5.0 s on the writer, 5.7-6.7 s elsewhere, 5.0-6.5 s on either
after the drop), so without the drop single-stream rsync, which wrote and reads on rsa1,
read warmer than the engine, whose buckets land on any node (the local-disk source is
in the page cache for every tool alike). Every trial starts after a sync, so
none pays for the writeback of an earlier one.

Big files are also copied by one `dd` as the user on rsa1 (the path's raw speed, the
engine's block size for the direction: issue 16 wants the engine >= 0.95x of it), by the
engine as shipped (`engine`: striping off, one stream per file) and by the engine
striped (`engine-striped`: staging.stripe_bytes 256M, ranges over every stream and node,
checksummed; off by default until this shows it wins). After each engine stage-out of a
big file `verify` (content) is timed twice: as shipped (`what` "verify": files of 256M
or more read back in parallel ranges after every node dropped them from its page cache)
and whole-file (`what` "verify-whole": one b2sum per side, what the nodes have cached
may be read from memory). A 10 GiB file needs a RAMDISK that holds it:
RSA_LAB_RAM_SIZE=4G or more for the lab (4 nodes).

    .venv/bin/python bench/bench_staging.py [--no-pfs-big] [--big-gib 2,10]
        [--big-tools dd,engine,engine-striped] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rsa_scheduler.fs.base import FsRequest, MountSpec
from rsa_scheduler.fs.moosefs import MooseFsBackend
from rsa_scheduler.remote import SshHost
from rsa_scheduler.runner import CommandError, Identity
from rsa_scheduler.staging import StagingEngine, Stats, scripts
from rsa_scheduler.staging.stripe import STRIPE_BYTES, VERIFY_RANGE_BYTES
from tests.integration.fskit import lab_data_addresses

LAB_ENV = Path("/run/rsa-lab/env")
# every RSA node's data address: the lab's (tests.integration.fskit), or this one for all
DATA_ADDRESS = os.environ.get("RSA_STAGING_DATA_ADDRESS", "")
TREE_FILES, TREE_FILE_SIZE = 10_000, 4096
TOOLS = ("rsync", "tar", "engine", "engine-rsync")  # engine-rsync: staging.copy_tool rsync
# dd: one dd as the user (the path's speed); engine-striped: stripe_bytes 256M
BIG_TOOLS = (*TOOLS, "dd", "engine-striped")


def lab_env() -> dict[str, str]:
    out = {}
    for line in LAB_ENV.read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            k, _, v = line.partition("=")
            out[k] = v.strip("'")
    return out


class Bench:
    def __init__(self, lab: Mapping[str, str], parallel: int,
                 per_process: bool = False) -> None:
        self.per_process = per_process
        self.lab = lab
        self.user = Identity.of(lab["RSA_LAB_USER"])
        self.hosts = [SshHost(f"rsa{i + 1}", a, key=lab["RSA_LAB_SSH_KEY"],
                              known_hosts=lab["RSA_LAB_SSH_KNOWN_HOSTS"])
                      for i, a in enumerate(lab["RSA_LAB_RSA_ADDRESSES"].split(","))]
        addresses = ({h.name: DATA_ADDRESS for h in self.hosts} if DATA_ADDRESS
                     else lab_data_addresses(lab))
        self.backend = MooseFsBackend({h.name: h for h in self.hosts}, addresses=addresses)
        self.parallel = parallel
        self.results: list[dict[str, object]] = []
        self._n = 0

    def engine(self, copy_tool: str = "engine", stripe: bool = False,
               verify_ranges: bool = True) -> StagingEngine:
        return StagingEngine(self.hosts, self.user, parallel_per_node=self.parallel,
                             job_id="bench", copy_tool=copy_tool,
                             stripe_bytes=STRIPE_BYTES if stripe else 0,
                             verify_range_bytes=VERIFY_RANGE_BYTES if verify_ranges else 0)

    @contextmanager
    def ramdisk(self) -> Iterator[MountSpec]:
        self._n += 1
        req = FsRequest(fs_id=f"stbench{os.getpid()}-c{self._n}", job_id="stbench",
                        nodes=tuple(h.name for h in self.hosts), tier="ram",
                        pool_dirs={h.name: self.lab["RSA_LAB_POOL_RAM"] for h in self.hosts},
                        mount_root="/run/rsa-staging-bench",
                        owner=(self.user.uid, self.user.gid))  # as rsad hands it over
        try:
            yield self.backend.create(req)
        finally:
            self.backend.destroy(req)

    def warm(self) -> None:
        """Touch most of each node's RAM pool once (then free it)."""
        pool = self.lab["RSA_LAB_POOL_RAM"]
        for h in self.hosts:
            free = int(h.run(["df", "--output=avail", "-B1M", pool], timeout=30)
                       .stdout.split()[-1])
            count = max(0, free - 512) // 16  # leave room for other users of the pool
            h.run(["dd", "if=/dev/zero", f"of={pool}/rsa-warm", "bs=16M", f"count={count}",
                   "status=none"], timeout=300)
            h.run(["rm", "-f", f"{pool}/rsa-warm"], timeout=30)

    def drop_ramdisk(self, path: str) -> None:
        """Every RSA node drops the files below ``path`` (on the RAMDISK) from its
        client's page cache, as root on its own mount: the next read is cold on every
        node, as output the compute nodes wrote is."""
        errors: list[BaseException] = []

        def drop(h: SshHost) -> None:
            try:
                h.run(["python3", "-c", DROP_PROGRAM, path], timeout=600)
            except BaseException as e:  # re-raised below, on the caller's thread
                errors.append(e)

        threads = [threading.Thread(target=drop, args=(h,)) for h in self.hosts]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]

    def as_user(self, argv: list[str]) -> None:
        self.hosts[0].run(argv, timeout=3600, as_user=self.user, env=self.user.env())

    def tool(self, name: str, src: str, dst: str, out: bool = False
             ) -> Callable[[], Stats | None]:
        if name == "rsync":
            return lambda: self.as_user(["rsync", "-a", f"{src}/", f"{dst}/"])
        if name == "tar":
            return lambda: self.as_user(["bash", "-c", 'set -o pipefail; mkdir -p "$2" && '
                                         'tar -C "$1" -cf - . | tar -C "$2" -xpf -',
                                         "bash", src, dst])
        if name == "dd":  # the big file's directory: copy its one file "big"
            block = scripts.big_block("stage-out" if out else "stage-in")
            return lambda: self.as_user(["bash", "-c", 'mkdir -p "$2" && dd if="$1/big" '
                                         'of="$2/big" bs="$3" conv=sparse status=none',
                                         "bash", src, dst, block])
        eng = self.engine("rsync" if name == "engine-rsync" else "engine",
                          stripe=name == "engine-striped")
        if out:
            return lambda: eng.stage_out(src, dst)
        return lambda: eng.stage_in(src, dst)

    def measure(self, what: str, direction: str, where: str, tool: str, files: int,
                nbytes: int, fn: Callable[[], Stats | None]) -> None:
        # Write back what earlier steps left dirty (the 2 GiB copied to the PFS, the last
        # trial's output), so no trial pays for another's writeback.
        os.sync()
        busy0, all0 = cpu_ticks()
        procs0 = proc_ticks() if self.per_process else {}
        t0 = time.monotonic()
        stats = fn()
        secs = time.monotonic() - t0
        procs1 = proc_ticks() if self.per_process else {}
        busy1, all1 = cpu_ticks()
        # The whole machine's CPU while the tool ran (the lab's RSA nodes, MooseFS servers
        # and clients all share this host's cores): "cores" = how many it kept busy.
        cores = (busy1 - busy0) / max(1e-9, all1 - all0) * CORES
        row: dict[str, object] = {
            "what": what, "direction": direction, "where": where, "tool": tool,
            "seconds": round(secs, 3), "files_s": round(files / secs, 1),
            "mb_s": round(nbytes / secs / 1e6, 1), "cores": round(cores, 2),
            "cpu_s": round(cores * secs, 1)}
        if self.per_process:
            row["cpu_by_process"] = by_process(procs0, procs1)
        if stats is not None:
            row["buckets"] = stats.buckets
        self.results.append(row)
        print(json.dumps(row), flush=True)


CORES = os.cpu_count() or 1


def proc_ticks() -> dict[int, tuple[str, float]]:
    """Every process's name and CPU-seconds (its own and its reaped children's), by pid."""
    out = {}
    for p in psutil.process_iter(["name", "cpu_times"]):
        t = p.info["cpu_times"]
        if t is not None:  # gone, or not ours to read
            out[p.pid] = (p.info["name"] or "", t.user + t.system + t.children_user
                          + t.children_system)
    return out


def by_process(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]
               ) -> dict[str, float]:
    """CPU-seconds per kind of process between two ``proc_ticks``: the MooseFS client,
    master and chunkservers, sshd (with the copies it ran and reaped: tar, rsync, dd),
    kernel workers, the rest. A process that both started and ended in between and was
    reaped by one still running counts with its parent."""
    kinds = {"mfsmount": "moosefs client", "mfsmaster": "moosefs master",
             "mfschunkserver": "moosefs chunkservers", "sshd": "sshd and the copies",
             "kworker": "kernel workers"}
    out: dict[str, float] = {}
    for pid, (name, secs) in after.items():
        was = before.get(pid)
        used = secs - (was[1] if was is not None else 0.0)  # (a kworker renames itself)
        kind = next((v for k, v in kinds.items() if name.startswith(k)), "other")
        out[kind] = out.get(kind, 0.0) + used
    return {k: round(v, 1) for k, v in sorted(out.items(), key=lambda kv: -kv[1])}


def cpu_ticks() -> tuple[float, float]:
    """(busy, total) CPU-seconds of every CPU of this host since boot."""
    t = psutil.cpu_times()
    total = sum(t)
    return total - t.idle - t.iowait, total


def make_tree(root: Path, user: Identity) -> None:
    for i in range(TREE_FILES):
        d = root / f"d{i // 500:02d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i:05d}").write_bytes(os.urandom(TREE_FILE_SIZE))
    subprocess.run(["chown", "-R", f"{user.uid}:{user.gid}", str(root)], check=True)


# drop_cache's loop, run on an RSA node for a RAMDISK path (drop_ramdisk)
DROP_PROGRAM = (
    "import os, sys\n"
    "os.sync()\n"  # dirty pages are not dropped
    "for dp, _, ns in os.walk(sys.argv[1]):\n"
    "    for n in ns:\n"
    "        fd = os.open(os.path.join(dp, n), os.O_RDONLY | os.O_NOFOLLOW)\n"
    "        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)\n"
    "        os.close(fd)\n")


def drop_cache(root: Path) -> None:
    """Drop every regular file below ``root`` from the page cache (the PFS client is
    shared by this host and the RSA nodes, so this also makes their next read cold; on
    local disk, after a sync, the next read comes from the disk)."""
    os.sync()  # dirty pages are not dropped
    for dirpath, _, names in os.walk(root):
        for n in names:
            fd = os.open(os.path.join(dirpath, n), os.O_RDONLY | os.O_NOFOLLOW)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def make_big(path: Path, user: Identity, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["dd", "if=/dev/urandom", f"of={path}", "bs=16M",
                    f"count={size >> 24}", "status=none"], check=True)
    subprocess.run(["chown", "-R", f"{user.uid}:{user.gid}", str(path.parent)], check=True)


def ratios(rows: list[dict[str, object]]) -> list[str]:
    out = []
    keys = sorted({(str(r["what"]), str(r["direction"]), str(r["where"])) for r in rows})
    for what, direction, where in keys:
        by = {r["tool"]: float(r["seconds"]) for r in rows  # type: ignore[arg-type]
              if (r["what"], r["direction"], r["where"]) == (what, direction, where)}
        if "dd" in by:
            out.append(f"{what} {direction} {where}: " + ", ".join(
                f"{t} {by['dd'] / by[t]:.2f}x dd" for t in by if t != "dd"))
        if what in ("verify", "verify-whole"):
            out.append(f"verify after {direction} {where}: " + ", ".join(
                f"{t} {s:.1f}s" for t, s in by.items()))
        if not set(TOOLS) <= set(by):
            continue
        best = min(by["rsync"], by["tar"])
        cores = {r["tool"]: float(r["cores"]) for r in rows  # type: ignore[arg-type]
                 if (r["what"], r["direction"], r["where"]) == (what, direction, where)}
        # What the engine would gain over rsync here with every core of this host busy at
        # the engine's own CPU cost per file (its CPU-seconds of this trial): the host's
        # bound, not the engine's
        cap = by["rsync"] * CORES / max(1e-9, cores["engine"] * by["engine"])
        out.append(f"{what} {direction} {where}: engine {by['rsync'] / by['engine']:.2f}x "
                   f"rsync, {best / by['engine']:.2f}x best single stream; cores busy: "
                   f"rsync {cores['rsync']:.2f}, engine {cores['engine']:.2f} of {CORES} "
                   f"(all {CORES} cores at the engine's CPU per file: {cap:.1f}x rsync)")
    return out


def big_trial(b: Bench, what: str, where: str, base: Path, tool: str, size: int) -> None:
    """One tool's stage-in and stage-out of the big file, on a fresh RAMDISK; after an
    engine's stage-out its verify is timed too."""
    with b.ramdisk() as fs:
        ram = fs.rsa_mountpoint
        b.hosts[0].run(["install", "-d", "-o", str(b.user.uid), "-g", str(b.user.gid),
                        f"{ram}/j"], timeout=60)
        # Cold for every tool, local disk too: a 10 GiB source does not stay cached
        # beside a RAMDISK that holds it, so without this the first tool would read what
        # make_big left in the cache and the next ones part of it from the disk.
        drop_cache(base / "bigsrc")
        b.measure(what, "in", where, tool, 1, size,
                  b.tool(tool, str(base / "bigsrc"), f"{ram}/j/big"))
        out = base / f"big-out-{tool}"
        b.drop_ramdisk(f"{ram}/j/big")
        b.measure(what, "out", where, tool, 1, size,
                  b.tool(tool, f"{ram}/j/big", str(out), out=True))
        if tool in ("engine", "engine-striped"):
            for label, ranges in (("verify", True), ("verify-whole", False)):
                eng = b.engine(verify_ranges=ranges)

                def verify(eng: StagingEngine = eng) -> None:
                    v = eng.verify(f"{ram}/j/big", str(out))
                    if not v.ok:
                        raise SystemExit(f"verify failed: {v.summary(str(out))}")

                b.measure(label, what, where, tool, 1, size, verify)
        shutil.rmtree(out, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--no-pfs-big", action="store_true", help="skip the 2 GiB file on the PFS")
    ap.add_argument("--parallel", type=int, default=2, help="streams per RSA node")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--per-process", action="store_true",
                    help="add each trial's CPU-seconds by kind of process (cpu_by_process)")
    ap.add_argument("--big-gib", default="2", help="big file sizes in GiB, e.g. 2,10")
    ap.add_argument("--big-tools", default=",".join(BIG_TOOLS),
                    help=f"tools of the big-file trials (of {','.join(BIG_TOOLS)})")
    args = ap.parse_args()
    lab = lab_env()
    b = Bench(lab, args.parallel, args.per_process)
    local = Path(f"/var/tmp/rsa-staging-bench-{os.getpid()}")
    pfs = Path(lab["RSA_LAB_PFS"]) / f"rsa-staging-bench-{os.getpid()}"
    try:
        for d in (local, pfs):
            d.mkdir()
            os.chown(d, b.user.uid, b.user.gid)
        print("warming the RAM pools ...", flush=True)
        b.warm()
        make_tree(local / "tree", b.user)
        make_tree(pfs / "tree", b.user)
        tree_bytes = TREE_FILES * TREE_FILE_SIZE
        with b.ramdisk() as fs:
            ram = fs.rsa_mountpoint
            b.hosts[0].run(["install", "-d", "-o", str(b.user.uid), "-g", str(b.user.gid),
                            f"{ram}/j"], timeout=60)
            for where, base in (("local", local), ("pfs", pfs)):
                for tool in TOOLS:
                    if where == "pfs":
                        drop_cache(base / "tree")
                    b.measure("tree", "in", where, tool, TREE_FILES, tree_bytes,
                              b.tool(tool, str(base / "tree"), f"{ram}/j/{where}-{tool}"))
                for tool in TOOLS:
                    b.drop_ramdisk(f"{ram}/j/{where}-{tool}")
                    b.measure("tree", "out", where, tool, TREE_FILES, tree_bytes,
                              b.tool(tool, f"{ram}/j/{where}-{tool}",
                                     str(base / f"tree-out-{tool}"), out=True))
        wheres = [("local", local)] + ([] if args.no_pfs_big else [("pfs", pfs)])
        tools = [t for t in args.big_tools.split(",") if t]
        for gib in (float(g) for g in args.big_gib.split(",")):
            size = int(gib * (1 << 30)) >> 24 << 24
            what = f"big-{gib:g}GiB"
            for d in (local, pfs):
                shutil.rmtree(d / "bigsrc", ignore_errors=True)
            make_big(local / "bigsrc" / "big", b.user, size)
            if not args.no_pfs_big:
                shutil.copytree(local / "bigsrc", pfs / "bigsrc")
                subprocess.run(["chown", "-R", f"{b.user.uid}:{b.user.gid}", str(pfs)],
                               check=True)
            for where, base in wheres:
                for tool in tools:
                    big_trial(b, what, where, base, tool, size)
    finally:
        for d in (local, pfs):
            shutil.rmtree(d, ignore_errors=True)
        for h in b.hosts:
            h.close()
    print("\n".join(ratios(b.results)))
    if args.json:
        Path(args.json).write_text(json.dumps(b.results, indent=1))


if __name__ == "__main__":
    try:
        main()
    except CommandError as e:
        # The exception's message keeps only stderr's last line; a bench failure is
        # debugged from the whole tail.
        raise SystemExit(f"{e}\n--- stderr (last {len(e.stderr_tail)} chars) ---\n"
                         f"{e.stderr_tail}") from e
