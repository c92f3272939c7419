"""A real Slurm cluster of one release for tests: that release's Debian slurmctld, two
slurmd and munged, chrooted in the root of ``tests/slurm_release/root`` and in namespaces
of the test's own. The release is ``RSA_SLURM_RELEASE`` (:data:`RELEASES`: 24.11, Debian
13's, the default; 26.05, Debian testing's).

Owns :data:`RELEASE` (the release under test, its ports and paths), :func:`release_root`
(its cached root, or why there is none) and :func:`holder`/:func:`start_daemons` (the
running cluster as a :class:`Cluster`: argv runs chrooted in its namespaces, as root or as
the root's user ``rsauser``; files of its private ``/run`` are reachable from the host
through :meth:`Cluster.path`).

The namespaces: PID (its PID 1 reaps and, killed, ends every daemon), mount (a private
``/run`` and ``/tmp`` on tmpfs inside the root: configuration, state, logs, the munge key
and socket), UTS (hostname ``rsa24``, ``rsa26``) and network (only ``lo``). slurmctld
listens on 127.0.0.1:<ctld port> and the nodes ``c1``, ``c2`` (``slurmd -N``) on the next
two ports (with accounting MariaDB on the third, slurmdbd on the fourth): 6917-6921 for
24.11, 6927-6931 for 26.05, ports of their own besides the lab's (6817-6819, 6821-6824,
7820) and each other's, in a network namespace no other process shares (``lo`` with
127.0.0.1 and :attr:`Release.address`, which nothing outside it reaches). Each release
has its own ``/run/rsaNN`` inside its root and its own cached root on the host. Nothing is
mounted in the host's mount namespace and nothing of the lab is touched.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent


@dataclass(frozen=True)
class Release:
    """One Slurm release the sandbox runs: where it comes from and what it may use."""

    version: str  # Slurm's major.minor, as SLURM_VERSION starts
    debian: str  # the Debian release that ships it (tests/slurm_release/root)
    name: str  # hostname, ClusterName, /run/<name>, the capture variable's number
    ctld_port: int  # slurmctld; the slurmd of c1, c2, MariaDB, slurmdbd on the next four
    address: str  # the extra address on the namespace's lo (see SETUP)

    @property
    def capture_env(self) -> str:
        """The variable naming the directory the captures are written to."""
        return f"RSA_SLURM{self.name.removeprefix('rsa')}_CAPTURE"


RELEASES = {
    "24.11": Release("24.11", "Debian 13", "rsa24", 6917, "10.213.41.1"),
    "26.05": Release("26.05", "Debian testing", "rsa26", 6927, "10.213.42.1"),
}


def _release() -> Release:
    wanted = os.environ.get("RSA_SLURM_RELEASE", "24.11")
    if wanted not in RELEASES:
        raise SystemExit(f"RSA_SLURM_RELEASE={wanted}: no such Slurm release here "
                         f"(one of {', '.join(RELEASES)})")
    return RELEASES[wanted]


RELEASE = _release()
RUN = f"/run/{RELEASE.name}"  # inside the root, on the namespace's private /run
CONF = f"{RUN}/etc/slurm.conf"
USER, UID = "rsauser", 4242  # made by tests/slurm_release/root
CTLD_PORT = RELEASE.ctld_port
SLURMD_PORT0, MYSQL_PORT, DBD_PORT = CTLD_PORT + 1, CTLD_PORT + 3, CTLD_PORT + 4
LOCKIN_QOS = "rsa-lockin"
NODES = ("c1", "c2")
ENV = ("PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C.UTF-8", "HOME=/root",
       f"SLURM_CONF={CONF}")

# glibc's getaddrinfo(AI_ADDRCONFIG), which slurmctld 24.11 uses to listen, finds no
# address family in a namespace with loopback addresses only: one address more on lo
ADDRESS = RELEASE.address
# run by the holder, PID 1 of the new namespaces: the root's system mounts, a private
# /run and /tmp, lo up, the hostname; then it reaps (daemons become its children)
SETUP = r"""set -e
root=$1
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
mount -t sysfs sysfs "$root/sys"
mount -t tmpfs -o mode=0755,size=256m "$NAME-run" "$root/run"
mount -t tmpfs -o mode=1777,size=64m "$NAME-tmp" "$root/tmp"
hostname "$NAME"
ip link set lo up
ip addr add "$ADDRESS/32" dev lo
exec python3 -c "$REAPER"
"""
REAPER = """import os, time
print("ready", flush=True)
while True:
    try:
        os.waitpid(-1, 0)
    except ChildProcessError:
        time.sleep(0.2)
