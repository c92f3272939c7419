"""rsad's API transport against real sockets: the real server classes
(rsa_scheduler.daemon.api.ApiServers over rsa_scheduler.daemon.httpd) with MUNGE replaced
by a fake that lets a test speak as any uid. What a caller can hold: bad Content-Length,
slow requests, connections, requests in flight; the unix socket's mode; SO_PEERCRED.
The lab tests (tests/security/test_api.py) do the same against the live rsad."""

from __future__ import annotations

import contextlib
import grp
import json
import logging
import os
import socket
import stat
import threading
import time
from collections.abc import Iterator
from http import HTTPStatus
from pathlib import Path
from typing import Any

import pytest

from rsa_scheduler import munge
from rsa_scheduler.client import ApiClient, ApiRefused, _denied
from rsa_scheduler.daemon import httpd
from rsa_scheduler.daemon.api import REPLY_HEADER, ApiError, Caller, Routes
from rsa_scheduler.daemon.apiserver import ApiServers
from rsa_scheduler.daemon.httpd import Conn, Gate, HttpError, Limits, parse_head
from rsa_scheduler.daemon.inbox import NotTaken

ME = os.getuid()
_as = threading.local()


def speak_as(uid: int) -> None:
    """MUNGE credentials made by this thread from now on say ``uid``."""
    _as.uid = uid


@pytest.fixture(autouse=True)
def fake_munge(monkeypatch: pytest.MonkeyPatch) -> None:
    def encode(payload: bytes, restrict_uid: int | None = None) -> str:
        made = f"{getattr(_as, 'uid', ME)}:{payload.hex()}"
        return made if restrict_uid is None else f"{made}:for-{restrict_uid}"

    def decode(cred: str) -> tuple[munge.Sender, bytes]:
        uid, _, rest = cred.partition(":")
        hexed, _, restricted = rest.partition(":for-")
        if not uid.isdigit():
            raise munge.MungeError("munge: credential rejected: Invalid credential format")
        if restricted and int(restricted) != getattr(_as, "uid", ME):  # munged, root too
            raise munge.Unauthorized("munge: credential rejected: Unauthorized credential")
        return munge.Sender(int(uid), int(uid)), bytes.fromhex(hexed)

    monkeypatch.setattr(munge, "encode", encode)
    monkeypatch.setattr(munge, "decode", decode)


