"""The durable store: an append-only event log plus job projections in embedded SQLite.

Owns the on-disk state of rsad: every :class:`~rsa_scheduler.core.events.Event` ever
committed (table ``events``, append-only, ordered by a gap-free ``seq``) and one
:class:`JobRow` per job (table ``jobs``, a projection the daemon keeps for fast reads and
can always rebuild by replaying the log). Events and the projection rows they produce are
written in ONE transaction (:meth:`Store.append`), so after a crash at any instant the two
agree and every transaction whose ``append`` returned is present.

Durability. The database runs in WAL mode; ``durability`` picks ``PRAGMA synchronous``:

* ``"full"`` (the default we ship) — the WAL is fsync'd at every commit: a committed
  transition survives a process crash *and* a power loss or kernel panic. Measured on the
  2-core CI VM (``docs/benchmarks.md``, section Store): ~5,100 single transitions/s (one
  event + one projection row per append), just above the 5,000/s target; the disk's bare
  fsync rate (~7,800/s) is the ceiling. ~24k events/s when a daemon cycle appends 10
  events at once.
* ``"normal"`` — fsync only at checkpoints: survives a process crash (SIGKILL, OOM) but
  the last commits before a power loss may be lost. ~3.6x faster for single transitions
  (~18k/s); meant for the simulator, tests and benchmarks.

The daemon should append once per decision cycle (all its events and rows together): one
fsync then covers the whole cycle.

Concurrency: one writer process (rsad), any number of readers (the CLI, opened with
``readonly=True`` through a ``mode=ro`` URI). Writes use ``BEGIN IMMEDIATE``; a second
writer waits ``busy_timeout`` seconds and then fails with a :class:`StoreError` naming the
path. Readers never block the writer (WAL). One :class:`Store` per thread.

Every ``sqlite3`` error leaves this module as :class:`~rsa_scheduler.errors.StoreError`
with one actionable line (path, what failed, what to do), chained to its cause.

Imports the stdlib, :mod:`rsa_scheduler.core.events` (the Event record only),
:mod:`rsa_scheduler.store.migrations` and
:mod:`rsa_scheduler.errors`. The core must never import this module (import-linter).
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from rsa_scheduler.core.events import Event
from rsa_scheduler.errors import StoreError
from rsa_scheduler.store import migrations

log = logging.getLogger(__name__)

Durability = Literal["full", "normal"]
_SYNCHRONOUS: dict[str, str] = {"full": "FULL", "normal": "NORMAL"}
_PAGE = 10_000  # rows per read statement in events(): bounded memory, short read snapshots

_INSERT_EVENT = "INSERT INTO events (seq, time, job_id, name, context) VALUES (?, ?, ?, ?, ?)"
_UPSERT_JOB = (
    "INSERT INTO jobs (job_id, user, job_state, rsa_state, updated, data) "
    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (job_id) DO UPDATE SET "
    "user = excluded.user, job_state = excluded.job_state, rsa_state = excluded.rsa_state, "
    "updated = excluded.updated, data = excluded.data"
)
_JOB_COLUMNS = "job_id, user, job_state, rsa_state, updated, data"


@dataclass(frozen=True)
class JobRow:
    """The projection of one job: what the daemon and the CLI read without a replay."""

    job_id: str
    user: str
    job_state: str
    rsa_state: str
    updated: float
    data: dict[str, Any] = field(default_factory=dict)


_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                            allow_nan=False)


def _not_json(value: object) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# The same encoding through the C encoder made once: JSONEncoder.encode builds a new one
# (and a dict of markers against cycles, which events never have) at every call, about a
# fifth of the cost of encoding an event; rsad's first cycle encodes tens of thousands.
_C_MAKE_ENCODER: Any = getattr(json.encoder, "c_make_encoder", None)
_C_ENCODE: Any = None if _C_MAKE_ENCODER is None else _C_MAKE_ENCODER(
    None, _not_json, json.encoder.encode_basestring, None, ":", ",", True, False, False)


def _dumps(value: Mapping[str, Any]) -> str:
    """Compact, canonical JSON: sorted keys, no spaces, no NaN."""
    data = value if isinstance(value, dict) else dict(value)
    if _C_ENCODE is None:
        return _ENCODER.encode(data)
    try:
        return "".join(_C_ENCODE(data, 0))
    except RecursionError as e:  # no markers: a cycle recurses (JSONEncoder: ValueError)
        raise ValueError("Circular reference detected") from e


def _loads(text: str) -> dict[str, Any]:
    if text == "{}":  # most events carry no context; skip the decoder
        return {}
    value: dict[str, Any] = json.loads(text)
    return value


def _hint(e: sqlite3.Error) -> str:
    """What the operator should do about ``e``."""
    name = getattr(e, "sqlite_errorname", "") or ""
    msg = f"{name} {e}".lower()
    if "busy" in msg or "locked" in msg:
        return ("another process holds the write lock (is a second rsad running?); "
                "stop it or retry")
    if "readonly" in msg or "read-only" in msg:
        return ("the store is open read-only, or this user cannot write the file or its "
                "directory; run as the daemon's user")
    if "cantopen" in msg or "unable to open" in msg:
        return "check that the directory exists and this user may read and write it"
    if "notadb" in msg or "not a database" in msg or "corrupt" in msg or "malformed" in msg:
        return ("the file is not an rsa store or is damaged; move it aside and restore it "
                "from a backup (the event log is the source of truth)")
    if "full" in msg or "ioerr" in msg or "i/o" in msg:
        return "check the filesystem holding the store (free space, I/O errors in dmesg)"
    if "trigger" in msg or "append-only" in msg:
        return "events are never changed or deleted; append a new event instead"
    return "see the daemon log (--debug) for details"


def _error(path: Path, action: str, e: sqlite3.Error) -> StoreError:
    return StoreError(f"{path}: {action} failed: {e}; {_hint(e)}")


def _prepare(path: Path) -> None:
    """Create the store's directory (0700) and file (0600) if missing."""
    parent = path.parent
    if not parent.exists():
        try:
            parent.mkdir(mode=0o700, parents=True)
            os.chmod(parent, 0o700)  # mkdir's mode is filtered by the umask
        except FileExistsError:
            pass
        except OSError as e:
            raise StoreError(
                f"{parent}: cannot create the store directory: {e.strerror}; create it "
                "(mode 0700, owned by the daemon's user) or choose another store path"
            ) from e
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    except OSError as e:
        raise StoreError(
            f"{path}: cannot create the store file: {e.strerror}; check the permissions of "
            f"{parent} or choose another store path"
        ) from e
    try:
        os.fchmod(fd, 0o600)  # SQLite gives the -wal and -shm files this mode too
    finally:
        os.close(fd)


