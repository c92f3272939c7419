"""``rsa jobs`` and ``rsa job ID``: what the RSA is doing for each job, from rsad's API.

Users see their own jobs; root and slurm see all. ``--json`` keys are stable:
``job_id, user, job_state, rsa_state, nodes, cycle, message, since, progress`` (plus the
full record fields) — documented in docs/user-guide.md.
"""

from __future__ import annotations

import json
import time
from typing import Any

import click

from rsa_scheduler.client import ApiClient
from rsa_scheduler.core.units import format_duration

API_OPTION = click.option("--api", envvar="RSA_API", default=None,
                          help="rsad address: unix socket path or host:port "
                               "(default /run/rsa/rsad.sock).")


def _progress(job: dict[str, Any]) -> str:
    p = job.get("progress") or {}
    if not p:
        return ""
    done, total = p.get("bytes_done"), p.get("bytes_total")
    if done is not None and total:
        return f"{100 * done / total:.0f}%"
    return ""


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
    click.echo(f"{'JOBID':<10} {'USER':<10} {'JOB STATE':<10} {'RSA STATE':<17} "
               f"{'NODES':<12} {'FOR':>9} {'PROG':>5}  MESSAGE")
    for j in rows:
        since = format_duration(now - j["since"]) if j.get("since") else ""
        click.echo(f"{j['job_id']:<10} {j['user']:<10} {(j['job_state'] or ''):<10} "
                   f"{j['rsa_state']:<17} {(j['nodes'] or '-'):<12} {since:>9} "
                   f"{_progress(j):>5}  {j.get('message') or ''}")


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
