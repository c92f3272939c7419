"""The Slurm adapter: port, parsers, and the CLI backend (pyslurm is optional)."""

from rsa_scheduler.slurm.cli import CliSlurm
from rsa_scheduler.slurm.parse import QueueRow, parse_queue, parse_show_job
from rsa_scheduler.slurm.port import SlurmError, SlurmPort

__all__ = ["CliSlurm", "QueueRow", "SlurmError", "SlurmPort", "parse_queue", "parse_show_job"]
