"""The API client's own HTTP/1.1 exchange (client._exchange and ApiClient.request) against
byte-exact answers on a socket pair, and against Python's own HTTP server over a unix
socket (the server rsad uses), which signs its answers as rsad does, or does not (another
program on rsad's port). MUNGE is replaced here (``SIG:<uid>:<hex of the payload>``);
tests/unit/test_reply_signature.py and the lab tests use the real one."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from rsa_scheduler import client, munge
from rsa_scheduler.client import (
    ApiClient,
    ApiRefused,
    ApiUnavailable,
    Found,
    _BadReply,
    _exchange,
    locate,
)


def answer(raw: bytes, *, chunks: int = 1) -> tuple[int, dict[str, str], bytes]:
    """Run _exchange against a peer that sends ``raw`` (in ``chunks`` pieces), then closes."""
    ours, theirs = socket.socketpair()
    got: list[bytes] = []

    def peer() -> None:
        got.append(theirs.recv(65536))
        step = max(1, len(raw) // chunks)
        for i in range(0, len(raw), step):
            theirs.sendall(raw[i:i + step])
        theirs.close()

    t = threading.Thread(target=peer)
    t.start()
    try:
        ours.settimeout(5)
        return _exchange(ours, b"GET / HTTP/1.1\r\n\r\n")
    finally:
        ours.close()
        t.join()


def test_a_reply_in_pieces_is_put_together() -> None:
    body = json.dumps({"x": "y" * 5000}).encode()
    raw = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
           + str(len(body)).encode() + b"\r\nX-RSA-Munge-Reply: abc\r\n\r\n" + body)
    status, headers, got = answer(raw, chunks=7)
    assert status == 200 and got == body
    assert headers["x-rsa-munge-reply"] == "abc" and headers["content-type"] == \
        "application/json"


def test_a_reply_without_length_runs_to_the_end_of_the_connection() -> None:
    assert answer(b"HTTP/1.0 404 Not Found\r\n\r\n{}")[::2] == (404, b"{}")


@pytest.mark.parametrize(("raw", "why"), [
    (b"SSH-2.0-OpenSSH_9.2\r\n\r\n", "not an HTTP answer"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", "after 3 of 10 body bytes"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "bad Content-Length"),
    (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "bad header line"),
    (b"HTTP/1.1 200 OK\r\n", "closed before the answer's headers"),
    (b"HTTP/1.1 200 OK\r\n" + b"X: " + b"a" * (70 << 10), "too long"),
])
def test_what_is_not_an_answer_is_refused(raw: bytes, why: str) -> None:
    with pytest.raises(_BadReply, match=why):
        answer(raw)


@pytest.mark.parametrize("length", [b"Content-Length: 100000000000\r\n", b""])
def test_an_endless_answer_is_cut_off_not_buffered(monkeypatch: pytest.MonkeyPatch,
                                                   length: bytes) -> None:
    """A program on rsad's TCP port while rsad is down (docs/security.md) answered with
    an endless body, or a Content-Length of 100 GB: the client (root's node Prolog, every
    user's rsa) kept all of it in memory, until its timeout or the node's OOM killer
    (found by review). Its signature would be refused, but only once all of it was read."""
    monkeypatch.setattr(client, "MAX_ANSWER", 1 << 20)
    ours, theirs = socket.socketpair()
    stop = threading.Event()

    def peer() -> None:
        theirs.recv(65536)
        with contextlib.suppress(OSError):
            theirs.sendall(b"HTTP/1.1 200 OK\r\n" + length + b"\r\n")
            while not stop.is_set():
                theirs.sendall(b"x" * 65536)

    t = threading.Thread(target=peer, daemon=True)
    t.start()
    try:
        ours.settimeout(5)
        with pytest.raises(_BadReply, match="answer over 1048576 bytes"):
            _exchange(ours, b"GET / HTTP/1.1\r\n\r\n")
    finally:
        stop.set()
        ours.close()
        theirs.close()
        t.join(5)


def fake_decode(credential: str) -> tuple[munge.Sender, bytes]:
    kind, uid, hexed = credential.split(":")
    if kind != "SIG":
        raise munge.MungeError("munge: credential rejected: Invalid credential format")
    return munge.Sender(int(uid), int(uid)), bytes.fromhex(hexed)


class Echo(BaseHTTPRequestHandler):
    """Says what it was asked. ``/refuse...`` is refused (409); ``.../unsigned...`` is not
    signed, ``.../by-1000...`` signed by uid 1000, ``.../other...`` signed for another
    request, ``.../busy`` a 503 and ``.../401`` a 401 (rsad's own unsigned refusals)."""

    protocol_version = "HTTP/1.1"  # keep-alive, as rsad: the client must not wait for EOF

    def log_message(self, *_args: Any) -> None:
        pass

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        status = (409 if "/refuse" in self.path else 503 if "/busy" in self.path
                  else 401 if "/401" in self.path else 200)
        out = json.dumps({"error": "no"} if status != 200 else {
            "method": self.command, "path": self.path, "body": body,
            "cred": self.headers.get("X-RSA-Munge")}).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(out)))
        cred = self.headers.get("X-RSA-Munge") or ""
        if "/unsigned" not in self.path:
            signer = 1000 if "/by-1000" in self.path else 0
            over = "another request" if "/other" in self.path else cred
            self.send_header(client.REPLY_HEADER,
                             f"SIG:{signer}:{munge.reply_digest(over, status, out).hex()}")
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_POST = _serve


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    import socketserver

    monkeypatch.setattr(munge, "encode", lambda payload: "CRED" + payload.hex())
    monkeypatch.setattr(munge, "decode", fake_decode)
    monkeypatch.setattr(client, "BUSY_RETRIES", (0.01,))

    class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
        daemon_threads = True

        def get_request(self) -> tuple[socket.socket, Any]:
            conn, _ = super().get_request()
            return conn, ("local", 0)

    path = str(tmp_path / "api.sock")
    srv = Server(path, Echo)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield path
    srv.shutdown()
    srv.server_close()


