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
    assert "killing" not in said, said  # and was not cut short
    assert not sandbox.in_sandbox(name) and not (sandbox.WORK / name).exists()
    assert all(not h.cgroup(name).exists() for h in sandbox.hierarchies())
    none = subprocess.run([str(SANDBOX), "--exec", name, "true"], capture_output=True,
                          text=True, timeout=60, check=False)
    assert none.returncode == 2 and f"no sandbox {name} is running" in none.stderr
    (sandbox.WORK / f"{name}.log").unlink()


KEEPER = 'trap "echo torn down; exit 0" TERM; while :; do sleep 3600 & wait $!; done'


def _gone(name: str) -> None:
    """Nothing of the sandbox NAME is left on this host."""
    assert not sandbox.in_sandbox(name)
    assert sandbox.holder_alive(sandbox.WORK / name / "holder.pid") is None
    assert sandbox.keeper_alive(name) is None
    assert not (sandbox.WORK / name).exists()
    assert all(not h.cgroup(name).exists() for h in sandbox.hierarchies())


def _clean_log(name: str) -> None:
    for f in (sandbox.WORK / f"{name}.log", sandbox.keeper_file(name)):
        f.unlink(missing_ok=True)


def _gone_anyway(detached: subprocess.Popen[str], name: str) -> None:
    """A test's cleanup, whatever it left: its --detach ended, the sandbox stopped, its
    log and keeper file removed."""
    if detached.poll() is None:
        detached.kill()
        detached.wait()
    subprocess.run([str(SANDBOX), "--stop", name], capture_output=True, timeout=120,
                   check=False)
    _clean_log(name)


def test_a_command_right_after_detach_runs_in_the_ready_sandbox() -> None:
    """make lab-up RSA_LAB_DEBIAN=13's way, at once and again: --detach returns only once
    the setup is done, so the --exec right after it runs in the sandbox's root, from the
    repository (not in its setup shell's: "getcwd() failed", "No rule to make target");
    and --stop right after ends it by its command's teardown, at once."""
    import time

    for _ in range(8):
        name = f"t{uuid.uuid4().hex[:8]}"
        try:
            done = subprocess.run([str(SANDBOX), "--detach", name, "sh", "-c", KEEPER],
                                  capture_output=True, text=True, timeout=150, check=False)
            assert done.returncode == 0, done.stderr
            inside = subprocess.run(
                [str(SANDBOX), "--exec", name, "sh", "-c",
                 "hostname; pwd; test -f Makefile && echo repo"],
                capture_output=True, text=True, timeout=60, check=False)
            assert inside.returncode == 0, inside.stderr
            assert inside.stdout.split() == [f"sandbox-{name}", str(ROOT), "repo"]
        finally:
            t0 = time.monotonic()
            stopped = subprocess.run([str(SANDBOX), "--stop", name], capture_output=True,
                                     text=True, timeout=120, check=False)
        assert stopped.returncode == 0, stopped.stderr
        assert time.monotonic() - t0 < 30
        said = (sandbox.WORK / f"{name}.log").read_text()
        assert "torn down" in said.splitlines() and "killing" not in said, said
        _gone(name)
        _clean_log(name)


def test_detach_waits_for_a_slow_setup_and_exec_waits_for_it_too() -> None:
    """A busy machine's setup, made as slow as it gets: its shell (the sandbox's PID 1,
    before the reaper) stopped. --detach does not return before it has finished, --exec
    meanwhile runs nothing and says so; once it goes on both work."""
    import signal
    import time

    for _ in range(20):  # until the setup is caught in its shell (it takes some 50 ms)
        name = f"t{uuid.uuid4().hex[:8]}"
        detached = subprocess.Popen([str(SANDBOX), "--detach", name, "sh", "-c", KEEPER],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True)
        pid1, caught = 0, False
        try:
            deadline = time.monotonic() + 30
            while not pid1 and time.monotonic() < deadline:
                holder = sandbox.holder_alive(sandbox.WORK / name / "holder.pid")
                pid1 = (sandbox.reapers(holder) or [0])[0] if holder else 0
            os.kill(pid1, signal.SIGSTOP)
            # (before the reaper: unshare's fork, then the setup's shell)
            caught = Path(f"/proc/{pid1}/comm").read_text().strip() in ("unshare", "sh")
            if caught:
                with pytest.raises(subprocess.TimeoutExpired):
                    detached.wait(timeout=3)
                early = subprocess.run([str(SANDBOX), "--exec", name, "sh", "-c",
                                        "echo ran"], capture_output=True, text=True,
                                       timeout=60, check=False)
                assert early.returncode == 2 and "ran" not in early.stdout
                assert "still being set up" in early.stderr, early.stderr
            os.kill(pid1, signal.SIGCONT)
            _out, err = detached.communicate(timeout=150)
            assert detached.returncode == 0, err
            inside = subprocess.run([str(SANDBOX), "--exec", name, "pwd"],
                                    capture_output=True, text=True, timeout=60,
                                    check=False)
            assert (inside.returncode, inside.stdout.strip()) == (0, str(ROOT)), inside
        finally:
            if pid1:
                os.kill(pid1, signal.SIGCONT)
            if detached.poll() is None:
                detached.kill()
                detached.wait()
            stopped = subprocess.run([str(SANDBOX), "--stop", name], capture_output=True,
                                     text=True, timeout=120, check=False)
            _clean_log(name)
        assert stopped.returncode == 0, stopped.stderr
        _gone(name)
        if caught:
            return
    pytest.fail("the setup was never caught in its shell")


