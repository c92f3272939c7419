"""The machine and scheduler on the situations seed 004 §3 names."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from rsa_scheduler.core.actions import ActionKind, Outcome, Result
from rsa_scheduler.core.allocator import Pool, Request
from rsa_scheduler.core.directives import DirectiveSpec, Reset
from rsa_scheduler.core.events import Event
from rsa_scheduler.core.machine import JobRecord
from rsa_scheduler.core.payloads import (
    BuildFsArgs,
    CancelArgs,
    MessageArgs,
    MountInputArgs,
    MountMode,
    OnNodes,
    ResetArgs,
)
from rsa_scheduler.core.policy import EarlyStart, NodeState, StagingPolicy, Tier
from rsa_scheduler.core.scheduler import (
    CommandRefused,
    Decision,
    InvalidOutcome,
    Observation,
    Scheduler,
    StaleOutcome,
)
from rsa_scheduler.core.states import JobState, RsaState, derive_job_state
from rsa_scheduler.core.transitions import Trigger
from tests.unit.corekit import Driver, make_pool, make_scheduler, make_spec, obs

A = ActionKind


def kinds(dec: Decision) -> list[str]:
    return [a.kind.value for a in dec.actions]


def to_locked_in(d: Driver, job: str = "10", **kw: Any) -> None:
    spec = make_spec(**kw)
    d.observe(obs(job, "PENDING", "Resources", spec))
    for _ in range(3):  # build, stage in (unless no input), lock in
        if d.state(job) == "locked-in":
            break
        d.answer(job)
    assert d.state(job) == "locked-in"


# ---- job-state derivation table --------------------------------------------------------

@pytest.mark.parametrize(("prev", "state", "reason", "want"), [
    (None, "PENDING", "Resources", JobState.ON_DECK),
    (None, "PENDING", "Priority", JobState.QUEUED),
    (JobState.ON_DECK, "PENDING", "Priority", JobState.DEMOTED),
    (JobState.ON_DECK, "PENDING", "JobHeldUser", JobState.DEMOTED),
    (JobState.DEMOTED, "PENDING", "Priority", JobState.DEMOTED),
    (JobState.DEMOTED, "PENDING", "Resources", JobState.ON_DECK),
    (JobState.ON_DECK, "PENDING", "None", JobState.ON_DECK),  # after scontrol update
    (JobState.DEMOTED, "PENDING", "None", JobState.DEMOTED),
    (None, "PENDING", "None", JobState.QUEUED),
    (JobState.RUNNING, "PENDING", "None", JobState.QUEUED),
    (JobState.RUNNING, "REQUEUED", "BeginTime", JobState.QUEUED),
    (JobState.ON_DECK, "RUNNING", "None", JobState.RUNNING),
    (JobState.RUNNING, "COMPLETING", "None", JobState.RUNNING),
    (JobState.FINISHED, "COMPLETING", "None", JobState.FINISHED),  # after EpilogSlurmctld
    (JobState.FINISHED, "REQUEUED", "BeginTime", JobState.QUEUED),
    (JobState.RUNNING, "COMPLETED", "None", JobState.FINISHED),
    (JobState.RUNNING, "CANCELLED+", "None", JobState.FINISHED),
    (JobState.RUNNING, "CANCELLED by 1000", "None", JobState.FINISHED),
    (JobState.RUNNING, "TIMEOUT", "None", JobState.FINISHED),
    (JobState.RUNNING, "NODE_FAIL", "None", JobState.FINISHED),
    (JobState.ON_DECK, "GONE", "", JobState.FINISHED),
])
def test_derive_job_state(prev: JobState | None, state: str, reason: str,
                          want: JobState) -> None:
    assert derive_job_state(prev, state, reason) is want


def test_unknown_slurm_state_is_an_error_naming_the_fix() -> None:
    with pytest.raises(ValueError, match=r"add it to rsa_scheduler\.core\.states"):
        derive_job_state(None, "WIBBLE", "")


# ---- lifecycles ------------------------------------------------------------------------

def test_normal_lifecycle_releases_exactly_the_nodes_taken() -> None:
    d = Driver(make_scheduler())
    dec = d.observe(obs("10", "PENDING", "Resources", make_spec()))
    assert kinds(dec) == ["allocate", "build-fs"]
    assert dec.actions[0].args_as(OnNodes).nodes.folded == "rsa1"  # 2 compute nodes / ratio 2
    d.answer("10")
    assert d.state("10") == "staging-in"
    d.answer("10")
    assert d.state("10") == "staged-in"  # lock-in under way
    d.answer("10")
    dec = d.observe(obs("10", "RUNNING"), at=50)
    assert kinds(dec) == ["unlock", "mount-input"]  # the lock-in ends as the job starts
    assert dec.actions[1].args_as(MountInputArgs).mode is MountMode.RO
    d.answer("10")
    assert d.state("10") == "mounted-input"
    assert d.sched.next_timer() == pytest.approx(51 + 600)
    dec = d.tick(700)
    assert kinds(dec) == ["reset"]
    d.answer("10")
    assert d.state("10") == "mounted-output"
    dec = d.observe(obs("10", "COMPLETED"), at=800)
    assert kinds(dec) == ["tell-user", "stage-out"]
    d.answer("10")
    assert d.state("10") == "verifying"
    dec = d.answer("10")
    assert kinds(dec) == ["tell-user", "destroy-fs"]
    dec = d.answer("10")
    assert kinds(dec) == ["release"]
    assert d.state("10") == "released"
    assert str(d.sched.pool.free()) == "rsa[1-4]"


@pytest.mark.parametrize("summary", [
    "16 objects (1.2M) verified on persistent storage in /pfs/out",
    "the RAMDISK held no output: nothing was copied to /pfs/out",
    "your POSTPROCESS exited 0 (its output is not checked)"])
def test_the_end_of_a_stage_out_is_told_as_the_verify_step_found_it(summary: str) -> None:
    """Issue 13: a stage-out with nothing to copy, or a POSTPROCESS whose output is not
    checked, was told "output staged out and verified"; the message now says what the
    verify step found, and nothing more."""
    d = Driver(make_scheduler())
    d.observe(obs("10", "PENDING", "Resources", make_spec()))
    d.answer_all("10")
    d.observe(obs("10", "RUNNING"), at=50)
    d.answer_all("10")
    d.tick(700)  # the reset: the RAMDISK over DATA_OUT
    d.answer_all("10")
    d.observe(obs("10", "COMPLETED"), at=800)
    assert d.state("10") == "staging-out"
    d.answer("10")  # stage-out
    dec = d.answer("10", msg=summary)  # verify
    told = [a.args_as(MessageArgs).message for a in dec.actions if a.kind is ActionKind.TELL_USER]
    assert told == [f"stage-out finished: {summary}"]


def test_not_enough_nodes_skips_the_cycle_then_allocates_when_freed() -> None:
    d = Driver(make_scheduler(make_pool(n_ram=2)))
    d.observe(obs("1", "PENDING", "Resources", make_spec(nodes=2)))
    assert d.state("1") == "fs-building"
    dec = d.observe(obs("1", "PENDING", "Resources", make_spec(nodes=2)),
                    obs("2", "PENDING", "Resources", make_spec(nodes=2)))
    assert d.state("2") == "none" and dec.actions == []  # skipped, as the paper does
    # job 1 is demoted: its nodes come back, job 2 gets them on the next cycle
    d.observe(obs("1", "PENDING", "Priority", make_spec(nodes=2)),
              obs("2", "PENDING", "Resources", make_spec(nodes=2)))
    assert d.state("1") == "tearing-down"
    d.answer("1")
    assert d.state("1") == "released"
    d.tick(d.now + 1)
    assert d.state("2") == "fs-building"


def test_waiting_is_a_snapshot_of_the_on_deck_jobs_waiting_for_nodes() -> None:
    d = Driver(make_scheduler(make_pool(n_ram=2)))
    d.observe(obs("1", "PENDING", "Resources", make_spec(nodes=2)),
              obs("2", "PENDING", "Resources", make_spec(nodes=2)))
    waiting = d.sched.waiting
    assert waiting == {"2"} and isinstance(waiting, frozenset) and d.sched.has_waiting()
    d.observe(obs("1", "PENDING", "Priority", make_spec(nodes=2)),
              obs("2", "PENDING", "Resources", make_spec(nodes=2)))
    d.answer("1")
    d.tick(d.now + 1)
    assert d.state("2") == "fs-building"
    assert d.sched.waiting == frozenset() and not d.sched.has_waiting()
    assert waiting == {"2"}  # what the caller got is not changed under it


def test_higher_priority_on_deck_job_gets_the_nodes_first() -> None:
    d = Driver(make_scheduler(make_pool(n_ram=2)))
    d.observe(obs("1", "PENDING", "Resources", make_spec(nodes=2), priority=10),
              obs("2", "PENDING", "Resources", make_spec(nodes=2), priority=99))
    assert d.state("2") == "fs-building" and d.state("1") == "none"


def test_an_impossible_outcome_is_a_clear_error_and_changes_nothing() -> None:
    d = Driver(make_scheduler())
    d.observe(obs("10", "PENDING", "Resources", make_spec()))
    build = d.sched.records["10"].pending
    assert build is not None and build.kind is A.BUILD_FS
    with pytest.raises(InvalidOutcome, match=r"build-fs action cannot end 'busy' \(only "):
        d.sched.outcome(Outcome(build.id, Result.BUSY), d.now)
    assert d.sched.records["10"].pending == build and d.state("10") == "fs-building"


def test_demotion_during_stage_in_cancels_and_frees() -> None:
    d = Driver(make_scheduler())
    d.observe(obs("10", "PENDING", "Resources", make_spec()))
    d.answer("10")  # built
    stage_in = d.sched.records["10"].pending
    assert stage_in is not None and stage_in.kind is A.STAGE_IN
    dec = d.observe(obs("10", "PENDING", "Priority", make_spec()))
    assert kinds(dec) == ["cancel", "destroy-fs"]
    assert dec.actions[0].args_as(CancelArgs).target == stage_in.id
    with pytest.raises(StaleOutcome):
        d.sched.outcome(Outcome(stage_in.id, Result.OK), d.now)
    d.answer("10")
    assert d.state("10") == "released" and d.sched.records["10"].job_state is JobState.DEMOTED
    # on-deck again: a new cycle with new action ids
    dec = d.observe(obs("10", "PENDING", "Resources", make_spec()))
    assert d.sched.records["10"].cycle == 2 and dec.actions[1].id.startswith("10/2/")


def test_demotion_after_lock_in_unlocks() -> None:
    d = Driver(make_scheduler())
    to_locked_in(d)
    dec = d.observe(obs("10", "PENDING", "Priority"))
    assert kinds(dec) == ["unlock", "destroy-fs"]


def test_a_demoted_job_that_starts_before_a_new_allocation_is_told_it_uses_the_pfs() -> None:
    """Seen in CI: demoted, torn down, then started at once when its nodes freed up."""
    d = Driver(make_scheduler())
    to_locked_in(d)
    d.observe(obs("10", "PENDING", "Priority"))
    d.answer("10")  # destroyed
    assert d.state("10") == "released"
    dec = d.observe(obs("10", "RUNNING"))
    assert d.state("10") == "declined" and kinds(dec) == ["tell-user"]
    assert "demotion" in dec.actions[0].args_as(MessageArgs).message
    # told once: later observations of the running job say nothing more
    assert kinds(d.observe(obs("10", "COMPLETING"))) == []
    d.observe(obs("10", "COMPLETED"))
    assert d.state("10") == "released"



def test_a_demoted_job_that_starts_while_its_ramdisk_is_torn_down_is_told_it_uses_the_pfs(
        ) -> None:
    """Found by review: the same start a moment earlier, while the RAMDISK is still torn
    down: the start edge was a silent stay there and the teardown's end came after it, so
    the job read the PFS untold (its comment still said its input was staged). A job the
    RSA declined (told why then) is not told again."""
    d = Driver(make_scheduler())
    to_locked_in(d)
    d.observe(obs("10", "PENDING", "Priority"))
    assert d.state("10") == "tearing-down"
    dec = d.observe(obs("10", "RUNNING"))
    assert kinds(dec) == ["tell-user"]
    assert dec.actions[0].args_as(MessageArgs).message == (
        "started while its RAMDISK was torn down: the job reads and writes the PFS")
    d.answer("10")  # destroyed
    assert d.state("10") == "released"
    assert kinds(d.observe(obs("10", "COMPLETED"))) == []
    # declined (staging cancelled by its user, told then): nothing more at the start
    d2 = Driver(make_scheduler())
    to_locked_in(d2)
    d2.sched.command("10", Trigger.CANCEL_STAGING, d2.now, by="alice", operator=False)
    assert d2.state("10") == "tearing-down"
    assert kinds(d2.observe(obs("10", "RUNNING"))) == []

def test_a_job_released_while_running_is_not_told_again() -> None:
    """No DATA_OUT and started before the RAMDISK existed: released while running, once."""
    d = Driver(make_scheduler())
    d.observe(obs("10", "PENDING", "Resources", make_spec(data_out=None)))
    dec = d.observe(obs("10", "RUNNING"))
    assert "tell-user" in kinds(dec)
    d.answer("10")
    told = kinds(d.observe(obs("10", "RUNNING", spec=make_spec(data_out=None))))
    assert "tell-user" not in told and d.state("10") in (RsaState.RELEASED, RsaState.TEARING_DOWN)


@pytest.mark.parametrize(("policy", "want_state", "want_kinds"), [
    (EarlyStart.FALLBACK, "resetting", ["cancel", "tell-user", "reset"]),
    (EarlyStart.UNION, "mounting-input", ["cancel", "tell-user", "mount-input"]),
    (EarlyStart.WAIT, "staging-in", []),
])
def test_early_start_during_stage_in(policy: EarlyStart, want_state: str,
                                     want_kinds: list[str]) -> None:
    d = Driver(make_scheduler())
    d.observe(obs("10", "PENDING", "Resources", make_spec(early=policy)))
    d.answer("10")  # built; stage-in running
    dec = d.observe(obs("10", "RUNNING"))
    assert d.state("10") == want_state and kinds(dec) == want_kinds
    if policy is EarlyStart.UNION:
        assert dec.actions[-1].args_as(MountInputArgs).mode is MountMode.UNION


def test_wait_policy_falls_back_when_the_deadline_passes() -> None:
    d = Driver(make_scheduler(wait_timeout=60.0))
    d.observe(obs("10", "PENDING", "Resources", make_spec(early=EarlyStart.WAIT)), at=0)
    d.answer("10")
    d.observe(obs("10", "RUNNING"), at=10)
    assert d.state("10") == "staging-in"
    dec = d.tick(71)
    assert d.state("10") == "resetting" and "tell-user" in kinds(dec)


def test_site_default_early_start_applies_when_job_says_nothing() -> None:
    d = Driver(make_scheduler(early_start=EarlyStart.WAIT))
    d.observe(obs("10", "PENDING", "Resources", make_spec()))
    d.answer("10")
    d.observe(obs("10", "RUNNING"))
    assert d.state("10") == "staging-in"


def test_job_started_before_any_allocation_is_declined_with_a_reason() -> None:
    d = Driver(make_scheduler())
    dec = d.observe(obs("10", "RUNNING", spec=make_spec()))
    assert d.state("10") == "declined"
    assert "reads the PFS" in dec.actions[0].args_as(MessageArgs).message


def test_output_only_job_mounts_output_in_the_prolog() -> None:
    d = Driver(make_scheduler())
    d.observe(obs("10", "PENDING", "Resources", make_spec(data_in=None)))
    d.answer("10")  # built -> no input: straight to lock-in
    assert d.state("10") == "staged-in"
    d.answer("10")
    dec = d.observe(obs("10", "RUNNING"))
    assert kinds(dec) == ["unlock", "mount-output"]


def test_reset_on_input_done_command_only() -> None:
    d = Driver(make_scheduler())
    to_locked_in(d, reset=Reset(after=None))
    d.observe(obs("10", "RUNNING"))
    d.answer("10")
    assert d.sched.next_timer() is None
    with pytest.raises(CommandRefused, match="operator command"):
        d.sched.command("10", Trigger.DISCARD, d.now, by="alice", operator=False)
    dec = d.sched.command("10", Trigger.INPUT_DONE, d.now, by="alice", operator=False)
    assert kinds(dec) == ["reset"]


def test_a_users_command_acts_only_on_a_record_of_their_own() -> None:
    """The core judges whose job it is with the command itself: the API's look came a
    moment before, and the id may name another user's job since (found by review: a
    plain user's command was carried out on whatever record the id named)."""
    d = Driver(make_scheduler())
    to_locked_in(d, reset=Reset(after=None))
    d.observe(obs("10", "RUNNING"))
    d.answer("10")
    assert d.state("10") == "mounted-input"
    for trigger in (Trigger.INPUT_DONE, Trigger.CANCEL_STAGING):
        with pytest.raises(CommandRefused, match="job 10 is not tracked by the RSA"):
            d.sched.command("10", trigger, d.now, by="bob", operator=False)
    assert d.state("10") == "mounted-input"
    dec = d.sched.command("10", Trigger.INPUT_DONE, d.now, by="alice", operator=False)
    assert kinds(dec) == ["reset"]


