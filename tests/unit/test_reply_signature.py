"""rsad's signature over its answers, with the real MUNGE: a munged of this test's own
(its own key and socket, started as the ``munge`` account, stopped by its PID), rsad's
real transport (daemon/api.py ``ApiServers``: Endpoint, httpd) on a TCP port, and the
real ``rsa`` CLI and API client running as another uid (``nobody``) in a process of its
own. What munged itself decides (src/munged/dec.c ``dec_validate_auth``): a credential
restricted to a uid is decoded by that uid only, root and SlurmUser refused.

The attack: rsad is down, another user holds its TCP port and answers ``rsa job`` with
a forged answer (unsigned, or a genuine signature of rsad's lifted from another answer).
Before, the rsa CLI (``ApiClient(trust_uid=None)``) believed any of them. Needs root (to
run munged and to be another uid): skipped otherwise.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from http import HTTPStatus
from pathlib import Path
from typing import Any

import pytest

from rsa_scheduler import munge
from rsa_scheduler.client import AUTH_HEADER, REPLY_HEADER, ApiClient, _exchange
from rsa_scheduler.daemon.api import ApiError, Caller, Routes
from rsa_scheduler.daemon.apiserver import ApiServers
from rsa_scheduler.daemon.httpd import Limits

MUNGED = "/usr/sbin/munged"
USER = "nobody"

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not os.access(MUNGED, os.X_OK) or shutil.which("unmunge") is None
    or "munge" not in {p.pw_name for p in pwd.getpwall()},
    reason="needs root, munged and unmunge (apt-get install munge)")


@pytest.fixture(scope="module")
def shared() -> Iterator[Path]:
    """A directory munged and ``nobody`` can reach (pytest's own is root's only)."""
    path = Path(tempfile.mkdtemp(prefix="rsa-reply-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def munged(shared: Path) -> Iterator[str]:
    """A munged of our own on a private socket; ``munge.SOCKET`` points there."""
    home = shared / "munged"
    home.mkdir(0o755)
    who = pwd.getpwnam("munge")
    os.chown(home, who.pw_uid, who.pw_gid)
    key = home / "munge.key"
    sock = home / "munge.socket"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    os.chown(key, who.pw_uid, who.pw_gid)
    proc = subprocess.Popen(
        [MUNGED, "-F", f"--socket={sock}", f"--key-file={key}",
         f"--log-file={home}/munged.log", f"--pid-file={home}/munged.pid",
         f"--seed-file={home}/munged.seed"],
        user=who.pw_uid, group=who.pw_gid, extra_groups=[], cwd=home,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        for _ in range(100):
            if sock.exists():
                break
            if proc.poll() is not None:
                said = proc.stderr.read() if proc.stderr else b""
                raise AssertionError(f"munged exited: {said.decode()}")
            threading.Event().wait(0.05)
        saved = munge.SOCKET
        munge.SOCKET = str(sock)
        try:
            yield str(sock)
        finally:
            munge.SOCKET = saved
    finally:
        proc.terminate()
        proc.wait(10)


def unmunge(socket_path: str, user: str, credential: str) -> str:
    """What ``unmunge`` says when ``user`` decodes ``credential`` (metadata only)."""
    out = subprocess.run(["unmunge", f"--socket={socket_path}", "-o", "/dev/null"],
                         input=credential, capture_output=True, text=True, timeout=30,
                         user=user, cwd="/", check=False)
    return out.stdout + out.stderr


def test_only_the_uid_it_is_restricted_to_decodes_rsads_credential(munged: str) -> None:
    """rsad signs a user's answer restricted to that user's uid: root cannot decode it
    (slurmd, root, would refuse it as an RPC's credential), nor SlurmUser (slurmctld), nor
    munged's own account; the user can, once (munged's replay cache)."""
    cred = munge.encode(b"an answer", restrict_uid=pwd.getpwnam(USER).pw_uid)
    with pytest.raises(munge.Unauthorized, match="Unauthorized credential"):
        munge.decode(cred)  # this process is root
    for other in ("munge", "slurm"):
        if other in {p.pw_name for p in pwd.getpwall()}:
            assert "Unauthorized credential" in unmunge(munged, other, cred)
    said = unmunge(munged, USER, cred)  # a refused decode did not use it up
    assert "STATUS:          Success" in said and "UID:             root (0)" in said
    assert f"UID_RESTRICTION: {USER} " in said
    assert "Replayed credential" in unmunge(munged, USER, cred)
    assert munge.root_decodes_restricted() is False


def test_a_sealed_mount_command_is_read_by_root_alone_and_once(munged: str) -> None:
    """What rsad sends a node of hook protocol 3 for a mount (daemon/api.py ``sealed``):
    munged encrypts the argv (the RAMDISK's secret is nowhere in the credential's text),
    refuses it to every uid but root (a user who got rsad's answer to a replayed Prolog
    request holds it and cannot read it), and the node reads it once (node/mounts.py
    ``client_argv_of``). One a user sealed for root is refused as not rsad's."""
    import base64

    from rsa_scheduler.daemon.api import sealed
    from rsa_scheduler.node.mounts import MountError, client_argv_of
    from rsa_scheduler.node.plan import SEALED_ARGV

    argv = ["mfsmount", "@MOUNTPOINT@", "-o", "mfspassword=5ecre7c0ffee5ecre7"]
    ins = sealed({"seq": 1, "do": "mount", "client_argv": argv}, SEALED_ARGV)
    cred = ins["sealed_argv"]
    assert "client_argv" not in ins and "5ecre7" not in cred
    inner = cred.split(":")[1]
    assert b"5ecre7" not in base64.b64decode(inner + "=" * (-len(inner) % 4))
    said = unmunge(munged, USER, cred)
    assert "Unauthorized credential" in said and "5ecre7" not in said
    assert client_argv_of(ins) == argv  # root, once
    with pytest.raises(MountError, match="Replayed credential"):
        client_argv_of(ins)
    forged = subprocess.run(
        ["munge", f"--socket={munged}", "--restrict-uid=0", "-s",
         json.dumps(["mount", "--bind", "/", "/mnt"])], capture_output=True, text=True,
        timeout=30, user=USER, cwd="/", check=True).stdout.strip()
    with pytest.raises(MountError, match=r"not rsad's \(sealed by uid "):
        client_argv_of({"sealed_argv": forged})


