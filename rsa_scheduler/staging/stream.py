"""Streamed mode: a tree too large to list in rsad is listed and copied on the RSA nodes.

Owns :class:`StreamedCopy`: the copy of a tree of more than ``stream_objects`` objects
(``docs/staging.md#streamed-mode``). rsad never holds its file list: one ``find`` on the
first RSA node sorts the tree into list files in a spool directory below the
destination's part directory (``scripts.STREAM_LIST``), ``split`` cuts the files' list
into chunks, and every stream of every node claims chunks by rename and copies them with
the tar pipe (``scripts.STREAM_COPY``), atomically placed where the caller asks. rsad
receives counters only: the totals of the listing, then "<chunks> <files>" per call of
each stream. Memory in rsad is constant in the size of the tree; on the nodes, too
(find, split, tar stream; the lists are files on the destination).

``streamed_verify`` is the same for ``verify``: the two manifests (hard-link groups
included) are compared on the first node (sorted files, ``comm``), every node drops the
destination's big files from its page cache, and the RAMDISK's files are hashed on both
sides by every stream, claiming chunks (each destination file dropped from the hashing
node's page cache first); rsad receives counts and the first five differences, and
checks that every chunk and file of the listing was hashed. It checks what the listed
verify checks.

Resume: before a chunk is copied, the stream drops the names the destination already
holds complete, by the listed mode's quick check (``plan.pending``: same type, size and
mtime in seconds, symlink target), on the node (``scripts.QUICK_CHECK``); rsad counts
them in ``Stats.already``. Not when the destination held nothing at listing time.

Streamed mode is on by default (``staging.stream_objects``: ``STREAM_OBJECTS``; empty:
off, every tree is listed in rsad). What its copy does not do (the listed mode does):
resume hard-linked files (their list is copied again whole), striping (big files go
through tar like the rest), the destination scan (planted symlinks are replaced, not
refused), another ``copy_tool`` (it copies with tar, so the engine uses it with
``copy_tool: engine`` only), exact byte progress of a fresh copy (bytes in proportion to
the files copied; a resumed copy reads the sizes).

Commands run through the engine's seams (``run``: as the user, with the engine's
timeout and cancel; ``parallel``: the engine's streams). Must not import ``engine``.
"""

from __future__ import annotations

import base64
import logging
import posixpath
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from rsa_scheduler.hosts import Host
from rsa_scheduler.runner import Completed
from rsa_scheduler.staging import scripts
from rsa_scheduler.staging.manifest import Difference, Verification, display
from rsa_scheduler.staging.report import ProgressMeter, StagingError, Stats

log = logging.getLogger(__name__)
T = TypeVar("T")
STREAM_OBJECTS = 20_000  # staging.stream_objects' default (bench/bench_manifest.py)
CHUNK_FILES = 5000  # names per chunk (as a list bucket's limit)
CHUNKS_PER_CALL = 4  # chunks one command copies before it reports (progress, cancel)


class Run(Protocol):
    def __call__(self, host: Host, argv: Sequence[str], what: str, *,
                 input: str | None = None) -> Completed: ...


class Parallel(Protocol):
    def __call__(self, items: Iterable[T], fn: Callable[[Host, T], None],
                 meter: ProgressMeter | None, *, spread: bool = False) -> None: ...


@dataclass(frozen=True, slots=True)
class Listing:
    """What the node's listing reports: counters and at most five skipped names."""

    files: int
    linked: int
    dirs: int
    skipped: int
    nbytes: int
    chunks: int
    skipped_names: tuple[bytes, ...] = ()
    occupied: bool = True  # the destination held something: resume looks at it


def parse_listing(stdout: str, root: str, phase: str, user: str) -> Listing:
    """Parse ``scripts.STREAM_LIST``'s output; unreadable objects refuse the transfer
    (permanent, naming up to five), as the listed mode does."""
    head, _, rest = stdout.partition("\n")
    words = head.split()
    names = tuple(n.removeprefix(b"./") for n in
                  base64.b64decode(rest.strip() or b"").split(b"\0") if n)
    if words[:1] == ["BAD"] and len(words) == 2:
        bad = int(words[1])
        shown = ", ".join(repr(display(n)) for n in names)
        more = f" and {bad - len(names)} more" if bad > len(names) else ""
        raise StagingError(
            f"{phase} refused: user {user} cannot read {bad} object(s) in {root}: "
            f"{shown}{more}; fix their permissions or remove them", permanent=True)
    if words[:1] != ["LIST"] or len(words) != 8:
        raise StagingError(f"{phase}: unexpected listing of {root}: {head[:200]!r}",
                           permanent=False)
    files, linked, dirs, skipped, nbytes, chunks, occupied = (int(w) for w in words[1:])
    return Listing(files, linked, dirs, skipped, nbytes, chunks, names, occupied != 0)


