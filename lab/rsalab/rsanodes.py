"""RSA nodes rsa1..N: each its own loopback address, sshd, mount+UTS namespace and pools.

Inside node N's namespace (hostname rsaN) the common path /var/lib/rsa-node/ram is that
node's own tmpfs, and /var/lib/rsa-node/ssd is its own ext4 image on a loop device capped
at RSA_LAB_SSD_RATE (ssd nodes; ssd.py) or a read-only empty directory (others). sshd
listens on 127.0.1.N:22 only, key auth only.
rsad (root) reaches them with /run/rsa-lab/ssh/id_ed25519 and .../known_hosts.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import time
from pathlib import Path

from . import nodecpu
from . import ssd as ssdpool
from .common import (
    NS,
    RSA_NET,
    STATE,
    LabError,
    Settings,
    alive,
    in_node_ns,
    listening,
    log,
    make_dir,
    ns_members,
    read_pid,
    record_ns,
    run,
    spawn,
    stop_named,
    stop_pid,
    wait_for,
)

SSH = STATE / "ssh"
KEY = SSH / "id_ed25519"
KNOWN_HOSTS = SSH / "known_hosts"
AUTHORIZED = SSH / "authorized_keys"


# root's ~/.bashrc inside the lab's RSA nodes: what Debian's default (/etc/skel/.bashrc)
# does first for an SSH command (bash -c, not interactive): nothing
ROOT_BASHRC = """# ~/.bashrc of root on a lab RSA node (lab/rsalab/rsanodes.py): as Debian's
# default, nothing for a shell that is not interactive (every SSH command rsad runs)
case $- in
    *i*) ;;
      *) return;;
