"""Native mode in the lab (issue 15): Slurm's real burst_buffer/lua runs the shipped
slurm_plugins/burst_buffer.lua, whose hooks drive rsad (``RSA_LAB_MODE=native make
lab-up``; ``make lab-test-native``).

A non-root job on an idle cluster pends with ``BurstBufferStageIn`` while rsad stages its
input, then reads it from the RAMDISK; a DATA_OUT-only job's output is staged out and
verified after its compute node was released; a stage-in the user's rights refuse holds
the job with ``BurstBufferOperation`` and rsad's line. Skipped in a queue-mode lab.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from rsa_scheduler.core.states import RsaState
from tests.e2e.conftest import input_area, md5_of
from tests.integration.conftest import as_user
from tests.integration.slurmkit import (
    bb_reason,
    lab_nodes,
    make_jobs,
    pfs_reads_at,
    ramdisk_servers,
    root,
    show_job,
    wait_for,
)
from tests.integration.test_rsad_staging import rsa_job, wait_state
from tests.slurm_json import squeue_json_job

pytestmark = pytest.mark.native



@pytest.fixture
def area(lab: Mapping[str, str]) -> Iterator[Path]:
    with input_area(lab, "native-e2e") as base:
        yield base


def show(lab: Mapping[str, str], job: str) -> dict[str, str]:
    return show_job(lab, job)


def queue_line(lab: Mapping[str, str], job: str) -> tuple[str, str]:
    """(state, reason) as squeue prints them (%T, %r)."""
    out = root(lab, "squeue", "-h", "-t", "all", "-j", job, "-o", "%T|%r").strip()
    state, _, reason = out.partition("|")
    return state, reason


def json_job(lab: Mapping[str, str], job: str) -> dict[str, Any]:
    """The job's entry of ``squeue --json`` (22.05: it ignores -j, so filtered here): it
    has the reason code even when a description replaces it in squeue's %r. Its state and
    priority read the same on 24.11 and 26.05 (tests/slurm_json.py)."""
    return squeue_json_job(root(lab, "squeue", "--json"), job)


def node_states(lab: Mapping[str, str]) -> dict[str, str]:
    out = root(lab, "sinfo", "-h", "-N", "-o", "%N|%T")
    return dict(line.split("|", 1) for line in out.splitlines() if line.strip())


# a node nothing runs on: Slurm 22.05 shows an idle node the backfill scheduler has set
# aside for a pending job (here the one waiting for its burst buffer) as "planned"
FREE = frozenset({"idle", "planned"})


def all_free(states: Mapping[str, str]) -> bool:
    return bool(states) and all(v in FREE for v in states.values())



def transitions(lab: Mapping[str, str], job: str) -> list[str]:
    data = rsa_job(lab, job) or {}
    return [str(e.get("to")) for e in data.get("events", []) if e["name"] == "rsa.transition"]


def test_an_idle_cluster_job_pends_in_stage_in_then_reads_its_input_from_the_ramdisk(
        lab: Mapping[str, str], area: Path) -> None:
    rsa = lab["RSA_LAB_VENV"] + "/bin/rsa"
    script = f"""#!/bin/bash
