"""rsad in the lab: started last by lab-up, stopped first by lab-down.

Its state (SQLite store) lives under /run/rsa-lab/rsad so lab-down leaves nothing; its API
socket is the default /run/rsa/rsad.sock so the `rsa` CLI finds it without options, and
it also listens on 127.0.0.1:7820 so hooks exercise the TCP path compute nodes use.

Every client finds rsad as on a site: /etc/rsa/client.conf (world-readable, the operator
guide's "Where clients find rsad") names the socket and the TCP API. The lab makes it a
symlink to /run/rsa-lab/client.conf, only where no /etc/rsa/client.conf exists, and
removes it at lab-down (like /etc/slurm/slurm.conf).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path

from . import slurm
from .common import STATE, Settings, log, make_dir, spawn, stop_named, wait_for

STATE_DIR = STATE / "rsad"
SOCKET = Path("/run/rsa/rsad.sock")
LISTEN = "127.0.0.1:7820"
METRICS = "127.0.0.1:9465"
CLIENT_CONF = STATE / "client.conf"
ETC_CLIENT = Path("/etc/rsa/client.conf")
ETC_CLIENT_MARK = STATE / "etc-rsa-client"  # exists while the /etc symlink is ours


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


def client_conf() -> str:
    return (f"# where rsa, rsa-hook and jobs find rsad (the lab's; see docs/lab.md)\n"
            f"socket = {SOCKET}\napi = {LISTEN}\n")


def _link_client_conf() -> None:
    """/etc/rsa/client.conf -> the lab's, unless the host has one of its own. The mark
    says ``dir`` when the lab also made /etc/rsa (removed again if empty)."""
    CLIENT_CONF.write_text(client_conf())
    CLIENT_CONF.chmod(0o644)
    if ETC_CLIENT.is_symlink() and os.readlink(ETC_CLIENT) == str(CLIENT_CONF):
        if not ETC_CLIENT_MARK.exists():
            ETC_CLIENT_MARK.write_text("file\n")
        return
    if ETC_CLIENT.exists() or ETC_CLIENT.is_symlink():
        log(f"{ETC_CLIENT} exists and is not the lab's: jobs and hooks use it")
        return
    made = not ETC_CLIENT.parent.exists()
    ETC_CLIENT.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    ETC_CLIENT_MARK.write_text("dir\n" if made else "file\n")
    ETC_CLIENT.symlink_to(CLIENT_CONF)


def unlink_client_conf() -> None:
    if ETC_CLIENT_MARK.exists():
        if ETC_CLIENT.is_symlink() and os.readlink(ETC_CLIENT) == str(CLIENT_CONF):
            ETC_CLIENT.unlink()
        if ETC_CLIENT_MARK.read_text().strip() == "dir":
            # something else put there since is not the lab's to remove
            with contextlib.suppress(OSError):
                ETC_CLIENT.parent.rmdir()
        ETC_CLIENT_MARK.unlink()
    CLIENT_CONF.unlink(missing_ok=True)


def up(s: Settings, config: Path) -> None:
    _link_client_conf()
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
    unlink_client_conf()
    shutil.rmtree(STATE_DIR, ignore_errors=True)
