"""A quarantine that ends, in the lab (issue 33): with ``quarantine.rescue_after: 12s`` a
job's output, quarantined because its DATA_OUT refused writes, is copied as the job's
user to ``quarantine.rescue_dir/<user>/<job>.<cycle>-<submit time>`` on the PFS,
verified, and only then is its RAMDISK released; ``rsa job`` showed its age and when the
rescue comes. Requeued then, the job's next run is held (the rerun hold), its comment
naming the rescued copy.

On main (6dee349) a quarantine held its RSA nodes until an operator acted.
"""

from __future__ import annotations

import os
import pwd
import stat
import subprocess
import time
from collections.abc import Iterator, Mapping
from functools import partial
from pathlib import Path

import pytest

from rsa_scheduler.daemon.dispatch import fit_comment
from tests.e2e.test_native_trouble import rsad_with
from tests.e2e.test_prolog_lifecycle import nothing_of_job_mounted, run_to_start
from tests.e2e.test_stage_out_failures import area, events, md5_of, output_job, wait_for_file
from tests.integration.slurmkit import bb_hook, bb_reason, make_jobs, root, show_job, wait_for
from tests.integration.test_rsad_staging import wait_state

__all__ = ["area"]


@pytest.fixture
def rescue_area(lab: Mapping[str, str]) -> Iterator[Path]:
    """The site's rescue area on the PFS: root's, mode 1777 (made here, removed after)."""
    home = Path(lab["RSA_LAB_PFS"]).parent  # /pfs/home (RSA_LAB_PFS: /pfs/home/<user>)
    base = home / f"rescue-{os.getpid()}-{time.monotonic_ns()}"
    base.mkdir()
    base.chmod(0o1777)
    yield base
    subprocess.run(["rm", "-rf", str(base)], check=False, timeout=120)


def _rescued(mine: Path, job: str) -> Path:
    """The one directory job ``job``'s first run was rescued to in ``mine`` (the user's
    directory of the rescue area): ``<job>.1-<Slurm's submit time>``."""
    found = sorted(mine.glob(f"{job}.1-2*"))
    assert len(found) == 1, f"rescue directories of job {job}: {found}"
    return found[0]


def _held_comment(lab: Mapping[str, str], job: str) -> str | None:
    comment = show_job(lab, job)["Comment"]
    return comment if comment.startswith("RSA: requeued: held") else None


@pytest.mark.once  # rsad and the RSA nodes alone (the rerun hold is queue mode's)
def test_a_quarantine_past_its_timeout_is_rescued_to_the_pfs_verified_and_released(
        lab: Mapping[str, str], area: Path, rescue_area: Path) -> None:
    out, res = area / "out", area / "res"
    user = lab["RSA_LAB_USER"]
    rescue = f"\nquarantine:\n  rescue_after: 12s\n  rescue_dir: {rescue_area}\nstaging:\n"
    with rsad_with(lab, "\nstaging:\n", rescue), make_jobs(lab) as jobs:
        job = run_to_start(lab, jobs, output_job(out, res, 4))
        wait_for_file(res / "outmnt")
        out.chmod(0o555)  # DATA_OUT refuses the stage-out: retried, then quarantined
        wait_state(lab, job, "quarantined", timeout=120)
        shown = subprocess.run([f"{lab['RSA_LAB_VENV']}/bin/rsa", "job", job],
                               capture_output=True, text=True, timeout=30, check=True).stdout
        held = next(ln.strip() for ln in shown.splitlines() if ln.strip().startswith("held:"))
        assert held.startswith("held: quarantined for ") and \
            "; rescued to the PFS in " in held, shown
        wait_state(lab, job, "released", timeout=120)
        # requeued now, its next run would not find that output in DATA_OUT: rsad holds
        # it (the rerun hold) and says where the output is (on main it was not held)
        copy = _rescued(rescue_area / user, job)
        root(lab, "scontrol", "requeue", job)
        said = wait_for(f"job {job}'s rerun held, saying where its output is",
                        lambda: _held_comment(lab, job), timeout=60)
        # as squeue shows it: shortened in its middle past COMMENT_MAX (the rescue
        # directory's name, with its submit time, makes it long; the command stays whole)
        assert said == fit_comment(
            f"RSA: requeued: held: the previous run's output, quarantined, was rescued to "
            f"{copy}, not to DATA_OUT; put what this run needs in place, then release it: "
            f"scontrol update JobId={job} StartTime=now")
        assert said.endswith(f"scontrol update JobId={job} StartTime=now")
        # Slurm's scheduler sets the reason at its next pass (the comment may come first)
        shown_now = wait_for(f"job {job} pending on its begin time", lambda: (
            s if (s := show_job(lab, job))["Reason"] == "BeginTime" else None), timeout=30)
        assert shown_now["JobState"] == "PENDING", shown_now
        assert shown_now["AdminComment"].endswith(" hold=rerun"), shown_now
    expected = (res / "md5").read_text()
    mine = rescue_area / user
    st = mine.lstat()
    assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700
    assert st.st_uid == pwd.getpwnam(user).pw_uid  # the user's, not root's
    assert copy.parent == mine
    assert md5_of(copy) == expected  # every byte, on the PFS
    assert copy.stat().st_uid == st.st_uid
    outcomes = [(str(e["action"]), e["result"]) for e in events(lab, job, "action.outcome")]
    stage_outs = [r for a, r in outcomes if "/stage-out/" in a]
    assert stage_outs[-1] == "ok" and stage_outs.count("ok") == 1, outcomes
    assert [r for a, r in outcomes if "/verify/" in a] == ["ok"], outcomes
    told = [str(e.get("detail", "")) for e in events(lab, job, "rsa.transition")
            if e.get("trigger") == "rescue-due"]
    assert told == [f"copied as the job's user to {copy}, verified before the RAMDISK is "
                    "released (a failed rescue keeps the quarantine)"], told
    assert nothing_of_job_mounted(job)


