"""slurm_plugins/job_submit.lua inside the lab's real slurmctld (JobSubmitPlugins=lua).

Every shared directive vector goes through real `sbatch` as the lab user: bad scripts are
refused with exactly their `LINE: message` lines, good ones carry the `rsa1:` admin_comment.
A few vectors never reach the plugin because sbatch itself refuses the file first (no
`#!` line, DOS line breaks, a NUL byte, an empty file); for those sbatch's own message is
checked. Then the lock-in guard of slurm_job_modify: the user cannot undo it, root can.
Jobs are submitted held or with a far --begin, so they never take a node.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from rsa_scheduler.core.directives import DirectiveSpec, split_hold
from tests.conftest import DATA
from tests.integration.conftest import as_user
from tests.integration.slurmkit import Jobs, make_jobs, root, wait_for

VECTORS = DATA / "directives"
ERRORS = sorted(p.stem for p in VECTORS.glob("*.err"))
VALID = sorted(p.stem for p in VECTORS.glob("*.json"))
FAILED = "sbatch: error: Batch job submission failed: Unspecified error"
DENIED = "Access/permission denied"
PENDING = ("-t", "5", "--begin=now+3600")  # pending (BeginTime), priority untouched


def sbatch_refusal(script: bytes) -> str | None:
    """sbatch's own check that refuses the file before slurmctld (src/sbatch/sbatch.c)."""
    if not script:
        return "Batch script is empty!"
    if not script.startswith(b"#!"):
        return "This does not look like a batch script."
    if b"\r\n" in script:
        return "Batch script contains DOS line breaks (\\r\\n)"
    if b"\0" in script:
        return "The Slurm controller does not allow scripts that"
    return None


@pytest.fixture(scope="module")
def lua_loaded(lab: Mapping[str, str]) -> None:
    config = root(lab, "scontrol", "show", "config")
    if "JobSubmitPlugins        = lua" not in config:
        pytest.fail("the lab's slurmctld runs without JobSubmitPlugins=lua (lab/rsalab/slurm.py)")


@pytest.fixture(scope="module")
def jobs(lab: Mapping[str, str], lua_loaded: None) -> Iterator[Jobs]:
    with make_jobs(lab) as j:  # one cleanup for the module: nothing here takes a node
        yield j


@pytest.fixture(scope="module")
def scripts() -> Iterator[Path]:
    """The vectors, byte for byte, where the lab user can read them."""
    with tempfile.TemporaryDirectory(prefix="rsa-job-submit-") as tmp:
        d = Path(tmp)
        d.chmod(0o755)
        for p in VECTORS.glob("*.sh"):
            (d / p.name).write_bytes(p.read_bytes())
            (d / p.name).chmod(0o644)
        yield d


def sbatch(lab: Mapping[str, str], jobs: Jobs, script: Path, *args: str,
           user: str | None = None) -> tuple[int, str | None, list[str]]:
    """(exit code, job id or None, stderr lines) of `sbatch` run as the lab user."""
    argv = ["sbatch", "--parsable", "-o", "/dev/null", "--chdir=/tmp", *args, str(script)]
    done = as_user(lab, user or lab["RSA_LAB_USER"], argv)
    job = done.stdout.strip().split(";")[0] or None
    if job:
        jobs.ids.append(job)
    return done.returncode, job, done.stderr.splitlines()


def admin_comment(lab: Mapping[str, str], job: str) -> str:
    """The spec part (the start hold's marker, when there is one, is checked apart)."""
    return split_hold(raw_admin_comment(lab, job))[0]


def raw_admin_comment(lab: Mapping[str, str], job: str) -> str:
    text = root(lab, "squeue", "-h", "-O", "admin_comment:0", "-j", job).strip()
    return "" if text == "(null)" else text


@pytest.mark.parametrize("name", ERRORS)
def test_bad_script_refused_with_its_message(lab: Mapping[str, str], jobs: Jobs,
                                             scripts: Path, name: str) -> None:
    rc, job, err = sbatch(lab, jobs, scripts / f"{name}.sh", "-H")
    assert rc != 0 and job is None, (rc, job, err)
    own = sbatch_refusal((scripts / f"{name}.sh").read_bytes())
    if own:  # never reached slurmctld: sbatch's wording, checked by the unit tests for ours
        assert any(own in line for line in err), err
        return
    want = (VECTORS / f"{name}.err").read_text(encoding="utf-8").splitlines()
    assert err == [f"sbatch: error: {line}" for line in want] + [FAILED]


