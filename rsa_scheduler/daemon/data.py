"""Executors for the data path: build/destroy the RAMDISK, stage in, stage out, verify,
write back writable input — through the configured filesystem backend and the staging
engine, on the job's own RSA nodes, as the job's user.

Owns the translation from an :class:`~rsa_scheduler.core.actions.Action` to backend and
engine calls, and the per-job naming (``fs_id = job<ID>-c<CYCLE>``: stable for one cycle
so a re-issued action after a restart finds what the first attempt built). Mount actions
(MOUNT_INPUT, MOUNT_OUTPUT, RESET) need the compute-node side and are not registered
here: without them the core falls back to the PFS, as the paper does when the RAMDISK
cannot be used.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import PurePosixPath
from typing import Any

from rsa_scheduler.config import Config
from rsa_scheduler.contain import (
    fence_argv,
    issued_now,
    parse_fenced,
    parse_reaped,
    reap_argv,
)
from rsa_scheduler.core.actions import ActionKind
from rsa_scheduler.core.payloads import (
    BuildFsArgs,
    OnNodes,
    StageInArgs,
    StageOutArgs,
    VerifyArgs,
    WriteBackArgs,
)
from rsa_scheduler.core.units import format_size
from rsa_scheduler.daemon.engines import EnginePool, WorkerEngine
from rsa_scheduler.daemon.executors import ActionContext, PermanentError, Registry
from rsa_scheduler.daemon.writeback import Bases, record_stage_in, written_back
from rsa_scheduler.errors import RsaError
from rsa_scheduler.fs.base import FilesystemBackend, FsRequest, MountSpec
from rsa_scheduler.hosts import Cancelled, CancelToken, Host
from rsa_scheduler.runner import Identity
from rsa_scheduler.staging.aside import aside_words
from rsa_scheduler.staging.engine import StagingEngine
from rsa_scheduler.staging.flush import FlushGate
from rsa_scheduler.staging.manifest import Verification, display
from rsa_scheduler.staging.report import Progress, StagingError, Stats
from rsa_scheduler.staging.stripe import VERIFY_RANGE_BYTES

log = logging.getLogger(__name__)


def fs_id(action_id: str) -> str:
    """``JOB/CYCLE/KIND/SERIAL`` -> ``job<JOB>-c<CYCLE>`` (array ids keep their ``_``)."""
    job, cycle = action_id.rsplit("/", 3)[:2]
    return f"job{job}-c{cycle}"


def _stats(stats: Stats) -> dict[str, Any]:
    """An outcome's detail of a copy; with sockets and devices (never staged, in either
    direction: docs/staging.md#special-files) named in its ``summary`` (the line the
    event log and ``rsa job`` show) and its ``skipped``."""
    out: dict[str, Any] = {"stats": {"files": stats.files, "bytes": stats.bytes,
                                     "seconds": round(stats.seconds, 3)}}
    total = stats.skipped_total
    if total:
        out["skipped"] = {"count": total, "paths": list(stats.skipped[:20])}
        out["summary"] = _skipped_words(total, stats.skipped, stats.phase)
    return out


def _skipped_words(total: int, shown: Sequence[str], phase: str) -> str:
    """``2 special files (sockets, devices) not staged: 'a', 'b'``."""
    names = ", ".join(repr(p) for p in shown[:5])
    more = f" and {total - len(shown[:5])} more" if total > len(shown[:5]) else ""
    where = "in DATA_IN" if phase == "stage-in" else "on the RAMDISK"
    return (f"{total} special file{'s' if total != 1 else ''} (sockets, devices) {where} "
            f"not staged (never are): {names}{more}")


def _script(ctx: ActionContext, eng: StagingEngine, spec: MountSpec, argv: Sequence[str],
            key: str, phase: str, *, data_in: PurePosixPath | None,
            data_out: PurePosixPath | None) -> dict[str, Any]:
    """Run the user's PREPROCESS (replaces stage-in) or POSTPROCESS (replaces stage-out).

    A failing PREPROCESS is permanent (the job uses the PFS); a failing POSTPROCESS is
    retried and the RAMDISK is kept, like any failed stage-out.

    At most once per attempt (action id): the start is recorded durably first (milestone
    ``script_started``). An action re-issued after an rsad restart that finds its own
    start recorded does not run the script again: the earlier run was killed by fencing
    half-way, so this attempt failed; the retry, a new attempt, runs it from the start
    on the same RAMDISK (docs/staging.md).
    """
    started = ctx.facts.get("script_started") or {}
    if started.get("action") == ctx.action.id:
        raise RsaError(f"{key.upper()} was interrupted when rsad restarted (this attempt "
                       "started it once; it is not run twice); it will be run again from "
                       "the start as a new attempt, on the same RAMDISK")
    ctx.milestone({"script_started": {"action": ctx.action.id, "script": key}})
    res = eng.run_script(list(argv), phase, ramdisk=spec.rsa_mountpoint,
                         data_in="" if data_in is None else str(data_in),
                         data_out="" if data_out is None else str(data_out))
    if not res.ok:
        ctx.cancel.check()  # killed because the action was cancelled: say that, not -9
        why = f"{key.upper()} exited {res.returncode}: {res.stderr_tail.strip()[-300:]}"
        if key == "preprocess":
            raise PermanentError(why)
        raise RsaError(f"{why} (RAMDISK kept)")
    # the script's own words stay with the job (rsa job ID --json, rsa events --job ID)
    return {"script": {"returncode": res.returncode, "seconds": res.seconds,
                       "node": res.node, "stdout": res.stdout_tail[-2000:],
                       "stderr": res.stderr_tail[-2000:]}}


#: at most this many differing paths are kept for the retry (an event each verify);
#: more, and the retry copies the whole output again. At most a staging worker's
#: ``stagingworker.NAMED`` (the most a verify's result names to rsad)
REDO_LIMIT = 1000


def differed_fact(action_id: str, method: str, result: Verification) -> dict[str, Any]:
    """What a failed verify leaves for the stage-out's retry (the fact
    ``verify_differed``, recorded durably before the verify fails: an rsad restart in
    between keeps it): the RAMDISK it compared (``fs_id``), the paths that differed (hex
    of their bytes) or ``all`` when they could not all be listed (more than
    ``REDO_LIMIT``, or a streamed verify), and the first few as the user reads them."""
    # a streamed verify (``differing`` set) is of a tree its stage-out copies streamed,
    # which cannot leave a list out of its quick check: all again, as the message says
    listed = result.differing < 0 and result.count <= REDO_LIMIT
    return {"action": action_id, "fs_id": fs_id(action_id), "method": method,
            "count": result.count, "all": not listed,
            "paths": [d.path.hex() for d in result.differences] if listed else [],
            # mtime alone differed, the bytes hashed equal: the retry replaces exactly
            # that version (the job's own copy) instead of keeping it as someone else's
            "same_content": {d.path.hex(): list(d.same_content)
                             for d in result.differences if d.same_content} if listed else {},
            "shown": [display(d.path) for d in result.differences[:5]]}


#: copy-and-verify rounds of one write-back of writable input: a round copies again what
#: the last verify found differing (a job may still write while it runs)
WRITE_BACK_ROUNDS = 3


def _differed(facts: Mapping[str, Any], action_id: str) -> Mapping[str, Any] | None:
    """The fact ``verify_differed`` when it is of this action's RAMDISK, else None."""
    fact = facts.get("verify_differed")
    if not fact or fact.get("fs_id") != fs_id(action_id):
        return None
    return dict(fact)


