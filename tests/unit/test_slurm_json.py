"""tests/slurm_json.py on real ``squeue --json`` of Slurm 22.05 (the lab's), 24.11 and
26.05 (tests/slurm_release): one job's state and priority read the same from each."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.slurm_json import squeue_json_job

pytestmark = pytest.mark.unit

DATA = Path(__file__).parent.parent / "data" / "slurm"


def ids(release: str) -> dict[str, str]:
    text = (DATA / release / "jobs.env").read_text()
    return dict(item.split("=") for item in text.splitlines()[1].split())


@pytest.mark.parametrize("release", ["24.11", "26.05"])
def test_state_and_priority_of_the_newer_releases(release: str) -> None:
    text = (DATA / release / "squeue.json").read_text()
    jobs = ids(release)
    held = squeue_json_job(text, jobs["HELD"])
    assert (held["job_state"], held["priority"], held["state_reason"]) == (
        "PENDING", 0, "JobHeldUser")
    locked = squeue_json_job(text, jobs["LOCKED_IN"])
    assert (locked["job_state"], locked["priority"]) == ("PENDING", 4294967000)
    assert squeue_json_job(text, jobs["RUNNING"])["job_state"] == "RUNNING"
    assert squeue_json_job(text, "999999") == {}


def test_the_lab_releases_form_is_read_as_it_is() -> None:
    text = (DATA / "squeue.json").read_text()
    held = squeue_json_job(text, "14")  # t-held (tests/data/slurm/README.md)
    assert (held["job_state"], held["priority"], held["state_reason"]) == (
        "PENDING", 0, "JobHeldUser")
    assert squeue_json_job(text, "3")["job_state"] == "COMPLETED"