class JobRoutes(Routes):
    """rsad's answers about job 7: staging out, nothing verified yet."""

    def __init__(self) -> None:
        pass

    def dispatch(self, caller: Caller, method: str, path: str, body: Any) -> Any:
        if path != "/v1/jobs/7":
            raise ApiError(HTTPStatus.NOT_FOUND, "job 8 is not tracked by the RSA")
        return {"job_id": "7", "user": caller.user, "job_state": "finished",
                "rsa_state": "staging-out", "message": "staging out", "nodes": ["rsa1"],
                "events": [], "spec": {"data_out": "/pfs/out"}}


@pytest.fixture
def rsad(munged: str, tmp_path: Path) -> Iterator[ApiServers]:
    servers = ApiServers(JobRoutes(), tmp_path / "rsad.sock", ("127.0.0.1", 0),
                         limits=Limits(read_timeout=5.0))
    servers.start()
    yield servers
    servers.stop()


def tcp_of(servers: ApiServers) -> str:
    return f"127.0.0.1:{servers.server.listeners[1].getsockname()[1]}"


LAUNCHER = """\
import sys
from rsa_scheduler import munge
munge.SOCKET = sys.argv.pop(1)  # this test's munged (module doc)
from rsa_scheduler.cli import main
sys.argv[0] = "rsa"
main()
"""