def redo_of(facts: Mapping[str, Any], action_id: str) -> tuple[list[bytes], bool] | None:
    """What a stage-out must copy again after a failed verify of the same RAMDISK: the
    paths that differed and whether the quick check may skip the rest (resume); None
    when no verify of this RAMDISK failed since the last one that passed."""
    fact = _differed(facts, action_id)
    if fact is None:
        return None
    if fact.get("all"):
        return [], False
    return [bytes.fromhex(str(p)) for p in fact.get("paths") or ()], True


def redo_expect(facts: Mapping[str, Any], action_id: str) -> dict[bytes, tuple[int, int]]:
    """The destination versions a stage-out's retry replaces although they are newer
    than the RAMDISK's build: its own earlier copies a verify found holding the RAMDISK's
    bytes under another mtime (a mtime the RAMDISK's filesystem reported late)."""
    fact = _differed(facts, action_id)
    if fact is None:
        return {}
    return {bytes.fromhex(str(p)): (int(v[0]), int(v[1]))
            for p, v in dict(fact.get("same_content") or {}).items()}


def built_since(facts: Mapping[str, Any], action_id: str) -> int | None:
    """The epoch second after which a PFS file is someone else's for a stage-out of
    this RAMDISK (``staging.aside``): the second before the RAMDISK was built (the fact
    ``built``). None when no build of it is recorded (built by an older rsad): such a
    stage-out replaces what it finds, as that rsad's did (logged)."""
    built = facts.get("built") or {}
    if built.get("fs_id") != fs_id(action_id) or built.get("at") is None:
        log.warning("job %s: no build time of its RAMDISK is recorded: the stage-out "
                    "replaces files of DATA_OUT whatever their age", action_id)
        return None
    return int(built["at"]) - 1


def _redo_words(fact: Mapping[str, Any]) -> str:
    """The objects a failed verify found, as the user reads them."""
    count = int(fact.get("count") or 0)
    shown = ", ".join(repr(p) for p in fact.get("shown") or ())
    more = f" and {count - len(fact.get('shown') or ())} more" if count > len(
        fact.get("shown") or ()) else ""
    return f"{count} object{'s' if count != 1 else ''} ({shown}{more})"


def _verify_advice(fact: Mapping[str, Any]) -> str:
    """What the retry of a stage-out does after the failed verify ``fact`` describes."""
    if fact.get("method") == "tar":
        return ("the RAMDISK is kept; the retry writes the archives again and verifies "
                "again")
    if fact.get("all"):
        return ("the RAMDISK is kept; the retry copies the whole output again (the "
                "differing objects could not all be listed), without skipping what "
                "looks complete, and verifies again")
    return ("the RAMDISK is kept; the retry copies these objects again (whatever their "
            "size and mtime) and verifies again")


def _late_words(nodes: object) -> str:
    """What the user's "stage-out finished: ..." adds when the stage-out began without
    every compute node's end confirmed (``epilogs_unconfirmed``: NodeSide.await_epilogs
    ran out of time): the job may have written there after the copy read the RAMDISK,
    and that is not in the output. Empty when every node's end was confirmed."""
    if not isinstance(nodes, list) or not nodes:
        return ""
    names = ", ".join(str(n) for n in nodes)
    return (f"; but the job's end on compute node{'s' if len(nodes) != 1 else ''} {names} "
            "was never confirmed (no Epilog heard, and Slurm did not say it was done "
            "there) before the stage-out read the RAMDISK: anything the job wrote there "
            "after that is not in the output")


