"""``rsa status``: the RSA pool and its jobs at a glance (operators; users see the pool)."""

from __future__ import annotations

import json
import time

import click

from rsa_scheduler.cli.jobs import API_OPTION
from rsa_scheduler.cli.progress import short_duration
from rsa_scheduler.cli.show import echo
from rsa_scheduler.client import ApiClient
from rsa_scheduler.core.units import format_size


@click.command("status")
@API_OPTION
@click.option("--json", "as_json", is_flag=True, help="One JSON object (stable keys).")
def status(api: str | None, as_json: bool) -> None:
    """RSA nodes by tier and state, jobs by rsa-state, failures needing attention."""
    data = ApiClient(api).get("/v1/status")
    if as_json:
        echo(json.dumps(data, sort_keys=True))
        return
    by: dict[tuple[str, str], int] = {}
    cap: dict[str, int] = {}
    quarantined = data.get("quarantined") or []
    stuck = {q["job_id"] for q in quarantined}
    held: dict[str, int] = {}  # tier -> capacity quarantined RAMDISKs hold
    for n in data["nodes"]:
        state = n["state"] if n["state"] != "up" else ("allocated" if n["job"] else "idle")
        by[(n["tier"], state)] = by.get((n["tier"], state), 0) + 1
        cap[n["tier"]] = cap.get(n["tier"], 0) + n["capacity"]
        if n["job"] in stuck:
            held[n["tier"]] = held.get(n["tier"], 0) + n["capacity"]
    if data.get("draining"):
        in_flight = sum(c for s, c in data["jobs_by_rsa_state"].items()
                        if s not in ("none", "released", "declined"))
        echo(f"DRAINING: {data['draining']}; {in_flight} job(s) in flight")
    for line in (data.get("hooks_behind") or {}).values():  # a rolling upgrade not done
        echo(f"UPGRADE: {line}")
    echo("RSA nodes:")
    for tier in sorted(cap):
        parts = ", ".join(f"{c} {s}" for (t, s), c in sorted(by.items()) if t == tier)
        quar = (f"; {format_size(held[tier])} held by quarantined output" if held.get(tier)
                else "")
        echo(f"  {tier:<4} {format_size(cap[tier]):>7} total  {parts}{quar}")
    jobs = data["jobs_by_rsa_state"]
    echo("Jobs: " + (", ".join(f"{c} {s}" for s, c in sorted(jobs.items())) or "none"))
    echo(f"On-deck: {', '.join(data['on_deck']) or 'none'}   "
               f"actions running: {data['running_actions']}   "
               f"last cycle: {data['last_cycle_seconds'] * 1000:.0f} ms   "
               f"Slurm: {'ok' if data['slurm_ok'] else 'UNREACHABLE'}")
    if quarantined:
        now = time.time()
        echo("Quarantined (output kept on its RAMDISK, not on the PFS; fix the cause, "
                   "then rsa retry ID):")
        for q in quarantined:
            echo(f"  job {q['job_id']} ({q['user']}) for "
                       f"{short_duration(now - q['since'])} on {q['nodes'] or '-'}, "
                       f"{format_size(q['capacity'])} held")
    if data["alerts"]:
        echo("Needs attention:")
        for a in data["alerts"][-10:]:
            echo(f"  job {a['job_id']}: {a['message']}")
