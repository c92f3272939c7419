"""A tar stage-out's verify reads exactly the archives its index names (review 2026-11-30).

The verify took every ``rsa-<job>-*.tar`` it found in DATA_OUT and merged their listings,
a member found in two of them counting as the last one's: an archive of an earlier job
Slurm gave the same id (docs/staging.md: once its record left rsad's memory) joined the
verify, its members standing for this run's, and an archive of this run cut short at a
member boundary (``tar -t`` lists it without an error) passed while the lost member was in
such another archive. The index, which tells the user which member is in which archive,
was never read. Now the index names the archives, every member must be in the archive
it names, once, and every object of the archives must be in the index.

Runs as ``nobody`` on this machine (LocalHost), like tests/unit/test_staging_engine.py.
"""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from rsa_scheduler.runner import Identity
from rsa_scheduler.staging import StagingError
from rsa_scheduler.staging.manifest import (
    Entry,
    index_differences,
    index_lines,
    parse_index,
)
from tests.unit.test_staging_engine import make_engine, staged

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run as a user")


def _owned(path: Path, user: Identity) -> None:
    os.chown(path, user.uid, user.gid)


def _pack(src: Path, archive: Path, *names: str) -> None:
    """``names`` below ``src`` into ``archive`` the way a stage-out packs them."""
    subprocess.run(["tar", "--no-recursion", "--format=posix", "-C", str(src), "-cf",
                    str(archive), "--", *names], check=True)


def test_an_earlier_jobs_archive_of_the_same_id_is_not_read_for_this_runs(
        area: Path, user: Identity) -> None:
    """An earlier job with this id (3 RSA nodes) left rsa-77-2.tar; this run writes two.
    Its member stood for this run's: the verify failed on every retry until quarantine."""
    eng = staged(area, user)
    out = area / "outs" / "tar"
    out.mkdir()
    _owned(out, user)
    old = area / "old"
    (old / "sub dir").mkdir(parents=True)
    (old / "sub dir" / "f005").write_bytes(b"the earlier job's output")
    stale = out / "rsa-77-2.tar"
    _pack(old, stale, "sub dir/f005")
    _owned(stale, user)
    before = stale.read_bytes()
    stats = eng.stage_out(str(area / "ram"), str(out), method="tar")
    assert [Path(a).name for a in stats.archives] == ["rsa-77-0.tar", "rsa-77-1.tar",
                                                      "rsa-77.index"]
    v = eng.verify(str(area / "ram"), str(out), method="tar")
    assert v.ok, v.summary()
    assert stale.read_bytes() == before  # the earlier job's archive is left alone


def test_an_archive_cut_short_is_not_verified_by_a_member_in_another_archive(
        area: Path, user: Identity) -> None:
    """rsa-77-1.tar cut at the start of its last member lists without an error; that
    member, in another archive of DATA_OUT, made the verify pass."""
    eng = staged(area, user)
    out = area / "outs" / "tar"
    eng.stage_out(str(area / "ram"), str(out), method="tar")
    archive = out / "rsa-77-1.tar"
    with tarfile.open(archive) as t:
        last = [m for m in t.getmembers() if m.isfile()][-1]
    with open(archive, "r+b") as f:
        f.truncate(last.offset)
    assert subprocess.run(["tar", "-tf", str(archive)], capture_output=True).returncode == 0
    other = out / "rsa-77-9.tar"  # e.g. an earlier job's with this id
    _pack(area / "ram", other, last.name)
    _owned(other, user)
    v = eng.verify(str(area / "ram"), str(out), method="tar")
    assert not v.ok
    lost = os.fsencode(last.name.removeprefix("./"))
    assert [d.what for d in v.differences if d.path == lost] == ["missing"], v.summary()


def test_the_index_is_verified_too(area: Path, user: Identity) -> None:
    """The index says which member is in which archive: one cut short (a line lost), or
    naming the wrong archive, passed the verify."""
    eng = staged(area, user)
    out = area / "outs" / "tar"
    eng.stage_out(str(area / "ram"), str(out), method="tar")
    index = out / "rsa-77.index"
    lines = index.read_bytes().splitlines(keepends=True)
    index.write_bytes(b"".join(lines[:-1]))
    archive, _kind, _size, lost = parse_index(lines[0] + lines[-1])[0]
    v = eng.verify(str(area / "ram"), str(out), method="tar")
    assert not v.ok
    assert {d.what for d in v.differences if d.path == lost} == {
        f"in {archive} but not in the index"}, v.summary()
    index.unlink()
    with pytest.raises(StagingError, match=r"rsa-77\.index"):
        eng.verify(str(area / "ram"), str(out), method="tar")


def test_a_requeued_runs_verify_reads_its_own_index(area: Path, user: Identity) -> None:
    """Cycle 2's verify reads rsa-77.c2.index and its archives only."""
    eng = staged(area, user)
    out = area / "outs" / "tar"
    eng.stage_out(str(area / "ram"), str(out), method="tar")
    second = make_engine(user, cycle=2)
    second.stage_out(str(area / "ram"), str(out), method="tar")
    (out / "rsa-77.index").unlink()
    assert second.verify(str(area / "ram"), str(out), method="tar").ok


# --- the index's own checks (pure) ------------------------------------------------

def _f(path: bytes, size: int = 3) -> Entry:
    return Entry(path=path, kind="f", size=size)


def test_parse_index_round_trips_odd_names() -> None:
    odd = b"odd \n name \xff\t\\x"
    text = index_lines([("rsa-1-0.tar", _f(odd)), ("rsa-1-1.tar", Entry(b"d", "d", 4096))])
    assert parse_index(text.encode("utf-8", "surrogateescape")) == [
        ("rsa-1-0.tar", "f", 3, odd), ("rsa-1-1.tar", "d", 4096, b"d")]


@pytest.mark.parametrize("text", [
    b"", b"# something else\n",
    b"# rsa-scheduler archive index v1: archive<TAB>type<TAB>size<TAB>path\nrsa-1-0.tar\tf\n",
    b"# rsa-scheduler archive index v1: archive<TAB>type<TAB>size<TAB>path\n"
    b"rsa-1-0.tar\tf\t3\tcut sho",  # no newline at the end: cut short
])
def test_parse_index_refuses_what_a_stage_out_never_writes(text: bytes) -> None:
    with pytest.raises(ValueError):
        parse_index(text)


def test_index_differences_name_each_disagreement() -> None:
    index = [("rsa-1-0.tar", "f", 3, b"a"), ("rsa-1-1.tar", "f", 3, b"b"),
             ("rsa-1-0.tar", "f", 3, b"gone"), ("rsa-1-0.tar", "d", 4096, b"d"),
             ("rsa-1-0.tar", "f", 9, b"size")]
    members = {"rsa-1-0.tar": [_f(b"a"), _f(b"b"), Entry(b"d", "d", 0), _f(b"size"),
                               _f(b"new")],
               "rsa-1-1.tar": [_f(b"b")]}
    got = {d.path: d.what for d in index_differences(index, members)}
    assert got == {
        b"b": "in rsa-1-0.tar and rsa-1-1.tar",
        b"gone": "missing from rsa-1-0.tar (the index lists it there)",
        b"size": "size 3 in rsa-1-0.tar, the index says 9",
        b"new": "in rsa-1-0.tar but not in the index",
    }
    assert index_differences(index[:2], {"rsa-1-0.tar": [_f(b"a")],
                                         "rsa-1-1.tar": [_f(b"b")]}) == []