def test_busy_reset_retries_then_output_goes_to_the_pfs() -> None:
    d = Driver(make_scheduler(retries=1, backoff=10.0, backoff_max=10.0))
    to_locked_in(d)
    d.observe(obs("10", "RUNNING"), at=100)
    d.answer("10")
    d.tick(10_000)
    d.answer("10", Result.BUSY)
    assert d.state("10") == "reset-failed"
    d.tick(d.now + 10)
    assert d.state("10") == "resetting"
    d.answer("10", Result.BUSY)
    assert d.state("10") == "mounted-input"  # gave up: footnote 3
    assert d.sched.next_timer() is None
    dec = d.observe(obs("10", "COMPLETED"))
    assert kinds(dec) == ["destroy-fs"]


def test_writable_input_is_written_back_before_the_reset() -> None:
    d = Driver(make_scheduler())
    to_locked_in(d, rw=True)
    dec = d.observe(obs("10", "RUNNING"))
    assert dec.actions[1].args_as(MountInputArgs).mode is MountMode.RW
    d.answer("10")
    dec = d.tick(10_000)
    assert kinds(dec) == ["write-back"]
    dec = d.answer("10")
    assert kinds(dec) == ["reset"]


def _rw_input_running(d: Driver, **kw: Any) -> None:
    """A job with writable input, running with its input mounted read-write."""
    to_locked_in(d, rw=True, **kw)
    d.observe(obs("10", "RUNNING"), at=100)
    d.answer("10")  # MOUNT_INPUT
    assert d.state("10") == "mounted-input"


