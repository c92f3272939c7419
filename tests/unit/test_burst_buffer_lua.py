"""slurm_plugins/burst_buffer.lua outside Slurm (native mode), and job_submit.lua's
native-mode rule (the ``#BB_LUA`` line, no start hold).

The script runs in a real Lua 5.1 interpreter (Debian's burst_buffer_lua.so links
liblua5.1) with a stubbed ``slurm`` table (tests/lua/run_bb.lua); ``rsa-bb`` is replaced
by a shell script that records its arguments and prints a chosen answer. Against the real
slurmctld: tests/e2e/test_native.py.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "slurm_plugins" / "burst_buffer.lua"
JOB_SUBMIT = ROOT / "slurm_plugins" / "job_submit.lua"
DRIVER = ROOT / "tests" / "lua" / "run_bb.lua"
VECTOR = ROOT / "tests" / "lua" / "run_vector.lua"
LUA = "lua5.1"

#: what Slurm 22.05's burst_buffer/lua requires (req_fxns), and 24.05's two extras
REQUIRED = {"slurm_bb_job_process", "slurm_bb_pools", "slurm_bb_job_teardown",
            "slurm_bb_setup", "slurm_bb_data_in", "slurm_bb_real_size", "slurm_bb_paths",
            "slurm_bb_pre_run", "slurm_bb_post_run", "slurm_bb_data_out",
            "slurm_bb_get_status"}
EXTRAS = {"slurm_bb_test_data_in", "slurm_bb_test_data_out"}


@pytest.fixture(autouse=True)
def _lua() -> None:
    if shutil.which(LUA) is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"no {LUA}: apt-get install {LUA}")
        pytest.skip(f"no {LUA}: apt-get install {LUA}")


@dataclass
class Called:
    nret: int = 0
    rc: str = ""
    msg: list[str] = field(default_factory=list)
    log: list[str] = field(default_factory=list)


def call(fn: str, *args: str, config: dict[str, str] | None = None,
         slurm: str = "22.05") -> Called:
    env = {**os.environ, "RSA_BB_SLURM": slurm,
           "RSA_BB_CONFIG": ",".join(f"{k}={v}" for k, v in (config or {}).items())}
    done = subprocess.run([LUA, str(DRIVER), str(PLUGIN), fn, *args], capture_output=True,
                          text=True, timeout=30, check=False, env=env)
    assert done.returncode == 0, done.stderr
    got = Called()
    for line in done.stdout.splitlines():
        key, _, value = line.partition(" ")
        if key == "NRET":
            got.nret = int(value)
        elif key == "RC":
            got.rc = value
        elif key == "MSG":
            got.msg.append(value)
        elif key == "LOG":
            got.log.append(value)
    return got


def fake_rsa_bb(tmp_path: Path, answer: str, stderr: str = "",
                after: str = "") -> tuple[Path, Path]:
    """A stand-in for rsa-bb: records its arguments one per line, prints ``answer`` on
    stdout, ``stderr`` on stderr before it and ``after`` on stderr after it."""
    args = tmp_path / "args"
    script = tmp_path / "rsa-bb"
    script.write_text(f"#!/bin/sh\nfor a in \"$@\"; do echo \"$a\"; done > {args}\n"
                      + (f"printf '%s\\n' '{stderr}' >&2\n" if stderr else "")
                      + f"printf '%s\\n' '{answer}'\n"
                      + (f"printf '%s' '{after}' >&2\n" if after else ""))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script, args


def test_every_hook_slurm_22_05_requires_is_defined() -> None:
    done = subprocess.run([LUA, str(DRIVER), str(PLUGIN), "defined"], capture_output=True,
                          text=True, timeout=30, check=True)
    names = {line.split()[1] for line in done.stdout.splitlines()}
    assert names == REQUIRED | EXTRAS


def test_setup_passes_slurms_arguments_to_rsa_bb_in_order(tmp_path: Path) -> None:
    script, args = fake_rsa_bb(tmp_path, "ok set up")
    got = call("slurm_bb_setup", "42", "1001", "1001", "(null)", "0", "/state/script",
               config={"rsa_bb": str(script), "api": "127.0.0.1:6820"})
    assert (got.nret, got.rc, got.msg) == (2, "0", ["set up"])
    assert args.read_text().split("\n")[:-1] == [
        "--api", "127.0.0.1:6820", "setup", "42", "1001", "1001", "(null)", "0"]


def test_a_failed_stage_in_returns_rsads_line_for_the_jobs_reason(tmp_path: Path) -> None:
    line = ("stage-in of job 42 failed: the user cannot read DATA_IN: cannot read "
            "/pfs/x: Permission denied; fix it, then scancel the job and submit it again")
    script, args = fake_rsa_bb(tmp_path, f"error {line}")
    got = call("slurm_bb_data_in", "42", "/state/script", config={"rsa_bb": str(script)})
    assert (got.rc, got.msg) == ("-1", [line])
    assert args.read_text().split("\n")[:-1] == ["data_in", "42"]
    assert any("data_in of job 42" in entry for entry in got.log)


def test_a_failures_message_is_one_line_without_a_bar(tmp_path: Path) -> None:
    """A message naming a user's file ``a|b`` and with a second line: Slurm makes it the
    job's reason, which rsad reads in its ``|``-separated squeue line; on real 24.11 and
    26.05 such a reason made rsad's queue read fail, and its second line read as a row of
    a job of root's (tests/slurm_release/test_release.py::test_a_failed_stage_in_in_the_queue)."""
    forged = "9|RUNNING|None|1|1|root|debug|5:00|x|y|0|rsa1:i=/etc"
    script, _ = fake_rsa_bb(tmp_path, f"error cannot read /pfs/u/in/a|b: gone\n{forged}")
    for hook in ("slurm_bb_test_data_in", "slurm_bb_setup", "slurm_bb_test_data_out"):
        got = call(hook, "42", "/s", config={"rsa_bb": str(script), "poll": "true"},
                   slurm="24.11")
        assert (got.rc, got.msg) == ("-1", ["cannot read /pfs/u/in/a%7Cb: gone "
                                            + forged.replace("|", "%7C")]), hook
    # no answer at all: rsa-bb's own output, the same way
    script, _ = fake_rsa_bb(tmp_path, "Traceback |x|\nboom")
    got = call("slurm_bb_test_data_in", "42", config={"rsa_bb": str(script), "poll": "true"},
               slurm="24.11")
    assert got.rc == "-1" and "|" not in got.msg[0] and "\n" not in got.msg[0], got.msg


