"""Benchmark: a burst of RSA jobs on the idle lab, early start ``wait`` against ``fallback``
(issue 32).

``--jobs`` jobs (default 24) are submitted at once by the lab user to the idle lab (4
compute nodes, 4 RSA nodes, queue mode), each with ``#RSA_DATA_IN`` (``--files`` files of
``--mib`` MiB in all, a directory of its own), reading its input once (md5sum)
and computing ``--compute`` seconds. Once with the default ``wait`` (held until its
RAMDISK is ready: they wait for the RSA nodes in turn), once with ``#RSA_EARLY_START=
fallback`` (they start at once; those with no RSA node free read the PFS). Per policy:
the makespan (first submission to the last job's end), the compute-node hold (sum of
Slurm's elapsed time times nodes of the burst's jobs, from sacct: what the burst cost
the compute nodes), the mean wait (submission to start), how many read their input from a
RAMDISK (``findmnt`` over DATA_IN), and whether every job read all of its input
(checksums). Needs the lab (queue mode, accounting on) and root:

    .venv/bin/python bench/bench_burst.py [--jobs 24] [--mib 32] [--compute 5] [--json out.json]

Inside ``make lab-test`` (the lab comes up and down around it)::

    RSA_BENCH=burst RSA_BENCH_OUT=/tmp/burst.json flock /tmp/rsa-lab.lock \\
        make lab-test LAB_TESTS='bench/bench_burst.py'
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.e2e.conftest import md5_of  # noqa: E402 (after the path)
from tests.e2e.test_burst import rsa_nodes  # noqa: E402
from tests.integration.conftest import LAB_ENV, as_user, read_lab_env  # noqa: E402
from tests.integration.slurmkit import Jobs, make_jobs, root, wait_for  # noqa: E402

POLICIES = ("wait", "fallback")


def job_script(base: Path, n: int, policy: str, compute: float) -> str:
    """Job ``n`` of the burst: its own input directory (``in/n``: a read from the PFS is
    not served from what the host's one PFS client cached for another job)."""
    res = f"{base}/res/$SLURM_JOB_ID"
    early = "#RSA_EARLY_START=fallback" if policy == "fallback" else ""
    return f"""#!/bin/bash
#SBATCH -t 10
#RSA_DATA_IN={base}/in/{n}
{early}
echo {n} > {res}.n
findmnt -n -o TARGET --target {base}/in/{n} > {res}.mnt
(cd {base}/in/{n} && md5sum f*) > {res}.tmp && mv {res}.tmp {res}.md5
sleep {compute}
date +%s.%N > {res}.end
"""


def make_input(lab: Mapping[str, str], jobs_n: int, files: int, mib: int) -> Path:
    """``jobs_n`` input directories of ``files`` files, ``mib`` MiB each directory, all
    alike (one checksum list for all)."""
    base = Path(lab["RSA_LAB_PFS"]) / f"bench-burst-{os.getpid()}"
    each = max(1, mib * 1024 // files)
    done = as_user(lab, lab["RSA_LAB_USER"], ["bash", "-c", (
        f"set -e; mkdir -p {base}/in/0 {base}/res; for i in $(seq 1 {files}); do "
        f"head -c {each}K /dev/urandom > {base}/in/0/f$i; done; "
        f"for n in $(seq 1 {jobs_n}); do cp -r {base}/in/0 {base}/in/$n; done")],
        timeout=900)
    if done.returncode != 0:
        sys.exit(f"bench_burst: cannot write the input: {done.stderr.strip()}")
    return base


def submit(lab: Mapping[str, str], jobs: Jobs, texts: list[str]) -> list[str]:
    """Submit every job of ``texts`` as the lab user in one go (one shell, one sbatch
    after the other); their ids are cancelled with ``jobs``'."""
    paths = [Path(f"/tmp/rsa-burst-bench-{os.getpid()}-{i}.sh") for i in range(len(texts))]
    for path, text in zip(paths, texts, strict=True):
        path.write_text(text)
        path.chmod(0o644)
    try:
        loop = (f"for f in {' '.join(map(str, paths))}; do sbatch --parsable -o /dev/null "
                f"--chdir={lab['RSA_LAB_PFS']} $f || exit 1; done")
        done = as_user(lab, lab["RSA_LAB_USER"], ["bash", "-c", loop], timeout=300)
    finally:
        for path in paths:
            path.unlink()
    ids = [line.split(";")[0] for line in done.stdout.split()]
    jobs.ids.extend(ids)
    if done.returncode != 0 or len(ids) != len(texts):
        sys.exit(f"bench_burst: sbatch failed: {done.stderr.strip()}")
    return ids


def sacct(lab: Mapping[str, str], ids: list[str]) -> dict[str, tuple[float, float, int]]:
    """job -> (start, end, node-seconds) as Slurm's accounting has them."""
    out = root(lab, "sacct", "-n", "-X", "-P", "-j", ",".join(ids), "-o",
               "JobID,Start,End,ElapsedRaw,NNodes", "--noconvert")
    got = {}
    for line in out.splitlines():
        job, start, end, elapsed, nodes = line.split("|")
        if job in ids and start != "Unknown" and end != "Unknown":
            got[job] = (_epoch(start), _epoch(end), int(elapsed) * int(nodes))
    return got


def _complete(acct: dict[str, tuple[float, float, int]],
              n: int) -> dict[str, tuple[float, float, int]] | None:
    return acct if len(acct) == n else None


def _epoch(text: str) -> float:
    return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))