#SBATCH -t 5
#RSA_DATA_IN={area}/in
#RSA_DATA_OUT={area}/out
findmnt -n -o TARGET --target {area}/in > {area}/res/inmnt
(cd {area}/in && md5sum f*) > {area}/res/md5
echo "$RSA_MODE|$RSA_STATE" > {area}/res/env
"""
    # a 40 MB file read at 32 Mbit/s: ~10 s of stage-in, so the hold is seen whatever the
    # load (the small files alone were staged, and the job started, before a loaded host
    # had resumed the RSA nodes and looked at the queue)
    big = as_user(lab, lab["RSA_LAB_USER"], ["sh", "-c", f"head -c 40M /dev/urandom > "
                                                         f"{area}/in/big"], timeout=120)
    assert big.returncode == 0, big.stderr
    with make_jobs(lab) as jobs, pfs_reads_at(lab, "32mbit"):
        # no RSA node free at first: the job stays pending, the compute nodes idle. Slurm
        # either sees no free space in the pool (BurstBufferResources: rsad's pools file
        # says so) or, with a pools view up to 30 s old, already runs setup, which waits
        # in rsad (BurstBufferStageIn)
        for node in lab_nodes(lab, "RSA_LAB_RSA_NODES"):
            root(lab, rsa, "drain", node, "--reason", "native e2e")
        seen: set[str] = set()
        job = ""
        stop = threading.Event()

        def watch() -> None:
            """The reasons the job pends for, from the moment the nodes are resumed."""
            while not stop.is_set():
                line = queue_line(lab, job)
                if line[0] != "PENDING":
                    return
                seen.add(line[1])
                stop.wait(0.2)

        watcher = threading.Thread(target=watch, daemon=True)
        try:
            job = jobs.submit(script=script)
            assert "   BurstBuffer=#BB_LUA pool=ram capacity=1M\n" in root(
                lab, "scontrol", "show", "job", job)
            waiting = ("BurstBufferResources", "BurstBufferStageIn")
            wait_for("the job waiting for its burst buffer", lambda: queue_line(lab, job) in {
                ("PENDING", r) for r in waiting}, timeout=90, every=0.5)
            time.sleep(5)  # it keeps waiting
            assert queue_line(lab, job) in {("PENDING", r) for r in waiting}
            # nothing allocated (rsad may not track it yet: Slurm has not set it up)
            assert (rsa_job(lab, job) or {}).get("rsa_state") in (None, "none")
            states = node_states(lab)
            assert set(states) == set(lab_nodes(lab, "RSA_LAB_COMPUTE_NODES")) and all_free(
                states), states
            watcher.start()
        finally:
            for node in lab_nodes(lab, "RSA_LAB_RSA_NODES"):
                root(lab, rsa, "resume", node)
        # once nodes are free Slurm starts the stage-in and holds the job in it until done
        watcher.join(180)
        stop.set()
        assert "BurstBufferStageIn" in seen, seen
        wait_state(lab, job, "released", timeout=300)
    assert (area / "res" / "inmnt").read_text().strip() == f"{area}/in"  # the RAMDISK
    assert (area / "res" / "md5").read_text() == md5_of(area / "in")
    assert (area / "res" / "env").read_text().strip() == "native|input"
    reached = transitions(lab, job)
    assert "staged-in" in reached and "mounted-input" in reached, reached
    assert "declined" not in reached, reached


def test_output_only_job_is_staged_out_and_verified_after_its_node_was_released(
        lab: Mapping[str, str], area: Path) -> None:
    script = f"""#!/bin/bash
#SBATCH -t 5
#RSA_DATA_OUT={area}/out
for i in 1 2 3; do head -c 100M /dev/urandom > {area}/out/f$i; done
(cd {area}/out && md5sum f*) > {area}/res/md5
"""
    seen_released = False
    with make_jobs(lab) as jobs:
        job = jobs.submit(script=script)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            data = rsa_job(lab, job) or {}
            state = data.get("rsa_state")
            if state in (RsaState.STAGING_OUT, RsaState.VERIFYING):
                slurm_state, _ = queue_line(lab, job)
                nodes = node_states(lab)
                # Slurm holds the job in stage-out, its compute node already free
                if "STAGE_OUT" in slurm_state and all_free(nodes):
                    seen_released = True
            if state in (RsaState.RELEASED, RsaState.QUARANTINED):
                break
            time.sleep(0.2)
        assert wait_state(lab, job, "released", timeout=90) == "released"
        wait_for("the job gone from stage-out", lambda: "STAGE_OUT" not in queue_line(
            lab, job)[0], timeout=60)
        final = show(lab, job)
    assert seen_released, "never saw the stage-out running with the compute node free"
    assert (area / "res" / "md5").read_text() == md5_of(area / "out")  # on the PFS
    assert "output-verified" in transitions(lab, job)
    assert final["JobState"] == "COMPLETED", final


def test_an_unreadable_data_in_holds_the_job_with_rsads_reason(
        lab: Mapping[str, str], area: Path) -> None:
    user = lab["RSA_LAB_USER"]
    done = as_user(lab, user, ["chmod", "000", str(area / "in")])
    assert done.returncode == 0, done.stderr
    script = f"""#!/bin/bash
#SBATCH -t 5
#RSA_DATA_IN={area}/in
echo ran > {area}/res/ran
"""
    with make_jobs(lab) as jobs:
        job = jobs.submit(script=script)

        def failed() -> dict[str, Any] | None:
            entry = json_job(lab, job)
            return entry if entry.get("state_reason") == "BurstBufferOperation" else None

        entry = wait_for("the stage-in failure", failed, timeout=180, every=1.0)
        assert entry["job_state"] == "PENDING" and entry["priority"] == 0, entry  # held
        # what squeue's reason and scontrol show: Slurm's prefix and rsad's one line
        text = str(entry["state_description"])
        assert text.startswith(f"{bb_reason('data_in')}"
                               f"stage-in of job {job} failed: "), text
        assert str(area / "in") in text and text.endswith(
            "; fix it, then scancel the job and submit it again"), text
        assert "PFS" not in text, text
        assert queue_line(lab, job)[1] == text
        wait_state(lab, job, "declined", "released", timeout=120)
    assert not (area / "res" / "ran").exists()


def test_a_slurmctld_restart_after_stage_in_stages_nothing_twice(
        lab: Mapping[str, str], area: Path) -> None:
    """A full cluster: the job is staged while it waits for nodes (Slurm starts stage-in
    for a job due within 10 h). slurmctld restarts: it tears the buffer down (hurry) and
    sets it up again a minute later; rsad kept the RAMDISK (slurm.bb_grace) and answers
    at once. The job then reads its input from the one RAMDISK built for it."""
    from tests.integration.slurmkit import restart_lab_slurmctld
    from tests.integration.test_rsad_staging import fill

    script = f"""#!/bin/bash
