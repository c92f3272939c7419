"""The mounts of one job on one compute node, made and undone by root.

Owns :class:`JobMounts`: the per-job directory ``<base>/<node>/<job>/`` (private, root
only, as are ``<base>`` and ``<base>/<node>``: :func:`ensure_root_dirs`) with the
RAMDISK's client mount (``ramdisk/``), a read-only bind of it (``ro/``, so the bind over
DATA_IN is read-only from its first instant) and ``mounts.json``, the
LIFO record of every mount made, which the node agent and the Epilog undo. Mounts over
user paths are made and undone by handle (:mod:`~rsa_scheduler.node.handles`): the
directory is opened by :func:`~rsa_scheduler.node.paths.open_target` (no symlink
anywhere, checked), a detached copy of the RAMDISK (or the union overlay) is attached on
that very descriptor, and the record names the mount by id plus its filesystem's device
(both from procfs: a RAMDISK whose servers are gone is never asked). To undo it the path
is walked again without following symlinks and the mount found there must be the
recorded one; it is detached through its descriptor. If the user renamed or replaced a
component meanwhile, the path is refused (one line in the report) and a lazy release
detaches the mount by its id where it is now, if that place is reachable without
symlinks; else it is left and reported. A failure half-way unwinds what was made,
newest first.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import json
import os
import shutil
import stat
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from rsa_scheduler.errors import RsaError
from rsa_scheduler.fs import beegfs, mfsproxy
from rsa_scheduler.node import handles
from rsa_scheduler.node.paths import UnsafePath, Who, open_nofollow, open_target
from rsa_scheduler.node.plan import substitute
from rsa_scheduler.runner import CommandError, run

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MNT_DETACH = 2
#: the directive that names a mount's target, by the instruction's role (for messages)
DIRECTIVES = {"input": "#RSA_DATA_IN", "output": "#RSA_DATA_OUT"}
DEFAULT_BASE = "/run/rsa/node"
#: in the node's state directory (``base``): what every guard load on this node named
#: (proxy addresses, servers), and the lock its loads take (guard_proxy)
GUARD_FILE = "guard.json"
GUARD_LOCK = "guard.lock"
#: in ``<base>/<node>``: the lock one job's check for other jobs' mounts and its attach
#: take together (JobMounts._attach_lock)
ATTACH_LOCK = "attach.lock"
#: what else lives in the per-job directory: job.env for the SPANK plugin (jobstate), the
#: job's mount namespace handle and the plugin's job-container lock (namespace)
JOB_FILES = ("job.env", ".job.env.tmp", "mnt", "carry.lock", "carried")
#: programs rsad may have a node run (as root) to client-mount a RAMDISK; anything else
#: is refused, so a forged or confused answer cannot make root run an arbitrary program
CLIENT_PROGRAMS = frozenset({"mfsmount", "mount", "umount", "fusermount", "fusermount3",
                             "beegfs-client", "mount.beegfs", "mount.glusterfs"})


def client_argv_of(ins: Mapping[str, Any]) -> list[str]:
    """A mount instruction's client argv: in the clear (``client_argv``, a node of an
    older protocol), or sealed by rsad (``sealed_argv``: a MUNGE credential restricted
    to root, daemon/api.py ``sealed``), decoded here, once, as root. A credential of any
    uid but rsad's (root) is no instruction of rsad's."""
    if "sealed_argv" not in ins:
        return [str(a) for a in ins["client_argv"]]
    from rsa_scheduler import munge

    try:
        sender, payload = munge.decode(str(ins["sealed_argv"]))
        argv = json.loads(payload)
    except (munge.MungeError, ValueError) as e:
        raise MountError(f"cannot open rsad's sealed mount command: {e}") from e
    if sender.uid != 0 or not isinstance(argv, list):
        raise MountError(f"the sealed mount command is not rsad's (sealed by uid "
                         f"{sender.uid}): refused")
    return [str(a) for a in argv]


def check_client_argv(argv: Sequence[str]) -> None:
    if not argv or os.path.basename(str(argv[0])) not in CLIENT_PROGRAMS:
        prog = argv[0] if argv else "(empty)"
        raise MountError(f"refusing to run {prog!r} as root to mount the RAMDISK "
                         f"(allowed: {', '.join(sorted(CLIENT_PROGRAMS))})")

def secret_to_file(argv: Sequence[str], where: Path) -> tuple[list[str], list[Path]]:
    """Keep a RAMDISK's access secret out of the node's process table; returns the argv
    to run and the files to remove once it ran (the client reads them as it mounts).
    The files go to ``where`` (the job's node directory, which only root can change),
    root-only; other users of the node could read the secret in /proc.

    - moosefs: an ``mfspassword=`` mount option moves into a config file given with
      ``-c``.
    - beegfs: the ``rsaConnAuth=`` option (rsad's, never mount's) becomes the instance's
      connAuthFile, byte for byte as on the RSA nodes, and a client config file naming
      it, given as ``cfgFile=`` (BeeGFS 7 has no connAuthFile mount option)."""
    out = list(argv)
    for i, a in enumerate(out[:-1]):
        if a != "-o":
            continue
        opts = out[i + 1].split(",")
        if any(o.startswith("mfspassword=") for o in opts):
            secret = next(o for o in opts if o.startswith("mfspassword="))
            rest = [o for o in opts if not o.startswith("mfspassword=")]
            out[i:i + 2] = ["-o", ",".join(rest)] if rest else []
            path = _private_file(where / "mfsmount.cfg", secret + "\n")
            return [*out, "-c", str(path)], [path]
        mark = f"{beegfs.SECRET_OPTION}="
        if any(o.startswith(mark) for o in opts):
            secret = next(o for o in opts if o.startswith(mark))[len(mark):]
            auth = _private_file(where / "beegfs-conn.auth", secret)
            conf = _private_file(where / "beegfs-client.conf", f"connAuthFile = {auth}\n")
            rest = [o for o in opts if not o.startswith(mark)]
            out[i + 1] = ",".join([*rest, f"cfgFile={conf}"])
            return out, [conf, auth]
    return out, []


def _private_file(path: Path, text: str) -> Path:
    """A fresh root-only file (never one a user planted: O_EXCL, O_NOFOLLOW)."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


def guard_proxy(argv: Sequence[str], *, timeout: float, mounting: bool = True,
                keep: Path | None = None) -> list[str]:
    """Before an mfsmount whose master proxy is to listen on a guarded address, or whose
    argv names RSA-node servers to guard (``rsaguard=``, rsad's option), load the nftables
    guard that keeps everyone but root off them (fs/mfsproxy.py); a node that cannot is
    refused the mount, never given an unguarded one. Returns the argv to run (without
    ``rsaguard=``). ``mounting`` False: a Prolog whose job mounts nothing loads it alone
    (its errors then say so). ``keep``: the node's root-only state directory, where
    :data:`GUARD_FILE` records what every load on this node guarded: each load names it
    all (a load replaces the table whole; another job's mount may have named another
    proxy address or other servers), under a lock, so two Prologs never lose a rule."""
    what = ("cannot mount the RAMDISK on this node" if mounting else
            "cannot keep this node's users off the RSA nodes' servers")
    try:
        argv, servers = mfsproxy.take_servers(argv)
        address = mfsproxy.proxy_address_of(argv)
    except mfsproxy.ProxyAddressError as e:
        raise MountError(f"refusing the RAMDISK mount: {e}" if mounting
                         else f"{what}: {e}") from e
    if address is None and servers is None:
        return argv
    search = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    nft = shutil.which("nft", path=search)
    if nft is None:
        raise MountError(f"{what}: nft not found; install "
                         "nftables here (it keeps other users off the RAMDISK's servers and "
                         "mfsmount's master proxy; docs/security.md)")
    try:
        if keep is None:
            run([nft, "-f", "-"], input=mfsproxy.ruleset(address, servers),
                timeout=timeout)
            return argv
        ensure_root_dirs(keep, private=keep)
        lock = os.open(keep / GUARD_LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW
                       | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            addresses, groups = _guarded(keep / GUARD_FILE)
            addresses |= {address} if address is not None else set()
            groups |= {servers} if servers is not None else set()
            # recorded first: a load that fails (or is killed) is named by the next
            _private_file(keep / f"{GUARD_FILE}.tmp", json.dumps(
                {"proxies": sorted(addresses),
                 "servers": sorted(g.option() for g in groups)}) + "\n").replace(
                keep / GUARD_FILE)
            run([nft, "-f", "-"], input=mfsproxy.guard_ruleset(addresses, groups),
                timeout=timeout)
        finally:
            os.close(lock)  # the lock goes with it
    except CommandError as e:
        raise MountError(f"cannot guard the RAMDISK's servers and mfsmount's master "
                         f"proxy on this node: {e}") from e
    except (OSError, MountError) as e:
        raise MountError(f"{what}: its guard record in {keep}: {e}") from e
    return argv


def _guarded(path: Path) -> tuple[set[str], set[mfsproxy.Servers]]:
    """What earlier loads on this node guarded (:data:`GUARD_FILE`; none: nothing)."""
    try:
        data = json.loads(path.read_text())
        addresses = {mfsproxy.check_address(str(a)) for a in data.get("proxies") or ()}
        groups = {mfsproxy.Servers.parse(str(o).removeprefix(f"{mfsproxy.GUARD_OPTION}="))
                  for o in data.get("servers") or ()}
    except FileNotFoundError:
        return set(), set()
    except (ValueError, AttributeError, mfsproxy.ProxyAddressError):
        return set(), set()  # unreadable: this load's own rules, recorded anew
    return addresses, groups


_libc: ctypes.CDLL | None = None


def _c() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def sys_mount(source: str, target: str, fstype: str | None, flags: int,
              data: str | None = None) -> None:
    rc = _c().mount(source.encode(), target.encode(), fstype.encode() if fstype else None,
                    ctypes.c_ulong(flags), data.encode() if data else None)
    if rc != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"mount {source} on {target}: {os.strerror(e)}")


def sys_umount(target: str, flags: int = 0) -> None:
    rc = _c().umount2(target.encode(), ctypes.c_int(flags))
    if rc != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"umount {target}: {os.strerror(e)}")


