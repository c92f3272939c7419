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

import logging
from collections.abc import Mapping
from typing import Any

from ClusterShell.NodeSet import NodeSet

from rsa_scheduler.config import Config
from rsa_scheduler.core.actions import ActionKind
from rsa_scheduler.daemon.executors import ActionContext, PermanentError, Registry
from rsa_scheduler.errors import RsaError
from rsa_scheduler.fs.base import FilesystemBackend, FsRequest, MountSpec
from rsa_scheduler.hosts import Host
from rsa_scheduler.runner import Identity
from rsa_scheduler.staging.engine import StagingEngine
from rsa_scheduler.staging.report import Progress, Stats

log = logging.getLogger(__name__)


def fs_id(action_id: str) -> str:
    """``JOB/CYCLE/KIND/SERIAL`` -> ``job<JOB>-c<CYCLE>`` (array ids keep their ``_``)."""
    job, cycle = action_id.rsplit("/", 3)[:2]
    return f"job{job}-c{cycle}"


def _stats(stats: Stats) -> dict[str, Any]:
    return {"stats": {"files": stats.files, "bytes": stats.bytes,
                      "seconds": round(stats.seconds, 3)}}


def _script(eng: StagingEngine, spec: MountSpec, args: Mapping[str, Any], key: str,
            phase: str) -> dict[str, Any]:
    """Run the user's PREPROCESS (replaces stage-in) or POSTPROCESS (replaces stage-out).

    A failing PREPROCESS is permanent (the job uses the PFS); a failing POSTPROCESS is
    retried and the RAMDISK is kept, like any failed stage-out.
    """
    res = eng.run_script(list(args[key]), phase, ramdisk=spec.rsa_mountpoint,
                         data_in=str(args.get("data_in") or ""),
                         data_out=str(args.get("data_out") or ""))
    if not res.ok:
        why = f"{key.upper()} exited {res.returncode}: {res.stderr_tail.strip()[-300:]}"
        if key == "preprocess":
            raise PermanentError(why)
        raise RsaError(f"{why} (RAMDISK kept)")
    return {"script": {"returncode": res.returncode, "seconds": res.seconds}}


def _owner(user: str) -> tuple[int, int] | None:
    """(uid, gid) the RAMDISK's root is given to; None if the user is unknown here (a
    destroy must still work; a create then leaves the root root's, 0700)."""
    import pwd

    try:
        pw = pwd.getpwnam(user) if user else None
    except KeyError:
        return None
    return (pw.pw_uid, pw.pw_gid) if pw else None


