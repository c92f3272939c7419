"""``rsa wait JOB...``: block until each job's data is where it belongs, for scripts and
workflow managers that wait for Slurm to end a job and then read its output.

Slurm ends a job before its output leaves the RAMDISK (the compute nodes are released at
once; stage-out runs afterwards), so "the job ended" is not "its files are on the PFS".
This command owns the answer to the second question: :func:`verdict` reads one job's
record and timeline from rsad's API and says whether its output is verified on
persistent storage, failed or quarantined, the job had no RSA work, it is another
user's (rsad tells only its owner), or it is not over yet. An array's id stands for
every task of it (:func:`expand_arrays`). Exit status: 0 every job's data is in place
(verified, nothing to stage, or no RSA work: the job wrote to the PFS itself); 2 one or
more failed or are quarantined; 3 the ``--timeout`` passed first; 1 rsad could not be
asked (usage, refusals), or a job is another user's.

``rsa wait --cluster-status JOB`` asks once and prints one word, the answer a workflow
manager's cluster-status command gives (Snakemake's ``--cluster-generic-status-cmd``,
Snakemake 7's ``--cluster-status``): ``running`` until Slurm has ended the job *and* its
data is in place, ``success`` once the job COMPLETED and its output is verified (or it
had none to stage), ``failed`` when Slurm ended it otherwise or its output failed or is
quarantined (:func:`cluster_status`).

Slurm is asked with ``squeue`` and ``sacct`` (:func:`slurm_out`), each within
:data:`SLURM_TIMEOUT` and, with ``--timeout``, within what is left of it: a slurmctld
that does not answer holds the command no longer than rsad's silence would, and what
Slurm did not say is never read as "Slurm does not know the job" (:class:`SlurmUnanswered`).
"""

from __future__ import annotations

import os
import pwd
import re
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import click

from rsa_scheduler.cli.jobs import API_OPTION, BUSY
from rsa_scheduler.cli.show import echo
from rsa_scheduler.cli.where import FAILED, OK, Verdict, verdict
from rsa_scheduler.client import ApiClient, ApiRefused, ApiUnavailable
from rsa_scheduler.errors import RsaError

__all__ = ["FAILED", "OK", "TIMED_OUT", "SlurmUnanswered", "Verdict", "cluster_status",
           "expand_arrays", "verdict", "wait_for_jobs"]

TIMED_OUT = 3
#: a job rsad cannot be asked about now (restarting, busy) is asked again this often
POLL = 2.0


#: Slurm's states of a job that is not over (squeue -O State)
ACTIVE = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED",
                    "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SIGNALING",
                    "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD"})


#: seconds squeue or sacct may take; with ``--timeout``, at most what is left of it
SLURM_TIMEOUT = 30.0


class SlurmUnanswered(RsaError):
    """squeue or sacct did not answer in the time it had, or was not run because the
    time given had run out: what Slurm would say is not known (never "Slurm does not
    know the job")."""


def slurm_out(argv: Sequence[str], deadline: float | None = None) -> str:
    """``argv``'s standard output when it exits 0, "" when it fails or cannot be run
    here. It has :data:`SLURM_TIMEOUT` seconds, and no more than what is left until
    ``deadline`` (``time.monotonic()``: ``rsa wait --timeout``); once that has passed it
    is not run at all. Either way, :class:`SlurmUnanswered` says what ran out."""
    timeout = SLURM_TIMEOUT
    if deadline is not None:
        timeout = min(timeout, deadline - time.monotonic())
        if timeout <= 0:
            raise SlurmUnanswered(f"the time given ran out before {argv[0]} was asked")
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                              check=False)
    except subprocess.TimeoutExpired as e:
        raise SlurmUnanswered(f"{argv[0]} did not answer within {timeout:.3g}s") from e
    except OSError:
        return ""
    return done.stdout if done.returncode == 0 else ""


