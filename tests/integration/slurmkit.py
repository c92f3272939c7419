"""Helpers for integration tests that drive the lab's real Slurm."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, TypeVar

from rsa_scheduler.slurm.cli import CliSlurm
from tests.integration.conftest import as_user, read_lab_env, slurm_env

T = TypeVar("T")


def make_slurm(lab: Mapping[str, str], **kw: Any) -> CliSlurm:
    return CliSlurm(env={"PATH": "/usr/bin:/bin", "SLURM_CONF": lab["RSA_LAB_SLURM_CONF"]},
                    lockin_qos=lab.get("RSA_LAB_QOS", "rsa-lockin"), **kw)


def root(lab: Mapping[str, str], *argv: str) -> str:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=60,
                          env=slurm_env(lab), check=True)
    return done.stdout


def slurm_release() -> tuple[int, int]:
    """The lab's Slurm release (major, minor): ``slurmctld -V`` says e.g. slurm 24.11.5
    (22.05 on a Debian 12 lab host, 24.11 on Debian 13's)."""
    said = subprocess.run(["slurmctld", "-V"], capture_output=True, text=True, timeout=30,
                          check=True).stdout.split()[-1]
    major, minor = said.split("-")[0].split(".")[:2]
    return int(major), int(minor)


def bb_hook(stage: str) -> str:
    """The burst_buffer.lua function whose failure Slurm names in a job's reason for a
    stage (``data_in``, ``data_out``): Slurm 24.05+ poll ``slurm_bb_test_data_in`` and
    ``slurm_bb_test_data_out`` until a stage ends, and the poll reports its failure;
    22.05 runs ``slurm_bb_data_in``/``slurm_bb_data_out`` until it ends."""
    return f"slurm_bb_test_{stage}" if slurm_release() >= (24, 5) else f"slurm_bb_{stage}"


def bb_reason(stage: str) -> str:
    """What Slurm writes before a failed stage's message in the job's reason: 22.05-24.11
    ``burst_buffer/lua: <hook>: ``; 26.05 ``burst_buffer/lua: JobHeldAdmin: <hook>
    failed: `` (docs/operator-guide.md, "Slurm versions")."""
    if slurm_release() >= (26, 5):
        return f"burst_buffer/lua: JobHeldAdmin: {bb_hook(stage)} failed: "
    return f"burst_buffer/lua: {bb_hook(stage)}: "


def show_job(lab: Mapping[str, str], job: str) -> dict[str, str]:
    """A job's JobState, Reason, Comment and AdminComment, each from its own squeue call
    (never from ``scontrol show job -o``, whose values can read as other fields)."""
    def field(name: str) -> str:
        return root(lab, "squeue", "-h", "-t", "all", "-j", job, "-O", f"{name}:0").strip()

    return {"JobState": field("State"), "Reason": field("Reason"),
            "Comment": field("Comment"), "AdminComment": field("admin_comment")}


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 60.0,
             every: float = 0.5) -> T:
    """Poll ``probe`` until it returns something truthy (bounded in time). Every half
    second by default: a lab test waits through many such polls (each of Slurm's or
    rsad's steps is often under a second), and the probes are cheap (an ``squeue``, an
    ``rsa job``: ~0.05 s each)."""
    deadline = time.monotonic() + timeout
    while True:
        got = probe()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(every)


def past_requeue_delay(lab: Mapping[str, str], job: str,
                       probe: Callable[[], T | None]) -> Callable[[], T | None]:
    """``probe``, first ending Slurm's own delay of a requeued job if the job sits in it.

    Slurm gives a requeued job a begin time about two minutes ahead (Reason
    ``BeginTime``). In native mode nothing of ours touches that begin time, so a native
    test whose point is not the delay ends it as root, as an admin could
    (``StartTime=now``); in queue mode rsad's own rerun hold uses the begin time, so there
    this only calls ``probe``."""
    native = lab.get("RSA_LAB_MODE", "queue") == "native"

    def wrapped() -> T | None:
        if native:
            state = root(lab, "squeue", "-h", "-j", job, "-o", "%T %r").split()
            if state == ["PENDING", "BeginTime"]:
                subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"],
                               env=slurm_env(lab), check=False, capture_output=True,
                               timeout=60)
        return probe()

    return wrapped


