"""Optional Slurm backend through pyslurm (the C API), behind the same port as the CLI.

pyslurm must be built for the site's Slurm major release (pyslurm 25.11.x needs Slurm
25.11; nothing on PyPI supports 22.05). Import errors surface only when this backend is
selected (``slurm.backend: pyslurm``), as one actionable line. Lock-in, unlock and
comments go through scontrol (as root), exactly as the CLI backend does.
"""

from __future__ import annotations

from typing import Any

from rsa_scheduler.slurm.cli import CliSlurm
from rsa_scheduler.slurm.parse import QueueRow
from rsa_scheduler.slurm.port import SlurmError


def _load() -> Any:
    try:
        import pyslurm
    except ImportError as e:
        raise SlurmError(
            "slurm.backend is pyslurm but pyslurm is not importable: install pyslurm "
            "built for this Slurm's major release, or set slurm.backend: cli") from e
    return pyslurm


class PySlurm(CliSlurm):
    """Reads the queue through pyslurm's ``Jobs.load()`` (one RPC), writes via scontrol."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self._pyslurm = _load()

    def queue(self) -> list[QueueRow]:
        try:
            jobs = self._pyslurm.Jobs.load()
        except Exception as e:  # pyslurm raises its own RPCError
            raise SlurmError(f"pyslurm could not load the job list: {e}") from e
        rows = []
        for job in jobs.values():
            array_task = getattr(job, "array_task_id", None)
            job_id = (f"{job.array_id}_{array_task}" if array_task is not None
                      else str(job.id))
            rows.append(QueueRow(
                job_id=job_id, state=str(job.state), reason=str(job.state_reason or "None"),
                priority=int(job.priority or 0), num_nodes=int(job.num_nodes or 1),
                user=str(job.user_name), admin_comment=job.admin_comment or None))
        return rows
