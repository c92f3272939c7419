"""The ``beeond`` backend: BeeGFS On Demand, the production RAMDISK filesystem.

Owns :class:`BeeondBackend` and the pure builders of everything it runs: the nodefile
(:func:`nodefile`), ``beeond start``/``stop`` argv (:func:`start_argv`, :func:`stop_argv`),
the per-filesystem port shift (:func:`port_shift`) and a compute node's mount argv. Written
against the ``beeond`` script of ThinkParQ/beegfs (``beeond/source/beeond``):

- ``beeond start -n NODEFILE -d DATA -c MOUNT -i STATUS -p SHIFT -L LOGDIR -q [-P] [-f CFG]``
  runs on the first node (the management host), reaches the others over SSH (root key
  auth between RSA nodes, or pdsh with ``-P``) and mounts the client on *every* node of the
  nodefile at MOUNT. ``-p`` shifts all BeeGFS ports so several instances coexist; ``-i``
  gives each instance its own status file (start refuses if it exists).
- ``beeond stop -n NODEFILE -i STATUS -L -d -c -q [-P]``: unmount, stop the services,
  delete logs (``-L``) and data (``-d``); ``-c`` tolerates a half-started instance.
- Clients mount with ``mount -t beegfs beegfs_ondemand MNT
  -osysMgmtdHost=FIRST,connPortShift=SHIFT`` after ``modprobe beegfs`` (kernel module).

Access control: every instance has its own random connection-authentication secret
(BeeGFS ``connAuthFile``): :func:`auth_setup_argv` writes it, root-only, to
``/run/rsa-beeond/<fs_id>.auth`` on every node, with a per-instance config directory
(``<fs_id>.conf/``: the site's ``config_dir`` files, if any, plus ``connAuthFile = ...``
in each service's and the client's file) that ``beeond start -f`` reads; the client mount
names the same file (``connAuthFile=``). A BeeGFS service or client without the secret
is refused. The RAMDISK's root directory is handed to the job's user (mode 0700).

Sites wrap ``start`` in ``timeout`` ("sometimes BeeOND just hangs") and retry ``stop``;
so does this backend. It runs only where BeeGFS is installed: :meth:`BeeondBackend.create`
checks for the ``beeond`` command first and fails with one line if it is missing.

Must not import the daemon or the store.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import time
from collections.abc import Mapping, Sequence
from typing import ClassVar

from rsa_scheduler.fs.base import (
    FilesystemBackend,
    FsError,
    FsRequest,
    Health,
    MountSpec,
    Need,
    command_need,
)
from rsa_scheduler.fs.common import on_nodes, sh_chain, validate_fs_id
from rsa_scheduler.hosts import Cancelled, CancelToken, Host, HostError
from rsa_scheduler.runner import CommandError

log = logging.getLogger(__name__)

BEEOND = "beeond"
SHIFT_BASE = 1000  # beeond's own default shift
SHIFT_STEP = 10  # BeeGFS services use 8003..8008 (+ shift)
SHIFT_SLOTS = 5000  # highest port 8008 + 1000 + 49990 < 65536
STOP_BACKOFF = 2.0
RUN_DIR = "/run/rsa-beeond"
SECRET_BYTES = 32
#: the config files beeond -f reads, one per service and the client
CONFIG_FILES = ("beegfs-mgmtd.conf", "beegfs-meta.conf", "beegfs-storage.conf",
                "beegfs-helperd.conf", "beegfs-client.conf")
# On one node, as root: a fresh root-only config directory $2 (the site's files from $3,
# if given, copied in first), the secret from stdin into $1 (0600), and connAuthFile
# appended to every config file named after $3 (a later line overrides an earlier one).
AUTH_SETUP = r"""auth=$1; conf=$2; site=$3; shift 3
umask 077
mkdir -p -m 0700 "${auth%/*}" && rm -rf -- "$conf" && mkdir -m 0700 -- "$conf" || exit 1
if [ -n "$site" ]; then
  for f in "$@"; do if [ -f "$site/$f" ]; then cp -- "$site/$f" "$conf/$f" || exit 1; fi; done
