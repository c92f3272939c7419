"""Verify reads what the destination's filesystem holds, not a node's page cache, and a
streamed verify hashes every chunk it listed (issue 37, item 5).

The programs run for real here (bash, coreutils, tar) on the local disk: a ``b2sum`` or
``tar`` wrapper first in PATH records how many of each file's pages were cached (util-
linux ``fincore``) when it started reading. The engine tests run as ``nobody`` on this
machine (LocalHost) and need root, like ``test_staging_engine.py``.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from rsa_scheduler.daemon.data import verified_words
from rsa_scheduler.daemon.stagingworker import verification_from_json, verification_to_json
from rsa_scheduler.hosts import LocalHost
from rsa_scheduler.runner import Completed, Identity
from rsa_scheduler.staging import StagingEngine, StagingError, scripts, stream
from rsa_scheduler.staging.manifest import Verification
from rsa_scheduler.staging.packing import archive_number
from rsa_scheduler.staging.verifier import READ_BACK
from tests.unit.conftest import _is

pytestmark = pytest.mark.unit
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run as a user")


def _spy_path(tmp: Path, tool: str) -> tuple[dict[str, str], Path]:
    """An environment whose ``tool`` first logs each regular file argument's cached pages
    (fincore) to the returned log, then runs the real one."""
    bin_dir, log = tmp / "bin", tmp / "cached.log"
    bin_dir.mkdir(exist_ok=True)
    wrapper = bin_dir / tool
    wrapper.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do [ -f "$a" ] && printf "%s %s\\n" "$a" '
        '"$(fincore -n -o PAGES -- "$a")" >> "$SPY_LOG"; done\n'
        f'exec /usr/bin/{tool} "$@"\n')
    wrapper.chmod(0o755)
    return {"PATH": f"{bin_dir}:/usr/bin:/bin", "SPY_LOG": str(log)}, log


def _cached(log: Path) -> dict[str, int]:
    return {name: int(pages) for name, pages in
            (line.rsplit(None, 1) for line in log.read_text().splitlines())}


def _dirty_files(root: Path, n: int) -> list[bytes]:
    root.mkdir()
    for i in range(n):
        (root / f"f{i}").write_bytes(os.urandom(64 << 10))  # just written: dirty, cached
    return [f"f{i}".encode() for i in range(n)]


def test_destination_files_are_hashed_after_leaving_the_page_cache(tmp_path: Path) -> None:
    """DATA_OUT's side of the listed verify: written back (syncfs) and dropped, each file,
    before b2sum reads it; the RAMDISK's side is hashed as before."""
    names = _dirty_files(tmp_path / "out", 3)
    env, log = _spy_path(tmp_path, "b2sum")
    done = subprocess.run(scripts.hash_uncached_argv(str(tmp_path / "out")), env=env,
                          input=scripts.encode_list(names), capture_output=True, text=True,
                          check=True)
    assert len(scripts.decode_output(done.stdout).split(b"\0")) == 3 + 1  # hashes
    assert _cached(log) == {"./f0": 0, "./f1": 0, "./f2": 0}
    # control: the plain hash (the RAMDISK's side) reads them from the page cache
    log.unlink()
    subprocess.run(scripts.hash_argv(str(tmp_path / "out")), env=env,
                   input=scripts.encode_list(names), capture_output=True, text=True,
                   check=True)
    assert all(pages > 0 for pages in _cached(log).values())


def test_an_archive_is_listed_and_hashed_after_leaving_the_page_cache(
        tmp_path: Path) -> None:
    names = _dirty_files(tmp_path / "src", 2)
    archive = tmp_path / "rsa-1-0.tar"
    subprocess.run(scripts.tar_pack_argv(str(tmp_path / "src"), str(archive)),
                   input=scripts.encode_list(names), check=True, capture_output=True,
                   text=True)
    env, log = _spy_path(tmp_path, "tar")
    for argv in (scripts.tar_list_argv(str(archive)), scripts.tar_hash_argv(str(archive))):
        subprocess.run(argv, env=env, check=True, capture_output=True)
        assert _cached(log) == {str(archive): 0}, argv[2][:60]
        log.unlink()
        subprocess.run(["cat", str(archive)], stdout=subprocess.DEVNULL, check=True)


def test_a_name_missing_at_the_destination_only_differs_in_the_streamed_hash(
        tmp_path: Path) -> None:
    """VERIFY_HASH: a file missing at the destination is a difference, not an error; a
    file there is dropped from the page cache before it is hashed."""
    ram, dst = tmp_path / "ram", tmp_path / "dst"
    names = _dirty_files(ram, 2)
    dst.mkdir()
    (dst / "f0").write_bytes((ram / "f0").read_bytes())
    spool = dst / "spool"
    spool.mkdir()
    (spool / "badnames").write_bytes(b"")
    (spool / "chunk-00000000").write_bytes(b"".join(b"./" + n + b"\0" for n in names))
    env, log = _spy_path(tmp_path, "b2sum")
    done = subprocess.run(scripts.verify_hash_argv(str(ram), str(dst), str(spool), 4, "s1"),
                          env=env, capture_output=True, text=True, check=True)
    assert done.stdout.split("\n")[0] == "1 2 1"  # one chunk, two files, one differs
    assert _cached(log)["./f0"] == 0  # the destination's copy, dropped first
    assert _cached(log)["./f1"] > 0  # the RAMDISK's side: as it is


