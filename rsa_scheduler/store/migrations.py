"""Schema of the durable store and the ordered migrations that build it.

Owns the SQL schema (tables, indexes, the append-only triggers) and :func:`migrate`,
which brings a connection's database up to :data:`LATEST` one migration at a time. The
schema version is SQLite's ``PRAGMA user_version``: migration *N* sets it to *N* inside the
same transaction as its statements, so a crash mid-migration leaves the database at
version *N-1*, never half-migrated.

Rules for adding a migration: append to :data:`MIGRATIONS` (never edit or reorder a
shipped one), give it the next version number, keep each statement self-contained (no
``executescript``: it would commit the open transaction).

Imports only the stdlib and :mod:`rsa_scheduler.errors`; never the core, the daemon or the
CLI.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

from rsa_scheduler.errors import StoreError


@dataclass(frozen=True)
class Migration:
    """One schema step: run ``statements`` in one transaction, then ``user_version = version``."""

    version: int
    description: str
    statements: tuple[str, ...]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "append-only event log",
        (
            # seq is the rowid: assigned by the store as max(seq)+1 inside the writing
            # transaction, so the log is gap-free (rolled-back appends consume nothing).
            """CREATE TABLE events (
                seq     INTEGER PRIMARY KEY,
                time    REAL    NOT NULL,
                job_id  TEXT    NOT NULL,
                name    TEXT    NOT NULL,
                context TEXT    NOT NULL DEFAULT '{}'
            )""",
            """CREATE TRIGGER events_no_update BEFORE UPDATE ON events
               BEGIN SELECT RAISE(ABORT, 'events are append-only: UPDATE is not allowed'); END""",
            """CREATE TRIGGER events_no_delete BEFORE DELETE ON events
               BEGIN SELECT RAISE(ABORT, 'events are append-only: DELETE is not allowed'); END""",
        ),
    ),
    Migration(
        2,
        "job projections",
        (
            """CREATE TABLE jobs (
                job_id    TEXT PRIMARY KEY,
                user      TEXT NOT NULL,
                job_state TEXT NOT NULL,
                rsa_state TEXT NOT NULL,
                updated   REAL NOT NULL,
                data      TEXT NOT NULL DEFAULT '{}'
            ) WITHOUT ROWID""",
            # One index, not one per column: every transition rewrites the rows' index
            # entries inside the commit, and each extra page costs write bandwidth under
            # fsync. Filtering by user alone scans the table (fine for the CLI).
            "CREATE INDEX jobs_state_user ON jobs (rsa_state, user)",
        ),
    ),
    Migration(
        3,
        "per-job event streams",
        # events(job_id) reads one stream in seq order without scanning the whole log.
        ("CREATE INDEX events_job_seq ON events (job_id, seq)",),
    ),
    Migration(
        4,
        "snapshots",
        # The daemon's state as of event ``seq``: a restart loads the newest and replays
        # only the events after it. Never the source of truth: the log still is.
        ("""CREATE TABLE snapshots (
                seq  INTEGER PRIMARY KEY,
                time REAL    NOT NULL,
                data TEXT    NOT NULL
            )""",),
    ),
)

LATEST: int = MIGRATIONS[-1].version


def schema_version(conn: sqlite3.Connection) -> int:
    """The database's schema version (0 for a new, empty file)."""
    row = conn.execute("PRAGMA user_version").fetchone()
    return int(row[0])


def check_version(version: int, path: str, migrations: Sequence[Migration] = MIGRATIONS) -> None:
    """Raise :class:`StoreError` if ``version`` is newer than this code knows."""
    latest = migrations[-1].version if migrations else 0
    if version > latest:
        raise StoreError(
            f"{path}: store schema version {version} is newer than this rsa-scheduler "
            f"supports ({latest}); upgrade rsa-scheduler, or restore a database written by "
            "this version"
        )


def migrate(
    conn: sqlite3.Connection,
    path: str,
    *,
    target: int | None = None,
    migrations: Sequence[Migration] = MIGRATIONS,
) -> int:
    """Apply every migration above the current version, up to ``target`` (default: all).

    ``conn`` must be in autocommit mode (``isolation_level=None``). Each migration runs in
    its own ``BEGIN IMMEDIATE`` transaction; a failure rolls that one back and raises
    :class:`StoreError`, leaving earlier migrations committed. Returns the new version.
    """
    _check_order(migrations)
    current = schema_version(conn)
    check_version(current, path, migrations)
    for mig in migrations:
        if mig.version <= current or (target is not None and mig.version > target):
            continue
        try:
            conn.execute("BEGIN IMMEDIATE")
            # Re-read under the write lock: another process may have migrated meanwhile.
            if schema_version(conn) >= mig.version:
                conn.execute("COMMIT")
                current = schema_version(conn)
                continue
            for stmt in mig.statements:
                conn.execute(stmt)
            conn.execute(f"PRAGMA user_version = {int(mig.version)}")
            conn.execute("COMMIT")
        except sqlite3.Error as e:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise StoreError(
                f"{path}: schema migration {mig.version} ({mig.description}) failed: {e}; "
                f"the store is left at version {current}. Check that the file is writable "
                "and not in use by another rsad, then retry"
            ) from e
        current = mig.version
    return current


def _check_order(migrations: Sequence[Migration]) -> None:
    for i, mig in enumerate(migrations, start=1):
        if mig.version != i:
            raise ValueError(f"migration #{i} has version {mig.version}; versions must be 1..N")