def _reset_busy(d: Driver) -> None:
    dec = d.tick(10_000)
    assert kinds(dec) == ["write-back"]
    dec = d.answer("10")  # the write-back
    reset = dec.actions[0]
    assert reset.kind is A.RESET and reset.args_as(ResetArgs).write_back
    d.answer("10", Result.BUSY)
    assert d.state("10") == "reset-failed"


def test_a_busy_reset_retried_writes_the_input_back_again() -> None:
    """Issue 35: the job kept writing while its input mount was busy; the retry writes
    back again before it resets (and the reset writes back once more after the
    release)."""
    d = Driver(make_scheduler(retries=3, backoff=10.0, backoff_max=10.0))
    _rw_input_running(d)
    _reset_busy(d)
    dec = d.tick(d.now + 10)
    assert kinds(dec) == ["write-back"]
    dec = d.answer("10")
    assert kinds(dec) == ["reset"] and dec.actions[0].args_as(ResetArgs).write_back


def test_a_job_ending_as_its_reset_retry_falls_due_gets_its_input_written_back() -> None:
    """Issue 35: rsad down past the retry while the job ends: the timer and the end meet
    in one step. The RAMDISK holds the job's changes: written back, then torn down."""
    d = Driver(make_scheduler(retries=3, backoff=10.0, backoff_max=10.0))
    _rw_input_running(d)
    _reset_busy(d)
    dec = d.observe(obs("10", "COMPLETED"), at=d.now + 60)
    assert kinds(dec) == ["write-back"] and "destroy-fs" not in kinds(dec)
    dec = d.answer("10")
    assert kinds(dec) == ["destroy-fs"]


