"""slurmctld's hooks on ctl without a client file they can read (issue 30): PrologSlurmctld
and EpilogSlurmctld run as SlurmUser, which cannot read rsa.yaml (root's, 0640, as the
operator guide has it). With /etc/rsa/client.conf missing, or unreadable (0600), they
must not guess an address: each writes one line naming the fix into slurmctld's own log
(slurmctld drops their output, and ctl has no syslog) and exits 0; the job runs, and
rsad learns its start and end from its squeue poll. On main the lines went to stderr,
which slurmctld drops, and to a syslog socket ctl does not have: slurmctld's log said
nothing."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from tests.cluster.conftest import Cluster

HOME = "/pfs/home/rsauser"
CONF = "/etc/rsa/client.conf"
LOG = "/var/log/slurm/slurmctld.log"
JOB = f"""#!/bin/bash
#SBATCH -N 1 -t 2
#RSA_DATA_IN={HOME}/hooks-in
sha256sum < {HOME}/hooks-in/f > {HOME}/hooks-$SLURM_JOB_ID.sha
"""


def _wait(what: str, ok: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


@pytest.fixture
def client_conf(cluster: Cluster) -> Iterator[None]:
    """ctl's client.conf kept aside, and put back as it was (0644) after the test."""
    cluster.run("ctl", ["cp", "-p", CONF, f"{CONF}.kept"])
    try:
        yield
    finally:
        cluster.run("ctl", ["mv", "-f", f"{CONF}.kept", CONF])
        assert cluster.out("ctl", ["stat", "-c", "%a", CONF]).strip() == "644"


def _hook_lines(cluster: Cluster, job: str) -> list[str]:
    return [line for line in cluster.out("ctl", ["cat", LOG]).splitlines()
            if "rsa-hook " in line and f"_slurmctld job {job}: " in line]


def _both_said(cluster: Cluster, job: str) -> list[str]:
    lines: list[str] = []

    def said() -> bool:
        nonlocal lines
        lines = _hook_lines(cluster, job)
        return len(lines) >= 2
    _wait(f"slurmctld's hooks' lines for job {job}", said, 60)
    return lines


def test_without_a_readable_client_file_the_hooks_say_so_in_slurmctlds_log(
        cluster: Cluster, client_conf: None) -> None:
    # missing: a plain job, which runs and completes; one line per hook, naming the fix
    cluster.run("ctl", ["rm", CONF])
    plain = cluster.out("login", ["sbatch", "--parsable", "--chdir=/tmp", "-o", "/dev/null",
                                  "--wrap", "true"], user="rsauser").strip()
    assert plain.isdigit(), plain
    lines = _both_said(cluster, plain)
    assert [line.split("] ", 1)[1].split(": rsad not told (")[0] for line in lines] == [
        f"error: rsa-hook prolog_slurmctld job {plain}",
        f"error: rsa-hook epilog_slurmctld job {plain}"], lines
    for line in lines:
        assert (f"cannot find rsad: no RSA_API, no {CONF}, and /etc/rsa/rsa.yaml is not "
                "readable by slurm (as the operator guide sets it up: root, 0640); write "
                f"rsad's address into {CONF} (api = HOST:PORT, mode 0644) on this host"
                ) in line, line
    assert cluster.out("ctl", ["squeue", "-h", "-t", "all", "-j", plain, "-o", "%T"]
                       ).strip() == "COMPLETED"

    # unreadable (root's 0600): an RSA job; rsad serves it all the same, from its polls
    cluster.run("ctl", ["sh", "-ec", f"cp -p {CONF}.kept {CONF}\nchmod 0600 {CONF}"])
    cluster.run("login", ["sh", "-ec", f"mkdir -p {HOME}/hooks-in\n"
                          f"head -c 4096 /dev/urandom > {HOME}/hooks-in/f\n"
                          f"cat > {HOME}/hooks.sh"], user="rsauser", input=JOB)
    job = cluster.out("login", ["sbatch", "--parsable", f"--chdir={HOME}", "-o",
                                "/dev/null", f"{HOME}/hooks.sh"], user="rsauser").strip()
    assert job.isdigit(), job
    shown = ""

    def released() -> bool:
        nonlocal shown
        shown = cluster.run("login", ["rsa", "job", job], user="rsauser",
                            check=False).stdout
        return "rsa_state: released" in shown or "quarantine" in shown
    _wait(f"job {job} released", released, 120)
    assert "-> mounted-input" in shown and "rsa_state: released" in shown, shown
    assert cluster.out("login", ["cat", f"{HOME}/hooks-{job}.sha"], user="rsauser") == \
        cluster.out("login", ["sh", "-c", f"sha256sum < {HOME}/hooks-in/f"], user="rsauser")
    lines = _both_said(cluster, job)
    assert len(lines) == 2, lines
    for line in lines:
        assert (f"rsad not told (cannot read {CONF} (Permission denied): it says where rsad "
                f"is and must be readable by everyone (chmod 0644 {CONF})); it will notice "
                "on its next poll") in line, line
