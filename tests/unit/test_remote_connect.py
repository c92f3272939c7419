"""SshHost's connections (rsa_scheduler/remote.py) without an sshd: a connection dropped
before its banner is tried again, and paramiko's own traceback of each drop stays out of
rsad's log (BannerNoiseFilter) while every other paramiko error is still logged."""

from __future__ import annotations

import contextlib
import logging
import socket
import struct
import threading
from collections.abc import Callable, Iterator

import pytest

from rsa_scheduler import remote
from rsa_scheduler.hosts import HostError
from rsa_scheduler.remote import BannerNoiseFilter, SshHost

#: what paramiko 5.1's transport thread logs (ERROR, one record per line, no args) for a
#: connection closed before sshd's banner: captured from a real one
BANNER_REPORT = [
    "Exception (client): Error reading SSH protocol banner",
    "Traceback (most recent call last):",
    '  File "/venv/paramiko/transport.py", line 2227, in _check_banner',
    "    buf = self.packetizer.readline(timeout)",
    "          ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
    '  File "/venv/paramiko/packet.py", line 395, in readline',
    "    buf += self._read_timeout(timeout)",
    "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^",
    '  File "/venv/paramiko/packet.py", line 665, in _read_timeout',
    "    raise EOFError()",
    "EOFError",
    "",
    "During handling of the above exception, another exception occurred:",
    "",
    "Traceback (most recent call last):",
    '  File "/venv/paramiko/transport.py", line 2043, in run',
    "    self._check_banner()",
    '  File "/venv/paramiko/transport.py", line 2231, in _check_banner',
    "    raise SSHException(",
    "paramiko.ssh_exception.SSHException: Error reading SSH protocol banner",
    "",
]
#: another error of paramiko's, with its traceback: it must stay visible
OTHER_ERROR = [
    "Unknown exception: boom",
    "Traceback (most recent call last):",
    '  File "/venv/paramiko/transport.py", line 2100, in run',
    "    self._handler_table[ptype](m)",
    "RuntimeError: boom",
    "",
]


