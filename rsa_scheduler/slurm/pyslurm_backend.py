"""Optional Slurm backend through pyslurm (the C API), behind the same port as the CLI.

pyslurm must be built for the site's Slurm major release (pyslurm 25.11.x needs Slurm
25.11; nothing on PyPI supports 22.05). Import errors surface only when this backend is
selected (``slurm.backend: pyslurm``), as one actionable line. The queue is read with
one ``Jobs.load()`` RPC per cycle; batch scripts, lock-in, unlock and comments go through
scontrol (as root) exactly as the CLI backend does, through a :class:`CliSlurm` this
backend holds, not inherits: it has no ``queue_text``, so rsad never reads the queue
with squeue behind its back.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from rsa_scheduler.slurm.cli import CliSlurm
from rsa_scheduler.slurm.parse import JobInfo, JobNodesRow, QueueRow
from rsa_scheduler.slurm.port import SlurmError


def _load() -> Any:
    try:
        import pyslurm
    except ImportError as e:
        raise SlurmError(
            "slurm.backend is pyslurm but pyslurm is not importable: install pyslurm "
            "built for this Slurm's major release, or set slurm.backend: cli") from e
    return pyslurm


def rows_from_jobs(jobs: Iterable[Any]) -> list[QueueRow]:
    """Queue rows from pyslurm ``Job`` objects, with the CLI backend's conventions: an
    array element is ``ARRAYID_TASK``, a job without a pending reason has ``None``."""
    rows = []
    for job in jobs:
        array_task = getattr(job, "array_task_id", None)
        job_id = (f"{job.array_id}_{array_task}" if array_task is not None
                  else str(job.id))
        rows.append(QueueRow(
            job_id=job_id, state=str(job.state), reason=str(job.state_reason or "None"),
            priority=int(job.priority or 0), num_nodes=int(job.num_nodes or 1),
            user=str(job.user_name), admin_comment=job.admin_comment or None,
            partition=str(getattr(job, "partition", "") or ""),
            time_limit=str(getattr(job, "time_limit", "") or ""),
            account=str(getattr(job, "account", "") or "")))
    return rows


class PySlurm:
    """SlurmPort: the queue through pyslurm's ``Jobs.load()``, the rest through scontrol."""

    def __init__(self, cli: CliSlurm | None = None, module: Any = None) -> None:
        self.cli = cli if cli is not None else CliSlurm()
        self._pyslurm = module if module is not None else _load()

    def queue(self) -> list[QueueRow]:
        try:
            jobs = self._pyslurm.Jobs.load()
        except Exception as e:  # pyslurm raises its own RPCError
            raise SlurmError(f"pyslurm could not load the job list: {e}; is slurmctld "
                             f"reachable (scontrol ping)?") from e
        return rows_from_jobs(jobs.values())

    def batch_script(self, job_id: str) -> str:
        return self.cli.batch_script(job_id)

    def lock_original(self, job_id: str) -> str:
        return self.cli.lock_original(job_id)

    def lock_in(self, job_id: str) -> None:
        self.cli.lock_in(job_id)

    def unlock(self, job_id: str, original: str = "") -> str:
        return self.cli.unlock(job_id, original)

    def set_comment(self, job_id: str, text: str) -> None:
        self.cli.set_comment(job_id, text)

    def job_mail(self, job_id: str) -> tuple[str, str] | None:
        return self.cli.job_mail(job_id)

    def show_config(self) -> dict[str, str]:
        return self.cli.show_config()

    def end_states(self, job_ids: Sequence[str]) -> dict[str, str]:
        return self.cli.end_states(job_ids)

    def drain_nodes(self, nodes: Sequence[str], reason: str) -> None:
        self.cli.drain_nodes(nodes, reason)

    def job_info(self, job_id: str) -> JobInfo:
        return self.cli.job_info(job_id)

    def job_nodes(self, job_id: str) -> list[JobNodesRow]:
        return self.cli.job_nodes(job_id)

    def idle_nodes(self) -> dict[str, int]:
        return self.cli.idle_nodes()

    def pending_jobs(self) -> list[tuple[str, int, str, str]]:
        return self.cli.pending_jobs()

    def hold(self, job_id: str, seconds: int, admin_comment: str) -> None:
        self.cli.hold(job_id, seconds, admin_comment)

    def release_hold(self, job_id: str, admin_comment: str) -> None:
        self.cli.release_hold(job_id, admin_comment)
