"""Slurm's own burst-buffer limits in the native lab (issue 33): ``GrpTRES=bb/lua=<MiB>``
on a user's association (accounting on, ``AccountingStorageTRES=bb/lua``,
``AccountingStorageEnforce=limits``). What Slurm counts is the job's ``#BB_LUA``
capacity, which job_submit.lua sizes from ``#RSA_CAPACITY``.

Slurm 22.05 checks that limit only when it selects nodes for the job, which it does only
once the job's stage-in is done: until then the job pends with ``BurstBufferStageIn``,
so rsad stages it like any other, and only then does Slurm hold it with ``AssocGrpBB``
(seen in the lab; before this, rsad kept such a job's RAMDISK locked in). rsad never
allocates while it reads a limit of the job's association or QOS, or a hold, as its
reason (core.states.slurm_withholds), and a staged job Slurm holds keeps its RSA nodes
only until the lock-in bound (``slurm.lockin.timeout``), in native mode too; it runs from
the PFS if the limit ever lets it. Skipped in a queue-mode lab.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import other_user_area
from tests.integration.slurmkit import make_jobs, root, wait_for
from tests.integration.test_rsad_staging import rsa_job, wait_state

pytestmark = pytest.mark.native

REASON = "AssocGrpBB"  # Slurm 22.05's reason for a job over its association's GrpTRES=bb/


@pytest.fixture(autouse=True)
def _accounting(lab: Mapping[str, str]) -> None:
    if lab["RSA_LAB_ACCOUNTING"] != "1":
        pytest.skip("needs slurmdbd (RSA_LAB_ACCOUNTING=1)")


@pytest.fixture
def other_area(lab: Mapping[str, str]) -> Iterator[Path]:
    """A fresh directory of rsaother's on the PFS with in/f1 and res/."""
    with other_user_area(lab, "native-limits") as base:
        yield base


def node_mib(size: str) -> int:
    """The lab's RSA node size (RSA_LAB_RAM_SIZE, e.g. ``2G``) in MiB."""
    units = {"M": 1, "G": 1024, "T": 1024 * 1024}
    return int(size[:-1]) * units[size[-1].upper()]


def limit_shown(mib: int) -> str:
    """How sacctmgr shows ``GrpTRES=bb/lua=<mib>``: 2048 as ``2G``, 1000 as ``1000``."""
    return f"bb/lua={mib // 1024}G" if mib and mib % 1024 == 0 else f"bb/lua={mib}"


def queue_line(lab: Mapping[str, str], job: str) -> tuple[str, str]:
    out = root(lab, "squeue", "-h", "-t", "all", "-j", job, "-o", "%T|%r").strip()
    state, _, reason = out.partition("|")
    return state, reason


def script(base: Path, name: str, capacity: str | None) -> str:
    sized = f"#RSA_CAPACITY={capacity}\n" if capacity else ""
    return f"""#!/bin/bash
#SBATCH -t 5
#RSA_DATA_IN={base}/in
{sized}findmnt -n -o TARGET --target {base}/in > {base}/res/{name}
"""


def limit_seen_at_allocation(events: list[dict[str, Any]]) -> list[str]:
    """The limit reasons rsad had last read for the job whenever it allocated RSA nodes
    for it (none: it never allocated while Slurm showed a limit)."""
    reason, bad = "", []
    for e in events:
        if e["name"] == "job.state" and e.get("reason") is not None:
            reason = str(e["reason"])
        elif e["name"] == "rsa.transition" and e.get("to") == "allocated" and \
                reason.startswith(("Assoc", "QOS")):
            bad.append(reason)
    return bad


