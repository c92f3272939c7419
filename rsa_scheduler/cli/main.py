"""The ``rsa`` click group; sub-commands live one module per noun and load lazily.

Lazy loading keeps ``rsa directives check`` (run from job_submit tests and hooks) fast:
only the module of the invoked noun is imported.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys

import click

from rsa_scheduler import __version__
from rsa_scheduler.cli.show import printable
from rsa_scheduler.errors import RsaError, user_line

# noun -> "module:attribute" of a click command or group
COMMANDS: dict[str, str] = {
    "directives": "rsa_scheduler.cli.directives:directives",
    "config": "rsa_scheduler.cli.config:config",
    "sim": "rsa_scheduler.cli.sim:sim",
    "jobs": "rsa_scheduler.cli.jobs:jobs",
    "job": "rsa_scheduler.cli.jobs:job",
    "retry": "rsa_scheduler.cli.jobs:retry",
    "release": "rsa_scheduler.cli.jobs:release",
    "input-done": "rsa_scheduler.cli.jobs:input_done",
    "cancel-staging": "rsa_scheduler.cli.jobs:cancel_staging",
    "wait": "rsa_scheduler.cli.wait:wait",
    "status": "rsa_scheduler.cli.status:status",
    "nodes": "rsa_scheduler.cli.nodes:nodes",
    "drain": "rsa_scheduler.cli.nodes:drain",
    "resume": "rsa_scheduler.cli.nodes:resume",
    "events": "rsa_scheduler.cli.events:events",
    "top": "rsa_scheduler.cli.top:top",
    "selftest": "rsa_scheduler.cli.selftest:selftest",
    "admin": "rsa_scheduler.cli.admin:admin",
}


class LazyGroup(click.Group):
    """A click group whose sub-commands are imported only when used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        names = set(super().list_commands(ctx))
        for name, target in COMMANDS.items():
            if importlib.util.find_spec(target.split(":")[0]) is not None:
                names.add(name)
        return sorted(names)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return super().get_command(ctx, cmd_name)
        module_name, attr = target.split(":")
        if importlib.util.find_spec(module_name) is None:
            return None
        command = getattr(importlib.import_module(module_name), attr)
        assert isinstance(command, click.Command)
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="rsa")
@click.option("--debug", is_flag=True, envvar="RSA_DEBUG", help="Show tracebacks on errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """rsa — the RAMDISK Storage Accelerator for SLURM.

    Users check their #RSA_* directives (rsa directives check) and follow their jobs (rsa
    job, rsa jobs, rsa top); operators watch and steer rsad (rsa status, rsa nodes, rsa
    events, rsa retry, rsa release, rsa drain/resume), check its configuration (rsa
    config check) and the whole path after an install (rsa selftest). Each command talks
    to rsad over its socket; what a user may see and do is limited to their own jobs."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


def main() -> None:
    """Entry point: run the CLI; RsaError becomes one line on stderr and exit status 1."""
    try:
        rc = cli.main(standalone_mode=False)
        # In non-standalone mode click returns ctx.exit(code) values instead of exiting.
        if isinstance(rc, int) and rc:
            sys.exit(rc)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.UsageError as e:
        e.show()
        sys.exit(e.exit_code)
    except click.ClickException as e:  # may quote rsad's answers: printable (cli/show.py)
        click.echo(f"Error: {printable(e.format_message())}", err=True)
        sys.exit(e.exit_code)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(1)
    except RsaError as e:
        if "--debug" in sys.argv:
            raise
        click.echo(f"rsa: error: {printable(user_line(e))}", err=True)
        sys.exit(1)