class Jobs:
    """Submits jobs as the lab user and cancels every one of them afterwards."""

    def __init__(self, lab: Mapping[str, str]) -> None:
        self.lab = lab
        self.ids: list[str] = []
        self.fillers: list[str] = []  # the jobs fill() submitted to occupy every node

    def submit(self, *args: str, user: str | None = None, script: str | None = None) -> str:
        user = user or self.lab["RSA_LAB_USER"]
        argv = ["sbatch", "--parsable", "-o", "/dev/null", f"--chdir={self.lab['RSA_LAB_PFS']}"
                if user == self.lab["RSA_LAB_USER"] else "--chdir=/tmp", *args]
        if script is not None:
            path = Path(f"/tmp/rsa-test-{os.getpid()}-{len(self.ids)}.sh")
            path.write_text(script)
            path.chmod(0o644)
            argv.append(str(path))
        done = as_user(self.lab, user, argv)
        if done.returncode != 0:
            raise AssertionError(f"sbatch failed: {done.stderr.strip()}")
        job = done.stdout.strip().split(";")[0]
        self.ids.append(job)
        return job

    def cancel_all(self) -> None:
        if self.ids:
            subprocess.run(["scancel", *self.ids], env=slurm_env(self.lab), check=False,
                           capture_output=True, timeout=60)


@contextmanager
def make_jobs(lab: Mapping[str, str]) -> Iterator[Jobs]:
    jobs = Jobs(lab)
    try:
        yield jobs
    finally:
        jobs.cancel_all()
        # wait until the nodes are idle again so the next test starts from a clean cluster
        wait_for("nodes idle", lambda: all(
            line.split("|")[1] == "idle"
            for line in root(lab, "sinfo", "-h", "-N", "-o", "%N|%T").splitlines()),
            timeout=60)


LAB_DIR = Path(__file__).resolve().parents[2] / "lab"
CLEAN_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C.UTF-8", "HOME": "/root"}
RSAD_LOCK = Path("/var/lib/rsa/rsa.db.lock")  # the package's store lock: rsad's pid


def in_cluster() -> bool:
    """Whether the tests run on the cluster lab (lab/cluster/harness.py: on rsad's host,
    every other node through the door), not on the host lab."""
    return read_lab_env().get("RSA_LAB_KIND") == "cluster"