def test_a_job_over_slurms_grptres_bb_limit_holds_no_rsa_nodes_past_the_bound(
        lab: Mapping[str, str], other_area: Path) -> None:
    """Slurm 22.05 checks a job's bb TRES against its association's limit only when it
    selects nodes for it, after its stage-in (before, the job's reason is
    BurstBufferStageIn): rsad stages it, then Slurm holds it with AssocGrpBB for ever.
    Its RAMDISK is kept only until the lock-in bound; then its RSA nodes are free and
    its user reads why. rsad never allocates while it reads the limit as the reason. The
    same user's job under the limit runs through its RAMDISK meanwhile."""
    from tests.integration.test_lockin_ends import _lockin_timeout

    other = lab["RSA_LAB_OTHER_USER"]
    # the limit is one RSA node's bytes: a small job (1M asked, raised by real_size to the
    # one node it gets) fits, a job asking two nodes' worth never does
    limit = node_mib(lab["RSA_LAB_RAM_SIZE"])
    wait_for("the ram pool in scontrol show burst", lambda: "PoolName[0]=ram " in root(
        lab, "scontrol", "show", "burst"), timeout=60)
    root(lab, "sacctmgr", "-i", "modify", "user", other, "set", f"GrpTRES=bb/lua={limit}")
    try:
        assert limit_shown(limit) in root(lab, "sacctmgr", "-n", "-P", "show", "assoc",
                                          f"user={other}", "format=GrpTRES")
        with _lockin_timeout(lab, "20s"), make_jobs(lab) as jobs:
            big = jobs.submit(script=script(other_area, "big", f"{2 * limit}M"), user=other)
            assert f"capacity={2 * limit}M" in root(lab, "scontrol", "show", "job", big)
            try:
                wait_for(f"job {big} pending for {REASON}",
                         lambda: queue_line(lab, big) == ("PENDING", REASON),
                         timeout=90, every=0.5)
            except AssertionError as exc:  # say what Slurm says instead
                raise AssertionError(f"{exc}: {queue_line(lab, big)}") from None
            # the same user's job under the limit runs through its RAMDISK meanwhile
            small = jobs.submit(script=script(other_area, "small", None), user=other)
            wait_state(lab, small, "released", timeout=120)
            assert (other_area / "res" / "small").read_text().strip() == \
                f"{other_area}/in"  # a RAMDISK over the input
            # the big one: no RSA nodes once the bound has passed (or none ever)
            data = wait_for(f"job {big} holds no RSA nodes", lambda: (
                d if (d := rsa_job(lab, big) or {}).get("rsa_state") in (
                    None, "none", "released", "declined") else None), timeout=90)
            events = list(data.get("events") or [])
            seen = [(e.get("to"), e.get("reason")) for e in events if e["name"] == "job.state"]
            assert not data.get("nodes"), (data, seen)
            assert limit_seen_at_allocation(events) == [], seen
            if data.get("rsa_state") != "none":  # staged before Slurm's limit showed
                assert "slurm.lockin.timeout" in str(data.get("message")), (data, seen)
            # Slurm still holds it for its limit (its reason reads None for a moment after
            # an update of the job, rsad's comment among them, until its next pass)
            wait_for(f"job {big} still pending for {REASON}",
                     lambda: queue_line(lab, big) == ("PENDING", REASON), timeout=30,
                     every=0.5)
            assert not (other_area / "res" / "big").exists()
    finally:
        root(lab, "sacctmgr", "-i", "modify", "user", other, "set", "GrpTRES=bb/lua=-1")


def test_a_staged_job_slurm_then_holds_for_a_limit_keeps_its_rsa_nodes_only_to_the_bound(
        lab: Mapping[str, str], other_area: Path) -> None:
    """rsaother's job is staged and locked in while the cluster is full; then its
    association's bb limit drops to 0 and the cluster frees up: Slurm keeps it pending
    with AssocGrpBB. rsad keeps its RAMDISK (the limit may lift at once) only until the
    lock-in bound, which frees its RSA nodes and says why; with the limit lifted the job
    runs, reading its input from the PFS."""
    from tests.integration.test_lockin_ends import _lockin_timeout
    from tests.integration.test_rsad_staging import fill

    other = lab["RSA_LAB_OTHER_USER"]
    with _lockin_timeout(lab, "30s"), make_jobs(lab) as jobs:
        fill(jobs)
        wait_for("the cluster full", lambda: all(
            queue_line(lab, j)[0] == "RUNNING" for j in jobs.ids), timeout=60)
        job = jobs.submit(script=script(other_area, "staged", None), user=other)
        wait_state(lab, job, "locked-in", timeout=180)
        locked_at = time.monotonic()
        root(lab, "sacctmgr", "-i", "modify", "user", other, "set", "GrpTRES=bb/lua=0")
        try:
            for filler in jobs.ids[:-1]:
                root(lab, "scancel", filler)
            wait_for(f"job {job} pending for {REASON}",
                     lambda: queue_line(lab, job) == ("PENDING", REASON),
                     timeout=60, every=0.5)
            held = rsa_job(lab, job) or {}
            if time.monotonic() - locked_at < 25:  # well before the bound: still its own
                assert held.get("rsa_state") == "locked-in" and held.get("nodes"), held
            wait_state(lab, job, "declined", "released", timeout=90)
            assert time.monotonic() - locked_at >= 25
            data = rsa_job(lab, job) or {}
            assert not data.get("nodes"), data
            assert "slurm.lockin.timeout" in str(data.get("message")), data.get("message")
            wait_for(f"job {job} still pending for {REASON}",  # (as above)
                     lambda: queue_line(lab, job) == ("PENDING", REASON), timeout=30,
                     every=0.5)
        finally:
            root(lab, "sacctmgr", "-i", "modify", "user", other, "set", "GrpTRES=bb/lua=-1")
        wait_for(f"job {job} ran", lambda: queue_line(lab, job)[0] in ("COMPLETED", ""),
                 timeout=120)
    ran_on = (other_area / "res" / "staged").read_text().strip()
    assert ran_on and ran_on != f"{other_area}/in", ran_on  # the PFS, not a RAMDISK
