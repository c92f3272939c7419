"""The ``beeond`` backend: BeeGFS On Demand, a RAMDISK filesystem for production sites
(its command lines are tested against scripted hosts; no real BeeGFS runs here).

Owns :class:`BeeondOptions` (what a site sets, ``filesystem.beeond`` of the
configuration), :class:`BeeondBackend` and the pure builders of everything it runs: the
nodefile (:func:`nodefile`), ``beeond start``/``stop`` argv (:func:`start_argv`,
:func:`stop_argv`), the per-filesystem port shift (:func:`pick_shift`), the instance's
config directory (:func:`auth_setup_argv`), the client mount (:func:`client_argv`) and
what a node needs (:func:`needs_for`). Written against the ``beeond`` script of
ThinkParQ/beegfs (``beeond/source/beeond``, releases 7.4 and 8.x; the differences are in
:mod:`rsa_scheduler.fs.beegfs`):

- ``beeond start -n NODEFILE -d DATA -c MOUNT -i STATUS -p SHIFT -L LOGDIR -F -q -s N
  -m N [-r] [-l] [-P [-b PDSH]] -f CONF [-C]`` runs on the first node (the management
  host), reaches the others over SSH (root key auth between RSA nodes, or pdsh with
  ``-P``) and mounts the client on *every* node of the nodefile at MOUNT. ``-p`` shifts
  all BeeGFS ports so several instances coexist: a multiple of 10 in the site's range,
  drawn at random among those whose ports no socket on the job's nodes holds (``ss``),
  recorded on the first node (``<fs_id>.shift``) and in the mount spec; ``-i`` gives each
  instance its own status file (start refuses if it exists). ``-s``/``-m``: servers on
  the first N nodes (0: all); ``-r``: a tmpfs of beeond's own over DATA; ``-l``: clients
  prefer local servers. ``-C`` (BeeGFS 8) must follow ``-f``: it reads ``CONF/conn.auth``.
- ``beeond stop -n NODEFILE -i STATUS [-L] -d -c -q [-P [-b PDSH]]``: unmount, stop the
  services, delete logs (``-L``) and data (``-d``); ``-c`` tolerates a half-started
  instance.
- Compute nodes mount with ``mount -t beegfs beegfs_ondemand MNT -o sysMgmtdHost=FIRST,
  connPortShift=SHIFT,<client options>,cfgFile=...`` (the kernel module refuses unknown
  options; BeeGFS 7 has no ``connAuthFile`` mount option, so the secret reaches the
  client through a config file on both releases).

Access control: every instance has its own random connection-authentication secret
(BeeGFS ``connAuthFile``): :func:`auth_setup_argv` writes it, root-only, on every RSA node
(BeeGFS 8: ``<conf>/conn.auth``, which ``beeond start -C`` hands to every service and
client; BeeGFS 7: ``/run/rsa-beeond/<fs_id>.auth``, named by a ``connAuthFile`` line in
each service's and the client's config file), in a per-instance config directory
(``<fs_id>.conf/``: the site's ``config_dir`` files, if any, then rsad's lines) that
``beeond start -f`` reads. A compute node gets the secret with its mount instruction
(:meth:`BeeondBackend.client_mount_argv`, option ``rsaConnAuth=``) and writes it to a
root-only file before it mounts (``node.mounts.secret_to_file``). A BeeGFS service or
client without the secret is refused. The RAMDISK's root directory is handed to the
job's user (mode 0700).

Sites wrap ``start`` in ``timeout`` ("sometimes BeeOND just hangs") and retry ``stop``;
so does this backend. It runs only where BeeGFS is installed: :meth:`BeeondBackend.create`
checks for the ``beeond`` command first and fails with one line if it is missing.

Must not import the daemon, the store or the configuration (it gets its settings as
:class:`~rsa_scheduler.fs.base.BackendSettings`: :meth:`BeeondBackend.check_settings`,
:meth:`BeeondBackend.config_options`).
"""

from __future__ import annotations

