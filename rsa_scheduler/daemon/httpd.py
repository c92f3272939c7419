"""The bounded HTTP/1.1 transport of rsad's API: what a caller can tie up, and for how long.

Owns reading one request per connection within hard limits (:func:`parse_head`,
:func:`read_request`: request line and headers ≤ ``MAX_HEAD``, body ≤ ``Limits.max_body``,
a non-negative decimal ``Content-Length`` or none, the whole request within
``Limits.read_timeout`` of the connection being accepted), counting connections
(:class:`Gate`: a total cap with a reserve for operators, a per-uid cap known from
``SO_PEERCRED`` on the unix socket and from the MUNGE credential on TCP, the oldest
connection still sending its request evicted when the table is full), and serving
(:class:`Server`: a thread per admitted connection; requests of ordinary users share a
bounded pool of ``Limits.workers`` slots, operators' requests — the Slurm hooks — never
wait for them; a request whose caller closed before it was taken is dropped).

It knows nothing of routes, MUNGE or the daemon: :mod:`rsa_scheduler.daemon.api` gives it
an :class:`Endpoint`. Errors it finds before a request is complete are answered with a
plain JSON ``{"error": ...}`` (unsigned: nothing was asked yet).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import socket
import struct
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Protocol

from rsa_scheduler.errors import RsaError

log = logging.getLogger(__name__)

MAX_HEAD = 16 << 10  # request line + headers; rsad's own requests send ~400 bytes
MAX_HEADERS = 64
MAX_BODY = 1 << 20  # the largest body rsad's clients send is a hook payload of ~1 KB
METHODS = frozenset({"GET", "POST"})
_LENGTH = re.compile(r"[0-9]{1,15}")
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


class HttpError(RsaError):
    """A request that is refused: the status and one line saying why."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


