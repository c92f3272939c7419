"""The rerun hold (issue 35, queue mode): a requeued job's next run never starts while
its earlier run's output is staged out, verified or retried, under every early-start
policy; it is released once that output is verified or quarantined (under ``wait``: held
for its new RAMDISK as at submission), also across an rsad restart, and only rsad's own
hold is ever lifted (its release sets the begin time and the admin_comment only: an
admin's hold, priority 0, stays; the lab checks that against real Slurm). rsad's loop
with a scripted Slurm port; the lab runs it against real Slurm
(tests/e2e/test_requeue_cycles.py)."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from rsa_scheduler.core.actions import ActionKind
from rsa_scheduler.core.directives import DirectiveSpec, rerun_held, split_hold
from rsa_scheduler.core.policy import EarlyStart, StagingPolicy
from rsa_scheduler.core.scheduler import Scheduler
from rsa_scheduler.daemon.dispatch import COMMENT_MAX
from rsa_scheduler.daemon.executors import ActionContext, PermanentError, Registry
from rsa_scheduler.daemon.service import Daemon
from rsa_scheduler.daemon.starthold import RERUN_HOLD
from rsa_scheduler.slurm.parse import QueueRow
from rsa_scheduler.slurm.port import SlurmError
from rsa_scheduler.store import Store
from tests.unit.corekit import make_pool
from tests.unit.test_daemon import (
    ScriptedSlurm,
    flush_urgent,
    instant_registry,
    released,
    settle,
    with_slurm,
)

OUT = DirectiveSpec(data_out="/pfs/out")
COMMENT = OUT.to_admin_comment()


class Gated:
    """Executors that finish at once, but VERIFY waits for ``gate`` (and STAGE_OUT
    fails for good when ``fail_out``)."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.fail_out = False

    def registry(self, slurm: ScriptedSlurm) -> Registry:
        reg = instant_registry([])

        def verify(ctx: ActionContext) -> Mapping[str, Any]:
            assert self.gate.wait(10)
            return {}

        def stage_out(ctx: ActionContext) -> Mapping[str, Any]:
            if self.fail_out:
                raise PermanentError("the PFS refused")
            return {}

        reg.register(ActionKind.VERIFY, verify)
        reg.register(ActionKind.STAGE_OUT, stage_out)
        return with_slurm(reg, slurm)


def daemon(tmp_path: Path, slurm: ScriptedSlurm, gated: Gated,
           early: EarlyStart) -> Daemon:
    store = Store.open(tmp_path / "rsa.db", durability="normal")
    clock = iter(float(t) for t in range(1000, 10**6))
    d = Daemon(Scheduler(make_pool(), StagingPolicy(early_start=early, retries=0)),
               slurm=slurm, store=store, registry=gated.registry(slurm), workers=2,
               poll_interval=0, clock=lambda: next(clock))
    d.start()
    return d


def requeued_while_its_output_is_on_the_ramdisk(d: Daemon, slurm: ScriptedSlurm) -> None:
    """An output-only job runs with its RAMDISK over DATA_OUT, then is requeued; the
    Slurm calls that asks for are done."""
    requeued_while_its_output_is_on_the_ramdisk_unflushed(d, slurm)
    flush_urgent(d)


def requeued_while_its_output_is_on_the_ramdisk_unflushed(d: Daemon,
                                                          slurm: ScriptedSlurm) -> None:
    """An output-only job runs with its RAMDISK over DATA_OUT, then is requeued (the
    Slurm calls the cycle that saw it asked for may still be in flight)."""
    slurm.set("7", "PENDING", "Resources", spec=OUT)
    d.poll()
    settle(d)
    slurm.set("7", "RUNNING", spec=OUT)
    d.poll()
    settle(d)
    assert d.sched.records["7"].rsa_state.value == "mounted-output"
    slurm.set("7", "PENDING", "None", spec=OUT)  # scontrol requeue
    d.poll()  # the output stages out; verify waits for the gate


def holds(slurm: ScriptedSlurm) -> list[str]:
    return [v for k, v in slurm.calls if k == "hold"]


def comments(slurm: ScriptedSlurm) -> list[str]:
    return [v for k, v in slurm.calls if k == "comment"]


def admin_comment(slurm: ScriptedSlurm) -> str:
    return next(r.admin_comment or "" for r in slurm.rows if r.job_id == "7")


