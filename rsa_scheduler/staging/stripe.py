"""Striped big files: one large file copied as byte ranges by several streams at once.

Owns :class:`StripedFile` (one file above ``stripe_bytes``: its temporary file, its
ranges and how many are still to copy), :class:`Range` (one range, a work item of the
engine's streams, on whichever RSA node takes it), :func:`striped_files` (which buckets
of a plan are striped and into which ranges) and :func:`check_range` (the read side's
and the write side's checksum of one range, compared; a mismatch is a
:class:`StagingError` and nothing is placed).

The life of a striped file (``docs/staging.md#striped-big-files``): its temporary file
``<part directory>/s<bucket>`` is created at full size (a hole); every range is copied in
place by ``scripts.STRIPE_RANGE``, chunk by chunk, each chunk's CRC-32 taken on the read
side and on the write side while it is still cached, and the two compared; when the
last range has passed, ``scripts.STRIPE_PLACE`` checks the source did not
change, sets mode and mtime and renames the file to its final name. Until then the
final name does not exist (or still holds what was there before), so a copy killed at
any instant never looks complete.

Pure apart from the counter lock. Must not import ``engine``.
"""

from __future__ import annotations

import posixpath
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from rsa_scheduler.staging import scripts
from rsa_scheduler.staging.manifest import Entry, display
from rsa_scheduler.staging.plan import STRIPE_MIN, Bucket, stripes
from rsa_scheduler.staging.report import StagingError

STRIPE_BYTES = 256 << 20  # a sensible staging.stripe_bytes where striping pays (off by default)
VERIFY_RANGE_BYTES = 256 << 20  # verify hashes files this large in ranges, uncached


@dataclass(eq=False)
class StripedFile:
    """One big file copied in ranges; ``left`` counts ranges not yet checked."""

    bucket: Bucket
    entry: Entry
    tmp: str  # the temporary file, below the part directory
    ranges: tuple[tuple[int, int], ...]
    left: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self.left = len(self.ranges)

    @property
    def path(self) -> bytes:
        return self.entry.path

    def items(self) -> list[Range]:
        return [Range(self, i, off, n) for i, (off, n) in enumerate(self.ranges)]

    def finished_one(self) -> bool:
        """Count one range as checked; True for the last one (the caller places it)."""
        with self._lock:
            self.left -= 1
            return self.left == 0


@dataclass(frozen=True, slots=True, eq=False)
class Range:
    """Bytes ``offset`` .. ``offset + length`` of a striped file."""

    file: StripedFile
    index: int
    offset: int
    length: int

    def describe(self) -> str:
        return (f"range {self.index + 1}/{len(self.file.ranges)} of "
                f"'{display(self.file.path)}' (bytes {self.offset}-"
                f"{self.offset + self.length})")


def striped_files(buckets: Iterable[Bucket], entries: Iterable[Entry], *, parts: str,
                  streams: int, stripe_bytes: int, min_range: int = STRIPE_MIN
                  ) -> list[StripedFile]:
    """The ``dd`` buckets (one big regular file each) of at least ``stripe_bytes`` that
    split into two ranges or more over ``streams``; temporary files below ``parts``."""
    if stripe_bytes <= 0 or streams < 2:
        return []
    chosen = {b.paths[0]: b for b in buckets
              if b.tool == "dd" and len(b.paths) == 1 and b.bytes >= stripe_bytes}
    out: list[StripedFile] = []
    for e in entries:
        b = chosen.get(e.path)
        if b is None or e.kind != "f":
            continue
        ranges = stripes(e.size, streams, min_range=min_range)
        if len(ranges) > 1:
            out.append(StripedFile(b, e, posixpath.join(parts, f"s{b.index}"),
                                   tuple(ranges)))
    return out


def check_range(r: Range, stdout: str, phase: str, node: str) -> None:
    """Check the output of ``scripts.stripe_range_argv`` for one range: its chunks
    cover the range in order, each was read whole, and each has the same CRC-32 and
    count on the read side and the write side. Raises :class:`StagingError`
    (transient: the next run copies the file again) naming the range otherwise."""
    def fail(why: str) -> StagingError:
        return StagingError(f"{phase}: {r.describe()} on {node} {why}; nothing was placed; "
                            "will retry", permanent=False, node=node)

    try:
        chunks = scripts.parse_sums(stdout)
    except ValueError as e:
        raise fail(f"gave {e}") from e
    at, end = r.offset, r.offset + r.length
    for offset, read, written in chunks:
        if offset != at or read[1] <= 0:
            raise fail(f"reported a chunk at byte {offset}, expected {at}")
        if read != written:
            raise fail(f"failed its checksum at bytes {offset}-{offset + read[1]}: read "
                       f"CRC-32 {read[0]} of {read[1]} bytes, the destination returns "
                       f"CRC-32 {written[0]} of {written[1]}")
        at += read[1]
    if at != end:
        raise fail(f"copied bytes {r.offset}-{at}, expected up to {end} (the source "
                   "shrank while it was copied?)")


def ranges_first(files: Sequence[StripedFile], buckets: Iterable[Bucket]
                 ) -> list[Range | Bucket]:
    """The work of a copy, in the order streams take it: ranges of striped files
    (largest file first, its ranges spread over every stream at once), then the other
    buckets (already most expensive first)."""
    done = {f.bucket.index for f in files}
    items: list[Range | Bucket] = []
    for f in sorted(files, key=lambda f: -f.entry.size):
        items.extend(f.items())
    items.extend(b for b in buckets if b.index not in done)
    return items
