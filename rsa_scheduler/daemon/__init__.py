"""rsad, the RSA scheduler daemon (see ``rsa_scheduler.daemon.main``).

Nothing is imported eagerly: the node Prolog imports ``rsa_scheduler.munge``
through the API client and must not pay for click and the daemon's modules.
"""

from __future__ import annotations


def main() -> None:
    """Entry point of ``rsad``."""
    from rsa_scheduler.daemon.main import main as run

    run()


__all__ = ["main"]
