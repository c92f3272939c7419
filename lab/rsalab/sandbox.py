"""``lab/sandbox NAME CMD...``: run CMD (a lab phase: ``make lab-test-native``) on a host of
its own, so that several labs run side by side on one machine (docs/lab.md, "Labs side
by side").

The lab (lab/rsalab) is one host's: its daemons listen on this host's loopback, its state
is at fixed paths (/run/rsa-lab, /var/lib/rsa-lab, /pfs, /etc/slurm/slurm.conf), its RSA
nodes' jobs live in this host's cgroup tree. A sandbox gives CMD all of that afresh, as a
second machine would:

* PID, mount, UTS, IPC, network and cgroup namespaces of its own (``unshare``): its own
  loopback and links, hostname ``sandbox-NAME``, ``/proc``, and cgroup trees whose root
  is ``rsa-sandbox-NAME`` of this host's cgroup v2 tree (the RSA nodes' per-job cgroups,
  ``rsa.jobs``, and an rsad's fence of them stay inside it) and of its cgroup v1 cpu
  hierarchy if it has one (the lab's RSA nodes' cpu cgroup);
* a root of its own: an overlay of this host's ``/`` (or of RSA_SANDBOX_ROOT: another
  Debian release's root, ``lab/host-root 13``) with a writable layer in a tmpfs
  (RSA_SANDBOX_SIZE, 8g), so whatever the lab writes to /etc, /var or /pfs is the
  sandbox's, and nothing the host removes (a host lab's lab-down removing /pfs) can
  reach under a mount of the sandbox's; fresh tmpfs ``/run`` and ``/dev/shm``;
* the lab's on-disk data (``/var/lib/rsa-lab``: the PFS's chunks, MariaDB, the ssd
  images) and ``/tmp`` on this host's disk, in ``/var/tmp/rsa-sandbox/NAME/data`` and
  ``.../tmp`` (RSA_SANDBOX_WORK): a file there leaves the page cache as on the host;
* the repository (the current directory's top, with its .venv) shared, read and written
  as on the host.

The holder of the namespaces, PID 1 inside, is a small reaper: it runs CMD, reaps what
daemonizes under it, and exits with CMD's status (before CMD, with its signal handlers in
place, it says "ready" on a pipe: from then on --exec and --stop take the sandbox as a
running one, and --detach returns); its environment, not CMD's, carries
``RSA_SANDBOX=NAME``, by which this host's lab/check-clean leaves the sandbox's processes
to it (CMD gets ``RSA_LAB_SANDBOX=NAME``: its check-clean knows /var/lib/rsa-lab is the
sandbox's mount, not a leftover of the lab's). When it exits the kernel kills every
process of the sandbox, and its mounts, links and namespaces go with them; what the
kernel keeps (loop devices, their caps, the cgroups) is removed afterwards, and then what
is left, if anything, is said. CMD runs its own lab-down and check-clean inside, as on
any host.

Exit status: CMD's, or 1 when something of the sandbox was left; 2 for bad usage.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent  # lab/
REPO = HERE.parent
WORK = Path(os.environ.get("RSA_SANDBOX_WORK", "/var/tmp/rsa-sandbox"))
SIZE = os.environ.get("RSA_SANDBOX_SIZE", "8g")
MARK = "RSA_SANDBOX"
ROOT = "RSA_SANDBOX_ROOT"
PATH = "/usr/sbin:/usr/bin:/sbin:/bin"

# Run as PID 1 of the new namespaces, in this host's root still: the sandbox's root,
# its system mounts, then pivot into it and hand over to the reaper.
SETUP = r"""set -e
w=$1; repo=$2; cgroups=$3; name=$4; size=$5; lower=$6; shift 6
r=$w/root
mount --make-rprivate /
mount -t tmpfs -o "size=$size,mode=0755" rsa-sandbox "$w/layer"
mkdir -p "$w/layer/upper" "$w/layer/work"
mount -t overlay rsa-sandbox -o "lowerdir=$lower,upperdir=$w/layer/upper,workdir=$w/layer/work" "$r"
mount --rbind /dev "$r/dev"
mount -t tmpfs -o mode=1777 rsa-sandbox-shm "$r/dev/shm"
mount --rbind /sys "$r/sys"
# each hierarchy the sandbox has a cgroup of its own in ("MOUNTPOINT TYPE OPTIONS" lines),
# mounted afresh: in the cgroup namespace its root is that cgroup
echo "$cgroups" | while read -r at type opts; do
  [ -n "$at" ] || continue
  umount "$r$at"
  mount -t "$type" ${opts:+-o "$opts"} rsa-sandbox-cgroup "$r$at"
