"""The pure core: job/RSA state machines, transition table, allocator, directive grammar.

Nothing under ``rsa_scheduler.core`` runs a process, opens a file or socket, reads the clock
or talks to Slurm; callers pass ``now`` and observations in and get actions back. The
import-linter contract in ``pyproject.toml`` enforces this.
"""
