"""Paths, settings, the process runner and the pidfile bookkeeping shared by the lab."""

from __future__ import annotations

import contextlib
import os
import pwd
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

LAB_DIR = Path(__file__).resolve().parent.parent  # <repo>/lab
REPO = LAB_DIR.parent
STATE = Path("/run/rsa-lab")  # ephemeral state: pids, configs, keys, logs, env
DATA = Path("/var/lib/rsa-lab")  # on-disk data: PFS chunks, ssd pools, Slurm/MariaDB state
PIDS = STATE / "pids"
NS = STATE / "ns"  # recorded mount-namespace ids of node namespaces
LOGS = STATE / "log"
ENV_FILE = STATE / "env"
HOOKS_LOG = STATE / "hooks.log"
CREATED = STATE / "created"  # host paths the lab created (removed again by lab-down)


def _env(name: str, default: str) -> str:
    return os.environ.get(name, default) or default


class Settings:
    """Everything a user may tune, from RSA_LAB_* environment variables."""

    def __init__(self) -> None:
        self.accounting = _env("RSA_LAB_ACCOUNTING", "1") not in ("0", "no", "false")
        self.pfs_rate = _env("RSA_LAB_PFS_RATE", "1gbit")  # tc rate, per direction
        # slurm.conf PrologFlags ("" = none: the node Prolog runs at a node's first step);
        # `make test` also runs the lifecycle tests with Alloc,Contain (lab-test-variant)
        self.prolog_flags = os.environ.get("RSA_LAB_PROLOG_FLAGS", "").strip()
        self.ram_size = _env("RSA_LAB_RAM_SIZE", "2G")  # tmpfs size of each RSA node
        self.n_compute = int(_env("RSA_LAB_COMPUTE_COUNT", "4"))
        self.n_rsa = int(_env("RSA_LAB_RSA_COUNT", "4"))
        # RSA nodes (1-based numbers) that also get an on-disk "ssd" pool.
        self.ssd_nodes = [int(x) for x in _env("RSA_LAB_SSD_NODES", "3,4").split(",") if x]
        # ram: every RSA node is in the ram tier (the ssd pools exist, unused); mixed: the
        # ssd nodes are rsad's ssd tier (their on-disk pool, RSA_LAB_SSD_SIZE each) and the
        # others its ram tier, for the tier tests (make lab-test-tiers; docs/allocation.md)
        self.tiers = _env("RSA_LAB_TIERS", "ram")
        if self.tiers not in ("ram", "mixed"):
            raise ValueError(f"RSA_LAB_TIERS={self.tiers!r}: use ram or mixed")
        # Each ssd node's pool: an ext4 image of RSA_LAB_SSD_SIZE (sparse) on its own loop
        # device, whose reads and writes are capped at RSA_LAB_SSD_RATE bytes/s each way
        # ("50M"; "0": not throttled). See lab/rsalab/ssd.py and docs/lab.md.
        self.ssd_size = _env("RSA_LAB_SSD_SIZE", "4G")
        self.ssd_rate = parse_bytes(_env("RSA_LAB_SSD_RATE", "50M"), "RSA_LAB_SSD_RATE")
        self.user = "rsauser"
        self.other_user = "rsaother"
        self.cluster = "lab"
        self.account = "rsa"
        self.qos = "rsa-lockin"
        # Without accounting rsad locks jobs in by priority. priority/basic gives ordinary
        # jobs 0xffff0000 - n (counting down), so the lock-in value must lie above that and
        # at most 0xfffffffd (scontrol's limit); job_submit.lua gets the same value.
        self.lockin_priority = 4_294_967_000
        self.partition = "debug"
        self.venv = Path(_env("RSA_LAB_VENV", str(REPO / ".venv")))
        self.pool_root = Path("/var/lib/rsa-node")  # common path seen on every RSA node
        self.pfs_mount = Path("/pfs")
        self.hooks = _read_hooks()
        # queue: rsad watches the queue (on-deck, demotion, lock-in); native: Slurm's
        # burst_buffer/lua runs slurm_plugins/burst_buffer.lua (docs/design/native-mode.md)
        # the RSA nodes' processes in a cgroup of their own with this cpu.weight (1..10000;
        # empty: none), standing in for the separate machines they are on a site
        # (lab/rsalab/nodecpu.py, issue 34)
        self.node_cpu_weight = os.environ.get("RSA_LAB_NODE_CPU_WEIGHT", "").strip()
        self.mode = _env("RSA_LAB_MODE", "queue")
        if self.mode not in ("queue", "native"):
            raise ValueError(f"RSA_LAB_MODE={self.mode!r}: use queue or native")

    @property
    def compute_nodes(self) -> list[str]:
        return [f"c{i}" for i in range(1, self.n_compute + 1)]

    @property
    def rsa_nodes(self) -> list[str]:
        return [f"rsa{i}" for i in range(1, self.n_rsa + 1)]


