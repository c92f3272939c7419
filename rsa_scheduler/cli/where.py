"""Where a job's output is now, in one line for its owner (``rsa job ID``'s ``output:``).

Owns :func:`verdict` (``rsa wait``'s final word on a job: verified, done, no RSA,
failed, quarantined, or None while not over) and :func:`where_output`: from one job's
``GET /v1/jobs/ID`` answer (its record, spec and timeline) it says whether the output is
not written yet, on the RAMDISK while the job runs, on the RAMDISK being staged out (not
complete on the PFS yet), on the PFS (as files, or as tar archives with the command that
restores them), or kept on the RAMDISK in quarantine (and what to do). Pure: no I/O, no
clock.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rsa_scheduler.core.states import POST_RUN, TEARDOWN

#: exit statuses of rsa wait: the data in place, failed or quarantined; another user's
#: job (nothing to wait for: rsad tells only its owner)
OK, FAILED, NOT_YOURS = 0, 2, 1

@dataclass(frozen=True, slots=True)
class Verdict:
    """The final word on one job: ``word`` is what the line starts with (``verified``,
    ``done``, ``no RSA``, ``failed``, ``quarantined``); ``status`` its exit status."""

    word: str
    status: int
    why: str


def _last_end(events: Sequence[Mapping[str, Any]]) -> int | None:
    """Index of the job's last end (``job.state`` to finished) in its timeline."""
    ends = [i for i, e in enumerate(events)
            if e.get("name") == "job.state" and e.get("to") == "finished"]
    return ends[-1] if ends else None


def _reached(events: Sequence[Mapping[str, Any]], state: str, after: int) -> bool:
    return any(e.get("name") == "rsa.transition" and e.get("to") == state
               for e in events[after + 1:])


def verdict(job: Mapping[str, Any] | None) -> Verdict | None:
    """The verdict on one job from its ``GET /v1/jobs/ID`` answer (None: rsad tracks no
    RSA work for it), or None while it is not over: the job still pending or running,
    or its output or writable input still on the RAMDISK (staging out, verifying, a retry
    due)."""
    if job is None:
        return Verdict("no RSA", OK, "rsad tracks no RSA work of this job that you may "
                                     "see: a job of yours without #RSA_ directives (or "
                                     "not served) wrote its files where they are; another "
                                     "user's, only its owner can wait for")
    if job.get("other_user"):
        jid = job.get("job_id")
        return Verdict("not yours", NOT_YOURS,
                       f"job {jid} is {job['other_user']}'s: rsad tells only its owner "
                       "whether its output is on the PFS yet (a job of yours that reads "
                       f"it waits for that output with sbatch --dependency=afterok:{jid})")
    state = str(job.get("rsa_state") or "")
    message = " ".join(str(job.get("message") or "").split())
    if job.get("job_state") != "finished":
        return None
    events: list[Mapping[str, Any]] = list(job.get("events") or [])
    end = _last_end(events)
    after = end if end is not None else -1
    spec = job.get("spec") or {}
    earlier = bool(job.get("rerun_started"))  # this run started on no RAMDISK of its own
    if state == "quarantined" and earlier:
        # the quarantined RAMDISK holds the previous run's output (issue 33); a retry of
        # it may still place files in DATA_OUT, so this run's dependents wait too
        return Verdict("quarantined", FAILED,
                       "this run read and wrote the PFS itself, but the previous run's "
                       "output is kept on its RAMDISK in quarantine (rsa job shows why): "
                       "an operator's rsa retry would stage it out into "
                       f"{spec.get('data_out') or 'DATA_OUT'}")
    if state == "quarantined":
        return Verdict("quarantined", FAILED,
                       message or "the stage-out gave up: the output is kept on the "
                                  "RAMDISK for an operator (rsa job shows why)")
    rescued = state in ("output-verified", "tearing-down", "released") and \
        job.get("rescue_to")
    if rescued and job.get("rerun_started"):
        # this run started while the earlier run's quarantined RAMDISK was kept (then
        # rescued): the rescue, and its verification, are that run's (issue 33)
        return Verdict("no RSA", OK, "this run started while the previous run's output "
                                     "was kept on its RAMDISK (quarantined, then rescued "
                                     f"to {job['rescue_to']}): it read and wrote the PFS "
                                     "itself")
    if rescued:
        return Verdict("rescued", FAILED,
                       f"the output was quarantined, then rescued to {job['rescue_to']} "
                       "(quarantine.rescue_after), not to its DATA_OUT: it is verified "
                       "there")
    if _reached(events, "output-verified", after) and earlier:
        return Verdict("no RSA", OK, "this run read and wrote the PFS itself; the previous "
                                     "run's output, on its RAMDISK when this run started, "
                                     "was staged out and verified after it")
    if _reached(events, "output-verified", after):
        return Verdict("verified", OK, message or "output verified on persistent storage")
    if state == "writeback-failed":
        return Verdict("failed", FAILED,
                       message or "the job's changes to its writable input are not "
                                  "written back yet: an operator's rsa retry may still")
    if state == "declined":
        return Verdict("no RSA", OK, message or "the RSA did not serve this run: the job "
                                                "read and wrote the PFS itself")
    if state == "released":
        if spec.get("data_out"):
            return Verdict("failed", FAILED,
                           "released without a verified stage-out of "
                           f"{spec['data_out']}" + (f": {message}" if message else ""))
        return Verdict("done", OK, "no #RSA_DATA_OUT: nothing to stage out"
                       + ("; writable input written back" if spec.get("input") == "rw"
                          else ""))
    return None



def archive_prefix(job_id: str, cycle: int) -> str:
    """The archives' name before ``-<n>.tar`` (staging.packing.Packing.archive_prefix)."""
    return f"rsa-{job_id}" + (f".c{cycle}" if cycle > 1 else "")


def restore_command(prefix: str) -> str:
    """The shell line that extracts a run's archives in its DATA_OUT: those its index
    names (``cut -s``: the header has no tab), archive 0 last (``sort -rV``)."""
    return (f'for a in $(cut -s -f1 {prefix}.index | sort -urV); do tar -xpf "$a"; '
            "done")


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
                f"(space, permissions), ask your operator to run 'rsa retry {job_id}' (an "
                "operator's command), which stages it out again: the data stays kept until "
                "then")
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
            # the archives the index names, archive 0 (the directories) last so their
            # mtimes come out exact; never a glob: another file so named (an earlier
            # job's with this id) would be extracted over this run's (restore_command)
            return (f"on the PFS in {out} as tar archives {prefix}-<n>.tar (index "
                    f"{prefix}.index), verified; to get the files back: cd {shlex.quote(out)} && "
                    f"{restore_command(prefix)}")
        return f"on the PFS in {out}, verified (every file compared with the RAMDISK's)"
    if got is not None:
        return f"not staged out: {got.why}"
    if state in POST_RUN - TEARDOWN:  # staging out, verifying, a retry due
        return (f"on the RAMDISK of {nodes}, being staged out to {out} ({state}): not "
                f"complete there yet; 'rsa wait {job_id}' returns once it is")
    return f"the job ended; its output is being placed in {out} ({state or 'unknown'})"