class MountError(RsaError):
    """A node-side mount step failed; the message is for the user and the log."""


def check_root_dir(path: str) -> None:
    """``path`` must be a directory (not a symlink) that only root can change: owned by
    root, not group/world-writable unless sticky (as /tmp)."""
    st = os.lstat(path)
    mode = stat.S_IMODE(st.st_mode)
    if (not stat.S_ISDIR(st.st_mode) or st.st_uid not in (0, os.geteuid())
            or (mode & 0o022 and not mode & stat.S_ISVTX)):
        kind = ("a symlink" if stat.S_ISLNK(st.st_mode)
                else f"owner uid {st.st_uid}, mode {mode:04o}")
        raise MountError(f"{path} is not a root-only directory ({kind}); the RSA keeps "
                         "its node state only below directories no user can change: fix "
                         "it or set RSA_NODE_DIR")


def ensure_root_dirs(path: Path, private: Path | None = None) -> None:
    """Create ``path`` and its missing parents and check every component with
    :func:`check_root_dir`, parents first, so none could be made or swapped by a user.

    Components from ``private`` down (the node state directory ``<node_dir>`` and
    ``<node_dir>/<node>``) are root's alone, 0700: only root goes through them (the
    hooks, the node agent, the SPANK plugin in slurmstepd, the mfsmount they start),
    and listed by anyone they would name every job with RAMDISK state on the node.
    One an older version made 0755 is tightened here (:func:`_tighten`); the parents
    above it (``/run/rsa``, rsad's socket directory on its host) are made 0755."""
    real = Path(os.path.realpath(path))  # a root-owned /var/run -> /run is fine
    own = Path(os.path.realpath(private)) if private is not None else None
    for d in (*reversed(real.parents), real):
        mine = own is not None and (d == own or own in d.parents)
        with contextlib.suppress(FileExistsError):
            os.mkdir(d, 0o700 if mine else 0o755)
        check_root_dir(str(d))
        if mine:
            _tighten(d)


