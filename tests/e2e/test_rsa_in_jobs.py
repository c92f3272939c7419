"""``rsa`` inside a job, on a compute node that has no socket of rsad's, and the slurmctld
hooks with the file modes the operator guide documents (issue 30).

A job runs ``rsa input-done`` and ``rsa job`` exactly as the user guide shows: bare, from
the PATH a user's login gives (``/usr/local/bin:/usr/bin:/bin``), with nothing of rsad's
in its environment, in a private mount namespace where ``/run/rsa`` is an empty tmpfs
(``unshare``: as on a compute node that is not rsad's host). It must find rsad through
``/etc/rsa/client.conf`` and reach it over TCP, authenticated with MUNGE. The lab's
rsa.yaml is root's, 0640, as the operator guide sets ``/etc/rsa/rsa.yaml`` up:
PrologSlurmctld and EpilogSlurmctld (SlurmUser) cannot read it, and must still tell rsad
(through the client file), or say in their log why they cannot.
"""

from __future__ import annotations

import json
import os
import pwd
import stat
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import input_area, md5_of
from tests.integration.slurmkit import make_jobs
from tests.integration.test_rsad_staging import rsa_job, wait_state

# the client's way to rsad is the same whichever mode drives staging
pytestmark = pytest.mark.once

#: what a user's login shell has on Debian (/etc/profile), without the lab's venv
LOGIN_PATH = "/usr/local/bin:/usr/bin:/bin"


def job_script(area: Path) -> str:
    res = area / "res"
    inner = f"""\
test -e /run/rsa/rsad.sock && echo visible > {res}/socket
command -v rsa > {res}/which
(cd {area}/in && md5sum f*) > {res}/md5in
rsa input-done > {res}/input-done 2>&1; echo $? > {res}/input-done.rc
rsa job --json > {res}/job.json 2> {res}/job.err
"""
    # a private mount namespace (a user namespace of the job's own) with an empty tmpfs on
    # /run/rsa, then back to the job's own uid inside it: rsa runs as the user, without
    # rsad's socket; the network and MUNGE's socket are the node's
    return f"""#!/bin/bash
#SBATCH -t 5
#RSA_DATA_IN={area}/in
#RSA_DATA_OUT={area}/out
#RSA_RESET=input-done
export PATH={LOGIN_PATH}
unset RSA_API RSA_CLIENT_CONFIG RSA_CONFIG
cat > {res}/inner.sh <<'EOF'
{inner}EOF
unshare --user --map-root-user --mount sh -c 'mount -t tmpfs none /run/rsa &&
  exec unshare --user --map-user="$1" --map-group="$2" bash "$3"' - \\
  "$(id -u)" "$(id -g)" {res}/inner.sh 2> {res}/unshare.err
findmnt -n -o TARGET --target {area}/out > {res}/outmnt
echo written > {area}/out/result
"""


@pytest.fixture(scope="module")
def finished(lab: Mapping[str, str]) -> Iterator[tuple[str, Path, dict[str, Any]]]:
    """One job through its whole cycle; its results on the PFS, its `rsa job` record."""
    with input_area(lab, "in-jobs") as area, make_jobs(lab) as jobs:
        job = jobs.submit(script=job_script(area))
        wait_state(lab, job, "released", timeout=180)
        data = rsa_job(lab, job)
        assert data is not None
        yield job, area, data


def test_rsa_in_a_job_without_rsads_socket_finds_rsad_from_the_client_file(
        lab: Mapping[str, str], finished: tuple[str, Path, dict[str, Any]]) -> None:
    job, area, data = finished
    res = area / "res"
    assert (res / "unshare.err").read_text() == ""
    assert not (res / "socket").exists(), "the job saw rsad's socket: the test proves nothing"
    # bare, on PATH: the lab's on a compute node, the package's on the cluster lab's
    assert (res / "which").read_text().strip() == lab["RSA_LAB_RSA_ON_PATH"]
    assert (res / "md5in").read_text() == md5_of(area / "in", "f*")
    said = (res / "input-done").read_text()
    assert (res / "input-done.rc").read_text().strip() == "0", said
    assert said.startswith(f"job {job}: input done; the RAMDISK is mounted over "
                           f"{area}/out"), said
    assert (res / "job.err").read_text() == ""
    inside = json.loads((res / "job.json").read_text())
    assert inside["job_id"] == job, inside
    # the reset happened on the job's word: its output went to the RAMDISK and back
    assert (res / "outmnt").read_text().strip() == f"{area}/out"
    assert (area / "out" / "result").read_text() == "written\n"
    reached = [e.get("to") for e in data["events"] if e["name"] == "rsa.transition"]
    assert "mounted-input" in reached and "output-verified" in reached, reached


def test_slurmctld_hooks_tell_rsad_with_rsa_yaml_root_only(
        lab: Mapping[str, str], finished: tuple[str, Path, dict[str, Any]]) -> None:
    """rsa.yaml as documented (root's, 0640): SlurmUser's PrologSlurmctld and
    EpilogSlurmctld still told rsad (the job's timeline has both hook events)."""
    _job, _area, data = finished
    conf = os.stat(lab["RSA_LAB_RSA_CONFIG"])
    assert (conf.st_uid, stat.S_IMODE(conf.st_mode)) == (0, 0o640)
    told = {e.get("hook") for e in data["events"] if e["name"] == "job.hook"}
    assert told == {"prolog_slurmctld", "epilog_slurmctld"}, data["events"]


def test_a_slurmctld_hook_that_cannot_find_rsad_says_why_and_exits_0(
        lab: Mapping[str, str]) -> None:
    """No client file and rsa.yaml unreadable to SlurmUser: the shipped wrapper, run as
    slurmctld runs it, exits 0 and says what to fix (stderr here; syslog on a site)."""
    slurm = pwd.getpwnam("slurm")
    wrapper = Path(lab["RSA_LAB_HOOK_WRAPPERS"]) / "rsa-prolog-slurmctld"
    env = {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "999999", "SLURM_JOB_USER": "rsauser",
           "SLURM_JOB_UID": str(pwd.getpwnam("rsauser").pw_uid), "SLURM_JOB_NODELIST": "c1",
           "RSA_PYTHON": lab["RSA_LAB_PYTHON"],
           "RSA_CONFIG": lab["RSA_LAB_RSA_CONFIG"], "RSA_CLIENT_CONFIG": "/nonexistent/client.conf"}
    done = subprocess.run(["setpriv", f"--reuid={slurm.pw_uid}", f"--regid={slurm.pw_gid}",
                           "--init-groups", str(wrapper)], env=env, capture_output=True,
                          text=True, timeout=60, check=False, cwd="/")
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith(
        "rsa-hook prolog_slurmctld job 999999: rsad not told (cannot find rsad: no RSA_API, "
        f"no /nonexistent/client.conf, and {lab['RSA_LAB_RSA_CONFIG']} is not readable by "
        "slurm"), done.stderr
    assert "write rsad's address into /nonexistent/client.conf (api = HOST:PORT" in done.stderr