def _rescue_job(out: Path, res: Path, requeue: bool) -> str:
    """A DATA_OUT job whose first run writes 1 MiB to its RAMDISK, then waits for
    ``res/go`` (the test has made DATA_OUT refuse the stage-out by then) and, if
    ``requeue``, requeues itself as its owner may."""
    again = "scontrol requeue $SLURM_JOB_ID; sleep 120\n" if requeue else ""
    return f"""#!/bin/bash
#SBATCH -t 5
{'#SBATCH --requeue' if requeue else ''}
#RSA_DATA_OUT={out}
n=${{SLURM_RESTART_COUNT:-0}}
findmnt -n -o TARGET --target {out} > {res}/outmnt.$n || true
head -c 1M /dev/urandom > {out}/blob
md5sum < {out}/blob > {res}/md5.$n
if [ "$n" = 0 ]; then
  while [ ! -e {res}/go ]; do sleep 0.5; done
  {again}
fi
"""


@pytest.mark.native
def test_native_a_rescued_output_is_never_called_staged_out_and_its_rerun_never_starts(
        lab: Mapping[str, str], area: Path, rescue_area: Path) -> None:
    """Native mode, issue 33: two jobs' output quarantined (their DATA_OUT refuses the
    stage-out: data_out fails, Slurm keeps each buffer), then rescued to
    ``rescue_dir/<user>/<job>.1``. slurmctld restarted runs post_run and data_out again
    for both: data_out fails naming the rescue directory (on main it answered "output
    staged out and verified", from the rescue's verification, and Slurm ended the
    stage-out as if the output were in DATA_OUT). The job that requeued itself (its first
    run's stage-out failed, so Slurm keeps it pending on that buffer) is told the same in
    its SystemComment, and its rerun never starts."""
    from tests.e2e.test_native import json_job
    from tests.integration.conftest import as_user
    from tests.integration.slurmkit import restart_lab_slurmctld

    if lab.get("RSA_LAB_MODE", "queue") != "native":
        pytest.skip("native mode's hooks: make lab-test-native")
    user = lab["RSA_LAB_USER"]
    out, res = area / "out", area / "res"
    rq = area / "rq"
    made = as_user(lab, user, ["mkdir", "-p", str(rq / "out"), str(rq / "res")])
    assert made.returncode == 0, made.stderr
    rescue = f"\nquarantine:\n  rescue_after: 12s\n  rescue_dir: {rescue_area}\nstaging:\n"
    with rsad_with(lab, "\nstaging:\n", rescue), make_jobs(lab) as jobs:
        ended = jobs.submit(script=_rescue_job(out, res, requeue=False))
        rerun = jobs.submit(script=_rescue_job(rq / "out", rq / "res", requeue=True))
        for r in (res, rq / "res"):
            wait_for_file(r / "md5.0", timeout=240)
        out.chmod(0o555)  # the PFS side of each DATA_OUT refuses the stage-out
        (rq / "out").chmod(0o555)
        for r in (res, rq / "res"):
            (r / "go").touch()
        for job in (ended, rerun):
            wait_state(lab, job, "quarantined", timeout=180)
        for job in (ended, rerun):
            wait_state(lab, job, "released", timeout=120)  # rescued, verified, released
        copy, rq_copy = (_rescued(rescue_area / user, j) for j in (ended, rerun))
        restart_lab_slurmctld()  # it runs post_run and data_out again for both

        def data_out_said(job: str, field: str, where: Path) -> str | None:
            text = str(json_job(lab, job).get(field) or "")
            return text if f"rescued to {where} " in text else None

        said = wait_for("data_out asked again to name the rescue directory",
                        partial(data_out_said, ended, "state_description", copy),
                        timeout=180)
        assert said == (
            f"{bb_reason('data_out')}job {ended}'s output was "
            "quarantined, "
            f"then rescued to {copy} (quarantine.rescue_after), not staged out to its "
            f"DATA_OUT: it is verified there; scancel --hurry {ended} ends the stage-out")
        told = wait_for("the requeued job told where its first run's output is",
                        partial(data_out_said, rerun, "system_comment", rq_copy),
                        timeout=120)
        # (26.05 writes "<hook> failed: " where 24.11 writes "<hook>: ")
        assert any(f"{bb_hook('data_out')}{sep} job {rerun}'s output was quarantined, then "
                   f"rescued to {rq_copy} (quarantine.rescue_after), not staged out" in told
                   for sep in (":", " failed:")), told
        # Slurm's recovery put it back in stage-out, where it stays: it never runs again
        assert json_job(lab, rerun)["job_state"] in ("PENDING", "STAGE_OUT")
        for job in (ended, rerun):
            root(lab, "scancel", "--hurry", job)  # the way out the line names
        assert not (rq / "res" / "outmnt.1").exists(), "the rerun started"
    for job, r, c in ((ended, res, copy), (rerun, rq / "res", rq_copy)):
        assert (r / "outmnt.0").read_text().strip() == str(r.parent / "out"), job
        got = root(lab, "bash", "-c", f"md5sum < {c}/blob")
        assert got == (r / "md5.0").read_text(), job  # every byte, in the rescue area
        assert not (r.parent / "out" / "blob").exists(), job  # never in DATA_OUT
