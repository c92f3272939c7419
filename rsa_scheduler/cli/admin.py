"""``rsa admin drain`` / ``rsa admin resume``: maintenance of the whole RSA (issue 33).

Drain stops rsad giving RSA nodes to jobs that hold none; what is in flight goes on
(stage-ins, lock-ins, runs, stage-outs, teardowns). Resume undoes it. rsad logs both, so
a drain survives its restart. Operators only (root, the Slurm user).
"""

from __future__ import annotations

import click

from rsa_scheduler.cli.jobs import API_OPTION
from rsa_scheduler.client import ApiClient


@click.group("admin")
def admin() -> None:
    """Maintenance of the whole RSA (operators)."""


@admin.command("drain")
@API_OPTION
@click.option("--reason", default="", help="Why (shown by rsa status and to held-off jobs).")
@click.option("--pfs", "to_pfs", is_flag=True,
              help="Jobs that hold no RSA nodes run from the PFS now (their holds "
                   "released) instead of waiting for the resume: before removing the RSA.")
def drain(api: str | None, reason: str, to_pfs: bool) -> None:
    """Take no new RSA jobs: jobs that hold no RSA nodes get none (under early start
    wait they stay held up to staging.wait_timeout, then read the PFS; under fallback
    they read the PFS; with --pfs they all start from the PFS at once); jobs in flight
    finish, their stage-outs run."""
    out = ApiClient(api).post("/v1/admin/drain",
                              {"on": True, "reason": reason, "pfs": to_pfs})
    busy = int(out.get("in_flight", 0))
    new = ("new jobs run from the PFS (held ones released)" if to_pfs
           else "no new jobs")
    click.echo(f"RSA draining: {new}; {busy} job(s) in flight finish "
               "(rsa status shows them; rsa admin resume undoes this)")


@admin.command("resume")
@API_OPTION
def resume(api: str | None) -> None:
    """Take new RSA jobs again (after rsa admin drain)."""
    ApiClient(api).post("/v1/admin/drain", {"on": False})
    click.echo("RSA resumed: new jobs get RSA nodes again")