@pytest.mark.parametrize("early", [EarlyStart.FALLBACK, EarlyStart.UNION, EarlyStart.WAIT])
def test_a_requeued_run_is_held_until_its_earlier_runs_output_is_verified(
        tmp_path: Path, early: EarlyStart) -> None:
    """On main the rerun was not held under fallback and union, and under wait only for
    the start hold's wait_timeout (then it started beside the stage-out)."""
    slurm, gated = ScriptedSlurm(), Gated()
    d = daemon(tmp_path, slurm, gated, early)
    # pending on a begin time rsad did not set (no marker: the user's --begin): never
    # released by rsad; nor is a hold of an admin's (reason JobHeldAdmin)
    slurm.set("8", "PENDING", "BeginTime", spec=OUT)
    slurm.set("9", "PENDING", "JobHeldAdmin", spec=OUT)
    requeued_while_its_output_is_on_the_ramdisk(d, slurm)
    assert holds(slurm) == [f"7:{RERUN_HOLD}:{COMMENT} hold=rerun"]
    assert rerun_held(admin_comment(slurm))
    assert not any("held" in c for c in comments(slurm))  # told once Slurm placed it
    d.poll()  # the hold's outcome read: placed
    flush_urgent(d)
    assert any("held until the previous run's output is staged out and verified" in c
               for c in comments(slurm))
    for _ in range(3):  # Slurm shows it held (BeginTime): nothing more while it verifies
        d.poll()
        d.drain(timeout=0.1)
        flush_urgent(d)
    assert d.sched.records["7"].rsa_state.value == "verifying"
    assert released(slurm) == [] and len(holds(slurm)) == 1
    gated.gate.set()
    settle(d)
    d.poll()
    flush_urgent(d)
    if early is EarlyStart.WAIT:  # held for its new RAMDISK, as at submission
        assert len(holds(slurm)) == 2 and holds(slurm)[1].startswith(
            f"7:1800:{COMMENT} hold=")
        assert split_hold(admin_comment(slurm))[1] is not None
    else:
        assert released(slurm) == [f"7:{COMMENT}"] and len(holds(slurm)) == 1
    assert "stage-out is over" in comments(slurm)[-1]
    assert not any(v.startswith(("8:", "9:")) for v in released(slurm) + holds(slurm))
    names = [e.name for e in d.store.events("7")]
    assert names.count("job.rerun-held") == 1 and names.count("job.rerun-released") == 1
    d.shutdown()


def test_a_rerun_is_released_once_its_earlier_runs_output_is_quarantined(
        tmp_path: Path) -> None:
    slurm, gated = ScriptedSlurm(), Gated()
    gated.fail_out = True
    d = daemon(tmp_path, slurm, gated, EarlyStart.WAIT)
    requeued_while_its_output_is_on_the_ramdisk(d, slurm)
    settle(d)
    for _ in range(3):
        d.poll()
        settle(d)
        flush_urgent(d)
    assert d.sched.records["7"].rsa_state.value == "quarantined"
    # released to start (no new RAMDISK while the old one is kept): the PFS
    assert released(slurm) == [f"7:{COMMENT}"] and len(holds(slurm)) == 1
    assert "quarantined, not on the PFS" in comments(slurm)[-1]
    d.shutdown()


class FailingHold(ScriptedSlurm):
    def hold(self, job_id: str, seconds: int, admin_comment: str) -> None:
        raise SlurmError("slurmctld not answering")


def test_a_rerun_hold_slurm_refused_is_never_told_as_held(tmp_path: Path) -> None:
    """The hold call fails (slurmctld not answering): the job is not held, and its
    comment must not say it is. Before, the user was told "held" when the hold was asked
    for, and the comment said so until a retry placed it (30 s, or never)."""
    slurm, gated = FailingHold(), Gated()
    d = daemon(tmp_path, slurm, gated, EarlyStart.FALLBACK)
    requeued_while_its_output_is_on_the_ramdisk(d, slurm)
    for _ in range(3):  # its outcome read (failed), and later cycles
        d.poll()
        flush_urgent(d)
    assert not rerun_held(admin_comment(slurm))
    assert not any("held" in c for c in comments(slurm))
    assert "job.rerun-held" not in [e.name for e in d.store.events("7")]
    gated.gate.set()
    d.shutdown()