def slurm_state(job_id: str, deadline: float | None = None) -> str:
    """Slurm's state of ``job_id`` (``squeue -O State``), "" when squeue does not know
    the job or cannot be run here (:func:`slurm_out`)."""
    lines = slurm_out(["squeue", "-h", "-t", "all", "-j", job_id, "-O", "State:0"],
                      deadline).split()
    return lines[0] if len(lines) == 1 else ""


def slurm_tasks(job_id: str, deadline: float | None = None) -> list[str]:
    """What Slurm lists for ``job_id`` (``squeue -r``): an array's tasks (``1234_0``,
    ...), a plain job's id; [] for a job Slurm no longer lists, or when squeue cannot be
    run here (:func:`slurm_out`)."""
    return slurm_out(["squeue", "-h", "-r", "-t", "all", "-j", job_id, "-O",
                      "JobArrayID:0"], deadline).split()


def _task_order(key: str) -> tuple[int, str]:
    task = key.rpartition("_")[2]
    return (int(task), key) if task.isdigit() else (-1, key)


def expand_arrays(job_ids: Sequence[str], mine: Callable[[], list[str]],
                  tasks: Callable[[str], list[str]] = slurm_tasks) -> list[str]:
    """``job_ids`` with each array's id (``sbatch --parsable --array`` prints it) in
    place of its tasks: rsad names every task ``<array>_<task>`` and tracks no job under
    the array's own id, so ``rsa wait 1234`` of an array waits for every task, those
    Slurm lists (``tasks``) and those rsad still has (``mine``: the caller's jobs rsad
    tracks; a task Slurm has forgotten may still be staging out). An id of neither stays
    as given. rsad is asked (``mine``, which may raise :class:`ApiUnavailable`) only
    for an array, or an id Slurm no longer lists: a plain job Slurm lists costs one
    squeue (``rsa wait --cluster-status`` of every step of a workflow). ``tasks`` may
    raise :class:`SlurmUnanswered`."""
    out: list[str] = []
    known: list[str] | None = None
    for job_id in job_ids:
        if not job_id.isdigit():
            out.append(job_id)
            continue
        listed = tasks(job_id)
        found = {w for w in listed if re.fullmatch(rf"{job_id}_[0-9]+", w)}
        if listed and not found:
            out.append(job_id)  # a plain job (or a task's own id, which rsad resolves)
            continue
        if known is None:
            known = mine()
        found |= {k for k in known if k.startswith(f"{job_id}_")}
        out += sorted(found, key=_task_order) if found else [job_id]
    return list(dict.fromkeys(out))


def _mine(client: ApiClient) -> list[str]:
    """The keys of the jobs rsad tracks that the caller may see."""
    answer: Mapping[str, Any] = client.get("/v1/jobs")
    return [str(j.get("job_id")) for j in answer.get("jobs") or ()]


def _expand(client: ApiClient, job_ids: Sequence[str], timeout: float | None,
            *, clock: Callable[[], float] = time.monotonic,
            sleep: Callable[[float], None] = time.sleep) -> list[str]:
    """:func:`expand_arrays`, rsad being restarted or Slurm not answering waited out (up
    to ``timeout``; past it, the arrays' tasks Slurm listed, and each id Slurm did not
    answer for as given: rsad is asked about it then)."""
    listed: dict[str, list[str]] = {}

    def known(job_id: str) -> list[str]:  # Slurm is asked once per id that it answers
        if job_id not in listed:
            listed[job_id] = slurm_tasks(job_id, client.deadline)
        return listed[job_id]

    start = clock()
    while True:
        try:
            return expand_arrays(job_ids, lambda: _mine(client), known)
        except (ApiUnavailable, ApiRefused, SlurmUnanswered) as e:
            if isinstance(e, ApiRefused) and e.status not in BUSY:
                raise
            if timeout is not None and clock() - start >= timeout:
                return expand_arrays(job_ids, list, lambda j: listed.get(j, []))
            sleep(POLL)


def slurm_owner(job_id: str, deadline: float | None = None) -> str:
    """The user Slurm names for ``job_id`` (``squeue -O UserName``), "" when squeue does
    not show the job here (unknown, or another user's under ``PrivateData=jobs``), or
    cannot be run here (:func:`slurm_out`)."""
    words = set(slurm_out(["squeue", "-h", "-t", "all", "-j", job_id, "-O", "UserName:0"],
                          deadline).split())
    return words.pop() if len(words) == 1 else ""


