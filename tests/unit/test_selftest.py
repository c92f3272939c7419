"""``rsa selftest``'s judging (rsa_scheduler/cli/selfsteps.py) on rsad's answers, and its
test job's files (rsa_scheduler/cli/selftest.py): each step's time from the event
timeline, a failure put on the right step with one line to fix it, and the job's script
the real grammar accepts. The real run: tests/e2e/test_selftest.py."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from rsa_scheduler.cli.selfsteps import (
    FAILED,
    NOT_RUN,
    PASSED,
    RUNNING,
    STEPS,
    Step,
    fix_for,
    job_steps,
    nodes_step,
    report,
)
from rsa_scheduler.cli.selftest import expected_sums, input_files, job_script
from rsa_scheduler.core.directives import parse_directives

T0 = 1000.0
LIFE = ["allocated", "fs-building", "fs-ready", "staging-in", "staged-in", "locked-in",
        "mounting-input", "mounted-input", "resetting", "mounted-output", "staging-out",
        "verifying", "output-verified", "tearing-down", "released"]


def _job(states: list[str], rsa_state: str | None = None, message: str = "",
         **extra: Any) -> dict[str, Any]:
    events = [{"name": "job.tracked", "time": T0 + 0.5}]
    events += [{"name": "rsa.transition", "time": T0 + 1 + i, "to": s,
                **({"message": message} if s.endswith("failed") or s == "quarantined"
                   else {})} for i, s in enumerate(states)]
    return {"job_id": "42", "rsa_state": rsa_state or states[-1], "message": message,
            "events": events, **extra}


def test_a_whole_life_passes_every_step_with_its_time() -> None:
    steps = job_steps(_job(LIFE), T0, True, True)
    assert [s.name for s in steps] == list(STEPS[1:])
    assert all(s.status == PASSED for s in steps), steps
    times = {s.name: s.seconds for s in steps}
    # allocated (1) .. staged-in (5); resetting (9) .. mounted-output (10)
    assert times == {"submit check": 0.5, "stage-in": 4.0, "mount": 1.0, "reset": 1.0,
                     "stage-out": 1.0, "verify": 1.0, "teardown": 1.0}


def test_a_job_under_way_shows_the_step_it_is_in_and_nothing_after() -> None:
    steps = job_steps(_job(LIFE[:8]), T0, True, False)
    assert [(s.name, s.status) for s in steps] == [
        ("submit check", PASSED), ("stage-in", PASSED), ("mount", PASSED),
        ("reset", NOT_RUN), ("stage-out", NOT_RUN), ("verify", NOT_RUN),
        ("teardown", NOT_RUN)]
    steps = job_steps(_job(LIFE[:9]), T0, True, False)
    assert steps[3].status == RUNNING and steps[4].status == NOT_RUN


def test_a_node_lacking_a_tool_fails_the_stage_in_and_says_what_to_install() -> None:
    why = "stage-in: rsync on rsa3 failed (exit 127): sh: 1: rsync: not found"
    steps = job_steps(_job([*LIFE[:4], "stage-in-failed"], message=why), T0, True, False)
    failed = [s for s in steps if s.failed]
    assert [s.name for s in failed] == ["stage-in"]
    assert failed[0].detail == why
    assert failed[0].fix.startswith("install rsync on rsa3 "), failed[0].fix
    assert all(s.status == NOT_RUN for s in steps[2:])


def test_each_failure_state_fails_its_own_step() -> None:
    cases = {"reset-failed": "reset", "stage-out-failed": "stage-out",
             "quarantined": "stage-out", "teardown-failed": "teardown",
             "fs-failed": "stage-in"}
    for state, step in cases.items():
        life = LIFE[:LIFE.index({"reset": "resetting", "stage-out": "staging-out",
                                 "teardown": "tearing-down", "stage-in": "allocated"}[step])
                    + 1]
        steps = job_steps(_job([*life, state], message="boom"), T0, True, False)
        assert [s.name for s in steps if s.failed] == [step], (state, steps)


def test_a_cycle_that_ended_early_fails_the_first_step_it_skipped() -> None:
    # the job never called input-done (say `rsa` is not on a job's PATH): no reset; rsad
    # staged out what it had and released the nodes
    life = [s for s in LIFE if s not in ("resetting", "mounted-output")]
    steps = job_steps(_job(life, message="done"), T0, True, True)
    assert [s.name for s in steps if s.failed] == ["reset"], steps
    assert "rsa job 42" in next(s for s in steps if s.failed).fix


def test_a_job_rsad_never_learned_fails_the_submit_check() -> None:
    steps = job_steps(None, T0, False, True)
    assert steps[0].failed and "JobSubmitPlugins=lua" in steps[0].fix
    assert job_steps(None, T0, False, False)[0].status == RUNNING


def _nodes(*states: str) -> list[dict[str, Any]]:
    return [{"name": f"rsa{i}", "state": s, "reason": "health: no answer" if s == "down"
             else ""} for i, s in enumerate(states, start=1)]


def test_the_nodes_step() -> None:
    ok = nodes_step(_nodes("up", "up", "drained"), {"rsa1": (), "rsa2": ()}, {}, 0.5)
    assert (ok.status, ok.detail) == (PASSED, "2 up, nothing lacking; drained: rsa3")
    down = nodes_step(_nodes("up", "down"), {"rsa1": ()}, {}, 0.5)
    assert down.failed and down.detail == "rsa2 is down: health: no answer"
    assert down.fix == "rsa nodes check rsa2, fix what it says, then rsa resume rsa2"
    lacks = nodes_step(_nodes("up", "up"), {"rsa1": (), "rsa2": ("command rsync: install "
                                                                  "rsync",)}, {}, 0.5)
    assert lacks.failed and lacks.detail == "rsa2 lacks command rsync"
    assert lacks.fix.startswith("on rsa2: install rsync, then run rsa selftest again")
    none = nodes_step(_nodes("drained"), {}, {}, 0.1)
    assert none.failed and none.detail == "no RSA node is up"
    unreachable = nodes_step(_nodes("up"), {"rsa1": ()}, {"rsa1": "ssh: timed out"}, 0.1)
    assert unreachable.failed and "rsa drain rsa1" in unreachable.fix


def test_fix_lines_are_one_line_for_every_step() -> None:
    for step in STEPS:
        line = fix_for(step, "something odd", "42")
        assert line and "\n" not in line
    assert fix_for("stage-out", "ssh rsa2: lacks command tar").startswith(
        "install tar on the RSA node")


def test_the_report() -> None:
    lines = report([Step("nodes", PASSED, 0.25, "4 up"),
                    Step("stage-in", FAILED, None, "boom", "do this"),
                    Step("mount")])
    assert lines == ["  nodes         ok         0.2s  4 up",
                     "  stage-in      FAILED        -  boom",
                     "                fix: do this",
                     "  mount         not run       -"]


def test_the_test_job_is_an_rsa_job_with_input_output_and_reset() -> None:
    base = Path("/pfs/home/u/rsa-selftest-1")
    spec = parse_directives(job_script(base))
    assert str(spec.data_in) == f"{base}/in" and str(spec.data_out) == f"{base}/out"
    assert spec.reset is not None
    files = input_files(base.name)
    assert len(files) == 3 and all(base.name.encode() in d for d in files.values())
    assert expected_sums(files).splitlines()[0] == (
        f"{hashlib.sha256(files['f1']).hexdigest()}  f1")


def test_native_mode_refuses_root_as_the_test_user_with_one_line(
        tmp_path: Path, monkeypatch: Any) -> None:
    """Native mode: Slurm gives root's jobs no burst buffer, so a selftest as root would
    wait for a stage-in that never comes (on main it submitted and timed out)."""
    import os

    from click.testing import CliRunner

    from rsa_scheduler.cli.main import cli
    from tests.unit.test_quarantine_view import SITE

    site = tmp_path / "rsa.yaml"
    site.write_text(SITE.replace("STATE", str(tmp_path / "state")).replace(
        "slurm:\n", "slurm:\n  mode: native\n"))
    site.chmod(0o600)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    got = CliRunner().invoke(cli, ["selftest", "--user", "root", "--dir", str(tmp_path),
                                   "--config", str(site), "--api", "/nonexistent.sock"])
    assert got.exit_code == 2, got.output
    assert got.output.splitlines()[-1] == (
        "Error: --user root: in native mode (slurm.mode: native) Slurm gives root's jobs "
        "no burst buffer, so the RSA never serves them: give an ordinary user")
    assert not list(tmp_path.glob("rsa-selftest-*"))
