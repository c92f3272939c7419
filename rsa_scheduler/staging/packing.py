"""Tar aggregation: stage-out as archives, and reading them back for verify.

Owns :class:`Packing`: the RAMDISK's buckets grouped into one archive per RSA node
(``<dst>/rsa-<job>-<n>.tar``, written to ``.part`` names and renamed), the index of every
member (``<dst>/rsa-<job>.index``), and the manifest of those archives verify compares
(their listings and, at level ``content``, their members' hashes: of exactly the
archives the index names, every member where the index says, once), each archive read
back by another node than the one that packed it (archive n is packed on node n, read on
node n + 1) after that node dropped it from its page cache. The programs are
``scripts.archives``'.

Must not import the daemon, the store or Slurm, nor ``engine``.
"""

from __future__ import annotations

import base64
import posixpath
import re

from rsa_scheduler.hosts import Host
from rsa_scheduler.staging import scripts
from rsa_scheduler.staging.commands import Commands
from rsa_scheduler.staging.manifest import (
    Difference,
    Entry,
    display,
    index_differences,
    index_lines,
    parse_index,
    parse_member_hashes,
    parse_tar_listing,
    resolve_tar,
)
from rsa_scheduler.staging.plan import assign, make_plan
from rsa_scheduler.staging.report import ProgressMeter, StagingError, Stats


def archive_number(path: str) -> int:
    """n of ``.../rsa-<job>[.c<cycle>]-<n>.tar``: the node that packed it (names sort
    as text: rsa-J-10.tar before rsa-J-2.tar)."""
    tail = posixpath.basename(path).removesuffix(".tar").rpartition("-")[2]
    return int(tail) if tail.isdigit() else 0