class StreamedCopy:
    """One streamed copy of ``src`` to ``dst`` over ``hosts`` (see the module)."""

    def __init__(self, hosts: Sequence[Host], run: Run, parallel: Parallel, *,
                 uid: int, user: str, streams: int, meter: Callable[[int, int],
                                                                    ProgressMeter],
                 clock: Callable[[], float]) -> None:
        self.hosts = hosts
        self.run = run
        self.parallel = parallel
        self.uid = uid
        self.user = user
        self.streams = streams
        self.meter = meter
        self.clock = clock

    def copy(self, phase: str, src: str, dst: str, parts: str, *, atomic: bool,
             resume: bool = True,
             before_copy: Callable[[int, int, bool], None] = lambda *_: None,
             after_copy: Callable[[], None] = lambda: None) -> Stats:
        """Copy ``src`` into ``dst``; ``parts``: the part directory (already made, empty)
        that holds the spool and, when ``atomic``, the chunks' part directories.
        ``resume``: names the destination already holds complete (the listed mode's
        quick check, on the nodes) are not copied again; they count in
        ``Stats.already``. ``before_copy(bytes, files, fresh)`` runs once the size is known
        (the stage-out's PFS slot, the stage-in's free-space check); ``fresh``: the
        destination held nothing yet. ``after_copy()`` runs once every chunk is copied,
        before the directory modes and times are set (a stage-in's settle check)."""
        t0 = self.clock()
        first = self.hosts[0]
        spool = posixpath.join(parts, "spool")
        listing = parse_listing(
            self.run(first, scripts.stream_list_argv(src, spool, self.uid, CHUNK_FILES,
                                                     dst, posixpath.basename(parts)),
                     f"{phase}: listing {src} (streamed)").stdout, src, phase, self.user)
        files = listing.files + listing.linked
        resume = resume and listing.occupied  # a fresh destination has nothing to skip
        log.info("%s %s -> %s, streamed: %d files, %d bytes, %d directories, %d chunks%s",
                 phase, src, dst, files, listing.nbytes, listing.dirs, listing.chunks,
                 ", resuming" if resume else "")
        before_copy(listing.nbytes, files, not listing.occupied)
        self.run(first, scripts.stream_mkdirs_argv(spool, dst),
                 f"{phase}: creating directories")
        meter = self.meter(files, listing.nbytes)
        per_node: dict[str, int] = {}
        lock = threading.Lock()
        calls = [0]
        already = [0, 0]  # files found complete at the destination, their bytes

        def stream(host: Host, n: int) -> None:
            while True:
                with lock:
                    calls[0] += 1
                    claim = f"{n}-{calls[0]}"
                done = self.run(host, scripts.stream_copy_argv(
                    src, dst, spool, CHUNKS_PER_CALL, claim, parts if atomic else "",
                    resume=resume), f"{phase}: copying chunks (streamed)")
                words = done.stdout.split()
                chunks, copied, found, found_bytes = (int(w) for w in words[:2] + words[3:])
                if not chunks:
                    return
                with lock:
                    already[0] += found
                    already[1] += found_bytes
                    meter.found_done(found, found_bytes)
                    if words[2] != "-":  # resuming: the node read the sizes
                        nbytes = int(words[2])
                    else:  # in proportion to the files copied, of what is left
                        left_files, left_bytes = meter.left()
                        nbytes = left_bytes * copied // left_files if left_files > 0 else 0
                    meter.add(copied, nbytes)
                    per_node[host.name] = per_node.get(host.name, 0) + nbytes

        self.parallel(range(self.streams), stream, meter)
        if meter.files + already[0] != files:
            raise StagingError(
                f"{phase}: streamed copy of {src} copied {meter.files} and found "
                f"{already[0]} complete of {files} files (the chunks were not all "
                "copied); will retry", permanent=False)
        after_copy()
        self.run(first, scripts.stream_dir_times_argv(spool, src, dst),
                 f"{phase}: setting directory modes and times")
        meter.tick(final=True)
        if resume:
            log.info("%s %s -> %s, streamed: %d files copied, %d already done", phase,
                     src, dst, meter.files, already[0])
        return Stats(phase, meter.files, max(listing.nbytes - already[1], 0), listing.dirs,
                     self.clock() - t0, listing.chunks, already[0],
                     tuple(display(n) for n in listing.skipped_names), per_node,
                     skipped_count=listing.skipped)


