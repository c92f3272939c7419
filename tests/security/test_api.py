"""Holding rsad's API (issue 12, point 4), tried for real against the lab's rsad as the
second lab user (rsaother) and as an unauthenticated TCP peer: bad Content-Length values,
a slow-loris, hundreds of idle connections, another user's job ids. Meanwhile rsad must
stay live: root's `rsa status` answers at once, and (a second rsad under a fake systemd)
the watchdog keeps being fed. On the cluster lab rsaother attacks the TCP API from the
login node, the socket on rsad's host (tests/security/where.py)."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from rsa_scheduler.client import ApiClient
from tests.integration.conftest import LAB_ENV, as_user, read_lab_env
from tests.integration.slurmkit import make_jobs, root, wait_for
from tests.security import attack
from tests.security.where import (
    SOCK,
    api_tcp,
    first_line,
    in_background,
    node_for,
    posts,
    run_as,
    script_argv,
)

#: rsad's TCP API (the cluster lab's on its host's address; the params need it at import)
TCP = api_tcp(read_lab_env() if LAB_ENV.exists() else {})
ATTACK = Path(attack.__file__).resolve()
FAST = 2.0  # seconds rsad may take to answer root's status while its API is under attack


def rsa(lab: Mapping[str, str], user: str, *args: str, api: str = SOCK,
        node: str | None = None) -> subprocess.CompletedProcess[str]:
    """``user``'s rsa against ``api``, on ``node`` (None: where ``api`` is reached)."""
    argv = [f"{lab['RSA_LAB_VENV']}/bin/rsa", *args, "--api", api]
    if user == "root" and node is None:
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    return run_as(lab, user, argv, node=node or node_for(api), timeout=60)


def root_status_seconds(lab: Mapping[str, str], api: str = SOCK) -> float:
    """How long rsad takes to answer root's status (a signed answer, checked): asked from
    this process, so the time is rsad's and the connection's, not a Python interpreter's
    start, which on a loaded 2-core host (make test's lanes) alone can take 2 s. Root's
    `rsa status` itself is run first, untimed: the CLI still gets its answer."""
    out = rsa(lab, "root", "status", "--json", api=api)
    assert out.returncode == 0, out.stderr
    assert "nodes" in json.loads(out.stdout)
    client = ApiClient(api, timeout=30)
    start = time.monotonic()
    got = client.get("/v1/status")
    took = time.monotonic() - start
    assert "nodes" in got
    return took


def attack_as(lab: Mapping[str, str], user: str, *args: str,
              timeout: float = 90) -> dict[str, Any]:
    """attack.py ``args`` (KIND ADDRESS ...) as ``user``, from where it reaches ADDRESS."""
    node = node_for(args[1])
    argv, text = script_argv(lab, ATTACK, node, *args)
    out = run_as(lab, user, argv, node=node, input=text, timeout=timeout)
    assert out.returncode == 0, out.stderr
    result: dict[str, Any] = json.loads(out.stdout.splitlines()[-1])
    return result


@contextmanager
def holding(lab: Mapping[str, str], user: str, address: str, count: int,
            seconds: float) -> Iterator[dict[str, Any]]:
    """``count`` idle connections held by ``user``; yields what rsad did with them."""
    node = node_for(address)
    with in_background(lab, user, ATTACK, node, "hold", address, str(count),
                       str(seconds)) as running:
        yield json.loads(first_line(node, running))


def second_rsad_yaml(lab: Mapping[str, str], state: Path, sock: Path, tcp: str) -> str:
    """The lab's rsa.yaml for a second rsad: its own state, socket and TCP address, no
    metrics, one inert RSA node (rsa99 at 127.0.1.99, which nothing answers)."""
    import yaml

    cfg = yaml.safe_load(Path(lab["RSA_LAB_RSA_CONFIG"]).read_text())
    daemon = cfg.setdefault("daemon", {})
    daemon["state_dir"] = str(state)
    daemon.setdefault("api", {}).update(socket=str(sock), listen=tcp)
    cfg.setdefault("metrics", {})["listen"] = ""
    node = cfg["pool"]["nodes"][0]
    node.update(names="rsa99", address="127.0.1.99")
    if "{name}" in str(node.get("data_address", "")):
        node["data_address"] = "127.0.1.99"
    cfg["pool"]["nodes"] = [node]
    return str(yaml.safe_dump(cfg, sort_keys=False))