def test_a_write_back_the_job_outlived_is_done_again() -> None:
    """Issue 35: the job ended while its input was being written back: what it changed
    after the copy passed a file is only on the RAMDISK. Written back once more."""
    d = Driver(make_scheduler())
    _rw_input_running(d)
    dec = d.tick(10_000)
    assert kinds(dec) == ["write-back"]
    d.observe(obs("10", "COMPLETED"))
    dec = d.answer("10")  # the write-back that began while the job ran
    assert kinds(dec) == ["write-back"]
    dec = d.answer("10")  # began after the end: final
    assert kinds(dec) == ["destroy-fs"]


def test_a_partial_input_mount_failure_writes_writable_input_back() -> None:
    """Issue 35: some nodes mounted the writable input and started; the mount failed on
    others. The RAMDISK may hold changes: written back before the reset or teardown."""
    for data_out, after in (("/pfs/out", "reset"), (None, None)):
        d = Driver(make_scheduler())
        to_locked_in(d, rw=True, data_out=data_out)
        d.observe(obs("10", "RUNNING"), at=100)
        dec = d.answer("10", Result.FAILED, "mount failed on c2")
        assert "write-back" in kinds(dec) and "destroy-fs" not in kinds(dec)
        dec = d.answer("10")
        if after is not None:
            assert kinds(dec) == [after]
        else:
            assert d.state("10") == "mounted-input" and kinds(dec) == []
            assert kinds(d.observe(obs("10", "COMPLETED"))) == ["write-back"]


