"""The rsad API client used by the ``rsa`` CLI and the Slurm hooks.

Owns :class:`ApiClient`: HTTP/1.1 over rsad's unix socket (or TCP ``host:port``), each
request carrying a MUNGE credential bound to its method, path and body, each answer
believed only with rsad's MUNGE signature over it (root's credential, restricted to this
process's uid, over this request's credential, the status and the body); and
:func:`locate`, where every client (``rsa`` on any node and inside jobs, ``rsa-hook`` as
SlurmUser, ``rsa-bb``, the node hooks) finds rsad: ``RSA_API``, else the world-readable
client file ``/etc/rsa/client.conf`` (rsad's socket where this host has one this user may
use, else its TCP ``api``), else (the hooks, which may read rsa.yaml) ``daemon.api`` of
the configuration, else the default socket. It speaks the small
part of HTTP/1.1 rsad's API uses (one request per connection, ``Content-Length`` bodies)
itself: ``http.client`` pulls in ``email`` and ``ssl`` (~30 ms), and the node Prolog that
imports this module runs at every job start on every node.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import socket
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from rsa_scheduler import munge
from rsa_scheduler.errors import RsaError

DEFAULT_SOCKET = "/run/rsa/rsad.sock"
#: where rsad is, for every host that calls it: world-readable (0644), no secret in it
CLIENT_CONF = Path("/etc/rsa/client.conf")
CLIENT_CONF_ENV = "RSA_CLIENT_CONFIG"
CLIENT_KEYS = ("api", "socket")
AUTH_HEADER = "X-RSA-Munge"
REPLY_HEADER = "X-RSA-Munge-Reply"
#: the uid rsad runs as (systemd/rsad.service: User=root), whose signature answers carry
RSAD_UID = 0
#: what rsad refuses before it knows the caller (daemon/httpd.py: a malformed, slow or
#: oversized request, a credential munged rejects, full tables), so unsigned: 400, 401,
#: 405, 408, 413, 429, 431, 501, 503. Any other status comes only signed: an unsigned 404
#: ("not tracked") would tell ``rsa wait`` a job has no RSA work.
UNSIGNED_REFUSALS = frozenset({400, 401, 405, 408, 413, 429, 431, 501, 503})


class ApiUnavailable(RsaError):
    """rsad cannot be reached."""


class ApiRefused(RsaError):
    """rsad answered with an error; the message is rsad's."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(message)


MAX_HEADER = 64 << 10  # rsad's answer headers are a few hundred bytes
#: rsad's largest answers (an operator's rsa jobs, 10,000 events) are some MB; more is
#: no answer of rsad's (a program on its port while it is down), and is not kept
MAX_ANSWER = 256 << 20


class _BadReply(RsaError):
    """The peer's bytes are not an HTTP/1.1 answer."""


def _by(sock: socket.socket, end: float | None) -> socket.socket:
    """``sock`` with its timeout set to what is left until ``end`` (``time.monotonic()``;
    None: the timeout it has, per operation); TimeoutError once nothing is left."""
    if end is not None:
        left = end - time.monotonic()
        if left <= 0:
            raise TimeoutError("timed out")
        sock.settimeout(left)
    return sock


def _exchange(sock: socket.socket, request: bytes,
              end: float | None = None) -> tuple[int, dict[str, str], bytes]:
    """Send one request, read one answer: (status, lower-cased headers, body); with
    ``end``, all of it by then (TimeoutError), however the answer trickles in."""
    # rsad may refuse a connection (429, 503) and close it before reading the request:
    # its answer is still there to read
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        _by(sock, end).sendall(request)
    buf = b""
    while b"\r\n\r\n" not in buf:
        if len(buf) > MAX_HEADER:
            raise _BadReply("answer headers too long")
        chunk = _by(sock, end).recv(65536)
        if not chunk:
            raise _BadReply("connection closed before the answer's headers")
        buf += chunk
    head, _, body = buf.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise _BadReply(f"not an HTTP answer: {status_line[:60]!r}")
    headers = {}
    for line in lines:
        name, sep, value = line.partition(":")
        if not sep:
            raise _BadReply(f"bad header line {line[:60]!r}")
        headers[name.strip().lower()] = value.strip()
    length_text = headers.get("content-length")
    if length_text is not None and not length_text.isdigit():
        raise _BadReply(f"bad Content-Length {length_text[:20]!r}")
    # no length: the body runs to the end of the connection
    length = int(length_text) if length_text is not None else None
    if length is not None and length > MAX_ANSWER:
        raise _BadReply(f"answer over {MAX_ANSWER} bytes (Content-Length {length})")
    got = bytearray(body)
    while length is None or len(got) < length:
        chunk = _by(sock, end).recv(1 << 20 if length is None
                                    else min(1 << 20, length - len(got)))
        if not chunk:
            if length is None:
                break
            raise _BadReply(f"connection closed after {len(got)} of {length} body bytes")
        got += chunk
        if len(got) > MAX_ANSWER:
            raise _BadReply(f"answer over {MAX_ANSWER} bytes")
    return int(parts[1]), headers, bytes(got if length is None else got[:length])