def test_a_rerun_hold_is_told_once_slurm_placed_it_not_when_asked(tmp_path: Path) -> None:
    """slurmctld slow to answer the hold: nothing said of a hold until it is placed,
    then the user is told once."""
    slurm, gated = SlowHold(), Gated()
    d = daemon(tmp_path, slurm, gated, EarlyStart.FALLBACK)
    requeued_while_its_output_is_on_the_ramdisk_unflushed(d, slurm)
    d.poll()  # the call still in flight
    assert not any("held" in c for c in comments(slurm))
    assert "job.rerun-held" not in [e.name for e in d.store.events("7")]
    slurm.answer.set()
    flush_urgent(d)
    d.poll()
    flush_urgent(d)
    told = [c for c in comments(slurm) if "held until the previous run's output" in c]
    assert len(told) == 1
    assert [e.name for e in d.store.events("7")].count("job.rerun-held") == 1
    gated.gate.set()
    d.shutdown()


def test_a_rerun_hold_a_crash_cut_off_is_placed_by_the_next_rsad(tmp_path: Path) -> None:
    """rsad dies after it saw the requeue, before Slurm held the job: the next rsad holds
    it (its first cycle looks at every record once), then releases it once verified."""
    slurm, gated = FailingHold(), Gated()
    d = daemon(tmp_path, slurm, gated, EarlyStart.FALLBACK)
    requeued_while_its_output_is_on_the_ramdisk(d, slurm)
    assert not rerun_held(admin_comment(slurm))
    d.shutdown()  # (killed: the verify is re-issued by the next rsad)
    d.store.close()
    slurm2 = ScriptedSlurm()
    slurm2.rows = slurm.rows
    gated2 = Gated()
    d2 = daemon(tmp_path, slurm2, gated2, EarlyStart.FALLBACK)
    d2.poll()
    flush_urgent(d2)
    assert holds(slurm2) == [f"7:{RERUN_HOLD}:{COMMENT} hold=rerun"]
    assert released(slurm2) == []
    gated2.gate.set()
    settle(d2)
    d2.poll()
    flush_urgent(d2)
    assert released(slurm2) == [f"7:{COMMENT}"]
    d2.shutdown()


def restarted(tmp_path: Path, d: Daemon, slurm: ScriptedSlurm, *, cycles: int,
              clear: bool = True) -> tuple[Daemon, Gated]:
    """``d`` stopped (killed: its store closed as it is) and the next rsad started on its
    store, ``cycles`` cycles run (poll, drain, urgent lane); Slurm's calls so far forgotten
    unless ``clear`` is false."""
    d.shutdown()
    d.store.close()
    if clear:
        slurm.calls.clear()
    gated2 = Gated()
    d2 = daemon(tmp_path, slurm, gated2, EarlyStart.FALLBACK)
    for _ in range(cycles):
        d2.poll()
        d2.drain(timeout=0.1)
        flush_urgent(d2)
    return d2, gated2


def test_a_rerun_held_across_a_restart_is_released_by_the_next_rsad(tmp_path: Path) -> None:
    """Slurm keeps the marker: the next rsad knows the hold is its own and lifts it once
    the re-issued verify is done; never before."""
    slurm, gated = ScriptedSlurm(), Gated()
    d = daemon(tmp_path, slurm, gated, EarlyStart.FALLBACK)
    requeued_while_its_output_is_on_the_ramdisk(d, slurm)
    assert rerun_held(admin_comment(slurm))
    d2, gated2 = restarted(tmp_path, d, slurm, cycles=2)
    assert released(slurm) == [] and holds(slurm) == []  # still held, not held twice
    gated2.gate.set()
    settle(d2)
    d2.poll()
    flush_urgent(d2)
    assert released(slurm) == [f"7:{COMMENT}"]
    d2.shutdown()