done
mount -t proc proc "$r/proc"
mount -t tmpfs -o mode=0755 rsa-sandbox-run "$r/run"
install -d -m 1777 "$r/run/lock"
chmod 1777 "$w/tmp"
mount --bind "$w/tmp" "$r/tmp"
mkdir -p "$r/var/lib/rsa-lab" "$r$repo"
mount --bind "$w/data" "$r/var/lib/rsa-lab"
mount --rbind "$repo" "$r$repo"
if mountpoint -q /home; then mount --rbind /home "$r/home"; fi
hostname "sandbox-$name"
ip link set lo up
cd "$r"
mkdir -p .rsa-sandbox-old
pivot_root . .rsa-sandbox-old
umount -l /.rsa-sandbox-old
rmdir /.rsa-sandbox-old
cd "$repo"
exec /usr/bin/python3 -c "$REAPER" "$@"
"""

# PID 1 inside: runs the command (without the mark), reaps orphans, exits with its status
# (a signal is passed to the command's whole process group: make, its shell, pytest).
# With its handlers in place, before it starts the command, it says "ready" on the
# setup's pipe (fd RSA_SANDBOX_READY): a namespace's init ignores a signal from outside it
# has no handler for, so until then the keeper ends the sandbox by killing it, from then
# on by a signal here (one before the command's start keeps it from starting).
REAPER = """import os, signal, subprocess, sys
env = {k: v for k, v in os.environ.items()
       if k not in ("RSA_SANDBOX", "RSA_SANDBOX_ROOT",  # the root: a host path
                    "REAPER", "RSA_SANDBOX_READY")}
env["RSA_LAB_SANDBOX"] = os.environ["RSA_SANDBOX"]  # the lab's data dir is a mount of ours
child = None
early = []
def forward(n, f):
    if child is None:
        early.append(n)
        return
    try:
        os.killpg(child.pid, n)
    except OSError:
        pass
for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(sig, forward)
ready = int(os.environ["RSA_SANDBOX_READY"])
try:
    os.write(ready, b"ready\\n")
except BrokenPipeError:
    sys.exit("sandbox: its lab/sandbox is gone: the command is not started")
os.close(ready)
if early:
    sys.exit(128 + early[0])
child = subprocess.Popen(sys.argv[1:], env=env, start_new_session=True)
if early:
    forward(early[0], None)
status = 1
while True:
    try:
        pid, code = os.waitpid(-1, 0)
    except ChildProcessError:
        break
    if pid == child.pid:
        status = os.waitstatus_to_exitcode(code)
        break