class Store:
    """The event log and job projections of one rsad. Create with :meth:`Store.open`."""

    def __init__(self, conn: sqlite3.Connection, path: Path, *, readonly: bool,
                 durability: Durability) -> None:
        self._conn = conn
        self.path = path
        self.readonly = readonly
        self.durability = durability

    # -- lifecycle -------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: str | Path,
        *,
        durability: Durability = "full",
        readonly: bool = False,
        busy_timeout: float = 5.0,
        older: bool = False,
    ) -> Store:
        """Open (creating and migrating if needed) the store at ``path``.

        Read-write: creates the parent directory (0700) and the file (0600), switches to
        WAL and runs pending migrations. ``readonly=True``: opens an existing, current
        store through a ``mode=ro`` URI, runs nothing and refuses every write; with
        ``older`` also a store whose schema is behind (``rsad --check`` reports what its
        migration would do: :meth:`pending_migrations`), and a store no writer has open
        is read without creating anything beside it: for a one-off look only.
        ``busy_timeout`` (seconds) is how long a write waits for another writer's lock.
        """
        if durability not in _SYNCHRONOUS:
            raise ValueError(f"durability must be 'full' or 'normal', not {durability!r}")
        p = Path(path)
        if readonly:
            if not p.is_file():
                raise StoreError(
                    f"{p}: no store at this path; check the store path in the config, or "
                    "start rsad once to create it"
                )
            target, uri = f"{p.resolve().as_uri()}?mode=ro", True
            if older and not p.with_name(p.name + "-wal").exists():
                # a one-off look (rsad --check) at a store no writer has open (rsad keeps
                # its WAL while it runs; a clean close removes it): read the file as it
                # is, creating no -wal or -shm beside it (a writer starting meanwhile is
                # not seen: the look is over in a moment)
                target += "&immutable=1"
        else:
            _prepare(p)
            target, uri = str(p), False
        try:
            # One thread at a time (rsad: its loop thread), but not necessarily the opener.
            conn = sqlite3.connect(target, uri=uri, isolation_level=None,
                                   check_same_thread=False,
                                   timeout=busy_timeout)
        except sqlite3.Error as e:
            raise _error(p, "opening the store", e) from e
        try:
            store = cls(conn, p, readonly=readonly, durability=durability)
            store._setup(busy_timeout, older)
        except BaseException:
            conn.close()
            raise
        return store

    def _setup(self, busy_timeout: float, older: bool = False) -> None:
        conn, p = self._conn, self.path
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
            if self.readonly:
                conn.execute("PRAGMA query_only = ON")
                version = migrations.schema_version(conn)
                migrations.check_version(version, str(p))
                if version < migrations.LATEST and not older:
                    raise StoreError(
                        f"{p}: store schema version {version} is older than this "
                        f"rsa-scheduler ({migrations.LATEST}); start rsad (or open the store "
                        "read-write) once to migrate it"
                    )
                return
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreError(
                    f"{p}: cannot switch the store to WAL mode (got {mode!r}); put the store "
                    "on a local filesystem that supports shared memory (not NFS)"
                )
            conn.execute(f"PRAGMA synchronous = {_SYNCHRONOUS[self.durability]}")
            before = migrations.schema_version(conn)
            after = migrations.migrate(conn, str(p))
        except sqlite3.Error as e:
            raise _error(p, "opening the store", e) from e
        if after != before:
            log.info("store %s migrated from schema version %d to %d", p, before, after)
        log.debug("store %s open (schema %d, durability %s)", p, after, self.durability)

    def close(self) -> None:
        """Close the connection (idempotent). The last closer checkpoints the WAL."""
        self._conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- writes ----------------------------------------------------------------------

    @contextmanager
    def _write(self, action: str) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` … ``COMMIT``; rolled back on any exception."""
        if self.readonly:
            raise StoreError(
                f"{self.path}: {action} refused: the store is open read-only; writes go "
                "through rsad"
            )
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            yield conn
            conn.execute("COMMIT")
        except BaseException as e:
            if conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    log.exception("store %s: rollback after a failed %s failed", self.path,
                                  action)
            if isinstance(e, sqlite3.Error):
                raise _error(self.path, action, e) from e
            raise

    def append(self, events: Sequence[Event], rows: Sequence[JobRow] = ()) -> list[Event]:
        """Append ``events`` and upsert the projection ``rows`` in ONE transaction.

        All or nothing. Returns the events with their committed ``seq`` (consecutive, in
        the order given). When this returns, the transaction is durable to the level of
        the store's ``durability``.
        """
        if not events and not rows:
            return []
        ev_params = []
        for ev in events:
            if ev.seq:
                raise ValueError(f"event {ev.name!r} of job {ev.job_id} is already stored "
                                 f"(seq {ev.seq})")
            try:
                ctx = _dumps(ev.context)
            except (TypeError, ValueError) as e:
                raise StoreError(
                    f"{self.path}: event {ev.name!r} of job {ev.job_id} cannot be stored: its "
                    f"context is not JSON ({e}); this is a bug, please report it"
                ) from e
            ev_params.append([0, ev.time, ev.job_id, ev.name, ctx])
        row_params = [self._row_params(r) for r in rows]
        with self._write("appending events") as conn:
            base = int(conn.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()[0])
            for i, p in enumerate(ev_params, start=1):
                p[0] = base + i
            if ev_params:
                conn.executemany(_INSERT_EVENT, ev_params)
            if row_params:
                conn.executemany(_UPSERT_JOB, row_params)
        return [Event(ev.time, ev.job_id, ev.name, ev.context, base + i)
                for i, ev in enumerate(events, start=1)]

    def rebuild_projections(self, rows: Iterable[JobRow]) -> int:
        """Replace every projection row by ``rows`` (a replay's result) in one transaction.

        The event log is untouched. Returns the number of rows written.
        """
        params = [self._row_params(r) for r in rows]
        with self._write("rebuilding projections") as conn:
            conn.execute("DELETE FROM jobs")
            conn.executemany(_UPSERT_JOB, params)
        return len(params)

    def _row_params(self, row: JobRow) -> tuple[str, str, str, str, float, str]:
        try:
            data = _dumps(row.data)
        except (TypeError, ValueError) as e:
            raise StoreError(
                f"{self.path}: projection of job {row.job_id} cannot be stored: its data is "
                f"not JSON ({e}); this is a bug, please report it"
            ) from e
        return (row.job_id, row.user, row.job_state, row.rsa_state, row.updated, data)

    # -- reads -----------------------------------------------------------------------

    def events(self, job_id: str | None = None, *, since: int = 0,
               limit: int | None = None) -> Iterator[Event]:
        """Committed events with ``seq > since``, in ``seq`` order, at most ``limit``.

        ``job_id`` selects one stream (job ids, or reserved streams such as ``@pool``).
        Reads in pages of short read transactions, so a long replay neither holds memory
        nor blocks WAL checkpoints; events committed meanwhile are included at the end.
        """
        if job_id is None:
            sql = ("SELECT seq, time, job_id, name, context FROM events "
                   "WHERE seq > ? ORDER BY seq LIMIT ?")
            args: tuple[Any, ...] = ()
        else:
            sql = ("SELECT seq, time, job_id, name, context FROM events "
                   "WHERE job_id = ? AND seq > ? ORDER BY seq LIMIT ?")
            args = (job_id,)
        after, remaining = since, limit
        while remaining is None or remaining > 0:
            n = _PAGE if remaining is None else min(_PAGE, remaining)
            try:
                page = self._conn.execute(sql, (*args, after, n)).fetchall()
            except sqlite3.Error as e:
                raise _error(self.path, "reading events", e) from e
            for seq, t, jid, name, ctx in page:
                yield Event(t, jid, name, _loads(ctx), seq)
            if len(page) < n:
                return
            after = page[-1][0]
            if remaining is not None:
                remaining -= len(page)

    def newest_events(self, job_id: str, *, since: int = 0, limit: int) -> list[Event]:
        """``job_id``'s newest ``limit`` committed events with ``seq > since``, oldest
        first (a job's timeline: its end and what became of its output are its newest
        events, however many came before)."""
        try:
            rows = self._conn.execute(
                "SELECT seq, time, job_id, name, context FROM events WHERE job_id = ? "
                "AND seq > ? ORDER BY seq DESC LIMIT ?", (job_id, since, limit)).fetchall()
        except sqlite3.Error as e:
            raise _error(self.path, "reading events", e) from e
        return [Event(t, jid, name, _loads(ctx), seq) for seq, t, jid, name, ctx in
                reversed(rows)]

    def write_snapshot(self, seq: int, time: float, data: Mapping[str, Any],
                       keep: int = 2) -> None:
        """Record the daemon's state as of event ``seq`` (every event up to it folded in);
        only the newest ``keep`` snapshots are kept. One transaction."""
        if seq > self.last_seq():
            raise ValueError(f"snapshot at seq {seq} is ahead of the log")
        try:
            text = _dumps(data)
        except (TypeError, ValueError) as e:
            raise StoreError(f"{self.path}: snapshot at seq {seq} cannot be stored: not "
                             f"JSON ({e}); this is a bug, please report it") from e
        with self._write("writing a snapshot") as conn:
            conn.execute("INSERT OR REPLACE INTO snapshots (seq, time, data) VALUES (?, ?, ?)",
                         (seq, time, text))
            conn.execute("DELETE FROM snapshots WHERE seq NOT IN "
                         "(SELECT seq FROM snapshots ORDER BY seq DESC LIMIT ?)", (keep,))

    def latest_snapshot(self) -> tuple[int, dict[str, Any]] | None:
        """(seq, data) of the newest snapshot, or None."""
        row = self._query_one("reading the latest snapshot",
                              "SELECT seq, data FROM snapshots ORDER BY seq DESC LIMIT 1", ())
        if row is None:
            return None
        data = _loads(row[1])
        return int(row[0]), dict(data)

    def last_named(self, job_id: str, name: str) -> int:
        """The ``seq`` of ``job_id``'s newest event called ``name`` (0: none), however
        many events the job has (the API's "since this job's record began")."""
        return int(self._query_one("reading a job's events",
                                   "SELECT coalesce(max(seq), 0) FROM events "
                                   "WHERE job_id = ? AND name = ?", (job_id, name))[0])

    def verified_since_end(self, job_id: str) -> bool:
        """Whether ``job_id``'s output was verified after its newest end (an
        ``rsa.transition`` to ``output-verified`` after its newest ``job.state`` to
        ``finished``): a dependent's release says so only then (an output an operator
        discarded, or a job that ended before its RAMDISK held any, reaches ``released``
        as well)."""
        end = int(self._query_one(
            "reading a job's events",
            "SELECT coalesce(max(seq), 0) FROM events WHERE job_id = ? AND name = "
            "'job.state' AND json_extract(context, '$.to') = 'finished'", (job_id,))[0])
        if not end:
            return False
        return self._query_one(
            "reading a job's events",
            "SELECT 1 FROM events WHERE job_id = ? AND seq > ? AND name = "
            "'rsa.transition' AND json_extract(context, '$.to') = 'output-verified' "
            "LIMIT 1", (job_id, end)) is not None

    def last_seq(self) -> int:
        """The ``seq`` of the newest committed event (0 for an empty log)."""
        return int(self._query_one("reading the last seq",
                                   "SELECT coalesce(max(seq), 0) FROM events", ())[0])

    def job(self, job_id: str) -> JobRow | None:
        """The projection of ``job_id``, or None if the store has none."""
        row = self._query_one("reading a job",
                              f"SELECT {_JOB_COLUMNS} FROM jobs WHERE job_id = ?", (job_id,))
        return None if row is None else _job_row(row)

    def jobs(self, *, rsa_states: Collection[str] | None = None,
             user: str | None = None) -> list[JobRow]:
        """Projections filtered by rsa-state and/or user, ordered by job id."""
        where: list[str] = []
        args: list[Any] = []
        if rsa_states is not None:
            states = list(rsa_states)
            if not states:
                return []
            where.append(f"rsa_state IN ({', '.join('?' * len(states))})")
            args.extend(states)
        if user is not None:
            where.append("user = ?")
            args.append(user)
        sql = f"SELECT {_JOB_COLUMNS} FROM jobs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        try:
            rows = self._conn.execute(sql + " ORDER BY job_id", args).fetchall()
        except sqlite3.Error as e:
            raise _error(self.path, "reading jobs", e) from e
        return [_job_row(r) for r in rows]

    def pending_migrations(self) -> list[migrations.Migration]:
        """The migrations a read-write open would run now (none on a current store)."""
        version = self.schema_version()
        return [m for m in migrations.MIGRATIONS if m.version > version]

    def schema_version(self) -> int:
        """The schema version of the open database (``PRAGMA user_version``)."""
        return int(self._query_one("reading the schema version", "PRAGMA user_version", ())[0])

    def _query_one(self, action: str, sql: str, args: Sequence[Any]) -> Any:
        try:
            return self._conn.execute(sql, args).fetchone()
        except sqlite3.Error as e:
            raise _error(self.path, action, e) from e


def _job_row(r: Sequence[Any]) -> JobRow:
    return JobRow(r[0], r[1], r[2], r[3], r[4], _loads(r[5]))