def test_a_rerun_hold_placed_just_before_a_crash_is_told_by_the_next_rsad(
        tmp_path: Path) -> None:
    """rsad dies after Slurm placed the rerun hold, before its next cycle read that: no
    rsad told the job's user. On the code before, the next rsad never did (a hold Slurm
    keeps across a restart was told again only for a rescue): until the release, the
    job's comment said nothing of why it waited (its earlier run's last message, such
    as its RAMDISK mounted over DATA_OUT). The log says whether it was told."""
    slurm, gated = ScriptedSlurm(), Gated()
    d = daemon(tmp_path, slurm, gated, EarlyStart.FALLBACK)
    requeued_while_its_output_is_on_the_ramdisk(d, slurm)  # placed; no cycle after it
    assert rerun_held(admin_comment(slurm)) and not comments(slurm)
    d2, gated2 = restarted(tmp_path, d, slurm, cycles=3, clear=False)  # (killed)
    told = [c for c in comments(slurm) if "held until the previous run's output" in c]
    assert len(told) == 1, comments(slurm)  # before: none
    assert [e.name for e in d2.store.events("7")].count("job.rerun-held") == 1
    assert holds(slurm) == [f"7:{RERUN_HOLD}:{COMMENT} hold=rerun"]  # not held twice
    gated2.gate.set()
    d2.shutdown()


def test_a_rerun_hold_told_before_a_restart_is_not_told_again(tmp_path: Path) -> None:
    """The other side: the first rsad told the hold (its next cycle read that Slurm had
    placed it); the next rsad, which finds the hold in Slurm, does not tell it again."""
    slurm, gated = ScriptedSlurm(), Gated()
    d = daemon(tmp_path, slurm, gated, EarlyStart.FALLBACK)
    requeued_while_its_output_is_on_the_ramdisk(d, slurm)
    d.poll()
    flush_urgent(d)
    assert len([c for c in comments(slurm) if "held until" in c]) == 1
    d2, gated2 = restarted(tmp_path, d, slurm, cycles=3)
    assert comments(slurm) == [] and holds(slurm) == []
    assert [e.name for e in d2.store.events("7")].count("job.rerun-held") == 1
    gated2.gate.set()
    d2.shutdown()


def test_the_rerun_hold_waits_until_slurm_has_finished_the_requeue(tmp_path: Path) -> None:
    """Slurm sets a requeued job's begin time itself when its requeue is complete
    (REQUEUED until then): a hold set before would be replaced by that."""
    slurm, gated = ScriptedSlurm(), Gated()
    d = daemon(tmp_path, slurm, gated, EarlyStart.FALLBACK)
    slurm.set("7", "PENDING", "Resources", spec=OUT)
    d.poll()
    settle(d)
    slurm.set("7", "RUNNING", spec=OUT)
    d.poll()
    settle(d)
    slurm.set("7", "REQUEUED", "None", spec=OUT)
    d.poll()
    d.drain(timeout=0.1)
    flush_urgent(d)
    assert holds(slurm) == []
    slurm.set("7", "PENDING", "BeginTime", spec=OUT)
    d.poll()
    flush_urgent(d)
    assert holds(slurm) == [f"7:{RERUN_HOLD}:{COMMENT} hold=rerun"]
    gated.gate.set()
    d.shutdown()


class SlowHold(ScriptedSlurm):
    """slurmctld answers a hold only once ``answer`` is set (a loaded machine)."""

    def __init__(self) -> None:
        super().__init__()
        self.answer = threading.Event()

    def hold(self, job_id: str, seconds: int, admin_comment: str) -> None:
        assert self.answer.wait(10)
        super().hold(job_id, seconds, admin_comment)


def test_a_rerun_hold_slurm_is_slow_to_place_is_in_flight_until_placed(
        tmp_path: Path) -> None:
    """The hold is asked in the cycle that sees the requeue and stays a call in flight
    until Slurm placed it: a no-op on the urgent lane (the tests' old wait for it) ran on
    another of its workers and came back before the hold was placed (seen under load)."""
    slurm, gated = SlowHold(), Gated()
    d = daemon(tmp_path, slurm, gated, EarlyStart.FALLBACK)
    requeued_while_its_output_is_on_the_ramdisk_unflushed(d, slurm)
    calls = d.holds.calls_in_flight()
    assert len(calls) == 1 and not calls[0].done()
    d.urgent.submit(lambda: None).result(10)  # another worker: says nothing of the hold
    assert holds(slurm) == [] and d.holds.calls_in_flight() == calls
    slurm.answer.set()
    flush_urgent(d)
    assert holds(slurm) == [f"7:{RERUN_HOLD}:{COMMENT} hold=rerun"]
    assert d.holds.calls_in_flight() == []
    gated.gate.set()
    d.shutdown()


RESCUED = "/pfs/rescue/alice/7.1"


