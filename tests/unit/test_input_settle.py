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


PROGRAMS = {scripts.BIG: "big", scripts.TAR_PIPE: "tar", scripts.SETTLE_STAT: "stat",
            scripts.DISCARD: "discard", scripts.COMPARE: "compare",
            scripts.STREAM_COPY: "stream"}
COPIES = ("big", "tar", "stream")  # (a streamed copy's calls: one stream, it copies all)


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
        program = PROGRAMS.get(args[2] if len(args) > 2 else "")
        if program is not None:
            self.seen.append((program, time.monotonic()))
        if program in COPIES and self.after_big is not None:
            self.after_big(sum(p in COPIES for p, _ in self.seen))
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
    name. The doubtful first copy is removed, the second renamed into place whole; a file
    that keeps changing is removed (the job's overlay then shows the PFS's file), not
    truncated."""
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


class Killed(Exception):
    """rsad killed (or stopped, or the step failed) at this point of the stage-in."""


class Dying(Meddling):
    """A Meddling host whose stage-in dies just before its ``nth`` run of ``program``
    (a name of ``Meddling``'s: "big", "tar", "stat", "discard")."""

    def __init__(self, name: str, seen: list[tuple[str, float]],
                 after_big: Callable[[int], None] | None, *, program: str,
                 nth: int = 1) -> None:
        super().__init__(name, seen, after_big)
        self.program = program
        self.nth = nth
        self.met = 0

    def run(self, argv: Sequence[str], **kw: Any) -> Completed:
        args = list(argv)
        if args[2:3] == [scripts.ATOMIC]:
            args = args[5:]
        program = PROGRAMS.get(args[2] if len(args) > 2 else "")
        if program == self.program:
            self.met += 1
            if self.met == self.nth:
                raise Killed(f"killed before {program} #{self.nth}")
        return super().run(argv, **kw)


def torn_in_the_same_second(big: Path, copies: Sequence[int] = (1,)
                            ) -> Callable[[int], None]:
    """After each of ``copies`` (the first copy is 1): the start of ``big`` rewritten,
    size and mtime as the scan saw them (a write in the second of the copier's first
    stat, which on MooseFS also reaches the node late): only its ctime tells."""
    keep = big.stat().st_mtime

    def write(n: int) -> None:
        if n in copies:
            rewrite_start(big, os.urandom(MiB), mtime=keep)
    return write


def leftovers(ram: Path) -> list[str]:
    """The names of the engine's own below the RAMDISK root (part directories, lists)."""
    return [n for n in os.listdir(ram) if n.startswith(".rsa-staging")]


@pytest.mark.parametrize(("program", "nth", "torn"), [
    ("stat", 1, (1,)),  # between the copy and the settle check (also: the wait cancelled)
    ("big", 2, (1,)),  # the check found it, the copy again not yet made
    ("stat", 2, (1, 2)),  # the copy made again (torn again), not yet checked
])
@pytest.mark.parametrize("atomic", [False, True])
def test_a_stage_in_killed_before_its_big_files_were_checked_never_keeps_a_torn_copy(
        area: Path, user: Identity, program: str, nth: int, torn: Sequence[int],
        atomic: bool) -> None:
    """rsad killed (or stopped, or the step cancelled) at any point between a big file's
    copy and the check that passed it: the stage-in resumes, and its quick check (size
    and mtime, which a torn copy of a write in the same second shares with the source)
    must not keep the unchecked copy."""
    src, big = area / "src", area / "src" / "big"
    big_file(big, user, os.urandom(3 * MiB))
    ram = area / "ram"
    eng = engine([Dying("rsa1", [], torn_in_the_same_second(big, torn), program=program,
                        nth=nth)], user, 0.3)
    eng.prepare_root(str(ram))
    with pytest.raises(Killed):
        eng.stage_in(str(src), str(ram), atomic=atomic)
    seen: list[tuple[str, float]] = []
    engine([Meddling("rsa1", seen)], user, 0.3).stage_in(str(src), str(ram), atomic=atomic)
    assert (ram / "big").read_bytes() == big.read_bytes()
    assert programs(seen).count("big") >= 1 and leftovers(ram) == []


def test_a_stage_in_failed_by_another_bucket_never_keeps_an_unchecked_big_copy(
        area: Path, user: Identity) -> None:
    """The big file copied (torn, in the same second), then a bucket of small files
    fails: the settle check never ran; the retry's quick check must not keep it."""
    src, big = area / "src", area / "src" / "big"
    big_file(big, user, os.urandom(3 * MiB))
    (src / "small").write_bytes(b"x")
    os.chown(src / "small", user.uid, user.gid)
    ram = str(area / "ram")
    eng = StagingEngine([Dying("rsa1", [], torn_in_the_same_second(big), program="tar")],
                        user, job_id="91", big_bytes=MiB, input_settle=0.3,
                        parallel_per_node=1)  # the big file first, then the small one
    eng.prepare_root(ram)
    with pytest.raises(Killed):
        eng.stage_in(str(src), ram)
    engine([LocalHost("rsa1")], user, 0.3).stage_in(str(src), ram)
    assert (area / "ram" / "big").read_bytes() == big.read_bytes()
    assert leftovers(area / "ram") == []


def test_a_quiet_resume_copies_nothing_again(area: Path, user: Identity) -> None:
    """The list of the unchecked goes once the check passed: a stage-in run again over
    a complete, checked RAMDISK copies nothing (the quick check keeps it all)."""
    src, big = area / "src", area / "src" / "big"
    big_file(big, user, os.urandom(3 * MiB))
    time.sleep(2.2)  # its ctime before the second before the copies: the check passes it
    ram = str(area / "ram")
    eng = engine([LocalHost("rsa1")], user, 0.5)
    eng.prepare_root(ram)
    eng.stage_in(str(src), ram)
    seen: list[tuple[str, float]] = []
    stats = engine([Meddling("rsa1", seen)], user, 0.5).stage_in(str(src), ram)
    assert programs(seen) == ["tar"] and stats.already == 1  # (tar: the directories)


def test_an_atomic_stage_in_never_leaves_a_copy_it_found_doubtful_readable(
        area: Path, user: Identity) -> None:
    """Under ``union`` the job may read its files while the stage-in runs: a copy the
    check found doubtful is removed at once (the overlay shows the PFS's file), not left
    under its name for the seconds until its second copy is placed."""
    src, big = area / "src", area / "src" / "big"
    big_file(big, user, os.urandom(3 * MiB))
    there: list[tuple[str, bool]] = []

    class Watching(Meddling):
        def run(self, argv: Sequence[str], **kw: Any) -> Completed:
            before = len(self.seen)
            done = super().run(argv, **kw)
            if len(self.seen) > before:  # one of the programs Meddling names
                there.append((self.seen[-1][0], (area / "ram" / "big").exists()))
            return done

    eng = engine([Watching("rsa1", [], torn_in_the_same_second(big))], user, 0.3)
    eng.prepare_root(str(area / "ram"))
    eng.stage_in(str(src), str(area / "ram"), atomic=True)
    # after: placed, checked (changed in the second the copies began), compared
    # (differs), removed, placed again, checked (and compared again if its change was
    # still that recent: the same), the directories
    assert there[:6] == [("big", True), ("stat", True), ("compare", True),
                         ("discard", False), ("big", True), ("stat", True)]
    assert there[6:] in ([("tar", True)], [("compare", True), ("tar", True)])
    assert (area / "ram" / "big").read_bytes() == big.read_bytes()


def killed_before_the_check(area: Path, user: Identity, big: Path) -> None:
    """A stage-in of ``area``/src whose big file was torn in the second of the scan and
    which was killed before its settle check."""
    eng = engine([Dying("rsa1", [], torn_in_the_same_second(big), program="stat")],
                 user, 0.3)
    eng.prepare_root(str(area / "ram"))
    with pytest.raises(Killed):
        eng.stage_in(str(area / "src"), str(area / "ram"))


def test_a_resume_in_streamed_mode_copies_the_unchecked_files_again(
        area: Path, user: Identity) -> None:
    """The tree grew past ``stream_objects`` after a listed run was killed before its
    check: streamed mode's quick check cannot single out the unchecked files, so their
    copies are removed first; the list goes once the streamed run's own check passed."""
    src, big = area / "src", area / "src" / "big"
    big_file(big, user, os.urandom(3 * MiB))
    killed_before_the_check(area, user, big)
    for name in ("a", "b", "c"):
        (src / name).write_bytes(b"x")
        os.chown(src / name, user.uid, user.gid)
    StagingEngine([LocalHost("rsa1")], user, job_id="91", big_bytes=MiB, input_settle=0.3,
                  stream_objects=2).stage_in(str(src), str(area / "ram"))
    assert (area / "ram" / "big").read_bytes() == big.read_bytes()
    assert leftovers(area / "ram") == []


def test_the_list_of_the_unchecked_goes_when_none_of_them_is_big_any_more(
        area: Path, user: Identity) -> None:
    """Killed before the check, then the big file cut to a small one: the next run has no
    big file to check; the list is removed all the same (never left for the job to see,
    nor staged out with its output)."""
    src, big = area / "src", area / "src" / "big"
    big_file(big, user, os.urandom(3 * MiB))
    killed_before_the_check(area, user, big)
    os.truncate(big, 1000)
    engine([LocalHost("rsa1")], user, 0.3).stage_in(str(src), str(area / "ram"))
    assert (area / "ram" / "big").read_bytes() == big.read_bytes()
    assert leftovers(area / "ram") == []


def test_many_big_files_are_checked_by_one_command_after_one_wait(
        area: Path, user: Identity) -> None:
    """Every big file is checked by one command on one node, the names on its stdin (its
    argv the same for 1 or 10,000 files), after one wait of ``input_settle`` once the
    last copy ended, never one per file."""
    src = area / "src"
    for i in range(40):
        big_file(src / f"big{i:02}", user, os.urandom(8192))
    time.sleep(2.2)  # their ctimes before the second before the copies: passed
    argvs: list[list[str]] = []

    class Counting(Meddling):
        def run(self, argv: Sequence[str], **kw: Any) -> Completed:
            if list(argv[2:3]) == [scripts.SETTLE_STAT]:
                argvs.append(list(argv))
            return super().run(argv, **kw)

    seen: list[tuple[str, float]] = []
    eng = StagingEngine([Counting("rsa1", seen)], user, job_id="91", big_bytes=4096,
                        input_settle=0.5)
    eng.prepare_root(str(area / "ram"))
    t = time.monotonic()
    eng.stage_in(str(src), str(area / "ram"))
    took = time.monotonic() - t
    assert programs(seen).count("big") == 40 and programs(seen).count("stat") == 1
    assert argvs == [scripts.settle_stat_argv(str(src))]
    last_copy = max(at for p, at in seen if p == "big")
    assert next(at for p, at in seen if p == "stat") - last_copy >= 0.5
    assert took < 40 * 0.5  # (one wait, not one per file)


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


def test_a_read_only_big_copy_is_made_again_when_its_source_changed_between_runs(
        area: Path, user: Identity) -> None:
    """A finished stage-in run again (a retry, or a resume after the list of the
    unchecked asked for it) over a read-only big copy whose source changed since."""
    src, big = area / "src", area / "src" / "big"
    big_file(big, user, os.urandom(3 * MiB))
    big.chmod(0o444)
    time.sleep(2.2)  # its ctime before the second before the copies: the first run passes it
    eng = engine([LocalHost("rsa1")], user, 0.3)
    eng.prepare_root(str(area / "ram"))
    eng.stage_in(str(src), str(area / "ram"))
    big.chmod(0o644)
    big.write_bytes(os.urandom(2 * MiB))
    big.chmod(0o444)
    eng.stage_in(str(src), str(area / "ram"))
    assert (area / "ram" / "big").read_bytes() == big.read_bytes()


def streamed(hosts: Sequence[LocalHost], user: Identity, settle: float) -> StagingEngine:
    """An engine that stages a tree of more than 2 objects in streamed mode, one stream."""
    return StagingEngine(hosts, user, job_id="91", big_bytes=MiB, input_settle=settle,
                         stream_objects=2, parallel_per_node=1)


def small_files(src: Path, user: Identity) -> None:
    for name in ("a", "b", "c"):
        (src / name).write_bytes(b"x")
        os.chown(src / name, user.uid, user.gid)


@pytest.mark.parametrize("atomic", [False, True])
def test_a_streamed_stage_in_checks_its_big_files_once_their_copies_settled(
        area: Path, user: Identity, atomic: bool) -> None:
    """A tree too large to list in rsad: its big files are found on both sides once the
    chunks are copied, and one the copier saw before a late write is copied again
    (``atomic``: the union early start, renamed into place)."""
    src, big = area / "src", area / "src" / "big"
    big_file(big, user, os.urandom(3 * MiB))
    small_files(src, user)
    mtime = big.stat().st_mtime + 5

    def late_write(n: int) -> None:
        if n == 1:
            rewrite_start(big, os.urandom(MiB), mtime=mtime)

    seen: list[tuple[str, float]] = []
    eng = streamed([Meddling("rsa1", seen, late_write)], user, 0.3)
    eng.prepare_root(str(area / "ram"))
    eng.stage_in(str(src), str(area / "ram"), atomic=atomic)
    assert (area / "ram" / "big").read_bytes() == big.read_bytes()
    assert "stat" in programs(seen) and "discard" in programs(seen)
    assert leftovers(area / "ram") == []


def test_a_streamed_stage_in_of_quiet_files_copies_each_once(
        area: Path, user: Identity) -> None:
    src, big = area / "src", area / "src" / "big"
    big_file(big, user, os.urandom(3 * MiB))
    small_files(src, user)
    time.sleep(2.2)  # their ctimes before the second before the copies (no compare)
    seen: list[tuple[str, float]] = []
    eng = streamed([Meddling("rsa1", seen)], user, 0.3)
    eng.prepare_root(str(area / "ram"))
    eng.stage_in(str(src), str(area / "ram"))
    # the sources' inodes, then the check (both after the settle time)
    assert programs(seen).count("stat") == 2 and "discard" not in programs(seen)
    assert "big" not in programs(seen) and "tar" not in programs(seen)
    assert "compare" not in programs(seen)
    assert (area / "ram" / "big").read_bytes() == big.read_bytes()
    assert leftovers(area / "ram") == []


def test_a_streamed_stage_in_compares_a_file_changed_just_before_and_keeps_it_if_same(
        area: Path, user: Identity) -> None:
    """As in the listed mode: a big file written the moment before the streamed stage-in
    (its ctime in the second the copy began) and left alone is compared byte for byte
    with its copy, found the same and kept: no second copy (which a MooseFS RAMDISK would
    need the space for twice)."""
    src, big = area / "src", area / "src" / "big"
    small_files(src, user)
    big_file(big, user, os.urandom(3 * MiB))
    seen: list[tuple[str, float]] = []
    eng = streamed([Meddling("rsa1", seen)], user, 0.3)
    eng.prepare_root(str(area / "ram"))
    eng.stage_in(str(src), str(area / "ram"))
    assert "compare" in programs(seen)
    assert "discard" not in programs(seen) and "big" not in programs(seen)
    assert (area / "ram" / "big").read_bytes() == big.read_bytes()
    assert leftovers(area / "ram") == []


def test_a_streamed_stage_in_copies_again_a_file_torn_in_the_second_of_its_copy(
        area: Path, user: Identity) -> None:
    """Rewritten right after the streamed copy read it, in the same second, its size and
    mtime put back (only the ctime tells): compared, found different, removed and copied
    again."""
    src, big = area / "src", area / "src" / "big"
    small_files(src, user)
    big_file(big, user, os.urandom(3 * MiB))
    seen: list[tuple[str, float]] = []
    eng = streamed([Meddling("rsa1", seen, torn_in_the_same_second(big))], user, 0.3)
    eng.prepare_root(str(area / "ram"))
    eng.stage_in(str(src), str(area / "ram"))
    assert (area / "ram" / "big").read_bytes() == big.read_bytes()  # before: torn
    assert programs(seen).index("compare") < programs(seen).index("discard")
    assert programs(seen).count("big") == 1  # (the streamed copy's own is "stream")
    assert leftovers(area / "ram") == []


@pytest.mark.parametrize("mode", ["streamed", "listed"])
def test_a_streamed_stage_in_killed_before_its_check_never_leaves_a_torn_copy_kept(
        area: Path, user: Identity, mode: str) -> None:
    """Killed between the streamed copy and its check, the big file torn in the second of
    the listing: the next run, streamed (the tree as it was) or listed (it shrank),
    copies the big files again whatever its quick check says."""
    src, big = area / "src", area / "src" / "big"
    big_file(big, user, os.urandom(3 * MiB))
    small_files(src, user)
    eng = StagingEngine([Dying("rsa1", [], torn_in_the_same_second(big), program="stat")],
                        user, job_id="91", big_bytes=MiB, input_settle=0.3,
                        stream_objects=2, parallel_per_node=1)
    eng.prepare_root(str(area / "ram"))
    with pytest.raises(Killed):
        eng.stage_in(str(src), str(area / "ram"))
    if mode == "listed":
        for name in ("a", "b", "c"):
            (src / name).unlink()
        again = engine([LocalHost("rsa1")], user, 0.3)
    else:
        again = streamed([LocalHost("rsa1")], user, 0.3)
    again.stage_in(str(src), str(area / "ram"))
    assert (area / "ram" / "big").read_bytes() == big.read_bytes()
    # (the listed run leaves the streamed run's part directory: not its to remove)
    assert [n for n in leftovers(area / "ram") if n.endswith("-unchecked-list")] == []


def test_a_streamed_stage_in_run_again_ignores_a_copy_whose_source_is_gone(
        area: Path, user: Identity) -> None:
    """A stage-in run again (a retry) after its source lost a big file: the RAMDISK still
    holds that copy, but it is none of this run's; the check leaves it alone."""
    src = area / "src"
    big_file(src / "big", user, os.urandom(3 * MiB))
    big_file(src / "gone", user, os.urandom(2 * MiB))
    small_files(src, user)
    time.sleep(2.2)  # their ctimes before the second before the copies (no compare)
    eng = streamed([LocalHost("rsa1")], user, 0.3)
    eng.prepare_root(str(area / "ram"))
    eng.stage_in(str(src), str(area / "ram"))
    (src / "gone").unlink()
    eng.stage_in(str(src), str(area / "ram"))
    assert (area / "ram" / "big").read_bytes() == (src / "big").read_bytes()