_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_bytes(text: str, what: str = "size") -> int:
    """``50M`` -> 52428800: a whole number with an optional binary suffix K, M, G or T
    (``KiB``, ``MB``, ``m`` read the same); ``0`` is 0."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = t[-1:] if t[-1:].isalpha() else ""
    num = t[:len(t) - len(unit)]
    if not num.isdigit() or unit not in _UNITS:
        raise ValueError(f"{what}={text!r}: use a whole number of bytes, K, M, G or T "
                         "(e.g. 50M; 0 for none)")
    return int(num) * _UNITS[unit]


def _read_hooks() -> dict[str, Path]:
    """Hook paths: lab/hooks.conf (KEY=path relative to lab/), overridable by env."""
    hooks: dict[str, Path] = {}
    for line in (LAB_DIR / "hooks.conf").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition("=")
        value = os.environ.get(key, value.strip())
        path = Path(value) if value.startswith("/") else LAB_DIR / value
        hooks[key] = path
    return hooks


# Addresses and ports (all on loopback; 127.0.0.0/8 is local on lo without any setup).
CTLD_ADDR = "127.0.0.1"
CTLD_PORT = 6817
DBD_PORT = 6819
SLURMD_PORT0 = 6821  # c1 = 6821, c2 = 6822, ...
MYSQL_PORT = 3307
RSA_NET = "127.0.1"  # rsaN = 127.0.1.N, sshd on port 22
# The PFS lives in a network namespace of ours: MooseFS refuses a loopback master
# ("localhost can't be used for connecting with master"). The host end of its veth is
# .1, the master .2, chunkservers .3, .4. The whole /16 is made unreachable in the root
# namespace first, so nothing addressed to this range can ever take the default route.
PFS_NET = "10.213.0"
PFS_PREFIX = "10.213.0.0/24"
PFS_GUARD = "10.213.0.0/16"
PFS_VETH = "rsalab-pfs0"  # host end; the namespace end is called eth0 there


def log(msg: str) -> None:
    print(f"lab: {msg}", flush=True)


def run(
    argv: Sequence[str],
    *,
    check: bool = True,
    timeout: float = 120,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
    user: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a command to completion; raise with argv and stderr tail on failure."""
    full_env = {**os.environ, **(env or {})}
    try:
        proc = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, env=full_env,
            input=input, user=user, check=False,
        )
    except subprocess.TimeoutExpired as e:
        raise LabError(f"timed out after {timeout}s: {shlex.join(argv)}") from e
    if check and proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip()[-800:]
        raise LabError(f"exit {proc.returncode}: {shlex.join(argv)}\n{tail}")
    return proc


class LabError(RuntimeError):
    pass


def spawn(
    name: str,
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
) -> int:
    """Start a long-running foreground daemon detached, log to LOGS/name.out, record its PID.

    The child writes its own pidfile before exec'ing the daemon, so a lab-up killed at any
    instant never leaves an unrecorded process behind.
    """
    PIDS.mkdir(parents=True, exist_ok=True)
    LOGS.mkdir(parents=True, exist_ok=True)
    pidfile = PIDS / f"{name}.pid"
    out = open(LOGS / f"{name}.out", "ab")  # noqa: SIM115 - handed to the child
    # The child records its /proc stat line (its start time: see running_named) before its
    # PID, then becomes the daemon (exec keeps PID and start time).
    script = 'read -r st < /proc/$$/stat; echo "$st" > "$1"; echo $$ > "$0"; shift; exec "$@"'
    wrapper = ["/bin/sh", "-c", script, str(pidfile), str(_startfile(name)), *argv]
    full_env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", **(env or {})}
    try:
        proc = subprocess.Popen(
            wrapper, stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=full_env,
            start_new_session=True,
        )
    finally:
        out.close()
    # read_pid, not exists(): the shell creates the pidfile before it writes the PID in it
    wait_for(f"pidfile of {name}", lambda: read_pid(name) is not None, timeout=10)
    return proc.pid


def read_pid(name: str) -> int | None:
    try:
        return int((PIDS / f"{name}.pid").read_text().strip())
    except (OSError, ValueError):
        return None


def _startfile(name: str) -> Path:
    return PIDS / f"{name}.start"


def _start_time(stat_line: str) -> str | None:
    """Field 22 of a /proc/PID/stat line: the start time, in clock ticks after boot."""
    fields = stat_line.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None


def running_named(name: str) -> int | None:
    """The PID of the lab's process ``name`` if that very process still runs: the pidfile's
    PID is alive AND started when the one spawn() started did (a PID the kernel reused for
    another process has another start time). None otherwise."""
    pid = read_pid(name)
    if pid is None or not alive(pid):
        return None
    try:
        have = _start_time(Path(f"/proc/{pid}/stat").read_text())
        if not _startfile(name).exists():  # recorded by an older lab: judge by the pidfile
            return pid if have and _started_by(have, PIDS / f"{name}.pid") else None
        want = _start_time(_startfile(name).read_text())
    except OSError:
        return None
    return pid if want is not None and want == have else None


