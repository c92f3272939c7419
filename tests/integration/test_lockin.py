"""Lock-in against the lab's real Slurm, in both lab phases: by QOS (accounting on, `make
lab-test`) and by priority (accounting off, `make lab-test-variant`).

The lab's rsad locks a staged job in, the job keeps its place when an urgent job arrives,
and once unlocked it is demoted and rsad sees it; rsad's start-up check reads the running
Slurm's configuration and refuses a lock-in Slurm would silently ignore.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from rsa_scheduler.config import Config, load_config
from rsa_scheduler.config.schema import LockinMethod
from rsa_scheduler.daemon.wiring import LockinUnusable, check_lockin
from tests.integration.conftest import as_user
from tests.integration.slurmkit import lab_rsad_pid, make_jobs, root, slurm_release, wait_for
from tests.integration.test_rsad_staging import fill, rsa_job, submit_rsa, wait_state
from tests.integration.test_slurm_adapter import lockin_method, urgent_priority

pytestmark = pytest.mark.lockin

FILL = ("-t", "5", "--wrap", "sleep 300")


def _queue(lab: Mapping[str, str], job: str) -> tuple[str, str, int, str]:
    """(state, reason, priority, qos) of a job in Slurm's own words."""
    state, reason, prio, qos = root(lab, "squeue", "-h", "-j", job, "-o",
                                    "%T|%r|%Q|%q").strip().split("|")
    return state, reason, int(prio), qos


@pytest.fixture()
def small_input(lab: Mapping[str, str]) -> Iterator[Path]:
    base = Path(lab["RSA_LAB_PFS"]) / f"lockin-it-{os.getpid()}"
    done = as_user(lab, lab["RSA_LAB_USER"], ["bash", "-c", (
        f"mkdir -p {base}/in {base}/out && head -c 100000 /dev/urandom > {base}/in/data")])
    assert done.returncode == 0, done.stderr
    yield base
    subprocess.run(["rm", "-rf", str(base)], check=False, timeout=60)


def test_rsad_lock_in_holds_the_place_and_rsad_sees_the_demotion_after_unlock(
        lab: Mapping[str, str], small_input: Path, tmp_path: Path) -> None:
    method = lockin_method(lab)
    with make_jobs(lab) as jobs:
        fill(jobs)
        job = submit_rsa(jobs, small_input / "in", small_input / "out", tmp_path)
        wait_state(lab, job, "locked-in")
        state, reason, prio, qos = _queue(lab, job)
        assert state == "PENDING" and reason != "Priority"  # ("None" until the next pass)
        if method == "qos":
            assert qos == lab["RSA_LAB_QOS"]
        else:
            assert prio == int(lab["RSA_LAB_LOCKIN_PRIORITY"])
        urgent = jobs.submit(*FILL)
        root(lab, "scontrol", "update", f"jobid={urgent}", f"priority={urgent_priority(lab)}")
        # four scheduler passes (the lab's sched_interval=2) and several rsad cycles (1 s)
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            assert _queue(lab, job)[:2] in (("PENDING", "Resources"), ("PENDING", "None")), \
                _queue(lab, job)
            data = rsa_job(lab, job)
            assert data and (data["job_state"], data["rsa_state"]) == ("on-deck", "locked-in")
            time.sleep(1)
        assert _queue(lab, urgent)[1] == "Priority"
        assert _queue(lab, job)[1] == "Resources"  # still next, after three passes
        # unlock behind rsad's back (as an admin could): the job is demoted at once
        if method == "qos":
            root(lab, "scontrol", "update", f"jobid={job}", "qos=normal")
        else:  # root's release of a job not held: Slurm recomputes its priority
            root(lab, "scontrol", "release", job)
        wait_for("rsad sees the demotion",
                 lambda: (rsa_job(lab, job) or {}).get("job_state") == "demoted", timeout=30)
        assert _queue(lab, urgent)[1] == "Resources"
        wait_state(lab, job, "released", timeout=60)  # its RAMDISK is torn down


def _lab_config(lab: Mapping[str, str]) -> Config:
    return load_config(lab["RSA_LAB_RSA_CONFIG"])


