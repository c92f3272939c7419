"""The command-line Slurm backend: squeue and scontrol through the runner seam.

Owns the argv of every Slurm command rsa-scheduler runs (built by pure functions so
they are unit-tested) and :class:`CliSlurm`, the :class:`~rsa_scheduler.slurm.port.SlurmPort`
implementation. Queue reads are ONE ``squeue`` call per cycle.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from rsa_scheduler.runner import CLEAN_PATH, CommandError, LocalRunner, Runner
from rsa_scheduler.slurm.parse import QUEUE_FORMAT, QueueRow, parse_queue
from rsa_scheduler.slurm.port import SlurmError

LOCKIN_METHODS = ("qos", "priority", "none")


def squeue_argv(bin_dir: Path) -> list[str]:
    """``-t all`` keeps finished jobs visible (COMPLETED, FAILED, TIMEOUT, ...) until Slurm
    purges them after MinJobAge; a tracked job that vanishes counts as finished."""
    return [str(bin_dir / "squeue"), "-h", "-r", "-t", "all", "-O", QUEUE_FORMAT]


def batch_script_argv(bin_dir: Path, job_id: str) -> list[str]:
    return [str(bin_dir / "scontrol"), "write", "batch_script", job_id, "-"]


def update_argv(bin_dir: Path, job_id: str, **fields: str) -> list[str]:
    return [str(bin_dir / "scontrol"), "update", f"jobid={job_id}",
            *(f"{k}={v}" for k, v in fields.items())]


def job_qos_argv(bin_dir: Path, job_id: str) -> list[str]:
    return [str(bin_dir / "squeue"), "-h", "-j", job_id, "-O", "QOS:0"]


@dataclass
class CliSlurm:
    """SlurmPort over squeue/scontrol."""

    bin_dir: Path = Path("/usr/bin")
    timeout: float = 30.0
    lockin_method: str = "qos"
    lockin_qos: str = "rsa-lockin"
    lockin_priority: int = 1_000_000
    runner: Runner = field(default_factory=LocalRunner)
    env: Mapping[str, str] = field(default_factory=lambda: _slurm_env(os.environ))

    def __post_init__(self) -> None:
        if self.lockin_method not in LOCKIN_METHODS:
            raise ValueError(f"lock-in method must be one of {', '.join(LOCKIN_METHODS)}")

    def _run(self, argv: list[str]) -> str:
        try:
            return self.runner(argv, timeout=self.timeout, env=self.env).stdout
        except CommandError as e:
            raise SlurmError(f"Slurm command failed: {e}; is slurmctld reachable "
                             f"(scontrol ping)?") from e

    def queue(self) -> list[QueueRow]:
        return parse_queue(self.queue_text())

    def queue_text(self) -> str:
        """The raw output of the one squeue call (for rsad's incremental parse)."""
        return self._run(squeue_argv(self.bin_dir))

    def batch_script(self, job_id: str) -> str:
        return self._run(batch_script_argv(self.bin_dir, job_id))

    def lock_in(self, job_id: str) -> str:
        """Lock the job in; returns what :meth:`unlock` needs to undo it."""
        if self.lockin_method == "qos":
            before = self._run(job_qos_argv(self.bin_dir, job_id)).strip().rstrip("|")
            self._run(update_argv(self.bin_dir, job_id, qos=self.lockin_qos))
            return before
        if self.lockin_method == "priority":
            self._run(update_argv(self.bin_dir, job_id, priority=str(self.lockin_priority)))
        return ""

    def unlock(self, job_id: str, token: str = "") -> None:
        if self.lockin_method == "qos":
            if token and token != self.lockin_qos:
                self._run(update_argv(self.bin_dir, job_id, qos=token))
        elif self.lockin_method == "priority":
            # hold + release makes Slurm recompute the priority (notes: slurm-lab.md)
            scontrol = str(self.bin_dir / "scontrol")
            self._run([scontrol, "hold", job_id])
            self._run([scontrol, "release", job_id])

    def set_comment(self, job_id: str, text: str) -> None:
        self._run(update_argv(self.bin_dir, job_id, comment=text))


def _slurm_env(environ: Mapping[str, str]) -> dict[str, str]:
    """A clean environment for Slurm clients, keeping only what selects the cluster."""
    env = {"PATH": CLEAN_PATH, "LANG": "C.UTF-8"}
    for key in ("SLURM_CONF", "SLURM_CLUSTERS"):
        if key in environ:
            env[key] = environ[key]
    return env