def on_node(node: str, argv: Sequence[str], *, input: str | None = None,
            timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``argv`` as root on the cluster lab's node ``node`` (lab/cluster/node's way), asked
    of the door lab/cluster/harness.py serves while the tests run."""
    ask = {"node": node, "argv": list(argv), "input": input, "timeout": timeout}
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as door:
        door.settimeout(timeout + 30)
        door.connect(read_lab_env()["RSA_LAB_DOOR"])
        door.sendall(json.dumps(ask).encode() + b"\n")
        data = b""
        while chunk := door.recv(1 << 16):
            data += chunk
    said = json.loads(data)
    done = subprocess.CompletedProcess(list(argv), int(said["rc"]), said["stdout"],
                                       said["stderr"])
    if check and done.returncode != 0:
        raise AssertionError(f"{node}: {list(argv)} exited {done.returncode}: "
                             f"{done.stderr.strip()[-600:]}")
    return done


#: the host lab's PFS veth, host end (lab/rsalab/common.py PFS_VETH): its htb class 1:10
#: shapes what the host sends the PFS, its writes
PFS_VETH = "rsalab-pfs0"
#: the cluster lab's: the storage bridge's port to the PFS's host, in the switch's network
#: namespace (lab/cluster/rsacluster.py NETWORKS): what every PFS client sends the PFS
CLUSTER_PFS_PORT = "rsacl2-pfs"
_HTB = ["burst", "256k", "cburst", "256k", "quantum", "131072"]


@contextmanager
def _pfs_shaped(lab: Mapping[str, str], rate: str, node: str, dev: str,
                host_tc: Sequence[str]) -> Iterator[None]:
    """``rate`` on one direction of the PFS's traffic for a block, the lab's own
    afterwards, also when the test fails. The cluster lab, whose PFS is not throttled:
    an htb qdisc on ``dev`` of ``node`` (through the door), removed afterwards. The host
    lab: its PFS throttle's htb class 1:10 changed, by ``host_tc`` (tc and its device),
    and set back to RSA_LAB_PFS_RATE."""
    if in_cluster():
        on_node(node, ["tc", "qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb",
                       "default", "10"], timeout=30)
        try:
            on_node(node, ["tc", "class", "replace", "dev", dev, "parent", "1:", "classid",
                           "1:10", "htb", "rate", rate, "ceil", rate, *_HTB], timeout=30)
            yield
        finally:
            on_node(node, ["tc", "qdisc", "del", "dev", dev, "root"], timeout=30)
        return

    def set_rate(r: str) -> None:
        subprocess.run([*host_tc, "parent", "1:", "classid", "1:10", "htb", "rate", r,
                        "ceil", r, *_HTB], check=True, capture_output=True, timeout=30)

    set_rate(rate)
    try:
        yield
    finally:
        set_rate(lab.get("RSA_LAB_PFS_RATE", "1gbit"))


def pfs_writes_at(lab: Mapping[str, str], rate: str) -> AbstractContextManager[None]:
    """The PFS's write bandwidth at ``rate`` for a block (:func:`_pfs_shaped`). The host
    lab: its PFS veth's host end (lab/rsalab/pfs.py). The cluster lab: the storage
    bridge's port to the PFS's host, in the switch."""
    return _pfs_shaped(lab, rate, "switch", CLUSTER_PFS_PORT,
                       ["/usr/sbin/tc", "class", "change", "dev", PFS_VETH])


#: the cluster lab's PFS host's storage interface (lab/cluster/rsacluster.py NETWORKS):
#: what it sends there is what every PFS client reads
CLUSTER_PFS_DEV = "eth2"


def pfs_reads_at(lab: Mapping[str, str], rate: str) -> AbstractContextManager[None]:
    """The PFS's read bandwidth at ``rate`` for a block (:func:`_pfs_shaped`; a stage-in
    that lasts long enough to be interrupted whatever the machine's speed). The host lab:
    its storage namespace's end of the veth (lab/rsalab/pfs.py). The cluster lab: the PFS
    host's storage interface."""
    holder = "" if in_cluster() else \
        Path("/run/rsa-lab/pids/pfsnet.pid").read_text().split()[0]
    return _pfs_shaped(lab, rate, "pfs", CLUSTER_PFS_DEV,
                       ["/usr/bin/nsenter", f"--net=/proc/{holder}/ns/net", "/usr/sbin/tc",
                        "class", "change", "dev", "eth0"])


def lab_nodes(lab: Mapping[str, str], key: str) -> list[str]:
    """The node names of a lab fact such as RSA_LAB_COMPUTE_NODES (``c[1-4]``)."""
    prefix, _, rest = lab[key].partition("[")
    if not rest:
        return [prefix]
    first, _, last = rest.rstrip("]").partition("-")
    return [f"{prefix}{i}" for i in range(int(first), int(last or first) + 1)]


def lab_rsad_pid() -> int:
    """The pid of the lab's rsad (the host lab's pidfile; the cluster lab's store lock)."""
    if in_cluster():
        pid = _cluster_rsad_pid()
        if pid is None:
            raise AssertionError(f"no rsad runs here ({RSAD_LOCK} names none)")
        return pid
    return int(Path("/run/rsa-lab/pids/rsad.pid").read_text())


