"""Slurm hook programs: PrologSlurmctld and EpilogSlurmctld tell rsad at once when a job
starts and ends, so it does not wait for its next squeue poll (seed 004 §3.2–3.3).

Owns ``rsa-hook`` (``rsa-hook prolog_slurmctld|epilog_slurmctld``). Hooks are thin: they
read only Slurm's environment, make one API call with a hard timeout, and ALWAYS exit 0 —
a failing PrologSlurmctld would requeue the job, and the RSA must never hurt a job. Any
problem is one line on stderr, in syslog (facility daemon, tag ``rsa-hook``) and in
slurmctld's own log (``SlurmctldLogFile``, which SlurmUser owns: Slurm drops what these
hooks print and says nothing of a hook that exits 0), and rsad learns the same from its
poll.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from rsa_scheduler.errors import RsaError

if TYPE_CHECKING:
    from rsa_scheduler.client import Found

HOOKS = ("prolog_slurmctld", "epilog_slurmctld")
DEFAULT_TIMEOUT = 2.0
SYSLOG = "/dev/log"
SLURM_CONF = "/etc/slurm/slurm.conf"
LOG_DAEMON_WARNING = (3 << 3) | 4  # syslog facility daemon, severity warning


def say(line: str, env: Mapping[str, str] | None = None) -> None:
    """One line for the operator: on stderr, to syslog (``journalctl -t rsa-hook``) and,
    run by slurmctld (``env``: the hook's), in slurmctld's log. slurmctld discards
    PrologSlurmctld's output; a host without a syslog socket keeps the other two."""
    sys.stderr.write(line + "\n")
    import socket

    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.settimeout(1.0)
            sock.connect(SYSLOG)
            sock.send(f"<{LOG_DAEMON_WARNING}>rsa-hook[{os.getpid()}]: {line}".encode())
    except OSError:
        pass
    if env is not None:
        to_slurmctld_log(line, env)


def slurmctld_log_file(env: Mapping[str, str]) -> str | None:
    """``SlurmctldLogFile`` of slurm.conf (``SLURM_CONF``, else /etc/slurm/slurm.conf;
    keys are case-insensitive, as Slurm reads them), or None."""
    try:
        with open(env.get("SLURM_CONF") or SLURM_CONF, encoding="utf-8",
                  errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    found = None
    for raw in text.splitlines():
        key, sep, value = raw.split("#", 1)[0].partition("=")
        if sep and key.strip().lower() == "slurmctldlogfile":
            found = value.strip() or None
    return found


def to_slurmctld_log(line: str, env: Mapping[str, str]) -> None:
    """Append ``line`` to slurmctld's log as an error of its own format, when the hook
    runs under slurmctld (``SLURM_SCRIPT_CONTEXT``) and may write that file (SlurmUser's:
    slurmctld writes it as SlurmUser). One write with O_APPEND, as slurmctld's own: no
    line of either is cut. Never created, never through a symlink."""
    if not env.get("SLURM_SCRIPT_CONTEXT", "").endswith("_slurmctld"):
        return
    path = slurmctld_log_file(env)
    if not path or not path.startswith("/"):
        return
    import time

    now = time.time()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(now)) + f".{int(now % 1 * 1000):03d}"
    text = " ".join(line.split())  # one line, whatever the error held
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.write(fd, f"[{stamp}] error: {text}\n".encode())
    except OSError:
        pass
    finally:
        os.close(fd)


def _api_address(env: Mapping[str, str]) -> tuple[str, float]:
    """rsad's address and the call timeout: RSA_API, else /etc/rsa/client.conf, else
    daemon.api of the configuration (rsa.yaml, which SlurmUser may not be allowed to read:
    then this raises, naming the fix, and never guesses)."""
    from rsa_scheduler.client import locate

    timeouts: list[float] = []
    found = locate(env, lambda: _from_config(env, timeouts))
    timeout = (float(env["RSA_HOOK_TIMEOUT"]) if env.get("RSA_HOOK_TIMEOUT")
               else timeouts[0] if timeouts else DEFAULT_TIMEOUT)
    return found.address, timeout


def _from_config(env: Mapping[str, str], timeouts: list[float]) -> Found:
    """daemon.api of rsa.yaml: its socket where this host has it, else its listen."""
    from rsa_scheduler.client import Found, client_conf_path
    from rsa_scheduler.config import load_config
    from rsa_scheduler.config.loader import resolve_config_path

    path = resolve_config_path(None, env=env)
    client = client_conf_path(env)
    if not os.access(path, os.R_OK) and os.path.exists(path):
        import pwd

        who = pwd.getpwuid(os.getuid()).pw_name
        raise RsaError(f"cannot find rsad: no RSA_API, no {client}, and {path} is not "
                       f"readable by {who} (as the operator guide sets it up: root, 0640); "
                       f"write rsad's address into {client} (api = HOST:PORT, mode "
                       "0644) on this host, or set RSA_API in the hook's wrapper")
    cfg = load_config(env.get("RSA_CONFIG"), env=env)
    timeouts.append(cfg.hooks.api_timeout)
    listen = cfg.daemon.api.listen
    here = os.path.exists(cfg.daemon.api.socket)
    address = (str(cfg.daemon.api.socket) if here or not listen
               else f"{listen.host}:{listen.port}")
    return Found(address, str(path))


def payload(hook: str, env: Mapping[str, str]) -> dict[str, object]:
    """What the hook tells rsad, from Slurm's hook environment (see tests/data/slurm)."""
    from rsa_scheduler.core.jobkey import from_env

    data: dict[str, object] = {
        **from_env(env),  # an array task names its task too (core.jobkey)
        "user": env.get("SLURM_JOB_USER", ""),
        "uid": env.get("SLURM_JOB_UID", ""),
        # a hetjob leader's hooks name every component's nodes
        "nodes": env.get("SLURM_HET_JOB_NODELIST") or env.get("SLURM_JOB_NODELIST")
        or env.get("SLURM_NODELIST", ""),
        "num_nodes": env.get("SLURM_JOB_NUM_NODES", ""),
    }
    if hook == "epilog_slurmctld":
        data["exit_code"] = env.get("SLURM_JOB_EXIT_CODE", "")
    return data


def run(hook: str, env: Mapping[str, str]) -> int:
    if hook not in HOOKS:
        say(f"rsa-hook: unknown hook {hook!r}; use one of {', '.join(HOOKS)}")
        return 0
    data = payload(hook, env)
    if not data["job_id"]:
        say(f"rsa-hook {hook}: no SLURM_JOB_ID in the environment")
        return 0
    try:
        from rsa_scheduler.client import ApiClient

        address, timeout = _api_address(env)
        ApiClient(address, timeout=timeout).post(f"/v1/hooks/{hook}", data)
    except Exception as e:  # never fail the job: rsad's poll will see the change
        say(f"rsa-hook {hook} job {data['job_id']}: rsad not told ({e}); it will notice "
            "on its next poll", env)
    return 0


USAGE = """usage: rsa-hook prolog_slurmctld|epilog_slurmctld

Tells rsad at once that a Slurm job starts (PrologSlurmctld) or ended (EpilogSlurmctld),
from the environment slurmctld gives the hook (SLURM_JOB_ID, SLURM_JOB_NODELIST, ...).
slurm.conf on the controller (Slurm runs these without arguments; the shipped wrappers
name the hook):
  PrologSlurmctld=/usr/lib/rsa-scheduler/rsa-prolog-slurmctld
  EpilogSlurmctld=/usr/lib/rsa-scheduler/rsa-epilog-slurmctld
Always exits 0: a failing PrologSlurmctld would requeue the job; a problem is one line
on stderr, in syslog (tag rsa-hook: journalctl -t rsa-hook) and in slurmctld's log
(SlurmctldLogFile of slurm.conf, SLURM_CONF). rsad's address: RSA_API,
else /etc/rsa/client.conf (RSA_CLIENT_CONFIG; world-readable: rsad's socket where this
host has it, else api = HOST:PORT), else daemon.api of the configuration (RSA_CONFIG,
default /etc/rsa/rsa.yaml), which SlurmUser must then be able to read. Timeout:
RSA_HOOK_TIMEOUT, else hooks.api_timeout when the configuration was read, else 2 s.
"""


def main() -> None:
    if any(a in ("-h", "--help") for a in sys.argv[1:]):
        sys.stdout.write(USAGE)
        sys.exit(0)
    if any(a == "--version" for a in sys.argv[1:]):
        from rsa_scheduler import __version__

        sys.stdout.write(f"rsa-hook {__version__}\n")
        sys.exit(0)
    hook = sys.argv[1] if len(sys.argv) > 1 else os.path.basename(sys.argv[0])
    sys.exit(run(hook.replace("rsa-", "").replace("-", "_"), os.environ))
