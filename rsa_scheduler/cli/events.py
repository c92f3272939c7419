"""``rsa events [--follow]``: the event log (users see their own jobs' events)."""

from __future__ import annotations

import json
import time
from typing import Any

import click

from rsa_scheduler.cli.jobs import API_OPTION
from rsa_scheduler.client import ApiClient


def _line(ev: dict[str, Any]) -> str:
    when = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(ev["time"]))
    rest = {k: v for k, v in ev.items() if k not in ("seq", "time", "job_id", "name")}
    if ev["name"] == "rsa.transition":
        text = f"{rest.get('from')} -> {rest.get('to')} ({rest.get('trigger')})"
    elif ev["name"] == "action.outcome":
        text = f"{rest.get('action')}: {rest.get('result')} {rest.get('message') or ''}"
    else:
        text = " ".join(f"{k}={v}" for k, v in sorted(rest.items()))
    return f"{ev['seq']:>8} {when} {ev['job_id']:<10} {ev['name']:<16} {text}".rstrip()


@click.command("events")
@API_OPTION
@click.option("--job", "job_id", default=None, help="Only this job's events.")
@click.option("--since", default=0, show_default=True, help="Events after this sequence number.")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new events (Ctrl-C stops).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def events(api: str | None, job_id: str | None, since: int, follow: bool,
           as_json: bool) -> None:
    """Print the RSA event log."""
    client = ApiClient(api)
    query = f"&job={job_id}" if job_id else ""
    while True:
        batch = client.get(f"/v1/events?since={since}{query}")["events"]
        for ev in batch:
            click.echo(json.dumps(ev, sort_keys=True) if as_json else _line(ev))
            since = max(since, int(ev["seq"]))
        if not follow:
            return
        time.sleep(1.0)