def on_lab_node(node: str, argv: Sequence[str], *, timeout: float = 60,
                check: bool = False) -> subprocess.CompletedProcess[str]:
    """``argv`` as root in the mount namespace of the lab node ``node`` (a compute node
    ``cN`` or an RSA node ``rsaN``): in the host lab, entered by its slurmd's or sshd's
    pid; in the cluster lab, on that host through the door."""
    if in_cluster():
        return on_node(node, argv, timeout=timeout, check=check)
    daemon = f"slurmd-{node}" if node.startswith("c") else f"sshd-{node}"
    pid = Path(f"/run/rsa-lab/pids/{daemon}.pid").read_text().split()[0]
    return subprocess.run(["nsenter", "-t", pid, "-m", "--", *argv], capture_output=True,
                          text=True, timeout=timeout, check=check)


# The chunkservers that are standbys claimed by a RAMDISK whose fs_id matches the
# extended regex $0, in the pools $1.. of one RSA node: "PID mfschunkserver REST" as pgrep
# -a prints them (the command line names the standby, not the RAMDISK: the fs_id follows).
CLAIMED = r"""for pool in "$@"; do for sb in "$pool"/rsa-mfs-.standby-*; do
  c=$(readlink "$sb/claim" 2>/dev/null) || continue
  printf '%s\n' "$c" | grep -Eq -- "$0" || continue
  { read -r pid < "$sb/cs/.mfschunkserver.lock"; } 2>/dev/null || continue
  [ -e "/proc/$pid" ] && echo "$pid mfschunkserver -c $sb/mfschunkserver.cfg (claimed by $c)"
done; done
exit 0"""


def ramdisk_servers(lab: Mapping[str, str], pattern: str,
                    programs: str = "mfsmaster|mfschunkserver|mfsmount",
                    ) -> list[tuple[str, int, str, str]]:
    """(RSA node, PID, program, rest of its command line) of each MooseFS process of a
    RAMDISK whose fs_id matches the extended regex ``pattern``: its master and the RSA
    nodes' own mfsmounts by their command lines, its chunkservers by theirs or, for a
    standby the RAMDISK claimed (filesystem.moosefs_standby), by the claim in the pool. The
    host lab's RSA nodes share this host's PID view: found once, node ""; the cluster
    lab's are hosts of their own, each asked through the door."""
    argv = ["pgrep", "-a", "-f", f"({programs}) .*({pattern})"]
    pools = [lab[k] for k in ("RSA_LAB_POOL_RAM", "RSA_LAB_POOL_SSD") if lab.get(k)]
    claimed = ["sh", "-c", CLAIMED, pattern, *pools]
    nodes = lab_nodes(lab, "RSA_LAB_RSA_NODES")
    asked: list[tuple[str, str]] = []
    if in_cluster():
        asked += [(n, on_node(n, argv, timeout=30, check=False).stdout) for n in nodes]
    else:
        asked.append(("", subprocess.run(argv, capture_output=True, text=True,
                                         timeout=30).stdout))
    if "mfschunkserver" in programs:
        asked += [(n if in_cluster() else "", on_lab_node(n, claimed, timeout=30).stdout)
                  for n in nodes]
    found = set()
    for node, out in asked:
        for line in out.splitlines():
            fields = line.split(" ", 2)
            # (the door's own shell may carry the pattern too: only the servers count)
            if len(fields) == 3 and fields[1] in programs.split("|"):
                found.add((node, int(fields[0]), fields[1], fields[2]))
    return sorted(found)


def _cluster_rsad_pid() -> int | None:
    """rsad's pid on this host of the cluster lab: its store lock names it."""
    try:
        pid = int(RSAD_LOCK.read_text().split()[0])
        return pid if Path(f"/proc/{pid}/comm").read_text().strip() == "rsad" else None
    except (OSError, ValueError, IndexError):
        return None


def restart_lab_rsad(sig: int) -> None:
    """Stop the lab's rsad with ``sig`` (SIGKILL: a crash) and start it again on the same
    state, as lab-up does (its event log survives; only lab-down wipes it)."""
    stop_lab_rsad(sig)
    start_lab_rsad()