@pytest.mark.parametrize("name", VALID)
def test_good_script_carries_its_spec(lab: Mapping[str, str], jobs: Jobs, scripts: Path,
                                      name: str) -> None:
    rc, job, err = sbatch(lab, jobs, scripts / f"{name}.sh", "-H")
    own = sbatch_refusal((scripts / f"{name}.sh").read_bytes())
    if own:
        assert rc != 0 and any(own in line for line in err), err
        return
    assert rc == 0 and job, err
    spec = DirectiveSpec.from_json(json.loads((VECTORS / f"{name}.json").read_text("utf-8")))
    assert admin_comment(lab, job) == ("" if spec.is_empty else spec.to_admin_comment())
    if not spec.is_empty:
        assert DirectiveSpec.from_admin_comment(admin_comment(lab, job)) == spec
    # early start wait (the lab's default, as rsad's): held from submission (issue 14)
    work = any(x is not None for x in (spec.data_in, spec.data_out, spec.preprocess,
                                       spec.postprocess))
    held = work and (spec.early_start is None or spec.early_start.value == "wait")
    deadline = split_hold(raw_admin_comment(lab, job))[1]
    assert (deadline is not None) == held, raw_admin_comment(lab, job)


def test_job_without_directives_has_no_admin_comment(lab: Mapping[str, str], jobs: Jobs,
                                                     scripts: Path) -> None:
    plain = scripts / "plain.sh"
    plain.write_text("#!/bin/sh\n#SBATCH -J plain\n# RSA_DATA_IN=/not/a/directive\ntrue\n")
    plain.chmod(0o644)
    rc, job, err = sbatch(lab, jobs, plain, *PENDING)
    assert rc == 0 and job, err
    assert admin_comment(lab, job) == ""


def _submit_directive_job(lab: Mapping[str, str], jobs: Jobs, scripts: Path) -> str:
    script = scripts / "rsa.sh"
    script.write_text(f"#!/bin/sh\n#RSA_DATA_IN={lab['RSA_LAB_PFS']}/in\nsleep 60\n")
    script.chmod(0o644)
    rc, job, err = sbatch(lab, jobs, script, *PENDING)
    assert rc == 0 and job, err
    return job


def test_user_cannot_alter_admin_comment(lab: Mapping[str, str], jobs: Jobs,
                                         scripts: Path) -> None:
    """Slurm's own rule (job_mgr.c, before job_modify): only admins set AdminComment."""
    job = _submit_directive_job(lab, jobs, scripts)
    before = admin_comment(lab, job)
    done = as_user(lab, lab["RSA_LAB_USER"],
                   ["scontrol", "update", f"jobid={job}", "admincomment=rsa1:n=99"])
    assert done.returncode != 0 and DENIED in done.stderr
    assert admin_comment(lab, job) == before == f"rsa1:i={lab['RSA_LAB_PFS']}/in"
    # (sbatch 22.05 has no --admin-comment; job_mgr.c refuses one from a non-admin too)


def _qos_prio_nice(lab: Mapping[str, str], job: str) -> tuple[str, str, str]:
    line = root(lab, "squeue", "-h", "-o", "%q|%Q|%y", "-j", job).strip()
    qos, prio, nice = line.split("|")
    return qos, prio, nice


def test_locked_in_job_cannot_be_unlocked_by_its_user(lab: Mapping[str, str], jobs: Jobs,
                                                      scripts: Path) -> None:
    # the QOS job_submit.lua guards (its lockin_qos, the default): the lab's, or on the
    # cluster lab, which locks in by priority, the QOS its accounting has all the same
    qos = lab.get("RSA_LAB_QOS") or "rsa-lockin"
    if lab.get("RSA_LAB_ACCOUNTING") != "1":
        pytest.skip("lab without accounting: QOS lock-in needs slurmdbd")
    user = lab["RSA_LAB_USER"]
    job = _submit_directive_job(lab, jobs, scripts)
    root(lab, "scontrol", "update", f"jobid={job}", f"qos={qos}")
    locked = _qos_prio_nice(lab, job)
    assert locked[0] == qos
    for change in (["qos=normal"], ["priority=1"], ["nice=10"], ["qos=normal", "nice=0"]):
        done = as_user(lab, user, ["scontrol", "update", f"jobid={job}", *change])
        assert done.returncode != 0 and DENIED in done.stderr, (change, done)
    done = as_user(lab, user, ["scontrol", "hold", job])  # hold = priority 0
    assert done.returncode != 0 and DENIED in done.stderr
    assert _qos_prio_nice(lab, job) == locked
    # other changes stay the user's
    done = as_user(lab, user, ["scontrol", "update", f"jobid={job}", "comment=mine"])
    assert done.returncode == 0, done.stderr
    # root unlocks; then the job is the user's again
    root(lab, "scontrol", "update", f"jobid={job}", "qos=normal")
    wait_for("unlock", lambda: _qos_prio_nice(lab, job)[0] == "normal", timeout=60, every=0.2)
    done = as_user(lab, user, ["scontrol", "update", f"jobid={job}", "nice=10"])
    assert done.returncode == 0, done.stderr
    assert _qos_prio_nice(lab, job)[2] == "10"