def rsa_as_user(munged: str, shared: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real ``rsa`` CLI as ``nobody``, on this test's munged."""
    launcher = shared / "rsa.py"
    launcher.write_text(LAUNCHER)
    launcher.chmod(0o644)
    return subprocess.run([sys.executable, str(launcher), munged, *args], user=USER,
                          cwd="/", capture_output=True, text=True, timeout=60, check=False,
                          env={"PATH": "/usr/bin:/bin", "RSA_CLIENT_CONFIG": "/nonexistent"})


class Squatter:
    """What another user runs on rsad's TCP port while rsad is down: every request gets
    ``status``, ``body`` and ``headers`` (a forged answer, or one of rsad's lifted)."""

    def __init__(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self.reply = (f"HTTP/1.1 {status} OK\r\nContent-Type: application/json\r\n{head}"
                      f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() \
            + body
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                buf = b""
                while b"\r\n\r\n" not in buf and (chunk := conn.recv(65536)):
                    buf += chunk
                conn.sendall(self.reply)

    def close(self) -> None:
        self.listener.close()


def rsads_answer(address: str) -> tuple[int, dict[str, str], bytes]:
    """rsad's real answer to root's own ``GET /v1/jobs/7`` (signed for root)."""
    cred = munge.encode(munge.request_digest("GET", "/v1/jobs/7", b""))
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        return _exchange(sock, f"GET /v1/jobs/7 HTTP/1.1\r\nHost: x\r\n{AUTH_HEADER}: {cred}"
                               "\r\nContent-Length: 0\r\n\r\n".encode())


FORGED = json.dumps({"job_id": "7", "user": USER, "job_state": "finished",
                     "rsa_state": "output-verified", "message": "output verified",
                     "nodes": [], "events": [], "spec": {"data_out": "/pfs/out"}}).encode()


def test_a_users_rsa_believes_rsad_and_refuses_whoever_holds_its_port(
        munged: str, rsad: ApiServers, shared: Path) -> None:
    real = tcp_of(rsad)
    ok = rsa_as_user(munged, shared, "job", "7", "--json", "--api", real)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["rsa_state"] == "staging-out"
    status, headers, body = rsads_answer(real)
    assert status == 200 and REPLY_HEADER.lower() in headers
    lifted = {REPLY_HEADER: headers[REPLY_HEADER.lower()]}
    for squatter, why in [
            # the forged answer the old CLI believed: "output verified" (delete your copy)
            (Squatter(200, FORGED, {}), "is not signed with MUNGE by rsad; refusing it: "
                                        "whatever answered is not rsad"),
            # rsad's genuine answer to root, signature and all: not decodable by the user
            (Squatter(200, body, lifted), "is signed for another uid, not for yours"),
            # a forged 404 would tell rsa wait the job has no RSA work
            (Squatter(404, b'{"error": "job 7 is not tracked by the RSA"}', {}),
             "is not signed with MUNGE by rsad")]:
        try:
            got = rsa_as_user(munged, shared, "job", "7", "--api", squatter.address)
        finally:
            squatter.close()
        assert got.returncode == 1 and got.stdout == "", got
        line, = got.stderr.splitlines()
        assert line.startswith(f"rsa: error: the answer from {squatter.address} "), line
        assert why in line, line
        assert "output verified" not in line and "not tracked" not in line


def test_a_users_own_earlier_answer_replayed_is_refused(munged: str, rsad: ApiServers,
                                                        shared: Path) -> None:
    """The user's own signed answer, kept and served again for a later request: it is
    bound to the request it answered, and munged decodes it once."""
    grab = shared / "grab.py"
    grab.write_text(
        "import json, socket, sys\n"
        "from rsa_scheduler import munge\n"
        "from rsa_scheduler.client import AUTH_HEADER, _exchange\n"
        "munge.SOCKET = sys.argv[1]\n"
        "host, _, port = sys.argv[2].rpartition(':')\n"
        "cred = munge.encode(munge.request_digest('GET', '/v1/jobs/7', b''))\n"
        "with socket.create_connection((host, int(port)), timeout=10) as s:\n"
        "    st, h, b = _exchange(s, f'GET /v1/jobs/7 HTTP/1.1\\r\\nHost: x\\r\\n"
        "{AUTH_HEADER}: {cred}\\r\\nContent-Length: 0\\r\\n\\r\\n'.encode())\n"
        "print(json.dumps([st, h, b.decode()]))\n")
    grab.chmod(0o644)
    out = subprocess.run([sys.executable, str(grab), munged, tcp_of(rsad)], user=USER,
                         cwd="/", capture_output=True, text=True, timeout=60, check=True)
    status, headers, body = json.loads(out.stdout)
    squatter = Squatter(status, body.encode(),
                        {REPLY_HEADER: headers[REPLY_HEADER.lower()]})
    try:
        got = rsa_as_user(munged, shared, "job", "7", "--api", squatter.address)
    finally:
        squatter.close()
    assert got.returncode == 1, got
    assert "does not match its MUNGE signature; refusing it" in got.stderr, got.stderr


def test_an_operators_and_a_nodes_client_still_believe_rsad(munged: str,
                                                             rsad: ApiServers) -> None:
    """Root (the node hooks, trust_uid 0) over the same transport: signed for root."""
    assert ApiClient(tcp_of(rsad), timeout=10)\
        .get("/v1/jobs/7")["rsa_state"] == "staging-out"
