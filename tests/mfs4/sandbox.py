"""A MooseFS 4 RSA node for tests: the Debian 13 root of ``tests/mfs4/root``, chrooted in
namespaces of its own.

Owns :func:`mfs4_root` (the cached root, or why there is none), :func:`make_node` (one
RSA node: a holder process that is PID 1 of new PID, mount and network namespaces, with
a private tmpfs pool and mount root inside the root) and :class:`ChrootHost` (the
:class:`~rsa_scheduler.hosts.Host` seam into it: every argv runs chrooted in those
namespaces, as root).

The network namespace has only ``lo``, carrying ``127.0.0.1`` and the node's data
address :data:`DATA_ADDRESS` (MooseFS refuses a loopback master, any 127/8): nothing in
it reaches any other host. Everything the node starts (daemons, mfsmount) lives in its
PID namespace; killing the holder (its PID 1) kills all of it, and the namespaces, the
tmpfs mounts and FUSE mounts in them go with their last process. Nothing is mounted in
the host's own mount namespace.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rsa_scheduler.hosts import CancelToken
from rsa_scheduler.runner import Completed, Identity, LocalRunner

HERE = Path(__file__).resolve().parent
DATA_ADDRESS = "10.213.40.1"  # on lo of the node's own network namespace only
POOL = "/var/lib/rsa/pool"  # inside the root: a tmpfs of the node's mount namespace
MOUNT_ROOT = "/run/rsa/mnt"
ENV = ("PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C.UTF-8", "HOME=/root")

# run by the holder, as PID 1 of the new namespaces: the root's system mounts, the pool
# (a tmpfs) and the mount root (a tmpfs), the node's addresses on lo; then it waits
SETUP = r"""set -e
root=$1; addr=$2; pool=$3; mnt=$4
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
mount -t sysfs sysfs "$root/sys"
mkdir -p "$root$pool" "$root$mnt" "$root/run"
mount -t tmpfs -o size=512m,mode=0755 rsa-pool "$root$pool"
mount -t tmpfs -o mode=0755 rsa-run "$root/run"
mkdir -p "$root$mnt"
ip link set lo up
ip addr add "$addr/32" dev lo
exec python3 -c "$REAPER"
"""
# PID 1 of the node reaps what daemonizes under it (orphans are its children), as init
# does on a real node: a dead daemon is gone, not a zombie that looks like it still runs
REAPER = """import os, time
print("ready", flush=True)
while True:
    try:
        os.waitpid(-1, 0)
    except ChildProcessError:
        time.sleep(0.2)
"""


def mfs4_root() -> tuple[Path | None, str]:
    """The cached Debian 13 root with MooseFS 4 (built on first use, ~1 min), or None and
    the one line saying why it cannot be had."""
    try:
        done = subprocess.run([str(HERE / "root")], capture_output=True, text=True,
                              timeout=900, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"cannot build the MooseFS 4 (Debian 13) root: {e}"
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        return None, (lines[-1] if lines else f"tests/mfs4/root exited {done.returncode}")
    return Path(done.stdout.strip().splitlines()[-1]), ""


@dataclass
class ChrootHost:
    """One MooseFS 4 RSA node: argv runs chrooted in the holder's namespaces, as root."""

    name: str
    root: Path
    pid: int  # the holder: PID 1 of the node's namespaces, as the host sees it

    def __post_init__(self) -> None:
        self._runner = LocalRunner()

    def argv(self, argv: Sequence[str]) -> list[str]:
        return ["nsenter", "-t", str(self.pid), "--net", "--mount", "--pid", "--",
                "chroot", str(self.root), "/usr/bin/env", "-i", *ENV, *argv]

    def run(self, argv: Sequence[str], *, timeout: float, check: bool = True,
            input: str | None = None, as_user: Identity | None = None,
            env: Mapping[str, str] | None = None,
            cancel: CancelToken | None = None, keep: int = 0) -> Completed:
        if as_user is not None or env:
            raise NotImplementedError("ChrootHost runs root's commands only")
        if cancel is not None:
            cancel.check()
        done = self._runner(self.argv(argv), timeout=timeout, check=check, input=input)
        return Completed(tuple(argv), done.returncode, done.stdout, done.stderr,
                         done.seconds)


@contextmanager
def make_node(root: Path, name: str = "rsa1") -> Iterator[ChrootHost]:
    """A MooseFS 4 RSA node in namespaces of its own; everything in it ends on exit."""
    holder = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--mount", "--net", "--propagation", "private",
         "--", "sh", "-c", SETUP, "sh", str(root), DATA_ADDRESS, POOL, MOUNT_ROOT],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "RSA_SANDBOX": "mfs4", "REAPER": REAPER})
    try:
        line = holder.stdout.readline() if holder.stdout else ""
        if line.strip() != "ready":
            raise RuntimeError(f"the MooseFS 4 node did not start: {line.strip()} "
                               f"{holder.stderr.read() if holder.stderr else ''}")
        children = Path(f"/proc/{holder.pid}/task/{holder.pid}/children").read_text()
        yield ChrootHost(name, root, int(children.split()[0]))
    finally:
        _end(holder)


def _end(holder: subprocess.Popen[str]) -> None:
    """Kill the node's PID 1 (the kernel then kills every process in its namespace),
    wait for the holder, and check nothing of it is left."""
    try:
        children = Path(f"/proc/{holder.pid}/task/{holder.pid}/children").read_text()
    except OSError:
        children = ""
    for pid in children.split():
        os.kill(int(pid), signal.SIGKILL)
    try:
        holder.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait(timeout=30)
    for stream in (holder.stdout, holder.stderr):
        if stream:
            stream.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_in_ns(pid) for pid in children.split()):
        time.sleep(0.1)


def _in_ns(pid: str) -> bool:
    return Path(f"/proc/{pid}").exists()


def shell(host: ChrootHost, script: str, *args: str, timeout: float = 30) -> str:
    """``sh -c script args`` on the node; its stdout."""
    return host.run(["sh", "-c", script, "sh", *args], timeout=timeout).stdout


__all__ = ["DATA_ADDRESS", "MOUNT_ROOT", "POOL", "ChrootHost", "make_node", "mfs4_root",
           "shell"]
