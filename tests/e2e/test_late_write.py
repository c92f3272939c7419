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

from collections.abc import Mapping
from pathlib import Path

from tests.e2e.test_prolog_lifecycle import nothing_of_job_mounted, run_to_start
from tests.e2e.test_stage_out_failures import area, events, wait_for_file
from tests.integration.slurmkit import make_jobs, root
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
