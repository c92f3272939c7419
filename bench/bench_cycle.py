"""Benchmark: one rsad scheduling cycle on a real 10k / 100k-job Slurm queue vs the
``squeue`` call alone, same run (issue 3 target: cycle <= 1.2x squeue).

Needs the lab up (`make lab-up`; run as root). Submits held job arrays as the lab user
(arrays of 1,000: one job record each, 1,000 squeue lines with -r), 10% of them with
``#RSA_`` directives (job_submit.lua turns them into admin_comments), then times:
  * ``squeue`` alone (the exact argv rsad runs), best of N;
  * rsad's cycle: the same squeue + parsing + observations + core decision + commit,
    through a real ``Daemon`` with a throw-away store (first cycle: every RSA job is new;
    steady cycles: nothing changed; busy cycles: before each, ``--churn`` percent of the
    RSA jobs changed in Slurm, their hold switched between user and admin hold with
    scontrol, so their lines, pending reasons and job records change and rsad parses,
    observes and decides on them).
Cancels everything it submitted.

    .venv/bin/python bench/bench_cycle.py --jobs 10000 100000 [--churn 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from rsa_scheduler.core.policy import StagingPolicy
from rsa_scheduler.core.scheduler import Scheduler
from rsa_scheduler.daemon.executors import Registry
from rsa_scheduler.daemon.service import Daemon
from rsa_scheduler.runner import run
from rsa_scheduler.slurm.cli import CliSlurm, squeue_argv
from rsa_scheduler.store import Store

ENV_FILE = Path("/run/rsa-lab/env")
ARRAY = 1000
RSA_EVERY = 10  # every 10th array carries #RSA_ directives


def lab_env() -> dict[str, str]:
    out = {}
    for line in ENV_FILE.read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            k, _, v = line.partition("=")
            out[k] = v.strip("'")
    return out


def submit(lab: dict[str, str], n_arrays: int, rsa_every: int, workdir: Path,
           ids: list[str]) -> list[str]:
    """Submit held arrays, appending each id to ``ids`` as it goes (so the caller can
    cancel a partial submission)."""
    plain = workdir / "plain.sh"
    plain.write_text("#!/bin/bash\ntrue\n")
    rsa = workdir / "rsa.sh"
    rsa.write_text(f"#!/bin/bash\n#RSA_DATA_IN={lab['RSA_LAB_PFS']}/in\n"
                   f"#RSA_DATA_OUT={lab['RSA_LAB_PFS']}/out\ntrue\n")
    for f in (plain, rsa):
        f.chmod(0o644)
    workdir.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "SLURM_CONF": lab["RSA_LAB_SLURM_CONF"]}
    for i in range(n_arrays):
        script = rsa if i % rsa_every == 0 else plain
        done = subprocess.run(
            ["/usr/sbin/runuser", "-u", lab["RSA_LAB_USER"], "--", "sbatch", "--parsable", "-H",
             f"--array=0-{ARRAY - 1}", "-t", "1", "-o", "/dev/null", "--chdir=/tmp",
             str(script)], capture_output=True, text=True, env=env, check=True)
        ids.append(done.stdout.strip())
    return ids


def squeue_then_cycle(argv: list[str], env: dict[str, str],
                      daemon: Daemon) -> tuple[float, float]:
    """Seconds of the squeue call alone, then of one rsad cycle (which runs it again)."""
    t0 = time.perf_counter()
    run(argv, timeout=300, env=env)
    t1 = time.perf_counter()
    daemon.poll()
    return t1 - t0, time.perf_counter() - t1


def churn_sets(rsa_arrays: list[str], percent: float) -> list[str]:
    """``percent`` of each RSA array's tasks, as scontrol job lists (``ID_[a-b]``)."""
    per = max(1, round(ARRAY * percent / 100))
    return [f"{arr}_[0-{per - 1}]" for arr in rsa_arrays]


