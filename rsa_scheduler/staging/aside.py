"""Copies kept aside: a copy to the PFS never silently replaces a file changed there by
someone else.

A stage-out (and a write-back of writable input) places each file with a rename. When
the PFS already holds a file of that name modified after ``since`` (the instant the
job's RAMDISK was built: the job never saw it; for a write-back, the instant of its own
scan) that differs from the copy in size or mtime, the PFS file is kept and the copy is
placed beside it as ``NAME.rsa-<job>[.c<cycle>]`` (``scripts.aside_suffix``; the rename
itself is ``scripts.ATOMIC``'s). Owns the rule as rsad applies it to manifests
(:func:`changed_since`, :func:`kept_newer`), the view of a destination in which each
kept-aside copy stands for its name (:func:`aside_view`: what verify compares and what
a retry's quick check reads, so neither counts such a file missing nor places it again
over the newer one), and the line the user reads (:func:`aside_words`).

Pure: no I/O. Must not import ``engine``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import replace

from rsa_scheduler.staging.manifest import Entry, display


def changed_since(e: Entry, since: int) -> bool:
    """Whether ``e`` was modified after the epoch second ``since`` (``find -newermt
    @since``, which the placement runs: the same rule on both sides)."""
    return e.mtime_ns > since * 1_000_000_000


def _same(a: Entry, b: Entry) -> bool:
    """The placement's test of "this is the copy itself" (``stat -c '%s %Y'``)."""
    return a.size == b.size and a.mtime_s == b.mtime_s


def kept_newer(src: Iterable[Entry], dst: Iterable[Entry], since: int) -> list[bytes]:
    """The names of ``src`` (files, symlinks, FIFOs) whose copy would be kept aside now:
    ``dst`` holds a non-directory of that name modified after ``since`` that differs
    from it in size or mtime."""
    have = {e.path: e for e in dst if e.kind != "d"}
    out: list[bytes] = []
    for e in src:
        d = have.get(e.path)
        if e.kind != "d" and d is not None and changed_since(d, since) and not _same(d, e):
            out.append(e.path)
    return out


def aside_view(dst: Iterable[Entry], names: Collection[bytes] | Mapping[bytes, Entry],
               suffix: str) -> tuple[list[Entry], dict[bytes, bytes]]:
    """``dst`` as the job's copies stand in it: for each of ``names`` (the non-directory
    names of the source) with a copy kept aside (``NAME+suffix`` present, not itself one
    of ``names``), that copy under NAME, and the newer file of that name left out. Given
    the source's entries by name, a NAME that holds the source's version itself (size
    and mtime) stands for itself: an older copy of that name (a reused job id's) is not
    taken for it. Returns the view and ``{NAME: NAME+suffix}``."""
    entries = list(dst)
    tail = suffix.encode()
    by_path = {e.path: e for e in entries}
    src = names if isinstance(names, Mapping) else {}
    moved: dict[bytes, bytes] = {}
    for name in names:
        alt = name + tail
        if alt not in by_path or alt in names or by_path[alt].kind == "d":
            continue
        here, own = by_path.get(name), src.get(name)
        if here is not None and own is not None and here.kind == own.kind and _same(here, own):
            continue
        moved[name] = alt
    if not moved:
        return entries, {}
    gone = set(moved) | set(moved.values())
    view = [e for e in entries if e.path not in gone]
    view += [replace(by_path[alt], path=name) for name, alt in moved.items()]
    return view, moved


def aside_words(moved: Mapping[bytes, bytes] | Sequence[tuple[bytes, bytes]],
                where: str, limit: int = 5, *, total: int | None = None) -> str:
    """``2 files kept aside in /pfs/out: a newer 'a' (changed there after the job's
    RAMDISK was built) was not replaced: the job's copy is 'a.rsa-12'; ...``.
    ``total``: how many there are, when ``moved`` names only the first."""
    pairs = list(moved.items()) if isinstance(moved, Mapping) else list(moved)
    n = max(len(pairs), total or 0)
    shown = "; ".join(f"{display(name)!r} as {display(alt)!r}" for name, alt in pairs[:limit])
    more = f"; and {n - min(limit, len(pairs))} more" if n > min(limit, len(pairs)) else ""
    return (f"{n} file{'s' if n != 1 else ''} kept aside in {where}: the PFS held a "
            f"newer file of the same name (changed there after the job's RAMDISK was "
            f"built), which was not replaced; the job's cop{'ies are' if n != 1 else 'y is'}"
            f" beside it: {shown}{more}")
