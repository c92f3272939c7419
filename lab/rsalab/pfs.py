"""The PFS: a dedicated MooseFS instance in a storage network namespace, mounted at /pfs.

Topology: a holder process owns a network namespace ("the storage host"); a veth pair
joins it to the host (host end rsalab-pfs0 = 10.213.0.1, namespace end eth0 =
10.213.0.2 master, .3/.4 chunkservers). Chunk data is on disk under /var/lib/rsa-lab/pfs.
The host mounts it with mfsmount at /pfs over a shared bind mount, so every node
namespace (propagation slave) sees it and host unmounts propagate.
Bandwidth: an htb class on each veth end (host end = writes to the PFS, namespace end
= reads from it) limits each direction to RSA_LAB_PFS_RATE.
A fresh instance every lab-up (a killed master cannot be restarted plainly).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from .common import (
    DATA,
    PFS_GUARD,
    PFS_NET,
    PFS_VETH,
    STATE,
    LabError,
    Settings,
    is_mounted,
    log,
    make_dir,
    mounts,
    read_pid,
    run,
    spawn,
    stop_named,
    wait_for,
)

CONF = STATE / "pfs"
N_CHUNKSERVERS = 2
HOST_END = f"{PFS_NET}.1"
MASTER = f"{PFS_NET}.2"
PFS_CLASS = "lab1"  # the PFS's storage class of one copy on MooseFS 4.x
GUARD_MARK = STATE / "route-guard"  # exists while the lab owns the unreachable route


def chunkserver_addr(i: int) -> str:
    return f"{PFS_NET}.{i + 2}"  # cs1 = .3, cs2 = .4


def _netns(pid: int) -> list[str]:
    return ["/usr/bin/nsenter", f"--net=/proc/{pid}/ns/net"]


def up(s: Settings) -> None:
    shutil.rmtree(DATA / "pfs", ignore_errors=True)
    make_dir(CONF, 0o755)
    net_pid = _network_up(s.pfs_rate)
    ns = _netns(net_pid)
    make_dir(DATA / "pfs/master", 0o755)
    shutil.copy("/var/lib/mfs/metadata.mfs.empty", DATA / "pfs/master/metadata.mfs")
    (CONF / "mfsexports.cfg").write_text(f"{PFS_NET}.0/24 / rw,alldirs,admin,maproot=0:0\n")
    (CONF / "mfstopology.cfg").write_text("")
    (CONF / "mfsmaster.cfg").write_text(
        _cfg(
            WORKING_USER="root", WORKING_GROUP="root", SYSLOG_IDENT="rsalab-mfsmaster",
            DATA_PATH=DATA / "pfs/master", EXPORTS_FILENAME=CONF / "mfsexports.cfg",
            TOPOLOGY_FILENAME=CONF / "mfstopology.cfg",
            MATOML_LISTEN_HOST=MASTER, MATOCS_LISTEN_HOST=MASTER, MATOCL_LISTEN_HOST=MASTER,
            CHUNKS_LOOP_MIN_TIME=1, CHUNKS_SOFT_DEL_LIMIT=100, CHUNKS_HARD_DEL_LIMIT=200,
            CHUNKS_WRITE_REP_LIMIT=10, CHUNKS_READ_REP_LIMIT=10,
        )
    )
    spawn("mfsmaster",
          [*ns, "/usr/sbin/mfsmaster", "-c", str(CONF / "mfsmaster.cfg"), "-f", "start"])
    wait_for("mfsmaster", lambda: _mfscli("-SIN").returncode == 0, timeout=30, every=0.3)
    for i in range(1, N_CHUNKSERVERS + 1):
        addr = chunkserver_addr(i)
        chunks = DATA / f"pfs/cs{i}/chunks"
        make_dir(chunks, 0o755)
        (CONF / f"mfshdd{i}.cfg").write_text(f"{chunks}\n")
        (CONF / f"mfschunkserver{i}.cfg").write_text(
            _cfg(
                WORKING_USER="root", WORKING_GROUP="root", SYSLOG_IDENT=f"rsalab-mfscs{i}",
                DATA_PATH=DATA / f"pfs/cs{i}", HDD_CONF_FILENAME=CONF / f"mfshdd{i}.cfg",
                HDD_LEAVE_SPACE_DEFAULT="256MiB", MASTER_HOST=MASTER, BIND_HOST=addr,
                CSSERV_LISTEN_HOST=addr,
            )
        )
        spawn(f"mfschunkserver{i}",
              [*ns, "/usr/sbin/mfschunkserver", "-c", str(CONF / f"mfschunkserver{i}.cfg"),
               "-f", "start"])
    wait_for(f"{N_CHUNKSERVERS} chunkservers", _all_chunkservers, timeout=60, every=0.3)
    mnt = s.pfs_mount
    make_dir(mnt, 0o755)
    if not is_mounted(mnt):
        # A shared bind mount: node namespaces made later (propagation slave) receive
        # the FUSE mount below and its unmount.
        run(["mount", "--bind", str(mnt), str(mnt)])
        run(["mount", "--make-shared", str(mnt)])
    spawn("mfsmount",
          ["/usr/bin/mfsmount", str(mnt), "-f", "-H", MASTER, "-P", "9421",
           # default_permissions: the kernel checks modes, as a site's PFS does (MooseFS
           # alone does not check the directories above a file: another user could read
           # a 0644 file below a 0700 home by its path)
           "-o", "mfsioretries=5,default_permissions"])
    wait_for("mfsmount on /pfs", lambda: _fuse_at(mnt), timeout=30)
    if shutil.which("mfscreatesclass"):
        # MooseFS 4.x (a lab host of Debian 13 or testing): goals are storage classes,
        # none of one copy on a fresh master; trash time is trash retention
        run(["mfscreatesclass", "-M", str(mnt), "-K", "*", "-c", "the lab PFS: one copy",
             PFS_CLASS])
        run(["mfssetsclass", "-r", PFS_CLASS, str(mnt)])
        run(["mfssettrashretention", "-r", "0", str(mnt)])
    else:
        run(["mfssetgoal", "-r", "1", str(mnt)])
        run(["mfssettrashtime", "-r", "0", str(mnt)])
    os.chmod(mnt, 0o755)  # a fresh MooseFS root is 0777
    make_dir(mnt / "home", 0o755)
    for user in (s.user, s.other_user):
        make_dir(mnt / "home" / user, 0o700, owner=user)
    log(f"PFS: MooseFS at {mnt} (master {MASTER}, {N_CHUNKSERVERS} chunkservers, "
        f"goal 1, trash 0), throttled to {s.pfs_rate} each way")


def _network_up(rate: str) -> int:
    """Guard route, storage namespace holder, veth pair, addresses, throttle."""
    if run(["ip", "link", "show", PFS_VETH], check=False).returncode == 0:
        raise LabError(f"{PFS_VETH} exists already; run `make lab-down` first")
    if not GUARD_MARK.exists():
        GUARD_MARK.write_text(PFS_GUARD + "\n")  # mark first: a crash still cleans it
        run(["ip", "route", "replace", "unreachable", PFS_GUARD])
    pid = spawn("pfsnet", ["/usr/bin/unshare", "--net", "/bin/sleep", "infinity"])
    mine = os.readlink("/proc/self/ns/net")
    wait_for("storage netns", lambda: os.readlink(f"/proc/{pid}/ns/net") != mine, timeout=10)
    ns = _netns(pid)
    run(["ip", "link", "add", PFS_VETH, "type", "veth", "peer", "name", "eth0",
         "netns", str(pid)])
    _no_ipv6(PFS_VETH, [])
    run(["ip", "addr", "add", f"{HOST_END}/24", "dev", PFS_VETH])
    run(["ip", "link", "set", PFS_VETH, "up"])
    _no_ipv6("eth0", ns)
    for addr in [MASTER] + [chunkserver_addr(i) for i in range(1, N_CHUNKSERVERS + 1)]:
        run([*ns, "ip", "addr", "add", f"{addr}/24", "dev", "eth0"])
    run([*ns, "ip", "link", "set", "lo", "up"])
    run([*ns, "ip", "link", "set", "eth0", "up"])
    _throttle([], PFS_VETH, rate)  # host -> PFS (writes)
    _throttle(ns, "eth0", rate)  # PFS -> host (reads)
    return pid


def _no_ipv6(dev: str, ns: list[str]) -> None:
    run([*ns, "sysctl", "-q", "-w", f"net.ipv6.conf.{dev}.disable_ipv6=1"], check=False)


def _throttle(ns: list[str], dev: str, rate: str) -> None:
    run([*ns, "tc", "qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb",
         "default", "10"])
    run([*ns, "tc", "class", "add", "dev", dev, "parent", "1:", "classid", "1:10", "htb",
         "rate", rate, "ceil", rate, "burst", "256k", "cburst", "256k",
         "quantum", "131072"])


def _cfg(**kv: object) -> str:
    return "".join(f"{k} = {v}\n" for k, v in kv.items())


def _mfscli(*args: str) -> subprocess.CompletedProcess[str]:
    return run(["mfscli", "-H", MASTER, "-P", "9421", *args], timeout=10, check=False)


def _all_chunkservers() -> bool:
    out = run(["mfscli", "-H", MASTER, "-P", "9421", "-SCS", "-p"], timeout=10, check=False)
    return out.returncode == 0 and sum(
        1 for line in out.stdout.splitlines() if f"{PFS_NET}." in line
    ) >= N_CHUNKSERVERS


def _fuse_at(mnt: Path) -> bool:
    return any(m == str(mnt) and t.startswith("fuse") for m, t, _ in mounts())


def _fuse_dev(mnt: Path) -> int | None:
    """The FUSE mount's device number, read from mountinfo: a stat() of a mount whose
    server died (ENOTCONN) would fail exactly when the abort is needed."""
    dev = None
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        f = line.split()
        if f[4] == str(mnt) and " - fuse" in line:
            major, minor = (int(x) for x in f[2].split(":"))
            dev = os.makedev(major, minor)  # the topmost wins: mountinfo lists it last
    return dev


def down(s: Settings) -> None:
    mnt = s.pfs_mount
    # Unmount first (lazy: never block on a dead server), abort the FUSE connection if
    # it lingers, then stop the servers (a kill is fine for a throw-away instance).
    if _fuse_at(mnt):
        dev = _fuse_dev(mnt)
        run(["umount", "-l", str(mnt)], check=False, timeout=20)
        if dev is not None:
            _fusectl_abort(dev)
    stop_named("mfsmount", grace=5)
    for i in range(N_CHUNKSERVERS, 0, -1):
        stop_named(f"mfschunkserver{i}", grace=3)
    stop_named("mfsmaster", grace=3)
    for _ in range(5):  # the shared bind mount (and anything left on it)
        if not is_mounted(mnt):
            break
        if run(["umount", str(mnt)], check=False, timeout=20).returncode != 0:
            run(["umount", "-l", str(mnt)], check=False, timeout=20)
    stop_named("pfsnet", grace=2)  # the namespace, its veth end and qdiscs go with it
    if run(["ip", "link", "show", PFS_VETH], check=False).returncode == 0:
        run(["ip", "link", "del", PFS_VETH], check=False)
    if GUARD_MARK.exists():
        run(["ip", "route", "del", "unreachable", PFS_GUARD], check=False)
        GUARD_MARK.unlink()
    shutil.rmtree(DATA / "pfs", ignore_errors=True)
    shutil.rmtree(CONF, ignore_errors=True)


def _fusectl_abort(dev: int) -> None:
    """Abort the FUSE connection (minor device number) if it still exists."""
    conns = Path("/sys/fs/fuse/connections")
    made = False
    if not any(m == str(conns) for m, _, _ in mounts()):
        if run(["mount", "-t", "fusectl", "fusectl", str(conns)], check=False).returncode:
            return
        made = True
    try:
        abort = conns / str(os.minor(dev)) / "abort"
        deadline = time.monotonic() + 3  # let a clean lazy unmount finish first
        while abort.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        if abort.exists():
            log("PFS: FUSE connection still open after unmount, aborting it")
            abort.write_text("1")
    finally:
        if made:
            run(["umount", str(conns)], check=False)


def running() -> bool:
    return read_pid("mfsmaster") is not None