def stop_lab_rsad(sig: int) -> None:
    """Stop the lab's rsad with ``sig`` (SIGKILL: a crash); its state stays."""
    import signal as _signal

    pid = lab_rsad_pid()
    os.kill(pid, _signal.Signals(sig))

    def gone() -> bool:  # reaped (even while its stat is read: ESRCH), or a zombie
        try:
            return "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
        except OSError:
            return True

    wait_for("rsad gone", gone, timeout=30)
    Path("/run/rsa/rsad.sock").unlink(missing_ok=True)


def start_lab_rsad() -> None:
    """Start the lab's rsad on its state, as lab-up does (on the cluster lab, as its unit
    does: ExecStartPre ``rsad --check``, then ``rsad``)."""
    if in_cluster():
        subprocess.run(["sh", "-ec", "rsad --check >>/var/log/rsad.log 2>&1\n"
                        "setsid /usr/bin/rsad </dev/null >>/var/log/rsad.log 2>&1 &"],
                       check=True, timeout=60, env=CLEAN_ENV)
        wait_for("rsad's API", lambda: subprocess.run(
            ["rsa", "nodes"], capture_output=True, timeout=30, env=CLEAN_ENV,
            check=False).returncode == 0, timeout=60)
        return
    code = ("import sys; sys.path.insert(0, sys.argv[1]); "
            "from rsalab import common, facts, rsad; s = common.Settings(); "
            "rsad.up(s, facts.RSA_YAML)")
    subprocess.run(["/usr/bin/python3", "-c", code, str(LAB_DIR)], check=True, timeout=60,
                   env={**os.environ, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})


def crash_lab_rsa_sshd(node: str, down_for: float) -> None:
    """SIGKILL the sshd of the lab's RSA node ``node`` and start it again ``down_for``
    seconds later in the node's namespace (lab/rsalab/rsanodes.py crash_sshd; on the
    cluster lab, on that node)."""
    if in_cluster():
        on_node(node, ["sh", "-ec", f"""pid=$(cat /run/sshd.pid)
[ "$(cat /proc/$pid/comm)" = sshd ]
kill -KILL "$pid"
while [ -e /proc/$pid ]; do sleep 0.05; done
sleep {down_for}
/usr/sbin/sshd
for i in $(seq 100); do [ -s /run/sshd.pid ] && exit 0; sleep 0.1; done
exit 1"""], timeout=60 + down_for)
        return
    code = ("import sys; sys.path.insert(0, sys.argv[1]); "
            "from rsalab import common, rsanodes; "
            "rsanodes.crash_sshd(common.Settings(), sys.argv[2], float(sys.argv[3]))")
    subprocess.run(["/usr/bin/python3", "-c", code, str(LAB_DIR), node, str(down_for)],
                   check=True, timeout=90 + down_for,
                   env={**os.environ, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})


def restart_lab_slurmctld(clean: bool = False) -> None:
    """Stop the lab's slurmctld (SIGTERM, by its recorded PID) and start it again on its
    saved state, as lab-up does; running jobs keep running on their slurmd. ``clean``:
    its StateSaveLocation is emptied first, as when it is lost: every job is forgotten
    (slurmd kills the running ones) and job ids start again at FirstJobId (``-c`` alone
    keeps the id sequence: seen in the lab). On the cluster lab, on ctl."""
    if in_cluster():
        wipe = "rm -rf /var/lib/slurm/slurmctld/*\n" if clean else ""
        on_node("ctl", ["sh", "-ec", f"""pid=$(cat /run/slurm/slurmctld.pid)
[ "$(cat /proc/$pid/comm)" = slurmctld ]
kill -TERM "$pid"
for i in $(seq 100); do [ -e /proc/$pid ] || break; sleep 0.1; done
[ -e /proc/$pid ] && kill -KILL "$pid" && sleep 1
{wipe}/usr/sbin/slurmctld -i </dev/null >/dev/null 2>&1
for i in $(seq 300); do scontrol ping | grep -q UP && exit 0; sleep 0.1; done
exit 1"""], timeout=90)
        return
    wipe = ("import shutil; d = common.DATA / 'slurm/ctld'; "
            "[shutil.rmtree(p) if p.is_dir() else p.unlink() for p in d.iterdir()]; "
            if clean else "")
    code = ("import sys; sys.path.insert(0, sys.argv[1]); "
            "from rsalab import common, slurm; "
            "common.stop_named('slurmctld', grace=10); "
            f"{wipe}"
            "common.spawn('slurmctld', ['/usr/sbin/slurmctld', '-D', '-i'], env=slurm.ENV); "
            "common.wait_for('slurmctld', lambda: common.listening(slurm.CTLD_ADDR, "
            "slurm.CTLD_PORT), timeout=30)")
    subprocess.run(["/usr/bin/python3", "-c", code, str(LAB_DIR)], check=True, timeout=90,
                   env={**os.environ, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})


