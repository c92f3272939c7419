"""The ssd nodes' pools: an ext4 image on a loop device of each node's own, its bandwidth
capped like a disk's (issue 17).

lab-up makes ``/var/lib/rsa-lab/ssd/rsaN.img`` per ssd node (sparse, RSA_LAB_SSD_SIZE),
formats it ext4, attaches it with ``losetup --find --show`` (direct I/O off), and the node
mounts that device at /var/lib/rsa-node/ssd inside its own mount namespace. The device is
capped at RSA_LAB_SSD_RATE bytes/s each way (cgroup v1 blkio; cgroup2 here has no io
controller):

* a throttle rule (``MAJ:MIN RATE`` in ``blkio.throttle.{read,write}_bps_device``) in the
  blkio root, where background writeback runs, and in the lab's own blkio cgroup when that
  is not the root (an fsync is charged to its caller's cgroup);
* a dirty limit of the device's own (``/sys/class/bdi/MAJ:MIN``: ``strict_limit`` 1,
  ``max_bytes`` 16 MiB; kernel >= 6.2). The chunkservers write buffered, without fsync:
  without it a writer fills the page cache at memory speed and the cap only paces the
  writeback that follows. With it a writer waits for the device once 16 MiB are dirty.

Cached reads never reach the device, so they are not capped. Each node's device is
recorded in /run/rsa-lab/ssd/<node>.json as soon as it is attached, and the rule and dirty
limit are recorded before they are set: lab-down (a fresh process) resets exactly those,
detaches the device and check-clean reports what is left. A kernel or host that cannot do
this never fails lab-up: one line says why the ssd tier is not throttled, and the facts
(RSA_LAB_SSD_THROTTLE) say it to the tests.

Loop devices are the kernel's, not a mount namespace's: a lab in a sandbox of its own
(lab/sandbox) attaches devices this host sees too, and their backing file's name reads
the same (``/var/lib/rsa-lab/ssd/rsa3.img``, the path in the namespace that attached it).
So a device is this lab's when the file it is attached to *is* one of this lab's images
(the same device and inode, :func:`backing_identity`), not when its name looks like one.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import struct
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

from .common import DATA, STATE, LabError, log, run

THROTTLE_FILES = ("blkio.throttle.read_bps_device", "blkio.throttle.write_bps_device")
DIRTY_BYTES = 16 << 20  # the device's own dirty limit (bdi max_bytes)
MOUNT_OPTIONS = "noinit_itable"  # no background zeroing of inode tables (a sparse image)


@dataclass(frozen=True)
class Paths:
    """Where the kernel's interfaces and the lab's own files are (tests use a scratch tree)."""

    blkio: Path = Path("/sys/fs/cgroup/blkio")
    bdi: Path = Path("/sys/class/bdi")
    block: Path = Path("/sys/block")
    proc_cgroup: Path = Path("/proc/self/cgroup")
    images: Path = DATA / "ssd"  # rsaN.img, or the directory rsaN without a loop device
    records: Path = STATE / "ssd"  # <node>.json per attached device; "status" for the facts
    dev: Path = Path("/dev")  # the loop devices, asked what they are attached to

    @property
    def status(self) -> Path:
        return self.records / "status"


HOST = Paths()


class Shape(Protocol):
    """What :func:`prepare` is told: the lab's Settings, or the cluster lab's ssd tier
    (lab/cluster/ssdpool.py)."""

    @property
    def ssd_nodes(self) -> list[int]: ...  # rsaN numbers, 1-based

    @property
    def n_rsa(self) -> int: ...

    @property
    def ssd_size(self) -> str: ...  # truncate's size, e.g. 4G

    @property
    def ssd_rate(self) -> int: ...  # bytes/s each way; 0: not capped


@dataclass
class Device:
    """One ssd node's loop device, as recorded for the teardown."""

    node: str
    device: str  # /dev/loopN
    majmin: str  # 7:N
    image: str
    cgroups: list[str] = field(default_factory=list)  # blkio directories given a rule
    bdi: bool = False  # strict_limit and max_bytes were set

    def save(self, where: Paths = HOST) -> None:
        where.records.mkdir(parents=True, exist_ok=True)
        tmp = where.records / f".{self.node}.tmp"
        tmp.write_text(json.dumps(asdict(self)) + "\n")
        tmp.replace(where.records / f"{self.node}.json")

    @classmethod
    def load(cls, path: Path) -> Device:
        data = json.loads(path.read_text())
        return cls(**data)


# --- what the kernel says (pure: text in, values out) -------------------------------------


def blkio_cgroup(proc_cgroup: str) -> str:
    """The blkio cgroup of a /proc/PID/cgroup text ("/" when not listed)."""
    for line in proc_cgroup.splitlines():
        _, controllers, path = [*line.split(":", 2), "", ""][:3]
        if "blkio" in controllers.split(","):
            return path or "/"
    return "/"