def _priority_of(lab: Mapping[str, str], job: str) -> int:
    return int(_qos_prio_nice(lab, job)[1])


@pytest.mark.lockin
def test_priority_locked_in_job_cannot_be_unlocked_by_its_user(
        lab: Mapping[str, str], jobs: Jobs, scripts: Path) -> None:
    """Without accounting rsad locks in by priority; job_submit.lua's default
    lockin_priority is rsad's default slurm.lockin.priority (the lab's), so the user
    cannot undo it either."""
    if lab.get("RSA_LAB_LOCKIN_METHOD", "qos") != "priority":
        pytest.skip("the lab locks in by QOS (accounting on): see the test above")
    from rsa_scheduler.slurm.cli import CliSlurm

    lockin = int(lab["RSA_LAB_LOCKIN_PRIORITY"])
    slurm = CliSlurm(env={"PATH": "/usr/bin:/bin", "SLURM_CONF": lab["RSA_LAB_SLURM_CONF"]},
                     lockin_method="priority", lockin_priority=lockin)
    user = lab["RSA_LAB_USER"]
    job = _submit_directive_job(lab, jobs, scripts)
    # an ordinary job is the user's: lockin_priority lies above every ordinary priority
    assert _priority_of(lab, job) < lockin
    done = as_user(lab, user, ["scontrol", "update", f"jobid={job}", "nice=5"])
    assert done.returncode == 0, done.stderr
    own = slurm.lock_original(job)  # what rsad does after the stage-in
    slurm.lock_in(job)
    locked = _qos_prio_nice(lab, job)
    assert int(locked[1]) == lockin
    for change in (["priority=1"], ["nice=10"], ["qos=normal"], ["nice=0", "priority=5"]):
        done = as_user(lab, user, ["scontrol", "update", f"jobid={job}", *change])
        assert done.returncode != 0 and DENIED in done.stderr, (change, done)
    for verb in ("hold", "release"):  # hold sets priority 0; release recomputes it
        done = as_user(lab, user, ["scontrol", verb, job])
        assert done.returncode != 0 and DENIED in done.stderr, (verb, done)
    assert _qos_prio_nice(lab, job) == locked
    done = as_user(lab, user, ["scontrol", "update", f"jobid={job}", "comment=mine"])
    assert done.returncode == 0, done.stderr  # other changes stay the user's
    # root, as rsad ends a lock-in: its own priority back by an update (which Slurm
    # refuses on a held job: rsad never releases a hold); then the job is the user's
    assert slurm.unlock(job, own) == f"priority {own} restored"
    wait_for("unlock", lambda: _priority_of(lab, job) == int(own), timeout=60, every=0.2)
    done = as_user(lab, user, ["scontrol", "hold", job])
    assert done.returncode == 0, done.stderr
    assert _priority_of(lab, job) == 0


def test_root_may_change_a_locked_in_job(lab: Mapping[str, str], jobs: Jobs,
                                         scripts: Path) -> None:
    # the QOS job_submit.lua guards (its lockin_qos, the default): the lab's, or on the
    # cluster lab, which locks in by priority, the QOS its accounting has all the same
    qos = lab.get("RSA_LAB_QOS") or "rsa-lockin"
    if lab.get("RSA_LAB_ACCOUNTING") != "1":
        pytest.skip("lab without accounting: QOS lock-in needs slurmdbd")
    job = _submit_directive_job(lab, jobs, scripts)
    root(lab, "scontrol", "update", f"jobid={job}", f"qos={qos}")
    root(lab, "scontrol", "update", f"jobid={job}", "nice=5")
    assert _qos_prio_nice(lab, job)[::2] == (qos, "5")
    root(lab, "scontrol", "update", f"jobid={job}", "priority=7")  # (Slurm resets nice)
    assert _qos_prio_nice(lab, job)[:2] == (qos, "7")
    root(lab, "scontrol", "update", f"jobid={job}", "qos=normal")
    assert _qos_prio_nice(lab, job)[0] == "normal"