def test_the_answer_comes_from_rsa_bbs_stdout_alone_and_its_stderr_is_logged(
        tmp_path: Path) -> None:
    """On main rsa-bb ran with ``2>&1`` and the first line starting with ``ok``, ``busy``
    or ``error`` was the answer: a stray stderr line before the real answer (a Python
    warning, a library's message) starting with ``ok`` made a failed stage-in "done", and
    Slurm would have started the job without its input; stderr after the answer went
    into the job's reason and bbstat's text. Now the answer is read from stdout alone and
    stderr goes to slurmctld's log."""
    script, _ = fake_rsa_bb(tmp_path, "error stage-in of job 42 failed: cannot read /pfs/x",
                            stderr="ok: a warning from a library",
                            after="DeprecationWarning: x\nok trailing, no newline")
    for hook, slurm in (("slurm_bb_data_in", "22.05"), ("slurm_bb_test_data_in", "24.11")):
        got = call(hook, "42", "/s", config={"rsa_bb": str(script)}, slurm=slurm)
        assert (got.rc, got.msg) == ("-1", ["stage-in of job 42 failed: cannot read "
                                            "/pfs/x"]), (hook, got)
        assert ("rsa: data_in of job 42: rsa-bb's stderr: ok: a warning from a library "
                "DeprecationWarning: x ok trailing, no newline") in got.log, got.log
    # a stderr "error" line does not fail a stage that runs, nor an "ok" one end it
    script, _ = fake_rsa_bb(tmp_path, "busy staging in", stderr="error: noise",
                            after="ok noise")
    got = call("slurm_bb_test_data_out", "42", "/s", config={"rsa_bb": str(script)},
               slurm="24.11")
    assert (got.rc, got.msg) == ("0", ["BUSY"]), got
    # bbstat's lines are rsa-bb's stdout, without what came on stderr between them
    script, _ = fake_rsa_bb(tmp_path, "ok RSA nodes: 4, free 3\njobs: locked-in 1",
                            stderr="error: noise", after="more noise\n")
    got = call("slurm_bb_get_status", config={"rsa_bb": str(script)})
    assert (got.rc, got.msg) == ("0", ["RSA nodes: 4, free 3", "jobs: locked-in 1"]), got
    assert any("rsa-bb's stderr: error: noise more noise" in e for e in got.log), got.log


