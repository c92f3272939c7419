"""The ``rsa`` command line (one module per noun)."""

from rsa_scheduler.cli.main import main

__all__ = ["main"]
