"""The durable store: append-only event log and job projections in SQLite (re-exports).

See :mod:`rsa_scheduler.store.sqlite`. The core must not import this package.
"""

from rsa_scheduler.store.migrations import LATEST as SCHEMA_VERSION
from rsa_scheduler.store.sqlite import Durability, JobRow, Store

__all__ = ["SCHEMA_VERSION", "Durability", "JobRow", "Store"]