class ApiError(RsaError):
    """A request the API refuses: the HTTP status and one line saying why (raised by the
    routes, rsa_scheduler.daemon.api and .nodehooks; answered, signed, by the endpoint)."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


class _Gone(RsaError):
    """The peer closed (or was evicted) before its request was complete."""


@dataclass(frozen=True, slots=True)
class Limits:
    """What one connection, one user and everyone together may hold."""

    read_timeout: float = 10.0  # whole request, from accept; also each answer's send
    max_connections: int = 256  # open connections on all listeners together
    per_user: int = 8  # connections (requests) of one uid at once; operators exempt
    workers: int = 8  # ordinary users' requests served at once
    max_body: int = MAX_BODY
    max_head: int = MAX_HEAD

    @property
    def reserve(self) -> int:
        """Connections only operators (root, slurm: the hooks) may take."""
        return max(1, self.max_connections // 8)


@dataclass(frozen=True, slots=True)
class Head:
    method: str
    target: str
    headers: Mapping[str, str]  # names lower-cased
    length: int  # body bytes (Content-Length, 0 without)


def parse_head(raw: bytes, max_body: int = MAX_BODY) -> Head:
    """The request line and headers (``raw`` without the blank line that ends them)."""
    line, *lines = raw.decode("latin-1").split("\r\n")
    parts = line.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not parts[1].startswith("/"):
        raise HttpError(HTTPStatus.BAD_REQUEST, f"malformed request line {line[:60]!r}")
    method, target, _ = parts
    if method not in METHODS:
        raise HttpError(HTTPStatus.METHOD_NOT_ALLOWED,
                        f"method {method[:20]!r} is not supported: use GET or POST")
    if len(lines) > MAX_HEADERS:
        raise HttpError(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
                        f"{len(lines)} header lines: rsad accepts at most {MAX_HEADERS}")
    headers: dict[str, str] = {}
    for text in lines:
        name, sep, value = text.partition(":")
        if not sep or not _TOKEN.fullmatch(name):
            raise HttpError(HTTPStatus.BAD_REQUEST, f"malformed header line {text[:60]!r}")
        key = name.lower()
        if key in headers and key in ("content-length", "transfer-encoding"):
            raise HttpError(HTTPStatus.BAD_REQUEST, f"{name} given twice")
        headers[key] = value.strip(" \t")
    if "transfer-encoding" in headers:
        raise HttpError(HTTPStatus.NOT_IMPLEMENTED,
                        "Transfer-Encoding is not supported: send a Content-Length")
    text = headers.get("content-length", "0")
    if not _LENGTH.fullmatch(text):
        if re.fullmatch(r"[0-9]{16,}", text):
            raise HttpError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                            f"Content-Length {text[:20]}... is over rsad's limit of "
                            f"{max_body} bytes")
        raise HttpError(HTTPStatus.BAD_REQUEST, f"invalid Content-Length {text[:20]!r}: "
                                                "a non-negative decimal number is required")
    length = int(text)
    if length > max_body:
        raise HttpError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                        f"request body of {length} bytes is over rsad's limit of "
                        f"{max_body} bytes")
    return Head(method, target, headers, length)


def _recv(sock: socket.socket, deadline: float, size: int, timeout: float) -> bytes:
    left = deadline - time.monotonic()
    if left <= 0:
        raise HttpError(HTTPStatus.REQUEST_TIMEOUT,
                        f"request not complete within {timeout:g}s of connecting")
    sock.settimeout(left)
    try:
        chunk = sock.recv(size)
    except TimeoutError as e:
        raise HttpError(HTTPStatus.REQUEST_TIMEOUT,
                        f"request not complete within {timeout:g}s of connecting") from e
    except OSError as e:
        raise _Gone(str(e)) from e
    if not chunk:
        raise _Gone("closed")
    return chunk


def read_request(sock: socket.socket, limits: Limits, deadline: float) -> tuple[Head, bytes]:
    """Read one request within ``limits``, all of it before ``deadline`` (monotonic)."""
    buf = b""
    end = -1
    while end < 0:
        if len(buf) > limits.max_head:
            raise HttpError(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
                            f"request line and headers over rsad's limit of "
                            f"{limits.max_head} bytes")
        start = max(0, len(buf) - 3)
        buf += _recv(sock, deadline, 4096, limits.read_timeout)
        end = buf.find(b"\r\n\r\n", start)
    if end > limits.max_head:
        raise HttpError(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
                        f"request line and headers over rsad's limit of "
                        f"{limits.max_head} bytes")
    head = parse_head(buf[:end], limits.max_body)
    body = buf[end + 4:]
    while len(body) < head.length:
        body += _recv(sock, deadline, min(65536, head.length - len(body)),
                      limits.read_timeout)
    return head, body[:head.length]


# --------------------------------------------------------------------------- serving


@dataclass(frozen=True, slots=True)
class Request:
    head: Head
    body: bytes
    peer_uid: int | None  # SO_PEERCRED of a unix-socket peer; None on TCP


@dataclass(frozen=True, slots=True)
class Identity:
    uid: int
    name: str
    privileged: bool  # operators (root, SlurmUser): their own lane, never counted per uid


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)


class Endpoint(Protocol):
    def identify(self, req: Request) -> Identity:
        """Who sent ``req`` (raises :class:`HttpError`, e.g. 401)."""
        ...

    def respond(self, req: Request, who: Identity) -> Reply: ...

    def refuse(self, req: Request, status: HTTPStatus, message: str) -> Reply:
        """The answer to a complete request the transport refuses (busy, over a limit)."""
        ...


def plain(status: HTTPStatus, message: str) -> Reply:
    return Reply(int(status), json.dumps({"error": message}).encode())


def encode_reply(reply: Reply) -> bytes:
    try:
        reason = HTTPStatus(reply.status).phrase
    except ValueError:
        reason = "Status"
    lines = [f"HTTP/1.1 {reply.status} {reason}", "Content-Type: application/json",
             f"Content-Length: {len(reply.body)}", "Connection: close",
             *(f"{k}: {v}" for k, v in reply.headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + reply.body


@dataclass(eq=False)
class Conn:
    sock: socket.socket
    peer_uid: int | None
    privileged: bool  # known at accept: a unix peer that is an operator
    opened: float = field(default_factory=time.monotonic)
    uid: int | None = None  # the uid it is counted under
    closed: bool = False


class Gate:
    """Connection accounting shared by every listener (thread-safe)."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self._lock = threading.Lock()
        self._open: set[Conn] = set()
        self._reading: OrderedDict[int, Conn] = OrderedDict()  # oldest first
        self._per_uid: Counter[int] = Counter()
        self.workers = threading.BoundedSemaphore(limits.workers)
        self.refused: Counter[int] = Counter()  # status -> count, for the log and tests

    def admit(self, conn: Conn) -> tuple[HTTPStatus, str] | None:
        """Count a new connection in, or say why not."""
        lim = self.limits
        victim: Conn | None = None
        with self._lock:
            uid = conn.peer_uid
            if uid is not None and not conn.privileged and self._per_uid[uid] >= lim.per_user:
                self.refused[HTTPStatus.TOO_MANY_REQUESTS] += 1
                return (HTTPStatus.TOO_MANY_REQUESTS,
                        f"uid {uid} already has {lim.per_user} connections to rsad open "
                        "(daemon.api.per_user); retry when one is answered")
            cap = lim.max_connections if conn.privileged else lim.max_connections - lim.reserve
            if len(self._open) >= cap:
                victim = next((c for c in self._reading.values() if not c.privileged), None)
                if victim is None:
                    self.refused[HTTPStatus.SERVICE_UNAVAILABLE] += 1
                    return (HTTPStatus.SERVICE_UNAVAILABLE,
                            f"rsad's API has {len(self._open)} connections open "
                            "(daemon.api.max_connections); retry in a moment")
                self._forget(victim)
                self.refused[HTTPStatus.REQUEST_TIMEOUT] += 1
            self._open.add(conn)
            self._reading[id(conn)] = conn
            if uid is not None:
                conn.uid = uid
                self._per_uid[uid] += 1
        if victim is not None:  # its thread sees the connection end and goes
            with contextlib.suppress(OSError):
                victim.sock.shutdown(socket.SHUT_RDWR)
        return None

    def read_done(self, conn: Conn) -> bool:
        """The request is in: no longer evictable. False if it was evicted meanwhile."""
        with self._lock:
            self._reading.pop(id(conn), None)
            return not conn.closed

    def claim(self, conn: Conn, who: Identity) -> str | None:
        """Count a TCP request under its authenticated uid (unix peers already are)."""
        with self._lock:
            if who.privileged or conn.uid is not None:
                return None
            if self._per_uid[who.uid] >= self.limits.per_user:
                self.refused[HTTPStatus.TOO_MANY_REQUESTS] += 1
                return (f"{who.name} already has {self.limits.per_user} requests to rsad "
                        "under way (daemon.api.per_user); retry when one is answered")
            conn.uid = who.uid
            self._per_uid[who.uid] += 1
            return None

    def release(self, conn: Conn) -> None:
        with self._lock:
            self._forget(conn)

    def _forget(self, conn: Conn) -> None:
        if conn.closed:
            return
        conn.closed = True
        self._open.discard(conn)
        self._reading.pop(id(conn), None)
        if conn.uid is not None:
            self._per_uid[conn.uid] -= 1
            if self._per_uid[conn.uid] <= 0:
                del self._per_uid[conn.uid]

    def counts(self) -> tuple[int, int, dict[int, int]]:
        """(open, still reading, per uid) — for tests and the debug log."""
        with self._lock:
            return len(self._open), len(self._reading), dict(self._per_uid)


