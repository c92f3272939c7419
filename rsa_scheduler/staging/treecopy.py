"""Stage-in and stage-out as a tree: the listed copy, striped big files, streamed mode.

Owns :class:`TreeCopy`: scan the source (as the user) → refuse unreadable sources and
planted symlinks → skip what an earlier run finished (``resume``) → a plan of balanced
buckets (``plan``) run over every stream of every node, each with the tool its bucket
calls for (``scripts.copiers``: tar pipes and dd; or, as ``staging.copy_tool`` says, rsync
or the site's own ``copy_command``), optionally placed atomically through a part
directory (``scripts.placement``) → directory modes and mtimes set last. A file of at
least ``stripe_bytes`` is copied in checksummed ranges by every stream at once
(``stripe``); a tree of more than ``stream_objects`` objects is listed and copied on the
nodes, rsad keeping counters only (``stream``). A stage-in's big files are checked once
their copies have settled (:meth:`TreeCopy._settle`; streamed: ``_settle_streamed``): one
written to during its copy, or just before it, is copied again; until then they are
listed below the destination root, so a run killed meanwhile is followed by one that
copies them again.

Must not import the daemon, the store or Slurm, nor ``engine``.
"""

from __future__ import annotations

import dataclasses
import posixpath
import secrets
import threading
from collections.abc import Callable, Collection, Mapping, Sequence

from rsa_scheduler.hosts import Host
from rsa_scheduler.runner import Completed
from rsa_scheduler.staging import scripts
from rsa_scheduler.staging.aside import aside_view, kept_newer
from rsa_scheduler.staging.commands import Commands, log
from rsa_scheduler.staging.manifest import Entry, display, parse_scan_fields, scan_fields
from rsa_scheduler.staging.plan import Bucket, below_any, make_plan, pending, whole_roots
from rsa_scheduler.staging.report import ProgressMeter, StagingError, Stats
from rsa_scheduler.staging.scripts.copiers import BIG_TRIES
from rsa_scheduler.staging.stream import StreamedCopy
from rsa_scheduler.staging.stripe import (
    Range,
    StripedFile,
    check_range,
    ranges_first,
    striped_files,
)

# Seconds after a big input file's copy ended before the source is checked again: another
# client's write reaches this node's stat late (on the cluster lab, MooseFS 4.57 on
# separate hosts: 0.5-1.0 s after the writer's dd had closed the file, the writer's client
# reporting on a 1 s tick), then this node's attribute cache (1 s).
INPUT_SETTLE = 3.0
# Seconds the clocks of the RSA nodes and of the PFS's servers (which set ctimes) may
# disagree: a file changed (ctime) in the second the copies began, or this much before, may
# have been changed again in that second after its copy read it, which no time to the
# second shows (MooseFS): its copy is compared byte for byte with it.
CLOCK_SKEW = 1.0
# What a streamed stage-in lists as unchecked (``_settle``): every big file of the tree
# (no file is named "." below a root).
STREAMED = b"."


