"""Ways to hold rsad's API, as a hostile local user would (stdlib only: the lab tests run
this file as rsaother with ``python attack.py KIND ADDRESS ...`` and read one JSON line).

ADDRESS is a unix socket path or ``host:port``. Nothing here authenticates: these are the
bytes anyone who can connect can send.
"""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import time
from typing import Any


def connect(address: str, timeout: float = 5.0) -> socket.socket:
    if address.startswith("/"):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        sock.connect(address)
        return sock
    host, _, port = address.rpartition(":")
    return socket.create_connection((host, int(port)), timeout=timeout)


def read_answer(sock: socket.socket, wait: float) -> tuple[int | None, str]:
    """(status, body) of the answer, or (None, why) if none came within ``wait`` s."""
    sock.settimeout(wait)
    buf = b""
    try:
        while chunk := sock.recv(65536):
            buf += chunk
    except TimeoutError:
        if not buf:
            return None, "no answer"
    except OSError as e:
        if not buf:
            return None, f"connection ended: {e}"
    if not buf:
        return None, "closed without an answer"
    head, _, body = buf.partition(b"\r\n\r\n")
    try:
        return int(head.split(b" ", 2)[1]), body.decode("latin-1")
    except (IndexError, ValueError):
        return None, f"not HTTP: {buf[:60]!r}"


def length(address: str, value: str, wait: float = 5.0) -> dict[str, Any]:
    """A request head whose Content-Length is ``value``; no body follows."""
    start = time.monotonic()
    with connect(address) as sock:
        # rsad may answer (and close) before the head is sent: then read its answer
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(f"POST /v1/hooks/prolog HTTP/1.1\r\nHost: x\r\nContent-Length: "
                         f"{value}\r\n\r\n".encode())
        status, body = read_answer(sock, wait)
    return {"status": status, "body": body, "seconds": time.monotonic() - start}


def slowloris(address: str, every: float = 1.0, give_up: float = 40.0) -> dict[str, Any]:
    """Send a request head one byte per ``every`` s (never finishing it)."""
    data = b"GET /v1/status HTTP/1.1\r\nHost: localhost\r\nX-Padding: " + b"a" * 10_000
    start = time.monotonic()
    sent = 0
    with connect(address) as sock:
        while time.monotonic() - start < give_up:
            try:
                sock.sendall(data[sent:sent + 1])
            except OSError:
                break
            sent += 1
            status, body = read_answer(sock, every)
            if status is not None or body != "no answer":
                return {"status": status, "body": body, "sent": sent,
                        "seconds": time.monotonic() - start}
    return {"status": None, "body": "still open", "sent": sent,
            "seconds": time.monotonic() - start}


def hold(address: str, count: int, seconds: float) -> dict[str, Any]:
    """Open ``count`` connections that never send a byte; once rsad has answered or
    closed no more of them for 2 s (at most 20 s: not a fixed 1 s, which a loaded machine's
    rsad did not always need less than for hundreds of refusals), count how many it still
    keeps open and what the others were told; hold the rest ``seconds``, close."""
    socks: list[socket.socket] = []
    statuses: dict[str, int] = {}
    failed = 0
    for _ in range(count):
        try:
            socks.append(connect(address))
        except OSError:
            failed += 1
    for sock in socks:
        sock.setblocking(False)
    kept = socks
    quiet_since = time.monotonic()
    end = quiet_since + 20
    while True:
        still = []
        for sock in kept:
            try:
                data = sock.recv(65536)
            except BlockingIOError:
                still.append(sock)
                continue
            except OSError:
                data = b""
            key = data.split(b" ", 2)[1].decode() if data.startswith(b"HTTP/") else "closed"
            statuses[key] = statuses.get(key, 0) + 1
            sock.close()
        if len(still) < len(kept):
            quiet_since = time.monotonic()
        kept = still
        now = time.monotonic()
        if now - quiet_since >= 2.0 or now >= end:
            break
        time.sleep(0.1)
    print(json.dumps({"kept": len(kept), "refused": statuses, "connect_failed": failed}),
          flush=True)
    time.sleep(seconds)
    for sock in kept:
        sock.close()
    return {"kept": len(kept), "refused": statuses, "connect_failed": failed}


def main(argv: list[str]) -> int:
    kind, address, *rest = argv
    if kind == "length":
        out = length(address, rest[0])
    elif kind == "slowloris":
        out = slowloris(address, float(rest[0]) if rest else 1.0)
    elif kind == "hold":
        hold(address, int(rest[0]), float(rest[1]))  # prints its line before holding
        return 0
    else:
        raise SystemExit(f"unknown attack {kind}")
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
