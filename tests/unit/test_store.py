"""The durable store: API, append-only log, migrations, readonly access, crash safety."""

from __future__ import annotations

import os
import random
import re
import signal
import sqlite3
import stat
import subprocess
import sys
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from rsa_scheduler.core.events import Event
from rsa_scheduler.errors import StoreError
from rsa_scheduler.store import SCHEMA_VERSION, JobRow, Store
from rsa_scheduler.store import sqlite as store_sqlite
from rsa_scheduler.store.migrations import MIGRATIONS, Migration, migrate

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "state" / "rsa.db"


@pytest.fixture
def store(db: Path) -> Iterator[Store]:
    with Store.open(db, durability="normal") as s:
        yield s


def ev(job: str, name: str, t: float = 1.0, **context: object) -> Event:
    return Event(t, job, name, context)


def row(job: str, rsa_state: str, *, user: str = "alice", t: float = 1.0,
        **data: object) -> JobRow:
    return JobRow(job, user, "pending", rsa_state, t, dict(data))


# -- basic API -----------------------------------------------------------------------------


def test_open_creates_private_dir_and_file_in_wal(db: Path) -> None:
    with Store.open(db) as s:
        s.append([ev("1", "submit")])
        assert stat.S_IMODE(db.parent.stat().st_mode) == 0o700
        assert stat.S_IMODE(db.stat().st_mode) == 0o600
        assert stat.S_IMODE(Path(f"{db}-wal").stat().st_mode) == 0o600
        assert s._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert s._conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        assert s.schema_version() == SCHEMA_VERSION == MIGRATIONS[-1].version
    with Store.open(db, durability="normal") as s:
        assert s._conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL


def test_open_rejects_unknown_durability(db: Path) -> None:
    with pytest.raises(ValueError, match="durability"):
        Store.open(db, durability="off")  # type: ignore[arg-type]


def test_append_assigns_consecutive_seqs_and_upserts_rows(store: Store) -> None:
    assert store.last_seq() == 0
    out = store.append([ev("1", "submit"), ev("2", "submit")],
                       [row("1", "none"), row("2", "none")])
    assert [e.seq for e in out] == [1, 2]
    assert [e.name for e in out] == ["submit", "submit"]
    out = store.append([ev("1", "allocated", 2.0, nodes="rsa[1-2]")],
                       [row("1", "allocated", t=2.0, nodes="rsa[1-2]")])
    assert out == [Event(2.0, "1", "allocated", {"nodes": "rsa[1-2]"}, 3)]
    assert store.last_seq() == 3
    assert store.job("1") == JobRow("1", "alice", "pending", "allocated", 2.0,
                                    {"nodes": "rsa[1-2]"})
    assert store.job("nope") is None
    assert store.append([]) == []


def test_append_refuses_already_stored_event(store: Store) -> None:
    (stored,) = store.append([ev("1", "submit")])
    with pytest.raises(ValueError, match="already stored"):
        store.append([stored])


def test_events_filters_since_limit_and_reserved_streams(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_sqlite, "_PAGE", 3)  # cross page boundaries
    for i in range(10):
        store.append([ev(str(i % 2), f"e{i}"), ev("@pool", "drain", node=f"rsa{i}")])
    assert [e.seq for e in store.events()] == list(range(1, 21))
    assert [e.name for e in store.events("0")] == ["e0", "e2", "e4", "e6", "e8"]
    assert [e.seq for e in store.events(since=15)] == [16, 17, 18, 19, 20]
    assert [e.seq for e in store.events(limit=7)] == list(range(1, 8))
    assert [e.seq for e in store.events("1", since=4, limit=2)] == [7, 11]
    assert [e.context["node"] for e in store.events("@pool", limit=2)] == ["rsa0", "rsa1"]
    assert list(store.events(limit=0)) == []


def test_context_is_compact_sorted_json(store: Store, db: Path) -> None:
    store.append([Event(1.0, "1", "x", {"b": 2, "a": [1, "é"], "c": {"z": 0, "y": None}})])
    raw = sqlite3.connect(db).execute("SELECT context FROM events").fetchone()[0]
    assert raw == '{"a":[1,"é"],"b":2,"c":{"y":null,"z":0}}'


