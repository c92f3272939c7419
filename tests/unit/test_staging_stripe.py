"""Striped big files: ranges, checksums on both sides, placement only when all passed.

The pure parts (``plan.stripes``, ``stripe.check_range``, ``stripe.striped_files``) run
anywhere; the engine tests copy real files on this machine (LocalHost) as the
unprivileged user ``nobody`` and need root to switch to it, like
``test_staging_engine.py``, whose tree and helpers they share.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from rsa_scheduler.hosts import LocalHost
from rsa_scheduler.runner import CommandError, Completed, Identity
from rsa_scheduler.staging import StagingEngine, StagingError, scripts
from rsa_scheduler.staging.manifest import Entry
from rsa_scheduler.staging.plan import Bucket, stripes
from rsa_scheduler.staging.stripe import Range, StripedFile, check_range, striped_files
from tests.unit.conftest import _is, scratch_area
from tests.unit.test_staging_engine import tree_state

pytestmark = pytest.mark.unit
MiB = 1 << 20
HUGE = 64 * MiB + 123  # three ranges of 32, 32 MiB and 123 bytes over four streams
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run as a user")


# --- pure ---------------------------------------------------------------------------

@pytest.mark.parametrize("size,streams,min_range", [
    (HUGE, 4, 16 * MiB), (10 << 30, 8, 64 * MiB), (2 << 30, 3, 64 * MiB),
    (100 * MiB, 8, 64 * MiB), (1, 8, 64 * MiB), (0, 4, 1)])
def test_stripes_cover_every_byte_once_aligned(size: int, streams: int,
                                               min_range: int) -> None:
    ranges = stripes(size, streams, min_range=min_range)
    assert 1 <= len(ranges) <= streams
    offset = 0
    for start, length in ranges:
        assert start == offset and start % (16 * MiB) == 0
        offset += length
    assert offset == size
    assert all(n >= min_range for _, n in ranges[:-1])


def test_ten_gib_over_eight_streams_is_eight_ranges() -> None:
    assert [n for _, n in stripes(10 << 30, 8)] == [1280 * MiB] * 8


def test_only_big_dd_buckets_above_the_threshold_are_striped() -> None:
    big = Entry(b"big", "f", size=HUGE)
    small = Entry(b"small", "f", size=40 * MiB)
    linked = Entry(b"linked", "f", size=HUGE, nlink=2)
    buckets = [Bucket(0, "dd", (b"big",), 1, HUGE), Bucket(1, "dd", (b"small",), 1, 40 * MiB),
               Bucket(2, "tar", (b"linked",), 1, HUGE)]
    files = striped_files(buckets, [big, small, linked], parts="/d/.p", streams=4,
                          stripe_bytes=48 * MiB, min_range=16 * MiB)
    assert [(f.path, f.tmp, len(f.ranges)) for f in files] == [(b"big", "/d/.p/s0", 3)]
    assert striped_files(buckets, [big], parts="/d/.p", streams=1, stripe_bytes=1) == []
    assert striped_files(buckets, [big], parts="/d/.p", streams=4, stripe_bytes=0) == []


def _range(length: int = 100) -> Range:
    f = StripedFile(Bucket(3, "dd", (b"odd\nname",), 1, 300), Entry(b"odd\nname", "f", 300),
                    "/x/s3", ((0, 100), (100, 100), (200, 100)))
    return Range(f, 1, 100, length)


def test_check_range_accepts_equal_sums_of_every_chunk_of_the_range() -> None:
    check_range(_range(), "100 7 60 7 60\n160 9 40 9 40\n", "stage-in", "rsa1")


@pytest.mark.parametrize("out,words", [
    ("100 7 60 8 60\n160 9 40 9 40\n", "failed its checksum at bytes 100-160: read "
     "CRC-32 7 of 60 bytes, the destination returns CRC-32 8 of 60"),
    ("100 7 60 7 60\n160 9 40 9 39\n", "failed its checksum at bytes 160-200"),
    ("100 7 60 7 60\n", "copied bytes 100-160, expected up to 200"),
    ("100 7 60 7 60\n170 9 30 9 30\n", "reported a chunk at byte 170, expected 160"),
    ("100 7 0 7 0\n", "reported a chunk at byte 100, expected 100"),
    ("", "copied bytes 100-100"),
    ("dd: error\n", "unexpected checksum line"),
])
def test_check_range_refuses_a_mismatch_naming_the_range(out: str, words: str) -> None:
    with pytest.raises(StagingError) as e:
        check_range(_range(), out, "stage-out", "rsa2")
    msg = str(e.value)
    assert words in msg and "range 2/3 of 'odd\\nname' (bytes 100-200) on rsa2" in msg
    assert "nothing was placed" in msg and not e.value.permanent


# --- real files, as an unprivileged user --------------------------------------------

class HookHost(LocalHost):
    """A LocalHost that calls ``hook(argv, phase)`` before (``"before"``) and after
    (``"after"``) every command; the hook may raise to play a node that died."""

    def __init__(self, name: str, hook: Callable[[Sequence[str], str], None],
                 seen: list[tuple[str, list[str]]]) -> None:
        super().__init__(name)
        self.hook = hook
        self.seen = seen

    def run(self, argv: Sequence[str], **kw: Any) -> Completed:
        self.seen.append((self.name, list(argv)))
        self.hook(argv, "before")
        done = super().run(argv, **kw)
        self.hook(argv, "after")
        return done


@pytest.fixture
def area(user: Identity) -> Iterator[Path]:
    """conftest's area with a smaller tree and one HUGE sparse file, src/huge."""
    with scratch_area(user, prefix="rsa-stripe-", files=5) as base:
        src = base / "src"
        with open(src / "huge", "wb") as f:  # data, a hole of two whole blocks, data
            f.write(os.urandom(16 * MiB))
            f.seek(48 * MiB)
            f.write(os.urandom(HUGE - 48 * MiB))
        os.chown(src / "huge", user.uid, user.gid)
        os.chmod(src / "huge", 0o640)
        os.utime(src / "huge", (1_100_000_000, 1_100_000_000))
        yield base