def rescued_daemon(tmp_path: Path, slurm: ScriptedSlurm, gated: Gated) -> Daemon:
    """A daemon whose job 7 ran, whose output was quarantined (the PFS refused it) and
    whose rescue to the rescue area has begun: its verify waits for ``gated.gate``."""
    store = Store.open(tmp_path / "rsa.db", durability="normal")
    clock = iter(float(t) for t in range(1000, 10**6))
    d = Daemon(Scheduler(make_pool(), StagingPolicy(retries=0, rescue_after=5.0,
                                                    rescue_dir="/pfs/rescue")),
               slurm=slurm, store=store, registry=gated.registry(slurm), workers=2,
               poll_interval=0, clock=lambda: next(clock))
    d.start()
    gated.fail_out = True
    slurm.set("7", "PENDING", "Resources", spec=OUT)
    d.poll()
    settle(d)
    slurm.set("7", "RUNNING", spec=OUT)
    d.poll()
    settle(d)
    slurm.set("7", "COMPLETED", spec=OUT)
    for _ in range(3):
        d.poll()
        settle(d)
    assert d.sched.records["7"].rsa_state.value == "quarantined"
    gated.fail_out = False  # the rescue area takes it
    for _ in range(20):
        d.poll()
        d.drain(timeout=0.05)
        if d.sched.records["7"].rsa_state.value == "verifying":
            break
    assert d.sched.records["7"].rescue_to == RESCUED
    return d


def test_a_rerun_whose_earlier_output_is_rescued_stays_held_and_is_told_where(
        tmp_path: Path) -> None:
    """Issue 33: the earlier run's output went to the rescue area, not to DATA_OUT. On
    main the rerun was released once the rescue was verified ("the previous run's
    stage-out is over"), to start as if its output were in DATA_OUT."""
    slurm, gated = ScriptedSlurm(), Gated()
    d = rescued_daemon(tmp_path, slurm, gated)
    slurm.set("7", "PENDING", "None", spec=OUT)  # requeued during the rescue
    d.poll()
    flush_urgent(d)
    assert holds(slurm) == [f"7:{RERUN_HOLD}:{COMMENT} hold=rerun"]
    gated.gate.set()
    for _ in range(4):  # verified, torn down, released: the rerun stays held
        settle(d)
        d.poll()
        flush_urgent(d)
    assert d.sched.records["7"].rsa_state.value == "released"
    assert released(slurm) == [] and len(holds(slurm)) == 1
    assert comments(slurm)[-1] == (
        f"RSA: requeued: held: the previous run's output, quarantined, was rescued to "
        f"{RESCUED}, not to DATA_OUT; put what this run needs in place, then release it: "
        f"scontrol update JobId=7 StartTime=now")
    assert len(comments(slurm)[-1]) <= COMMENT_MAX  # whole in the job's comment
    told = len(comments(slurm))
    d.poll()
    flush_urgent(d)
    assert len(comments(slurm)) == told  # told once
    # its user releases it (StartTime=now: the marker stays) and it runs: a new run,
    # whose output goes to DATA_OUT; rsad lifted nothing
    slurm.rows = [QueueRow("7", "RUNNING", "None", 10, 2, "alice", admin_comment(slurm))]
    d.poll()
    settle(d)
    assert d.sched.records["7"].rescue_to == ""
    assert released(slurm) == []
    d.shutdown()


def test_a_job_requeued_after_its_rescue_is_held_with_where_its_output_is(
        tmp_path: Path) -> None:
    slurm, gated = ScriptedSlurm(), Gated()
    d = rescued_daemon(tmp_path, slurm, gated)
    gated.gate.set()
    for _ in range(3):
        settle(d)
        d.poll()
    assert d.sched.records["7"].rsa_state.value == "released"
    slurm.set("7", "PENDING", "BeginTime", spec=OUT)  # scontrol requeue of the ended job
    d.poll()
    flush_urgent(d)
    assert holds(slurm) == [f"7:{RERUN_HOLD}:{COMMENT} hold=rerun"]
    d.poll()  # the hold placed: told
    flush_urgent(d)
    assert f"was rescued to {RESCUED}, not to DATA_OUT" in comments(slurm)[-1]
    names = [e.name for e in d.store.events("7")]
    assert names.count("job.rerun-held") == 1
    d.shutdown()
