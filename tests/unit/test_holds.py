"""The start hold's pure parts (daemon/holds.py, slurm/parse.py): which held jobs could
start now, and why each one is released. The Slurm side runs in the lab
(tests/e2e/test_start_hold.py)."""

from __future__ import annotations

import pytest

from rsa_scheduler.core.directives import (
    RERUN_MARK,
    DirectiveSpec,
    rerun_held,
    split_hold,
    with_hold,
)
from rsa_scheduler.core.machine import JobRecord
from rsa_scheduler.core.states import RsaState
from rsa_scheduler.daemon.holds import READY, hold_verdict, startable
from rsa_scheduler.slurm.parse import parse_pending, parse_sinfo_partitions
from tests.conftest import DATA

SPEC = DirectiveSpec(data_in="/pfs/in")


def test_idle_nodes_per_partition_from_real_sinfo_output() -> None:
    # captured in the lab with every node allocated (tests/data/slurm/README.md)
    text = (DATA / "slurm" / "sinfo_partitions.txt").read_text()
    assert parse_sinfo_partitions(text) == {"debug": 0}


def test_only_idle_nodes_of_partitions_that_are_up_count() -> None:
    text = ("debug*|up|infinite|2|idle|c[1-2]\n"
            "debug*|up|infinite|1|mixed|c3\n"
            "debug*|up|infinite|1|idle~|c4\n"
            "long|up|infinite|3|idle|c[1-2,5]\n"
            "gone|down|infinite|4|idle|d[1-4]\n")
    assert parse_sinfo_partitions(text) == {"debug": 2, "long": 3, "gone": 0}
    with pytest.raises(ValueError):
        parse_sinfo_partitions("debug|up\n")


def test_each_held_job_is_judged_alone_against_the_idle_nodes() -> None:
    """Held jobs take no node while Slurm holds them: released, each would start at once
    on what is idle (issue 32: judged "busy" because the jobs before them were counted on
    those nodes, 23 of a burst of 24 were released and read the PFS)."""
    idle = {"debug": 4, "long": 1}
    held = [("1", "debug", 2), ("2", "debug", 3), ("3", "debug,long", 1), ("4", "debug", 2),
            ("5", "nosuch", 1), ("6", "long", 1), ("7", "debug", 5), ("8", "long", 2)]
    # 5's partition is unknown; 7 and 8 are larger than what is idle in theirs
    assert startable(held, idle) == {"1", "2", "3", "4", "6"}
    # 24 one-node jobs on the lab's four idle nodes: every one would start at once
    burst = [(str(n), "debug", 1) for n in range(24)]
    assert len(startable(burst, {"debug": 4})) == 24


def test_pending_jobs_submitted_before_take_the_idle_nodes_first() -> None:
    # four idle nodes, but four one-node jobs just submitted (not started yet) will take
    # them: a job held now could not start
    ahead = [("debug", 1)] * 4
    assert startable([("9", "debug", 1)], {"debug": 4}, ahead) == set()
    assert startable([("9", "debug", 1)], {"debug": 5}, ahead) == {"9"}


def test_pending_jobs_from_real_squeue_output() -> None:
    # captured in the lab: 4 running, 2 plain jobs, an array of 3, one with --begin
    text = (DATA / "slurm" / "squeue_pending.txt").read_text()
    got = parse_pending(text)
    assert ("61", 1, "Resources", "debug") in got and ("63_1", 1, "Priority", "debug") in got
    assert ("64", 1, "BeginTime", "debug") in got and len(got) == 6


def test_pending_jobs_are_parsed() -> None:
    text = "12|4|Resources|debug\n13_2|1|Priority|debug,long\n14|2|BeginTime|debug\n"
    assert parse_pending(text) == [("12", 4, "Resources", "debug"),
                                   ("13_2", 1, "Priority", "debug,long"),
                                   ("14", 2, "BeginTime", "debug")]
    with pytest.raises(ValueError):
        parse_pending("12|many|None|debug\n")


def rec(state: RsaState, **kw: object) -> JobRecord:
    r = JobRecord(job_id="7", user="alice", spec=SPEC, rsa_state=state)
    for k, v in kw.items():
        setattr(r, k, v)
    return r