def parse_rules(text: str) -> dict[str, int]:
    """``blkio.throttle.*_bps_device``: ``MAJ:MIN RATE`` lines -> {MAJ:MIN: RATE} (a rate
    of 0 is no rule: writing it removes the rule)."""
    rules = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit() and int(parts[1]):
            rules[parts[0]] = int(parts[1])
    return rules


def service_bytes(text: str, majmin: str, op: str = "Write") -> int:
    """The ``MAJ:MIN OP BYTES`` count of ``blkio.throttle.io_service_bytes[_recursive]``
    (0 when the device has none yet)."""
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == majmin and parts[1] == op:
            return int(parts[2])
    return 0


def rule_dirs(where: Paths = HOST) -> list[Path]:
    """The blkio directories a rule goes in: the root, and the lab's own cgroup if not it."""
    try:
        own = blkio_cgroup(where.proc_cgroup.read_text())
    except OSError:
        own = "/"
    dirs = [where.blkio]
    if own != "/":
        dirs.append(where.blkio / own.lstrip("/"))
    return dirs


def preflight(majmin: str, where: Paths = HOST) -> str | None:
    """Why the device ``majmin`` cannot be capped here, or None if it can."""
    for d in rule_dirs(where):
        for name in THROTTLE_FILES:
            f = d / name
            if not f.exists():
                return f"no {f} (cgroup v1 blkio with throttling is needed)"
            if not os.access(f, os.W_OK):
                return f"{f} is not writable"
    try:
        tasks = where.blkio.joinpath("tasks").read_text().split()
    except OSError as e:
        return f"cannot read {where.blkio}/tasks: {e.strerror}"
    # in lab/sandbox's PID namespace kthreadd is not seen: the sandbox looked for it
    if "2" not in tasks and os.environ.get("RSA_LAB_HOST_BLKIO_ROOT") != "1":
        return (f"kthreadd (pid 2) is not in {where.blkio}/tasks: not the host's real blkio "
                "root, so background writeback would escape the cap")
    for name in ("strict_limit", "max_bytes"):
        f = where.bdi / majmin / name
        if not f.exists():
            return f"no {f} (kernel >= 6.2 needed): buffered writes would outrun the cap"
    return None


DELETED = " (deleted)"  # what the kernel appends to the name of a removed backing file


def _backing_name(device: str, where: Paths) -> str | None:
    f = where.block / Path(device).name / "loop" / "backing_file"
    try:
        return f.read_text().strip()
    except OSError:
        return None


def backing_file(device: str, where: Paths = HOST) -> str | None:
    """The file a loop device is attached to, or None when it is not attached."""
    name = _backing_name(device, where)
    return None if name is None else name.removesuffix(DELETED)


LOOP_GET_STATUS64 = 0x4C05  # linux/loop.h
LOOP_INFO64 = 232  # sizeof(struct loop_info64); lo_device, lo_inode are its first fields


