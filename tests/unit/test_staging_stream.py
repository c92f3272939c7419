"""Streamed mode: a tree above ``stream_objects`` is listed and copied on the nodes.

``parse_listing`` runs anywhere; the engine tests copy real trees on this machine
(LocalHost) as the unprivileged user ``nobody`` and need root to switch to it, like
``test_staging_engine.py``, whose tree and helpers they share.
"""

from __future__ import annotations

import base64
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from rsa_scheduler.hosts import LocalHost
from rsa_scheduler.runner import Completed, Identity
from rsa_scheduler.staging import StagingEngine, StagingError, scripts, stream
from rsa_scheduler.staging.manifest import parse_scan, parse_scan_fields, scan_fields
from rsa_scheduler.staging.stream import Listing, parse_listing
from tests.unit.conftest import _is
from tests.unit.test_staging_engine import tree_state

pytestmark = pytest.mark.unit
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run as a user")


def _names(*names: bytes) -> str:
    return base64.b64encode(b"".join(b"./" + n + b"\0" for n in names)).decode()


def test_parse_listing_reads_the_counters_and_skipped_names() -> None:
    got = parse_listing(f"LIST 10 2 3 1 4096 2 1\n{_names(b'sock')}\n", "/s", "stage-in", "u")
    assert got == Listing(10, 2, 3, 1, 4096, 2, (b"sock",), occupied=True)
    fresh = parse_listing("LIST 10 2 3 1 4096 2 0\n\n", "/s", "stage-in", "u")
    assert not fresh.occupied


def test_parse_listing_refuses_unreadable_objects_naming_five() -> None:
    out = "BAD 7\n" + _names(b"a", b"odd\nb", b"c", b"d", b"e") + "\n"
    with pytest.raises(StagingError) as e:
        parse_listing(out, "/pfs/in", "stage-in", "alice")
    assert e.value.permanent
    assert str(e.value) == ("stage-in refused: user alice cannot read 7 object(s) in "
                            "/pfs/in: 'a', 'odd\\\\nb', 'c', 'd', 'e' and 2 more; fix their "
                            "permissions or remove them")


def test_parse_listing_refuses_what_it_does_not_understand() -> None:
    with pytest.raises(StagingError, match="unexpected listing"):
        parse_listing("find: oops\n", "/s", "stage-in", "u")


def test_the_capped_scan_is_the_scan_cut_short() -> None:
    argv = scripts.scan_capped_argv("/r", 1000, 5)
    assert argv[2].startswith(scripts.SCAN.removesuffix(" | base64 -w0"))
    assert argv[3:] == ["bash", "/r", "1000", "60"]


class SpyHost(LocalHost):
    """A LocalHost that keeps every argv it ran and the length of what it answered."""

    def __init__(self, name: str, seen: list[tuple[list[str], int]]) -> None:
        super().__init__(name)
        self.seen = seen

    def run(self, argv: Sequence[str], **kw: Any) -> Completed:
        done = super().run(argv, **kw)
        self.seen.append((list(argv), len(done.stdout)))
        return done


def engine(user: Identity, seen: list[tuple[list[str], int]]) -> StagingEngine:
    return StagingEngine([SpyHost("rsa1", seen), SpyHost("rsa2", seen)], user,
                         job_id="77", stream_objects=10)


@needs_root
def test_a_large_tree_is_listed_and_copied_on_the_nodes_rsad_gets_counters(
        area: Path, user: Identity, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stream, "CHUNK_FILES", 7)  # several chunks, claimed by every stream
    monkeypatch.setattr(stream, "CHUNKS_PER_CALL", 2)
    seen: list[tuple[list[str], int]] = []
    eng = engine(user, seen)
    eng.prepare_root(str(area / "ram"))
    stats = eng.stage_in(str(area / "src"), str(area / "ram"))
    assert tree_state(area / "ram") == tree_state(area / "src")  # links, modes, times
    assert stats.files == 51 and stats.dirs == 3 and stats.buckets == 8  # 7 + linked
    assert sum(_is(a, scripts.STREAM_LIST) for a, _ in seen) == 1
    assert not any(_is(a, scripts.SCAN) for a, _ in seen)  # never the whole list
    scan = [n for a, n in seen if _is(a, scripts.SCAN_CAPPED)]
    assert len(scan) == 1 and scan[0] < 2000  # 11 objects at most
    assert max(n for a, n in seen if not _is(a, scripts.SCAN_CAPPED)) < 200  # counters
    copiers = [a for a, _ in seen if _is(a, scripts.STREAM_COPY)]
    assert len(copiers) >= 4 + 4  # every stream, until it found nothing left
    assert not list((area / "ram").glob(".rsa-staging-77-*"))
    out = area / "outs" / "out"
    seen.clear()
    eng.stage_out(str(area / "ram"), str(out))
    assert tree_state(out) == tree_state(area / "src")
    assert all(a[10] == scripts.ATOMIC for a, _ in seen if _is(a, scripts.STREAM_COPY))
    assert not list(out.glob(".rsa-staging-77-*"))
    assert eng.verify(str(area / "ram"), str(out)).ok


