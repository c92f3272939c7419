"""Streamed mode: a tree above ``stream_objects`` is listed and copied on the nodes.

``parse_listing`` runs anywhere; the engine tests copy real trees on this machine
(LocalHost) as the unprivileged user ``nobody`` and need root to switch to it, like
``test_staging_engine.py``, whose tree and helpers they share.
"""

from __future__ import annotations

import base64
import os
import stat
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from rsa_scheduler.hosts import Cancelled, LocalHost
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
    assert done.stdout.decode().startswith("META 3 211 0 1 3\n")  # 1 chunk of 3 files
    big = sorted(n for n in (spool / "big").read_bytes().split(b"\0") if n)
    assert big == [b"./exact", b"./more"]
    # the spool's part directory (sort spills there) is not walked
    assert b".part" not in (spool / "act").read_bytes()
    with pytest.raises(ValueError, match="one plain name"):
        scripts.verify_list_argv("/r", "/d", "/d/p/s", 5, 0, "p/*")


def test_the_engine_alone_lists_every_tree_the_daemon_passes_the_setting() -> None:
    # staging.stream_objects is 20000 by default (test_config); an engine built without
    # it (tests, benchmarks) lists every tree in the process, as before
    eng = StagingEngine([LocalHost("rsa1")], Identity("u", 1000, 1000))
    assert eng.stream_objects == 0 and eng.stripe_bytes == 0


# -- resume (issue 16): the listed mode's quick check, run on the nodes per chunk --

def _marks(root: Path, names: Sequence[bytes]) -> dict[bytes, tuple[int, int]]:
    """(inode, ctime) of each name: unchanged means it was not copied again (tar writes
    a new file and sets its mtime: a new inode, a new ctime)."""
    base = os.fsencode(root)
    return {n: (st.st_ino, st.st_ctime_ns) for n in names
            for st in [os.lstat(os.path.join(base, n))]}


def _complete(src: Path, dst: Path) -> list[bytes]:
    """The names below ``dst`` that the listed mode's quick check finds complete
    (``plan.pending``): same type, and size and mtime (s) for a regular file, target for
    a symlink. Hard-linked names left out: streamed mode copies them again."""
    out = []
    base_s, base_d = os.fsencode(src), os.fsencode(dst)
    for dirpath, dirs, files in os.walk(base_s):
        for n in dirs + files:  # a symlink to a directory is in dirs
            p = os.path.join(dirpath, n)
            rel = os.path.relpath(p, base_s)
            s = os.lstat(p)
            if stat.S_ISDIR(s.st_mode):
                continue
            try:
                d = os.lstat(os.path.join(base_d, rel))
            except FileNotFoundError:
                continue
            if stat.S_IFMT(s.st_mode) != stat.S_IFMT(d.st_mode) or (
                    stat.S_ISREG(s.st_mode) and s.st_nlink > 1):
                continue
            if stat.S_ISREG(s.st_mode) and (s.st_size, int(s.st_mtime)) != (
                    d.st_size, int(d.st_mtime)):
                continue
            if stat.S_ISLNK(s.st_mode) and os.readlink(p) != os.readlink(
                    os.path.join(base_d, rel)):
                continue
            out.append(rel)
    return out