"""


def release_root() -> tuple[Path | None, str]:
    """The cached root with :data:`RELEASE` (built on first use, ~1-2 min), or None and
    the one line saying why it cannot be had."""
    try:
        done = subprocess.run([str(HERE / "root"), RELEASE.version], capture_output=True,
                              text=True, timeout=900, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"cannot build the Slurm {RELEASE.version} ({RELEASE.debian}) root: {e}"
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        return None, (lines[-1] if lines else
                      f"tests/slurm_release/root exited {done.returncode}")
    return Path(done.stdout.strip().splitlines()[-1]), ""


def slurm_conf(accounting: bool = False) -> str:
    """The cluster's slurm.conf: the lab's choices (tests/../lab/rsalab/slurm.py) on
    ports of its own; job_submit/lua, burst_buffer/lua and the SPANK plugin all on. With
    ``accounting``: slurmdbd, priority/multifactor with the QOS weight (the lock-in QOS)."""
    lines = [
        f"ClusterName={RELEASE.name}",
        f"SlurmctldHost={RELEASE.name}(127.0.0.1)",
        f"SlurmctldPort={CTLD_PORT}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"StateSaveLocation={RUN}/ctld",
        f"SlurmdSpoolDir={RUN}/d/%n",
        f"SlurmctldPidFile={RUN}/slurmctld.pid",
        f"SlurmdPidFile={RUN}/slurmd-%n.pid",
        f"SlurmctldLogFile={RUN}/log/slurmctld.log",
        f"SlurmdLogFile={RUN}/log/slurmd-%n.log",
        "SlurmctldDebug=verbose",
        "SlurmdDebug=verbose",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "SelectType=select/linear",
        "SchedulerType=sched/backfill",
        "SchedulerParameters=bf_interval=1,sched_interval=1",
        "MpiDefault=none",
        "ReturnToService=2",
        "MinJobAge=600",
        "KillWait=2",
        "InactiveLimit=0",
        "SlurmctldTimeout=30",
        "SlurmdTimeout=60",
        "MessageTimeout=10",
        "JobCompType=jobcomp/none",
        "JobSubmitPlugins=lua",
        "BurstBufferType=burst_buffer/lua",
        "DebugFlags=BurstBuffer",
        f"PlugStackConfig={RUN}/etc/plugstack.conf",
    ]
    if accounting:
        lines += [
            "AccountingStorageType=accounting_storage/slurmdbd",
            "AccountingStorageHost=127.0.0.1",
            f"AccountingStoragePort={DBD_PORT}",
            "AccountingStorageEnforce=associations,limits,qos",
            "PriorityType=priority/multifactor",
            "PriorityWeightQOS=100000",
            "PriorityWeightAge=0",
            "PriorityWeightFairshare=0",
            "PriorityWeightJobSize=0",
            "PriorityWeightPartition=0",
        ]
    else:
        lines += ["AccountingStorageType=accounting_storage/none",
                  "PriorityType=priority/basic"]
    for i, node in enumerate(NODES):
        lines.append(f"NodeName={node} NodeAddr=127.0.0.1 NodeHostname={RELEASE.name} "
                     f"Port={SLURMD_PORT0 + i} CPUs=1 RealMemory=500 State=UNKNOWN")
    lines.append(f"PartitionName=debug Nodes={','.join(NODES)} Default=YES "
                 "MaxTime=INFINITE DefaultTime=00:10:00 State=UP")
    return "\n".join(lines) + "\n"


@dataclass
class Cluster:
    """The running Slurm of :data:`RELEASE`: argv chrooted in its namespaces."""

    root: Path
    pid: int  # PID 1 of the namespaces, as the host sees it

    def argv(self, argv: Sequence[str], *, user: bool = False,
             env: Sequence[str] = ()) -> list[str]:
        who = ["setpriv", f"--reuid={UID}", f"--regid={UID}", "--clear-groups", "--"] \
            if user else []
        return ["nsenter", "-t", str(self.pid), "--net", "--mount", "--pid", "--uts", "--",
                "chroot", str(self.root), "/usr/bin/env", "-i", *ENV, *env, *who, *argv]

    def run(self, argv: Sequence[str], *, user: bool = False, check: bool = True,
            timeout: float = 30, env: Sequence[str] = (),
            input: str | None = None) -> subprocess.CompletedProcess[str]:
        """``argv`` in the cluster (as rsauser when ``user``, with ``env`` entries
        ``K=V`` over the defaults); raises on failure when ``check``, with its output."""
        done = subprocess.run(self.argv(argv, user=user, env=env), capture_output=True,
                              text=True, timeout=timeout, check=False, input=input)
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} exited {done.returncode}: "
                                 f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
        return done

    def out(self, *argv: str, user: bool = False) -> str:
        return self.run(argv, user=user).stdout

    def path(self, inside: str) -> Path:
        """A path of the cluster's mount namespace (its /run, /tmp), from the host."""
        return Path(f"/proc/{self.pid}/root{self.root}{inside}")

    def log(self, name: str) -> str:
        try:
            return self.path(f"{RUN}/log/{name}").read_text(errors="replace")
        except OSError:
            return ""

    def wait(self, what: str, ok: object, timeout: float = 30) -> None:
        """Poll the callable ``ok`` until it is true (0.2 s steps)."""
        assert callable(ok)
        deadline = time.monotonic() + timeout
        while not ok():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; "
                                     f"slurmctld.log ends: {self.log('slurmctld.log')[-1500:]}")
            time.sleep(0.2)