fi
cat > "$auth" && chmod 0600 "$auth" || exit 1
for f in "$@"; do printf '
connAuthFile = %s
' "$auth" >> "$conf/$f" || exit 1; done
"""


def port_shift(fs_id: str) -> int:
    """A deterministic ``-p`` port shift for ``fs_id`` (several instances per node)."""
    h = int.from_bytes(hashlib.sha256(fs_id.encode()).digest()[:4], "big")
    return SHIFT_BASE + SHIFT_STEP * (h % SHIFT_SLOTS)


def nodefile(nodes: Sequence[str]) -> str:
    """beeond's node file: one host per line, the first is the management host."""
    if not nodes:
        raise FsError("beeond needs at least one node")
    if len(set(nodes)) != len(nodes):
        raise FsError(f"duplicate nodes in {', '.join(nodes)}")
    return "".join(f"{n}\n" for n in nodes)


def paths(req: FsRequest) -> dict[str, str]:
    """Every path of one instance (the data path is the same on all nodes)."""
    validate_fs_id(req.fs_id)
    pools = {str(req.pool_dirs[n]).rstrip("/") for n in req.nodes}
    if len(pools) != 1:
        raise FsError(f"{req.fs_id}: beeond uses one data path on every node; the pool "
                      f"dirs differ ({', '.join(sorted(pools))})")
    pool = pools.pop()
    return {
        "data": f"{pool}/rsa-beeond-{req.fs_id}",
        "mount": f"{str(req.mount_root).rstrip('/')}/{req.fs_id}",
        "nodefile": f"/run/rsa-beeond/{req.fs_id}.nodes",
        "status": f"/run/rsa-beeond/{req.fs_id}.status",
        "auth": f"{RUN_DIR}/{req.fs_id}.auth",
        "conf": f"{RUN_DIR}/{req.fs_id}.conf",
        "logs": f"/var/log/rsa-beeond/{req.fs_id}",
    }


def new_secret() -> str:
    """An instance's connection-authentication secret (random, 256 bits, hex)."""
    return secrets.token_hex(SECRET_BYTES)


def auth_setup_argv(req: FsRequest, site_config_dir: str | None = None) -> list[str]:
    """argv that writes ``req``'s auth file (secret on stdin) and its config directory."""
    p = paths(req)
    return ["sh", "-c", AUTH_SETUP, "rsa-beeond-auth", p["auth"], p["conf"],
            site_config_dir or "",
            *CONFIG_FILES]


def start_argv(req: FsRequest, *, timeout: float, use_pdsh: bool = False) -> list[str]:
    """``timeout -k 10 T beeond start ...`` for ``req`` (wrapped as sites do), reading
    the instance's own config directory (its connAuthFile; :func:`auth_setup_argv`)."""
    p = paths(req)
    argv = ["timeout", "-k", "10", f"{timeout:g}", BEEOND, "start", "-n", p["nodefile"],
            "-d", p["data"], "-c", p["mount"], "-i", p["status"],
            "-p", str(port_shift(req.fs_id)), "-L", p["logs"], "-F", "-q"]
    if use_pdsh:
        argv.append("-P")
    return [*argv, "-f", p["conf"]]


def stop_argv(req: FsRequest, *, timeout: float, use_pdsh: bool = False) -> list[str]:
    """``beeond stop``: unmount everywhere, stop services, delete data and logs; ``-c``
    so a half-started instance (missing status entries, failed mounts) is cleaned too."""
    p = paths(req)
    argv = ["timeout", "-k", "10", f"{timeout:g}", BEEOND, "stop", "-n", p["nodefile"],
            "-i", p["status"], "-L", "-d", "-c", "-q"]
    if use_pdsh:
        argv.append("-P")
    return argv


def client_argv(mgmtd: str, shift: int, mountpoint: str,
                auth_file: str | None = None) -> list[str]:
    """A client mount; ``auth_file`` (the instance's connAuthFile) must exist on the node."""
    opts = f"sysMgmtdHost={mgmtd},connPortShift={shift}"
    if auth_file:
        opts += f",connAuthFile={auth_file}"
    return ["mount", "-t", "beegfs", "beegfs_ondemand", mountpoint, f"-o{opts}"]


