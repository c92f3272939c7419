"""Atomic placement of whole new directories (scripts.ATOMIC with "whole", issue 16).

A stage-out places a directory new at the destination by renaming its copy onto the
empty placeholder the engine made, in one rename; where that is refused (the placeholder
got content, or was swapped for a symlink) the names go one by one, or the copy is
refused, never written through a symlink. Real processes as an unprivileged user on
local directories.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from rsa_scheduler.hosts import LocalHost
from rsa_scheduler.runner import Identity
from rsa_scheduler.staging import StagingEngine, scripts
from tests.unit.conftest import scratch_area
from tests.unit.test_staging_engine import SpyHost, tree_state

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run as a user")


def own(root: Path, user: Identity) -> None:
    for dirpath, dirnames, filenames in os.walk(root):
        for n in (*dirnames, *filenames):
            os.lchown(os.path.join(dirpath, n), user.uid, user.gid)
    os.chown(root, user.uid, user.gid)


@pytest.fixture
def area(user: Identity) -> Iterator[Path]:
    with scratch_area(user, prefix="rsa-whole-", files=4) as base:
        src = base / "new"
        (src / "a" / "sub" / "deeper").mkdir(parents=True)
        (src / "a" / "empty").mkdir()
        (src / "a" / "ro").mkdir()
        for i in range(20):
            (src / "a" / f"f{i}").write_bytes(os.urandom(i * 13))
            (src / "a" / "sub" / f"g{i}").write_bytes(os.urandom(i * 7))
        (src / "a" / "sub" / "deeper" / "h").write_text("h")
        (src / "a" / "ro" / "r").write_text("r")
        (src / "a" / "odd \n\xff name").write_text("odd")
        (src / "top").write_text("top")
        own(src, user)
        (src / "a" / "ro").chmod(0o555)
        os.utime(src / "a" / "sub", (1_300_000_000, 1_300_000_000))
        yield base


def place(base: Path, user: Identity, *, whole: bool) -> int:
    """Copy new/a into dst/ through a part directory with ATOMIC, as ``user``."""
    src, dst = base / "new", base / "dst"
    copier = scripts.tar_pipe_argv(str(src), str(dst), recursive=True)
    argv = scripts.atomic_argv(copier, str(dst), str(dst / ".rsa-staging-77-x" / "0"),
                               whole=whole)
    done = LocalHost("rsa1").run(argv, as_user=user, check=False, timeout=60,
                                 input=scripts.encode_list([b"a"]))
    return done.returncode


def placeholder(base: Path, user: Identity) -> int:
    (base / "dst" / "a").mkdir(parents=True)
    own(base / "dst", user)
    return (base / "dst" / "a").stat().st_ino


def files_of(root: Path) -> dict[bytes, tuple[object, ...]]:
    """tree_state without directory modes and mtimes (the engine sets those last)."""
    return {k: v for k, v in tree_state(root).items() if not os.path.isdir(root / os.fsdecode(k))}


def test_a_new_directory_is_renamed_onto_its_placeholder_whole(
        area: Path, user: Identity) -> None:
    ino = placeholder(area, user)
    assert place(area, user, whole=True) == 0
    a = area / "dst" / "a"
    assert a.stat().st_ino != ino  # the copy's directory itself, not the placeholder
    assert files_of(a) == files_of(area / "new" / "a")
    assert not (area / "dst" / ".rsa-staging-77-x" / "0").exists()


def test_without_whole_the_placeholder_is_filled_name_by_name(
        area: Path, user: Identity) -> None:
    """The other way (and what a refused rename falls back to): the directories the
    engine did not make are made, every file renamed into them."""
    ino = placeholder(area, user)
    assert place(area, user, whole=False) == 0
    a = area / "dst" / "a"
    assert a.stat().st_ino == ino
    assert files_of(a) == files_of(area / "new" / "a")


def test_a_placeholder_someone_wrote_into_is_merged_not_replaced(
        area: Path, user: Identity) -> None:
    ino = placeholder(area, user)
    (area / "dst" / "a" / "keep").write_text("mine")
    os.chown(area / "dst" / "a" / "keep", user.uid, user.gid)
    assert place(area, user, whole=True) == 0
    a = area / "dst" / "a"
    assert a.stat().st_ino == ino and (a / "keep").read_text() == "mine"
    want = files_of(area / "new" / "a")
    got = files_of(a)
    assert {k: v for k, v in got.items() if k != b"keep"} == want


def test_a_placeholder_swapped_for_a_symlink_is_refused_not_followed(
        area: Path, user: Identity) -> None:
    placeholder(area, user)
    elsewhere = area / "elsewhere"
    elsewhere.mkdir()
    own(elsewhere, user)
    (area / "dst" / "a").rmdir()
    (area / "dst" / "a").symlink_to(elsewhere)
    os.lchown(area / "dst" / "a", user.uid, user.gid)
    assert place(area, user, whole=True) == 65
    assert list(elsewhere.iterdir()) == []


def test_the_engine_places_new_directories_whole_and_keeps_everything(
        area: Path, user: Identity) -> None:
    """A stage-out into a fresh DATA_OUT: the whole directory goes by one rename ("whole"
    on its bucket's ATOMIC), everything verifies, modes and mtimes included; into a
    DATA_OUT that already has the directory, it is not renamed whole."""
    seen: list[list[str]] = []
    eng = StagingEngine([SpyHost("rsa1", seen), SpyHost("rsa2", seen)], user, job_id="77")
    eng.prepare_root(str(area / "ram"))
    eng.stage_in(str(area / "new"), str(area / "ram"))
    out = area / "outs" / "out"
    seen.clear()
    eng.stage_out(str(area / "ram"), str(out))
    atomic = [a for a in seen if a[2:3] == [scripts.ATOMIC]]
    assert atomic and any(a[9] == "whole" for a in atomic), atomic
    assert tree_state(out) == tree_state(area / "new")
    assert eng.verify(str(area / "ram"), str(out)).ok
    # again, into a DATA_OUT where a/ exists with a file of the user's: merged
    again = area / "outs" / "again"
    (again / "a").mkdir(parents=True)
    (again / "a" / "keep").write_text("mine")
    own(again, user)
    seen.clear()
    eng.stage_out(str(area / "ram"), str(again))
    assert not any(a[9] == "whole" for a in seen if a[2:3] == [scripts.ATOMIC])
    assert (again / "a" / "keep").read_text() == "mine"
    got = tree_state(again)
    del got[b"a/keep"]
    want = tree_state(area / "new")
    assert {k: v for k, v in got.items() if k != b"a"} == \
        {k: v for k, v in want.items() if k != b"a"}


def test_a_union_stage_in_never_renames_a_directory_in_whole(
        area: Path, user: Identity) -> None:
    """The union stage-in places atomically under a running job whose overlay may hold
    the directory already: a directory renamed in whole would hide what the job sees in
    it (found in review with a real overlay), so there names go one by one."""
    seen: list[list[str]] = []
    eng = StagingEngine([SpyHost("rsa1", seen)], user, job_id="77")
    eng.prepare_root(str(area / "ram"))
    eng.stage_in(str(area / "new"), str(area / "ram"), atomic=True)
    atomic = [a for a in seen if a[2:3] == [scripts.ATOMIC]]
    assert atomic and not any(a[9] == "whole" for a in atomic), atomic
    assert files_of(area / "ram") == files_of(area / "new")