sys.exit(status if status >= 0 else 128 - status)
"""


def log(msg: str) -> None:
    print(f"sandbox: {msg}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Hierarchy:
    """A cgroup hierarchy the sandbox gets a cgroup of its own in: cgroup2's (the RSA
    nodes' per-job cgroups) and a cgroup v1 one with the cpu controller (the lab's RSA
    nodes' cpu cgroup, lab/rsalab/nodecpu.py). Other v1 hierarchies are left as they are:
    the lab does not make cgroups there, and a memory cgroup the machine put us in keeps
    its limit."""

    at: str  # mount point
    type: str  # cgroup2 | cgroup
    options: str  # the v1 controllers to mount it with ("" for cgroup2)

    def cgroup(self, name: str) -> Path:
        return Path(self.at) / f"rsa-sandbox-{name}"

    def line(self) -> str:
        return f"{self.at} {self.type} {self.options}".rstrip()


def hierarchies() -> list[Hierarchy]:
    found: list[Hierarchy] = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields = right.split()
        at = left.split()[4]
        if fields[:1] == ["cgroup2"] and not any(h.type == "cgroup2" for h in found):
            found.append(Hierarchy(at, "cgroup2", ""))
        elif fields[:1] == ["cgroup"] and len(fields) > 2:
            opts = [o for o in fields[2].split(",") if o not in ("rw", "ro")]
            if "cpu" in opts:
                found.append(Hierarchy(at, "cgroup", ",".join(opts)))
    return found


def holder_alive(pidfile: Path) -> int | None:
    """The PID of a sandbox of this name still running, if any."""
    try:
        pid = int(pidfile.read_text())
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return None
    return pid if any(e.startswith(f"{MARK}=".encode()) for e in env) else None


def in_sandbox(name: str) -> list[int]:
    """This host's processes that carry the sandbox's mark, or live in its PID namespace."""
    from .clean import marked  # check-clean's own scan

    mark = f"{MARK}={name}".encode()
    holders, pidns = marked(lambda item: item == mark)
    found = set(holders)
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and os.readlink(d / "ns" / "pid") in pidns:
                found.add(int(d.name))
        except OSError:
            continue
    return sorted(found)


#: told to the command: whether this host's blkio hierarchy (which the sandbox leaves as
#: it is) shows the real root, where background writeback runs. The lab's ssd pools' cap
#: checks that by kthreadd (pid 2) in its tasks, which a PID namespace cannot see.
BLKIO_ROOT = "RSA_LAB_HOST_BLKIO_ROOT"


def blkio_is_the_root(blkio: Path = Path("/sys/fs/cgroup/blkio")) -> bool:
    try:
        return "2" in (blkio / "tasks").read_text().split()
    except OSError:
        return False


def reapers(holder: int) -> list[int]:
    """The sandbox's PID 1 as this host sees it: the child of ``unshare`` (which the
    holder's shell became)."""
    try:
        return [int(p) for p in
                Path(f"/proc/{holder}/task/{holder}/children").read_text().split()]
    except (OSError, ValueError):
        return []


def remove_cgroup(top: Path) -> str | None:
    """Remove the sandbox's cgroup subtree, deepest first (every process in it is gone)."""
    if not top.is_dir():
        return None
    for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        try:
            d.rmdir()
        except OSError as e:
            return f"cgroup {d}: {e.strerror}"
    try:
        top.rmdir()
    except OSError as e:
        return f"cgroup {top}: {e.strerror}"
    return None


def release_devices(data: Path) -> list[str]:
    """Detach the loop devices on the sandbox's ssd images and reset their caps (the
    lab's own teardown, lab/rsalab/ssd.py, pointed at the sandbox's images); what is
    left."""
    from . import ssd  # the ssd pools' own teardown

    where = ssd.Paths(images=data / "ssd", records=data / ".ssd-records")
    ssd.release(where, quiet=True)
    return ssd.leftovers(where)


SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _started(pid: int) -> str | None:
    """A process's start time (ticks after boot), None when it is gone or a zombie: with
    its PID it names the process for good."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return fields[19] if len(fields) > 19 and fields[0] != "Z" else None


def keeper_file(name: str) -> Path:
    """Where the sandbox's lab/sandbox process (its keeper) says who it is, from before
    it makes anything until it has removed all of it: what --stop signals."""
    return WORK / f"{name}.keeper"


def note_keeper(name: str, pid: int) -> None:
    WORK.mkdir(parents=True, exist_ok=True)
    keeper_file(name).write_text(f"{pid} {_started(pid)}\n")


def keeper_alive(name: str) -> int | None:
    """The PID of the keeper of a sandbox NAME, if one runs (another than this process)."""
    try:
        pid, started = keeper_file(name).read_text().split()
        if int(pid) != os.getpid() and _started(int(pid)) == started:
            return int(pid)
    except (OSError, ValueError):
        pass
    return None


def read_ready(fd: int) -> bool:
    """Whether "ready" came on the pipe fd before its end (EOF: the sandbox's setup
    failed, or it was ended); closes fd."""
    got = b""
    with os.fdopen(fd, "rb", buffering=0) as pipe:
        while chunk := pipe.read(64):
            got += chunk
            if b"ready\n" in got:
                return True
    return False


class Keeper:
    """The sandbox's lab/sandbox process while its holder runs: it watches the setup's
    pipe (the reaper says "ready" there before it starts CMD) and acts on signals, both
    in one loop, so that a signal is read after whatever came on the pipe before it.

    Once the sandbox is ready the first signal goes to CMD (through the reaper: its
    lab-down runs), a second one ends the sandbox at once (unshare's end kills its PID 1,
    and the kernel the rest). Before that a signal ends it at once too: the setup's
    shell, PID 1 there, would not see it (a namespace's init ignores a signal from
    outside that it has no handler for), and CMD has not started."""

    def __init__(self, name: str, holder: subprocess.Popen[bytes],
                 signalled: list[int]) -> None:
        self.name = name
        self.holder = holder
        self.signalled = signalled  # run()'s, with those since the holder's start
        self.handled = 0
        self.ready = False

    def on_signal(self, signum: int, _frame: object) -> None:
        self.signalled.append(signum)  # acted on by watch(), woken by the wakeup fd

    def act(self) -> None:
        while self.handled < len(self.signalled):
            signum = self.signalled[self.handled]
            self.handled += 1
            if self.ready and self.handled == 1:
                log(f"signal {signum}: ending the sandbox {self.name} (its command's own "
                    "teardown first; signal again to kill it)")
                for pid in reapers(self.holder.pid):
                    os.kill(pid, signal.SIGTERM)
            else:
                log(f"signal {signum}{' again' if self.ready else ' during its setup'}: "
                    f"killing the sandbox {self.name}")
                self.holder.kill()

    def watch(self, said: int, box: Path, tell: int | None) -> int:
        """Until the holder ends: its status. "ready" on said touches box/ready (what
        --exec looks for) and is passed on to tell."""
        wake, woken = os.pipe()
        for fd in (said, wake, woken):
            os.set_blocking(fd, False)
        old = signal.set_wakeup_fd(woken)
        for sig in SIGNALS:
            signal.signal(sig, self.on_signal)
        # the holder's end wakes us too (a handler of its own: the wakeup fd is written
        # for a signal Python handles), and is no signal to act on
        signal.signal(signal.SIGCHLD, lambda _signum, _frame: None)
        got = b""
        try:
            while self.holder.poll() is None or said >= 0:
                unseen = self.handled < len(self.signalled)  # before the wakeup fd
                select.select([wake] + ([said] if said >= 0 else []), [], [],
                              0 if unseen else 5.0)
                while True:  # the wakeup bytes: the signals are in self.signalled
                    try:
                        if not os.read(wake, 256):
                            break
                    except BlockingIOError:
                        break
                while said >= 0:  # first what came on the pipe, then the signals
                    try:
                        chunk = os.read(said, 64)
                    except BlockingIOError:
                        break
                    got += chunk
                    if b"ready\n" in got and not self.ready:
                        # the reaper's handlers are in place: a signal, even one that came
                        # before, reaches CMD (or keeps the reaper from starting it)
                        self.ready = True
                        (box / "ready").touch()
                        if tell is not None and not self.signalled:
                            # (its --detach gone, killed: no one to tell)
                            with contextlib.suppress(OSError):
                                os.write(tell, b"ready\n")
                    if not chunk:  # EOF: the setup and the reaper are gone, or ready
                        if not self.ready and not self.signalled:
                            log(f"{self.name}: its setup failed (its error is above)")
                        os.close(said)
                        said = -1
                        if tell is not None:
                            os.close(tell)
                            tell = None
                self.act()
            rc = self.holder.wait()
            return rc if rc >= 0 else 128 - rc  # killed: as a shell says it
        finally:
            signal.set_wakeup_fd(old)
            for sig in (*SIGNALS, signal.SIGCHLD):
                signal.signal(sig, signal.SIG_DFL)
            for fd in (wake, woken, said, *([tell] if tell is not None else [])):
                if fd >= 0:
                    os.close(fd)


def run(name: str, argv: list[str], lower: Path = Path("/"), tell: int | None = None) -> int:
    """The sandbox NAME running argv, until it ends; its keeper's part. ``tell``: a pipe
    to write "ready" on once the sandbox takes --exec and --stop as a running one (its
    setup done, its command starting); closed unwritten if it is not."""
    box = WORK / name
    pidfile = box / "holder.pid"
    early: list[int] = []  # signals before the Keeper's handlers

    def before(signum: int, _frame: object) -> None:
        early.append(signum)

    for sig in SIGNALS:
        signal.signal(sig, before)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)  # blocked by detach until here
    try:
        if (pid := holder_alive(pidfile) or keeper_alive(name)) is not None:
            log(f"a sandbox {name} is running (pid {pid}); end it first or choose another "
                "name")
            return 2
        note_keeper(name, os.getpid())
        tree = hierarchies()
        cgs = [h.cgroup(name) for h in tree]
        for cg in cgs:
            if (err := remove_cgroup(cg)) is not None:
                log(f"a cgroup of an earlier sandbox {name} is in use: {err}")
                return 2
        # an earlier sandbox of this name whose end was never seen to (lab/sandbox
        # killed): its loop devices first, then its data
        if (left := release_devices(box / "data")):
            log(f"an earlier sandbox {name} left: {'; '.join(left)}")
            return 2
        shutil.rmtree(box, ignore_errors=True)
        for sub in ("root", "layer", "data", "tmp"):
            (box / sub).mkdir(parents=True, exist_ok=True)
        for cg in cgs:
            cg.mkdir()
        enter = "".join(f'echo $$ > "{cg}/cgroup.procs"; ' for cg in cgs)
        said, says = os.pipe()
        if early:
            log(f"signal {early[0]}: {name} is ended before its start")
            os.close(said)
            os.close(says)
            return finish(name, box, cgs, 128 + early[0])
        holder = subprocess.Popen(
            ["sh", "-c", enter + 'exec "$@"', "sh",
             "unshare", "--pid", "--fork", "--mount", "--uts", "--ipc", "--net", "--cgroup",
             "--propagation", "private", "--kill-child", "--",
             "sh", "-c", SETUP, "sh", str(box), str(REPO), "\n".join(h.line() for h in tree),
             name, SIZE, str(lower), *argv],
            env={**os.environ, MARK: name, "REAPER": REAPER, "PATH": PATH,
                 "RSA_SANDBOX_READY": str(says),
                 BLKIO_ROOT: "1" if blkio_is_the_root() else "0"},
            pass_fds=(says,))
        os.close(says)
        pidfile.write_text(f"{holder.pid}\n")
        rc = Keeper(name, holder, early).watch(said, box, tell)
        tell = None  # watch() closed it
        return finish(name, box, cgs, rc)
    finally:
        if tell is not None:
            os.close(tell)
        try:
            if keeper_file(name).read_text().split()[:1] == [str(os.getpid())]:
                keeper_file(name).unlink()
        except OSError:
            pass


def finish(name: str, box: Path, cgs: list[Path], rc: int) -> int:
    """After the holder: wait for the kernel to end the sandbox's processes, remove what
    it keeps, say what is left."""
    deadline = time.monotonic() + 30
    while (left := in_sandbox(name)) and time.monotonic() < deadline:
        time.sleep(0.2)
    problems = [f"process {pid} still runs" for pid in left]
    if not left:
        problems += release_devices(box / "data")
        problems += [err for cg in cgs if (err := remove_cgroup(cg))]
    if problems:
        log(f"{name}: left behind: " + "; ".join(problems))
        return rc or 1
    shutil.rmtree(box, ignore_errors=True)
    return rc


USAGE = """usage (as root; NAME: lowercase letters, digits, -):
  lab/sandbox NAME CMD...            run CMD on a host of its own until it ends
  lab/sandbox --detach NAME CMD...   the same in the background (output: WORK/NAME.log)
  lab/sandbox --exec NAME CMD...     run CMD inside a running sandbox, as ssh would
  lab/sandbox --stop NAME            end a sandbox: its command's own teardown first"""


