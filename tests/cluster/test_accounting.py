"""Accounting across hosts (issue 30): slurmdbd and its MariaDB on ctl, beside slurmctld,
as the issue's controller has them; the lab users in the account ``rsa``, associations
enforced. From the login node, which runs neither, ``sacct`` reads slurmdbd on ctl.

- An RSA job of rsauser, locked in under the default method (``priority``) while rsad
  staged its input, is recorded as rsauser's, in its account, under its own QOS
  (``normal``), never under the lock-in QOS.
- The sacct command docs/simulator.md gives, run on the login node, feeds
  ``rsa sim replay --sacct -`` there: the cluster's own history replayed.
- Under ``slurm.lockin.method: qos`` a locked-in job runs and is accounted under
  ``rsa-lockin``, as the operator guide says ("Method qos and running jobs").

On main the cluster had no slurmdbd (``accounting_storage/none``, as it still runs with
RSA_CLUSTER_ACCOUNTING=0): every test here failed there (checked with the fixture's skip
taken out, 2026-11-29)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator

import pytest

from tests.cluster.conftest import RSAD, Cluster

HOME = "/pfs/home/rsauser"
JOB = f"""#!/bin/bash
#SBATCH -N 1 -t 2
#RSA_DATA_IN={HOME}/acct-in
sha256sum < {HOME}/acct-in/f > {HOME}/acct-$SLURM_JOB_ID.sha
"""
# docs/simulator.md, "A centre's own history": the command a site runs (narrowed here to
# this test's jobs with --jobs; --starttime the test's start)
SACCT = ("sacct --allusers --parsable2 --starttime {since} --endtime now --jobs {jobs} "
         "--format JobIDRaw,JobID,State,Submit,Start,End,ElapsedRaw,TimelimitRaw,AllocCPUS,"
         "ReqCPUS,NNodes,UID,Partition,QOS,TRESUsageInTot,TRESUsageOutTot")


def _wait(what: str, ok: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def _run_job(cluster: Cluster) -> tuple[str, str]:
    """An RSA job of rsauser from the login node, to its end and rsad's release; returns
    its id and what ``rsa job`` shows of it then."""
    job = cluster.out("login", ["sbatch", "--parsable", f"--chdir={HOME}", "-o",
                                f"{HOME}/acct-%j.log", f"{HOME}/acct.sh"],
                      user="rsauser").strip()
    assert job.isdigit(), job
    shown = ""

    def released() -> bool:
        nonlocal shown
        shown = cluster.run("ctl", ["rsa", "job", job], check=False).stdout
        return "rsa_state: released" in shown or "quarantine" in shown
    _wait(f"job {job} released", released, 120)
    assert "rsa_state: released" in shown, shown
    return job, shown


def _sacct(cluster: Cluster, job: str, fields: str) -> str:
    """sacct on the login node, as rsauser: the job's allocation row once slurmdbd has
    its end (it records ends asynchronously)."""
    row = ""

    def ended() -> bool:
        nonlocal row
        row = cluster.out("login", ["sacct", "-X", "-n", "-P", "-j", job, "-o",
                                    f"State,{fields}"], user="rsauser").strip()
        return row.startswith("COMPLETED|")
    _wait(f"slurmdbd's record of job {job}'s end", ended, 60)
    return row.split("|", 1)[1]


@pytest.fixture(scope="module")
def staged(cluster: Cluster) -> Iterator[tuple[str, str, str]]:
    """One RSA job run once for the module: its id, ``rsa job`` at its end, the time
    before its submission (sacct's --starttime). Skipped on a cluster brought up without
    accounting (RSA_CLUSTER_ACCOUNTING=0)."""
    config = cluster.out("ctl", ["scontrol", "show", "config"])
    if "accounting_storage/slurmdbd" not in config:
        pytest.skip("the cluster runs without accounting (RSA_CLUSTER_ACCOUNTING=0)")
    since = cluster.out("login", ["date", "+%Y-%m-%dT%H:%M:%S"]).strip()
    cluster.run("login", ["sh", "-ec", f"mkdir -p {HOME}/acct-in\n"
                          f"head -c 65536 /dev/urandom > {HOME}/acct-in/f\n"
                          f"cat > {HOME}/acct.sh"], user="rsauser", input=JOB)
    job, shown = _run_job(cluster)
    yield job, shown, since


def test_a_locked_in_rsa_job_is_accounted_as_its_users_under_its_own_qos(
        cluster: Cluster, staged: tuple[str, str, str]) -> None:
    job, shown, _since = staged
    # rsad locked it in (by priority, the default) before it started: staged-in, then
    # locked-in, then its input mounted on the compute node
    assert "-> locked-in" in shown and "-> mounted-input" in shown, shown
    sha = cluster.out("login", ["cat", f"{HOME}/acct-{job}.sha"], user="rsauser")
    assert sha == cluster.out("login", ["sh", "-c", f"sha256sum < {HOME}/acct-in/f"],
                              user="rsauser")
    # slurmdbd on ctl, asked from the login node: rsauser's, in its account, its own QOS
    assert _sacct(cluster, job, "User,Account,QOS") == "rsauser|rsa|normal"


def test_the_clusters_own_sacct_replayed_on_the_login_node(
        cluster: Cluster, staged: tuple[str, str, str]) -> None:
    job, _shown, since = staged
    plain = cluster.out("login", ["sbatch", "--parsable", "-N", "2", "--exclusive",
                                  "--chdir=/tmp", "-o", "/dev/null", "--wrap", "sleep 1"],
                        user="rsaother").strip()
    assert plain.isdigit(), plain
    assert _sacct(cluster, plain, "User") == "rsaother"
    # the documented command, as root (--allusers), straight into the simulator
    out = cluster.out("login", ["sh", "-c", SACCT.format(since=since, jobs=f"{job},{plain}")])
    assert out.startswith("JobIDRaw|JobID|State|"), out
    done = cluster.run("login", ["rsa", "sim", "replay", "--sacct", "-", "--rsa-nodes", "2",
                                 "--json"], input=out, check=False)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["trace"] == "<stdin>"
    assert (report["jobs"], report["skipped"]) == (2, 0), out
    work = report["workload"]
    assert work["format"] == "sacct" and work["unfinished"] == 0, work
    # the cluster inferred from the two-node job: c1 and c2, one CPU each
    assert (work["procs"], work["procs_per_node"]) == (2, 1), out
    said = [line for line in done.stderr.splitlines()
            if line.startswith("rsa sim replay: note: cluster: ")]
    assert said and "2 processors, inferred from the sacct output" in said[0], done.stderr


@pytest.fixture
def qos_method(cluster: Cluster) -> Iterator[None]:
    """rsad with ``slurm.lockin.method: qos`` (rsa.yaml on its host, restarted as its
    unit would be); back to the default, priority, also when the test fails."""
    yaml = "/etc/rsa/rsa.yaml"
    cluster.run(RSAD, ["sed", "-i", "s/^    method: priority$/    method: qos/", yaml])
    try:
        assert "    method: qos" in cluster.out(RSAD, ["cat", yaml])
        _restart_rsad()
        yield
    finally:
        cluster.run(RSAD, ["sed", "-i", "s/^    method: qos$/    method: priority/", yaml])
        _restart_rsad()


def _restart_rsad() -> None:
    import subprocess

    from tests.cluster.conftest import CTL

    done = subprocess.run([str(CTL), "restart-rsad"], capture_output=True, text=True,
                          timeout=180, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_under_method_qos_a_locked_in_job_is_accounted_under_the_lockin_qos(
        cluster: Cluster, staged: tuple[str, str, str], qos_method: None) -> None:
    job, shown = _run_job(cluster)
    assert "-> locked-in" in shown, shown
    assert _sacct(cluster, job, "User,Account,QOS") == "rsauser|rsa|rsa-lockin"
