"""systemd notify protocol and the shipped unit file."""

from __future__ import annotations

import configparser
import socket
from pathlib import Path

from rsa_scheduler.daemon.systemd import notify, watchdog_interval

UNIT = Path(__file__).parent.parent.parent / "systemd" / "rsad.service"


def test_notify_sends_one_datagram(tmp_path: Path) -> None:
    path = tmp_path / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as srv:
        srv.bind(str(path))
        assert notify("READY=1", {"NOTIFY_SOCKET": str(path)})
        assert srv.recv(100) == b"READY=1"


def test_notify_without_systemd_is_a_no_op() -> None:
    assert notify("READY=1", {}) is False


def test_watchdog_interval_is_half_the_timeout() -> None:
    import os

    env = {"WATCHDOG_USEC": "60000000", "WATCHDOG_PID": str(os.getpid())}
    assert watchdog_interval(env) == 30.0
    assert watchdog_interval({"WATCHDOG_USEC": "1", "WATCHDOG_PID": "1"}) is None
    assert watchdog_interval({}) is None


def test_unit_is_type_notify_with_watchdog() -> None:
    cp = configparser.ConfigParser(strict=False, interpolation=None)
    cp.read(UNIT)
    svc = cp["Service"]
    assert svc["Type"] == "notify" and int(svc["WatchdogSec"]) > 0
    assert "rsad" in svc["ExecStart"] and svc["Restart"] == "on-failure"