def _name_ok(name: str) -> bool:
    return re.fullmatch(r"[a-z0-9][a-z0-9-]{0,30}", name) is not None


#: how long --detach waits for the sandbox to be ready (about a second on an idle machine)
READY_WITHIN = 120.0


def detach(name: str, argv: list[str], lower: Path) -> int:
    """run() in a process of its own session, its output in WORK/NAME.log; back once the
    sandbox is ready (its setup done, its command started: --exec and --stop find it
    running), or with one line saying why it is not."""
    WORK.mkdir(parents=True, exist_ok=True)
    out = WORK / f"{name}.log"
    if (pid := holder_alive(WORK / name / "holder.pid") or keeper_alive(name)) is not None:
        log(f"a sandbox {name} is running (pid {pid}); end it first or choose another name")
        return 2
    said, says = os.pipe()
    # the keeper's signals wait for its handlers: a --stop from its first step on is seen
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    child = os.fork()
    if child == 0:  # pragma: no cover - the detached sandbox itself
        os.close(said)
        note_keeper(name, os.getpid())  # before anything of it shows, its log first
        os.setsid()
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        try:
            rc = run(name, argv, lower, tell=says)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(rc)
    os.close(says)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    if not select.select([said], [], [], READY_WITHIN)[0]:
        os.close(said)
        log(f"{name}: not ready after {READY_WITHIN:g} s (its output: {out}); "
            f"lab/sandbox --stop {name} ends it")
        return 1
    if read_ready(said):
        log(f"{name} runs in the background (pid {child}; output in {out}): "
            f"lab/sandbox --exec {name} CMD..., lab/sandbox --stop {name}")
        return 0
    _, status = os.waitpid(child, 0)
    log(f"{name} did not start (status {os.waitstatus_to_exitcode(status)}): "
        f"{why(out.read_text(errors='replace'))} (its output: {out})")
    return 1


