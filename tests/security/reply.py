"""One request to rsad as whoever runs this file, to see what rsad signs (the lab tests
run it as rsaother and as root with ``python reply.py ADDRESS METHOD PATH AUTH`` and read
one JSON line: the status and the ``X-RSA-Munge-Reply`` header, or null).

AUTH: ``none`` (no credential at all), ``bad`` (one munged rejects) or ``munge`` (this
process's own credential over this request, as the API client makes it).
"""

from __future__ import annotations

import json
import socket
import sys
from typing import Any

from rsa_scheduler import munge
from rsa_scheduler.client import AUTH_HEADER, REPLY_HEADER, _exchange


def connect(address: str) -> socket.socket:
    if address.startswith("/"):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(10)
        sock.connect(address)
        return sock
    host, _, port = address.rpartition(":")
    return socket.create_connection((host, int(port)), timeout=10)


def ask(address: str, method: str, path: str, auth: str) -> dict[str, Any]:
    body = b"{}" if method == "POST" else b""
    head = f"{method} {path} HTTP/1.1\r\nHost: localhost\r\n"
    cred = ""
    if auth == "munge":
        cred = munge.encode(munge.request_digest(method, path, body))
    elif auth == "bad":
        cred = "MUNGE:not-a-credential:"
    if cred:
        head += f"{AUTH_HEADER}: {cred}\r\n"
    head += f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    with connect(address) as sock:
        status, headers, data = _exchange(sock, head.encode() + body)
    return {"status": status, "reply": headers.get(REPLY_HEADER.lower()), "request": cred,
            "body": data.decode("latin-1")}


if __name__ == "__main__":
    print(json.dumps(ask(*sys.argv[1:5])))
