"""The configuration's storage sections: the RSA node pool and the RAMDISK filesystems.

Owns :class:`PoolConfig` and its entries (:class:`PoolNodeGroup`, expanded to
:class:`RsaNodeSpec`; :func:`node_address` fills an address pattern),
:class:`FilesystemConfig` with the beeond backend's section (:class:`BeeondConfig`), the
backend names a site may choose (:data:`FS_BACKENDS`, from the backend registry) and the
default pool directories. Declarations only: no reading, no validation (what a backend
can do is asked by :mod:`rsa_scheduler.config.backends`).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet

from rsa_scheduler.config.kinds import (
    DAY,
    HOUR,
    MAX_NODES,
    MAX_POOL_NODES,
    MAX_RETRIES,
    AbsPath,
    Address,
    Bool,
    Choice,
    Duration,
    Hostlist,
    Int,
    ListOf,
    MapOf,
    Optional,
    Section,
    Size,
    Str,
    meta,
)
from rsa_scheduler.core.policy import NODE_TIERS, Tier
from rsa_scheduler.fs import registry

# Filesystem plugin names (issue 4). Kept as strings, not an enum: backends are discovered
# through the ``rsa_scheduler.filesystems`` entry points (fs/registry.py), so a site's own
# backend package is a valid choice once installed; what each can do is checked by
# config/backends.py, which asks the backends themselves.
FS_BACKENDS: tuple[str, ...] = registry.names()

# Where a pool lives on an RSA node when `pool.nodes[].pool_dir` is not given: each the
# mount point of a filesystem of its own (a tmpfs for ram), which no user can write
# (fs/poolcheck.py; the operator guide says how to make them). Never in /dev/shm: users
# fill that tmpfs, and the pool's space with it.
DEFAULT_POOL_DIRS: Mapping[Tier, Path] = {
    Tier.RAM: Path("/var/lib/rsa-ram"),
    Tier.SSD: Path("/var/lib/rsa-ssd"),
}

# Placeholders allowed in `pool.nodes[].address`.
ADDRESS_FIELDS: tuple[str, ...] = ("name", "num")


class BeeondStorage(enum.StrEnum):
    POOL_DIR = "pool_dir"  # BeeGFS data in the node's pool directory (its tmpfs or disk)
    TMPFS = "tmpfs"  # beeond -r: beeond mounts a tmpfs of its own over the data path


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
            "Directory on the node holding the RAM/SSD pool: the mount point of a "
            "filesystem of its own (a tmpfs for ram), root's, that no user can write; "
            "`rsa nodes check` and rsad's health probe refuse one that shares a filesystem "
            "with users (operator guide, \"The pool's own filesystem\").",
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
    moosefs_standby: bool = field(
        metadata=meta(
            Bool(),
            "Keep one moosefs chunkserver started ahead in each RSA node's pool, holding "
            "nothing until a create claims it: a create then waits for the next whole "
            "second instead of the 1-2 s a chunkserver takes to report its space "
            "(docs/filesystems.md). `false`: every create starts its chunkservers.",
        )
    )
    beeond: BeeondConfig = field(
        metadata=meta(Section(BeeondConfig), "The `beeond` backend (BeeGFS On Demand).")
    )
