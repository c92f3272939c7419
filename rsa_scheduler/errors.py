"""The project's one exception tree.

Every error the user may see derives from :class:`RsaError` and renders as one actionable
line (``str(err)``); causes are chained with ``raise ... from``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


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


class ConfigIssue(ConfigError):
    """One located problem, rendered ``FILE[:LINE]: KEY: REASON``."""

    def __init__(self, file: str, key: str, reason: str, line: int | None = None) -> None:
        super().__init__(file, key, reason)
        self.line = line

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.key}: {self.reason}" if self.key else f"{where}: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "key": self.key, "reason": self.reason}


class ConfigErrors(ConfigError):
    """Every problem found in one load; ``issues`` holds them in file order."""

    def __init__(self, issues: Sequence[ConfigIssue]) -> None:
        if not issues:
            raise ValueError("ConfigErrors needs at least one issue")
        self.issues = tuple(issues)
        first = self.issues[0]
        super().__init__(first.file, first.key, first.reason)

    def __str__(self) -> str:
        if len(self.issues) == 1:
            return str(self.issues[0])
        lines = "\n".join(f"  {issue}" for issue in self.issues)
        return f"{len(self.issues)} errors in the configuration:\n{lines}"


class StoreError(RsaError):
    """The durable store cannot be opened, migrated or written."""


class ScenarioError(RsaError):
    """A simulator scenario file is invalid."""
