"""On-demand MooseFS RAMDISKs over the allocated RSA nodes' pools.

Owns :class:`MooseFsBackend`: building, checking, repairing and destroying filesystems on
the RSA nodes, and the compute nodes' mount argv. What a filesystem is on paper (paths,
ports, configs, the secret and exports) is :mod:`rsa_scheduler.fs.mfslayout`'s; the shell it
runs on the nodes, and the parser of ``mfscli``, :mod:`rsa_scheduler.fs.mfsscripts`'s.

One filesystem = one ``mfsmaster`` on the first node, one ``mfschunkserver`` per node
with its chunks in that node's pool (tmpfs for ``ram``, disk for ``ssd``), and
``mfsmount`` at ``<mount_root>/<fs_id>`` on every node so staging runs on all of them in
parallel. One copy, no trash (no replication, no trash: a throw-away scratch filesystem,
like BeeOND): goal 1 and trash time 0 on MooseFS 3.0, a storage class of one copy and trash
retention 0 on 4.x. Each node's MooseFS release is asked of its tools at every create
(:mod:`rsa_scheduler.fs.mfsversion` owns what differs); a RAMDISK's nodes must share one.

Everything of a filesystem lives in ``<pool_dir>/rsa-mfs-<fs_id>/`` on each node (configs,
master metadata, chunkserver state, chunks, the mount password file, ``spec.json`` written
last on the master node as the "complete" mark), root-only (0700), so several jobs'
filesystems coexist and destroy frees the pool by removing one directory. Ports are a
block drawn at random per filesystem (nothing public predicts them), skipping ports
already listening on the nodes, and recorded in the mount spec.

Access control (docs/filesystems.md, "Who can reach a RAMDISK"): every filesystem has a
random secret; the master exports it only with ``password=<secret>`` and only to the RSA
nodes' addresses and the configured client networks. The secret exists only in root-only
files on the RSA nodes (never in the mount spec, so never in rsad's event log or views):
RSA nodes' mounts read it from a config file (``-c``), a compute node's mount argv gets it
from the first node when rsad builds it. The RAMDISK's root directory belongs to the
job's user, mode 0700.

MooseFS refuses a loopback master ("localhost can't be used for connecting with master",
any 127.0.0.0/8 address): the servers bind to each node's *data address* (``addresses``),
which must be a non-loopback address routable from the other RSA nodes and from the
compute nodes. See docs/filesystems.md for the lab's arrangement.

Must not import the daemon, the store or the configuration; it only talks to
:class:`Host` objects.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import re
import socket
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from typing import Any, ClassVar

from rsa_scheduler.fs import mfsproxy
from rsa_scheduler.fs.base import (
    BackendSettings,
    FilesystemBackend,
    FsError,
    FsRequest,
    Health,
    MountSpec,
    Need,
    NodeFacts,
    SettingProblem,
    command_need,
)
from rsa_scheduler.fs.common import (
    Deadline,
    listening_ports,
    on_nodes,
    sh_all,
    sh_chain,
    validate_fs_id,
)
from rsa_scheduler.fs.mfslayout import (
    MAX_NODES,
    PASS_FILE,
    PORT_BASE,
    PORT_BLOCK,
    PORT_SLOTS,
    Layout,
    export_ranges,
    is_loopback,
    new_secret,
    random_base,
    standby_ports,
)
from rsa_scheduler.fs.mfsscripts import (
    CS_START,
    DAEMON_START,
    KILL_SERVERS,
    MOUNT_CHECK,
    PROBE_SCRIPT,
    REPAIR_SCRIPT,
    SERVERS_CHECK,
    SPACE_WAIT,
    STANDBY_START,
    UMOUNT_SCRIPT,
)
from rsa_scheduler.fs.mfsversion import (
    FINGERPRINT_SCRIPT,
    LEGACY,
    VERSION_SCRIPT,
    Dialect,
    Version,
    node_version,
    parse_fingerprint,
    parse_versions,
    same_release,
    version_facts,
)
from rsa_scheduler.hosts import Cancelled, CancelToken, Host

log = logging.getLogger(__name__)

# I/O retries of every client (compute and RSA nodes). The master lets a chunkserver hold
# another chunk open for writing only while its free space > 64 MiB x (1 + 10 x chunks
# already open for writing) (matocsserv.c, getservers_wrandom): 3 at once on a 2 GiB pool.
# Past that, a new file's first write is answered "no space" and the client retries,
# 1 ms + (try - 1) x 300 ms apart, then fails with ENOSPC. 5 tries (~1.8 s) failed 16
# fresh 3 MiB writers on a 1-node lab RAMDISK in 2 of 4 trials; 12 (~16.5 s) none in
# 8 trials of 16 and 64 writers. The same budget is how long a job's I/O waits for a dead
# server before it fails, i.e. the time rsad has to restart it: with 12 a write failed
# after 20 s of a dead master (a chaos run lost a job's write to a 33 s outage); 20
# waits 57 s (a read of a dead chunkserver 91 s, 30 tries: 132 s / 150 s), measured with
# bench/bench_mfs_outage.py. docs/filesystems.md.
# nosuid,nodev: a file on the RAMDISK never runs with its owner's privileges (a root on one
# compute node of a job could otherwise plant a setuid binary for the job's other nodes).
# default_permissions: the kernel checks every access against the modes. Without it
# MooseFS 3.0 (Debian 12) checks a file's own mode on open but not the search permission
# of the directories above it: another local user read a job's 0644 file below its 0700
# RAMDISK root by its path (lab, tests/security/test_fs_access.py).
CLIENT_OPTIONS = ("mfsioretries=20", "nosuid", "nodev", "default_permissions")
# The RSA nodes' own mounts (staging) also keep file names in the kernel's dentry cache
# for 1 s (MooseFS's default is 0: every open of a path that was just looked up asks the
# client and the master again). Measured on a cold 10k-file stage-out to local disk
# (docs/benchmarks.md#staging): the engine's name-list buckets 5.9 -> 4.8 s, rsync -a
# 13.3 -> 8.8 s; whole-directory buckets unchanged. Safe there: stage-out reads a tree
# no one changes any more (the job ended), stage-in creates names and renames them into
# place by name (FUSE renames by name, not through the cached entry), and a name seen
# stale for up to 1 s is no worse than the 1 s attribute cache MooseFS keeps by default.
# Not on compute nodes (spec.client options): ranks on different nodes replacing and
# opening the same names could open a replaced file's old inode.
RSA_NODE_OPTIONS = ("mfsentrycacheto=1",)
# A chunkserver reports its space (and only then takes writes) no sooner than 1 s after it
# started, at a whole second: MooseFS 3.0.117 and 4.x look at their chunk folders in a
# thread that sleeps 1 s after it started a folder's scan (hddspacemgr.c,
# hdd_folders_thread), and send the space once a second (masterconn.c,
# REPORT_SPACE_FREQ, on whole seconds of the clock). Its register message carries the
# space it knows then (0 before that). No event tells: the master is asked (SPACE_WAIT,
# one process on its node, one connection) every SPACE_POLL s from the servers' start.
SPACE_POLL = 0.02
# Standby chunkservers (``filesystem.moosefs_standby``, on by default): each pool of an RSA
# node keeps one chunkserver started ahead, its folder scanned, holding nothing, listening
# in the port range's reserved last block (mfslayout.standby_ports). A create claims it
# (CS_START: it gets the RAMDISK's master and port by a reload) instead of starting one:
# it registers at the next whole second after the reload with the space it scanned, so
# the create waits for the next whole second instead of 1-2 s (docs/benchmarks.md). A
# claimed standby is the RAMDISK's chunkserver from then on, and goes with it; the
# teardown (and a create, in the background) starts the pool's next one. A node without
# one (the first create after it started, two creates at once) starts one cold, as before.
# Run in the background of a round trip (its output on its own log): STANDBY_START's args.
BACKGROUND = 'setsid sh -c "$0" "$@" </dev/null >/dev/null 2>&1 &'


def _step(fs_id: str, step: str, t0: float) -> None:
    """Log that ``step`` of a create or destroy ended, ``rsa_step``/``rsa_at`` (seconds
    since the operation began) attached for bench/bench_fs.py's table of step costs."""
    at = time.monotonic() - t0
    log.debug("%s: %s done at +%.3fs", fs_id, step, at,
              extra={"rsa_fs": fs_id, "rsa_step": step, "rsa_at": at})


