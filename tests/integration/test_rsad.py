"""rsad against the lab's live Slurm: API over MUNGE (unix socket and TCP), user
isolation, hook events from slurmctld, and systemd notification."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest
import yaml

from rsa_scheduler.config import load_config
from rsa_scheduler.core.directives import DirectiveSpec
from tests.integration.conftest import as_user
from tests.integration.slurmkit import lab_nodes, make_jobs, root, wait_for

SPEC = DirectiveSpec(data_in="/pfs/home/rsauser/in", data_out="/pfs/home/rsauser/out")


def tcp(lab: Mapping[str, str]) -> str:
    """rsad's TCP API, as the lab says it (the host lab: 127.0.0.1:7820; the cluster lab:
    rsad's host on the management network)."""
    return lab["RSA_LAB_API_TCP"]


def rsa(lab: Mapping[str, str], user: str, *args: str) -> subprocess.CompletedProcess[str]:
    venv = lab["RSA_LAB_VENV"]
    return as_user(lab, user, [f"{venv}/bin/rsa", *args], timeout=30)


def track(lab: Mapping[str, str], job: str) -> None:
    """Give a job RSA directives the way job_submit.lua does (admin_comment, root only)."""
    root(lab, "scontrol", "update", f"jobid={job}", f"admincomment={SPEC.to_admin_comment()}")


def tracked_by(lab: Mapping[str, str], user: str, job: str, api: str | None = None) -> bool:
    out = rsa(lab, user, "jobs", "--json", "--api", api or tcp(lab))
    assert out.returncode == 0, out.stderr
    return job in {j["job_id"] for j in json.loads(out.stdout)["jobs"]}


def test_users_see_and_act_only_on_their_own_jobs(lab: Mapping[str, str]) -> None:
    user, other = lab["RSA_LAB_USER"], lab["RSA_LAB_OTHER_USER"]
    with make_jobs(lab) as jobs:
        job = jobs.submit("-H", "-t", "5", "--wrap", "sleep 60")  # held: stays pending
        track(lab, job)
        wait_for("rsad tracks the job", lambda: tracked_by(lab, "root", job, "/run/rsa/rsad.sock"),
                 timeout=30)
        assert tracked_by(lab, user, job)
        assert not tracked_by(lab, other, job)
        seen = rsa(lab, other, "job", job, "--api", tcp(lab))
        assert seen.returncode == 1 and f"job {job} is not tracked by the RSA" in seen.stderr
        refused = as_user(lab, other, [lab["RSA_LAB_PYTHON"], "-c",
                                       "from rsa_scheduler.client import ApiClient;"
                                       f"ApiClient('{tcp(lab)}').post('/v1/jobs/{job}/command',"
                                       "{'command': 'cancel-staging'})"])
        assert refused.returncode != 0 and "not tracked" in refused.stderr
        mine = rsa(lab, user, "job", job, "--json", "--api", tcp(lab))
        data = json.loads(mine.stdout)
        assert data["user"] == user and data["rsa_state"] == "none"
        assert any(e["name"] == "job.tracked" for e in data["events"])