def _me() -> str:
    """The caller's user name; "" for root (rsad shows root every job: a job it does
    not answer for is one it does not track, whoever's)."""
    if os.getuid() == 0:
        return ""
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return ""


def _ask(client: ApiClient, job_id: str,
         slurm: Callable[[str], str] | None = None,
         owner: Callable[[str], str] | None = None,
         me: Callable[[], str] = _me) -> Mapping[str, Any] | None:
    """rsad's record of the job; a job rsad does not track is still waited for while
    Slurm says it is not over (rsad learns a new job at its next queue read), unless
    Slurm says it is another user's: rsad tells only a job's owner about it, so nothing
    here can wait for its output (``other_user``). Slurm (``slurm``, ``owner``; default:
    squeue by the client's deadline) not answering raises :class:`SlurmUnanswered`."""
    def state(j: str) -> str:
        return slurm(j) if slurm is not None else slurm_state(j, client.deadline)

    def whose(j: str) -> str:
        return owner(j) if owner is not None else slurm_owner(j, client.deadline)

    try:
        answer: Mapping[str, Any] = client.get(f"/v1/jobs/{job_id}")
    except ApiRefused as e:
        if e.status != 404:
            raise
        caller = me()
        who = whose(job_id) if caller else ""
        if who and who != caller:
            return {"job_id": job_id, "other_user": who}
        now = state(job_id)
        if now in ACTIVE:
            return {"job_id": job_id, "job_state": f"{now.lower()} (in Slurm)",
                    "rsa_state": "none", "events": []}
        return None
    return answer


def wait_for_jobs(ask: Callable[[str], Mapping[str, Any] | None], job_ids: Sequence[str],
                  timeout: float | None, *, clock: Callable[[], float] = time.monotonic,
                  sleep: Callable[[float], None] = time.sleep,
                  say: Callable[[str], None] = echo) -> int:
    """Ask about each job until it has a verdict or ``timeout`` seconds passed; one line
    per job as its verdict comes; the exit status. ``ask`` raising
    :class:`ApiUnavailable` (rsad restarting) or :class:`SlurmUnanswered` is asked again
    until the timeout, whose line says what did not answer."""
    start = clock()
    left = list(dict.fromkeys(job_ids))
    worst = OK
    last: dict[str, str] = {}
    while left:
        for job_id in list(left):
            try:
                got = verdict(ask(job_id))
            except ApiUnavailable as e:
                last[job_id] = f"no answer from rsad to go by ({e})"
                continue
            except SlurmUnanswered as e:
                last[job_id] = f"no answer from Slurm to go by ({e})"
                continue
            except ApiRefused as e:
                if e.status in BUSY:
                    last[job_id] = f"rsad answered {e.status} ({e})"
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
        # never past the timeout: the next round would only find it passed
        sleep(POLL if timeout is None else max(0.0, min(POLL, timeout - (clock() - start))))
    return worst


#: the words of a workflow manager's cluster-status command
RUNNING, SUCCESS, FAILURE = "running", "success", "failed"


def slurm_end(job_id: str, deadline: float | None = None) -> str:
    """How Slurm ended ``job_id`` (``COMPLETED``, ``FAILED``, ``CANCELLED``, ...): its
    state in squeue while Slurm still lists it, else in accounting (``sacct``); "" when
    neither knows it (yet). :class:`SlurmUnanswered` when one did not answer in time."""
    state = slurm_state(job_id, deadline)
    if state:
        return state
    words = slurm_out(["sacct", "-n", "-X", "-P", "-o", "State", "-j", job_id],
                      deadline).split()
    return words[0] if words else ""  # "CANCELLED by 1000" -> CANCELLED