@pytest.mark.parametrize("address", [SOCK, TCP])
def test_bad_content_length_is_answered_at_once(lab: Mapping[str, str], address: str) -> None:
    other = lab["RSA_LAB_OTHER_USER"]
    cases = {"-1": (400, "invalid Content-Length"), "abc": (400, "invalid Content-Length"),
             "1e3": (400, "invalid Content-Length"),
             "104857600": (413, "over rsad's limit"),
             "9" * 40: (413, "over rsad's limit")}
    for value, (status, message) in cases.items():
        got = attack_as(lab, other, "length", address, value)
        assert got["status"] == status and message in got["body"], (value, got)
        assert got["seconds"] < FAST, (value, got)
    assert root_status_seconds(lab) < FAST


@pytest.mark.parametrize("address", [SOCK, TCP])
def test_a_slow_loris_is_cut_off_and_rsad_stays_live(lab: Mapping[str, str],
                                                     address: str) -> None:
    other = lab["RSA_LAB_OTHER_USER"]
    with ThreadPoolExecutor(4) as pool:
        lorises = [pool.submit(attack_as, lab, other, "slowloris", address, "1")
                   for _ in range(3)]
        time.sleep(2)
        while not all(f.done() for f in lorises):
            assert root_status_seconds(lab) < FAST
            assert root_status_seconds(lab, TCP) < FAST
            time.sleep(1)
        for f in lorises:
            got = f.result()
            # daemon.api.read_timeout (10s): the whole request, however it trickles in
            assert got["status"] == 408 and "not complete within 10s" in got["body"], got
            assert 9 < got["seconds"] < 14, got


def test_one_user_cannot_hold_hundreds_of_connections(lab: Mapping[str, str]) -> None:
    user, other = lab["RSA_LAB_USER"], lab["RSA_LAB_OTHER_USER"]
    with holding(lab, other, SOCK, 300, 20) as held:
        # daemon.api.per_user (8): the rest is told why at once
        assert held["kept"] <= 8, held
        assert held["refused"].get("429", 0) >= 290, held
        assert root_status_seconds(lab) < FAST
        mine = rsa(lab, user, "jobs", "--json")
        assert mine.returncode == 0, mine.stderr
        again = rsa(lab, other, "status")
        assert again.returncode == 1
        assert "has 8 connections to rsad open (daemon.api.per_user)" in again.stderr


def test_unauthenticated_tcp_connections_cannot_lock_out_hooks(lab: Mapping[str, str]) -> None:
    """Before its credential is read a TCP peer has no uid: the table is capped
    (daemon.api.max_connections 256) and the oldest idle connection makes room."""
    other = lab["RSA_LAB_OTHER_USER"]
    with holding(lab, other, TCP, 400, 25) as held:
        assert held["kept"] <= 256, held
        for _ in range(3):
            assert root_status_seconds(lab, TCP) < FAST
            assert root_status_seconds(lab) < FAST
        out = rsa(lab, lab["RSA_LAB_USER"], "jobs", "--json", api=TCP)
        assert out.returncode == 0, out.stderr


#: one authenticated request with a body of the caller's choosing, as the user runs it
SIGNED = """
import json, socket, sys
from rsa_scheduler import munge
from rsa_scheduler.client import _exchange, host_and_port
address, method, path, body = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].encode()
cred = munge.encode(munge.request_digest(method, path, body))
head = (f"{method} {path} HTTP/1.1\\r\\nHost: x\\r\\nX-RSA-Munge: {cred}\\r\\n"
        f"Content-Length: {len(body)}\\r\\nConnection: close\\r\\n\\r\\n")
if address.startswith("/"):
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(address)
else:
    sock = socket.create_connection(host_and_port(address))
status, _, data = _exchange(sock, head.encode() + body)
print(json.dumps({"status": status, "error": json.loads(data).get("error")}))
"""


