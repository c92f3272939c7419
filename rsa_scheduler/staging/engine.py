"""The staging engine: stage-in, stage-out, verify and user scripts on a job's RSA nodes.

Owns :class:`StagingEngine`. One scan of the source (as the user) → a plan of balanced
buckets (``plan``) → every bucket run on one of the job's RSA nodes, ``parallel_per_node``
streams per node, each with the tool its bucket calls for (``scripts``: tar pipes and
dd; or, as ``staging.copy_tool`` says, rsync or the site's own ``copy_command`` for
every bucket) → directory modes and mtimes set last. Every command that touches user
data runs through ``Host.run(as_user=identity)``: the job's uid, gid and supplementary
groups, a clean environment. The engine never deletes anything; ``verify`` only reports.
A file of at least ``stripe_bytes`` is copied in checksummed ranges by every stream at
once (``stripe``); a tree of more than ``stream_objects`` objects is listed and copied
on the nodes, rsad keeping counters only (``stream``).

Cancellation: the caller's :class:`CancelToken` (and the first failing bucket) cancel an
internal token handed to every running ``Host.run``, whose implementation kills the
remote process tree; the engine then raises :class:`Cancelled` (or the first error).

Must not import the daemon, the store or Slurm.
"""

from __future__ import annotations

import base64
import concurrent.futures as cf
import contextlib
import logging
import posixpath
import queue
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from ClusterShell.NodeSet import NodeSet

from rsa_scheduler.hosts import Cancelled, CancelToken, Host
from rsa_scheduler.runner import CommandError, Completed, Identity
from rsa_scheduler.staging import scripts
from rsa_scheduler.staging.flush import FlushGate
from rsa_scheduler.staging.manifest import (
    Entry,
    Verification,
    compare,
    display,
    index_lines,
    parse_hashes,
    parse_member_hashes,
    parse_scan_fields,
    parse_tar_listing,
    planted_symlinks,
    resolve_tar,
    scan_fields,
    with_hashes,
)
from rsa_scheduler.staging.plan import (
    STRIPE_MIN,
    Bucket,
    assign,
    make_plan,
    pending,
    stripes,
)
from rsa_scheduler.staging.report import (
    TAIL,
    Progress,
    ProgressMeter,
    ScriptResult,
    StagingError,
    Stats,
    classify,
)
from rsa_scheduler.staging.stream import StreamedCopy, streamed_verify
from rsa_scheduler.staging.stripe import (
    VERIFY_RANGE_BYTES,
    Range,
    StripedFile,
    check_range,
    ranges_first,
    striped_files,
)

log = logging.getLogger(__name__)
T = TypeVar("T")
METHODS = ("rsync", "tar")  # core.policy.StageOut values; "rsync" = the default copy
LEVELS = ("content", "metadata")
PHASES = ("stage-in", "stage-out")


