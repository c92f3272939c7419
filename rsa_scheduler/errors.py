"""The project's one exception tree.

Every error the user may see derives from :class:`RsaError` and renders as one actionable
line (``str(err)``); causes are chained with ``raise ... from``.
"""

from __future__ import annotations


class RsaError(Exception):
    """Base of every error rsa-scheduler raises on purpose."""


class ConfigError(RsaError):
    """A configuration file is unreadable or invalid. The message names file, key and reason."""

    def __init__(self, file: str, key: str, reason: str) -> None:
        self.file = file
        self.key = key
        self.reason = reason
        where = f"{file}: {key}" if key else file
        super().__init__(f"{where}: {reason}")


class FsError(RsaError):
    """A RAMDISK could not be created, mounted, reset or destroyed, or its backend is
    missing or cannot be loaded."""


class StoreError(RsaError):
    """The durable store cannot be opened, migrated or written."""


class ScenarioError(RsaError):
    """A simulator scenario file is invalid."""
