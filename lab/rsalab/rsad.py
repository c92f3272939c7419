"""rsad in the lab: started last by lab-up, stopped first by lab-down.

Its state (SQLite store) lives under /run/rsa-lab/rsad so lab-down leaves nothing; its API
socket is the default /run/rsa/rsad.sock so the `rsa` CLI finds it without options, and
it also listens on 127.0.0.1:7820 so hooks exercise the TCP path compute nodes use.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from . import slurm
from .common import STATE, Settings, log, make_dir, spawn, stop_named, wait_for

STATE_DIR = STATE / "rsad"
SOCKET = Path("/run/rsa/rsad.sock")
LISTEN = "127.0.0.1:7820"
METRICS = "127.0.0.1:9465"


def daemon_yaml() -> str:
    return f"""\
daemon:
  state_dir: {STATE_DIR}
  poll_interval: 1s
  api:
    socket: {SOCKET}
    listen: "{LISTEN}"
health:
  interval: 2s
  ramdisk_interval: 5s
metrics:
  listen: "{METRICS}"
"""


def up(s: Settings, config: Path) -> None:
    make_dir(STATE_DIR, 0o700)
    make_dir(SOCKET.parent, 0o755)
    env = dict(slurm.ENV)
    spawn("rsad", [str(s.venv / "bin" / "rsad"), "--config", str(config)], env=env)
    wait_for("rsad API socket", SOCKET.exists, timeout=30)
    # the API answers at once, "rsad is starting" until the log is replayed and the RSA
    # nodes fenced: the lab is up once rsad serves
    probe = [str(s.venv / "bin" / "python"), "-c",
             "import sys; from rsa_scheduler.client import ApiClient; "
             "ApiClient(sys.argv[1]).get('/v1/status')", str(SOCKET)]
    wait_for("rsad ready (log replayed, RSA nodes fenced)", lambda: subprocess.run(
        probe, capture_output=True, timeout=30, check=False).returncode == 0, timeout=150,
        every=0.5)
    log(f"rsad: API at {SOCKET} and {LISTEN}, state in {STATE_DIR}")


def down(_s: Settings) -> None:
    stop_named("rsad", grace=30)
    SOCKET.unlink(missing_ok=True)
    shutil.rmtree(STATE_DIR, ignore_errors=True)
