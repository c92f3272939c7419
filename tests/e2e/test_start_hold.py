"""Early start ``wait`` holds a job until its RAMDISK is ready, in the lab (issue 14).

The README's job on an idle cluster used to start at once with no RAMDISK (``none ->
declined``). Now job_submit.lua holds it (begin time, hold marker), rsad stages it while
Slurm holds it and releases it when staged; on a busy cluster the hold is released at
once; a hold nobody releases ends at its deadline, also with rsad down, and the job then
reads the PFS with a message saying so.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from rsa_scheduler.core.directives import split_hold
from tests.e2e.conftest import input_area
from tests.integration.slurmkit import (
    lab_nodes,
    make_jobs,
    root,
    show_job,
    start_lab_rsad,
    stop_lab_rsad,
    wait_for,
)
from tests.integration.test_rsad_staging import fill, rsa_job, wait_state

pytestmark = pytest.mark.queue  # native mode: Slurm holds the job itself (test_native.py)


@pytest.fixture
def area(lab: Mapping[str, str]) -> Iterator[Path]:
    with input_area(lab, "hold-e2e") as base:
        yield base


def job_script(base: Path, extra: str = "") -> str:
    """The README's job, plus what the test reads back."""
    return f"""#!/bin/bash
#SBATCH -t 5
#RSA_DATA_IN={base}/in
#RSA_DATA_OUT={base}/out
{extra}
findmnt -n -o TARGET --target {base}/in > {base}/res/inmnt
(cd {base}/in && md5sum f*) > {base}/res/md5
echo "$RSA_STATE|$RSA_MESSAGE" > {base}/res/env
"""


def md5_pfs(base: Path) -> str:
    return subprocess.run(["bash", "-c", "md5sum f*"], cwd=base / "in", capture_output=True,
                          text=True, timeout=30, check=True).stdout


def show(lab: Mapping[str, str], job: str) -> dict[str, str]:
    return show_job(lab, job)


def test_the_readme_job_on_an_idle_cluster_waits_for_its_ramdisk(
        lab: Mapping[str, str], area: Path) -> None:
    with make_jobs(lab) as jobs:
        job = jobs.submit(script=job_script(area))
        fields = show(lab, job)
        spec, deadline = split_hold(fields["AdminComment"])
        assert deadline is not None and spec.startswith("rsa1:"), fields["AdminComment"]
        assert (fields["JobState"], fields["Reason"]) == ("PENDING", "BeginTime"), fields
        wait_state(lab, job, "released", timeout=240)
    assert (area / "res" / "inmnt").read_text().strip() == f"{area}/in"  # the RAMDISK
    assert (area / "res" / "md5").read_text() == md5_pfs(area)
    assert (area / "res" / "env").read_text().split("|")[0] == "input"
    data = rsa_job(lab, job)
    assert data is not None
    names = [e["name"] for e in data["events"]]
    assert "job.hold-released" in names
    reached = [e.get("to") for e in data["events"] if e["name"] == "rsa.transition"]
    assert "declined" not in reached and "mounted-input" in reached, reached
    released = next(e for e in data["events"] if e["name"] == "job.hold-released")
    assert released["why"] == "RSA: input staged to the RAMDISK; released to start"
    fields = show(lab, job)
    assert split_hold(fields["AdminComment"])[1] is None  # the marker is gone


