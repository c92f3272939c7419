"""``rsa jobs`` and ``rsa job ID``: what the RSA is doing for each job, from rsad's API.

Users see their own jobs; root and SlurmUser see all. ``--json`` keys are stable:
``job_id, user, job_state, rsa_state, nodes, cycle, message, since, progress`` (plus the
full record fields) — documented in docs/user-guide.md. The table shows ``progress`` as
bytes and files staged of total, rate and ETA (cli/progress.py).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

import click

from rsa_scheduler.cli.progress import Staging, short_duration
from rsa_scheduler.cli.show import echo, printable
from rsa_scheduler.cli.where import where_output
from rsa_scheduler.client import ApiClient, ApiRefused, ApiUnavailable
from rsa_scheduler.core.jobkey import key_from_env
from rsa_scheduler.core.states import HOLDS_USER_DATA, PRE_RUN, RESET_UNDER_WAY, RUN, RsaState
from rsa_scheduler.errors import RsaError

API_OPTION = click.option("--api", envvar="RSA_API", default=None,
                          help="rsad address: unix socket path or host:port (default: "
                               "/etc/rsa/client.conf, else /run/rsa/rsad.sock).")


@click.command("jobs")
@API_OPTION
@click.option("--json", "as_json", is_flag=True, help="One JSON object: {\"jobs\": [...]}.")
def jobs(api: str | None, as_json: bool) -> None:
    """List jobs tracked by the RSA."""
    data = ApiClient(api).get("/v1/jobs")
    if as_json:
        echo(json.dumps(data, sort_keys=True))
        return
    rows = data["jobs"]
    if not rows:
        echo("no jobs tracked by the RSA")
        return
    now = time.time()
    echo(f"{'JOBID':<8} {'USER':<8} {'JOB STATE':<9} {'RSA STATE':<16} {'NODES':<10} "
               f"{'FOR':>10} {'STAGED':>11} {'FILES':>11} {'RATE':>7} {'ETA':>8}  MESSAGE")
    for j in rows:
        since = short_duration(now - j["since"]) if j.get("since") else "-"
        st = Staging.of(j, now)
        staged, files, rate, eta = ((st.staged, st.files, st.speed, st.time_left) if st
                                    else ("-", "-", "-", "-"))
        echo(f"{j['job_id']:<8} {j['user']:<8} {(j['job_state'] or '-'):<9} "
                   f"{j['rsa_state']:<16} {(j['nodes'] or '-'):<10} {since:>10} {staged:>11} "
                   f"{files:>11} {rate:>7} {eta:>8}  {' '.join((j.get('message') or '').split())}"
                   .rstrip())


def _this_job(job_id: str | None) -> str:
    """``job_id``, else the job this runs in: an array task is ``<array>_<task>``, as
    squeue and rsad name it (core.jobkey)."""
    key = job_id or key_from_env(os.environ)
    if not key:
        raise click.ClickException("no job id: run inside a job (SLURM_JOB_ID) or give one")
    return key


@click.command("job")
@API_OPTION
@click.argument("job_id", required=False)
@click.option("--json", "as_json", is_flag=True, help="The job and its event timeline.")
def job(api: str | None, job_id: str | None, as_json: bool) -> None:
    """One job in detail, with its event timeline (inside a job: that job)."""
    data = ApiClient(api).get(f"/v1/jobs/{_this_job(job_id)}")
    if as_json:
        echo(json.dumps(data, sort_keys=True))
        return
    for key in ("job_id", "user", "job_state", "rsa_state", "nodes", "cycle", "message"):
        value = data.get(key)
        if key == "job_state" and data.get("end_state"):  # as Slurm recorded the end
            value = f"{value} ({data['end_state']})"
        echo(f"{key:>10}: {value}")
    now = time.time()
    if data.get("rsa_state") == RsaState.QUARANTINED:  # its age, and when it is rescued
        due = (data.get("timers") or {}).get("rescue-due")
        rescue = (f"; rescued to the PFS in {short_duration(max(due - now, 0))} "
                  "(quarantine.rescue_after)" if due else
                  "; waits for an operator (rsa retry, or rsa release --discard-output)")
        echo(f"{'held':>10}: quarantined for {short_duration(now - data['since'])}"
                   f"{rescue}")
    if data.get("rescue_to"):
        whose = "the previous run's" if data.get("rerun_started") else "the"
        echo(f"{'rescue':>10}: {data['rescue_to']} ({whose} quarantined RAMDISK's "
                   "content)")
    st = Staging.of(data, now)
    if st is not None:
        echo(f"{'staging':>10}: {st.phase} {st.staged} ({st.percent}), {st.files} files, "
                   f"{st.speed}, ETA {st.time_left}")
    where = where_output(data)
    if where is not None:
        echo(f"{'output':>10}: {where}")
    echo("  timeline:")
    for ev in data.get("events", []):
        when = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(ev["time"]))
        what = ev["name"]
        if what == "rsa.transition":
            what = f"{ev['from']} -> {ev['to']} ({ev['trigger']})"
        elif what == "job.state":
            said = ev.get("by") or f"{ev.get('slurm_state')}/{ev.get('reason')}"
            what = f"job {ev['from']} -> {ev['to']} ({said})"
        elif what == "job.ended":
            reason = ev.get("reason") or "None"
            what = (f"job ended {ev.get('slurm_state')} (Slurm's record"
                    f"{'' if reason in ('None', 'EpilogSlurmctld') else ', ' + reason})")
        elif what == "job.hold-released":
            what = f"start hold released: {ev.get('why', '')}"
        elif what == "job.rerun-held":
            what = (f"requeued: held until the previous run's output is verified (it is "
                    f"{ev.get('rsa_state', '?')})")
        elif what == "job.rerun-released":
            what = f"rerun hold ended ({ev.get('then', '')}): {ev.get('why', '')}"
        elif what == "compute.unconfirmed":
            what = f"compute nodes {ev.get('nodes')} did not confirm a release: drained"
        elif what == "compute.mounted":
            what = f"{ev.get('node')} mounted the RAMDISK (its Prolog ran late)"
        elif what == "compute.unmounted":
            what = f"{ev.get('node')} took back its mount of the RAMDISK: {ev.get('message')}"
        elif what == "compute.epilog":
            what = f"{ev.get('node')} ran its Epilog: the job's mounts there are down"
        elif what == "compute.left":
            what = (f"{ev.get('node')} kept a mount of the RAMDISK after the job (its "
                    f"Epilog: {ev.get('message')})")
        elif what == "action.outcome":
            what = f"{ev['action']}: {ev['result']} {ev.get('message') or ''}"
        echo(f"    {when}  {what}")




def _command(api: str | None, job_id: str, command: str) -> dict[str, Any]:
    out: dict[str, Any] = ApiClient(api).post(f"/v1/jobs/{job_id}/command",
                                              {"command": command})
    echo(f"job {job_id}: {command}: now {out['rsa_state']}")
    return out


@click.command("retry")
@API_OPTION
@click.argument("job_id")
def retry(api: str | None, job_id: str) -> None:
    """Operators: retry a failed step now (stage-in/out, write-back, reset, teardown)."""
    _command(api, job_id, "retry")


@click.command("release")
@API_OPTION
@click.argument("job_id")
@click.option("--discard-output", is_flag=True,
              help="Drop output that is NOT verified on persistent storage (data loss).")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
def release(api: str | None, job_id: str, discard_output: bool, yes: bool) -> None:
    """Operators: force the teardown of a job's RAMDISK and release its RSA nodes."""
    job = ApiClient(api).get(f"/v1/jobs/{job_id}")
    state = job["rsa_state"]
    if state in HOLDS_USER_DATA:  # output (or changed input) not verified on disk
        if not discard_output:
            raise click.ClickException(
                f"job {job_id} holds output not verified on persistent storage "
                f"({state}); retry with `rsa retry {job_id}`, or pass --discard-output "
                "to destroy it (data loss)")
        command, what = "discard", f"DESTROY the unverified output of job {job_id}"
    elif state == RsaState.TEARDOWN_FAILED:
        command, what = "force-release", (f"release the RSA nodes of job {job_id} "
                                          f"({job['nodes']}) without a clean teardown")
    elif state in PRE_RUN:
        command, what = "cancel-staging", f"stop staging job {job_id} and release its nodes"
    elif state in RUN:
        raise click.ClickException(
            f"job {job_id} runs on its RAMDISK ({state}, RSA nodes {job['nodes']}): they "
            f"are released after it ends; `scancel {job_id}` ends it sooner")
    else:
        raise click.ClickException(f"job {job_id} holds no RSA resources to release "
                                   f"({state})")
    if not yes:
        click.confirm(printable(f"{what}?"), abort=True)
    _command(api, job_id, command)


