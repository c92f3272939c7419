"""The Slurm adapter: port, parsers, and the CLI backend (pyslurm is optional)."""

from rsa_scheduler.slurm.cli import CliSlurm
from rsa_scheduler.slurm.parse import JobInfo, QueueRow, parse_job_info, parse_queue
from rsa_scheduler.slurm.port import SlurmError, SlurmPort

__all__ = ["CliSlurm", "JobInfo", "QueueRow", "SlurmError", "SlurmPort", "parse_job_info",
           "parse_queue"]