def write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


@contextmanager
def holder(root: Path) -> Iterator[Cluster]:
    """The namespaces, empty; everything in them ends on exit."""
    proc = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--mount", "--net", "--uts", "--propagation",
         "private", "--", "sh", "-c", SETUP, "sh", str(root)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "REAPER": REAPER, "ADDRESS": ADDRESS,
             "NAME": RELEASE.name, "RSA_SANDBOX": f"slurm{RELEASE.version}"})
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if line.strip() != "ready":
            raise RuntimeError(f"the Slurm {RELEASE.version} namespaces did not start: "
                               f"{line.strip()} {proc.stderr.read() if proc.stderr else ''}")
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text()
        yield Cluster(root, int(children.split()[0]))
    finally:
        _end(proc)


def _end(proc: subprocess.Popen[str]) -> None:
    """Kill the namespaces' PID 1 (the kernel then kills every process in them, and the
    mounts go with the last), wait for the holder, and for its processes to be gone."""
    try:
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    except OSError:
        children = []
    for pid in children:
        os.kill(int(pid), signal.SIGKILL)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    for stream in (proc.stdout, proc.stderr):
        if stream:
            stream.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in children):
        time.sleep(0.1)


def _accounting_up(c: Cluster) -> None:
    """MariaDB (its data on the namespace's /run), slurmdbd, and the cluster, account,
    user rsauser and the lock-in QOS in it."""
    db, sock = f"{RUN}/mysql", f"{RUN}/mysqld/mysqld.sock"
    for d in ("mysql", "mysqld"):
        c.path(f"{RUN}/{d}").mkdir()
    c.out("chown", "mysql:mysql", db, f"{RUN}/mysqld")
    c.out("mariadb-install-db", "--no-defaults", "--user=mysql", f"--datadir={db}",
          "--auth-root-authentication-method=socket", "--skip-test-db",
          "--force")  # no resolvable hostname here; mariadbd skips name resolution
    # mariadbd stays in the foreground: a shell in the background starts it, and the
    # namespaces' PID 1 reaps it
    c.out("sh", "-c", 'mariadbd "$@" >/dev/null 2>&1 &', "sh", "--no-defaults",
          "--user=mysql", f"--datadir={db}", f"--socket={sock}",
          f"--pid-file={RUN}/mysqld/mariadbd.pid", "--bind-address=127.0.0.1",
          f"--port={MYSQL_PORT}", "--skip-name-resolve", "--innodb-buffer-pool-size=32M",
          "--skip-log-bin", "--performance-schema=OFF", f"--log-error={RUN}/log/mariadb.log")

    def sql(text: str) -> subprocess.CompletedProcess[str]:
        return c.run(["mariadb", "--no-defaults", f"--socket={sock}", "-u", "root", "-e",
                      text], check=False)

    c.wait("mariadb", lambda: sql("SELECT 1").returncode == 0, timeout=60)
    assert sql("CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY 'rsa-test';"
               "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
               "CREATE DATABASE slurm_acct_db;").returncode == 0
    write(c.path(f"{RUN}/etc/slurmdbd.conf"), "\n".join([
        "AuthType=auth/munge", "DbdHost=localhost", "DbdAddr=127.0.0.1",
        f"DbdPort={DBD_PORT}", "SlurmUser=root", f"LogFile={RUN}/log/slurmdbd.log",
        f"PidFile={RUN}/slurmdbd.pid", "StorageType=accounting_storage/mysql",
        "StorageHost=127.0.0.1", f"StoragePort={MYSQL_PORT}", "StorageUser=slurm",
        "StoragePass=rsa-test", "StorageLoc=slurm_acct_db", ""]), 0o600)
    c.out("/usr/sbin/slurmdbd")
    c.wait("slurmdbd", lambda: c.run(["sacctmgr", "-n", "list", "cluster"],
                                     check=False).returncode == 0, timeout=60)
    for args in (["add", "cluster", RELEASE.name],
                 ["add", "qos", LOCKIN_QOS, "Priority=1000000"],
                 ["add", "account", "rsa", f"Cluster={RELEASE.name}"],
                 ["add", "user", f"{USER},root", "Account=rsa", f"Cluster={RELEASE.name}"]):
        c.out("sacctmgr", "-i", *args)


