"""The write-back of writable input copies only what the job changed, applies its
deletions and keeps aside what someone else changed on the PFS meanwhile (issue 37
item 2, issue 35), also across a kill of rsad between any two of its steps.

The plan on manifests (pure), then ``daemon.writeback.write_back`` for real on this
machine (LocalHost) as an unprivileged user, with rsad "killed" (an exception) after
each step and the write-back issued again.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from rsa_scheduler.daemon.writeback import Bases, record_stage_in, write_back
from rsa_scheduler.runner import Identity
from rsa_scheduler.staging import StagingEngine
from rsa_scheduler.staging.manifest import Entry
from rsa_scheduler.staging.report import StagingError
from rsa_scheduler.staging.writeback import (
    base_of,
    dump_base,
    load_base,
    pending_base,
    plan_write_back,
    settled_base,
)
from tests.unit.test_staging_engine import make_engine

S = 1_000_000_000
JOB_WROTE = 1_700_000_000  # a second long gone when a write-back reads the RAMDISK


def f(path: bytes, size: int, mtime: int, mode: int = 0o644) -> Entry:
    return Entry(path=path, kind="f", size=size, mtime_ns=mtime * S, mode=mode)


D = Entry(path=b"dir", kind="d", mode=0o755)


# ---- the plan -----------------------------------------------------------------------------
def test_only_what_the_job_changed_is_copied_and_its_deletions_applied() -> None:
    base = base_of([f(b"same", 1, 10), f(b"changed", 1, 10), f(b"gone", 1, 10),
                    f(b"mode", 1, 10), D, f(b"dir/x", 1, 10)])
    ram = [f(b"same", 1, 10), f(b"changed", 2, 20), f(b"new", 3, 20),
           f(b"mode", 1, 10, 0o600)]
    pfs = [f(b"same", 1, 10), f(b"changed", 1, 10), f(b"gone", 1, 10),
           f(b"mode", 1, 10), D, f(b"dir/x", 1, 10)]
    plan = plan_write_back(base, ram, pfs)
    assert plan.copy == (b"changed", b"mode", b"new") and not plan.aside
    assert [p for p, _e in plan.delete] == [b"dir/x", b"gone"] and plan.rmdirs == (b"dir",)


def test_an_untouched_file_someone_else_changed_is_left_to_them() -> None:
    base = base_of([f(b"a", 1, 10)])
    assert plan_write_back(base, [f(b"a", 1, 10)], [f(b"a", 5, 50)]).empty


def test_a_file_both_changed_is_kept_aside_and_one_the_job_deleted_is_kept() -> None:
    base = base_of([f(b"both", 1, 10), f(b"del", 1, 10), f(b"theydel", 1, 10)])
    ram = [f(b"both", 2, 20), f(b"theydel", 2, 20), f(b"created", 1, 20)]
    pfs = [f(b"both", 3, 30), f(b"del", 4, 30), f(b"created", 9, 30)]
    plan = plan_write_back(base, ram, pfs, suffix=b".rsa-7")
    assert plan.aside == (b"both", b"created", b"theydel")
    assert plan.kept == (b"del",) and not plan.copy and not plan.delete
    # a copy already beside it with the job's version is not placed again
    again = plan_write_back(base, ram, [*pfs, f(b"both.rsa-7", 2, 20)], suffix=b".rsa-7")
    assert b"both" not in again.aside


def test_a_re_issue_after_a_kill_does_only_what_is_left() -> None:
    """The pending base names both versions: the PFS in either is nobody else's."""
    base = base_of([f(b"a", 1, 10), f(b"b", 1, 10), f(b"c", 1, 10)])
    ram = [f(b"a", 2, 20), f(b"c", 1, 10)]
    pfs = [f(b"a", 1, 10), f(b"b", 1, 10), f(b"c", 1, 10)]
    plan = plan_write_back(base, ram, pfs)
    pending, racy_from = load_base(dump_base(pending_base(base, plan), 7))
    assert racy_from == 7
    # killed after the copy of a and the deletion of b
    done = [f(b"a", 2, 20), f(b"c", 1, 10)]
    assert plan_write_back(pending, ram, done).empty
    # killed after the copy; meanwhile someone made a new b: never deleted (kept)
    theirs = [f(b"a", 2, 20), f(b"b", 7, 70), f(b"c", 1, 10)]
    again = plan_write_back(pending, ram, theirs)
    assert not again.delete and again.kept == (b"b",)
    # killed before anything: the same plan again
    assert plan_write_back(pending, ram, pfs).copy == (b"a",)


