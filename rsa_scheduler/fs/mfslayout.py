"""What one MooseFS RAMDISK is, on paper: its ports, secret, exports and files.

Owns :class:`Layout` (every path, port, config file and mount argv of one filesystem,
derived from its ``fs_id``, its nodes and their pool directories), the port block and
secret drawn for it, and the export ranges and ``mfsexports.cfg`` that restrict it to the
RSA nodes and the client networks. Everything of a filesystem lives in
``<pool_dir>/rsa-mfs-<fs_id>/`` on each node, shipped there as one tar stream
(:meth:`Layout.tarball`).

Pure text and arithmetic, except that an RSA node's address given as a name is resolved
(``export_ranges``, ``is_loopback``). Must not run anything on a node (that is
:mod:`rsa_scheduler.fs.moosefs`), nor import the daemon, the store or the configuration.
"""

from __future__ import annotations

import io
import ipaddress
import logging
import re
import secrets
import socket
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rsa_scheduler.fs import mfsproxy
from rsa_scheduler.fs.base import FsError

log = logging.getLogger(__name__)

PORT_BASE = 20000  # below Linux's ephemeral range (32768-60999)
PORT_BLOCK = 64  # master uses base+0..2, chunkserver i uses base+3+i
PORT_SLOTS = 156  # 20000..29983
SECRET_BYTES = 16  # 128 random bits, written as 32 hex digits (safe in mfsexports.cfg)
# The secret as an mfsmount config file (``mfspassword=...``), given with ``-c``, in the
# node's root-only directory of the filesystem. Not ``-o mfspassfile=``: MooseFS 3.0.117
# answers "Incorrect password" for a pass file holding the right password, with or without
# a newline (tested in the lab), while the same password from ``-c`` is accepted.
PASS_FILE = "mfsmount.cfg"
MAX_NODES = PORT_BLOCK - 3
DIR_PREFIX = "rsa-mfs-"
#: the chunkserver's directory in ``mfschunkserver.claim.cfg``, which CS_START replaces by
#: the standby's it claimed
CLAIM_HOME = "@HOME@"
EMPTY_METADATA = "MFSM NEW"  # /var/lib/mfs/metadata.mfs.empty, 8 bytes
#: the "master" of an unclaimed standby chunkserver, on its node's data address: a port
#: below 1024, where only root may listen, and where nothing does (tcpmux, unused). A
#: standby connects there at its start and once an hour; whoever listens is its master.
#: In the range (it was 29920 first), a user's command on the RSA node (staging, PRE- or
#: POSTPROCESS) listening there became the master of every standby started meanwhile: it
#: could fill its folder before another user's create claimed it, or make that create
#: fail (a chunkserver keeps its first master's metaid and refuses any other); the guard
#: keeps users off the servers' ports, not off answering root's connections (lab:
#: tests/integration/test_fs_moosefs.py::test_no_user_on_an_rsa_node_can_be_a_standbys_master)
STANDBY_MASTER_PORT = 1


def new_secret() -> str:
    """A filesystem's access secret: random, hex (no character mfsexports.cfg parses)."""
    return secrets.token_hex(SECRET_BYTES)


def random_base(busy: set[int], width: int, *, base: int = PORT_BASE,
                slots: int = PORT_SLOTS) -> int:
    """The first port of a block of ``width`` ports drawn at random among the ``slots``
    blocks from ``base`` that have no port in ``busy``; FsError if every block is busy."""
    free = [base + i * PORT_BLOCK for i in range(slots)
            if not busy.intersection(range(base + i * PORT_BLOCK,
                                           base + i * PORT_BLOCK + width))]
    if not free:
        raise FsError(f"no free port block in {base}..{base + slots * PORT_BLOCK - 1}")
    return free[secrets.randbelow(len(free))]


def standby_ports(base: int = PORT_BASE, slots: int = PORT_SLOTS) -> tuple[int, int, int]:
    """(the port standby chunkservers "connect" to, STANDBY_MASTER_PORT; the first and
    last port they listen on: the port range's last block, which no RAMDISK draws while
    standbys are on, ``random_base`` over the others)."""
    first = base + (slots - 1) * PORT_BLOCK
    return STANDBY_MASTER_PORT, first, first + PORT_BLOCK - 1


def export_ranges(addresses: Sequence[str], networks: Sequence[str]) -> list[str]:
    """The client ranges of a filesystem's exports: each RSA node's address (resolved to
    an IP here) and each client network; ``*`` (any address) if a network is ``*`` or an
    RSA address cannot be resolved (an export only takes IP addresses and ranges)."""
    if "*" in networks:
        return ["*"]
    ranges: list[str] = []
    for addr in addresses:
        try:
            ip = str(ipaddress.ip_address(addr))
        except ValueError:
            try:
                ip = socket.gethostbyname(addr)
            except OSError:
                log.warning("cannot resolve RSA node address %s: exporting to any address",
                            addr)
                return ["*"]
        if ip not in ranges:
            ranges.append(ip)
    for net in networks:
        if not valid_range(net):
            raise FsError(f"filesystem.client_networks: {net!r} is not an export range; "
                          "use *, an IPv4 address, IP/bits, IP/netmask or IP-IP")
        if net not in ranges:
            ranges.append(net)
    return ranges


