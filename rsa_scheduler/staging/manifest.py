"""Manifests of staged trees and their comparison (what verified stage-out checks).

Owns :class:`Entry` (one file system object, named by its path relative to the staged
root, as *bytes*: names may hold newlines or bytes that are not UTF-8), the parsers of
what the node-side commands print (``find -printf`` records, ``b2sum -z`` lines,
``tar -tv`` listings and the ``--to-command`` hash records of ``scripts``), the archive
index format, and :func:`compare`, which turns two manifests into a
:class:`Verification` with one actionable line.

Pure: no processes, no I/O. Must not import ``engine``.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from itertools import islice

# find -printf type letters we reproduce; sockets/devices are reported, never copied.
KINDS = {"f": "file", "d": "dir", "l": "symlink", "p": "fifo", "s": "socket",
         "c": "char-device", "b": "block-device"}
#: special files: never staged, in either direction, by any method or mode; a verify
#: does not expect them (docs/staging.md#special-files)
SPECIAL = frozenset({"s", "c", "b"})
SCAN_FIELDS = 10  # readable flag + the 9 fields of scripts.SCAN_FORMAT


@dataclass(frozen=True, slots=True)
class Entry:
    """One object of a staged tree. ``path`` is relative to the root, without ``./``."""

    path: bytes
    kind: str  # a key of KINDS
    size: int = 0
    mode: int = 0  # permission bits, 0o7777
    mtime_ns: int = 0
    nlink: int = 1
    inode: tuple[int, int] = (0, 0)  # (device, inode) on the scanned side
    target: bytes = b""  # symlink target
    readable: bool = True
    digest: str = ""  # content hash (regular files, verify level "content")

    @property
    def mtime_s(self) -> int:
        """Whole seconds: MooseFS (RAMDISK and PFS here) keeps mtimes to the second."""
        return self.mtime_ns // 1_000_000_000


def display(path: bytes) -> str:
    """A path as one printable, unambiguous line (for messages and the archive index)."""
    out: list[str] = []
    text = path.decode("utf-8", "surrogateescape")
    for ch in text:
        code = ord(ch)
        if 0xDC80 <= code <= 0xDCFF:  # an undecodable byte
            out.append(f"\\x{code - 0xDC00:02x}")
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        else:
            out.append(ch)
    return "".join(out)


def undisplay(text: str) -> bytes:
    """Inverse of :func:`display`."""
    out = bytearray()
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\":
            out += ch.encode("utf-8")
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "x":
            out.append(int(text[i + 2:i + 4], 16))
            i += 4
            continue
        out += {"\\": b"\\", "n": b"\n", "t": b"\t"}[nxt]
        i += 2
    return bytes(out)


def _mtime_ns(text: str) -> int:
    whole, _, frac = text.partition(".")
    return int(whole) * 1_000_000_000 + int((frac + "000000000")[:9] or 0)


def parse_scan(raw: bytes) -> list[Entry]:
    """Parse the NUL-separated records of ``scripts.scan_argv`` (already base64-decoded)."""
    fields = raw.split(b"\0")
    if fields and fields[-1] == b"":
        fields.pop()
    return parse_scan_fields(fields)


def scan_fields(text: str, piece: int = 1 << 20) -> Iterator[bytes]:
    """The NUL-separated fields of a base64-encoded scan, decoded ``piece`` characters at
    a time: no single step holds the interpreter for long (a 100k-object scan decoded
    and split at once held it ~80 ms: the daemon's event loop stalled meanwhile)."""
    text = text.strip()
    piece -= piece % 4  # base64 decodes in groups of 4 characters
    rest = b""
    for i in range(0, len(text), piece):
        *fields, rest = (rest + base64.b64decode(text[i:i + piece])).split(b"\0")
        yield from fields
    if rest:
        yield rest


def parse_scan_fields(fields: Iterable[bytes]) -> list[Entry]:
    """Parse the fields of a scan (``scan_fields``), ten per object."""
    entries: list[Entry] = []
    it = iter(fields)
    while True:
        record = list(islice(it, SCAN_FIELDS))
        if not record:
            return entries
        if len(record) != SCAN_FIELDS:
            raise ValueError(f"scan output ends with {len(record)} fields of a record of "
                             f"{SCAN_FIELDS}")
        flag, kind, size, mode, mtime, nlink, dev, ino, target, path = record
        entries.append(Entry(
            path=path, kind=kind.decode(), size=int(size), mode=int(mode, 8),
            mtime_ns=_mtime_ns(mtime.decode()), nlink=int(nlink),
            inode=(int(dev), int(ino)), target=target, readable=flag == b"R"))


def parse_hashes(raw: bytes) -> dict[bytes, str]:
    """Parse ``b2sum -z`` output (``<hex>  ./<path>\\0`` records)."""
    out: dict[bytes, str] = {}
    for rec in raw.split(b"\0"):
        if not rec:
            continue
        digest, sep, name = rec.partition(b"  ")
        if not sep:
            raise ValueError(f"unexpected b2sum record {rec[:80]!r}")
        out[name.removeprefix(b"./")] = digest.decode()
    return out


def with_hashes(entries: Iterable[Entry], hashes: Mapping[bytes, str]) -> list[Entry]:
    return [replace(e, digest=hashes.get(e.path, "")) if e.kind == "f" else e
            for e in entries]


def planted_symlinks(expected: Iterable[Entry], existing: Iterable[Entry]) -> list[bytes]:
    """Paths where the destination already has a symlink and the copy would write a file
    or a directory: writing there would follow it out of the destination (a symlink
    planted in a shared DATA_OUT), so the copy is refused instead. Pure."""
    links = {e.path for e in existing if e.kind == "l"}
    return sorted(e.path for e in expected if e.kind != "l" and e.path in links)


# --- tar archives -------------------------------------------------------------------

_TV = re.compile(rb'^(?P<perm>\S{10}) \S+\s+(?P<size>\d+) (?P<date>\S+) (?P<time>\S+) +'
                 rb'"(?P<name>(?:[^"\\]|\\.)*)"(?: (?:->|link to) '
                 rb'"(?P<link>(?:[^"\\]|\\.)*)")?$')
_TAR_KIND = {ord("-"): "f", ord("d"): "d", ord("l"): "l", ord("p"): "p", ord("h"): "h",
             ord("c"): "c", ord("b"): "b", ord("s"): "s"}
_C_ESCAPES = {ord("n"): 10, ord("t"): 9, ord("r"): 13, ord("f"): 12, ord("v"): 11,
              ord("b"): 8, ord("a"): 7, ord("\\"): 92, ord('"'): 34, ord("?"): 63}


def _unquote_c(data: bytes) -> bytes:
    """Undo tar's ``--quoting-style=c`` (backslash escapes, octal bytes)."""
    out = bytearray()
    i = 0
    while i < len(data):
        b = data[i]
        if b != 0x5C:
            out.append(b)
            i += 1
            continue
        nxt = data[i + 1]
        if 0x30 <= nxt <= 0x37:
            out.append(int(data[i + 1:i + 4], 8))
            i += 4
        else:
            out.append(_C_ESCAPES[nxt])
            i += 2
    return bytes(out)


def _perm_bits(perm: bytes) -> int:
    s = perm.decode()
    mode = 0
    for i, (ch, bit) in enumerate(zip(s[1:], (0o400, 0o200, 0o100, 0o40, 0o20, 0o10,
                                              0o4, 0o2, 0o1), strict=True)):
        if ch in "rwxst":
            mode |= bit
        if ch in "sS" and i == 2:
            mode |= 0o4000
        elif ch in "sS" and i == 5:
            mode |= 0o2000
        elif ch in "tT" and i == 8:
            mode |= 0o1000
        if ch in "ST":
            mode &= ~bit
    return mode


def parse_tar_listing(text: bytes) -> list[Entry]:
    """Parse ``TZ=UTC tar -tv --full-time --quoting-style=c --numeric-owner`` output.

    Hard links (``h``) are reported as files (their data lives in the first name)."""
    import calendar

    entries: list[Entry] = []
    for line in text.split(b"\n"):
        if not line:
            continue
        m = _TV.match(line)
        if not m:
            raise ValueError(f"unexpected tar listing line {line[:120]!r}")
        name = _unquote_c(m["name"]).removeprefix(b"./").rstrip(b"/")
        if not name or name == b".":
            continue
        kind = _TAR_KIND[m["perm"][0]]
        whole, _, frac = m["time"].decode().partition(".")
        secs = calendar.timegm(tuple(int(x) for x in
                                     (*m["date"].decode().split("-"), *whole.split(":"))))
        mtime_ns = secs * 1_000_000_000 + int((frac + "000000000")[:9])
        link = _unquote_c(m["link"]).removeprefix(b"./") if m["link"] is not None else b""
        entries.append(Entry(path=name, kind=kind, size=int(m["size"]),
                             mode=_perm_bits(m["perm"]), mtime_ns=mtime_ns,
                             target=link))
    return entries


def resolve_tar(entries: Iterable[Entry], hashes: Mapping[bytes, str],
                archive: int) -> list[Entry]:
    """Attach member hashes; turn hard-link members (``h``) into files sharing their
    first name's size, hash and a synthetic inode, so :func:`compare` checks links."""
    out: list[Entry] = []
    first: dict[bytes, int] = {}
    for e in entries:
        if e.kind == "h":
            i = first.get(e.target)
            if i is None:  # link to a member outside this archive: cannot be checked
                out.append(replace(e, kind="f"))
                continue
            t = out[i]
            out[i] = replace(t, inode=(archive + 1, i))
            out.append(replace(t, path=e.path, inode=(archive + 1, i)))
            continue
        if e.kind == "f":
            first[e.path] = len(out)
            e = replace(e, digest=hashes.get(e.path, ""))
        out.append(e)
    return out


def parse_member_hashes(raw: bytes) -> dict[bytes, str]:
    """Parse ``scripts.TAR_HASH`` records (base64-decoded): ``<member>\\0<hex>\\0``."""
    parts = raw.split(b"\0")
    if parts and parts[-1] == b"":
        parts.pop()
    return {parts[i].removeprefix(b"./"): parts[i + 1].decode()
            for i in range(0, len(parts) - 1, 2)}


INDEX_HEAD = "# rsa-scheduler archive index v1: archive<TAB>type<TAB>size<TAB>path"


def index_lines(members: Iterable[tuple[str, Entry]]) -> str:
    """The archive index: one ``<archive>\\t<type>\\t<size>\\t<path>`` line per member,
    path written with :func:`display` escapes."""
    return INDEX_HEAD + "\n" + "".join(f"{archive}\t{e.kind}\t{e.size}\t{display(e.path)}\n"
                                       for archive, e in members)


def parse_index(raw: bytes) -> list[tuple[str, str, int, bytes]]:
    """The lines of an archive index (:func:`index_lines`): (archive, type, size, path).
    Raises ValueError for anything a stage-out never writes: another header, a line
    that is not four fields, an index that does not end with a newline (cut short)."""
    text = raw.decode("utf-8")
    lines = text.split("\n")
    if lines[0] != INDEX_HEAD:
        raise ValueError(f"its first line is {lines[0][:80]!r}, not the index header")
    if lines[-1] != "":
        raise ValueError("it does not end with a newline (cut short?)")
    out: list[tuple[str, str, int, bytes]] = []
    for n, line in enumerate(lines[1:-1], start=2):
        fields = line.split("\t", 3)
        if len(fields) != 4 or not fields[2].isdigit() or fields[1] not in KINDS:
            raise ValueError(f"line {n} is {line[:80]!r}")
        try:
            path = undisplay(fields[3])
        except (IndexError, KeyError, ValueError) as e:
            raise ValueError(f"line {n} has a path with a broken escape: {line[:80]!r}") from e
        out.append((fields[0], fields[1], int(fields[2]), path))
    return out


# --- comparison ---------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Difference:
    path: bytes
    what: str  # missing | type | size | mode | mtime | target | content | hardlink
    #: a regular file whose content hashed equal and whose mtime alone differs: the
    #: destination's (size, mtime second), the version a stage-out's retry may replace
    #: in place (it holds the same bytes)
    same_content: tuple[int, int] | None = None

    def __str__(self) -> str:
        return f"{display(self.path)!r}: {self.what}"


@dataclass(frozen=True, slots=True)
class Verification:
    """The outcome of comparing a destination with the RAMDISK's manifest."""

    ok: bool
    level: str  # content | metadata
    checked: int
    checked_bytes: int
    differences: tuple[Difference, ...] = ()
    extra: int = 0  # objects present only at the destination (left alone, not an error)
    details: Mapping[str, object] = field(default_factory=dict)
    differing: int = -1  # how many differ, when ``differences`` lists only the first
    skipped: tuple[bytes, ...] = ()  # special files of the source: not staged, not expected
    skipped_count: int = -1  # how many, when ``skipped`` names only the first
    read_back: str = ""  # how the destination's bytes were read (the user's message)

    @property
    def skipped_total(self) -> int:
        """How many sockets and devices the source held (never staged)."""
        return self.skipped_count if self.skipped_count >= 0 else len(self.skipped)

    @property
    def count(self) -> int:
        """How many objects differ."""
        return self.differing if self.differing >= 0 else len(self.differences)

    def summary(self, where: str = "destination", limit: int = 5,
                advice: str = "the RAMDISK is kept") -> str:
        """One actionable line; ``advice``: what happens next (a failed verify)."""
        if self.ok:
            return (f"verified {self.checked} objects ({self.checked_bytes} bytes, "
                    f"level {self.level}) in {where}")
        shown = "; ".join(str(d) for d in self.differences[:limit])
        more = self.count - min(limit, len(self.differences))
        tail = f"; and {more} more" if more > 0 else ""
        return (f"verify failed: {self.count} of {self.checked} objects differ "
                f"in {where}: {shown}{tail} — {advice}")

    @property
    def listed(self) -> bool:
        """Whether ``differences`` names every object that differs (a streamed verify
        names only the first few)."""
        return self.differing < 0 or self.differing <= len(self.differences)


def compare(expected: Iterable[Entry], actual: Iterable[Entry], *, level: str,
            check_dir_mtime: bool = True) -> Verification:
    """Compare the RAMDISK's manifest (``expected``) with the destination's.

    Checked for every expected object: present, same type; files: size, permission
    bits, mtime (seconds), content hash (level ``content``); directories: permission
    bits, mtime; symlinks: target (not mode/mtime, which Linux ignores); FIFOs: mode.
    Hard links: names that share an inode in ``expected`` must share one in ``actual``
    when ``actual`` carries inode numbers. Owners are not compared: everything staged
    belongs to the job's user. Sockets and devices (``SPECIAL``) are never staged: not
    expected, not counted as checked, reported as ``skipped``."""
    have = {e.path: e for e in actual}
    diffs: list[Difference] = []
    skipped: list[bytes] = []
    checked = nbytes = 0
    links: dict[tuple[int, int], tuple[int, int]] = {}
    for e in expected:
        if e.kind in SPECIAL:
            skipped.append(e.path)
            have.pop(e.path, None)
            continue
        checked += 1
        a = have.pop(e.path, None)
        if a is None:
            diffs.append(Difference(e.path, "missing"))
            continue
        if a.kind != e.kind:
            diffs.append(Difference(e.path, f"type {KINDS.get(a.kind, a.kind)}, "
                                            f"expected {KINDS.get(e.kind, e.kind)}"))
            continue
        if e.kind == "l":
            if a.target != e.target:
                diffs.append(Difference(e.path, f"symlink target {display(a.target)!r}, "
                                                f"expected {display(e.target)!r}"))
            continue
        if e.kind == "f":
            nbytes += e.size
            if a.size != e.size:
                word = "truncated" if a.size < e.size else "longer"
                diffs.append(Difference(e.path, f"size {a.size}, expected {e.size} ({word})"))
                continue
            if level == "content" and e.digest and a.digest != e.digest:
                diffs.append(Difference(e.path, "content differs (hash)"))
                continue
            if e.nlink > 1 and a.inode != (0, 0):
                first = links.setdefault(e.inode, a.inode)
                if first != a.inode:
                    diffs.append(Difference(e.path, "hard link broken"))
                    continue
        if a.mode != e.mode:
            diffs.append(Difference(e.path, f"mode {a.mode:04o}, expected {e.mode:04o}"))
        elif (e.kind != "d" or check_dir_mtime) and a.mtime_s != e.mtime_s:
            hashed = (e.kind == "f" and level == "content" and bool(e.digest)
                      and a.digest == e.digest)
            diffs.append(Difference(e.path, f"mtime {a.mtime_s}, expected {e.mtime_s}",
                                    (a.size, a.mtime_s) if hashed else None))
    return Verification(ok=not diffs, level=level, checked=checked, checked_bytes=nbytes,
                        differences=tuple(diffs), extra=len(have), skipped=tuple(skipped))


def index_differences(index: Iterable[tuple[str, str, int, bytes]],
                      members: Mapping[str, Iterable[Entry]]) -> list[Difference]:
    """Where the archives (``members``: each archive's name and its objects, hard links
    resolved: :func:`resolve_tar`) and the index (:func:`parse_index`) disagree, one
    difference per path: an object in two archives, in an archive the index does not
    name for it or not in the index at all, of another type or (a file) another size
    than the index says; a line of the index whose object its archive lacks. Pure."""
    listed: dict[bytes, tuple[str, str, int]] = {}
    diffs: dict[bytes, Difference] = {}
    for archive, kind, size, path in index:
        if path in listed:
            diffs[path] = Difference(path, "listed twice in the index")
        listed.setdefault(path, (archive, kind, size))
    found: dict[bytes, list[tuple[str, Entry]]] = {}
    for archive, entries in members.items():
        for e in entries:
            found.setdefault(e.path, []).append((archive, e))
    for path, where in found.items():
        archive, e = where[0]
        want = listed.get(path)
        if len(where) > 1:
            what = f"in {' and '.join(a for a, _e in where)}"
        elif want is None:
            what = f"in {archive} but not in the index"
        elif want[0] != archive:
            what = f"in {archive}, the index says {want[0]}"
        elif want[1] != e.kind:
            what = (f"type {KINDS.get(e.kind, e.kind)} in {archive}, the index says "
                    f"{KINDS.get(want[1], want[1])}")
        elif e.kind == "f" and want[2] != e.size:
            what = f"size {e.size} in {archive}, the index says {want[2]}"
        else:
            continue
        diffs.setdefault(path, Difference(path, what))
    for path, (archive, _kind, _size) in listed.items():
        if path not in found:
            diffs.setdefault(path, Difference(
                path, f"missing from {archive} (the index lists it there)"))
    return list(diffs.values())


def with_differences(result: Verification, more: Iterable[Difference]) -> Verification:
    """``result`` with the differences ``more`` adds (an archive's disagreement with its
    index: :func:`index_differences`), one per path (``result``'s own first). Pure."""
    have = {d.path for d in result.differences}
    added = tuple(d for d in more if d.path not in have)
    if not added:
        return result
    diffs = result.differences + added
    return replace(result, ok=False, differences=diffs,
                   differing=-1 if result.differing < 0 else result.differing + len(added))