def test_the_settled_base_is_what_the_pfs_now_holds_for_what_was_copied() -> None:
    base = base_of([f(b"a", 1, 10), f(b"b", 1, 10), f(b"c", 1, 10)])
    ram = [f(b"a", 2, 20), f(b"c", 2, 20)]
    pfs = [f(b"a", 1, 10), f(b"b", 1, 10), f(b"c", 5, 50)]
    plan = plan_write_back(base, ram, pfs)
    pending = pending_base(base, plan)
    # the job wrote a again (30) while it was copied: the PFS has that, verified
    after_pfs = [f(b"a", 3, 30), f(b"c", 5, 50), f(b"c.rsa-7", 2, 20)]
    after_ram = [f(b"a", 4, 40), f(b"c", 2, 20)]
    settled = settled_base(pending, after_ram, after_pfs, copied=plan.copy)
    assert settled[b"a"] == [f(b"a", 3, 30)]  # the job's next change is a change
    assert b"b" not in settled  # deleted
    assert settled[b"c"] == [f(b"c", 1, 10)]  # still theirs vs the job's: aside again
    nxt = plan_write_back(settled, after_ram, after_pfs, suffix=b".rsa-7")
    assert nxt.copy == (b"a",) and not nxt.aside


def test_a_base_that_is_not_one_is_refused() -> None:
    with pytest.raises(ValueError):
        load_base('{"v": 2}')


# ---- for real -----------------------------------------------------------------------------
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run as a user")


def _put(p: Path, data: bytes, user: Identity, mtime: int | None = None) -> None:
    p.write_bytes(data)
    os.lchown(p, user.uid, user.gid)
    if mtime is not None:
        os.utime(p, (mtime, mtime))


@pytest.fixture
def tree(area: Path, user: Identity) -> Iterator[tuple[Path, Path, StagingEngine, Bases]]:
    pfs = area / "outs" / "in"
    (pfs / "sub").mkdir(parents=True)
    for d in (pfs, pfs / "sub"):
        os.chown(d, user.uid, user.gid)
    for name in ("keep", "mod", "del", "both", "theirs", "sub/x"):
        _put(pfs / name, f"v1 {name}\n".encode(), user, 1_600_000_000)
    eng = make_engine(user)
    bases = Bases(area / "state")
    ram = area / "ram"
    eng.prepare_root(str(ram))
    record_stage_in(bases, "job77-c1", eng, str(pfs))
    eng.stage_in(str(pfs), str(ram))
    yield pfs, ram, eng, bases
    shutil.rmtree(area / "state", ignore_errors=True)


def _job_and_someone_else(pfs: Path, ram: Path, user: Identity) -> None:
    # the job's changes are seconds old when the write-back reads them (racy ones:
    # test_a_change_in_the_second_the_last_write_back_read_is_copied)
    _put(ram / "mod", b"v2 job\n", user, JOB_WROTE)
    _put(ram / "both", b"v2 job\n", user, JOB_WROTE)
    _put(ram / "new", b"job's new\n", user, JOB_WROTE)
    (ram / "del").unlink()
    (ram / "sub" / "x").unlink()
    (ram / "sub").rmdir()
    _put(pfs / "both", b"v2 someone else's\n", user)
    _put(pfs / "theirs", b"v2 someone else's\n", user)


def _expect(pfs: Path) -> None:
    assert (pfs / "keep").read_bytes() == b"v1 keep\n"
    assert (pfs / "mod").read_bytes() == b"v2 job\n"
    assert (pfs / "new").read_bytes() == b"job's new\n"
    assert not (pfs / "del").exists() and not (pfs / "sub").exists()
    assert (pfs / "both").read_bytes() == b"v2 someone else's\n"
    assert (pfs / "both.rsa-77").read_bytes() == b"v2 job\n"
    assert (pfs / "theirs").read_bytes() == b"v2 someone else's\n"
    assert sorted(os.listdir(pfs)) == ["both", "both.rsa-77", "keep", "mod", "new", "theirs"]


