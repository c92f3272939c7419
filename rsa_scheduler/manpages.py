"""Man pages of the installed programs, generated from their own help (one source: the
click commands' docstrings and options, the hooks' usage texts), and the environment
variables each program honours (:data:`ENVIRONMENT`, beside the click options' own).

``python -m rsa_scheduler.manpages [DIR]`` writes ``rsa.1``, ``rsad.8``, ``rsa-hook.8``,
``rsa-bb.8``, ``rsa-prolog.8`` and ``rsa-epilog.8`` into DIR (default ``docs/man``);
the Debian package installs them (``debian/rsa-scheduler.manpages``) and the unit tests
fail when the committed pages are stale or groff warns about them.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import click

from rsa_scheduler import __version__

MAN = Path(__file__).resolve().parent.parent / "docs" / "man"
DATE = "2026-11-26"  # bumped with the version; no clock, so the pages are reproducible
SOURCE = f"rsa-scheduler {__version__}"
SEE_ALSO = ("rsa(1)", "rsad(8)", "rsa-hook(8)", "rsa-bb(8)", "rsa-prolog(8)",
            "rsa-epilog(8)", "slurm.conf(5)", "burst_buffer.conf(5)")
FILES = ("/etc/rsa/rsa.yaml  the configuration (RSA_CONFIG overrides)",
         "/var/lib/rsa/rsa.db  rsad's state (event log and snapshots)",
         "/usr/share/doc/rsa-scheduler/  the operator and user guides")

_JOB = ("SLURM_JOB_ID, SLURM_JOBID, SLURM_ARRAY_JOB_ID, SLURM_ARRAY_TASK_ID, "
        "SLURM_HET_JOB_ID, SLURM_HET_JOB_OFFSET, SLURM_PACK_JOB_ID, SLURM_PACK_JOB_OFFSET")
_HOOK_API = (
    ("RSA_CLIENT_CONFIG", "The client file that says where rsad is (default "
                          "/etc/rsa/client.conf)."),
    ("RSA_CONFIG", "The configuration file (default /etc/rsa/rsa.yaml), whose daemon.api "
                   "says where rsad is when neither RSA_API nor the client file does."),
)
#: the environment variables each page lists ("NAME, NAME": one entry for several), beside
#: its click options' own ``envvar`` (added by :func:`environment`, saying which option).
#: tests/unit/test_manpage_environment.py reads the code of each program and fails on a
#: variable it reads that its page lacks, or one its page lists that it does not read.
ENVIRONMENT: dict[str, tuple[tuple[str, str], ...]] = {
    "rsa.1": (
        ("RSA_API", "rsad's address, a socket path or HOST:PORT. Without it (and --api), "
                    "/etc/rsa/client.conf says where rsad is, else rsad's socket "
                    "/run/rsa/rsad.sock."),
        ("RSA_CLIENT_CONFIG", "The client file that says where rsad is (default "
                              "/etc/rsa/client.conf)."),
        ("RSA_CONFIG", "The configuration file of the commands that read it (default "
                       "/etc/rsa/rsa.yaml)."),
        ("RSA_DEBUG", "1 (or true, yes, on): tracebacks on errors."),
        (_JOB, "Inside a job: the job rsa job and rsa input-done act on when given no "
               "JOB_ID (an array task as ARRAYID_TASK, a heterogeneous job's component "
               "by its leader's id)."),
        ("SLURM_CONF", "The slurm.conf whose Prolog and Epilog rsa nodes check --compute "
                       "reads (default /etc/slurm/slurm.conf); rsa selftest passes it on "
                       "to the commands it runs as the user."),
    ),
    "rsad.8": (
        ("RSA_CONFIG", "The configuration file (default /etc/rsa/rsa.yaml)."),
        ("NOTIFY_SOCKET", "Set by systemd (Type=notify): rsad says there when it is ready, "
                          "its status, and when it stops."),
        ("WATCHDOG_USEC, WATCHDOG_PID", "Set by systemd (WatchdogSec=): rsad pings the "
                                        "watchdog every half of WATCHDOG_USEC, unless "
                                        "WATCHDOG_PID names another process."),
        ("SLURM_CONF, SLURM_CLUSTERS", "Passed on to the Slurm commands rsad runs "
                                       "(squeue, scontrol, ...): which slurm.conf and "
                                       "clusters. Nothing else of rsad's environment is "
                                       "(their PATH and LANG are fixed)."),
    ),
    "rsa-hook.8": (
        (_JOB, "The job (an array task, a heterogeneous job's component)."),
        ("SLURM_JOB_USER, SLURM_JOB_UID", "The job's user."),
        ("SLURM_HET_JOB_NODELIST, SLURM_JOB_NODELIST, SLURM_NODELIST",
         "The job's compute nodes (the first of them that is set)."),
        ("SLURM_JOB_NUM_NODES", "How many compute nodes the job has."),
        ("SLURM_JOB_EXIT_CODE", "epilog_slurmctld: the batch script's wait status."),
        ("SLURM_SCRIPT_CONTEXT", "Ending in _slurmctld (slurmctld runs the hook): a "
                                 "problem is written to slurmctld's log too."),
        ("SLURM_CONF", "The slurm.conf that names slurmctld's log (SlurmctldLogFile; "
                       "default /etc/slurm/slurm.conf)."),
        ("RSA_API", "rsad's address; else the client file, else daemon.api of the "
                    "configuration."),
        *_HOOK_API,
        ("RSA_HOOK_TIMEOUT", "Seconds the call to rsad may take (else hooks.api_timeout "
                             "when the configuration was read, else 2)."),
    ),
    "rsa-bb.8": (
        ("RSA_API", "rsad's address, unless --api gives it; else the client file, else "
                    "daemon.api of the configuration."),
        *_HOOK_API,
        ("RSA_HOOK_TIMEOUT", "Seconds a call to rsad may take (else hooks.api_timeout "
                             "when the configuration was read), never less than 30: rsad "
                             "answers a busy moment itself within 20 s (503, 504), and "
                             "rsa-bb asks again."),
    ),
}
_NODE_HOOK: tuple[tuple[str, str], ...] = (
    (_JOB, "The job (an array task, a heterogeneous job's component)."),
    ("SLURMD_NODENAME", "This compute node."),
    ("SLURM_HET_JOB_NODELIST, SLURM_NODELIST, SLURM_JOB_NODELIST",
     "The job's compute nodes (the first of them that is set)."),
    ("SLURM_JOB_USER, SLURM_JOB_UID, SLURM_JOB_GID", "The job's user: told to rsad; its "
                                                    "paths are checked as this user."),
    ("SPANK_RSA_*", "The job's --rsa-* options (the SPANK plugin): the Prolog tells such a "
                    "job what it got even when rsad has nothing for it."),
    ("RSA_API, RSA_ALLOWED_ROOTS", "Both set: rsad's address and staging.allowed_roots "
                                   "(colon-separated), and the configuration is not read. "
                                   "RSA_API alone: rsad's address, instead of the client "
                                   "file or daemon.api of the configuration."),
    ("RSA_HOOK_TIMEOUT, RSA_PROLOG_TIMEOUT, RSA_SHARED_DIRS",
     "With RSA_API and RSA_ALLOWED_ROOTS: seconds the call to rsad may take (default 2), "
     "the hard timeout of the Prolog and of the Epilog alike (RSA_PROLOG_TIMEOUT, default "
     "10, as hooks.timeout is both's: the Epilog's wrapper kills it at its backstop, "
     "RSA_EPILOG_BACKSTOP, 20 s, so raise that with it) and staging.shared_dirs "
     "(colon-separated), instead of the configuration's hooks.api_timeout, hooks.timeout "
     "and staging.shared_dirs."),
    ("RSA_MOUNTS", "node or job (the job's mounts in a mount namespace of its own), "
                   "instead of hooks.mounts."),
    ("RSA_NODE_DIR", "Where the hooks keep each job's state on the node (default "
                     "/run/rsa/node)."),
    _HOOK_API[0],
    ("RSA_CONFIG", "The configuration file (default /etc/rsa/rsa.yaml): the hooks' "
                   "settings, and rsad's address (daemon.api) when neither RSA_API nor the "
                   "client file says; not read when RSA_API and RSA_ALLOWED_ROOTS are both "
                   "set."),
)
ENVIRONMENT["rsa-prolog.8"] = ENVIRONMENT["rsa-epilog.8"] = _NODE_HOOK


def esc(text: str) -> str:
    """``text`` safe as roff body text: backslashes as ``\\e``, '-' as a minus glyph,
    non-ASCII as ``\\[uXXXX]``, a leading '.' or "'" (a request) neutralised."""
    out = []
    text = text.replace("\\", "\\e").replace("-", "\\-")
    text = "".join(c if ord(c) < 128 else f"\\[u{ord(c):04X}]" for c in text)
    for line in text.splitlines():
        out.append("\\&" + line if line.startswith((".", "'")) else line)
    return "\n".join(out)


def paragraphs(text: str) -> str:
    """Help text (blank-line separated paragraphs; indented lines kept as they are) as
    roff: paragraphs filled, indented blocks verbatim."""
    blocks: list[str] = []
    for para in inspect.cleandoc(click.unstyle(text)).split("\n\n"):
        lines = para.splitlines()
        if lines and lines[0].strip() == "\b":  # click's "do not rewrap" marker
            lines = lines[1:]
            blocks.append(".nf\n" + esc("\n".join(lines)) + "\n.fi")
        elif any(ln.startswith("  ") for ln in lines):
            blocks.append(".nf\n" + esc("\n".join(lines)) + "\n.fi")
        else:
            blocks.append(esc(" ".join(ln.strip() for ln in lines)))
    return "\n.PP\n".join(blocks)


def environment(page: str, cmd: click.Command | None = None, name: str = "") -> str:
    """The ENVIRONMENT section of ``page``: its :data:`ENVIRONMENT` entries and, for a
    click command, every option's ``envvar`` (which option of which commands)."""
    told = dict(ENVIRONMENT.get(page, ()))
    options: dict[str, dict[str, list[str]]] = {}  # envvar -> option -> commands
    if cmd is not None:
        root = click.Context(cmd, info_name=name, **cmd.context_settings)
        for path, sub, ctx in _walk(cmd, root, (name,)):
            for param in sub.get_params(ctx):
                if isinstance(param, click.Option) and isinstance(param.envvar, str):
                    opt = max(param.opts, key=len)
                    options.setdefault(param.envvar, {}).setdefault(opt, []).append(
                        " ".join(path))
    entries = []
    for var in sorted(set(told) | set(options)):
        text = told.get(var, "")
        for opt, paths in options.get(var, {}).items():
            said = (f"{paths[0]} {opt}" if len(paths) == 1 else
                    f"the option {opt} of {' and '.join(paths)}" if len(paths) <= 3 else
                    f"the option {opt} (of {len(paths)} commands)")
            text = f"{text} Same as {said}.".strip()
        entries.append(f".TP\n{esc(var)}\n{esc(text)}\n")
    return ".SH ENVIRONMENT\n" + "".join(entries) if entries else ""


