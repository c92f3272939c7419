"""What a job's tasks are told about its RSA on this node: the ``job.env`` file.

Owns the file ``<node dir>/<node>/<job>/job.env`` (the per-job directory of
:class:`~rsa_scheduler.node.mounts.JobMounts`): ``KEY=VALUE`` lines that the SPANK plugin
(``slurm_plugins/spank/rsa_jobenv.c``) reads in slurmstepd, as root, before every step and
exports to the step's tasks. The node Prolog writes it once it knows what the job gets at
its start; the job's node agent rewrites it after the reset. Pure functions decide the
variables; :func:`write` is the only I/O. Standard library only.

Variables (docs/spank.md): ``RSA_STATE`` — ``input`` (DATA_IN is the staged RAMDISK),
``union`` (DATA_IN is the staged part over the PFS directory), ``output`` (the RAMDISK is
mounted over DATA_OUT), ``pfs`` (an RSA job that reads and writes the PFS now) or
``unavailable`` (the plugin's own answer when a job asked by option and this file is
missing); ``RSA_RAMDISK`` (the job's path the RAMDISK is under now), ``RSA_DATA_IN``,
``RSA_DATA_OUT``, ``RSA_INPUT`` (``ro``/``rw``/``union``), ``RSA_MOUNTS`` (``node`` or
``job``: who else sees the mount) and ``RSA_MESSAGE`` (why, when it is ``pfs``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

FILE = "job.env"
KEYS = ("RSA_STATE", "RSA_RAMDISK", "RSA_DATA_IN", "RSA_DATA_OUT", "RSA_INPUT",
        "RSA_MOUNTS", "RSA_MESSAGE")
STATES = ("input", "union", "output", "pfs", "unavailable")
MAX_VALUE = 4095  # bytes; rsa_jobenv.c drops longer values

Env = dict[str, str]


def _clean(text: str) -> str:
    """One line without control characters, at most MAX_VALUE bytes of UTF-8."""
    line = "".join(" " if ord(ch) < 0x20 or ord(ch) == 0x7F else ch for ch in text)
    data = line.encode("utf-8", "replace")[:MAX_VALUE]
    return data.decode("utf-8", "ignore")


def mounted(ins: Mapping[str, Any], mounts: str) -> Env:
    """The variables after instruction ``ins`` (``do: mount``) was carried out."""
    target = str(ins.get("target") or "")
    if ins.get("role") == "output":
        return {"RSA_STATE": "output", "RSA_RAMDISK": target, "RSA_DATA_OUT": target,
                "RSA_MOUNTS": mounts}
    mode = str(ins.get("mode") or "ro")
    return {"RSA_STATE": "union" if mode == "union" else "input", "RSA_RAMDISK": target,
            "RSA_DATA_IN": target, "RSA_INPUT": mode, "RSA_MOUNTS": mounts}


def on_pfs(message: str, ins: Mapping[str, Any] | None = None) -> Env:
    """An RSA job that reads and writes the PFS now, and why."""
    env: Env = {"RSA_STATE": "pfs", "RSA_MESSAGE": _clean(message)}
    if ins is not None and ins.get("target"):
        env["RSA_DATA_OUT" if ins.get("role") == "output" else "RSA_DATA_IN"] = str(
            ins["target"])
    return env


def at_start(answer: Mapping[str, Any], report: Mapping[str, Any] | None, *,
             job: str, has_options: bool, mounts: str) -> Env | None:
    """The variables after the node Prolog: ``answer`` is rsad's last answer to it and
    ``report`` what its mount instruction gave (None when it had none). None: write
    nothing -- rsad does not serve the job and it asked for nothing by option."""
    do = answer.get("do")
    if do == "mount" and report is not None:
        if report.get("ok"):
            return mounted(answer, mounts)
        return on_pfs(str(report.get("message") or "the RAMDISK could not be mounted"),
                      answer)
    if do == "wait":
        return on_pfs("the RAMDISK was not ready when the job started; it reads the PFS")
    if answer.get("declined"):
        return on_pfs(f"the RSA declined this job: {answer['declined']} (rsa job {job})")
    if answer.get("agent"):
        return on_pfs(f"no RAMDISK at the job's start (rsa job {job} says why); output may "
                      "still go to one after the reset")
    if has_options:
        return on_pfs(f"the RSA does not serve this job (rsa job {job} says why)")
    return None


def after(current: Mapping[str, str], ins: Mapping[str, Any],
          report: Mapping[str, Any], mounts: str) -> Env:
    """The variables after the node agent carried out ``ins`` (a reset step)."""
    env = dict(current)
    if ins.get("do") == "mount":
        if report.get("ok"):
            env.update(mounted(ins, mounts))
            env.pop("RSA_MESSAGE", None)
        else:
            env.update(on_pfs(str(report.get("message") or "mount failed"), ins))
            env.pop("RSA_RAMDISK", None)
    elif ins.get("do") == "release" and report.get("ok"):
        env.update(on_pfs("the input RAMDISK was released (reset); DATA_IN is the PFS "
                          "directory again"))
        env.pop("RSA_RAMDISK", None)
        env.pop("RSA_INPUT", None)
    return env


def has_options(env: Mapping[str, str]) -> bool:
    """True when the hook's environment shows --rsa-* options (``SPANK_RSA_<NAME>``)."""
    return any(key.startswith("SPANK_RSA_") for key in env)


def render(env: Mapping[str, str]) -> str:
    lines = ["# rsa-scheduler: this job's RSA on this node (rsa_scheduler.node.jobstate)"]
    lines += [f"{key}={_clean(env[key])}" for key in KEYS if key in env]
    return "\n".join(lines) + "\n"


def parse(text: str) -> Env:
    env: Env = {}
    # "\n" only, as rsa_jobenv.c reads it: str.splitlines() would also end a line at
    # U+2028, U+0085, ... which _clean keeps (a path may hold them)
    for line in text.split("\n"):
        key, sep, value = line.partition("=")
        if sep and key in KEYS:
            env[key] = value
    return env


def read(jobdir: Path) -> Env:
    try:
        return parse((jobdir / FILE).read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return {}


def write(jobdir: Path, env: Mapping[str, str]) -> None:
    """Replace ``job.env`` atomically (root-only file in the root-only job directory)."""
    tmp = jobdir / f".{FILE}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(render(env))
    os.replace(tmp, jobdir / FILE)