@root_only
def test_a_write_back_copies_changes_applies_deletions_and_keeps_theirs(
        tree: tuple[Path, Path, StagingEngine, Bases], user: Identity) -> None:
    pfs, ram, eng, bases = tree
    _job_and_someone_else(pfs, ram, user)
    base = bases.load("job77-c1")
    assert base is not None
    done, result = write_back(bases, "job77-c1", eng, str(ram), str(pfs), base)
    _expect(pfs)
    assert result is not None and result.ok
    assert done.copied == {b"mod", b"new"} and done.aside == {b"both"}
    assert done.deleted == {b"del", b"sub/x"}
    said = done.summary(str(pfs), b".rsa-77")
    assert "2 objects the job changed or created copied" in said
    assert "2 objects it deleted removed" in said
    assert "1 file kept aside" in said and "'both' as 'both.rsa-77'" in said
    # the next write-back: the job changes mod again; nothing else is done again
    _put(ram / "mod", b"v3 job, longer\n", user)
    again = bases.load("job77-c1")
    assert again is not None
    done2, _r = write_back(bases, "job77-c1", eng, str(ram), str(pfs), again)
    assert done2.copied == {b"mod"} and not done2.aside and not done2.deleted
    assert (pfs / "mod").read_bytes() == b"v3 job, longer\n"