class _WaitTimeout(RsaError, click.ClickException):
    """Waiting for rsad's answer took longer than --timeout."""

    exit_code = 2


@click.command("input-done")
@API_OPTION
@click.argument("job_id", required=False)
@click.option("--no-wait", is_flag=True,
              help="Return once rsad has the request; do not wait for the output mount.")
@click.option("--timeout", type=click.FloatRange(min=0), default=600.0, show_default=True,
              help="Seconds to wait for the RAMDISK over DATA_OUT.")
def input_done(api: str | None, job_id: str | None, no_wait: bool, timeout: float) -> None:
    """From inside a job: input is read; reset the RAMDISK for output now (seed 004 §3.2).

    Waits until the RAMDISK is mounted over the job's DATA_OUT on all its nodes, so what the
    job writes after this returns lands on the RAMDISK, or until the RSA says the output
    goes to the PFS (no RAMDISK for this run, no DATA_OUT, or the input mount never
    freed). Exit status 0 in both cases, 1 when rsad refuses (or cannot be reached within
    --timeout), 2 when the reset is still under way after --timeout. rsad restarting
    meanwhile (unreachable, or busy starting) is waited for: every step reads the job's
    state first, so a request rsad took before it went is never made twice.
    """
    job_id = _this_job(job_id)
    deadline = time.monotonic() + timeout
    # each request within what is left of --timeout: a hung rsad holds none past it
    client = ApiClient(api).within(deadline)
    path = f"/v1/jobs/{job_id}"
    data = _asked(lambda: client.get(path), deadline, job_id)
    if data["rsa_state"] == RsaState.MOUNTED_INPUT:
        try:
            data = _asked(lambda: client.post(f"{path}/command", {"command": "input-done"}),
                          deadline, job_id)
        except ApiRefused as e:  # the reset timer beat us to it, or rsad took our first
            if e.status in BUSY:  # request before it restarted: look again
                raise
            data = _asked(lambda: client.get(path), deadline, job_id)
            if data["rsa_state"] not in RESET_UNDER_WAY | {RsaState.MOUNTED_OUTPUT}:
                raise
    while not no_wait and data["rsa_state"] in RESET_UNDER_WAY:
        if time.monotonic() >= deadline:
            raise _WaitTimeout(
                f"job {job_id}: the RAMDISK is still not mounted over DATA_OUT after "
                f"{timeout:g}s ({data['rsa_state']}); `rsa job {job_id}` shows why, and "
                "`rsa input-done --timeout` waits longer")
        time.sleep(0.5)
        data = _asked(lambda: client.get(path), deadline, job_id)
    if "spec" not in data:  # a command's answer is the short form: one more look
        data = client.within(max(deadline, time.monotonic() + LAST_LOOK)).get(path)
    echo(_input_done_line(job_id, data))