def header(name: str, section: int, summary: str) -> str:
    return (f'.TH {name.upper()} {section} "{DATE}" "{SOURCE}" "rsa-scheduler"\n'
            f".SH NAME\n{esc(name)} \\- {esc(summary)}\n")


def footer(name: str) -> str:
    see = ", ".join(f"\\fB{esc(s.split('(')[0])}\\fR({s.split('(')[1]}"
                    for s in SEE_ALSO if not s.startswith(name + "("))
    files = "".join(f".TP\n{esc(f.split('  ')[0])}\n{esc(f.split('  ')[1])}\n"
                    for f in FILES)
    return f".SH FILES\n{files}.SH SEE ALSO\n{see}\n"


def _options(cmd: click.Command, ctx: click.Context) -> str:
    out = []
    for param in cmd.get_params(ctx):
        if not isinstance(param, click.Option) or (ctx.parent and "--help" in param.opts):
            continue  # arguments are in the usage line; --help once, on the top page
        record = param.get_help_record(ctx)
        if record is None:
            continue
        flags, text = record
        out.append(f".TP\n\\fB{esc(flags)}\\fR\n{esc(text) if text else ''}".rstrip())
    return "\n".join(out)


def _walk(cmd: click.Command, ctx: click.Context, path: tuple[str, ...]
          ) -> Iterator[tuple[tuple[str, ...], click.Command, click.Context]]:
    yield path, cmd, ctx
    if isinstance(cmd, click.Group):
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                sub_ctx = click.Context(sub, parent=ctx, info_name=name,
                                        **sub.context_settings)
                yield from _walk(sub, sub_ctx, (*path, name))


