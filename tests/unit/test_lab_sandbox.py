"""lab/sandbox (lab/rsalab/sandbox.py): a command on a host of its own, so that labs run
side by side. Run for real, as root: what the command sees, what it leaves on this host
(nothing), and what the sandbox cleans up after it (a daemon left running, a loop device
attached on the lab's ssd image, its cgroups)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SANDBOX = ROOT / "lab" / "sandbox"
sys.path.insert(0, str(ROOT / "lab"))
try:
    from rsalab import sandbox  # type: ignore[import-not-found]
finally:
    sys.path.remove(str(ROOT / "lab"))

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="namespaces and mounts: as root")


def run_in(name: str, script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SANDBOX), name, "sh", "-c", script], capture_output=True,
                          text=True, timeout=120, check=False)


def test_the_command_runs_on_a_host_of_its_own_and_leaves_nothing() -> None:
    name = f"t{uuid.uuid4().hex[:8]}"
    mark = Path(f"/etc/rsa-sandbox-test-{name}")
    done = run_in(name, f"""set -e
hostname; ip -o link show | wc -l; cat /proc/self/cgroup | grep '^0::'
echo $$; ps -e -o pid= | wc -l; echo "mark=${{RSA_SANDBOX:-}} lab=$RSA_LAB_SANDBOX"
touch {mark}; findmnt -n -o FSTYPE /var/lib/rsa-lab; touch /var/lib/rsa-lab/kept
findmnt -n -o FSTYPE /tmp; ls -A /tmp | wc -l
setsid sleep 300 </dev/null >/dev/null 2>&1 &
exit 7""")
    assert done.returncode == 7, done.stderr  # the command's status
    host, links, cgroup, pid, procs, marks, datafs, tmpfs, tmps = done.stdout.split("\n")[:9]
    assert host == f"sandbox-{name}" and host != socket.gethostname()
    assert links == "1"  # lo alone: a network of its own
    assert cgroup == "0::/"  # the root of a cgroup tree of its own
    assert int(pid) > 1 and int(procs) < 10  # its own PIDs: the reaper, sh, ps, wc
    assert marks == f"mark= lab={name}"  # the command is not the mark's holder
    assert datafs  # the lab's data: a directory of this host's bound there (its disk)
    assert tmpfs != "tmpfs" and tmps == "0"  # /tmp: fresh, on disk (not in memory)
    assert not mark.exists()  # /etc written in the sandbox is the sandbox's
    assert not (sandbox.WORK / name).exists()  # its data went with it
    assert not sandbox.in_sandbox(name)  # the daemon it left is gone
    assert all(not h.cgroup(name).exists() for h in sandbox.hierarchies())


def test_a_loop_device_on_its_ssd_image_is_detached_after_it() -> None:
    name = f"t{uuid.uuid4().hex[:8]}"
    done = run_in(name, """set -e
