"""The Slurm port: the one interface through which rsa-scheduler reads and changes Slurm.

Owns :class:`SlurmPort` and :class:`SlurmError`. Backends: ``slurm.cli`` (squeue/scontrol,
always available) and ``slurm.pyslurm_backend`` (optional, needs pyslurm built for the
site's Slurm major release).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from rsa_scheduler.errors import RsaError
from rsa_scheduler.slurm.parse import JobInfo, JobNodesRow, QueueRow


class SlurmError(RsaError):
    """Slurm could not be read or changed."""


class UnlockGone(SlurmError):
    """The job a restore was for is no longer in Slurm: there is nothing to restore."""


class UnlockLater(SlurmError):
    """The restore cannot be done while the job runs (Slurm keeps a running job's QOS):
    it is done when the job is pending again."""


@runtime_checkable
class MailSource(Protocol):
    """What the RSA's mail reads of Slurm (daemon/mail.py): both backends have it."""

    def job_mail(self, job_id: str) -> tuple[str, str] | None:
        """(MailUser, MailType) the job asked Slurm for, "" for none; None when Slurm does
        not say it unambiguously. Raises SlurmError when Slurm no longer has the job."""
        ...

    def show_config(self) -> dict[str, str]:
        """``scontrol show config`` as {key: value}."""
        ...


class SlurmPort(Protocol):
    """What rsad needs from Slurm."""

    def queue(self) -> list[QueueRow]:
        """Every job Slurm knows, in ONE call whatever the queue length."""
        ...

    def batch_script(self, job_id: str) -> str:
        """The job's batch script (read once per job when no job_submit plugin is used)."""
        ...

    def lock_original(self, job_id: str) -> str:
        """What a lock-in of the job will change, as it is now (its QOS, or its priority
        for method priority): recorded before :meth:`lock_in`. Raises SlurmError when it
        is the lock-in's own value (never an original)."""
        ...

    def lock_in(self, job_id: str) -> None:
        """Keep the job on-deck (QOS or priority, per configuration)."""
        ...

    def unlock(self, job_id: str, original: str = "") -> str:
        """End a lock-in: the job's own QOS / priority back (``original``: what
        :meth:`lock_original` gave), only where the lock-in's is still in place, never
        releasing a hold; returns what was done. Raises :class:`UnlockGone` when the job
        has ended (nothing left to restore), :class:`UnlockLater` when Slurm cannot
        change it now (a running job's QOS)."""
        ...

    def set_comment(self, job_id: str, text: str) -> None:
        """Show the user a short RSA status where they already look (the job comment),
        never over a comment the user gave the job (``--comment``): that stays exact (nothing
        is written)."""
        ...

    def drain_nodes(self, nodes: Sequence[str], reason: str) -> None:
        """Drain compute nodes (no new jobs; running ones go on) with ``reason``."""
        ...

    def job_info(self, job_id: str) -> JobInfo:
        """One job as Slurm describes it: own id, array ids, user, partition,
        admin_comment (from fields no user can forge: slurm.parse.JOB_INFO_FIELDS)."""
        ...

    def idle_nodes(self) -> dict[str, int]:
        """Idle nodes per partition (``sinfo``)."""
        ...

    def pending_jobs(self) -> list[tuple[str, int, str, str]]:
        """Every pending job: (job, nodes, reason, partitions) (``squeue -t PD``)."""
        ...

    def hold(self, job_id: str, seconds: int, admin_comment: str) -> None:
        """Hold a pending job for the RSA: begin time ``seconds`` from now, with its
        admin_comment replaced (the hold marker added)."""
        ...

    def release_hold(self, job_id: str, admin_comment: str) -> None:
        """Let a job held for the RSA start now (begin time now), with its admin_comment
        replaced (the hold marker removed)."""
        ...


@runtime_checkable
class Accounting(Protocol):
    """A port that also reads Slurm's accounting (slurmdbd): how jobs ended after they
    left the queue."""

    def end_states(self, job_ids: Sequence[str]) -> dict[str, str]:
        """{job id: its end state (``COMPLETED``, ``CANCELLED``, ...)} of the jobs
        accounting knows; raises SlurmError without accounting."""
        ...


@runtime_checkable
class JobPlaces(Protocol):
    """A port that says where a job still is: the compute nodes that run it or have not
    finished it (their Epilog), which rsad waits for before it reads or destroys the
    job's RAMDISK (daemon/nodeside.py)."""

    def job_nodes(self, job_id: str) -> list[JobNodesRow]:
        """The job's (or its hetjob components') state and node list, one row each; none
        when Slurm no longer has the job. Raises SlurmError when Slurm cannot be read."""
        ...
