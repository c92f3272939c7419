"""A site's own Slurm scripts chained with the RSA's, in the lab's real Slurm (issue 33):
the site's job_submit.lua (examples/site-job_submit.lua: a default time limit, no job
over a day) calling the RSA's module, and a site Prolog in site-prolog.d run by the
shipped rsa-prolog before ours. Both sides' effects show on real jobs; each side's
refusal is its own, with its own words; a failing site Prolog fails the job as Slurm
would, and ours then does not run. Everything is put back afterwards."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from tests.e2e.conftest import input_area
from tests.integration.conftest import as_user
from tests.integration.slurmkit import (
    in_cluster,
    install_lab_job_submit,
    lab_nodes,
    make_jobs,
    on_node,
    root,
    wait_for,
)
from tests.integration.test_rsad_staging import rsa_job, wait_state

SITE = Path("/run/rsa-lab/site-hooks")  # RSA_SITE_HOOKS of the lab's hooks (lab/hooks)
#: the site Prolog's directory on the cluster lab's compute nodes: the hooks' default
CLUSTER_SITE_PROLOG = Path("/etc/rsa/site-prolog.d")

pytestmark = pytest.mark.once  # Slurm's side: the same whichever mode drives staging


@pytest.fixture
def area(lab: Mapping[str, str]) -> Iterator[Path]:
    with input_area(lab, "site-chain") as base:
        yield base


@pytest.fixture
def site_job_submit(lab: Mapping[str, str]) -> Iterator[None]:
    install_lab_job_submit(lab, site=True)
    try:
        yield
    finally:
        install_lab_job_submit(lab, site=False)


@pytest.fixture
def site_prolog(lab: Mapping[str, str]) -> Iterator[Path]:
    """A site Prolog that writes a marker per job into ``marks/`` and, once, fails (while
    ``fail-once`` exists: the first Prolog to remove it exits 3); yields the directory
    that holds both. The host lab: in RSA_SITE_HOOKS, which its compute nodes share. The
    cluster lab: the script in each compute node's own /etc/rsa/site-prolog.d (through
    the door), the marker and the flag on the PFS, which every node mounts (root there
    is root on the PFS: the lab's export maps it so)."""
    cluster = in_cluster()
    base = (Path(lab["RSA_LAB_PFS_ROOT"]) / f"rsa-site-hooks-{os.getpid()}" if cluster
            else SITE)
    marks = base / "marks"
    base.mkdir(parents=True, mode=0o755, exist_ok=True)
    base.chmod(0o755)
    marks.mkdir(mode=0o755, exist_ok=True)
    text = ("#!/bin/sh\n"
            f'echo "$SLURMD_NODENAME" > {marks}/"$SLURM_JOB_ID"\n'
            f"rm {base}/fail-once 2>/dev/null && "
            "{ echo 'site: node failed its health check' >&2; exit 3; }\n"
            "exit 0\n")
    nodes = lab_nodes(lab, "RSA_LAB_COMPUTE_NODES") if cluster else []
    for node in nodes:
        on_node(node, ["sh", "-ec", f"install -d -m 0755 {CLUSTER_SITE_PROLOG}\n"
                       f"cat > {CLUSTER_SITE_PROLOG}/10-site-gate\n"
                       f"chmod 0755 {CLUSTER_SITE_PROLOG}/10-site-gate"], input=text)
    if not cluster:
        d = SITE / "site-prolog.d"
        d.mkdir(mode=0o755, exist_ok=True)
        (d / "10-site-gate").write_text(text)
        (d / "10-site-gate").chmod(0o755)
    try:
        yield base
    finally:
        for node in nodes:
            on_node(node, ["rm", "-rf", str(CLUSTER_SITE_PROLOG)], check=False)
        shutil.rmtree(base, ignore_errors=True)


def _sbatch(lab: Mapping[str, str], *args: str) -> tuple[int, str]:
    done = as_user(lab, lab["RSA_LAB_USER"], ["sbatch", "--parsable", "-o", "/dev/null",
                                              f"--chdir={lab['RSA_LAB_PFS']}", *args])
    return done.returncode, (done.stdout if done.returncode == 0 else done.stderr).strip()


def _squeue(lab: Mapping[str, str], job: str, field: str) -> str:
    return root(lab, "squeue", "-h", "-t", "all", "-j", job, "-O", f"{field}:0").strip()


def test_a_sites_job_submit_and_the_rsas_both_act_on_real_jobs(
        lab: Mapping[str, str], area: Path, site_job_submit: None) -> None:
    # the site refuses with its own words; the RSA never sees the job
    rc, err = _sbatch(lab, "-t", "2-0", "--wrap", "true")
    assert rc == 1 and ("sbatch: error: site: jobs may run at most one day here: submit "
                        "with -t 1-0 or less") in err.splitlines(), err
    # the RSA refuses a bad directive with its own words, past the site's rules
    bad = area / "bad.sh"
    bad.write_text("#!/bin/sh\n#RSA_NODES=two\ntrue\n")
    rc, err = _sbatch(lab, str(bad))
    assert rc == 1 and ("sbatch: error: 2: RSA_NODES must be a whole number of RSA nodes, "
                        "at least 1, got 'two'") in err.splitlines(), err
    # a good RSA job gets both: the site's default time limit and the RSA's spec, and
    # the RSA serves it (its input read from the RAMDISK)
    good = area / "good.sh"
    good.write_text(f"#!/bin/bash\n#RSA_DATA_IN={area}/in\n"
                    f"findmnt -n -o SOURCE --target {area}/in > {area}/res/inmnt\n")
    with make_jobs(lab) as jobs:
        rc, job = _sbatch(lab, str(good))
        assert rc == 0, job
        jobs.ids.append(job)
        assert _squeue(lab, job, "TimeLimit") == "30:00"
        # the RSA's spec, and its start hold (early start wait) till the RAMDISK is ready
        assert _squeue(lab, job, "admin_comment").startswith(f"rsa1:i={area}/in hold=")
        wait_state(lab, job, "released", timeout=180)
    history = [e.get("to") for e in (rsa_job(lab, job) or {}).get("events", [])]
    assert "mounted-input" in history, history
    assert (area / "res" / "inmnt").read_text().strip() != "", "input not on a mount"


def test_a_site_prolog_runs_before_ours_and_its_failure_fails_the_job(
        lab: Mapping[str, str], area: Path, site_prolog: Path) -> None:
    marks, fail_once = site_prolog / "marks", site_prolog / "fail-once"
    script = (f"#!/bin/bash\n#RSA_DATA_IN={area}/in\n"
              f"findmnt -n -o SOURCE --target {area}/in > {area}/res/inmnt\n")
    with make_jobs(lab) as jobs:
        job = jobs.submit(script=script)
        wait_state(lab, job, "released", timeout=180)
        history = [e.get("to") for e in (rsa_job(lab, job) or {}).get("events", [])]
        assert "mounted-input" in history, history  # ours ran after the site's
        assert (marks / job).exists(), "the site Prolog did not run"
        # once more, the site Prolog fails: Slurm drains the node and holds the job;
        # ours never ran for it (no mount asked of rsad)
        fail_once.write_text("")
        failed = jobs.submit(script=script)
        node = wait_for("the site Prolog's marker", lambda: (
            (marks / failed).read_text().strip() if (marks / failed).exists() else None),
            timeout=180)
        try:
            wait_for("the node drained by the Prolog's failure", lambda: "prolog" in root(
                lab, "sinfo", "-h", "-N", "-n", node, "-o", "%T %E").lower(), timeout=60)
            wait_for("the job held", lambda: r if "held" in (
                r := _squeue(lab, failed, "Reason")).lower() else None, timeout=60)
            # 24.11 shows the held job COMPLETING while its launch is cleaned up
            wait_for("the held job pending", lambda: _squeue(
                lab, failed, "State") == "PENDING", timeout=60)
            assert not fail_once.exists()
        finally:
            root(lab, "scancel", failed)
            root(lab, "scontrol", "update", f"nodename={node}", "state=resume")
    # rsad staged it and saw it start (PrologSlurmctld, mounting-input), but no node
    # Prolog of ours mounted it
    history = [e.get("to") for e in (rsa_job(lab, failed) or {}).get("events", [])]
    assert "staged-in" in history, history
    assert "mounted-input" not in history, history