def why(said: str) -> str:
    """What a sandbox that did not start said last: its setup's error (a failed mount),
    else lab/sandbox's own last word."""
    lines = [line.rstrip() for line in said.splitlines() if line.strip()]
    theirs = [line for line in lines  # (an indented line continues an error: mount's hint)
              if not line.startswith("sandbox: ") and not line[:1].isspace()]
    if theirs:
        return theirs[-1]
    return lines[-1].removeprefix("sandbox: ") if lines else "it said nothing"


def _running(name: str) -> tuple[int, int] | None:
    """(holder, PID 1) of the running sandbox NAME, as this host sees them."""
    holder = holder_alive(WORK / name / "holder.pid")
    if holder is None:
        return None
    pid1 = reapers(holder)
    return (holder, pid1[0]) if pid1 else None


def exec_in(name: str, argv: list[str]) -> int:
    """CMD in the running sandbox's namespaces, root and cgroups, from its PID 1's working
    directory (the repository), as a login there would run it; its status."""
    found = _running(name)
    if found is None:
        log(f"no sandbox {name} is running (lab/sandbox --detach {name} CMD... starts one)")
        return 2
    _holder, pid1 = found
    if not (WORK / name / "ready").exists():  # its PID 1 is the setup's shell still
        log(f"the sandbox {name} is still being set up: run CMD once its "
            f"lab/sandbox --detach has returned (its output: {WORK / f'{name}.log'})")
        return 2
    enter = "".join(f'echo $$ > "{h.cgroup(name)}/cgroup.procs"; ' for h in hierarchies())
    env = {k: v for k, v in os.environ.items() if k not in (MARK, ROOT, "REAPER")}
    env.update({"RSA_LAB_SANDBOX": name, "PATH": PATH,
                BLKIO_ROOT: "1" if blkio_is_the_root() else "0"})
    done = subprocess.run(
        ["sh", "-c", enter + 'exec "$@"', "sh",
         "nsenter", "-t", str(pid1), "-m", "-u", "-i", "-n", "-p", "-C", "-r", "-w", "--",
         *argv], env=env, check=False)
    return done.returncode