@needs_root
def test_streamed_mode_refuses_unreadable_objects_before_copying(
        area: Path, user: Identity) -> None:
    secret = area / "src" / "sub dir" / "secret"
    secret.write_text("no")
    secret.chmod(0o600)  # root's, not the user's
    seen: list[tuple[list[str], int]] = []
    eng = engine(user, seen)
    eng.prepare_root(str(area / "ram"))
    with pytest.raises(StagingError) as e:
        eng.stage_in(str(area / "src"), str(area / "ram"))
    assert e.value.permanent and "'sub dir/secret'" in str(e.value)
    assert not any(_is(a, scripts.STREAM_COPY) for a, _ in seen)
    assert not (area / "ram" / "big").exists()


@needs_root
def test_a_chunk_that_fails_fails_the_copy_and_a_rerun_finishes_it(
        area: Path, user: Identity) -> None:
    gone = area / "src" / "sub dir" / "f005"
    keep = gone.read_bytes()
    seen: list[tuple[list[str], int]] = []

    class Vanishing(SpyHost):
        def run(self, argv: Sequence[str], **kw: Any) -> Completed:
            done = super().run(argv, **kw)
            if _is(argv, scripts.STREAM_LIST):
                gone.unlink()  # listed, then removed before it is copied
            return done

    eng = StagingEngine([Vanishing("rsa1", seen), SpyHost("rsa2", seen)], user,
                        job_id="77", stream_objects=10)
    eng.prepare_root(str(area / "ram"))
    with pytest.raises(StagingError):
        eng.stage_in(str(area / "src"), str(area / "ram"))
    gone.write_bytes(keep)
    os.chown(gone, user.uid, user.gid)
    engine(user, []).stage_in(str(area / "src"), str(area / "ram"))
    assert tree_state(area / "ram", content=True) == tree_state(area / "src")
    assert not list((area / "ram").glob(".rsa-staging-77-*"))


@pytest.mark.parametrize("piece", [4, 8, 12, 1 << 20])
def test_scan_fields_decodes_in_pieces_what_split_gives_at_once(piece: int) -> None:
    raw = b"".join(b"R\0f\0%d\0" % i + b"644\0" + b"1.5\0" + b"1\0" + b"2\0" + b"3\0\0"
                   + b"odd \n name \xff %d\0" % i for i in range(50))
    text = base64.b64encode(raw).decode() + "\n"
    assert list(scan_fields(text, piece)) == raw.split(b"\0")[:-1]
    assert parse_scan_fields(scan_fields(text, piece)) == parse_scan(raw)
    with pytest.raises(ValueError, match="ends with 1 fields"):
        parse_scan_fields(scan_fields(base64.b64encode(raw + b"R\0").decode(), piece))


@needs_root
def test_streamed_verify_compares_on_the_nodes_and_finds_what_differs(
        area: Path, user: Identity, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stream, "CHUNK_FILES", 7)
    seen: list[tuple[list[str], int]] = []
    eng = engine(user, seen)
    eng.prepare_root(str(area / "ram"))
    eng.stage_in(str(area / "src"), str(area / "ram"))
    out = area / "outs" / "out"
    eng.stage_out(str(area / "ram"), str(out))
    (out / "extra").write_text("only here: not an error")
    seen.clear()
    v = eng.verify(str(area / "ram"), str(out))
    assert v.ok and v.checked == 54 and v.checked_bytes > 3 << 20, v.summary()
    assert not any(_is(a, scripts.SCAN) for a, _ in seen)
    assert sum(_is(a, scripts.VERIFY_LIST) for a, _ in seen) == 1
    assert sum(_is(a, scripts.VERIFY_HASH) for a, _ in seen) >= 4  # every stream
    assert max(n for a, n in seen if not _is(a, scripts.SCAN_CAPPED)) < 200
    assert not list(out.glob(".rsa-staging-77-*"))
    f1, f2 = out / "sub dir" / "f010", out / "sub dir" / "f011"
    with open(f1, "r+b") as f:
        f.truncate(3)
    st = f2.stat()
    data = bytearray(f2.read_bytes())
    data[0] ^= 0xFF  # same size, same mtime: only the hash sees it
    f2.write_bytes(bytes(data))
    os.utime(f2, ns=(st.st_atime_ns, st.st_mtime_ns))
    (out / "link").unlink()
    v = eng.verify(str(area / "ram"), str(out))
    whats = {d.path: d.what for d in v.differences}
    assert not v.ok and v.count == 3, v.summary()
    assert whats[b"sub dir/f010"] == stream.META_WHAT
    assert whats[b"link"] == stream.META_WHAT
    assert whats[b"sub dir/f011"] == "content differs (hash)"
    assert "verify failed: 3 of 54 objects differ" in v.summary()
    seen.clear()
    meta = StagingEngine([SpyHost("rsa1", seen)], user, job_id="77", stream_objects=10,
                         verify_level="metadata").verify(str(area / "ram"), str(out))
    assert {d.path for d in meta.differences} == {b"sub dir/f010", b"link"}
    assert not any(_is(a, scripts.VERIFY_HASH) for a, _ in seen)


