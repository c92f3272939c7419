"""``rsa nodes``, ``rsa drain NODE``, ``rsa resume NODE``: the RSA node pool."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

from rsa_scheduler.cli.config import config_option
from rsa_scheduler.cli.jobs import API_OPTION
from rsa_scheduler.cli.show import echo
from rsa_scheduler.client import ApiClient
from rsa_scheduler.core.units import format_size

if TYPE_CHECKING:
    from rsa_scheduler.fs.nodecheck import NodeReport
    from rsa_scheduler.fs.pfscheck import Seen


@click.group("nodes", invoke_without_command=True)
@API_OPTION
@click.option("--json", "as_json", is_flag=True, help="{\"nodes\": [...]} (stable keys).")
@click.pass_context
def nodes(ctx: click.Context, api: str | None, as_json: bool) -> None:
    """Per RSA node: tier, state, capacity, the job holding it.

    `rsa nodes check` says what the RSA nodes lack for the configured filesystem."""
    if ctx.invoked_subcommand is not None:
        return
    data = ApiClient(api).get("/v1/status")["nodes"]
    if as_json:
        echo(json.dumps({"nodes": data}, sort_keys=True))
        return
    echo(f"{'NODE':<12} {'TIER':<5} {'STATE':<9} {'CAPACITY':>9}  {'JOB':<10} REASON")
    for n in data:
        why = n.get("reason") or ""
        if why and n.get("by"):
            why = f"{why} [{n['by']}]"
        echo(f"{n['name']:<12} {n['tier']:<5} {n['state']:<9} "
                   f"{format_size(n['capacity']):>9}  {n['job'] or '-':<10} {why}".rstrip())


def _set(api: str | None, node: str, state: str, reason: str) -> None:
    ApiClient(api).post(f"/v1/nodes/{node}/state", {"state": state, "reason": reason})
    echo(f"{node}: {state}" + (f" ({reason})" if reason else ""))


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


@nodes.command("check")
@click.argument("names", required=False)
@config_option
@click.option("--compute", is_flag=True,
              help="Check this compute node instead (run it as root there).")
@click.option("--json", "as_json", is_flag=True,
              help='{"nodes": {NAME: {"ok", "lacks", "error"}}}.')
def check(names: str | None, config_file: str | None, compute: bool, as_json: bool) -> None:
    """What each RSA node (NAMES: a hostlist, default all) lacks for its tier's filesystem,
    the data path and the site's PFS (mounted at the same paths as on this host, the same
    filesystem: staging.allowed_roots and shared_dirs): one line each, with the fix.
    Connects as rsad does (ssh.* of the configuration: run it as root on rsad's host,
    before rsad starts too); changes nothing. Exit 1 when a node lacks something or
    cannot be reached.

    With --compute: what this compute node lacks (rsad's address in
    /etc/rsa/client.conf and its API answering from here, rsa on a job's PATH, the node
    hooks' configuration and filesystem clients, slurm.conf's Prolog and Epilog, the SPANK
    plugin built for this node's Slurm)."""
    if compute:
        if names:
            raise click.UsageError("--compute checks this node: give no NAMES")
        from rsa_scheduler.node.check import check_compute

        _report([check_compute(config_file)], as_json)
        return
    _report(check_rsa_nodes(config_file, names), as_json)


def check_rsa_nodes(config_file: str | None, names: str | None = None) -> list[NodeReport]:
    """Each RSA node's read-only check (``rsa nodes check``; NAMES a hostlist, default
    all), connecting as rsad does; a bad configuration or NAMES is a ClickException."""
    from concurrent.futures import ThreadPoolExecutor

    from ClusterShell.NodeSet import NodeSet

    from rsa_scheduler.config import load_config
    from rsa_scheduler.config.backends import make_backend
    from rsa_scheduler.errors import RsaError
    from rsa_scheduler.fs.nodecheck import check_node
    from rsa_scheduler.remote import HostPool

    try:
        cfg = load_config(config_file)
    except (RsaError, OSError) as e:
        raise click.ClickException(str(e)) from e
    members = {n.name: n for n in cfg.pool.members()}
    wanted = list(NodeSet(names)) if names else list(members)
    unknown = [n for n in wanted if n not in members]
    if unknown:
        raise click.ClickException(f"not RSA nodes of {cfg.source}: {','.join(unknown)}")
    hosts = HostPool.from_config(cfg)
    try:  # configured as rsad configures them: the needs follow the backends' options
        backends = {str(t): make_backend(cfg, str(t), hosts)
                    for t in {n.tier for n in members.values()}}
        needs = {t: b.needs() for t, b in backends.items()}
    except RsaError as e:
        raise click.ClickException(str(e)) from e
    pfs = _pfs_here([str(r) for r in (*cfg.staging.allowed_roots, *cfg.staging.shared_dirs)])

    def one(name: str) -> NodeReport:
        node = members[name]
        return check_node(name, hosts[name], needs[str(node.tier)], str(node.pool_dir),
                          pfs=pfs, facts=backends[str(node.tier)].node_facts())

    with ThreadPoolExecutor(max_workers=16) as pool:
        return list(pool.map(one, wanted))


def _pfs_here(roots: list[str]) -> dict[str, Seen]:
    """The PFS roots as this host (rsad's) sees them; one note per root it has not."""
    from rsa_scheduler.fs.pfscheck import parse_probe, probe_argv
    from rsa_scheduler.runner import run

    seen = parse_probe(run(probe_argv(list(dict.fromkeys(roots))), timeout=60).stdout)
    for root, here in seen.items():
        if not here.fstype:
            echo(f"note: {root} (staging) is not on this host: not compared", err=True)
    return seen


def _report(reports: list[NodeReport], as_json: bool) -> None:
    if as_json:
        echo(json.dumps({"nodes": {r.node: {"ok": r.ok, "lacks": list(r.lacks),
                                                  "error": r.error, "facts": dict(r.facts)}
                                         for r in reports}}, sort_keys=True))
    else:
        for r in reports:
            for line in r.lines():
                echo(line)
    if not all(r.ok for r in reports):
        raise SystemExit(1)
