"""``rsa selftest`` against the live lab (issue 33): green on the lab as it is, every step
passed with its time, in both modes (native: Slurm's burst buffer hooks drive the same
steps); red at the right step with the right fix when an RSA node lacks a tool (rsync
made unusable on the last RSA node in that node's namespace only, and back afterwards)."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.integration.conftest import slurm_env
from tests.integration.slurmkit import lab_command_hidden, lab_nodes, root, wait_for


def selftest(lab: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([f"{lab['RSA_LAB_VENV']}/bin/rsa", "selftest", "--user",
                           lab["RSA_LAB_USER"], "--dir", lab["RSA_LAB_PFS"], "--config",
                           lab["RSA_LAB_RSA_CONFIG"], "--timeout", "240"],
                          capture_output=True, text=True, timeout=300, env=slurm_env(lab))


def _steps(out: str) -> dict[str, str]:
    """step name -> its status word, from the report's lines."""
    names = ("nodes", "submit check", "stage-in", "mount", "reset", "stage-out", "verify",
             "teardown")
    got = {}
    for line in out.splitlines():
        for name in names:
            if line.startswith(f"  {name} "):
                got[name] = line[15:].split()[0] if line[15:].strip() else ""
    return got


def test_selftest_passes_every_step_on_the_lab(lab: Mapping[str, str]) -> None:
    before = set(Path(lab["RSA_LAB_PFS"]).glob("rsa-selftest-*"))
    done = selftest(lab)
    assert done.returncode == 0, (done.stdout, done.stderr)
    steps = _steps(done.stdout)
    assert steps == dict.fromkeys(steps, "ok") and len(steps) == 8, done.stdout
    assert done.stdout.splitlines()[-1].startswith("rsa selftest: passed (8 steps, ")
    assert "the output on the PFS is what the job wrote" in done.stdout
    # it cleaned up after itself: no test directory left, no job of its left in Slurm
    assert set(Path(lab["RSA_LAB_PFS"]).glob("rsa-selftest-*")) == before
    # (native mode: Slurm ends the job once its data_out hook heard "done", a second)
    wait_for("the selftest's job gone from the queue",
             lambda: "rsa-selftest" not in root(lab, "squeue", "-h", "-o", "%j"), timeout=30)


@pytest.mark.once  # the RSA nodes' check alone: the same in both modes
def test_selftest_fails_at_the_nodes_step_with_the_fix_when_a_node_lacks_rsync(
        lab: Mapping[str, str]) -> None:
    node = lab_nodes(lab, "RSA_LAB_RSA_NODES")[-1]
    with lab_command_hidden(node, "rsync"):
        done = selftest(lab)
    assert done.returncode == 1, (done.stdout, done.stderr)
    lines = done.stdout.splitlines()
    assert _steps(done.stdout)["nodes"] == "FAILED", done.stdout
    failed = next(i for i, ln in enumerate(lines) if ln.startswith("  nodes "))
    assert lines[failed].endswith(f"{node} lacks command rsync"), lines
    assert lines[failed + 1].strip() == (
        f"fix: on {node}: install rsync, then run rsa selftest again (rsa nodes check {node} "
        "lists everything it lacks)")
    assert all(_steps(done.stdout)[s] == "not" for s in ("submit check", "teardown"))
    assert lines[-1] == "rsa selftest: FAILED at nodes"