def _started_by(start_ticks: str, pidfile: Path) -> bool:
    """A process started no later than its pidfile was written (1 s slack: boot time is in
    whole seconds); a reused PID belongs to a process started after the original died."""
    btime = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                 if line.startswith("btime "))
    started = btime + int(start_ticks) / os.sysconf("SC_CLK_TCK")
    return started <= pidfile.stat().st_mtime + 1.0


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie of ours is not alive for our purposes.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def stop_pid(pid: int, label: str, *, grace: float = 5.0) -> None:
    """SIGTERM, wait up to ``grace``, then SIGKILL; reap if it is our child."""
    if not alive(pid):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        _reap(pid)
        if not alive(pid):
            return
        time.sleep(0.1)
    log(f"{label} (pid {pid}) still runs {grace:g} s after SIGTERM: sending SIGKILL")
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and alive(pid):
        _reap(pid)
        time.sleep(0.1)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def stop_named(name: str, *, grace: float = 5.0) -> None:
    """Stop the process the lab started as ``name``, only if its pidfile still names it
    (see running_named), and forget it."""
    pid = read_pid(name)
    if pid is not None and alive(pid):
        if running_named(name) == pid:
            stop_pid(pid, name, grace=grace)
        else:
            log(f"{name}: pid {pid} is not the process the lab started (another start "
                "time, or none recorded): not signalled")
    (PIDS / f"{name}.pid").unlink(missing_ok=True)
    _startfile(name).unlink(missing_ok=True)


def wait_for(
    what: str, pred: Callable[[], bool], *, timeout: float = 30, every: float = 0.1
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if pred():
                return
        except Exception:
            pass
        if time.monotonic() > deadline:
            raise LabError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)


def listening(addr: str, port: int) -> bool:
    """True if something listens on addr:port (TCP), from /proc/net/tcp."""
    want = f"{_hexaddr(addr)}:{port:04X}"
    wild = f"00000000:{port:04X}"
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "0A" and fields[1] in (want, wild):
            return True
    return False


def _hexaddr(addr: str) -> str:
    return "".join(f"{int(o):02X}" for o in reversed(addr.split(".")))


def mounts() -> list[tuple[str, str, str]]:
    """(mountpoint, fstype, source) of this mount namespace."""
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        mnt = left.split()[4].replace("\\040", " ")
        fstype, source = right.split()[:2]
        out.append((mnt, fstype, source))
    return out


def is_mounted(path: Path) -> bool:
    return any(m == str(path) for m, _, _ in mounts())


def uid_of(user: str) -> int:
    return pwd.getpwnam(user).pw_uid


def note_created(path: Path) -> None:
    """Remember a host path the lab created, so lab-down can remove it (and only it)."""
    CREATED.parent.mkdir(parents=True, exist_ok=True)
    with open(CREATED, "a") as f:
        f.write(f"{path}\n")


def make_dir(path: Path, mode: int = 0o755, owner: str | None = None) -> None:
    """mkdir -p that records the top-most directory it had to create outside our roots."""
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    path.mkdir(mode=mode, parents=True, exist_ok=True)
    os.chmod(path, mode)
    if owner:
        pw = pwd.getpwnam(owner)
        os.chown(path, pw.pw_uid, pw.pw_gid)
    for p in reversed(missing):  # top-most first; lab-down removes them deepest first
        if not (str(p).startswith(str(STATE)) or str(p).startswith(str(DATA))):
            note_created(p)


def die(msg: str) -> None:
    print(f"lab: ERROR: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def as_user(user: str, argv: Sequence[str]) -> list[str]:
    """argv that drops to ``user`` in place (same PID), for daemons that do not drop."""
    return ["/usr/bin/setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups", *argv]


def in_node_ns(hostname: str, setup: str, argv: Sequence[str]) -> list[str]:
    """argv running ``setup`` (sh) then exec'ing argv in a new mount+UTS namespace.

    Propagation slave: host mounts (the shared /pfs) reach the node, the node's own
    mounts stay private to it. Same PID throughout (no --fork), so the pidfile holds.
    """
    script = f'set -e; hostname {shlex.quote(hostname)}; {setup}\nexec "$@"'
    return ["/usr/bin/unshare", "--mount", "--uts", "--propagation", "slave",
            "/bin/sh", "-c", script, hostname, *argv]


def record_ns(name: str, pid: int) -> None:
    """Remember the node's mount namespace once unshare has made it."""
    mine = os.readlink("/proc/self/ns/mnt")

    def changed() -> bool:
        return os.readlink(f"/proc/{pid}/ns/mnt") != mine

    wait_for(f"namespace of {name}", changed, timeout=10, every=0.02)
    NS.mkdir(parents=True, exist_ok=True)
    (NS / name).write_text(os.readlink(f"/proc/{pid}/ns/mnt") + "\n")


def ns_members(ns_id: str) -> list[int]:
    """PIDs living in the mount namespace ``ns_id`` (e.g. jobs, ssh sessions)."""
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if os.readlink(d / "ns/mnt") == ns_id:
                pids.append(int(d.name))
        except OSError:
            continue
    return pids