def test_without_an_answer_on_stdout_rsa_bbs_stderr_says_why(tmp_path: Path) -> None:
    """rsa-bb that cannot even start (a broken install: Python's traceback on stderr):
    the job's reason ends with the last words it printed, stderr included, as before."""
    script, _ = fake_rsa_bb(tmp_path, "", stderr="Traceback (most recent call last):\n"
                            "ModuleNotFoundError: No module named rsa_scheduler")
    got = call("slurm_bb_setup", "42", "1001", "1001", "(null)", "0", "/s",
               config={"rsa_bb": str(script)})
    assert got.rc == "-1" and got.msg[0].startswith("rsa-bb setup gave no answer (is "), got
    assert got.msg[0].endswith("ModuleNotFoundError: No module named rsa_scheduler"), got
    assert "\036" not in got.msg[0] and "\x1e" not in got.msg[0]


def test_teardown_passes_hurry_and_arguments_are_never_shell_code(tmp_path: Path) -> None:
    script, args = fake_rsa_bb(tmp_path, "ok no RAMDISK left")
    got = call("slurm_bb_job_teardown", "42", "/s", "true; touch /tmp/pwned'",
               config={"rsa_bb": str(script)})
    assert got.rc == "0"
    assert args.read_text().split("\n")[:-1] == ["teardown", "42", "true; touch /tmp/pwned'"]


def test_a_missing_rsa_bb_fails_with_a_line_saying_so(tmp_path: Path) -> None:
    got = call("slurm_bb_pre_run", "42", "/s", config={"rsa_bb": str(tmp_path / "none")})
    assert got.rc == "-1"
    assert got.msg[0].startswith("rsa-bb pre_run gave no answer (is ")
    assert got.msg[0].endswith("not found"), got.msg  # sh's words, on its stderr


def test_bbstat_shows_rsads_lines(tmp_path: Path) -> None:
    script, _ = fake_rsa_bb(tmp_path, "ok RSA nodes: 4, free 3\njobs: locked-in 1")
    got = call("slurm_bb_get_status", "a", config={"rsa_bb": str(script)})
    assert (got.rc, got.msg) == ("0", ["RSA nodes: 4, free 3", "jobs: locked-in 1"])


def test_bbstat_passes_rsa_bb_the_callers_uid_only_when_slurm_gives_it(
        tmp_path: Path) -> None:
    """Slurm 22.05 passes slurm_bb_get_status only the words typed after "bbstat": a
    user typing ``scontrol show bbstat 0 0`` must not pass for root (rsa-bb then shows
    totals without job ids). Slurm 23.02+ passes the authenticated uid and gid first:
    with CONFIG.status_caller, rsa-bb gets the uid (issue 36)."""
    script, args = fake_rsa_bb(tmp_path, "ok RSA nodes: 4, free 3")
    assert call("slurm_bb_get_status", "0", "0", config={"rsa_bb": str(script)}).rc == "0"
    assert args.read_text().split("\n")[:-1] == ["status"]
    caller = {"rsa_bb": str(script), "status_caller": "true"}
    assert call("slurm_bb_get_status", "1002", "1002", "foo", config=caller).rc == "0"
    assert args.read_text().split("\n")[:-1] == ["status", "1002"]
    assert call("slurm_bb_get_status", "x;id", "0", config=caller).rc == "0"
    assert args.read_text().split("\n")[:-1] == ["status"]