esac
"""


def addr(i: int) -> str:
    return f"{RSA_NET}.{i}"


def up(s: Settings) -> None:
    make_dir(SSH, 0o700)
    make_dir(Path("/run/sshd"), 0o755)  # sshd's privilege-separation directory
    for sub in ("ram", "ssd"):
        make_dir(s.pool_root / sub, 0o755)  # mount points; empty on the host
    if not KEY.exists():
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "rsa-lab-daemon",
             "-f", str(KEY)])
    AUTHORIZED.write_text(KEY.with_suffix(".pub").read_text())
    AUTHORIZED.chmod(0o600)
    ssdpool.prepare(s)  # the ssd nodes' images, devices and caps, before the nodes mount them
    weight = nodecpu.parse_weight(s.node_cpu_weight)
    if weight is not None:  # every node's sshd starts in it (_start_node: nodecpu.wrap)
        where = nodecpu.make(weight)
        log(f"RSA nodes' processes in {where} (cpu.weight {weight})")
    known = []
    for i, name in enumerate(s.rsa_nodes, start=1):
        a = addr(i)
        if listening(a, 22):
            raise LabError(f"{a}:22 already in use; run `make lab-down` first")
        d = SSH / name
        make_dir(d, 0o700)
        hostkey = d / "ssh_host_ed25519_key"
        if not hostkey.exists():
            run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(hostkey)])
        pub = hostkey.with_suffix(".pub").read_text().split()
        known.append(f"{name},{a} {pub[0]} {pub[1]}")
        (d / "sshd_config").write_text(_sshd_config(a, hostkey, d))
        _start_node(s, i, name, d)
    KNOWN_HOSTS.write_text("\n".join(known) + "\n")
    for i, name in enumerate(s.rsa_nodes, start=1):
        wait_for(f"sshd of {name}", functools.partial(listening, addr(i), 22), timeout=20)
    log(f"RSA nodes: {', '.join(f'{n}={addr(i)}:22' for i, n in enumerate(s.rsa_nodes, 1))}"
        f" (ram {s.ram_size} tmpfs each, ssd on rsa{','.join(map(str, s.ssd_nodes))})")


def _sshd_config(a: str, hostkey: Path, d: Path) -> str:
    return "\n".join([
        f"ListenAddress {a}:22",
        f"HostKey {hostkey}",
        f"PidFile {d}/sshd.pid",
        f"AuthorizedKeysFile {AUTHORIZED}",
        "PermitRootLogin prohibit-password",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "UsePAM no",
        "UseDNS no",
        "X11Forwarding no",
        "PrintMotd no",
        "PrintLastLog no",
        "MaxStartups 100:30:200",
        "MaxSessions 64",
        "Subsystem sftp internal-sftp",
        "",
    ])


def _start_node(s: Settings, i: int, name: str, d: Path) -> None:
    ram = s.pool_root / "ram"
    ssd = s.pool_root / "ssd"
    setup = [f"mount -t tmpfs -o size={s.ram_size},mode=0755 rsa-ram-{name} {ram}"]
    if i in s.ssd_nodes:  # its device (reused as is when the node restarts) or directory
        setup.append(ssdpool.mount_setup(name, ssd))
    else:  # no ssd pool here: make the shared host directory unwritable in this node
        setup.append(f"mount --bind {ssd} {ssd} && mount -o remount,bind,ro {ssd}")
    # A real RSA node has a plain root account. This VM's /root/.bashrc runs `pyenv init`,
    # which bash sources for every SSH command (0.2-0.9 s each); inside the node's own
    # mount namespace only (propagation slave: never seen by the host), the lab's copy of
    # Debian's default start covers it: it returns at once when the shell is not
    # interactive. The host's file is never touched; the bind mount goes with the
    # namespace at lab-down (a node left running is a leftover check-clean reports).
    rc = d / "root.bashrc"
    rc.write_text(ROOT_BASHRC)
    setup.append(f"if [ -f /root/.bashrc ]; then mount --bind {rc} /root/.bashrc; fi")
    argv = nodecpu.wrap(in_node_ns(name, "; ".join(setup),
                                   ["/usr/sbin/sshd", "-D", "-e", "-f", str(d / "sshd_config")]))
    pid = spawn(f"sshd-{name}", argv)
    record_ns(name, pid)


def down(s: Settings) -> None:
    # also nodes a lab-up with a larger RSA_LAB_RSA_COUNT started (bench/bench_fs.py
    # --nodes 16): their namespaces are recorded
    recorded = [f.name for f in NS.glob("rsa*") if f.name[3:].isdigit()] if NS.exists() else []
    names = list(dict.fromkeys([*s.rsa_nodes, *recorded]))
    try:
        for name in sorted(names, key=lambda n: int(n[3:]), reverse=True):
            stop_node(name)
    finally:  # the nodes' mounts go with their namespaces; then the devices can go
        ssdpool.release()
        shutil.rmtree(ssdpool.HOST.images, ignore_errors=True)
        nodecpu.release()
    shutil.rmtree(SSH, ignore_errors=True)


def stop_node(name: str) -> None:
    """Stop the node's sshd, then anything else still inside its namespace."""
    nsfile = NS / name
    ns_id = nsfile.read_text().strip() if nsfile.exists() else None
    stop_named(f"sshd-{name}", grace=3)
    if ns_id:
        for pid in ns_members(ns_id):
            stop_pid(pid, f"process {pid} left in {name}", grace=2)
        nsfile.unlink(missing_ok=True)


def running(s: Settings) -> list[str]:
    return [n for n in s.rsa_nodes if read_pid(f"sshd-{n}") is not None]


def crash_sshd(s: Settings, name: str, down_for: float) -> None:
    """An RSA node's sshd dies (SIGKILL) and comes back ``down_for`` seconds later, as
    systemd would restart it, inside the node's namespace (tests/chaos). Sessions already
    open survive, as on a real node; new connections are refused meanwhile. If nothing
    else lives in the node's namespace, the node is started afresh."""
    i = s.rsa_nodes.index(name) + 1
    pid = read_pid(f"sshd-{name}")
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        wait_for(f"sshd of {name} gone", lambda: not alive(pid), timeout=10, every=0.05)
    time.sleep(down_for)
    nsfile = NS / name
    ns_id = nsfile.read_text().strip() if nsfile.exists() else None
    members = ns_members(ns_id) if ns_id else []
    d = SSH / name
    if members:
        spawn(f"sshd-{name}", nodecpu.wrap(["/usr/bin/nsenter", "-t", str(members[0]), "-m",
                                            "-u", "/usr/sbin/sshd", "-D", "-e", "-f",
                                            str(d / "sshd_config")]))
    else:
        _start_node(s, i, name, d)
    wait_for(f"sshd of {name}", functools.partial(listening, addr(i), 22), timeout=20)