def cluster_status(job: Mapping[str, Any] | None, end: Callable[[], str]) -> tuple[str, str]:
    """The cluster-status word for one job from its ``GET /v1/jobs/ID`` answer (None: rsad
    tracks no RSA work for it) and ``end``, Slurm's end state of it (asked only when the
    data is in place), with the line that says why (empty while running)."""
    got = verdict(job)
    if got is None:
        return RUNNING, ""
    if got.status != OK:
        return FAILURE, f"{got.word}: {got.why}"
    state = str((job or {}).get("end_state") or "") or end()
    if state in ("", "PENDING") or state in ACTIVE:
        return RUNNING, ""  # Slurm has not recorded the end yet
    if state != "COMPLETED":
        return FAILURE, f"the job ended {state} in Slurm"
    return SUCCESS, f"{got.word}: {got.why}"


def _cluster_status(client: ApiClient, job_id: str) -> str:
    """One look: the word to print; a line to stderr when it is ``failed`` or rsad or
    Slurm cannot be asked (then ``running``: rsad restarting is waited out, as by ``rsa
    wait``)."""
    try:
        word, why = cluster_status(_ask(client, job_id),
                                   lambda: slurm_end(job_id, client.deadline))
    except (ApiUnavailable, SlurmUnanswered) as e:
        who = "Slurm" if isinstance(e, SlurmUnanswered) else "rsad"
        echo(f"rsa wait: job {job_id}: no answer from {who} to go by ({e}): running",
             err=True)
        return RUNNING
    except ApiRefused as e:
        if e.status not in BUSY:
            raise
        if e.status == 500:  # an internal error is the operator's to see; waited out
            echo(f"rsa wait: job {job_id}: rsad answered {e.status} ({e}); asking again: "
                 "running", err=True)
        return RUNNING
    if word == FAILURE:
        echo(f"rsa wait: job {job_id}: {why} (rsa job {job_id} says more)", err=True)
    return word


@click.command("wait")
@API_OPTION
@click.argument("job_ids", nargs=-1, required=True)
@click.option("--timeout", type=float, default=None,
              help="Give up after this many seconds (exit status 3); default: wait.")
@click.option("--cluster-status", "cluster", is_flag=True,
              help="Ask once and print running, success or failed for one job: a "
                   "workflow manager's cluster-status command (Snakemake's "
                   "--cluster-generic-status-cmd).")
def wait(api: str | None, job_ids: tuple[str, ...], timeout: float | None,
         cluster: bool) -> None:
    """Wait until each job's output is verified on persistent storage.

    One line per job (an array's id: per task): verified, done (nothing to stage), no
    RSA (the job used the PFS itself), failed, quarantined, or not yours (another user's
    job: rsad tells only its owner). Exit status 0 when every job's data is in place, 2
    when one failed or is quarantined, 3 on --timeout, 1 for another user's job. Use it
    after Slurm says a job ended, before reading what it wrote (workflow managers: see
    the user guide)."""
    client = ApiClient(api)
    if timeout is not None:  # a hung rsad must not hold a request past --timeout
        client = client.within(time.monotonic() + timeout)
    if cluster:
        if len(job_ids) != 1:
            raise click.UsageError("--cluster-status takes one job id")
        job_id = job_ids[0].split(";")[0]
        try:
            tasks = expand_arrays([job_id], lambda: _mine(client),
                                  lambda j: slurm_tasks(j, client.deadline))
        except (ApiUnavailable, ApiRefused, SlurmUnanswered) as e:
            if isinstance(e, ApiRefused) and e.status not in BUSY:
                raise
            who = "Slurm" if isinstance(e, SlurmUnanswered) else "rsad"
            echo(f"rsa wait: job {job_ids[0]}: no answer from {who} to go by ({e}): "
                 "running", err=True)
            echo(RUNNING)
            return
        words = [_cluster_status(client, t) for t in tasks]  # an array: every task's
        echo(FAILURE if FAILURE in words else RUNNING if RUNNING in words else SUCCESS)
        return
    rc = wait_for_jobs(lambda j: _ask(client, j), _expand(client, job_ids, timeout),
                       timeout)
    if rc:
        raise click.exceptions.Exit(rc)