def test_bbstat_passes_the_callers_uid_by_itself_on_slurm_24(tmp_path: Path) -> None:
    """Left unset, status_caller follows the running Slurm: 24.05 and later (whose
    burst_buffer/lua defines slurm.SLURM_BB_BUSY) pass the caller's uid and gid first,
    22.05 does not (issue 31; on a real 24.11 slurmctld: tests/slurm_release)."""
    script, args = fake_rsa_bb(tmp_path, "ok RSA nodes: 4, free 3")
    assert call("slurm_bb_get_status", "1002", "1002", config={"rsa_bb": str(script)},
                slurm="24.11").rc == "0"
    assert args.read_text().split("\n")[:-1] == ["status", "1002"]
    assert call("slurm_bb_get_status", "1002", "1002", config={"rsa_bb": str(script)},
                slurm="22.05").rc == "0"
    assert args.read_text().split("\n")[:-1] == ["status"]


def test_on_slurm_24_the_stage_hooks_return_at_once_and_the_polls_ask_rsad_once(
        tmp_path: Path) -> None:
    """Slurm 24.05+ polls test_data_in/out every PollInterval until their message is not
    slurm.SLURM_BB_BUSY: data_in/data_out return at once (no rsa-bb, no helper process
    held for the stage) and each poll is one `rsa-bb --once` (issue 31)."""
    script, args = fake_rsa_bb(tmp_path, "busy staging in: 3 of 10 files")
    cfg = {"rsa_bb": str(script)}
    for hook in ("slurm_bb_data_in", "slurm_bb_data_out"):
        assert call(hook, "42", "/s", "1002", "1002", config=cfg, slurm="24.11").rc == "0"
    assert not args.exists()
    got = call("slurm_bb_test_data_in", "42", "/s", "1002", "1002", config=cfg,
               slurm="24.11")
    assert (got.rc, got.msg) == ("0", ["BUSY"])
    assert args.read_text().split("\n")[:-1] == ["--once", "data_in", "42"]
    assert any("data_in of job 42: staging in: 3 of 10 files" in e for e in got.log)
    script, args = fake_rsa_bb(tmp_path, "ok staged out and verified")
    got = call("slurm_bb_test_data_out", "42", "/s", config={"rsa_bb": str(script)},
               slurm="24.11")
    assert (got.rc, got.msg) == ("0", ["staged out and verified"])
    assert args.read_text().split("\n")[:-1] == ["--once", "data_out", "42"]
    script, _ = fake_rsa_bb(tmp_path, "error cannot read /pfs/x")
    got = call("slurm_bb_test_data_in", "42", "/s", config={"rsa_bb": str(script)},
               slurm="24.11")
    assert (got.rc, got.msg) == ("-1", ["cannot read /pfs/x"])
    # poll = false: data_in blocks as on 22.05, and its poll is done at once
    script, args = fake_rsa_bb(tmp_path, "ok staged in")
    blocking = {"rsa_bb": str(script), "poll": "false"}
    assert call("slurm_bb_data_in", "42", "/s", config=blocking, slurm="24.11").msg == [
        "staged in"]
    assert args.read_text().split("\n")[:-1] == ["data_in", "42"]
    assert call("slurm_bb_test_data_in", "42", "/s", config=blocking,
                slurm="24.11").msg == [""]
    # 22.05 has no BUSY: a "busy" answer there is no answer
    script, _ = fake_rsa_bb(tmp_path, "busy staging")
    assert call("slurm_bb_data_in", "42", "/s", config={"rsa_bb": str(script)}).rc == "-1"