def record(msg: str, level: int = logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord("paramiko.transport", level, "transport.py", 1, msg, (), None)


def passed(filt: logging.Filter, lines: list[str], level: int = logging.ERROR) -> list[str]:
    return [ln for ln in lines if filt.filter(record(ln, level))]


def test_the_banner_report_is_dropped_and_other_errors_pass() -> None:
    filt = BannerNoiseFilter()
    assert passed(filt, BANNER_REPORT) == []
    assert passed(filt, OTHER_ERROR) == OTHER_ERROR  # right after it, in the same thread
    assert passed(filt, ["Socket exception: Connection reset by peer (104)"]) == [
        "Socket exception: Connection reset by peer (104)"]
    # a banner report whose read failed otherwise (reset, timed out) is dropped too
    reset = [BANNER_REPORT[0] + "[Errno 104] Connection reset by peer",
             *BANNER_REPORT[1:-2],
             BANNER_REPORT[-2] + "[Errno 104] Connection reset by peer", ""]
    assert passed(filt, reset + BANNER_REPORT) == []
    # the closing empty line is optional: what follows the last line is judged afresh
    assert passed(filt, BANNER_REPORT[:-1] + OTHER_ERROR) == OTHER_ERROR


def test_a_record_of_another_level_ends_the_report() -> None:
    filt = BannerNoiseFilter()
    assert passed(filt, BANNER_REPORT[:3]) == []
    assert passed(filt, ["EOF in transport thread"], logging.DEBUG) == [
        "EOF in transport thread"]
    assert passed(filt, OTHER_ERROR) == OTHER_ERROR


def test_the_filter_keeps_its_place_per_thread() -> None:
    """Two connections' transport threads log at once: one's banner report hides nothing
    of the other's error."""
    filt = BannerNoiseFilter()
    assert passed(filt, BANNER_REPORT[:5]) == []  # this thread is inside a report
    other: list[str] = []
    t = threading.Thread(target=lambda: other.extend(passed(filt, OTHER_ERROR)))
    t.start()
    t.join()
    assert other == OTHER_ERROR
    assert passed(filt, BANNER_REPORT[5:]) == []


@contextlib.contextmanager
def fake_sshd(handle: Callable[[socket.socket], None]) -> Iterator[int]:
    """A loopback port whose "sshd" hands every connection to ``handle``; its port."""
    srv = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            handle(conn)

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield srv.getsockname()[1]
    finally:
        srv.close()


@pytest.fixture
def dropping_sshd() -> Iterator[int]:
    """A loopback port whose "sshd" reads the client's version line and closes the
    connection without a banner, as an sshd over its MaxStartups does."""

    def drop(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            conn.settimeout(5)
            buf = b""
            while b"\n" not in buf and (data := conn.recv(256)):
                buf += data

    with fake_sshd(drop) as port:
        yield port


def test_paramiko_logs_no_traceback_for_connections_dropped_before_the_banner(
        dropping_sshd: int, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """Real paramiko against a port that drops every connection: each is tried again
    (our own lines say so), the last error says why, and none of paramiko's ERROR
    records (its traceback per drop) reaches a handler."""
    monkeypatch.setattr(remote, "CONNECT_PAUSE", 0.0)
    caplog.set_level(logging.DEBUG)
    host = SshHost("rsa9", "127.0.0.1", port=dropping_sshd, host_key_policy="auto-add",
                   connect_timeout=5)
    with pytest.raises(HostError, match=r"protocol banner.*5 tries: is sshd's MaxStartups"):
        host.connect()
    paramiko_lines = [r for r in caplog.records if r.name.startswith("paramiko")]
    assert paramiko_lines, "paramiko logged nothing (DEBUG): is the test still right?"
    assert [r.getMessage() for r in paramiko_lines if r.levelno >= logging.WARNING] == []
    ours = [r.getMessage() for r in caplog.records if r.name == "rsa_scheduler.remote"]
    assert sum("dropped the connection before its banner" in m for m in ours) == 4


@pytest.fixture
def resetting_sshd() -> Iterator[int]:
    """A loopback port whose "sshd" resets every connection at once (RST, SO_LINGER 0),
    before the client could send its version: paramiko raises a bare EOFError then."""

    def reset(conn: socket.socket) -> None:
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()

    with fake_sshd(reset) as port:
        yield port


def test_a_connection_reset_before_the_version_exchange_is_tried_again(
        resetting_sshd: int, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """However early sshd drops it (here before paramiko wrote its version line), a
    dropped connection is retried and ends in the one actionable error, not a bare
    EOFError after a single try."""
    monkeypatch.setattr(remote, "CONNECT_PAUSE", 0.0)
    caplog.set_level(logging.INFO, logger="rsa_scheduler.remote")
    host = SshHost("rsa9", "127.0.0.1", port=resetting_sshd, host_key_policy="auto-add",
                   connect_timeout=5)
    with pytest.raises(HostError, match=r"5 tries: is sshd's MaxStartups too low"):
        host.connect()
    ours = [r.getMessage() for r in caplog.records if r.name == "rsa_scheduler.remote"]
    assert sum("dropped the connection before its banner" in m for m in ours) == 4


@pytest.fixture
def banner_then_close_sshd() -> Iterator[int]:
    """A loopback port whose "sshd" sends its banner and closes: a failure of sshd's own
    side of the key exchange (its pre-auth child dying), not a MaxStartups drop."""

    def banner_then_close(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            conn.sendall(b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n")
            conn.settimeout(5)
            conn.recv(256)  # the client's version line

    with fake_sshd(banner_then_close) as port:
        yield port


def test_a_connection_closed_after_the_banner_is_not_blamed_on_maxstartups(
        banner_then_close_sshd: int, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """sshd answered with its banner, then closed: one try, and the error says where it
    broke (the key exchange) and where to look, not the MaxStartups hint."""
    monkeypatch.setattr(remote, "CONNECT_PAUSE", 0.0)
    caplog.set_level(logging.INFO, logger="rsa_scheduler.remote")
    host = SshHost("rsa9", "127.0.0.1", port=banner_then_close_sshd,
                   host_key_policy="auto-add", connect_timeout=5)
    with pytest.raises(HostError) as err:
        host.connect()
    text = str(err.value)
    assert "closed the connection during the key exchange, after its banner" in text, text
    assert "SSH-2.0-OpenSSH_9.2p1" in text and "see sshd's log on rsa9" in text, text
    assert "MaxStartups" not in text, text
    assert not [r for r in caplog.records if "before its banner" in r.getMessage()]


def test_a_refused_session_is_asked_again_on_the_same_connection(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Seen on the cluster lab under load: sshd refused one session channel ("open
    failed: Connect failed", over its MaxSessions while sessions just closed were still
    being torn down). The refusal was taken for a lost connection and the connection
    closed, which cut the commands of five other threads running over it ("SSH
    connection lost during hostname"). Now the channel is asked again on the same
    connection; only a connection that went away is made again."""
    import paramiko

    class Transport:
        def __init__(self) -> None:
            self.refusals = 2
            self.opened = 0

        def open_session(self, timeout: float) -> str:
            if self.refusals:
                self.refusals -= 1
                raise paramiko.ChannelException(2, "Connect failed")
            self.opened += 1
            return "channel"

    transport = Transport()
    fresh_asked: list[bool] = []

    def get(self: SshHost, fresh: bool = False) -> Transport:
        fresh_asked.append(fresh)
        return transport

    monkeypatch.setattr(SshHost, "_transport", get)
    monkeypatch.setattr(remote, "CONNECT_PAUSE", 0.0)
    host = SshHost("rsa2", "127.0.0.1")
    got: object = host._open_channel()
    assert got == "channel"
    assert fresh_asked == [False, False, False]  # never a new connection
    transport.refusals = remote.OPEN_TRIES
    with pytest.raises(HostError, match=r"rsa2: sshd refused an SSH session 6 times"):
        host._open_channel()
