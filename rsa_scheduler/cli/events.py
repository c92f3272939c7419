"""``rsa events [--follow]``: the event log (users see their own jobs' events)."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

import click

from rsa_scheduler.cli.jobs import API_OPTION
from rsa_scheduler.cli.show import echo
from rsa_scheduler.client import ApiClient


def describe(ev: Mapping[str, Any]) -> str:
    """What an event says, without its seq, time, job and name (also used by ``rsa top``)."""
    rest = {k: v for k, v in ev.items() if k not in ("seq", "time", "job_id", "name")}
    if ev["name"] == "rsa.transition":
        return f"{rest.get('from')} -> {rest.get('to')} ({rest.get('trigger')})"
    if ev["name"] == "action.outcome":
        return f"{rest.get('action')}: {rest.get('result')} {rest.get('message') or ''}".rstrip()
    return " ".join(f"{k}={v}" for k, v in sorted(rest.items()))


def _line(ev: dict[str, Any]) -> str:
    when = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(ev["time"]))
    return f"{ev['seq']:>8} {when} {ev['job_id']:<10} {ev['name']:<16} {describe(ev)}".rstrip()


@click.command("events")
@API_OPTION
@click.option("--job", "job_id", default=None,
              help="Only this job's events; @pool: the RSA nodes' and the whole RSA's "
                   "(operators).")
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
            echo(json.dumps(ev, sort_keys=True) if as_json else _line(ev))
            since = max(since, int(ev["seq"]))
        if not follow:
            return
        time.sleep(1.0)
