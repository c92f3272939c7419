"""``rsa selftest --user NAME --dir PATH``: after an install, one tiny RSA job through the
real Slurm as a real user, and a line per step with its time; on failure the step and one
line saying what to fix. Exit status 0 only when every step passed.

Owns the doing (run as root on rsad's host): the RSA nodes as rsad sees them and their
read-only check (``rsa nodes check``), the job's files made and read as the user (never
as root: the directory is theirs), ``sbatch`` as the user, rsad asked about the job until
its RSA cycle is over, the job cancelled if it failed. The judging is
:mod:`rsa_scheduler.cli.selfsteps`.
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from rsa_scheduler.cli.config import config_option
from rsa_scheduler.cli.jobs import API_OPTION
from rsa_scheduler.cli.selfsteps import (
    FAILED,
    PASSED,
    RUNNING,
    STEPS,
    Step,
    job_steps,
    nodes_step,
    report,
)
from rsa_scheduler.cli.show import echo
from rsa_scheduler.client import ApiClient, ApiRefused, ApiUnavailable
from rsa_scheduler.errors import RsaError

if TYPE_CHECKING:
    from rsa_scheduler.config import Config

#: a job's PATH after a login (node/check.py LOGIN_PATH): where `rsa` must be for jobs
JOB_PATH = "/usr/local/bin:/usr/bin:/bin"
FILES = 3  # input files of the test job, a few hundred bytes each
POLL = 1.0
#: seconds rsad may take to learn a submitted job (its next queue read) before the submit
#: check fails
TRACK_WAIT = 120.0


def input_files(stamp: str) -> dict[str, bytes]:
    """The test job's input: small files whose bytes name the run."""
    return {f"f{i}": f"rsa selftest {stamp} file {i}\n".encode() * (40 * i)
            for i in range(1, FILES + 1)}


def expected_sums(files: Mapping[str, bytes]) -> str:
    """What the job writes to out/sums: ``sha256sum f1 f2 f3`` of its input."""
    return "".join(f"{hashlib.sha256(data).hexdigest()}  {name}\n"
                   for name, data in sorted(files.items()))


def job_script(base: Path) -> str:
    """The test job: reads its input from the RAMDISK, says input-done (the reset), and
    writes the input's checksums to the RAMDISK over DATA_OUT (the stage-out)."""
    return "\n".join([
        "#!/bin/bash",
        "#SBATCH -J rsa-selftest",
        "#SBATCH -t 5",
        f"#SBATCH -o {base}/job.out",
        f"#RSA_DATA_IN={base}/in",
        f"#RSA_DATA_OUT={base}/out",
        "#RSA_RESET=input-done",
        "set -eu",
        f"sums=$(cd {base}/in && sha256sum {' '.join(f'f{i}' for i in range(1, FILES + 1))})",
        "rsa input-done",
        f"printf '%s\\n' \"$sums\" > {base}/out/sums",
        "",
    ])