def measure(lab: dict[str, str], n_jobs: int, repeats: int,
            churn: float) -> dict[str, float]:
    env = {"PATH": "/usr/bin:/bin", "SLURM_CONF": lab["RSA_LAB_SLURM_CONF"]}
    slurm = CliSlurm(env=env, timeout=300)
    argv = squeue_argv(Path("/usr/bin"))
    with tempfile.TemporaryDirectory() as tmp:
        ids: list[str] = []
        try:
            ids = submit(lab, n_jobs // ARRAY, RSA_EVERY, Path(tmp), ids)
            lines = len(run(argv, timeout=300, env=env).stdout.splitlines())
            from rsa_scheduler.config import load_config

            cfg = load_config(lab["RSA_LAB_RSA_CONFIG"])
            store = Store.open(Path(tmp) / "bench.db", durability="full")
            daemon = Daemon(Scheduler(cfg.make_pool(), StagingPolicy()), slurm=slurm,
                            store=store, registry=Registry(), poll_interval=0)
            t0 = time.perf_counter()
            daemon.poll()
            first = time.perf_counter() - t0
            tracked = len(daemon.sched.records)
            sq, cyc = [], []
            for _ in range(repeats):
                squeue_s, cycle_s = squeue_then_cycle(argv, env, daemon)
                sq.append(squeue_s)
                cyc.append(cycle_s)
            # busy cycles: a share of the RSA jobs changed since the last cycle
            rsa_arrays = [a for i, a in enumerate(ids) if i % RSA_EVERY == 0]
            sets = churn_sets(rsa_arrays, churn)
            rsa_lines = len(daemon.queue_reader.prev_lines)
            sq_busy, cyc_busy = [], []
            for r in range(repeats):
                verb = "hold" if r % 2 == 0 else "uhold"  # admin hold, then user hold again
                subprocess.run(["scontrol", verb, ",".join(sets)], env=env, check=True,
                               capture_output=True)
                squeue_s, cycle_s = squeue_then_cycle(argv, env, daemon)
                sq_busy.append(squeue_s)
                cyc_busy.append(cycle_s)
            assert len(daemon.queue_reader.prev_lines) == rsa_lines, \
                "the number of RSA jobs changed"
            daemon.shutdown()
            store.close()
        finally:
            if ids:
                subprocess.run(["scancel", *ids], env=env, check=False)
    return {"jobs": lines, "tracked": tracked, "squeue": statistics.median(sq),
            "cycle": statistics.median(cyc), "first": first,
            "squeue_busy": statistics.median(sq_busy), "cycle_busy": statistics.median(cyc_busy),
            "changed": len(sets) * max(1, round(ARRAY * churn / 100))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--churn", type=float, default=5.0,
                    help="percent of the RSA jobs changed before each busy cycle")
    args = ap.parse_args()
    if os.geteuid() != 0 or not ENV_FILE.exists():
        raise SystemExit("run as root with the lab up (make lab-up)")
    lab = lab_env()
    print("| queue (squeue lines) | RSA jobs tracked | squeue alone | rsad cycle (steady) "
          "| ratio | RSA jobs changed | squeue (busy) | rsad cycle (busy) | ratio (busy) "
          "| first cycle (all new) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n in args.jobs:
        r = measure(lab, n, args.repeats, args.churn)
        print(f"| {r['jobs']:,} | {r['tracked']:,} | {r['squeue'] * 1000:.0f} ms | "
              f"{r['cycle'] * 1000:.0f} ms | {r['cycle'] / r['squeue']:.2f}x | "
              f"{r['changed']:,} | {r['squeue_busy'] * 1000:.0f} ms | "
              f"{r['cycle_busy'] * 1000:.0f} ms | {r['cycle_busy'] / r['squeue_busy']:.2f}x | "
              f"{r['first'] * 1000:.0f} ms |", flush=True)


if __name__ == "__main__":
    main()
