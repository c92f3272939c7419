"""systemd's notify protocol (Type=notify, WatchdogSec) without a dependency.

Owns :func:`notify`: one datagram to ``$NOTIFY_SOCKET`` (no-op when not under systemd)
and :func:`watchdog_interval` (half of ``$WATCHDOG_USEC``, as sd_watchdog_enabled advises).
"""

from __future__ import annotations

import os
import socket


def notify(message: str, environ: dict[str, str] | None = None) -> bool:
    """Send e.g. ``READY=1``, ``WATCHDOG=1``, ``STATUS=...``, ``STOPPING=1``."""
    env = os.environ if environ is None else environ
    addr = env.get("NOTIFY_SOCKET")
    if not addr:
        return False
    if addr.startswith("@"):
        addr = "\0" + addr[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.connect(addr)
        sock.sendall(message.encode())
    return True


def watchdog_interval(environ: dict[str, str] | None = None) -> float | None:
    env = os.environ if environ is None else environ
    usec = env.get("WATCHDOG_USEC")
    if not usec:
        return None
    pid = env.get("WATCHDOG_PID")
    if pid and int(pid) != os.getpid():
        return None
    return int(usec) / 2e6
