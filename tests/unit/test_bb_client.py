"""rsa-bb, the hook client of native mode: its blocking poll (injected clock, no sleeps),
its arguments, and the one line it prints for Slurm."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from rsa_scheduler.bb import (
    Refused,
    Unreachable,
    ask_once,
    call_hook,
    request_body,
    run,
    status_of,
    status_text,
)


class Rsad:
    """Scripted answers (or exceptions), one per call; the clock advances by the sleeps."""

    def __init__(self, *answers: object) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.now = 0.0

    def post(self, path: str, body: Mapping[str, Any]) -> Any:
        self.calls.append((path, dict(body)))
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def clock(self) -> float:
        return self.now


def hook(rsad: Rsad, name: str, **kw: Any) -> tuple[bool, str]:
    return call_hook(rsad.post, name, {"job_id": "42"}, sleep=rsad.sleep, clock=rsad.clock,
                     **kw)


def test_data_in_blocks_until_rsad_says_staged() -> None:
    rsad = Rsad({"status": "wait", "message": "building the RAMDISK"},
                {"status": "wait", "message": "staging in"},
                {"status": "done", "message": "staged in on rsa1"})
    assert hook(rsad, "data_in") == (True, "staged in on rsa1")
    assert [p for p, _ in rsad.calls] == ["/v1/bb/data_in"] * 3 and rsad.now == 2.0


def test_a_failure_is_rsads_one_line() -> None:
    rsad = Rsad({"status": "wait", "message": "staging in"},
                {"status": "failed", "message": "stage-in of job 42 failed: x"})
    assert hook(rsad, "data_in") == (False, "stage-in of job 42 failed: x")
    refused = Rsad(Refused("rsad runs in queue mode"))
    ok, line = hook(refused, "setup")
    assert not ok and line == "rsad refused setup of job 42: rsad runs in queue mode"


def test_a_restarting_rsad_does_not_fail_a_stage_but_a_dead_one_does() -> None:
    rsad = Rsad(*[Unreachable("connection refused")] * 5,
                {"status": "done", "message": "staged in"})
    assert hook(rsad, "data_in") == (True, "staged in")
    dead = Rsad(Unreachable("connection refused"))
    ok, line = hook(dead, "data_out", unreachable=300.0)
    assert not ok and line.startswith("data_out of job 42: rsad unreachable (connection "
                                      "refused) for 300s; Slurm keeps job 42 in stage-out")
    assert "start rsad" not in line  # starting rsad releases nothing in Slurm
    quick = Rsad(Unreachable("connection refused"))
    ok, _ = hook(quick, "setup")  # not a blocking hook: gives up under OtherTimeout
    assert not ok and quick.now == 240.0


def test_teardown_answers_before_slurms_other_timeout() -> None:
    rsad = Rsad({"status": "wait", "message": "tearing down (verifying)"})
    ok, line = hook(rsad, "teardown", teardown_wait=240.0)
    assert not ok and "after 240s rsad still says: tearing down (verifying)" in line
    assert rsad.now == 240.0


def test_a_non_blocking_hook_asks_again_under_slurms_other_timeout() -> None:
    rsad = Rsad({"status": "wait", "message": "rsad is starting"})
    ok, line = hook(rsad, "pre_run")
    assert not ok and rsad.now == 240.0
    assert line == ("job 42: after 240s rsad still says: rsad is starting; Slurm requeues "
                    "job 42 (held after 3 tries) and sets its burst buffer up again")
    odd = Rsad({"status": "maybe"})
    ok, line = hook(odd, "pre_run")
    assert not ok and "rsad and rsa-bb differ" in line and odd.now == 0.0


def test_once_asks_rsad_once_and_says_busy_while_it_stages() -> None:
    """``--once`` (Slurm 24.05+ polls test_data_in/out): one question per call, no
    blocking; a stage running, or rsad not answering now, is busy (Slurm asks again at its
    next PollInterval); done and failed are rsad's lines (issue 31)."""
    rsad = Rsad({"status": "wait", "message": "staging in: 3 of 10 files"})
    assert ask_once(rsad.post, "data_in", {"job_id": "42"}) == (
        None, "staging in: 3 of 10 files")
    assert rsad.calls == [("/v1/bb/data_in", {"job_id": "42"})] and rsad.now == 0
    assert ask_once(Rsad({"status": "done", "message": "staged in"}).post, "data_out",
                    {"job_id": "42"}) == (True, "staged in")
    assert ask_once(Rsad({"status": "failed", "message": "cannot read /pfs/x"}).post,
                    "data_in", {"job_id": "42"}) == (False, "cannot read /pfs/x")
    busy, line = ask_once(Rsad(Unreachable("connection refused")).post, "data_in",
                          {"job_id": "42"})
    assert busy is None and line.startswith("rsad unreachable (connection refused)")
    assert ask_once(Rsad(Refused("no such job", 404)).post, "data_in", {"job_id": "42"}) == (
        False, "rsad refused data_in of job 42: no such job")
    assert run(["--once", "teardown", "42"], {}) == (
        False, "rsa-bb --once: only for data_in and data_out, not teardown")