import logging
import re
import secrets
import shlex
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from rsa_scheduler.core.policy import Tier
from rsa_scheduler.fs import beegfs
from rsa_scheduler.fs.base import (
    BackendSettings,
    FilesystemBackend,
    FsError,
    FsRequest,
    Health,
    MountSpec,
    Need,
    SettingProblem,
    command_need,
)
from rsa_scheduler.fs.common import listening_ports, on_nodes, sh_chain, validate_fs_id
from rsa_scheduler.hosts import Cancelled, CancelToken, Host, HostError
from rsa_scheduler.runner import CommandError

log = logging.getLogger(__name__)

BEEOND = "beeond"
RUN_DIR = "/run/rsa-beeond"
SECRET_BYTES = 32
SECRET_OPTION = beegfs.SECRET_OPTION  # carries the secret to a compute node
_SECRET_RE = re.compile(r"[0-9a-f]{64}")
# On one node, as root: a fresh root-only config directory $2 (the site's files from $3,
# if given, copied in first), the secret from stdin into $1 (0600); if $4 is 1,
# connAuthFile appended to every config file (BeeGFS 7; a later line overrides an earlier
# one); the client's extra options $5 (lines) appended to beegfs-client.conf.
AUTH_SETUP = r"""auth=$1; conf=$2; site=$3; name_auth=$4; client=$5; shift 5
umask 077
mkdir -p -m 0700 "${conf%/*}" && rm -rf -- "$conf" && mkdir -m 0700 -- "$conf" || exit 1
mkdir -p -m 0700 "${auth%/*}" || exit 1
if [ -n "$site" ]; then
  for f in "$@"; do if [ -f "$site/$f" ]; then cp -- "$site/$f" "$conf/$f" || exit 1; fi; done
fi
cat > "$auth" && chmod 0600 "$auth" || exit 1
if [ "$name_auth" = 1 ]; then
  for f in "$@"; do printf '\nconnAuthFile = %s\n' "$auth" >> "$conf/$f" || exit 1; done
fi
if [ -n "$client" ]; then
  printf '\n%s\n' "$client" >> "$conf/beegfs-client.conf" || exit 1
fi
"""


@dataclass(frozen=True, slots=True)
class BeeondOptions:
    """What a site sets for BeeOND (``filesystem.beeond``; the defaults are the shipped
    ones). The loader validated them; :meth:`check` repeats what a wrong value would
    break here, for callers that build options by hand."""

    beegfs_major: int = 8
    storage_servers: int = 0  # beeond -s; 0: every node
    metadata_servers: int = 1  # beeond -m; 0: every node
    tmpfs: bool = False  # beeond -r
    prefer_local: bool = False  # beeond -l
    use_pdsh: bool = False  # beeond -P
    pdsh_path: str | None = None  # beeond -b
    config_dir: str | None = None  # the site's files, copied into beeond -f's directory
    log_dir: str = "/var/log/rsa-beeond"
    keep_logs: bool = False  # else beeond stop -L
    port_shift_min: int = 1000
    port_shift_max: int = 24750
    kill_after: float = 10.0  # timeout -k
    stop_backoff: float = 2.0  # seconds, times the attempt number
    client_options: tuple[str, ...] = ()

    def check(self) -> None:
        """Raise FsError (one line) for a value beeond or the client would refuse."""
        if self.beegfs_major not in beegfs.MAJORS:
            raise FsError(f"BeeGFS {self.beegfs_major} is not supported (7 or 8)")
        try:
            beegfs.check_shift_range(self.port_shift_min, self.port_shift_max)
            for option in self.client_options:
                beegfs.check_client_option(option, self.beegfs_major)
        except ValueError as e:
            raise FsError(f"beeond: {e}") from e
        if self.storage_servers < 0 or self.metadata_servers < 0:
            raise FsError("beeond: server counts must be >= 0")
        if self.pdsh_path and not self.use_pdsh:
            raise FsError("beeond: pdsh_path is set but use_pdsh is false")


DEFAULT = BeeondOptions()


#: every TCP and UDP socket bound on a node (BeeGFS services take both kinds of port)
PORTS_ARGV = ["sh", "-c", "ss -Hltn && ss -Hlun"]