def _tighten(path: Path) -> None:
    """``path`` (a root-only directory, :func:`check_root_dir` passed) to 0700, through a
    descriptor of that very directory. A sticky one (``/tmp`` named as the node
    directory) is shared by design and left as it is."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        mode = stat.S_IMODE(os.fstat(fd).st_mode)
        if mode != 0o700 and not mode & stat.S_ISVTX:
            os.fchmod(fd, 0o700)
    finally:
        os.close(fd)


@dataclass(frozen=True, slots=True)
class Released:
    ok: bool
    busy: bool = False
    message: str = ""


class JobMounts:
    """Everything job ``job`` has mounted on node ``node``."""

    def __init__(self, job: str, node: str, base: str = DEFAULT_BASE,
                 command_timeout: float = 8.0) -> None:
        self.job = job
        self.node = node
        self.base = Path(base)
        self.dir = self.base / node / job
        self.ramdisk = self.dir / "ramdisk"
        self.ro = self.dir / "ro"
        self.state_file = self.dir / "mounts.json"
        self.command_timeout = command_timeout

    # ---- state --------------------------------------------------------------------------
    def entries(self) -> list[dict[str, Any]]:
        try:
            data = json.loads(self.state_file.read_text())
        except FileNotFoundError:
            return []
        except ValueError:
            return []
        return [e for e in data.get("mounts", []) if isinstance(e, dict)]

    def _save(self, entries: Sequence[dict[str, Any]], seq: int | None = None) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"job": self.job, "node": self.node, "seq": seq,
                                   "mounts": list(entries)}))
        tmp.replace(self.state_file)

    def prepare(self) -> None:
        """Make the per-job directory, private, below directories only root can change
        (else a user could have made or replaced one of them: refused)."""
        ensure_root_dirs(self.dir.parent, private=self.base)
        with contextlib.suppress(FileExistsError):
            os.mkdir(self.dir, 0o700)
        check_root_dir(str(self.dir))
        os.chmod(self.dir, 0o700)
        for d in (self.ramdisk, self.ro):
            d.mkdir(exist_ok=True, mode=0o700)

    # ---- mount --------------------------------------------------------------------------
    def mount(self, ins: dict[str, Any], who: Who, allowed_roots: Sequence[str],
              shared_dirs: Sequence[str] = ()) -> str:
        """Carry out a ``mount`` instruction; return a one-line summary."""
        target = str(ins["target"])
        done = self.entries()
        # idempotent: a retried Prolog. Instruction numbers restart with rsad: only a
        # mount of the same rsad (epoch) is the one asked now, never an earlier rsad's
        # left by a killed Epilog of the job's earlier run
        if any(e.get("kind") == "target" and e.get("seq") == ins["seq"]
               and e.get("epoch") == ins.get("epoch") and not e.get("attaching")
               for e in done):
            return f"{target} already mounted"
        if done:
            rel = self.release(lazy=False)
            if not rel.ok:
                raise MountError(f"earlier mounts still in place: {rel.message}")
        # refuse before mounting anything
        directive = DIRECTIVES.get(str(ins.get("role")), "")
        fd = open_target(target, who, allowed_roots, shared_dirs, directive=directive)
        made: list[dict[str, Any]] = []
        try:
            self._refuse_other_jobs(fd, target, directive)
            self.prepare()
            argv = substitute(client_argv_of(ins), str(self.ramdisk))
            check_client_argv(argv)
            umount_argv = substitute(ins.get("client_umount_argv") or
                                     ["umount", "-l", str(self.ramdisk)], str(self.ramdisk))
            check_client_argv(umount_argv)
            argv = guard_proxy(argv, timeout=self.command_timeout, keep=self.base)
            argv, secret_files = secret_to_file(argv, self.dir)
            # Every mount is recorded BEFORE it is made: a Prolog killed at any instant
            # (SIGKILL, its hard timeout) leaves no mount its unwind or the Epilog does
            # not know of; undoing one never made finds nothing there and passes.
            self._record(made, {"kind": "client", "path": str(self.ramdisk),
                                "umount": umount_argv}, ins["seq"])
            try:
                run(argv, timeout=self.command_timeout)
            except CommandError as e:
                raise MountError(f"cannot mount the RAMDISK on the node: {e}") from e
            finally:
                for secret_file in secret_files:  # read as it mounts, kept in memory
                    secret_file.unlink(missing_ok=True)
            if not os.path.ismount(self.ramdisk):
                raise MountError(f"{argv[0]} succeeded but {self.ramdisk} is not a mount")
            mode = str(ins["mode"])
            # the client mount's nosuid, nodev, noexec (MS_* = ST_* = MOUNT_ATTR_*): a
            # bind remount clears every per-mount flag it does not name, and a new
            # overlay has none (found by review: the mount over DATA_IN honoured setuid)
            keep = os.statvfs(self.ramdisk).f_flag & (MS_NOSUID | MS_NODEV | MS_NOEXEC)
            if mode == "union":
                # read-only overlay: RAMDISK first, the PFS directory (the fd) below it;
                # nosuid,nodev whatever the client: the PFS mount's own are not kept
                tree = handles.overlay([str(self.ramdisk), f"/proc/self/fd/{fd}"],
                                       attrs=keep | MS_NOSUID | MS_NODEV)
            else:
                source = str(self.ramdisk)
                if mode == "ro":  # read-only from its first instant: a copy of an ro bind
                    self._record(made, {"kind": "bind", "path": str(self.ro)}, ins["seq"])
                    sys_mount(str(self.ramdisk), str(self.ro), None, MS_BIND)
                    sys_mount("none", str(self.ro), None,
                              MS_REMOUNT | MS_BIND | MS_RDONLY | keep)
                    source = str(self.ro)
                tree = handles.clone(source)
            # checked again with the attach and its record, under the node's lock: another
            # job's Prolog may have attached on the same place since the check above
            # (made before the client mount, seconds ago)
            with self._attach_lock():
                try:
                    self._refuse_other_jobs(fd, target, directive)
                    self._refuse_changed(fd, target, directive)
                    # named by the id it keeps once attached, recorded before the attach
                    # (``attaching`` until done: a record a killed Prolog left is undone,
                    # never taken for a mount in place)
                    entry = {"kind": "target", "path": target, "seq": ins["seq"],
                             "epoch": ins.get("epoch"), "role": ins.get("role"),
                             "mode": mode, "attaching": True,
                             "mount": handles.detached_ref(tree).to_json()}
                    self._record(made, entry, ins["seq"])
                    # attached on the very directory checked (the fd)
                    handles.attach(tree, fd)
                    ref = handles.ref_of(tree)
                finally:
                    os.close(tree)
                del entry["attaching"]
                entry["mount"] = ref.to_json()  # as procfs names it, now it is attached
                self._save(made, ins["seq"])
        except BaseException as e:
            self._unwind(made)
            if isinstance(e, handles.MountApiMissing):
                raise MountError(str(e)) from e
            if isinstance(e, OSError):
                raise MountError(str(e)) from e
            raise
        finally:
            os.close(fd)
        return f"RAMDISK mounted over {target} ({mode})"

    def _record(self, made: list[dict[str, Any]], entry: dict[str, Any], seq: int) -> None:
        """Record a mount about to be made (in ``made``, then in mounts.json)."""
        made.append(entry)
        self._save(made, seq)

    @contextlib.contextmanager
    def _attach_lock(self) -> Iterator[None]:
        """The node's lock (:data:`ATTACH_LOCK` in ``<base>/<node>``, root-only) held
        across one job's last check for other jobs' mounts, its attach and its record, so
        two Prologs (or agents) on the node never both pass the check and both attach."""
        lock = os.open(self.dir.parent / ATTACH_LOCK, os.O_RDWR | os.O_CREAT
                       | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield
        finally:
            os.close(lock)  # the lock goes with it (and with a killed holder)

    def _refuse_other_jobs(self, fd: int, target: str, directive: str) -> None:
        """Raise :class:`UnsafePath` if another job's RAMDISK on this node is at the
        directory ``fd`` holds (``target``) or below it."""
        name = f"{directive}={target}" if directive else target
        other = self._other_job_at(fd)
        if other is not None:
            raise UnsafePath(
                f"{name} has the RAMDISK of your job {other} mounted over it on this "
                "node: one job's RAMDISK is never mounted over another's; this job "
                f"sees job {other}'s RAMDISK there until it is unmounted (at that "
                "job's end), then the PFS (give each job a directory of its own)")
        where = self._other_job_under(target)
        if where is not None and PurePosixPath(where) == PurePosixPath(target):
            # attached since the descriptor was opened: it holds the directory under it
            raise UnsafePath(
                f"{name} has the RAMDISK of another job mounted over it on this node: "
                "one job's RAMDISK is never mounted over another's; give each job a "
                "directory of its own")
        if where is not None:
            raise UnsafePath(
                f"{name} has the RAMDISK of another job mounted below it on this "
                f"node, over {where}: one job's RAMDISK is never mounted over "
                "another's; give each job a directory of its own, none inside "
                "another's")

    @staticmethod
    def _refuse_changed(fd: int, target: str, directive: str) -> None:
        """Raise :class:`UnsafePath` unless ``target``, walked again without symlinks,
        still leads to the directory ``fd`` holds (same mount, device and inode). Found
        by review: a mount over a parent made since the check (another job's RAMDISK,
        while this one's client mounted) hid it, and the attach went beneath it."""
        name = f"{directive}={target}" if directive else target
        try:
            now, parent, _ = open_nofollow(target)
        except UnsafePath:
            now, parent = -1, -1
        try:
            a, b = (os.fstat(fd), os.fstat(now)) if now >= 0 else (None, None)
            if (a is None or b is None or (a.st_dev, a.st_ino) != (b.st_dev, b.st_ino)
                    or handles.mount_id(fd) != handles.mount_id(now)):
                raise UnsafePath(
                    f"{name} is no longer the directory checked: it was moved, or "
                    "something was mounted over it or a directory above it on this "
                    "node, while its RAMDISK was being mounted")
        finally:
            for d in (now, parent):
                if d >= 0:
                    os.close(d)

    def _other_job_at(self, fd: int) -> str | None:
        """The job on this node whose RAMDISK is the mount at the directory ``fd``
        holds (by its record), else None. Mounted over it, that job's Epilog could not
        take its own down (covered), and its tasks would read this job's RAMDISK."""
        try:
            here = handles.ref_of(fd)
        except OSError:
            return None
        for job, ref in self._others_target_mounts():
            if ref == here:
                return job
        return None

    def _others_target_mounts(self) -> Iterator[tuple[str, handles.MountRef]]:
        """(job, mount) of every other job's recorded mount over its target on this node
        (their ``mounts.json``; one that cannot be read is skipped)."""
        for record in self.dir.parent.glob("*/mounts.json"):
            if record.parent == self.dir:
                continue
            try:
                data = json.loads(record.read_text())
            except (OSError, ValueError):
                continue
            for e in data.get("mounts") or ():
                if isinstance(e, dict) and e.get("kind") == "target":
                    ref = handles.MountRef.from_json(e.get("mount"))
                    if ref is not None:
                        yield record.parent.name, ref

    def _other_job_under(self, target: str) -> str | None:
        """Where another job's recorded RAMDISK mount on this node lies at or below
        ``target`` now (mountinfo, by id and device), else None. Mounted over a parent of
        it, this job's RAMDISK would hide it: that job's tasks would lose their paths, its
        Epilog could not reach its own mount (left in place, node-wide, once this job
        ended). Found by review; :meth:`_other_job_at` sees only the mount the target's
        descriptor is on, which is not one attached over it since it was opened."""
        top = PurePosixPath(target)
        mountinfo = handles.read_mountinfo()
        for _job, ref in self._others_target_mounts():
            where = handles.mount_point(mountinfo, ref.mnt_id, ref.dev)
            if where is not None and (PurePosixPath(where) == top
                                      or top in PurePosixPath(where).parents):
                return where
        return None

    def _unwind(self, made: list[dict[str, Any]]) -> None:
        for entry in reversed(made):
            with contextlib.suppress(Exception):
                self._undo(entry, lazy=True)
        with contextlib.suppress(Exception):
            self._save([])

    # ---- release ------------------------------------------------------------------------
    def _undo(self, entry: dict[str, Any], *, lazy: bool) -> str:
        """Undo one recorded mount; return a note for the log ("" when as expected)."""
        path = str(entry["path"])
        if entry.get("kind") == "client":
            try:
                run([str(a) for a in entry["umount"]], timeout=self.command_timeout)
            except CommandError:
                try:  # root-only path; no stat first: a dead RAMDISK would hang it
                    sys_umount(path, MNT_DETACH)
                except OSError as e:
                    if e.errno not in (errno.EINVAL, errno.ENOENT):  # not mounted (any more)
                        raise
            return ""
        if entry.get("kind") == "target":
            return self._undo_target(entry, lazy=lazy)
        try:  # the read-only bind in the root-only job directory
            sys_umount(path, MNT_DETACH if lazy else 0)
        except OSError as e:
            if e.errno not in (errno.EINVAL, errno.ENOENT):  # EINVAL: not mounted (any more)
                raise
        return ""

    def _undo_target(self, entry: dict[str, Any], *, lazy: bool) -> str:
        """Unmount the mount made over a user's directory: found again without following
        symlinks and checked to be the recorded mount; never by a path lookup that a
        planted symlink could send elsewhere. If the user moved it, it is refused at the
        path and, for a lazy release, detached where it is now, by its recorded id."""
        path = str(entry["path"])
        ref = handles.MountRef.from_json(entry.get("mount"))
        try:
            fd, parent, name = open_nofollow(path)
        except UnsafePath as e:
            return self._moved(ref, path, str(e), lazy=lazy)
        try:
            here = handles.ref_of(fd)
            if ref is None:
                # recorded by an older version (no mount id): only what is at the path,
                # reached without symlinks, and only if it is a mount over the directory
                if here.mnt_id == handles.mount_id(parent):
                    return ""  # nothing mounted there (any more)
            elif here != ref:
                if handles.mount_point(handles.read_mountinfo(), ref.mnt_id) is None:
                    return ""  # unmounted already (a release retried after a crash)
                return self._moved(ref, path, "another directory or mount is there now",
                                   lazy=lazy)
            if lazy:
                handles.detach(fd)
            else:
                os.close(fd)
                fd = -1
                handles.unmount_at(parent, name)
            return ""
        finally:
            if fd >= 0:
                os.close(fd)
            os.close(parent)

    def _moved(self, ref: handles.MountRef | None, path: str, why: str, *,
               lazy: bool) -> str:
        """The recorded mount is no longer at ``path`` (the user renamed or replaced a
        component). Refuse the path; for a lazy release find the mount by its id and
        detach it through a descriptor if it can be reached without symlinks."""
        refused = f"refused to unmount {path} by path ({why})"
        if ref is None:
            raise OSError(errno.EPERM, f"{refused}; no mount id recorded: left in place, "
                                       "check this node's mounts")
        where = handles.mount_point(handles.read_mountinfo(), ref.mnt_id)
        if where is None:
            return f"{refused}; mount {ref.mnt_id} is gone already"
        if not lazy:
            raise OSError(errno.EPERM, f"{refused}; the RAMDISK is now at {where}")
        try:
            fd, parent, _ = open_nofollow(where)
        except UnsafePath as e:
            raise OSError(errno.EPERM, f"{refused}; mount {ref.mnt_id} is at {where}, "
                                       f"not safely reachable ({e}): left in place, "
                                       f"an administrator may detach it") from e
        try:
            if handles.ref_of(fd) != ref:
                raise OSError(errno.EPERM, f"{refused}; {where} holds another mount now: "
                                           f"mount {ref.mnt_id} left in place")
            handles.detach(fd)
        finally:
            os.close(fd)
            os.close(parent)
        return f"{refused}; detached mount {ref.mnt_id} where it is now, {where}"

    def release(self, *, lazy: bool) -> Released:
        """Undo every mount, newest first. Without ``lazy`` a mount in use stays (busy).
        ``message`` carries what had to be refused on the way (a moved mount)."""
        entries = self.entries()
        notes: list[str] = []
        while entries:
            entry = entries[-1]
            try:
                note = self._undo(entry, lazy=lazy)
            except OSError as e:
                self._save(entries)
                if e.errno == errno.EBUSY:
                    return Released(False, True, f"{entry['path']} is in use (open files "
                                                 "or a working directory in it)")
                return Released(False, False, "; ".join([*notes, str(e.strerror or e)]))
            if note:
                notes.append(note)
            entries.pop()
            self._save(entries)
        return Released(True, False, "; ".join(notes) or "released")

    def remove(self) -> None:
        """Remove the per-job directory once nothing is mounted (never recursively)."""
        for p in (self.state_file, self.state_file.with_suffix(".tmp"),
                  self.dir / "agent.pid", *(self.dir / n for n in JOB_FILES)):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
        for d in (self.ramdisk, self.ro, self.dir):
            with contextlib.suppress(OSError):
                d.rmdir()
