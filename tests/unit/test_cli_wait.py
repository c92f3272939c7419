"""``rsa wait``: the verdict on a job from its record and timeline, and the waiting loop
(rsad restarting, timeouts, exit statuses)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from rsa_scheduler.cli.wait import (
    FAILED,
    OK,
    TIMED_OUT,
    SlurmUnanswered,
    cluster_status,
    expand_arrays,
    verdict,
    wait_for_jobs,
)
from rsa_scheduler.client import ApiRefused, ApiUnavailable

pytestmark = pytest.mark.unit


def job(rsa_state: str, job_state: str | None, *steps: tuple[str, str],
        data_out: str | None = "/pfs/u/out", message: str = "",
        rw: bool = False) -> dict[str, Any]:
    """A ``GET /v1/jobs/ID`` answer; ``steps``: ("job", to) or ("rsa", to) events."""
    events = []
    for kind, to in steps:
        events.append({"name": "job.state" if kind == "job" else "rsa.transition",
                       "to": to})
    return {"job_id": "7", "rsa_state": rsa_state, "job_state": job_state,
            "message": message, "events": events,
            "spec": {"data_in": "/pfs/u/in" if rw else None, "data_out": data_out,
                     "input": "rw" if rw else None}}


RUN = (("job", "running"), ("rsa", "mounted-output"))


def test_a_job_still_running_or_staging_out_has_no_verdict() -> None:
    assert verdict(job("mounted-output", "running", *RUN)) is None
    assert verdict(job("staging-out", "finished", *RUN, ("job", "finished"),
                       ("rsa", "staging-out"))) is None
    assert verdict(job("stage-out-failed", "finished", *RUN, ("job", "finished"),
                       ("rsa", "stage-out-failed"))) is None


def test_verified_only_after_the_last_end() -> None:
    done = job("released", "finished", *RUN, ("job", "finished"), ("rsa", "staging-out"),
               ("rsa", "output-verified"), ("rsa", "released"), message="content verified")
    got = verdict(done)
    assert got is not None and (got.word, got.status) == ("verified", OK)
    assert got.why == "content verified"
    # a requeued job's first run was verified; the second ended and stages out: not yet
    second = job("staging-out", "finished", *RUN, ("job", "finished"),
                 ("rsa", "output-verified"), ("job", "pending"), *RUN, ("job", "finished"),
                 ("rsa", "staging-out"))
    assert verdict(second) is None


def test_quarantine_and_an_unwritten_writable_input_fail() -> None:
    q = verdict(job("quarantined", "finished", *RUN, ("job", "finished"),
                    ("rsa", "quarantined"), message="stage-out gave up: disk full"))
    assert q is not None and (q.word, q.status, q.why) == (
        "quarantined", FAILED, "stage-out gave up: disk full")
    w = verdict(job("writeback-failed", "finished", ("job", "finished"), data_out=None,
                    rw=True))
    assert w is not None and (w.word, w.status) == ("failed", FAILED)


def test_released_without_a_verified_stage_out_is_not_called_verified() -> None:
    # an operator's release --discard-output, or a job cancelled before it ran
    got = verdict(job("released", "finished", ("job", "finished"), ("rsa", "released"),
                      message="output discarded by root"))
    assert got is not None and got.word == "failed" and got.status == FAILED
    assert "/pfs/u/out" in got.why and "output discarded by root" in got.why


def test_no_output_declined_and_untracked_jobs_are_in_place() -> None:
    done = verdict(job("released", "finished", ("job", "finished"), data_out=None, rw=True))
    assert done is not None and (done.word, done.status) == ("done", OK)
    assert "writable input written back" in done.why
    declined = verdict(job("declined", "finished", ("job", "finished"),
                           message="no RSA nodes free: the job reads the PFS"))
    assert declined is not None and (declined.word, declined.status) == ("no RSA", OK)
    untracked = verdict(None)
    assert untracked is not None and (untracked.word, untracked.status) == ("no RSA", OK)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def test_the_loop_rides_through_rsad_restarts_and_says_one_line_per_job() -> None:
    clock, said = Clock(), list[str]()
    answers: dict[str, list[Any]] = {
        "7": [ApiUnavailable("connection refused"), ApiRefused(503, "rsad is starting"),
              ApiRefused(500, "internal error: the event log could not be written"),
              job("staging-out", "finished", ("job", "finished")),
              job("released", "finished", ("job", "finished"), ("rsa", "output-verified"))],
        "8": [None],
    }

    def ask(j: str) -> Mapping[str, Any] | None:
        a = answers[j].pop(0) if len(answers[j]) > 1 else answers[j][0]
        if isinstance(a, Exception):
            raise a
        return a  # type: ignore[no-any-return]

    rc = wait_for_jobs(ask, ["7", "8", "7"], timeout=None, clock=clock, sleep=clock.sleep,
                       say=said.append)
    assert rc == OK
    assert said[0].startswith("8: no RSA: ")
    assert said[1].startswith("7: verified: ") and len(said) == 2


def test_a_timeout_names_what_is_not_over_and_a_failure_outranks_nothing() -> None:
    clock, said = Clock(), list[str]()
    staging = job("staging-out", "finished", ("job", "finished"))
    quarantined = job("quarantined", "finished", ("job", "finished"))
    rc = wait_for_jobs(lambda j: staging if j == "7" else quarantined, ["7", "9"],
                       timeout=10, clock=clock, sleep=clock.sleep, say=said.append)
    assert rc == TIMED_OUT
    assert said[0].startswith("9: quarantined")
    assert said[1].startswith("7: timed out after 10s: not over")
    rc = wait_for_jobs(lambda j: quarantined, ["9"], timeout=10, clock=clock,
                       sleep=clock.sleep, say=said.append)
    assert rc == FAILED


def test_a_refusal_that_is_not_busy_is_the_answer() -> None:
    def ask(j: str) -> Mapping[str, Any] | None:
        raise ApiRefused(403, "not allowed")

    with pytest.raises(ApiRefused):
        wait_for_jobs(ask, ["7"], timeout=None, clock=Clock(), sleep=lambda s: None,
                      say=lambda s: None)


class Untracked:
    def get(self, path: str) -> Any:
        raise ApiRefused(404, "job 7 is not tracked by the RSA")


def test_a_job_rsad_has_not_seen_yet_is_waited_for_while_slurm_runs_it() -> None:
    from rsa_scheduler.cli.wait import _ask

    pending = _ask(Untracked(), "7", slurm=lambda j: "PENDING")  # type: ignore[arg-type]
    assert pending is not None and verdict(pending) is None
    assert _ask(Untracked(), "7", slurm=lambda j: "COMPLETED") is None  # type: ignore[arg-type]
    assert _ask(Untracked(), "7", slurm=lambda j: "") is None  # type: ignore[arg-type]


def test_cluster_status_says_success_only_once_the_job_completed_and_its_data_is_in_place(
        ) -> None:
    def never() -> str:
        raise AssertionError("Slurm asked while the data is not in place")

    staging = job("staging-out", "finished", *RUN, ("job", "finished"),
                  ("rsa", "staging-out"))
    assert cluster_status(staging, never) == ("running", "")
    assert cluster_status(job("mounted-output", "running", *RUN), never)[0] == "running"
    done = job("released", "finished", *RUN, ("job", "finished"),
               ("rsa", "output-verified"), ("rsa", "released"), message="content verified")
    assert cluster_status(done, lambda: "COMPLETED") == ("success",
                                                         "verified: content verified")
    # rsad's own record of the end wins; Slurm not having recorded it yet is running
    assert cluster_status({**done, "end_state": "TIMEOUT"}, never)[0] == "failed"
    assert cluster_status(done, lambda: "")[0] == "running"
    assert cluster_status(done, lambda: "COMPLETING")[0] == "running"
    # a job without RSA work: Slurm's word alone
    assert cluster_status(None, lambda: "COMPLETED")[0] == "success"
    assert cluster_status(None, lambda: "FAILED") == ("failed", "the job ended FAILED in Slurm")


def test_cluster_status_fails_a_quarantined_output_whatever_slurm_says() -> None:
    q = job("quarantined", "finished", *RUN, ("job", "finished"), ("rsa", "quarantined"),
            message="stage-out gave up: disk full")
    assert cluster_status(q, lambda: "COMPLETED") == (
        "failed", "quarantined: stage-out gave up: disk full")


def test_a_rescued_output_is_not_called_verified_at_data_out() -> None:
    """Issue 33: quarantined, then rescued to quarantine.rescue_dir: verified there, not
    at DATA_OUT; rsa wait says where, with a failing status."""
    data = job("released", "finished", *RUN, ("job", "finished"), ("rsa", "quarantined"),
               ("rsa", "staging-out"), ("rsa", "verifying"), ("rsa", "output-verified"),
               ("rsa", "released"))
    data["rescue_to"] = "/pfs/rescue/u/7.1"
    got = verdict(data)
    assert got is not None and (got.word, got.status) == ("rescued", FAILED)
    assert "rescued to /pfs/rescue/u/7.1" in got.why


def test_a_run_started_beside_the_previous_runs_ramdisk_is_told_what_is_its_own() -> None:
    """A rerun its user released while the previous run's output was still on the
    RAMDISK (quarantined, or staging out) read and wrote the PFS itself: rsa wait said
    "quarantined" with the quarantine's message, or "verified" for the previous run's
    stage-out verified after this run ended (issue 33)."""
    q = {**job("quarantined", "finished", *RUN, ("job", "finished"), ("rsa", "quarantined"),
               ("job", "pending"), ("job", "running"), ("job", "finished"),
               message="stage-out gave up: disk full"), "rerun_started": True}
    got = verdict(q)
    assert got is not None and (got.word, got.status) == ("quarantined", FAILED)
    assert "this run read and wrote the PFS itself" in got.why
    assert "previous run's output is kept on its RAMDISK" in got.why and "/pfs/u/out" in got.why
    later = {**job("released", "finished", *RUN, ("job", "finished"), ("rsa", "staging-out"),
                   ("job", "pending"), ("job", "running"), ("job", "finished"),
                   ("rsa", "output-verified"), ("rsa", "released"),
                   message="content verified"), "rerun_started": True}
    got = verdict(later)
    assert got is not None and (got.word, got.status) == ("no RSA", OK), got
    assert "previous run's output" in got.why and "verified after it" in got.why


class Failing:
    """rsad answering 500 (an internal error: it stops, and its restart replays its log)."""

    def get(self, path: str) -> Any:
        raise ApiRefused(500, "internal error: the event log could not be written")


def test_cluster_status_waits_out_an_internal_error_saying_so(
        capsys: pytest.CaptureFixture[str]) -> None:
    from rsa_scheduler.cli.wait import RUNNING, _cluster_status

    assert _cluster_status(Failing(), "7") == RUNNING  # type: ignore[arg-type]
    err = capsys.readouterr().err
    assert err == ("rsa wait: job 7: rsad answered 500 (internal error: the event log "
                   "could not be written); asking again: running\n"), err


def test_input_done_asks_again_after_an_internal_error_until_its_deadline() -> None:
    import time

    from rsa_scheduler.cli import jobs

    calls: list[int] = []

    def ask() -> Any:
        calls.append(1)
        if len(calls) < 3:
            raise ApiRefused(500, "internal error")
        return {"rsa_state": "mounted-output"}

    saved = jobs.ASK_AGAIN
    jobs.ASK_AGAIN = 0.0
    try:
        assert jobs._asked(ask, time.monotonic() + 30, "7") == {"rsa_state": "mounted-output"}
        assert len(calls) == 3
        with pytest.raises(ApiRefused):  # past its deadline: the refusal is the answer
            jobs._asked(lambda: Failing().get("/"), time.monotonic() - 1, "7")
    finally:
        jobs.ASK_AGAIN = saved


def test_an_arrays_id_is_waited_for_as_every_task_of_it() -> None:
    """``sbatch --parsable --array=0-2`` prints the array's id; rsad tracks its tasks as
    ``127_0`` ... and no job ``127``. On the code before, ``rsa wait 127`` asked rsad
    about 127 (not tracked), then Slurm, whose squeue prints one line per task (no one
    state): it answered at once ``127: no RSA: ... its files are where it wrote them``,
    exit 0, while the tasks ran or staged out. Now every task: those Slurm lists and
    those rsad still tracks (127_0: Slurm forgot it, its output still staging)."""
    tasks = {"127": ["127_1", "127_2"]}
    mine = ["127_0", "127_1", "1270_3", "12"]
    assert expand_arrays(["127", "12", "128_4"], lambda: mine,
                         lambda j: tasks.get(j, [])) == ["127_0", "127_1", "127_2", "12",
                                                         "128_4"]

    def unreachable() -> list[str]:
        raise ApiUnavailable("rsad is not asked for a plain job Slurm lists")

    # a plain job (or a task's own id, listed as its task) costs one squeue, no listing
    assert expand_arrays(["12", "131"], unreachable,
                         {"12": ["12"], "131": ["127_4"]}.__getitem__) == ["12", "131"]
    asked: list[str] = []
    staging = job("staging-out", "finished", *RUN, ("job", "finished"))
    done = job("released", "finished", *RUN, ("job", "finished"), ("rsa", "output-verified"))

    def ask(job_id: str) -> Mapping[str, Any] | None:
        asked.append(job_id)
        return staging if job_id == "127_0" and asked.count(job_id) < 3 else done

    said: list[str] = []
    ids = expand_arrays(["127"], lambda: mine, lambda j: tasks.get(j, []))
    assert wait_for_jobs(ask, ids, None, sleep=lambda s: None, say=said.append) == OK
    assert [line.split(":")[0] for line in said] == ["127_1", "127_2", "127_0"]
    assert asked.count("127_0") == 3  # waited for while its output was staged out


def test_another_users_job_is_said_to_be_theirs_not_in_place() -> None:
    """rsad answers "not tracked" for another user's job as for an unknown one (no leak).
    On the code before, ``rsa wait`` then said ``no RSA: ... its files are where it
    wrote them``, exit 0, once Slurm ended the job, though its output might still be on
    its RAMDISK. Slurm names the job's user to all (without PrivateData): now the line
    says whose it is and that only its owner can wait for it, exit 1, at once."""
    from rsa_scheduler.cli.wait import _ask

    def theirs(job_id: str) -> Mapping[str, Any] | None:
        return _ask(Untracked(), job_id, slurm=lambda j: "COMPLETED",  # type: ignore[arg-type]
                    owner=lambda j: "bob", me=lambda: "alice")

    got = verdict(theirs("7"))
    assert got is not None and (got.word, got.status) == ("not yours", 1)
    assert "job 7 is bob's" in got.why and "where it wrote them" not in got.why
    said: list[str] = []
    assert wait_for_jobs(theirs, ["7"], None, sleep=lambda s: None, say=said.append) == 1
    assert said[0].startswith("7: not yours: job 7 is bob's")
    assert cluster_status(theirs("7"), lambda: "COMPLETED")[0] == "failed"
    # their own untracked job (no directives), or root's look: as before
    own = _ask(Untracked(), "7", slurm=lambda j: "COMPLETED",  # type: ignore[arg-type]
               owner=lambda j: "alice", me=lambda: "alice")
    assert own is None and verdict(own) is not None and verdict(own).word == "no RSA"  # type: ignore[union-attr]
    assert _ask(Untracked(), "7", slurm=lambda j: "COMPLETED",  # type: ignore[arg-type]
                owner=lambda j: "bob", me=lambda: "") is None


# ---- a hung rsad: the commands end within their --timeout ------------------------------

@pytest.fixture
def hung_rsad(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """rsad's socket, whose rsad takes every request and never answers (its loop hung);
    no squeue here (PATH): Slurm is asked nothing."""
    import socket
    import threading

    from rsa_scheduler import munge

    monkeypatch.setattr(munge, "encode", lambda payload: "CRED")
    monkeypatch.setenv("PATH", str(tmp_path))
    path = str(tmp_path / "rsad.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(16)
    held: list[socket.socket] = []

    def take() -> None:
        with contextlib.suppress(OSError):
            while True:
                held.append(srv.accept()[0])

    threading.Thread(target=take, daemon=True).start()
    yield path
    with contextlib.suppress(OSError):
        srv.shutdown(socket.SHUT_RDWR)
    srv.close()
    for conn in held:
        conn.close()


def test_rsa_wait_ends_within_its_timeout_while_rsad_hangs(hung_rsad: str) -> None:
    """Each request had the client's whole 30 s: ``rsa wait --timeout 1`` of a job with
    rsad hung took a minute (the job list, then the job). Now each request gets what is
    left of --timeout, and the line says rsad did not answer."""
    from rsa_scheduler.cli.main import cli
    from tests.clirunner import cli_runner

    start = time.monotonic()
    res = cli_runner().invoke(cli, ["wait", "--api", hung_rsad, "--timeout", "1", "7"])
    took = time.monotonic() - start
    assert res.exit_code == 3, res.output
    assert took < 3, took
    assert "7: timed out after 1s: no answer from rsad to go by (" in res.output
    assert f"rsad at {hung_rsad} did not answer" in res.output


def test_rsa_input_done_ends_within_its_timeout_while_rsad_hangs(hung_rsad: str) -> None:
    from rsa_scheduler.cli.main import cli
    from tests.clirunner import cli_runner

    start = time.monotonic()
    res = cli_runner().invoke(cli, ["input-done", "--api", hung_rsad, "--timeout", "1",
                                    "7"])
    took = time.monotonic() - start
    assert res.exit_code == 1, res.output
    assert took < 3, took
    said = str(res.exception)  # rsa's main prints it as "rsa: error: ..."
    assert said.startswith(f"rsad at {hung_rsad} did not answer ("), said


def test_a_commands_first_request_is_made_even_when_its_time_ran_out_before_it(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """``rsa wait --timeout 4`` whose squeue took the 4 s on a loaded node said "the time
    given ran out before rsad was asked": the first request is made all the same (here
    something that is not rsad answers: its unsigned answer is refused, which shows it
    was asked); a later one past the deadline is not."""
    import socket
    import threading

    from rsa_scheduler import munge
    from rsa_scheduler.client import ApiClient, ApiUnavailable

    monkeypatch.setattr(munge, "encode", lambda payload: "CRED")
    path = str(tmp_path / "rsad.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(4)
    asked: list[bytes] = []

    def answer() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn = srv.accept()[0]
                with conn:
                    asked.append(conn.recv(65536))
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"
                                 b"Connection: close\r\n\r\n{}")

    threading.Thread(target=answer, daemon=True).start()
    try:
        client = ApiClient(path, timeout=30.0).within(time.monotonic() - 1)
        with pytest.raises(ApiUnavailable, match="not signed with MUNGE by rsad"):
            client.get("/v1/jobs")
        assert len(asked) == 1
        # past the deadline: not asked again, and the line says why the last went wrong
        # (it said only "ran out before rsad was asked": the squatter test's failure)
        with pytest.raises(ApiUnavailable, match=r"the time given ran out; .*not signed "
                                                 r"with MUNGE by rsad"):
            client.get("/v1/jobs")
        assert len(asked) == 1
    finally:
        with contextlib.suppress(OSError):
            srv.shutdown(socket.SHUT_RDWR)
        srv.close()


# ---- Slurm not answering: the commands end within their --timeout, saying so -----------

@pytest.fixture
def hung_slurm(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """squeue and sacct on PATH that never answer (a slurmctld that does not), before
    whatever else PATH holds (the hung_rsad fixture's empty directory)."""
    import os
    import shutil

    bin_dir = tmp_path / "slurm-bin"
    bin_dir.mkdir()
    for name in ("squeue", "sacct"):
        script = bin_dir / name
        script.write_text(f"#!/bin/sh\nexec {shutil.which('sleep', path=os.defpath)} 10\n")
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ.get('PATH', '')}")


