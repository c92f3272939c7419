"""The whole configuration: :class:`Config`, its documented keys, and rendering it back.

Owns :class:`Config` (the sections, the core's policies built from them), the
documentation of the core's :class:`~rsa_scheduler.core.policy.AllocationPolicy` keys
(:data:`EXTERNAL_SETTINGS`), the key lists the validator and the reference walk
(:func:`settings_of`, :func:`item_default`) and rendering a Config back to plain YAML/JSON
data (:meth:`Config.to_dict`, :func:`render`) in Slurm's dialect. The kinds of keys are
in :mod:`.kinds`, the sections in :mod:`.sections` and :mod:`.storage`; this module
re-exports their names, so ``config.schema`` stays the one place to import them from.

It does not read files and does not validate: :mod:`rsa_scheduler.config.loader`
interprets the kinds declared here. Must not import the loader or the CLI.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from rsa_scheduler.config.kinds import (
    DAY,
    HOUR,
    MAX_NODES,
    MAX_POOL_NODES,
    MAX_RETRIES,
    MAX_SIZE,
    MAX_SLURM_PRIORITY,
    AbsPath,
    Address,
    Bool,
    Choice,
    Duration,
    Hostlist,
    Int,
    Kind,
    Listen,
    ListOf,
    MapOf,
    NameMap,
    Number,
    Optional,
    Section,
    Setting,
    Size,
    Str,
    format_duration_short,
    format_size_exact,
    meta,
)
from rsa_scheduler.config.sections import (
    ApiConfig,
    DaemonConfig,
    HealthConfig,
    HooksConfig,
    HostKeyPolicy,
    HostPort,
    LockinConfig,
    LockinMethod,
    LogLevel,
    MetricsConfig,
    MountScope,
    QuarantineConfig,
    ResetConfig,
    ScriptSource,
    SlurmBackend,
    SlurmConfig,
    SlurmMode,
    SshConfig,
    StagingConfig,
)
from rsa_scheduler.config.storage import (
    ADDRESS_FIELDS,
    DEFAULT_POOL_DIRS,
    FS_BACKENDS,
    BeeondConfig,
    BeeondStorage,
    FilesystemConfig,
    PoolConfig,
    PoolNodeGroup,
    RsaNodeSpec,
    node_address,
)
from rsa_scheduler.core.allocator import Pool, RsaNode
from rsa_scheduler.core.policy import (
    NODE_TIERS,
    AllocationPolicy,
    NamedLimits,
    StagingPolicy,
    Tier,
)

MAX_PRICE = 1e12  # per RSA node-hour: past this a price is a typo


# AllocationPolicy lives in the pure core (no docs metadata there); describe it here.
EXTERNAL_SETTINGS: dict[type, dict[str, Setting]] = {
    AllocationPolicy: {
        "ratio": Setting(Int(1, MAX_NODES), "Compute nodes per RSA node (rounded up)."),
        "min_nodes": Setting(Int(1, MAX_NODES), "Fewest RSA nodes a job gets."),
        "max_nodes": Setting(Int(1, MAX_NODES), "Most RSA nodes a job gets by the ratio."),
        "max_request": Setting(Int(1, MAX_NODES), "Largest `#RSA_NODES` a job may ask for."),
        "default_tier": Setting(Choice.of(Tier), "Tier used when a job does not ask "
                                "(`#RSA_TIER`); `auto`: the cheapest tier that meets the "
                                "job's size and bandwidth (docs/allocation.md)."),
        "price": Setting(MapOf(Tier, Number(0, MAX_PRICE), NODE_TIERS),
                         "Price of one RSA node-hour per tier, in the site's own unit: "
                         "what tier `auto` minimises (nodes × price)."),
        "bandwidth": Setting(MapOf(Tier, Size(), NODE_TIERS),
                             "Bandwidth of one RSA node per tier, per second (measure it: "
                             "docs/allocation.md); tier `auto` gives a job enough nodes to "
                             "move its `#RSA_CAPACITY` within `io_time`."),
        "io_time": Setting(Duration(max=DAY), "Tier `auto`: the time in which a job's "
                           "`#RSA_CAPACITY` must be movable (seed 000's checkpoint time "
                           "target); its bandwidth need is capacity / io_time."),
        "mix": Setting(Bool(), "Tier `auto`: when no tier alone has the nodes free now (or "
                       "can hold the job at all), give it nodes of several tiers, the "
                       "cheapest first, under one filesystem; its bandwidth counts as "
                       "nodes x the slowest tier's. Needs one `filesystem.backend` for "
                       "every tier with nodes (otherwise off, and `rsa config check` warns)."),
        "user_share": Setting(Number(0.01, 1), "The most of the pool's RSA nodes one "
                              "user's jobs hold at once (a fraction; 1: no limit). A user's "
                              "first job is never refused by it; the others wait for nodes."),
        "array_share": Setting(Number(0.01, 1), "The most of the pool's RSA nodes the tasks "
                               "of one job array hold at once (a fraction; 1: no limit), so "
                               "a big array next to start does not take every RSA node."),
        **{f"{who}_{what}": Setting(kind, f"Limit per {scope}: {text} (0: no limit). A "
                                            "job over it waits for RSA nodes as "
                                            "`staging.early_start` says and its user reads "
                                            "why; one alone over it reads the PFS.")
           for who, scope in (("user", "user"), ("account", "Slurm account"))
           for what, kind, text in (
               ("nodes", Int(0, MAX_POOL_NODES),
                "the most RSA nodes the jobs of one " + scope + " hold at once"),
               ("capacity", Size(positive=False),
                "the most RSA capacity (the nodes' configured `capacity`) the jobs of one "
                + scope + " hold at once"),
               ("stage_ins", Int(0, MAX_POOL_NODES),
                "the most jobs of one " + scope + " whose RAMDISK is built or staged in at "
                "once"))},
        **{f"{who}_limits": Setting(
            NameMap(Section(NamedLimits), what, lower=who == "account"),
            f"A named {what}'s own limits (its name as squeue's {column} shows it), e.g. "
            f"`{example}: {{nodes: 3}}`: each of `nodes`, `capacity`, `stage_ins` given "
            f"replaces `{who}_nodes`, `{who}_capacity`, `{who}_stage_ins` for it (0: no "
            f"limit for it); one left out keeps the value for all." + note)
           for who, what, column, example, note in (
               ("user", "user", "`User`", "alice", ""),
               ("account", "Slurm account", "`Account`, lower case", "bigproj",
                " As strong as Slurm's association checks: without "
                "`AccountingStorageEnforce=associations` a user may submit under any "
                "account name."))},
    },
    NamedLimits: {
        "nodes": Setting(Optional(Int(0, MAX_POOL_NODES)), "RSA nodes its jobs hold at "
                         "once.", "the value for all"),
        "capacity": Setting(Optional(Size(positive=False)), "RSA capacity its jobs hold "
                            "at once.", "the value for all"),
        "stage_ins": Setting(Optional(Int(0, MAX_POOL_NODES)), "Its jobs being built or "
                             "staged in at once.", "the value for all"),
    },
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Config:
    """The whole validated configuration. Build it with the loader, not by hand."""

    daemon: DaemonConfig = field(metadata=meta(Section(DaemonConfig), "The rsad daemon."))
    slurm: SlurmConfig = field(metadata=meta(Section(SlurmConfig), "How rsad talks to Slurm."))
    allocation: AllocationPolicy = field(
        metadata=meta(
            Section(AllocationPolicy),
            "How many RSA nodes a job gets: `ceil(compute nodes / ratio)` clamped to "
            "`[min_nodes, max_nodes]` (seed 004 §3.1).",
        )
    )
    pool: PoolConfig = field(metadata=meta(Section(PoolConfig), "The RSA node pool."))
    filesystem: FilesystemConfig = field(
        metadata=meta(Section(FilesystemConfig), "The on-demand RAMDISK filesystems.")
    )
    ssh: SshConfig = field(
        metadata=meta(Section(SshConfig), "Remote execution on RSA nodes (paramiko).")
    )
    staging: StagingConfig = field(metadata=meta(Section(StagingConfig), "Stage-in and stage-out."))
    hooks: HooksConfig = field(
        metadata=meta(Section(HooksConfig), "Prolog/Epilog on compute nodes.")
    )
    health: HealthConfig = field(
        metadata=meta(Section(HealthConfig), "RSA-node health checks and automatic drain.")
    )
    quarantine: QuarantineConfig = field(
        metadata=meta(Section(QuarantineConfig), "Output kept on a RAMDISK whose stage-out "
                      "gave up: when it is rescued to the PFS, how often it is alerted "
                      "about again.")
    )
    metrics: MetricsConfig = field(metadata=meta(Section(MetricsConfig), "Prometheus metrics."))
    # Not settings: where this config came from and what the loader warned about.
    source: Path | None = None
    warnings: tuple[str, ...] = ()

    def staging_policy(self) -> StagingPolicy:
        """The core's site policy for the state machine."""
        st = self.staging
        return StagingPolicy(
            early_start=st.early_start, stage_out=st.stage_out, retries=st.retries,
            backoff=st.backoff, backoff_max=st.backoff_max, reset_trigger=st.reset.trigger,
            reset_delay=st.reset.delay, wait_timeout=st.wait_timeout,
            fs_build_attempts=self.filesystem.retries + 1, on_deck_settle=st.on_deck_settle,
            lockin_timeout=self.slurm.lockin.timeout,
            rescue_after=self.quarantine.rescue_after,
            rescue_dir=str(self.quarantine.rescue_dir or ""),
        )

    def rsa_nodes(self) -> list[RsaNode]:
        """The pool's nodes as the allocator takes them."""
        return [RsaNode(n.name, n.tier, n.capacity) for n in self.pool.members()]

    def make_pool(self) -> Pool:
        """A fresh, empty RSA node pool for the allocator: without ``allocation.mix``
        when the tiers with nodes use different backends (one filesystem cannot span
        them; ``rsa config check`` warns)."""
        policy = self.allocation
        if policy.mix and len(self.mix_backends()) > 1:
            policy = replace(policy, mix=False)
        return Pool(self.rsa_nodes(), policy)

    def mix_backends(self) -> set[str]:
        """The backends of the tiers that have nodes (a mix needs exactly one)."""
        return {str(self.filesystem.backend.get(t)) for t in self.pool.by_tier()}

    def to_dict(self) -> dict[str, Any]:
        """The effective settings as plain data in Slurm's dialect; loading it gives back
        an equal Config."""
        out = render(Section(Config), self)
        assert isinstance(out, dict)
        return out