def verified_words(result: Verification, out: str, method: str) -> str:
    """What a passing verify checked, exactly (the user's "stage-out finished: ..."):
    the level, what was read back and how (``Verification.read_back``: what the engine
    did; a record without it, from an engine before it dropped page caches, keeps the
    words of then)."""
    n = result.checked
    what = f"{n} object{'s' if n != 1 else ''} ({format_size(result.checked_bytes)})"
    if result.level != "content":
        return (f"metadata verified (types, sizes, modes, mtimes, links; content not read): "
                f"{what} in {out}")
    if method == "tar":
        how = result.read_back or ("each archive read back by the RSA node that wrote it, "
                                   "possibly from its page cache")
        return (f"content verified: {what} in the archives in {out} (every member's bytes "
                f"hashed on both sides; {how})")
    how = result.read_back or (f"files under {format_size(VERIFY_RANGE_BYTES)} possibly "
                               "read back from an RSA node's page cache")
    return (f"content verified: {what} in {out} (every file's bytes hashed on both sides; "
            f"{how})")


def _seconds(s: float) -> str:
    """``125 s``; below 10 s with a tenth (``0.3 s``)."""
    return f"{s:.0f} s" if s >= 10 else f"{s:.1f} s"


def _owner(user: str) -> tuple[int, int] | None:
    """(uid, gid) the RAMDISK's root is given to; None if the user is unknown here (a
    destroy must still work; a create then leaves the root root's, 0700)."""
    import pwd

    try:
        pw = pwd.getpwnam(user) if user else None
    except KeyError:
        return None
    return (pw.pw_uid, pw.pw_gid) if pw else None


#: destroyed RAMDISKs remembered (a check that read the jobs before the destroy skips them)
GONE_KEPT = 4096


class Repeats:
    """Keeps a warning that repeats every few seconds (a RAMDISK that cannot be repaired,
    checked every ``health.ramdisk_interval``) from flooding the log: ``say`` is true the
    first time, when the text changes, and then once every ``every`` seconds, with how
    many were held back. ``clear`` when the condition is over."""

    def __init__(self, every: float = 600.0, clock: Callable[[], float] = time.monotonic,
                 kept: int = GONE_KEPT) -> None:
        self.every = every
        self.clock = clock
        self.kept = kept
        self._seen: OrderedDict[str, tuple[str, float, int]] = OrderedDict()

    def say(self, key: str, text: str) -> str | None:
        """The line to log now (``text``, perhaps with a count), or None: held back."""
        now = self.clock()
        last = self._seen.get(key)
        if last is not None and last[0] == text and now - last[1] < self.every:
            self._seen[key] = (text, last[1], last[2] + 1)
            return None
        held = last[2] if last is not None and last[0] == text else 0
        self._seen[key] = (text, now, 0)
        self._seen.move_to_end(key)
        while len(self._seen) > self.kept:
            self._seen.popitem(last=False)
        return f"{text} (again; {held} more like it not logged)" if held else text

    def clear(self, key: str) -> None:
        self._seen.pop(key, None)


@dataclass(frozen=True, slots=True)
class Tending:
    """What one check of a RAMDISK found: ``detail`` what was wrong ("" = healthy),
    ``broken`` what still is (not repaired), ``restarted`` what was restarted,
    ``unknown`` why the check could not tell (its probe failed: nothing is known)."""

    detail: str = ""
    broken: str = ""
    restarted: tuple[str, ...] = ()
    unknown: str = ""


