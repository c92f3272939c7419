"""prolog_epilog/rsa-site-hooks and the four shipped wrappers that chain a site's own
Slurm scripts with ours: which scripts run, in what order, and whose exit status Slurm
sees (docs/operator-guide.md, "Chaining with a site's own Slurm scripts"). Real sh, real
scripts in a directory of the test's own; our Python side is a recorder (RSA_PYTHON)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HOOKS = ROOT / "prolog_epilog"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="site scripts must be root's")


def _script(path: Path, body: str, mode: int = 0o755) -> Path:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(mode)
    return path


def _run(argv: list[str], site: Path, log: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False,
                          env={"PATH": "/usr/bin:/bin", "RSA_SITE_HOOKS": str(site),
                               "LOG": str(log), "SLURM_JOB_ID": "42", **env})


@pytest.fixture
def site(tmp_path: Path) -> Path:
    base = tmp_path / "etc-rsa"
    for hook in ("prolog", "epilog", "prolog-slurmctld", "epilog-slurmctld"):
        (base / f"site-{hook}.d").mkdir(parents=True, mode=0o755)
    os.chmod(tmp_path, 0o755)
    return base


@pytest.fixture
def ours(tmp_path: Path) -> Path:
    """A stand-in for the Python of rsa_scheduler: logs what it was asked, then fails
    (ours failing must never change the hook's exit status)."""
    return _script(tmp_path / "python", 'echo "ours $*" >> "$LOG"; exit 7')


def _lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def test_the_site_scripts_run_in_name_order_with_the_hooks_arguments(
        site: Path, tmp_path: Path) -> None:
    d = site / "site-prolog.d"
    for name in ("20-b", "10-a", "B_upper", "9"):
        _script(d / name, f'echo "{name} $* $SLURM_JOB_ID" >> "$LOG"')
    _script(d / "30-skipped.dpkg-old", 'echo "no" >> "$LOG"')  # not a run-parts name
    _script(d / "40-not-executable", 'echo "no" >> "$LOG"', mode=0o644)
    (d / "README").write_text("not a script\n")
    log = tmp_path / "log"
    done = _run([str(HOOKS / "rsa-site-hooks"), "prolog", "x"], site, log)
    assert done.returncode == 0, done.stderr
    assert _lines(log) == ["10-a x 42", "20-b x 42", "9 x 42", "B_upper x 42"]


def test_no_site_directory_is_nothing_to_run(tmp_path: Path) -> None:
    done = _run([str(HOOKS / "rsa-site-hooks"), "epilog"], tmp_path / "none", tmp_path / "l")
    assert (done.returncode, done.stderr) == (0, "")


def test_the_first_failing_site_script_ends_the_chain_with_its_status(
        site: Path, tmp_path: Path) -> None:
    d = site / "site-epilog.d"
    _script(d / "10-a", 'echo a >> "$LOG"')
    _script(d / "20-fails", 'echo b >> "$LOG"; echo "site: node unhealthy" >&2; exit 3')
    _script(d / "30-c", 'echo c >> "$LOG"')
    log = tmp_path / "log"
    done = _run([str(HOOKS / "rsa-site-hooks"), "epilog"], site, log)
    assert done.returncode == 3
    assert _lines(log) == ["a", "b"]
    assert done.stderr.splitlines() == [
        "site: node unhealthy", f"rsa-epilog: site script {d}/20-fails exited 3"]


@pytest.mark.parametrize("what", ["directory", "script"])
def test_site_scripts_others_may_write_are_never_run(
        site: Path, tmp_path: Path, what: str) -> None:
    d = site / "site-prolog.d"
    script = _script(d / "10-a", 'echo ran >> "$LOG"')
    (d if what == "directory" else script).chmod(0o775 if what == "directory" else 0o757)
    log = tmp_path / "log"
    done = _run([str(HOOKS / "rsa-site-hooks"), "prolog"], site, log)
    assert done.returncode == 1
    assert _lines(log) == []
    target = d if what == "directory" else script
    assert f"{target} " in done.stderr and f"chmod go-w {target}" in done.stderr, done.stderr


def test_a_failing_site_prolog_fails_the_prolog_and_ours_does_not_run(
        site: Path, ours: Path, tmp_path: Path) -> None:
    _script(site / "site-prolog.d" / "10-gate", 'echo gate >> "$LOG"; exit 5')
    log = tmp_path / "log"
    done = _run([str(HOOKS / "rsa-prolog")], site, log, RSA_PYTHON=str(ours))
    assert done.returncode == 5
    assert _lines(log) == ["gate"]


def test_the_site_prolog_runs_before_ours_and_ours_never_fails_the_prolog(
        site: Path, ours: Path, tmp_path: Path) -> None:
    _script(site / "site-prolog.d" / "10-gate", 'echo gate >> "$LOG"')
    log = tmp_path / "log"
    done = _run([str(HOOKS / "rsa-prolog")], site, log, RSA_PYTHON=str(ours))
    assert done.returncode == 0, done.stderr
    assert _lines(log) == ["gate", "ours -m rsa_scheduler.node.hooks prolog"]


def test_the_site_epilog_runs_after_ours_and_its_status_is_the_epilogs(
        site: Path, ours: Path, tmp_path: Path) -> None:
    _script(site / "site-epilog.d" / "10-clean", 'echo clean >> "$LOG"; exit 4')
    log = tmp_path / "log"
    done = _run([str(HOOKS / "rsa-epilog")], site, log, RSA_PYTHON=str(ours))
    assert done.returncode == 4
    assert _lines(log) == ["ours -m rsa_scheduler.node.hooks epilog", "clean"]


def test_the_slurmctld_hooks_chain_the_same_way(
        site: Path, ours: Path, tmp_path: Path) -> None:
    _script(site / "site-prolog-slurmctld.d" / "10-p", 'echo p >> "$LOG"; exit 2')
    _script(site / "site-epilog-slurmctld.d" / "10-e", 'echo e >> "$LOG"')
    log = tmp_path / "log"
    done = _run([str(HOOKS / "rsa-prolog-slurmctld")], site, log, RSA_PYTHON=str(ours))
    assert done.returncode == 2 and _lines(log) == ["p"]
    log.unlink()
    done = _run([str(HOOKS / "rsa-epilog-slurmctld")], site, log, RSA_PYTHON=str(ours))
    assert done.returncode == 0, done.stderr
    assert [ln.split(" -c ")[0] for ln in _lines(log)] == ["ours", "e"]


def test_without_site_scripts_the_hooks_exit_0_as_before(
        tmp_path: Path, ours: Path) -> None:
    """The node hooks whatever ours did; the slurmctld hooks as rsa-hook exits (0)."""
    fine = _script(tmp_path / "python-ok", 'echo "ours $*" >> "$LOG"')
    for hook, python in (("rsa-prolog", ours), ("rsa-epilog", ours),
                         ("rsa-prolog-slurmctld", fine), ("rsa-epilog-slurmctld", fine)):
        done = _run([str(HOOKS / hook)], tmp_path / "none", tmp_path / "log",
                    RSA_PYTHON=str(python))
        assert done.returncode == 0, (hook, done.stderr)
    assert len(_lines(tmp_path / "log")) == 4


def test_a_prolog_killed_by_the_backstop_is_followed_by_its_undo(
        site: Path, tmp_path: Path) -> None:
    """Our Prolog stuck past the wrapper's backstop (a call hung in the kernel, where its
    own hard timeout cannot unwind it) is killed; before, the job then started with
    whatever it had mounted, rsad never told. Now the wrapper runs the undo
    (``prolog-killed``: node/hooks.py ``prolog_killed``), bounded, and still exits 0;
    a Prolog that ends by itself is followed by nothing."""
    stuck = _script(tmp_path / "python",
                    'echo "ours $*" >> "$LOG"; [ "$3" = prolog ] && exec sleep 30; exit 0')
    log = tmp_path / "log"
    t0 = time.monotonic()
    done = _run([str(HOOKS / "rsa-prolog")], site, log, RSA_PYTHON=str(stuck),
                RSA_PROLOG_BACKSTOP="1")
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - t0 < 20
    assert _lines(log) == ["ours -m rsa_scheduler.node.hooks prolog",
                           "ours -m rsa_scheduler.node.hooks prolog-killed"]
    log.unlink()
    done = _run([str(HOOKS / "rsa-prolog")], site, log,
                RSA_PYTHON=str(_script(tmp_path / "quick", 'echo "ours $*" >> "$LOG"')))
    assert done.returncode == 0 and _lines(log) == ["ours -m rsa_scheduler.node.hooks prolog"]
