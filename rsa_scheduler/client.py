"""The rsad API client used by the ``rsa`` CLI and the Slurm hooks.

Owns :class:`ApiClient`: HTTP/1.1 over rsad's unix socket (or TCP ``host:port``), each
request carrying a MUNGE credential bound to its method, path and body.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
from typing import Any

from rsa_scheduler.daemon import munge
from rsa_scheduler.errors import RsaError

DEFAULT_SOCKET = "/run/rsa/rsad.sock"
AUTH_HEADER = "X-RSA-Munge"
REPLY_HEADER = "X-RSA-Munge-Reply"


class ApiUnavailable(RsaError):
    """rsad cannot be reached."""


class ApiRefused(RsaError):
    """rsad answered with an error; the message is rsad's."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(message)


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


class ApiClient:
    """Talks to rsad. ``address`` is a unix socket path or ``host:port``."""

    def __init__(self, address: str | None = None, timeout: float = 10.0,
                 trust_uid: int | None = None) -> None:
        """``trust_uid``: accept only replies signed with a MUNGE credential of this uid
        (rsad runs as root: the node hooks pass 0 before they mount anything as root on
        what rsad answers); None: replies are not checked (the ``rsa`` CLI)."""
        self.address = address or os.environ.get("RSA_API") or DEFAULT_SOCKET
        self.timeout = timeout
        self.trust_uid = trust_uid

    def _connection(self) -> http.client.HTTPConnection:
        if self.address.startswith("/"):
            return _UnixConnection(self.address, self.timeout)
        host, _, port = self.address.rpartition(":")
        return http.client.HTTPConnection(host, int(port), timeout=self.timeout)

    def request(self, method: str, path: str, body: Any = None) -> Any:
        raw = json.dumps(body).encode() if body is not None else b""
        cred = munge.encode(munge.request_digest(method, path, raw))
        conn = self._connection()
        try:
            conn.request(method, path, body=raw or None, headers={
                AUTH_HEADER: cred, "Content-Type": "application/json",
                "Content-Length": str(len(raw))})
            resp = conn.getresponse()
            data = resp.read()
        except (OSError, http.client.HTTPException) as e:
            raise ApiUnavailable(f"cannot reach rsad at {self.address}: {e}; is rsad "
                                 "running (systemctl status rsad)?") from e
        finally:
            conn.close()
        if self.trust_uid is not None:
            self._check_signature(cred, resp.status, data, resp.getheader(REPLY_HEADER))
        try:
            decoded = json.loads(data) if data else None
        except ValueError as e:
            raise ApiUnavailable(f"rsad at {self.address} sent something that is not "
                                 "JSON") from e
        if resp.status != 200:
            msg = decoded.get("error") if isinstance(decoded, dict) else None
            raise ApiRefused(resp.status, str(msg or f"HTTP {resp.status}"))
        return decoded

    def _check_signature(self, cred: str, status: int, data: bytes,
                         signature: str | None) -> None:
        where = f"the answer from {self.address}"
        if not signature:
            raise ApiUnavailable(f"{where} is not signed with MUNGE; refusing it (is it "
                                 "rsad, and is munged running there?)")
        try:
            sender, payload = munge.decode(signature)
        except munge.MungeError as e:
            raise ApiUnavailable(f"{where}: {e}; refusing it") from e
        if sender.uid != self.trust_uid:
            raise ApiUnavailable(f"{where} is signed by uid {sender.uid}, not by rsad's "
                                 f"uid {self.trust_uid}; refusing it")
        if payload != munge.reply_digest(cred, status, data):
            raise ApiUnavailable(f"{where} does not match its MUNGE signature; refusing it")

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def post(self, path: str, body: Any) -> Any:
        return self.request("POST", path, body)
