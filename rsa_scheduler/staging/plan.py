"""Planning a transfer: one scan of the source in, balanced buckets out.

Owns :class:`Bucket` (a list of names copied by one command on one RSA node with one
tool), :class:`Plan` and :func:`make_plan`, plus :func:`pending` (what an interrupted
run still has to copy) and :func:`assign` (static longest-processing-time assignment,
used for archives and reports). The rules, from the measured tool speeds
(``docs/staging.md``):

* a regular file of at least ``big_bytes`` is a bucket alone, copied with ``dd``
  (sparse-aware; 16 MiB blocks into the RAMDISK, 128 KiB out of it), then its mode and
  mtime with ``cp --attributes-only``;
* with ``trees``, a directory whose whole subtree is to be copied (no big file, no
  socket or device, nothing already complete, every hard link of its files inside it)
  and that is at most one stream's share is a unit alone, copied with a *recursive*
  ``tar c | tar x`` (tool ``tree``): tar then finds its files through readdir, which a
  MooseFS client answers from the open directory, where a list of names costs two more
  master round trips per file (``docs/benchmarks.md#staging``);
* everything else (small files, symlinks, FIFOs) is grouped, in path order so that a
  directory's files stay together, into buckets copied with a ``tar c | tar x`` pipe,
  each bounded by bytes and by file count so every RSA node gets several;
* all names of one inode (hard links) go to the same bucket, which therefore uses tar,
  so hard links inside the staged tree are kept;
* directories are never in list buckets: the engine creates them first and sets their
  modes and mtimes last; sockets and device files are skipped and reported.

Pure: no I/O. Must not import ``engine``.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field

from rsa_scheduler.staging.manifest import Entry

BIG_BYTES = 32 * 1024 * 1024
# Cost model (seconds) for balancing: per-file metadata cost over FUSE dominates small
# files (copy-tools.md: ~500 files/s per stream into a MooseFS RAMDISK), bandwidth big ones.
PER_FILE_S = 0.002
PER_BYTE_S = 1 / 250e6
BUCKETS_PER_SLOT = 4


@dataclass(frozen=True, slots=True)
class Bucket:
    """Names copied together by one command on one RSA node."""

    index: int
    tool: str  # "tar" (a list of names) | "tree" (directories, recursively) | "dd"
    paths: tuple[bytes, ...]
    files: int
    bytes: int

    @property
    def cost(self) -> float:
        return self.files * PER_FILE_S + self.bytes * PER_BYTE_S


@dataclass(frozen=True, slots=True)
class Plan:
    dirs: tuple[Entry, ...]
    buckets: tuple[Bucket, ...]  # most expensive first
    skipped: tuple[Entry, ...] = ()  # sockets, devices: not staged
    files: int = 0
    bytes: int = 0
    already: int = 0  # objects found complete at the destination (resume)

    @property
    def total_cost(self) -> float:
        return sum(b.cost for b in self.buckets)


@dataclass
class _Unit:
    paths: list[bytes] = field(default_factory=list)
    files: int = 0
    bytes: int = 0
    linked: bool = False


def _units(entries: Iterable[Entry]) -> tuple[list[_Unit], list[Entry], list[Entry]]:
    units: list[_Unit] = []
    dirs: list[Entry] = []
    skipped: list[Entry] = []
    groups: dict[tuple[int, int], _Unit] = {}
    for e in entries:
        if e.kind == "d":
            dirs.append(e)
        elif e.kind in ("s", "c", "b"):
            skipped.append(e)
        elif e.kind == "f" and e.nlink > 1:
            unit = groups.get(e.inode)
            if unit is None:
                unit = groups[e.inode] = _Unit(bytes=e.size, linked=True)
                units.append(unit)
            unit.paths.append(e.path)
            unit.files += 1
        else:
            units.append(_Unit([e.path], 1, e.size if e.kind == "f" else 0))
    return units, dirs, skipped


def _parent(path: bytes) -> bytes:
    """The directory holding ``path`` (b"" = the root)."""
    return path.rpartition(b"/")[0]


def _ancestors(path: bytes, stop: bytes = b"") -> Iterable[bytes]:
    """The directories above ``path``, nearest first, down to (excluding) ``stop``."""
    d = _parent(path)
    while d != stop and d:
        yield d
        d = _parent(d)


def _lineage(d: bytes) -> Iterable[bytes]:
    """Directory ``d`` and every directory above it (nothing for the root)."""
    while d:
        yield d
        d = _parent(d)


def _common_dir(paths: Sequence[bytes]) -> bytes:
    """The deepest directory holding every path (b"" = the root)."""
    parts = [_parent(p).split(b"/") if _parent(p) else [] for p in paths]
    common: list[bytes] = []
    for level in zip(*parts, strict=False):
        if any(x != level[0] for x in level):
            break
        common.append(level[0])
    return b"/".join(common)


def _trees(small: list[_Unit], dirs: Sequence[Entry], blockers: Iterable[bytes],
           max_files: int, max_bytes: int) -> tuple[list[_Unit], list[_Unit]]:
    """Split ``small`` into units of whole directories (copied recursively) and the rest.

    A directory qualifies when nothing below it is a blocker (a big file, a skipped
    object, an object already complete at the destination), no hard-link group reaches
    out of it, it holds at least one file and at most ``max_files``/``max_bytes``; the
    highest qualifying directories are taken. The root never is one (its own mode and
    mtime are not staged)."""
    blocked: set[bytes] = set()
    for p in blockers:
        blocked.update(_ancestors(p))
    files: dict[bytes, int] = {}
    nbytes: dict[bytes, int] = {}
    home: list[bytes] = []  # per unit: the deepest directory holding all its names
    for u in small:
        top = _common_dir(u.paths) if u.linked else _parent(u.paths[0])
        home.append(top)
        if u.linked:  # a group split over subdirectories pins them: none is whole
            for p in u.paths:
                blocked.update(_ancestors(p, stop=top))
        for d in _lineage(top):
            files[d] = files.get(d, 0) + u.files
            nbytes[d] = nbytes.get(d, 0) + u.bytes
    chosen: set[bytes] = set()
    for d in sorted(e.path for e in dirs):
        if (d in blocked or not 0 < files.get(d, 0) <= max_files
                or nbytes.get(d, 0) > max_bytes or any(a in chosen for a in _ancestors(d))):
            continue
        chosen.add(d)
    if not chosen:
        return [], small
    rest: list[_Unit] = []
    for u, top in zip(small, home, strict=True):
        if not any(d in chosen for d in _lineage(top)):
            rest.append(u)
    trees = [_Unit([d], files[d], nbytes[d]) for d in sorted(chosen)]
    return trees, rest


def _group(units: Sequence[_Unit], target_files: int, target_bytes: int
           ) -> list[list[_Unit]]:
    """Consecutive units (path order: a directory's files together) into buckets."""
    out: list[list[_Unit]] = []
    cur: list[_Unit] = []
    cur_files = cur_bytes = 0
    for u in units:
        if cur and (cur_files + u.files > target_files or cur_bytes + u.bytes > target_bytes):
            out.append(cur)
            cur, cur_files, cur_bytes = [], 0, 0
        cur.append(u)
        cur_files += u.files
        cur_bytes += u.bytes
    if cur:
        out.append(cur)
    return out


def make_plan(entries: Sequence[Entry], slots: int, *, big_bytes: int = BIG_BYTES,
              max_files: int = 5000, already: int = 0, trees: bool = False,
              complete: Collection[bytes] = ()) -> Plan:
    """Bucket ``entries`` (a scan of the source, root excluded) for ``slots`` parallel
    streams (RSA nodes x parallel_per_node). ``trees``: copy whole directories
    recursively where possible; ``complete``: paths left out of ``entries`` because the
    destination already has them (resume), so no directory above them is whole."""
    slots = max(1, slots)
    units, dirs, skipped = _units(entries)
    big = [u for u in units if u.bytes >= big_bytes]
    small = sorted((u for u in units if u.bytes < big_bytes), key=lambda u: u.paths[0])
    small_files = sum(u.files for u in small)
    small_bytes = sum(u.bytes for u in small)
    want = slots * BUCKETS_PER_SLOT
    target_bytes = min(max(small_bytes // want, 8 << 20), 1 << 30)
    target_files = min(max(math.ceil(small_files / want), 64), max_files)
    raw: list[tuple[str, list[_Unit]]] = [("tar" if u.linked else "dd", [u]) for u in big]
    if trees:
        # A whole directory may be as large as one stream's share: fewer, larger
        # buckets balance a little worse, but every file avoids two master lookups.
        blockers = [p for u in big for p in u.paths]
        blockers += [e.path for e in skipped]
        blockers += complete
        tree_units, small = _trees(
            small, dirs, blockers,
            min(max(target_files, math.ceil(small_files / slots)), max_files),
            min(max(target_bytes, small_bytes // slots), 1 << 30))
        raw += [("tree", g) for g in _group(tree_units, target_files, target_bytes)]
    raw += [("tar", g) for g in _group(small, target_files, target_bytes)]
    buckets = [Bucket(0, tool, tuple(p for u in us for p in u.paths),
                      sum(u.files for u in us), sum(u.bytes for u in us)) for tool, us in raw]
    buckets.sort(key=lambda b: -b.cost)
    buckets = [Bucket(i, b.tool, b.paths, b.files, b.bytes) for i, b in enumerate(buckets)]
    return Plan(dirs=tuple(sorted(dirs, key=lambda d: d.path)), buckets=tuple(buckets),
                skipped=tuple(skipped), files=sum(b.files for b in buckets),
                bytes=sum(b.bytes for b in buckets), already=already)


def whole_roots(plan: Plan, existing: Collection[bytes]) -> set[bytes]:
    """The directories ``plan`` copies whole (``tree`` buckets) that the destination does
    not have (``existing``: its scan's paths): placed by one rename each."""
    return {p for b in plan.buckets if b.tool == "tree" for p in b.paths
            if p not in existing}


def below_any(path: bytes, roots: Collection[bytes]) -> bool:
    """Whether ``path`` is strictly below one of ``roots``."""
    return bool(roots) and any(a in roots for a in _ancestors(path))


STRIPE_MIN = 64 << 20  # the smallest range worth a stream of its own
STRIPE_ALIGN = 16 << 20  # ranges start at multiples of every dd block size used here


def stripes(size: int, streams: int, *, min_range: int = STRIPE_MIN,
            align: int = STRIPE_ALIGN) -> list[tuple[int, int]]:
    """``(offset, length)`` ranges covering ``size`` bytes, one per stream (fewer when a
    range would be shorter than ``min_range``), every offset a multiple of ``align``.
    Together they cover every byte exactly once, in order."""
    if size <= 0:
        return [(0, 0)]
    count = max(1, min(streams, size // max(1, min_range)))
    per = -(-size // count)
    per = -(-per // align) * align
    out: list[tuple[int, int]] = []
    offset = 0
    while offset < size:
        length = min(per, size - offset)
        out.append((offset, length))
        offset += length
    return out


def assign(buckets: Sequence[Bucket], bins: int) -> list[list[Bucket]]:
    """Longest-processing-time-first: each bucket (most expensive first) to the least
    loaded bin. Within 4/3 of optimal; used for archives (one per bin)."""
    out: list[list[Bucket]] = [[] for _ in range(max(1, bins))]
    load = [0.0] * len(out)
    for b in sorted(buckets, key=lambda b: -b.cost):
        i = min(range(len(out)), key=lambda k: (load[k], k))
        out[i].append(b)
        load[i] += b.cost
    return out


def _done(src: Entry, dst: Entry | None) -> bool:
    if dst is None or dst.kind != src.kind:
        return False
    if src.kind == "f":
        return dst.size == src.size and dst.mtime_s == src.mtime_s
    if src.kind == "l":
        return dst.target == src.target
    return True


def pending(src: Sequence[Entry], dst: Iterable[Entry], *,
            redo: Collection[bytes] = ()) -> tuple[list[Entry], int]:
    """What an interrupted run still has to copy (rsync's quick check: size and mtime).

    Sound because every tool used here writes a file's data before setting its mtime:
    a file cut short keeps the time of the interruption. A hard-link group is redone
    whole unless every name is complete and still shares one inode. Directories are
    always kept (creating them again is harmless). ``redo``: paths copied again whatever
    the quick check says (what a verify found differing: a copy corrupted with its size
    and mtime kept passes the quick check); a hard-link group with one of them is redone
    whole. Returns (to copy, count already done).
    """
    have = {e.path: e for e in dst}
    out: list[Entry] = []
    done = 0
    groups: dict[tuple[int, int], list[Entry]] = {}
    for e in src:
        if e.kind == "f" and e.nlink > 1:
            groups.setdefault(e.inode, []).append(e)
        elif e.kind == "d" or e.path in redo or not _done(e, have.get(e.path)):
            out.append(e)
        else:
            done += 1
    for names in groups.values():
        got = [have.get(e.path) for e in names]
        if all(_done(e, g) and e.path not in redo
               for e, g in zip(names, got, strict=True)) and \
                len({g.inode for g in got if g is not None}) == 1:
            done += len(names)
        else:
            out.extend(names)
    return out, done
