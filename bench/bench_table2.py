"""Benchmark: seed 004 Table 2 at lab scale — compute-node hold time writing output
directly to the PFS vs through DATA_OUT on the RSA, and the stage-out time (rsync, tar).

64 processes (16 on each of the 4 compute nodes) write one file each. ``direct``: into a
PFS directory; ``rsa-rsync`` / ``rsa-tar``: into DATA_OUT, which the RSA has mounted as a
RAMDISK on every node (``#RSA_DATA_OUT``, ``#RSA_STAGE_OUT``); ``tmpfs``: the limit, into
each compute node's own ``/dev/shm`` (the same writers, no network, no FUSE; the files
are counted and removed after the timed step). Hold time = the timed ``srun`` step's wall
time in the batch script (the compute nodes are busy exactly that long); stage-out = the
time between the RSA entering ``staging-out`` and ``output-verified`` (after the job has
released its nodes). Slurm's elapsed time of the job (``sacct``, whole seconds, with the
Prolog's mounts) is printed beside the script's own. Needs the lab (root; jobs run as the
lab user).

    .venv/bin/python bench/bench_table2.py --size-mib 16 --procs-per-node 16 \
        --modes tmpfs,direct,rsa-rsync --rsa-nodes 4

Inside ``make lab-test`` (the lab comes up and down around it; ``RSA_BENCH_ARGS`` passes
the options)::

    RSA_LAB_PFS_RATE=100mbit RSA_BENCH=table2 RSA_BENCH_ARGS='--modes tmpfs,direct' \
        flock /tmp/rsa-lab.lock make lab-test LAB_TESTS='bench/bench_table2.py -s'
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

LAB = Path("/run/rsa-lab/env")


def lab_env() -> dict[str, str]:
    out = {}
    for line in LAB.read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            k, _, v = line.partition("=")
            out[k] = v.strip("'\"")
    return out


def sh(argv: list[str], user: str | None = None, **kw: Any) -> str:
    if user:
        argv = ["runuser", "-u", user, "--", *argv]
    env = {**os.environ, "SLURM_CONF": lab_env()["RSA_LAB_SLURM_CONF"]}
    return str(subprocess.run(argv, capture_output=True, text=True, check=True, env=env,
                          timeout=kw.pop("timeout", 120), cwd="/", **kw).stdout)


def submit(user: str, script: str, chdir: str) -> str:
    path = Path(f"/tmp/bench-t2-{os.getpid()}-{time.monotonic_ns()}.sh")
    path.write_text(script)
    path.chmod(0o644)
    try:
        return sh(["sbatch", "--parsable", "-o", "/dev/null", f"--chdir={chdir}",
                   str(path)], user).strip()
    finally:
        path.unlink()


def rsa_job(venv: str, job: str) -> dict[str, Any]:
    done = subprocess.run([f"{venv}/bin/rsa", "job", job, "--json"], capture_output=True,
                          text=True, timeout=30, check=False)
    return dict(json.loads(done.stdout)) if done.returncode == 0 else {"rsa_state": ""}


def wait(what: str, probe: Any, timeout: float) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = probe()
        if got:
            return got
        time.sleep(0.5)
    raise SystemExit(f"timed out waiting for {what}")


def job_gone(job: str) -> bool:
    return sh(["squeue", "-h", "-j", job, "-o", "%T"]).strip() in ("", "COMPLETED")


#: the limit: each compute node's own tmpfs, a directory per job and node (the lab's
#: compute nodes may share the host's /dev/shm), removed by the job
SHM = "/dev/shm/rsa-bench-t2-$SLURM_JOB_ID-$SLURMD_NODENAME"


def writer(size_mib: int, write_kib: int) -> str:
    """One writer's command, its output file to follow: ``head -c`` (GNU head writes 4-8
    KiB at a time: through FUSE each write is a round trip to mfsmount) or, with
    ``write_kib``, ``dd`` writing that many KiB at a time."""
    if write_kib <= 0:
        return f"head -c {size_mib}M /dev/zero >"
    return (f"dd if=/dev/zero bs={write_kib}K count={size_mib * 1024 // write_kib} "
            "status=none of=")


def writer_script(out: str, res: str, size_mib: int, per_node: int, rsa: str,
                  write_kib: int = 0) -> str:
    """The job: ``per_node`` writers on each of 4 nodes, one ``size_mib`` file each, in
    one timed ``srun`` step. Into ``/dev/shm`` (``out == SHM``) the node's directory is
    made before and counted and removed after the timed step (the count goes to
    ``res.files``)."""
    shm = out == SHM
    cmd = writer(size_mib, write_kib)
    before = f"srun -N4 -n4 bash -c 'mkdir -p {out}'\n" if shm else ""
    after = (f"srun -N4 -n4 bash -c 'ls {out} | wc -l; rm -rf {out}' > {res}.files\n"
             if shm else "")
    return f"""#!/bin/bash
#SBATCH -t 10
#SBATCH -N 4
{rsa}
{before}t0=$(date +%s.%N)
srun -N4 -n4 bash -c 'h=$(hostname); for i in $(seq 1 {per_node}); do
  {{ {cmd}{out}/$h-$i || echo "$h-$i $?" >> {res}.failed; }} &
  done; wait'