def settings_of(cls: type) -> tuple[tuple[str, Setting], ...]:
    """The documented keys of a section class, in declaration order."""
    if cls in EXTERNAL_SETTINGS:
        return tuple(EXTERNAL_SETTINGS[cls].items())
    return tuple((f.name, f.metadata["rsa"]) for f in fields(cls) if "rsa" in f.metadata)


def item_default(cls: type, name: str, values: Mapping[str, Any]) -> Any:
    """The default of a list-item key given the item's other values, or MISSING."""
    if cls is PoolNodeGroup and name == "pool_dir":
        tier = values.get("tier", Tier.RAM)
        return DEFAULT_POOL_DIRS.get(tier, DEFAULT_POOL_DIRS[Tier.RAM])  # tier may be invalid
    for f in fields(cls):
        if f.name == name:
            if f.default is MISSING and f.default_factory is not MISSING:
                return f.default_factory()
            return f.default
    return MISSING


# --------------------------------------------------------------------------- rendering


def render(kind: Kind, value: Any) -> Any:
    """A typed value back to the plain YAML form of ``kind``."""
    if isinstance(kind, Optional):
        if value is None:
            return "" if isinstance(kind.inner, Listen | Address | AbsPath) else None
        return render(kind.inner, value)
    if isinstance(kind, Section):
        return {name: render(s.kind, getattr(value, name)) for name, s in settings_of(kind.cls)}
    if isinstance(kind, ListOf):
        return [render(kind.item, v) for v in value]
    if isinstance(kind, MapOf):
        return {str(k): render(kind.value, v) for k, v in value.items()}
    if isinstance(kind, NameMap):  # an entry's keys left out stay out
        return {str(k): _set_only(render(kind.value, v)) for k, v in value.items()}
    if isinstance(kind, Duration):
        return format_duration_short(value)
    if isinstance(kind, Size):
        return format_size_exact(value)
    if isinstance(kind, AbsPath | Listen | Choice):
        return str(value)
    return value