def test_a_reset_error_with_writable_input_keeps_the_ramdisk() -> None:
    d = Driver(make_scheduler(retries=3, backoff=10.0, backoff_max=10.0))
    _rw_input_running(d)
    d.tick(10_000)
    d.answer("10")  # write-back
    dec = d.answer("10", Result.FAILED, "rsync: No space left on device")
    assert d.state("10") == "writeback-failed" and "destroy-fs" not in kinds(dec)
    dec = d.tick(d.now + 10)
    assert kinds(dec) == ["write-back"]


def test_stage_out_failure_retries_then_quarantines_and_keeps_data() -> None:
    d = Driver(make_scheduler(retries=2, backoff=5.0, backoff_max=100.0))
    to_locked_in(d, data_in=None)
    d.observe(obs("10", "RUNNING"))
    d.answer("10")
    d.observe(obs("10", "FAILED"))
    delays = []
    for _ in range(2):
        d.answer("10", Result.FAILED, "rsync: No space left on device")
        assert d.state("10") == "stage-out-failed"
        due = d.sched.next_timer()
        assert due is not None
        delays.append(due - d.now)
        d.tick(due)
        assert d.state("10") == "staging-out"
    assert delays == [5.0, 10.0]  # doubling backoff
    dec = d.answer("10", Result.FAILED, "rsync: No space left on device")
    assert d.state("10") == "quarantined"
    assert "No space left" in dec.actions[-1].args_as(MessageArgs).message
    assert d.sched.pool.holding("10")  # data kept on its nodes
    with pytest.raises(CommandRefused):
        d.sched.command("10", Trigger.RETRY, d.now, by="alice", operator=False)
    d.sched.command("10", Trigger.RETRY, d.now, by="root", operator=True)
    assert d.state("10") == "staging-out"
    d.answer_all("10")
    assert d.state("10") == "released"


def test_operator_discard_is_the_only_way_to_drop_unverified_output() -> None:
    d = Driver(make_scheduler(retries=0))
    to_locked_in(d, data_in=None)
    d.observe(obs("10", "RUNNING"))
    d.answer("10")
    d.observe(obs("10", "COMPLETED"))
    d.answer("10", Result.FAILED)
    assert d.state("10") == "quarantined"
    with pytest.raises(CommandRefused, match="can't force-release from quarantined"):
        d.sched.command("10", Trigger.FORCE_RELEASE, d.now, by="root", operator=True)
    dec = d.sched.command("10", Trigger.DISCARD, d.now, by="root", operator=True)
    assert "destroy-fs" in kinds(dec)


def test_verify_failure_stages_out_again() -> None:
    d = Driver(make_scheduler())
    to_locked_in(d, data_in=None)
    d.observe(obs("10", "RUNNING"))
    d.answer("10")
    d.observe(obs("10", "COMPLETED"))
    d.answer("10")
    d.answer("10", Result.FAILED, "size mismatch out/rank3.dat")
    assert d.state("10") == "stage-out-failed"


def test_requeue_while_mounted_output_stages_out_first() -> None:
    d = Driver(make_scheduler())
    to_locked_in(d, data_in=None)
    d.observe(obs("10", "RUNNING"))
    d.answer("10")
    dec = d.observe(obs("10", "PENDING", "BeginTime"))
    assert kinds(dec) == ["stage-out"]


def test_vanished_job_counts_as_finished() -> None:
    d = Driver(make_scheduler())
    d.observe(obs("10", "PENDING", "Resources", make_spec()))
    dec = d.observe()  # not in the queue any more
    assert kinds(dec) == ["cancel", "destroy-fs"]


# ---- a job id that names another user's job (Slurm's state lost, ids wrapped) ------------

BOB = make_spec(data_in="/pfs/bob/in", data_out=None)


def test_a_job_id_another_user_reuses_gets_a_record_of_its_own() -> None:
    """alice's job 10 ended and was released; slurmctld lost its state and gave the id to
    bob's job: bob's job is served with his own directives and as bob, never with
    alice's (a RAMDISK built as alice and staged from her DATA_IN for bob's job)."""
    d = Driver(make_scheduler())
    d.observe(obs("10", "PENDING", "Resources", make_spec()))
    d.observe()  # gone from the queue: torn down
    d.answer_all("10")
    assert d.state("10") == "released"
    dec = d.observe(obs("10", "PENDING", "Resources", BOB, user="bob"))
    rec = d.sched.records["10"]
    assert (rec.user, rec.spec) == ("bob", BOB)
    assert kinds(dec) == ["allocate", "build-fs"]
    assert {a.args_as(OnNodes).user for a in dec.actions} == {"bob"}
    replayed = Scheduler.replay(make_pool(), d.sched.policy, d.log)
    assert replayed.snapshot() == d.sched.snapshot()