class DataPath:
    """Everything the data-path executors share: config, hosts, backends."""

    def __init__(self, cfg: Config, hosts: Mapping[str, Host],
                 backends: Mapping[str, FilesystemBackend] | None = None,
                 workers: EnginePool | None = None) -> None:
        self.cfg = cfg
        self.hosts = hosts
        # bulk staging runs in these worker processes (staging.engine_process), else here
        self.workers = workers
        self._unreaped: set[str] = set()  # jobs a lost worker left commands of (bulk)
        self._backends = dict(backends or {})
        self.pool_dirs = {n.name: str(n.pool_dir) for n in cfg.pool.members()}
        self.tiers = {n.name: n.tier.value for n in cfg.pool.members()}
        self._fenced: set[str] = set()
        self._fence_locks = {name: threading.Lock() for name in hosts}
        # A repair never runs beside a destroy or a reset of the same RAMDISK (it would
        # start servers on a filesystem being taken apart): one lock per fs_id, kept
        # while someone holds or waits for it, so the table never grows. Never shared
        # between RAMDISKs (issue 34): a teardown (urgent) waited for the check of
        # another RAMDISK a bulk copy's watch runs (seconds of SSH on busy nodes) when
        # the two hashed to one of the 256 stripes that stood in before. ``_gone``:
        # RAMDISKs destroyed lately (a check based on an older view of the jobs skips
        # them); ``_current``: the newest spec of each RAMDISK this rsad built or reset
        # (a check with an older spec skips it).
        self._fs_locks: dict[str, tuple[threading.Lock, int]] = {}  # fs_id -> lock, users
        self._fs_locks_guard = threading.Lock()
        self._gone: OrderedDict[str, None] = OrderedDict()
        self._current: dict[str, MountSpec] = {}
        self.tend_every = cfg.health.ramdisk_interval
        self.stall_after = cfg.health.ramdisk_stall
        self._repeats = Repeats()
        # one gate for every stage-out of this rsad: the order they take the PFS in
        st = cfg.staging
        self.flush_gate = FlushGate(st.stage_out_order, st.flushes_per_target,
                                    [str(t) for t in st.pfs_targets])
        # writable input: what each RAMDISK's input was staged in from (daemon/writeback)
        self.bases = Bases(cfg.daemon.state_dir / "writeback")
        #: the compute nodes release the RAMDISK before a teardown destroys it
        #: (NodeSide.release_mounts; None: no compute-node side, as in some tests)
        self.release_mounts: Callable[[ActionContext], object] | None = None
        #: before a stage-out reads the RAMDISK: the job's compute nodes ran their Epilog,
        #: its processes are gone (NodeSide.await_epilogs; None: no compute-node side)
        #: returns the nodes it stopped waiting for (their end never confirmed)
        self.await_epilogs: Callable[[ActionContext], Iterable[str] | None] | None = None

    # ---- fencing --------------------------------------------------------------------------
    def fenced(self, node: str) -> Host:
        """``node``, once every command an earlier rsad left running there as a user is
        dead: a stale copy must never write after this rsad re-issued its action. A node
        that cannot be reached fails the action that needs it (retried later)."""
        if node not in self._fenced:
            with self._fence_locks[node]:
                if node not in self._fenced:
                    try:
                        done = self.hosts[node].run(fence_argv(issued_now()), timeout=120)
                        killed = parse_fenced(done.stdout)
                    except (RsaError, ValueError) as e:
                        raise RsaError(f"{node}: cannot stop what an earlier rsad left "
                                       f"running there: {e}") from e
                    if killed:
                        log.warning("%s: killed %d process(es) an earlier rsad left "
                                    "running", node, killed)
                    self._fenced.add(node)
        return self.hosts[node]

    def fence_all(self) -> None:
        """At start-up, fence every RSA node at once (a node down now is fenced when an
        action first needs it)."""
        def one(node: str) -> None:
            try:
                self.fenced(node)
            except RsaError as e:
                log.warning("fence: %s", e)

        threads = [threading.Thread(target=one, args=(n,), name=f"fence-{n}")
                   for n in self.hosts]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def backend(self, tier: str) -> FilesystemBackend:
        if tier not in self._backends:
            from rsa_scheduler.config.backends import make_backend

            # the backend's own settings come from the config (its config_options)
            self._backends[tier] = make_backend(self.cfg, tier, self.hosts)
        return self._backends[tier]

    def request(self, ctx: ActionContext) -> FsRequest:
        """The RAMDISK request of an action on the job's RSA nodes (build, destroy, the
        mounts and the reset): its nodes, and a build's tier (else the nodes' own)."""
        args = ctx.action.args_as(OnNodes)
        nodes = args.nodes.names
        if not nodes:
            raise PermanentError("the action names no RSA nodes")
        tier = args.tier if isinstance(args, BuildFsArgs) else None
        return FsRequest(fs_id=fs_id(ctx.action.id), job_id=ctx.action.job_id, nodes=nodes,
                         tier=tier.value if tier is not None else self.tiers[nodes[0]],
                         pool_dirs={n: self.pool_dirs[n] for n in nodes},
                         mount_root=str(self.cfg.filesystem.mount_root),
                         owner=_owner(args.user))

    def mount(self, ctx: ActionContext) -> MountSpec:
        data = ctx.facts.get("mount")
        if not data:
            raise RsaError(f"job {ctx.action.job_id}: no RAMDISK is recorded for this job")
        return MountSpec.from_json(data)

    def engine(self, ctx: ActionContext, spec: MountSpec,
               cancel: CancelToken) -> StagingEngine:
        """The staging engine of an action on ``spec``; its commands run under ``cancel``
        (the token :meth:`tended` yields: the action's, and the RAMDISK's stall watch)."""
        user = ctx.action.args_as(OnNodes).user
        # scoped: its commands run in the job's cgroup on each node (rsa_scheduler.contain)
        identity = replace(Identity.of(user), scope=ctx.action.job_id,
                           private_tmp=self.cfg.staging.private_tmp)

        def progress(p: Progress) -> None:
            ctx.progress(p.to_json())

        st = self.cfg.staging
        return StagingEngine([self.fenced(n) for n in spec.nodes], identity,
                             parallel_per_node=st.parallel_per_node, progress=progress,
                             cancel=cancel, job_id=ctx.action.job_id,
                             cycle=_cycle_of(ctx.action.id),
                             gate=self.flush_gate, copy_tool=st.copy_tool,
                             copy_command=st.copy_command or "",
                             stripe_bytes=st.stripe_bytes,
                             stream_objects=st.stream_objects or 0,
                             ramdisk_mounted=True)

    def bulk(self, eng: StagingEngine) -> StagingEngine | WorkerEngine:
        """``eng`` for a bulk copy or verify: run in a worker process of its own when
        rsad has them (daemon/engines.py: its Python never holds rsad's GIL), in this
        thread otherwise. A worker that ended mid-call may have left its copies
        running on the nodes: they are killed (the job's contained commands there,
        :meth:`kill_left`) before the action fails, or before the job's next copy."""
        job, nodes = eng.job_id, [h.name for h in eng.hosts]
        if job in self._unreaped:
            self.kill_left(job, nodes)
        return WorkerEngine.of(self.workers, eng, on_lost=lambda: self.kill_left(job, nodes))

    def kill_left(self, job: str, nodes: Sequence[str]) -> str:
        """Kill what a lost staging worker left running of ``job`` on ``nodes`` (every
        contained command of the job there: only that worker's copies run there while
        its action runs). Raises if a node cannot be reached; the job's next copy tries
        again first."""
        self._unreaped.add(job)
        killed = 0
        for node in nodes:
            try:
                n, _how, left = self._reap_on(node, job)
            except (RsaError, ValueError) as e:
                raise RsaError(f"job {job}: a staging worker ended mid-copy and its "
                               f"commands on {node} could not be killed: {e}; will retry "
                               "(they are killed before the next copy)") from e
            if left:
                raise RsaError(f"job {job}: a staging worker ended mid-copy and {left} of "
                               f"its commands on {node} survived SIGKILL; will retry")
            killed += n
        self._unreaped.discard(job)
        if killed:
            log.warning("job %s: killed %d command(s) a lost staging worker left on %s",
                        job, killed, ", ".join(nodes))
        return f"its {killed} command(s) left on the RSA nodes were killed"

    # ---- keeping the RAMDISK alive ---------------------------------------------------
    @contextlib.contextmanager
    def exclusive(self, fs_id: str) -> Iterator[None]:
        """No repair of ``fs_id`` while this block builds, resets or destroys it; other
        RAMDISKs are never held up."""
        with self._fs_locks_guard:
            lock, users = self._fs_locks.get(fs_id) or (threading.Lock(), 0)
            self._fs_locks[fs_id] = (lock, users + 1)
        try:
            with lock:
                yield
        finally:
            with self._fs_locks_guard:
                users = self._fs_locks[fs_id][1] - 1
                if users:
                    self._fs_locks[fs_id] = (lock, users)
                else:
                    del self._fs_locks[fs_id]

    def locked(self) -> int:
        """How many RAMDISKs' locks are held or waited for now."""
        with self._fs_locks_guard:
            return len(self._fs_locks)

    def learned(self, spec: MountSpec) -> None:
        """``spec`` is now the RAMDISK ``spec.fs_id`` (built, or recreated by a reset)."""
        self._current[spec.fs_id] = spec
        self._gone.pop(spec.fs_id, None)

    def _forget_fs(self, fs_id: str) -> None:
        self._current.pop(fs_id, None)
        self._gone[fs_id] = None
        while len(self._gone) > GONE_KEPT:
            self._gone.popitem(last=False)

    def request_of(self, job: str, spec: MountSpec) -> FsRequest:
        nodes = tuple(spec.nodes)
        return FsRequest(fs_id=spec.fs_id, job_id=job, nodes=nodes,
                         tier=self.tiers[nodes[0]],
                         pool_dirs={n: self.pool_dirs[n] for n in nodes},
                         mount_root=str(self.cfg.filesystem.mount_root))

    def check_and_repair(self, job: str, spec: MountSpec,
                         record: Callable[[Mapping[str, Any]], None]) -> Tending:
        """Check the RAMDISK; if it is broken, restart what died (backend.repair) and
        ``record`` what was restarted (an event of the job). A RAMDISK destroyed or
        rebuilt since ``spec`` was read is left alone."""
        with self.exclusive(spec.fs_id):
            if spec.fs_id in self._gone or self._current.get(spec.fs_id, spec) != spec:
                return Tending()
            try:
                req = self.request_of(job, spec)
                backend = self.backend(req.tier)
                health = backend.health(spec, req)
            except Exception as e:  # a probe that fails says nothing about the data
                self._warn(spec.fs_id, f"RAMDISK {spec.fs_id}: health probe failed: {e}")
                return Tending(unknown=f"health probe failed: {e}")
            if health.ok:
                self._repeats.clear(spec.fs_id)
                return Tending()
            try:
                done = backend.repair(req, spec)
            except Exception as e:
                self._warn(spec.fs_id, f"RAMDISK {spec.fs_id} is broken ({health.detail}) "
                                       f"and could not be repaired: {e}")
                return Tending(health.detail,
                               broken=f"{health.detail} (repair failed: {e})")
            self._repeats.clear(spec.fs_id)
        if not done:
            return Tending(health.detail, broken=health.detail)
        log.warning("job %s: RAMDISK %s was broken (%s): restarted %s", job, spec.fs_id,
                    health.detail, ", ".join(done))
        with contextlib.suppress(Exception):  # the event is for the operator: best effort
            record({"repaired": {"broken": health.detail, "restarted": done}})
        return Tending(health.detail, restarted=tuple(done))

    def _warn(self, key: str, text: str) -> None:
        line = self._repeats.say(key, text)
        if line is None:
            log.debug("%s", text)
        else:
            log.warning("%s", line)

    def tend(self, job: str, mount: Mapping[str, Any],
             record: Callable[[Mapping[str, Any]], None]) -> Tending:
        """The background check of one live RAMDISK (daemon/health.py RamdiskTender)."""
        return self.check_and_repair(job, MountSpec.from_json(mount), record)

    @contextlib.contextmanager
    def tended(self, ctx: ActionContext, spec: MountSpec, every: float | None = None,
               stall: float | None = None) -> Iterator[CancelToken]:
        """Move data on a RAMDISK that is looked after: checked (and repaired) before
        the first command, every ``every`` seconds while commands run (a copy stalled on
        a dead chunkserver goes on once it is restarted), and, when a command found the
        filesystem not answering (EIO, ENOTCONN), once more: the error then names what
        is broken, or what was restarted, instead of a bare "will retry".

        Yields the token the block's commands must run under (the engine's ``cancel``):
        a child of the action's. When the checks while the block runs find the
        filesystem broken and unrepaired for ``stall`` seconds (``health.ramdisk_stall``;
        counted from the first of consecutive broken checks; a healthy or repaired check
        starts over, one whose probe failed changes nothing; 0: never), that token is
        cancelled, which kills the block's commands (a command on a dead FUSE mount
        would wait for the step's own timeout), and the block raises a retryable
        StagingError that says what is broken and for how long. A cancel of the
        action's own token (teardown, demotion, rsad stopping) still surfaces as
        :class:`Cancelled`."""
        job, record = ctx.action.job_id, ctx.milestone
        every = self.tend_every if every is None else every
        stall = self.stall_after if stall is None else stall
        first = self.check_and_repair(job, spec, record)
        if first.broken:
            raise StagingError(f"job {job}: the RAMDISK's filesystem is "
                               f"broken: {first.broken}; will retry", permanent=False,
                               unanswered=True)
        stop = threading.Event()
        cancel = ctx.cancel.child()
        stalled: list[str] = []  # the stall's error message, once the watch stopped the block

        def watch() -> None:  # never raises: a failed check is logged, the watch goes on
            since: float | None = None  # the first of consecutive broken checks
            while not stop.wait(every):
                try:
                    t = self.check_and_repair(job, spec, record)
                    if t.unknown:
                        continue
                    if not t.broken:
                        since = None
                        continue
                    now = time.monotonic()
                    since = now if since is None else since
                    if stall <= 0 or now - since < stall or stop.is_set():
                        continue
                    why = (f"job {job}: the RAMDISK's filesystem has been broken for "
                           f"{_seconds(now - since)}: {t.broken}; "
                           f"{ctx.action.kind.value} stopped; will retry")
                    log.warning("%s", why)
                    stalled.append(why)
                    cancel.cancel(why)
                    return
                except Exception:
                    log.exception("job %s: checking RAMDISK %s while data moves failed",
                                  job, spec.fs_id)

        watcher = threading.Thread(target=watch, name=f"tend-{spec.fs_id}", daemon=True)
        if every > 0:
            watcher.start()
        try:
            yield cancel
        except Cancelled as e:
            if not stalled or ctx.cancel.cancelled:
                raise
            raise StagingError(stalled[0], permanent=False, unanswered=True) from e
        except StagingError as e:
            if stalled and not ctx.cancel.cancelled:  # what the killed command said
                raise StagingError(stalled[0], permanent=False, unanswered=True) from e
            if not e.unanswered:
                raise
            stop.set()
            t = self.check_and_repair(job, spec, record)
            if t.broken:
                why = f"the RAMDISK's filesystem is broken: {t.broken}"
            elif t.restarted:
                why = (f"the RAMDISK's filesystem was broken ({t.detail}): restarted "
                       f"{', '.join(t.restarted)}")
            else:
                raise
            raise StagingError(f"{e}; {why}", permanent=e.permanent, node=e.node,
                               unanswered=True) from e
        finally:
            stop.set()
            if watcher.is_alive():
                watcher.join()

    # ---- executors ----------------------------------------------------------------------
    def build_fs(self, ctx: ActionContext) -> Mapping[str, Any]:
        req = self.request(ctx)
        spec = self.backend(req.tier).create(req, ctx.cancel)
        self.learned(spec)
        # what the job sees of DATA_OUT from now on is the RAMDISK: a PFS file changed
        # after this is someone else's, never replaced by the stage-out (staging.aside)
        return {"mount": spec.to_json(),
                "built": {"fs_id": req.fs_id, "at": int(time.time())}}

    def destroy_fs(self, ctx: ActionContext) -> Mapping[str, Any]:
        """Destroy the job's RAMDISK on its nodes, once every compute node that may hold a
        mount of it released it (``release_mounts``: daemon/nodeside.py, set by the
        wiring; a node that does not keeps the RAMDISK). An RSA node the health loop has marked down
        is skipped (a teardown must not wait for a node that may never answer): what is
        left there is reported (``left_on``) and cleaned before it comes back up
        (:meth:`scrub`). Only RAMDISKs without unverified output are ever destroyed."""
        req = self.request(ctx)
        if self.release_mounts is not None:
            # compute nodes that may still hold a mount of it release it first; one that
            # does not keeps the RAMDISK (raises: the teardown is retried)
            self.release_mounts(ctx)
        lost = tuple(n for n in req.nodes if n in ctx.down)
        part = replace(req, nodes=tuple(n for n in req.nodes if n not in ctx.down))
        reaped: dict[str, int] = {}
        with self.exclusive(req.fs_id):
            self._forget_fs(req.fs_id)
            if part.nodes:
                reaped = self.reap(part)
                self.backend(req.tier).destroy(part)
            self.bases.drop(req.fs_id)
        out: dict[str, Any] = {"reaped": reaped} if any(reaped.values()) else {}
        if lost:
            log.warning("job %s: RAMDISK %s destroyed without %s (down): cleaned when it "
                        "is back", req.job_id, req.fs_id, ", ".join(lost))
            out["left_on"] = [{"node": n, "fs_id": req.fs_id, "job_id": req.job_id,
                               "tier": req.tier} for n in lost]
        return out

    def scrub(self, node: str, leftovers: list[Mapping[str, Any]]) -> None:
        """Clean what teardowns left on ``node`` while it was down (``left_on`` of
        :meth:`destroy_fs`): the jobs' processes there killed, their RAMDISK parts (mount,
        servers, pool files) destroyed on that node alone. Raises if it cannot."""
        for item in leftovers:
            fs, job, tier = str(item["fs_id"]), str(item["job_id"]), str(item["tier"])
            req = FsRequest(fs_id=fs, job_id=job, nodes=(node,), tier=tier,
                            pool_dirs={node: self.pool_dirs[node]},
                            mount_root=str(self.cfg.filesystem.mount_root))
            with self.exclusive(fs):
                self.reap(req)
                self.backend(tier).destroy(req)
            log.info("%s: cleaned what job %s's RAMDISK %s left there while it was down",
                     node, job, fs)

    def reap(self, req: FsRequest) -> dict[str, int]:
        """Kill every process the RSA started for the job on its RSA nodes (a POSTPROCESS
        daemon, a copy a crash left) before its filesystem goes. A node that cannot be
        reached fails the teardown: it is retried, the RAMDISK is kept meanwhile."""
        reaped: dict[str, int] = {}
        for node in req.nodes:
            try:
                n, how, left = self._reap_on(node, req.job_id)
            except (RsaError, ValueError) as e:
                raise RsaError(f"job {req.job_id}: cannot kill its processes on {node} "
                               f"before destroying its RAMDISK: {e}") from e
            if left:
                raise RsaError(f"job {req.job_id}: {left} of its processes on {node} "
                               "survived SIGKILL (uninterruptible I/O?); will retry")
            if n:
                log.warning("job %s: killed %d leftover process(es) on %s (by %s)",
                            req.job_id, n, node, how)
            reaped[node] = n
        return reaped

    def _reap_on(self, node: str, job: str) -> tuple[int, str, int]:
        """REAP ``job``'s contained processes on ``node``: (killed, how, survivors)."""
        done = self.fenced(node).run(reap_argv(job, issued_now()), timeout=60)
        return parse_reaped(done.stdout)

    def stage_in(self, ctx: ActionContext) -> Mapping[str, Any]:
        args = ctx.action.args_as(StageInArgs)
        spec = self.mount(ctx)
        with self.tended(ctx, spec) as cancel:
            eng = self.engine(ctx, spec, cancel)
            eng.prepare_root(spec.rsa_mountpoint)
            if args.preprocess is not None:
                return _script(ctx, eng, spec, args.preprocess, "preprocess", "stage-in",
                               data_in=args.data_in, data_out=None)
            if args.data_in is None:  # refused at construction: never both missing
                raise PermanentError("the stage-in names neither DATA_IN nor PREPROCESS")
            bulk = self.bulk(eng)
            if args.writable:  # what its write-backs compare with (daemon/writeback)
                n = record_base(self.bases, bulk, spec.fs_id, str(args.data_in),
                                self.cfg.staging.writable_objects)
                log.info("job %s: writable input: %d objects of %s recorded before the "
                         "stage-in", ctx.action.job_id, n, args.data_in)
            return _stats(bulk.stage_in(str(args.data_in), spec.rsa_mountpoint,
                                        atomic=args.atomic))

    def stage_out(self, ctx: ActionContext) -> Mapping[str, Any]:
        args = ctx.action.args_as(StageOutArgs)
        spec = self.mount(ctx)
        late: list[str] = []
        if self.await_epilogs is not None and not args.rescue:
            # the job's processes may still write (SIGTERM, then KillWait): what it
            # writes after the verify would be destroyed with the RAMDISK
            late = sorted(str(n) for n in (self.await_epilogs(ctx) or ()))
        # the nodes whose end was never confirmed (their wait ran out): the verify says so
        # (a fact, so the message stays true across a restart; None: every node ended)
        unconfirmed = {"epilogs_unconfirmed": late or None}
        with self.tended(ctx, spec) as cancel:
            eng = self.engine(ctx, spec, cancel)
            if args.postprocess is not None:
                return {**_script(ctx, eng, spec, args.postprocess, "postprocess",
                                  "stage-out", data_in=None, data_out=args.data_out),
                        **unconfirmed}
            if args.data_out is None:  # refused at construction: never both missing
                raise PermanentError("the stage-out names neither DATA_OUT nor POSTPROCESS")
            # after a failed verify: what differed is copied again, whatever the quick
            # check says (a copy corrupted with its size and mtime kept passes it)
            redo = redo_of(ctx.facts, ctx.action.id)
            paths, resume = redo if redo is not None else ([], True)
            since = built_since(ctx.facts, ctx.action.id)
            if args.rescue:  # a quarantined RAMDISK's content, to the user's rescue area
                eng.prepare_rescue(str(args.data_out.parent))
                since = None  # the rescue's own directory: nothing there to keep aside
            out = _stats(self.bulk(eng).stage_out(
                spec.rsa_mountpoint, str(args.data_out), args.method.value,
                resume=resume, redo=paths, since=since,
                expect=redo_expect(ctx.facts, ctx.action.id) if since is not None else {}))
        if redo is not None:
            fact = ctx.facts["verify_differed"]
            what = ("the archives were written again" if args.method.value == "tar" else
                    "the whole output was copied again" if not resume else
                    f"{len(paths)} object{'s' if len(paths) != 1 else ''} copied again")
            out["verify_redone"] = {"after": fact.get("action"), "objects": len(paths),
                                    "all": not resume}
            said = out.get("summary")
            out["summary"] = (f"the last verify found {_redo_words(fact)} differing in "
                              f"{args.data_out}: {what}" + (f"; {said}" if said else ""))
        return {**out, **unconfirmed}

    def verify(self, ctx: ActionContext) -> Mapping[str, Any]:
        args = ctx.action.args_as(VerifyArgs)
        late = _late_words(ctx.facts.get("epilogs_unconfirmed"))
        if args.postprocess is not None:
            # The user's POSTPROCESS owns the output's form; its exit status was checked.
            return {"verified": "postprocess exit status",
                    "summary": "exit status only: your POSTPROCESS exited 0 (what it wrote "
                               "is not checked)" + late,
                    "epilogs_unconfirmed": None}
        if args.data_out is None:  # refused at construction: never both missing
            raise PermanentError("the verification names neither DATA_OUT nor POSTPROCESS")
        out = str(args.data_out)
        spec = self.mount(ctx)
        with self.tended(ctx, spec) as cancel:
            eng = self.bulk(self.engine(ctx, spec, cancel))
            result = eng.verify(spec.rsa_mountpoint, out, args.method.value)
        if not result.ok:
            # durable before the outcome: the retry (automatic, or rsa retry; also after
            # an rsad restart) copies exactly these again (stage_out, redo_of)
            fact = differed_fact(ctx.action.id, args.method.value, result)
            ctx.milestone({"verify_differed": fact})
            raise RsaError(result.summary(out, advice=_verify_advice(fact)))
        # the user's message is "stage-out finished: <summary>": true for an empty RAMDISK
        summary = (verified_words(result, out, args.method.value) if result.checked else
                   f"the RAMDISK held no output: nothing was copied to {out}")
        listed = result.details.get("aside")
        aside = [(bytes.fromhex(str(p)), bytes.fromhex(str(a)))
                 for p, a in (listed if isinstance(listed, list) else ())]
        # the worker names only the first (stagingworker.NAMED), and counts them all
        aside_count = int(str(result.details.get("aside_count") or len(aside)))
        if aside:
            summary += "; " + aside_words(aside, out, total=aside_count)
        if result.skipped_total:
            summary += "; " + _skipped_words(result.skipped_total,
                                             [display(p) for p in result.skipped],
                                             "stage-out")
        earlier = ctx.facts.get("verify_differed")
        redone = ctx.facts.get("verify_redone") or {}
        if (redo_of(ctx.facts, ctx.action.id) is not None and earlier
                and redone.get("after") == earlier.get("action")):
            summary += (f" (an earlier verify found {_redo_words(earlier)} differing: "
                        "copied again, they match now)")
        summary += late
        # None: nothing is left to copy again (Memory.learn_facts)
        return {"verified": {"objects": result.checked, "bytes": result.checked_bytes,
                             "level": result.level,
                             **({"aside": [display(a) for _p, a in aside]} if aside else {}),
                             **({"aside_count": aside_count}
                                if aside_count > len(aside) else {})},
                "summary": summary,
                "verify_differed": None, "verify_redone": None, "epilogs_unconfirmed": None}

    def write_back(self, ctx: ActionContext) -> Mapping[str, Any]:
        if not ctx.job_running and self.await_epilogs is not None:
            # the run is over (ended, or requeued): the last write-back before the
            # teardown; its processes may still change the input (SIGTERM, then
            # KillWait), as for a stage-out
            self.await_epilogs(ctx)
        return self.write_back_to(ctx, str(ctx.action.args_as(WriteBackArgs).data_in))

    def write_back_to(self, ctx: ActionContext, data_in: str) -> Mapping[str, Any]:
        """Writable input: what the job changed on the RAMDISK's copy of DATA_IN since it
        was staged in written back to ``data_in`` as the job's user, its deletions
        applied, what someone else changed there meanwhile kept (daemon/writeback),
        verified. WRITE_BACK's, and the reset's last one (RESET with ``write_back``:
        after the input mounts are released, before the RAMDISK is recreated)."""
        spec = self.mount(ctx)
        with self.tended(ctx, spec) as cancel:
            eng = self.bulk(self.engine(ctx, spec, cancel))
            # the scans, the plan and the base's JSON in the staging worker (issue 34)
            out = write_back_of(self.bases, eng, spec.fs_id, spec.rsa_mountpoint, data_in)
            if out is not None:
                return out
            # no base recorded (staged in by an older rsad): the whole input copied over
            # DATA_IN, as that rsad did; nothing deleted, nothing kept aside
            log.warning("job %s: no record of what its writable input was staged in "
                        "from: written back whole (the job's deletions are not applied)",
                        ctx.action.job_id)
            redo: list[bytes] = []
            resume = True
            for _ in range(WRITE_BACK_ROUNDS):
                eng.stage_out(spec.rsa_mountpoint, data_in, "rsync", resume=resume,
                              redo=redo)
                result = eng.verify(spec.rsa_mountpoint, data_in, "rsync")
                if result.ok:
                    break
                # a file the job changed within the second it was copied keeps its size
                # and mtime second: the resume's quick check would skip it again. The
                # paths that differ are copied again whatever it says (all of them, when
                # the verify could not list them all)
                listed = result.differing < 0 or result.differing == len(result.differences)
                redo = [d.path for d in result.differences] if listed else []
                resume = listed
        if not result.ok:
            raise RsaError(result.summary(data_in))
        return {"verified": {"objects": result.checked}}

    def register(self, registry: Registry) -> None:
        registry.on_start(self.fence_all)
        registry.on_tend(self.tend)
        registry.on_scrub(self.scrub)
        registry.register(ActionKind.BUILD_FS, self.build_fs)
        registry.register(ActionKind.DESTROY_FS, self.destroy_fs)
        registry.register(ActionKind.STAGE_IN, self.stage_in)
        registry.register(ActionKind.STAGE_OUT, self.stage_out)
        registry.register(ActionKind.VERIFY, self.verify)
        registry.register(ActionKind.WRITE_BACK, self.write_back)


