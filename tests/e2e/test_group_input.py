"""Input readable only through a supplementary group (issue 30): staging copies as the job's
user with the groups the kernel gives that user at login (os.getgrouplist, as initgroups),
not only those a directory service enumerates. In the lab the group is a local one
(``rsa``: both lab users are members); the unit test of runner.Identity stands in for a
directory that does not enumerate (tests/unit/test_runner.py); in the cluster lab the
group is the directory's project group of the user (``proj1``), which no host's files
name and nslcd does not enumerate."""

from __future__ import annotations

import grp
import hashlib
import os
import pwd
from collections.abc import Mapping

import pytest

from tests.e2e.conftest import input_area
from tests.integration.slurmkit import make_jobs
from tests.integration.test_rsad_staging import rsa_job, wait_state

pytestmark = pytest.mark.once  # how rsad runs its copies, whichever mode drives staging



def test_input_readable_only_through_a_group_is_staged_in(lab: Mapping[str, str]) -> None:
    owner = pwd.getpwnam(lab["RSA_LAB_OTHER_USER"])
    group = grp.getgrnam(lab["RSA_LAB_PROJECT_GROUP"])  # the lab user is a member
    assert group.gr_gid in os.getgrouplist(lab["RSA_LAB_USER"],
                                           pwd.getpwnam(lab["RSA_LAB_USER"]).pw_gid)
    with input_area(lab, "group-in") as area, make_jobs(lab) as jobs:
        project = area / "in" / "project"  # the other user's, the group may read it
        project.mkdir(mode=0o750)
        data = project / "data"
        data.write_bytes(os.urandom(100_000))
        data.chmod(0o640)
        for path in (project, data):
            os.chown(path, owner.pw_uid, group.gr_gid)
        want = hashlib.md5(data.read_bytes()).hexdigest()
        job = jobs.submit(script=f"""#!/bin/bash
#SBATCH -t 5
#RSA_DATA_IN={area}/in
findmnt -n -o TARGET --target {area}/in > {area}/res/inmnt
md5sum < {project}/data > {area}/res/md5 2>&1
""")
        wait_state(lab, job, "released", timeout=120)
        record = rsa_job(lab, job)
        assert record is not None
        reached = [e.get("to") for e in record["events"] if e["name"] == "rsa.transition"]
        assert "mounted-input" in reached, record["events"]
        assert (area / "res" / "inmnt").read_text().strip() == f"{area}/in"  # the RAMDISK
        assert (area / "res" / "md5").read_text().split()[0] == want