#SBATCH -t 5
#RSA_DATA_IN={area}/in
findmnt -n -o TARGET --target {area}/in > {area}/res/inmnt
(cd {area}/in && md5sum f*) > {area}/res/md5
"""
    with make_jobs(lab) as jobs:
        fill(jobs)
        wait_for("the cluster full", lambda: all(
            queue_line(lab, j)[0] == "RUNNING" for j in jobs.ids), timeout=60)
        job = jobs.submit(script=script)
        wait_state(lab, job, "locked-in", timeout=180)
        assert queue_line(lab, job)[0] == "PENDING"
        restart_lab_slurmctld()

        def set_up_again() -> dict[str, Any] | None:
            got = rsa_job(lab, job) or {}
            names = [e["name"] for e in got.get("events", [])]
            return got if names.count("bb.setup") >= 2 else None

        data = wait_for("Slurm's teardown and setup again", set_up_again, timeout=180,
                        every=2.0)
        names = [e["name"] for e in data["events"]]
        assert "bb.teardown" in names, names
        assert data["rsa_state"] == "locked-in", data["rsa_state"]
        for filler in jobs.ids[:-1]:
            root(lab, "scancel", filler)
        wait_state(lab, job, "released", timeout=240)
        data = rsa_job(lab, job) or {}
    builds = [e for e in data["events"] if e["name"] == "action.outcome"
              and "/build-fs/" in str(e.get("action"))]
    stage_ins = [e for e in data["events"] if e["name"] == "action.outcome"
                 and "/stage-in/" in str(e.get("action"))]
    assert len(builds) == 1 and len(stage_ins) == 1, (builds, stage_ins)
    assert (area / "res" / "inmnt").read_text().strip() == f"{area}/in"
    assert (area / "res" / "md5").read_text() == md5_of(area / "in")


def test_a_slurmctld_restart_during_stage_in_loses_nothing(
        lab: Mapping[str, str], area: Path) -> None:
    """slurmctld restarts while rsad stages a job's input in (a 1 GiB file through the
    lab's throttled PFS, seconds of work): Slurm's recovery tears the buffer down (hurry)
    and sets it up again; rsad keeps the RAMDISK (slurm.bb_grace), its stage-in goes on,
    and data_in answers once it is done. The job reads every byte from the one RAMDISK
    built for it; nothing is staged twice and nothing of it is left afterwards."""
    from tests.integration.slurmkit import restart_lab_slurmctld

    made = as_user(lab, lab["RSA_LAB_USER"], [
        "bash", "-c", f"head -c {1 << 30} /dev/urandom > {area}/in/blob"], timeout=300)
    assert made.returncode == 0, made.stderr
    script = f"""#!/bin/bash
#SBATCH -t 10
#RSA_DATA_IN={area}/in
findmnt -n -o TARGET --target {area}/in > {area}/res/inmnt
(cd {area}/in && md5sum f* blob) > {area}/res/md5
"""
    with make_jobs(lab) as jobs:
        job = jobs.submit(script=script)
        wait_state(lab, job, "staging-in", timeout=180)
        assert queue_line(lab, job) == ("PENDING", "BurstBufferStageIn")
        restart_lab_slurmctld()
        assert (rsa_job(lab, job) or {}).get("rsa_state") == "staging-in", \
            "the restart did not land during the stage-in: make the input bigger"
        wait_state(lab, job, "released", timeout=400)
        data = rsa_job(lab, job) or {}
        wait_for("the job completed", lambda: queue_line(lab, job)[0] == "COMPLETED",
                 timeout=120, every=1.0)
    outcomes = [e for e in data["events"] if e["name"] == "action.outcome"]
    builds = [e for e in outcomes if "/build-fs/" in str(e.get("action"))]
    stage_ins = [e for e in outcomes if "/stage-in/" in str(e.get("action"))]
    assert len(builds) == 1 and [e["result"] for e in stage_ins] == ["ok"], outcomes
    assert (area / "res" / "inmnt").read_text().strip() == f"{area}/in"  # the RAMDISK
    assert (area / "res" / "md5").read_text() == md5_of(area / "in", "f* blob")
    left = ramdisk_servers(lab, f"job{job}-", "mfsmaster|mfschunkserver")
    assert not left, f"the job's RAMDISK servers are still running: {left}"


def test_a_slurmctld_restart_during_stage_out_loses_nothing(
        lab: Mapping[str, str], area: Path) -> None:
    """slurmctld restarts while rsad stages a job's output out: Slurm runs post_run and
    data_out again on recovery; rsad's stage-out goes on (one), and data_out answers done
    once the output is verified; the job then leaves stage-out."""
    from tests.integration.slurmkit import restart_lab_slurmctld

    script = f"""#!/bin/bash