def record_base(bases: Bases, eng: StagingEngine | WorkerEngine, fs: str,
                data_in: str, limit: int | None = None) -> int:
    """A writable input's base scan before its stage-in (``writeback.record_stage_in``),
    in ``eng``'s staging worker when it has one (``DataPath.bulk``): a scan of a large
    DATA_IN is seconds of Python, and its JSON document is written in one C call that
    holds the GIL throughout, never in rsad's process while urgent actions wait.
    ``limit``: ``staging.writable_objects`` (a larger DATA_IN is refused, permanently)."""
    if isinstance(eng, WorkerEngine):
        return eng.record_base(str(bases.root), fs, data_in, limit)
    return record_stage_in(bases, fs, eng, data_in, limit)


def write_back_of(bases: Bases, eng: StagingEngine | WorkerEngine, fs: str, ramdisk: str,
                  data_in: str) -> dict[str, Any] | None:
    """One write-back against the recorded base (``writeback.written_back``: its
    outcome, None without a base), in ``eng``'s staging worker when it has one, as
    :func:`record_base`."""
    if isinstance(eng, WorkerEngine):
        return eng.write_back(str(bases.root), fs, ramdisk, data_in)
    return written_back(bases, fs, eng, ramdisk, data_in)


def _cycle_of(action_id: str) -> int:
    """The job's cycle (run) an action belongs to: its id is ``JOB/CYCLE/KIND/SERIAL``."""
    try:
        return max(1, int(action_id.split("/")[1]))
    except (IndexError, ValueError):
        return 1