@pytest.mark.parametrize("address", [SOCK, TCP])
def test_a_malformed_body_is_one_line_and_rsad_serves_on(lab: Mapping[str, str],
                                                         address: str) -> None:
    """rsaother's authenticated requests whose body is JSON but not an object, or nested
    past the parser's depth: a 400 in one line each (before: 500 `internal error: 'list'
    object has no attribute 'get'` and a traceback in rsad's log per request)."""
    other = lab["RSA_LAB_OTHER_USER"]
    cases = [("POST", "/v1/jobs/1/command", "[1]", "a JSON list, not an object"),
             ("POST", "/v1/admin/drain", "[" * 50_000 + "]" * 50_000, "nested too deeply"),
             ("GET", "/v1/events?since=99999999999999999999", "", "since= takes an event")]
    for method, path, body, why in cases:
        out = run_as(lab, other, [lab["RSA_LAB_PYTHON"], "-c", SIGNED, address, method,
                                  path, body], node=node_for(address), timeout=60)
        assert out.returncode == 0, out.stderr[-2000:]
        got = json.loads(out.stdout.splitlines()[-1])
        assert got["status"] == 400 and why in got["error"], (path, got)
    assert root_status_seconds(lab) < FAST


#: rsaother's PREPROCESS: its stderr's last lines become the job's message; they set the
#: terminal's title, write its clipboard (OSC 52), erase a line, and forge a line
EVIL_PRE = ("#!/bin/bash\nprintf 'tool: \\033]0;owned\\007\\033]52;c;b3duZWQ=\\007"
            "\\033[2K\\nforged: released (discard)\\n' >&2\nexit 1\n")


def test_a_users_escape_sequences_never_reach_an_operators_terminal(
        lab: Mapping[str, str]) -> None:
    """rsaother's PREPROCESS writes terminal escape sequences and a second line to its
    stderr and fails: root's `rsa jobs`, `rsa job N` and `rsa events --job N` show the
    text as `\\x1b...`, never the bytes, and no line of it stands alone (before: the
    sequences reached root's terminal as they were)."""
    from tests.integration.test_rsad_staging import fill, rsa_job

    other = lab["RSA_LAB_OTHER_USER"]
    base = Path(lab["RSA_LAB_OTHER_PFS"]) / f"api-esc-{os.getpid()}"
    made = as_user(lab, other, ["mkdir", "-p", str(base)])
    assert made.returncode == 0, made.stderr
    pre = base / "pre.sh"
    pre.write_text(EVIL_PRE)  # root writes it, 0644: rsaother's PREPROCESS reads it
    pre.chmod(0o644)

    def failed(job: str) -> bool:
        data = rsa_job(lab, job) or {}
        return "PREPROCESS exited 1" in json.dumps(data)

    try:
        with make_jobs(lab) as jobs:
            fill(jobs)
            job = jobs.submit(user=other, script=f"#!/bin/bash\n#SBATCH -t 5\n"
                                                 f"#RSA_PREPROCESS=/bin/bash {pre}\ntrue\n")
            wait_for(f"job {job}'s PREPROCESS failed", lambda: failed(job), timeout=180)
            assert "\\u001b]0;owned" in json.dumps(rsa_job(lab, job))  # the bytes, in rsad
            for args in (("jobs",), ("job", job), ("events", "--job", job)):
                out = rsa(lab, "root", *args)
                assert out.returncode == 0, (args, out.stderr)
                if args[0] != "jobs":  # their timeline quotes the PREPROCESS itself
                    assert "\\x1b]0;owned\\x07" in out.stdout, (args, out.stdout[-2000:])
                assert not any(c in out.stdout for c in "\x1b\x07\x9b"), args
                assert not any(line.startswith("forged:")
                               for line in out.stdout.splitlines()), args
            for filler in jobs.fillers:
                root(lab, "scancel", filler)
    finally:
        root(lab, "rm", "-rf", str(base))


def test_the_socket_is_for_its_group_only(lab: Mapping[str, str]) -> None:
    """0660 root:rsa (daemon.api.socket_group); the lab's users and slurm are members."""
    st = os.stat(SOCK)
    import grp

    assert (st.st_mode & 0o777, st.st_uid, grp.getgrgid(st.st_gid).gr_name) == (0o660, 0, "rsa")
    other = lab["RSA_LAB_OTHER_USER"]
    # rsaother without its supplementary groups: not a member of rsa
    out = subprocess.run(["setpriv", f"--reuid={other}", f"--regid={other}", "--clear-groups",
                          f"{lab['RSA_LAB_VENV']}/bin/rsa", "status", "--api", SOCK],
                         capture_output=True, text=True, timeout=60, check=False, cwd="/")
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        f"rsa: error: permission denied on {SOCK}: rsad's socket is for members of group "
        "rsa; ask your administrator to add you (daemon.api.socket_group), or use the TCP "
        "API with --api HOST:PORT (RSA_API)"], out.stderr


