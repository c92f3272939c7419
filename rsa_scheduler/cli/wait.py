"""``rsa wait JOB...``: block until each job's data is where it belongs, for scripts and
workflow managers that wait for Slurm to end a job and then read its output.

Slurm ends a job before its output leaves the RAMDISK (the compute nodes are released at
once; stage-out runs afterwards), so "the job ended" is not "its files are on the PFS".
This command owns the answer to the second question: :func:`verdict` reads one job's
record and timeline from rsad's API and says whether its output is verified on
persistent storage, failed or quarantined, the job had no RSA work, or it is not over
yet. Exit status: 0 every job's data is in place (verified, nothing to stage, or no RSA
work: the job wrote to the PFS itself); 2 one or more failed or are quarantined; 3 the
``--timeout`` passed first; 1 rsad could not be asked (usage, refusals).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import click

from rsa_scheduler.cli.jobs import API_OPTION
from rsa_scheduler.client import ApiClient, ApiRefused, ApiUnavailable

OK, FAILED, TIMED_OUT = 0, 2, 3
#: a job rsad cannot be asked about now (restarting, busy) is asked again this often
POLL = 2.0


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
        return Verdict("no RSA", OK, "rsad tracks no RSA work for this job (no #RSA_ "
                                     "directives, or not your job): its files are where "
                                     "it wrote them")
    state = str(job.get("rsa_state") or "")
    message = " ".join(str(job.get("message") or "").split())
    if job.get("job_state") != "finished":
        return None
    events: list[Mapping[str, Any]] = list(job.get("events") or [])
    end = _last_end(events)
    after = end if end is not None else -1
    spec = job.get("spec") or {}
    if state == "quarantined":
        return Verdict("quarantined", FAILED,
                       message or "the stage-out gave up: the output is kept on the "
                                  "RAMDISK for an operator (rsa job shows why)")
    if job.get("rescue_to") and state in ("output-verified", "tearing-down", "released"):
        return Verdict("rescued", FAILED,
                       f"the output was quarantined, then rescued to {job['rescue_to']} "
                       "(quarantine.rescue_after), not to its DATA_OUT: it is verified "
                       "there")
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


#: Slurm's states of a job that is not over (squeue -O State)
ACTIVE = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED",
                    "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SIGNALING",
                    "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD"})


def slurm_state(job_id: str) -> str:
    """Slurm's state of ``job_id`` (``squeue -O State``), "" when squeue does not know
    the job or cannot be run here."""
    try:
        done = subprocess.run(["squeue", "-h", "-t", "all", "-j", job_id, "-O", "State:0"],
                              capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    lines = done.stdout.split() if done.returncode == 0 else []
    return lines[0] if len(lines) == 1 else ""


def _ask(client: ApiClient, job_id: str,
         slurm: Callable[[str], str] = slurm_state) -> Mapping[str, Any] | None:
    """rsad's record of the job; a job rsad does not track is still waited for while
    Slurm says it is not over (rsad learns a new job at its next queue read)."""
    try:
        answer: Mapping[str, Any] = client.get(f"/v1/jobs/{job_id}")
    except ApiRefused as e:
        if e.status != 404:
            raise
        state = slurm(job_id)
        if state in ACTIVE:
            return {"job_id": job_id, "job_state": f"{state.lower()} (in Slurm)",
                    "rsa_state": "none", "events": []}
        return None
    return answer


def wait_for_jobs(ask: Callable[[str], Mapping[str, Any] | None], job_ids: Sequence[str],
                  timeout: float | None, *, clock: Callable[[], float] = time.monotonic,
                  sleep: Callable[[float], None] = time.sleep,
                  say: Callable[[str], None] = click.echo) -> int:
    """Ask about each job until it has a verdict or ``timeout`` seconds passed; one line
    per job as its verdict comes; the exit status. ``ask`` raising
    :class:`ApiUnavailable` (rsad restarting) is asked again until the timeout."""
    start = clock()
    left = list(dict.fromkeys(job_ids))
    worst = OK
    last: dict[str, str] = {}
    while left:
        for job_id in list(left):
            try:
                got = verdict(ask(job_id))
            except ApiUnavailable as e:
                last[job_id] = f"rsad not reachable ({e})"
                continue
            except ApiRefused as e:
                if e.status in (429, 503):
                    last[job_id] = f"rsad busy ({e})"
                    continue
                raise
            if got is None:
                last[job_id] = "not over"
                continue
            say(f"{job_id}: {got.word}: {got.why}")
            worst = max(worst, got.status)
            left.remove(job_id)
        if not left:
            break
        if timeout is not None and clock() - start >= timeout:
            for job_id in left:
                say(f"{job_id}: timed out after {timeout:g}s: {last.get(job_id, 'not over')}"
                    f" (rsa job {job_id} shows where its data is)")
            return max(worst, TIMED_OUT)
        sleep(POLL)
    return worst


@click.command("wait")
@API_OPTION
@click.argument("job_ids", nargs=-1, required=True)
@click.option("--timeout", type=float, default=None,
              help="Give up after this many seconds (exit status 3); default: wait.")
def wait(api: str | None, job_ids: tuple[str, ...], timeout: float | None) -> None:
    """Wait until each job's output is verified on persistent storage.

    One line per job: verified, done (nothing to stage), no RSA (the job used the PFS
    itself), failed or quarantined. Exit status 0 when every job's data is in place, 2
    when one failed or is quarantined, 3 on --timeout. Use it after Slurm says a job
    ended, before reading what it wrote (workflow managers: see the user guide)."""
    client = ApiClient(api)
    rc = wait_for_jobs(lambda j: _ask(client, j), job_ids, timeout)
    if rc:
        raise click.exceptions.Exit(rc)