def engine(user: Identity, hook: Callable[[Sequence[str], str], None] | None = None,
           seen: list[tuple[str, list[str]]] | None = None, *,
           stripe_bytes: int = 48 * MiB) -> StagingEngine:
    seen = [] if seen is None else seen
    hosts = [HookHost(n, hook or (lambda argv, when: None), seen) for n in ("rsa1", "rsa2")]
    return StagingEngine(hosts, user, job_id="77", stripe_bytes=stripe_bytes,
                         stripe_min=16 * MiB, verify_range_bytes=48 * MiB)


def _parts(root: Path) -> list[Path]:
    return list(root.glob(".rsa-staging-77-*"))


@needs_root
def test_a_big_file_is_striped_over_nodes_both_ways_and_keeps_everything(
        area: Path, user: Identity) -> None:
    seen: list[tuple[str, list[str]]] = []
    eng = engine(user, seen=seen)
    eng.prepare_root(str(area / "ram"))
    stats = eng.stage_in(str(area / "src"), str(area / "ram"))
    assert tree_state(area / "ram") == tree_state(area / "src")
    ranges = [(node, a) for node, a in seen if _is(a, scripts.STRIPE_RANGE)]
    assert [a[6:8] for _, a in ranges] == [["0", str(32 * MiB)],
                                           [str(32 * MiB), str(32 * MiB)],
                                           [str(64 * MiB), "123"]]
    assert {node for node, _ in ranges} == {"rsa1", "rsa2"}
    assert os.stat(area / "ram" / "huge").st_blocks * 512 <= HUGE - 32 * MiB + MiB  # hole kept
    assert stats.bytes >= HUGE and sum(stats.per_node.values()) == stats.bytes
    assert not _parts(area / "ram")
    out = area / "outs" / "out"
    seen.clear()
    eng.stage_out(str(area / "ram"), str(out))
    assert tree_state(out) == tree_state(area / "src")
    assert sum(_is(a, scripts.STRIPE_RANGE) for _, a in seen) == 3
    assert not _parts(out)
    assert eng.verify(str(area / "ram"), str(out)).ok
    # resume: the placed file is complete (size, mtime) and is not copied again
    seen.clear()
    again = eng.stage_out(str(area / "ram"), str(out))
    assert again.files == 0 and not any(_is(a, scripts.STRIPE_RANGE) for _, a in seen)


def _new_version(area: Path, user: Identity) -> bytes:
    """Stage the tree in and out once, then change the RAMDISK's huge file: DATA_OUT
    holds a complete older version, which a failed stage-out must leave whole."""
    eng = engine(user)
    eng.prepare_root(str(area / "ram"))
    eng.stage_in(str(area / "src"), str(area / "ram"))
    eng.stage_out(str(area / "ram"), str(area / "outs" / "out"))
    new = os.urandom(HUGE)
    (area / "ram" / "huge").write_bytes(new)
    os.utime(area / "ram" / "huge", (1_200_000_000, 1_200_000_000))
    return new


