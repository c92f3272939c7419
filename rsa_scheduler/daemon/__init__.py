"""rsad, the RSA scheduler daemon (see ``rsa_scheduler.daemon.main``)."""

from rsa_scheduler.daemon.main import main

__all__ = ["main"]