class UntrackedBy(Untracked):
    """rsad answering "not tracked", as a client whose requests end by ``deadline``."""

    def __init__(self, deadline: float | None) -> None:
        self.deadline = deadline


@pytest.mark.usefixtures("hung_slurm")
def test_a_slurm_that_does_not_answer_is_said_within_the_timeout_never_no_rsa(
        capsys: pytest.CaptureFixture[str]) -> None:
    """squeue and sacct had a fixed 30 s each, whatever --timeout said: ``rsa wait
    --timeout 1`` of a job rsad does not track took a minute with slurmctld hung, then
    said ``no RSA: ... its files are where it wrote them`` (exit 0): squeue's silence
    read as "Slurm does not know the job". Now Slurm gets what is left of --timeout, and
    the line says Slurm did not answer; ``--cluster-status`` says running, and why."""
    from rsa_scheduler.cli.wait import RUNNING, _ask, _cluster_status

    said: list[str] = []
    start = time.monotonic()
    client = UntrackedBy(time.monotonic() + 1)
    rc = wait_for_jobs(lambda j: _ask(client, j, me=lambda: "alice"),  # type: ignore[arg-type]
                       ["7"], 1.0, say=said.append)
    assert time.monotonic() - start < 3
    assert rc == TIMED_OUT, said
    assert said[0].startswith("7: timed out after 1s: no answer from Slurm to go by "
                              "(squeue did not answer within "), said
    start = time.monotonic()
    assert _cluster_status(UntrackedBy(time.monotonic() + 1), "7") == RUNNING  # type: ignore[arg-type]
    assert time.monotonic() - start < 3
    err = capsys.readouterr().err
    assert err.startswith("rsa wait: job 7: no answer from Slurm to go by (squeue did not "
                          "answer within "), err
    assert err.endswith("): running\n"), err
    # past the time given Slurm is not asked at all, and the line says so
    with pytest.raises(SlurmUnanswered, match="the time given ran out before squeue was "
                                              "asked"):
        _ask(UntrackedBy(time.monotonic() - 1), "7", me=lambda: "")  # type: ignore[arg-type]


def test_rsa_wait_ends_within_its_timeout_while_slurm_and_rsad_hang(
        hung_rsad: str, hung_slurm: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The array expansion's squeue (the command's first question) had 30 s whatever
    --timeout said. Now it has what is left of --timeout; rsad is then asked about the
    job as given, once (FIRST_ASK: 1 s here), and the line says it did not answer."""
    from rsa_scheduler import client as client_module
    from rsa_scheduler.cli.main import cli
    from tests.clirunner import cli_runner

    monkeypatch.setattr(client_module, "FIRST_ASK", 1.0)
    start = time.monotonic()
    res = cli_runner().invoke(cli, ["wait", "--api", hung_rsad, "--timeout", "1", "7"])
    took = time.monotonic() - start
    assert res.exit_code == 3, res.output
    assert took < 4, took
    assert "7: timed out after 1s: no answer from rsad to go by (" in res.output