def shifts(opts: BeeondOptions = DEFAULT) -> list[int]:
    """Every ``-p`` port shift of the site's range: SHIFT_STEP apart from its minimum."""
    slots = beegfs.shift_slots(opts.port_shift_min, opts.port_shift_max)
    return [opts.port_shift_min + beegfs.SHIFT_STEP * i for i in range(slots)]


def shift_ports(shift: int) -> range:
    """The ports an instance with this shift may use (BeeGFS's 8003..8010 + shift)."""
    return range(beegfs.BASE_PORT_LOW + shift, beegfs.BASE_PORT_HIGH + shift + 1)


def pick_shift(busy: set[int], opts: BeeondOptions = DEFAULT) -> int:
    """A ``-p`` shift drawn at random among the site's shifts none of whose ports is in
    ``busy`` (what listens on the job's nodes: other RAMDISKs, other services), so
    several instances share a node and nothing public predicts an instance's ports."""
    free = [s for s in shifts(opts) if not busy.intersection(shift_ports(s))]
    if not free:
        raise FsError(f"no free BeeGFS port shift in {opts.port_shift_min}.."
                      f"{opts.port_shift_max}: every one has a port in use on the job's "
                      "RSA nodes; widen filesystem.beeond.port_shift_min/max")
    return free[secrets.randbelow(len(free))]


def nodefile(nodes: Sequence[str]) -> str:
    """beeond's node file: one host per line, the first is the management host."""
    if not nodes:
        raise FsError("beeond needs at least one node")
    if len(set(nodes)) != len(nodes):
        raise FsError(f"duplicate nodes in {', '.join(nodes)}")
    return "".join(f"{n}\n" for n in nodes)


def paths(req: FsRequest, opts: BeeondOptions = DEFAULT) -> dict[str, str]:
    """Every path of one instance (the data path is the same on all nodes)."""
    validate_fs_id(req.fs_id)
    pools = {str(req.pool_dirs[n]).rstrip("/") for n in req.nodes}
    if len(pools) != 1:
        raise FsError(f"{req.fs_id}: beeond uses one data path on every node; the pool "
                      f"dirs differ ({', '.join(sorted(pools))})")
    pool = pools.pop()
    conf = f"{RUN_DIR}/{req.fs_id}.conf"
    auth = (f"{conf}/{beegfs.CONN_AUTH_NAME}" if opts.beegfs_major >= 8
            else f"{RUN_DIR}/{req.fs_id}.auth")
    return {
        "data": f"{pool}/rsa-beeond-{req.fs_id}",
        "mount": f"{str(req.mount_root).rstrip('/')}/{req.fs_id}",
        "nodefile": f"{RUN_DIR}/{req.fs_id}.nodes",
        "status": f"{RUN_DIR}/{req.fs_id}.status",
        "shift": f"{RUN_DIR}/{req.fs_id}.shift",
        "auth": auth,
        "conf": conf,
        "logs": f"{opts.log_dir.rstrip('/')}/{req.fs_id}",
    }


def new_secret() -> str:
    """An instance's connection-authentication secret (random, 256 bits, hex)."""
    return secrets.token_hex(SECRET_BYTES)


def client_conf_lines(opts: BeeondOptions) -> str:
    """The site's client options as ``beegfs-client.conf`` lines (``key = value``)."""
    return "\n".join(" = ".join(o.split("=", 1)) for o in opts.client_options)


def auth_setup_argv(req: FsRequest, opts: BeeondOptions = DEFAULT) -> list[str]:
    """argv that writes ``req``'s auth file (secret on stdin) and its config directory."""
    p = paths(req, opts)
    return ["sh", "-c", AUTH_SETUP, "rsa-beeond-auth", p["auth"], p["conf"],
            opts.config_dir or "", "1" if opts.beegfs_major < 8 else "0",
            client_conf_lines(opts), *beegfs.CONFIG_FILES[opts.beegfs_major]]


def _timeout(seconds: float, opts: BeeondOptions) -> list[str]:
    return ["timeout", "-k", f"{opts.kill_after:g}", f"{seconds:g}"]


