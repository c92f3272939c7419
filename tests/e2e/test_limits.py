"""Limits per user in the lab (issue 33): with ``allocation.user_nodes: 1``, a user's second
RSA job waits for RSA nodes while the first holds one, and its user reads why in the
job's comment and in ``rsa job``; another user, allowed 2 by name
(``allocation.user_limits``), gets a RAMDISK for each of two jobs at once meanwhile, and
the second job, once the first gave its node back, runs from its own RAMDISK (early
start ``wait``, the lab's default).

On main (6dee349) there were no such limits: the second job got an RSA node at once.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import input_area, other_user_area
from tests.e2e.test_native_trouble import rsad_with
from tests.integration.slurmkit import make_jobs, show_job, wait_for
from tests.integration.test_rsad_staging import rsa_job, wait_state

pytestmark = pytest.mark.queue  # the start hold under wait is queue mode's

LIMIT = ("RSA: waits for RSA nodes: over a limit: user {user}'s jobs hold 1 RSA node of the "
         "1 RSA node allowed (allocation.user_nodes), until they give some back; held "
         "meanwhile, at most staging.wait_timeout, then it reads the PFS")


@pytest.fixture
def area(lab: Mapping[str, str]) -> Iterator[Path]:
    with input_area(lab, "limits") as base:
        yield base


@pytest.fixture
def other_area(lab: Mapping[str, str]) -> Iterator[Path]:
    """A fresh directory of rsaother's on the PFS with in/f1 and res/."""
    with other_user_area(lab, "limits") as base:
        yield base


def script(base: Path, name: str, sleep: int = 0) -> str:
    return f"""#!/bin/bash
#SBATCH -t 5
#RSA_DATA_IN={base}/in
findmnt -n -o TARGET --target {base}/in > {base}/res/{name}
sleep {sleep}
"""


def reached(data: Mapping[str, Any]) -> list[str]:
    return [str(e.get("to")) for e in data["events"] if e["name"] == "rsa.transition"]


def test_a_users_second_job_waits_over_the_limit_and_another_users_job_does_not(
        lab: Mapping[str, str], area: Path, other_area: Path) -> None:
    user, other = lab["RSA_LAB_USER"], lab["RSA_LAB_OTHER_USER"]
    limits = f"  array_share: 1\n  user_nodes: 1\n  user_limits:\n    {other}: {{nodes: 2}}\n"
    with rsad_with(lab, "  array_share: 1\n", limits), make_jobs(lab) as jobs:
        first = jobs.submit(script=script(area, "first", sleep=20))
        wait_for(f"job {first} holds an RSA node",
                 lambda: (rsa_job(lab, first) or {}).get("nodes"), timeout=60)
        second = jobs.submit(script=script(area, "second"))
        theirs = jobs.submit(script=script(other_area, "theirs", sleep=15), user=other)
        theirs2 = jobs.submit(script=script(other_area, "theirs2", sleep=15), user=other)
        # the other user's own value: two RSA nodes at once, where the value for all is 1
        wait_for(f"jobs {theirs} and {theirs2} holding RSA nodes at once",
                 lambda: all((rsa_job(lab, j) or {}).get("nodes") for j in (theirs, theirs2)),
                 timeout=90)
        reason = LIMIT.format(user=user)
        try:
            wait_for(f"job {second}'s comment says the limit",
                     lambda: show_job(lab, second)["Comment"] == reason, timeout=60)
        except AssertionError as exc:  # say what it says instead
            raise AssertionError(f"{exc}: {show_job(lab, second)['Comment']!r}; rsa job: "
                                 f"{rsa_job(lab, second)}") from None
        data = rsa_job(lab, second)
        assert data is not None and f"RSA: {data['message']}" == reason, data
        assert not data["nodes"] and show_job(lab, second)["JobState"] == "PENDING"
        # the other user's job is not held back by rsauser's limit
        for job in (theirs, theirs2):
            wait_state(lab, job, "released", timeout=120)
            done = rsa_job(lab, job)
            assert done is not None
            assert "mounted-input" in reached(done), reached(done)
        # the first job ends and gives its node back: the second gets its own RAMDISK
        wait_state(lab, second, "released", timeout=180)
        data = rsa_job(lab, second)
        assert data is not None
        assert "mounted-input" in reached(data) and "declined" not in reached(data), \
            reached(data)
    for res in (area / "res" / "first", area / "res" / "second",
                other_area / "res" / "theirs", other_area / "res" / "theirs2"):
        assert res.read_text().strip() == f"{res.parent.parent}/in", res  # a RAMDISK
