"""``rsa config``: check, show and document the configuration.

Owns the ``config`` click group (``check``, ``show``, ``reference``), its output formats
and exit codes, and :func:`config_option`, the ``--config FILE`` / ``$RSA_CONFIG`` option
other commands reuse. Loading and validation are :mod:`rsa_scheduler.config.loader`.

Exit codes: 0 valid; 1 invalid or unreadable, with every problem on stderr as
``FILE[:LINE]: KEY: REASON`` (with ``--json``: one JSON object on stdout either way).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
import yaml
from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet

from rsa_scheduler.config.loader import (
    ENV_VAR,
    ConfigErrors,
    defaults_text,
    load_config,
    load_defaults,
)
from rsa_scheduler.config.reference import generate_reference, splice
from rsa_scheduler.config.schema import Config, format_size_exact
from rsa_scheduler.core.policy import Tier

F = TypeVar("F", bound=Callable[..., Any])

FILE_HELP = f"Config file (default: ${ENV_VAR}, else /etc/rsa/rsa.yaml)."


def config_option(f: F) -> F:
    """``--config FILE`` (env ``RSA_CONFIG``) for commands that load the config."""
    option = click.option(
        "--config",
        "config_file",
        metavar="FILE",
        envvar=ENV_VAR,
        type=click.Path(dir_okay=False),
        help=FILE_HELP,
    )
    return option(f)


@click.group()
def config() -> None:
    """Check, show and document the rsa configuration."""


def file_argument(f: F) -> F:
    """``[FILE]`` or ``--config FILE`` (as ``rsad --config``); neither: ``$RSA_CONFIG``.

    No envvar on the option: the loader reads ``$RSA_CONFIG`` itself, so its errors can
    say the path came from there.
    """
    f = click.option(
        "--config", "config_file", metavar="FILE", type=click.Path(dir_okay=False),
        help="Same as FILE.",
    )(f)
    return click.argument("file", required=False, type=click.Path(dir_okay=False))(f)


def _one_file(file: str | None, config_file: str | None) -> str | None:
    if file is not None and config_file is not None and file != config_file:
        raise click.UsageError("give FILE or --config FILE, not both")
    return file if file is not None else config_file


@config.command()
@file_argument
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def check(file: str | None, config_file: str | None, as_json: bool) -> None:
    """Validate FILE (or --config FILE; default: $RSA_CONFIG, else /etc/rsa/rsa.yaml)
    merged over the shipped defaults.

    Prints a one-line summary and exits 0, or prints every problem as
    FILE:LINE: KEY: REASON and exits 1.
    """
    cfg = _load_or_exit(_one_file(file, config_file), as_json)
    if as_json:
        _echo_json({"ok": True, "file": str(cfg.source), **summary_dict(cfg)})
        return
    for warning in cfg.warnings:
        click.echo(f"warning: {warning}", err=True)
    click.echo(summary(cfg))


@config.command()
@file_argument
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of YAML.")
@click.option(
    "--defaults",
    is_flag=True,
    help="Print the shipped, commented defaults (a starting point for a site file).",
)
def show(file: str | None, config_file: str | None, as_json: bool, defaults: bool) -> None:
    """Print the effective configuration: FILE (or --config FILE) merged over the shipped
    defaults.

    Sizes and durations are printed in Slurm's dialect; the output is itself a valid
    config file.
    """
    file = _one_file(file, config_file)
    if defaults:
        if file is not None:
            raise click.UsageError("give FILE or --defaults, not both")
        if as_json:
            _echo_json(load_defaults().to_dict())
        else:
            click.echo(defaults_text(), nl=False)
        return
    cfg = _load_or_exit(file, as_json)
    for warning in cfg.warnings:
        click.echo(f"warning: {warning}", err=True)
    if as_json:
        _echo_json(cfg.to_dict())
    else:
        click.echo(f"# effective configuration of {cfg.source}")
        click.echo(yaml.safe_dump(cfg.to_dict(), sort_keys=False, allow_unicode=True), nl=False)


@config.command()
@click.option(
    "--update",
    metavar="DOC",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="Rewrite the reference block of DOC (e.g. docs/operator-guide.md) in place.",
)
def reference(update: Path | None) -> None:
    """Print the markdown config reference generated from the schema."""
    if update is None:
        click.echo(generate_reference(), nl=False)
        return
    text = update.read_text(encoding="utf-8")
    try:
        new = splice(text)
    except ValueError as e:
        raise click.ClickException(f"{update}: {e}") from e
    if new != text:
        update.write_text(new, encoding="utf-8")
        click.echo(f"{update}: config reference updated")
    else:
        click.echo(f"{update}: config reference already up to date")


def _load_or_exit(file: str | None, as_json: bool) -> Config:
    try:
        return load_config(file)
    except ConfigErrors as e:
        if as_json:
            _echo_json({"ok": False, "errors": [issue.to_dict() for issue in e.issues]})
        else:
            for issue in e.issues:
                click.echo(str(issue), err=True)
        # sys.exit, not ctx.exit: under rsa's main() (standalone_mode=False) click would
        # turn ctx.exit(1) into a return value and lose the status.
        sys.exit(1)


def _echo_json(data: Any) -> None:
    click.echo(json.dumps(data, ensure_ascii=False))


def summary_dict(cfg: Config) -> dict[str, Any]:
    """Pool and policy facts for ``check --json``."""
    tiers: dict[str, Any] = {}
    policy = cfg.allocation
    for tier, nodes in cfg.pool.by_tier().items():
        tiers[tier.value] = {
            "nodes": len(nodes),
            "hostlist": str(NodeSet.fromlist([n.name for n in nodes], resolver=RESOLVER_NOGROUP)),
            "capacity": format_size_exact(sum(n.capacity for n in nodes)),
            "backend": cfg.filesystem.backend.get(tier),
            "price": policy.price_of(tier),  # per node-hour: tier auto's cost model
            "bandwidth": format_size_exact(policy.bandwidth_of(tier)),  # per node, per second
        }
    return {
        "nodes": sum(t["nodes"] for t in tiers.values()),
        "tiers": tiers,
        "allocation": {
            "ratio": policy.ratio,
            "min_nodes": policy.min_nodes,
            "max_nodes": policy.max_nodes,
            "max_request": policy.max_request,
            "default_tier": policy.default_tier.value,
            "io_time": policy.io_time,
        },
        "lockin": cfg.slurm.lockin.method.value,
        "warnings": list(cfg.warnings),
    }


def summary(cfg: Config) -> str:
    """One line: ``OK FILE: 6 RSA nodes (ram: rsa[1-4], 8G total, moosefs; ...); ...``."""
    facts = summary_dict(cfg)
    parts = []
    for tier in Tier:
        t = facts["tiers"].get(tier.value)
        if t is not None:
            parts.append(f"{tier.value}: {t['hostlist']}, {t['capacity']} total, {t['backend']}")
    policy = cfg.allocation
    total = facts["nodes"]
    return (
        f"OK {cfg.source}: {total} RSA node{'s' if total != 1 else ''} ({'; '.join(parts)}); "
        f"1 RSA node per {policy.ratio} compute node{'s' if policy.ratio != 1 else ''}, "
        f"{policy.min_nodes}-{policy.max_nodes} per job; lock-in {facts['lockin']}"
    )