def test_a_reused_job_id_stages_the_earlier_jobs_output_out_first() -> None:
    """alice's job 10 is running with output on its RAMDISK when the id is seen naming
    bob's job: alice's job is gone (its output is staged out and verified as alice);
    bob's job gets no RAMDISK of alice's, and a record of its own once alice's cycle
    ended."""
    d = Driver(make_scheduler())
    to_locked_in(d, data_in=None)
    d.observe(obs("10", "RUNNING"))
    d.answer("10")
    assert d.state("10") == "mounted-output"
    dec = d.observe(obs("10", "RUNNING", user="bob", spec=BOB))
    assert kinds(dec) == ["tell-user", "stage-out"]
    assert dec.actions[1].args_as(OnNodes).user == "alice"
    assert d.sched.records["10"].user == "alice"
    assert "10" in d.sched.waiting  # observed again every poll until it is bob's
    d.answer_all("10")
    assert d.state("10") == "released"
    d.observe(obs("10", "PENDING", "Resources", BOB, user="bob"))
    rec = d.sched.records["10"]
    assert (rec.user, rec.spec, rec.rsa_state) == ("bob", BOB, RsaState.FS_BUILDING)
    replayed = Scheduler.replay(make_pool(), d.sched.policy, d.log)
    assert replayed.snapshot() == d.sched.snapshot()
    assert replayed.pool.snapshot() == d.sched.pool.snapshot()


def test_drained_node_is_never_chosen() -> None:
    d = Driver(make_scheduler(make_pool(n_ram=2)))
    d.take(d.sched.set_node_state("rsa1", NodeState.DRAINED, 0, by="root"))
    dec = d.observe(obs("10", "PENDING", "Resources", make_spec()))
    assert dec.actions[0].args_as(OnNodes).nodes.folded == "rsa2"


def test_policy_violation_declines_with_the_allocator_message() -> None:
    d = Driver(make_scheduler())
    dec = d.observe(obs("10", "PENDING", "Resources", make_spec(nodes=4), nodes=1))
    assert d.state("10") == "fs-building"
    d2 = Driver(make_scheduler(make_pool(n_ram=2)))
    dec = d2.observe(obs("10", "PENDING", "Resources", make_spec(nodes=4)))
    assert d2.state("10") == "declined"
    assert dec.actions[-1].kind is A.TELL_USER
    assert "RSA" in dec.actions[-1].args_as(MessageArgs).message


def test_fs_build_failure_retries_on_a_later_cycle_then_gives_up() -> None:
    d = Driver(make_scheduler(fs_build_attempts=2))
    spec = make_spec()
    d.observe(obs("10", "PENDING", "Resources", spec))
    d.answer("10", Result.FAILED, "mfsmaster did not start")
    assert d.state("10") == "tearing-down"
    d.answer("10")
    d.tick(d.now + 1)
    assert d.state("10") == "released"  # backing off before the next attempt
    d.tick(d.now + 30)
    assert d.state("10") == "fs-building" and d.sched.records["10"].cycle == 2
    d.answer("10", Result.FAILED, "mfsmaster did not start")
    d.answer("10")  # released; still on-deck, but out of build attempts
    assert d.state("10") == "declined" and d.sched.records["10"].declined
    assert str(d.sched.pool.free()) == "rsa[1-4]"


def test_untracked_jobs_cost_nothing_and_are_not_recorded() -> None:
    sched = make_scheduler()
    dec = sched.observe([obs(str(i), "PENDING", "Priority") for i in range(1000)], 0)
    assert dec.events == [] and sched.records == {}


def test_replay_reproduces_live_state_and_pool() -> None:
    d = Driver(make_scheduler())
    to_locked_in(d)
    d.observe(obs("10", "RUNNING"), obs("11", "PENDING", "Resources", make_spec()))
    d.answer("10")
    replayed = Scheduler.replay(make_pool(), d.sched.policy, d.log)
    assert replayed.snapshot() == d.sched.snapshot()
    assert replayed.pool.snapshot() == d.sched.pool.snapshot()
    assert [a.id for a in replayed.outstanding()] == [a.id for a in d.sched.outstanding()]


def test_first_sight_event_is_light_and_old_full_ones_still_replay() -> None:
    """job.tracked names the job, its user, its spec without unset keys and only the
    fields that differ from a new record's; logs written before carry the whole record
    (the spec with every key): a restart reads both into the same records."""
    d = Driver(make_scheduler())
    d.observe(obs("10", "PENDING", "Priority", make_spec(nodes=2), priority=7),
              obs("11", "PENDING", "Resources", make_spec(data_in=None)), at=100.0)
    tracked = [e for e in d.log if e.name == "job.tracked"]
    assert [e.job_id for e in tracked] == ["10", "11"]
    ctx = dict(tracked[0].context["set"])
    assert ctx == {"job_id": "10", "user": "alice", "priority": 7, "compute_nodes": 2,
                   "since": 100.0, "spec": {"data_in": "/pfs/in", "data_out": "/pfs/out",
                                            "nodes": 2}}
    assert Scheduler.replay(make_pool(), d.sched.policy, d.log).snapshot() == \
        d.sched.snapshot()

    # the same log as an older rsad wrote it: each job.tracked carried the full record
    def full(e: Event) -> Event:
        if e.name != "job.tracked":
            return e
        rec = JobRecord.from_json(e.context["set"])
        return replace(e, context={"set": rec.to_json()})
    old = [full(e) for e in d.log]
    assert old != d.log and all(None in dict(e.context["set"])["spec"].values()
                                for e in old if e.name == "job.tracked")
    assert Scheduler.replay(make_pool(), d.sched.policy, old).snapshot() == \
        d.sched.snapshot()