@root_only
def test_a_change_in_the_second_the_last_write_back_read_is_copied(
        tree: tuple[Path, Path, StagingEngine, Bases], user: Identity,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The job rewrites a file, same size, within the second the last write-back read
    it (MooseFS keeps mtimes to the second, the copy keeps them): size and mtime agree
    with the PFS's copy and the base, yet the content is new. It is copied. Before, it
    looked in place and the job's last change never reached the PFS (CI, stop 41)."""
    pfs, ram, eng, bases = tree
    now = int(time.time())
    # rsad's clock reads the second the job wrote in: on a loaded machine the write-back
    # began reading a second or two after ``now`` and the file was no longer racy
    monkeypatch.setattr("rsa_scheduler.daemon.writeback.time",
                        SimpleNamespace(time=lambda: now + 0.5))
    _put(ram / "mod", b"v2 job\n", user, now)
    first = bases.load("job77-c1")
    assert first is not None
    done, _r = write_back(bases, "job77-c1", eng, str(ram), str(pfs), first)
    assert done.copied == {b"mod"} and (pfs / "mod").read_bytes() == b"v2 job\n"
    _put(ram / "mod", b"v3 job\n", user, now)  # same size, same second
    again = bases.load("job77-c1")
    assert again is not None and again.racy_from <= now
    done2, result = write_back(bases, "job77-c1", eng, str(ram), str(pfs), again)
    assert (pfs / "mod").read_bytes() == b"v3 job\n"
    assert done2.copied == {b"mod"} and result is not None and result.ok
    # seconds later, nothing the job left alone is copied again
    settled = bases.load("job77-c1")
    assert settled is not None
    old = now - 10
    _put(ram / "mod", b"v3 job\n", user, old)
    _put(pfs / "mod", b"v3 job\n", user, old)
    done3, _r = write_back(bases, "job77-c1", eng, str(ram), str(pfs),
                           settled._replace(racy_from=now - 1))
    assert not done3.copied and not done3.aside


def test_racy_files_are_those_of_the_read_second_or_later() -> None:
    from rsa_scheduler.staging.writeback import racy
    ram = [f(b"old", 1, 99), f(b"same", 1, 100), f(b"later", 1, 101),
           Entry(path=b"l", kind="l", mtime_ns=100 * S, target=b"x")]
    assert racy(ram, 100) == {b"same", b"later"} and racy(ram, 0) == set()
    base = base_of([f(b"same", 1, 100)])
    plan = plan_write_back(base, [f(b"same", 1, 100)], [f(b"same", 1, 100)],
                           racy_from=100)
    assert plan.copy == (b"same",)
    assert plan_write_back(base, [f(b"same", 1, 100)], [f(b"same", 1, 100)],
                           racy_from=101).empty


class Killed(Exception):
    """rsad killed -9 here."""


@root_only
@pytest.mark.parametrize("step", ["save", "copy_names", "remove_same", "remove_dirs",
                                  "verify"])
def test_a_kill_between_any_two_steps_loses_nothing_and_deletes_nothing_twice(
        tree: tuple[Path, Path, StagingEngine, Bases], user: Identity, step: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    pfs, ram, eng, bases = tree
    _job_and_someone_else(pfs, ram, user)
    target = bases if step == "save" else eng
    real = getattr(target, step)
    calls = {"n": 0}

    def then_killed(*a: object, **kw: object) -> object:
        calls["n"] += 1
        out = real(*a, **kw)
        if step != "save" or calls["n"] == 1:  # after the step (the pending base)
            raise Killed(step)
        return out

    monkeypatch.setattr(target, step, then_killed)
    base = bases.load("job77-c1")
    assert base is not None
    with pytest.raises(Killed):
        write_back(bases, "job77-c1", eng, str(ram), str(pfs), base)
    monkeypatch.setattr(target, step, real)
    # meanwhile someone else makes a new file named as one the job deleted
    if not (pfs / "del").exists():
        _put(pfs / "del", b"someone's new del\n", user)
    again = bases.load("job77-c1")
    assert again is not None
    done, _r = write_back(bases, "job77-c1", eng, str(ram), str(pfs), again)
    assert (pfs / "del").exists() == (b"del" not in done.deleted)
    if (pfs / "del").exists():
        (pfs / "del").unlink()  # the rest as in one uninterrupted write-back
        assert b"del" in done.kept or step != "save"
    _expect(pfs)




@root_only
def test_a_pfs_file_written_after_the_plan_is_kept_the_copy_goes_aside(
        tree: tuple[Path, Path, StagingEngine, Bases], user: Identity,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Review F3's window, on the engine: the job rewrote ``mod`` on the PFS (its input
    mount released) after the write-back's scan and before its rename."""
    pfs, ram, eng, bases = tree
    _put(ram / "mod", b"v2 job\n", user)
    real = eng.copy_names

    def racing(*a: object, **kw: object) -> object:
        _put(pfs / "mod", b"v3 job, on the PFS\n", user)
        monkeypatch.setattr(eng, "copy_names", real)
        return real(*a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(eng, "copy_names", racing)
    base = bases.load("job77-c1")
    assert base is not None
    done, result = write_back(bases, "job77-c1", eng, str(ram), str(pfs), base)
    assert (pfs / "mod").read_bytes() == b"v3 job, on the PFS\n"
    assert (pfs / "mod.rsa-77").read_bytes() == b"v2 job\n"
    assert done.aside == {b"mod"} and not done.copied
    assert result is not None and result.ok


@root_only
def test_a_pfs_file_written_just_after_the_verify_is_never_agreed_as_the_jobs(
        tree: tuple[Path, Path, StagingEngine, Bases], user: Identity,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by review: the settled base took, for each name the write-back copied, the
    PFS version of a scan made *after* the verify. Someone else's write landing between
    the verify and that scan was recorded as agreed, so the write-back re-issued after a
    restart (or the next one) took the job's version for a change of the job's and
    copied it over theirs. The job's version was written back and verified; theirs,
    written after it, stays: the write-back issued again has nothing to do."""
    pfs, ram, eng, bases = tree
    _put(ram / "mod", b"v2 job\n", user, JOB_WROTE)  # not racy: the job is done with it
    real = eng.verify

    def then_someone_writes(*a: object, **kw: object) -> object:
        out = real(*a, **kw)  # type: ignore[arg-type]
        _put(pfs / "mod", b"v3 someone else's, longer\n", user)
        return out

    monkeypatch.setattr(eng, "verify", then_someone_writes)
    base = bases.load("job77-c1")
    assert base is not None
    write_back(bases, "job77-c1", eng, str(ram), str(pfs), base)
    monkeypatch.setattr(eng, "verify", real)
    again = bases.load("job77-c1")  # rsad restarted: the write-back is issued again
    assert again is not None
    done, _r = write_back(bases, "job77-c1", eng, str(ram), str(pfs), again)
    assert (pfs / "mod").read_bytes() == b"v3 someone else's, longer\n"
    assert not done.copied and not done.aside


@root_only
@pytest.mark.parametrize("name", ["mod", "sub/x"])
def test_a_file_someone_else_deleted_and_the_job_changed_goes_aside_not_back(
        tree: tuple[Path, Path, StagingEngine, Bases], user: Identity, name: str) -> None:
    """Found by review: the copy kept aside went to the name itself where someone else
    had deleted it on the PFS (nothing there to keep beside), undoing their deletion,
    while the user was told it was beside it as NAME.rsa-<job>. (``sub/x``: they
    deleted the whole directory, which then came back in one rename.)"""
    pfs, ram, eng, bases = tree
    _put(ram / name, b"v2 job\n", user)
    if name == "mod":
        (pfs / name).unlink()
    else:
        shutil.rmtree(pfs / "sub")
    base = bases.load("job77-c1")
    assert base is not None
    done, result = write_back(bases, "job77-c1", eng, str(ram), str(pfs), base)
    assert not (pfs / name).exists()
    assert (pfs / f"{name}.rsa-77").read_bytes() == b"v2 job\n"
    assert done.aside == {name.encode()} and not done.copied
    assert result is not None and result.ok
    said = done.summary(str(pfs), b".rsa-77")
    assert f"{name!r} as '{name}.rsa-77'" in said


@root_only
def test_a_deletion_never_reaches_below_a_directory_swapped_for_a_symlink(
        area: Path, user: Identity) -> None:
    """Between the write-back's scan and its deletion, ``sub`` is replaced by a symlink
    to another directory holding a file of the same name, size and mtime: it stays."""
    pfs, other = area / "outs" / "in", area / "outs" / "other"
    for d in (pfs, other):
        d.mkdir(parents=True)
        os.chown(d, user.uid, user.gid)
    _put(other / "x", b"not yours to delete\n", user, 1_600_000_000)
    (pfs / "sub").symlink_to(other)
    os.lchown(pfs / "sub", user.uid, user.gid)
    _put(pfs / "y", b"yes\n", user, 1_600_000_000)
    eng = make_engine(user)
    x = Entry(b"sub/x", "f", size=20, mtime_ns=1_600_000_000 * S)
    y = Entry(b"y", "f", size=4, mtime_ns=1_600_000_000 * S)
    eng.remove_same(str(pfs), [(b"sub/x", x), (b"y", y)])
    assert (other / "x").exists() and not (pfs / "y").exists()


def test_an_empty_ramdisk_deletes_nothing() -> None:
    """A RAMDISK that holds nothing (lost, or recreated for output) is never taken for a
    job that deleted its whole input."""
    base = base_of([f(b"a", 1, 10), D, f(b"dir/x", 1, 10)])
    plan = plan_write_back(base, [], [f(b"a", 1, 10), D, f(b"dir/x", 1, 10)])
    assert not plan.delete and not plan.rmdirs and plan.empty_ramdisk and plan.empty


@root_only
def test_a_write_back_of_a_ramdisk_root_that_is_not_mounted_fails_and_keeps_it(
        area: Path, user: Identity) -> None:
    """Found by review: while a repair remounts the RAMDISK on its first node (or after
    its mount was lost), the node shows the bare directory under it, empty. The
    write-back took that for "the RAMDISK holds nothing of its writable input", wrote
    nothing back and passed; the reset then recreated the RAMDISK, and every change the
    job made to its input was lost. An empty RAMDISK counts only while the node shows
    it mounted: the write-back fails (retried; the RAMDISK kept)."""
    pfs = area / "outs" / "in"
    pfs.mkdir(parents=True)
    os.chown(pfs, user.uid, user.gid)
    _put(pfs / "a", b"v1\n", user, 1_600_000_000)
    eng = make_engine(user, ramdisk_mounted=True)
    bases = Bases(area / "state")
    ram = area / "ram"
    eng.prepare_root(str(ram))  # a plain directory: nothing is mounted there
    record_stage_in(bases, "job77-c1", eng, str(pfs))
    base = bases.load("job77-c1")
    assert base is not None
    with pytest.raises(StagingError, match="not mounted") as got:
        write_back(bases, "job77-c1", eng, str(ram), str(pfs), base)
    assert not got.value.permanent
    assert (pfs / "a").read_bytes() == b"v1\n"


@root_only
def test_a_same_second_rewrite_after_a_long_verify_read_it_is_copied_next_time(
        tree: tuple[Path, Path, StagingEngine, Bases], user: Identity,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by review: the settled base's ``racy_from`` was taken after the copy and the
    verify, though both read the RAMDISK earlier. A verify of a large input takes long:
    the job rewrote ``mod`` (same size) in the second the copy and the verify read it,
    the verify ended seconds later, and ``racy_from`` was past that second: the next
    write-back found ``mod`` in place and the job's last change never reached the PFS."""
    pfs, ram, eng, bases = tree
    from rsa_scheduler.daemon import writeback as wb
    now = int(time.time())
    clock = {"t": now}
    monkeypatch.setattr(wb, "racy_from_now", lambda: clock["t"] - wb.CLOCK_SKEW_S)
    _put(ram / "mod", b"v2 job\n", user, now)
    real = eng.verify

    def job_writes_then_verify_ends_later(*a: object, **kw: object) -> object:
        out = real(*a, **kw)  # type: ignore[arg-type]
        _put(ram / "mod", b"v3 job\n", user, now)  # same size, same second
        clock["t"] = now + 5  # the verify of the rest took seconds
        return out

    monkeypatch.setattr(eng, "verify", job_writes_then_verify_ends_later)
    first = bases.load("job77-c1")
    assert first is not None
    done, result = write_back(bases, "job77-c1", eng, str(ram), str(pfs), first)
    assert done.copied == {b"mod"} and result is not None and result.ok
    monkeypatch.setattr(eng, "verify", real)
    again = bases.load("job77-c1")
    assert again is not None
    done2, _r = write_back(bases, "job77-c1", eng, str(ram), str(pfs), again)
    assert (pfs / "mod").read_bytes() == b"v3 job\n"
    assert done2.copied == {b"mod"}


@root_only
def test_a_same_second_rewrite_after_a_kill_in_the_first_write_back_is_copied(
        tree: tuple[Path, Path, StagingEngine, Bases], user: Identity,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by review: the pending base kept the stage-in base's ``racy_from`` (0:
    nothing racy). rsad killed after the first write-back's copy, the job rewrote the
    copied file in the same second, same size: the re-issue found it in place (the PFS
    holds the copy, size and mtime equal) and the job's change never reached the PFS."""
    pfs, ram, eng, bases = tree
    now = int(time.time())
    _put(ram / "mod", b"v2 job\n", user, now)
    real = eng.copy_names

    def then_killed(*a: object, **kw: object) -> object:
        real(*a, **kw)  # type: ignore[arg-type]
        raise Killed("copy_names")

    monkeypatch.setattr(eng, "copy_names", then_killed)
    first = bases.load("job77-c1")
    assert first is not None and first.racy_from == 0  # the stage-in's base
    with pytest.raises(Killed):
        write_back(bases, "job77-c1", eng, str(ram), str(pfs), first)
    monkeypatch.setattr(eng, "copy_names", real)
    assert (pfs / "mod").read_bytes() == b"v2 job\n"
    _put(ram / "mod", b"v3 job\n", user, now)  # the job, same size, same second
    again = bases.load("job77-c1")
    assert again is not None
    done, result = write_back(bases, "job77-c1", eng, str(ram), str(pfs), again)
    assert (pfs / "mod").read_bytes() == b"v3 job\n"
    assert done.copied == {b"mod"} and result is not None and result.ok


def test_dropping_a_base_also_removes_what_a_killed_save_left(tmp_path: Path) -> None:
    """A process killed inside Bases.save (rsad, or the staging worker that records a
    base now) leaves its .tmp copy; the RAMDISK's end drops it with the base, and no other
    RAMDISK's files (a name that only starts alike) are touched."""
    bases = Bases(tmp_path / "wb")
    bases.save("fs1", {})
    left = bases.root / ".fs1.json.4242.tmp"
    left.write_text("half a base")
    other = bases.root / ".fs10.json.4242.tmp"
    other.write_text("another RAMDISK's")
    bases.save("fs10", {})
    bases.drop("fs1")
    assert not bases.path("fs1").exists() and not left.exists()
    assert other.exists() and bases.path("fs10").exists()