def start_daemons(c: Cluster, accounting: bool = False) -> None:
    """munged, (with ``accounting`` MariaDB and slurmdbd,) slurmctld and one slurmd per
    node, daemonized (children of the namespaces' PID 1); returns once every node is
    idle."""
    for d in ("etc", "ctld", "log", *(f"d/{n}" for n in NODES)):
        c.path(f"{RUN}/{d}").mkdir(parents=True, exist_ok=True)
    c.path("/run/munge").mkdir(mode=0o755, exist_ok=True)
    c.out("mungekey", "--create", f"--keyfile={RUN}/munge.key")
    c.out("munged", "--force", f"--key-file={RUN}/munge.key",
          "--socket=/run/munge/munge.socket.2", f"--pid-file={RUN}/munged.pid",
          f"--log-file={RUN}/log/munged.log", f"--seed-file={RUN}/munged.seed")
    c.wait("munged", lambda: c.run(["munge", "-n"], check=False).returncode == 0)
    if accounting:
        _accounting_up(c)
    c.out("/usr/sbin/slurmctld", "-i")
    c.wait("slurmctld", lambda: c.run(["scontrol", "ping"], check=False).returncode == 0)
    for node in NODES:
        c.out("/usr/sbin/slurmd", "-N", node)

    def idle() -> bool:
        states = c.run(["sinfo", "-h", "-N", "-o", "%N %t"], check=False).stdout.split("\n")
        return sorted(s for s in states if s) == sorted(f"{n} idle" for n in NODES)

    c.wait("both nodes idle", idle)


__all__ = ["CONF", "LOCKIN_QOS", "NODES", "RELEASE", "RELEASES", "RUN", "UID", "USER", "Cluster",
           "Release", "holder", "release_root", "slurm_conf", "start_daemons", "write"]
