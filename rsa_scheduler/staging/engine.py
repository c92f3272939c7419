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
from collections.abc import Callable, Sequence

from ClusterShell.NodeSet import NodeSet

from rsa_scheduler.hosts import Cancelled, CancelToken, Host
from rsa_scheduler.runner import CommandError, Identity
from rsa_scheduler.staging import scripts
from rsa_scheduler.staging.commands import log
from rsa_scheduler.staging.flush import Gate
from rsa_scheduler.staging.manifest import Verification, compare, with_hashes
from rsa_scheduler.staging.packing import Packing
from rsa_scheduler.staging.plan import STRIPE_MIN
from rsa_scheduler.staging.report import TAIL, Progress, ScriptResult, Stats, classify
from rsa_scheduler.staging.stripe import VERIFY_RANGE_BYTES
from rsa_scheduler.staging.treecopy import TreeCopy
from rsa_scheduler.staging.verifier import READ_BACK, Verifier

METHODS = ("rsync", "tar")  # core.policy.StageOut values; "rsync" = the default copy
LEVELS = ("content", "metadata")
PHASES = ("stage-in", "stage-out")


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
                 verify_range_bytes: int = VERIFY_RANGE_BYTES, cycle: int = 1) -> None:
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
                  resume: bool = True, redo: Sequence[bytes] = ()) -> Stats:
        """RAMDISK → DATA_OUT, as a tree (``rsync``, the default) or as archives (``tar``).
        Either way a file appears under its final name only once complete: the tree is
        copied into ``<dst>/.rsa-staging-<job>-<random>/`` and renamed into place, archives are
        written to ``.part`` names and renamed. ``redo``: paths (relative to the RAMDISK)
        a verify found differing at DATA_OUT: copied again whatever the quick check of a
        resume says (a tree above the list limit is then copied whole, without resume;
        archives are always written whole)."""
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
        return self._copy("stage-out", ramdisk, dst, resume=resume, atomic=True, redo=redo)

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
            return self._read_back(self._stream_verify(ramdisk, dst), method)
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
        return self._read_back(result, method)

    def _read_back(self, result: Verification, method: str) -> Verification:
        """``result`` saying how DATA_OUT's bytes were read (level ``content``)."""
        if result.level != "content" or not result.checked:
            return result
        how = self.archive_read_back() if method == "tar" else READ_BACK
        return dataclasses.replace(result, read_back=how)

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