def test_jobs_filters(store: Store) -> None:
    store.append([], [row("3", "staging_in", user="bob"), row("1", "allocated"),
                      row("2", "staging_in"), row("4", "released", user="bob")])
    assert [r.job_id for r in store.jobs()] == ["1", "2", "3", "4"]
    assert [r.job_id for r in store.jobs(rsa_states={"staging_in", "allocated"})] == [
        "1", "2", "3"]
    assert [r.job_id for r in store.jobs(user="bob")] == ["3", "4"]
    assert [r.job_id for r in store.jobs(rsa_states=["staging_in"], user="bob")] == ["3"]
    assert store.jobs(rsa_states=()) == []


def test_rebuild_projections_replaces_rows_not_events(store: Store) -> None:
    store.append([ev("1", "a"), ev("2", "b")], [row("1", "x"), row("2", "y")])
    assert store.rebuild_projections([row("2", "z"), row("3", "w")]) == 2
    assert [(r.job_id, r.rsa_state) for r in store.jobs()] == [("2", "z"), ("3", "w")]
    assert store.last_seq() == 2


def test_append_is_all_or_nothing(store: Store) -> None:
    store.append([ev("1", "submit")], [row("1", "none")])
    bad_row = JobRow("2", None, "pending", "none", 1.0, {})  # type: ignore[arg-type]
    with pytest.raises(StoreError, match="appending events failed"):
        store.append([ev("2", "submit"), ev("1", "allocated")], [row("1", "allocated"), bad_row])
    with pytest.raises(StoreError, match="not JSON"):
        store.append([ev("1", "allocated"), Event(1.0, "1", "x", {"f": float("nan")})])
    assert store.last_seq() == 1
    assert store.job("1") == row("1", "none")
    assert store.job("2") is None
    # the connection is usable again after a rolled-back transaction
    assert [e.seq for e in store.append([ev("1", "allocated")])] == [2]


def test_closed_store_raises_store_error(db: Path) -> None:
    s = Store.open(db)
    s.close()
    with pytest.raises(StoreError, match=re.escape(str(db))):
        s.last_seq()


# -- append-only -----------------------------------------------------------------------------


@pytest.mark.parametrize("sql", ["UPDATE events SET name = 'forged' WHERE seq = 1",
                                 "DELETE FROM events WHERE seq = 1",
                                 "DELETE FROM events"])
def test_events_cannot_be_changed_or_deleted(store: Store, db: Path, sql: str) -> None:
    store.append([ev("1", "submit")])
    conn = sqlite3.connect(db)
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        conn.execute(sql)
    conn.rollback()
    conn.close()
    assert [e.name for e in store.events()] == ["submit"]


# -- migrations ------------------------------------------------------------------------------


def _old_db(path: Path, version: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    assert migrate(conn, str(path), target=version) == version
    conn.execute("INSERT INTO events (seq, time, job_id, name, context) "
                 "VALUES (1, 5.0, '42', 'submit', '{\"script\":\"/x\"}')")
    conn.close()


def test_upgrade_from_first_migration_keeps_events(db: Path) -> None:
    _old_db(db, 1)
    with pytest.raises(StoreError, match=r"older than this rsa-scheduler.*start rsad"):
        Store.open(db, readonly=True)
    with Store.open(db) as s:
        assert s.schema_version() == SCHEMA_VERSION
        assert list(s.events()) == [Event(5.0, "42", "submit", {"script": "/x"}, 1)]
        assert [e.seq for e in s.append([ev("42", "allocated")], [row("42", "allocated")])] == [2]
        assert s.jobs(rsa_states=["allocated"])[0].job_id == "42"
    with Store.open(db, readonly=True) as r:
        assert r.last_seq() == 2


def test_refuses_database_newer_than_code(db: Path) -> None:
    Store.open(db).close()
    conn = sqlite3.connect(db)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    for readonly in (False, True):
        with pytest.raises(StoreError, match=rf"{re.escape(str(db))}: store schema version "
                           rf"{SCHEMA_VERSION + 1} is newer .* upgrade rsa-scheduler"):
            Store.open(db, readonly=readonly)


def test_failed_migration_rolls_back_and_keeps_version(db: Path) -> None:
    Store.open(db).close()
    broken = (*MIGRATIONS, Migration(SCHEMA_VERSION + 1, "broken",
                                     ("CREATE TABLE half (a)", "THIS IS NOT SQL")))
    conn = sqlite3.connect(db, isolation_level=None)
    with pytest.raises(StoreError, match=rf"migration {SCHEMA_VERSION + 1} \(broken\) failed"
                       rf".*left at version {SCHEMA_VERSION}") as info:
        migrate(conn, str(db), migrations=broken)
    assert isinstance(info.value.__cause__, sqlite3.Error)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'half'"
                        ).fetchone()[0] == 0
    conn.close()


