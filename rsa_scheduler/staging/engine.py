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

The engine's parts: ``commands`` (running commands as the user, cancel and timeout, the
parallel streams, the scan), ``treecopy`` (a tree: listed, striped, streamed),
``packing`` (tar aggregation) and ``verifier`` (hashes, streamed verify); this module owns
:class:`StagingEngine`, their union, and its public API.

Cancellation: the caller's :class:`CancelToken` (and the first failing bucket) cancel an
internal token (a child of the caller's) handed to every running ``Host.run``, whose
implementation kills the remote process tree; the engine then raises :class:`Cancelled`
(or the first error).

Must not import the daemon, the store or Slurm.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace

from ClusterShell.NodeSet import NodeSet

from rsa_scheduler.hosts import Cancelled, CancelToken, Host
from rsa_scheduler.runner import CommandError, Identity
from rsa_scheduler.staging import scripts, treecopy
from rsa_scheduler.staging.aside import aside_view
from rsa_scheduler.staging.commands import log
from rsa_scheduler.staging.flush import Gate
from rsa_scheduler.staging.manifest import (
    Difference,
    Entry,
    Verification,
    compare,
    with_differences,
    with_hashes,
)
from rsa_scheduler.staging.packing import Packing
from rsa_scheduler.staging.plan import STRIPE_MIN
from rsa_scheduler.staging.report import (
    TAIL,
    Progress,
    ScriptResult,
    StagingError,
    Stats,
    classify,
)
from rsa_scheduler.staging.stripe import VERIFY_RANGE_BYTES
from rsa_scheduler.staging.treecopy import TreeCopy
from rsa_scheduler.staging.verifier import READ_BACK, Verifier

METHODS = ("rsync", "tar")  # core.policy.StageOut values; "rsync" = the default copy
LEVELS = ("content", "metadata")
PHASES = ("stage-in", "stage-out")
#: of a PRE/POSTPROCESS's stdout and stderr rsad holds only this many last characters
#: while it runs (the result keeps ``TAIL`` of each); the rest is read and dropped
SCRIPT_KEEP = 4 * TAIL


class StagingEngine(TreeCopy, Packing, Verifier):
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
                 gate: Gate | None = None, copy_tool: str = "engine",
                 copy_command: str = "", stripe_bytes: int = 0,
                 stripe_min: int = STRIPE_MIN, stream_objects: int = 0,
                 verify_range_bytes: int = VERIFY_RANGE_BYTES, cycle: int = 1,
                 ramdisk_mounted: bool = False, input_settle: float | None = None) -> None:
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
        # the job's run (rsad's cycle): a requeued run's tar archives never share names
        # with an earlier run's (Packing.archive_prefix)
        self.cycle = max(1, int(cycle))
        # the RAMDISK root is a mount point on every node (rsad's RAMDISKs): an empty scan
        # of it counts only while the node shows it mounted (:meth:`_mounted_empty`)
        self.ramdisk_mounted = ramdisk_mounted
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
        # a larger tree: streamed mode; 0: off (the daemon passes staging.stream_objects,
        # 20000 unless the operator emptied it)
        self.stream_objects = stream_objects
        # verify reads files this large back in ranges, uncached (0: whole, as cached)
        self.verify_range_bytes = verify_range_bytes
        # a stage-in's big files are checked this long after their copies ended (0: not
        # checked; None: treecopy.INPUT_SETTLE; TreeCopy._settle)
        self.input_settle = treecopy.INPUT_SETTLE if input_settle is None else input_settle
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

    def prepare_rescue(self, user_dir: str) -> None:
        """As the user on the first node: their own private directory ``user_dir`` in
        the rescue area (quarantine.rescue_dir), refused if someone else holds the name
        or the area is writable by others without the sticky bit."""
        self._start()
        try:
            self._user(self.hosts[0], scripts.rescue_dir_argv(user_dir),
                       f"rescue: making {user_dir}")
        finally:
            self._stop()

    def stage_in(self, src: str, ramdisk: str, *, resume: bool = True,
                 atomic: bool = False) -> Stats:
        """DATA_IN → RAMDISK. ``resume``: skip what an interrupted run already finished.
        ``atomic``: every file appears under its name only once complete (copied into
        ``<ramdisk>/.rsa-staging-<job>-<random>/`` and renamed; for the ``union`` early-start
        policy, where the job may already be reading)."""
        return self._copy("stage-in", src, ramdisk, resume=resume, atomic=atomic)

    def stage_out(self, ramdisk: str, dst: str, method: str = "rsync", *,
                  resume: bool = True, redo: Sequence[bytes] = (),
                  since: int | None = None,
                  expect: Mapping[bytes, tuple[int, int]] | None = None) -> Stats:
        """RAMDISK → DATA_OUT, as a tree (``rsync``, the default) or as archives (``tar``).
        Either way a file appears under its final name only once complete: the tree is
        copied into ``<dst>/.rsa-staging-<job>-<random>/`` and renamed into place, archives are
        written to ``.part`` names and renamed. ``redo``: paths (relative to the RAMDISK)
        a verify found differing at DATA_OUT: copied again whatever the quick check of a
        resume says (a tree above the list limit is then copied whole, without resume;
        archives are always written whole). ``since`` (an epoch second: when the job's
        RAMDISK was built): a file of DATA_OUT modified after it is never replaced by the
        copy, which goes beside it as NAME.rsa-<job>[.c<cycle>] (``staging.aside``; not
        in streamed mode nor for archives, whose names are the job's own), unless it is
        the version ``expect`` gives for its name ((size, mtime): this job's own earlier
        copy, which a verify found holding the same bytes under another mtime)."""
        if method not in METHODS:
            raise ValueError(f"stage-out method {method!r}: expected one of {METHODS}")
        self._start()
        try:  # an empty RAMDISK (no node ever mounted it for output) leaves DATA_OUT alone
            empty = not self._scan(self.hosts[0], ramdisk, "stage-out: scanning the RAMDISK",
                                   limit=0)
            if empty:
                self._mounted_empty(ramdisk)
        finally:
            self._stop()
        if empty:
            log.info("%s: stage-out: the RAMDISK holds nothing: %s left alone", self.job_id,
                     dst)
            return Stats("stage-out", 0, 0, 0, 0.0, 0, 0, (), {})
        if method == "tar":
            return self._pack(ramdisk, dst)
        return self._copy("stage-out", ramdisk, dst, resume=resume, atomic=True, redo=redo,
                          since=since, expect=dict(expect or {}))

    def scan(self, root: str, what: str, *, limit: int = -1) -> list[Entry]:
        """Every object below ``root``, as the user (``what``: the phase, for errors);
        with ``limit`` >= 0 at most ``limit`` + 1 of them (more: the tree holds more
        than ``limit``; the rest is never read into this process)."""
        self._start()
        try:
            return self._scan(self.hosts[0], root, f"{what}: scanning {root}", limit=limit)
        finally:
            self._stop()

    def copy_names(self, ramdisk: str, dst: str, names: Collection[bytes], *,
                   since: int = 0,
                   expect: Mapping[bytes, tuple[int, int] | None] | None = None) -> Stats:
        """RAMDISK -> ``dst``: exactly ``names`` (and every directory), placed
        atomically; a file of ``dst`` modified after ``since`` (0: any) that differs
        from the copy is kept and the copy goes beside it (``staging.aside``), unless
        it is the version ``expect`` gives for its name ((size, mtime); None: the name
        was absent)."""
        return self._copy("stage-out", ramdisk, dst, resume=False, atomic=True,
                          since=since, only=names, expect=expect)

    def remove_same(self, root: str, items: Sequence[tuple[bytes, Entry]]) -> None:
        """Delete each name below ``root`` where it is still the version given (a
        write-back applies the job's deletions; ``scripts.REMOVE_SAME``)."""
        if not items:
            return
        self._start()
        try:
            self._user(self.hosts[0], scripts.remove_same_argv(root),
                       f"write-back: deleting {len(items)} name(s) in {root}",
                       input=scripts.remove_same_input(
                           (p, e.size, e.mtime_s) for p, e in items))
        finally:
            self._stop()

    def remove_dirs(self, root: str, names: Sequence[bytes]) -> None:
        """Remove these directories below ``root`` where empty (deepest first)."""
        if not names:
            return
        self._start()
        try:
            self._user(self.hosts[0], scripts.remove_dirs_argv(root),
                       f"write-back: removing {len(names)} directories in {root}",
                       input=scripts.encode_list(names))
        finally:
            self._stop()

    def verify(self, ramdisk: str, dst: str, method: str = "rsync", *,
               only: Collection[bytes] | None = None,
               aside: Collection[bytes] | None = None) -> Verification:
        """Compare DATA_OUT (or its archives) with a manifest of the RAMDISK
        (``only``: of these names alone, listed, as a write-back placed them). A copy
        kept aside stands for its name (of the names in ``aside``, when given)."""
        if method not in METHODS:
            raise ValueError(f"stage-out method {method!r}: expected one of {METHODS}")
        self._start()
        limit = self._stream_limit() if method == "rsync" and only is None else -1
        expected = self._scan(self.hosts[0], ramdisk, "verify: scanning the RAMDISK",
                              limit=limit)
        if only is not None:
            wanted = frozenset(only)
            expected = [e for e in expected if e.kind != "d" and e.path in wanted]
        if not expected:  # nothing to copy, nothing to find (stage_out left DATA_OUT alone)
            self._mounted_empty(ramdisk)
            return compare([], [], level=self.verify_level)
        if limit >= 0 and len(expected) > limit:
            del expected  # too many to list here: the nodes compare
            return self._read_back(self._stream_verify(ramdisk, dst), method)
        moved: dict[bytes, bytes] = {}
        misplaced: list[Difference] = []  # archives and index disagree (tar)
        if method == "tar":
            actual, misplaced = self._archive_manifest(dst)
        else:
            actual = self._scan(self.hosts[-1], dst, "verify: scanning DATA_OUT")
            # a copy kept aside beside a newer file (staging.aside) is the job's
            asked = None if aside is None else set(aside)
            names = {e.path: e for e in expected
                     if e.kind != "d" and (asked is None or e.path in asked)}
            actual, moved = aside_view(actual, names,
                                       scripts.aside_suffix(self.job_id, self.cycle))
            if self.verify_level == "content":
                files = [e for e in expected if e.kind == "f"]
                have = {e.path for e in actual if e.kind == "f"}
                exp_h, act_h = self._hash_both(ramdisk, dst, files, have, moved)
                expected, actual = with_hashes(expected, exp_h), with_hashes(actual, act_h)
        if method == "tar" and self.verify_level == "content":
            files = [e for e in expected if e.kind == "f"]
            expected = with_hashes(expected, self._hash(ramdisk, files))
        result = with_differences(compare(expected, actual, level=self.verify_level),
                                  misplaced)
        if moved:
            result = replace(result, details={
                **result.details, "aside": [[p.hex(), a.hex()] for p, a in moved.items()]})
        log.info("%s: %s", self.job_id, result.summary(dst))
        return self._read_back(result, method)

    def _read_back(self, result: Verification, method: str) -> Verification:
        """``result`` saying how DATA_OUT's bytes were read (level ``content``)."""
        if result.level != "content" or not result.checked:
            return result
        how = self.archive_read_back() if method == "tar" else READ_BACK
        return dataclasses.replace(result, read_back=how)

    def check_mounted(self, ramdisk: str) -> None:
        """Raise unless the first node shows the RAMDISK mounted at ``ramdisk`` (with
        ``ramdisk_mounted``): call it before taking an empty scan of it for an empty
        RAMDISK (:meth:`_mounted_empty`)."""
        self._start()
        try:
            self._mounted_empty(ramdisk)
        finally:
            self._stop()

    def _mounted_empty(self, ramdisk: str) -> None:
        """An empty scan of ``ramdisk`` on the first node is of the RAMDISK: the node
        shows it mounted there (with ``ramdisk_mounted``). While a repair remounts it,
        or after its mount was lost, the node shows the bare directory under it, empty
        too: taken for an empty RAMDISK, a verify would pass and the RAMDISK, with the
        job's output, be destroyed. Raises a retryable, unanswered StagingError."""
        if not self.ramdisk_mounted:
            return
        host = self.hosts[0]
        try:
            host.run(scripts.mounted_argv(ramdisk), timeout=min(self._left(), 60.0),
                     cancel=self._abort)
        except CommandError as e:
            if self.cancel.cancelled:
                raise Cancelled(self.cancel.reason) from e
            raise StagingError(
                f"the RAMDISK is not mounted at {ramdisk} on {host.name} (a repair may be "
                "remounting it): its empty directory is not taken for an empty RAMDISK; "
                "will retry", permanent=False, node=host.name, unanswered=True) from e

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
            # the user's program may print without end: only the tails the result keeps
            # are held (all of it in rsad's memory took rsad down: SCRIPT_KEEP)
            done = host.run(full, timeout=self._left(), check=False, as_user=self.identity,
                            env=env, cancel=self._abort, keep=SCRIPT_KEEP)
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
