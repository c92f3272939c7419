"""A stage-in's big files are checked again once their copies have settled
(``TreeCopy._settle``): a write its copier could not see is caught, the copy made again.

On a cluster, another client's write reaches an RSA node's ``stat`` late (MooseFS 4 on
the cluster lab: 0.5-1.0 s after the writer closed the file), and a write in the second
of the copier's first ``stat`` never shows (times to the second). So the copier's own
before/after comparison (``scripts.BIG``) can pass on a torn copy: make test's e2e lane
on the cluster lab handed a job such a file (tests/e2e/test_torn_input.py). Here the
engine runs for real on this machine, as an unprivileged user; a host wrapper changes
the source right after the copier returns, the way a late-reported write looks."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from rsa_scheduler.hosts import LocalHost
from rsa_scheduler.runner import Completed, Identity
from rsa_scheduler.staging import StagingEngine, scripts
from rsa_scheduler.staging.report import StagingError
from rsa_scheduler.staging.scripts.copiers import BIG_TRIES

MiB = 1 << 20


class Meddling(LocalHost):
    """A LocalHost that remembers which staging programs it ran (and when they ended),
    and calls ``after_big`` once a copy returned (``scripts.BIG``, or a tar pipe: a big
    file with hard links goes through tar)."""

    def __init__(self, name: str, seen: list[tuple[str, float]],
                 after_big: Callable[[int], None] | None = None) -> None:
        super().__init__(name)
        self.seen = seen
        self.after_big = after_big

    def run(self, argv: Sequence[str], **kw: Any) -> Completed:
        done = super().run(argv, **kw)
        args = list(argv)
        if args[2:3] == [scripts.ATOMIC]:  # the copier it wraps (scripts.atomic_argv)
            args = args[5:]
        program = {scripts.BIG: "big", scripts.TAR_PIPE: "tar", scripts.SETTLE_STAT: "stat",
                   scripts.DISCARD: "discard", scripts.COMPARE: "compare"}.get(
                       args[2] if len(args) > 2 else "")
        if program is not None:
            self.seen.append((program, time.monotonic()))
        if program in ("big", "tar") and self.after_big is not None:
            self.after_big(sum(p in ("big", "tar") for p, _ in self.seen))
        return done


@pytest.fixture
def area(user: Identity) -> Iterator[Path]:
    """A world-traversable scratch directory with an empty src/ owned by ``user``."""
    base = Path(tempfile.mkdtemp(prefix="rsa-settle-"))
    try:
        base.chmod(0o755)
        (base / "src").mkdir()
        os.chown(base / "src", user.uid, user.gid)
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def big_file(path: Path, user: Identity, data: bytes, *, links: Sequence[Path] = ()) -> None:
    path.write_bytes(data)
    os.chown(path, user.uid, user.gid)
    path.chmod(0o644)
    for link in links:
        os.link(path, link)


def rewrite_start(path: Path, data: bytes, *, mtime: float | None = None) -> None:
    """Overwrite the start of ``path`` in place (same size); ``mtime``: set afterwards."""
    with open(path, "r+b") as f:
        f.write(data)
    if mtime is not None:
        os.utime(path, (mtime, mtime))


def engine(hosts: Sequence[LocalHost], user: Identity, settle: float) -> StagingEngine:
    return StagingEngine(hosts, user, job_id="91", big_bytes=MiB, input_settle=settle)


def programs(seen: list[tuple[str, float]]) -> list[str]:
    return [p for p, _ in seen]


def rewrite_once(big: Path, mtime: float) -> Callable[[int], None]:
    """An ``after_big`` that rewrites the start of ``big`` after the first copy, its mtime
    set to ``mtime`` afterwards (a write this node's stat shows late)."""
    def after(n: int) -> None:
        if n == 1:
            rewrite_start(big, os.urandom(MiB), mtime=mtime)
    return after


def stage(area: Path, user: Identity, after: Callable[[int], None] | None,
          settle: float = 0.3) -> list[tuple[str, float]]:
    """A stage-in of ``area``/src into ``area``/ram on one node calling ``after``; the
    programs it ran."""
    seen: list[tuple[str, float]] = []
    eng = engine([Meddling("rsa1", seen, after)], user, settle)
    eng.prepare_root(str(area / "ram"))
    eng.stage_in(str(area / "src"), str(area / "ram"))
    return seen


def test_a_write_the_copier_missed_is_caught_and_the_file_copied_again(
        area: Path, user: Identity) -> None:
    """The source is rewritten right after its copy, with an mtime 5 s on (a write that
    reached this node's stat late): the copy, old bytes under the scan's mtime, would
    stay. The settle check sees the mtime differ, removes the copy and copies again."""
    src, big = area / "src", area / "src" / "big"
    big_file(big, user, os.urandom(3 * MiB))
    new = os.urandom(MiB)
    mtime = big.stat().st_mtime + 5

    def late_write(n: int) -> None:
        if n == 1:
            rewrite_start(big, new, mtime=mtime)

    seen: list[tuple[str, float]] = []
    eng = engine([Meddling("rsa1", seen, late_write)], user, 0.3)
    eng.prepare_root(str(area / "ram"))
    eng.stage_in(str(src), str(area / "ram"))
    assert (area / "ram" / "big").read_bytes() == big.read_bytes()  # before: old bytes
    assert int((area / "ram" / "big").stat().st_mtime) == int(mtime)
    assert programs(seen).count("big") == 2 and "discard" in programs(seen)


def test_without_the_check_the_missed_write_leaves_a_stale_copy(
        area: Path, user: Identity) -> None:
    """The hole the check closes (input_settle 0: off): the same late write, and the copy
    keeps the old bytes although the source changed."""
    src, big = area / "src", area / "src" / "big"
    big_file(big, user, os.urandom(3 * MiB))
    old = big.read_bytes()

    def late_write(n: int) -> None:
        rewrite_start(big, os.urandom(MiB), mtime=big.stat().st_mtime + 5)

    eng = engine([Meddling("rsa1", [], late_write)], user, 0)
    eng.prepare_root(str(area / "ram"))
    eng.stage_in(str(src), str(area / "ram"))
    assert (area / "ram" / "big").read_bytes() == old != big.read_bytes()


def test_a_file_changed_just_before_and_left_alone_is_compared_not_copied_again(
        area: Path, user: Identity) -> None:
    """Written the moment before the stage-in (its ctime in the second the copies began)
    and not touched again: the copy may hide a same-second write, so it is compared byte
    for byte with the source, found the same, and kept: no second copy (which on a
    MooseFS RAMDISK would need the space twice until the old chunks are freed)."""
    src, big = area / "src", area / "src" / "big"
    big_file(big, user, os.urandom(3 * MiB))
    seen: list[tuple[str, float]] = []
    eng = engine([Meddling("rsa1", seen)], user, 0.3)
    eng.prepare_root(str(area / "ram"))
    eng.stage_in(str(src), str(area / "ram"))
    assert programs(seen) == ["big", "stat", "compare", "tar"]
    assert (area / "ram" / "big").read_bytes() == big.read_bytes()


def test_a_write_in_the_second_of_the_scan_is_caught_by_its_recent_change(
        area: Path, user: Identity) -> None:
    """A file written moments before the stage-in began, then again after its copy in
    the same second, the mtime put back: size, inode and mtime all match the scan. Its
    recent change makes the copy untrusted: compared, found different, copied again."""
    big = area / "src" / "big"
    big_file(big, user, os.urandom(3 * MiB))
    seen = stage(area, user, rewrite_once(big, big.stat().st_mtime))
    assert (area / "ram" / "big").read_bytes() == big.read_bytes()
    assert programs(seen).count("big") == 2 and "compare" in programs(seen)


def test_a_quiet_file_is_copied_once_and_checked_only_after_the_settle_time(
        area: Path, user: Identity) -> None:
    """An input last changed well before the stage-in: one copy, nothing removed; the
    check runs no sooner than ``input_settle`` after the copy ended."""
    src, big = area / "src", area / "src" / "big"
    big_file(big, user, os.urandom(3 * MiB))
    time.sleep(2.2)  # its ctime (which cannot be set back) before the second before last
    seen: list[tuple[str, float]] = []
    eng = engine([Meddling("rsa1", seen)], user, 0.5)
    eng.prepare_root(str(area / "ram"))
    eng.stage_in(str(src), str(area / "ram"))
    assert programs(seen) == ["big", "stat", "tar"]  # (tar: the directories' modes)
    assert seen[1][1] - seen[0][1] >= 0.5
    assert (area / "ram" / "big").read_bytes() == big.read_bytes()


def test_a_file_that_keeps_changing_fails_the_stage_in_and_leaves_no_complete_copy(
        area: Path, user: Identity) -> None:
    """Rewritten after every copy: after ``BIG_TRIES`` rounds the stage-in fails (worth a
    retry, not permanent) naming the file, and the copy is removed, so a resume's quick
    check copies it again rather than keeping a torn file."""
    src, big = area / "src", area / "src" / "big"
    big_file(big, user, os.urandom(3 * MiB))

    def always(n: int) -> None:
        rewrite_start(big, os.urandom(MiB), mtime=time.time() + n)

    seen: list[tuple[str, float]] = []
    eng = engine([Meddling("rsa1", seen, always)], user, 0.2)
    eng.prepare_root(str(area / "ram"))
    with pytest.raises(StagingError) as err:
        eng.stage_in(str(src), str(area / "ram"))
    assert not err.value.permanent
    assert "'big'" in str(err.value) and "changed while they were copied" in str(err.value)
    assert f"{BIG_TRIES} time(s)" in str(err.value)
    assert not (area / "ram" / "big").exists()
    assert programs(seen).count("big") == BIG_TRIES


def test_a_hard_linked_big_file_copied_again_stays_one_file(
        area: Path, user: Identity) -> None:
    src, big = area / "src", area / "src" / "big"
    big_file(big, user, os.urandom(3 * MiB), links=[src / "big-too"])
    seen = stage(area, user, rewrite_once(big, big.stat().st_mtime + 5))
    ram = area / "ram"
    assert programs(seen).count("tar") == 3  # the file, again, the directories
    assert (ram / "big").read_bytes() == big.read_bytes()
    assert os.stat(ram / "big").st_ino == os.stat(ram / "big-too").st_ino


def test_a_big_file_removed_after_its_copy_fails_the_stage_in_and_its_copy_is_removed(
        area: Path, user: Identity) -> None:
    src, big = area / "src", area / "src" / "big"
    big_file(big, user, os.urandom(3 * MiB))

    def gone(n: int) -> None:
        big.unlink()

    eng = engine([Meddling("rsa1", [], gone)], user, 0.2)
    eng.prepare_root(str(area / "ram"))
    with pytest.raises(StagingError) as err:
        eng.stage_in(str(src), str(area / "ram"))
    assert not err.value.permanent and "'big'" in str(err.value)
    assert "removed or no longer readable after they were copied" in str(err.value)
    assert not (area / "ram" / "big").exists()


def test_parse_settle_reads_the_clock_stats_and_gone_names() -> None:
    assert scripts.parse_settle("1700000000.25\n12 34 1699999990 1699999991\n-\n", 2) == (
        1700000000.25, [(12, 34, 1699999990, 1699999991), None])
    for bad in ("", "1700000000\n", "x\n1 2 3 4\n", "1700000000\n1 2 3\n"):
        with pytest.raises(ValueError):
            scripts.parse_settle(bad, 1)


def test_an_atomic_stage_in_replaces_a_torn_copy_whole_and_removes_one_given_up_on(
        area: Path, user: Identity) -> None:
    """Under ``union`` the job may read already: a copy is never cut short under its
    name. The second copy is renamed over the first; a file that keeps changing is
    removed (the job's overlay then shows the PFS's file), not truncated."""
    src, big = area / "src", area / "src" / "big"
    big_file(big, user, os.urandom(3 * MiB))
    sizes: list[int] = []

    def late_write(n: int) -> None:
        if n == 1:
            rewrite_start(big, os.urandom(MiB), mtime=big.stat().st_mtime + 5)

    class Watching(Meddling):
        def run(self, argv: Sequence[str], **kw: Any) -> Completed:
            with contextlib.suppress(FileNotFoundError):
                sizes.append((area / "ram" / "big").stat().st_size)
            return super().run(argv, **kw)

    eng = engine([Watching("rsa1", [], late_write)], user, 0.3)
    eng.prepare_root(str(area / "ram"))
    eng.stage_in(str(src), str(area / "ram"), atomic=True)
    assert (area / "ram" / "big").read_bytes() == big.read_bytes()
    assert sizes and set(sizes) == {3 * MiB}  # absent or whole before every command

    def always(n: int) -> None:
        rewrite_start(big, os.urandom(MiB), mtime=time.time() + 10 + n)

    (area / "ram2").mkdir()
    os.chown(area / "ram2", user.uid, user.gid)
    eng = engine([Meddling("rsa1", [], always)], user, 0.2)
    with pytest.raises(StagingError):
        eng.stage_in(str(src), str(area / "ram2"), atomic=True)
    assert not (area / "ram2" / "big").exists()


def test_a_second_copy_that_runs_out_of_space_is_retried_later_not_refused(
        area: Path, user: Identity) -> None:
    """The second copy of a changed big file can find the RAMDISK full (a MooseFS frees
    the first copy's chunks only in its next chunk loop): the stage-in fails worth a
    retry, saying so, instead of being refused as too big for its RAMDISK."""
    src, big = area / "src", area / "src" / "big"
    big_file(big, user, os.urandom(3 * MiB))

    def late_write(n: int) -> None:
        if n == 1:
            rewrite_start(big, os.urandom(MiB), mtime=big.stat().st_mtime + 5)

    class Full(Meddling):
        def run(self, argv: Sequence[str], **kw: Any) -> Completed:
            if list(argv)[2:3] == [scripts.BIG] and programs(self.seen).count("big") == 1:
                argv = ["bash", "-c", "echo \"dd: closing output file './big': No space "
                        "left on device\" >&2; exit 1"]
            return super().run(argv, **kw)

    seen: list[tuple[str, float]] = []
    eng = engine([Full("rsa1", seen, late_write)], user, 0.2)
    eng.prepare_root(str(area / "ram"))
    with pytest.raises(StagingError) as err:
        eng.stage_in(str(src), str(area / "ram"))
    assert not err.value.permanent, err.value
    assert "copying again 1 big file(s) that changed while they were copied failed" in str(
        err.value) and "No space left" in str(err.value)
    assert not (area / "ram" / "big").exists()  # removed: a retry copies it again


def test_a_read_only_big_input_changed_after_its_copy_is_copied_again(
        area: Path, user: Identity) -> None:
    """A copy has its source's mode: a read-only input's copy cannot be opened for
    writing by its user, so a doubtful copy is removed (not truncated in place, which
    failed with "Permission denied", a permanent error: the job's stage-in refused)."""
    src, big = area / "src", area / "src" / "big"
    big_file(big, user, os.urandom(3 * MiB))
    big.chmod(0o444)
    mtime = big.stat().st_mtime + 5

    def late_write(n: int) -> None:
        if n == 1:
            rewrite_start(big, os.urandom(MiB), mtime=mtime)

    eng = engine([Meddling("rsa1", [], late_write)], user, 0.2)
    eng.prepare_root(str(area / "ram"))
    eng.stage_in(str(src), str(area / "ram"))
    assert (area / "ram" / "big").read_bytes() == big.read_bytes()
    assert (area / "ram" / "big").stat().st_mode & 0o777 == 0o444
    # a resume over a read-only copy cut short (a crash mid-copy) copies it again too
    (area / "ram" / "big").chmod(0o644)
    with open(area / "ram" / "big", "r+b") as f:
        f.truncate(MiB)
    (area / "ram" / "big").chmod(0o444)
    eng.stage_in(str(src), str(area / "ram"))
    assert (area / "ram" / "big").read_bytes() == big.read_bytes()
