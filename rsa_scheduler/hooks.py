"""Slurm hook programs: PrologSlurmctld and EpilogSlurmctld tell rsad at once when a job
starts and ends, so it does not wait for its next squeue poll (seed 004 §3.2–3.3).

Owns ``rsa-hook`` (``rsa-hook prolog_slurmctld|epilog_slurmctld``). Hooks are thin: they
read only Slurm's environment, make one API call with a hard timeout, and ALWAYS exit 0 —
a failing PrologSlurmctld would requeue the job, and the RSA must never hurt a job. Any
problem is one line on stderr (slurmctld's log) and rsad learns the same from its poll.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

HOOKS = ("prolog_slurmctld", "epilog_slurmctld")
DEFAULT_TIMEOUT = 2.0


def _api_address(env: Mapping[str, str]) -> tuple[str | None, float]:
    """rsad's address and the call timeout: RSA_API, else the config file."""
    if env.get("RSA_API"):
        return env["RSA_API"], float(env.get("RSA_HOOK_TIMEOUT", DEFAULT_TIMEOUT))
    from rsa_scheduler.config import load_config

    cfg = load_config(env.get("RSA_CONFIG"), env=env)
    listen = cfg.daemon.api.listen
    here = os.path.exists(cfg.daemon.api.socket)
    address = str(cfg.daemon.api.socket) if here or not listen else f"{listen.host}:{listen.port}"
    return address, cfg.hooks.api_timeout


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
        sys.stderr.write(f"rsa-hook: unknown hook {hook!r}; use one of {', '.join(HOOKS)}\n")
        return 0
    data = payload(hook, env)
    if not data["job_id"]:
        sys.stderr.write(f"rsa-hook {hook}: no SLURM_JOB_ID in the environment\n")
        return 0
    try:
        from rsa_scheduler.client import ApiClient

        address, timeout = _api_address(env)
        ApiClient(address, timeout=timeout).post(f"/v1/hooks/{hook}", data)
    except Exception as e:  # never fail the job: rsad's poll will see the change
        sys.stderr.write(f"rsa-hook {hook} job {data['job_id']}: rsad not told ({e}); "
                         "it will notice on its next poll\n")
    return 0


USAGE = """usage: rsa-hook prolog_slurmctld|epilog_slurmctld

Tells rsad at once that a Slurm job starts (PrologSlurmctld) or ended (EpilogSlurmctld),
from the environment slurmctld gives the hook (SLURM_JOB_ID, SLURM_JOB_NODELIST, ...).
slurm.conf on the controller (Slurm runs these without arguments; the shipped wrappers
name the hook):
  PrologSlurmctld=/usr/lib/rsa-scheduler/rsa-prolog-slurmctld
  EpilogSlurmctld=/usr/lib/rsa-scheduler/rsa-epilog-slurmctld
Always exits 0: a failing PrologSlurmctld would requeue the job. rsad's address: RSA_API,
else daemon.api of the configuration (RSA_CONFIG, default /etc/rsa/rsa.yaml).
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