def test_migrations_are_numbered_in_order() -> None:
    assert [m.version for m in MIGRATIONS] == list(range(1, len(MIGRATIONS) + 1))
    conn = sqlite3.connect(":memory:", isolation_level=None)
    with pytest.raises(ValueError, match=r"versions must be 1\.\.N"):
        migrate(conn, ":memory:", migrations=(MIGRATIONS[1],))


# -- readonly and concurrency ------------------------------------------------------------------


def test_readonly_reads_but_refuses_writes(store: Store, db: Path) -> None:
    store.append([ev("1", "submit")], [row("1", "none")])
    with Store.open(db, readonly=True) as r:
        assert r.job("1") == row("1", "none")
        assert [e.name for e in r.events("1")] == ["submit"]
        with pytest.raises(StoreError, match="read-only; writes go through rsad"):
            r.append([ev("1", "x")])
        with pytest.raises(StoreError, match="read-only"):
            r.rebuild_projections([])
    assert store.last_seq() == 1


def test_readonly_open_of_missing_store_creates_nothing(tmp_path: Path) -> None:
    path = tmp_path / "missing" / "rsa.db"
    with pytest.raises(StoreError, match=rf"{re.escape(str(path))}: no store at this path"):
        Store.open(path, readonly=True)
    assert not path.parent.exists()


def test_reader_sees_consistent_prefixes_while_writer_runs(db: Path) -> None:
    n = 300
    with Store.open(db, durability="normal"):
        pass
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            with Store.open(db, durability="normal") as w:
                for i in range(n):
                    w.append([ev(str(i % 7), "tick", i=i), ev("@pool", "beat")],
                             [row(str(i % 7), f"s{i}")])
        except BaseException as e:  # surfaced in the main thread
            errors.append(e)

    t = threading.Thread(target=writer)
    with Store.open(db, readonly=True) as r:
        t.start()
        reads = 0
        while t.is_alive() or reads == 0:
            last = r.last_seq()
            seqs = [e.seq for e in r.events()]
            assert seqs == list(range(1, len(seqs) + 1))  # gap-free prefix
            assert len(seqs) >= last
            assert len(seqs) % 2 == 0  # never half a transaction
            reads += 1
        t.join()
        assert not errors, errors
        assert r.last_seq() == 2 * n


def test_second_writer_gets_actionable_lock_error(store: Store, db: Path) -> None:
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        expected = rf"{re.escape(str(db))}: appending events failed: .*locked.*second rsad"
        with Store.open(db, busy_timeout=0.05) as second, pytest.raises(StoreError,
                                                                         match=expected):
            second.append([ev("1", "x")])
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert [e.seq for e in store.append([ev("1", "x")])] == [1]


# -- error messages ----------------------------------------------------------------------------


def test_not_a_database(tmp_path: Path) -> None:
    path = tmp_path / "rsa.db"
    path.write_bytes(b"this is not sqlite" * 100)
    expected = (rf"{re.escape(str(path))}: opening the store failed: .*not an rsa store or is "
                "damaged; move it aside")
    with pytest.raises(StoreError, match=expected) as info:
        Store.open(path)
    assert isinstance(info.value.__cause__, sqlite3.DatabaseError)


