"""``rsa jobs`` and ``rsa job ID``: what the RSA is doing for each job, from rsad's API.

Users see their own jobs; root and slurm see all. ``--json`` keys are stable:
``job_id, user, job_state, rsa_state, nodes, cycle, message, since, progress`` (plus the
full record fields) — documented in docs/user-guide.md. The table shows ``progress`` as
bytes and files staged of total, rate and ETA (cli/progress.py).
"""

from __future__ import annotations

import json
import time
from typing import Any

import click

from rsa_scheduler.cli.progress import Staging, short_duration
from rsa_scheduler.client import ApiClient

API_OPTION = click.option("--api", envvar="RSA_API", default=None,
                          help="rsad address: unix socket path or host:port "
                               "(default /run/rsa/rsad.sock).")


@click.command("jobs")
@API_OPTION
@click.option("--json", "as_json", is_flag=True, help="One JSON object: {\"jobs\": [...]}.")
def jobs(api: str | None, as_json: bool) -> None:
    """List jobs tracked by the RSA."""
    data = ApiClient(api).get("/v1/jobs")
    if as_json:
        click.echo(json.dumps(data, sort_keys=True))
        return
    rows = data["jobs"]
    if not rows:
        click.echo("no jobs tracked by the RSA")
        return
    now = time.time()
    click.echo(f"{'JOBID':<8} {'USER':<8} {'JOB STATE':<9} {'RSA STATE':<16} {'NODES':<10} "
               f"{'FOR':>10} {'STAGED':>11} {'FILES':>11} {'RATE':>7} {'ETA':>8}  MESSAGE")
    for j in rows:
        since = short_duration(now - j["since"]) if j.get("since") else "-"
        st = Staging.of(j, now)
        staged, files, rate, eta = ((st.staged, st.files, st.speed, st.time_left) if st
                                    else ("-", "-", "-", "-"))
        click.echo(f"{j['job_id']:<8} {j['user']:<8} {(j['job_state'] or '-'):<9} "
                   f"{j['rsa_state']:<16} {(j['nodes'] or '-'):<10} {since:>10} {staged:>11} "
                   f"{files:>11} {rate:>7} {eta:>8}  {' '.join((j.get('message') or '').split())}"
                   .rstrip())


@click.command("job")
@API_OPTION
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True, help="The job and its event timeline.")
def job(api: str | None, job_id: str, as_json: bool) -> None:
    """One job in detail, with its event timeline."""
    data = ApiClient(api).get(f"/v1/jobs/{job_id}")
    if as_json:
        click.echo(json.dumps(data, sort_keys=True))
        return
    for key in ("job_id", "user", "job_state", "rsa_state", "nodes", "cycle", "message"):
        click.echo(f"{key:>10}: {data.get(key)}")
    st = Staging.of(data, time.time())
    if st is not None:
        click.echo(f"{'staging':>10}: {st.phase} {st.staged} ({st.percent}), {st.files} files, "
                   f"{st.speed}, ETA {st.time_left}")
    click.echo("  timeline:")
    for ev in data.get("events", []):
        when = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(ev["time"]))
        what = ev["name"]
        if what == "rsa.transition":
            what = f"{ev['from']} -> {ev['to']} ({ev['trigger']})"
        elif what == "job.state":
            what = f"job {ev['from']} -> {ev['to']} ({ev.get('slurm_state')}/{ev.get('reason')})"
        elif what == "action.outcome":
            what = f"{ev['action']}: {ev['result']} {ev.get('message') or ''}"
        click.echo(f"    {when}  {what}")


#: rsa-states in which the RAMDISK holds output (or changed input) not yet verified on
#: persistent storage (core.states.HOLDS_USER_DATA)
UNVERIFIED = frozenset({"input-writeback", "writeback-failed", "resetting", "mounting-output",
                        "mounted-output", "staging-out", "stage-out-failed", "verifying",
                        "quarantined"})
PRE_RUN = frozenset({"allocated", "fs-building", "fs-failed", "fs-ready", "staging-in",
                     "stage-in-failed", "staged-in", "locked-in", "lock-failed"})


def _command(api: str | None, job_id: str, command: str) -> dict[str, Any]:
    out: dict[str, Any] = ApiClient(api).post(f"/v1/jobs/{job_id}/command",
                                              {"command": command})
    click.echo(f"job {job_id}: {command}: now {out['rsa_state']}")
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
    if state in UNVERIFIED:
        if not discard_output:
            raise click.ClickException(
                f"job {job_id} holds output not verified on persistent storage "
                f"({state}); retry with `rsa retry {job_id}`, or pass --discard-output "
                "to destroy it (data loss)")
        command, what = "discard", f"DESTROY the unverified output of job {job_id}"
    elif state == "teardown-failed":
        command, what = "force-release", (f"release the RSA nodes of job {job_id} "
                                          f"({job['nodes']}) without a clean teardown")
    elif state in PRE_RUN:
        command, what = "cancel-staging", f"stop staging job {job_id} and release its nodes"
    else:
        raise click.ClickException(f"job {job_id} holds no RSA resources to release "
                                   f"({state})")
    if not yes:
        click.confirm(f"{what}?", abort=True)
    _command(api, job_id, command)


@click.command("input-done")
@API_OPTION
@click.argument("job_id", required=False, envvar="SLURM_JOB_ID")
def input_done(api: str | None, job_id: str | None) -> None:
    """From inside a job: input is read; reset the RAMDISK for output now (seed 004 §3.2)."""
    if not job_id:
        raise click.ClickException("no job id: run inside a job (SLURM_JOB_ID) or give one")
    _command(api, job_id, "input-done")


@click.command("cancel-staging")
@API_OPTION
@click.argument("job_id")
def cancel_staging(api: str | None, job_id: str) -> None:
    """Do not use the RSA for this run of the job: stop staging, release its RSA nodes."""
    _command(api, job_id, "cancel-staging")