def _set_only(data: Any) -> Any:
    return {k: v for k, v in data.items() if v is not None} if isinstance(data, dict) \
        else data


__all__ = [
    "ADDRESS_FIELDS",
    "DAY",
    "DEFAULT_POOL_DIRS",
    "EXTERNAL_SETTINGS",
    "FS_BACKENDS",
    "HOUR",
    "MAX_NODES",
    "MAX_POOL_NODES",
    "MAX_PRICE",
    "MAX_RETRIES",
    "MAX_SIZE",
    "MAX_SLURM_PRIORITY",
    "AbsPath",
    "Address",
    "ApiConfig",
    "BeeondConfig",
    "BeeondStorage",
    "Bool",
    "Choice",
    "Config",
    "DaemonConfig",
    "Duration",
    "FilesystemConfig",
    "HealthConfig",
    "HooksConfig",
    "HostKeyPolicy",
    "HostPort",
    "Hostlist",
    "Int",
    "Kind",
    "ListOf",
    "Listen",
    "LockinConfig",
    "LockinMethod",
    "LogLevel",
    "MapOf",
    "MetricsConfig",
    "MountScope",
    "NameMap",
    "Number",
    "Optional",
    "PoolConfig",
    "PoolNodeGroup",
    "QuarantineConfig",
    "ResetConfig",
    "RsaNodeSpec",
    "ScriptSource",
    "Section",
    "Setting",
    "Size",
    "SlurmBackend",
    "SlurmConfig",
    "SlurmMode",
    "SshConfig",
    "StagingConfig",
    "Str",
    "format_duration_short",
    "format_size_exact",
    "item_default",
    "meta",
    "node_address",
    "render",
    "settings_of",
]
