"""``rsa top`` and the staging columns of ``rsa jobs``.

Three layers: the pure parts (progress figures, the dashboard rendered from fixture data
for many terminal sizes), the command with click's CliRunner, and the real thing: rsad's
own daemon, routes and HTTP server on a unix socket (a scripted Slurm, executors that
stage nothing), with ``rsa top`` running in a real terminal (tmux, 80x24).

The MUNGE seam: munged is not running in the unit tier, and libmunge is only used by
``rsa_scheduler.munge.encode`` and ``.decode`` (the client's request credential, rsad's
signature over its answer). Both are replaced by a stand-in credential
``test:<uid>:<hex of the payload>``, rsad's signature ``test:0:<hex>`` (rsad is root): in
this process with monkeypatch, in the ``rsa top`` under tmux by a launcher that patches
both before running ``rsa``. The digest checks stay real, so each request is still bound
to its method, path and body, and each answer to its request. The socket path is the
client's ordinary ``--api`` option.
The same command runs against the lab's rsad in tests/integration/test_cli_top.py.
"""

from __future__ import annotations

import json
import os
import pwd
import shlex
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from rsa_scheduler import munge
from rsa_scheduler.cli import dashboard
from rsa_scheduler.cli.dashboard import Frame
from rsa_scheduler.cli.main import cli, main
from rsa_scheduler.cli.progress import (
    Staging,
    short_count,
    short_duration,
    short_size,
)
from rsa_scheduler.cli.top import Source
from rsa_scheduler.client import ApiClient, ApiUnavailable
from rsa_scheduler.core.actions import ActionKind
from rsa_scheduler.core.policy import StagingPolicy
from rsa_scheduler.core.scheduler import Scheduler
from rsa_scheduler.daemon import httpd
from rsa_scheduler.daemon.api import Routes
from rsa_scheduler.daemon.apiserver import ApiServers
from rsa_scheduler.daemon.executors import ActionContext
from rsa_scheduler.daemon.service import Daemon
from rsa_scheduler.slurm.parse import QueueRow
from rsa_scheduler.store import Store
from tests.clirunner import cli_runner
from tests.unit.corekit import make_pool
from tests.unit.test_daemon import SPEC, ScriptedSlurm, instant_registry, with_slurm

NOW = 1_700_000_000.0
GIB = 1 << 30

# ---- fixture data (the JSON rsad answers) ----------------------------------------------------

