"""The Slurm adapter and job-state classification against the lab's live slurmctld."""

from __future__ import annotations

import time
from collections.abc import Mapping

import pytest

from rsa_scheduler.core.directives import DirectiveSpec
from rsa_scheduler.core.states import JobState, derive_job_state
from rsa_scheduler.slurm.cli import CliSlurm
from rsa_scheduler.slurm.parse import QueueRow
from tests.integration.slurmkit import make_jobs, make_slurm, root, wait_for

LONG = ("-t", "5", "--wrap", "sleep 300")


class Classifier:
    """Derives job-states over successive real squeue reads, as rsad does."""

    def __init__(self, lab: Mapping[str, str]) -> None:
        self.slurm = make_slurm(lab)
        self.states: dict[str, JobState] = {}
        self.rows: dict[str, QueueRow] = {}

    def poll(self) -> dict[str, JobState]:
        rows = self.slurm.queue()
        self.rows = {r.job_id: r for r in rows}
        for r in rows:
            self.states[r.job_id] = derive_job_state(self.states.get(r.job_id), r.state,
                                                     r.reason)
        return self.states


def test_more_jobs_than_nodes_give_on_deck_and_priority(lab: Mapping[str, str]) -> None:
    """Once slurmctld's scheduling pass has run, one waiting job pends on Resources and the
    others on Priority, and first sight of that queue classifies them on-deck and queued.

    slurmctld tries every submission at once, so on a slow machine each new job can pend on
    Resources before the next pass (sched_interval) puts those behind the first on Priority
    (CI saw all three on Resources): rsad waits out staging.on_deck_settle for that reason,
    and this test waits for the settled queue.
    """
    with make_jobs(lab) as jobs:
        running = [jobs.submit(*LONG) for _ in range(4)]
        waiting = [jobs.submit(*LONG) for _ in range(3)]
        seen: list[dict[str, str]] = []

        def settled() -> Classifier | None:
            cls = Classifier(lab)
            cls.poll()
            seen.append({j: cls.rows[j].reason for j in waiting if j in cls.rows})
            reasons = [cls.rows[j].reason for j in waiting if j in cls.rows]
            if len(reasons) == 3 and sorted(reasons) == ["Priority", "Priority", "Resources"]:
                return cls
            return None

        cls = wait_for("one waiting job on Resources, two on Priority", settled, timeout=90)
        assert all(cls.states[j] is JobState.RUNNING for j in running), cls.rows
        on_deck = [j for j in waiting if cls.states[j] is JobState.ON_DECK]
        assert len(on_deck) == 1, (cls.rows, seen)
        assert {cls.states[j] for j in waiting if j not in on_deck} == {JobState.QUEUED}
        # the first in line is the one on deck (same priority, submitted first)
        assert on_deck == [waiting[0]], (cls.rows, seen)


def test_higher_priority_submission_demotes_the_on_deck_job(lab: Mapping[str, str]) -> None:
    cls = Classifier(lab)
    with make_jobs(lab) as jobs:
        for _ in range(4):
            jobs.submit(*LONG)
        first = jobs.submit(*LONG)
        wait_for("first job on-deck", lambda: cls.poll().get(first) is JobState.ON_DECK)
        urgent = jobs.submit(*LONG)
        root(lab, "scontrol", "update", f"jobid={urgent}", "priority=50000")
        wait_for("demotion", lambda: cls.poll().get(first) is JobState.DEMOTED, timeout=90)
        assert cls.states[urgent] is JobState.ON_DECK


def lockin_method(lab: Mapping[str, str]) -> str:
    """The lab's lock-in: QOS with accounting, priority without (RSA_LAB_ACCOUNTING=0)."""
    return lab.get("RSA_LAB_LOCKIN_METHOD") or (
        "qos" if lab.get("RSA_LAB_ACCOUNTING") == "1" else "priority")


def urgent_priority(lab: Mapping[str, str]) -> int:
    """A priority an admin gives an urgent job: above every ordinary job, below the lock-in
    (QOS rsa-lockin adds 100000 under priority/multifactor; priority/basic counts ordinary
    jobs down from 0xffff0000, under the lab's lock-in priority)."""
    if lockin_method(lab) == "qos":
        return 50_000
    return int(lab["RSA_LAB_LOCKIN_PRIORITY"]) - 1000


def make_lockin_slurm(lab: Mapping[str, str]) -> CliSlurm:
    method = lockin_method(lab)
    if method == "qos":
        return make_slurm(lab, lockin_method="qos")
    return make_slurm(lab, lockin_method="priority",
                      lockin_priority=int(lab["RSA_LAB_LOCKIN_PRIORITY"]))


