"""The operator/user commands of ``rsa`` (status, nodes, drain/resume, events, retry,
release, input-done, cancel-staging) with click's CliRunner and a recording API double.
The same commands run against the live rsad in tests/integration/test_cli_live.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rsa_scheduler.cli.main import cli
from rsa_scheduler.client import ApiClient
from tests.clirunner import cli_runner

STATUS = {"nodes": [{"name": "rsa1", "tier": "ram", "capacity": 2 << 30, "state": "up",
                     "job": "7"},
                    {"name": "rsa2", "tier": "ram", "capacity": 2 << 30, "state": "drained",
                     "job": None}],
          "jobs_by_rsa_state": {"staging-in": 1}, "alerts": [
              {"time": 0, "job_id": "9", "message": "stage-out failed; will retry"}],
          "slurm_ok": True, "last_cycle_seconds": 0.004, "running_actions": 1,
          "on_deck": ["7"]}


JOBS = {"jobs": [
    {"job_id": "7", "user": "alice", "job_state": "on-deck", "rsa_state": "staging-in",
     "nodes": "rsa[1-2]", "since": 5.0, "cycle": 1, "message": "staging input",
     "progress": {"phase": "stage-in", "bytes": [3 << 30, 4 << 30], "files": [12_345, 40_000],
                  "rate": 200 << 20, "files_rate": 800.0, "elapsed": 15.4, "eta": 3725.0,
                  "time": 5.0, "action": "7/1/stage-in/3"}},
    {"job_id": "8", "user": "bob", "job_state": "queued", "rsa_state": "none", "nodes": "",
     "since": 65.0, "cycle": 0, "message": None, "progress": None}]}


class Recorder:
    def __init__(self, job_state: str = "quarantined") -> None:
        self.calls: list[tuple[str, str, Any]] = []
        self.job_state = job_state

    def request(self, method: str, path: str, body: Any = None) -> Any:
        self.calls.append((method, path, body))
        if path == "/v1/status":
            return STATUS
        if path.startswith("/v1/events"):
            return {"events": [{"seq": 5, "time": 0, "job_id": "7", "name": "rsa.transition",
                                "from": "fs-ready", "to": "staging-in", "trigger": "tick"}]}
        if path.endswith("/command"):
            return {"job_id": "7", "rsa_state": "tearing-down"}
        if path == "/v1/jobs":
            return JOBS
        if path.startswith("/v1/jobs/"):
            return {"job_id": "7", "rsa_state": self.job_state, "nodes": "rsa1"}
        return {}


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    rec = Recorder()
    monkeypatch.setattr(ApiClient, "request", rec.request)
    return rec


def run(*args: str, input: str | None = None) -> Any:
    return cli_runner().invoke(cli, list(args), input=input, catch_exceptions=False)


def test_status_summarises_pool_jobs_and_alerts(api: Recorder) -> None:
    out = run("status").output
    assert "ram       4G total  1 allocated, 1 drained" in out
    assert "Jobs: 1 staging-in" in out and "On-deck: 7" in out
    assert "job 9: stage-out failed; will retry" in out


def test_nodes_table_and_json(api: Recorder) -> None:
    assert "rsa2         ram   drained          2G  -" in run("nodes").output
    assert '"name": "rsa1"' in run("nodes", "--json").output


def test_drain_and_resume_post_node_states(api: Recorder) -> None:
    assert "rsa2: drained (disk swap)" in run("drain", "rsa2", "--reason", "disk swap").output
    run("resume", "rsa2")
    assert [c[1:] for c in api.calls] == [
        ("/v1/nodes/rsa2/state", {"state": "drained", "reason": "disk swap"}),
        ("/v1/nodes/rsa2/state", {"state": "up", "reason": ""})]


def test_events_lines(api: Recorder) -> None:
    assert "fs-ready -> staging-in (tick)" in run("events").output


def test_release_refuses_unverified_output_without_discard(api: Recorder) -> None:
    res = cli_runner().invoke(cli, ["release", "7"])
    assert res.exit_code != 0 and "--discard-output" in res.output
    assert not any(c[1].endswith("/command") for c in api.calls)


def test_release_discard_asks_for_confirmation(api: Recorder) -> None:
    res = cli_runner().invoke(cli, ["release", "7", "--discard-output"], input="n\n")
    assert res.exit_code != 0 and "DESTROY the unverified output" in res.output
    assert not any(c[1].endswith("/command") for c in api.calls)
    run("release", "7", "--discard-output", "--yes")
    assert api.calls[-1] == ("POST", "/v1/jobs/7/command", {"command": "discard"})


@pytest.mark.parametrize(("state", "command"), [("teardown-failed", "force-release"),
                                                ("staging-in", "cancel-staging")])
def test_release_picks_the_command_for_the_state(monkeypatch: pytest.MonkeyPatch,
                                                 state: str, command: str) -> None:
    rec = Recorder(job_state=state)
    monkeypatch.setattr(ApiClient, "request", rec.request)
    run("release", "7", "--yes")
    assert rec.calls[-1] == ("POST", "/v1/jobs/7/command", {"command": command})


@pytest.mark.parametrize("state", ["mounted-input", "reset-failed", "mounting-input"])
def test_release_of_a_running_job_says_it_runs_and_sends_nothing(
        monkeypatch: pytest.MonkeyPatch, state: str) -> None:
    """A job running on its RAMDISK (an #RSA_INPUT=rw job's busy reset too) holds its
    RSA nodes: release said "holds no RSA resources to release", which was untrue."""
    rec = Recorder(job_state=state)
    monkeypatch.setattr(ApiClient, "request", rec.request)
    res = cli_runner().invoke(cli, ["release", "7", "--yes"])
    assert res.exit_code != 0 and "runs on its RAMDISK" in res.output
    assert "no RSA resources" not in res.output and "scancel 7" in res.output
    assert not any(c[1].endswith("/command") for c in rec.calls)


class ResetDouble:
    """rsad for ``rsa input-done``: the job's states as successive GETs see them."""

    def __init__(self, states: list[str], *, refuse: bool = False,
                 message: str = "") -> None:
        self.states, self.refuse, self.message = states, refuse, message
        self.calls: list[tuple[str, str, Any]] = []

    def request(self, method: str, path: str, body: Any = None) -> Any:
        from rsa_scheduler.client import ApiRefused
        self.calls.append((method, path, body))
        if method == "POST":
            if self.refuse:
                raise ApiRefused(409, "job 7: can't input-done from resetting")
            return {"job_id": "7", "rsa_state": "resetting"}
        state = self.states.pop(0) if len(self.states) > 1 else self.states[0]
        return {"job_id": "7", "rsa_state": state, "message": self.message,
                "spec": {"data_out": "/pfs/alice/out"}}


@pytest.fixture
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("rsa_scheduler.cli.jobs.time.sleep", lambda _s: None)


def test_input_done_takes_the_job_from_slurm_env(monkeypatch: pytest.MonkeyPatch,
                                                 no_sleep: None) -> None:
    rsad = ResetDouble(["mounted-input", "resetting", "mounting-output", "mounted-output"])
    monkeypatch.setattr(ApiClient, "request", rsad.request)
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    out = run("input-done").output
    assert ("POST", "/v1/jobs/7/command", {"command": "input-done"}) in rsad.calls
    assert out.strip() == ("job 7: input done; the RAMDISK is mounted over /pfs/alice/out: "
                           "write there")
    assert [c[0] for c in rsad.calls] == ["GET", "POST", "GET", "GET", "GET"]


def test_input_done_no_wait_returns_once_rsad_has_it(monkeypatch: pytest.MonkeyPatch) -> None:
    rsad = ResetDouble(["mounted-input", "resetting"])
    monkeypatch.setattr(ApiClient, "request", rsad.request)
    assert "reset is under way (resetting)" in run("input-done", "7", "--no-wait").output


def test_input_done_when_the_reset_timer_won_the_race(monkeypatch: pytest.MonkeyPatch,
                                                       no_sleep: None) -> None:
    rsad = ResetDouble(["mounted-input", "resetting", "mounted-output"], refuse=True)
    monkeypatch.setattr(ApiClient, "request", rsad.request)
    assert "mounted over /pfs/alice/out" in run("input-done", "7").output


@pytest.mark.parametrize(("state", "said"), [
    ("declined", "no RAMDISK for output (declined: started before its RSA nodes were "
                 "allocated again): /pfs/alice/out is on the PFS as usual"),
    ("released", "no RAMDISK for output (released: started before its RSA nodes were "
                 "allocated again): /pfs/alice/out is on the PFS as usual"),
])
def test_input_done_without_a_ramdisk_is_not_an_error(monkeypatch: pytest.MonkeyPatch,
                                                      state: str, said: str) -> None:
    """A job the RSA is not serving keeps running: its output goes to the PFS."""
    rsad = ResetDouble([state], message="started before its RSA nodes were allocated again")
    monkeypatch.setattr(ApiClient, "request", rsad.request)
    assert said in run("input-done", "7").output
    assert all(c[0] == "GET" for c in rsad.calls)


def test_input_done_says_where_the_output_mount_was_refused(
        monkeypatch: pytest.MonkeyPatch, no_sleep: None) -> None:
    """A reset whose mount over DATA_OUT was refused (a directory that is not the
    user's): never "mounted ... write there"; the reason, and where the output goes."""
    why = ("mounting the RAMDISK over /proj/out failed: c1: refused: #RSA_DATA_OUT=/proj/out "
           "is owned by bob, not you")
    rsad = ResetDouble(["mounted-input", "resetting", "mounted-output"])
    real = rsad.request

    def with_events(_client: Any, method: str, path: str, body: Any = None) -> Any:
        answer = real(method, path, body)
        if method == "GET":
            answer["events"] = [{"name": "action.outcome", "action": "7/1/reset/4",
                                 "result": "ok", "detail": {"partial": why}}]
        return answer

    monkeypatch.setattr(ApiClient, "request", with_events)
    out = run("input-done", "7").output
    assert out.strip() == (f"job 7: input done; {why}; on the nodes without the RAMDISK, "
                           f"/pfs/alice/out is on the PFS as usual")


def test_input_done_rides_out_an_rsad_restart(monkeypatch: pytest.MonkeyPatch,
                                              no_sleep: None) -> None:
    """rsad restarted as a job said input-done: unreachable, then 503 while it replays
    its log; killed after it committed the request, before it answered. The job's
    `rsa input-done` exited 1 at the first of these (with `set -e`, the job with it;
    found by review); now it asks again until --timeout, reading the job's state
    before each step, so the reset is asked for once and the job told where to write."""
    from rsa_scheduler.client import ApiRefused, ApiUnavailable

    down = ApiUnavailable("cannot reach rsad at /run/rsa/rsad.sock: [Errno 111] "
                          "Connection refused; is rsad running (systemctl status rsad)?")
    script: list[Any] = [down, ApiRefused(503, "rsad is starting"), "mounted-input",
                         down,  # the POST: committed, then rsad killed before answering
                         ApiRefused(409, "job 7: can't input-done from resetting"),
                         "resetting", "mounted-output"]
    calls: list[str] = []

    def rsad(_client: Any, method: str, path: str, body: Any = None) -> Any:
        calls.append(method)
        got = script.pop(0)
        if isinstance(got, Exception):
            raise got
        return {"job_id": "7", "rsa_state": got, "spec": {"data_out": "/pfs/alice/out"}}

    monkeypatch.setattr(ApiClient, "request", rsad)
    result = cli_runner().invoke(cli, ["input-done", "7"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1] == (
        "job 7: input done; the RAMDISK is mounted over /pfs/alice/out: write there")
    assert "asking again until --timeout" in result.output
    assert calls == ["GET", "GET", "GET", "POST", "POST", "GET", "GET"]


def test_input_done_gives_up_after_the_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    rsad = ResetDouble(["mounted-input", "reset-failed"])
    monkeypatch.setattr(ApiClient, "request", rsad.request)
    result = cli_runner().invoke(cli, ["input-done", "7", "--timeout", "0"])
    assert result.exit_code == 2
    assert "still not mounted over DATA_OUT after 0s (resetting)" in result.output


def test_retry_and_cancel_staging(api: Recorder) -> None:
    run("retry", "7")
    run("cancel-staging", "7")
    assert [c[2]["command"] for c in api.calls] == ["retry", "cancel-staging"]


def test_jobs_table_shows_bytes_and_files_staged_rate_and_eta(
        api: Recorder, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("time.time", lambda: 125.0)  # 2 min after job 7's change and report
    out = run("jobs").output.splitlines()
    assert out[0].split() == ["JOBID", "USER", "JOB", "STATE", "RSA", "STATE", "NODES", "FOR",
                              "STAGED", "FILES", "RATE", "ETA", "MESSAGE"]
    assert out[1].split() == ["7", "alice", "on-deck", "staging-in", "rsa[1-2]", "2:00",
                              "3G/4G", "12.3k/40k", "200M/s", "1:00:05", "staging", "input"]
    assert out[2].split() == ["8", "bob", "queued", "none", "-", "1:00", "-", "-", "-", "-"]


def test_jobs_json_keeps_the_stable_keys(api: Recorder) -> None:
    job = json.loads(run("jobs", "--json").output)["jobs"][0]
    assert {"job_id", "user", "job_state", "rsa_state", "nodes", "cycle", "message", "since",
            "progress"} <= set(job)
    assert set(job["progress"]) >= {"phase", "files", "bytes", "rate", "eta", "time"}


def test_job_detail_says_how_far_staging_is(monkeypatch: pytest.MonkeyPatch) -> None:
    job = {**JOBS["jobs"][0], "events": []}
    monkeypatch.setattr(ApiClient, "request", lambda self, method, path, body=None: job)
    monkeypatch.setattr("time.time", lambda: 125.0)
    assert ("   staging: stage-in 3G/4G (75%), 12.3k/40k files, 200M/s, ETA 1:00:05"
            in run("job", "7").output.splitlines())


def test_jobs_table_keeps_a_multi_line_message_on_its_row(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    job = {**JOBS["jobs"][1], "message": "PREPROCESS exited 1: first\n\tsecond"}
    monkeypatch.setattr(ApiClient, "request",
                        lambda self, method, path, body=None: {"jobs": [job]})
    out = run("jobs").output.splitlines()
    assert len(out) == 2 and out[1].endswith("PREPROCESS exited 1: first second")


#: what a user's PREPROCESS can write as the last line of its stderr, which rsad quotes in
#: the job's message: set the terminal's title, write its clipboard (OSC 52), a CSI (the
#: C1 form too) that moves the cursor up and erases the line, and a forged second line
EVIL = ("PREPROCESS exited 1: \x1b]0;owned\x07\x1b]52;c;cm0gLXJmIH4K\x07\x1b[1A\x1b[2K"
        "\x9b2J\n    2026-01-01T00:00:00  staging-in -> released (discard)")


def test_a_users_text_never_acts_on_the_operators_terminal(monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    """rsad's answers hold text users wrote (the stderr of their PREPROCESS, paths): an
    operator's rsa jobs, job, events, status, nodes and wait printed it raw, escape
    sequences and newlines and all (found by review); now every control character is
    shown as \\xNN, and a newline cannot start a line of its own."""
    job: dict[str, Any] = {**JOBS["jobs"][1], "job_id": "8", "job_state": "finished",
                           "rsa_state": "quarantined", "message": EVIL,
                           "spec": {"data_out": "/o"},
                           "events": [{"seq": 9, "time": 0, "name": "action.outcome",
                                       "action": "8/1/stage-in/1", "result": "failed",
                                       "message": EVIL}]}
    drained: dict[str, Any] = STATUS["nodes"][1]  # type: ignore[index]
    status = {**STATUS, "alerts": [{"time": 0, "job_id": "8", "message": EVIL}],
              "nodes": [{**drained, "reason": EVIL, "by": "root"}]}

    def answer(self: ApiClient, method: str, path: str, body: Any = None) -> Any:
        if path == "/v1/status":
            return status
        if path.startswith("/v1/events"):
            return {"events": [{**job["events"][0], "job_id": "8"}]}
        return {"jobs": [job]} if path == "/v1/jobs" else job

    monkeypatch.setattr(ApiClient, "request", answer)
    for args in (["jobs"], ["job", "8"], ["events"], ["status"], ["nodes"], ["wait", "8"]):
        out = cli_runner().invoke(cli, args).output
        assert "owned" in out, (args, out)  # the text is still shown ...
        assert not any(c in out for c in "\x1b\x07\x9b"), (args, out)  # ... never acted on
        assert "\\x1b]0;owned\\x07" in out, (args, out)
        assert not any(line.lstrip().startswith("2026-01-01T00:00:00")
                       for line in out.splitlines()), (args, out)


def test_rsads_refusal_is_printed_as_visible_text(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """An error line quotes rsad's answer (a refusal, a job's state): the same rule."""
    from rsa_scheduler.cli.main import main
    from rsa_scheduler.client import ApiRefused

    def refuse(self: ApiClient, method: str, path: str, body: Any = None) -> Any:
        raise ApiRefused(409, f"job 8: can't cancel-staging: {EVIL}")

    monkeypatch.setattr(ApiClient, "request", refuse)
    monkeypatch.setattr("sys.argv", ["rsa", "cancel-staging", "8"])
    with pytest.raises(SystemExit):
        main()
    err = capsys.readouterr().err
    assert "\\x1b]0;owned" in err and "\x1b" not in err and len(err.splitlines()) == 1