def _damage(root: Path, outside: Path) -> None:
    """What an interrupted copy (or someone) left at a destination: a file with the
    source's size but another mtime, one cut short, one missing, and a symlink planted
    at a file's name pointing to a file outside the tree."""
    sub = root / "sub dir"
    st = (sub / "f011").stat()
    (sub / "f011").write_bytes(os.urandom(st.st_size))  # same size, another mtime
    os.utime(sub / "f011", ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    st12 = (sub / "f012").stat()
    with open(sub / "f012", "r+b") as f:
        f.truncate(7)  # another size, the source's mtime
    os.utime(sub / "f012", ns=(st12.st_atime_ns, st12.st_mtime_ns))
    (sub / "f013").unlink()
    os.symlink(outside, sub / "f013")
    (sub / "f014").unlink()


CHANGED = [b"sub dir/f011", b"sub dir/f012", b"sub dir/f013", b"sub dir/f014"]


@needs_root
def test_a_streamed_stage_in_resumes_copying_only_what_is_not_complete(
        area: Path, user: Identity, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stream, "CHUNK_FILES", 7)
    monkeypatch.setattr(stream, "CHUNKS_PER_CALL", 2)
    seen: list[tuple[list[str], int]] = []
    ram, src = area / "ram", area / "src"
    eng = engine(user, seen)
    eng.prepare_root(str(ram))
    first = eng.stage_in(str(src), str(ram))
    assert (first.files, first.already) == (51, 0)
    copiers = [a for a, _ in seen if _is(a, scripts.STREAM_COPY)]
    assert copiers and all(a[-1] == "" for a in copiers)  # fresh: nothing to look at
    outside = area / "outside"
    outside.write_bytes(b"not the user's tree")
    os.chown(outside, user.uid, user.gid)
    _damage(ram, outside)
    kept = _complete(src, ram)
    assert len(kept) == 51 - 4 - len(CHANGED)  # the hard-linked four: copied again
    before = _marks(ram, kept)
    seen.clear()
    reports: list[Any] = []
    eng.progress = reports.append
    again = eng.stage_in(str(src), str(ram))
    assert (again.files, again.already) == (4 + len(CHANGED), len(kept))
    assert again.files + again.already == 51
    assert _marks(ram, kept) == before  # not one of them written again
    assert tree_state(ram) == tree_state(src)  # f011-f014 copied, content too
    assert not (ram / "sub dir" / "f013").is_symlink()
    assert outside.read_bytes() == b"not the user's tree"  # replaced, not followed
    assert all(a[-1] == "1" for a, _ in seen if _is(a, scripts.STREAM_COPY))
    assert reports[-1].files_done == reports[-1].files_total == again.files
    assert reports[-1].bytes_done == reports[-1].bytes_total == again.bytes
    big = (src / "big").stat().st_size  # the linked group, counted per name as listed
    assert again.bytes == big * 2 + 3 * 2 + sum(
        (src / os.fsdecode(n)).stat().st_size for n in CHANGED)
    assert not list(ram.glob(".rsa-staging-77-*"))
    full = eng.stage_in(str(src), str(ram), resume=False)
    assert (full.files, full.already) == (51, 0)
    assert all(_marks(ram, [n])[n] != before[n] for n in kept if n.startswith(b"sub"))


@needs_root
def test_a_killed_streamed_stage_in_is_resumed_where_it_stopped(
        area: Path, user: Identity, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stream, "CHUNK_FILES", 5)
    monkeypatch.setattr(stream, "CHUNKS_PER_CALL", 1)
    ram, src = area / "ram", area / "src"
    calls = [0]

    class Killed(SpyHost):
        def run(self, argv: Sequence[str], **kw: Any) -> Completed:
            if _is(argv, scripts.STREAM_COPY):
                calls[0] += 1
                if calls[0] > 4:
                    raise Cancelled("rsad was killed")
            return super().run(argv, **kw)

    eng = StagingEngine([Killed("rsa1", []), Killed("rsa2", [])], user, job_id="77",
                        stream_objects=10)
    eng.prepare_root(str(ram))
    with pytest.raises(Cancelled):
        eng.stage_in(str(src), str(ram))
    kept = _complete(src, ram)
    assert 0 < len(kept) < 47  # some chunks were copied, not all
    before = _marks(ram, kept)
    again = engine(user, []).stage_in(str(src), str(ram))
    assert again.already == len(kept) and again.files + again.already == 51
    assert _marks(ram, kept) == before
    assert tree_state(ram) == tree_state(src)
    assert not list(ram.glob(".rsa-staging-77-*"))


@needs_root
def test_a_streamed_stage_out_resumes_with_atomic_placement(
        area: Path, user: Identity) -> None:
    seen: list[tuple[list[str], int]] = []
    ram, src, out = area / "ram", area / "src", area / "outs" / "out"
    eng = engine(user, seen)
    eng.prepare_root(str(ram))
    eng.stage_in(str(src), str(ram))
    eng.stage_out(str(ram), str(out))
    outside = area / "outs" / "outside"
    outside.write_bytes(b"elsewhere")
    os.chown(outside, user.uid, user.gid)
    _damage(out, outside)
    kept = _complete(ram, out)
    before = _marks(out, kept)
    seen.clear()
    again = eng.stage_out(str(ram), str(out))
    assert (again.files, again.already) == (4 + len(CHANGED), len(kept))
    assert all(a[10] == scripts.ATOMIC and a[-1] == "1"
               for a, _ in seen if _is(a, scripts.STREAM_COPY))
    assert _marks(out, kept) == before
    assert tree_state(out) == tree_state(src)
    assert outside.read_bytes() == b"elsewhere"
    assert not list(out.glob(".rsa-staging-77-*"))
    seen.clear()
    assert eng.verify(str(ram), str(out)).ok
    assert any(_is(a, scripts.VERIFY_LIST) for a, _ in seen)  # streamed_verify


ODD_NAMES = [b"new\nline", b"tab\tname", b"back\\slash", b"back\\t", b"back\\b",
             b"-dash", b"--", b"bad\xff\xfe name", b" lead space", b"x\\nnot newline"]


@needs_root
def test_streamed_resume_is_byte_exact_on_odd_names(
        area: Path, user: Identity, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stream, "CHUNK_FILES", 4)
    ram, src = area / "ram", area / "src"
    base = os.fsencode(src / "sub dir")
    for i, n in enumerate(ODD_NAMES):
        p = os.path.join(base, n)
        with open(p, "wb") as f:
            f.write(b"%d" % i * (i + 1))
        os.chown(p, user.uid, user.gid)
        os.utime(p, (1_500_000_000, 1_500_000_000))
    for t in (b"odd\ttarget\nwith newline", b"odd\ttarget\nother"):
        os.symlink(t, os.path.join(base, b"lnk-" + t[-5:]))
        os.lchown(os.path.join(base, b"lnk-" + t[-5:]), user.uid, user.gid)
    eng = engine(user, [])
    eng.prepare_root(str(ram))
    eng.stage_in(str(src), str(ram))
    assert tree_state(ram) == tree_state(src)
    dst = os.fsencode(ram / "sub dir")
    # names one escape away from each other: only the changed one is copied again
    os.utime(os.path.join(dst, b"back\\t"), (1_600_000_000, 1_600_000_000))
    os.utime(os.path.join(dst, b"bad\xff\xfe name"), (1_600_000_000, 1_600_000_000))
    os.unlink(os.path.join(dst, b"lnk-wline"))
    os.symlink(b"odd\ttarget\nwith", os.path.join(dst, b"lnk-wline"))  # another target
    changed = {b"sub dir/back\\t", b"sub dir/bad\xff\xfe name", b"sub dir/lnk-wline"}
    kept = _complete(src, ram)
    assert not changed & set(kept)
    assert {b"sub dir/" + n for n in ODD_NAMES} - changed <= set(kept)
    before = _marks(ram, kept)
    again = eng.stage_in(str(src), str(ram))
    assert (again.files, again.already) == (4 + len(changed), len(kept))
    assert _marks(ram, kept) == before
    assert tree_state(ram) == tree_state(src)
