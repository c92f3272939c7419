"""What a job writes on SIGTERM, during Slurm's KillWait, reaches the PFS (both modes).

slurmctld runs EpilogSlurmctld, which ends the job for rsad, before it asks the compute
nodes to end the job's processes (``deallocate_nodes``); those get SIGTERM and KillWait
seconds (5 in the lab, 30 by default) before SIGKILL. A job that writes its last
checkpoint when cancelled or out of time wrote it to the RAMDISK after rsad had staged
the output out and verified it: the RAMDISK was destroyed with the checkpoint, and the
job's comment said "stage-out finished: content verified". Now the stage-out waits for
the job's node Epilogs (``NodeSide.await_epilogs``; unit:
``tests/unit/test_stage_out_after_epilog.py``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from rsa_scheduler.slurm.parse import JOB_NODES_FORMAT
from tests.e2e.test_prolog_lifecycle import nothing_of_job_mounted, run_to_start
from tests.e2e.test_stage_out_failures import area, events, wait_for_file
from tests.integration.conftest import as_user, slurm_env
from tests.integration.slurmkit import (
    make_jobs,
    on_lab_node,
    restart_lab_rsad,
    root,
    slurm_release,
)
from tests.integration.test_rsad_staging import wait_state

__all__ = ["area"]  # the fixture


def _checkpointing_job(out: Path, res: Path) -> str:
    """Writes ``first``, then waits; on SIGTERM writes ``last`` every 0.5 s, 7 times
    (the last 3.5 s after it, within the lab's KillWait of 5 s), and exits."""
    return f"""#!/bin/bash
#SBATCH -t 5
#RSA_DATA_OUT={out}
last() {{
  for i in 1 2 3 4 5 6 7; do sleep 0.5; echo "written on SIGTERM $i" > {out}/last; done
  exit 0
}}
trap last TERM
findmnt -n -o TARGET --target {out} > {res}/outmnt
echo before > {out}/first
touch {res}/ready
sleep 300 &
wait
"""


def test_a_checkpoint_written_on_sigterm_is_staged_out_before_the_ramdisk_goes(
        lab: Mapping[str, str], area: Path) -> None:
    out, res = area / "out", area / "res"
    with make_jobs(lab) as jobs:
        script = _checkpointing_job(out, res)
        if lab.get("RSA_LAB_MODE", "queue") == "native":
            job = jobs.submit(script=script)  # Slurm holds it until its RAMDISK is ready
        else:
            job = run_to_start(lab, jobs, script)
        wait_for_file(res / "ready", timeout=120)
        assert (res / "outmnt").read_text().strip() == str(out), "not on its RAMDISK"
        root(lab, "scancel", job)  # SIGTERM; SIGKILL after KillWait
        wait_state(lab, job, "released", timeout=180)
    assert (out / "first").read_text() == "before\n"
    assert (out / "last").exists(), (
        "the file the job wrote on SIGTERM was destroyed with its RAMDISK: "
        f"{sorted(p.name for p in out.iterdir())}")
    assert (out / "last").read_text() == "written on SIGTERM 7\n", "not its last version"
    # staged out once the job's processes were gone: the first verify saw the final
    # output (before, the stage-out ran while the job still wrote: a verify that passed
    # early lost the rest, one that raced a write failed and was retried)
    outcomes = [(str(e["action"]), e["result"]) for e in events(lab, job, "action.outcome")
                if "/stage-out/" in str(e["action"]) or "/verify/" in str(e["action"])]
    assert [r for _a, r in outcomes] == ["ok", "ok"], outcomes
    assert nothing_of_job_mounted(job)


def _two_node_checkpointing_job(out: Path, res: Path) -> str:
    """Two nodes, one task each, from the start (so each node's Prolog mounts at once):
    each writes ``first.<node>``; on SIGTERM the node named ``victim.<node>`` in ``res``
    writes ``last.<node>`` every 0.5 s, 7 times, the other once."""
    return f"""#!/bin/bash
#SBATCH -t 5
#SBATCH -N 2
#RSA_DATA_OUT={out}
srun -N2 -n2 bash -c 'h=$SLURMD_NODENAME
last() {{
  n=1; [ -e {res}/victim.$h ] && n=7
  for i in $(seq 1 $n); do sleep 0.5; echo "written on SIGTERM $i" > {out}/last.$h; done
  exit 0
}}
trap last TERM
findmnt -n -o TARGET --target {out} > {res}/outmnt.$h
echo before > {out}/first.$h
touch {res}/ready.$h
sleep 300 &
wait'
"""


def _capture_nodes(lab: Mapping[str, str], job: str, stop: threading.Event,
                   seen: list[str]) -> None:
    """What ``squeue -h -t all -j JOB -O JOB_NODES_FORMAT`` (rsad's read of where Slurm
    still has the job) printed, each distinct output once, every 0.2 s until ``stop``."""
    while not stop.is_set():
        text = root(lab, "squeue", "-h", "-t", "all", "-j", job, "-O", JOB_NODES_FORMAT)
        if not seen or seen[-1] != text:
            seen.append(text)
        stop.wait(0.2)


@pytest.mark.once  # rsad and the compute nodes' agents, the same in either mode
def test_a_node_whose_agent_died_before_an_rsad_restart_is_waited_for(
        lab: Mapping[str, str], area: Path) -> None:
    """One node's agent is killed (``kill -9``, as the OOM killer would) while its job
    runs there with the RAMDISK mounted; rsad restarts, and the agents' settle (12 s)
    passes; the job is cancelled and that node's task writes its checkpoint for 3.5 s
    after SIGTERM. On the code before, the restarted rsad took the node whose agent did
    not reconnect for one whose Epilog ran while it was away: the stage-out read the
    RAMDISK while that node still wrote, and the checkpoint was lost with the RAMDISK
    (or the first verify failed). Slurm still has the job on that node (COMPLETING
    there) until its Epilog ran: the stage-out waits for it."""
    out, res = area / "out", area / "res"
    capture = os.environ.get("RSA_NODES_CAPTURE")  # a directory: keep Slurm's output
    pending: list[str] = []

    def where(job: str) -> str:
        return root(lab, "squeue", "-h", "-t", "all", "-j", job, "-O", JOB_NODES_FORMAT)

    with make_jobs(lab) as jobs:
        job = run_to_start(lab, jobs, _two_node_checkpointing_job(out, res),
                           before_start=lambda: pending.append(where(jobs.ids[-1])))
        ready = sorted(p.name.split(".", 1)[1] for p in _wait_ready(res))
        for node in ready:
            assert (res / f"outmnt.{node}").read_text().strip() == str(out), node
        seen_running = where(job)
        victim = ready[-1]
        pidfile = f"/run/rsa/node/{victim}/{job}/agent.pid"
        killed = on_lab_node(victim, ["sh", "-ec", f"""pid=$(cat {pidfile})
grep -q rsa_scheduler.node.agent /proc/$pid/cmdline
kill -KILL "$pid"
while [ -e /proc/$pid ]; do sleep 0.1; done
echo killed "$pid"
"""], timeout=30)
        assert killed.returncode == 0, killed.stderr
        told = as_user(lab, lab["RSA_LAB_USER"], ["touch", str(res / f"victim.{victim}")])
        assert told.returncode == 0, told.stderr
        restart_lab_rsad(signal.SIGKILL)
        time.sleep(15)  # more than agent_settle (12 s) since rsad answers the agents
        stop = threading.Event()
        seen: list[str] = []
        watcher = threading.Thread(target=_capture_nodes, args=(lab, job, stop, seen),
                                   daemon=True)
        watcher.start()
        try:
            root(lab, "scancel", job)  # SIGTERM; SIGKILL after KillWait
            wait_state(lab, job, "released", timeout=240)
        finally:
            stop.set()
            watcher.join(timeout=30)
    if capture:
        major, minor = slurm_release()
        release = f"{major}.{minor:02d}"
        keep = Path(capture)
        keep.mkdir(parents=True, exist_ok=True)
        gone = subprocess.run(["squeue", "-h", "-t", "all", "-j", "99999999", "-O",
                               JOB_NODES_FORMAT], capture_output=True, text=True,
                              timeout=60, env=slurm_env(lab), check=False)
        (keep / "squeue_job_nodes_pending.txt").write_text("".join(pending))
        (keep / "squeue_job_nodes_running.txt").write_text(seen_running)
        (keep / "squeue_job_nodes_unknown.txt").write_text(
            f"exit {gone.returncode}\nstdout:\n{gone.stdout}stderr:\n{gone.stderr}")
        (keep / "squeue_job_nodes_ending.txt").write_text("".join(
            f"=== {i}\n{text}" for i, text in enumerate(seen)))
        (keep / "job_nodes.env").write_text(
            f"JOB={job}\nVICTIM={victim}\nNODES={','.join(ready)}\nSLURM={release}\n")
    for node in ready:
        assert (out / f"first.{node}").read_text() == "before\n"
    assert (out / f"last.{victim}").exists(), (
        "the checkpoint the node whose agent died wrote on SIGTERM was lost: "
        f"{sorted(p.name for p in out.iterdir())}")
    assert (out / f"last.{victim}").read_text() == "written on SIGTERM 7\n", \
        "not its last version"
    outcomes = [(str(e["action"]), e["result"]) for e in events(lab, job, "action.outcome")
                if "/stage-out/" in str(e["action"]) or "/verify/" in str(e["action"])]
    assert [r for _a, r in outcomes] == ["ok", "ok"], outcomes
    assert nothing_of_job_mounted(job)


def _wait_ready(res: Path, nodes: int = 2, timeout: float = 120) -> list[Path]:
    deadline = time.monotonic() + timeout
    while True:
        found = sorted(res.glob("ready.*"))
        if len(found) >= nodes:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s: only {found} ready")
        time.sleep(0.5)