#SBATCH -t 5
#RSA_DATA_OUT={area}/out
for i in 1 2 3 4 5 6; do head -c 100M /dev/urandom > {area}/out/f$i; done
(cd {area}/out && md5sum f*) > {area}/res/md5
"""
    with make_jobs(lab) as jobs:
        job = jobs.submit(script=script)
        wait_state(lab, job, "staging-out", "verifying", "output-verified", "tearing-down",
                   "released", timeout=240)
        restart_lab_slurmctld()
        wait_state(lab, job, "released", timeout=240)
        wait_for("the job out of stage-out", lambda: queue_line(lab, job)[0] == "COMPLETED",
                 timeout=120, every=1.0)
        data = rsa_job(lab, job) or {}
    stage_outs = [e for e in data["events"] if e["name"] == "action.outcome"
                  and "/stage-out/" in str(e.get("action"))]
    assert [e["result"] for e in stage_outs] == ["ok"], stage_outs
    assert "output-verified" in transitions(lab, job)
    assert (area / "res" / "md5").read_text() == md5_of(area / "out")


def test_sacct_accounts_the_ramdisk_as_the_bb_tres(
        lab: Mapping[str, str], area: Path) -> None:
    """Every RSA job's RAMDISK is the bb/lua TRES in sacct (accounting on:
    AccountingStorageTRES=bb/lua). A job asking for ``pool=ram capacity=1G`` itself, and a
    plain RSA job whose ``#BB_LUA pool=ram capacity=1M`` line job_submit.lua wrote: Slurm
    checks the pool rsad reports (scontrol show burst), real_size raises the size to the
    RSA node rsad gave each job, and sacct shows the request and the allocation."""
    if lab["RSA_LAB_ACCOUNTING"] != "1":
        pytest.skip("needs slurmdbd (RSA_LAB_ACCOUNTING=1)")
    wait_for("the ram pool in scontrol show burst", lambda: "PoolName[0]=ram " in root(
        lab, "scontrol", "show", "burst"), timeout=60)
    body = f"""#RSA_DATA_IN={area}/in
(cd {area}/in && md5sum f*) > {area}/res/md5.$SLURM_JOB_ID
"""
    own = f"#!/bin/bash\n#SBATCH -t 5\n#BB_LUA pool=ram capacity=1G\n{body}"
    plain = f"#!/bin/bash\n#SBATCH -t 5\n{body}"
    with make_jobs(lab) as jobs:
        asked, given = jobs.submit(script=own), jobs.submit(script=plain)
        # (scontrol's one-line form splits the value at its spaces: read the long form)
        assert "   BurstBuffer=#BB_LUA pool=ram capacity=1M\n" in root(
            lab, "scontrol", "show", "job", given)
        for job in (asked, given):
            wait_state(lab, job, "released", timeout=240)

        def tres(job: str) -> tuple[str, str] | None:
            out = root(lab, "sacct", "-n", "-X", "-P", "-j", job, "-o",
                       "State,ReqTRES,AllocTRES").strip()
            state, req, alloc = [*out.split("|"), "", "", ""][:3]
            return (req, alloc) if state == "COMPLETED" and "bb/lua" in alloc else None

        got = {job: wait_for(f"sacct's bb/lua of {job}", partial(tres, job), timeout=120,
                             every=2.0) for job in (asked, given)}
    for job, want in ((asked, "bb/lua=1G"), (given, "bb/lua=1M")):
        req, alloc = got[job]
        assert want in req.split(","), req
        assert f"bb/lua={lab['RSA_LAB_RAM_SIZE']}" in alloc.split(","), alloc  # one node
        assert (area / "res" / f"md5.{job}").read_text() == md5_of(area / "in")