_META = re.compile(rb"(.*?)\t(?:l .*|(= .*)|[fdp][ 0-9-]+)", re.S)
META_WHAT = "missing, or its type, size, mode, mtime or symlink target differs"
LINK_WHAT = "hard link broken"


def _decode(text: str) -> list[bytes]:
    return [n for n in base64.b64decode(text.strip() or b"").split(b"\0") if n]


def check_hashed(dst: str, listed: tuple[int, int], hashed: tuple[int, int]) -> None:
    """The hashing streams must have claimed and hashed every chunk of the listing, and
    as many files as it holds: a chunk no stream could claim (or one claimed twice)
    would leave files unhashed, or counted twice, while the verify passed."""
    if hashed != listed:
        raise StagingError(
            f"verify: the streamed verify of {dst} hashed {hashed[0]} of {listed[0]} "
            f"chunks ({hashed[1]} of {listed[1]} files): not every file was compared; "
            "will retry", permanent=False)


def streamed_verify(hosts: Sequence[Host], run: Run, parallel: Parallel, *, ram: str,
                    dst: str, parts: str, level: str, streams: int,
                    drop_bytes: int = 0) -> Verification:
    """Verify ``dst`` against the RAMDISK ``ram`` without listing either in rsad; the
    spool goes below ``parts`` (made, empty, below ``dst``). Checked, as the listed
    verify checks: every object of the RAMDISK is at the destination with the same
    type, size, mode and mtime (seconds; symlinks: target), names sharing an inode in
    the RAMDISK share one at the destination, and, at level ``content``, every regular
    file's BLAKE2b-128, files of at least ``drop_bytes`` (0: none) read after every node
    wrote them back and dropped them from its page cache, the others after the hashing
    node did; every chunk of the listing hashed (``check_hashed``)."""
    spool = posixpath.join(parts, "spool")
    out = run(hosts[0], scripts.verify_list_argv(ram, dst, spool, CHUNK_FILES, drop_bytes,
                                                 posixpath.relpath(parts, dst)),
              f"verify: comparing {dst} with the RAMDISK (streamed)").stdout
    head, _, rest = out.partition("\n")
    words = head.split()
    if words[:1] != ["META"] or len(words) != 6:
        raise StagingError(f"verify: unexpected answer comparing {dst}: {head[:200]!r}",
                           permanent=False)
    objects, nbytes, meta_bad, chunks, files = (int(w) for w in words[1:])
    diffs = []
    for rec in _decode(rest):
        m = _META.fullmatch(rec)
        diffs.append(Difference(m[1] if m else rec,
                                LINK_WHAT if m and m[2] is not None else META_WHAT))
    bad = [meta_bad]
    lock = threading.Lock()
    calls = [0]
    hashed = [0, 0]  # chunks, files

    def hash_chunks(host: Host, n: int) -> None:
        while True:
            with lock:
                calls[0] += 1
                claim = f"{n}-{calls[0]}"
            answer = run(host, scripts.verify_hash_argv(ram, dst, spool, CHUNKS_PER_CALL,
                                                        claim),
                         f"verify: hashing in {ram} and {dst} (streamed)").stdout
            line, _, names = answer.partition("\n")
            claimed, nfiles, differ = (int(w) for w in line.split())
            with lock:
                hashed[0] += claimed
                hashed[1] += nfiles
                bad[0] += differ
                for rec in _decode(names):
                    if len(diffs) < 5:
                        path = rec.partition(b"  ")[2].removeprefix(b"./")
                        diffs.append(Difference(path, "content differs (hash)"))
            if not claimed:
                return

    if level == "content":
        if drop_bytes > 0:
            for host in hosts:  # page caches are per node
                run(host, scripts.drop_listed_argv(dst, posixpath.join(spool, "big")),
                    f"verify: dropping {dst}'s big files from the page cache")
        parallel(range(streams), hash_chunks, None)
        check_hashed(dst, (chunks, files), (hashed[0], hashed[1]))
    run(hosts[0], scripts.remove_tree_argv(parts), f"verify: removing {parts}")
    return Verification(ok=bad[0] == 0, level=level, checked=objects, checked_bytes=nbytes,
                        differences=tuple(diffs), differing=bad[0])