class StagingEngine:
    """Moves one job's data between the PFS and its RAMDISK over its RSA nodes.

    ``hosts``: the job's RSA nodes (the RAMDISK is mounted at the same path on each).
    ``timeout``: the limit of one whole operation (every command gets what is left).
    ``progress``: called with a :class:`Progress` at most every ``progress_interval`` s.
    """

    def __init__(self, hosts: Sequence[Host], identity: Identity, *,
                 parallel_per_node: int = 2, progress: Callable[[Progress], None] | None = None,
                 cancel: CancelToken | None = None, timeout: float = 24 * 3600.0,
                 progress_interval: float = 5.0, job_id: str = "", verify_level: str = "content",
                 big_bytes: int = 32 << 20, clock: Callable[[], float] = time.monotonic,
                 gate: FlushGate | None = None, copy_tool: str = "engine",
                 copy_command: str = "", stripe_bytes: int = 0,
                 stripe_min: int = STRIPE_MIN, stream_objects: int = 0,
                 verify_range_bytes: int = VERIFY_RANGE_BYTES) -> None:
        if not hosts:
            raise ValueError("StagingEngine needs at least one RSA node")
        if identity.uid == 0:
            raise ValueError("staging never runs as root: give the job's user")
        if verify_level not in LEVELS:
            raise ValueError(f"verify level {verify_level!r}: expected one of {LEVELS}")
        self.hosts = list(hosts)
        self.identity = identity
        self.parallel_per_node = max(1, parallel_per_node)
        self.progress = progress
        self.cancel = cancel or CancelToken()
        self.timeout = timeout
        self.progress_interval = progress_interval
        self.job_id = job_id or "job"
        self.verify_level = verify_level
        self.big_bytes = big_bytes
        self.clock = clock
        self.gate = gate
        if copy_tool not in scripts.COPY_TOOLS:
            raise ValueError(f"copy tool {copy_tool!r}: expected one of {scripts.COPY_TOOLS}")
        self.copy_tool = copy_tool
        if copy_tool == "custom":
            scripts.check_copy_command(copy_command)
        self.copy_command = copy_command
        self.stripe_bytes = stripe_bytes  # 0: never stripe (staging.stripe_bytes)
        self.stripe_min = stripe_min  # the shortest range
        # a larger tree: streamed mode; 0: off (staging.stream_objects, opt-in)
        self.stream_objects = stream_objects
        # verify reads files this large back in ranges, uncached (0: whole, as cached)
        self.verify_range_bytes = verify_range_bytes
        self._deadline = 0.0
        self._abort = CancelToken()
        self._held = contextlib.ExitStack()

    # --- public API -------------------------------------------------------------------

    def prepare_root(self, path: str, mode: int = 0o700) -> None:
        """As root on the first node: create the job's RAMDISK root, owned by the user."""
        self._start()
        host = self.hosts[0]
        argv = scripts.prepare_root_argv(path, self.identity.uid, self.identity.gid, mode)
        try:
            host.run(argv, timeout=self._left(), cancel=self._abort)
        except CommandError as e:
            raise classify(e, f"creating RAMDISK root {path}", host.name) from e

    def stage_in(self, src: str, ramdisk: str, *, resume: bool = True,
                 atomic: bool = False) -> Stats:
        """DATA_IN → RAMDISK. ``resume``: skip what an interrupted run already finished.
        ``atomic``: every file appears under its name only once complete (copied into
        ``<ramdisk>/.rsa-staging-<job>-<random>/`` and renamed; for the ``union`` early-start
        policy, where the job may already be reading)."""
        return self._copy("stage-in", src, ramdisk, resume=resume, atomic=atomic)

    def stage_out(self, ramdisk: str, dst: str, method: str = "rsync", *,
                  resume: bool = True) -> Stats:
        """RAMDISK → DATA_OUT, as a tree (``rsync``, the default) or as archives (``tar``).
        Either way a file appears under its final name only once complete: the tree is
        copied into ``<dst>/.rsa-staging-<job>-<random>/`` and renamed into place, archives are
        written to ``.part`` names and renamed."""
        if method not in METHODS:
            raise ValueError(f"stage-out method {method!r}: expected one of {METHODS}")
        self._start()
        try:  # an empty RAMDISK (no node ever mounted it for output) leaves DATA_OUT alone
            empty = not self._scan(self.hosts[0], ramdisk, "stage-out: scanning the RAMDISK",
                                   limit=0)
        finally:
            self._stop()
        if empty:
            log.info("%s: stage-out: the RAMDISK holds nothing: %s left alone", self.job_id,
                     dst)
            return Stats("stage-out", 0, 0, 0, 0.0, 0, 0, (), {})
        if method == "tar":
            return self._pack(ramdisk, dst)
        return self._copy("stage-out", ramdisk, dst, resume=resume, atomic=True)

    def verify(self, ramdisk: str, dst: str, method: str = "rsync") -> Verification:
        """Compare DATA_OUT (or its archives) with a manifest of the RAMDISK."""
        if method not in METHODS:
            raise ValueError(f"stage-out method {method!r}: expected one of {METHODS}")
        self._start()
        limit = self._stream_limit() if method == "rsync" else -1
        expected = self._scan(self.hosts[0], ramdisk, "verify: scanning the RAMDISK",
                              limit=limit)
        if not expected:  # nothing to copy, nothing to find (stage_out left DATA_OUT alone)
            return compare([], [], level=self.verify_level)
        if limit >= 0 and len(expected) > limit:
            del expected  # too many to list here: the nodes compare
            return self._stream_verify(ramdisk, dst)
        if method == "tar":
            actual = self._archive_manifest(dst)
        else:
            actual = self._scan(self.hosts[-1], dst, "verify: scanning DATA_OUT")
            if self.verify_level == "content":
                files = [e for e in expected if e.kind == "f"]
                have = {e.path for e in actual if e.kind == "f"}
                exp_h, act_h = self._hash_both(ramdisk, dst, files, have)
                expected, actual = with_hashes(expected, exp_h), with_hashes(actual, act_h)
        if method == "tar" and self.verify_level == "content":
            files = [e for e in expected if e.kind == "f"]
            expected = with_hashes(expected, self._hash(ramdisk, files))
        result = compare(expected, actual, level=self.verify_level)
        log.info("%s: %s", self.job_id, result.summary(dst))
        return result

    def run_script(self, argv: Sequence[str], phase: str, *, ramdisk: str,
                   data_in: str = "", data_out: str = "") -> ScriptResult:
        """Run PREPROCESS (phase ``stage-in``) or POSTPROCESS (``stage-out``) as the user on
        the first RSA node, in the RAMDISK, with the ``RSA_*`` environment."""
        if phase not in PHASES:
            raise ValueError(f"phase {phase!r}: expected one of {PHASES}")
        self._start()
        host = self.hosts[0]
        env = self.identity.env(self.script_env(host.name, phase, ramdisk=ramdisk,
                                                data_in=data_in, data_out=data_out))
        full = scripts.script_argv(argv, ramdisk)
        t0 = self.clock()
        try:
            done = host.run(full, timeout=self._left(), check=False, as_user=self.identity,
                            env=env, cancel=self._abort)
        except CommandError as e:
            if self.cancel.cancelled:
                raise Cancelled(self.cancel.reason) from e
            if not e.timed_out:
                raise classify(e, f"{phase} script", host.name) from e
            return ScriptResult(host.name, phase, tuple(argv), None, "",
                                e.stderr_tail[-TAIL:], self.clock() - t0)
        finally:
            self._stop()
        return ScriptResult(host.name, phase, tuple(argv), done.returncode,
                            done.stdout[-TAIL:], done.stderr[-TAIL:], done.seconds)

    def script_env(self, node: str, phase: str, *, ramdisk: str, data_in: str,
                   data_out: str) -> dict[str, str]:
        """The documented environment of PRE/POSTPROCESS (docs/staging.md)."""
        return {"RSA_RAMDISK": ramdisk, "RSA_DATA_IN": data_in, "RSA_DATA_OUT": data_out,
                "RSA_JOB_ID": self.job_id, "RSA_PHASE": phase, "RSA_NODE": node,
                "RSA_NODES": str(NodeSet.fromlist([h.name for h in self.hosts]))}

    # --- stage-in / stage-out as a tree -------------------------------------------------

    def _copy(self, phase: str, src: str, dst: str, *, resume: bool,
              atomic: bool = False) -> Stats:
        self._start()
        try:
            return self._copy_tree(phase, src, dst, resume, atomic)
        finally:
            self._stop()

    def _copy_tree(self, phase: str, src: str, dst: str, resume: bool,
                   atomic: bool = False) -> Stats:
        t0 = self.clock()
        first = self.hosts[0]
        limit = self._stream_limit()
        entries = self._scan(first, src, f"{phase}: scanning {src}", limit=limit)
        if limit >= 0 and len(entries) > limit:  # too many to list here: the nodes do
            del entries
            return self._stream(phase, src, dst, atomic)
        self._refuse_unreadable(entries, src, phase)
        self._user(first, scripts.mkdir_argv(dst), f"{phase}: creating {dst}")
        todo: Sequence[Entry] = entries
        already = 0
        complete: set[bytes] = set()
        existing = [e for e in self._scan(first, dst, f"{phase}: scanning {dst}")
                    if not scripts.is_part_dir(e.path.split(b"/", 1)[0], self.job_id)]
        self._refuse_planted(entries, existing, dst, phase)
        if resume and existing:
            todo, already = pending(entries, existing)
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
        self._user(first, scripts.mkdirs_argv(dst), f"{phase}: creating directories",
                   input=scripts.encode_list(d.path for d in plan.dirs))
        meter = ProgressMeter(phase, plan.files, plan.bytes, self.progress,
                              self.progress_interval, self.clock)
        per_node: dict[str, int] = {}
        lock = threading.Lock()
        token = secrets.token_hex(8)  # unpredictable: see scripts.part_dir
        parts = posixpath.join(dst, scripts.part_dir(self.job_id, token))
        striped: list[StripedFile] = []
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
                    src, f.tmp, dst, f.entry.size, f.entry.mtime_s),
                    f"{phase}: placing {display(f.path)!r}",
                    input=scripts.encode_list([f.path]))
                meter.add(1, 0)

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
                argv = scripts.atomic_argv(argv, dst, posixpath.join(parts, str(b.index)))
            self._user(host, argv, f"{phase}: copying bucket {b.index} ({b.files} files)",
                       input=scripts.encode_list(b.paths))
            count(host, b.files, b.bytes)

        self._parallel(ranges_first(striped, plan.buckets), copy, meter)
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

    # --- tar aggregation stage-out ----------------------------------------------------

    def archive_names(self, dst: str, count: int) -> tuple[list[str], str]:
        """``<dst>/rsa-<job>-<n>.tar`` for n in 0..count-1, and ``<dst>/rsa-<job>.index``."""
        return ([posixpath.join(dst, f"rsa-{self.job_id}-{n}.tar") for n in range(count)],
                posixpath.join(dst, f"rsa-{self.job_id}.index"))

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

            self._parallel(jobs, pack, meter, spread=True)
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

    def _archive_manifest(self, dst: str) -> list[Entry]:
        listing = self._user(self.hosts[0], ["find", dst, "-maxdepth", "1", "-name",
                                             f"rsa-{self.job_id}-*.tar", "-printf", "%f\\n"],
                             "verify: listing archives")
        names = sorted(posixpath.join(dst, n) for n in listing.stdout.split("\n") if n)
        if not names:
            raise StagingError(f"verify: no archives rsa-{self.job_id}-*.tar in {dst}",
                               permanent=False)
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

        self._parallel(range(len(names)), read, None, spread=True)
        return [e for part in out for e in part]

    # --- manifests --------------------------------------------------------------------

    def _scan(self, host: Host, root: str, what: str, *, limit: int = -1) -> list[Entry]:
        """The objects below ``root``; with ``limit`` >= 0 at most ``limit`` + 1 of them
        (more than ``limit``: the tree is too large to list in rsad)."""
        argv = (scripts.scan_argv(root, self.identity.uid) if limit < 0
                else scripts.scan_capped_argv(root, self.identity.uid, limit))
        done = self._user(host, argv, what)
        return parse_scan_fields(scan_fields(done.stdout))

    def _stream_limit(self) -> int:
        """The capped scan's limit: ``stream_objects``, or -1 (no cap) when streamed mode
        is off (``staging.stream_objects`` empty: every tree is listed here)."""
        return self.stream_objects if self.stream_objects > 0 else -1

    def _stream_verify(self, ramdisk: str, dst: str) -> Verification:
        token = secrets.token_hex(8)
        parts = posixpath.join(dst, scripts.part_dir(self.job_id, token))
        self._user(self.hosts[0], scripts.new_part_argv(dst, self.job_id, token),
                   f"verify: creating the part directory {parts}")

        def run(host: Host, argv: Sequence[str], what: str, *,
                input: str | None = None) -> Completed:
            return self._user(host, argv, what, input=input)

        try:
            result = streamed_verify(self.hosts, run, self._parallel, ram=ramdisk, dst=dst,
                                     parts=parts, level=self.verify_level,
                                     streams=len(self.hosts) * self.parallel_per_node,
                                     drop_bytes=self.verify_range_bytes)
        finally:
            self._stop()
        log.info("%s: %s", self.job_id, result.summary(dst))
        return result

    def _stream(self, phase: str, src: str, dst: str, atomic: bool) -> Stats:
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

        def slot(nbytes: int) -> None:
            if phase == "stage-out":
                self._take_slot(dst, nbytes)

        streamed = StreamedCopy(
            self.hosts, run, self._parallel, uid=self.identity.uid,
            user=self.identity.user, streams=len(self.hosts) * self.parallel_per_node,
            meter=lambda files, nbytes: ProgressMeter(
                phase, files, nbytes, self.progress, self.progress_interval, self.clock),
            clock=self.clock)
        stats = streamed.copy(phase, src, dst, parts, atomic=atomic, before_copy=slot)
        self._user(first, scripts.remove_tree_argv(parts), f"{phase}: removing {parts}")
        return stats

    def _hash(self, root: str, files: Sequence[Entry]) -> dict[bytes, str]:
        out: dict[bytes, str] = {}
        plan = make_plan(files, len(self.hosts) * self.parallel_per_node,
                         big_bytes=self.big_bytes)

        def run(host: Host, b: Bucket) -> None:
            raw = self._user(host, scripts.hash_argv(root), f"verify: hashing in {root}",
                             input=scripts.encode_list(b.paths)).stdout
            out.update(parse_hashes(scripts.decode_output(raw)))

        self._parallel(plan.buckets, run, None)
        return out

    def _hash_both(self, src: str, dst: str, files: Sequence[Entry],
                   have: set[bytes]) -> tuple[dict[bytes, str], dict[bytes, str]]:
        """Content hashes of ``files`` below ``src`` (the RAMDISK) and of those of them
        present below ``dst``, every command in parallel over every stream and node.
        Files of at least ``verify_range_bytes`` are hashed in ranges (digest: the list of
        range hashes, the same ranges on both sides), after every node wrote back and
        dropped its cached pages of the destination's copy (docs/staging.md), whether or
        not the copy striped them."""
        streams = len(self.hosts) * self.parallel_per_node
        striped = [e for e in files
                   if self.verify_range_bytes > 0 and e.size >= self.verify_range_bytes]
        big = {e.path for e in striped}
        plan = make_plan([e for e in files if e.path not in big], streams,
                         big_bytes=self.big_bytes)
        out: tuple[dict[bytes, str], dict[bytes, str]] = ({}, {})
        parts: tuple[dict[bytes, list[str]], dict[bytes, list[str]]] = ({}, {})
        lock = threading.Lock()
        dropped = [e.path for e in striped if e.path in have]
        if dropped:
            for host in self.hosts:  # page caches are per node
                self._user(host, scripts.drop_cache_argv(dst),
                           f"verify: dropping {dst} from the page cache",
                           input=scripts.encode_list(dropped))
        jobs: list[tuple[int, Bucket | tuple[Entry, int, int, int]]] = []
        for e in sorted(striped, key=lambda e: -e.size):
            ranges = stripes(e.size, streams, min_range=self.stripe_min)
            for side in (0, 1) if e.path in have else (0,):
                parts[side][e.path] = [""] * len(ranges)
                jobs += [(side, (e, i, off, n)) for i, (off, n) in enumerate(ranges)]
        jobs += [(side, b) for b in plan.buckets for side in (0, 1)]

        def run(host: Host, job: tuple[int, Bucket | tuple[Entry, int, int, int]]) -> None:
            side, item = job
            root = (src, dst)[side]
            if isinstance(item, tuple):
                e, i, off, n = item
                raw = self._user(host, scripts.hash_range_argv(root, off, n),
                                 f"verify: hashing bytes {off}-{off + n} of "
                                 f"{display(e.path)!r} in {root}",
                                 input=scripts.encode_list([e.path])).stdout
                with lock:
                    parts[side][e.path][i] = raw.split()[0] if raw.split() else "?"
                return
            paths = item.paths if side == 0 else tuple(p for p in item.paths if p in have)
            if not paths:
                return
            raw = self._user(host, scripts.hash_argv(root), f"verify: hashing in {root}",
                             input=scripts.encode_list(paths)).stdout
            with lock:
                out[side].update(parse_hashes(scripts.decode_output(raw)))

        self._parallel(jobs, run, None)
        for side in (0, 1):
            for path, hashes in parts[side].items():
                out[side][path] = "ranges:" + ",".join(hashes)
        return out

    def _refuse_planted(self, entries: Iterable[Entry], existing: Iterable[Entry],
                        dst: str, phase: str) -> None:
        bad = planted_symlinks(entries, existing)
        if bad:
            shown = ", ".join(repr(display(p)) for p in bad[:5])
            more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
            raise StagingError(
                f"{phase} refused: {dst} has a symlink where the copy writes "
                f"{len(bad)} object(s): {shown}{more}; the RSA never writes through a "
                f"symlink: remove them (someone else may have planted them) and retry",
                permanent=True)

    def _refuse_unreadable(self, entries: Iterable[Entry], root: str, phase: str) -> None:
        bad = [e for e in entries if not e.readable]
        if bad:
            shown = ", ".join(repr(display(e.path)) for e in bad[:5])
            more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
            raise StagingError(
                f"{phase} refused: user {self.identity.user} cannot read {len(bad)} "
                f"object(s) in {root}: {shown}{more}; fix their permissions or remove them",
                permanent=True)

    # --- running commands -------------------------------------------------------------

    def _start(self) -> None:
        self.cancel.check()
        self._abort = CancelToken()
        self._deadline = self.clock() + self.timeout
        self._held = contextlib.ExitStack()

    def _stop(self) -> None:
        self._abort.cancel("operation finished")
        self._held.close()  # a PFS slot (_take_slot) is given back

    def _take_slot(self, dst: str, nbytes: int) -> None:
        """Wait for a slot on ``dst``'s PFS target (staging.flush, seed 003) before a
        stage-out copies; held until the operation ends. The wait does not count against
        the copy's timeout."""
        if self.gate is None or not self.gate.gates:
            return
        waited = self._held.enter_context(
            self.gate.slot(self.job_id, dst, nbytes, self.cancel.check))
        if waited >= 1.0:
            log.info("%s: stage-out waited %.0fs for a slot on the PFS (%s, %d bytes)",
                     self.job_id, waited, self.gate.order, nbytes)
        self._deadline = self.clock() + self.timeout

    def _left(self) -> float:
        left = self._deadline - self.clock()
        if left <= 0:
            self._abort.cancel("timeout")
            raise StagingError(f"staging timed out after {self.timeout:g}s", permanent=False)
        return left

    def _user(self, host: Host, argv: Sequence[str], what: str, *,
              input: str | None = None) -> Completed:
        """Run argv on ``host`` as the job's user; failures become StagingError."""
        if self.cancel.cancelled:
            self._abort.cancel(self.cancel.reason)
            raise Cancelled(self.cancel.reason)
        try:
            return host.run(argv, timeout=self._left(), input=input, as_user=self.identity,
                            env=self.identity.env(), cancel=self._abort)
        except (CommandError, Cancelled) as e:
            if self.cancel.cancelled:
                raise Cancelled(self.cancel.reason) from e
            if isinstance(e, Cancelled):
                raise
            raise classify(e, what, host.name) from e

    def _parallel(self, items: Iterable[T], fn: Callable[[Host, T], None],
                  meter: ProgressMeter | None, *, spread: bool = False) -> None:
        """Run ``fn(host, item)`` for every item on the RSA nodes, ``parallel_per_node``
        at a time per node, items taken in order by whichever stream is free (so the
        most expensive buckets start first). ``spread``: one stream per node (archives).
        The first failure or a cancel stops every stream."""
        work: queue.SimpleQueue[T] = queue.SimpleQueue()
        for item in items:
            work.put(item)
        per = 1 if spread else self.parallel_per_node
        errors: list[BaseException] = []
        lock = threading.Lock()

        def worker(host: Host) -> None:
            while not self._abort.cancelled:
                try:
                    item = work.get_nowait()
                except queue.Empty:
                    return
                try:
                    fn(host, item)
                except BaseException as e:
                    with lock:
                        errors.append(e)
                    self._abort.cancel(f"{host.name}: {e}")
                    return

        with cf.ThreadPoolExecutor(len(self.hosts) * per,
                                   thread_name_prefix="rsa-staging") as pool:
            futures = [pool.submit(worker, h) for _ in range(per) for h in self.hosts]
            while True:
                _, running = cf.wait(futures, timeout=0.2)
                if self.cancel.cancelled and not self._abort.cancelled:
                    self._abort.cancel(self.cancel.reason)
                if meter is not None:
                    meter.tick()
                if not running:
                    break
        if self.cancel.cancelled:
            raise Cancelled(self.cancel.reason)
        if errors:
            first = next((e for e in errors if isinstance(e, StagingError)), errors[0])
            raise first
