"""The filesystem backend interface: on-demand RAMDISKs on allocated RSA nodes.

Owns :class:`FsRequest` (what to build), :class:`MountSpec` (what was built and how to
mount it), :class:`FilesystemBackend` (the small ABC every backend implements),
:class:`Capabilities` (what a backend can do: the configuration asks it),
:class:`BackendSettings` and :class:`SettingProblem` (what the configuration gives a
backend, and what a backend finds wrong in it) and :class:`FsError`. Backends are
discovered through the ``rsa_scheduler.filesystems`` entry point group (see
``rsa_scheduler.fs.registry``). Must not import the configuration: it builds
:class:`BackendSettings` and asks the backends, never the other way round.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from rsa_scheduler.core.policy import NODE_TIERS, Tier
from rsa_scheduler.errors import FsError
from rsa_scheduler.hosts import CancelToken, Host, HostError
from rsa_scheduler.runner import CommandError, Completed

__all__ = ["BackendSettings", "Capabilities", "FilesystemBackend", "FsError", "FsRequest",
           "Health", "MountSpec", "Need", "NodeFacts", "SettingProblem", "command_need"]


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What one kind of RAMDISK can do. The configuration asks every backend it selects
    (``filesystem.backend``) and refuses, or warns about, what the backend cannot do."""

    #: the node tiers (``pool.nodes[].tier``) whose pools it can build RAMDISKs in
    tiers: frozenset[Tier] = frozenset(NODE_TIERS)
    #: one RAMDISK over several RSA nodes (else every job gets exactly one)
    multi_node: bool = True
    #: the DATA_IN → DATA_OUT reset (seed 004 §3.2): recreate the RAMDISK empty in place;
    #: without it a job with both writes its output to the PFS
    reset: bool = True
    #: only the job's user (and root) reach the RAMDISK's data: its own secret or owner,
    #: also from the compute nodes that mount it
    access_control: bool = True

    def __post_init__(self) -> None:
        if not self.tiers:
            raise ValueError("a backend serves at least one tier")


