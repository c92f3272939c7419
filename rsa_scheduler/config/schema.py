"""Typed configuration objects and the declarative schema that describes them.

Owns the frozen dataclasses a loaded configuration is made of (:class:`Config` and its
sections), the *kinds* that say how each key is written in YAML (duration, size, path,
hostlist, ...), the per-key documentation the reference is generated from, and rendering
a Config back to plain YAML/JSON data (:meth:`Config.to_dict`) in Slurm's dialect.

It does not read files and does not validate: :mod:`rsa_scheduler.config.loader`
interprets the kinds declared here. Must not import the loader or the CLI.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet

from rsa_scheduler.core.allocator import Pool, RsaNode
from rsa_scheduler.core.policy import (
    NODE_TIERS,
    AllocationPolicy,
    EarlyStart,
    ResetTrigger,
    StageOut,
    StagingPolicy,
    Tier,
)
from rsa_scheduler.core.units import MAX_DURATION, format_size, parse_size

# Filesystem plugin names (issue 4). Kept as strings, not an enum: backends are discovered
# through the ``rsa_scheduler.filesystems`` entry points (fs/registry.py), so a site's own
# backend package is a valid choice once installed; the shipped three are always known
# (a source tree that was never installed has no entry points).
SHIPPED_FS_BACKENDS: tuple[str, ...] = ("beeond", "moosefs", "tmpfs")


def fs_backend_names() -> tuple[str, ...]:
    """Every backend name the config may choose: the registered entry points (names only:
    nothing is imported) and the shipped ones."""
    try:
        names = {ep.name for ep in entry_points(group="rsa_scheduler.filesystems")}
    except Exception:  # broken metadata must not make every config invalid
        names = set()
    return tuple(sorted(names | set(SHIPPED_FS_BACKENDS)))


FS_BACKENDS: tuple[str, ...] = fs_backend_names()

# Where a pool lives on an RSA node when `pool.nodes[].pool_dir` is not given.
DEFAULT_POOL_DIRS: Mapping[Tier, Path] = {
    Tier.RAM: Path("/dev/shm/rsa"),
    Tier.SSD: Path("/var/lib/rsa-ssd"),
}

MAX_PRICE = 1e12  # per RSA node-hour: past this a price is a typo

# Placeholders allowed in `pool.nodes[].address`.
ADDRESS_FIELDS: tuple[str, ...] = ("name", "num")

# Upper bounds of integer and duration keys: past these a value is a typo (or an
# overflow), never a site's intent. Shown in the generated reference.
HOUR, DAY = 3600.0, 86400.0
MAX_NODES = 100_000  # RSA nodes per job, compute nodes per RSA node
MAX_POOL_NODES = 10_000  # RSA nodes in the pool
MAX_RETRIES = 100
MAX_SIZE = 1 << 50  # 1P: an RSA node's pool
# Slurm job priorities are uint32; 0xfffffffe and 0xffffffff mean NO_VAL and INFINITE.
MAX_SLURM_PRIORITY = 0xFFFFFFFD


class LogLevel(enum.StrEnum):
    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


class SlurmBackend(enum.StrEnum):
    CLI = "cli"  # squeue/scontrol machine-readable output
    PYSLURM = "pyslurm"  # needs pyslurm matching the site's Slurm major release


class LockinMethod(enum.StrEnum):
    QOS = "qos"  # seed 004 §3.1: a quality-of-service flag (needs accounting)
    PRIORITY = "priority"  # raise the job's priority (no accounting needed)
    NONE = "none"


class ScriptSource(enum.StrEnum):
    JOB_SUBMIT = "job_submit"  # normalised spec in admin_comment, written by job_submit.lua
    SCONTROL = "scontrol"  # `scontrol write batch_script`, read once per job


class SlurmMode(enum.StrEnum):
    QUEUE = "queue"  # rsad watches the queue: on-deck, demotion, lock-in (seed 004 §3.1)
    NATIVE = "native"  # Slurm's burst_buffer/lua drives stage-in/out (docs/design/native-mode.md)


class MountScope(enum.StrEnum):
    NODE = "node"  # the RAMDISK is bind-mounted in the compute node's mount namespace
    JOB = "job"  # ... in a mount namespace of the job's own (needs the SPANK plugin)


class BeeondStorage(enum.StrEnum):
    POOL_DIR = "pool_dir"  # BeeGFS data in the node's pool directory (its tmpfs or disk)
    TMPFS = "tmpfs"  # beeond -r: beeond mounts a tmpfs of its own over the data path


class HostKeyPolicy(enum.StrEnum):
    REJECT = "reject"
    WARN = "warn"
    AUTO_ADD = "auto-add"


# --------------------------------------------------------------------------- kinds


@dataclass(frozen=True, slots=True)
class Kind:
    """How a key is written in YAML. The loader converts, the reference prints ``label``."""

    @property
    def label(self) -> str:
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class Str(Kind):
    @property
    def label(self) -> str:
        return "string"


@dataclass(frozen=True, slots=True)
class Bool(Kind):
    @property
    def label(self) -> str:
        return "`true` \\| `false`"


@dataclass(frozen=True, slots=True)
class Int(Kind):
    min: int | None = None
    max: int | None = None

    @property
    def label(self) -> str:
        if self.min is not None and self.max is not None:
            return f"integer {self.min}–{self.max}"
        if self.min is not None:
            return f"integer ≥ {self.min}"
        return "integer"


@dataclass(frozen=True, slots=True)
class Number(Kind):
    """A finite decimal number (an int is accepted too)."""

    min: float
    max: float

    @property
    def label(self) -> str:
        return f"number {self.min:g}–{self.max:g}"


@dataclass(frozen=True, slots=True)
class Duration(Kind):
    positive: bool = True  # False: zero is allowed
    max: float = MAX_DURATION  # seconds; longer values are rejected

    @property
    def label(self) -> str:
        text = f"duration ≤ {format_duration_short(self.max)}"
        return text if self.positive else f"{text} (may be 0s)"


@dataclass(frozen=True, slots=True)
class Size(Kind):
    max: int = MAX_SIZE  # bytes; larger values are rejected

    @property
    def label(self) -> str:
        return f"size ≤ {format_size(self.max)}"


@dataclass(frozen=True, slots=True)
class AbsPath(Kind):
    @property
    def label(self) -> str:
        return "absolute path"


@dataclass(frozen=True, slots=True)
class Choice(Kind):
    values: tuple[str, ...]
    enum_cls: type[enum.StrEnum] | None = None  # convert to this enum; None keeps the string

    @classmethod
    def of(cls, enum_cls: type[enum.StrEnum],
           members: Iterable[enum.StrEnum] | None = None) -> Choice:
        """The enum's values (or only ``members``'), converted to the enum."""
        return cls(tuple(m.value for m in (enum_cls if members is None else members)), enum_cls)

    @property
    def label(self) -> str:
        return " \\| ".join(f"`{v}`" for v in self.values)


@dataclass(frozen=True, slots=True)
class Listen(Kind):
    @property
    def label(self) -> str:
        return "`host:port` or empty"


@dataclass(frozen=True, slots=True)
class Hostlist(Kind):
    @property
    def label(self) -> str:
        return "hostlist"


@dataclass(frozen=True, slots=True)
class Address(Kind):
    @property
    def label(self) -> str:
        return "host, IP or pattern"


@dataclass(frozen=True, slots=True)
class Section(Kind):
    cls: type

    @property
    def label(self) -> str:
        return "section"


@dataclass(frozen=True, slots=True)
class ListOf(Kind):
    item: Kind

    @property
    def label(self) -> str:
        if isinstance(self.item, Section):
            return "list of mappings"
        return f"list of {self.item.label}s"


@dataclass(frozen=True, slots=True)
class MapOf(Kind):
    keys: type[enum.StrEnum]
    value: Kind
    members: tuple[enum.StrEnum, ...] = ()  # the keys allowed; () for every member of `keys`

    @property
    def key_values(self) -> tuple[str, ...]:
        return tuple(m.value for m in (self.members or self.keys))

    @property
    def label(self) -> str:
        return f"mapping {'/'.join(self.key_values)} → {self.value.label}"


@dataclass(frozen=True, slots=True)
class Optional(Kind):
    inner: Kind

    @property
    def label(self) -> str:
        if isinstance(self.inner, Listen):
            return self.inner.label  # already says "or empty"
        return f"{self.inner.label}, or empty"


@dataclass(frozen=True, slots=True)
class Setting:
    """One documented key: its kind, what it does, and (for list items) its default text."""

    kind: Kind
    doc: str
    default_text: str | None = None  # shown in the reference when there is no YAML default


def meta(kind: Kind, doc: str, default_text: str | None = None) -> dict[str, Setting]:
    """Field metadata carrying a key's :class:`Setting`: ``field(metadata=meta(...))``."""
    return {"rsa": Setting(kind, doc, default_text)}


