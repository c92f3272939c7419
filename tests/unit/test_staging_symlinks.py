"""Staging never writes through a symlink (issue 12, point 2), on this machine (LocalHost).

A DATA_OUT shared with other users may hold symlinks someone planted where the job's
output goes (a small file, a big file copied by dd, a directory), pointing at the job
user's own files. Stage-out refuses with one line before copying anything; and should a
symlink appear after that check, the writers themselves refuse it (dd ``oflag=nofollow``,
the directory skeleton) rather than follow it. What staging creates is private (umask 077)
until the source's own modes are copied. Needs root (to run as ``nobody``); else skipped.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from rsa_scheduler.hosts import LocalHost
from rsa_scheduler.runner import CommandError, Identity
from rsa_scheduler.staging import StagingEngine, StagingError, scripts
from rsa_scheduler.staging.manifest import Entry, planted_symlinks

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run as a user")


def test_planted_symlinks_are_those_where_the_copy_writes() -> None:
    expected = [Entry(b"a", "f"), Entry(b"sub", "d"), Entry(b"sub/x", "f"),
                Entry(b"link", "l", target=b"a")]
    existing = [Entry(b"a", "l", target=b"/victim"), Entry(b"sub", "l"),
                Entry(b"link", "l", target=b"old"), Entry(b"other", "l")]
    # a symlink where the source has a symlink is replaced by tar, never followed
    assert planted_symlinks(expected, existing) == [b"a", b"sub"]
    assert planted_symlinks(expected, []) == []


@pytest.fixture
def user() -> Identity:
    return Identity.of("nobody")


@pytest.fixture
def area(user: Identity) -> Iterator[Path]:
    """src/ (the job's output), out/ (a DATA_OUT everyone may write, no sticky bit) and
    victim/ (the job user's own files the symlinks point at)."""
    base = Path(tempfile.mkdtemp(prefix="rsa-symlinks-"))
    base.chmod(0o755)
    try:
        (base / "src" / "sub").mkdir(parents=True)
        (base / "src" / "small").write_text("small\n")
        (base / "src" / "big").write_bytes(os.urandom(3 << 20))
        (base / "src" / "sub" / "deep").write_text("deep\n")
        (base / "victim" / "dir").mkdir(parents=True)
        (base / "victim" / "small").write_text("precious\n")
        (base / "victim" / "big").write_text("precious\n")
        (base / "out").mkdir()
        (base / "out").chmod(0o777)
        for p in (base / "src", base / "victim"):
            subprocess.run(["chown", "-R", f"{user.uid}:{user.gid}", str(p)], check=True)
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def engine(user: Identity) -> StagingEngine:
    return StagingEngine([LocalHost("rsa1")], user, job_id="88", big_bytes=1 << 20)


def untouched(base: Path) -> bool:
    return ((base / "victim" / "small").read_text() == "precious\n"
            and (base / "victim" / "big").read_text() == "precious\n"
            and list((base / "victim" / "dir").iterdir()) == [])


@needs_root
@pytest.mark.parametrize("name", ["small", "big", "sub"])
def test_stage_out_refuses_a_symlink_planted_in_a_shared_data_out(
        area: Path, user: Identity, name: str) -> None:
    victim = area / "victim" / ("dir" if name == "sub" else name)
    os.symlink(victim, area / "out" / name)  # planted by root here: someone else's link
    with pytest.raises(StagingError) as err:
        engine(user).stage_out(str(area / "src"), str(area / "out"))
    msg = str(err.value)
    assert err.value.permanent and "\n" not in msg
    assert f"has a symlink where the copy writes 1 object(s): {name!r}" in msg
    assert untouched(area)


@needs_root
def test_a_symlinked_destination_root_is_refused(area: Path, user: Identity) -> None:
    os.symlink(area / "victim" / "dir", area / "out" / "dst")
    with pytest.raises(StagingError) as err:
        engine(user).stage_out(str(area / "src"), str(area / "out" / "dst"))
    assert "refusing to write through the symlink" in str(err.value)
    assert untouched(area)


def run_as(user: Identity, argv: list[str], stdin: str) -> None:
    LocalHost("rsa1").run(argv, timeout=30, input=stdin, as_user=user, env=user.env())


@needs_root
def test_writers_refuse_a_symlink_that_appears_after_the_check(
        area: Path, user: Identity) -> None:
    """The race: the symlink is planted after the scan; dd and the directory skeleton
    refuse it themselves."""
    out = area / "out"
    os.symlink(area / "victim" / "big", out / "big")
    with pytest.raises(CommandError) as err:
        run_as(user, scripts.big_argv(str(area / "src"), str(out), "128K"),
               scripts.encode_list([b"big"]))
    assert "Too many levels of symbolic links" in err.value.stderr_tail
    os.symlink(area / "victim" / "dir", out / "sub")
    with pytest.raises(CommandError) as err:
        run_as(user, scripts.mkdirs_argv(str(out)), scripts.encode_list([b"sub"]))
    assert "refusing to write through the symlink ./sub" in err.value.stderr_tail
    assert untouched(area)


@needs_root
def test_what_staging_creates_is_private_until_the_source_modes_are_copied(
        area: Path, user: Identity) -> None:
    (area / "src" / "sub").chmod(0o750)
    subprocess.run(["chown", f"{user.uid}:{user.gid}", str(area / "out")], check=True)
    (area / "out").chmod(0o755)
    dst = area / "out" / "new"
    engine(user).stage_out(str(area / "src"), str(dst))
    assert stat.S_IMODE(dst.stat().st_mode) == 0o700  # made under umask 077
    assert stat.S_IMODE((dst / "sub").stat().st_mode) == 0o750  # the source's own mode
    assert (dst / "sub" / "deep").read_text() == "deep\n" and untouched(area)


@needs_root
def test_tar_stage_out_never_writes_through_planted_archive_names(
        area: Path, user: Identity) -> None:
    """Archive names are predictable (rsa-<job>-<n>.tar): symlinks planted at them or at
    their .part files are removed or replaced, never written through."""
    out = area / "out"
    os.symlink(area / "victim" / "small", out / "rsa-88-0.tar.part")
    os.symlink(area / "victim" / "big", out / "rsa-88-0.tar")
    os.symlink(area / "victim" / "small", out / "rsa-88.index.part")
    eng = engine(user)
    stats = eng.stage_out(str(area / "src"), str(out), method="tar")
    assert untouched(area)
    assert not (out / "rsa-88-0.tar").is_symlink() and not (out / "rsa-88-0.tar.part").exists()
    assert not (out / "rsa-88.index.part").exists()
    assert str(out / "rsa-88-0.tar") in stats.archives
    assert eng.verify(str(area / "src"), str(out), method="tar").ok


@needs_root
def test_tar_stage_out_never_moves_its_archives_through_a_symlink_to_a_directory(
        area: Path, user: Identity) -> None:
    """Found by review 2026-11-30: the archive and the index were renamed into place
    with ``mv -f`` (no ``-T``), which takes a symlink to a directory at the archive's
    name for that directory and moves the file into it: someone who may write DATA_OUT
    (a teammate in a group-writable one, sticky or not: the kernel's protected_symlinks
    spares only world-writable ones) had the job's archive and index moved into a
    directory of their choice, and every verify then fail."""
    out = area / "out"
    os.symlink(area / "victim" / "dir", out / "rsa-88-0.tar")
    os.symlink(area / "victim" / "dir", out / "rsa-88.index")
    eng = engine(user)
    eng.stage_out(str(area / "src"), str(out), method="tar")
    assert list((area / "victim" / "dir").iterdir()) == []
    assert not (out / "rsa-88-0.tar").is_symlink() and not (out / "rsa-88.index").is_symlink()
    assert eng.verify(str(area / "src"), str(out), method="tar").ok