@pytest.mark.parametrize("state", sorted(READY))
def test_a_job_whose_ramdisk_is_ready_is_released(state: RsaState) -> None:
    v = hold_verdict("7", rec(state), True)
    assert v is not None and v.message == "RSA: input staged to the RAMDISK; released to start"


@pytest.mark.parametrize("state", [RsaState.NONE, RsaState.ALLOCATED, RsaState.FS_BUILDING,
                                   RsaState.FS_READY, RsaState.STAGING_IN,
                                   RsaState.STAGE_IN_FAILED])
def test_a_job_on_its_way_stays_held(state: RsaState) -> None:
    assert hold_verdict("7", rec(state), True) is None


def test_a_job_the_rsa_will_not_serve_is_released_with_the_reason() -> None:
    v = hold_verdict("7", rec(RsaState.DECLINED, message="the RSA cannot serve this job"),
                     True)
    assert v is not None and v.message == (
        "RSA: no RAMDISK for this run (the RSA cannot serve this job); released to start: "
        "it reads from the PFS")
    v = hold_verdict("7", rec(RsaState.TEARING_DOWN, declined=True), True)
    assert v is not None and "no RAMDISK" in v.message


def test_a_job_that_could_not_start_now_is_released_before_it_gets_rsa_nodes() -> None:
    v = hold_verdict("7", rec(RsaState.NONE), False)
    assert v is not None and v.message.startswith("RSA: the cluster is busy")
    # no RSA node may be free when it is next to run: it then reads the PFS (review: the
    # message promised the stage-in)
    assert v.message.endswith("if RSA nodes are free then (else it reads the PFS)")
    assert hold_verdict("7", None, True) is not None  # no RSA work: nothing to wait for


def test_the_hold_marker_round_trips_and_never_parses_as_a_spec_field() -> None:
    comment = SPEC.to_admin_comment()
    held = with_hold(comment, 1_790_000_000)
    assert held == f"{comment} hold=1790000000"
    assert split_hold(held) == (comment, 1_790_000_000)
    assert with_hold(held, None) == comment
    assert split_hold(comment) == (comment, None)
    assert split_hold(f"{comment} hold=soon") == (f"{comment} hold=soon", None)
    with pytest.raises(ValueError):
        DirectiveSpec.from_admin_comment(held)  # the marker is not part of the spec


def test_planned_nodes_count_as_idle() -> None:
    """Slurm 22.05 shows idle nodes its backfill set aside for a pending job as
    ``planned`` (seen in the lab: a held hetjob's second component pends with reason None
    and its nodes turn planned, so the hetjob was judged unable to start)."""
    text = ("debug*|up|infinite|3|planned|c[1-3]\n"
            "debug*|up|infinite|1|idle|c4\n")
    assert parse_sinfo_partitions(text) == {"debug": 4}
    assert startable([("20", "debug", 3)], parse_sinfo_partitions(text)) == {"20"}


def test_a_declined_jobs_release_says_the_pfs_once() -> None:
    r = rec(RsaState.DECLINED, message=(
        "refused, no retry: job uses the PFS: stage-in refused: the input (2.3G in 2 "
        "files) is larger than the RAMDISK's free space (1.94G): set #RSA_CAPACITY=3G or "
        "more to get RSA nodes that hold it"))
    verdict = hold_verdict("7", r, True)
    assert verdict is not None
    assert verdict.message == (
        "RSA: no RAMDISK for this run (refused, no retry: stage-in refused: the input (2.3G "
        "in 2 files) is larger than the RAMDISK's free space (1.94G): set #RSA_CAPACITY=3G "
        "or more to get RSA nodes that hold it); released to start: it reads from the PFS")
    assert len(verdict.message) <= 250


def test_the_rerun_holds_marker_carries_no_deadline_and_leaves_the_spec_readable() -> None:
    comment = SPEC.to_admin_comment()
    assert split_hold(f"{comment}{RERUN_MARK}") == (comment, None)
    assert rerun_held(f"{comment}{RERUN_MARK}") and not rerun_held(with_hold(comment, 99))
    assert not rerun_held(comment)