def _pdsh(opts: BeeondOptions) -> list[str]:
    if not opts.use_pdsh:
        return []
    return ["-P", *(["-b", opts.pdsh_path] if opts.pdsh_path else [])]


def start_argv(req: FsRequest, *, timeout: float, shift: int,
               opts: BeeondOptions = DEFAULT) -> list[str]:
    """``timeout -k K T beeond start ...`` for ``req`` (wrapped as sites do), reading the
    instance's own config directory (its secret; :func:`auth_setup_argv`). ``-f`` comes
    before ``-C``: beeond looks for ``conn.auth`` in the directory already given."""
    p = paths(req, opts)
    argv = [*_timeout(timeout, opts), BEEOND, "start", "-n", p["nodefile"],
            "-d", p["data"], "-c", p["mount"], "-i", p["status"],
            "-p", str(shift), "-L", p["logs"], "-F", "-q",
            "-s", str(opts.storage_servers), "-m", str(opts.metadata_servers)]
    if opts.tmpfs:
        argv.append("-r")
    if opts.prefer_local:
        argv.append("-l")
    argv += [*_pdsh(opts), "-f", p["conf"]]
    if opts.beegfs_major >= 8:
        argv.append("-C")
    return argv


def stop_argv(req: FsRequest, *, timeout: float, opts: BeeondOptions = DEFAULT) -> list[str]:
    """``beeond stop``: unmount everywhere, stop services, delete data (and logs unless
    kept); ``-c`` so a half-started instance (missing status entries, failed mounts) is
    cleaned too."""
    p = paths(req, opts)
    return [*_timeout(timeout, opts), BEEOND, "stop", "-n", p["nodefile"],
            "-i", p["status"], *([] if opts.keep_logs else ["-L"]), "-d", "-c", "-q",
            *_pdsh(opts)]


def client_argv(mgmtd: str, shift: int, mountpoint: str, options: Sequence[str] = (),
                secret: str | None = None) -> list[str]:
    """A compute node's mount. ``secret``: the instance's connAuth secret, as the
    ``rsaConnAuth=`` option the node turns into a root-only config file (``cfgFile=``)
    before it runs mount."""
    opts = [f"sysMgmtdHost={mgmtd}", f"connPortShift={shift}", *options]
    if secret:
        opts.append(f"{SECRET_OPTION}={secret}")
    return ["mount", "-t", "beegfs", "beegfs_ondemand", mountpoint, "-o", ",".join(opts)]


def owner_argv(mountpoint: str, owner: tuple[int, int] | None) -> list[str]:
    """Hand the RAMDISK's root to the job's user (root's if unknown), mode 0700."""
    uid, gid = owner or (0, 0)
    return ["sh", "-c", 'chown "$1" "$0" && chmod 0700 "$0"', mountpoint, f"{uid}:{gid}"]


def _executable(path: str, what: str, fix: str) -> Need:
    return Need(what, f"[ -x {shlex.quote(path)} ]", fix)


def ports_need(opts: BeeondOptions, sysctl: str = "/proc/sys/net/ipv4") -> Need:
    """The instances' ports must lie outside the node's ephemeral port range (or be
    reserved, exactly this range): else any outgoing connection can take a port a
    RAMDISK's server needs, and its start fails."""
    lo, hi = beegfs.port_range(opts.port_shift_min, opts.port_shift_max)
    rng = shlex.quote(f"{sysctl}/ip_local_port_range")
    res = shlex.quote(f"{sysctl}/ip_local_reserved_ports")
    test = (f'read e_lo e_hi < {rng} && {{ [ "$e_lo" -gt {hi} ] || [ "$e_hi" -lt {lo} ] '
            f'|| case ",$(cat {res} 2>/dev/null)," in *,{lo}-{hi},*) true ;; '
            "*) false ;; esac; }")
    return Need(f"BeeGFS ports {lo}-{hi} outside the ephemeral port range", test,
                "set filesystem.beeond.port_shift_max so that 8010 + it is below the "
                "start of net.ipv4.ip_local_port_range, or reserve them: sysctl -w "
                f"net.ipv4.ip_local_reserved_ports={lo}-{hi}")