def stop(name: str, timeout: float = 300) -> int:
    """End a sandbox as a signal to its lab/sandbox (its keeper) would: its command's own
    teardown once it is ready, at once while it is being set up; then the sandbox's
    cleanup. Waits for the end; 0 when nothing of it is left (also when none runs)."""
    box = WORK / name
    keeper = keeper_alive(name)
    holder = holder_alive(box / "holder.pid")
    if keeper is None and holder is None:
        if box.exists() and not in_sandbox(name):  # its lab/sandbox was killed
            log(f"no sandbox {name} is running; removing what an earlier one left")
            if (rc := finish(name, box, [h.cgroup(name) for h in hierarchies()], 0)) == 0:
                log(f"{name}: removed; nothing of it is left")
            return rc
        log(f"no sandbox {name} is running")
        return 0
    if keeper is None:
        assert holder is not None
        log(f"{name}: its lab/sandbox process is gone; ending the sandbox at once")
        os.kill(holder, signal.SIGKILL)
    else:
        os.kill(keeper, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (keeper is None or _started(keeper) is None) and not in_sandbox(name):
            break
        time.sleep(0.2)
    else:
        log(f"{name} still runs {timeout:g} s after SIGTERM: lab/sandbox --stop {name} "
            "again, or kill its holder")
        return 1
    try:
        said = (WORK / f"{name}.log").read_text(errors="replace").splitlines()
    except OSError:  # a sandbox in the foreground: its output is its terminal's
        said = []
    for line in said[-20:]:
        if line.startswith("sandbox: "):
            print(line, file=sys.stderr)
    if keeper is None:
        if (rc := finish(name, box, [h.cgroup(name) for h in hierarchies()], 0)) == 0:
            log(f"{name} ended; nothing of it is left")
        return rc
    if box.exists():
        log(f"{name}: something of it is left (its output: {WORK / f'{name}.log'})")
        return 1
    log(f"{name} ended; nothing of it is left")
    return 0


def main(args: list[str]) -> int:
    mode = args[0] if args[:1] and args[0].startswith("--") else ""
    rest = args[1:] if mode else args
    need = 1 if mode == "--stop" else 2
    if mode not in ("", "--detach", "--exec", "--stop") or len(rest) < need or \
            (mode == "--stop" and len(rest) != 1) or not _name_ok(rest[0]):
        print(USAGE, file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        log("run it as root (namespaces, mounts)")
        return 2
    if mode == "--exec":
        return exec_in(rest[0], rest[1:])
    if mode == "--stop":
        return stop(rest[0])
    lower = Path(os.environ.get(ROOT, "/"))
    if not (lower / "usr/bin/python3").exists():
        log(f"{ROOT}={lower}: not a root with /usr/bin/python3 (lab/host-root builds one)")
        return 2
    if mode == "--detach":
        return detach(rest[0], rest[1:], lower)
    return run(rest[0], rest[1:], lower)