#: rsad's answers that mean "not now" (429: this user's requests; 503: starting, busy;
#: 500: an internal error, after which rsad stops and its restart replays its log
#: without the request: asked again, as rsa-bb does)
BUSY = frozenset({429, 500, 503})
#: seconds between asks while rsad cannot answer
ASK_AGAIN = 1.0
#: seconds the last look at the job (what ``rsa input-done`` prints) may take past
#: --timeout, the reset being done
LAST_LOOK = 5.0


def _asked(ask: Callable[[], Any], deadline: float, job_id: str) -> Any:
    """``ask()``'s answer; while rsad cannot answer (restarting: unreachable, or 503
    while it replays its log) asked again until ``deadline``, said once on stderr."""
    said = False
    while True:
        try:
            return ask()
        except (ApiUnavailable, ApiRefused) as e:
            if isinstance(e, ApiRefused) and e.status not in BUSY:
                raise
            if time.monotonic() >= deadline:
                raise
            if not said:
                echo(f"rsa input-done: job {job_id}: {e}; asking again until --timeout",
                     err=True)
                said = True
        time.sleep(ASK_AGAIN)


def _reset_partial(data: Mapping[str, Any]) -> str:
    """What the last reset could not mount over DATA_OUT ("" when it mounted everywhere)."""
    resets = [e for e in data.get("events") or () if e.get("name") == "action.outcome"
              and "/reset/" in str(e.get("action", ""))]
    if not resets:
        return ""
    return " ".join(str((resets[-1].get("detail") or {}).get("partial") or "").split())


def _input_done_line(job_id: str, data: Mapping[str, Any]) -> str:
    state = data["rsa_state"]
    out = (data.get("spec") or {}).get("data_out")
    told = " ".join((data.get("message") or "").split())
    partial = _reset_partial(data)
    if state == RsaState.MOUNTED_OUTPUT and partial:
        return (f"job {job_id}: input done; {partial}; on the nodes without the RAMDISK, "
                f"{out} is on the PFS as usual")
    if state == RsaState.MOUNTED_OUTPUT:
        return f"job {job_id}: input done; the RAMDISK is mounted over {out}: write there"
    if state in RESET_UNDER_WAY:
        return f"job {job_id}: input done; the reset is under way ({state})"
    if not out:
        return f"job {job_id}: input done; the job has no #RSA_DATA_OUT: nothing to reset"
    why = f"{state}{': ' + told if told else ''}"
    return (f"job {job_id}: input done; no RAMDISK for output ({why}): {out} is on the PFS "
            "as usual")


@click.command("cancel-staging")
@API_OPTION
@click.argument("job_id")
def cancel_staging(api: str | None, job_id: str) -> None:
    """Do not use the RSA for this run of the job: stop staging, release its RSA nodes."""
    _command(api, job_id, "cancel-staging")