def click_page(cmd: click.Command, name: str, section: int, summary: str) -> str:
    """A whole page for a click command: its usage, help, options, and one subsection
    per sub-command (recursively) with its own usage, help and options."""
    # the command's own context settings (its -h), as when it runs: a context made
    # without them gives --help alone, or -h too once click cached the option (a run)
    root = click.Context(cmd, info_name=name, **cmd.context_settings)
    parts = [header(name, section, summary), ".SH SYNOPSIS\n",
             f"\\fB{esc(name)}\\fR {esc(' '.join(cmd.collect_usage_pieces(root)))}\n",
             ".SH DESCRIPTION\n", paragraphs(cmd.help or summary), "\n"]
    opts = _options(cmd, root)
    if opts:
        parts += [".SH OPTIONS\n", opts, "\n"]
    subs = list(_walk(cmd, root, (name,)))[1:]
    if subs:
        parts.append(".SH COMMANDS\n")
        for path, sub, ctx in subs:
            usage = " ".join(sub.collect_usage_pieces(ctx))
            parts += [f".SS {esc(' '.join(path))}\n",
                      f"\\fB{esc(' '.join(path))}\\fR {esc(usage)}\n.PP\n",
                      paragraphs(sub.help or sub.short_help or ""), "\n"]
            opts = _options(sub, ctx)
            if opts:
                parts += [opts, "\n"]
    parts += [".SH EXIT STATUS\n0 on success; 1 with one line on standard error "
              "(\\fBrsa: error: ...\\fR) when the request failed; 2 for a usage error.\n",
              environment(f"{name}.{section}", cmd, name), footer(name)]
    return "".join(parts)