@pytest.mark.parametrize("delay", [0.0, 0.01, 0.03, 0.06, 0.1, 0.2, 0.4])
def test_stop_during_the_setup_ends_the_sandbox_at_once(delay: float) -> None:
    """--stop at any step of a --detach (from its first sign, the log, to a running
    command): the sandbox ends at once and nothing of it is left; the --detach says
    whether it started (its setup's shell, PID 1 there, would ignore the signal: the
    stop must not wait its 300 s for a command that never got it)."""
    import time

    name = f"t{uuid.uuid4().hex[:8]}"
    log = sandbox.WORK / f"{name}.log"
    detached = subprocess.Popen([str(SANDBOX), "--detach", name, "sh", "-c", KEEPER],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not log.exists() and time.monotonic() < deadline:
            time.sleep(0.001)
        time.sleep(delay)
        t0 = time.monotonic()
        stopped = subprocess.run([str(SANDBOX), "--stop", name], capture_output=True,
                                 text=True, timeout=60, check=False)
        assert stopped.returncode == 0, stopped.stderr
        assert time.monotonic() - t0 < 30
        _out, err = detached.communicate(timeout=150)
        assert detached.returncode in (0, 1), err
        if detached.returncode == 1:  # stopped before it was ready: one line, and why
            assert len(err.strip().splitlines()) == 1 and "did not start" in err, err
        _gone(name)
    finally:
        _gone_anyway(detached, name)


@pytest.mark.parametrize("delay", [0.0, 0.05, 0.3])
def test_stop_after_its_lab_sandbox_was_killed_ends_it_and_cleans_up(delay: float) -> None:
    """kill -9 of the sandbox's lab/sandbox (its keeper) during the setup or after it:
    --stop kills the holder and does the cleanup the keeper would have done."""
    import signal
    import time

    name = f"t{uuid.uuid4().hex[:8]}"
    detached = subprocess.Popen([str(SANDBOX), "--detach", name, "sh", "-c", KEEPER],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while (sandbox.holder_alive(sandbox.WORK / name / "holder.pid") is None
               and time.monotonic() < deadline):
            time.sleep(0.001)
        time.sleep(delay)
        keeper = sandbox.keeper_alive(name)
        assert keeper is not None
        os.kill(keeper, signal.SIGKILL)
        detached.communicate(timeout=150)
        stopped = subprocess.run([str(SANDBOX), "--stop", name], capture_output=True,
                                 text=True, timeout=120, check=False)
        # (killed before the setup said "ready", the sandbox has ended itself: the
        # reaper could not say it)
        assert stopped.returncode == 0, stopped.stderr
        assert (f"{name} ended; nothing of it is left" in stopped.stderr
                or "removing what an earlier one left" in stopped.stderr), stopped.stderr
        _gone(name)
    finally:
        _gone_anyway(detached, name)


def test_a_setup_that_fails_is_said_in_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    """A root the overlay cannot be made of (a lower directory without /dev to bind):
    --detach fails with one line naming the failed step and the log, and cleans up."""
    lower = tmp_path / "root"
    (lower / "usr/bin").mkdir(parents=True)
    (lower / "usr/bin/python3").touch()
    name = f"t{uuid.uuid4().hex[:8]}"
    try:
        done = subprocess.run([str(SANDBOX), "--detach", name, "true"],
                              capture_output=True, text=True, timeout=150, check=False,
                              env={**os.environ, "RSA_SANDBOX_ROOT": str(lower)})
        assert done.returncode == 1
        line, = done.stderr.strip().splitlines()
        assert line.startswith(f"sandbox: {name} did not start (status ") and \
            "mount point does not exist" in line
        assert str(sandbox.WORK / f"{name}.log") in line
        _gone(name)
    finally:
        _clean_log(name)


def test_why_a_sandbox_did_not_start_is_its_setups_last_error() -> None:
    said = ("mount: /x/dev: mount point does not exist.\n"
            "       dmesg(1) may have more information after failed mount system call.\n"
            "sandbox: t1: its setup failed (its error is above)\n")
    assert sandbox.why(said) == "mount: /x/dev: mount point does not exist."
    assert sandbox.why("sandbox: a sandbox t1 is running (pid 7); end it first\n") == (
        "a sandbox t1 is running (pid 7); end it first")
    assert sandbox.why("") == "it said nothing"


def test_a_keeper_is_known_by_its_pid_and_start_time(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox, "WORK", tmp_path)
    other = subprocess.Popen(["sleep", "60"])
    try:
        sandbox.note_keeper("k", other.pid)
        assert sandbox.keeper_alive("k") == other.pid
        sandbox.note_keeper("k", os.getpid())
        assert sandbox.keeper_alive("k") is None  # this process is not another keeper
        sandbox.keeper_file("k").write_text(f"{other.pid} 1\n")  # a reused PID
        assert sandbox.keeper_alive("k") is None
    finally:
        other.kill()
        other.wait()
    sandbox.note_keeper("k", other.pid)  # reaped: gone
    assert sandbox.keeper_alive("k") is None