class TreeCopy(Commands):
    """Copies a tree between the PFS and the RAMDISK (``StagingEngine.stage_in``,
    ``stage_out`` with method ``rsync``)."""

    def _copy(self, phase: str, src: str, dst: str, *, resume: bool,
              atomic: bool = False, redo: Collection[bytes] = (),
              since: int | None = None, only: Collection[bytes] | None = None,
              expect: Mapping[bytes, tuple[int, int] | None] | None = None) -> Stats:
        self._start()
        try:
            return self._copy_tree(phase, src, dst, resume, atomic, frozenset(redo),
                                   since, None if only is None else frozenset(only),
                                   expect or {})
        finally:
            self._stop()

    def _aside_suffix(self) -> str:
        """What this job's run names a copy kept aside after (``scripts.aside_suffix``)."""
        return scripts.aside_suffix(self.job_id, self.cycle)

    def _copy_tree(self, phase: str, src: str, dst: str, resume: bool,
                   atomic: bool = False, redo: frozenset[bytes] = frozenset(),
                   since: int | None = None, only: frozenset[bytes] | None = None,
                   expect: Mapping[bytes, tuple[int, int] | None] | None = None) -> Stats:
        """``since`` (atomic placement only): a destination file modified after this
        epoch second that differs from the copy is kept; the copy goes beside it
        (``staging.aside``). A copy kept aside by an earlier run counts as placed.
        ``only``: copy exactly these names (and the directories), whatever the quick
        check says (a write-back of writable input: ``staging.writeback``); ``expect``:
        the version of each name it may replace (``scripts.expect_input``)."""
        expect = expect or {}
        t0 = self.clock()
        first = self.hosts[0]
        limit = self._stream_limit() if only is None else -1
        entries = self._scan(first, src, f"{phase}: scanning {src}", limit=limit)
        settling = phase == "stage-in" and self.input_settle > 0
        unchecked = posixpath.join(dst, scripts.unchecked_name(self.job_id))
        if limit >= 0 and len(entries) > limit:  # too many to list here: the nodes do
            del entries  # (their quick check cannot leave out a list: no resume then)
            if settling:  # the copies an earlier run never checked: removed first
                self._discard_unchecked(first, dst, unchecked)
            return self._stream(phase, src, dst, atomic, resume and not redo)
        self._refuse_unreadable(entries, src, phase)
        self._user(first, scripts.mkdir_argv(dst), f"{phase}: creating {dst}")
        todo: Sequence[Entry] = entries
        already = 0
        complete: set[bytes] = set()
        scanned = self._scan(first, dst, f"{phase}: scanning {dst}")
        existing = [e for e in scanned
                    if not scripts.is_part_dir(e.path.split(b"/", 1)[0], self.job_id)]
        # a stage-in's big files whose copies an earlier run made but never checked
        # (``_settle``): copied again whatever the quick check says
        had_unchecked = settling and any(
            e.path == scripts.unchecked_name(self.job_id).encode() for e in scanned)
        if had_unchecked:
            listed = self._unchecked(first, unchecked)
            if STREAMED in listed:  # a streamed run's: every big file of the tree
                listed = {e.path for e in entries
                          if e.kind == "f" and e.size >= self.big_bytes}
            listed &= {e.path for e in entries}
            if listed:
                log.info("%s: %s: %d big file(s) an earlier run copied were never checked "
                         "once their copies settled (%s): copied again", self.job_id, phase,
                         len(listed), ", ".join(repr(display(p)) for p in sorted(listed)[:3]))
            redo = redo | listed
        self._refuse_planted(entries, existing, dst, phase)
        if only is not None:
            # the others are left as the destination has them: never in a whole-directory
            # bucket (which would copy them too), as if complete
            todo = [e for e in entries if e.kind == "d" or e.path in only]
            complete = {e.path for e in entries if e.kind != "d" and e.path not in only}
        elif resume and existing:
            # a copy an earlier run kept aside stands for its name: not copied again
            # over the newer file (unless a verify found it differing: ``redo``)
            view, _moved = aside_view(existing, {e.path: e for e in entries if e.kind != "d"},
                                      self._aside_suffix())
            todo, already = pending(entries, view, redo=redo)
            complete = {e.path for e in entries} - {e.path for e in todo}
        # Whole directories go recursively (atomic placement too: it renames what the
        # copy left in its part directory, whatever the names were).
        plan = make_plan(todo, len(self.hosts) * self.parallel_per_node,
                         big_bytes=self.big_bytes, already=already, trees=True,
                         complete=complete)
        log.info("%s: %s %s -> %s: %d files, %d bytes, %d buckets (%d of whole "
                 "directories; %d already done)", self.job_id, phase, src, dst, plan.files,
                 plan.bytes, len(plan.buckets), sum(b.tool == "tree" for b in plan.buckets),
                 already)
        if phase == "stage-out":
            self._take_slot(dst, plan.bytes)
        else:
            self._refuse_too_big(first, src, dst, plan.bytes, plan.files, phase)
        # A stage-out renames a whole directory new at the destination in one go onto an
        # empty placeholder (scripts.ATOMIC, "whole"): only its root is created here, none
        # of its subdirectories (they come with the rename). Not a union stage-in: under
        # the running job's overlay a directory renamed in would hide the PFS's files it
        # already sees there, so names go one by one into the directory it holds.
        new_roots = (whole_roots(plan, {e.path for e in existing})
                     if atomic and phase == "stage-out" else set())
        self._user(first, scripts.mkdirs_argv(dst), f"{phase}: creating directories",
                   input=scripts.encode_list(d.path for d in plan.dirs
                                             if not below_any(d.path, new_roots)))
        meter = ProgressMeter(phase, plan.files, plan.bytes, self.progress,
                              self.progress_interval, self.clock)
        per_node: dict[str, int] = {}
        lock = threading.Lock()
        big_ended: list[float] = []  # when each big file's copy ended (``_settle``)
        big = [e for e in todo if e.kind == "f" and e.size >= self.big_bytes]
        big_names = {e.path for e in big}
        recopying = False
        token = secrets.token_hex(8)  # unpredictable: see scripts.part_dir
        parts = posixpath.join(dst, scripts.part_dir(self.job_id, token))
        striped: list[StripedFile] = []
        keep_since = since if atomic else None
        suffix = self._aside_suffix() if keep_since is not None else ""
        expected = "\n" + scripts.expect_input(expect) if keep_since is not None and expect else ""
        if keep_since is not None and existing:
            kept = kept_newer(todo, existing, keep_since)
            if kept:
                log.info("%s: %s: %d file(s) of %s changed since the RAMDISK was built: "
                         "kept, the copies go beside them (%s...)", self.job_id, phase,
                         len(kept), dst, ", ".join(repr(display(p)) for p in kept[:3]))
        if self.copy_tool == "engine":
            striped = striped_files(plan.buckets, todo, parts=parts,
                                    streams=len(self.hosts) * self.parallel_per_node,
                                    stripe_bytes=self.stripe_bytes,
                                    min_range=self.stripe_min)
        if atomic or striped:
            self._user(first, scripts.new_part_argv(dst, self.job_id, token),
                       f"{phase}: creating the part directory {parts}")
        for f in striped:
            self._user(first, scripts.stripe_new_argv(f.tmp, f.entry.size),
                       f"{phase}: creating {f.tmp}")

        def count(host: Host, files: int, nbytes: int) -> None:
            if recopying:  # the settle check's second copies: counted once already
                return
            meter.add(files, nbytes)
            with lock:
                per_node[host.name] = per_node.get(host.name, 0) + nbytes

        def copy_range(host: Host, r: Range) -> None:
            f = r.file
            done = self._user(host, scripts.stripe_range_argv(
                src, f.tmp, r.offset, r.length, scripts.big_block(phase)),
                f"{phase}: copying {r.describe()}", input=scripts.encode_list([f.path]))
            check_range(r, done.stdout, phase, host.name)
            count(host, 0, r.length)
            if f.finished_one():
                self._user(host, scripts.stripe_place_argv(
                    src, f.tmp, dst, f.entry.size, f.entry.mtime_s, since=keep_since,
                    suffix=suffix, expect=expect.get(f.path)),
                    f"{phase}: placing {display(f.path)!r}",
                    input=scripts.encode_list([f.path]))
                meter.add(1, 0)
                with lock:
                    big_ended.append(self.clock())

        def copy(host: Host, item: Bucket | Range) -> None:
            if isinstance(item, Range):
                copy_range(host, item)
                return
            b = item
            if self.copy_tool == "rsync":
                argv = scripts.rsync_argv(src, dst, sparse=b.bytes >= self.big_bytes,
                                          recursive=b.tool == "tree")
            elif self.copy_tool == "custom":
                argv = scripts.custom_argv(self.copy_command, src, dst,
                                           recursive=b.tool == "tree")
            elif b.tool == "dd":
                argv = scripts.big_argv(src, dst, scripts.big_block(phase))
            else:
                argv = scripts.tar_pipe_argv(src, dst, sparse=b.bytes >= self.big_bytes,
                                             recursive=b.tool == "tree")
            if atomic:
                argv = scripts.atomic_argv(
                    argv, dst, posixpath.join(parts, str(b.index)),
                    whole=b.tool == "tree" and all(p in new_roots for p in b.paths),
                    since=keep_since, suffix=suffix)
            self._user(host, argv, f"{phase}: copying bucket {b.index} ({b.files} files)",
                       input=scripts.encode_list(b.paths) + (expected if atomic else ""))
            count(host, b.files, b.bytes)
            if big_names.intersection(b.paths):
                with lock:
                    big_ended.append(self.clock())

        if settling and big:  # until the settle check concludes (``_settle``)
            self._user(first, scripts.write_argv(unchecked),
                       f"{phase}: listing {len(big)} big file(s) to check in {unchecked}",
                       input=scripts.encode_list(e.path for e in big))
        self._parallel(ranges_first(striped, plan.buckets), copy, meter)
        if settling and big:
            next_index = len(plan.buckets)  # part directories of their own (atomic)

            def recopy(entries: Sequence[Entry], round_: int) -> None:
                nonlocal recopying, next_index
                again = make_plan(entries, len(self.hosts) * self.parallel_per_node,
                                  big_bytes=self.big_bytes)
                offset, next_index = next_index, next_index + len(again.buckets)
                recopying = True
                try:
                    self._parallel([dataclasses.replace(b, index=b.index + offset)
                                    for b in again.buckets], copy, None)
                finally:
                    recopying = False

            self._settle(src, dst, big, t_scan=t0, ended=max(big_ended, default=t0),
                         recopy=recopy, atomic=atomic, unchecked=unchecked)
        elif had_unchecked:  # none big any more: the list goes (never staged out with it)
            self._user(first, ["rm", "-f", "--", unchecked], f"{phase}: removing {unchecked}")
        if atomic or striped:
            self._user(first, scripts.remove_tree_argv(parts), f"{phase}: removing {parts}")
        # Directory modes and mtimes last: writing into a directory changes its mtime,
        # and a read-only directory would refuse the files staged into it.
        dirs = [d.path for d in plan.dirs]
        # (a custom copier's buckets hold no directory entries: the tar pipe sets them)
        dir_argv = (scripts.rsync_argv(src, dst) if self.copy_tool == "rsync"
                    else scripts.tar_pipe_argv(src, dst))
        self._user(first, dir_argv, f"{phase}: setting directory modes and times",
                   input=scripts.encode_list(dirs))
        meter.tick(final=True)
        return Stats(phase, plan.files, plan.bytes, len(plan.dirs), self.clock() - t0,
                     len(plan.buckets), already, tuple(display(e.path) for e in plan.skipped),
                     per_node)

    def _unchecked(self, host: Host, path: str) -> set[bytes]:
        """The names the unchecked list at ``path`` holds (none when absent; ``_settle``)."""
        return scripts.parse_unchecked(self._user(
            host, scripts.unchecked_argv(path), f"stage-in: reading {path}").stdout)

    def _settle(self, src: str, dst: str, big: Sequence[Entry], *, t_scan: float,
                ended: float, recopy: Callable[[Sequence[Entry], int], None],
                atomic: bool = False, unchecked: str) -> None:
        """Check a stage-in's big files once their copies have settled, and copy again
        those that may be torn: a copy of a file someone wrote to meanwhile mixes old and
        new blocks, and carries the mtime it saw, which a resume's quick check keeps.

        The copier (``scripts.BIG``) compares the source before and after its copy, but
        on a filesystem of separate clients a write shows in another node's ``stat`` only
        a moment later, and one in the second of the first ``stat`` not at all (times to
        the second). So ``input_settle`` seconds after the last big copy ended, the
        sources are read again (one node, as the user): a file whose inode, size or mtime
        differs from the scan's is removed and, once it has been quiet that long,
        copied again and checked the same way; one whose ctime is in the second the
        copies began (``CLOCK_SKEW``) is compared byte for byte with its copy (read
        afresh: ``scripts.COMPARE``) and copied again only if they differ; at most
        ``BIG_TRIES`` rounds, then the stage-in fails naming the files (retried
        later; the removed copies are made again then). ``atomic`` (a ``union`` job may
        already read its files): no file is ever cut short under its name; a copy that
        may be torn is removed at once (the job's overlay then shows the PFS's file), and
        the second copy renamed into place whole.

        ``unchecked`` (below the destination root) lists every big file from before its
        first copy: removed only once the check concluded (all passed, or the stage-in
        failed with the doubtful copies removed). A stage-in killed,
        cancelled or failed before that leaves it, and the next run copies those files
        again: a torn copy can carry the source's size and mtime, and the quick check
        would keep it, never checked."""
        first = self.hosts[0]
        by_name = {e.path: e for e in big}
        ref = {e.path: (e.inode[1], e.size, e.mtime_s) for e in big}
        began = t_scan  # when the copies compared with ``ref`` began (this clock)
        for round_ in range(1, BIG_TRIES + 1):
            pause = ended + self.input_settle - self.clock()
            if pause > 0:
                self._abort.wait(pause)
            self._abort.check()
            names = list(ref)
            asked = self.clock()
            node_now, stats = self._settle_stat(
                first, src, names, f"checking {len(names)} big file(s) of {src} again")
            # the second of the node's clock when the copies began: a change (ctime: the
            # real time of the last write, which no user can set) in it, or up to
            # CLOCK_SKEW before, may hide a second one after the copy read the file
            since = int(node_now - (asked - began)) - CLOCK_SKEW
            moved: dict[bytes, tuple[int, int, int, int] | None] = {}
            racy: list[bytes] = []
            for name, cur in zip(names, stats, strict=True):
                if cur is None or cur[:3] != ref[name]:
                    moved[name] = cur
                elif cur[3] >= since:
                    racy.append(name)
            if racy:
                done = self._user(first, scripts.compare_argv(src, dst),
                                  f"stage-in: comparing {len(racy)} big file(s) of {src} "
                                  "changed just before their copies with them",
                                  input=scripts.encode_list(racy))
                said = done.stdout.split()
                if len(said) != len(racy):
                    raise StagingError(f"stage-in: the comparison of {len(racy)} big file(s) "
                                       f"of {src} with their copies answered "
                                       f"{done.stdout[:200]!r}", permanent=False)
                now_of = dict(zip(names, stats, strict=True))
                moved.update((name, now_of[name])
                             for name, word in zip(racy, said, strict=True) if word != "same")
            if not moved:
                self._user(first, ["rm", "-f", "--", unchecked],
                           f"stage-in: removing {unchecked}")
                return
            shown = ", ".join(repr(display(p)) for p in list(moved)[:3])
            more = f" and {len(moved) - 3} more" if len(moved) > 3 else ""
            gone = [p for p, c in moved.items() if c is None]
            last = round_ == BIG_TRIES or bool(gone)
            # (removed, not truncated: a read-only copy cannot be opened for writing; and
            # under atomic placement never left readable while it waits to be replaced)
            self._user(first, scripts.discard_argv(dst),
                       f"stage-in: removing {len(moved)} copies that may be torn",
                       input=scripts.encode_list(moved))
            if last:
                self._user(first, ["rm", "-f", "--", unchecked],
                           f"stage-in: removing {unchecked}")
                if gone:
                    raise StagingError(
                        f"stage-in: {len(gone)} big file(s) of {src} removed or no longer "
                        f"readable after they were copied: "
                        f"{', '.join(repr(display(p)) for p in gone[:3])}"
                        f"{f' and {len(gone) - 3} more' if len(gone) > 3 else ''}; "
                        f"{len(moved)} not staged", permanent=False)
                raise StagingError(
                    f"stage-in: {len(moved)} big file(s) of {src} changed while they were "
                    f"copied or just before, {round_} time(s): {shown}{more}; not staged "
                    f"(a file still being written cannot be copied whole)", permanent=False)
            log.info("%s: stage-in: %d big file(s) of %s changed while they were copied "
                     "or just before (%s%s): removed, copied again once quiet", self.job_id,
                     len(moved), src, shown, more)
            newest = max(c[3] for c in moved.values() if c is not None)
            quiet = min(newest + 1 + self.input_settle - node_now, self.input_settle + 1)
            if quiet > 0:
                self._abort.wait(quiet)
            self._abort.check()
            ref = {p: c[:3] for p, c in moved.items() if c is not None}
            began = self.clock()
            # as scanned (hard links stay together), with what the source has now
            entries = [dataclasses.replace(by_name[p], size=c[1],
                                           mtime_ns=c[2] * 1_000_000_000,
                                           inode=(by_name[p].inode[0], c[0]))
                       for p, c in moved.items() if c is not None]
            try:
                recopy(entries, round_)
            except StagingError as err:
                if not err.permanent:
                    raise
                # e.g. no space: the first copies' chunks are not freed yet; a later try
                # finds them freed (their removed copies are copied again then)
                raise StagingError(f"stage-in: copying again {len(entries)} big file(s) "
                                   f"that changed while they were copied failed: {err}",
                                   permanent=False, node=err.node) from None
            ended = self.clock()

    def _stream(self, phase: str, src: str, dst: str, atomic: bool,
                resume: bool = True) -> Stats:
        """Stage a tree of more than ``stream_objects`` objects in streamed mode: listed
        and copied on the nodes, rsad keeps counters (``stream``)."""
        first = self.hosts[0]
        self._user(first, scripts.mkdir_argv(dst), f"{phase}: creating {dst}")
        token = secrets.token_hex(8)
        parts = posixpath.join(dst, scripts.part_dir(self.job_id, token))
        self._user(first, scripts.new_part_argv(dst, self.job_id, token),
                   f"{phase}: creating the part directory {parts}")

        def run(host: Host, argv: Sequence[str], what: str, *,
                input: str | None = None) -> Completed:
            return self._user(host, argv, what, input=input)

        settling = phase == "stage-in" and self.input_settle > 0
        unchecked = posixpath.join(dst, scripts.unchecked_name(self.job_id))

        def slot(nbytes: int, files: int, fresh: bool) -> None:
            if phase == "stage-out":
                self._take_slot(dst, nbytes)
            elif fresh:  # a resumed copy's total counts what is there already
                self._refuse_too_big(first, src, dst, nbytes, files, phase)
            if settling:  # until the settle check concludes (``_settle``): every big file
                self._user(first, scripts.write_argv(unchecked),
                           f"{phase}: listing the big files to check in {unchecked}",
                           input=scripts.encode_list([STREAMED]))

        streamed = StreamedCopy(
            self.hosts, run, self._parallel, uid=self.identity.uid,
            user=self.identity.user, streams=len(self.hosts) * self.parallel_per_node,
            meter=lambda files, nbytes: ProgressMeter(
                phase, files, nbytes, self.progress, self.progress_interval, self.clock),
            clock=self.clock)
        t0 = self.clock()

        def settle() -> None:
            if settling:
                self._settle_streamed(src, dst, parts, atomic=atomic, t_copy=t0,
                                      unchecked=unchecked)

        stats = streamed.copy(phase, src, dst, parts, atomic=atomic, resume=resume,
                              before_copy=slot, after_copy=settle)
        self._user(first, scripts.remove_tree_argv(parts), f"{phase}: removing {parts}")
        return stats

    def _settle_stat(self, host: Host, src: str, names: Sequence[bytes], what: str
                     ) -> tuple[float, list[tuple[int, int, int, int] | None]]:
        """``SETTLE_STAT`` of ``names`` below ``src`` on ``host``, as the user: the node's
        clock and each name's (inode, size, mtime, ctime), None where it is gone."""
        done = self._user(host, scripts.settle_stat_argv(src), f"stage-in: {what}",
                          input=scripts.encode_list(names))
        try:
            return scripts.parse_settle(done.stdout, len(names))
        except ValueError as err:
            raise StagingError(f"stage-in: the check of the big files of {src} "
                               f"failed: {err}", permanent=False) from None

    def _settle_streamed(self, src: str, dst: str, parts: str, *, atomic: bool,
                         t_copy: float, unchecked: str) -> None:
        """``_settle`` for a streamed stage-in (its chunks all copied, the directory modes
        not yet set): rsad never held the tree's list, so once the copies have settled
        the big files are found by a scan of the destination (``SCAN_BIG``), and each
        source is compared with what its copy holds (size and mtime: the version the
        copier saw), and its ctime with the time the copy began (in that second or the
        one before: compared byte for byte, copied again only if different, by
        ``_settle`` as in the listed mode). As in the listed mode, a file copied small is
        not checked (there, a file scanned small); nor a copy whose source is gone by then
        (there, one not scanned)."""
        first = self.hosts[0]
        ended = self.clock()
        self._abort.wait(self.input_settle)  # (a write the copier missed shows by then)
        self._abort.check()
        copies = {e.path: e for e in self._user_scan_big(first, dst)
                  if not scripts.is_part_dir(e.path.split(b"/", 1)[0], self.job_id)}
        if not copies:
            self._user(first, ["rm", "-f", "--", unchecked], f"stage-in: removing {unchecked}")
            return
        names = sorted(copies)
        _, stats = self._settle_stat(
            first, src, names, f"reading the inodes of {len(names)} big file(s) of {src}")
        # what the source must still have: the copy's size and mtime; its own inode. A
        # copy without a source (gone since an earlier run copied it: a stage-in never
        # removes what its source lost) is none of this run's.
        big = [dataclasses.replace(copies[p], inode=(copies[p].inode[0], c[0]))
               for p, c in zip(names, stats, strict=True) if c is not None]
        if not big:
            self._user(first, ["rm", "-f", "--", unchecked], f"stage-in: removing {unchecked}")
            return
        streams = len(self.hosts) * self.parallel_per_node

        def recopy(entries: Sequence[Entry], round_: int) -> None:
            again = make_plan(entries, streams, big_bytes=self.big_bytes)

            def copy(host: Host, b: Bucket) -> None:
                argv = (scripts.big_argv(src, dst, scripts.big_block("stage-in"))
                        if b.tool == "dd" else
                        scripts.tar_pipe_argv(src, dst, sparse=b.bytes >= self.big_bytes))
                if atomic:
                    argv = scripts.atomic_argv(
                        argv, dst, posixpath.join(parts, f"settle-{round_}-{b.index}"))
                self._user(host, argv, f"stage-in: copying bucket {b.index} again "
                           f"({b.files} files)", input=scripts.encode_list(b.paths))

            self._parallel(again.buckets, copy, None)

        self._settle(src, dst, big, t_scan=t_copy, ended=ended, recopy=recopy,
                     atomic=atomic, unchecked=unchecked)

    def _discard_unchecked(self, host: Host, dst: str, unchecked: str) -> None:
        """Before a streamed stage-in: remove the copies an earlier run made but never
        checked (``_settle``; all big files of ``dst`` for a streamed run's list), so its
        quick check, which cannot single them out, copies them again; the rest resumes."""
        names = self._unchecked(host, unchecked)
        if STREAMED in names:
            names = {e.path for e in self._user_scan_big(host, dst)
                     if not scripts.is_part_dir(e.path.split(b"/", 1)[0], self.job_id)}
        if names:
            log.info("%s: stage-in: %d big file(s) an earlier run copied were never checked "
                     "once their copies settled: removed, copied again", self.job_id,
                     len(names))
            self._user(host, scripts.discard_argv(dst),
                       f"stage-in: removing {len(names)} copies never checked",
                       input=scripts.encode_list(sorted(names)))

    def _user_scan_big(self, host: Host, root: str) -> list[Entry]:
        """The regular files of at least ``big_bytes`` below ``root``, as the user."""
        done = self._user(host, scripts.scan_big_argv(root, self.identity.uid,
                                                      self.big_bytes),
                          f"stage-in: scanning the big files of {root}")
        return parse_scan_fields(scan_fields(done.stdout))