def text_page(name: str, section: int, summary: str, usage: str) -> str:
    """A page for a program whose help is a usage text: its first block (up to the first
    blank line) is the synopsis, the rest the description."""
    block, _, rest = usage.strip().partition("\n\n")
    lines = block.splitlines()
    lines[0] = lines[0].removeprefix("usage:").strip()
    synopsis = "\n".join(ln.replace("       ", "", 1) if i else ln
                         for i, ln in enumerate(lines))
    return "".join([header(name, section, summary), ".SH SYNOPSIS\n",
                    f".nf\n\\fB{esc(synopsis)}\\fR\n.fi\n", ".SH DESCRIPTION\n",
                    paragraphs(rest),
                    "\n.SH OPTIONS\n.TP\n\\fB\\-h\\fR, \\fB\\-\\-help\\fR\nthis text\n"
                    ".TP\n\\fB\\-\\-version\\fR\nthe version\n",
                    environment(f"{name}.{section}"), footer(name)])


def pages() -> dict[str, Callable[[], str]]:
    """File name -> generator of its text."""
    def rsa() -> str:
        from rsa_scheduler.cli.main import cli
        return click_page(cli, "rsa", 1, "the RAMDISK Storage Accelerator's command line")

    def rsad() -> str:
        from rsa_scheduler.daemon.main import rsad as command
        return click_page(command, "rsad", 8, "the RAMDISK Storage Accelerator daemon")

    def rsa_hook() -> str:
        from rsa_scheduler.hooks import USAGE
        return text_page("rsa-hook", 8, "tell rsad a Slurm job starts or ended", USAGE)

    def rsa_bb() -> str:
        from rsa_scheduler.bb import USAGE
        return text_page("rsa-bb", 8, "burst_buffer.lua's call into rsad (native mode)",
                         USAGE)

    def node_hook(hook: str) -> Callable[[], str]:
        def page() -> str:
            from rsa_scheduler.node.hooks import _WHAT, USAGE
            text = USAGE.format(hook=hook, Hook=hook.capitalize(), what=_WHAT[hook])
            return text_page(f"rsa-{hook}", 8, f"the compute node's Slurm {hook}", text)
        return page

    return {"rsa.1": rsa, "rsad.8": rsad, "rsa-hook.8": rsa_hook, "rsa-bb.8": rsa_bb,
            "rsa-prolog.8": node_hook("prolog"), "rsa-epilog.8": node_hook("epilog")}


def stale(where: Path = MAN) -> list[str]:
    """The pages in ``where`` that differ from what the code generates (or are missing)."""
    return [name for name, gen in pages().items()
            if not (where / name).is_file() or (where / name).read_text() != gen()]


def write(where: Path = MAN) -> list[str]:
    where.mkdir(parents=True, exist_ok=True)
    written = []
    for name, gen in pages().items():
        text = gen()
        target = where / name
        if not target.is_file() or target.read_text() != text:
            target.write_text(text)
            written.append(name)
    return written


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    where = Path(args[0]) if args else MAN
    for name in write(where):
        print(f"wrote {where / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