def run(lab: Mapping[str, str], base: Path, policy: str, jobs_n: int,
        compute: float, pfs_md5: str) -> dict[str, Any]:
    res = base / "res"
    with make_jobs(lab) as jobs:
        began = time.time()
        ids = submit(lab, jobs, [job_script(base, n, policy, compute)
                                 for n in range(1, jobs_n + 1)])
        wait_for("the burst to end", lambda: all((res / f"{j}.end").exists() for j in ids),
                 timeout=1800, every=1)
        # each job's RSA cycle over (RSA nodes torn down) before the next policy's burst
        wait_for("the RSA nodes back", lambda: not any(
            n.get("job") for n in rsa_nodes(lab)), timeout=300)
        acct = wait_for("sacct", lambda: _complete(sacct(lab, ids), len(ids)), timeout=60)
    ramdisk = sum((res / f"{j}.mnt").read_text().strip() ==
                  f"{base}/in/{(res / f'{j}.n').read_text().strip()}" for j in ids)
    whole = sum((res / f"{j}.md5").read_text() == pfs_md5 for j in ids)
    # sacct's times are whole seconds: the makespan from the first submission (second
    # resolution, from the test's clock) to the last end
    return {"policy": policy, "jobs": jobs_n,
            "makespan_s": round(max(e for _, e, _ in acct.values()) - int(began), 1),
            "compute_node_s": sum(h for _, _, h in acct.values()),
            "mean_wait_s": round(statistics.mean(s - began for s, _, _ in acct.values()), 1),
            "ramdisk": ramdisk, "whole_input": whole}


def bench(jobs_n: int, files: int, mib: int, compute: float,
          policies: tuple[str, ...] = POLICIES) -> list[dict[str, Any]]:
    lab = read_lab_env()
    if lab.get("RSA_LAB_MODE", "queue") != "queue":
        sys.exit("bench_burst: needs the queue-mode lab (early start is queue mode's)")
    base = make_input(lab, jobs_n, files, mib)
    try:
        pfs_md5 = md5_of(base / "in" / "0")
        return [run(lab, base, p, jobs_n, compute, pfs_md5) for p in policies]
    finally:
        as_user(lab, lab["RSA_LAB_USER"], ["rm", "-rf", str(base)], timeout=300)


def table(rows: list[dict[str, Any]]) -> str:
    out = ["| early start | jobs | makespan | compute-node hold | mean wait to start | "
           "read from a RAMDISK | whole input |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| `{r['policy']}` | {r['jobs']} | {r['makespan_s']:.0f} s | "
                   f"{r['compute_node_s']} node-s | {r['mean_wait_s']:.0f} s | "
                   f"{r['ramdisk']} of {r['jobs']} | {r['whole_input']} of {r['jobs']} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=24)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--mib", type=int, default=32, help="MiB of input per job")
    ap.add_argument("--compute", type=float, default=5.0, help="seconds each job computes")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if os.geteuid() != 0 or not LAB_ENV.exists():
        sys.exit("bench_burst: run as root with the lab up (make lab-up)")
    rows = bench(args.jobs, args.files, args.mib, args.compute,
                 tuple(args.policies.split(",")))
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


def test_burst_benchmark() -> None:
    """``make lab-test LAB_TESTS='bench/bench_burst.py'`` with ``RSA_BENCH=burst``: the
    benchmark with its defaults, its table to ``RSA_BENCH_OUT`` (JSON) and stdout."""
    import pytest

    if os.environ.get("RSA_BENCH") != "burst" or not LAB_ENV.exists():
        pytest.skip("a benchmark: RSA_BENCH=burst and the lab up")
    rows = bench(24, 8, 32, 5.0)
    print(table(rows))
    Path(os.environ.get("RSA_BENCH_OUT", "/tmp/bench_burst.json")).write_text(
        json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