mkdir -p /var/lib/rsa-lab/ssd; truncate -s 8M /var/lib/rsa-lab/ssd/rsa3.img
losetup --find --show /var/lib/rsa-lab/ssd/rsa3.img""")
    assert done.returncode == 0, done.stderr
    device = done.stdout.strip()
    assert device.startswith("/dev/loop")
    backing = Path(f"/sys/block/{Path(device).name}/loop/backing_file")
    try:  # detached (or since given to another file)
        assert not backing.exists() or "rsa3.img" not in backing.read_text()
    finally:
        if backing.exists() and "rsa3.img" in backing.read_text():
            subprocess.run(["losetup", "-d", device], check=False)


def test_a_host_lab_does_not_take_a_sandboxs_loop_device_for_its_own(tmp_path: Path) -> None:
    """The name of a loop device's file reads the same from every mount namespace: the
    device is the lab's only when its file is the lab's image."""
    from rsalab import ssd

    images = tmp_path / "ssd"
    images.mkdir()
    elsewhere = tmp_path / "other"
    elsewhere.mkdir()
    for d in (images, elsewhere):
        subprocess.run(["truncate", "-s", "8M", str(d / "rsa3.img")], check=True)
    # attached in a mount namespace (alive while the device is asked) where the other
    # directory is bound over the images': its name reads as the images' own
    holder = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c",
         f"mount --bind {elsewhere} {images} && losetup --find --show {images}/rsa3.img "
         "&& exec sleep 60"], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None
    device = holder.stdout.readline().strip()
    try:
        where = ssd.Paths(images=images, records=tmp_path / "records")
        assert ssd.backing_file(device, where) == f"{images}/rsa3.img"  # looks like ours
        assert not ssd.is_ours(device, where)  # but it is not
        assert device not in [d.device for d in ssd.lab_loops(where)]
        mine = subprocess.run(["losetup", "--find", "--show", f"{images}/rsa3.img"],
                              capture_output=True, text=True, check=True).stdout.strip()
        try:
            assert ssd.is_ours(mine, where)
        finally:
            subprocess.run(["losetup", "-d", mine], check=False)
        # once that namespace is gone its name reads "/rsa3.img": the other lab's still
        holder.kill()
        holder.wait()
        assert ssd.backing_file(device, where) == "/rsa3.img"
        assert not ssd.is_ours(device, where)
        # and a lab whose images are that directory knows its own device by its file
        assert ssd.is_ours(device, ssd.Paths(images=elsewhere, records=tmp_path / "r"))
    finally:
        holder.kill()
        holder.wait()
        subprocess.run(["losetup", "-d", device], check=False)


def test_a_signal_reaches_the_commands_own_teardown_then_nothing_is_left() -> None:
    """As make's SIGTERM or a Ctrl-C: the command's trap runs (a lab phase's lab-down),
    its status is the sandbox's, and the sandbox is gone at once after it."""
    import signal
    import time

    name = f"t{uuid.uuid4().hex[:8]}"
    proc = subprocess.Popen(
        [str(SANDBOX), name, "sh", "-c",
         'trap "echo torn down; exit 5" TERM; echo ready; sleep 100 & wait'],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 5, err
    assert out.strip() == "torn down"
    assert time.monotonic() - t0 < 20
    assert not sandbox.in_sandbox(name) and not (sandbox.WORK / name).exists()


def test_an_earlier_sandbox_left_unended_has_its_devices_detached_before_its_data_goes() -> (
        None):
    """lab/sandbox itself killed (a CI timeout): nobody saw to its end. The next sandbox
    of that name detaches the loop devices on its images and removes its data."""
    name = f"t{uuid.uuid4().hex[:8]}"
    ssd_dir = sandbox.WORK / name / "data" / "ssd"
    ssd_dir.mkdir(parents=True)
    subprocess.run(["truncate", "-s", "8M", str(ssd_dir / "rsa3.img")], check=True)
    device = subprocess.run(["losetup", "--find", "--show", str(ssd_dir / "rsa3.img")],
                            capture_output=True, text=True, check=True).stdout.strip()
    backing = Path(f"/sys/block/{Path(device).name}/loop/backing_file")
    try:
        done = run_in(name, "true")
        assert done.returncode == 0, done.stderr
        assert not backing.exists() or str(ssd_dir) not in backing.read_text()
        assert not (sandbox.WORK / name).exists()
    finally:
        if backing.exists() and str(ssd_dir) in backing.read_text():
            subprocess.run(["losetup", "-d", device], check=False)


def test_a_detached_sandbox_takes_commands_and_its_stop_runs_its_teardown() -> None:
    """make lab-up RSA_LAB_DEBIAN=13's way: --detach returns once the sandbox runs,
    --exec runs a command in it (its hostname, its processes, its data; the command's
    status), --stop runs the command's trap (lab-down) and leaves nothing."""
    name = f"t{uuid.uuid4().hex[:8]}"
    keeper = ('trap "echo torn down; exit 0" TERM; '  # into the sandbox's output file
              "setsid sleep 300 </dev/null >/dev/null 2>&1 & "
              "while :; do sleep 3600 & wait $!; done")
    done = subprocess.run([str(SANDBOX), "--detach", name, "sh", "-c", keeper],
                          capture_output=True, text=True, timeout=90, check=False)
    try:
        assert done.returncode == 0, done.stderr
        assert f"lab/sandbox --stop {name}" in done.stderr
        assert sandbox.in_sandbox(name)  # running after --detach returned
        inside = subprocess.run(
            [str(SANDBOX), "--exec", name, "sh", "-c",
             # (the keeper starts its sleeps after --detach returned: a busy machine
             # may not have run them yet)
             "hostname; echo $RSA_LAB_SANDBOX; for i in $(seq 300); do "
             "[ $(pgrep -x sleep | wc -l) -ge 2 ] && break; sleep 0.1; done; "
             "pgrep -x sleep | wc -l; "
             "touch /var/lib/rsa-lab/mine; exit 3"],
            capture_output=True, text=True, timeout=60, check=False)
        assert inside.returncode == 3, inside.stderr
        host, lab, sleeps = inside.stdout.split()[:3]
        assert (host, lab) == (f"sandbox-{name}", name)
        assert int(sleeps) >= 2  # the keeper's and the daemon it started
        assert (sandbox.WORK / name / "data" / "mine").exists()
        again = subprocess.run([str(SANDBOX), "--detach", name, "true"],
                               capture_output=True, text=True, timeout=60, check=False)
        assert again.returncode == 2 and "is running" in again.stderr
    finally:
        stopped = subprocess.run([str(SANDBOX), "--stop", name], capture_output=True,
                                 text=True, timeout=120, check=False)
    assert stopped.returncode == 0, stopped.stderr
    assert f"{name} ended; nothing of it is left" in stopped.stderr
    said = (sandbox.WORK / f"{name}.log").read_text()
    assert "torn down" in said.splitlines(), said  # its teardown ran
    assert not sandbox.in_sandbox(name) and not (sandbox.WORK / name).exists()
    assert all(not h.cgroup(name).exists() for h in sandbox.hierarchies())
    none = subprocess.run([str(SANDBOX), "--exec", name, "true"], capture_output=True,
                          text=True, timeout=60, check=False)
    assert none.returncode == 2 and f"no sandbox {name} is running" in none.stderr
    (sandbox.WORK / f"{name}.log").unlink()