class DataPath:
    """Everything the data-path executors share: config, hosts, backends."""

    def __init__(self, cfg: Config, hosts: Mapping[str, Host],
                 backends: Mapping[str, FilesystemBackend] | None = None) -> None:
        self.cfg = cfg
        self.hosts = hosts
        self._backends = dict(backends or {})
        self.pool_dirs = {n.name: str(n.pool_dir) for n in cfg.pool.members()}
        self.tiers = {n.name: n.tier.value for n in cfg.pool.members()}

    def backend(self, tier: str) -> FilesystemBackend:
        if tier not in self._backends:
            from rsa_scheduler.fs.registry import backend_class, make_backend

            name = {str(k): v for k, v in self.cfg.filesystem.backend.items()}.get(tier, "")
            options: dict[str, Any] = {}
            if name == "moosefs":
                options["addresses"] = {n.name: n.data_address or n.address
                                        for n in self.cfg.pool.members()}
                options["client_networks"] = tuple(self.cfg.filesystem.client_networks)
            elif name:
                backend_class(name)  # fail early with the registry's message
            self._backends[tier] = make_backend(self.cfg, tier, self.hosts, **options)
        return self._backends[tier]

    def request(self, ctx: ActionContext) -> FsRequest:
        args = ctx.action.args
        nodes = tuple(NodeSet(str(args["nodes"])))
        if not nodes:
            raise PermanentError("the action names no RSA nodes")
        tier = str(args.get("tier") or self.tiers[nodes[0]])
        return FsRequest(fs_id=fs_id(ctx.action.id), job_id=ctx.action.job_id, nodes=nodes,
                         tier=tier, pool_dirs={n: self.pool_dirs[n] for n in nodes},
                         mount_root=str(self.cfg.filesystem.mount_root),
                         owner=_owner(str(args.get("user") or "")))

    def mount(self, ctx: ActionContext) -> MountSpec:
        data = ctx.facts.get("mount")
        if not data:
            raise RsaError(f"job {ctx.action.job_id}: no RAMDISK is recorded for this job")
        return MountSpec.from_json(data)

    def engine(self, ctx: ActionContext, spec: MountSpec) -> StagingEngine:
        user = str(ctx.action.args["user"])
        identity = Identity.of(user)

        def progress(p: Progress) -> None:
            ctx.progress(p.to_json())

        st = self.cfg.staging
        return StagingEngine([self.hosts[n] for n in spec.nodes], identity,
                             parallel_per_node=st.parallel_per_node, progress=progress,
                             cancel=ctx.cancel, job_id=ctx.action.job_id)

    # ---- executors ----------------------------------------------------------------------
    def build_fs(self, ctx: ActionContext) -> Mapping[str, Any]:
        req = self.request(ctx)
        spec = self.backend(req.tier).create(req, ctx.cancel)
        return {"mount": spec.to_json()}

    def destroy_fs(self, ctx: ActionContext) -> Mapping[str, Any]:
        req = self.request(ctx)
        self.backend(req.tier).destroy(req)
        return {}

    def stage_in(self, ctx: ActionContext) -> Mapping[str, Any]:
        args = ctx.action.args
        spec = self.mount(ctx)
        eng = self.engine(ctx, spec)
        eng.prepare_root(spec.rsa_mountpoint)
        if args.get("preprocess"):
            return _script(eng, spec, args, "preprocess", "stage-in")
        return _stats(eng.stage_in(str(args["data_in"]), spec.rsa_mountpoint,
                                   atomic=bool(args.get("atomic"))))

    def stage_out(self, ctx: ActionContext) -> Mapping[str, Any]:
        args = ctx.action.args
        spec = self.mount(ctx)
        eng = self.engine(ctx, spec)
        if args.get("postprocess"):
            return _script(eng, spec, args, "postprocess", "stage-out")
        return _stats(eng.stage_out(spec.rsa_mountpoint, str(args["data_out"]),
                                    str(args.get("method") or "rsync")))

    def verify(self, ctx: ActionContext) -> Mapping[str, Any]:
        args = ctx.action.args
        if args.get("postprocess"):
            # The user's POSTPROCESS owns the output's form; its exit status was checked.
            return {"verified": "postprocess exit status"}
        spec = self.mount(ctx)
        eng = self.engine(ctx, spec)
        result = eng.verify(spec.rsa_mountpoint, str(args["data_out"]),
                            str(args.get("method") or "rsync"))
        if not result.ok:
            raise RsaError(result.summary(str(args["data_out"])))
        return {"verified": {"objects": result.checked, "bytes": result.checked_bytes,
                             "level": result.level}}

    def write_back(self, ctx: ActionContext) -> Mapping[str, Any]:
        args = ctx.action.args
        spec = self.mount(ctx)
        eng = self.engine(ctx, spec)
        data_in = str(args["data_in"])
        eng.stage_out(spec.rsa_mountpoint, data_in, "rsync")
        result = eng.verify(spec.rsa_mountpoint, data_in, "rsync")
        if not result.ok:
            raise RsaError(result.summary(data_in))
        return {"verified": {"objects": result.checked}}

    def register(self, registry: Registry) -> None:
        registry.register(ActionKind.BUILD_FS, self.build_fs)
        registry.register(ActionKind.DESTROY_FS, self.destroy_fs)
        registry.register(ActionKind.STAGE_IN, self.stage_in)
        registry.register(ActionKind.STAGE_OUT, self.stage_out)
        registry.register(ActionKind.VERIFY, self.verify)
        registry.register(ActionKind.WRITE_BACK, self.write_back)