def test_poll_set_by_hand_never_makes_a_slurm_that_does_not_poll_skip_the_stage(
        tmp_path: Path) -> None:
    """CONFIG.poll = true on a Slurm without test_data_in/out (22.05, 23.x: no
    slurm.SLURM_BB_BUSY): on main data_in and data_out returned at once, which such a
    Slurm takes for "staged in" / "staged out": the job started without its input, and
    its stage-out ended before its output was on the PFS. Now they block until rsad
    answers, and the setting is logged as ignored."""
    script, args = fake_rsa_bb(tmp_path, "ok staged in")
    cfg = {"rsa_bb": str(script), "poll": "true"}
    got = call("slurm_bb_data_in", "42", "/s", config=cfg)
    assert (got.rc, got.msg) == ("0", ["staged in"])
    assert args.read_text().split("\n")[:-1] == ["data_in", "42"]
    assert any("CONFIG.poll is true, but this Slurm does not poll" in e for e in got.log)
    script, args = fake_rsa_bb(tmp_path, "ok staged out and verified")
    got = call("slurm_bb_data_out", "42", "/s", config={**cfg, "rsa_bb": str(script)})
    assert (got.rc, got.msg) == ("0", ["staged out and verified"])
    assert args.read_text().split("\n")[:-1] == ["data_out", "42"]
    # and on 24.11 poll = true is what Slurm says anyway: at once, then polled
    args.unlink()
    assert call("slurm_bb_data_in", "42", "/s", config=cfg, slurm="24.11").msg == [""]
    assert not args.exists()

def test_bbstat_failing_is_a_line_too(tmp_path: Path) -> None:
    script, _ = fake_rsa_bb(tmp_path, "error rsa-bb status: cannot reach rsad")
    got = call("slurm_bb_get_status", config={"rsa_bb": str(script)})
    assert (got.rc, got.msg) == ("-1", ["rsa-bb status: cannot reach rsad"])


def test_pools_come_from_rsads_file_and_no_file_means_empty_pools(tmp_path: Path) -> None:
    pools = tmp_path / "bb-pools.json"
    got = call("slurm_bb_pools", config={"pools_file": str(pools)})
    # rsad has not written its file yet: the configured pools, no space (Slurm then
    # accepts jobs naming them, and they wait, instead of refusing them)
    assert got.rc == "0"
    assert json.loads(got.msg[0]) == {"pools": [
        {"free": 0, "granularity": 1048576, "id": "ram", "quantity": 0}]}
    text = '{"pools": [{"free": 2048, "granularity": 1048576, "id": "ram", "quantity": 8192}]}'
    pools.write_text(text + "\n")
    got = call("slurm_bb_pools", config={"pools_file": str(pools)})
    assert (got.rc, got.msg) == ("0", [text])
    pools.write_text("garbage")
    got = call("slurm_bb_pools", config={"pools_file": str(pools)})
    assert got.nret == 1 and any("not rsad's pools JSON" in e for e in got.log)


def test_paths_and_job_process_stay_local(tmp_path: Path) -> None:
    path_file = tmp_path / "path"
    path_file.write_text("")
    got = call("slurm_bb_paths", "42", "/s", str(path_file),
               config={"rsa_bb": str(tmp_path / "must-not-run")})
    assert got.rc == "0" and path_file.read_text() == "RSA_MODE=native\n"
    assert call("slurm_bb_job_process", "/s").rc == "0"
    assert call("slurm_bb_test_data_in", "42", "/s").rc == "0"


def test_a_path_file_slurm_never_made_does_not_hold_the_job(tmp_path: Path) -> None:
    # Slurm 24.11 gives a task split off an array (job id 10 of array 9) a path file in
    # hash.0/job.10/, which does not exist: paths failing made Slurm hold the task
    # ("Burst Buffer request invalid") with its input staged (the cluster lab, 24.11)
    path_file = tmp_path / "hash.0" / "job.10" / "path"
    got = call("slurm_bb_paths", "10", "/s", str(path_file),
               config={"rsa_bb": str(tmp_path / "must-not-run")})
    assert got.rc == "0", got
    assert any("paths of job 10: cannot write" in line and "without RSA_MODE" in line
               for line in got.log), got.log
    assert not path_file.exists()