def valid_range(text: str) -> bool:
    """Is ``text`` a client range mfsexports.cfg takes (``*``, IP, IP/bits, IP/mask, IP-IP)?"""
    if text == "*":
        return True
    try:
        if "-" in text:
            low, high = (ipaddress.IPv4Address(p) for p in text.split("-", 1))
            return low <= high
        ipaddress.IPv4Network(text, strict=False)
        return True
    except ValueError:
        return False


def exports_cfg(ranges: Sequence[str], secret: str, admins: Sequence[str] = ()) -> str:
    """mfsexports.cfg: the whole tree, read-write, to ``ranges`` with the password only.

    ``admin`` only for ``admins``: the master node's own address on MooseFS 4.x, whose
    mount makes the one-copy storage class (creating a class needs it; the master prefers
    the line with more privileges when several match, exports.c); nothing else ever.
    ``maproot=0:0`` (root stays root) because root acts on the RAMDISK in
    documented steps: the backend sets goal and trash time and hands the root directory
    to the job's user, staging creates the root as root before it switches to the user,
    and a compute node's ``union`` mount is an overlay, which reads its lower layers with
    the mounter's (root's) credentials. A root on a compute node gains nothing from it:
    it can read the secret and become the job's user anyway (docs/security.md).
    """
    if not secret:
        raise FsError("a moosefs export needs a secret")
    return "".join(
        [f"{r} / rw,alldirs,admin,maproot=0:0,password={secret}\n" for r in admins]
        + [f"{r} / rw,alldirs,maproot=0:0,password={secret}\n" for r in ranges
           if r not in admins])



def _cfg(values: Mapping[str, object]) -> str:
    return "".join(f"{k} = {v}\n" for k, v in values.items())


#: the fewest changelogs a RAMDISK's master keeps: below 2 MooseFS 3.0.x divides by zero at
#: the first full hour (see :meth:`Layout.master_cfg`)
MIN_BACK_LOGS = 2


