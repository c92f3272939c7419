"""TRIO stage-out ordering in real lifecycles (issue 17, seed 003).

rsad restarted with ``staging.stage_out_order: trio`` and ``flushes_per_target: 1``; four
DATA_OUT-only jobs, one per compute node, each on its own RAMDISK, all staging out to the
same PFS target. The first job (the biggest output, 1.5 GiB: ~18 s through the lab's
1 Gbit/s PFS) ends alone; the other three end together while it copies, so all three
wait for the one slot. Its copy must outlast the others' way from their end to the slot:
in native mode Slurm's post_run and data_out hooks put ~10-14 s between a job's end and
its stage-out reaching rsad (measured in the lab), so with 1 GiB (~12 s) job 1 sometimes
finished before jobs 2 and 3 were waiting and job 4 rightly took the free slot. Their
outputs shrink with the job id, so the orders differ: TRIO admits them oldest job first
(2, 3, 4), SJF would take the smallest first (4, 3, 2), and FIFO would copy all at once.

The oracle is on the PFS, not in rsad: a stage-out copies into
``DATA_OUT/.rsa-staging-<job>-<random>/`` after it took its slot and renames it away
before it gives the slot back, so the test (as root, polling every 0.1 s) sees when each
job copied. Both run in the queue-mode lab only: the gate and its crash recovery are
rsad's own; that native mode's data_out hooks ride through an rsad crash during stage-out
is tests/e2e/test_native_trouble.py's.
"""

from __future__ import annotations

import itertools
import signal
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from tests.e2e.conftest import input_area, md5_of, rsad_configured
from tests.integration.conftest import as_user
from tests.integration.slurmkit import (
    make_jobs,
    start_lab_rsad,
    stop_lab_rsad,
    wait_for,
)
from tests.integration.test_rsad_staging import state_of, wait_state

MIB = {1: 1536, 2: 300, 3: 200, 4: 100}  # output of job k, MiB (4 files each; 2G RSA nodes)


def parts(area: Path) -> dict[int, set[str]]:
    """The part directories in each job's (k) DATA_OUT."""
    out: dict[int, set[str]] = {}
    for k in MIB:
        try:
            out[k] = {p.name for p in (area / f"out{k}").iterdir()
                      if p.name.startswith(".rsa-staging-")}
        except FileNotFoundError:
            out[k] = set()
    return out


def copying(area: Path, stale: dict[int, set[str]] | None = None) -> set[int]:
    """The jobs (k) whose stage-out is copying now: a part directory in their DATA_OUT
    (not one of ``stale``: those a killed rsad's copies left, until the job's next copy
    takes its slot and removes them)."""
    stale = stale or {}
    return {k for k, names in parts(area).items() if names - stale.get(k, set())}


def script(area: Path, k: int) -> str:
    each = MIB[k] // 4
    return f"""#!/bin/bash
#SBATCH -t 10
#RSA_DATA_OUT={area}/out{k}
for i in 1 2 3 4; do head -c {each}M /dev/urandom > {area}/out{k}/f$i; done
(cd {area}/out{k} && md5sum f*) > {area}/res/md5-{k}
touch {area}/res/ready{k}
while [ ! -e {area}/res/go{1 if k == 1 else 'rest'} ]; do sleep 0.2; done
"""


@pytest.fixture
def area(lab: Mapping[str, str]) -> Iterator[Path]:
    with input_area(lab, "flush-e2e") as base:
        made = as_user(lab, lab["RSA_LAB_USER"], ["mkdir"] + [
            str(base / f"out{k}") for k in MIB], timeout=60)
        assert made.returncode == 0, made.stderr
        yield base