def test_lab_rsad_runs_with_the_lock_in_the_lab_set(lab: Mapping[str, str]) -> None:
    cfg = _lab_config(lab)
    assert cfg.slurm.lockin.method.value == lockin_method(lab)
    pid = lab_rsad_pid()
    assert Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[1].endswith(b"rsad")
    # rsad ran check_lockin at start-up against this same Slurm: it passes here too
    check_lockin(cfg)


def test_start_up_check_refuses_qos_without_accounting(lab: Mapping[str, str],
                                                       tmp_path: Path) -> None:
    cfg = _lab_config(lab)
    qos = replace(cfg, slurm=replace(cfg.slurm, lockin=replace(
        cfg.slurm.lockin, method=LockinMethod.QOS)))
    if lab["RSA_LAB_ACCOUNTING"] == "1":
        check_lockin(qos)  # slurmdbd, priority/multifactor, PriorityWeightQOS: it works
        return
    with pytest.raises(LockinUnusable) as exc:
        check_lockin(qos)
    # what scontrol show config says without accounting: 22.05 names the plugin, 23.11+
    # print (null)
    none = "accounting_storage/none" if slurm_release() < (23, 11) else "(null)"
    assert str(exc.value) == (
        "slurm.lockin.method is qos but Slurm has no accounting "
        f"(AccountingStorageType={none}), so it accepts qos= and ignores "
        "it: set slurm.lockin.method: priority, or enable slurmdbd")
    # the real rsad refuses to start with it, in one line (--check starts no servers)
    # (the lab's rsa.yaml by its keys: the two labs write it differently)
    data = yaml.safe_load(Path(lab["RSA_LAB_RSA_CONFIG"]).read_text())
    data.setdefault("slurm", {}).setdefault("lockin", {})["method"] = "qos"
    data.setdefault("daemon", {})["state_dir"] = f"{tmp_path}/state"
    conf = tmp_path / "rsa.yaml"
    conf.write_text(yaml.safe_dump(data))
    conf.chmod(0o600)
    done = subprocess.run([f"{lab['RSA_LAB_VENV']}/bin/rsad", "--config", str(conf), "--check"],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "SLURM_CONF": lab["RSA_LAB_SLURM_CONF"]})
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == f"rsad: error: {exc.value}"
    # ... and the lab's priority/basic refuses rsad's default priority, a demotion there
    low = replace(cfg, slurm=replace(cfg.slurm, lockin=replace(cfg.slurm.lockin,
                                                               priority=1_000_000)))
    with pytest.raises(LockinUnusable, match=r"slurm\.lockin\.priority 1000000 is not above"):
        check_lockin(low)


def test_start_up_check_refuses_a_priority_multifactor_can_reach(
        lab: Mapping[str, str]) -> None:
    """Method priority with accounting (what a site that bills or limits by QOS is told to
    use): under the lab's priority/multifactor (the lab above: PriorityWeightQOS 100000,
    PriorityWeightAge 1000; the cluster lab: PriorityWeightQOS 100000) a lock-in priority
    of the weights' sum is one an ordinary job can reach."""
    if lab["RSA_LAB_ACCOUNTING"] != "1":
        pytest.skip("priority/multifactor is the accounting lab's (make lab-test)")
    cfg = _lab_config(lab)
    reach = sum(int(value) for key, _, value in (
        line.partition("=") for line in
        root(lab, "scontrol", "show", "config").replace(" ", "").splitlines())
        if key.startswith("PriorityWeight") and value.isdigit())
    assert reach >= 100_000, reach

    def by_priority(value: int) -> Config:
        return replace(cfg, slurm=replace(cfg.slurm, lockin=replace(
            cfg.slurm.lockin, method=LockinMethod.PRIORITY, priority=value)))

    with pytest.raises(LockinUnusable) as exc:
        check_lockin(by_priority(reach))
    assert f"can give ordinary jobs (up to {reach}, the sum of the PriorityWeight*" in str(
        exc.value)
    check_lockin(by_priority(reach + 1))
