"""Where a job's output is now, in one line for its owner (``rsa job ID``'s ``output:``).

Owns :func:`where_output`: from one job's ``GET /v1/jobs/ID`` answer (its record, spec
and timeline) it says whether the output is not written yet, on the RAMDISK while the job
runs, on the RAMDISK being staged out (not complete on the PFS yet), on the PFS (as files,
or as tar archives with the command that restores them), or kept on the RAMDISK in
quarantine (and what to do). Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rsa_scheduler.cli.wait import verdict

#: rsa-states in which the job's output is still only on its RAMDISK after the job ended
ON_THE_WAY = frozenset({"staging-out", "stage-out-failed", "verifying"})


def archive_prefix(job_id: str, cycle: int) -> str:
    """The archives' name before ``-<n>.tar`` (staging.packing.Packing.archive_prefix)."""
    return f"rsa-{job_id}" + (f".c{cycle}" if cycle > 1 else "")


def where_output(job: Mapping[str, Any]) -> str | None:
    """One line: where the job's ``#RSA_DATA_OUT`` output is now and what to do about
    it; None when the job has no ``#RSA_DATA_OUT``."""
    spec = job.get("spec") or {}
    out = spec.get("data_out")
    if not out:
        return None
    job_id = str(job.get("job_id"))
    state = str(job.get("rsa_state") or "")
    nodes = job.get("nodes") or "its RSA nodes"
    if state == "declined":
        return f"on the PFS in {out}: the RSA did not serve this run; the job wrote there itself"
    if state == "quarantined":
        return (f"kept on the RAMDISK of {nodes}, NOT complete in {out}: the stage-out gave "
                f"up (the message says why); do not read {out} yet. Once the cause is fixed "
                f"(space, permissions), 'rsa retry {job_id}' stages it out again; if that "
                "fails, ask your operator: the data stays kept until then")
    if job.get("job_state") != "finished":
        if state in ("mounted-input", "resetting", "reset-failed"):
            return (f"not written yet: the job reads its input from the RAMDISK; at the "
                    f"reset the RAMDISK is mounted over {out} for it")
        if state in ("mounted-output", "mounting-output"):
            return (f"on the RAMDISK of {nodes}, mounted over {out} while the job runs; "
                    "staged out to the PFS and verified after it ends")
        return f"none yet: the job has not written it (it goes to {out} after the job ends)"
    got = verdict(job)
    if got is not None and got.word == "verified":
        if spec.get("postprocess"):
            return (f"in {out}: what your POSTPROCESS wrote there (it exited 0; its result "
                    "is not checked)")
        if spec.get("stage_out") == "tar":
            prefix = archive_prefix(job_id, int(job.get("cycle") or 1))
            return (f"on the PFS in {out} as tar archives {prefix}-<n>.tar (index "
                    f"{prefix}.index), verified; to get the files back: cd {out} && for a "
                    f"in {prefix}-*.tar; do tar -xpf \"$a\"; done")
        return f"on the PFS in {out}, verified (every file compared with the RAMDISK's)"
    if got is not None:
        return f"not staged out: {got.why}"
    if state in ON_THE_WAY:
        return (f"on the RAMDISK of {nodes}, being staged out to {out} ({state}): not "
                f"complete there yet; 'rsa wait {job_id}' returns once it is")
    return f"the job ended; its output is being placed in {out} ({state or 'unknown'})"