def test_arguments_become_the_api_body() -> None:
    assert request_body("setup", ["42", "1001", "1001", "(null)", "0"]) == {
        "job_id": "42", "uid": "1001", "gid": "1001", "pool": "(null)", "size": "0"}
    assert request_body("teardown", ["42", "true"]) == {"job_id": "42", "hurry": "true"}
    assert request_body("teardown", ["42", "yes"])["hurry"] == "false"
    with pytest.raises(ValueError, match="must be a job id"):
        request_body("data_in", ["42; rm"])


def test_unknown_hooks_and_bad_job_ids_are_one_line() -> None:
    assert run(["nope"], {}) == (False, "rsa-bb: unknown hook 'nope'; see rsa-bb -h")
    ok, line = run(["--api", "127.0.0.1:1", "data_in", "x"], {})
    assert not ok and "must be a job id" in line


def test_bbstat_text() -> None:
    text = status_text({"nodes": [
        {"name": "rsa1", "state": "up", "job": None},
        {"name": "rsa2", "state": "up", "job": "42"},
        {"name": "rsa3", "state": "drained", "job": None}],
        "jobs_by_rsa_state": {"locked-in": 1}})
    assert text.split("\n") == ["RSA nodes: 3, free 1 (rsa1)", "  rsa2 up job 42",
                                "  rsa3 drained", "jobs: locked-in 1"]


def test_bbstat_without_the_callers_uid_names_no_job() -> None:
    """Slurm 22.05 does not say who runs ``scontrol show bbstat``: rsa-bb (SlurmUser, an
    operator to rsad) shows totals only; with the caller's uid (Slurm 23.02+) rsad's view
    for that uid, whose other users' jobs are ``(hidden)`` (issue 36)."""
    asked: list[str] = []
    full: dict[str, Any] = {"nodes": [{"name": "rsa1", "state": "up", "job": None},
                      {"name": "rsa2", "state": "up", "job": "42"},
                      {"name": "rsa3", "state": "down", "job": "43"}],
            "jobs_by_rsa_state": {"locked-in": 2}}
    mine = {**full, "nodes": [{**n, "job": "(hidden)" if n["job"] == "42" else n["job"]}
                              for n in full["nodes"]]}

    def get(path: str) -> dict[str, Any]:
        asked.append(path)
        return full if path == "/v1/status" else mine

    text = status_of(get, None)
    assert text.split("\n") == ["RSA nodes: 3, free 1 (rsa1)", "  rsa2 up held",
                                 "  rsa3 down held", "jobs: locked-in 2"]
    assert status_of(get, "1002").split("\n")[1:3] == ["  rsa2 up job (hidden)",
                                                         "  rsa3 down job 43"]
    assert asked == ["/v1/status", "/v1/status?as=1002"]
    with pytest.raises(ValueError, match="UID must be a number"):
        status_of(get, "root")


# ---- rsa-bb pools: rsad's pools on a slurmctld host without rsad -------------------------

POOLS = {"pools": [{"id": "ram", "quantity": 2048, "granularity": 1048576, "free": 1024}]}


def test_pools_are_written_where_slurm_bb_pools_reads_them(tmp_path: Path) -> None:
    from rsa_scheduler.bb import sync_pools

    asked: list[str] = []
    target = tmp_path / "run" / "rsa" / "bb-pools.json"

    def get(path: str) -> Any:
        asked.append(path)
        return POOLS
    assert sync_pools(get, target, None) == (True, f"{target} written")
    assert asked == ["/v1/bb/pools"]
    assert json.loads(target.read_text()) == POOLS
    assert target.stat().st_mode & 0o777 == 0o644
    assert sync_pools(get, target, None) == (True, f"{target} unchanged")



def test_a_symlink_planted_in_the_pools_files_directory_is_never_written_through(
        tmp_path: Path) -> None:
    """rsad and rsa-bb pools write the pools file as root. Someone else who may write in
    its directory (a site's slurm.bb_pools_file in SlurmUser's state directory, or a
    shared one) plants a symlink where the temporary copy went, naming a file of
    root's: on main root truncated that file, wrote the pools into it and made it
    world-readable (0644). Now the copy is a file of its own; the victim is untouched."""
    from rsa_scheduler.bb import replace_pools_file, write_pools_file

    victim = tmp_path / "shadow"
    victim.write_text("root's secret\n")
    victim.chmod(0o600)
    shared = tmp_path / "shared"
    shared.mkdir()
    target = shared / "bb-pools.json"
    (shared / ".bb-pools.json.tmp").symlink_to(victim)
    assert write_pools_file(target, json.dumps(POOLS))
    assert victim.read_text() == "root's secret\n"
    assert victim.stat().st_mode & 0o777 == 0o600
    assert json.loads(target.read_text()) == POOLS and not target.is_symlink()
    assert target.stat().st_mode & 0o777 == 0o644
    # a symlink planted as the pools file itself is replaced, never written through
    target.unlink()
    target.symlink_to(victim)
    replace_pools_file(target, json.dumps(POOLS))
    assert victim.read_text() == "root's secret\n" and not target.is_symlink()
    # nothing but the file and the planted link are left in the directory
    assert sorted(p.name for p in shared.iterdir()) == [".bb-pools.json.tmp",
                                                         "bb-pools.json"]