class AsUser:
    """Runs commands as one user: their uid, gid and groups, a clean environment."""

    def __init__(self, name: str) -> None:
        try:
            self.pw = pwd.getpwnam(name)
        except KeyError as e:
            raise click.UsageError(f"--user {name}: no such user") from e
        self.groups = os.getgrouplist(name, self.pw.pw_gid)

    def run(self, argv: Sequence[str], *, stdin: str | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
        env = {"PATH": JOB_PATH, "HOME": self.pw.pw_dir, "USER": self.pw.pw_name,
               "LOGNAME": self.pw.pw_name, "LANG": "C.UTF-8"}
        if os.environ.get("SLURM_CONF"):
            env["SLURM_CONF"] = os.environ["SLURM_CONF"]
        return subprocess.run(list(argv), input=stdin, capture_output=True, text=True,
                              timeout=timeout, check=False, cwd="/",
                              user=self.pw.pw_uid, group=self.pw.pw_gid,
                              extra_groups=self.groups, umask=0o022, env=env)


def _nodes(api: ApiClient, config_file: str | None) -> Step:
    from rsa_scheduler.cli.nodes import check_rsa_nodes

    start = time.monotonic()
    try:
        status = list(api.get("/v1/status")["nodes"])
    except (ApiUnavailable, ApiRefused) as e:
        return Step("nodes", FAILED, time.monotonic() - start, f"rsad: {e}",
                    "start rsad (systemctl start rsad) and check it with rsad --check")
    up = ",".join(str(n["name"]) for n in status if n.get("state") == "up")
    try:
        reports = check_rsa_nodes(config_file, up) if up else []
    except click.ClickException as e:
        return Step("nodes", FAILED, time.monotonic() - start, e.format_message(),
                    "run rsa selftest as root on rsad's host, with rsad's configuration "
                    "(--config)")
    return nodes_step(status, {r.node: r.lacks for r in reports},
                      {r.node: r.error for r in reports if r.error},
                      time.monotonic() - start)


def _prepare(user: AsUser, base: Path, files: Mapping[str, bytes]) -> str:
    """The job's directory, input and script, made as the user; "" or why not."""
    made = user.run(["mkdir", "-p", "--", f"{base}/in", f"{base}/out"])
    if made.returncode != 0:
        return made.stderr.strip() or "mkdir failed"
    for name, data in files.items():
        done = user.run(["sh", "-c", 'cat > "$1"', "sh", f"{base}/in/{name}"],
                        stdin=data.decode())
        if done.returncode != 0:
            return done.stderr.strip()
    done = user.run(["sh", "-c", 'cat > "$1"', "sh", f"{base}/job.sh"], stdin=job_script(base))
    return done.stderr.strip() if done.returncode != 0 else ""


def _submit(user: AsUser, base: Path, allowed: Sequence[str]) -> tuple[Step, str, float]:
    """The submit check: the directory inside staging.allowed_roots, the files made, sbatch
    accepting the job. (the step, the job id, when sbatch returned)."""
    start = time.monotonic()
    name = user.pw.pw_name
    if allowed and not any(base == Path(r) or Path(r) in base.parents for r in allowed):
        return (Step("submit check", FAILED, 0.0, f"{base} is outside staging.allowed_roots",
                     f"give --dir inside one of {', '.join(allowed)} (where {name} may "
                     "write)"), "", time.time())
    why = _prepare(user, base, input_files(base.name))
    if why:
        return (Step("submit check", FAILED, time.monotonic() - start,
                     f"cannot make the test files as {name}: {why}",
                     f"give --dir a directory on the PFS that {name} may write"), "",
                time.time())
    # --chdir, not a cwd: the child would chdir as root, before it is the user
    done = user.run(["sbatch", "--parsable", f"--chdir={base}", f"{base}/job.sh"])
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["sbatch failed"])[-1]
        return (Step("submit check", FAILED, time.monotonic() - start,
                     f"sbatch refused the job: {last}",
                     f"submit it as {name} to see every line: runuser -u {name} -- sbatch "
                     f"{base}/job.sh"), "", time.time())
    return (Step("submit check", RUNNING, time.monotonic() - start),
            done.stdout.strip().split(";")[0], time.time())


def _ask(api: ApiClient, job_id: str) -> dict[str, Any] | None:
    try:
        answer: dict[str, Any] = api.get(f"/v1/jobs/{job_id}")
    except ApiRefused as e:
        if e.status == 404:
            return None
        raise
    return answer


def _verify_output(user: AsUser, base: Path, step: Step) -> Step:
    """The verify step also reads the output on the PFS, as the user."""
    got = user.run(["cat", "--", f"{base}/out/sums"])
    want = expected_sums(input_files(base.name))
    if got.returncode == 0 and got.stdout == want:
        return replace(step, detail="the output on the PFS is what the job wrote")
    return replace(step, status=FAILED,
                   detail=f"{base}/out/sums on the PFS is not what the job wrote "
                          f"({got.stderr.strip() or 'its content differs'})",
                   fix=f"compare {base}/out with the job's RAMDISK (rsa events --job "
                       "JOB: the verify step's manifest) and the PFS client on the RSA nodes")


def _job_said(user: AsUser, base: Path, job: Mapping[str, Any] | None) -> str:
    """How the job itself ended, when not well: its end state and its output's last line."""
    end = str((job or {}).get("end_state") or "")
    if end in ("", "COMPLETED"):
        return ""
    out = user.run(["tail", "-n", "1", "--", f"{base}/job.out"])
    last = out.stdout.strip() if out.returncode == 0 else ""
    return f"; the job ended {end}" + (f": {last} ({base}/job.out)" if last else "")


def _follow(api: ApiClient, user: AsUser, base: Path, job_id: str, submitted: float,
            timeout: float, say: Any) -> list[Step]:
    """Ask rsad until the job's RSA cycle is over, a step failed or ``timeout``; print
    each step's line once it is decided (submit check first)."""
    deadline = time.monotonic() + timeout
    untracked_until = time.monotonic() + min(TRACK_WAIT, timeout)
    shown = 0
    checked: Step | None = None  # the verify step, once the output was read on the PFS
    while True:
        try:
            job = _ask(api, job_id)
        except (ApiUnavailable, ApiRefused) as e:
            job, unreachable = None, str(e)
        else:
            unreachable = ""
        timed_out = time.monotonic() > deadline
        state = str((job or {}).get("rsa_state") or "")
        over = timed_out or state in ("released", "declined") or (
            job is None and not shown and time.monotonic() > untracked_until)
        steps = job_steps(job, submitted, job is not None or bool(shown), over)
        if timed_out:
            steps = [replace(s, status=FAILED, detail=f"still {s.status} after {timeout:g}s"
                             + (f" (rsad: {unreachable})" if unreachable else ""),
                             fix=f"rsa job {job_id} shows where it waits")
                     if s.status == RUNNING else s for s in steps]
        verify = next(i for i, s in enumerate(steps) if s.name == "verify")
        if steps[verify].status == PASSED:
            checked = checked or _verify_output(user, base, steps[verify])
            steps[verify] = checked
        bad = next((i for i, s in enumerate(steps) if s.failed), None)
        if bad is not None and shown <= bad:
            steps[bad] = replace(steps[bad], detail=steps[bad].detail
                                 + _job_said(user, base, job))
        while shown < len(steps) and steps[shown].status in (PASSED, FAILED):
            say(steps[shown])
            shown += 1
        if bad is not None or all(s.status == PASSED for s in steps) or over:
            return steps
        time.sleep(POLL)