def test_job_declined_for_an_early_start_gets_a_new_cycle_after_requeue() -> None:
    """Found by the simulator (tests/data/scenarios/declined-requeued.yaml)."""
    d = Driver(make_scheduler())
    d.observe(obs("10", "RUNNING", spec=make_spec()))
    assert d.state("10") == "declined" and not d.sched.records["10"].declined
    d.observe(obs("10", "PENDING", "BeginTime", make_spec()))  # requeued
    dec = d.observe(obs("10", "PENDING", "Resources", make_spec()))
    assert d.state("10") == "fs-building" and kinds(dec) == ["allocate", "build-fs"]


def test_declined_for_good_stays_declined_when_on_deck_again() -> None:
    d = Driver(make_scheduler(make_pool(n_ram=2)))
    d.observe(obs("10", "PENDING", "Resources", make_spec(nodes=4)))
    assert d.state("10") == "declined" and d.sched.records["10"].declined
    dec = d.observe(obs("10", "PENDING", "Priority", make_spec(nodes=4)),
                    obs("10", "PENDING", "Resources", make_spec(nodes=4)))
    assert d.state("10") == "declined" and dec.actions == []


def test_wait_policy_does_not_stage_a_job_without_input() -> None:
    """Found by the simulator (tests/data/scenarios/early-wait-output-only.yaml)."""
    d = Driver(make_scheduler(early_start=EarlyStart.WAIT))
    d.observe(obs("10", "PENDING", "Resources", make_spec(data_in=None)))
    d.observe(obs("10", "RUNNING"))  # started while the RAMDISK was being built
    dec = d.answer("10")
    assert d.state("10") == "mounting-output" and kinds(dec) == ["mount-output"]


def test_spec_without_input_or_output_is_not_tracked() -> None:
    sched = make_scheduler()
    spec = make_spec(data_in=None, data_out=None, nodes=2)
    assert sched.observe([obs("10", "PENDING", "Resources", spec)], 0).events == []


def test_a_failed_output_mount_keeps_the_ramdisk_until_the_job_has_ended() -> None:
    """Found by `make demo`: one node's mfsmount timed out while the others had mounted the
    RAMDISK over DATA_OUT; staging out at once (and tearing down after verifying) would
    have destroyed it under the running job's later writes."""
    d = Driver(make_scheduler())
    d.observe(obs("10", "PENDING", "Resources", make_spec(data_in=None)))
    d.answer_all("10")  # allocated, built: waits for the start
    d.observe(obs("10", "RUNNING"))
    assert d.state("10") == "mounting-output"
    dec = d.answer("10", Result.FAILED, "c3: cannot mount the RAMDISK on the node")
    assert d.state("10") == "mounted-output" and kinds(dec) == ["tell-user"]
    dec = d.observe(obs("10", "RUNNING"))
    assert d.state("10") == "mounted-output" and dec.actions == []
    dec = d.observe(obs("10", "COMPLETED"))
    assert d.state("10") == "staging-out" and kinds(dec) == ["tell-user", "stage-out"]


# ---- on-deck settle (policy.on_deck_settle) ----------------------------------------------

def test_a_job_on_deck_for_one_scheduling_pass_costs_nothing() -> None:
    """Seen in the lab: slurmctld gives a job submitted to a full cluster Resources at once
    and Priority a second later. With a settle time, no RSA node is touched."""
    d = Driver(make_scheduler(on_deck_settle=5.0))
    assert kinds(d.observe(obs("10", "PENDING", "Resources", make_spec()), at=100)) == []
    assert d.state("10") == "none" and d.sched.pool.jobs() == []
    assert kinds(d.tick(102)) == []
    d.observe(obs("10", "PENDING", "Priority"), at=103)
    assert kinds(d.tick(110)) == [] and d.state("10") == "none"


def test_a_job_still_on_deck_after_the_settle_time_gets_its_nodes() -> None:
    d = Driver(make_scheduler(on_deck_settle=5.0))
    d.observe(obs("10", "PENDING", "Resources", make_spec()), at=100)
    assert kinds(d.tick(104.9)) == []
    assert kinds(d.tick(105)) == ["allocate", "build-fs"]
    # on-deck again after a demotion: settles again, from then
    d.answer_all("10")
    d.observe(obs("10", "PENDING", "Priority"), at=200)
    d.answer_all("10")
    assert d.state("10") == "released"
    d.observe(obs("10", "PENDING", "Resources"), at=300)
    assert kinds(d.tick(304)) == [] and kinds(d.tick(305)) == ["allocate", "build-fs"]


def test_the_core_says_when_a_settle_ends() -> None:
    """rsad and the simulator sleep until next_wake: the end of a waiting job's settle
    time is a wake-up like an armed timer, once (not again after the tick at that time)."""
    d = Driver(make_scheduler(on_deck_settle=5.0))
    assert d.sched.next_wake(100) is None
    d.observe(obs("10", "PENDING", "Resources", make_spec()), at=100)
    assert d.sched.next_timer() is None
    assert d.sched.next_wake(100) == 105.0
    assert d.sched.next_wake(105, ticked_at=104) == 105.0  # due now, not ticked since
    assert d.sched.next_wake(105) is None                   # ticked at 105: over
    d.observe(obs("10", "PENDING", "Priority"), at=103)     # not waiting any more
    assert d.sched.next_wake(103) is None


