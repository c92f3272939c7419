"""The ``tmpfs`` backend: one RSA node, no parallel filesystem, for small sites.

Owns :class:`TmpfsBackend`. The RAMDISK is a directory ``<pool_dir>/rsa-tmpfs-<fs_id>``
in the node's pool (already a tmpfs for the ``ram`` tier, a disk directory for ``ssd``),
owned by the job's user with mode 0700, bind-mounted at ``<mount_root>/<fs_id>`` on that
node, where staging runs.

Compute nodes: a directory that lives in one machine's memory can only be mounted on
another machine through a network filesystem, and Linux has no honest one-liner for that
(NFS needs a server set up by the site; sshfs maps every user to the SSH login user, which
breaks per-user ownership). So ``client_mount_argv`` bind-mounts the directory only when
the pool is visible at the same path on compute nodes: the RSA node *is* the compute host
(:class:`~rsa_scheduler.hosts.LocalHost`), or the site declares ``shared_pool=True``
because it exports the pool itself (e.g. over NFS). Otherwise it refuses with one line:
use ``moosefs`` or ``beeond``.

Must not import the daemon or the store.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from contextlib import ExitStack
from typing import ClassVar

from rsa_scheduler.fs.base import (
    Capabilities,
    FilesystemBackend,
    FsError,
    FsRequest,
    Health,
    MountSpec,
)
from rsa_scheduler.fs.common import sh_chain, validate_fs_id
from rsa_scheduler.hosts import CancelToken, Host, LocalHost

log = logging.getLogger(__name__)

DIR_PREFIX = "rsa-tmpfs-"


def root_dir_argv(path: str, owner: tuple[int, int] | None) -> list[str]:
    """Create the RAMDISK directory: the job's user's (root's if unknown), mode 0700, so
    no other user reaches the data through the pool or the mount point."""
    uid, gid = owner or (0, 0)
    return ["install", "-d", "-o", str(uid), "-g", str(gid), "-m", "0700", "--", path]


class TmpfsBackend(FilesystemBackend):
    """A directory in one RSA node's pool, bind-mounted where staging expects it."""

    name: ClassVar[str] = "tmpfs"
    #: one node's directory; the job's user owns it, mode 0700
    capabilities: ClassVar[Capabilities] = Capabilities(multi_node=False)

    def __init__(self, hosts: Mapping[str, Host], *, create_timeout: float = 60.0,
                 destroy_timeout: float = 60.0, retries: int = 2,
                 shared_pool: bool = False) -> None:
        super().__init__(hosts, create_timeout=create_timeout,
                         destroy_timeout=destroy_timeout, retries=retries)
        self.shared_pool = shared_pool

    def _paths(self, req: FsRequest) -> tuple[str, str, str]:
        validate_fs_id(req.fs_id)
        if len(req.nodes) != 1:
            raise FsError(f"{req.fs_id}: the tmpfs backend serves exactly one RSA node, got "
                          f"{len(req.nodes)}; set allocation.max_nodes/max_request to 1 or "
                          "use moosefs")
        node = req.nodes[0]
        if node not in self.hosts or node not in req.pool_dirs:
            raise FsError(f"{req.fs_id}: no host or pool dir for {node}")
        data = f"{str(req.pool_dirs[node]).rstrip('/')}/{DIR_PREFIX}{req.fs_id}"
        return node, data, f"{str(req.mount_root).rstrip('/')}/{req.fs_id}"


    def _mounted(self, node: str, mnt: str) -> bool:
        out = self._run(node, ["findmnt", "-n", "-o", "TARGET", "--mountpoint", mnt], 30,
                        check=False)
        return bool(out.strip())

    def create(self, req: FsRequest, cancel: CancelToken | None = None) -> MountSpec:
        node, data, mnt = self._paths(req)
        spec = MountSpec(backend=self.name, fs_id=req.fs_id, nodes=(node,),
                         rsa_mountpoint=mnt,
                         client={"node": node, "path": data,
                                 "address": str(getattr(self.hosts[node], "address", node))})
        if self._mounted(node, mnt):
            if self.health(spec).ok:
                return spec
            self.destroy(req)
        with ExitStack() as undo:
            undo.callback(self._remove, node, data, mnt)
            self._run(node, sh_chain(root_dir_argv(data, req.owner), ["mkdir", "-p", mnt]),
                      self.create_timeout, cancel=cancel)
            undo.callback(self._umount, node, mnt)
            self._run(node, ["mount", "--bind", data, mnt], self.create_timeout, cancel=cancel)
            # spec.json sits next to the data (not inside it: reset must find it empty)
            self._run(node, ["dd", f"of={data}.json", "status=none"], self.create_timeout,
                      input=json.dumps(spec.to_json()), cancel=cancel)
            undo.pop_all()
        log.info("%s: tmpfs RAMDISK %s on %s mounted at %s", req.fs_id, data, node, mnt)
        return spec

    def _umount(self, node: str, mnt: str) -> None:
        if self._mounted(node, mnt):
            try:
                self._run(node, ["umount", mnt], self.destroy_timeout)
            except FsError as e:  # busy: detach now, the kernel frees it when closed
                log.warning("%s: umount %s failed (%s); lazy unmount", node, mnt, e)
                self._run(node, ["umount", "-l", mnt], self.destroy_timeout)

    def _remove(self, node: str, data: str, mnt: str) -> None:
        # rmdir for the mountpoint: if the unmount failed, never recurse into the data
        self._run(node, ["rmdir", "--ignore-fail-on-non-empty", mnt], self.destroy_timeout,
                  check=False)
        self._run(node, ["rm", "-rf", "--one-file-system", data, f"{data}.json"],
                  self.destroy_timeout)

    def destroy(self, req: FsRequest) -> None:
        node, data, mnt = self._paths(req)
        self._umount(node, mnt)
        if self._mounted(node, mnt):
            raise FsError(f"{req.fs_id}: {mnt} on {node} is still mounted; not removing data")
        self._remove(node, data, mnt)

    def health(self, spec: MountSpec, req: FsRequest | None = None) -> Health:
        node = spec.nodes[0]
        try:
            if not self._mounted(node, spec.rsa_mountpoint):
                return Health(False, f"{spec.rsa_mountpoint} is not mounted on {node}")
            self._run(node, ["test", "-d", spec.rsa_mountpoint, "-a", "-w",
                             spec.rsa_mountpoint], 30)
        except FsError as e:
            return Health(False, str(e))
        return Health(True, f"bind mount on {node}")

    def client_mount_argv(self, spec: MountSpec, mountpoint: str) -> list[str]:
        node = str(spec.client.get("node", spec.nodes[0]))
        host = self.hosts.get(node)
        if not (self.shared_pool or isinstance(host, LocalHost)):
            raise FsError(
                f"{spec.fs_id}: the tmpfs backend cannot mount {node}'s pool on another "
                "machine (no network filesystem); use moosefs or beeond, or set shared_pool "
                "if the pool is exported at the same path on compute nodes")
        return ["mount", "--bind", str(spec.client["path"]), mountpoint]
