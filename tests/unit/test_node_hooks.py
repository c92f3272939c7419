"""Node Prolog/Epilog decisions: always exit 0, refuse before mounting, report to rsad."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar, cast

import pytest

from rsa_scheduler.node import hooks
from rsa_scheduler.node.plan import MOUNTPOINT, PROTOCOL


class FakeClient:
    """Stands in for rsad: scripted answers to /v1/hooks/prolog, records every post."""

    answers: ClassVar[list[dict[str, Any]]] = []
    posts: ClassVar[list[tuple[str, dict[str, Any]]]] = []

    def __init__(self, address: str, timeout: float, trust_uid: int | None = None) -> None:
        assert trust_uid == 0  # the hooks act as root on answers only rsad may sign

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        FakeClient.posts.append((path, body))
        if path == "/v1/hooks/prolog":
            return FakeClient.answers.pop(0) if FakeClient.answers else {"do": "nothing"}
        return {}


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> type[FakeClient]:
    import rsa_scheduler.client

    FakeClient.answers, FakeClient.posts = [], []
    monkeypatch.setattr(rsa_scheduler.client, "ApiClient", FakeClient)
    monkeypatch.setattr(time, "sleep", lambda _s: None)
    return FakeClient


def env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"SLURM_JOB_ID": "42", "SLURMD_NODENAME": "c1", "SLURM_NODELIST": "c[1-2]",
            "SLURM_JOB_UID": "1001", "SLURM_JOB_USER": "alice", "RSA_API": "/nonexistent/rsad.sock",
            "RSA_ALLOWED_ROOTS": str(tmp_path / "pfs"), "RSA_NODE_DIR": str(tmp_path / "n"),
            "RSA_PROLOG_TIMEOUT": "5", **extra}


def test_rsad_unreachable_the_prolog_exits_0_and_says_pfs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert hooks.prolog(env(tmp_path)) == 0
    assert "uses the PFS" in capsys.readouterr().err
    assert not (tmp_path / "n").exists()


def test_without_slurm_environment_nothing_happens(tmp_path: Path) -> None:
    assert hooks.prolog({"RSA_API": "/x"}) == 0
    assert hooks.epilog({}) == 0


def test_nothing_to_do_makes_no_directory_and_starts_no_agent(
        tmp_path: Path, fake: type[FakeClient]) -> None:
    assert hooks.prolog(env(tmp_path)) == 0
    assert [p for p, _ in fake.posts] == ["/v1/hooks/prolog"]
    # the hook protocol it speaks: rsad tells an operator of nodes older than itself
    assert fake.posts[0][1] == {"job_id": "42", "node": "c1", "nodes": "c[1-2]",
                                "user": "alice", "protocol": PROTOCOL}
    assert not (tmp_path / "n").exists()


def test_wait_polls_again_until_told(tmp_path: Path, fake: type[FakeClient]) -> None:
    fake.answers = [{"do": "wait", "retry": 0.1}, {"do": "wait", "retry": 0.1},
                    {"do": "nothing"}]
    assert hooks.prolog(env(tmp_path)) == 0
    assert [p for p, _ in fake.posts].count("/v1/hooks/prolog") == 3


def test_a_refused_path_is_reported_and_nothing_is_mounted(
        tmp_path: Path, fake: type[FakeClient]) -> None:
    (tmp_path / "elsewhere").mkdir()
    fake.answers = [{"seq": 1, "do": "mount", "job_id": "42", "user": "", "role": "input",
                     "target": str(tmp_path / "elsewhere"), "mode": "ro",
                     "client_argv": ["/bin/false", MOUNTPOINT], "client_umount_argv": [],
                     "epoch": "1795965407.5"}]
    assert hooks.prolog(env(tmp_path)) == 0
    path, report = fake.posts[-1]
    assert path == "/v1/hooks/mounted"
    assert report["ok"] is False and "outside the allowed roots" in report["message"]
    assert report["seq"] == 1 and report["node"] == "c1"
    assert report["epoch"] == "1795965407.5"  # the rsad whose instruction it answers
    assert not (tmp_path / "n" / "c1" / "42" / "mounts.json").exists()


@pytest.mark.parametrize(("role", "directive"), [("input", "#RSA_DATA_IN"),
                                                 ("output", "#RSA_DATA_OUT")])
def test_a_directory_of_another_user_is_refused_naming_the_directive(
        tmp_path: Path, fake: type[FakeClient], role: str, directive: str) -> None:
    """Group-writable, but not the job user's own (uid 1001 in env): refused before
    anything is mounted, and the report tells the user which line to change."""
    target = tmp_path / "pfs" / "project"
    target.mkdir(parents=True, mode=0o777)
    target.chmod(0o2777)
    fake.answers = [{"seq": 3, "do": "mount", "job_id": "42", "user": "", "role": role,
                     "target": str(target), "mode": "rw",
                     "client_argv": ["/bin/false", MOUNTPOINT], "client_umount_argv": []}]
    assert hooks.prolog(env(tmp_path)) == 0
    report = fake.posts[-1][1]
    assert report["ok"] is False
    assert report["message"].startswith(f"refused: {directive}={target} is owned by ")
    assert "staging.shared_dirs" in report["message"]
    assert not (tmp_path / "n" / "c1" / "42" / "mounts.json").exists()


def test_shared_dirs_come_from_the_environment_or_the_configuration(
        tmp_path: Path) -> None:
    fast = hooks.settings(env(tmp_path, RSA_SHARED_DIRS="/proj/a:/proj/b"))
    assert fast.shared_dirs == ("/proj/a", "/proj/b")
    assert hooks.settings(env(tmp_path)).shared_dirs == ()
    conf = tmp_path / "rsa.yaml"
    conf.write_text("pool:\n  nodes:\n    - {names: rsa1, capacity: 2G}\n"
                    "staging:\n  shared_dirs: [/home/projects]\n")
    st = hooks.settings({"RSA_CONFIG": str(conf)})
    assert st.shared_dirs == ("/home/projects",)


def test_epilog_fast_path_does_not_call_rsad(tmp_path: Path, fake: type[FakeClient]) -> None:
    assert hooks.epilog(env(tmp_path)) == 0
    assert fake.posts == []


def test_epilog_releases_and_reports(tmp_path: Path, fake: type[FakeClient]) -> None:
    d = tmp_path / "n" / "c1" / "42"
    d.mkdir(parents=True)
    (d / "mounts.json").write_text('{"mounts": []}')
    assert hooks.epilog(env(tmp_path)) == 0
    assert fake.posts[-1][0] == "/v1/hooks/epilog" and fake.posts[-1][1]["ok"] is True
    assert fake.posts[-1][1]["protocol"] == PROTOCOL
    assert not d.exists()


def test_a_client_program_outside_the_allowlist_is_never_run(
        tmp_path: Path, fake: type[FakeClient]) -> None:
    import os

    target = tmp_path / "pfs" / "me" / "in"
    target.mkdir(parents=True)
    marker = tmp_path / "ran"
    fake.answers = [{"seq": 2, "do": "mount", "job_id": "42", "user": "", "role": "input",
                     "target": str(target), "mode": "ro",
                     "client_argv": ["/usr/bin/touch", str(marker), MOUNTPOINT],
                     "client_umount_argv": []}]
    assert hooks.prolog(env(tmp_path, SLURM_JOB_UID=str(os.getuid()))) == 0
    report = fake.posts[-1][1]
    assert report["ok"] is False and "refusing to run" in report["message"]
    assert not marker.exists()


def test_agent_answers_a_reissued_input_mount_from_the_nodes_state(tmp_path: Path) -> None:
    import json

    from rsa_scheduler.node.agent import input_state
    from rsa_scheduler.node.mounts import JobMounts

    jm = JobMounts("7", "c1", str(tmp_path))
    ins = {"do": "mount", "role": "input", "seq": 4, "target": "/pfs/a/in", "mode": "ro"}
    jm.prepare()
    no = input_state(jm, ins)
    assert no["ok"] is False and "runs from the PFS" in no["message"]
    jm.state_file.write_text(json.dumps({"mounts": [
        {"kind": "client", "path": str(jm.ramdisk)},
        {"kind": "target", "path": "/pfs/a/in", "seq": 1, "role": "input", "mode": "ro"}]}))
    yes = input_state(jm, ins)
    assert yes == {"seq": 4, "ok": True,
                   "message": "RAMDISK already mounted over /pfs/a/in (ro)"}
    assert input_state(jm, {**ins, "mode": "union"})["ok"] is False


def test_the_prolog_writes_a_declined_jobs_state(tmp_path: Path) -> None:
    """A declined job (no mount, no agent, no option) still gets its job.env: pfs, why."""
    from rsa_scheduler.node import hooks, jobstate

    st = hooks.Settings("unix:/x", 2.0, 10.0, ("/pfs",), str(tmp_path))
    hooks.note_start(None, st, "7", "c1", {"do": "nothing", "agent": False,
                                           "declined": "no RSA node holds 9T"}, None, {})
    text = (tmp_path / "c1" / "7" / jobstate.FILE).read_text()
    assert "RSA_STATE=pfs" in text and "no RSA node holds 9T" in text
    hooks.note_start(None, st, "8", "c1", {"do": "nothing", "agent": False}, None, {})
    assert not (tmp_path / "c1" / "8").exists()  # not an RSA job: untouched


def _sleeper(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", *args])


def test_the_epilog_stops_the_jobs_agent_and_nothing_a_reused_pid_runs(
        tmp_path: Path) -> None:
    agent = _sleeper(hooks.AGENT_MODULE, "7")
    stranger = _sleeper("something", "else")
    try:
        jm = cast(Any, SimpleNamespace(dir=tmp_path, job="7"))
        (tmp_path / "agent.pid").write_text(f"{stranger.pid}\n")
        hooks.stop_agent(jm, grace=0.5)  # the pid now runs something else: left alone
        assert stranger.poll() is None
        (tmp_path / "agent.pid").write_text(f"{agent.pid}\n")
        hooks.stop_agent(cast(Any, SimpleNamespace(dir=tmp_path, job="8")), grace=0.5)
        assert agent.poll() is None  # another job's agent
        hooks.stop_agent(jm, grace=0.5)
        with pytest.raises(ProcessLookupError):  # gone (and reaped: it is our child here)
            os.kill(agent.pid, 0)
    finally:
        for p in (agent, stranger):
            p.kill()
            p.wait(5)


@pytest.mark.parametrize("why", ["symlink", "not theirs", "another user"])
def test_a_refused_mount_still_loads_the_guard_before_the_job_starts(
        tmp_path: Path, fake: type[FakeClient], monkeypatch: pytest.MonkeyPatch,
        why: str) -> None:
    """A job whose mount the node refuses (its DATA_IN swapped for a symlink after
    rsad's check, a directory not its user's, an instruction for another user) runs from
    the PFS on this node: it must be guarded like a plain job. On the code before, only
    the mount loaded the guard, after the checks: a user who had a path refused ran
    the first job on a freshly booted node with no table, and reached every RAMDISK
    server of other users."""
    import shutil

    from rsa_scheduler.fs import mfsproxy
    from rsa_scheduler.node import mounts

    loaded: list[str] = []
    monkeypatch.setattr(mounts, "run", lambda argv, input, timeout: loaded.append(input))
    monkeypatch.setattr(shutil, "which", lambda *a, **k: "/usr/sbin/nft")
    pfs = tmp_path / "pfs"
    (pfs / "real").mkdir(parents=True)
    target = pfs / "in"
    if why == "symlink":
        target.symlink_to(pfs / "real")
    else:
        target.mkdir()
    guard = "mfsproxy=127.83.65.1,rsaguard=10.0.0.5@20000-29983"
    fake.answers = [{"seq": 1, "do": "mount", "job_id": "42",
                     "user": "mallory" if why == "another user" else "", "role": "input",
                     "target": str(target), "mode": "ro", "guard": guard,
                     "client_argv": ["mfsmount", MOUNTPOINT, "-o", guard],
                     "client_umount_argv": []}]
    assert hooks.prolog(env(tmp_path)) == 0
    report = fake.posts[-1][1]
    assert report["ok"] is False  # refused: nothing mounted ...
    assert loaded == [mfsproxy.ruleset("127.83.65.1", mfsproxy.Servers(
        ("10.0.0.5",), 20000, 29983))]  # ... and the node guarded all the same


def test_a_plain_jobs_prolog_loads_the_guard_rsad_names(
        tmp_path: Path, fake: type[FakeClient], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    # rsad's answer to a job it does not serve still names the guard: the node loads it
    # before the job starts (a plain job's user must not reach the RSA nodes' servers)
    import shutil

    from rsa_scheduler.fs import mfsproxy
    from rsa_scheduler.node import mounts

    loaded: list[str] = []
    monkeypatch.setattr(mounts, "run", lambda argv, input, timeout: loaded.append(input))
    monkeypatch.setattr(shutil, "which", lambda *a, **k: "/usr/sbin/nft")
    guard = "mfsproxy=127.83.65.1,rsaguard=10.0.0.5+10.0.0.6@20000-29983"
    fake.answers = [{"do": "nothing", "agent": False, "guard": guard}]
    assert hooks.prolog(env(tmp_path)) == 0
    assert loaded == [mfsproxy.ruleset("127.83.65.1", mfsproxy.Servers(
        ("10.0.0.5", "10.0.0.6"), 20000, 29983))]
    # no directory of the node's or the job's: only the record of what the node guards
    assert sorted(os.listdir(tmp_path / "n")) == ["guard.json", "guard.lock"]
    # a node without nft says so in slurmd's log; the job (which mounts nothing) runs
    monkeypatch.setattr(shutil, "which", lambda *a, **k: None)
    fake.answers = [{"do": "nothing", "agent": False, "guard": guard}]
    assert hooks.prolog(env(tmp_path)) == 0
    assert "rsa-prolog job 42: cannot keep this node's users off the RSA nodes' servers: " \
        "nft not found; install nftables here" in capsys.readouterr().err


def test_the_epilog_releases_the_jobs_mounts_even_when_the_configuration_is_unreadable(
        tmp_path: Path, fake: type[FakeClient], capsys: pytest.CaptureFixture[str]) -> None:
    """Found by review: the Epilog read the configuration (rsad's address, its timeout)
    before it released anything, and an error there ended it: a rsa.yaml broken or
    removed while jobs ran (an edit, an upgrade) left every ending job's RAMDISK mounted
    over its user's directory, node-wide, for the jobs after it. The release needs
    nothing of it: now it is done all the same, and the line says why rsad was not told."""
    d = tmp_path / "n" / "c1" / "42"
    d.mkdir(parents=True)
    (d / "mounts.json").write_text(
        '{"mounts": [{"kind": "bind", "path": "%s"}]}' % (tmp_path / "not-mounted"))
    (tmp_path / "rsa.yaml").write_text("pool: [unclosed\n")
    e = env(tmp_path, RSA_CONFIG=str(tmp_path / "rsa.yaml"),
            RSA_CLIENT_CONFIG=str(tmp_path / "none.conf"))
    del e["RSA_API"]
    assert hooks.epilog(e) == 0
    assert not d.exists()  # released and removed
    err = capsys.readouterr().err
    assert "rsa-epilog job 42: rsad not told of the release:" in err
    assert fake.posts == []


def test_a_namespace_that_cannot_be_dropped_still_tells_rsad_the_ramdisk_is_released(
        tmp_path: Path, fake: type[FakeClient], capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by review: under ``hooks.mounts: job`` the Epilog released the job's mounts
    inside its namespace, then an error dropping the namespace's handle skipped the
    report to rsad, whose stage-out then waited for this node's Epilog up to
    ``reset_timeout`` (90 s by default, 3 × ``hooks.timeout`` if longer;
    NodeSide.await_epilogs). Now rsad hears the release, and the job's directory is kept
    with a line that says why."""
    from rsa_scheduler.node import namespace

    d = tmp_path / "n" / "c1" / "42"
    d.mkdir(parents=True)
    (d / "mounts.json").write_text(
        '{"mounts": [{"kind": "bind", "path": "%s"}]}' % (tmp_path / "not-mounted"))

    def refuse(_self: object) -> None:
        raise namespace.NamespaceError("cannot drop the job's mount namespace: busy")

    monkeypatch.setattr(namespace.JobNamespace, "exists", lambda _self: True)
    monkeypatch.setattr(namespace.JobNamespace, "entered", lambda _self: contextlib.nullcontext())
    monkeypatch.setattr(namespace.JobNamespace, "destroy", refuse)
    assert hooks.epilog(env(tmp_path)) == 0
    assert [p for p, _ in fake.posts] == ["/v1/hooks/epilog"]
    assert fake.posts[0][1]["ok"] is True
    assert d.exists()  # kept: the handle is still there
    err = capsys.readouterr().err
    assert "rsa-epilog job 42: released, but cannot drop the job's mount namespace: busy " \
        f"(kept in {d})" in err


def test_the_node_agent_reports_an_unexpected_failure_and_keeps_serving(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by review: an exception the mount code did not expect (not a refused path,
    not a mount error) ended the node agent: rsad then waited for this node's report
    of the reset up to ``reset_timeout`` and no later instruction reached the node. Now
    the failure is reported for that instruction and the agent serves the next one."""
    from rsa_scheduler.node import agent

    posts: list[tuple[str, dict[str, Any]]] = []
    answers: list[dict[str, Any]] = [
        {"seq": 3, "do": "mount", "role": "output", "target": "/x"},
        {"seq": 4, "do": "release"}, {"do": "exit"}]

    class Rsad:
        def __init__(self, address: str, timeout: float, trust_uid: int | None = None) -> None:
            pass

        def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
            posts.append((path, body))
            return answers.pop(0) if path == "/v1/hooks/agent" else {}

    def boom(ins: dict[str, Any], *_a: object) -> dict[str, Any]:
        if ins["do"] == "mount":
            raise ValueError("unexpected")
        return {"seq": ins["seq"], "ok": True, "message": "released"}

    import rsa_scheduler.client

    monkeypatch.setattr(rsa_scheduler.client, "ApiClient", Rsad)
    monkeypatch.setattr(agent, "execute", boom)
    (tmp_path / "n" / "c1" / "42").mkdir(parents=True)
    assert agent.serve("42", env(tmp_path)) == 0
    reports = [b for p, b in posts if p == "/v1/hooks/mounted"]
    assert [(r["seq"], r["ok"]) for r in reports] == [(3, False), (4, True)]
    assert reports[0]["message"] == "the node agent failed to mount: ValueError: unexpected"


@pytest.mark.parametrize("failure", ["timeout", "error", "timeout amid the mount"])
def test_a_prolog_that_does_not_finish_after_its_report_undoes_the_mount_and_says_so(
        tmp_path: Path, fake: type[FakeClient], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], failure: str) -> None:
    """The bug: the Prolog mounted the RAMDISK and reported it, then met its hard
    timeout (or an error) before the job's agent ran. It undid the mount on the timeout
    (on an error it kept it, and slurmd's log said the job uses the PFS), but never told
    rsad, which went on counting the node among those that hold the RAMDISK: the reset
    waited for the release of a node with no agent, failed busy and drained it. Now the
    mount is undone either way (the job uses the PFS there, as the line says) and rsad
    is told, as a failed report to the same instruction (NodeSide.report). A timeout
    amid the mount (no report yet) says so at once: rsad's step no longer waits for this
    node until its own timeout (35 s by default) to fail."""
    from rsa_scheduler.node.mounts import JobMounts, Released

    released: list[bool] = []

    def release(_self: JobMounts, *, lazy: bool) -> Released:
        released.append(lazy)
        return Released(True, False, "released")

    def stop(*_a: object) -> None:
        if failure == "timeout":
            raise hooks.HookTimeout("hard timeout of 5s")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(JobMounts, "release", release)
    def execute(ins: dict[str, Any], *_a: object) -> dict[str, Any]:
        if failure == "timeout amid the mount":
            raise hooks.HookTimeout("hard timeout of 5s")
        return {"seq": ins["seq"], "ok": True, "message": "RAMDISK mounted over /pfs/in (ro)"}

    monkeypatch.setattr(hooks, "execute", execute)
    monkeypatch.setattr(hooks, "start_agent", stop)
    fake.answers = [{"seq": 4, "do": "mount", "job_id": "42", "user": "", "role": "input",
                     "target": "/pfs/in", "mode": "ro", "agent": True, "epoch": "E1",
                     "client_argv": ["mfsmount", MOUNTPOINT], "client_umount_argv": []}]
    assert hooks.prolog(env(tmp_path)) == 0
    reports = [b for p, b in fake.posts if p == "/v1/hooks/mounted"]
    sent = [(4, True, "E1")] if failure != "timeout amid the mount" else []
    assert [(r["seq"], r["ok"], r["epoch"]) for r in reports] == [*sent, (4, False, "E1")]
    assert reports[-1]["undone"] is True  # takes the mount back (NodeSide.report)
    why = "[Errno 28] No space left on device" if failure == "error" else "hard timeout of 5s"
    assert reports[-1]["message"].startswith(f"the Prolog did not finish ({why}"), reports[-1]
    assert reports[-1]["message"].endswith(
        "what it had mounted of the RAMDISK over /pfs/in was undone; the job uses the PFS "
        "on c1")
    assert released == [True]  # lazily, as the timeout's unwind always did
    assert "the job uses the PFS" in capsys.readouterr().err


def test_an_agent_that_ignores_sigterm_is_killed_and_reaped(tmp_path: Path) -> None:
    """After SIGKILL the Epilog went on at once: the agent (here its child) stayed a
    zombie, and one still in its mount or release held the job's mounts while the
    Epilog released them. Now it is waited for until it is gone."""
    agent = subprocess.Popen(
        [sys.executable, "-c", "import signal, time; "
         "signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); "
         "time.sleep(60)", hooks.AGENT_MODULE, "7"], stdout=subprocess.PIPE)
    try:
        assert agent.stdout is not None and agent.stdout.readline() == b"ready\n"
        (tmp_path / "agent.pid").write_text(f"{agent.pid}\n")
        hooks.stop_agent(cast(Any, SimpleNamespace(dir=tmp_path, job="7")), grace=0.5)
        with pytest.raises(ProcessLookupError):  # gone, and no zombie left
            os.kill(agent.pid, 0)
    finally:
        agent.kill()
        agent.wait(5)
        if agent.stdout is not None:
            agent.stdout.close()


@pytest.mark.parametrize("recorded", ["reported", "before the attach", "release fails"])
def test_a_prolog_killed_by_its_backstop_has_its_mount_undone_and_taken_back(
        tmp_path: Path, fake: type[FakeClient], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], recorded: str) -> None:
    """The wrapper's backstop killed the Prolog between its mount and its report (or
    after the report, before its end): before, the mount stayed under the job, and
    rsad, never told (or told it was mounted), did not count the node (or went on
    counting it): a reset or a teardown destroyed the RAMDISK under it, a stage-out did
    not wait for its Epilog. Now ``prolog-killed`` undoes it lazily before the job starts
    and takes it back with the instruction's number and epoch (NodeSide.report); a mount
    it cannot undo stays counted (nothing said)."""
    from rsa_scheduler.node.mounts import JobMounts, Released

    released: list[bool] = []

    def release(_self: JobMounts, *, lazy: bool) -> Released:
        released.append(lazy)
        if recorded == "release fails":
            return Released(False, False, "umount: /pfs/in: Invalid argument")
        return Released(True, False, "released")

    monkeypatch.setattr(JobMounts, "release", release)
    jobdir = tmp_path / "n" / "c1" / "42"
    jobdir.mkdir(parents=True)
    mounts: list[dict[str, Any]] = [{"kind": "client", "path": str(jobdir / "ramdisk"),
                                     "seq": 4}]
    if recorded != "before the attach":
        mounts.append({"kind": "target", "path": "/pfs/in", "seq": 4, "epoch": "E1",
                       "role": "input"})
    import json

    (jobdir / "mounts.json").write_text(json.dumps({"job": "42", "node": "c1", "seq": 4,
                                                    "mounts": mounts}))
    assert hooks.prolog_killed(env(tmp_path)) == 0
    assert released == [True]  # lazily: a hung mount is detached, never touched
    reports = [b for p, b in fake.posts if p == "/v1/hooks/mounted"]
    err = capsys.readouterr().err
    if recorded != "reported":
        assert reports == []  # never reported (rsad never counted it), or still mounted
        assert ("could not undo" in err) == (recorded == "release fails")
        return
    assert [(r["seq"], r["ok"], r["undone"], r["epoch"]) for r in reports] == [
        (4, False, True, "E1")]
    assert reports[0]["message"] == (
        "the Prolog was killed by its wrapper's backstop (stuck past its hard timeout): "
        "what it had mounted of the RAMDISK over /pfs/in was undone; the job uses the PFS "
        "on c1")
    assert "the job uses the PFS on c1" in err


def test_after_a_prolog_killed_before_it_made_anything_nothing_happens(
        tmp_path: Path, fake: type[FakeClient]) -> None:
    assert hooks.prolog_killed(env(tmp_path)) == 0
    assert fake.posts == [] and not (tmp_path / "n").exists()


def test_rsa_prolog_timeout_is_the_epilogs_hard_timeout_as_its_page_says(
        tmp_path: Path, fake: type[FakeClient], monkeypatch: pytest.MonkeyPatch) -> None:
    """``RSA_PROLOG_TIMEOUT`` (with RSA_API and RSA_ALLOWED_ROOTS) stands for
    hooks.timeout, which both hooks share: it arms the Epilog's hard timeout too. The
    Epilog's man page called it "the hook's hard timeout" under a Prolog's name, and
    named neither the Epilog nor its wrapper's backstop (RSA_EPILOG_BACKSTOP, 20 s),
    which kills an Epilog given more before its own timeout unwinds it."""
    from rsa_scheduler import manpages

    armed: list[float] = []
    monkeypatch.setattr(hooks, "_alarm", armed.append)
    d = tmp_path / "n" / "c1" / "42"
    d.mkdir(parents=True)
    (d / "mounts.json").write_text('{"mounts": []}')
    assert hooks.epilog(env(tmp_path, RSA_PROLOG_TIMEOUT="7")) == 0
    assert armed[:1] == [7.0]
    for page in ("rsa-epilog.8", "rsa-prolog.8"):
        said = dict(manpages.ENVIRONMENT[page])["RSA_HOOK_TIMEOUT, RSA_PROLOG_TIMEOUT, "
                                                 "RSA_SHARED_DIRS"]
        assert "the hard timeout of the Prolog and of the Epilog alike" in said, page
        assert "RSA_EPILOG_BACKSTOP, 20 s" in said, page
    from tests.conftest import hook_wrapper

    backstop = hook_wrapper("rsa-epilog").read_text()
    assert '"${RSA_EPILOG_BACKSTOP:-20}"' in backstop
