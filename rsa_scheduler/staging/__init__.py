"""Staging: moving a job's data between the PFS and its RAMDISK on its RSA nodes.

Re-exports the engine's API; see ``docs/staging.md``.
"""

from rsa_scheduler.staging.engine import StagingEngine
from rsa_scheduler.staging.manifest import Difference, Entry, Verification
from rsa_scheduler.staging.report import Progress, ScriptResult, StagingError, Stats

__all__ = ["Difference", "Entry", "Progress", "ScriptResult", "StagingEngine",
           "StagingError", "Stats", "Verification"]
