"""Benchmark: what bounds many new-file writers on a MooseFS RAMDISK (issue 34).

Seed 004's Table 2 job (bench/bench_table2.py) is 64 processes writing one new file each.
This takes the scheduler out of it: for each case, ``MooseFsBackend.create`` builds a
RAMDISK on the lab's RSA nodes as rsad does, ``--clients`` extra mfsmounts of it are made
(spread over its nodes; the lab's compute and RSA nodes share the host's CPUs and network),
``--writers`` processes per client each write one ``--mib`` MiB file with ``head -c`` (as
the Table 2 job does), and the RAMDISK is destroyed. Per case: the wall time of all
writers (first start to last end), when the files finished (a writer whose new chunk the
master refuses retries 1 ms + (try - 1) x 300 ms later: the files finish in waves), and
the CPU seconds the MooseFS processes of the RAMDISK and the whole host used meanwhile.

A case is ``;``-separated ``key=value``: ``nodes`` (RSA nodes, default 4), ``cs``
(chunkservers per node, default 1: the others get their own port, chunk directory and,
with ``hdd``, limit), ``hdd`` (a size limit in each chunkserver's mfshdd.cfg, e.g.
``2GiB``: what a node of that pool size offers, on a lab brought up with bigger pools),
``opts`` (mount options added to the clients' own, ``,``-separated), ``kib`` (each
writer writes that many KiB at a time, with dd; default 0: ``head -c``, which writes 4-8
KiB at a time), ``tmpfs=1`` (the
writers write into a directory of each node's pool tmpfs instead: the limit), ``label``.

    .venv/bin/python bench/bench_mfs_writers.py --case 'nodes=4' --case 'nodes=1;hdd=2GiB'

Needs the lab (``make lab-up``) and root. Not a test: nothing asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rsa_scheduler.fs.base import FsRequest
from rsa_scheduler.fs.mfslayout import PASS_FILE, Layout
from rsa_scheduler.fs.mfsscripts import KILL_SCRIPT, UMOUNT_SCRIPT
from rsa_scheduler.fs.moosefs import MooseFsBackend, _dialect_of
from tests.integration.conftest import LAB_ENV, read_lab_env
from tests.integration.fskit import lab_data_addresses, lab_hosts

# One node's writers: for each mountpoint given, N processes each write one new file
# (named after the mountpoint: several mounts of one RAMDISK share its root) of MIB MiB,
# KIB KiB at a time (dd; 0: head -c, which writes 4-8 KiB at a time); prints "S <start>"
# once, then "E <mountpoint> <i> <end> <rc> [<error>]" per file (the error: what the
# writer said, after its last colon).
WRITERS = r"""n=$0; mib=$1; kib=$2; shift 2
echo "S $(date +%s.%N)"
for mp in "$@"; do
  for i in $(seq 1 "$n"); do
    f=$mp/${mp##*/}-$i
    ( if [ "$kib" -gt 0 ]; then
        err=$(dd if=/dev/zero of="$f" bs="${kib}K" count=$((mib * 1024 / kib)) \
              status=none 2>&1); rc=$?
      else err=$(head -c "${mib}M" /dev/zero 2>&1 > "$f"); rc=$?; fi
      echo "E $mp $i $(date +%s.%N) $rc ${err##*: }" ) &
  done
done
wait
"""


def parse_case(text: str) -> dict[str, str]:
    case = {"nodes": "4", "cs": "1", "hdd": "", "opts": "", "tmpfs": "0", "kib": "0",
            "label": ""}
    for part in filter(None, text.split(";")):
        key, _, value = part.partition("=")
        if key not in case:
            raise SystemExit(f"bench_mfs_writers: unknown key {key!r} in case {text!r}")
        case[key] = value
    case["label"] = case["label"] or text
    return case


class BenchLayout(Layout):
    """rsad's layout, with a size limit in each chunkserver's mfshdd.cfg (``HDD``) and
    ``EXTRA`` more chunkservers per node (``csK``: their own port, data path and chunk
    directory in the node's directory of the RAMDISK)."""

    __slots__ = ()
    HDD = ""
    EXTRA = 0

    def extra_port(self, node: str, k: int) -> int:
        return self.base + 3 + len(self.nodes) * k + self.nodes.index(node)

    def extra_cfg(self, node: str, k: int) -> str:
        d = self.dir(node)
        cfg = self.cs_cfg(node).replace(f"{d}/cs\n", f"{d}/cs{k}\n").replace(
            f"{d}/mfshdd.cfg", f"{d}/mfshdd{k}.cfg").replace(
            f"CSSERV_LISTEN_PORT = {self.cs_port(node)}\n",
            f"CSSERV_LISTEN_PORT = {self.extra_port(node, k)}\n")
        return cfg.replace(f"mfscs-{self.fs_id}", f"mfscs{k}-{self.fs_id}")

    def files(self, node: str) -> dict[str, str]:
        out = Layout.files(self, node)
        d, limit = self.dir(node), f" {self.HDD}" if self.HDD else ""
        out["mfshdd.cfg"] = f"{d}/chunks{limit}\n"
        for k in range(1, self.EXTRA + 1):
            out.update({f"cs{k}/": "", f"chunks{k}/": "",
                        f"mfschunkserver{k}.cfg": self.extra_cfg(node, k),
                        f"mfshdd{k}.cfg": f"{d}/chunks{k}{limit}\n"})
        return out


class BenchBackend(MooseFsBackend):
    layout_class: type[BenchLayout] = BenchLayout

    def layout(self, req: FsRequest, base: int = 0, secret: str = "", *,
               guarded: bool = True, admin: bool = False) -> Layout:
        lay = super().layout(req, base, secret, guarded=guarded, admin=admin)
        return self.layout_class(*(getattr(lay, f) for f in Layout.__dataclass_fields__))


def cpu_of(pattern: str, rss: bool = False) -> dict[str, float]:
    """CPU seconds (user + system) so far of the processes whose command line matches
    ``pattern``, by kind (mfsmaster, mfschunkserver, mfsmount); with ``rss``, their
    resident memory in MiB instead."""
    tick = os.sysconf("SC_CLK_TCK")
    found: dict[str, float] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        if not re.search(pattern, cmd):
            continue
        kind = next((k for k in ("mfsmaster", "mfschunkserver", "mfsmount") if k in cmd),
                    "other")
        if rss:
            try:
                kib = next(int(ln.split()[1]) for ln in
                           (proc / "status").read_text().splitlines()
                           if ln.startswith("VmRSS:"))
            except (OSError, StopIteration):
                continue
            found[kind] = found.get(kind, 0.0) + kib / 1024
            continue
        fields = stat.rsplit(")", 1)[1].split()
        found[kind] = found.get(kind, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return found


def host_busy() -> float:
    """CPU seconds the whole host spent busy so far (/proc/stat)."""
    first = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    ticks = [int(x) for x in first]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def write_all(hosts: Any, mounts: Mapping[str, list[str]], writers: int,
              mib: int, kib: int = 0) -> dict[str, Any]:
    """Run every node's writers at once; the files' end times and the failures."""
    from concurrent.futures import ThreadPoolExecutor

    def one(node: str) -> str:
        return str(hosts[node].run(["bash", "-c", WRITERS, str(writers), str(mib), str(kib),
                                    *mounts[node]], timeout=600).stdout)

    with ThreadPoolExecutor(max_workers=len(mounts)) as pool:
        outs = list(pool.map(one, list(mounts)))
    starts, ends, failed = [], [], 0
    errors: dict[str, int] = {}
    for out in outs:
        for line in out.splitlines():
            f = line.split()
            if f and f[0] == "S":
                starts.append(float(f[1]))
            elif f and f[0] == "E":
                ends.append(float(f[3]))
                if f[4] != "0":
                    failed += 1
                    said = " ".join(f[5:]) or f"exit {f[4]}"
                    errors[said] = errors.get(said, 0) + 1
    t0 = min(starts)
    done = sorted(e - t0 for e in ends)
    return {"hold": max(ends) - t0, "done": done, "failed": failed, "errors": errors,
            "spread": max(starts) - t0}


def waves(done: list[float]) -> str:
    """How many files finished in each 0.5 s from the start: ``0-0.5:12 ...``."""
    bins: dict[int, int] = {}
    for t in done:
        bins[int(t / 0.5)] = bins.get(int(t / 0.5), 0) + 1
    return " ".join(f"{b * 0.5:g}:{n}" for b, n in sorted(bins.items()))


def run_case(lab: Mapping[str, str], hosts: Any, case: Mapping[str, str], i: int,
             args: argparse.Namespace) -> dict[str, Any]:
    n = int(case["nodes"])
    nodes = tuple(list(hosts)[:n])
    pool = lab["RSA_LAB_POOL_RAM"]
    fs_id = f"b34w-{os.getpid()}-{i}"
    per_node: dict[str, list[str]] = {nd: [] for nd in nodes}
    if case["tmpfs"] == "1":
        for c in range(args.clients):
            per_node[nodes[c % n]].append(f"{pool}/{fs_id}-w{c}")
        try:
            for nd, dirs in per_node.items():
                hosts[nd].run(["mkdir", "-p", *dirs], timeout=30)
            busy = host_busy()
            got = write_all(hosts, per_node, args.writers, args.mib, int(case["kib"]))
            got["host_cpu"] = host_busy() - busy
            got["cpu"] = {}
            return got
        finally:
            for nd, dirs in per_node.items():
                if dirs:
                    hosts[nd].run(["rm", "-rf", "--one-file-system", *dirs], timeout=120,
                                  check=False)
    layout = type("CaseLayout", (BenchLayout,),
                  {"__slots__": (), "HDD": case["hdd"], "EXTRA": int(case["cs"]) - 1})
    backend = BenchBackend(hosts, addresses=lab_data_addresses(lab), create_timeout=60,
                           destroy_timeout=60, retries=1)
    backend.layout_class = layout
    opts = [*backend.client_options, *filter(None, case["opts"].split(","))]
    req = FsRequest(fs_id, "0", nodes, "ram", {nd: pool for nd in nodes}, "/run/rsa/mnt")
    lay: BenchLayout | None = None
    made: list[tuple[str, str]] = []
    try:
        t = time.monotonic()
        spec = backend.create(req)
        created = time.monotonic() - t
        lay = layout(*(getattr(backend.layout(req, int(spec.client["port_base"])), f)
                       for f in Layout.__dataclass_fields__))
        assert lay is not None
        for nd in nodes:
            for k in range(1, lay.EXTRA + 1):
                hosts[nd].run(["mfschunkserver", "-c", f"{lay.dir(nd)}/mfschunkserver{k}.cfg",
                               "start"], timeout=60)
        want = n * int(case["cs"])
        end = time.monotonic() + 60
        dialect = _dialect_of(spec)  # the release it was built with: mfscli's 3.x/4.x form
        while True:
            out = hosts[nodes[0]].run(dialect.chunkservers_argv(lay.master_address,
                                                                lay.client_port),
                                      timeout=15, check=False).stdout
            space = {cs: total for cs, total in dialect.chunkservers(out).items() if total}
            if len(space) >= want or time.monotonic() > end:
                break
            time.sleep(0.2)
        for c in range(args.clients):
            nd = nodes[c % n]
            mp = f"{lay.mountpoint}-w{c}"
            made.append((nd, mp))
            hosts[nd].run(["sh", "-c", 'mkdir -p "$1" && shift && exec "$@"', "sh", mp,
                           "mfsmount", mp, "-H", lay.master_address, "-P",
                           str(lay.client_port), "-c", f"{lay.dir(nd)}/{PASS_FILE}",
                           "-o", ",".join(opts)], timeout=60)
            per_node[nd].append(mp)
        pattern = re.escape(fs_id)
        cpu0, busy = cpu_of(pattern), host_busy()
        got = write_all(hosts, per_node, args.writers, args.mib, int(case["kib"]))
        cpu1 = cpu_of(pattern)
        got["rss_mib"] = {k: round(v) for k, v in cpu_of(pattern, rss=True).items()}
        got["host_cpu"] = host_busy() - busy
        got["cpu"] = {k: round(cpu1.get(k, 0) - cpu0.get(k, 0), 2) for k in cpu1}
        got["create"] = created
        got["chunkservers"] = len(space)
        got["total_gib"] = round(sum(space.values()) / 2**30, 1)
        return got
    finally:
        for nd, mp in made:
            title = re.escape(f"mfsmount (mounted on: {mp})")
            hosts[nd].run(["sh", "-c", UMOUNT_SCRIPT, mp, title], timeout=90, check=False)
        if lay is not None and lay.EXTRA:
            for nd in nodes:
                pairs = [x for k in range(1, lay.EXTRA + 1)
                         for x in (f"{lay.dir(nd)}/cs{k}/.mfschunkserver.lock",
                                   f"{lay.dir(nd)}/mfschunkserver{k}.cfg")]
                hosts[nd].run(["sh", "-c", KILL_SCRIPT, "kill", *pairs], timeout=60,
                              check=False)
        backend.destroy(req)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", action="append", default=[],
                    help="a case (see the module's doc); repeat; default: nodes=4")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--writers", type=int, default=16, help="per client")
    ap.add_argument("--mib", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json", help="write the rows here too")
    args = ap.parse_args()
    if not LAB_ENV.exists():
        print(f"lab is not up ({LAB_ENV} missing)", file=sys.stderr)
        return 2
    lab = read_lab_env()
    cases = [parse_case(c) for c in args.case or ["nodes=4"]]
    rows = []
    print(f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; {args.clients} clients x "
          f"{args.writers} writers x {args.mib} MiB; lab pools {lab.get('RSA_LAB_RAM_SIZE')}")
    print("| case | hold s | files done p50 / p90 s | failed | MooseFS CPU s (master, cs, "
          "mount) | host CPU s | chunkservers' RSS MiB | files done per 0.5 s |")
    print("|---|---|---|---|---|---|---|---|")
    with lab_hosts(lab) as hosts:
        for i, case in enumerate(c for c in cases for _ in range(args.repeat)):
            try:
                r = run_case(lab, hosts, case, i, args)
            except Exception as e:
                print(f"| {case['label']} | error: {e} |", flush=True)
                continue
            d, cpu = r["done"], r["cpu"]
            rows.append({"case": case["label"], **r})
            print(f"| {case['label']} | {r['hold']:.2f} | {statistics.median(d):.2f} / "
                  f"{d[int(len(d) * 0.9) - 1]:.2f} | {r['failed']} {r['errors'] or ''} | "
                  f"{cpu.get('mfsmaster', 0):.2f}, {cpu.get('mfschunkserver', 0):.2f}, "
                  f"{cpu.get('mfsmount', 0):.2f} | {r['host_cpu']:.2f} | "
                  f"{r.get('rss_mib', {}).get('mfschunkserver', 0)} | {waves(d)} |",
                  flush=True)
    print(f"load (1 min) after: {os.getloadavg()[0]:.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
