"""The filesystem backend interface: on-demand RAMDISKs on allocated RSA nodes.

Owns :class:`FsRequest` (what to build), :class:`MountSpec` (what was built and how to
mount it), :class:`FilesystemBackend` (the small ABC every backend implements) and
:class:`FsError`. Backends are discovered through the ``rsa_scheduler.filesystems`` entry
point group (see ``rsa_scheduler.fs.registry``).
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from rsa_scheduler.errors import RsaError
from rsa_scheduler.hosts import CancelToken, Host, HostError
from rsa_scheduler.runner import CommandError

if TYPE_CHECKING:
    from rsa_scheduler.config.schema import Config


class FsError(RsaError):
    """A RAMDISK could not be created, mounted, reset or destroyed."""


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


def command_need(cmd: str, package: str) -> Need:
    return Need(f"command {cmd}", f"command -v {cmd} >/dev/null 2>&1",
                f"install {package}")


class FilesystemBackend(abc.ABC):
    """One kind of on-demand RAMDISK filesystem."""

    name: ClassVar[str]
    #: what every RSA node of this backend must have (``rsa nodes check``)
    node_needs: ClassVar[tuple[Need, ...]] = ()

    def __init__(self, hosts: Mapping[str, Host], *, create_timeout: float = 60.0,
                 destroy_timeout: float = 60.0, retries: int = 2) -> None:
        self.hosts = hosts
        self.create_timeout = create_timeout
        self.destroy_timeout = destroy_timeout
        self.retries = retries

    @classmethod
    def config_options(cls, cfg: Config) -> dict[str, Any]:
        """The keyword arguments of this backend's constructor that the configuration
        sets (beyond the timeouts and retries every backend takes)."""
        return {}

    def needs(self) -> tuple[Need, ...]:
        """What every RSA node needs for this backend as configured (``rsa nodes
        check``); by default the class's :attr:`node_needs`."""
        return self.node_needs

    @abc.abstractmethod
    def create(self, req: FsRequest, cancel: CancelToken | None = None) -> MountSpec:
        """Build the RAMDISK on ``req.nodes`` and mount it at ``rsa_mountpoint`` on each;
        idempotent on ``req.fs_id``; on failure clean up what was half built (LIFO)."""

    @abc.abstractmethod
    def destroy(self, req: FsRequest) -> None:
        """Unmount everywhere, stop every server, free the pool space. Idempotent; also
        removes a half-built filesystem."""

    def reset(self, req: FsRequest, cancel: CancelToken | None = None) -> MountSpec:
        """Seed 004 §3.2: destroy and recreate empty."""
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
        try:
            return self.hosts[node].run(argv, timeout=timeout, check=check, input=input,
                                        cancel=cancel).stdout
        except (CommandError, HostError) as e:
            raise FsError(f"{node}: {e}") from e