STAGING: dict[str, Any] = {
    "job_id": "1234", "user": "alice", "job_state": "on-deck", "rsa_state": "staging-in",
    "nodes": "rsa[1-2]", "since": NOW - 75, "cycle": 1,
    "message": "staging input into the RAMDISK",
    "progress": {"phase": "stage-in", "bytes": [3 * GIB // 10 * 4, 4 * GIB],
                 "files": [120, 400], "rate": 117_000_000, "files_rate": 10.9,
                 "elapsed": 11.0, "eta": 40.0, "time": NOW - 4,
                 "action": "1234/1/stage-in/3"}}
QUEUED = {"job_id": "1300", "user": "alice", "job_state": "queued", "rsa_state": "none",
          "nodes": "", "since": NOW - 30, "message": None, "progress": None}
DONE = {"job_id": "1200", "user": "alice", "job_state": "finished", "rsa_state": "released",
        "nodes": "", "since": NOW - 4000, "progress": None,
        "message": "stage-out finished: 3 objects (12K) verified on persistent storage in /pfs/out"}
QUARANTINED = {"job_id": "1100", "user": "alice", "job_state": "finished",
               "rsa_state": "quarantined", "nodes": "rsa3", "since": NOW - 600,
               "progress": None, "message": "stage-out failed 4 times: data kept on rsa3"}
STATUS = {"nodes": [
    {"name": "rsa1", "tier": "ram", "capacity": 2 * GIB, "state": "up", "job": "1234"},
    {"name": "rsa2", "tier": "ram", "capacity": 2 * GIB, "state": "up", "job": "1234"},
    {"name": "rsa3", "tier": "ssd", "capacity": 8 * GIB, "state": "up", "job": "1100"},
    {"name": "rsa4", "tier": "ssd", "capacity": 8 * GIB, "state": "drained", "job": None},
    {"name": "rsa5", "tier": "ssd", "capacity": 8 * GIB, "state": "up", "job": None}],
    "jobs_by_rsa_state": {"staging-in": 1}, "alerts": [], "slurm_ok": True,
    "last_cycle_seconds": 0.004, "running_actions": 1, "on_deck": ["1234"], "last_seq": 42}
EVENTS: list[dict[str, Any]] = [
    {"seq": 40, "time": NOW - 20, "job_id": "1234", "name": "rsa.transition",
     "from": "allocated", "to": "fs-building", "trigger": "tick"},
    {"seq": 41, "time": NOW - 15, "job_id": "1234", "name": "action.outcome",
     "action": "1234/1/build-fs/2", "result": "ok", "message": ""},
    {"seq": 42, "time": NOW - 15, "job_id": "1234", "name": "rsa.transition",
     "from": "fs-ready", "to": "staging-in", "trigger": "outcome"}]


def frame(**kw: Any) -> Frame:
    base: dict[str, Any] = {"api": "/run/rsa/rsad.sock", "interval": 2.0,
                            "jobs": [DONE, QUEUED, STAGING, QUARANTINED], "status": STATUS,
                            "events": EVENTS, "fetched": NOW}
    return Frame(**{**base, **kw})


def screen(f: Frame, width: int = 80, height: int = 24, *, ascii_only: bool = False
           ) -> list[str]:
    """What a terminal of that size shows: rendered by rich, as plain text lines."""
    console = Console(width=width, height=height, color_system=None, force_terminal=False,
                      legacy_windows=False)
    with console.capture() as cap:
        console.print(dashboard.render(f, NOW, width, height, ascii_only=ascii_only))
    return cap.get().splitlines()


@pytest.fixture(autouse=True)
def _utc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()


# ---- progress figures -------------------------------------------------------------------------

@pytest.mark.parametrize(("n", "text"), [(0, "0B"), (1023, "1023B"), (1024, "1K"),
                                         (1536, "1.5K"), (123_456_789, "118M"),
                                         (2 * GIB, "2G"), (1023.99 * (1 << 20), "1G"),
                                         (int(12.34 * GIB), "12.3G"), (3 << 40, "3T")])
def test_sizes_are_short_binary_slurm_units(n: float, text: str) -> None:
    assert short_size(n) == text
    assert len(text) <= 5


def test_counts_and_durations_are_short() -> None:
    assert [short_count(n) for n in (0, 9999, 12_345, 4_500_000)] == ["0", "9999", "12.3k",
                                                                       "4.5M"]
    assert [short_duration(s) for s in (4.6, 754, 3723, 93784)] == [
        "0:05", "12:34", "1:02:03", "1-02:03:04"]  # squeue's TIME column


def test_staging_counts_the_eta_down_from_rsads_report() -> None:
    st = Staging.of(STAGING, NOW)
    assert st is not None
    assert (st.phase, st.staged, st.files, st.percent) == ("stage-in", "1.2G/4G", "120/400",
                                                           "30%")
    assert st.speed == "112M/s" and st.eta == 36.0 and st.time_left == "0:36"
    later = Staging.of(STAGING, NOW + 100)
    assert later is not None and later.time_left == "0:00"


@pytest.mark.parametrize("progress", [None, {}, {"phase": "stage-in"}, {"bytes": "x"}])
def test_no_or_unreadable_progress_is_no_staging(progress: Any) -> None:
    assert Staging.of({**STAGING, "progress": progress}, NOW) is None


def test_eta_is_unknown_until_something_finished() -> None:
    p = {**STAGING["progress"], "bytes": [0, GIB], "files": [0, 1], "eta": None, "rate": 0}
    st = Staging.of({**STAGING, "progress": p}, NOW)
    assert st is not None and st.time_left == "-" and st.staged == "0B/1G"


# ---- the dashboard, pure ---------------------------------------------------------------------

def test_80x24_frame_shows_jobs_progress_nodes_and_events() -> None:
    out = screen(frame())
    text = "\n".join(out)
    assert out[0] == "rsa top | 22:13:20 | every 2s, q quits | rsad /run/rsa/rsad.sock"
    assert out[1].startswith("Slurm ok | ram 2/2 nodes used, 0B/4G free | ssd 1/3 nodes used")
    # staging first, then jobs holding nodes, then the rest, finished ones last
    jobs = [ln.split()[0] for ln in out if ln[:4] in ("1234", "1300", "1200", "1100")]
    assert jobs == ["1234", "1100", "1300", "1200"]
    assert "1234  alice on-deck   staging-in  rsa[1-2]     1:15  staging input" in text
    bar = next(ln for ln in out if ln.startswith("  stage-in"))
    assert "30%" in bar and "1.2G/4G" in bar and "120/400 files" in bar
    assert "112M/s" in bar and bar.endswith("ETA 0:36") and "━" in bar and "─" in bar
    assert "rsa3 ssd  allocated     8G      -  1100" in text
    assert "rsa4 ssd  drained        -      -  -" in text
    assert "rsa5 ssd  idle           -     8G  -" in text
    assert out[-1] == "22:13:05 1234     fs-ready -> staging-in (outcome)"
    assert "action.outcome 1234/1/build-fs/2: ok" in text


SIZES = [(80, 24), (132, 43), (200, 60), (60, 15), (40, 10), (30, 6), (20, 3), (12, 2),
         (1, 1)]


@pytest.mark.parametrize(("width", "height"), SIZES)
def test_any_terminal_size_gets_at_most_its_lines_and_columns(width: int, height: int) -> None:
    many = [{**QUEUED, "job_id": str(2000 + i)} for i in range(40)] + [STAGING, DONE]
    nodes = [{"name": f"rsa{i:03d}", "tier": "ram", "capacity": 2 * GIB, "state": "up",
              "job": None} for i in range(64)]
    for f in (frame(), frame(jobs=many, status={**STATUS, "nodes": nodes}),
              frame(error="cannot reach rsad at /run/rsa/rsad.sock: [Errno 111] Connection "
                          "refused; is rsad running (systemctl status rsad)?")):
        out = screen(f, width, height)
        assert len(out) <= height, out
        assert all(len(ln) <= width for ln in out), out
        assert out[0].startswith("rsa top"[:width - 1])  # the rest may be an ellipsis


def test_a_crowded_frame_says_what_it_left_out() -> None:
    many = [{**QUEUED, "job_id": str(2000 + i)} for i in range(30)]
    many += [{**DONE, "job_id": str(3000 + i)} for i in range(5)]
    nodes = [{"name": f"rsa{i:02d}", "tier": "ram", "capacity": 2 * GIB, "state": "up",
              "job": "1234" if i < 2 else None} for i in range(40)]
    out = screen(frame(jobs=[STAGING, *many], status={**STATUS, "nodes": nodes}))
    assert len(out) == 24
    assert any(ln.startswith("… ") and "more jobs (5 released or declined)" in ln
               for ln in out), out
    assert any(ln.startswith("… ") and "more nodes" in ln and "idle)" in ln for ln in out)
    # the job that is staging and the nodes in use are never the ones left out
    assert any(ln.startswith("  stage-in") for ln in out)
    assert any(ln.startswith("rsa00 ") and "allocated" in ln for ln in out)


def test_unreachable_rsad_is_one_actionable_line_over_the_last_data() -> None:
    why = "cannot reach rsad at /run/rsa/rsad.sock: [Errno 2] No such file or directory; " \
          "is rsad running (systemctl status rsad)?"
    out = screen(frame(error=why, fetched=NOW - 30), 200, 24)
    assert out[0].startswith("rsa top | 22:13:20 | data from 22:12:50 | every 2s")
    assert out[1] == f"rsa: error: {why} (retrying every 2s)"
    assert any(ln.startswith("1234") for ln in out)  # the last data stays on screen
    never = screen(frame(error=why, fetched=None, jobs=(), status=None, events=()), 80, 24)
    assert "waiting for rsad ..." in never and "rsa: error: cannot reach rsad at" in never[1]
    assert len(never[1]) <= 80  # wrapped on words, not cut


def test_ascii_terminals_get_ascii_only() -> None:
    out = screen(frame(jobs=[{**STAGING, "message": "naïve → café"}]), 80, 24,
                 ascii_only=True)
    assert all(ln.isascii() for ln in out), out
    assert any(ln.startswith("  stage-in ") and "#" in ln for ln in out)


def test_a_message_quoting_stderr_stays_on_its_line() -> None:
    noisy = {**QUEUED, "message": "PREPROCESS exited 1: line one\n\tline two \x1b[31mred"}
    out = screen(frame(jobs=[noisy]), 200, 24)
    row = next(ln for ln in out if ln.startswith("1300"))
    assert row.endswith("PREPROCESS exited 1: line one  line two  [31mred")
    assert out[out.index(row) + 1].startswith("NODE ")


def test_no_jobs_says_so() -> None:
    assert "no jobs tracked by the RSA" in screen(frame(jobs=()))


# ---- the command (CliRunner and an API double) ------------------------------------------------

class FakeApi:
    """Answers like rsad; records the paths asked for."""

    def __init__(self, last_seq: int | None = 42) -> None:
        self.paths: list[str] = []
        self.status = {**STATUS, "last_seq": last_seq}
        if last_seq is None:
            del self.status["last_seq"]
        self.down = False

    def request(self, method: str, path: str, body: Any = None) -> Any:
        if self.down:
            raise ApiUnavailable("cannot reach rsad at /run/rsa/rsad.sock: [Errno 111] "
                                 "Connection refused; is rsad running (systemctl status rsad)?")
        self.paths.append(path)
        if path == "/v1/status":
            return self.status
        if path == "/v1/jobs":
            return {"jobs": [STAGING, QUEUED]}
        if path.startswith("/v1/events?since="):
            since = int(path.split("=")[1])
            return {"events": [e for e in EVENTS if e["seq"] > since]}
        raise AssertionError(path)


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    fake = FakeApi()
    monkeypatch.setattr(ApiClient, "request", fake.request)
    return fake


def invoke(*args: str, env: Mapping[str, str] | None = None) -> Any:
    return cli_runner().invoke(cli, list(args), catch_exceptions=False,
                              env={"COLUMNS": "80", "LINES": "24", **(env or {})})


def test_once_prints_one_frame_of_the_terminal_size(api: FakeApi) -> None:
    out = invoke("top", "--once").output.splitlines()
    assert out[0].startswith("rsa top | ") and out[0].endswith(" | rsad /run/rsa/rsad.sock")
    assert any(ln.startswith("1234  alice on-deck") for ln in out)
    assert any(ln.startswith("  stage-in") and "120/400 files" in ln for ln in out)
    assert len(out) <= 24 and all(len(ln) <= 80 for ln in out)
    assert api.paths == ["/v1/status", "/v1/jobs", "/v1/events?since=0"]
    wide = invoke("top", "--once", env={"COLUMNS": "150", "LINES": "50"}).output
    assert max(len(ln) for ln in wide.splitlines()) > 80


def test_json_is_one_frames_data(api: FakeApi) -> None:
    data = json.loads(invoke("top", "--json").output)
    assert sorted(data) == ["events", "jobs", "status"]
    assert [e["seq"] for e in data["events"]] == [40, 41, 42]


def test_without_a_terminal_frames_follow_each_other_as_plain_text(
        api: FakeApi, monkeypatch: pytest.MonkeyPatch) -> None:
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr("rsa_scheduler.cli.top.time.sleep", sleep)
    res = cli_runner().invoke(cli, ["top", "--interval", "3"])
    assert res.exit_code == 0, res.output
    assert sleeps == [3.0, 3.0]
    assert res.output.count("every 3s") == 2, res.output  # two frames
    assert "\x1b[" not in res.output  # no escape sequences in a log
    assert "Ctrl-C quits" in res.output and "q quits" not in res.output


def test_interval_is_checked() -> None:
    res = cli_runner().invoke(cli, ["top", "--interval", "0"])
    assert res.exit_code == 2 and "0.1" in res.output


def test_source_reads_only_the_tail_of_the_event_log(api: FakeApi) -> None:
    api.status["last_seq"] = 1000
    src = Source(ApiClient("/nowhere"))
    src.read()
    assert api.paths[-1] == "/v1/events?since=950"
    api.paths.clear()
    src.read()  # nothing new: no events request
    assert api.paths == ["/v1/status", "/v1/jobs"]
    api.status["last_seq"] = 1001
    src.read()
    assert api.paths[-1] == "/v1/events?since=1000"
    api.status["last_seq"] = 42  # a new event log (rsad's state rebuilt): start over
    assert [e["seq"] for e in src.read()[2]] == [40, 41, 42]
    assert api.paths[-1] == "/v1/events?since=0"


def test_an_rsad_without_last_seq_gets_no_events_requests(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    fake = FakeApi(last_seq=None)
    monkeypatch.setattr(ApiClient, "request", fake.request)
    assert Source(ApiClient("/nowhere")).read()[2] == []
    assert fake.paths == ["/v1/status", "/v1/jobs"]


def test_a_failed_refresh_keeps_the_data_and_says_why(api: FakeApi) -> None:
    src = Source(ApiClient("/nowhere"))
    good = src.frame(Frame("/nowhere", 2.0), NOW)
    assert good.error is None and good.fetched == NOW and len(good.jobs) == 2
    api.down = True
    bad = src.frame(good, NOW + 2)
    assert bad.jobs == good.jobs and bad.fetched == NOW
    assert bad.error is not None and bad.error.startswith("cannot reach rsad")


def test_once_with_rsad_away_is_one_line_and_exit_1(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(munge, "encode", fake_encode(0))
    sock = tmp_path / "none.sock"
    monkeypatch.setattr(sys, "argv", ["rsa", "top", "--once", "--api", str(sock)])
    with pytest.raises(SystemExit) as done:
        main()
    assert done.value.code == 1
    assert capsys.readouterr().err.splitlines() == [
        f"rsa: error: cannot reach rsad at {sock}: [Errno 2] No such file or directory; "
        "is rsad running (systemctl status rsad)?"]


# ---- a real rsad (daemon, routes, HTTP on a unix socket) ---------------------------------

def fake_encode(uid: int) -> Callable[..., str]:
    """Credentials of ``uid``; one restricted to a uid is rsad's signature, root's (whom
    it is restricted to is not checked here: tests/unit/test_reply_signature.py)."""
    return lambda payload, restrict_uid=None: \
        f"test:{uid if restrict_uid is None else 0}:{payload.hex()}"


def fake_decode(credential: str) -> tuple[munge.Sender, bytes]:
    kind, uid, payload = credential.split(":")
    if kind != "test":
        raise munge.MungeError("munge: credential rejected: Invalid credential format")
    return munge.Sender(int(uid), int(uid)), bytes.fromhex(payload)


USER = "nobody"  # a real account: rsad names callers by uid through pwd


@dataclass
class Rsad:
    """rsad's daemon and API with a scripted Slurm: job 7 (USER) is staging in (it reported
    progress and waits for ``finish``), job 8 (alice) is locked in."""

    socket: Path
    daemon: Daemon
    finish: threading.Event = field(default_factory=threading.Event)
    reported: threading.Event = field(default_factory=threading.Event)
    servers: ApiServers | None = None

    def serve(self) -> None:
        self.servers = ApiServers(Routes(self.daemon), self.socket)
        self.servers.start()

    def ask(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the loop thread: everything queued before it has been handled."""
        return self.daemon.submit("call", fn, wait=True)

    def wait(self, what: str, probe: Callable[[], Any], timeout: float = 30.0) -> Any:
        deadline = time.monotonic() + timeout
        while not (got := self.ask(probe)):
            if time.monotonic() > deadline:
                raise AssertionError(f"rsad: timed out waiting for {what}")
            threading.Event().wait(0.01)
        return got


@contextmanager
def make_rsad(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, serve: bool = True
              ) -> Iterator[Rsad]:
    monkeypatch.setattr(munge, "encode", fake_encode(0))  # rsad's signatures (as_uid: callers')
    monkeypatch.setattr(munge, "decode", fake_decode)
    monkeypatch.setattr(munge, "root_decodes_restricted", lambda: False)  # munge's default
    # the stand-in credential names the caller; the kernel's SO_PEERCRED would say root
    # (test_api_server.py tests that check): the socket peer is left unknown, as on TCP
    monkeypatch.setattr(httpd, "peer_uid", lambda _sock: None)
    slurm: ScriptedSlurm = ScriptedSlurm()
    registry = with_slurm(instant_registry([]), slurm)
    rsad = Rsad(tmp_path / "rsad.sock", None)  # type: ignore[arg-type]

    def stage_in(ctx: ActionContext) -> Mapping[str, Any]:
        if ctx.action.job_id != "7":
            return {}
        ctx.progress({"phase": "stage-in", "files": [120, 400], "bytes": [3 * GIB // 10, GIB],
                      "elapsed": 11.0, "rate": 29_000_000, "files_rate": 10.9, "eta": 25.0})
        rsad.reported.set()
        while not rsad.finish.wait(0.05):
            ctx.cancel.check()
        return {"stats": {"files": 400, "bytes": GIB, "seconds": 30.0}}

    registry.register(ActionKind.STAGE_IN, stage_in)
    store = Store.open(tmp_path / "rsa.db", durability="normal")
    d = Daemon(Scheduler(make_pool(), StagingPolicy()), slurm=slurm, store=store,
               registry=registry, workers=4, poll_interval=3600)
    rsad.daemon = d
    d.start()
    slurm.rows = [QueueRow("7", "PENDING", "Resources", 10, 2, USER, SPEC.to_admin_comment()),
                  QueueRow("8", "PENDING", "Resources", 9, 2, "alice", SPEC.to_admin_comment())]
    d.poll()
    stop = threading.Event()
    loop = threading.Thread(target=lambda: [d.drain(0.05) for _ in iter(stop.is_set, True)],
                            daemon=True)
    loop.start()
    try:
        assert rsad.reported.wait(30), "job 7 never reached its stage-in"
        rsad.wait("job 8 locked in", lambda: d.sched.records["8"].rsa_state.value == "locked-in")
        rsad.wait("job 7's progress", lambda: "7" in d.progress)
        if serve:
            rsad.serve()
        yield rsad
    finally:
        rsad.finish.set()
        if rsad.servers is not None:
            rsad.servers.stop()
        stop.set()
        loop.join(5)
        d.shutdown()
        store.close()


@pytest.fixture
def rsad(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Rsad]:
    with make_rsad(tmp_path, monkeypatch) as r:
        yield r


def as_uid(monkeypatch: pytest.MonkeyPatch, uid: int) -> None:
    monkeypatch.setattr(munge, "encode", fake_encode(uid))


def test_rsad_rows_carry_the_progress_and_status_the_tail_seq(
        rsad: Rsad, monkeypatch: pytest.MonkeyPatch) -> None:
    as_uid(monkeypatch, 0)
    client = ApiClient(str(rsad.socket))
    jobs = {j["job_id"]: j for j in client.get("/v1/jobs")["jobs"]}
    p = jobs["7"]["progress"]
    assert p["bytes"] == [3 * GIB // 10, GIB] and p["files"] == [120, 400]
    assert p["action"] == "7/1/stage-in/3" and abs(p["time"] - time.time()) < 60
    assert jobs["8"]["progress"] is None
    status = client.get("/v1/status")
    assert status["last_seq"] == rsad.ask(rsad.daemon.store.last_seq) > 0
    # the stage-in ends: its progress is gone with it
    rsad.finish.set()
    rsad.wait("job 7 locked in",
              lambda: rsad.daemon.sched.records["7"].rsa_state.value == "locked-in")
    assert {j["job_id"]: j for j in client.get("/v1/jobs")["jobs"]}["7"]["progress"] is None


def test_jobs_table_over_real_http(rsad: Rsad, monkeypatch: pytest.MonkeyPatch) -> None:
    as_uid(monkeypatch, 0)
    out = invoke("jobs", "--api", str(rsad.socket)).output.splitlines()
    assert out[0].split() == ["JOBID", "USER", "JOB", "STATE", "RSA", "STATE", "NODES", "FOR",
                              "STAGED", "FILES", "RATE", "ETA", "MESSAGE"]
    seven = next(ln for ln in out if ln.startswith("7 "))
    assert seven.split()[:5] == ["7", USER, "on-deck", "staging-in", "rsa1"]
    assert seven.split()[6:9] == ["307M/1G", "120/400", "27.7M/s"]
    eight = next(ln for ln in out if ln.startswith("8 "))
    assert eight.split()[3:5] == ["locked-in", "rsa2"] and eight.split()[6:10] == ["-"] * 4


def test_users_see_only_their_own_jobs_in_top(rsad: Rsad,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    as_uid(monkeypatch, pwd.getpwnam(USER).pw_uid)
    mine = invoke("top", "--once", "--api", str(rsad.socket)).output
    assert "7     nobody" in mine and "8     alice" not in mine
    data = json.loads(invoke("top", "--json", "--api", str(rsad.socket)).output)
    assert {j["job_id"] for j in data["jobs"]} == {"7"}
    assert {e["job_id"] for e in data["events"]} == {"7"}
    as_uid(monkeypatch, 0)
    everyone = invoke("top", "--once", "--api", str(rsad.socket)).output
    assert "7     nobody" in everyone and "8     alice" in everyone


# ---- rsa top in a real terminal (tmux) ---------------------------------------------------------

LAUNCHER = """\
import os, sys
from rsa_scheduler import munge
munge.encode = lambda payload, restrict_uid=None: f"test:{os.getuid()}:{payload.hex()}"
def decode(credential):
    kind, uid, payload = credential.split(":")
    return munge.Sender(int(uid), int(uid)), bytes.fromhex(payload)
munge.decode = decode
# (the lines above: see the module doc)
from rsa_scheduler.cli import main
sys.argv[0] = "rsa"
main()
"""


def launcher(tmp_path: Path) -> list[str]:
    """argv that runs ``rsa`` with the stand-in MUNGE credential (see the module doc)."""
    path = tmp_path / "launch.py"
    path.write_text(LAUNCHER)
    return [sys.executable, str(path)]


class Terminal:
    """A command (``rsa top``) in an 80x24 pane of a private tmux server. When it exits,
    its exit status and the terminal's modes (``stty -a``) go to files: what the pane
    shows after leaving the alternate screen is not reliable in a detached tmux.
    Also used by tests/integration/test_cli_top.py."""

    def __init__(self, tmp_path: Path, name: str) -> None:
        self.name = name
        self.tmux = ["tmux", "-u", "-f", "/dev/null", "-L", f"{name}-{os.getpid()}"]
        self.tmp = tmp_path
        self.status = tmp_path / "exit-status"
        self.modes = tmp_path / "stty"

    def start(self, argv: Sequence[str]) -> None:
        script = self.tmp / "run.sh"
        command = " ".join(shlex.quote(a) for a in argv)
        # The shell survives Ctrl-C as an interactive one would: a trap, not an ignore
        # (rsa top must start with SIGINT's default disposition).
        script.write_text(f"#!/bin/sh\ntrap 'true' INT\ncd /\n{command}\n"
                          f"echo $? > '{self.status}.new'\nstty -a > '{self.modes}'\n"
                          f"mv '{self.status}.new' '{self.status}'\n")
        script.chmod(0o755)
        subprocess.run([*self.tmux, "new-session", "-d", "-s", self.name, "-x", "80", "-y",
                        "24", str(script), ";", "set-option", "-w", "-t", self.name,
                        "remain-on-exit", "on"], check=True, timeout=30)

    def screen(self) -> str:
        return subprocess.run([*self.tmux, "capture-pane", "-p", "-t", self.name],
                              capture_output=True, text=True, check=True, timeout=30).stdout

    def keys(self, *keys: str) -> None:
        subprocess.run([*self.tmux, "send-keys", "-t", self.name, *keys], check=True,
                       timeout=30)

    def resize(self, width: int, height: int) -> None:
        subprocess.run([*self.tmux, "resize-window", "-t", self.name, "-x", str(width), "-y",
                        str(height)], check=True, timeout=30)

    def alternate_screen(self) -> bool:
        out = subprocess.run([*self.tmux, "display-message", "-p", "-t", self.name,
                              "#{alternate_on}"], capture_output=True, text=True, timeout=30)
        return out.stdout.strip() == "1"

    def until(self, what: str, probe: Callable[[str], bool], timeout: float = 20.0) -> str:
        """Poll the pane (a real terminal: there is no event to wait on)."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.screen()
            if probe(text):
                return text
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; the pane shows:\n{text}")
            threading.Event().wait(0.05)

    def exit_status(self) -> int:
        """Wait for ``rsa top`` to exit; its exit status."""
        self.until("rsa top to exit", lambda _: self.status.exists())
        return int(self.status.read_text())

    def restored(self) -> bool:
        """Canonical mode and echo are back, the alternate screen is left."""
        words = set(self.modes.read_text().replace(";", " ").split())
        return {"icanon", "echo"} <= words and not self.alternate_screen()

    def close(self) -> None:
        subprocess.run([*self.tmux, "kill-session", "-t", self.name], capture_output=True,
                       timeout=30, check=False)
        subprocess.run([*self.tmux, "kill-server"], capture_output=True, timeout=30,
                       check=False)


@contextmanager
def make_terminal(tmp_path: Path, name: str) -> Iterator[Terminal]:
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (make install adds it)")
    term = Terminal(tmp_path, name)
    try:
        yield term
    finally:
        term.close()


def _rows(text: str) -> list[str]:
    return text.rstrip("\n").split("\n")


def test_top_in_a_real_80x24_terminal_quits_on_q(rsad: Rsad, tmp_path: Path) -> None:
    with make_terminal(tmp_path, "rsa-top-unit") as term:
        term.start([*launcher(tmp_path), "top", "--api", str(rsad.socket), "--interval", "0.3"])
        text = term.until("jobs, progress, nodes and events",
                          lambda s: "staging-in" in s and "120/400 files" in s and "EVENTS" in s)
        rows = _rows(text)
        assert len(rows) <= 24 and all(len(r) <= 80 for r in rows)
        assert rows[0].startswith("rsa top | ") and ", q quits | rsad /tmp/" in rows[0]
        assert rows[1].startswith("Slurm ok | ram 2/4 nodes used, 4G/8G free")
        assert rows[2].split()[:4] == ["JOBID", "USER", "JOB", "STATE"]
        assert rows[3].split()[:4] == ["7", USER, "on-deck", "staging-in"]
        assert rows[4].startswith("  stage-in ") and "30%" in rows[4]
        assert rows[5].split()[:5] == ["8", "alice", "on-deck", "locked-in", "rsa2"]
        assert any(r.startswith("rsa1 ") and r.split()[-1] == "7" for r in rows)
        assert any(r.startswith("rsa3 ") and "idle" in r for r in rows)
        assert term.alternate_screen()
        term.resize(50, 12)  # redrawn for the new size, still nothing wrapped
        text = term.until("a 50x12 frame", lambda s: len(_rows(s)) <= 12 and "stage-in" in s
                          and max(map(len, _rows(s))) <= 50 and _rows(s)[0].endswith("…"))
        assert _rows(text)[2].split()[:2] == ["JOBID", "USER"]
        term.keys("q")
        assert term.exit_status() == 0
        assert term.restored()


def test_top_waits_for_rsad_and_ctrl_c_quits(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    with make_rsad(tmp_path, monkeypatch, serve=False) as rsad, \
            make_terminal(tmp_path, "rsa-top-unit-away") as term:
        term.start([*launcher(tmp_path), "top", "--api", str(rsad.socket), "--interval", "0.3"])
        text = term.until("the error line", lambda s: "rsa: error: cannot reach rsad" in s)
        assert "waiting for rsad ..." in text
        rsad.serve()  # rsad comes up: the next refresh shows it, without the error
        term.until("the jobs", lambda s: "staging-in" in s and "rsa: error" not in s)
        term.keys("C-c")
        assert term.exit_status() == 0
        assert term.restored()


def test_a_frames_requests_share_one_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """A frame is three requests (status, jobs, events); each had the client's whole
    timeout, so a hung rsad held a frame (and ``rsa top --once``) three times as long.
    Now they share one deadline: the client's timeout from the frame's start."""
    fake = FakeApi()
    deadlines: list[float | None] = []

    def request(self: ApiClient, method: str, path: str, body: Any = None) -> Any:
        deadlines.append(self.deadline)
        return fake.request(method, path, body)

    monkeypatch.setattr(ApiClient, "request", request)
    before = time.monotonic()
    Source(ApiClient("/nowhere", timeout=30.0)).read()
    assert len(deadlines) == 3 and len(set(deadlines)) == 1
    assert deadlines[0] is not None
    assert before + 30.0 <= deadlines[0] <= time.monotonic() + 30.0