def test_on_a_busy_cluster_the_hold_is_released_at_once(
        lab: Mapping[str, str], area: Path) -> None:
    with make_jobs(lab) as jobs:
        fill(jobs)
        wait_for("the cluster full", lambda: all(
            root(lab, "squeue", "-h", "-j", j, "-o", "%T").strip() == "RUNNING"
            for j in jobs.ids), timeout=60)
        job = jobs.submit(script=job_script(area))

        def let_go() -> dict[str, str] | None:
            f = show(lab, job)
            return f if split_hold(f["AdminComment"])[1] is None else None
        wait_for("the hold released", let_go, timeout=90)
        busy = "RSA: the cluster is busy"
        try:
            wait_for("the comment", lambda: show(lab, job)["Comment"].startswith(busy),
                     timeout=90)
        except AssertionError as exc:  # say what the user was told instead, and why
            told = rsa_job(lab, job) or {}
            raise AssertionError(
                f"{exc}: comment {show(lab, job)['Comment']!r}; rsad's events "
                f"{json.dumps(told.get('events', [])[-12:])}; queue:\n"
                f"{root(lab, 'squeue', '-h', '-t', 'all', '-o', '%i %T %r %u')}\n"
                f"{root(lab, 'sinfo', '-h', '-o', '%P %a %D %T %N')}") from None
        # released at once, before any RSA node was taken: once released, the job waits
        # on Resources (on-deck) and is staged as in the paper, so its rsa_state alone
        # would race with that
        data = rsa_job(lab, job)
        assert data is not None
        names = [(e["name"], e.get("to")) for e in data["events"]]
        released = names.index(("job.hold-released", None))
        assert ("rsa.transition", "allocated") not in names[:released], names
        why = data["events"][released]["why"]
        assert why.startswith(busy), why
        # it is staged when it is next, as in the paper
        for filler in jobs.fillers:
            root(lab, "scancel", filler)
        wait_state(lab, job, "released", timeout=240)
    assert (area / "res" / "md5").read_text() == md5_pfs(area)


def test_a_hold_nobody_releases_ends_at_its_deadline_even_with_rsad_down(
        lab: Mapping[str, str], area: Path) -> None:
    """rsad killed while a job is held: Slurm starts it at the deadline by itself (here
    moved to 15 s from now, as a short staging.wait_timeout would set it). The job reads
    the PFS; rsad, back, finds the wait used up and does not hold it again."""
    with make_jobs(lab) as jobs:
        rsa = lab["RSA_LAB_VENV"] + "/bin/rsa"
        for node in lab_nodes(lab, "RSA_LAB_RSA_NODES"):  # none free: the job can only wait
            root(lab, rsa, "drain", node, "--reason", "hold test")
        try:
            job = jobs.submit(script=job_script(area))
            wait_for("rsad to see it", lambda: rsa_job(lab, job), timeout=90)
            fields = show(lab, job)
            spec, _ = split_hold(fields["AdminComment"])
            deadline = int(time.time()) + 15
            root(lab, "scontrol", "update", f"JobId={job}", "StartTime=now+15",
                 f"AdminComment={spec} hold={deadline}")
            assert show(lab, job)["JobState"] == "PENDING"
            stop_lab_rsad(signal.SIGKILL)
            try:
                wait_for("the job ran", lambda: (area / "res" / "env").exists(), timeout=90)
            finally:
                start_lab_rsad()
            wait_state(lab, job, "released", "declined", timeout=120)
        finally:
            for node in lab_nodes(lab, "RSA_LAB_RSA_NODES"):
                root(lab, rsa, "resume", node)
    assert (area / "res" / "md5").read_text() == md5_pfs(area)  # from the PFS
    assert (area / "res" / "inmnt").read_text().strip() != f"{area}/in"


def test_fallback_on_an_idle_cluster_starts_at_once_from_the_pfs_and_says_so(
        lab: Mapping[str, str], area: Path) -> None:
    with make_jobs(lab) as jobs:
        # (a job that ends before rsad's next poll is only seen finished: no message)
        job = jobs.submit(script=job_script(area, "#RSA_EARLY_START=fallback\nsleep 8"))
        assert split_hold(show(lab, job)["AdminComment"])[1] is None  # not held
        wait_for("the job ran", lambda: (area / "res" / "env").exists(), timeout=60)
        wait_state(lab, job, "declined", "released", timeout=120)
        # the user sees why where they look: the job's comment, `rsa job`
        wait_for("the comment", lambda: show(lab, job)["Comment"].startswith(
            "RSA: started before it had RSA nodes: the job reads the PFS"), timeout=30)
    assert (area / "res" / "md5").read_text() == md5_pfs(area)
    assert (area / "res" / "inmnt").read_text().strip() != f"{area}/in"
    data = rsa_job(lab, job)
    assert data is not None
    assert "declined" in [e.get("to") for e in data["events"] if e["name"] == "rsa.transition"]