class MooseFsBackend(FilesystemBackend):
    """A real MooseFS per job cycle; what the lab and CI run."""

    name: ClassVar[str] = "moosefs"
    node_needs: ClassVar[tuple[Need, ...]] = (
        command_need("mfsmaster", "moosefs-master"),
        command_need("mfschunkserver", "moosefs-chunkserver"),
        command_need("mfsmount", "moosefs-client"),
        # the health check asks mfscli for the chunkservers; a build waits for them with
        # python3 (SPACE_WAIT), which moosefs-cli brings (mfscli is a python3 script)
        command_need("mfscli", "moosefs-cli (the health check asks it for the "
                     "chunkservers)"),
        command_need("python3", "python3 (a build waits for its chunkservers with it; "
                     "moosefs-cli depends on it)"),
        # one copy and no trash: mfssetgoal, mfssettrashtime (3.0); mfscreatesclass,
        # mfssetsclass, mfssettrashretention (4.x, the same package)
        Need("command mfssetgoal (3.0) or mfssetsclass (4.x)",
             "command -v mfssetsclass >/dev/null 2>&1 || "
             "command -v mfssetgoal >/dev/null 2>&1", "install moosefs-client"),
        Need("command mfssettrashtime (3.0) or mfssettrashretention (4.x)",
             "command -v mfssettrashretention >/dev/null 2>&1 || "
             "command -v mfssettrashtime >/dev/null 2>&1", "install moosefs-client"),
        command_need("nft", "nftables (the mount's master proxy guard; "
                     "filesystem.moosefs_proxy)"),
        command_need("ss", "iproute2 (rsad looks for free ports with it)"),
        command_need("pgrep", "procps (an unmount stops what is left of its mfsmount)"),
        command_need("flock", "util-linux (standby chunkservers start under a lock of "
                     "the pool; filesystem.moosefs_standby)"),
        Need("the fuse device", "[ -c /dev/fuse ]", "load the fuse module (modprobe fuse)"),
    )
    client_needs: ClassVar[tuple[Need, ...]] = (
        command_need("mfsmount", "moosefs-client"),
        command_need("nft", "nftables (the mount's master proxy guard; "
                     "filesystem.moosefs_proxy)"),
        Need("the fuse device", "[ -c /dev/fuse ]", "load the fuse module (modprobe fuse)"),
    )

    def node_facts(self) -> NodeFacts:
        """The node's MooseFS release, asked of its tools (rsa nodes check)."""
        return NodeFacts(VERSION_SCRIPT, version_facts)

    @classmethod
    def check_settings(cls, settings: BackendSettings) -> list[SettingProblem]:
        proxy = str(settings.options.get("proxy", "off"))
        if proxy != "off":
            try:
                mfsproxy.check_address(proxy)
            except ValueError as e:
                return [SettingProblem(("proxy",), f"{e}; or off")]
        return []

    @classmethod
    def config_options(cls, settings: BackendSettings) -> dict[str, Any]:
        proxy = str(settings.options.get("proxy", "off"))
        return {"addresses": dict(settings.addresses),
                "client_networks": tuple(settings.client_networks),
                "proxy_address": None if proxy == "off" else proxy,
                "standby": bool(settings.options.get("standby", True))}

    def __init__(self, hosts: Mapping[str, Host], *, create_timeout: float = 60.0,
                 destroy_timeout: float = 60.0, retries: int = 2,
                 addresses: Mapping[str, str] | None = None,
                 client_options: Sequence[str] = CLIENT_OPTIONS,
                 port_range: tuple[int, int] = (PORT_BASE, PORT_SLOTS),
                 client_networks: Sequence[str] = ("*",),
                 proxy_address: str | None = mfsproxy.PROXY_ADDRESS,
                 standby: bool = True) -> None:
        super().__init__(hosts, create_timeout=create_timeout,
                         destroy_timeout=destroy_timeout, retries=retries)
        self.addresses = dict(addresses or {})
        self._resolved: dict[str, list[str]] = {}  # data address -> its IPv4 addresses
        # every mount's master proxy on a loopback address only root may connect to
        # (fs/mfsproxy.py); None: the proxy on mfsmount's default, unguarded
        self.proxy_address = (None if proxy_address is None
                              else mfsproxy.check_address(proxy_address))
        proxy = (f"mfsproxy={self.proxy_address}",) if self.proxy_address else ()
        self.client_options = (*client_options, *proxy)
        self.rsa_node_options = (*self.client_options, *RSA_NODE_OPTIONS)
        self.port_range = port_range
        # standby chunkservers (STANDBY), in the range's last block: never with one block
        self.standby = standby and port_range[1] > 1
        # where compute nodes mount from (IP, IP/bits or IP-IP, as mfsexports.cfg takes
        # them; "*": anywhere). A job's compute nodes are not known when its RAMDISK is
        # built (it is built while the job waits), so this is the site's compute network.
        self.client_networks = tuple(client_networks)
        # node -> (its MooseFS tools' fingerprint, the release they said they were):
        # a create asks a node's tools again only when their files changed
        self._versions: dict[str, tuple[str, Version]] = {}

    # ----------------------------------------------------------------- layout

    def servers(self) -> mfsproxy.Servers:
        """Every RSA node's data address and the ports RAMDISK servers take there: the
        guard keeps everyone but root off them (fs/mfsproxy.py)."""
        base, slots = self.port_range
        ips = {ip for n in self.hosts for ip in self._ipv4(self._address(n))}
        return mfsproxy.Servers(tuple(sorted(ips)), base, base + slots * PORT_BLOCK - 1)

    def node_guard(self) -> str:
        """The options of a compute node's mount that load its guard (master proxy and
        every RSA node's servers), for the Prolog of every job: a node that never mounted
        a RAMDISK guards them too (a user of a plain job there reached every chunkserver
        of another user's RAMDISK in the cluster lab). The same table the mounts load."""
        proxy = [f"mfsproxy={self.proxy_address}"] if self.proxy_address else []
        return ",".join([*proxy, self.servers().option()])

    def _ipv4(self, address: str) -> list[str]:
        """``_ipv4_of``, a name resolved once per rsad (a later DNS outage then does not
        stop builds and mounts)."""
        found = self._resolved.get(address)
        if found is None:
            found = self._resolved[address] = _ipv4_of(address)
        return found

    def _address(self, node: str) -> str:
        if node in self.addresses:
            return self.addresses[node]
        return str(getattr(self.hosts[node], "address", None) or node)

    def layout(self, req: FsRequest, base: int = 0, secret: str = "", *,
               guarded: bool = True, admin: bool = False) -> Layout:
        """``admin``: the master node's own address gets an ``admin`` export (MooseFS
        4.x: making the RAMDISK's one-copy storage class needs it); no one else does."""
        validate_fs_id(req.fs_id)
        if not req.nodes:
            raise FsError(f"{req.fs_id}: no RSA nodes given")
        if len(req.nodes) > MAX_NODES:
            raise FsError(f"{req.fs_id}: {len(req.nodes)} nodes; moosefs serves at most "
                          f"{MAX_NODES} per filesystem")
        missing = [n for n in req.nodes if n not in self.hosts or n not in req.pool_dirs]
        if missing:
            raise FsError(f"{req.fs_id}: no host or pool dir for {', '.join(missing)}")
        addresses = {n: self._address(n) for n in req.nodes}
        ranges = tuple(export_ranges(list(addresses.values()), self.client_networks)
                       ) if secret else ("*",)
        # the guard only where a mount may follow (create, repair): a teardown or a
        # look at the servers never depends on resolving the pool's addresses
        guard = mfsproxy.ruleset(self.proxy_address, self.servers()) if guarded else ""
        admins = tuple(self._ipv4(addresses[req.nodes[0]])) if admin and secret else ()
        return Layout(req.fs_id, tuple(req.nodes), addresses,
                      {n: str(req.pool_dirs[n]) for n in req.nodes}, str(req.mount_root),
                      base, secret, ranges, guard, admins)


    # ----------------------------------------------------------------- create

    def create(self, req: FsRequest, cancel: CancelToken | None = None) -> MountSpec:
        lay = self.layout(req)
        loop = [n for n in lay.nodes if is_loopback(lay.addresses[n])]
        if loop:
            raise FsError(
                f"{req.fs_id}: moosefs data address of {', '.join(loop)} is loopback "
                f"({lay.addresses[loop[0]]}); MooseFS chunkservers refuse a loopback "
                "master: give each RSA node a routable data address (docs/filesystems.md)")
        t0 = time.monotonic()
        probe = self._probe(lay)
        dialect = self._dialect(lay, probe)
        existing = self._existing(lay, probe)
        _step(req.fs_id, "probe", t0)
        if existing is True:
            spec = self._read_spec(lay)
            if spec is not None and not spec.client.get("pass_file"):
                # built by a version without access control: open to anyone, rebuild it
                log.info("%s: moosefs without an access secret, rebuilding it", req.fs_id)
            elif spec is not None and self.health(spec, req).ok:
                log.info("%s: moosefs already up on %s, reusing it", req.fs_id,
                         ",".join(lay.nodes))
                return spec
        if existing is not None:
            log.info("%s: removing a half-built or unhealthy moosefs first", req.fs_id)
            self.destroy(req)
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            if cancel is not None:
                cancel.check()
            try:
                if attempt > 0 or existing is not None:
                    probe = self._probe(lay)
                busy = set().union(*(ports for _, ports, _ in probe.values()))
                return self._build(req, attempt, busy, cancel, dialect, t0)
            except Cancelled:
                raise
            except FsError as e:
                last = e
                log.warning("%s: moosefs create attempt %d/%d failed: %s", req.fs_id,
                            attempt + 1, self.retries + 1, e)
        raise FsError(f"{req.fs_id}: moosefs create failed after {self.retries + 1} "
                      f"attempts: {last}") from last

    def _standby_args(self, lay: Layout, node: str) -> list[str]:
        """STANDBY_START's arguments for ``node``'s pool of ``lay``."""
        parking, first, last = standby_ports(*self.port_range)
        return [lay.pool_dirs[node], lay.addresses[node], str(parking), str(first),
                str(last)]

    def _probe(self, lay: Layout) -> dict[str, tuple[list[str], set[int], Version]]:
        """One round trip per node: what this fs_id left in the pool, listening ports,
        the MooseFS release its tools belong to (asked of the tools only when their
        files changed since the last time: FINGERPRINT_SCRIPT)."""
        def probe(node: str) -> tuple[list[str], set[int], Version]:
            known = self._versions.get(node)
            out = self._run(node, ["sh", "-c", f"{PROBE_SCRIPT}\n{FINGERPRINT_SCRIPT}",
                                   lay.dir(node), known[0] if known else ""], 30)
            lines = out.splitlines()
            entries = [ln[2:] for ln in lines if ln.startswith("F:")]
            ports = listening_ports("\n".join(ln for ln in lines
                                              if not ln.startswith(("F:", "V:", "P:"))))
            fingerprint = parse_fingerprint(out)
            if known is not None and fingerprint == known[0]:
                return entries, ports, known[1]
            version = node_version(parse_versions(out))
            if fingerprint:
                self._versions[node] = (fingerprint, version)
            return entries, ports, version

        return on_nodes(lay.nodes, probe, f"{lay.fs_id}: look for an existing moosefs")

    @staticmethod
    def _dialect(lay: Layout,
                 probe: Mapping[str, tuple[list[str], set[int], Version]]) -> Dialect:
        """The commands of the release every node of the RAMDISK runs (FsError when
        they run different ones)."""
        versions = {n: probe[n][2] for n in lay.nodes}
        try:
            same_release(versions)
        except FsError as e:
            raise FsError(f"{lay.fs_id}: {e}") from e
        return Dialect(versions[lay.master])

    @staticmethod
    def _existing(lay: Layout,
                  probe: Mapping[str, tuple[list[str], set[int], Version]]) -> bool | None:
        """None: nothing there; True: complete (spec.json everywhere it belongs);
        False: leftovers of a half-built or half-destroyed filesystem."""
        present = {n: entries for n, (entries, _, _) in probe.items() if entries != ["-"]}
        if not present:
            return None
        return len(present) == len(lay.nodes) and "spec.json" in present[lay.master]

    def _read_spec(self, lay: Layout) -> MountSpec | None:
        r = self.hosts[lay.master].run(["cat", f"{lay.dir(lay.master)}/spec.json"],
                                       timeout=30, check=False)
        if r.returncode != 0:
            return None
        try:
            return MountSpec.from_json(json.loads(r.stdout))
        except (ValueError, KeyError) as e:
            log.warning("%s: unreadable spec.json: %s", lay.fs_id, e)
            return None

    def _build(self, req: FsRequest, attempt: int, busy: set[int],
               cancel: CancelToken | None, dialect: Dialect = LEGACY,
               t0: float | None = None) -> MountSpec:
        """Three round trips, each on every node at once:

        1. ``servers``: every node unpacks its configs and starts its chunkserver at
           once (its space takes 1-2 s: see SPACE_POLL; one started before the master
           listens registers at its next try, MASTER_RECONNECTION_DELAY 1 s, within
           that time); the first node starts the master before its own chunkserver
           (started the other way round, 3 of 12 creates on 16 lab nodes took ~5 s
           longer in their mounts step, cause not found: docs/benchmarks.md), then
           mounts, hands the root directory to the job's user and makes it keep one copy
           and no trash (``dialect``: the nodes' MooseFS release).
        2. ``mounts``: the other nodes mount (the root is the user's by then) while
           the master's node waits (SPACE_WAIT, one process asking the master every
           SPACE_POLL s) until every chunkserver registered and reported its space.
        3. ``spec``: the spec.json completion mark, once every node is mounted.

        Daemons and mounts start with their output on a log file (DAEMON_START).
        Each attempt draws a new port block (a bind failure is retried elsewhere) and a
        new secret; a failed or cancelled attempt takes down what it started on every
        node (one round trip: _teardown)."""
        dl = Deadline(self.create_timeout, f"{req.fs_id}: moosefs create")
        t0 = time.monotonic() if t0 is None else t0
        first, slots = self.port_range
        try:  # the last block is the standbys' (STANDBY)
            base = random_base(busy, 3 + len(req.nodes), base=first,
                               slots=slots - 1 if self.standby else slots)
        except FsError as e:
            raise FsError(f"{req.fs_id}: {e}") from e
        lay = self.layout(req, base, new_secret(), admin=dialect.classes)
        uid, gid = req.owner or (0, 0)
        with ExitStack() as undo:  # cleanup of whatever was built, on any exception
            undo.callback(self._teardown, lay, dl)  # mounts, servers, then dirs

            def start(node: str) -> str:
                d = lay.dir(node)
                steps: list[list[str]] = [
                    ["mkdir", "-p", lay.mountpoint, lay.pool_dirs[node]],
                    ["tar", "-x", "-C", lay.pool_dirs[node], "-f", "-"]]
                if node == lay.master:  # the master first on its node (see _build)
                    steps.append(_daemon(d, ["mfsmaster", "-c", f"{d}/mfsmaster.cfg",
                                             "start"]))
                steps.append(["sh", "-c", CS_START, d, "1" if self.standby else "0",
                              str(lay.cs_port(node)), STANDBY_START,
                              *self._standby_args(lay, node)])
                if node == lay.master:
                    if lay.guard:
                        steps.append(lay.guard_argv(node))
                    steps.append(_daemon(d, lay.mount_argv(node, self.rsa_node_options)))
                    # the root is the user's before any other node mounts: their clients
                    # never cache the fresh filesystem's root:root 0777 (attribute cache)
                    steps += [["chown", f"{uid}:{gid}", lay.mountpoint],
                              ["chmod", "0700", lay.mountpoint],
                              *dialect.one_copy(lay.mountpoint)]
                r = self._run_all(node, sh_chain(*steps), dl.left(), input=lay.tarball(node),
                                  cancel=cancel)
                for line in r.stderr.splitlines():  # why a standby was not used
                    if line.startswith("standby "):
                        log.warning("%s: %s: %s", req.fs_id, node, line)
                return "standby" if "CS standby" in r.stdout.splitlines() else "cold"

            how = on_nodes(lay.nodes, start, f"{req.fs_id}: start mfsmaster, mfschunkservers")
            warm = sum(1 for h in how.values() if h == "standby")
            log.info("%s: %d of %d chunkservers from standbys", req.fs_id, warm,
                     len(lay.nodes), extra={"rsa_fs": req.fs_id, "rsa_standbys": warm})
            _step(req.fs_id, "servers", t0)
            others = [n for n in lay.nodes if n != lay.master]

            def mount_or_wait(node: str) -> None:
                if node == lay.master:
                    self._wait_chunkservers(lay, dl, cancel, dialect)
                else:
                    mount = _daemon(lay.dir(node), lay.mount_argv(node, self.rsa_node_options))
                    self._run(node, sh_chain(lay.guard_argv(node), mount) if lay.guard
                              else mount, dl.left(), cancel=cancel)

            on_nodes([lay.master, *others], mount_or_wait, f"{req.fs_id}: mfsmount")
            _step(req.fs_id, "mounts", t0)
            spec = MountSpec(backend=self.name, fs_id=req.fs_id, nodes=lay.nodes,
                             rsa_mountpoint=lay.mountpoint,
                             client={"master_host": lay.master_address,
                                     "master_port": lay.client_port,
                                     "options": list(self.client_options),
                                     "port_base": lay.base,
                                     "pass_file": f"{lay.dir(lay.master)}/{PASS_FILE}",
                                     "moosefs_version": str(dialect.version)})
            self._run(lay.master, ["dd", f"of={lay.dir(lay.master)}/spec.json", "status=none"],
                      dl.left(), input=json.dumps(spec.to_json()), cancel=cancel)
            _step(req.fs_id, "spec", t0)
            undo.pop_all()
        log.info("%s: moosefs %s up on %s (master %s:%d, exported to %s) in %.2fs",
                 req.fs_id, dialect.version, ",".join(lay.nodes), lay.master_address,
                 lay.client_port, " ".join(lay.export_ranges), time.monotonic() - t0)
        return spec

    def _wait_chunkservers(self, lay: Layout, dl: Deadline, cancel: CancelToken | None,
                           dialect: Dialect = LEGACY) -> None:
        """Until every chunkserver registered with the master and reported its space:
        one round trip to the master's node, whose SPACE_WAIT asks the master every
        SPACE_POLL s on one connection (no event tells: SPACE_POLL). Each node's
        chunkserver is looked for by its data address as the master's node resolves it
        and by the IPv4 addresses rsad resolves it to (the master lists IPv4
        addresses). What the wait printed is checked here too: ``ready`` only when it
        lists every chunkserver."""
        want = {n: {(a, lay.cs_port(n)) for a in (lay.addresses[n],
                                                   *self._ipv4_or_none(lay.addresses[n]))}
                for n in lay.nodes}
        groups = [f"{lay.cs_port(n)}:" + ",".join(sorted({a for a, _ in keys}))
                  for n, keys in want.items()]
        seconds = max(0.0, dl.left() - 1.0)  # its own end first: it says what it saw
        out = self._run(lay.master,
                        ["python3", "-c", SPACE_WAIT, lay.master_address,
                         str(lay.client_port), f"{seconds:.3f}", f"{SPACE_POLL:g}",
                         ",".join(map(str, dialect.cslist_record())), *groups],
                        dl.left(), check=False, cancel=cancel)
        layout = next((ln[2:] for ln in out.splitlines() if ln.startswith("P ")), "")
        if layout:
            log.warning("%s: %s (MooseFS %s on %s): asking mfscli instead, slower; report "
                        "this with the release", lay.fs_id, layout, dialect.version, lay.master)
            ready = self._poll_mfscli(lay, dl, cancel, dialect, want)
        else:
            ready = space_wait_ready(out)
        seen = {n for n, keys in want.items() if keys & ready}
        if len(seen) == len(want):
            return
        why = next((ln[2:] for ln in out.splitlines() if ln.startswith("E ")), "")
        raise FsError(f"{lay.fs_id}: only {len(seen)}/{len(want)} chunkservers registered "
                      f"with the master and reported their space within {dl.seconds:g}s"
                      + (f" (last ask: {why})" if why else ""))

    def _poll_mfscli(self, lay: Layout, dl: Deadline, cancel: CancelToken | None,
                     dialect: Dialect, want: dict[str, set[tuple[str, int]]],
                     ) -> set[tuple[str, int]]:
        """The chunkservers ready for writes, by mfscli on the master's node (its output
        format is kept across releases), asked every SPACE_POLL s until every one of
        ``want`` is among them or the deadline: when SPACE_WAIT cannot read the master's
        answer. What the last ask listed."""
        argv = dialect.chunkservers_argv(lay.master_address, lay.client_port)
        ready: set[tuple[str, int]] = set()
        while not dl.expired():
            if cancel is not None:
                cancel.check()
            out = self._run(lay.master, argv, min(10.0, dl.left()), check=False,
                            cancel=cancel)
            ready = _ready(dialect, out)
            if all(keys & ready for keys in want.values()):
                break
            if cancel is not None:
                cancel.wait(SPACE_POLL)
            else:
                time.sleep(SPACE_POLL)
        return ready

    def _ipv4_or_none(self, address: str) -> list[str]:
        """A data address's IPv4 addresses, or none when it cannot be resolved here (its
        name alone is matched then)."""
        try:
            return self._ipv4(address)
        except FsError:
            return []

    # ----------------------------------------------------------------- destroy

    def destroy(self, req: FsRequest) -> None:
        lay = self.layout(req, guarded=False)
        dl = Deadline(self.destroy_timeout, f"{req.fs_id}: moosefs destroy")
        t0 = time.monotonic()
        try:
            self._teardown(lay, dl)
        except FsError as e:
            raise FsError(f"{req.fs_id}: moosefs destroy incomplete: {e}") from e
        _step(req.fs_id, "teardown", t0)
        log.info("%s: moosefs destroyed on %s", req.fs_id, ",".join(lay.nodes))

    def _teardown(self, lay: Layout, dl: Deadline) -> None:
        """One round trip per node, all at once: unmount (UMOUNT_SCRIPT), SIGKILL the
        node's chunkserver and, on the first node, the master (pids from their lock
        files: KILL_SCRIPT; no lock file = never started), then free the pool. Every
        step runs even when one before it failed (a later one may still free the pool);
        FsError names each node whose steps did not all succeed. The servers may die
        before another node's unmount: a FUSE unmount does not wait for them, and one
        that hangs is made lazy and its connection aborted (UMOUNT_SCRIPT)."""
        def down(node: str) -> str:
            d = lay.dir(node)
            steps = [["sh", "-c", UMOUNT_SCRIPT, lay.mountpoint, lay.mount_title],
                     ["sh", "-c", KILL_SERVERS, d, "1" if node == lay.master else "0"],
                     ["rm", "-rf", "--one-file-system", d]]
            if self.standby:  # the pool's next standby, once this one is gone
                steps.append(["sh", "-c", BACKGROUND, STANDBY_START,
                              *self._standby_args(lay, node)])
            r = self.hosts[node].run(sh_all(*steps), timeout=min(60.0, dl.left()),
                                     check=False)
            if r.returncode != 0:
                raise FsError(r.stderr.strip() or f"exit status {r.returncode}")
            if r.stderr.strip():
                log.warning("%s: %s", node, r.stderr.strip())
            return ""

        on_nodes(lay.nodes, down, f"{lay.fs_id}: unmount, stop servers, free the pool")

    # ----------------------------------------------------------------- use

    def health(self, spec: MountSpec, req: FsRequest | None = None) -> Health:
        """With ``req``, the servers are looked at first (SERVERS_CHECK): a dead master
        or chunkserver is reported in well under a second, so the repair starts at once
        instead of after the mounts' statfs ran into its timeout on the dead master."""
        nodes = tuple(spec.nodes)
        host, port = str(spec.client["master_host"]), int(spec.client["master_port"])
        if req is not None:
            dead = self._dead_servers(req, spec)
            if dead:
                return Health(False, "; ".join(f"{n}: {p}" for n, p in dead.items()))

        def check(node: str) -> str:
            # stat -f asks the FUSE server: a dead master makes it hang, hence `timeout`
            r = self.hosts[node].run(sh_chain(
                ["findmnt", "-n", "--mountpoint", spec.rsa_mountpoint],
                ["timeout", "-s", "KILL", "8", "stat", "-f", "-c", "%b",
                 spec.rsa_mountpoint]), timeout=15, check=False)
            if r.returncode == 0:
                return ""
            return "not mounted" if not r.stdout.strip() else "statfs failed or hung"

        dialect = _dialect_of(spec)

        def cli() -> str:
            return self._run(nodes[0], dialect.chunkservers_argv(host, port), 15,
                             check=False)

        with ThreadPoolExecutor(max_workers=1) as pool:
            listing = pool.submit(cli)
            try:
                problems = {n: p for n, p in on_nodes(nodes, check, "health").items() if p}
                out = listing.result()
            except FsError as e:
                return Health(False, str(e))
        ready = len(_ready(dialect, out))
        if ready < len(nodes):
            problems["master"] = f"{ready}/{len(nodes)} chunkservers registered with space"
        if problems:
            return Health(False, "; ".join(f"{n}: {p}" for n, p in problems.items()))
        return Health(True, f"{len(nodes)} chunkservers, mounted on every node")

    def _dead_servers(self, req: FsRequest, spec: MountSpec) -> dict[str, str]:
        """Node -> what of the RAMDISK's servers is dead there (only nodes with a dead
        one). Raises FsError when a node does not answer."""
        lay = self.layout(req, int(spec.client.get("port_base") or 0), guarded=False)

        def check(node: str) -> str:
            out = self._run(node, ["sh", "-c", SERVERS_CHECK, lay.dir(node),
                                   "1" if node == lay.master else "0"], 15, check=False)
            dead = out.split()
            if "gone" in dead:
                return "its RAMDISK files are gone"
            return ", ".join(f"{d} dead" for d in dead)

        try:
            found = on_nodes(lay.nodes, check, f"{req.fs_id}: look at the servers")
        except FsError as e:
            return {"servers": str(e)}
        return {n: p for n, p in found.items() if p}

    # ----------------------------------------------------------------- repair

    def repair(self, req: FsRequest, spec: MountSpec) -> list[str]:
        """Restart dead servers (master with metadata recovery, chunkservers) on every
        node, then remount the RSA-node mounts whose mfsmount died. Data is kept: it
        lives in the pool directories, not in the daemons."""
        lay = self.layout(req, int(spec.client.get("port_base") or 0))
        if not lay.base:
            raise FsError(f"{req.fs_id}: no port block recorded: cannot repair")

        def run(node: str, argv: list[str]) -> str:
            """argv as root on node; a failure is its last line of stderr (on_nodes
            names the step and the node)."""
            r = self.hosts[node].run(argv, timeout=60, check=False)
            if r.returncode != 0:
                raise FsError((r.stderr.strip().splitlines()
                               or [f"exit status {r.returncode}"])[-1])
            return r.stdout

        def servers(node: str) -> list[str]:
            out = run(node, ["sh", "-c", REPAIR_SCRIPT, lay.dir(node),
                             "1" if node == lay.master else "0"])
            return [f"{ln.split(': ', 1)[1]} on {node}" for ln in out.splitlines()
                    if ln.startswith("restarted: ")]

        found = on_nodes(lay.nodes, servers, f"{req.fs_id}: restart dead servers")
        done = [d for n in lay.nodes for d in found[n]]
        if done:
            self._wait_chunkservers(lay, Deadline(self.create_timeout,
                                                  f"{req.fs_id}: repair"), None,
                                    _dialect_of(spec))
        title = lay.mount_title

        def mount(node: str) -> str:
            state = run(node, ["sh", "-c", MOUNT_CHECK, lay.mountpoint]).strip()
            if state not in ("missing", "dead"):
                return ""
            # the unmount removes the mountpoint directory: make it again
            steps = [["sh", "-c", UMOUNT_SCRIPT, lay.mountpoint, title],
                     ["mkdir", "-p", lay.mountpoint]]
            if lay.guard:
                steps.append(lay.guard_argv(node))
            steps.append(lay.mount_argv(node, self.rsa_node_options))
            run(node, sh_chain(*steps))
            return f"mount on {node}"

        try:
            remounted = on_nodes(lay.nodes, mount, f"{req.fs_id}: remount")
        except FsError as e:
            if done:
                raise FsError(f"{e} (after restarting {', '.join(done)})") from e
            raise
        # the caller logs and records what was restarted
        return done + [remounted[n] for n in lay.nodes if remounted[n]]

    def client_mount_argv(self, spec: MountSpec, mountpoint: str) -> list[str]:
        """A compute node's mount, with the secret read from the first RSA node's pass
        file as ``-o mfspassword=``: the node moves it into a root-only config file
        before it runs mfsmount (``node.mounts.secret_to_file``), so it never appears in
        the node's process table. A spec recorded before access control names no pass
        file: its filesystem was exported without one. Every mount checks modes in the
        kernel (``default_permissions``), also one of a spec recorded before it did. The
        ``rsaguard=`` option names the RSA nodes' servers the node keeps its users off
        (fs/mfsproxy.py) before it mounts; it takes the option out."""
        c: Mapping[str, Any] = spec.client
        opts = list(c.get("options") or [])
        if "default_permissions" not in opts:  # a spec recorded before: it does now
            opts.append("default_permissions")
        opts.append(self.servers().option())  # the node guards them, then drops it
        if c.get("pass_file"):
            opts.append(f"mfspassword={self._secret(spec)}")
        return ["mfsmount", mountpoint, "-H", str(c["master_host"]), "-P",
                str(c["master_port"]), *(["-o", ",".join(opts)] if opts else [])]

    def _secret(self, spec: MountSpec) -> str:
        node, path = spec.nodes[0], str(spec.client["pass_file"])
        if node not in self.hosts:
            raise FsError(f"{spec.fs_id}: no host for {node}, which holds the RAMDISK's "
                          "access secret")
        text = self._run(node, ["cat", "--", path], 15)
        found = re.search(r"^mfspassword=([0-9a-f]{16,128})$", text, re.MULTILINE)
        secret = found.group(1) if found else ""
        if not secret:
            raise FsError(f"{spec.fs_id}: {node}:{path} holds no access secret; the "
                          "RAMDISK is damaged: rebuild it (rsa retry)")
        return secret

    def client_umount_argv(self, spec: MountSpec, mountpoint: str) -> list[str]:
        # lazy: a job's leftover open files must not make the Epilog fail
        return ["umount", "-l", mountpoint]