#: pauses before retrying an answer of 429/503 (rsad full for the moment)
BUSY_RETRIES = (0.2, 0.5, 1.0)


def _denied(address: str) -> str:
    """rsad's socket is 0660 root:daemon.api.socket_group: say which group to ask for."""
    try:
        import grp

        group = grp.getgrgid(os.stat(address).st_gid).gr_name
    except (OSError, KeyError):
        group = ""
    who = (f"for members of group {group}" if group and group != "root"
           else "for root only")
    return (f"permission denied on {address}: rsad's socket is {who}; ask your "
            "administrator to add you (daemon.api.socket_group), or use the TCP API "
            "with --api HOST:PORT (RSA_API)")


#: rsad's TCP API port when ``daemon.api.listen`` or an address (``--api``, RSA_API,
#: burst_buffer.lua's ``CONFIG.api``) names a host alone. Not one of Slurm's: slurmctld
#: 6817 (or a range from it), slurmd 6818, slurmdbd 6819, slurmrestd 6820 by custom
#: (docs/ports.md). Before it, the guides suggested 6820; an address naming it still works.
API_PORT = 7820


def host_and_port(address: str) -> tuple[str, int]:
    """``host:port``, ``[v6]:port``, or a host alone (:data:`API_PORT`)."""
    if address.endswith("]") or ":" not in address:
        return address.strip("[]"), API_PORT
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


class Found(NamedTuple):
    """rsad's address and where it was found (said in errors: messages must be true)."""

    address: str
    source: str


def client_conf_path(env: Mapping[str, str] = os.environ) -> Path:
    return Path(env[CLIENT_CONF_ENV]) if env.get(CLIENT_CONF_ENV) else CLIENT_CONF


def read_client_conf(path: Path) -> dict[str, str] | None:
    """The client file's ``key = value`` lines (``#`` comments); None if there is none.
    An unreadable or malformed file is an error: it exists, so it was meant to be used."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as e:
        raise ApiUnavailable(f"cannot read {path} ({e.strerror or e}): it says where rsad "
                             f"is and must be readable by everyone (chmod 0644 {path})") from e
    found: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or key not in CLIENT_KEYS:
            raise ApiUnavailable(f"{path}:{number}: expected one of "
                                 f"{', '.join(k + ' = ...' for k in CLIENT_KEYS)}, got "
                                 f"{line[:60]!r}")
        found[key] = value
    return found


def _usable_socket(path: str) -> bool:
    """This host has rsad's socket and this process may connect to it (write access)."""
    return os.path.exists(path) and os.access(path, os.W_OK)


def locate(env: Mapping[str, str] = os.environ,
           config: Callable[[], Found | None] | None = None) -> Found:
    """Where rsad is: ``RSA_API``; else the client file (its ``socket``, default
    /run/rsa/rsad.sock, where this host has it and this user may use it, else its ``api``
    host:port); else ``config()`` (the hooks: daemon.api of rsa.yaml; it raises when that
    file exists but cannot be read, never falling back); else the default socket."""
    if env.get("RSA_API"):
        return Found(env["RSA_API"], "RSA_API")
    path = client_conf_path(env)
    conf = read_client_conf(path)
    if conf is not None:
        sock = conf.get("socket") or DEFAULT_SOCKET
        if _usable_socket(sock) or not conf.get("api"):
            return Found(sock, str(path))
        return Found(conf["api"], str(path))
    found = config() if config is not None else None
    return found or Found(DEFAULT_SOCKET, "default")


def _unreachable(found: Found, e: BaseException) -> str:
    """What to say when rsad cannot be reached at ``found``: true about where it looked."""
    if isinstance(e, FileNotFoundError) and found.address.startswith("/"):
        if found.source == "default":
            return (f"rsad's socket {found.address} is not on this host and nothing says "
                    f"where rsad is: no RSA_API, no {client_conf_path()}; ask your "
                    "administrator "
                    "to write rsad's address there (api = HOST:PORT), or use --api "
                    "HOST:PORT (RSA_API)")
        if found.source not in ("given", "RSA_API"):  # a client file without an api
            return (f"rsad's socket {found.address} is not on this host and {found.source} "
                    "names no api = HOST:PORT; ask your administrator to add rsad's "
                    "address there, or use --api HOST:PORT (RSA_API)")
    where = "" if found.source in ("default", "given") else f" (from {found.source})"
    return (f"cannot reach rsad at {found.address}{where}: {e}; is rsad running "
            "(systemctl status rsad)?")