def test_request_round_trip_over_a_unix_socket(server: str) -> None:
    api = ApiClient(server, timeout=5)
    got = api.post("/v1/jobs/7/command", {"command": "input-done"})
    assert got["method"] == "POST" and got["path"] == "/v1/jobs/7/command"
    assert got["body"] == {"command": "input-done"} and got["cred"].startswith("CRED")
    assert api.get("/v1/status")["body"] is None


def test_an_error_answer_is_rsads_message(server: str) -> None:
    with pytest.raises(ApiRefused, match=r"^no$") as e:
        ApiClient(server, timeout=5).get("/refuse")
    assert e.value.status == 409


def test_an_unsigned_answer_is_refused_by_every_client(server: str) -> None:
    """rsad signs every answer to a caller it knows: an answer without its signature is
    whatever holds rsad's address (another user's program on its TCP port while rsad is
    down), and neither a user's rsa nor a node hook (both trust_uid 0) believes it. Before,
    the rsa CLI (trust_uid None) took it: a forged "output verified" for `rsa wait`."""
    for api in (ApiClient(server, timeout=5), ApiClient(server, timeout=5, trust_uid=0)):
        with pytest.raises(ApiUnavailable, match=r"^the answer from .* is not signed with "
                                                 r"MUNGE by rsad; refusing it: whatever "
                                                 r"answered is not rsad"):
            api.get("/unsigned/v1/jobs/7")
        with pytest.raises(ApiUnavailable, match=r"refusing it; whether the request was "
                                                 r"carried out is not known: "):
            api.post("/unsigned/v1/jobs/7/command", {"command": "input-done"})


@pytest.mark.parametrize(("path", "why"), [
    ("/by-1000/v1/status", r"is signed by uid 1000, not by rsad's uid 0; refusing it$"),
    ("/other/v1/status", r"does not match its MUNGE signature; refusing it$"),
    ("/by-1000/refuse", r"is signed by uid 1000, not by rsad's uid 0; refusing it$"),
])
def test_a_forged_signature_is_refused(server: str, path: str, why: str) -> None:
    with pytest.raises(ApiUnavailable, match=why):
        ApiClient(server, timeout=5).get(path)


