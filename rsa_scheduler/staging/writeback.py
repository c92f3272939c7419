"""What a write-back of writable input (``#RSA_INPUT=rw``) does, decided on manifests.

Three manifests meet: the *base* (DATA_IN on the PFS as the job's input was staged in,
then as each write-back left it: what the job and the PFS last agreed on), the RAMDISK
now (what the job made of it) and the PFS now. For each name (files, symlinks, FIFOs):

* the RAMDISK and the PFS already agree: nothing to do (also a write-back re-issued
  after rsad was killed half-way: what it had done is not done again);
* the job did not change it (RAMDISK = base): nothing, whatever the PFS holds now;
* the job changed or created it and the PFS still holds the base (nobody else touched
  it): the job's version is copied over it (``copy``);
* the job deleted it and the PFS still holds the base: it is deleted on the PFS
  (``delete``; the deletion itself checks size and mtime again just before);
* the job changed it and so did someone else on the PFS (changed, created or deleted
  it there since the base): the PFS is left as it is and the job's version is placed
  beside it as NAME.rsa-<job> (``aside``, reported);
* the job deleted it and someone else changed it on the PFS: it is kept (``kept``,
  reported).

Directories the job removed are removed on the PFS once empty (``rmdirs``); the
copy creates the ones it made.

Size and mtime to the second cannot tell apart two versions of a file the job wrote
within the same second, and a write-back copies mtimes: a file the job rewrote (same
size) in the second the last write-back read the RAMDISK would look in place and agreed
on, and its last change would never reach the PFS. So the base also records
``racy_from``, the first second in which that read could have happened (less a second
for the clocks of rsad's host and the filesystem's); a RAMDISK file modified in or
after it is taken as changed by the job and copied (placed aside, where someone else
changed it on the PFS meanwhile) whatever the quick check says: at worst one file the
job wrote in that second is copied once more (git's "racily clean" files).

Crash safety is the base's: before a write-back changes anything it records, for each
name it will copy or delete, the outcome beside the old base (:func:`pending_base`),
so a re-issue after a kill counts the PFS in either state as nobody else's change; once
verified, the base becomes what the PFS now holds (:func:`settled_base`). A deletion is
applied only while the PFS file is still the base's, so a deletion re-issued after a
file of that name came back is never applied to it.

Pure: no I/O. Must not import ``engine``.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from rsa_scheduler.staging.manifest import SPECIAL, Entry

#: a base: name -> the version last agreed, then each one a write-back under way may
#: leave (None: absent). What the job changed is measured against the first; what
#: someone else changed, against all of them
Base = dict[bytes, list[Entry | None]]


def _key(e: Entry) -> tuple[object, ...]:
    """What identifies a version of an object (its content, as the quick check reads
    it; MooseFS keeps mtimes to the second)."""
    if e.kind == "f":
        return ("f", e.size, e.mtime_s)
    if e.kind == "l":
        return ("l", e.target)
    return (e.kind,)


def same(a: Entry | None, b: Entry | None, *, mode: bool = False) -> bool:
    """Whether ``a`` and ``b`` are the same version (None: absent); ``mode``: the
    permission bits count too (a job's chmod is a change to write back)."""
    if a is None or b is None:
        return a is None and b is None
    if _key(a) != _key(b):
        return False
    return not mode or a.kind == "l" or a.mode == b.mode


@dataclass(frozen=True, slots=True)
class WriteBackPlan:
    """What one write-back does; names are bytes, relative to DATA_IN."""

    copy: tuple[bytes, ...] = ()
    aside: tuple[bytes, ...] = ()
    delete: tuple[tuple[bytes, Entry], ...] = ()  # the name and the version to delete
    kept: tuple[bytes, ...] = ()  # the job deleted it, someone else changed it
    rmdirs: tuple[bytes, ...] = ()  # deepest first
    #: name -> the version the PFS will hold once done (None: deleted)
    planned: Mapping[bytes, Entry | None] = field(default_factory=dict)
    #: the RAMDISK held nothing at all: no deletion planned
    empty_ramdisk: bool = False

    @property
    def empty(self) -> bool:
        return not (self.copy or self.aside or self.delete or self.rmdirs)


def base_of(entries: Iterable[Entry]) -> Base:
    """The base of a fresh stage-in: the scan of DATA_IN it copied from."""
    return {e.path: [e] for e in entries if e.kind not in SPECIAL}


def racy(ram: Iterable[Entry], racy_from: int) -> set[bytes]:
    """The RAMDISK's files modified in or after second ``racy_from`` (0: none): their
    size and mtime do not tell whether the job changed them since the base."""
    if racy_from <= 0:
        return set()
    return {e.path for e in ram if e.kind == "f" and e.mtime_s >= racy_from}


def plan_write_back(base: Base, ram: Sequence[Entry], pfs: Sequence[Entry], *,
                    suffix: bytes = b"", redo: Collection[bytes] = (),
                    racy_from: int = 0) -> WriteBackPlan:
    """Decide one write-back (the module's rules). ``suffix``: what a copy kept aside
    is named after (one already there with the job's version is not placed again);
    ``redo``: names a verify found differing, copied again even where the quick check
    finds them in place; ``racy_from``: the base's (module docstring), whose files are
    redone too."""
    redo = set(redo) | racy(ram, racy_from)
    r_of = {e.path: e for e in ram if e.kind not in SPECIAL}
    p_of = {e.path: e for e in pfs if e.kind not in SPECIAL}
    copy: list[bytes] = []
    aside: list[bytes] = []
    delete: list[tuple[bytes, Entry]] = []
    kept: list[bytes] = []
    planned: dict[bytes, Entry | None] = {}
    # a RAMDISK that holds nothing at all (not even a directory) while the base has
    # files is not taken for a job that deleted its whole input: nothing is deleted
    lost = not r_of and any(b is not None and b.kind != "d" for v in base.values()
                            for b in v)
    names = sorted({n for n, e in r_of.items() if e.kind != "d"} |
                   {n for n, v in base.items()
                    if any(b is not None and b.kind != "d" for b in v)})
    for name in names:
        r, p = r_of.get(name), p_of.get(name)
        if r is not None and r.kind == "d":
            continue  # a directory on the RAMDISK now: its files decide
        if r is None and p is not None and p.kind == "d":
            continue  # a directory on the PFS is never removed for a file
        alts = base.get(name, [None])
        if same(r, p, mode=True) and name not in redo:
            continue  # in place already (also: done before rsad was killed)
        if name not in redo and same(r, alts[0], mode=True):
            continue  # the job left it as it was (the agreed version, not a pending one)
        theirs = not any(same(p, b) for b in alts)
        if r is None:
            if p is None:
                continue
            if lost:
                continue
            if theirs:
                kept.append(name)
            else:
                delete.append((name, p))
                planned[name] = None
        elif theirs:
            # changed, created or deleted on the PFS by someone else since the base
            if name in redo or not same(r, p_of.get(name + suffix), mode=True):
                aside.append(name)
        else:
            copy.append(name)
            planned[name] = r
    gone = sorted((n for n, v in base.items()
                   if not lost and any(b is not None and b.kind == "d" for b in v)
                   and n not in r_of and n in p_of and p_of[n].kind == "d"),
                  key=lambda n: (-n.count(b"/"), n))
    return WriteBackPlan(tuple(copy), tuple(aside), tuple(delete), tuple(kept),
                         tuple(gone), planned, lost)


def pending_base(base: Base, plan: WriteBackPlan) -> Base:
    """The base recorded before ``plan`` changes anything: each name it copies or
    deletes counts as agreed in its old version and in its new one."""
    out = {n: list(v) for n, v in base.items()}
    for name, new in plan.planned.items():
        old = out.get(name, [None])
        if not any(same(new, b) for b in old):
            out[name] = [*old, new]
    return out


def settled_base(base: Base, ram: Sequence[Entry], pfs: Sequence[Entry],
                 copied: Collection[bytes] = ()) -> Base:
    """The base once a write-back is verified (``base``: its pending one; ``ram``,
    ``pfs``: both sides after the verify): a name the two sides agree on, or one the
    write-back ``copied`` (verified: the PFS holds what it placed, though the job may
    have changed it again since), is agreed as the PFS's version (gone from both: no
    longer in the base); a name whose PFS version is one the base allows is agreed as
    that one; the others (kept aside, kept, or left to someone else's change) keep the
    base's first version."""
    r_of = {e.path: e for e in ram if e.kind not in SPECIAL}
    p_of = {e.path: e for e in pfs if e.kind not in SPECIAL}
    out: Base = {}
    for name in sorted(set(base) | set(r_of) | set(copied)):
        r, p = r_of.get(name), p_of.get(name)
        if same(r, p) or (name in copied and p is not None and p.kind != "d"):
            if p is not None:
                out[name] = [p]
            continue
        if name not in base:
            continue
        now = [b for b in base[name] if same(p, b)]
        if now and now[0] is None:
            continue
        out[name] = now or base[name][:1]
    return out


# ---- the base on disk -----------------------------------------------------------------
def _entry_json(e: Entry | None) -> list[object] | None:
    if e is None:
        return None
    return [e.kind, e.size, e.mode, e.mtime_ns, e.target.hex()]


def _entry_of(name: bytes, d: Sequence[object] | None) -> Entry | None:
    if d is None:
        return None
    kind, size, mode, mtime_ns, target = d
    return Entry(path=name, kind=str(kind), size=int(str(size)), mode=int(str(mode)),
                 mtime_ns=int(str(mtime_ns)), target=bytes.fromhex(str(target)))


def dump_base(base: Mapping[bytes, Sequence[Entry | None]], racy_from: int = 0) -> str:
    """The base and its ``racy_from`` as one JSON document (names in hex: they need
    not be UTF-8)."""
    return json.dumps({"v": 1, "racy_from": racy_from,
                       "names": {n.hex(): [_entry_json(e) for e in v]
                                 for n, v in sorted(base.items())}},
                      separators=(",", ":"))


def load_base(text: str) -> tuple[Base, int]:
    """Inverse of :func:`dump_base`: the base and its ``racy_from`` (0 in one an older
    rsad wrote); ValueError if it is not one."""
    try:
        doc = json.loads(text)
        if doc.get("v") != 1:
            raise ValueError(f"version {doc.get('v')!r}")
        return ({bytes.fromhex(n): [_entry_of(bytes.fromhex(n), e) for e in v]
                 for n, v in doc["names"].items()}, int(doc.get("racy_from", 0)))
    except (KeyError, TypeError, AttributeError, json.JSONDecodeError) as e:
        raise ValueError(f"not a write-back base: {e}") from e