#: seconds to wait for rsad: longer than rsad waits for its loop (10 s for it to take a
#: request, 10 more for its answer: daemon/inbox.py), so that rsad's own answer, which
#: says whether the request was done, comes before the client gives up
DEFAULT_TIMEOUT = 30.0
#: seconds a command's first request to rsad may take when its own deadline has already
#: passed (``rsa wait --timeout 4`` whose squeue took 4 s): it is made all the same, so
#: the command says what rsad answers (or that it did not), at most this much late
FIRST_ASK = 5.0


def _unanswered(found: Found, e: BaseException, method: str) -> str:
    """What to say when rsad took the connection (the request was sent) but no answer
    came: a request that changes state may have been carried out."""
    where = "" if found.source in ("default", "given") else f" (from {found.source})"
    unknown = ("; whether the request was carried out is not known" if method != "GET"
               else "")
    return (f"rsad at {found.address}{where} did not answer ({e}){unknown}; is rsad "
            "running (systemctl status rsad)?")


class ApiClient:
    """Talks to rsad. ``address`` is a unix socket path or ``host:port``; None:
    :func:`locate`."""

    def __init__(self, address: str | Found | None = None, timeout: float = DEFAULT_TIMEOUT,
                 trust_uid: int = RSAD_UID, deadline: float | None = None) -> None:
        """``trust_uid``: accept only answers signed with a MUNGE credential of this uid,
        rsad's (root). rsad signs every answer to an authenticated caller, restricted to
        the caller's uid: an answer (200) without a valid signature is refused
        (:class:`ApiUnavailable`; whatever answered is not rsad, e.g. another user's
        program on rsad's TCP port while rsad is down), and so is a refusal whose
        signature is forged or missing. Only what rsad refuses before it knows the caller
        (:data:`UNSIGNED_REFUSALS`: a full connection table, a credential munged rejects)
        may come unsigned: it is :class:`ApiRefused`, its message saying it is unsigned,
        acted on as a "no" or a "busy", and no user takes its reason for rsad's.

        ``deadline`` (``time.monotonic()``; :meth:`within`): every request ends by then,
        its timeout the smaller of ``timeout`` and what is left (a command's own
        ``--timeout``, which a hung rsad must not stretch by a whole ``timeout``)."""
        self.deadline = deadline
        #: why the newest request (of this client and its :meth:`within` copies) went
        #: unanswered: what is said when the deadline passes before the next is asked
        self._unanswered: list[str] = []
        #: whether this client (or a :meth:`within` copy) has asked rsad yet: the first
        #: request goes out even when the deadline has passed (FIRST_ASK)
        self._asked: list[bool] = []
        self.found = (address if isinstance(address, Found)
                      else Found(address, "given") if address else locate(os.environ))
        self.address = self.found.address
        self.timeout = timeout
        self.trust_uid = trust_uid

    def within(self, deadline: float | None) -> ApiClient:
        """This client, whose every request ends by ``deadline`` (``time.monotonic()``;
        None: each within ``timeout``)."""
        out = copy.copy(self)
        out.deadline = deadline
        return out

    def _budget(self) -> float:
        """Seconds this request may take: ``timeout``, or less when the deadline is
        nearer; :class:`ApiUnavailable` when it has passed (rsad is not asked again).
        The first request of a command is always made: when the deadline passed before
        it (a short ``--timeout`` that Slurm's answers, or Python's start on a loaded
        node, used up), it gets FIRST_ASK s, so the command does not end without a word
        from rsad."""
        if self.deadline is None:
            return self.timeout
        left = self.deadline - time.monotonic()
        if left <= 0 and not self._asked:
            left = min(self.timeout, FIRST_ASK)
        if left <= 0:
            if self._unanswered:
                raise ApiUnavailable(f"the time given ran out; {self._unanswered[-1]}")
            raise ApiUnavailable(f"the time given ran out before rsad at {self.address} "
                                 "was asked again")
        return min(self.timeout, left)

    def _connect(self, timeout: float) -> socket.socket:
        if self.address.startswith("/"):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.settimeout(timeout)
                sock.connect(self.address)
            except BaseException:
                sock.close()
                raise
            return sock
        return socket.create_connection(host_and_port(self.address), timeout=timeout)

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """One API call. rsad answers 429 (this user has ``daemon.api.per_user``
        requests under way) or 503 (busy) when it is full: those are retried a few times
        with a fresh credential before they are the answer."""
        if not path.startswith("/") or any(c <= " " or c == "\x7f" for c in path):
            raise ValueError(f"not a request path: {path!r}")
        for pause in BUSY_RETRIES:
            try:
                return self._request_once(method, path, body)
            except ApiRefused as e:
                if e.status not in (429, 503):
                    raise
                if self.deadline is not None and time.monotonic() + pause >= self.deadline:
                    raise  # no time for another try: rsad's "busy" is the answer
            time.sleep(pause)
        return self._request_once(method, path, body)

    def _request_once(self, method: str, path: str, body: Any) -> Any:
        raw = json.dumps(body).encode() if body is not None else b""
        cred = munge.encode(munge.request_digest(method, path, raw))
        host = "localhost" if self.address.startswith("/") else self.address
        head = (f"{method} {path} HTTP/1.1\r\nHost: {host}\r\n{AUTH_HEADER}: {cred}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(raw)}\r\n"
                "Connection: close\r\n\r\n")
        timeout = self._budget()
        self._asked[:] = [True]
        # with a deadline, the whole exchange within the budget; else each operation
        end = time.monotonic() + timeout if self.deadline is not None else None
        try:
            sock = self._connect(timeout)
        except PermissionError as e:
            raise ApiUnavailable(_denied(self.address)) from e
        except (OSError, ValueError) as e:
            raise ApiUnavailable(self._said(_unreachable(self.found, e))) from e
        try:  # from here rsad may have the request: its silence is no "not done"
            status, headers, data = _exchange(sock, head.encode("latin-1") + raw, end)
        except (OSError, ValueError, _BadReply) as e:
            raise ApiUnavailable(self._said(_unanswered(self.found, e, method))) from e
        finally:
            sock.close()
        self._unanswered.clear()
        signature = headers.get(REPLY_HEADER.lower())
        if signature or status not in UNSIGNED_REFUSALS:
            try:
                self._check_signature(method, cred, status, data, signature)
            except ApiUnavailable as e:  # what the deadline's message repeats
                self._said(str(e))
                raise
        try:
            decoded = json.loads(data) if data else None
        except ValueError as e:
            raise ApiUnavailable(self._said(f"rsad at {self.address} sent something that "
                                            "is not JSON")) from e
        if status != 200:
            msg = decoded.get("error") if isinstance(decoded, dict) else None
            text = str(msg or f"HTTP {status}")
            if not signature:
                text += (f" (unsigned HTTP {status}: from rsad before it knew who you are, "
                         "or not from rsad)")
            raise ApiRefused(status, text)
        return decoded

    def _said(self, why: str) -> str:
        """``why`` a request went unanswered, kept for :meth:`_budget` (the newest only)."""
        self._unanswered[:] = [why]
        return why

    def _check_signature(self, method: str, cred: str, status: int, data: bytes,
                         signature: str | None) -> None:
        where = f"the answer from {self.address}"
        if self.found.source not in ("default", "given"):
            where += f" (from {self.found.source})"
        # the request may have been carried out by an rsad whose answer this is not
        unknown = ("; whether the request was carried out is not known" if method != "GET"
                   else "")
        if not signature:
            raise ApiUnavailable(
                f"{where} is not signed with MUNGE by rsad; refusing it{unknown}: whatever "
                "answered is not rsad (another program on its port while rsad is down?) or "
                "is an rsad older than this rsa; tell your administrator (rsad is upgraded "
                "before its clients)")
        try:
            sender, payload = munge.decode(signature)
        except munge.Unauthorized as e:
            raise ApiUnavailable(f"{where} is signed for another uid, not for yours; "
                                 f"refusing it{unknown} ({e})") from e
        except munge.MungeError as e:
            raise ApiUnavailable(f"{where}: {e}; refusing it{unknown}") from e
        if sender.uid != self.trust_uid:
            raise ApiUnavailable(f"{where} is signed by uid {sender.uid}, not by rsad's "
                                 f"uid {self.trust_uid}; refusing it{unknown}")
        if payload != munge.reply_digest(cred, status, data):
            raise ApiUnavailable(f"{where} does not match its MUNGE signature; refusing "
                                 f"it{unknown}")

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def post(self, path: str, body: Any) -> Any:
        return self.request("POST", path, body)
