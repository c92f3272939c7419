"""labctl up|down|status|check-clean: the lab's only entry point (see docs/lab.md); and
verify-up-again|verify-health|verify-check-clean, the lab's checks of itself (selftest.py)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from . import clean, facts, pfs, rsad, rsanodes, selftest, slurm, users, venv
from .common import (
    CREATED,
    DATA,
    ENV_FILE,
    HOOKS_LOG,
    LAB_DIR,
    LOGS,
    NS,
    PIDS,
    STATE,
    LabError,
    Settings,
    log,
    run,
    running_named,
)


def _lock() -> int:
    STATE.mkdir(parents=True, exist_ok=True)
    fd = os.open(STATE / ".lock", os.O_CREAT | os.O_RDWR, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)  # one lab-up/down at a time
    return fd


def _on_signal(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def up(s: Settings) -> int:
    t0 = time.monotonic()
    subprocess.run([str(LAB_DIR / "install-packages.sh")], check=True)
    t_install = time.monotonic() - t0
    _lock()
    if ENV_FILE.exists() and _healthy(s):
        log("lab is already up (make lab-down to restart it)")
        return 0
    log("cleaning what a previous run left")
    _down(s, quiet=True)
    # Clear the previous run's logs; keep hooks.log fresh too.
    shutil.rmtree(LOGS, ignore_errors=True)
    HOOKS_LOG.unlink(missing_ok=True)
    signal.signal(signal.SIGTERM, _on_signal)
    try:
        users.ensure(s)
        venv.ensure(s)  # the lab user and slurm must be able to run rsa / rsa-hook
        pfs.up(s)  # first: node namespaces copy the /pfs mount
        rsanodes.up(s)
        slurm.up(s)
        facts.write_config(s)
        rsad.up(s, facts.RSA_YAML)
        facts.write(s)
    except (Exception, KeyboardInterrupt) as e:
        print(f"lab: ERROR: lab-up failed: {e}", file=sys.stderr, flush=True)
        print(f"lab: logs are in {LOGS}; tearing down what was started", file=sys.stderr)
        _down(s, quiet=True)
        return 1
    log(f"lab is up in {time.monotonic() - t0:.1f} s (packages {t_install:.1f} s); "
        f"facts in {ENV_FILE}")
    return 0


def _healthy(s: Settings) -> bool:
    """All of the lab's daemons run (a missing one makes lab-up tear down and rebuild)."""
    bad = [n for n in facts.daemons(s) if running_named(n) is None]
    if bad:
        log(f"lab is broken ({', '.join(bad)} not running)")
    return not bad


def _down(s: Settings, *, quiet: bool = False) -> None:
    t0 = time.monotonic()
    ENV_FILE.unlink(missing_ok=True)  # first: tests see the lab as gone at once
    facts.RSA_YAML.unlink(missing_ok=True)
    for step in (rsad.down, slurm.down, rsanodes.down, pfs.down):
        try:
            step(s)
        except Exception as e:
            print(f"lab: WARNING: {step.__module__}.down: {e}", file=sys.stderr)
    # Anything still recorded (a daemon from a layout of an older version).
    if PIDS.exists():
        from .common import stop_named

        for f in PIDS.glob("*.pid"):
            stop_named(f.name[:-4])
    shutil.rmtree(NS, ignore_errors=True)
    if clean.nft_guard_loaded():  # loaded by the RAMDISK mounts of the lab's nodes
        run(["nft", "delete", "table", "inet", clean.NFT_GUARD], check=False)
    for name in ("guard.json", "guard.lock"):  # what the table guarded (node/mounts.py)
        with contextlib.suppress(OSError):
            (clean.NODE_DIR / name).unlink()
    for cg in clean.job_cgroups():  # of jobs rsad did not see to their end
        with contextlib.suppress(OSError):
            (cg / "cgroup.kill").write_text("1")  # the whole subtree (lab users' commands)
        for _ in range(20):  # a killed process leaves its cgroup a moment later
            for d in sorted((d for d in cg.rglob("*") if d.is_dir()), reverse=True):
                with contextlib.suppress(OSError):
                    d.rmdir()
            with contextlib.suppress(OSError):
                cg.rmdir()
            if not cg.exists():
                break
            time.sleep(0.1)
    if CREATED.exists():
        for line in reversed(CREATED.read_text().splitlines()):
            p = Path(line)
            with contextlib.suppress(OSError):
                p.rmdir()  # only if empty: never remove data we did not put there
        CREATED.unlink()
    shutil.rmtree(DATA, ignore_errors=True)
    if not quiet:
        log(f"lab is down in {time.monotonic() - t0:.1f} s")


def down(s: Settings) -> int:
    _lock()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # finish the cleanup once started
    _down(s)
    return 0


def status(s: Settings) -> int:
    if not ENV_FILE.exists():
        print("lab: down")
        return 1 if clean.leftovers(s) else 3
    ok = _healthy(s)
    print(ENV_FILE.read_text(), end="")
    for cmd in (["sinfo"], ["squeue"]):
        subprocess.run(cmd, env={**os.environ, "SLURM_CONF": str(slurm.CONF)}, check=False)
    subprocess.run(["findmnt", str(s.pfs_mount)], check=False)
    return 0 if ok else 1


def check_clean(s: Settings) -> int:
    found = clean.leftovers(s)
    for item in found:
        print(f"lab: LEFTOVER {item}")
    if not found:
        print("lab: clean (no lab process, mount, namespace, route, link, qdisc, listener, "
              "loop device, throttle rule or dirty limit)")
    return 1 if found else 0


def main(argv: list[str]) -> int:
    if os.geteuid() != 0:
        print("lab: must run as root", file=sys.stderr)
        return 2
    cmds = {"up": up, "down": down, "status": status, "check-clean": check_clean,
            "verify-up-again": selftest.up_again,
            "verify-health": selftest.health,
            "verify-check-clean": selftest.check_clean_negative}
    if len(argv) != 1 or argv[0] not in cmds:
        print(f"usage: labctl {'|'.join(cmds)}", file=sys.stderr)
        return 2
    try:
        return cmds[argv[0]](Settings())
    except LabError as e:
        print(f"lab: ERROR: {e}", file=sys.stderr)
        return 1