@needs_root
def test_a_copy_killed_mid_stripe_never_looks_complete(area: Path, user: Identity) -> None:
    new = _new_version(area, user)
    out = area / "outs" / "out"
    old = (area / "src" / "huge").read_bytes()
    started: list[Sequence[str]] = []

    def kill_second_range(argv: Sequence[str], when: str) -> None:
        if _is(argv, scripts.STRIPE_RANGE) and when == "before":
            started.append(argv)
            if len(started) == 2:
                # The range's copy dies half-way, as on a dying node: a file size limit
                # at the range's middle kills dd there (SIGXFSZ), on any machine speed.
                offset, length = int(argv[-4]), int(argv[-3])
                limit = offset + max(1, length // 2)
                done = subprocess.run(["prlimit", f"--fsize={limit}", "--", *argv],
                                      input=scripts.encode_list([b"huge"]), text=True,
                                      check=False, capture_output=True, user=user.uid)
                assert done.returncode != 0, "the range was copied whole despite the limit"
                raise CommandError(argv, done.returncode, "Killed")

    with pytest.raises(StagingError):
        engine(user, kill_second_range).stage_out(str(area / "ram"), str(out))
    assert (out / "huge").read_bytes() == old  # the old version, whole: never torn
    assert os.stat(out / "huge").st_mtime == 1_100_000_000
    tmp = [p for d in _parts(out) for p in d.iterdir() if p.name.startswith("s")]
    assert len(tmp) == 1 and tmp[0].read_bytes() != new  # the torn copy, hidden
    # the next run removes the leftover and copies the file again, whole
    eng = engine(user)
    eng.stage_out(str(area / "ram"), str(out))
    assert (out / "huge").read_bytes() == new and not _parts(out)
    assert eng.verify(str(area / "ram"), str(out)).ok


@needs_root
def test_a_stage_in_killed_mid_stripe_leaves_no_file_under_the_name(
        area: Path, user: Identity) -> None:
    def die_after_first_range(argv: Sequence[str], when: str) -> None:
        if _is(argv, scripts.STRIPE_RANGE) and when == "after" and argv[6] == "0":
            raise CommandError(argv, -9, "Killed")

    eng = engine(user, die_after_first_range)
    eng.prepare_root(str(area / "ram"))
    with pytest.raises(StagingError):
        eng.stage_in(str(area / "src"), str(area / "ram"))
    assert not (area / "ram" / "huge").exists()
    engine(user).stage_in(str(area / "src"), str(area / "ram"))
    assert tree_state(area / "ram") == tree_state(area / "src")
    assert not _parts(area / "ram")


# A filesystem that acknowledges a write and then returns other bytes: a `dd` first on
# the PATH of the range commands that, after the real dd wrote a chunk into the
# temporary file, overwrites 8 bytes of its second range (32 MiB on) behind its back.
CORRUPTING_DD = """#!/bin/sh
/bin/dd "$@" || exit $?
case " $* " in *" seek=33554432 "*" conv=notrunc,sparse,fsync "*)
  for a; do case $a in of=*) of=${a#of=};; esac; done
  printf RSAFAULT | /bin/dd of="$of" bs=1 seek=33566777 conv=notrunc status=none;;
esac
"""


@needs_root
def test_a_range_that_fails_its_checksum_is_never_placed(area: Path,
                                                         user: Identity) -> None:
    new = _new_version(area, user)
    out = area / "outs" / "out"
    old = (area / "src" / "huge").read_bytes()
    fake = area / "bin"
    fake.mkdir()
    (fake / "dd").write_text(CORRUPTING_DD)
    (fake / "dd").chmod(0o755)

    class CorruptingHost(HookHost):
        def run(self, argv: Sequence[str], **kw: Any) -> Completed:
            if _is(argv, scripts.STRIPE_RANGE):
                kw["env"] = {**kw["env"], "PATH": f"{fake}:{kw['env']['PATH']}"}
            return super().run(argv, **kw)

    hosts = [CorruptingHost(n, lambda argv, when: None, []) for n in ("rsa1", "rsa2")]
    eng = StagingEngine(hosts, user, job_id="77", stripe_bytes=48 * MiB, stripe_min=16 * MiB)
    with pytest.raises(StagingError) as e:
        eng.stage_out(str(area / "ram"), str(out))
    assert ("range 2/3 of 'huge' (bytes 33554432-67108864) on rsa" in str(e.value)
            and "failed its checksum at bytes 33554432-" in str(e.value)), str(e.value)
    assert (out / "huge").read_bytes() == old
    engine(user).stage_out(str(area / "ram"), str(out))
    assert (out / "huge").read_bytes() == new


@needs_root
def test_a_source_changed_while_it_was_copied_is_not_placed(area: Path,
                                                           user: Identity) -> None:
    def touch_source(argv: Sequence[str], when: str) -> None:
        if _is(argv, scripts.STRIPE_RANGE) and when == "after":
            os.utime(area / "src" / "huge", (1_300_000_000, 1_300_000_000))

    eng = engine(user, touch_source)
    eng.prepare_root(str(area / "ram"))
    with pytest.raises(StagingError) as e:
        eng.stage_in(str(area / "src"), str(area / "ram"))
    assert "changed while it was copied" in str(e.value)
    assert not (area / "ram" / "huge").exists()


@needs_root
def test_verify_hashes_big_files_in_parallel_ranges_read_back_uncached(
        area: Path, user: Identity) -> None:
    """Also with striping off (the default): verify reads big files back in ranges
    after dropping them from every node's page cache whichever way they were copied."""
    seen: list[tuple[str, list[str]]] = []
    eng = engine(user, seen=seen, stripe_bytes=0)
    eng.prepare_root(str(area / "ram"))
    eng.stage_in(str(area / "src"), str(area / "ram"))
    out = area / "outs" / "out"
    eng.stage_out(str(area / "ram"), str(out))
    assert not any(_is(a, scripts.STRIPE_RANGE) for _, a in seen)
    seen.clear()
    assert eng.verify(str(area / "ram"), str(out)).ok
    ranges = [(node, a[4], a[5:7]) for node, a in seen if _is(a, scripts.HASH_RANGE)]
    assert sorted(r[1:] for r in ranges) == sorted(
        (root, span) for root in (str(area / "ram"), str(out))
        for span in (["0", str(32 * MiB)], [str(32 * MiB), str(32 * MiB)],
                     [str(64 * MiB), "123"]))
    assert {node for node, _, _ in ranges} == {"rsa1", "rsa2"}
    drops = [node for node, a in seen if _is(a, scripts.DROP_CACHE)]
    assert sorted(drops) == ["rsa1", "rsa2"]  # every node's page cache
    # one flipped byte in the middle range, same size and mtime: only its hash sees it
    st = os.stat(out / "huge")
    with open(out / "huge", "r+b") as f:
        f.seek(50 * MiB)
        byte = f.read(1)
        f.seek(50 * MiB)
        f.write(bytes([byte[0] ^ 0x80]))
    os.utime(out / "huge", ns=(st.st_atime_ns, st.st_mtime_ns))
    v = eng.verify(str(area / "ram"), str(out))
    assert [(d.path, d.what) for d in v.differences] == [(b"huge", "content differs (hash)")]
    (out / "huge").unlink()
    v = eng.verify(str(area / "ram"), str(out))
    assert [(d.path, d.what) for d in v.differences] == [(b"huge", "missing")]


@needs_root
def test_an_atomic_stage_in_stripes_beside_the_buckets_part_directories(
        area: Path, user: Identity) -> None:
    seen: list[tuple[str, list[str]]] = []
    eng = engine(user, seen=seen)
    eng.prepare_root(str(area / "ram"))
    eng.stage_in(str(area / "src"), str(area / "ram"), atomic=True)  # early start: union
    assert tree_state(area / "ram") == tree_state(area / "src")
    assert sum(_is(a, scripts.STRIPE_RANGE) for _, a in seen) == 3
    assert any(_is(a, scripts.ATOMIC) for _, a in seen)
    assert not _parts(area / "ram")


@needs_root
def test_the_engine_does_not_stripe_by_default(area: Path, user: Identity) -> None:
    seen: list[tuple[str, list[str]]] = []
    hosts = [HookHost(n, lambda argv, when: None, seen) for n in ("rsa1", "rsa2")]
    eng = StagingEngine(hosts, user, job_id="77")
    eng.prepare_root(str(area / "ram"))
    eng.stage_in(str(area / "src"), str(area / "ram"))
    assert tree_state(area / "ram") == tree_state(area / "src")
    assert not any(_is(a, scripts.STRIPE_RANGE) or _is(a, scripts.STRIPE_NEW)
                   for _, a in seen)
    assert not _parts(area / "ram")