class Packing(Commands):
    """Packs the RAMDISK into archives (``StagingEngine.stage_out`` with method ``tar``)
    and lists them back (``StagingEngine.verify``)."""

    @property
    def archive_prefix(self) -> str:
        """``rsa-<job>`` for a job's first run, ``rsa-<job>.c<cycle>`` for a later one (a
        requeued job): no run replaces, or counts in its verify, another run's archives;
        ``rsa-<job>-*.tar`` never matches a later run's ``rsa-<job>.c2-0.tar``."""
        return f"rsa-{self.job_id}" + (f".c{self.cycle}" if self.cycle > 1 else "")

    def archive_names(self, dst: str, count: int) -> tuple[list[str], str]:
        """``<dst>/<prefix>-<n>.tar`` for n in 0..count-1, and ``<dst>/<prefix>.index``."""
        prefix = self.archive_prefix
        return ([posixpath.join(dst, f"{prefix}-{n}.tar") for n in range(count)],
                posixpath.join(dst, f"{prefix}.index"))

    def _pack(self, ramdisk: str, dst: str) -> Stats:
        self._start()
        try:
            t0 = self.clock()
            first = self.hosts[0]
            entries = self._scan(first, ramdisk, "stage-out: scanning the RAMDISK")
            self._refuse_unreadable(entries, ramdisk, "stage-out")
            self._user(first, scripts.mkdir_argv(dst), f"stage-out: creating {dst}")
            plan = make_plan(entries, len(self.hosts) * self.parallel_per_node,
                             big_bytes=self.big_bytes)
            self._take_slot(dst, plan.bytes)
            groups = [g for g in assign(plan.buckets, len(self.hosts)) if g] or [[]]
            names, index = self.archive_names(dst, len(groups))
            by_path = {e.path: e for e in entries}
            lists: list[list[bytes]] = []
            for n, group in enumerate(groups):
                paths = [d.path for d in plan.dirs] if n == 0 else []
                lists.append(paths + [p for b in group for p in b.paths])
            meter = ProgressMeter("stage-out", plan.files, plan.bytes, self.progress,
                                  self.progress_interval, self.clock)
            per_node: dict[str, int] = {}
            jobs = [(n, sum(b.bytes for b in g), sum(b.files for b in g))
                    for n, g in enumerate(groups)]

            def pack(host: Host, job: tuple[int, int, int]) -> None:
                n, nbytes, nfiles = job
                self._user(host, scripts.tar_pack_argv(ramdisk, names[n]),
                           f"stage-out: packing {names[n]}",
                           input=scripts.encode_list(lists[n]))
                meter.add(nfiles, nbytes)
                per_node[host.name] = per_node.get(host.name, 0) + nbytes

            # archive n on node n: verify reads it back on node n + 1 (_archive_manifest)
            self._parallel(jobs, pack, meter, spread=True, on=lambda job: job[0])
            members = [(posixpath.basename(names[n]), by_path[p])
                       for n, paths in enumerate(lists) for p in paths]
            text = index_lines(members).encode("utf-8", "surrogateescape")
            self._user(first, scripts.write_argv(index), "stage-out: writing the index",
                       input=base64.b64encode(text).decode("ascii"))
            meter.tick(final=True)
            return Stats("stage-out", plan.files, plan.bytes, len(plan.dirs),
                         self.clock() - t0, len(groups), 0,
                         tuple(display(e.path) for e in plan.skipped), per_node,
                         (*names, index))
        finally:
            self._stop()

    def _archive_manifest(self, dst: str) -> tuple[list[Entry], list[Difference]]:
        """The objects of exactly the archives this run's index names (``<dst>/<prefix>
        .index``, written by the stage-out once every archive was renamed into place),
        and where they and the index disagree (``manifest.index_differences``). Another
        file of DATA_OUT matching ``<prefix>-*.tar`` (an archive of an earlier job Slurm
        gave this id, the user's own) is never read: its members would stand for this
        run's, and a member lost from an archive cut short at a member boundary (which
        ``tar -t`` lists without an error) would pass where that file held it."""
        prefix = self.archive_prefix
        index = posixpath.join(dst, f"{prefix}.index")
        # by another node than the one that wrote it (the first), where there is one
        raw = scripts.decode_output(self._user(self.hosts[-1], scripts.read_argv(index),
                                               f"verify: reading {index}").stdout)
        try:
            listed = parse_index(raw)
        except ValueError as e:
            raise StagingError(f"verify: {index} is not an index a stage-out wrote: {e}; "
                               "the retry writes the archives and the index again",
                               permanent=False) from e
        archives = sorted({line[0] for line in listed}, key=archive_number)
        own = re.compile(re.escape(prefix) + r"-\d+\.tar")
        strange = [a for a in archives if not own.fullmatch(a)]
        if strange:
            raise StagingError(f"verify: {index} names {strange[0]!r}, not an archive "
                               f"{prefix}-<n>.tar of this run; the retry writes the "
                               "archives and the index again", permanent=False)
        names = [posixpath.join(dst, a) for a in archives]
        out: list[list[Entry]] = [[] for _ in names]

        def read(host: Host, n: int) -> None:
            raw = scripts.decode_output(self._user(host, scripts.tar_list_argv(names[n]),
                                                   f"verify: listing {names[n]}").stdout)
            hashes: dict[bytes, str] = {}
            if self.verify_level == "content":
                hashes = parse_member_hashes(scripts.decode_output(self._user(
                    host, scripts.tar_hash_argv(names[n]), f"verify: hashing {names[n]}"
                ).stdout))
            out[n] = resolve_tar(parse_tar_listing(raw), hashes, n)

        # by another node than the one that packed it (archive n: node n), where there
        # is one; the node drops it from its page cache first (scripts.archives.UNCACHE)
        self._parallel(range(len(names)), read, None, spread=True,
                       on=lambda n: archive_number(names[n]) + 1)
        return ([e for part in out for e in part],
                index_differences(listed, dict(zip(archives, out, strict=True))))

    def archive_read_back(self) -> str:
        """How ``_archive_manifest`` read the archives (the user's message)."""
        if len(self.hosts) > 1:
            return ("each archive read back by another RSA node than the one that packed "
                    "it, after that node dropped it from its page cache")
        return ("each archive read back by the RSA node that packed it, after it wrote it "
                "back and dropped it from its page cache")