def test_another_users_job_ids_are_nowhere(lab: Mapping[str, str], tmp_path: Path) -> None:
    from tests.integration.test_rsad_staging import fill, wait_state

    user, other = lab["RSA_LAB_USER"], lab["RSA_LAB_OTHER_USER"]
    base = Path(lab["RSA_LAB_PFS"]) / f"api-sec-{os.getpid()}"
    made = as_user(lab, user, ["bash", "-c", f"mkdir -p {base}/in {base}/out && "
                                             f"echo data > {base}/in/f"])
    assert made.returncode == 0, made.stderr
    with make_jobs(lab) as jobs:
        fill(jobs)
        job = jobs.submit(script=f"#!/bin/bash\n#SBATCH -t 5\n#RSA_DATA_IN={base}/in\n"
                                 f"#RSA_DATA_OUT={base}/out\nsleep 1\n")
        wait_state(lab, job, "locked-in", timeout=120)
        held = json.loads(rsa(lab, "root", "nodes", "--json").stdout)["nodes"]
        assert job in {n["job"] for n in held}
        assert job in {n["job"] for n in json.loads(rsa(lab, user, "nodes", "--json").stdout)[
            "nodes"]}
        # the cluster's: also from a compute node where another job (a filler) runs
        busy = root(lab, "squeue", "-h", "-j", jobs.fillers[0], "-o", "%N").strip()
        for api, where in posts(lab, busy):
            for args in (("status", "--json"), ("nodes", "--json"), ("jobs", "--json"),
                         ("events", "--json", "--since", "0")):
                out = rsa(lab, other, *args, api=api, node=where)
                assert out.returncode == 0, (args, where, out.stderr)
                assert f'"{job}"' not in out.stdout, (args, where, out.stdout[:2000])
            nodes = json.loads(rsa(lab, other, "nodes", "--json", api=api,
                                   node=where).stdout)["nodes"]
            assert "(hidden)" in {n["job"] for n in nodes}
            seen = rsa(lab, other, "job", job, api=api, node=where)
            assert seen.returncode == 1
            assert seen.stderr.strip() == f"rsa: error: job {job} is not tracked by the RSA"
        for filler in jobs.fillers:
            root(lab, "scancel", filler)
    root(lab, "rm", "-rf", str(base))


def test_the_watchdog_is_fed_while_the_api_is_attacked(lab: Mapping[str, str],
                                                       tmp_path: Path) -> None:
    """A second rsad (own state, socket and TCP port; an inert pool) under a fake systemd
    notify socket: while users hammer its API, WATCHDOG=1 keeps coming (once a second from
    its loop; a gap of 5 s would be half the watchdog's 10 s gone)."""
    port = 6831
    public = Path(tempfile.mkdtemp(prefix="rsa-api-sec-"))  # rsaother must reach the socket
    public.chmod(0o755)
    sock_path = public / "rsad.sock"
    tcp = f"{TCP.rpartition(':')[0]}:{port}"  # rsad's host's address: the login node's too
    (tmp_path / "rsa.yaml").write_text(second_rsad_yaml(lab, tmp_path / "state",
                                                        sock_path, tcp))
    (tmp_path / "rsa.yaml").chmod(0o600)
    notify = tmp_path / "notify.sock"
    other = lab["RSA_LAB_OTHER_USER"]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as srv:
        srv.bind(str(notify))
        srv.settimeout(1)
        env = {**os.environ, "SLURM_CONF": lab["RSA_LAB_SLURM_CONF"],
               "NOTIFY_SOCKET": str(notify), "WATCHDOG_USEC": "10000000"}
        proc = subprocess.Popen([f"{lab['RSA_LAB_VENV']}/bin/rsad", "--config",
                                 str(tmp_path / "rsa.yaml")], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            wait_for("second rsad ready", lambda: sock_path.exists(), timeout=90, every=0.2)
            pool = ThreadPoolExecutor(8)
            attacks = [pool.submit(attack_as, lab, other, "slowloris", a, "1")
                       for a in (str(sock_path), tcp, tcp)]
            attacks += [pool.submit(attack_as, lab, other, "length", a, "-1")
                        for a in (str(sock_path), tcp)]
            attacks.append(pool.submit(attack_as, lab, other, "hold", tcp, "300", "12"))
            attacks.append(pool.submit(attack_as, lab, other, "hold", str(sock_path), "100",
                                       "12"))
            pings: list[float] = []
            slowest = 0.0
            end = time.monotonic() + 16
            while time.monotonic() < end:
                try:
                    if srv.recv(4096).decode() == "WATCHDOG=1":
                        pings.append(time.monotonic())
                except TimeoutError:
                    pass
                slowest = max(slowest, root_status_seconds(lab, str(sock_path)))
            for f in attacks:
                f.result(timeout=60)
            pool.shutdown()
            gaps = [b - a for a, b in itertools.pairwise(pings)]
            assert len(pings) >= 5 and max(gaps) < 5, (pings, gaps)
            assert slowest < FAST
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=60)
        shutil.rmtree(public, ignore_errors=True)
        assert proc.returncode == 0, err[-2000:]


