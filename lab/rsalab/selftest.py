"""The lab's own checks, run by `make lab-test` (lab/lab.mk):

* ``verify-up-again`` (lab up): a second `labctl up` succeeds quickly and changes nothing
  (the same daemons, by PID and start time; the same env file and configurations).
* ``verify-health`` (lab up, after the tests): with rsad and a MooseFS chunkserver
  stopped, the health check (lab-status, lab-up) reports the lab broken, naming both.
* ``verify-check-clean`` (lab down): check-clean is not blind. It must fail on a leak this
  check makes itself (a tmpfs mounted under /var/lib/rsa-lab and a process in a network
  namespace of its own, like the lab's PFS holder), and pass again once that is removed;
  and stop_named must not signal a process whose pidfile no longer names it; likewise
  the RSA nodes' cpu cgroup (nodecpu.py) and a loop device left on an ssd image.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

from . import clean, facts, nodecpu, ssd
from .common import (
    DATA,
    ENV_FILE,
    LAB_DIR,
    PIDS,
    STATE,
    LabError,
    Settings,
    alive,
    is_mounted,
    log,
    read_pid,
    run,
    running_named,
    spawn,
    stop_named,
    stop_pid,
)

UP_AGAIN_MAX_S = 10.0  # install-packages' dpkg check plus the health check: ~1 s
WATCHED = (ENV_FILE, STATE / "rsa.yaml", STATE / "slurm/slurm.conf",
           STATE / "slurm/job_submit.lua", STATE / "slurm/rsa_job_submit.lua",
           STATE / "slurm/rsa_grammar.lua",
           STATE / "slurm/rsa_text.lua", STATE / "slurm/rsa_directives.lua")


def _snapshot() -> dict[str, str]:
    snap = {str(p): p.read_text() if p.exists() else "<missing>" for p in WATCHED}
    for f in sorted(PIDS.glob("*")):
        snap[str(f)] = f.read_text()
    return snap


def up_again(s: Settings) -> int:
    if not ENV_FILE.exists():
        log("verify-up-again: the lab is not up")
        return 2
    before = _snapshot()
    pids = {n: running_named(n) for n in facts.daemons(s)}
    t0 = time.monotonic()
    done = subprocess.run([str(LAB_DIR / "labctl"), "up"], capture_output=True, text=True,
                          timeout=300, check=False)
    took = time.monotonic() - t0
    problems = []
    if done.returncode != 0:
        problems.append(f"exit {done.returncode}: {done.stderr.strip()[-400:]}")
    if "lab is already up" not in done.stdout:
        problems.append(f"it did not find the lab up: {done.stdout.strip()[-400:]}")
    if took > UP_AGAIN_MAX_S:
        problems.append(f"it took {took:.1f} s (> {UP_AGAIN_MAX_S:g} s)")
    after = _snapshot()
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    if changed:
        problems.append(f"it changed {', '.join(changed)}")
    now = {n: running_named(n) for n in facts.daemons(s)}
    if now != pids or None in pids.values():
        problems.append(f"daemons before {pids}, after {now}")
    for p in problems:
        print(f"lab: verify-up-again: FAILED: {p}", flush=True)
    if not problems:
        log(f"verify-up-again: a second up took {took:.1f} s and changed nothing "
            f"({len(pids)} daemons, same PIDs and start times)")
    return 1 if problems else 0


def health(s: Settings) -> int:
    """After the tests, before lab-down: stop rsad and the second chunkserver the way a
    crash would leave them (gone, pidfile still there) and require the health check that
    lab-up and lab-status use to name both."""
    if not ENV_FILE.exists():
        log("verify-health: the lab is not up")
        return 2
    victims = ["rsad", "mfschunkserver2"]
    for name in victims:
        pid = running_named(name)
        if pid is None:
            print(f"lab: verify-health: FAILED: {name} was not running", flush=True)
            return 1
        stop_pid(pid, name, grace=10)  # the pidfile stays, as after a crash
    done = subprocess.run([str(LAB_DIR / "labctl"), "status"], capture_output=True,
                          text=True, timeout=120, check=False)
    problems = []
    if done.returncode != 1:
        problems.append(f"labctl status exited {done.returncode}, not 1")
    problems += [f"labctl status did not name {n}" for n in victims
                 if not any("lab is broken" in line and n in line
                            for line in done.stdout.splitlines())]
    for p in problems:
        print(f"lab: verify-health: FAILED: {p}\n{done.stdout[-600:]}", flush=True)
    if not problems:
        log(f"verify-health: with {' and '.join(victims)} stopped the lab is reported "
            "broken, naming both (lab-up would rebuild it)")
    return 1 if problems else 0


def _check_clean() -> tuple[int, str]:
    done = subprocess.run([str(LAB_DIR / "check-clean")], capture_output=True, text=True,
                          timeout=120, check=False)
    return done.returncode, done.stdout + done.stderr


def _loop_leak_checks() -> list[str]:
    """A loop device left on an image of the lab's ssd pools (lab-down detaches them):
    check-clean must name it. Without loop devices here, nothing to plant (the lab then
    uses directories for the ssd pools)."""
    images = ssd.HOST.images
    made = [d for d in (images.parent, images) if not d.exists()]  # removed afterwards
    image = images / "selftest-leak.img"
    device = ""
    problems: list[str] = []
    try:
        images.mkdir(parents=True, exist_ok=True)
        with open(image, "wb") as f:
            f.truncate(1 << 20)
        got = subprocess.run(["losetup", "--find", "--show", str(image)], capture_output=True,
                             text=True, timeout=30, check=False)
        if got.returncode != 0:
            log(f"verify-check-clean: no loop device to plant ({got.stderr.strip()}): "
                "skipped")
            return []
        device = got.stdout.strip()
        rc, out = _check_clean()
        if rc != 1 or f"loop device {device} " not in out:
            problems.append(f"check-clean did not report the loop device {device} on "
                            f"{image} (exit {rc}):\n{out}")
    finally:
        if device:
            subprocess.run(["losetup", "-d", device], check=False, timeout=30)
        with contextlib.suppress(OSError):
            image.unlink()
        for d in reversed(made):
            with contextlib.suppress(OSError):
                d.rmdir()
    return problems


def _cgroup_leak_checks() -> list[str]:
    """The RSA nodes' cpu cgroup left by a lab-down (RSA_LAB_NODE_CPU_WEIGHT): check-clean
    must name it. Without a cpu controller here, nothing to plant."""
    try:
        path = nodecpu.locate().path
    except (LabError, OSError) as e:
        log(f"verify-check-clean: no cpu cgroup to plant ({e}): skipped")
        return []
    problems: list[str] = []
    try:
        path.mkdir()
        rc, out = _check_clean()
        if rc != 1 or f"cpu cgroup {path} " not in out:
            problems.append(f"check-clean did not report the cpu cgroup {path} "
                            f"(exit {rc}):\n{out}")
    finally:
        with contextlib.suppress(OSError):
            path.rmdir()
    return problems


def check_clean_negative(s: Settings) -> int:
    if ENV_FILE.exists() or clean.leftovers(s):
        log("verify-check-clean: runs only with the lab down and clean (make lab-down)")
        return 2
    problems: list[str] = []
    leak_dir = DATA / "selftest-leak"
    made_data = not DATA.exists()
    holder: subprocess.Popen[bytes] | None = None
    try:
        leak_dir.mkdir(parents=True, exist_ok=True)
        run(["mount", "-t", "tmpfs", "-o", "size=1M", "rsalab-selftest", str(leak_dir)])
        holder = subprocess.Popen(["/usr/bin/unshare", "--net", "/bin/sleep", "300"],
                                  stdin=subprocess.DEVNULL)
        wanted = [f"mount {leak_dir} (tmpfs rsalab-selftest)",
                  f"process {holder.pid} in a namespace of its own"]
        deadline = time.monotonic() + 10  # until unshare has made the namespace
        while time.monotonic() < deadline:
            rc, out = _check_clean()
            if all(w in out for w in wanted):
                break
            time.sleep(0.1)
        if rc != 1:
            problems.append(f"check-clean exited {rc} with a leak in place:\n{out}")
        problems += [f"check-clean did not report {w!r}:\n{out}" for w in wanted
                     if w not in out]
    finally:
        if holder is not None:
            stop_pid(holder.pid, "selftest namespace holder", grace=2)
            holder.wait(timeout=10)
        if is_mounted(leak_dir):
            run(["umount", str(leak_dir)], check=False)
        with contextlib.suppress(OSError):
            leak_dir.rmdir()
        if made_data:
            with contextlib.suppress(OSError):
                DATA.rmdir()
    problems += _stop_named_checks()
    problems += _loop_leak_checks()
    problems += _cgroup_leak_checks()
    rc, out = _check_clean()
    if rc != 0:
        problems.append(f"check-clean still fails after the leak was removed:\n{out}")
    for p in problems:
        print(f"lab: verify-check-clean: FAILED: {p}", flush=True)
    if not problems:
        log("verify-check-clean: check-clean failed on a planted mount, namespace, loop "
            "device and cpu cgroup and passed once they were gone; stop_named spares a "
            "process its pidfile no longer names")
    return 1 if problems else 0


def _stop_named_checks() -> list[str]:
    """stop_named signals the process it started, and nothing else under a stale pidfile."""
    problems: list[str] = []
    name = "selftest-sleeper"
    started = spawn(name, ["/bin/sleep", "300"])
    pid = read_pid(name)
    if pid is None or running_named(name) != pid:
        stop_pid(started, name, grace=2)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(started, os.WNOHANG)
        return [f"running_named({name!r}) does not know the process spawn() started "
                f"(pidfile {pid}, spawned {started})"]
    # As if the sleeper had died and the kernel had given its PID to another process:
    # the pidfile now names a process started at another time.
    start = PIDS / f"{name}.start"
    fields = start.read_text().split(" ")
    fields[21] = str(int(fields[21]) + 1)  # field 22: the start time ("(sleep)" has no space)
    start.write_text(" ".join(fields))
    try:
        if running_named(name) is not None:
            problems.append("running_named accepts a process with another start time")
        stop_named(name)
        if not alive(pid):
            problems.append(f"stop_named signalled pid {pid}, which its pidfile no longer names")
        if (PIDS / f"{name}.pid").exists() or start.exists():
            problems.append("stop_named left the stale pidfile behind")
    finally:
        stop_pid(pid, name, grace=2)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
    spawn(name, ["/bin/sleep", "300"])
    pid = read_pid(name)
    stop_named(name)
    if pid is None or alive(pid):
        problems.append(f"stop_named did not stop the process it started (pid {pid})")
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        Path(STATE / "log" / f"{name}.out").unlink()
    return problems