def peer_uid(sock: socket.socket) -> int:
    """The uid of a unix-socket peer, from the kernel (SO_PEERCRED: pid, uid, gid)."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", raw)
    return int(uid)


class Server:
    """Accepts on every listener, one thread each; a thread per admitted connection."""

    def __init__(self, listeners: list[socket.socket], endpoint: Endpoint, limits: Limits,
                 privileged_uid: Callable[[int], bool]) -> None:
        self.listeners = listeners
        self.endpoint = endpoint
        self.limits = limits
        self.gate = Gate(limits)
        self.privileged_uid = privileged_uid
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        for lsock in self.listeners:
            lsock.settimeout(0.5)  # the accept loop looks at the stop flag this often
            t = threading.Thread(target=self._accept_loop, args=(lsock,), name="rsa-api",
                                 daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        self._stop.set()
        for lsock in self.listeners:  # wakes a blocked accept() on Linux
            with contextlib.suppress(OSError):
                lsock.shutdown(socket.SHUT_RDWR)
        for t in self._threads:
            t.join(5)
        for lsock in self.listeners:
            lsock.close()

    def _accept_loop(self, lsock: socket.socket) -> None:
        unix = lsock.family == socket.AF_UNIX
        while not self._stop.is_set():
            try:
                sock, _addr = lsock.accept()
            except TimeoutError:
                continue
            except OSError as e:  # EMFILE and the like: do not spin
                if self._stop.is_set():
                    return
                log.warning("api: accept failed: %s", e)
                time.sleep(0.1)
                continue
            try:
                uid = peer_uid(sock) if unix else None
                conn = Conn(sock, uid, uid is not None and self.privileged_uid(uid))
                refusal = self.gate.admit(conn)
            except Exception:
                log.exception("api: cannot admit a connection")
                sock.close()
                continue
            if refusal is not None:
                log.debug("api: connection refused: %s", refusal[1])
                _send_now(sock, plain(*refusal))
                continue
            try:
                threading.Thread(target=self._serve, args=(conn,), name="rsa-api-conn",
                                 daemon=True).start()
            except RuntimeError:  # no more threads
                self.gate.release(conn)
                _send_now(sock, plain(HTTPStatus.SERVICE_UNAVAILABLE,
                                     "rsad is busy: no thread free for this connection"))

    def _serve(self, conn: Conn) -> None:
        lim = self.limits
        sock = conn.sock
        try:
            try:
                head, body = read_request(sock, lim, conn.opened + lim.read_timeout)
            except HttpError as e:
                log.debug("api: request refused: %s", e)
                self._send(sock, plain(e.status, str(e)))
                _linger(sock)
                return
            except _Gone:
                return
            if not self.gate.read_done(conn):
                return  # evicted the moment it completed
            req = Request(head, body, conn.peer_uid)
            try:
                who = self.endpoint.identify(req)
            except HttpError as e:
                self._send(sock, self.endpoint.refuse(req, e.status, str(e)))
                return
            why = self.gate.claim(conn, who)
            if why is not None:
                self._send(sock, self.endpoint.refuse(req, HTTPStatus.TOO_MANY_REQUESTS, why))
                return
            if who.privileged:
                if not _hung_up(sock, req, who):
                    self._send(sock, self.endpoint.respond(req, who))
                return
            if not self.gate.workers.acquire(timeout=lim.read_timeout):
                self._send(sock, self.endpoint.refuse(
                    req, HTTPStatus.SERVICE_UNAVAILABLE,
                    f"rsad is serving {lim.workers} users' requests (daemon.api.workers); "
                    "retry in a moment"))
                return
            try:
                if _hung_up(sock, req, who):
                    return
                reply = self.endpoint.respond(req, who)
            finally:
                self.gate.workers.release()
            self._send(sock, reply)
        except Exception:
            log.exception("api: connection failed")
        finally:
            self.gate.release(conn)
            with contextlib.suppress(OSError):
                sock.close()

    def _send(self, sock: socket.socket, reply: Reply) -> None:
        try:
            sock.settimeout(self.limits.read_timeout)
            sock.sendall(encode_reply(reply))
        except OSError as e:
            log.debug("api: answer not delivered: %s", e)


def _hung_up(sock: socket.socket, req: Request, who: Identity) -> bool:
    """Whether the caller closed its connection before rsad took its request: rsad's
    clients hold it open until the answer, so one that closed gave up (its timeout ran
    out while the request waited: in the kernel's queue while rsad was stopped or its
    accept loop behind, or for a worker slot) and told its user rsad did not answer.
    Such a request is dropped: carried out now, it would do what its caller gave up on."""
    timeout = sock.gettimeout()
    try:
        sock.setblocking(False)
        gone = sock.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        gone = False
    except OSError:  # reset: gone as well
        gone = True
    finally:
        with contextlib.suppress(OSError):
            sock.settimeout(timeout)
    if gone:
        log.info("api: %s %s of uid %d not carried out: its caller closed the connection "
                 "before rsad took the request", req.head.method, req.head.target[:80],
                 who.uid)
    return gone


def _linger(sock: socket.socket, limit: int = 1 << 16, wait: float = 0.5) -> None:
    """After refusing a request whose rest may still be coming: close gently, so the peer
    reads the answer instead of a reset (bounded: ``limit`` bytes, ``wait`` seconds)."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_WR)
        end = time.monotonic() + wait
        got = 0
        while got < limit and (left := end - time.monotonic()) > 0:
            sock.settimeout(left)
            chunk = sock.recv(4096)
            if not chunk:
                return
            got += len(chunk)


def _send_now(sock: socket.socket, reply: Reply) -> None:
    """Best effort, never blocking: a refusal must not let its peer hold the acceptor."""
    try:
        sock.setblocking(False)
        sock.send(encode_reply(reply))
    except OSError:
        pass
    finally:
        sock.close()