# --------------------------------------------------------------------------- values


@dataclass(frozen=True, slots=True)
class HostPort:
    """A ``host:port`` to listen on (``[::1]:9465`` for IPv6)."""

    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


_TRAILING_NUM = re.compile(r"(\d+)$")


@dataclass(frozen=True, slots=True)
class RsaNodeSpec:
    """One RSA node after expanding a pool entry's hostlist."""

    name: str
    tier: Tier
    capacity: int  # bytes
    address: str  # what SSH connects to
    ssh_port: int
    pool_dir: Path
    data_address: str = ""  # where its filesystem servers listen ("" = address)


# --------------------------------------------------------------------------- sections


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiConfig:
    socket: Path = field(
        metadata=meta(AbsPath(), "Unix socket of rsad's API (the `rsa` CLI, local hooks).")
    )
    listen: HostPort | None = field(
        metadata=meta(
            Optional(Listen()),
            "TCP `host:port` the API also listens on, for the compute nodes' Prolog/Epilog "
            "(authenticated with MUNGE). Empty: unix socket only.",
        )
    )
    socket_group: str = field(
        metadata=meta(
            Str(),
            "Group that may connect to the unix socket (mode 0660 root:group): SlurmUser "
            "and whoever runs `rsa` on rsad's host. Missing or empty: mode 0600, root only.",
        )
    )
    read_timeout: float = field(
        metadata=meta(Duration(max=HOUR), "Time a caller has to send a whole request "
                                          "(and to take its answer); then 408.")
    )
    max_connections: int = field(
        metadata=meta(Int(min=8, max=65536), "API connections open at once, both "
                                             "listeners; the last 1/8 only for root's and "
                                             "SlurmUser's on the unix socket.")
    )
    per_user: int = field(
        metadata=meta(Int(min=1, max=1024), "Connections (requests) one user may have "
                                            "open at once; more are answered 429. Root "
                                            "and SlurmUser are exempt.")
    )
    workers: int = field(
        metadata=meta(Int(min=1, max=1024), "Users' requests served at once (root's and "
                                            "SlurmUser's hooks never wait for these).")
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class DaemonConfig:
    state_dir: Path = field(
        metadata=meta(
            AbsPath(), "rsad's state directory; the SQLite event store lives there as `rsa.db`."
        )
    )
    poll_interval: float = field(
        metadata=meta(Duration(max=HOUR), "How often rsad polls Slurm (one `squeue` call).")
    )
    workers: int = field(
        metadata=meta(Int(min=1, max=1024), "Workers for bulk operations: RAMDISK builds, "
                                            "stage-in, stage-out, verification.")
    )
    retention: float = field(
        metadata=meta(Duration(max=365 * DAY), "How long a finished job stays in rsad's "
                      "memory (and in `rsa jobs`) after its RSA cycle ended; its history "
                      "stays in the store, where `rsa job ID` and `rsa events --job ID` "
                      "read it. Bounds memory by live jobs.")
    )
    snapshot_every: int = field(
        metadata=meta(Int(min=0, max=10**9), "Write a snapshot of rsad's state every this "
                      "many events; a restart loads the newest and replays only the events "
                      "after it (0: never, replay the whole log).")
    )
    urgent_workers: int = field(
        metadata=meta(Int(min=1, max=1024), "Workers for everything else (mounts, the "
                                            "reset, lock-in, teardown, messages): they "
                                            "never wait behind bulk operations.")
    )
    log_level: LogLevel = field(metadata=meta(Choice.of(LogLevel), "Log level of rsad."))
    api: ApiConfig = field(metadata=meta(Section(ApiConfig), "rsad's API endpoints."))

    @property
    def db_path(self) -> Path:
        return self.state_dir / "rsa.db"


@dataclass(frozen=True, slots=True, kw_only=True)
class LockinConfig:
    method: LockinMethod = field(
        metadata=meta(
            Choice.of(LockinMethod),
            "How a staged job is protected from demotion (seed 004 §3.1): a QOS (needs "
            "accounting), a priority boost, or nothing.",
        )
    )
    qos: str = field(metadata=meta(Str(), "QOS given to locked-in jobs (method `qos`)."))
    priority: int = field(
        metadata=meta(
            Int(min=1, max=MAX_SLURM_PRIORITY),
            "Priority given to locked-in jobs (method `priority`).",
        )
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class SlurmConfig:
    backend: SlurmBackend = field(
        metadata=meta(
            Choice.of(SlurmBackend),
            "`cli` parses squeue/scontrol; `pyslurm` needs pyslurm matching the site's Slurm.",
        )
    )
    bin_dir: Path = field(metadata=meta(AbsPath(), "Directory holding squeue, scontrol, ..."))
    command_timeout: float = field(
        metadata=meta(Duration(max=HOUR), "Timeout of one Slurm command.")
    )
    lockin: LockinConfig = field(metadata=meta(Section(LockinConfig), "Lock-in after stage-in."))
    script_source: ScriptSource = field(
        metadata=meta(
            Choice.of(ScriptSource),
            "Where rsad reads a job's `#RSA_` directives: `job_submit` (admin_comment written "
            "by job_submit.lua) or `scontrol` (`scontrol write batch_script`, once per job).",
        )
    )
    mode: SlurmMode = field(
        metadata=meta(
            Choice.of(SlurmMode),
            "`queue`: rsad watches the queue and stages a job in when it is on-deck (demotion, "
            "lock-in); `native`: Slurm's burst_buffer/lua plugin (slurm_plugins/"
            "burst_buffer.lua) starts stage-in and stage-out and holds the job meanwhile "
            "(docs/design/native-mode.md).",
        )
    )
    bb_pools_file: Path = field(
        metadata=meta(
            AbsPath(),
            "Native mode: the JSON file rsad rewrites with the free RSA capacity per tier; "
            "burst_buffer.lua's slurm_bb_pools reports it to Slurm (it must be readable by "
            "SlurmUser).",
        )
    )
    bb_grace: float = field(
        metadata=meta(
            Duration(max=DAY),
            "Native mode: how long a staged RAMDISK of a still-pending job outlives Slurm's "
            "teardown of it (a restarted slurmctld tears down and sets up again ~60 s "
            "later: the input is not staged twice).",
        )
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolNodeGroup:
    """One entry of ``pool.nodes``: nodes sharing tier, capacity and layout."""

    names: str = field(
        metadata=meta(Hostlist(), 'Node names as a ClusterShell hostlist, e.g. "rsa[01-04]".')
    )
    capacity: int = field(metadata=meta(Size(), "Pool size on each node, e.g. `64G`, `3.5T`."))
    tier: Tier = field(default=Tier.RAM,
                       metadata=meta(Choice.of(Tier, NODE_TIERS), "Storage tier."))
    address: str | None = field(
        default=None,
        metadata=meta(
            Optional(Address()),
            "What SSH connects to. Empty: the node name. A pattern may use `{name}` and "
            "`{num}` (the name's trailing number), e.g. `{name}-ib` or `10.1.0.{num}`; a fixed "
            "address is only allowed when `names` is one node.",
        ),
    )
    ssh_port: int = field(default=22, metadata=meta(Int(min=1, max=65535), "SSH port."))
    data_address: str | None = field(
        default=None,
        metadata=meta(
            Optional(Address()),
            "Where the node's filesystem servers (e.g. MooseFS) listen; compute and RSA "
            "nodes must reach it. Empty: the SSH address. Same patterns as `address`; a fixed "
            "address may be shared (servers use distinct ports). MooseFS refuses loopback.",
        ),
    )
    pool_dir: Path = field(
        metadata=meta(
            AbsPath(),
            "Directory on the node holding the RAM/SSD pool.",
            ", ".join(f"`{d}` ({t.value})" for t, d in DEFAULT_POOL_DIRS.items()),
        )
    )

    def hosts(self) -> tuple[str, ...]:
        return tuple(str(n) for n in NodeSet(self.names, resolver=RESOLVER_NOGROUP))

    def expand(self) -> tuple[RsaNodeSpec, ...]:
        return tuple(
            RsaNodeSpec(
                name=name,
                tier=self.tier,
                capacity=self.capacity,
                address=node_address(self.address, name),
                ssh_port=self.ssh_port,
                pool_dir=self.pool_dir,
                data_address=node_address(self.data_address, name)
                if self.data_address else node_address(self.address, name),
            )
            for name in self.hosts()
        )


def node_address(pattern: str | None, name: str) -> str:
    """The address of node ``name`` from an ``address`` pattern (see PoolNodeGroup)."""
    if not pattern:
        return name
    m = _TRAILING_NUM.search(name)
    num: int | str = int(m.group(1)) if m else ""
    return pattern.format(name=name, num=num)


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolConfig:
    nodes: tuple[PoolNodeGroup, ...] = field(
        metadata=meta(
            ListOf(Section(PoolNodeGroup)),
            "The RSA nodes. A site file must define at least one; each node name only once; "
            f"at most {MAX_POOL_NODES} in all.",
        )
    )

    def members(self) -> tuple[RsaNodeSpec, ...]:
        """Every RSA node, in file order."""
        return tuple(node for group in self.nodes for node in group.expand())

    def by_tier(self) -> dict[Tier, tuple[RsaNodeSpec, ...]]:
        out: dict[Tier, list[RsaNodeSpec]] = {}
        for node in self.members():
            out.setdefault(node.tier, []).append(node)
        return {tier: tuple(nodes) for tier, nodes in out.items()}


@dataclass(frozen=True, slots=True, kw_only=True)
class BeeondConfig:
    beegfs_major: int = field(
        metadata=meta(Int(min=7, max=8), "Major release of BeeGFS on the RSA and compute "
                      "nodes (7 or 8): the config files, the connection authentication "
                      "(8: `beeond start -C`) and the client's mount options differ.")
    )
    storage_servers: int = field(
        metadata=meta(Int(min=0, max=MAX_NODES), "Storage servers per RAMDISK (`beeond "
                      "-s`): the job's first N RSA nodes. 0: every node of the job; more "
                      "than the job has: every node.")
    )
    metadata_servers: int = field(
        metadata=meta(Int(min=0, max=MAX_NODES), "Metadata servers per RAMDISK (`beeond "
                      "-m`): the job's first N RSA nodes. 0: every node (many small files).")
    )
    storage: BeeondStorage = field(
        metadata=meta(Choice.of(BeeondStorage), "Where BeeGFS keeps data and metadata: "
                      "`pool_dir` — below the node's pool directory (a tmpfs for ram, the "
                      "SSD for ssd); `tmpfs` — beeond mounts a tmpfs of its own over the data "
                      "path (`beeond -r`; ram tier only).")
    )
    prefer_local: bool = field(
        metadata=meta(Bool(), "Each RSA node's client prefers its own storage and metadata "
                      "server (`beeond -l`; stripes over one target).")
    )
    use_pdsh: bool = field(
        metadata=meta(Bool(), "Start and stop the services with pdsh, in parallel (`beeond "
                      "-P`), instead of one ssh per node. Needs pdsh on the RSA nodes.")
    )
    pdsh_path: Path | None = field(
        metadata=meta(Optional(AbsPath()), "pdsh binary (`beeond -b`), with `use_pdsh`. "
                      "Empty: beeond finds it on PATH.")
    )
    config_dir: Path | None = field(
        metadata=meta(Optional(AbsPath()), "Directory of BeeGFS config files on every RSA "
                      "node (`beegfs-meta.conf`, `beegfs-storage.conf`, `beegfs-client.conf`, "
                      "`beegfs-mgmtd.toml` (8) or `.conf` (7), `beegfs-helperd.conf` (7)); "
                      "copied into each RAMDISK's own config directory (`beeond -f`). Empty: "
                      "BeeOND's defaults.")
    )
    log_dir: Path = field(
        metadata=meta(AbsPath(), "BeeGFS logs on the RSA nodes: `<log_dir>/<RAMDISK>` "
                      "(`beeond -L`).")
    )
    keep_logs: bool = field(
        metadata=meta(Bool(), "Keep a RAMDISK's logs after it is destroyed (else `beeond "
                      "stop -L` deletes them).")
    )
    port_shift_min: int = field(
        metadata=meta(Int(min=0, max=65535 - 8010), "Lowest port shift (`beeond -p`) of a "
                      "RAMDISK. Each RAMDISK gets its own shift, a multiple of 10 above this "
                      "drawn at random among those whose ports are free on its nodes, so "
                      "several share a node: open TCP and UDP 8003+min … 8010+max between "
                      "RSA and compute nodes.")
    )
    port_shift_max: int = field(
        metadata=meta(Int(min=0, max=65535 - 8010), "Highest port shift of a RAMDISK.")
    )
    kill_after: float = field(
        metadata=meta(Duration(max=HOUR), "`beeond start`/`stop` run under `timeout -k "
                      "kill_after` (filesystem.create_timeout / destroy_timeout): how long "
                      "a hung beeond gets after SIGTERM before SIGKILL.")
    )
    stop_backoff: float = field(
        metadata=meta(Duration(positive=False, max=HOUR), "Wait before retrying a failed "
                      "`beeond stop`, times the attempt number (filesystem.retries).")
    )
    client_options: tuple[str, ...] = field(
        metadata=meta(ListOf(Str()), "Extra BeeGFS client mount options, `key=value` (e.g. "
                      "`connInterfacesList=/etc/beegfs/ib.conf`), on the RSA nodes (in the "
                      "RAMDISK's `beegfs-client.conf`) and the compute nodes (`mount -o`). "
                      "Only options the client module accepts; rsad sets sysMgmtdHost, "
                      "connPortShift and the connection authentication itself.")
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class FilesystemConfig:
    backend: Mapping[Tier, str] = field(
        metadata=meta(
            MapOf(Tier, Choice(FS_BACKENDS), NODE_TIERS),
            "Filesystem plugin per tier. `tmpfs` serves a single RSA node (requires "
            "`allocation.max_nodes` and `allocation.max_request` of 1 when its tier has nodes).",
        )
    )
    create_timeout: float = field(
        metadata=meta(Duration(max=DAY), "Timeout to build a RAMDISK filesystem.")
    )
    destroy_timeout: float = field(metadata=meta(Duration(max=DAY), "Timeout to tear one down."))
    retries: int = field(
        metadata=meta(Int(min=0, max=MAX_RETRIES), "Retries of a failed create/destroy.")
    )
    mount_root: Path = field(metadata=meta(AbsPath(), "Where RAMDISKs are client-mounted."))
    client_networks: tuple[str, ...] = field(
        metadata=meta(
            ListOf(Str()),
            "Where compute nodes mount RAMDISKs from (moosefs export ranges: `*`, an IP, "
            "`IP/bits` or `IP-IP`); the RSA nodes' own addresses are always added.",
        )
    )
    moosefs_proxy: str = field(
        metadata=meta(
            Str(),
            "Loopback address every moosefs RAMDISK mount's master proxy listens on; each "
            "node loads an nftables rule (table `inet rsa_mfsproxy`) so only root can "
            "connect to it, and refuses to mount without `nft` (docs/security.md). `off` "
            "leaves the proxy on 127.0.0.1, where any local user of a node that mounts "
            "a RAMDISK can read and change it as root.",
        )
    )
    beeond: BeeondConfig = field(
        metadata=meta(Section(BeeondConfig), "The `beeond` backend (BeeGFS On Demand).")
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class SshConfig:
    user: str = field(metadata=meta(Str(), "User rsad logs in as on RSA nodes."))
    key: Path = field(metadata=meta(AbsPath(), "Private key."))
    known_hosts: Path = field(metadata=meta(AbsPath(), "Known-hosts file of the RSA nodes."))
    host_key_policy: HostKeyPolicy = field(
        metadata=meta(
            Choice.of(HostKeyPolicy), "Unknown host key: refuse, warn and connect, or add it."
        )
    )
    connect_timeout: float = field(metadata=meta(Duration(max=HOUR), "SSH connect timeout."))
    command_timeout: float = field(
        metadata=meta(Duration(max=DAY), "Timeout of one remote command.")
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ResetConfig:
    trigger: ResetTrigger = field(
        metadata=meta(
            Choice.of(ResetTrigger),
            "When the input RAMDISK is reset for output (seed 004 §3.2): after `delay`, or "
            "when the job runs `rsa input-done`.",
        )
    )
    delay: float = field(
        metadata=meta(
            Duration(positive=False),
            "Delay after job start (trigger `delay`); same range as `#RSA_RESET`.",
        )
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class StagingConfig:
    early_start: EarlyStart = field(
        metadata=meta(
            Choice.of(EarlyStart),
            "Default when a job could start before its RAMDISK is ready "
            "(`#RSA_EARLY_START` overrides); `wait` holds it (job_submit.lua's "
            "`CONFIG.early_start` must say the same).",
        )
    )
    stage_out: StageOut = field(
        metadata=meta(Choice.of(StageOut), "Default stage-out method (`#RSA_STAGE_OUT` overrides).")
    )
    retries: int = field(
        metadata=meta(
            Int(min=0, max=MAX_RETRIES), "Retries of a failed transfer before quarantine."
        )
    )
    backoff: float = field(
        metadata=meta(Duration(max=DAY), "First retry delay; doubles on each retry.")
    )
    backoff_max: float = field(metadata=meta(Duration(max=DAY), "Upper bound of the retry delay."))
    parallel_per_node: int = field(
        metadata=meta(Int(min=1, max=256), "Parallel transfer streams per RSA node.")
    )
    allowed_roots: tuple[Path, ...] = field(
        metadata=meta(
            ListOf(AbsPath()),
            "DATA_IN/DATA_OUT must lie under one of these directories (never `/`).",
        )
    )
    reset: ResetConfig = field(
        metadata=meta(Section(ResetConfig), "The mid-job input→output reset.")
    )
    wait_timeout: float = field(
        metadata=meta(
            Duration(max=30 * DAY),
            "How long early-start policy `wait` may hold a job before falling back.",
        )
    )
    on_deck_settle: float = field(
        metadata=meta(
            Duration(positive=False, max=DAY),
            "How long a job must stay on-deck (pending `Resources`) before RSA nodes are "
            "allocated. slurmctld gives every job submitted to a full cluster `Resources` "
            "at once and `Priority` at its next scheduling pass; this keeps such a job from "
            "costing a RAMDISK build and a partial stage-in. 0s: allocate at once (the "
            "paper's behaviour).",
        )
    )
    copy_tool: str = field(
        metadata=meta(
            Choice(("engine", "rsync", "custom")),
            "What copies a tree (stage-in, and stage-out as a tree): `engine` tar pipes "
            "and dd per bucket (measured faster than one rsync -a: docs/benchmarks.md), "
            "`rsync` real rsync -aH per bucket, `custom` the site's `copy_command`; "
            "always in parallel buckets over the job's RSA nodes, as the user, placed "
            "atomically and verified the same way.",
        )
    )
    stripe_bytes: int | None = field(
        metadata=meta(
            Optional(Size()),
            "With `copy_tool: engine`, a file at least this large is copied as byte ranges "
            "by every stream of every RSA node at once, each range checksummed on both "
            "sides, placed only when all passed (docs/staging.md#striped-big-files); empty: "
            "one stream per file.",
        )
    )
    copy_command: str | None = field(
        metadata=meta(
            Optional(Str()),
            "The copier of one bucket when `copy_tool` is `custom`, run by bash as the "
            "job's user on an RSA node: it must copy the names listed in `{list}` "
            "(NUL-separated, relative to `{src}`) from `{src}` to `{dst}`; `{recursive}` "
            "is `-r` for a bucket of whole directories. E.g. `rsync -a --from0 "
            "--files-from={list} {recursive} {src}/ {dst}/`.",
        )
    )
    stage_out_order: str = field(
        metadata=meta(
            Choice(("fifo", "sjf", "trio")),
            "Which stage-out copies first when several share a PFS target (seed 003): "
            "`fifo` all at once; `sjf` at most `flushes_per_target` at once, the fewest "
            "bytes first; `trio` the same cap, the oldest job (lowest job id) first, then "
            "the fewest bytes.",
        )
    )
    flushes_per_target: int = field(
        metadata=meta(
            Int(min=1, max=1024),
            "Stage-outs copying to one PFS target at once under `sjf` and `trio` (seed "
            "003's alpha).",
        )
    )
    pfs_targets: tuple[Path, ...] = field(
        metadata=meta(
            ListOf(AbsPath()),
            "The PFS's independent targets (file systems, or directories on their own "
            "servers): a stage-out counts against the longest that holds its DATA_OUT; "
            "empty: the whole PFS is one target.",
        )
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class HooksConfig:
    timeout: float = field(
        metadata=meta(Duration(max=HOUR), "Hard timeout of a Prolog/Epilog run.")
    )
    api_timeout: float = field(
        metadata=meta(Duration(max=HOUR), "Timeout of one hook→rsad API call.")
    )
    max_hold: float = field(
        metadata=meta(
            Duration(positive=False, max=DAY),
            "Longest the node Prolog holds a job's start for its stage-in (early start "
            "`wait` when an on-deck job's nodes freed before its input was staged; a job "
            "held from submission waits in Slurm instead). Slurm's `PrologEpilogTimeout` "
            "and the Prolog wrapper's backstop (`RSA_PROLOG_BACKSTOP`) must exceed "
            "`hooks.timeout` + this.",
        )
    )
    mounts: MountScope = field(
        metadata=meta(
            Choice.of(MountScope),
            "Where the RAMDISK is mounted over DATA_IN/DATA_OUT: `node` — in the compute "
            "node's mount namespace, seen by every process on the node; `job` — in a mount "
            "namespace of the job's own that the SPANK plugin moves its tasks into, so other "
            "jobs and users never see it (docs/spank.md).",
        )
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class HealthConfig:
    interval: float = field(
        metadata=meta(Duration(max=HOUR), "How often rsad probes every RSA node over SSH "
                      "(free space of its pool directory, its clock). 0s: off.")
    )
    down_after: int = field(
        metadata=meta(Int(1, 100), "Failed probes in a row before a node is marked down "
                      "(never allocated; comes back by itself once it answers).")
    )
    min_free: int = field(
        metadata=meta(Size(), "A node with less free space in its pool directory is "
                      "drained by the health loop (and resumed once it has it again).")
    )
    max_clock_skew: float = field(
        metadata=meta(Duration(max=HOUR), "A node whose clock is further off than this "
                      "is drained (timestamps and verification compare mtimes).")
    )
    ramdisk_interval: float = field(
        metadata=meta(Duration(max=HOUR), "How often rsad checks every live RAMDISK (its "
                      "servers and RSA-node mounts) and restarts what died, on the data "
                      "still in the pools; also while staging moves data. 0s: only before "
                      "each staging step and when one finds the filesystem not answering.")
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricsConfig:
    listen: HostPort | None = field(
        metadata=meta(Optional(Listen()), "Prometheus endpoint, e.g. `127.0.0.1:9465`. Empty: off.")
    )


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
    }
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
        )

    def rsa_nodes(self) -> list[RsaNode]:
        """The pool's nodes as the allocator takes them."""
        return [RsaNode(n.name, n.tier, n.capacity) for n in self.pool.members()]

    def make_pool(self) -> Pool:
        """A fresh, empty RSA node pool for the allocator."""
        return Pool(self.rsa_nodes(), self.allocation)

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
            return f.default
    return MISSING


# --------------------------------------------------------------------------- rendering


def format_duration_short(seconds: float) -> str:
    """``300.0`` → ``5m``: the largest unit that is exact, so parsing gives it back."""
    if seconds == 0:
        return "0s"
    if seconds == int(seconds):
        whole = int(seconds)
        for unit, mult in (("d", 86400), ("h", 3600), ("m", 60)):
            if whole % mult == 0:
                return f"{whole // mult}{unit}"
        return f"{whole}s"
    millis = seconds * 1000
    if millis == int(millis):
        return f"{int(millis)}ms"
    return f"{seconds}s"


def format_size_exact(nbytes: int) -> str:
    """Like Slurm (``3.5T``) when that is exact, else the largest exact unit."""
    text = format_size(nbytes)
    if parse_size(text) == nbytes:
        return text
    for unit, mult in (("P", 1 << 50), ("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20)):
        if nbytes % mult == 0:
            return f"{nbytes // mult}{unit}"
    if nbytes % 1024 == 0:
        return f"{nbytes // 1024}K"
    return str(nbytes)


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
    if isinstance(kind, Duration):
        return format_duration_short(value)
    if isinstance(kind, Size):
        return format_size_exact(value)
    if isinstance(kind, AbsPath | Listen | Choice):
        return str(value)
    return value