class FakeRoutes(Routes):
    """``/v1/slow`` waits until the test lets it go; anything else says who asked."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.waiting = threading.Semaphore(0)
        self.late = 0  # times /v1/late was asked
        self.counted = 0  # times /v1/count was carried out

    def dispatch(self, caller: Caller, method: str, path: str, body: Any) -> Any:
        if path == "/v1/refuse":
            raise ApiError(HTTPStatus.FORBIDDEN, "not for you")
        if path == "/v1/withdrawn":
            raise NotTaken("withdrawn")
        if path == "/v1/late":
            self.late += 1
            raise TimeoutError("late")
        if path == "/v1/slow":
            self.waiting.release()
            self.go.wait(10)
        if path == "/v1/count":
            self.counted += 1
        return {"uid": caller.uid, "user": caller.user, "body": body}


class Api:
    def __init__(self, tmp: Path, limits: Limits, group: str = "") -> None:
        self.routes = FakeRoutes()
        self.sock = tmp / "rsad.sock"
        self.servers = ApiServers(self.routes, self.sock, ("127.0.0.1", 0),
                                  socket_group=group, limits=limits)
        port = self.servers.server.listeners[1].getsockname()[1]
        self.tcp = f"127.0.0.1:{port}"
        self.gate = self.servers.server.gate
        self.servers.start()

    def close(self) -> None:
        self.routes.go.set()
        self.servers.stop()


@pytest.fixture
def make_api(tmp_path: Path) -> Iterator[Any]:
    made: list[Api] = []

    def make(limits: Limits | None = None, group: str = "") -> Api:
        api = Api(tmp_path, limits or Limits(read_timeout=1.0), group)
        made.append(api)
        return api

    yield make
    for api in made:
        api.close()


def connect(address: str) -> socket.socket:
    if address.startswith("/"):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(address)
    else:
        host, _, port = address.rpartition(":")
        sock = socket.create_connection((host, int(port)))
    sock.settimeout(5)
    return sock


def answer(sock: socket.socket) -> tuple[int, str]:
    buf = b""
    while chunk := sock.recv(65536):
        buf += chunk
    head, _, body = buf.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body.decode()


def in_thread(fn: Any, *args: Any, uid: int = ME) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []

    def run() -> None:
        speak_as(uid)
        try:
            out.append(fn(*args))
        except Exception as e:
            out.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


# ---- parsing ----------------------------------------------------------------------------

GOOD = b"POST /v1/hooks/prolog HTTP/1.1\r\nHost: x\r\nContent-Length: 12"


def test_a_request_head_is_parsed() -> None:
    head = parse_head(GOOD)
    assert (head.method, head.target, head.length) == ("POST", "/v1/hooks/prolog", 12)
    assert head.headers["host"] == "x"
    assert parse_head(b"GET /v1/status HTTP/1.1").length == 0


@pytest.mark.parametrize(("raw", "status", "why"), [
    (b"POST / HTTP/1.1\r\nContent-Length: -1", 400, "invalid Content-Length '-1'"),
    (b"POST / HTTP/1.1\r\nContent-Length: abc", 400, "invalid Content-Length 'abc'"),
    (b"POST / HTTP/1.1\r\nContent-Length: +5", 400, "non-negative decimal"),
    (b"POST / HTTP/1.1\r\nContent-Length: 1e3", 400, "invalid Content-Length"),
    ("POST / HTTP/1.1\r\nContent-Length: \u00b2".encode("latin-1"), 400, "invalid"),
    (b"POST / HTTP/1.1\r\nContent-Length: 1048577", 413, "1048577 bytes is over rsad's limit"),
    (b"POST / HTTP/1.1\r\nContent-Length: " + b"9" * 5000, 413, "over rsad's limit"),
    (b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1", 400, "given twice"),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked", 501, "send a Content-Length"),
    (b"GET /v1/status", 400, "malformed request line"),
    (b"GET v1/status HTTP/1.1", 400, "malformed request line"),
    (b"DELETE /v1/jobs/1 HTTP/1.1", 405, "use GET or POST"),
    (b"GET / HTTP/1.1\r\nno colon", 400, "malformed header line"),
    (b"GET / HTTP/1.1\r\n bad: folded", 400, "malformed header line"),
    (b"GET / HTTP/1.1" + b"\r\nX: y" * 65, 431, "at most 64"),
])
def test_what_is_refused_says_why(raw: bytes, status: int, why: str) -> None:
    with pytest.raises(HttpError, match=why) as e:
        parse_head(raw)
    assert e.value.status == status


# ---- over real sockets ------------------------------------------------------------------

@pytest.mark.parametrize("value", ["-1", "abc", "99999999999999999999", "2000000"])
@pytest.mark.parametrize("over", ["unix", "tcp"])
def test_a_bad_content_length_is_answered_at_once(make_api: Any, value: str,
                                                  over: str) -> None:
    api = make_api(Limits(read_timeout=30.0))
    start = time.monotonic()
    with connect(str(api.sock) if over == "unix" else api.tcp) as sock:
        sock.sendall(f"POST /v1/x HTTP/1.1\r\nContent-Length: {value}\r\n\r\n".encode())
        status, body = answer(sock)
    assert time.monotonic() - start < 10.0  # not the 30 s read timeout: at once
    assert (status in (400, 413) and "Content-Length" in body) or "over rsad's limit" in body
    deadline = time.monotonic() + 10  # seconds on a loaded machine, at once when it is not
    while api.gate.counts()[0] and time.monotonic() < deadline:
        time.sleep(0.01)  # the server's thread closes right after we do
    assert api.gate.counts()[0] == 0


def test_headers_over_the_cap_are_refused(make_api: Any) -> None:
    api = make_api()
    with connect(api.tcp) as sock:
        sock.sendall(b"GET /v1/x HTTP/1.1\r\nX: " + b"a" * (20 << 10))
        status, body = answer(sock)
    assert status == 431 and "over rsad's limit of 16384 bytes" in body


def test_a_slow_loris_is_cut_off_at_the_read_timeout(make_api: Any) -> None:
    """Bytes keep coming, one every 0.1 s: the deadline is for the whole request."""
    api = make_api(Limits(read_timeout=0.6))
    start = time.monotonic()
    with connect(api.tcp) as sock:
        got = b""
        for c in b"GET /v1/status HTTP/1.1\r\nX-Pad: " + b"a" * 100:
            try:
                sock.sendall(bytes([c]))
            except OSError:
                break
            sock.settimeout(0.1)
            try:
                got = sock.recv(65536)
            except TimeoutError:
                continue
            break
        took = time.monotonic() - start
    assert got.startswith(b"HTTP/1.1 408 ") and b"not complete within 0.6s" in got
    assert 0.5 < took < 5.0  # cut off: all 100 bytes would take 10 s


def test_a_request_round_trip_names_the_caller(make_api: Any) -> None:
    api = make_api()
    speak_as(1001)
    try:
        got = ApiClient(api.tcp, timeout=5).post("/v1/echo", {"a": 1})
    finally:
        speak_as(ME)
    assert got["uid"] == 1001 and got["body"] == {"a": 1}
    assert ApiClient(str(api.sock), timeout=5).get("/v1/echo")["uid"] == ME


def test_the_unix_peer_must_be_who_the_credential_says(make_api: Any) -> None:
    api = make_api()
    speak_as(1001)
    try:
        with pytest.raises(ApiRefused, match=f"the MUNGE credential is uid 1001's but the "
                                             f"connection is uid {ME}'s") as e:
            ApiClient(str(api.sock), timeout=5).get("/v1/echo")
    finally:
        speak_as(ME)
    assert e.value.status == 401


def test_one_user_cannot_take_more_than_per_user(make_api: Any) -> None:
    api = make_api(Limits(read_timeout=5.0, per_user=2, workers=8))
    held = [in_thread(ApiClient(api.tcp, timeout=8).get, "/v1/slow", uid=1001)
            for _ in range(2)]
    for _ in held:
        assert api.routes.waiting.acquire(timeout=5)
    speak_as(1001)
    try:
        client = ApiClient(api.tcp, timeout=5)
        with pytest.raises(ApiRefused, match="already has 2 requests to rsad under way "
                                             r"\(daemon.api.per_user\)") as e:
            client._request_once("GET", "/v1/echo", None)
        assert e.value.status == 429
    finally:
        speak_as(ME)
    speak_as(1002)
    try:
        assert ApiClient(api.tcp, timeout=5).get("/v1/echo")["uid"] == 1002
    finally:
        speak_as(ME)
    assert ApiClient(api.tcp, timeout=5).get("/v1/echo")["uid"] == ME
    api.routes.go.set()
    for t, out in held:
        t.join(5)
        assert out[0]["uid"] == 1001


def test_a_refused_client_retries_and_gets_through(make_api: Any) -> None:
    api = make_api(Limits(read_timeout=5.0, per_user=1))
    t, out = in_thread(ApiClient(api.tcp, timeout=8).get, "/v1/slow", uid=1001)
    assert api.routes.waiting.acquire(timeout=5)
    threading.Timer(0.3, api.routes.go.set).start()
    t2, out2 = in_thread(ApiClient(api.tcp, timeout=8).get, "/v1/echo", uid=1001)
    t.join(5)
    t2.join(5)
    assert out[0]["uid"] == 1001 and out2[0]["uid"] == 1001


def test_users_wait_for_workers_but_root_does_not(make_api: Any) -> None:
    api = make_api(Limits(read_timeout=5.0, per_user=4, workers=1))
    t, _out = in_thread(ApiClient(api.tcp, timeout=8).get, "/v1/slow", uid=1001)
    assert api.routes.waiting.acquire(timeout=5)
    start = time.monotonic()
    assert ApiClient(api.tcp, timeout=30).get("/v1/echo")["uid"] == 0 == ME
    assert time.monotonic() - start < 10.0  # not held until the slow request ends
    t2, out2 = in_thread(ApiClient(api.tcp, timeout=8).get, "/v1/echo", uid=1002)
    t2.join(0.5)
    assert t2.is_alive()  # waits for the one worker slot
    api.routes.go.set()
    t.join(5)
    t2.join(5)
    assert out2[0]["uid"] == 1002


def test_a_request_whose_caller_gave_up_before_rsad_took_it_is_not_carried_out(
        make_api: Any) -> None:
    """A request waits (for a worker slot here; in the kernel's queue while rsad is
    stopped or its accept loop behind) past its client's timeout: the client closes and
    tells its user rsad did not answer. rsad then read it whole from the socket and
    carried it out all the same, a command its caller had given up on (found by review,
    in the lab: a stopped rsad's ``rsa admin drain``). Our clients hold the connection
    open until the answer: one closed before rsad takes its request has gone, and the
    request is dropped; one still there is served."""
    api = make_api(Limits(read_timeout=5.0, per_user=4, workers=1))
    t, _out = in_thread(ApiClient(api.tcp, timeout=8).get, "/v1/slow", uid=1001)
    assert api.routes.waiting.acquire(timeout=5)
    body = b'{"command": "cancel-staging"}'
    speak_as(1001)  # a user's requests (root's never wait for a worker)
    cred = munge.encode(munge.request_digest("POST", "/v1/count", body))
    speak_as(ME)
    request = (f"POST /v1/count HTTP/1.1\r\nX-RSA-Munge: {cred}\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    with connect(api.tcp) as gone:
        gone.sendall(request)
    waiting = connect(api.tcp)
    waiting.sendall(request)
    deadline = time.monotonic() + 10  # both read, both waiting for the one worker
    while api.gate.counts()[:2] != (3, 0):
        assert time.monotonic() < deadline, api.gate.counts()
        time.sleep(0.01)
    api.routes.go.set()
    t.join(5)
    status, _body = answer(waiting)
    waiting.close()
    assert status == 200
    deadline = time.monotonic() + 10
    while api.gate.counts()[0] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert api.routes.counted == 1  # the one whose caller was still there


def test_idle_connections_are_capped_and_the_oldest_makes_room(make_api: Any) -> None:
    lim = Limits(read_timeout=30.0, max_connections=8)
    api = make_api(lim)
    idle = [connect(api.tcp) for _ in range(30)]
    try:
        time.sleep(0.2)
        opened, reading, _ = api.gate.counts()
        assert opened <= lim.max_connections - lim.reserve and reading == opened
        start = time.monotonic()
        assert ApiClient(api.tcp, timeout=30).get("/v1/echo")["uid"] == ME  # evicts one
        assert ApiClient(str(api.sock), timeout=30).get("/v1/echo")["uid"] == ME
        assert time.monotonic() - start < 10.0  # not the 30 s read timeout of an idle one
        closed = 0
        for sock in idle:
            sock.settimeout(0.05)
            with contextlib.suppress(TimeoutError):
                closed += sock.recv(10) == b""
        assert closed >= 30 - 7
    finally:
        for sock in idle:
            sock.close()


def test_the_gate_counts_unix_peers_per_uid_and_keeps_a_reserve() -> None:
    lim = Limits(max_connections=8, per_user=2)
    gate = Gate(lim)
    pairs = [socket.socketpair() for _ in range(12)]
    try:
        user = [Conn(a, 1001, False) for a, _ in pairs[:3]]
        assert gate.admit(user[0]) is None and gate.admit(user[1]) is None
        refusal = gate.admit(user[2])
        assert refusal is not None and refusal[0] == 429
        assert "uid 1001 already has 2 connections to rsad open" in refusal[1]
        others = [Conn(a, 2000 + i, False) for i, (a, _) in enumerate(pairs[3:8])]
        assert [gate.admit(c) for c in others] == [None] * 5
        # 7 open = max - reserve: the next user evicts the oldest still-reading connection
        newcomer = Conn(pairs[8][0], 3000, False)
        assert gate.admit(newcomer) is None and user[0].closed
        assert pairs[0][1].recv(10) == b""  # its peer sees the end
        root = Conn(pairs[9][0], 0, True)
        assert gate.admit(root) is None  # the reserve
        assert gate.counts()[0] == 8
        for c in [*user[1:2], *others, newcomer]:
            assert gate.read_done(c)
        late = Conn(pairs[10][0], 0, True)
        refusal = gate.admit(late)  # full, nothing left to evict
        assert refusal is not None and refusal[0] == 503
        gate.release(root)
        gate.release(root)  # idempotent
        assert gate.admit(late) is None
    finally:
        for a, b in pairs:
            a.close()
            b.close()


def test_the_socket_is_0660_root_and_its_group(make_api: Any) -> None:
    group = grp.getgrgid(os.getgid()).gr_name
    api = make_api(group=group)
    st = os.stat(api.sock)
    assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o660
    assert (st.st_uid, st.st_gid) == (ME, os.getgid())
    assert [p.name for p in api.sock.parent.iterdir()] == ["rsad.sock"]


def test_without_its_group_the_socket_is_0600_and_says_so_once(
        make_api: Any, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        api = make_api(group="no-such-group-rsa-test")
    assert stat.S_IMODE(os.stat(api.sock).st_mode) == 0o600
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [f"daemon.api.socket_group no-such-group-rsa-test does not exist: "
                     f"{api.sock} is mode 0600 (root only); create it (groupadd --system "
                     "no-such-group-rsa-test), add slurm and the users who run rsa on this "
                     "host, and restart rsad"]


def test_permission_denied_names_the_group(tmp_path: Path) -> None:
    path = tmp_path / "rsad.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
        group = grp.getgrgid(os.stat(path).st_gid).gr_name
        msg = _denied(str(path))
    who = f"for members of group {group}" if group != "root" else "for root only"
    assert msg == (f"permission denied on {path}: rsad's socket is {who}; ask your "
                   "administrator to add you (daemon.api.socket_group), or use the TCP API "
                   "with --api HOST:PORT (RSA_API)")


def test_transport_errors_are_json(make_api: Any) -> None:
    api = make_api()
    with connect(api.tcp) as sock:
        sock.sendall(b"GET /v1/x HTTP/1.1\r\nContent-Length: -1\r\n\r\n")
        status, body = answer(sock)
    assert status == 400 and json.loads(body)["error"].startswith("invalid Content-Length")
    assert httpd.encode_reply(httpd.plain(HTTPStatus.OK, "x")).startswith(
        b"HTTP/1.1 200 OK\r\n")


def test_busy_says_whether_the_request_may_still_be_carried_out(make_api: Any) -> None:
    """503 "busy" told a caller nothing of whether its command would still happen (it
    did, later); now a request the loop never took is withdrawn and the answer says
    nothing was done, and one it took but did not answer in time says it may be."""
    api = make_api()
    with pytest.raises(ApiRefused, match="nothing of it was done, retry") as withdrawn:
        ApiClient(api.tcp).get("/v1/withdrawn")
    with pytest.raises(ApiRefused, match="it may still be carried out") as late:
        ApiClient(api.tcp).get("/v1/late")
    assert withdrawn.value.status == late.value.status == 503  # reads: asked again
    # a command's is not "busy, retry": the rsa CLI sends a 503 again (found by review: a
    # command that may have been carried out was sent up to three more times, and the
    # next was refused, "can't cancel-staging from tearing-down", for one that was done)
    api.routes.late = 0
    with pytest.raises(ApiRefused, match="it may still be carried out") as command:
        ApiClient(api.tcp).post("/v1/late", {"command": "cancel-staging"})
    assert command.value.status == 504 and api.routes.late == 1


def test_a_refusal_sent_before_the_request_was_read_still_reaches_the_client(
        tmp_path: Path) -> None:
    """rsad answers 429 at accept and closes: a client still writing its request gets
    EPIPE, and must read the answer rather than report rsad unreachable."""
    import socket as _socket

    from rsa_scheduler.client import _exchange

    path = str(tmp_path / "s")
    srv = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1)
    body = b'{"error": "uid 1002 already has 8 connections to rsad open"}'

    def refuse() -> None:
        conn, _ = srv.accept()
        conn.sendall(b"HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n"
                     b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        conn.close()

    t = threading.Thread(target=refuse)
    t.start()
    cli = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    cli.connect(path)
    t.join(5)
    status, _headers, got = _exchange(cli, b"POST / HTTP/1.1\r\n\r\n" + b"x" * (8 << 20))
    cli.close()
    srv.close()
    assert status == 429 and b"already has 8 connections" in got


# ---- the reply credential ---------------------------------------------------------------

def reply_head(address: str, uid: int | None, path: str = "/v1/echo",
               cred: str | None = None) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of a GET as ``uid`` (None: no credential at all)."""
    from rsa_scheduler.client import _exchange

    if cred is None and uid is not None:
        cred = f"{uid}:{munge.request_digest('GET', path, b'').hex()}"
    auth = f"X-RSA-Munge: {cred}\r\n" if cred is not None else ""
    with connect(address) as sock:
        return _exchange(sock, f"GET {path} HTTP/1.1\r\nHost: x\r\n{auth}"
                               "Content-Length: 0\r\n\r\n".encode())


def test_every_answer_to_a_known_caller_is_signed_for_that_caller_only(
        make_api: Any) -> None:
    """rsad's credential is root's: it goes with every answer to an authenticated caller,
    a refusal included, restricted to the caller's uid (the node hooks act as root on it,
    users' rsa believes nothing else); never with the answer to a request rsad could not
    authenticate (it knows no uid to restrict it to). Before: only operators' answers
    (200) were signed, and a user's rsa took any answer from whatever held rsad's port."""
    import pwd

    api = make_api()
    header = REPLY_HEADER.lower()
    # the unix socket checks the peer's uid too: there only this process (root) speaks
    for address in (api.tcp, str(api.sock)) if ME == 0 else (api.tcp,):
        for uid, path, cred, status in [
                (None, "/v1/echo", None, 401),  # no credential at all
                (None, "/v1/echo", "garbage", 401)]:  # one munged rejects
            got, headers, _ = reply_head(address, uid, path, cred)
            assert got == status and header not in headers, (address, path, headers)
        callers = [0, 1002] if address == api.tcp else [0]
        for uid in callers:
            for path, status in [("/v1/echo", 200), ("/v1/refuse", 403)]:
                got, headers, body = reply_head(address, uid, path)
                cred = f"{uid}:{munge.request_digest('GET', path, b'').hex()}"
                assert got == status
                assert headers[header] == \
                    f"{ME}:{munge.reply_digest(cred, status, body).hex()}:for-{uid}"
    slurm = pwd.getpwnam("slurm").pw_uid if "slurm" in {p.pw_name for p in pwd.getpwall()} \
        else None
    if slurm is not None:
        got, headers, _ = reply_head(api.tcp, slurm)
        assert got == 200 and headers[header].endswith(f":for-{slurm}")


def test_no_users_answer_is_signed_where_root_could_decode_it(
        make_api: Any, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """A munged built to let root decode any credential would make a user's copy of
    rsad's signature a root credential slurmd takes: rsad asks munged once and then
    signs operators' answers only, saying why in its log."""
    asked: list[int] = []

    def root_decodes() -> bool:
        asked.append(1)
        return True

    monkeypatch.setattr(munge, "root_decodes_restricted", root_decodes)
    api = make_api()
    header = REPLY_HEADER.lower()
    with caplog.at_level(logging.ERROR, logger="rsa_scheduler.daemon.apiserver"):
        for _ in range(2):
            got, headers, _ = reply_head(api.tcp, 1002)
            assert got == 200 and header not in headers
    assert asked == [1]
    assert "rsad signs no plain user's answer" in caplog.text
    got, headers, _ = reply_head(api.tcp, 0)
    assert got == 200 and headers[header].endswith(":for-0")


# ---- a mount command's secret on the wire -----------------------------------------------

SECRET_ARGV = ["mfsmount", "@MOUNTPOINT@", "-o", "mfspassword=5ecre7c0ffee"]


class OneMount:
    """A compute-node side whose every Prolog and agent answer is a mount instruction."""

    def prolog(self, *_args: Any, **_kw: Any) -> dict[str, Any]:
        return {"seq": 1, "do": "mount", "role": "input", "client_argv": SECRET_ARGV,
                "agent": True}

    def agent(self, *_args: Any, **_kw: Any) -> dict[str, Any]:
        return {"seq": 2, "do": "mount", "role": "output", "client_argv": SECRET_ARGV,
                "epoch": "e"}


class NoJobs:
    """Just enough of a daemon for the node hooks' routes: ready, tracking nothing."""

    def __init__(self) -> None:
        from rsa_scheduler.node.plan import HookProtocols

        self.ready = threading.Event()
        self.ready.set()
        self.registry = object()
        self.hook_protocols = HookProtocols()
        self.aliases: dict[str, str] = {}
        self.sched = type("Sched", (), {"records": {}, "displaced": set()})()

    def submit(self, kind: str, payload: Any, *, wait: bool = False) -> Any:
        return payload() if kind == "call" else None


@pytest.mark.parametrize("hook", ["prolog", "agent"])
def test_a_mount_commands_secret_goes_sealed_for_root_alone(
        monkeypatch: pytest.MonkeyPatch, hook: str) -> None:
    """The answer to a node hook goes in the clear over TCP to whoever passed as root. A
    user on rsad's host who held its TCP port while rsad was down kept a node Prolog's
    request (root's credential in it, unused) and sent it to rsad once rsad was back:
    rsad answered with the job's mount command, ``mfspassword=`` and all (found by
    review). A node of hook protocol 3 gets it sealed, a MUNGE credential restricted to
    root (tests/unit/test_reply_signature.py has munged's side of it); an older one as
    before."""
    from rsa_scheduler.daemon import nodeside
    from rsa_scheduler.node.plan import SEALED_ARGV

    monkeypatch.setattr(nodeside, "nodeside_of", lambda _registry: OneMount())
    routes = Routes(NoJobs())  # type: ignore[arg-type]
    body = {"job_id": "7", "node": "c1", "nodes": "c1", "user": "alice"}
    root = Caller(0, "root")
    new = routes.dispatch(root, "POST", f"/v1/hooks/{hook}", {**body, "protocol": SEALED_ARGV})
    assert new["do"] == "mount" and "client_argv" not in new
    assert "5ecre7" not in json.dumps(new)
    uid, payload, restricted = new["sealed_argv"].split(":")
    assert (uid, restricted) == (str(ME), "for-0")  # rsad's, for root alone
    assert json.loads(bytes.fromhex(payload)) == SECRET_ARGV
    # a node not upgraded yet (c1's hooks spoke 3: its old Prolog is refused,
    # tests/unit/test_api_hooks.py)
    old = routes.dispatch(root, "POST", f"/v1/hooks/{hook}",
                          {**body, "node": "c2", "protocol": 2})
    assert old["client_argv"] == SECRET_ARGV and "sealed_argv" not in old


def test_the_node_opens_only_rsads_sealed_mount_command() -> None:
    """The node side decodes the sealed argv as root; one sealed by another uid (a user's
    own credential restricted to root) is no command of rsad's."""
    from rsa_scheduler.node.mounts import MountError, client_argv_of

    mine = munge.encode(json.dumps(SECRET_ARGV).encode(), restrict_uid=0)
    speak_as(0)
    try:
        assert client_argv_of({"sealed_argv": mine}) == SECRET_ARGV
        assert client_argv_of({"client_argv": SECRET_ARGV}) == SECRET_ARGV
        speak_as(1001)
        forged = munge.encode(json.dumps(["mount", "--bind", "/", "/x"]).encode(),
                              restrict_uid=0)
        speak_as(0)
        with pytest.raises(MountError, match=r"not rsad's \(sealed by uid 1001\)"):
            client_argv_of({"sealed_argv": forged})
    finally:
        speak_as(ME)