def test_only_what_rsad_refuses_before_knowing_the_caller_may_come_unsigned(
        server: str) -> None:
    """A 404 ("not tracked") tells rsa wait a job has no RSA work: unsigned, it is
    refused. rsad's refusals before it knows the caller (a full table, a credential
    munged rejects) are still refusals, said to be unsigned; rsad's signed ones are
    rsad's message as it wrote it."""
    with pytest.raises(ApiUnavailable, match="is not signed with MUNGE by rsad"):
        ApiClient(server, timeout=5).get("/unsigned/refuse")
    for path, status in (("/unsigned/busy", 503), ("/unsigned/401", 401)):
        with pytest.raises(ApiRefused, match=rf"^no \(unsigned HTTP {status}: from rsad before "
                                             r"it knew who you are, or not from rsad\)$") as e:
            ApiClient(server, timeout=5).get(path)
        assert e.value.status == status
    with pytest.raises(ApiRefused, match=r"^no$") as e:
        ApiClient(server, timeout=5, trust_uid=0).get("/refuse")
    assert e.value.status == 409


def test_rsa_bb_acts_only_on_answers_rsad_signed(server: str) -> None:
    """burst_buffer.lua acts on rsa-bb's answers (a "done" data_in starts the job): an
    answer without rsad's MUNGE signature (someone else on rsad's TCP port while rsad is
    down) is no answer; rsad's refusal is still a refusal."""
    from rsa_scheduler.bb import Refused, Unreachable, _post_with

    post, get = _post_with(server, 5)
    with pytest.raises(Unreachable, match="is not signed with MUNGE"):
        post("/unsigned/v1/bb/data_out", {"job_id": "7"})
    with pytest.raises(Unreachable, match="is not signed with MUNGE"):
        post("/unsigned/refuse", {"job_id": "7"})  # a forged "no" is no answer either
    with pytest.raises(ApiUnavailable, match="is not signed with MUNGE"):
        get("/unsigned/v1/bb/pools")  # rsa-bb pools: the file kept as it was
    with pytest.raises(Refused, match=r"^no$"):
        post("/refuse", {"job_id": "7"})