def test_store_dir_cannot_be_created(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    expected = (rf"{re.escape(str(blocker))}/sub: cannot create the store directory"
                ".*choose another store path")
    with pytest.raises(StoreError, match=expected) as info:
        Store.open(blocker / "sub" / "rsa.db")
    assert isinstance(info.value.__cause__, OSError)


# -- crash safety (real SIGKILL of a writing process) -----------------------------------------

CHILD = r"""
import random, sys
from collections import Counter
from rsa_scheduler.core.events import Event
from rsa_scheduler.store import JobRow, Store

path, durability, run, seed = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
rng = random.Random(seed)
store = Store.open(path, durability=durability)
counts = Counter(e.job_id for e in store.events())  # resume from the log
batch = 0
while True:
    batch += 1
    size = rng.choice((1, 1, 1, 2, 10, 50))
    events, rows = [], {}
    for i in range(size):
        job = f"j{rng.randrange(20)}"
        counts[job] += 1
        events.append(Event(float(batch), job, "tick",
                            {"batch": f"{run}.{batch}", "size": size, "i": i}))
        rows[job] = JobRow(job, "u", "running", f"{run}.{batch}", float(batch),
                           {"count": counts[job], "i": i})
    stored = store.append(events, list(rows.values()))
    sys.stdout.write(" ".join(str(e.seq) for e in stored) + "\n")
    sys.stdout.flush()
"""


def project(events: Iterable[Event]) -> list[JobRow]:
    """The child's projection, recomputed from the log alone."""
    rows: dict[str, JobRow] = {}
    for e in events:
        count = rows[e.job_id].data["count"] + 1 if e.job_id in rows else 1
        batch = str(e.context["batch"])
        rows[e.job_id] = JobRow(e.job_id, "u", "running", batch, e.time,
                                {"count": count, "i": e.context["i"]})
    return sorted(rows.values(), key=lambda r: r.job_id)


def test_sigkill_at_random_moments_loses_no_committed_transition(tmp_path: Path) -> None:
    db = tmp_path / "crash" / "rsa.db"
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    reported: set[int] = set()
    for run in range(6):
        durability = ("full", "normal")[run % 2]
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(db), durability, str(run), str(seed + run)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
        assert proc.stdout is not None and proc.stderr is not None
        target = rng.randint(5, 200)
        for _ in range(target):
            line = proc.stdout.readline()
            assert line, f"child died early (seed {seed}): {proc.stderr.read()}"
            reported.update(int(s) for s in line.split())
        # Killing right after reading a line would land just after the child's flush,
        # between transactions; a random delay puts the kill anywhere, mid-commit included.
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=rng.uniform(0.0, 0.05))
        os.kill(proc.pid, signal.SIGKILL)
        rest, _ = proc.communicate()
        assert proc.returncode == -signal.SIGKILL
        for line in rest.splitlines(keepends=True):
            if line.endswith("\n"):  # a line cut by the kill was never reported
                reported.update(int(s) for s in line.split())

        with Store.open(db, readonly=True) as s:
            events = list(s.events())
            seqs = [e.seq for e in events]
            msg = f"seed {seed}, run {run}"
            assert seqs == list(range(1, len(seqs) + 1)), f"gap in the log ({msg})"
            assert s.last_seq() == len(seqs)
            assert reported <= set(seqs), f"committed seqs lost ({msg})"
            per_batch: dict[str, list[int]] = {}
            for e in events:
                per_batch.setdefault(str(e.context["batch"]), []).append(int(e.context["i"]))
            for batch, idx in per_batch.items():
                assert idx == list(range(len(idx))), f"batch {batch} split ({msg})"
                size = next(e.context["size"] for e in events if e.context["batch"] == batch)
                assert len(idx) == size, f"batch {batch} half-committed ({msg})"
            assert s.jobs() == project(events), f"projections differ from replay ({msg})"


def test_event_encoding_is_the_canonical_json_and_refuses_what_json_cannot_hold() -> None:
    """_dumps runs a C encoder made once; its text is JSONEncoder's (sorted keys, no
    spaces, non-ASCII kept), and what JSON cannot hold is a ValueError or TypeError."""
    import json

    from rsa_scheduler.store.sqlite import _dumps

    canonical = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                                 allow_nan=False)
    value = {"b": [1.5, None, True, "é\n\"x"], "a": {"z": 1e300, "y": -0.0, "x": 10**30}}
    assert _dumps(value) == canonical.encode(value)
    cyclic: dict[str, object] = {}
    cyclic["self"] = cyclic
    for bad in ({"a": float("nan")}, {"a": float("inf")}, cyclic):
        with pytest.raises(ValueError):
            _dumps(bad)
    with pytest.raises(TypeError):
        _dumps({"a": {1, 2}})
