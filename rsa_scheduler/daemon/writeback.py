"""rsad's write-back of writable input (``#RSA_INPUT=rw``): the base it keeps, and one
write-back carried out with the staging engine.

Owns :class:`Bases` (per RAMDISK, the base ``staging.writeback`` compares with: DATA_IN
as scanned when the input was staged in, then as each write-back left it; one file in
rsad's state directory, root's, replaced atomically and fsynced, removed with the
RAMDISK), :func:`record_stage_in` (the base scan) and :func:`write_back` (rounds of scan
both sides -> plan -> record the pending base -> copy what the job changed, place aside
what someone else changed too, delete what the job deleted -> verify what was copied ->
record the settled base), and :func:`written_back` (one write-back against the recorded
base, as the action's outcome). Every command that touches user data runs as the job's
user, through the engine.

A kill -9 of rsad between any two steps is safe: the base is recorded before anything
on the PFS changes and names both versions of what the step changes, so the re-issued
write-back finds the PFS in either state "nobody else's change" and does only what is
left; a deletion is applied only while the PFS still holds the version the job deleted.

Runs in a staging worker (daemon/stagingworker.py: ``record_base`` and ``write_back``),
so that parsing the scans of a large input, the plan and the base's JSON (seconds of
Python, and one C call each way that holds the GIL for the whole document) never hold
rsad's GIL while an urgent action waits (issue 34); in rsad's worker threads only with
``staging.engine_process: false``. Imports nothing else of the daemon; never touches
the core.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from rsa_scheduler.errors import RsaError
from rsa_scheduler.staging import scripts
from rsa_scheduler.staging.engine import StagingEngine
from rsa_scheduler.staging.manifest import Verification, display
from rsa_scheduler.staging.report import StagingError
from rsa_scheduler.staging.writeback import (
    Base,
    base_of,
    dump_base,
    load_base,
    pending_base,
    plan_write_back,
    settled_base,
)

log = logging.getLogger(__name__)

#: copy-and-verify rounds of one write-back: a round copies again what the last verify
#: found differing, and what the job changed meanwhile (it may still write)
ROUNDS = 3

#: how far the clock the RAMDISK stamps mtimes with may be behind rsad's (seconds; NTP
#: keeps them well within it)
CLOCK_SKEW_S = 1


class Stored(NamedTuple):
    """A recorded base and its ``racy_from`` (``staging.writeback``)."""

    base: Base
    racy_from: int = 0


def racy_from_now() -> int:
    """The ``racy_from`` of a RAMDISK about to be read: this second, less the skew."""
    return int(time.time()) - CLOCK_SKEW_S


class Bases:
    """The write-back bases of rsad's RAMDISKs, in ``root`` (created 0700, root's)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, fs_id: str) -> Path:
        if not fs_id or "/" in fs_id or fs_id.startswith("."):
            raise ValueError(f"RAMDISK id {fs_id!r}: cannot name a file after it")
        return self.root / f"{fs_id}.json"

    def load(self, fs_id: str) -> Stored | None:
        """The base of ``fs_id``; None if none was recorded. A file that cannot be read
        fails the write-back (retried; the RAMDISK is kept), never taken as none."""
        try:
            text = self.path(fs_id).read_text()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise RsaError(f"cannot read the write-back base {self.path(fs_id)}: {e}") from e
        try:
            return Stored(*load_base(text))
        except ValueError as e:
            raise RsaError(f"{self.path(fs_id)}: {e}") from e

    def save(self, fs_id: str, base: Base, racy_from: int = 0) -> None:
        """Replace the base of ``fs_id`` atomically and durably (fsync, rename, fsync of
        the directory): after a crash it is the old one or the new one, whole."""
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        final = self.path(fs_id)
        tmp = final.with_name(f".{final.name}.{os.getpid()}.tmp")
        try:
            with open(tmp, "w") as f:
                f.write(dump_base(base, racy_from))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, final)
            fd = os.open(self.root, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as e:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise RsaError(f"cannot record the write-back base {final}: {e}") from e

    def drop(self, fs_id: str) -> None:
        """Forget the base of ``fs_id``, and any half-written copy a process killed in
        :meth:`save` left (``.<fs>.json.<pid>.tmp``: a base of up to hundreds of MB, which
        nothing else would ever remove)."""
        final = self.path(fs_id)
        with contextlib.suppress(FileNotFoundError):
            final.unlink()
        with contextlib.suppress(OSError):
            for left in self.root.glob(f".{final.name}.*.tmp"):
                with contextlib.suppress(OSError):
                    left.unlink()


def too_many_words(limit: int) -> str:
    """The user's line when a writable input holds more than ``limit`` objects: that it
    does, the limit, what to do. Short enough for the job's comment whole (with its
    words around it: ``dispatch.COMMENT_MAX``), so it names neither DATA_IN (the user's
    own) nor the key (rsad's log does)."""
    return (f"stage-in refused: this writable input holds more than {limit} objects, "
            "the most #RSA_INPUT=rw may hold here: use #RSA_INPUT=ro, or a smaller DATA_IN")


def record_stage_in(bases: Bases, fs_id: str, eng: StagingEngine, data_in: str,
                    limit: int | None = None) -> int:
    """Before a writable input is staged in: DATA_IN as it is now is the base (a file
    changed after this scan reaches the RAMDISK in its new version, which then agrees
    with the PFS). Returns how many objects it holds.

    ``limit`` (``staging.writable_objects``; None: none): a DATA_IN of more objects is
    refused (:class:`StagingError`, permanent) before anything is recorded or staged;
    its scan stops after ``limit`` + 1 objects, so what it costs here stays bounded
    whatever the tree holds (each write-back keeps three manifests of it: the base,
    the RAMDISK, the PFS)."""
    cap = -1 if limit is None else max(0, limit)
    entries = eng.scan(data_in, "stage-in", limit=cap)
    if cap >= 0 and len(entries) > cap:
        del entries
        log.warning("job %s: writable input %s holds more than %d objects "
                    "(staging.writable_objects): refused", eng.job_id, data_in, cap)
        raise StagingError(too_many_words(cap), permanent=True)
    base = base_of(entries)
    del entries
    bases.save(fs_id, base)
    return len(base)


@dataclass
class Done:
    """What one write-back did, over its rounds (names as bytes)."""

    copied: set[bytes] = field(default_factory=set)
    aside: set[bytes] = field(default_factory=set)
    deleted: set[bytes] = field(default_factory=set)
    kept: set[bytes] = field(default_factory=set)
    checked: int = 0
    empty_ramdisk: bool = False  # nothing deleted: the RAMDISK held nothing at all

    def summary(self, data_in: str, suffix: bytes) -> str:
        """What the user reads: each count, each file kept aside or kept, by name."""
        def n(k: int, one: str, many: str) -> str:
            return f"{k} {one if k == 1 else many}"

        def names(s: set[bytes], tail: bytes = b"", limit: int = 5) -> str:
            shown = sorted(s)[:limit]
            more = f" and {len(s) - limit} more" if len(s) > limit else ""
            if tail:
                return ", ".join(f"{display(p)!r} as {display(p + tail)!r}"
                                 for p in shown) + more
            return ", ".join(repr(display(p)) for p in shown) + more

        if self.empty_ramdisk:
            return (f"writable input: the RAMDISK holds nothing of it (not even a "
                    f"directory): nothing written back to {data_in}, nothing deleted there")
        if not (self.copied or self.aside or self.deleted or self.kept):
            return f"writable input: nothing the job changed to write back to {data_in}"
        words = [f"writable input written back to {data_in}: "
                 f"{n(len(self.copied), 'object', 'objects')} the job changed or created "
                 f"copied (content verified), {n(len(self.deleted), 'object', 'objects')} "
                 "it deleted removed"]
        if self.aside:
            words.append(
                f"{n(len(self.aside), 'file', 'files')} kept aside: changed on the PFS by "
                "someone else since the input was staged in (or since the last "
                "write-back), and by the job too; the PFS's version was not replaced, "
                f"the job's is beside it: {names(self.aside, suffix)}")
        if self.kept:
            words.append(
                f"{n(len(self.kept), 'file', 'files')} the job deleted kept on the PFS: "
                f"changed there by someone else meanwhile: {names(self.kept)}")
        return "; ".join(words)


def write_back(bases: Bases, fs_id: str, eng: StagingEngine, ramdisk: str,
               data_in: str, stored: Stored) -> tuple[Done, Verification | None]:
    """One write-back of ``ramdisk`` to ``data_in`` against the ``stored`` base
    (``staging.writeback``). Returns what it did and the last verify (None: nothing to
    copy). Raises if the last round's verify still found a difference.

    Every base it records has the ``racy_from`` of the second it began reading the
    RAMDISK (``start``): its scans, copies and verifies all read the RAMDISK since, over
    every round, and a file the job rewrote, same size, in the second one of them read
    it must be copied next time (the pending base too: after a kill, the re-issue finds
    the copy in place). Taken later (after a long verify), or kept at the stage-in's 0,
    such a rewrite looked in place and never reached the PFS."""
    suffix = scripts.aside_suffix(eng.job_id, eng.cycle).encode()
    done = Done()
    redo: set[bytes] = set()
    result: Verification | None = None
    base, racy_from = stored
    start = racy_from_now()  # before any read of the RAMDISK by this write-back
    # what was racy stays racy: the older second (0 is none; a clock stepped back: now)
    pending_from = min(racy_from, start) if racy_from > 0 else start
    for _ in range(ROUNDS):
        ram = eng.scan(ramdisk, "write-back")
        if not ram:  # the bare directory of a RAMDISK being remounted is empty too
            eng.check_mounted(ramdisk)
        pfs = eng.scan(data_in, "write-back")
        plan = plan_write_back(base, ram, pfs, suffix=suffix, redo=redo,
                               racy_from=racy_from)
        done.empty_ramdisk = plan.empty_ramdisk
        if plan.empty_ramdisk:
            log.warning("job %s: write-back: the RAMDISK holds nothing of its writable "
                        "input: no deletion applied to %s", eng.job_id, data_in)
        if plan.empty:
            if done.copied or done.aside or plan.kept:
                # an earlier round's copies are in place now (what its verify found
                # differing was copied again, or the job removed it)
                bases.save(fs_id, settled_base(base, ram, pfs), start)
            done.kept |= set(plan.kept)
            result = None
            break
        # durable before the PFS changes: both versions count as agreed
        base = pending_base(base, plan)
        bases.save(fs_id, base, pending_from)
        if plan.copy:
            # each replaces only the version this plan saw there (someone else's write
            # since: kept, the copy goes aside; scripts.ATOMIC)
            p_of = {e.path: e for e in pfs}
            eng.copy_names(ramdisk, data_in, plan.copy, expect={
                n: None if (p := p_of.get(n)) is None else (p.size, p.mtime_s)
                for n in plan.copy})
        if plan.aside:
            # beside the name in every case: where someone else deleted it on the PFS
            # too (nothing there to keep), the PFS is left as they left it
            eng.copy_names(ramdisk, data_in, plan.aside,
                           expect=dict.fromkeys(plan.aside, scripts.ALWAYS_ASIDE))
        eng.remove_same(data_in, plan.delete)
        eng.remove_dirs(data_in, plan.rmdirs)
        done.copied |= set(plan.copy)
        done.aside |= set(plan.aside)
        done.kept |= set(plan.kept)
        placed = [*plan.copy, *plan.aside]
        # the PFS as placed, scanned *before* the verify: what the settled base agrees on
        # for a copied name is then a version the verify saw equal to the job's (a write
        # of someone else's after this scan fails the verify, or lands after it and
        # reads as theirs next time); scanned after it, someone else's write in between
        # was agreed as the job's and overwritten by the next write-back
        after = eng.scan(data_in, "write-back")
        result = (eng.verify(ramdisk, data_in, only=placed, aside=plan.aside)
                  if placed else None)
        have = {e.path for e in after}
        done.deleted |= {p for p, _e in plan.delete if p not in have}
        done.kept |= {p for p, _e in plan.delete if p in have}
        if result is None or result.ok:
            bases.save(fs_id, settled_base(base, eng.scan(ramdisk, "write-back"), after,
                                           copied=plan.copy), start)
            break
        # a file the job changed within the copied second keeps its size and mtime: the
        # paths that differ are copied again whatever the quick check says
        redo = ({d.path for d in result.differences} if result.listed else set(placed))
    if result is not None and not result.ok:
        raise RsaError(result.summary(data_in))
    done.copied -= done.aside  # placed aside after all: someone wrote it during the copy
    done.checked = result.checked if result is not None else len(done.copied)
    log.info("job %s: %s", eng.job_id, done.summary(data_in, suffix))
    return done, result


def kept_words(done: Done) -> Sequence[str]:
    """The names of what was kept aside (display form), for the outcome's detail."""
    return [display(p) for p in sorted(done.aside)][:20]


def written_back(bases: Bases, fs_id: str, eng: StagingEngine, ramdisk: str,
                 data_in: str) -> dict[str, Any] | None:
    """One write-back of ``ramdisk`` to ``data_in`` against the base recorded for
    ``fs_id``, as the action's outcome (what was copied, deleted, kept aside, the
    user's line); None when no base is recorded (staged in by an rsad before bases: the
    caller writes the input back whole). Raises as :func:`write_back` does, or when the
    base cannot be read."""
    stored = bases.load(fs_id)
    if stored is None:
        return None
    done, _result = write_back(bases, fs_id, eng, ramdisk, data_in, stored)
    suffix = scripts.aside_suffix(eng.job_id, eng.cycle).encode()
    return {"verified": {"objects": done.checked},
            "written_back": {"copied": len(done.copied), "deleted": len(done.deleted),
                             "aside": list(kept_words(done)),
                             "kept": [display(p) for p in sorted(done.kept)][:20]},
            "summary": done.summary(data_in, suffix)}