@needs_root
def test_streamed_verify_checks_hard_links_as_the_listed_verify_does(
        area: Path, user: Identity) -> None:
    seen: list[tuple[list[str], int]] = []
    eng = engine(user, seen)
    eng.prepare_root(str(area / "ram"))
    eng.stage_in(str(area / "src"), str(area / "ram"))
    out = area / "outs" / "out"
    eng.stage_out(str(area / "ram"), str(out))
    assert eng.verify(str(area / "ram"), str(out)).ok
    # the group big / "sub dir/big-link" split into two files, everything else equal
    link = out / "sub dir" / "big-link"
    st, dst = link.stat(), link.parent.stat()
    data = link.read_bytes()
    link.unlink()
    link.write_bytes(data)
    os.chmod(link, st.st_mode & 0o7777)
    os.utime(link, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.utime(link.parent, ns=(dst.st_atime_ns, dst.st_mtime_ns))
    for listed in (False, True):  # the listed verify agrees that the link is broken
        eng = engine(user, seen)
        if listed:
            eng.stream_objects = 0
        v = eng.verify(str(area / "ram"), str(out))
        assert not v.ok, v.summary()
        whats = {d.path: d.what for d in v.differences}
        assert set(whats.values()) == {"hard link broken"}, whats
        # streamed: both names of the split group; listed: the name met second
        group = {b"big", b"sub dir/big-link"}
        assert set(whats) == group if not listed else set(whats) < group, whats
        assert v.count == len(whats), v.summary()
    # a group with one name in the tree (the other name is outside) is no difference
    meta = engine(user, seen)
    assert meta.verify(str(area / "ram" / "sub dir"), str(out / "sub dir")).ok


@needs_root
def test_streamed_verify_drops_big_files_from_every_nodes_page_cache(
        area: Path, user: Identity) -> None:
    seen: list[tuple[list[str], int]] = []
    eng = StagingEngine([SpyHost("rsa1", seen), SpyHost("rsa2", seen)], user,
                        job_id="77", stream_objects=10, verify_range_bytes=2 << 20)
    eng.prepare_root(str(area / "ram"))
    eng.stage_in(str(area / "src"), str(area / "ram"))
    out = area / "outs" / "out"
    eng.stage_out(str(area / "ram"), str(out))
    seen.clear()
    assert eng.verify(str(area / "ram"), str(out)).ok
    drops = [a for a, _ in seen if _is(a, scripts.DROP_LISTED)]
    assert len(drops) == 2 and {a[4] for a in drops} == {str(out)}
    spool_big = Path(drops[0][5])
    assert spool_big.name == "big" and not spool_big.exists()  # the spool is removed
    # files of 2M or more are listed: find -size +<2M - 1>c
    argv = next(a for a, _ in seen if _is(a, scripts.VERIFY_LIST))
    assert argv[-2] == str((2 << 20) - 1) and argv[-1].startswith(".rsa-staging-77-")
    off = StagingEngine([SpyHost("rsa1", seen)], user, job_id="77", stream_objects=10,
                        verify_range_bytes=0)
    seen.clear()
    assert off.verify(str(area / "ram"), str(out)).ok
    assert not any(_is(a, scripts.DROP_LISTED) for a, _ in seen)


def test_the_big_file_list_of_the_streamed_verify_holds_what_it_should(
        tmp_path: Path) -> None:
    ram, dst = tmp_path / "ram", tmp_path / "dst"
    for d in (ram, dst):
        d.mkdir()
        (d / "small").write_bytes(b"x" * 10)
        (d / "exact").write_bytes(b"x" * 100)
        (d / "more").write_bytes(b"x" * 101)
    (dst / ".part").mkdir()
    spool = dst / ".part" / "spool"
    done = subprocess.run(scripts.verify_list_argv(str(ram), str(dst), str(spool), 5, 100,
                                                   ".part"),
                          capture_output=True, check=True)
    assert done.stdout.decode().startswith("META 3 211 0 1")
    big = sorted(n for n in (spool / "big").read_bytes().split(b"\0") if n)
    assert big == [b"./exact", b"./more"]
    # the spool's part directory (sort spills there) is not walked
    assert b".part" not in (spool / "act").read_bytes()
    with pytest.raises(ValueError, match="one plain name"):
        scripts.verify_list_argv("/r", "/d", "/d/p/s", 5, 0, "p/*")


def test_streamed_mode_is_off_by_default() -> None:
    eng = StagingEngine([LocalHost("rsa1")], Identity("u", 1000, 1000))
    assert eng.stream_objects == 0 and eng.stripe_bytes == 0