def backing_identity(device: str, where: Paths = HOST) -> tuple[int, int] | None:
    """(device, inode) of the file a loop device is attached to, as the kernel holds it
    (the same whichever mount namespace attached it), or None when it cannot be asked
    (not attached, no such device node)."""
    try:
        fd = os.open(where.dev / Path(device).name, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = fcntl.ioctl(fd, LOOP_GET_STATUS64, bytes(LOOP_INFO64))
    except OSError:
        return None
    finally:
        os.close(fd)
    lo_device, lo_inode = struct.unpack_from("=QQ", info)
    return lo_device, lo_inode


def _image_identities(where: Paths) -> set[tuple[int, int]]:
    found = set()
    with contextlib.suppress(OSError):
        for f in where.images.glob("*.img"):
            with contextlib.suppress(OSError):
                st = f.stat()
                found.add((st.st_dev, st.st_ino))
    return found


def is_ours(device: str, where: Paths = HOST) -> bool:
    """Whether ``device`` is attached to one of this lab's images: the very file, whatever
    its name reads from here (attached in a mount namespace since gone, it reads relative
    to the mount it was reached through: ``/ssd/rsa3.img``), when the device can be asked;
    else by the file's name (a scratch tree). An image removed while still attached (its
    name marked deleted) is the lab's by its name alone, as nothing else can say whose it
    was; another lab's image of the same name, still there, is not."""
    name = _backing_name(device, where)
    if name is None:
        return False
    ident = backing_identity(device, where)
    if ident is not None and ident in _image_identities(where):
        return True
    if not Path(name.removesuffix(DELETED)).is_relative_to(where.images):
        return False
    return name.endswith(DELETED) or ident is None


def lab_loops(where: Paths = HOST) -> list[Device]:
    """Loop devices attached to an image of the lab's (recorded or not)."""
    found = []
    for d in sorted(where.block.glob("loop*")):
        backing = backing_file(d.name, where)
        if backing is None or not is_ours(d.name, where):
            continue
        with contextlib.suppress(OSError):
            majmin = (d / "dev").read_text().strip()
            found.append(Device(Path(backing).stem, f"/dev/{d.name}", majmin, backing))
    return found


def recorded(where: Paths = HOST) -> list[Device]:
    out = []
    for f in sorted(where.records.glob("*.json")):
        with contextlib.suppress(OSError, ValueError, TypeError):
            out.append(Device.load(f))
    return out


# --- lab-up -------------------------------------------------------------------------------


def prepare(s: Shape, where: Paths = HOST, rate_setting: str = "RSA_LAB_SSD_RATE") -> None:
    """Make every ssd node's image and device and cap the devices (before the nodes start).
    Logs one line: the pools and their cap, or why they are not capped (``rate_setting``:
    the variable that set the rate, named when it is 0)."""
    names = [f"rsa{i}" for i in s.ssd_nodes if 1 <= i <= s.n_rsa]
    shutil.rmtree(where.images, ignore_errors=True)
    _mkdir(where.images)
    devices: list[Device] = []
    why: str | None = None
    try:
        for name in names:
            devices.append(_attach(s, name, where))
    except (LabError, OSError) as e:
        why = f"no loop device for the ssd pools ({_last_line(e)})"
    if why:
        release(where, quiet=True)  # whatever was attached
        for name in names:
            _mkdir(where.images / name)
        pool = "dir"
    else:
        pool = "loop" if names else "none"
        why = _cap(devices, s.ssd_rate, where, rate_setting) if names else "no ssd nodes"
    status = {"pool": pool, "throttle": "on" if why is None else f"off: {why}",
              "rate": s.ssd_rate}
    where.records.mkdir(parents=True, exist_ok=True)
    where.status.write_text(json.dumps(status) + "\n")
    where_is = (", ".join(f"{d.node}={d.device}" for d in devices) if pool == "loop"
                else f"directories in {where.images}")
    if why is None:
        log(f"ssd pools: {where_is} (ext4 images of {s.ssd_size}), capped at "
            f"{s.ssd_rate / (1 << 20):g} MiB/s each way")
    elif names:
        log(f"ssd tier NOT throttled: {why}; ssd pools: {where_is}")


def _last_line(e: BaseException) -> str:
    """A failed command's last word on it (run() puts argv first, stderr's tail after)."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return lines[-1] if lines else type(e).__name__


def _mkdir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o755)


def _attach(s: Shape, name: str, where: Paths) -> Device:
    img = where.images / f"{name}.img"
    run(["truncate", "-s", s.ssd_size, str(img)])
    run(["mkfs.ext4", "-q", "-F", "-m", "0", "-L", f"rsa-ssd-{name}",
         "-E", "lazy_itable_init=1,lazy_journal_init=1", str(img)])
    dev = run(["losetup", "--find", "--show", "--direct-io=off", str(img)]).stdout.strip()
    try:
        majmin = (where.block / Path(dev).name / "dev").read_text().strip()
    except OSError:
        run(["losetup", "-d", dev], check=False)
        raise
    d = Device(name, dev, majmin, str(img))
    d.save(where)
    return d


def _cap(devices: list[Device], rate: int, where: Paths,
         rate_setting: str = "RSA_LAB_SSD_RATE") -> str | None:
    """Cap every device; why not (nothing left set) or None."""
    if rate == 0:
        return f"{rate_setting}=0"
    for d in devices:
        why = preflight(d.majmin, where)
        if why:
            return why
    try:
        for d in devices:
            throttle(d, rate, where)
    except OSError as e:
        for d in devices:
            unthrottle(d, where)
        return f"setting the cap failed: {e}"
    return None


def throttle(d: Device, rate: int, where: Paths = HOST) -> None:
    """Rules in the blkio root (and own cgroup), then the device's dirty limit; each
    recorded before it is set."""
    dirs = rule_dirs(where)
    d.cgroups = [str(p) for p in dirs]
    d.save(where)
    for p in dirs:
        for name in THROTTLE_FILES:
            (p / name).write_text(f"{d.majmin} {rate}\n")
    d.bdi = True
    d.save(where)
    bdi = where.bdi / d.majmin
    (bdi / "strict_limit").write_text("1\n")
    (bdi / "max_bytes").write_text(f"{DIRTY_BYTES}\n")


def unthrottle(d: Device, where: Paths = HOST) -> list[str]:
    """Reset what ``throttle`` recorded: rules to 0 (removed), strict_limit 0, max_ratio
    100 (which resets max_bytes). Problems, if any."""
    problems = []
    for p in d.cgroups:
        for name in THROTTLE_FILES:
            try:
                Path(p, name).write_text(f"{d.majmin} 0\n")
            except OSError as e:
                problems.append(f"{p}/{name}: {e.strerror or e}")
    if d.bdi:
        bdi = where.bdi / d.majmin
        for name, value in (("strict_limit", "0"), ("max_ratio", "100")):
            try:
                (bdi / name).write_text(f"{value}\n")
            except OSError as e:
                problems.append(f"{bdi}/{name}: {e.strerror or e}")
    return problems


def mount_setup(name: str, mountpoint: Path, where: Paths = HOST) -> str:
    """The node's shell step that puts its ssd pool at ``mountpoint``: its recorded device
    (ext4), else its directory (no loop device). A restarted node reuses either as is."""
    rec = where.records / f"{name}.json"
    if rec.exists():
        d = Device.load(rec)
        return f"mount -t ext4 -o {MOUNT_OPTIONS} {d.device} {mountpoint}"
    disk = where.images / name
    _mkdir(disk)
    return f"mount --bind {disk} {mountpoint}"


def status(where: Paths = HOST) -> dict[str, str]:
    """What prepare found, for the lab's facts."""
    try:
        data = json.loads(where.status.read_text())
    except (OSError, ValueError):
        data = {"pool": "unknown", "throttle": "off: the lab recorded no ssd status",
                "rate": 0}
    return {"pool": str(data["pool"]), "throttle": str(data["throttle"]),
            "rate": str(data["rate"])}


# --- lab-down and check-clean -------------------------------------------------------------


def _losetup_detach(device: str) -> str | None:
    done = run(["losetup", "-d", device], check=False)
    return None if done.returncode == 0 else f"losetup -d {device}: {done.stderr.strip()}"


def release(where: Paths = HOST, *, quiet: bool = False,
            detach: Callable[[str], str | None] = _losetup_detach) -> None:
    """Reset the caps of the lab's devices, detach them and forget them (after the nodes
    are stopped; idempotent). A device now attached to a file not of the lab is left alone.
    ``detach`` detaches a device (losetup -d), saying what went wrong if anything."""
    devices = recorded(where)
    known = {d.device for d in devices}
    for d in lab_loops(where):  # attached, but the record was never written
        if d.device not in known:
            d.cgroups, d.bdi = [str(p) for p in rule_dirs(where)], True
            devices.append(d)
    detached = []
    for d in devices:
        rec = where.records / f"{d.node}.json"
        backing = backing_file(d.device, where)
        if backing is not None and not is_ours(d.device, where):
            log(f"{d.device} ({d.node}'s ssd pool once) now backs {backing}: left alone")
            rec.unlink(missing_ok=True)
            continue
        problems = unthrottle(d, where)
        if backing is not None:
            err = detach(d.device)
            if err:
                problems.append(err)
            detached.append(d.device)
        if problems:
            log(f"WARNING: {d.node}'s ssd device {d.device}: {'; '.join(problems)}")
        else:
            rec.unlink(missing_ok=True)
    # A device still mounted in a dying node namespace detaches once released.
    deadline = time.monotonic() + 10
    while any(backing_file(dev, where) for dev in detached) and time.monotonic() < deadline:
        time.sleep(0.1)
    busy = [dev for dev in detached if backing_file(dev, where)]
    if busy and not quiet:
        log(f"WARNING: {', '.join(busy)} still attached (busy); detached once released")
    where.status.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        where.records.rmdir()


def leftovers(where: Paths = HOST) -> list[str]:
    """For check-clean: a device record, a loop device on a lab image, a rule or dirty
    limit still set on one of them."""
    found = []
    devices = recorded(where)
    found += [f"ssd device record {where.records}/{d.node}.json ({d.device} {d.majmin})"
              for d in devices]
    loops = lab_loops(where)
    found += [f"loop device {d.device} ({d.majmin}) on {d.image}" for d in loops]
    majmins = {d.majmin for d in devices + loops}
    dirs = {str(p) for p in rule_dirs(where)} | {c for d in devices for c in d.cgroups}
    for p in sorted(dirs):
        for name in THROTTLE_FILES:
            try:
                rules = parse_rules(Path(p, name).read_text())
            except OSError:
                continue
            found += [f"blkio throttle rule {m} {rules[m]} in {p}/{name}"
                      for m in sorted(majmins & rules.keys())]
    for m in sorted(majmins):
        with contextlib.suppress(OSError):
            if (where.bdi / m / "strict_limit").read_text().strip() == "1":
                found.append(f"bdi {m} strict_limit 1")
    return found