def needs_for(opts: BeeondOptions) -> tuple[Need, ...]:
    """What every RSA node needs for BeeOND with ``opts`` (``rsa nodes check``)."""
    major = opts.beegfs_major
    repo = f"BeeGFS {major}'s repository"
    needs: list[Need] = [
        command_need(BEEOND, f"beeond ({repo})"),
        Need("root's login shell /bin/bash",
             '[ "$(getent passwd root | cut -d: -f7)" = /bin/bash ]',
             "chsh -s /bin/bash root (beeond refuses a node whose root shell is not bash)"),
        *(_executable(f"{beegfs.SBIN}/{s}", f"{beegfs.SBIN}/{s}",
                      f"install {s} ({repo}); beeond starts it from there")
          for s in beegfs.SERVICES[major]),
        Need("kernel module beegfs", "modinfo beegfs >/dev/null 2>&1",
             "install beegfs-client and build its module"
             + (" (DKMS)" if major >= 8 else " (/etc/init.d/beegfs-client rebuild)")),
    ]
    if major >= 8:
        needs += [
            Need("mount helper mount.beegfs",
                 "[ -x /sbin/mount.beegfs ] || [ -x /usr/sbin/mount.beegfs ]",
                 "install beegfs-client (the helper resolves sysMgmtdHost for the module)"),
            command_need("beegfs", f"beegfs-tools ({repo}; beeond waits with it)"),
        ]
    else:
        needs.append(command_need("beegfs-ctl", f"beegfs-utils ({repo}; beeond waits "
                                                "with it)"))
    needs.append(command_need("ss", "iproute2 (rsad looks for free ports with it)"))
    if opts.use_pdsh:
        needs.append(_executable(opts.pdsh_path, f"pdsh {opts.pdsh_path}",
                                 "install pdsh there or fix filesystem.beeond.pdsh_path")
                     if opts.pdsh_path else command_need("pdsh", "pdsh (use_pdsh)"))
    if opts.config_dir:
        q = shlex.quote(opts.config_dir)
        needs.append(Need(f"config directory {opts.config_dir}", f"[ -d {q} ]",
                          "create it on every RSA node with the site's BeeGFS config "
                          "files (filesystem.beeond.config_dir)"))
    for option in opts.client_options:
        key, _, value = option.partition("=")
        if key in ("connInterfacesList", "tunePreferredMetaFile",
                   "tunePreferredStorageFile"):
            needs.append(Need(f"file {value} ({key})", f"[ -f {shlex.quote(value)} ]",
                              "create it on every RSA and compute node "
                              "(filesystem.beeond.client_options)"))
    needs.append(ports_need(opts))
    needs.append(command_need("findmnt", "util-linux"))
    return tuple(needs)