@pytest.mark.lockin
def test_lock_in_keeps_the_place_and_unlock_lets_it_go(lab: Mapping[str, str]) -> None:
    """Both lab phases: by QOS (accounting on), by priority (accounting off)."""
    cls = Classifier(lab)
    slurm = make_lockin_slurm(lab)
    with make_jobs(lab) as jobs:
        for _ in range(4):
            jobs.submit(*LONG)
        locked = jobs.submit(*LONG)
        wait_for("job on-deck", lambda: cls.poll().get(locked) is JobState.ON_DECK)
        before = cls.rows[locked].priority
        token = slurm.lock_original(locked)  # recorded before the lock-in
        slurm.lock_in(locked)
        assert token == ("normal" if slurm.lockin_method == "qos" else str(before))
        urgent = jobs.submit(*LONG)
        root(lab, "scontrol", "update", f"jobid={urgent}", f"priority={urgent_priority(lab)}")
        cls.poll()
        assert cls.rows[urgent].priority > before  # it would have overtaken the job
        # three scheduler passes (the lab's sched_interval=2): the locked job must stay
        # on-deck
        for _ in range(6):
            cls.poll()
            assert cls.states[locked] is JobState.ON_DECK, cls.rows[locked]
            time.sleep(1)
        assert cls.rows[locked].priority > cls.rows[urgent].priority
        assert cls.states[urgent] is JobState.QUEUED
        assert slurm.unlock(locked, token).endswith(f"{token} restored")
        wait_for("demotion after unlock",
                 lambda: cls.poll().get(locked) is JobState.DEMOTED, timeout=30)
        assert cls.states[urgent] is JobState.ON_DECK


def test_running_and_every_finished_variant_are_seen(lab: Mapping[str, str]) -> None:
    cls = Classifier(lab)
    seen: dict[str, set[str]] = {}
    with make_jobs(lab) as jobs:
        ids = {
            "COMPLETED": jobs.submit("-t", "1", "--wrap", "sleep 3"),
            "FAILED": jobs.submit("-t", "1", "--wrap", "sleep 3; exit 3"),
            "TIMEOUT": jobs.submit("-t", "1", "--wrap", "sleep 300"),
            "CANCELLED": jobs.submit("-t", "1", "--wrap", "sleep 300"),
        }

        def probe() -> bool:
            cls.poll()
            for want, job in ids.items():
                row = cls.rows.get(job)
                if row:
                    seen.setdefault(job, set()).add(row.state)
                if want == "CANCELLED" and "RUNNING" in seen.get(job, set()) and \
                        row and row.state == "RUNNING":
                    root(lab, "scancel", job)
            return all(want in seen.get(job, set()) for want, job in ids.items())

        wait_for("all finished variants", probe, timeout=150, every=2)
    for want, job in ids.items():
        assert "RUNNING" in seen[job], (want, seen[job])
        assert cls.states[job] is JobState.FINISHED


def test_batch_script_and_admin_comment_round_trip(lab: Mapping[str, str]) -> None:
    slurm = make_slurm(lab)
    script = ("#!/bin/bash\n#SBATCH -t 5\n#RSA_DATA_IN /pfs/home/rsauser/in\n"
              "#RSA_DATA_OUT=/pfs/home/rsauser/out\nsleep 1\n")
    with make_jobs(lab) as jobs:
        job = jobs.submit("-H", script=script)
        assert slurm.batch_script(job) == script
        spec = DirectiveSpec(data_in="/pfs/home/rsauser/in", data_out="/pfs/home/rsauser/out")
        root(lab, "scontrol", "update", f"jobid={job}",
             f"admincomment={spec.to_admin_comment()}")
        (row,) = [r for r in slurm.queue() if r.job_id == job]
        assert DirectiveSpec.from_admin_comment(row.admin_comment or "") == spec
        slurm.set_comment(job, "RSA: staging in 40%")
        assert "Comment=RSA: staging in 40%" in root(lab, "scontrol", "show", "job", "-o", job)


def test_drain_nodes_drains_with_the_reason_and_leaves_running_jobs(
        lab: Mapping[str, str]) -> None:
    """rsad drains compute nodes that did not confirm a release of a RAMDISK (issue 13):
    the real scontrol takes the node list and the reason as one argument each."""
    slurm = make_slurm(lab)
    with make_jobs(lab) as jobs:
        job = jobs.submit(*LONG)
        # RUNNING, not CONFIGURING: the Prolog must be over before the check below
        node = wait_for("the job running", lambda: next(
            (f[1] for f in [root(lab, "squeue", "-h", "-j", job, "-o", "%T %N").split()]
             if len(f) == 2 and f[0] == "RUNNING"), None))
        reason = f"rsa: did not confirm release of job {job}'s RAMDISK"
        try:
            slurm.drain_nodes([node], reason)
            shown = root(lab, "scontrol", "show", "node", node)
            assert "DRAIN" in shown and f"Reason={reason}" in shown
            # draining stops new jobs landing there; the running one goes on
            assert root(lab, "squeue", "-h", "-j", job, "-o", "%T").strip() == "RUNNING"
        finally:
            root(lab, "scontrol", "update", f"NodeName={node}", "State=RESUME")
        assert "DRAIN" not in root(lab, "sinfo", "-h", "-n", node, "-o", "%T").upper()
