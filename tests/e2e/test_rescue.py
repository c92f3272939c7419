"""A quarantine that ends, in the lab (issue 33): with ``quarantine.rescue_after: 12s`` a
job's output, quarantined because its DATA_OUT refused writes, is copied as the job's
user to ``quarantine.rescue_dir/<user>/<job>.<cycle>`` on the PFS, verified, and only then
is its RAMDISK released; ``rsa job`` showed its age and when the rescue comes. Requeued
then, the job's next run is held (the rerun hold), its comment naming the rescued copy.

On main (6dee349) a quarantine held its RSA nodes until an operator acted.
"""

from __future__ import annotations

import os
import pwd
import stat
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from tests.e2e.test_native_trouble import rsad_with
from tests.e2e.test_prolog_lifecycle import nothing_of_job_mounted, run_to_start
from tests.e2e.test_stage_out_failures import area, events, md5_of, output_job, wait_for_file
from tests.integration.slurmkit import make_jobs, root, show_job, wait_for
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
        copy = rescue_area / user / f"{job}.1"
        root(lab, "scontrol", "requeue", job)
        said = wait_for(f"job {job}'s rerun held, saying where its output is",
                        lambda: _held_comment(lab, job), timeout=60)
        assert said == (f"RSA: requeued: held: the previous run's output, quarantined, was "
                        f"rescued to {copy}, not to DATA_OUT; put what this run needs in "
                        f"place, then release it: scontrol update JobId={job} "
                        "StartTime=now")
        shown_now = show_job(lab, job)
        assert (shown_now["JobState"], shown_now["Reason"]) == ("PENDING", "BeginTime")
        assert shown_now["AdminComment"].endswith(" hold=rerun"), shown_now
    expected = (res / "md5").read_text()
    mine = rescue_area / user
    st = mine.lstat()
    assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700
    assert st.st_uid == pwd.getpwnam(user).pw_uid  # the user's, not root's
    copy = mine / f"{job}.1"
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
