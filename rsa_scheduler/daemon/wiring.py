"""Builds a running rsad from a Config: Slurm port, store, pool, executors, API.

Owns the choice of implementations behind each seam (``make_slurm``, ``make_registry``)
so tests can build a daemon with fakes for pure-logic tests and with the real pieces in
the lab.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rsa_scheduler.config import Config, SlurmMode
from rsa_scheduler.core.actions import ActionKind
from rsa_scheduler.core.epilogs import slurm_holds
from rsa_scheduler.core.policy import NodeState
from rsa_scheduler.core.scheduler import Scheduler
from rsa_scheduler.daemon.executors import ActionContext, BusyError, PermanentError, Registry
from rsa_scheduler.daemon.health import HEALTH_BY, HealthLoop, RamdiskTender, Thresholds
from rsa_scheduler.daemon.native import NativeDriver
from rsa_scheduler.daemon.service import Daemon
from rsa_scheduler.errors import RsaError
from rsa_scheduler.hosts import Host
from rsa_scheduler.slurm.cli import CliSlurm, guard_warning, lockin_problem, qos_warning
from rsa_scheduler.slurm.port import JobPlaces, SlurmError, SlurmPort, UnlockGone, UnlockLater
from rsa_scheduler.store import Store

if TYPE_CHECKING:
    from rsa_scheduler.daemon.engines import EnginePool

log = logging.getLogger(__name__)
#: native mode's early-start wait: the longest StageInTimeout Slurm's lua plugin accepts
NATIVE_WAIT = 2_073_600.0


def make_slurm(cfg: Config) -> SlurmPort:
    sl = cfg.slurm
    cli = CliSlurm(bin_dir=sl.bin_dir, timeout=sl.command_timeout,
                   lockin_method=sl.lockin.method.value, lockin_qos=sl.lockin.qos,
                   lockin_priority=sl.lockin.priority)
    if sl.backend.value == "pyslurm":
        from rsa_scheduler.slurm.pyslurm_backend import PySlurm

        return PySlurm(cli)
    return cli


class LockinUnusable(RsaError):
    """The configured lock-in cannot work on the running Slurm (rsad refuses to start)."""


def check_lockin(cfg: Config, slurm: CliSlurm | None = None) -> None:
    """Read ``scontrol show config`` once and refuse a lock-in Slurm would silently ignore.

    Without accounting Slurm accepts ``qos=`` and ignores it, so rsad would believe its
    jobs locked in while any urgent job overtakes them: that is a configuration error, not
    something to run with. If slurmctld cannot be asked (down at boot), rsad starts anyway
    and says so: it must come up before Slurm too, and its poll waits for Slurm.
    """
    lk = cfg.slurm.lockin
    if lk.method.value == "none" or cfg.slurm.mode is SlurmMode.NATIVE:
        return  # native mode: Slurm keeps the staged job itself, no lock-in is used
    sl = slurm or CliSlurm(bin_dir=cfg.slurm.bin_dir, timeout=cfg.slurm.command_timeout)
    try:
        config = sl.show_config()
    except SlurmError as e:
        log.warning("cannot check slurm.lockin.method %s against Slurm's configuration: %s",
                    lk.method.value, e)
        return
    problem = lockin_problem(lk.method.value, lk.priority, config)
    if problem:
        raise LockinUnusable(problem)
    for warning in (qos_warning(lk.method.value, lk.qos, config),
                    guard_warning(lk.method.value, lk.priority, config)):
        if warning:
            log.warning("%s", warning)


def _cycle(action_id: str) -> str:
    """The RSA cycle an action belongs to (its id is ``JOB/CYCLE/KIND/SERIAL``)."""
    return action_id.rsplit("/", 3)[1]


def slurm_executors(registry: Registry, slurm: SlurmPort) -> None:
    """Lock-in and its end (seed 004 §3.1) through the Slurm port.

    The job's own QOS (or priority) is recorded durably (the ``lock_orig`` milestone)
    before the first lock-in of an RSA cycle changes it, and a re-issued lock-in (after an
    rsad restart, an operator's retry) takes the recorded one: the lock-in's own value is
    never recorded as the original. The restore (UNLOCK) gives that back wherever the
    lock-in's is still in place, and never releases a hold (slurm/cli.py)."""

    def lock_in(ctx: ActionContext) -> Mapping[str, Any]:
        job = ctx.action.job_id
        cycle = _cycle(ctx.action.id)
        recorded = dict(ctx.facts.get("lock_orig") or {})
        if recorded.get("cycle") == cycle and "value" in recorded:
            value = str(recorded["value"])
        else:
            try:
                value = slurm.lock_original(job)
            except SlurmError:
                if "value" not in recorded:
                    raise
                # still locked in from an earlier cycle whose restore never happened:
                # that cycle's record is the job's own
                value = str(recorded["value"])
            recorded = {"cycle": cycle, "value": value}
            ctx.milestone({"lock_orig": recorded})
        slurm.lock_in(job)
        return {"lock_orig": recorded, "summary": f"locked in; its own {value} recorded"}

    def unlock(ctx: ActionContext) -> Mapping[str, Any]:
        recorded = dict(ctx.facts.get("lock_orig") or {})
        # lock_token: what a lock-in logged by an earlier rsad recorded (its QOS)
        original = str(recorded.get("value", ctx.facts.get("lock_token", "")))
        try:
            said = slurm.unlock(ctx.action.job_id, original)
        except UnlockGone as e:
            raise PermanentError(str(e)) from e
        except UnlockLater as e:
            raise BusyError(str(e)) from e
        log.info("job %s: lock-in ended: %s", ctx.action.job_id, said)
        return {"summary": said}

    registry.register(ActionKind.LOCK_IN, lock_in)
    registry.register(ActionKind.UNLOCK, unlock)


def native_lock_executors(registry: Registry) -> None:
    """Native mode: Slurm itself keeps a staged job (its burst buffer is staged-in and it
    is next to start), so lock-in changes nothing in Slurm and says so in the log."""

    def lock_in(ctx: ActionContext) -> Mapping[str, Any]:
        log.info("job %s: native mode: Slurm holds the staged job for its burst buffer; "
                 "no lock-in", ctx.action.job_id)
        return {}

    def unlock(_ctx: ActionContext) -> Mapping[str, Any]:
        return {"summary": "native mode: no lock-in to end"}

    registry.register(ActionKind.LOCK_IN, lock_in)
    registry.register(ActionKind.UNLOCK, unlock)


def make_engines(cfg: Config) -> EnginePool | None:
    """The staging-worker pool (``staging.engine_process``; off: None, the engines run in
    rsad's threads)."""
    if not cfg.staging.engine_process:
        return None
    from rsa_scheduler.daemon.engines import EnginePool

    return EnginePool(nice=cfg.staging.engine_nice, memory=cfg.staging.engine_memory)


def slurm_nodes(slurm: object, job: str) -> frozenset[str] | None:
    """The nodes on which Slurm still has ``job`` (running it, or its Epilog not finished
    there: core/epilogs.py); None when Slurm cannot say (a port without ``job_nodes``,
    slurmctld unreachable): then no node's Epilog is taken as confirmed by Slurm."""
    if not isinstance(slurm, JobPlaces):
        return None
    try:
        rows = slurm.job_nodes(job)
    except SlurmError as e:
        log.warning("job %s: Slurm could not say where the job still is: %s", job, e)
        return None
    return slurm_holds((r.state, r.nodes) for r in rows)


def make_registry(cfg: Config, slurm: SlurmPort, hosts: Mapping[str, Host] | None = None,
                  workers: EnginePool | None = None) -> Registry:
    """The executors; with ``hosts``, the data path's, its bulk staging run in ``workers``
    (None: in rsad's threads)."""
    registry = Registry()
    if cfg.slurm.mode is SlurmMode.NATIVE:
        native_lock_executors(registry)
    else:
        slurm_executors(registry, slurm)
    if hosts is not None:
        from rsa_scheduler.daemon.data import DataPath
        from rsa_scheduler.daemon.nodeside import NodeSide

        data = DataPath(cfg, hosts, workers=workers)
        data.register(registry)

        def backend_for(ctx: ActionContext) -> tuple[Any, Any]:
            req = data.request(ctx)
            return data.backend(req.tier), req

        def guard() -> str | None:
            """The first backend's compute-node guard (one table per node: fs/mfsproxy.py;
            a name among the data addresses is resolved once, by the backend)."""
            for tier in cfg.pool.by_tier():
                try:
                    found = data.backend(str(tier)).node_guard()
                except RsaError as e:
                    log.warning("no guard for the compute nodes' Prologs: %s", e)
                    return None
                if found:
                    return found
            return None

        side = NodeSide(backend_for=backend_for, mount_timeout=3 * cfg.hooks.timeout + 5,
                        reset_timeout=max(90.0, 3 * cfg.hooks.timeout),
                        max_hold=cfg.hooks.max_hold, exclusive=data.exclusive,
                        learned=data.learned, write_back=data.write_back_to,
                        written_back=data.bases.drop, guard=guard,
                        slurm_nodes=lambda job: slurm_nodes(slurm, job))
        side.register(registry)
        data.release_mounts = side.release_mounts  # before every teardown
        data.await_epilogs = side.await_epilogs  # before every stage-out
    return registry


def make_daemon(cfg: Config, *, slurm: SlurmPort | None = None,
                registry: Registry | None = None) -> Daemon:
    slurm = slurm or make_slurm(cfg)
    hosts: Mapping[str, Host] | None = None
    workers: EnginePool | None = None
    if registry is None:
        from rsa_scheduler.remote import HostPool

        hosts = HostPool.from_config(cfg)
        workers = make_engines(cfg)
        registry = make_registry(cfg, slurm, hosts, workers)
    store = Store.open(cfg.daemon.db_path)
    policy = cfg.staging_policy()
    if cfg.slurm.mode is SlurmMode.NATIVE:
        # Slurm holds the job until data_in returns, bounded by burst_buffer.conf's
        # StageInTimeout: no early-start fallback of rsad's own
        policy = dataclasses.replace(policy, wait_timeout=NATIVE_WAIT)
    sched = Scheduler(cfg.make_pool(), policy)
    daemon = Daemon(sched, slurm=slurm, store=store,
                    registry=registry,
                    workers=cfg.daemon.workers, urgent_workers=cfg.daemon.urgent_workers,
                    poll_interval=cfg.daemon.poll_interval, retention=cfg.daemon.retention,
                    snapshot_every=cfg.daemon.snapshot_every,
                    script_source=cfg.slurm.script_source.value)
    daemon.hosts = hosts
    daemon.staging_workers = workers  # read by its metrics
    daemon.dispatcher.remind_every = cfg.quarantine.remind_every
    if cfg.slurm.mode is SlurmMode.NATIVE:
        daemon.native = NativeDriver(cfg.slurm.bb_pools_file, cfg.slurm.bb_grace)
    return daemon


def make_tender(cfg: Config, daemon: Daemon) -> RamdiskTender | None:
    """The RAMDISK tender (``health.ramdisk_interval`` 0: off; no data path: off)."""
    if not daemon.registry.tends or cfg.health.ramdisk_interval <= 0:
        return None

    def tendable() -> list[tuple[str, Mapping[str, Any]]]:
        return list(daemon.submit("call", daemon.tendable, wait=True, timeout=60))

    def tend(job: str, mount: Mapping[str, Any]) -> None:
        def record(data: Mapping[str, Any]) -> None:
            daemon.submit("milestone", (job, f"{job}/tend", dict(data)), wait=True,
                          timeout=60)
        daemon.registry.tend(job, mount, record)

    return RamdiskTender(tendable, tend, interval=cfg.health.ramdisk_interval)


def make_health(cfg: Config, daemon: Daemon) -> HealthLoop | None:
    """The RSA-node health loop (``health.interval`` 0: off; no data path: off)."""
    if not daemon.hosts or cfg.health.interval <= 0:
        return None
    pool = daemon.sched.pool

    def set_state(node: str, state: NodeState, reason: str) -> None:
        daemon.submit("node-state", (node, state.value, HEALTH_BY, reason), wait=True,
                      timeout=60)

    def before_up(node: str) -> str | None:
        """Clean what teardowns left on ``node`` while it was down, before it is used."""
        left = daemon.submit("call", lambda: list(daemon.debris.get(node, ())), wait=True,
                             timeout=60)
        if not left:
            return None
        try:
            daemon.registry.scrub(node, left)
        except Exception as e:
            jobs = ", ".join(sorted({str(d["job_id"]) for d in left}))
            return f"what job(s) {jobs} left here while it was down is not cleaned: {e}"
        daemon.submit("call", lambda: daemon.scrubbed(node), wait=True, timeout=60)
        return None

    # nodes the health loop took out before a restart: it may bring them back
    taken = {n for n, note in daemon.node_notes.items() if note.get("by") == HEALTH_BY}
    def observe(node: str, free: int | None, epoch: int) -> str | None:
        """The node's real free space to the allocator (on the loop thread); why the
        node is short now, or None."""
        def call() -> str | None:
            pool.observe_free(node, free, epoch)
            return pool.short().get(node)
        answer: str | None = daemon.submit("call", call, wait=True, timeout=60)
        return answer

    return HealthLoop(daemon.hosts, {n.name: str(n.pool_dir) for n in cfg.pool.members()},
                      state_of=pool.state, set_state=set_state,
                      epoch_of=pool.epoch, observe=observe,
                      limits=Thresholds(down_after=cfg.health.down_after,
                                        min_free=cfg.health.min_free,
                                        max_skew=cfg.health.max_clock_skew),
                      interval=cfg.health.interval, taken_out=taken, before_up=before_up)