def test_a_command_rsad_took_while_stopped_is_never_called_unreachable(
        lab: Mapping[str, str], tmp_path: Path) -> None:
    """rsad stopped (SIGSTOP: a stall, as a kill between taking a request and answering
    it is) while root's ``rsa admin drain`` is sent: the kernel takes the connection and
    the request, nobody answers. The CLI said ``cannot reach rsad ...: timed out; is rsad
    running?``, and once rsad went on it carried the drain out all the same (found by
    review). Now the CLI waits past rsad's own waits and says rsad did not answer and that
    whether the request was carried out is not known; rsad, going on, finds the caller
    gone and drops the request."""
    public = Path(tempfile.mkdtemp(prefix="rsa-api-stop-"))
    sock_path = public / "rsad.sock"
    tcp = f"{TCP.rpartition(':')[0]}:6832"
    (tmp_path / "rsa.yaml").write_text(second_rsad_yaml(lab, tmp_path / "state",
                                                        sock_path, tcp))
    (tmp_path / "rsa.yaml").chmod(0o600)
    env = {**os.environ, "SLURM_CONF": lab["RSA_LAB_SLURM_CONF"]}
    with (tmp_path / "rsad.log").open("w") as log:
        proc = subprocess.Popen([f"{lab['RSA_LAB_VENV']}/bin/rsad", "--config",
                                 str(tmp_path / "rsa.yaml")], env=env,
                                stdout=subprocess.DEVNULL, stderr=log)
    try:
        wait_for("second rsad ready", lambda: sock_path.exists() and rsa(
            lab, "root", "status", "--json", api=str(sock_path)).returncode == 0,
            timeout=180, every=1)
        proc.send_signal(signal.SIGSTOP)
        try:
            start = time.monotonic()
            out = rsa(lab, "root", "admin", "drain", "--reason", "stopped",
                      api=str(sock_path))
            took = time.monotonic() - start
        finally:
            proc.send_signal(signal.SIGCONT)
        assert out.returncode != 0
        assert f"rsad at {sock_path} did not answer" in out.stderr, out.stderr
        assert "whether the request was carried out is not known" in out.stderr
        assert "cannot reach" not in out.stderr
        assert took >= 25, took  # not before rsad's own answer could have come
        # the request waited in the socket for rsad to go on; its caller had gone
        wait_for("rsad dropping the request its caller gave up on", lambda: (
            "POST /v1/admin/drain of uid 0 not carried out: its caller closed the "
            "connection" in (tmp_path / "rsad.log").read_text()), timeout=60, every=1)
        status = rsa(lab, "root", "status", "--json", api=str(sock_path))
        assert status.returncode == 0, status.stderr
        assert not json.loads(status.stdout).get("draining")
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        shutil.rmtree(public, ignore_errors=True)
    assert proc.returncode == 0, (tmp_path / "rsad.log").read_text()[-2000:]