def test_a_failed_round_keeps_the_file_and_the_loop_goes_on(tmp_path: Path) -> None:
    from rsa_scheduler.bb import sync_pools

    target = tmp_path / "bb-pools.json"
    answers: list[Any] = [POOLS, Unreachable("rsad restarting"), {"pools": "x"},
                          {"pools": [{**POOLS["pools"][0], "free": 0}]}]
    said: list[str] = []
    slept: list[float] = []
    seen: list[str] = []

    def get(path: str) -> Any:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        seen.append(target.read_text() if target.exists() else "")
        return answer
    ok, _ = sync_pools(get, target, 15.0, sleep=slept.append, say=said.append, rounds=4)
    assert ok and slept == [15.0, 15.0, 15.0]
    assert said == [f"rsa-bb pools: rsad restarting ({target} kept as it was)",
                    f"rsa-bb pools: rsad's answer is not a pools list ({target} kept as "
                    "it was)"]
    assert json.loads(seen[1]) == POOLS  # the bad answer left the first round's file
    assert json.loads(target.read_text())["pools"][0]["free"] == 0


def test_pools_arguments_are_one_line_when_wrong() -> None:
    from rsa_scheduler.bb import POOLS_FILE, pools_args

    assert pools_args([]) == (Path(POOLS_FILE), None)
    assert pools_args(["/x/p.json", "--every", "15"]) == (Path("/x/p.json"), 15.0)
    for bad, line in ((["p.json"], "absolute FILE"), (["--every"], "give SECONDS"),
                      (["--every", "0"], "between 1 and 3600"), (["/a", "/b"], "one")):
        with pytest.raises(ValueError, match=line):
            pools_args(bad)
    assert run(["pools", "rel"], {"RSA_API": "/nonexistent.sock"}) == (
        False, "rsa-bb pools: give one absolute FILE (burst_buffer.lua's "
               "CONFIG.pools_file) or none")


def test_rsa_bbs_stdout_carries_its_answer_alone() -> None:
    """burst_buffer.lua takes the answer from rsa-bb's stdout: whatever else inside
    rsa-bb writes to stdout (a library's ``print``, here one starting with ``ok``) goes
    to stderr, and stdout holds the one answer line (on main the ``ok`` line came first
    on stdout, and burst_buffer.lua took it for the answer)."""
    import subprocess
    import sys

    code = ("import sys, warnings\n"
            "import rsa_scheduler.bb as bb\n"
            "def run(argv, env):\n"
            "    print('ok from a library')\n"
            "    warnings.warn('a warning')\n"
            "    return False, 'rsad refused setup of job 42: x'\n"
            "bb.run = run\n"
            "sys.argv = ['rsa-bb', 'setup', '42']\n"
            "bb.main()\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 1, done.stderr
    assert done.stdout == "error rsad refused setup of job 42: x\n"
    assert "ok from a library" in done.stderr and "a warning" in done.stderr


def test_rsa_bb_waits_for_rsads_own_answer_to_a_busy_moment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """rsad answers a request its loop does not take within 10 s itself (503, nothing
    done), and one it took but did not answer within 10 more (504): both TRANSIENT, with
    rsad's words. rsa-bb waited at least 10 s for an answer (RSA_HOOK_TIMEOUT and
    hooks.api_timeout are 2 s for rsa-hook), so it gave up just as rsad's 503 came and
    never saw a 504: its line said "rsad unreachable (... did not answer ...; is rsad
    running?)" of an rsad that was running, busy. Now it waits longer than rsad does; a
    longer RSA_HOOK_TIMEOUT still counts."""
    import inspect

    from rsa_scheduler import bb
    from rsa_scheduler.daemon.inbox import Inbox

    rsads_wait = 2 * inspect.signature(Inbox.submit).parameters["timeout"].default
    waits: list[float] = []

    def post_with(address: str | None, timeout: float) -> Any:
        waits.append(timeout)
        return (lambda path, body: {"status": "done", "message": "staged"}), None

    monkeypatch.setattr(bb, "_post_with", post_with)
    assert run(["setup", "42"], {"RSA_API": "/x", "RSA_HOOK_TIMEOUT": "2"})[0] is True
    assert run(["--api", "/x", "--once", "data_in", "42"], {})[0] is True
    assert run(["data_out", "42"], {"RSA_API": "/x", "RSA_HOOK_TIMEOUT": "45"})[0] is True
    assert waits[0] > rsads_wait and waits[1] > rsads_wait, (waits, rsads_wait)
    assert waits[2] == 45