@dataclass(frozen=True, slots=True)
class BackendSettings:
    """What the site's configuration gives one backend (the configuration builds it).

    ``options`` are the backend's own keys of the ``filesystem`` section, converted: the
    keys of the section ``filesystem.<name>`` and every ``filesystem.<name>_<key>`` as
    ``<key>`` (``filesystem.moosefs_proxy`` is moosefs's ``proxy``). A backend without
    keys of its own gets none.
    """

    create_timeout: float = 60.0
    destroy_timeout: float = 60.0
    retries: int = 2
    #: RSA node → where its filesystem servers listen (``pool.nodes[].data_address``)
    addresses: Mapping[str, str] = field(default_factory=dict)
    #: where compute nodes mount RAMDISKs from (``filesystem.client_networks``)
    client_networks: tuple[str, ...] = ("*",)
    #: the node tiers with nodes this backend serves (empty: the pool is not known)
    tiers: frozenset[Tier] = frozenset()
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SettingProblem:
    """One thing a backend refuses in its settings: ``key`` names it as in
    :attr:`BackendSettings.options` (with list indexes), ``reason`` is one line."""

    key: tuple[str | int, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class FsRequest:
    """Build a RAMDISK named ``fs_id`` over ``nodes`` (RSA node names, in order).

    ``fs_id`` is stable for one job cycle (``job<ID>-c<CYCLE>``): creating twice with the
    same id must find and return the existing filesystem (idempotent re-issue after a
    daemon restart), and destroy must also clean a half-built one.
    """

    fs_id: str
    job_id: str
    nodes: tuple[str, ...]
    tier: str  # "ram" or "ssd"
    pool_dirs: Mapping[str, str]  # node -> the node's pool directory (tmpfs / disk)
    mount_root: str  # where RAMDISKs are mounted on RSA nodes: <mount_root>/<fs_id>
    # (uid, gid) of the job's user: the RAMDISK's root directory is made theirs, mode 0700.
    # None (tests, older callers): the root stays root's, 0700, until staging hands it over.
    owner: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class MountSpec:
    """A live RAMDISK.

    ``rsa_mountpoint`` is where it is mounted on every RSA node (staging runs there).
    ``client`` says how a compute node mounts it (backend-specific, JSON-serialisable).
    It never holds a filesystem's access secret: rsad records it in its event log and
    shows it to the job's user; secrets stay in root-only files on the RSA nodes.
    """

    backend: str
    fs_id: str
    nodes: tuple[str, ...]
    rsa_mountpoint: str
    client: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"backend": self.backend, "fs_id": self.fs_id, "nodes": list(self.nodes),
                "rsa_mountpoint": self.rsa_mountpoint, "client": dict(self.client)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MountSpec:
        return cls(backend=str(data["backend"]), fs_id=str(data["fs_id"]),
                   nodes=tuple(data["nodes"]), rsa_mountpoint=str(data["rsa_mountpoint"]),
                   client=dict(data.get("client") or {}))


@dataclass(frozen=True, slots=True)
class Health:
    ok: bool
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Need:
    """Something an RSA node must have for a backend (``rsa nodes check``): ``test`` is
    a POSIX shell test that succeeds when the node has it; ``fix`` says what to do."""

    what: str
    test: str
    fix: str


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """What ``rsa nodes check`` tells of an RSA node for a backend beyond its needs (the
    release of its filesystem): ``script`` (POSIX shell, run on the node as root) asks;
    ``read`` turns its stdout into facts (name -> value, e.g. ``MooseFS: 4.57.5``) and
    lacks (``what: fix`` lines, like a failed :class:`Need`)."""

    script: str
    read: Callable[[str], tuple[dict[str, str], list[str]]]


def command_need(cmd: str, package: str) -> Need:
    return Need(f"command {cmd}", f"command -v {cmd} >/dev/null 2>&1",
                f"install {package}")


class FilesystemBackend(abc.ABC):
    """One kind of on-demand RAMDISK filesystem."""

    name: ClassVar[str]
    #: what it can do; the configuration asks it (:class:`Capabilities`)
    capabilities: ClassVar[Capabilities] = Capabilities()
    #: what every RSA node of this backend must have (``rsa nodes check``)
    node_needs: ClassVar[tuple[Need, ...]] = ()
    #: what every compute node must have to mount it (``rsa nodes check --compute``)
    client_needs: ClassVar[tuple[Need, ...]] = ()

    def __init__(self, hosts: Mapping[str, Host], *, create_timeout: float = 60.0,
                 destroy_timeout: float = 60.0, retries: int = 2) -> None:
        self.hosts = hosts
        self.create_timeout = create_timeout
        self.destroy_timeout = destroy_timeout
        self.retries = retries

    @classmethod
    def check_settings(cls, settings: BackendSettings) -> list[SettingProblem]:
        """What is wrong with the site's settings for this backend (every problem, not
        just the first); the configuration reports each under its key."""
        return []

    @classmethod
    def config_options(cls, settings: BackendSettings) -> dict[str, Any]:
        """The keyword arguments of this backend's constructor that the configuration
        sets (beyond the timeouts and retries every backend takes)."""
        return {}

    def needs(self) -> tuple[Need, ...]:
        """What every RSA node needs for this backend as configured (``rsa nodes
        check``); by default the class's :attr:`node_needs`."""
        return self.node_needs

    def node_facts(self) -> NodeFacts | None:
        """What ``rsa nodes check`` asks an RSA node for this backend besides its needs
        (None: nothing)."""
        return None

    def compute_needs(self) -> tuple[Need, ...]:
        """What every compute node needs to mount this backend's RAMDISKs as configured
        (``rsa nodes check --compute``); by default the class's :attr:`client_needs`."""
        return self.client_needs

    def node_guard(self) -> str | None:
        """Mount options whose guard every compute node loads in every job's Prolog,
        whether the job mounts a RAMDISK or not (None: this backend needs none): a user's
        process on any compute node must not reach the RSA nodes' servers."""
        return None

    @abc.abstractmethod
    def create(self, req: FsRequest, cancel: CancelToken | None = None) -> MountSpec:
        """Build the RAMDISK on ``req.nodes`` and mount it at ``rsa_mountpoint`` on each;
        idempotent on ``req.fs_id``; on failure clean up what was half built (LIFO)."""

    @abc.abstractmethod
    def destroy(self, req: FsRequest) -> None:
        """Unmount everywhere, stop every server, free the pool space. Idempotent; also
        removes a half-built filesystem."""

    def reset(self, req: FsRequest, cancel: CancelToken | None = None) -> MountSpec:
        """Seed 004 §3.2: destroy and recreate empty. A backend whose capabilities say
        it cannot refuses with one line (the job's output then goes to the PFS)."""
        if not self.capabilities.reset:
            raise FsError(f"{req.fs_id}: the {self.name} backend cannot reset a RAMDISK "
                          "for output; the job writes its output to the PFS")
        self.destroy(req)
        return self.create(req, cancel)

    @abc.abstractmethod
    def health(self, spec: MountSpec, req: FsRequest | None = None) -> Health:
        """Is the RAMDISK usable from every RSA node? ``req`` (where the caller has it:
        the RAMDISK's nodes and pool directories) lets a backend look at its servers
        first, which answers at once when one died, before it asks a mount that may
        hang on a dead server."""

    def repair(self, req: FsRequest, spec: MountSpec) -> list[str]:
        """Restart what died of the RAMDISK's servers and RSA-node mounts, keeping its
        data (a RAM pool outlives the daemons that serve it). Returns what was restarted,
        one short phrase each (``[]``: nothing to do, or nothing this backend can do).
        Raises FsError when a node cannot be repaired (unreachable, its files gone)."""
        return []

    @abc.abstractmethod
    def client_mount_argv(self, spec: MountSpec, mountpoint: str) -> list[str]:
        """argv a compute node (as root) runs to mount the RAMDISK at ``mountpoint``. It
        may fetch the filesystem's secret from its RSA node (the argv is handed to the
        job's compute nodes only, never recorded)."""

    def client_umount_argv(self, spec: MountSpec, mountpoint: str) -> list[str]:
        return ["umount", mountpoint]

    def _run(self, node: str, argv: Sequence[str], timeout: float, *, check: bool = True,
             input: str | None = None, cancel: CancelToken | None = None) -> str:
        """Run argv as root on RSA node ``node``; failures become one FsError line."""
        return self._run_all(node, argv, timeout, check=check, input=input,
                             cancel=cancel).stdout

    def _run_all(self, node: str, argv: Sequence[str], timeout: float, *,
                 check: bool = True, input: str | None = None,
                 cancel: CancelToken | None = None) -> Completed:
        """:meth:`_run`, its whole result (stdout and stderr)."""
        try:
            return self.hosts[node].run(argv, timeout=timeout, check=check, input=input,
                                        cancel=cancel)
        except (CommandError, HostError) as e:
            raise FsError(f"{node}: {e}") from e