t1=$(date +%s.%N)
{after}echo "$t0 $t1" > {res}
"""


def run(mode: str, base: Path, user: str, venv: str, size_mib: int, per_node: int,
        rsa_nodes: int = 0, write_kib: int = 0) -> dict[str, float]:
    out = base / mode
    res = base / f"{mode}.time"
    sh(["mkdir", "-p", str(out)], user)
    rsa = "" if mode in ("direct", "tmpfs") else (f"#RSA_DATA_OUT={out}\n"
                                       f"#RSA_STAGE_OUT={mode.split('-')[1]}"
                                       + (f"\n#RSA_NODES={rsa_nodes}" if rsa_nodes else ""))
    fillers = []
    if rsa:
        fillers = [submit(user, "#!/bin/bash\n#SBATCH -t 5\nsleep 300\n", str(base))
                   for _ in range(4)]
    job = submit(user, writer_script(SHM if mode == "tmpfs" else str(out), str(res),
                                     size_mib, per_node, rsa, write_kib), str(base))
    if rsa:
        try:
            wait("locked-in", lambda: rsa_job(venv, job)["rsa_state"] == "locked-in", 180)
        finally:
            sh(["scancel", *fillers])
    try:
        wait("job end", lambda: job_gone(job) and res.exists(), 600)
    finally:
        sh(["scancel", job])
    t0, t1 = (float(x) for x in res.read_text().split())
    # Slurm's own count (whole seconds) also covers the Prolog/Epilog mounts
    elapsed = sh(["sacct", "-X", "-n", "-P", "-j", job, "-o", "ElapsedRaw"]).split()
    row = {"hold": t1 - t0, "elapsed": float(elapsed[0]) if elapsed else -1.0}
    failed = Path(f"{res}.failed")  # writers whose head failed (one line each)
    row["failed"] = len(failed.read_text().splitlines()) if failed.exists() else 0
    if rsa:
        data = wait("released", lambda: (d := rsa_job(venv, job))["rsa_state"] == "released"
                    and d, 600)
        times = {e["to"]: e["time"] for e in data["events"] if e["name"] == "rsa.transition"}
        row["stage_out"] = times.get("output-verified", times.get("verifying", 0)) - \
            times.get("staging-out", 0)
        row["nodes_free_after"] = times.get("staging-out", 0) - t1
    if mode == "tmpfs":
        counted = Path(f"{res}.files").read_text().split()
        row["files"] = sum(int(n) for n in counted) if len(counted) == 4 else -2
    else:
        row["files"] = len(list(out.iterdir())) if mode != "rsa-tar" else -1
    return row


def where(files: float) -> str:
    return {-1: "tar", -2: "?"}.get(int(files), f"{files:.0f}")


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mib", type=int, default=16)
    ap.add_argument("--procs-per-node", type=int, default=16)
    ap.add_argument("--modes", default="direct,rsa-rsync,rsa-tar",
                    help="comma-separated: tmpfs (the limit: /dev/shm), direct, rsa-rsync, "
                    "rsa-tar")
    ap.add_argument("--write-kib", type=int, default=0,
                    help="each writer writes this many KiB at a time (dd); 0: head -c, "
                    "as the job always did (4-8 KiB writes)")
    ap.add_argument("--rsa-nodes", type=int, default=0,
                    help="#RSA_NODES for the RSA modes (0: the site's ratio decides)")
    args = ap.parse_args(argv)
    lab = lab_env()
    user, venv = lab["RSA_LAB_USER"], lab["RSA_LAB_VENV"]
    base = Path(lab["RSA_LAB_PFS"]) / f"bench-t2-{os.getpid()}"
    sh(["mkdir", "-p", str(base)], user)
    total = 4 * args.procs_per_node
    print(f"{total} processes x {args.size_mib} MiB = {total * args.size_mib} MiB, "
          f"written {f'{args.write_kib} KiB' if args.write_kib > 0 else '4-8 KiB (head)'}"
          " at a time")
    print("| mode | hold s (script) | held s (sacct) | stage-out s | files | writers failed "
          "| load before → after |")
    print("|---|---|---|---|---|---|---|")
    rows = []
    try:
        for mode in args.modes.split(","):
            # the host's 1-min load average around the mode: a lab host shared with other
            # work makes the holds move, so a ratio is only read within one run
            before = os.getloadavg()[0]
            r = run(mode, base, user, venv, args.size_mib, args.procs_per_node,
                    args.rsa_nodes, args.write_kib)
            r["load_before"], r["load_after"] = before, os.getloadavg()[0]
            rows.append({"mode": mode, "rsa_nodes": args.rsa_nodes,
                         "write_kib": args.write_kib, **r})
            print(f"| {mode} | {r['hold']:.2f} | {r['elapsed']:.0f} | "
                  f"{r.get('stage_out', 0):.2f} | {where(r['files'])} | {r['failed']:.0f} | "
                  f"{before:.1f} → {r['load_after']:.1f} |", flush=True)
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=False, timeout=300)
    sys.stdout.flush()
    return rows


def test_table2_benchmark() -> None:
    """``make lab-test LAB_TESTS='bench/bench_table2.py -s'`` with ``RSA_BENCH=table2``:
    the benchmark with ``RSA_BENCH_ARGS``, its rows to ``RSA_BENCH_OUT`` (JSON) and
    stdout."""
    import shlex

    import pytest

    if os.environ.get("RSA_BENCH") != "table2" or not LAB.exists():
        pytest.skip("a benchmark: RSA_BENCH=table2 and the lab up")
    rows = main(shlex.split(os.environ.get("RSA_BENCH_ARGS", "")))
    Path(os.environ.get("RSA_BENCH_OUT", "/tmp/bench_table2.json")).write_text(
        json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