def install_lab_job_submit(lab: Mapping[str, str], site: bool) -> None:
    """The lab's job_submit.lua: a site's own that chains the RSA's module
    (examples/site-job_submit.lua, ``site``) or the RSA's own (lab/rsalab/slurm.py
    install_job_submit); slurmctld rereads it at the next submission."""
    if in_cluster():
        _install_cluster_job_submit(lab, site)
        return
    code = ("import sys; sys.path.insert(0, sys.argv[1]); "
            "from rsalab import common, slurm; "
            "slurm.install_job_submit(common.Settings(), site=sys.argv[2] == 'site')")
    subprocess.run(["/usr/bin/python3", "-c", code, str(LAB_DIR), "site" if site else "rsa"],
                   check=True, timeout=60,
                   env={**os.environ, **lab, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})


#: the cluster lab's job_submit.lua on ctl, and the RSA's own kept beside it while a site's
#: is in its place
CLUSTER_JOB_SUBMIT = "/etc/slurm/job_submit.lua"
CLUSTER_RSA_JOB_SUBMIT = "/etc/slurm/job_submit.lua.rsa-lab"
SITE_EXAMPLE = "/usr/share/rsa-scheduler/examples/site-job_submit.lua"


def _install_cluster_job_submit(lab: Mapping[str, str], site: bool) -> None:
    """On the cluster lab's ctl: the package's example of a site's own job_submit.lua
    (configured as the operator guide says: SlurmUser's uid, the lock-in priority, the
    mode's directive) in place of the RSA's, which is kept aside and put back without
    ``site``; the mtime moved forward so that slurmctld rereads it."""
    before = int(on_node("ctl", ["stat", "-c", "%Y", CLUSTER_JOB_SUBMIT]).stdout)
    if site:
        ours = on_node("ctl", ["cat", CLUSTER_JOB_SUBMIT]).stdout
        settings = [ln for ln in ours.splitlines()
                    if ln.startswith(("  slurm_user_uid = ", "  lockin_priority = ",
                                      "  bb_directive = "))]
        example = on_node("ctl", ["cat", SITE_EXAMPLE]).stdout
        line = "  slurm_user_uid = nil, -- `id -u slurm`"
        assert example.count(line) == 1, f"{SITE_EXAMPLE}: no line {line!r}"
        text = example.replace(line, "\n".join(settings))
        on_node("ctl", ["sh", "-ec", f"[ -e {CLUSTER_RSA_JOB_SUBMIT} ] || "
                        f"cp -p {CLUSTER_JOB_SUBMIT} {CLUSTER_RSA_JOB_SUBMIT}\n"
                        f"cat > {CLUSTER_JOB_SUBMIT}.new\n"
                        f"mv {CLUSTER_JOB_SUBMIT}.new {CLUSTER_JOB_SUBMIT}"], input=text)
    else:
        on_node("ctl", ["sh", "-ec", f"[ ! -e {CLUSTER_RSA_JOB_SUBMIT} ] || "
                        f"mv {CLUSTER_RSA_JOB_SUBMIT} {CLUSTER_JOB_SUBMIT}"])
    # slurmctld rereads job_submit.lua only when its mtime (whole seconds) grew
    stamp = max(int(time.time()), before + 1)
    on_node("ctl", ["sh", "-ec", f"chmod 0644 {CLUSTER_JOB_SUBMIT}\n"
                    f"touch -d @{stamp} {CLUSTER_JOB_SUBMIT}"])