def test_the_settle_survives_a_restart() -> None:
    """not_before is in the job.state event's patch: replay keeps the deadline."""
    d = Driver(make_scheduler(on_deck_settle=5.0))
    d.observe(obs("10", "PENDING", "Resources", make_spec()), at=100)
    again = Scheduler.replay(make_pool(), StagingPolicy(on_deck_settle=5.0), d.log)
    assert again.records["10"].not_before == 105.0
    assert kinds(again.tick(103)) == []


# ---- #RSA_TIER=auto: the allocator chooses the tier ------------------------------------


class _ChoosingPool(Pool):
    """A pool whose allocator answers `auto` with RAM nodes, as a choosing one may."""

    def allocate(self, req: Request) -> Any:
        return super().allocate(replace(req, tier=Tier.RAM) if req.tier is Tier.AUTO else req)


def test_a_tier_auto_job_builds_on_the_tier_of_the_nodes_it_got() -> None:
    pool = make_pool(n_ram=2)
    d = Driver(Scheduler(_ChoosingPool(pool.nodes(), pool.policy), StagingPolicy()))
    d.observe(obs("10", "PENDING", "Resources", DirectiveSpec(data_in="/pfs/in",
                                                              tier=Tier.AUTO)))
    build = d.sched.records["10"].pending
    assert build is not None and build.kind is A.BUILD_FS
    assert build.args_as(BuildFsArgs).tier is None  # the executor takes the allocated nodes' tier
    d.observe(obs("11", "PENDING", "Resources", DirectiveSpec(data_in="/pfs/in",
                                                              tier=Tier.RAM)))
    other = d.sched.records["11"].pending
    assert other is not None and other.args_as(BuildFsArgs).tier is Tier.RAM


def test_a_tier_auto_job_gets_an_answer_from_any_allocator() -> None:
    """Until the allocator chooses, `auto` is declined with one line; never an exception."""
    d = Driver(make_scheduler())
    d.observe(obs("10", "PENDING", "Resources", DirectiveSpec(data_in="/pfs/in",
                                                              tier=Tier.AUTO)))
    rec = d.sched.records["10"]
    if rec.pending is not None:  # an allocator that chooses
        assert rec.pending.kind is A.BUILD_FS and rec.pending.args_as(BuildFsArgs).tier is None
    else:
        assert d.state("10") == "declined" and "RSA_TIER=auto" in rec.message


# ---- the same user's new job under a reused job id (Slurm's identity: issue 35) ----------

def ident(o: Observation, submitted: str, restarts: int = 0) -> Observation:
    return replace(o, submitted=submitted, restarts=restarts)


def test_a_reused_ids_cycles_go_on_past_a_job_without_rsa_work_and_a_restart() -> None:
    """alice's job 10 ran a cycle and was released; Slurm gave the id to her job without
    RSA directives, then (its state lost again) to one with: on main that one was taken
    for a requeue of the first (its directives never read), and an id kept by nothing
    would start again at cycle 1, naming its RAMDISK, actions and tar archives as the
    first job's. Its record goes on from the first job's cycle and serial, also after a
    restart, from the log or from a snapshot."""
    d = Driver(make_scheduler())
    d.observe(ident(obs("10", "PENDING", "Resources", make_spec()), "T1"))
    d.observe()  # gone from the queue: torn down
    d.answer_all("10")
    first = d.sched.records["10"]
    assert (first.rsa_state.value, first.cycle) == ("released", 1)
    issued = {e.context["actions"][i] for e in d.log if e.name == "rsa.transition"
              for i in range(len(e.context["actions"]))}
    d.observe(ident(obs("10", "PENDING", "Priority", None), "T2"))  # no RSA work
    assert "10" not in d.sched.records
    base = d.sched.durable_state()
    at = len(d.log)
    spec = make_spec(data_in="/pfs/in2", data_out=None)
    for sched in (d.sched, Scheduler.replay(make_pool(), d.sched.policy, d.log),
                  Scheduler.replay(make_pool(), d.sched.policy, d.log[at:], base=base)):
        dec = sched.observe([ident(obs("10", "PENDING", "Resources", spec), "T3")], 50.0)
        rec = sched.records["10"]
        assert (rec.spec, rec.cycle, rec.submitted) == (spec, 2, "T3")
        assert kinds(dec) == ["allocate", "build-fs"]
        assert all(a.id.startswith("10/2/") and a.id not in issued for a in dec.actions)


def test_a_requeue_seen_completing_first_is_the_same_job() -> None:
    """Slurm raises RestartCnt at the requeue, while the job is COMPLETING with its old
    submit time, and sets the new submit time once it is pending (the lab,
    tests/data/slurm/squeue_requeue.txt): the record takes the count only with the new
    submit time, or the pending run would look like a new job (restarts not above the
    record's) and its running cycle be ended."""
    d = Driver(make_scheduler())
    to_locked_in(d, data_in=None)
    d.observe(ident(obs("10", "RUNNING"), "T1"))
    d.answer("10")
    assert d.state("10") == "mounted-output"
    d.observe(ident(obs("10", "COMPLETING"), "T1", restarts=1))
    d.observe(ident(obs("10", "PENDING", "BeginTime"), "T2", restarts=1))
    rec = d.sched.records["10"]
    assert not rec.superseded and "10" not in d.sched.displaced
    assert (rec.submitted, rec.restarts) == ("T2", 1)