class BeeondBackend(FilesystemBackend):
    """BeeOND over the allocated RSA nodes, driven from the first one."""

    name: ClassVar[str] = "beeond"
    #: with the shipped options; :meth:`needs` has the configured ones
    node_needs: ClassVar[tuple[Need, ...]] = needs_for(DEFAULT)

    def __init__(self, hosts: Mapping[str, Host], *, create_timeout: float = 60.0,
                 destroy_timeout: float = 60.0, retries: int = 2,
                 options: BeeondOptions = DEFAULT,
                 addresses: Mapping[str, str] | None = None) -> None:
        super().__init__(hosts, create_timeout=create_timeout,
                         destroy_timeout=destroy_timeout, retries=retries)
        options.check()
        self.options = options
        # what compute nodes reach a node's mgmtd at (pool.nodes[].data_address); default:
        # the node name
        self.addresses = dict(addresses or {})
        self.stop_backoff = options.stop_backoff

    @classmethod
    def check_settings(cls, settings: BackendSettings) -> list[SettingProblem]:
        o = settings.options
        if not o:
            return []
        out: list[SettingProblem] = []
        try:
            beegfs.check_shift_range(o["port_shift_min"], o["port_shift_max"])
        except ValueError as e:
            out.append(SettingProblem(("port_shift_max",), str(e)))
        for i, option in enumerate(o["client_options"]):
            try:
                beegfs.check_client_option(option, o["beegfs_major"])
            except ValueError as e:
                out.append(SettingProblem(("client_options", i), str(e)))
        if o["pdsh_path"] is not None and not o["use_pdsh"]:
            out.append(SettingProblem(("pdsh_path",), "set, but use_pdsh is false; set "
                                      "use_pdsh: true or remove pdsh_path"))
        if o["storage"] == "tmpfs" and Tier.SSD in settings.tiers:
            out.append(SettingProblem(("storage",), "tmpfs would keep the ssd tier's "
                                      "RAMDISKs in RAM; use pool_dir (or another backend "
                                      "for ssd)"))
        return out

    @classmethod
    def config_options(cls, settings: BackendSettings) -> dict[str, Any]:
        o = settings.options
        if not o:
            return {"addresses": dict(settings.addresses)}
        opts = BeeondOptions(
            beegfs_major=o["beegfs_major"], storage_servers=o["storage_servers"],
            metadata_servers=o["metadata_servers"], tmpfs=o["storage"] == "tmpfs",
            prefer_local=o["prefer_local"], use_pdsh=o["use_pdsh"],
            pdsh_path=str(o["pdsh_path"]) if o["pdsh_path"] else None,
            config_dir=str(o["config_dir"]) if o["config_dir"] else None,
            log_dir=str(o["log_dir"]), keep_logs=o["keep_logs"],
            port_shift_min=o["port_shift_min"], port_shift_max=o["port_shift_max"],
            kill_after=o["kill_after"], stop_backoff=o["stop_backoff"],
            client_options=tuple(o["client_options"]))
        return {"options": opts, "addresses": dict(settings.addresses)}

    def needs(self) -> tuple[Need, ...]:
        return needs_for(self.options)

    def compute_needs(self) -> tuple[Need, ...]:
        """The client: the kernel module and (BeeGFS 8) the mount helper."""
        return tuple(n for n in needs_for(self.options)
                     if n.what in ("kernel module beegfs", "mount helper mount.beegfs")
                     or n.what.startswith("file "))

    def _first(self, req: FsRequest) -> Host:
        if not req.nodes:
            raise FsError(f"{req.fs_id}: no RSA nodes given")
        missing = [n for n in req.nodes if n not in self.hosts]
        if missing:
            raise FsError(f"{req.fs_id}: no host for {', '.join(missing)}")
        return self.hosts[req.nodes[0]]

    def _spec(self, req: FsRequest, shift: int) -> MountSpec:
        p = paths(req, self.options)
        first = req.nodes[0]
        return MountSpec(backend=self.name, fs_id=req.fs_id, nodes=tuple(req.nodes),
                         rsa_mountpoint=p["mount"],
                         client={"mgmtd_host": self.addresses.get(first) or first,
                                 "port_shift": shift,
                                 "conn_auth_file": p["auth"],
                                 "options": list(self.options.client_options)})

    def _write_auth(self, req: FsRequest, secret: str, cancel: CancelToken | None) -> None:
        """The auth file and config directory on every node (servers and clients)."""
        argv = auth_setup_argv(req, self.options)
        on_nodes(req.nodes, lambda n: self.hosts[n].run(argv, timeout=30, input=secret,
                                                         cancel=cancel),
                 f"{req.fs_id}: write the connAuthFile")

    def _remove_auth(self, req: FsRequest) -> None:
        p = paths(req, self.options)
        on_nodes(req.nodes, lambda n: self.hosts[n].run(
            ["rm", "-rf", "--", p["auth"], p["conf"]], timeout=30, check=False),
            f"{req.fs_id}: remove the connAuthFile")

    def installed(self, req: FsRequest) -> bool:
        r = self._first(req).run(["sh", "-c", f"command -v {BEEOND}"], timeout=30,
                                 check=False)
        return r.returncode == 0

    def _write_nodefile(self, req: FsRequest, cancel: CancelToken | None = None) -> None:
        self._first(req).run(sh_chain(["mkdir", "-p", "-m", "0700", RUN_DIR],
                                      ["dd", f"of={paths(req, self.options)['nodefile']}",
                                       "status=none"]),
                             timeout=30, input=nodefile(req.nodes), cancel=cancel)

    def _choose_shift(self, req: FsRequest, cancel: CancelToken | None) -> int:
        """A free shift on every node of the job, recorded on the first one."""
        def busy(node: str) -> set[int]:
            out = self.hosts[node].run(PORTS_ARGV, timeout=30, cancel=cancel).stdout
            return listening_ports(out)

        found = on_nodes(req.nodes, busy, f"{req.fs_id}: look for free BeeGFS ports")
        shift = pick_shift(set().union(*found.values()), self.options)
        self._first(req).run(["dd", f"of={paths(req, self.options)['shift']}",
                              "status=none"], timeout=30, input=f"{shift}\n", cancel=cancel)
        return shift

    def _recorded_shift(self, req: FsRequest) -> int | None:
        """The shift a running instance was started with (None: not recorded)."""
        r = self._first(req).run(["cat", "--", paths(req, self.options)["shift"]],
                                 timeout=30, check=False)
        text = r.stdout.strip()
        return int(text) if r.returncode == 0 and text.isdigit() else None

    def create(self, req: FsRequest, cancel: CancelToken | None = None) -> MountSpec:
        first = self._first(req)
        p = paths(req, self.options)
        if not self.installed(req):
            raise FsError(f"{req.fs_id}: beeond is not installed on {req.nodes[0]} (BeeGFS "
                          "packages beeond, beegfs-client); install it or choose moosefs")
        if first.run(["test", "-e", p["status"]], timeout=30, check=False).returncode == 0:
            shift = self._recorded_shift(req)
            auth = first.run(["test", "-s", p["auth"]], timeout=30, check=False)
            if shift is not None and auth.returncode == 0:
                spec = self._spec(req, shift)
                if self.health(spec).ok:
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
                self._write_nodefile(req, cancel)
                shift = self._choose_shift(req, cancel)
                first.run(start_argv(req, timeout=self.create_timeout, shift=shift,
                                     opts=self.options),
                          timeout=self.create_timeout + self.options.kill_after + 5,
                          cancel=cancel)
                first.run(owner_argv(p["mount"], req.owner), timeout=30, cancel=cancel)
                return self._spec(req, shift)
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
                                           opts=self.options),
                                 timeout=self.destroy_timeout + self.options.kill_after + 5)
            return None
        except (CommandError, HostError) as e:
            return e

    def destroy(self, req: FsRequest) -> None:
        first = self._first(req)
        p = paths(req, self.options)
        if first.run(["test", "-e", p["nodefile"]], timeout=30, check=False).returncode:
            # never started (or already stopped): write the nodefile so stop -c can
            # sweep anything a crashed start left behind
            self._write_nodefile(req)
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
        first.run(["rm", "-f", p["nodefile"], p["status"], p["shift"]], timeout=30,
                  check=False)
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
        """The compute node's mount, with the instance's secret read from the first RSA
        node's auth file as ``rsaConnAuth=``: the node moves it into a root-only
        connAuthFile and a client config file naming it (``cfgFile=``) before it runs
        mount, so it never appears in the node's process table. The site's client
        options are the ones the RAMDISK was built with. A spec recorded before access
        control names no auth file: its instance has none."""
        c: Mapping[str, Any] = spec.client
        auth = c.get("conn_auth_file")
        return client_argv(str(c["mgmtd_host"]), int(c["port_shift"]), mountpoint,
                           [str(o) for o in c.get("options") or ()],
                           self._secret(spec, str(auth)) if auth else None)

    def _secret(self, spec: MountSpec, path: str) -> str:
        node = spec.nodes[0]
        if node not in self.hosts:
            raise FsError(f"{spec.fs_id}: no host for {node}, which holds the RAMDISK's "
                          "access secret")
        secret = self._run(node, ["cat", "--", path], 15).strip()
        if not _SECRET_RE.fullmatch(secret):
            raise FsError(f"{spec.fs_id}: {node}:{path} holds no access secret; the "
                          "RAMDISK is damaged: rebuild it (rsa retry)")
        return secret