def owner_argv(mountpoint: str, owner: tuple[int, int] | None) -> list[str]:
    """Hand the RAMDISK's root to the job's user (root's if unknown), mode 0700."""
    uid, gid = owner or (0, 0)
    return ["sh", "-c", 'chown "$1" "$0" && chmod 0700 "$0"', mountpoint, f"{uid}:{gid}"]


class BeeondBackend(FilesystemBackend):
    """BeeOND over the allocated RSA nodes, driven from the first one."""

    name: ClassVar[str] = "beeond"
    node_needs: ClassVar[tuple[Need, ...]] = (
        command_need("beeond", "beeond (BeeGFS's repository)"),
        *(command_need(f"beegfs-{s}", f"beegfs-{s}") for s in ("mgmtd", "meta", "storage",
                                                              "helperd")),
        Need("kernel module beegfs", "modinfo beegfs >/dev/null 2>&1",
             "install beegfs-client and build its module (/etc/init.d/beegfs-client rebuild)"),
        command_need("findmnt", "util-linux"),
    )

    def __init__(self, hosts: Mapping[str, Host], *, create_timeout: float = 60.0,
                 destroy_timeout: float = 60.0, retries: int = 2, use_pdsh: bool = False,
                 config_dir: str | None = None, mgmtd_address: str | None = None) -> None:
        super().__init__(hosts, create_timeout=create_timeout,
                         destroy_timeout=destroy_timeout, retries=retries)
        self.use_pdsh = use_pdsh
        self.config_dir = config_dir
        self.mgmtd_address = mgmtd_address  # what compute nodes use; default: node name
        self.stop_backoff = STOP_BACKOFF  # seconds, times the attempt number

    def _first(self, req: FsRequest) -> Host:
        if not req.nodes:
            raise FsError(f"{req.fs_id}: no RSA nodes given")
        missing = [n for n in req.nodes if n not in self.hosts]
        if missing:
            raise FsError(f"{req.fs_id}: no host for {', '.join(missing)}")
        return self.hosts[req.nodes[0]]

    def _spec(self, req: FsRequest) -> MountSpec:
        p = paths(req)
        return MountSpec(backend=self.name, fs_id=req.fs_id, nodes=tuple(req.nodes),
                         rsa_mountpoint=p["mount"],
                         client={"mgmtd_host": self.mgmtd_address or req.nodes[0],
                                 "port_shift": port_shift(req.fs_id),
                                 "conn_auth_file": p["auth"]})

    def _write_auth(self, req: FsRequest, secret: str, cancel: CancelToken | None) -> None:
        """The auth file and config directory on every node (servers and clients)."""
        argv = auth_setup_argv(req, self.config_dir)
        on_nodes(req.nodes, lambda n: self.hosts[n].run(argv, timeout=30, input=secret,
                                                         cancel=cancel),
                 f"{req.fs_id}: write the connAuthFile")

    def _remove_auth(self, req: FsRequest) -> None:
        p = paths(req)
        on_nodes(req.nodes, lambda n: self.hosts[n].run(
            ["rm", "-rf", "--", p["auth"], p["conf"]], timeout=30, check=False),
            f"{req.fs_id}: remove the connAuthFile")

    def installed(self, req: FsRequest) -> bool:
        r = self._first(req).run(["sh", "-c", f"command -v {BEEOND}"], timeout=30,
                                 check=False)
        return r.returncode == 0

    def create(self, req: FsRequest, cancel: CancelToken | None = None) -> MountSpec:
        first = self._first(req)
        p = paths(req)
        if not self.installed(req):
            raise FsError(f"{req.fs_id}: beeond is not installed on {req.nodes[0]} (BeeGFS "
                          "packages beeond, beegfs-client); install it or choose moosefs")
        if first.run(["test", "-e", p["status"]], timeout=30, check=False).returncode == 0:
            spec = self._spec(req)
            auth = first.run(["test", "-s", p["auth"]], timeout=30, check=False)
            if auth.returncode == 0 and self.health(spec).ok:
                log.info("%s: beeond already running, reusing it", req.fs_id)
                return spec
            self.destroy(req)
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            if cancel is not None:
                cancel.check()
            try:
                secret = new_secret()
                self._write_auth(req, secret, cancel)
                first.run(sh_chain(["mkdir", "-p", "-m", "0700", RUN_DIR],
                                   ["dd", f"of={p['nodefile']}", "status=none"]),
                          timeout=30, input=nodefile(req.nodes), cancel=cancel)
                first.run(start_argv(req, timeout=self.create_timeout,
                                     use_pdsh=self.use_pdsh),
                          timeout=self.create_timeout + 15, cancel=cancel)
                first.run(owner_argv(p["mount"], req.owner), timeout=30, cancel=cancel)
                return self._spec(req)
            except Cancelled:
                self.destroy(req)  # the cleanup stack of a beeond start is `stop -c`
                raise
            except (CommandError, HostError, FsError) as e:
                last = e
                log.warning("%s: beeond start attempt %d/%d failed: %s", req.fs_id,
                            attempt + 1, self.retries + 1, e)
                self._stop(req)
        raise FsError(f"{req.fs_id}: beeond start failed after {self.retries + 1} attempts: "
                      f"{last}") from last

    def _stop(self, req: FsRequest) -> Exception | None:
        """One ``beeond stop -c`` run; the error, if any (never raises)."""
        try:
            self._first(req).run(stop_argv(req, timeout=self.destroy_timeout,
                                           use_pdsh=self.use_pdsh),
                                 timeout=self.destroy_timeout + 15)
            return None
        except (CommandError, HostError) as e:
            return e

    def destroy(self, req: FsRequest) -> None:
        first = self._first(req)
        p = paths(req)
        if first.run(["test", "-e", p["nodefile"]], timeout=30, check=False).returncode:
            # never started (or already stopped): write the nodefile so stop -c can
            # sweep anything a crashed start left behind
            first.run(sh_chain(["mkdir", "-p", "-m", "0700", RUN_DIR],
                               ["dd", f"of={p['nodefile']}", "status=none"]),
                      timeout=30, input=nodefile(req.nodes))
        err: Exception | None = None
        for attempt in range(self.retries + 1):
            err = self._stop(req)
            if err is None:
                break
            log.warning("%s: beeond stop attempt %d failed: %s", req.fs_id, attempt + 1, err)
            if attempt < self.retries:
                time.sleep(self.stop_backoff * (attempt + 1))
        if err is not None:
            raise FsError(f"{req.fs_id}: beeond stop failed after {self.retries + 1} "
                          f"attempts: {err}") from err
        first.run(["rm", "-f", p["nodefile"], p["status"]], timeout=30, check=False)
        self._remove_auth(req)

    def health(self, spec: MountSpec, req: FsRequest | None = None) -> Health:
        def check(node: str) -> str:
            r = self.hosts[node].run(sh_chain(
                ["findmnt", "-n", "-t", "beegfs", "--mountpoint", spec.rsa_mountpoint],
                ["timeout", "-s", "KILL", "8", "stat", "-f", spec.rsa_mountpoint]),
                timeout=15, check=False)
            return "" if r.returncode == 0 else "not mounted or not answering"

        try:
            bad = {n: p for n, p in on_nodes(spec.nodes, check, "health").items() if p}
        except FsError as e:
            return Health(False, str(e))
        if bad:
            return Health(False, "; ".join(f"{n}: {p}" for n, p in bad.items()))
        return Health(True, f"beegfs mounted on {len(spec.nodes)} nodes")

    def client_mount_argv(self, spec: MountSpec, mountpoint: str) -> list[str]:
        """The compute node must hold the instance's connAuthFile (the same path as on
        the RSA nodes, copied from the first one); a spec recorded before access control
        names none."""
        auth = spec.client.get("conn_auth_file")
        return client_argv(str(spec.client["mgmtd_host"]), int(spec.client["port_shift"]),
                           mountpoint, str(auth) if auth else None)
