"""``rsa nodes``, ``rsa drain NODE``, ``rsa resume NODE``: the RSA node pool."""

from __future__ import annotations

import json

import click

from rsa_scheduler.cli.jobs import API_OPTION
from rsa_scheduler.client import ApiClient
from rsa_scheduler.core.units import format_size


@click.command("nodes")
@API_OPTION
@click.option("--json", "as_json", is_flag=True, help="{\"nodes\": [...]} (stable keys).")
def nodes(api: str | None, as_json: bool) -> None:
    """Per RSA node: tier, state, capacity, the job holding it."""
    data = ApiClient(api).get("/v1/status")["nodes"]
    if as_json:
        click.echo(json.dumps({"nodes": data}, sort_keys=True))
        return
    click.echo(f"{'NODE':<12} {'TIER':<5} {'STATE':<9} {'CAPACITY':>9}  {'JOB':<10} REASON")
    for n in data:
        why = n.get("reason") or ""
        if why and n.get("by"):
            why = f"{why} [{n['by']}]"
        click.echo(f"{n['name']:<12} {n['tier']:<5} {n['state']:<9} "
                   f"{format_size(n['capacity']):>9}  {n['job'] or '-':<10} {why}".rstrip())


def _set(api: str | None, node: str, state: str, reason: str) -> None:
    ApiClient(api).post(f"/v1/nodes/{node}/state", {"state": state, "reason": reason})
    click.echo(f"{node}: {state}" + (f" ({reason})" if reason else ""))


REASON = click.option("--reason", default="", help="Why (shown by rsa nodes and logged).")


@click.command("drain")
@API_OPTION
@REASON
@click.argument("node")
def drain(api: str | None, reason: str, node: str) -> None:
    """Never allocate NODE again until resumed (a job holding it keeps it)."""
    _set(api, node, "drained", reason)


@click.command("resume")
@API_OPTION
@REASON
@click.argument("node")
def resume(api: str | None, reason: str, node: str) -> None:
    """Make a drained or down NODE allocatable again (also one the health loop took out:
    it is probed again and taken out again if still unhealthy)."""
    _set(api, node, "up", reason)