def test_forged_or_missing_credentials_are_refused(lab: Mapping[str, str]) -> None:
    import http.client

    host, _, port = tcp(lab).rpartition(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.request("GET", "/v1/jobs")
    resp = conn.getresponse()
    assert resp.status == 401 and b"missing MUNGE credential" in resp.read()
    # a valid credential for another request cannot be reused for this one
    from rsa_scheduler import munge

    cred = munge.encode(munge.request_digest("GET", "/v1/whoami", b""))
    conn.request("GET", "/v1/jobs", headers={"X-RSA-Munge": cred})
    resp = conn.getresponse()
    assert resp.status == 401 and b"does not match" in resp.read()


def test_slurmctld_hooks_reach_rsad(lab: Mapping[str, str]) -> None:
    with make_jobs(lab) as jobs:
        job = jobs.submit("-H", "-t", "1", "--wrap", "sleep 2")
        track(lab, job)
        wait_for("tracked", lambda: tracked_by(lab, "root", job, "/run/rsa/rsad.sock"),
                 timeout=30)
        root(lab, "scontrol", "release", job)

        def hooks() -> set[str]:
            out = rsa(lab, "root", "job", job, "--json")
            return {e.get("hook") for e in json.loads(out.stdout)["events"]
                    if e["name"] == "job.hook"}

        got = wait_for("both hook events", lambda: (h := hooks()) >= {
            "prolog_slurmctld", "epilog_slurmctld"} and h, timeout=60)
        assert got


def test_rsad_notifies_systemd_ready_and_watchdog(lab: Mapping[str, str], tmp_path: Path) -> None:
    """A second rsad (own state and socket) under a fake systemd notify socket."""
    cfg = yaml.safe_load(Path(lab["RSA_LAB_RSA_CONFIG"]).read_text())
    daemon = cfg.setdefault("daemon", {})
    daemon["state_dir"] = str(tmp_path / "state")
    daemon.setdefault("api", {}).update(socket=str(tmp_path / "rsad.sock"), listen="")
    cfg.setdefault("metrics", {})["listen"] = ""  # the lab rsad's
    # an empty pool would be refused; one unallocatable node keeps this rsad inert (its
    # address answers nothing; its data address the lab's first node's)
    group = dict(cfg["pool"]["nodes"][0])
    first = lab_nodes(lab, "RSA_LAB_RSA_NODES")[0]
    group.update(names="rsa99", address="127.0.1.99")
    if "data_address" in group:
        group["data_address"] = str(group["data_address"]).replace("{name}", first)
    cfg["pool"]["nodes"] = [group]
    (tmp_path / "rsa.yaml").write_text(yaml.safe_dump(cfg))
    (tmp_path / "rsa.yaml").chmod(0o600)
    notify = tmp_path / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as srv:
        srv.bind(str(notify))
        srv.settimeout(20)
        env = {**os.environ, "SLURM_CONF": lab["RSA_LAB_SLURM_CONF"],
               "NOTIFY_SOCKET": str(notify), "WATCHDOG_USEC": "10000000"}
        proc = subprocess.Popen([f"{lab['RSA_LAB_VENV']}/bin/rsad", "--config",
                                 str(tmp_path / "rsa.yaml")], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        env["WATCHDOG_PID"] = str(proc.pid)
        try:
            messages: list[str] = []
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and not (
                    any(m.startswith("READY=1") for m in messages)
                    and "WATCHDOG=1" in messages):
                messages.append(srv.recv(4096).decode())
            ready = [m for m in messages if m.startswith("READY=1")]
            assert ready and "WATCHDOG=1" in messages, messages
            # the status comes with READY=1 (systemctl start returns on it), not only
            # once the first cycle is over
            assert ready[0].splitlines() == ["READY=1", "STATUS=0 jobs tracked, "
                                             "0 actions running"], messages
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err[-2000:]
        assert "rsad stopped" in err
        assert not (tmp_path / "rsad.sock").exists()


def test_prometheus_endpoint_serves_pool_and_job_metrics(lab: Mapping[str, str]) -> None:
    import urllib.request

    listen = load_config(lab["RSA_LAB_RSA_CONFIG"]).metrics.listen
    assert listen, "the lab's rsad serves no metrics (metrics.listen)"
    with urllib.request.urlopen(f"http://{listen}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    for name in ("rsa_nodes{", "rsa_slurm_up 1.0", "rsa_cycle_seconds_count",
                 "rsa_actions_running",
                 # the lab's rsad runs its engines in staging workers (the default)
                 'rsa_staging_workers{state="busy"}', 'rsa_staging_workers{state="idle"}',
                 "rsa_staging_workers_started_total", "rsa_staging_workers_lost_total"):
        assert name in text, name


class _Impostor:
    """Something listening on a unix socket that answers the node hooks like rsad would,
    with a reply credential made by ``sign`` (or none)."""

    def __init__(self, path: Path, sign: Callable[[str, bytes], str | None]) -> None:
        import http.server
        import socketserver
        import threading

        sign_reply = sign

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt: str, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                out = json.dumps({"do": "mount", "target": "/etc"}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(out)))
                signature = sign_reply(self.headers.get("X-RSA-Munge") or "", out)
                if signature:
                    self.send_header("X-RSA-Munge-Reply", signature)
                self.end_headers()
                self.wfile.write(out)

        class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
            daemon_threads = True

            def get_request(self) -> tuple[socket.socket, object]:
                conn, _ = super().get_request()
                return conn, ("local", 0)

        self.server = Server(str(path), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _encode_as(lab: Mapping[str, str], user: str, payload: bytes) -> str:
    code = ("import sys; from rsa_scheduler import munge; "
            "print(munge.encode(bytes.fromhex(sys.argv[1])))")
    done = as_user(lab, user, [lab["RSA_LAB_PYTHON"], "-c", code, payload.hex()])
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_node_hooks_accept_only_answers_signed_by_rsad(lab: Mapping[str, str],
                                                       tmp_path: Path) -> None:
    """The node hooks mount as root on what rsad answers: an answer must carry rsad's
    (root's) MUNGE credential over exactly this reply to exactly this request. So must
    the rsa CLI's (the same client, trust_uid 0 by default: it took any answer before)."""
    from rsa_scheduler import munge
    from rsa_scheduler.client import ApiClient, ApiUnavailable

    # the real rsad, over TCP as the compute nodes reach it
    assert ApiClient(tcp(lab), trust_uid=0).get("/v1/whoami")["uid"] == 0
    cases: dict[str, Callable[[str, bytes], str | None]] = {
        "is not signed with MUNGE": lambda cred, out: None,
        "is signed by uid": lambda cred, out: _encode_as(
            lab, lab["RSA_LAB_USER"], munge.reply_digest(cred, 200, out)),
        "does not match its MUNGE signature": lambda cred, out: munge.encode(
            munge.reply_digest("an earlier request", 200, out)),
    }
    for i, (message, sign) in enumerate(cases.items()):
        sock = tmp_path / f"impostor-{i}.sock"
        impostor = _Impostor(sock, sign)
        try:
            with pytest.raises(ApiUnavailable, match=message):
                ApiClient(str(sock), trust_uid=0).post("/v1/hooks/prolog", {"job_id": "1"})
            with pytest.raises(ApiUnavailable, match=message):  # the rsa CLI's client
                ApiClient(str(sock)).post("/v1/hooks/prolog", {})
        finally:
            impostor.close()