@pytest.mark.once  # the gate's order is rsad's own
def test_trio_gives_the_one_pfs_slot_to_the_oldest_waiting_job_first(
        lab: Mapping[str, str], area: Path) -> None:
    with rsad_configured(lab, "  stage_out_order: trio\n  flushes_per_target: 1\n"), \
            make_jobs(lab) as jobs:
        ids = {k: jobs.submit(script=script(area, k)) for k in MIB}
        assert [int(ids[k]) for k in sorted(ids)] == sorted(int(i) for i in ids.values())
        wait_for("every job wrote its output", lambda: all(
            (area / "res" / f"ready{k}").exists() for k in MIB), timeout=300, every=0.5)
        (area / "res" / "go1").touch()
        first_seen: dict[int, float] = {}
        last_seen: dict[int, float] = {}
        most_at_once = 0
        deadline = time.monotonic() + 600
        while len(last_seen) < len(MIB) or copying(area):
            assert time.monotonic() < deadline, f"stage-outs seen: {sorted(first_seen)}"
            now_copying = copying(area)
            now = time.monotonic()
            for k in now_copying:
                first_seen.setdefault(k, now)
                last_seen[k] = now
            most_at_once = max(most_at_once, len(now_copying))
            if 1 in first_seen and not (area / "res" / "gorest").exists():
                (area / "res" / "gorest").touch()  # the others end while job 1 copies
            time.sleep(0.1)
        for k in MIB:
            assert wait_state(lab, ids[k], "released", timeout=300) == "released"
    # the cap: one stage-out on the target at a time
    assert most_at_once == 1, (most_at_once, first_seen, last_seen)
    # job 1 went first (alone), then the three waiting ones oldest first: not by size
    order = sorted(first_seen, key=first_seen.__getitem__)
    assert order == [1, 2, 3, 4], (order, {ids[k]: MIB[k] for k in MIB}, first_seen,
                                   last_seen)
    # and each one waited for the one before it: its copy began after that one's ended
    for a, b in itertools.pairwise(order):
        assert first_seen[b] >= last_seen[a], (a, b, first_seen, last_seen)
    for k in MIB:
        assert (area / "res" / f"md5-{k}").read_text() == md5_of(area / f"out{k}")


@pytest.mark.once  # rsad's recovery; native data_out across a crash: test_native_trouble
def test_a_crash_while_stage_outs_wait_for_the_slot_loses_nothing(
        lab: Mapping[str, str], area: Path) -> None:
    """kill -9 of rsad while job 1 copies and jobs 2-4 wait for the one PFS slot: the
    restarted rsad stages every output out, verified, with the cap kept, and leaves no
    part directory behind."""
    with rsad_configured(lab, "  stage_out_order: trio\n  flushes_per_target: 1\n"), \
            make_jobs(lab) as jobs:
        ids = {k: jobs.submit(script=script(area, k)) for k in MIB}
        wait_for("every job wrote its output", lambda: all(
            (area / "res" / f"ready{k}").exists() for k in MIB), timeout=300, every=0.5)
        (area / "res" / "go1").touch()
        wait_for("job 1 copying", lambda: 1 in copying(area), timeout=120, every=0.1)
        (area / "res" / "gorest").touch()

        def one_copies_others_wait() -> tuple[set[int], set[int]] | None:
            """One job copying and at least one other in its stage-out waiting for the
            slot. Usually job 1 copies while 2-4 wait; on a slow machine job 1 may finish
            before the others reach the slot (native mode puts 10-30 s of Slurm hooks
            between a job's end and its stage-out), then job 2 copies while 3-4 wait:
            the same crash."""
            now = copying(area)
            wait = {k for k in (2, 3, 4)
                    if k not in now and state_of(lab, ids[k]) == "staging-out"}
            return (now, wait) if len(now) == 1 and wait and copying(area) == now else None

        busy, waiting = wait_for("one stage-out copying and others waiting for the slot",
                                 one_copies_others_wait, timeout=240, every=0.2)
        stop_lab_rsad(signal.SIGKILL)
        stale = parts(area)  # job 1's killed copy's: no copy runs in it any more
        start_lab_rsad()
        most_at_once, seen = 0, []
        deadline = time.monotonic() + 600
        while not all(state_of(lab, ids[k]) == "released" for k in MIB):
            assert time.monotonic() < deadline, {k: state_of(lab, ids[k]) for k in MIB}
            now = copying(area, stale)
            if len(now) > most_at_once:
                most_at_once, seen = len(now), [parts(area)]
            time.sleep(0.2)
    # the cap holds after the restart
    assert most_at_once <= 1, (most_at_once, busy, waiting, stale, seen)
    for k in MIB:
        assert (area / "res" / f"md5-{k}").read_text() == md5_of(area / f"out{k}"), k
        assert not [p.name for p in (area / f"out{k}").iterdir()
                    if p.name.startswith(".rsa-staging-")], k