@contextmanager
def lab_command_hidden(node: str, command: str) -> Iterator[None]:
    """``command`` (e.g. rsync) unusable on the lab's RSA node ``node`` while the context
    lasts: /dev/null bound over it in that node's mount namespace only (not executable:
    ``command -v`` finds nothing, running it fails), unbound afterwards. The host and the
    other nodes keep theirs; lab-down ends the namespace in any case."""
    if in_cluster():
        path = on_node(node, ["sh", "-c", f"command -v {command}"]).stdout.strip()
        on_node(node, ["mount", "--bind", "/dev/null", path])
        try:
            yield
        finally:
            on_node(node, ["umount", path])
        return
    pid = Path(f"/run/rsa-lab/pids/sshd-{node}.pid").read_text().split()[0]
    path = subprocess.run(["sh", "-c", f"command -v {command}"], capture_output=True,
                          text=True, check=True, timeout=10).stdout.strip()
    enter = ["nsenter", "-t", pid, "-m"]
    subprocess.run([*enter, "mount", "--bind", "/dev/null", path], check=True, timeout=30)
    try:
        yield
    finally:
        subprocess.run([*enter, "umount", path], check=True, timeout=30)


def node_path_exists(node: str, path: str | Path) -> bool:
    """Whether ``path`` exists on the lab node ``node``: the host lab's nodes share this
    host's ``/run`` and ``/pfs``; the cluster lab's node is asked through the door."""
    if in_cluster():
        return on_node(node, ["test", "-e", str(path)], check=False).returncode == 0
    return Path(path).exists()


def slurmd_mnt_ns(node: str) -> int:
    """The inode of the mount namespace slurmd of the compute node ``node`` runs in (its
    pidfile: the host lab's, or the cluster node's own ``SlurmdPidFile``)."""
    if in_cluster():
        said = on_node(node, ["sh", "-ec", "stat -L -c %i /proc/$(cat /run/slurm/slurmd.pid)"
                                           "/ns/mnt"]).stdout
        return int(said.strip())
    pid = Path(f"/run/rsa-lab/pids/slurmd-{node}.pid").read_text().strip()
    return os.stat(f"/proc/{pid}/ns/mnt").st_ino


#: the host lab's switch to ``hooks.mounts: job``: lab/hooks/log-env.sh reads it at every
#: job (its hooks run with RSA_MOUNTS set from it)
LAB_MOUNTS = Path("/run/rsa-lab/mounts")


@contextmanager
def lab_private_mounts(lab: Mapping[str, str]) -> Iterator[None]:
    """The lab's node hooks in ``hooks.mounts: job`` for a block; node-wide afterwards.
    The host lab: its switch file. The cluster lab: ``mounts: job`` in the ``hooks:``
    section of each compute node's /etc/rsa/rsa.yaml (the hooks read it at every job),
    each node's file put back afterwards."""
    if not in_cluster():
        LAB_MOUNTS.write_text("job\n")
        try:
            yield
        finally:
            LAB_MOUNTS.unlink(missing_ok=True)
        return
    saved: dict[str, str] = {}
    try:
        for node in lab_nodes(lab, "RSA_LAB_COMPUTE_NODES"):
            text = on_node(node, ["cat", "/etc/rsa/rsa.yaml"]).stdout
            if "\nhooks:\n" not in text:
                raise AssertionError(f"{node}: /etc/rsa/rsa.yaml has no hooks: section")
            saved[node] = text
            on_node(node, ["sh", "-ec", "cat > /etc/rsa/rsa.yaml"],
                    input=text.replace("\nhooks:\n", "\nhooks:\n  mounts: job\n", 1))
        yield
    finally:
        for node, text in saved.items():
            on_node(node, ["sh", "-ec", "cat > /etc/rsa/rsa.yaml"], input=text)