@click.command("selftest")
@API_OPTION
@config_option
@click.option("--user", "user_name", required=True, envvar="RSA_SELFTEST_USER",
              help="Submit the test job as this user.")
@click.option("--dir", "directory", required=True, type=click.Path(file_okay=False),
              envvar="RSA_SELFTEST_DIR",
              help="A directory of the user's on the PFS (inside staging.allowed_roots); "
                   "the test makes rsa-selftest-<time>/ in it, removed when it passed.")
@click.option("--timeout", type=float, default=600.0, show_default=True,
              help="Seconds the job may take, from submission to its RAMDISK's teardown.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object at the end.")
def selftest(api: str | None, config_file: str | None, user_name: str, directory: str,
             timeout: float, as_json: bool) -> None:
    """Submit a tiny RSA job as --user and report each step: nodes, submit check,
    stage-in, mount, reset, stage-out, verify, teardown, with its time; on failure the
    step and what to fix. Run it as root on rsad's host after installing or changing
    the RSA. Exit status 0 only when every step passed, 1 otherwise."""
    if os.geteuid() != 0:
        raise click.UsageError("rsa selftest submits as --user and checks the RSA nodes as "
                               "rsad does: run it as root on rsad's host")
    user = AsUser(user_name)
    cfg = _config(config_file)
    if user.pw.pw_uid == 0 and cfg is not None and cfg.slurm.mode.value == "native":
        raise click.UsageError(f"--user {user_name}: in native mode (slurm.mode: native) "
                               "Slurm gives root's jobs no burst buffer, so the RSA never "
                               "serves them: give an ordinary user")
    base = Path(os.path.abspath(directory)) / time.strftime("rsa-selftest-%Y%m%d-%H%M%S")
    client = ApiClient(api)

    def say(step: Step) -> None:
        if not as_json:
            for line in report([step]):  # rsad's messages: a user's stderr among them
                echo(line)

    if not as_json:
        click.echo(f"rsa selftest: as {user_name}, in {base}")
    began = time.monotonic()
    steps = [_nodes(client, config_file)]
    say(steps[0])
    job_id = ""
    if not steps[0].failed:
        allowed = [str(r) for r in cfg.staging.allowed_roots] if cfg is not None else []
        submit, job_id, submitted = _submit(user, base, allowed)
        if submit.failed:
            say(submit)
            steps.append(submit)
        else:
            followed = _follow(client, user, base, job_id, submitted, timeout, say)
            first = followed[0]
            steps += [replace(first, seconds=(first.seconds or 0.0) + (submit.seconds or 0.0)),
                      *followed[1:]]
    steps += [Step(name) for name in STEPS[len(steps):]]
    passed = all(s.status == PASSED for s in steps)
    if job_id and not passed:
        subprocess.run(["scancel", job_id], capture_output=True, timeout=60, check=False)
    elif passed:
        user.run(["rm", "-rf", "--", str(base)], timeout=120)
    if as_json:
        click.echo(json.dumps({"passed": passed, "job_id": job_id, "dir": str(base),
                               "seconds": round(time.monotonic() - began, 1),
                               "steps": [asdict(s) for s in steps]}, sort_keys=True))
    else:
        for s in steps:
            if s.status not in (PASSED, FAILED):
                say(s)
        failed = next((s for s in steps if s.failed), None)
        click.echo(f"rsa selftest: passed ({len(steps)} steps, "
                   f"{time.monotonic() - began:.1f}s)" if passed else
                   f"rsa selftest: FAILED at {failed.name if failed else 'a step'}"
                   + (f"; job {job_id} cancelled, its files kept in {base}" if job_id else ""))
    if not passed:
        raise SystemExit(1)


def _config(config_file: str | None) -> Config | None:
    """rsad's configuration, or None when it cannot be read (the nodes step needs it
    too, and says so)."""
    from rsa_scheduler.config import load_config

    try:
        return load_config(config_file)
    except (RsaError, OSError):
        return None