# --- job_submit.lua in native mode ----------------------------------------------------------

def submit(tmp_path: Path, script: str, **config: str) -> dict[str, str]:
    job = tmp_path / "job.sh"
    job.write_text(script)
    env = {**os.environ, "RSA_LUA_CONFIG": ",".join(f"{k}={v}" for k, v in config.items())}
    done = subprocess.run([LUA, str(VECTOR), str(JOB_SUBMIT), "submit", str(job)],
                          capture_output=True, text=True, timeout=30, check=True, env=env)
    sets = {}
    for line in done.stdout.splitlines():
        if line.startswith("SET "):
            key, _, value = line[4:].partition(" ")
            sets[key] = value
        assert not line.startswith("RC ") or line == "RC 0", done.stdout
    return sets


def test_native_mode_gives_rsa_jobs_the_bb_line_and_no_start_hold(tmp_path: Path) -> None:
    sets = submit(tmp_path, "#!/bin/bash\n#RSA_DATA_IN=/pfs/home/a/in\nhostname\n",
                  bb_directive="BB_LUA")
    assert sets["burst_buffer"] == "#BB_LUA pool=ram capacity=1M"
    assert sets["admin_comment"].startswith("rsa1:") and " hold=" not in sets["admin_comment"]
    assert "begin_time" not in sets
    # queue mode (the default): the start hold, no burst buffer
    sets = submit(tmp_path, "#!/bin/bash\n#RSA_DATA_IN=/pfs/home/a/in\nhostname\n")
    assert "burst_buffer" not in sets and " hold=" in sets["admin_comment"]


def test_the_bb_line_is_sized_so_slurm_accounts_the_ramdisk(tmp_path: Path) -> None:
    """Slurm calls real_size (rsad's answer: the RSA nodes the job got, the bb/lua TRES)
    only for a job with pool= and capacity=: the line names the job's tier and capacity."""
    sets = submit(tmp_path, "#!/bin/bash\n#RSA_DATA_OUT=/pfs/home/a/out\n#RSA_TIER=ssd\n"
                  "#RSA_CAPACITY=1536M\ntrue\n", bb_directive="BB_LUA")
    assert sets["burst_buffer"] == "#BB_LUA pool=ssd capacity=1536M"
    odd = submit(tmp_path, "#!/bin/bash\n#RSA_DATA_OUT=/pfs/home/a/out\n"
                 "#RSA_CAPACITY=1500K\ntrue\n", bb_directive="BB_LUA")
    assert odd["burst_buffer"] == "#BB_LUA pool=ram capacity=2M"  # rounded up to MiB
    huge = submit(tmp_path, "#!/bin/bash\n#RSA_DATA_OUT=/pfs/home/a/out\n"
                  "#RSA_CAPACITY=1P\ntrue\n", bb_directive="BB_LUA")
    assert huge["burst_buffer"] == f"#BB_LUA pool=ram capacity={1 << 30}M"
    # auto (or no tier): the site's pool
    auto = submit(tmp_path, "#!/bin/bash\n#RSA_DATA_OUT=/pfs/home/a/out\n#RSA_TIER=auto\n"
                  "true\n", bb_directive="BB_LUA", bb_pool="ssd")
    assert auto["burst_buffer"] == "#BB_LUA pool=ssd capacity=1M"


def test_a_job_with_its_own_bb_line_or_without_rsa_work_is_left_alone(
        tmp_path: Path) -> None:
    own = submit(tmp_path, "#!/bin/bash\n#BB_LUA\n#RSA_DATA_OUT=/pfs/home/a/out\ntrue\n",
                 bb_directive="BB_LUA")
    assert "burst_buffer" not in own and own["admin_comment"].startswith("rsa1:")
    none = submit(tmp_path, "#!/bin/bash\n#RSA_NODES=2\ntrue\n", bb_directive="BB_LUA")
    assert "burst_buffer" not in none
    plain = submit(tmp_path, "#!/bin/bash\ntrue\n", bb_directive="BB_LUA")
    assert plain == {}