def test_no_daemon_is_one_actionable_line(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(munge, "encode", lambda payload: "CRED")
    with pytest.raises(ApiUnavailable, match=r"cannot reach rsad at .*missing\.sock.*is rsad "
                                             r"running"):
        ApiClient(str(tmp_path / "missing.sock"), timeout=2).get("/v1/status")


@pytest.mark.parametrize("answers", [False, True])
def test_a_request_rsad_took_but_never_answered_is_not_called_unreachable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answers: bool) -> None:
    """rsad read the request, then died (or its loop stayed busy past the client's
    timeout) before answering: a POST may have been carried out (a ``rsa cancel-staging``
    committed, rsad killed before its answer). The client said ``cannot reach rsad at
    ...: connection closed before the answer's headers; is rsad running?``, as if nothing
    had been sent (found by review). Now it says rsad did not answer and, for a request
    that changes state, that whether it was carried out is not known."""
    monkeypatch.setattr(munge, "encode", lambda payload: "CRED")
    path = str(tmp_path / "api.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(4)
    held: list[socket.socket] = []

    def take() -> None:
        for _ in range(2):
            conn, _ = srv.accept()
            conn.recv(65536)
            if answers:  # never answers: the client's timeout runs out
                held.append(conn)
            else:  # killed after reading it
                conn.close()

    t = threading.Thread(target=take, daemon=True)
    t.start()
    try:
        with pytest.raises(ApiUnavailable) as post:
            ApiClient(path, timeout=0.3).post("/v1/jobs/7/command",
                                              {"command": "cancel-staging"})
        with pytest.raises(ApiUnavailable) as get:
            ApiClient(path, timeout=0.3).get("/v1/jobs/7")
    finally:
        t.join(5)
        for conn in held:
            conn.close()
        srv.close()
    said = str(post.value)
    assert said.startswith(f"rsad at {path} did not answer (")
    assert "cannot reach" not in said
    assert "whether the request was carried out is not known" in said
    assert "carried out" not in str(get.value)
    assert str(get.value).startswith(f"rsad at {path} did not answer (")


def test_a_path_that_would_break_the_request_line_is_refused(server: str) -> None:
    with pytest.raises(ValueError, match="not a request path"):
        ApiClient(server).get("/v1/jobs/7 HTTP/1.1\r\nX: y")


# --------------------------------------------------------------------- finding rsad


def test_rsa_api_comes_first_then_the_client_file(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client, "DEFAULT_SOCKET", str(tmp_path / "rsad.sock"))
    conf = tmp_path / "client.conf"
    conf.write_text("# where rsad is\napi = ctl1:6820   # the controller\n")
    env = {"RSA_CLIENT_CONFIG": str(conf)}
    assert locate({**env, "RSA_API": "other:1"}) == ("other:1", "RSA_API")
    # no socket of rsad's on this host (a compute node): its TCP address
    assert locate(env) == ("ctl1:6820", str(conf))


def test_the_client_file_prefers_rsads_socket_where_this_host_has_it(tmp_path: Path) -> None:
    sock = tmp_path / "rsad.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(sock))
        conf = tmp_path / "client.conf"
        conf.write_text(f"socket = {sock}\napi = ctl1:6820\n")
        assert locate({"RSA_CLIENT_CONFIG": str(conf)}).address == str(sock)


def test_without_a_client_file_the_hooks_config_then_the_default_socket(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"RSA_CLIENT_CONFIG": str(tmp_path / "none.conf")}
    assert locate(env, lambda: Found("h:1", "rsa.yaml")) == ("h:1", "rsa.yaml")
    monkeypatch.setattr(client, "DEFAULT_SOCKET", str(tmp_path / "rsad.sock"))
    assert locate(env) == (str(tmp_path / "rsad.sock"), "default")


@pytest.mark.parametrize(("text", "why"), [
    ("api ctl1:6820\n", r"client.conf:1: expected one of api = \.\.\., socket = \.\.\., got "
                        r"'api ctl1:6820'"),
    ("\nhost = ctl1\n", r"client.conf:2: expected one of"),
])
def test_a_malformed_client_file_is_one_line_naming_it(tmp_path: Path, text: str,
                                                        why: str) -> None:
    conf = tmp_path / "client.conf"
    conf.write_text(text)
    with pytest.raises(ApiUnavailable, match=why):
        locate({"RSA_CLIENT_CONFIG": str(conf)})


def test_an_unreadable_client_file_says_it_must_be_readable(tmp_path: Path) -> None:
    with pytest.raises(ApiUnavailable, match=r"cannot read .*: it says where rsad is and must "
                                             r"be readable by everyone \(chmod 0644"):
        locate({"RSA_CLIENT_CONFIG": str(tmp_path)})  # a directory: EISDIR


def test_no_socket_here_and_nothing_configured_says_where_to_configure_rsad(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A compute node that is not rsad's host: not 'is rsad running?' (it may be)."""
    monkeypatch.setattr(munge, "encode", lambda payload: "CRED")
    monkeypatch.setattr(client, "DEFAULT_SOCKET", str(tmp_path / "rsad.sock"))
    monkeypatch.setenv("RSA_CLIENT_CONFIG", str(tmp_path / "none.conf"))
    monkeypatch.delenv("RSA_API", raising=False)
    with pytest.raises(ApiUnavailable, match=r"rsad's socket .*rsad.sock is not on this host "
                                             r"and nothing says where rsad is: no RSA_API, no "
                                             r".*none\.conf; ask your administrator"):
        ApiClient(timeout=2).get("/v1/status")


def test_an_unreachable_configured_address_names_the_file_it_came_from(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(munge, "encode", lambda payload: "CRED")
    conf = tmp_path / "client.conf"
    conf.write_text(f"socket = {tmp_path / 'no.sock'}\napi = 127.0.0.1:1\n")
    monkeypatch.setenv("RSA_CLIENT_CONFIG", str(conf))
    monkeypatch.delenv("RSA_API", raising=False)
    with pytest.raises(ApiUnavailable, match=rf"cannot reach rsad at 127.0.0.1:1 \(from {conf}\)"):
        ApiClient(timeout=2).get("/v1/status")


def test_a_client_file_without_an_api_on_a_host_without_the_socket_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(munge, "encode", lambda payload: "CRED")
    conf = tmp_path / "client.conf"
    conf.write_text(f"socket = {tmp_path / 'rsad.sock'}\n")
    monkeypatch.setenv("RSA_CLIENT_CONFIG", str(conf))
    monkeypatch.delenv("RSA_API", raising=False)
    with pytest.raises(ApiUnavailable, match=rf"rsad's socket {tmp_path}/rsad.sock is not on "
                                             rf"this host and {conf} names no api = "
                                             r"HOST:PORT; ask your administrator"):
        ApiClient(timeout=2).get("/v1/status")