def _daemon(node_dir: str, argv: list[str]) -> list[str]:
    """``argv`` (a daemon's start, an mfsmount) run by DAEMON_START: output to a log in
    the RAMDISK's directory on the node, its last lines the error when it fails."""
    return ["sh", "-c", DAEMON_START, node_dir, *argv]


def space_wait_ready(output: str) -> set[tuple[str, int]]:
    """(IPv4, port) of every chunkserver SPACE_WAIT's output lists as connected with
    space ("R IP PORT" lines; anything else is not one)."""
    found: set[tuple[str, int]] = set()
    for line in output.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "R" and parts[2].isdigit():
            found.add((parts[1], int(parts[2])))
    return found


def _ready(dialect: Dialect, mfscli_output: str) -> set[tuple[str, int]]:
    """Chunk servers that registered AND reported their space (ready for writes)."""
    return {cs for cs, total in dialect.chunkservers(mfscli_output).items() if total > 0}


def _dialect_of(spec: MountSpec) -> Dialect:
    """The commands of the release a RAMDISK was built with (one built before the
    release was recorded: MooseFS 3.0, the only one rsad built then)."""
    try:
        return Dialect(Version.parse(f"version {spec.client['moosefs_version']}"))
    except (KeyError, ValueError):
        return LEGACY


def _ipv4_of(address: str) -> list[str]:
    """The IPv4 addresses of an RSA node's data address (a literal, or a name resolved
    now: nftables rules take addresses); FsError when it has none."""
    try:
        return [str(ipaddress.IPv4Address(address))]
    except ValueError:
        pass
    try:
        found = socket.getaddrinfo(address, None, socket.AF_INET, socket.SOCK_STREAM)
    except OSError as e:
        raise FsError(f"cannot resolve the RSA node data address {address!r} to keep users "
                      f"off its servers: {e}; give its IPv4 address (pool data_address)"
                      ) from e
    return sorted({str(info[4][0]) for info in found})