@dataclass(frozen=True, slots=True)
class Layout:
    """Where everything of one MooseFS RAMDISK lives (pure: no I/O)."""

    fs_id: str
    nodes: tuple[str, ...]
    addresses: Mapping[str, str]
    pool_dirs: Mapping[str, str]
    mount_root: str
    base: int = 0  # first port; 0 when only paths are needed (destroy)
    secret: str = ""  # empty when only paths are needed (destroy)
    export_ranges: tuple[str, ...] = ("*",)
    guard: str = ""  # the mfsmount proxy guard's nftables ruleset; "" = none
    admin_ranges: tuple[str, ...] = ()  # exported with admin (exports_cfg)

    @property
    def master(self) -> str:
        return self.nodes[0]

    @property
    def master_address(self) -> str:
        return self.addresses[self.master]

    @property
    def client_port(self) -> int:
        return self.base + 2

    @property
    def mountpoint(self) -> str:
        return f"{self.mount_root.rstrip('/')}/{self.fs_id}"

    @property
    def mount_title(self) -> str:
        """A pattern of the process title of an mfsmount of this RAMDISK (UMOUNT_SCRIPT)."""
        return re.escape(f"mfsmount (mounted on: {self.mountpoint})")

    def dir(self, node: str) -> str:
        return f"{self.pool_dirs[node].rstrip('/')}/{DIR_PREFIX}{self.fs_id}"

    def cs_port(self, node: str) -> int:
        return self.base + 3 + self.nodes.index(node)

    def ports(self, node: str) -> list[int]:
        own = [self.cs_port(node)]
        return [self.base, self.base + 1, self.base + 2, *own] if node == self.master else own

    def master_cfg(self) -> str:
        d, a = self.dir(self.master), self.master_address
        return _cfg({
            "WORKING_USER": "root", "WORKING_GROUP": "root",
            "SYSLOG_IDENT": f"mfsmaster-{self.fs_id}",
            "DATA_PATH": f"{d}/master", "EXPORTS_FILENAME": f"{d}/mfsexports.cfg",
            "TOPOLOGY_FILENAME": f"{d}/mfstopology.cfg",
            "MATOML_LISTEN_HOST": a, "MATOML_LISTEN_PORT": self.base,
            "MATOCS_LISTEN_HOST": a, "MATOCS_LISTEN_PORT": self.base + 1,
            "MATOCL_LISTEN_HOST": a, "MATOCL_LISTEN_PORT": self.base + 2,
            # a scratch FS: never throttle deletions (the chunk loop's shortest time is 60 s:
            # MooseFS raises anything lower to that)
            "CHUNKS_LOOP_MIN_TIME": 60, "CHUNKS_SOFT_DEL_LIMIT": 100000,
            "CHUNKS_HARD_DEL_LIMIT": 200000, "BACK_META_KEEP_PREVIOUS": 0,
            # BACK_LOGS >= 2: MooseFS 3.0.x saves its metadata every BACK_LOGS/2 hours and
            # takes the hour modulo that; BACK_LOGS 1 made it 0 and the master died of a
            # division by zero at the first full hour of its life (SIGFPE in
            # meta_dostoreall; fixed upstream in 4.x only): every client then hung. 2 saves
            # the metadata every hour, which also keeps a repair's replay (mfsmaster -a) short
            "BACK_LOGS": MIN_BACK_LOGS,
        })

    def cs_cfg(self, node: str, home: str | None = None) -> str:
        """``home``: the chunkserver's directory when not the RAMDISK's own (a claimed
        standby's, CS_START: ``@HOME@`` there, which the node replaces)."""
        d, a = home or self.dir(node), self.addresses[node]
        return _cfg({
            "WORKING_USER": "root", "WORKING_GROUP": "root",
            "SYSLOG_IDENT": f"mfscs-{self.fs_id}",
            "DATA_PATH": f"{d}/cs", "HDD_CONF_FILENAME": f"{d}/mfshdd.cfg",
            "HDD_LEAVE_SPACE_DEFAULT": "64MiB",
            "MASTER_HOST": self.master_address, "MASTER_PORT": self.base + 1,
            "BIND_HOST": a, "CSSERV_LISTEN_HOST": a, "CSSERV_LISTEN_PORT": self.cs_port(node),
            # chunkservers start in parallel with the master: retry every second, not 5
            "MASTER_RECONNECTION_DELAY": 1,
        })

    def files(self, node: str) -> dict[str, str]:
        """Relative path (under the node's dir) → content; '' ending in '/' = a directory."""
        d = self.dir(node)
        out = {"cs/": "", "chunks/": "", "mfschunkserver.cfg": self.cs_cfg(node),
               "mfschunkserver.claim.cfg": self.cs_cfg(node, CLAIM_HOME),
               "mfshdd.cfg": f"{d}/chunks\n", PASS_FILE: f"mfspassword={self.secret}\n"}
        if self.guard:
            out[mfsproxy.NFT_FILE] = self.guard
        if node == self.master:
            out.update({"master/": "", "master/metadata.mfs": EMPTY_METADATA,
                        "mfsmaster.cfg": self.master_cfg(), "mfstopology.cfg": "",
                        "mfsexports.cfg": exports_cfg(self.export_ranges, self.secret,
                                                      self.admin_ranges)})
        return out

    def tarball(self, node: str) -> str:
        """The node's files as a tar stream (ASCII only) for ``tar -x -C <pool_dir>``."""
        top = f"{DIR_PREFIX}{self.fs_id}"
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
            root = tarfile.TarInfo(top)
            root.type, root.mode = tarfile.DIRTYPE, 0o700
            tar.addfile(root)
            for rel, content in sorted(self.files(node).items()):
                info = tarfile.TarInfo(f"{top}/{rel.rstrip('/')}")
                if rel.endswith("/"):
                    info.type, info.mode = tarfile.DIRTYPE, 0o700
                    tar.addfile(info)
                else:
                    data = content.encode("ascii")
                    info.size, info.mode = len(data), 0o600
                    tar.addfile(info, io.BytesIO(data))
        return buf.getvalue().decode("ascii")

    def guard_argv(self, node: str) -> list[str]:
        """Load the mfsmount proxy guard on ``node`` (before its mount), or say what is
        missing: a RAMDISK is never mounted unguarded (fs/mfsproxy.py)."""
        return ["sh", "-c", 'command -v nft >/dev/null || { echo "nft not found: install '
                'nftables on this RSA node; it keeps users off the RAMDISK servers and '
                'mfsmount\'s master proxy '
                '(docs/security.md)" >&2; exit 1; }; exec nft -f "$1"', "sh",
                f"{self.dir(node)}/{mfsproxy.NFT_FILE}"]

    def mount_argv(self, node: str, options: Sequence[str]) -> list[str]:
        """``node``'s own mount: the secret is read from its root-only config file."""
        return ["mfsmount", self.mountpoint, "-H", self.master_address, "-P",
                str(self.client_port), "-c", f"{self.dir(node)}/{PASS_FILE}",
                *(["-o", ",".join(options)] if options else [])]


def is_loopback(address: str) -> bool:
    """Is ``address`` (an IP or a name resolved here) a loopback address?"""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        try:
            ip = ipaddress.ip_address(socket.gethostbyname(address))
        except OSError:
            return False  # not resolvable here; the node may still resolve it
    return ip.is_loopback