def test_check_hashed_wants_every_chunk_and_file_of_the_listing() -> None:
    stream.check_hashed("/d", (3, 12000), (3, 12000))
    for hashed in ((2, 10000), (3, 11999), (4, 12000)):
        with pytest.raises(StagingError, match=r"hashed \d of 3 chunks .* of 12000 files"):
            stream.check_hashed("/d", (3, 12000), hashed)


class Spy(LocalHost):
    """A LocalHost that keeps (node, argv) of every command it ran."""

    def __init__(self, name: str, seen: list[tuple[str, list[str]]]) -> None:
        super().__init__(name)
        self.seen = seen

    def run(self, argv: Sequence[str], **kw: Any) -> Completed:
        self.seen.append((self.name, list(argv)))
        return super().run(argv, **kw)


def test_an_archives_number_is_the_node_that_packed_it() -> None:
    assert [archive_number(f"/o/rsa-5-{n}.tar") for n in (0, 2, 10, 11)] == [0, 2, 10, 11]
    assert archive_number("/o/rsa-5.c2-3.tar") == 3  # a requeued run's archive
    assert archive_number("/o/rsa-5-x.tar") == 0


@needs_root
def test_each_archive_is_read_back_by_another_node_than_the_one_that_packed_it(
        area: Path, user: Identity) -> None:
    seen: list[tuple[str, list[str]]] = []
    eng = StagingEngine([Spy(f"rsa{i}", seen) for i in (1, 2, 3)], user, job_id="5")
    out = area / "outs" / "out"
    stats = eng.stage_out(str(area / "src"), str(out), method="tar")
    packed = {a[5]: node for node, a in seen if _is(a, scripts.TAR_PACK)}
    count = len(stats.archives) - 1  # (the index is the last)
    assert len(packed) == count >= 2
    assert packed == {str(out / f"rsa-5-{n}.tar"): f"rsa{n + 1}" for n in range(count)}
    seen.clear()
    v = eng.verify(str(area / "src"), str(out), method="tar")
    assert v.ok and v.read_back.startswith("each archive read back by another RSA node")
    for program in (scripts.TAR_LIST, scripts.TAR_HASH):
        read = {a[4]: node for node, a in seen if _is(a, program)}
        assert read == {str(out / f"rsa-5-{n}.tar"): f"rsa{(n + 1) % 3 + 1}"
                        for n in range(count)}
    alone = StagingEngine([Spy("rsa1", seen)], user, job_id="5")
    assert alone.verify(str(area / "src"), str(out), method="tar").read_back.startswith(
        "each archive read back by the RSA node that packed it")


@needs_root
def test_a_streamed_verify_with_a_chunk_no_stream_hashed_fails(
        area: Path, user: Identity, monkeypatch: pytest.MonkeyPatch) -> None:
    """A chunk of the listing that no hashing stream claimed (here: taken from the spool
    before the streams start, as by a claimant that died) leaves its files unhashed: a
    file in it whose content differs went unseen and the verify passed."""
    monkeypatch.setattr(stream, "CHUNK_FILES", 7)
    seen: list[tuple[str, list[str]]] = []
    eng = StagingEngine([Spy("rsa1", seen), Spy("rsa2", seen)], user, job_id="77",
                        stream_objects=10)
    out = area / "outs" / "out"
    eng.stage_out(str(area / "src"), str(out))
    good = eng.verify(str(area / "src"), str(out))
    assert good.ok and good.read_back == READ_BACK
    victim = out / "sub dir" / "f011"
    st = victim.stat()
    victim.write_bytes(bytes(b ^ 0xFF for b in victim.read_bytes()))
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))
    real, lock, lost = eng._user, threading.Lock(), list[Path]()

    def losing_a_chunk(host: Any, argv: Sequence[str], what: str, **kw: Any) -> Completed:
        with lock:  # before any stream hashes: the chunk holding f011 goes
            if _is(argv, scripts.VERIFY_HASH) and not lost:
                lost.extend(c for c in Path(argv[6]).glob("chunk-*")
                            if b"./sub dir/f011\0" in c.read_bytes())
                lost[0].unlink()
        return real(host, argv, what, **kw)

    monkeypatch.setattr(eng, "_user", losing_a_chunk)
    with pytest.raises(StagingError, match="not every file was compared"):
        eng.verify(str(area / "src"), str(out))


def test_the_message_says_how_the_copies_were_read() -> None:
    v = Verification(True, "content", 40, 4000, read_back=READ_BACK)
    assert verified_words(v, "/pfs/u/out", "rsync") == (
        "content verified: 40 objects (3.91K) in /pfs/u/out (every file's bytes hashed on "
        "both sides; every copy read back by an RSA node after it dropped that copy from "
        "its page cache)")
    tar = Verification(True, "content", 40, 4000, read_back="each archive read back by X")
    assert verified_words(tar, "/o", "tar").endswith(
        "(every member's bytes hashed on both sides; each archive read back by X)")
    assert verification_from_json(verification_to_json(v)).read_back == READ_BACK
    old = verification_to_json(v)
    del old["read_back"]  # recorded before: the message keeps the words of then
    assert verification_from_json(old).read_back == ""
