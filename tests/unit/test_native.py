"""Native mode (slurm.mode: native): the driver's answers, the pools file, and the daemon
driven by burst buffer hooks with a scripted Slurm and instant executors.

The same daemon against the real slurmctld and burst_buffer/lua: tests/e2e/test_native.py.
"""

from __future__ import annotations

import json
from pathlib import Path

from rsa_scheduler.core.actions import ActionKind
from rsa_scheduler.core.directives import DirectiveSpec
from rsa_scheduler.core.events import Event
from rsa_scheduler.core.machine import JobRecord
from rsa_scheduler.core.policy import NodeState, StagingPolicy
from rsa_scheduler.core.scheduler import Scheduler
from rsa_scheduler.core.states import JobState, RsaState, slurm_withholds
from rsa_scheduler.daemon.native import (
    GRANULARITY,
    Answer,
    BbJob,
    NativeDriver,
    answer_data_in,
    answer_data_out,
    answer_teardown,
    native_text,
    pools_json,
)
from rsa_scheduler.daemon.service import Daemon
from rsa_scheduler.slurm.parse import QueueRow
from rsa_scheduler.store import Store
from tests.unit.corekit import make_pool
from tests.unit.test_daemon import ScriptedSlurm, instant_registry, settle

SPEC = DirectiveSpec(data_in="/pfs/in", data_out="/pfs/out")
OUT_ONLY = DirectiveSpec(data_out="/pfs/out")


def record(state: RsaState, spec: DirectiveSpec = SPEC, **kw: object) -> JobRecord:
    rec = JobRecord(job_id="7", user="alice", spec=spec, rsa_state=state)
    for key, value in kw.items():
        setattr(rec, key, value)
    return rec


# ---- answers -----------------------------------------------------------------------------

def ran(d: Daemon, job: str) -> None:
    """Slurm ran ``job``: its PrologSlurmctld, then its EpilogSlurmctld (exit 0)."""
    d.submit("hook", {"hook": "prolog_slurmctld", "job_id": job})
    settle(d)
    d.submit("hook", {"hook": "epilog_slurmctld", "job_id": job, "exit_code": "0"})
    settle(d)


def test_data_in_waits_until_the_input_is_staged() -> None:
    assert answer_data_in(None, None).status == "wait"
    for state in (RsaState.NONE, RsaState.ALLOCATED, RsaState.FS_BUILDING,
                  RsaState.STAGING_IN, RsaState.STAGE_IN_FAILED):
        assert answer_data_in(record(state), None).status == "wait", state
    for state in (RsaState.STAGED_IN, RsaState.LOCKED_IN, RsaState.MOUNTED_INPUT):
        assert answer_data_in(record(state, nodes="rsa1"), None).status == "done"


def test_data_in_waits_while_a_lost_nodes_ramdisk_is_torn_down_and_staged_again() -> None:
    """An RSA node lost during stage-in: the core tears the RAMDISK down and stages the
    still-pending job again on other nodes (not declined). data_in must keep waiting: a
    failed answer would make Slurm hold the job for good (found in the lab)."""
    lost = ("an RSA node was lost while the input was staged: it is staged again on other "
            "RSA nodes: rsa3: health: unreachable")
    for state in (RsaState.TEARING_DOWN, RsaState.RELEASED):
        answer = answer_data_in(record(state, job_state=JobState.ON_DECK, message=lost),
                                None)
        assert answer.status == "wait", state
        assert answer.message.startswith("staging again: an RSA node was lost"), answer
    # torn down for good: declined, or the job ended
    declined = record(RsaState.TEARING_DOWN, job_state=JobState.ON_DECK, declined=True,
                      message=lost)
    assert answer_data_in(declined, None).status == "failed"
    ended = record(RsaState.TEARING_DOWN, job_state=JobState.FINISHED, message=lost)
    assert answer_data_in(ended, None).status == "failed"


def test_data_in_of_a_rerun_whose_earlier_output_was_rescued_fails_saying_where() -> None:
    """Issue 33: the earlier run's output went to the rescue area, not to DATA_OUT. On
    main data_in waited for free RSA nodes, then staged the rerun in and started it as if
    its output were in DATA_OUT, its user told nothing."""
    rescued = "/pfs/rescue/alice/7.1"
    for state in (RsaState.OUTPUT_VERIFIED, RsaState.TEARING_DOWN, RsaState.RELEASED):
        answer = answer_data_in(record(state, job_state=JobState.ON_DECK,
                                       rescue_to=rescued), BbJob(setup=1.0, polled=True))
        assert answer.status == "failed", state
        assert answer.message == (
            f"job 7's previous run's output was quarantined, then rescued to {rescued}, "
            "not to its DATA_OUT: this run is not started without it; put what it needs in "
            "place, then scancel the job and submit it again")
    # while the rescue runs it waits as for any stage-out; a run that started is its own
    staging = record(RsaState.STAGING_OUT, job_state=JobState.ON_DECK, rescue_to=rescued)
    assert answer_data_in(staging, BbJob(setup=1.0, polled=True)).status == "wait"
    running = record(RsaState.RELEASED, job_state=JobState.RUNNING, rescue_to=rescued)
    assert answer_data_in(running, BbJob(setup=1.0, polled=True)).status != "failed"


def test_data_out_of_a_rescued_output_fails_saying_where_never_verified() -> None:
    """Issue 33: the rescue's verification is of the copy in the rescue area, and the
    driver counts it as this run's (``bb.verified``). On main a data_out Slurm asked
    again after the quarantine's failure (slurmctld restarted: it runs post_run and
    data_out again) answered "done: output staged out and verified": Slurm ended the
    stage-out as if the output were in DATA_OUT. It fails (Slurm keeps the job in
    stage-out, the line its reason) naming the rescue directory."""
    rescued = "/pfs/rescue/alice/7.1"
    verified = BbJob(setup=1.0, ran=True, over=True, verified=True, polled=True)
    for state in (RsaState.OUTPUT_VERIFIED, RsaState.TEARING_DOWN, RsaState.RELEASED):
        answer = answer_data_out(record(state, job_state=JobState.FINISHED,
                                        rescue_to=rescued), verified)
        assert answer == Answer("failed", (
            f"job 7's output was quarantined, then rescued to {rescued} "
            "(quarantine.rescue_after), not staged out to its DATA_OUT: it is verified "
            "there; scancel --hurry 7 ends the stage-out")), state
    # while the rescue runs: wait, saying where it goes (also after a restart mid-rescue)
    for state in (RsaState.STAGING_OUT, RsaState.STAGE_OUT_FAILED, RsaState.VERIFYING):
        answer = answer_data_out(record(state, job_state=JobState.FINISHED,
                                        rescue_to=rescued),
                                 BbJob(setup=1.0, ran=True, over=True, polled=True))
        assert answer.status == "wait" and f"rescued to {rescued}" in answer.message, state
    # the same run verified into DATA_OUT (no rescue): done
    assert answer_data_out(record(RsaState.RELEASED, job_state=JobState.FINISHED),
                           verified).status == "done"


def test_data_out_with_no_verification_known_never_claims_where_the_output_went() -> None:
    """Released with no verification rsad knows of: the job wrote to the PFS itself, or
    rsad verified it in a record it forgot (daemon.retention) before Slurm asked again;
    it said "it was written to the PFS directly", untrue in the second case."""
    answer = answer_data_out(record(RsaState.RELEASED, job_state=JobState.FINISHED),
                             BbJob(setup=1.0, ran=True, over=True, polled=True))
    assert answer.status == "done"
    assert "or (a job rsad has forgotten" in answer.message
    assert "staged out and verified earlier" in answer.message


def test_data_in_of_a_job_without_rsa_work_is_done_only_once_its_directives_were_read(
        ) -> None:
    """Issue 38: "nothing to stage" only when the job's own directives were read and ask
    nothing; not read (a failed squeue, a script not read yet, rsad restarted) or
    unreadable: wait, never done."""
    answer = answer_data_in(None, BbJob(setup=1.0, directives="none"), "7")
    assert answer == Answer("done", "job 7 has no #RSA_DATA_IN or #RSA_DATA_OUT: nothing "
                                    "to stage")
    for bb in (None, BbJob(setup=1.0), BbJob(setup=1.0, directives="unreadable")):
        answer = answer_data_in(None, bb, "7")
        assert answer.status == "wait" and "job 7's #RSA_ directives" in answer.message, bb
        answer = answer_data_out(None, bb, "7")
        assert answer.status == "wait" and "job 7's #RSA_ directives" in answer.message, bb
    answer = answer_data_out(None, BbJob(setup=1.0, directives="none"), "7")
    assert answer == Answer("done", "job 7 has no #RSA_DATA_OUT: nothing to stage out")


def test_a_refused_stage_in_fails_with_what_to_do_and_no_pfs_promise() -> None:
    rec = record(RsaState.TEARING_DOWN, declined=True, message=(
        "refused, no retry: job uses the PFS: cannot "
        "read /pfs/in: Permission denied"))
    answer = answer_data_in(rec, None)
    assert answer.status == "failed"
    assert answer.message == (
        "stage-in of job 7 failed: refused, no retry: "
        "cannot read /pfs/in: Permission denied; fix it, then scancel the job and submit "
        "it again")
    assert native_text("the RSA gave up on this job; it uses the PFS") == \
        "the RSA gave up on this job"


def test_data_out_is_done_only_when_verified_and_fails_when_quarantined() -> None:
    running = record(RsaState.MOUNTED_OUTPUT, job_state=JobState.RUNNING)
    assert answer_data_out(running, BbJob(setup=1.0)).status == "wait"
    staging = record(RsaState.STAGING_OUT, job_state=JobState.FINISHED)
    assert answer_data_out(staging, BbJob(setup=1.0)).status == "wait"
    assert answer_data_out(staging, BbJob(setup=1.0, verified=True)).status == "done"
    quarantined = record(RsaState.QUARANTINED, job_state=JobState.FINISHED,
                         message="stage-out kept failing")
    answer = answer_data_out(quarantined, BbJob(setup=1.0))
    assert answer.status == "failed" and "rsa retry 7" in answer.message
    assert "stays on its RAMDISK" in answer.message
    # released without a verification: the job wrote to the PFS itself (it ended before
    # the reset), unless an operator discarded the RAMDISK's output
    direct = record(RsaState.RELEASED, job_state=JobState.FINISHED)
    answer = answer_data_out(direct, BbJob(setup=1.0))
    assert answer.status == "done" and "written to the PFS directly" in answer.message
    lost = answer_data_out(direct, BbJob(setup=1.0, discarded=True))
    assert lost.status == "failed" and "discarded by an operator" in lost.message
    no_output = record(RsaState.RELEASED, spec=DirectiveSpec(data_in="/pfs/in"),
                       job_state=JobState.FINISHED)
    assert answer_data_out(no_output, BbJob(setup=1.0)).status == "done"
    assert answer_data_out(None, BbJob(setup=1.0, directives="none")).status == "done"


def test_teardown_never_answers_done_while_output_is_held() -> None:
    assert answer_teardown(None).status == "done"
    assert answer_teardown(record(RsaState.RELEASED)).status == "done"
    assert answer_teardown(record(RsaState.VERIFYING)).status == "wait"
    assert answer_teardown(record(RsaState.TEARING_DOWN)).status == "wait"
    held = answer_teardown(record(RsaState.QUARANTINED, message="x"))
    assert held.status == "failed" and "kept" in held.message


def test_teardown_says_what_rsad_does_while_it_waits() -> None:
    """Issue 38: never "tearing down" while rsad stages the output out and keeps the
    RAMDISK."""
    for state in (RsaState.STAGING_OUT, RsaState.STAGE_OUT_FAILED, RsaState.VERIFYING):
        answer = answer_teardown(record(state, job_state=JobState.FINISHED))
        assert answer.status == "wait" and "tearing" not in answer.message, state
        assert "RAMDISK is kept until the output is verified" in answer.message, state
    assert answer_teardown(record(RsaState.TEARING_DOWN)).message == \
        "tearing job 7's RAMDISK down"


# ---- pools -------------------------------------------------------------------------------

def test_pools_are_per_tier_in_mib_and_count_only_free_up_nodes() -> None:
    gib = 1 << 30
    text = pools_json([
        ("ram", 2 * gib, NodeState.UP, None),
        ("ram", 2 * gib, NodeState.UP, "7"),
        ("ram", 2 * gib, NodeState.DRAINED, None),
        ("ssd", 4 * gib, NodeState.DOWN, None),
    ])
    data = json.loads(text)
    assert data == {"pools": [
        {"id": "ram", "quantity": 3 * 2048, "granularity": GRANULARITY, "free": 2048},
        {"id": "ssd", "quantity": 0, "granularity": GRANULARITY, "free": 0},
    ]}


def test_the_pools_file_is_rewritten_only_when_it_changes(tmp_path: Path) -> None:
    driver = NativeDriver(tmp_path / "run" / "bb-pools.json", grace=60.0)
    nodes = [("ram", 1 << 30, NodeState.UP, None)]
    assert driver.write_pools(nodes)
    assert (tmp_path / "run" / "bb-pools.json").stat().st_mode & 0o777 == 0o644
    assert not driver.write_pools(nodes)
    assert driver.write_pools([("ram", 1 << 30, NodeState.UP, "7")])
    assert json.loads((tmp_path / "run" / "bb-pools.json").read_text())["pools"][0]["free"] == 0


# ---- the driver's memory -------------------------------------------------------------------

def test_setup_is_idempotent_and_teardown_keeps_a_pending_job_for_the_grace() -> None:
    driver = NativeDriver(Path("/nonexistent/pools.json"), grace=60.0)
    assert [e.name for e in driver.setup("7", 100.0, {"uid": "1001"})] == ["bb.setup"]
    assert driver.setup("7", 101.0, {}) == []  # a re-run setup (slurmctld restarted)
    assert driver.held("7", "PENDING", 102.0) and not driver.held("7", "RUNNING", 102.0)
    assert driver.due(102.0, {"7"}) == {"7"} and driver.due(103.0, {"7"}) == set()
    assert [e.name for e in driver.teardown_pending("7", 110.0, True)] == ["bb.teardown"]
    assert driver.held("7", "PENDING", 169.0)
    assert not driver.held("7", "PENDING", 170.0)
    assert driver.due(170.0, {"7"}) == {"7"}  # observed again: the core sees the demotion
    # set up again within the grace: held again, one new event
    driver2 = NativeDriver(Path("/nonexistent/pools.json"), grace=60.0)
    driver2.setup("7", 100.0, {})
    driver2.teardown_pending("7", 110.0, True)
    assert [e.name for e in driver2.setup("7", 150.0, {})] == ["bb.setup"]
    assert driver2.held("7", "PENDING", 500.0)


def test_a_teardown_of_a_requeued_pending_job_says_its_earlier_runs_output_is_kept() -> None:
    """Found by review: slurm_bb_job_teardown of a requeued job (cancelled while it
    pends) whose earlier run's output rsad still stages out was answered "kept 60s for a
    new setup, then torn down unless the job starts": untrue, that RAMDISK is kept until
    the output on it is verified (or quarantined), whatever the job does."""
    for state in (RsaState.STAGING_OUT, RsaState.VERIFYING, RsaState.STAGE_OUT_FAILED,
                  RsaState.QUARANTINED):
        driver = NativeDriver(Path("/nonexistent/pools.json"), grace=60.0)
        driver.setup("7", 100.0, {})
        got = driver.serve("teardown", "7", {"hurry": "true"},
                           record(state, job_state=JobState.QUEUED), 110.0,
                           capacity=dict)
        assert got.answer.status == "done", got
        assert "torn down unless" not in got.answer.message, got
        assert "earlier run's output" in got.answer.message, got


def test_the_driver_state_is_rebuilt_from_the_log_and_from_a_snapshot() -> None:
    events = [Event(1.0, "7", "bb.setup", {}),
              Event(1.5, "7", "job.state", {"from": "on-deck", "to": "running"}),
              Event(2.0, "7", "rsa.transition", {"from": "verifying",
                                                  "to": "output-verified"}),
              Event(3.0, "8", "bb.setup", {}),
              Event(3.5, "8", "job.state", {"from": "on-deck", "to": "running"}),
              Event(4.0, "8", "bb.teardown", {}),
              Event(5.0, "8", "rsa.transition", {"from": "quarantined",
                                                  "to": "tearing-down", "trigger": "discard"})]
    driver = NativeDriver(Path("/x"), grace=60.0)
    for ev in events:
        driver.learn(ev)
    assert driver.verified("7") and not driver.verified("8")
    assert driver.jobs["8"].torn == 4.0 and driver.jobs["8"].discarded
    again = NativeDriver(Path("/x"), grace=60.0)
    again.load(json.loads(json.dumps(driver.to_json())))
    assert again.to_json() == driver.to_json()


def test_a_requeued_jobs_new_setup_is_a_new_run() -> None:
    """Issues 35 and 38: a requeued job's data_out is never "done" from the first run's
    verification, even one that completes after the second setup; its data_in waits
    while the first run's output is staged out."""
    driver = NativeDriver(Path("/x"), grace=60.0)
    verified = Event(0.0, "7", "rsa.transition", {"from": "verifying",
                                                   "to": "output-verified"})
    for ev in (Event(1.0, "7", "bb.setup", {}),
               Event(2.0, "7", "job.state", {"from": "on-deck", "to": "running"})):
        driver.learn(ev)
    driver.learn(Event(3.0, "7", "bb.setup", {}))  # requeued: set up again
    driver.learn(verified)  # the first run's stage-out ends after the new setup
    assert not driver.verified("7")
    assert answer_data_out(record(RsaState.OUTPUT_VERIFIED, job_state=JobState.FINISHED),
                           driver.jobs["7"]).status == "wait"
    for state in (RsaState.STAGING_OUT, RsaState.VERIFYING, RsaState.OUTPUT_VERIFIED,
                  RsaState.STAGE_OUT_FAILED, RsaState.QUARANTINED):
        answer = answer_data_in(record(state, job_state=JobState.ON_DECK),
                                BbJob(setup=3.0, polled=True))
        assert answer.status == "wait" and "previous run" in answer.message, (state, answer)
    driver.learn(Event(4.0, "7", "job.state", {"from": "on-deck", "to": "running"}))
    driver.learn(verified)  # the second run's
    assert driver.verified("7")


def test_the_driver_learns_live_what_a_replay_learns(tmp_path: Path) -> None:
    """Found by review (issue 35): rsad fed its burst buffer driver only rsa.transition
    events as it made them, and every event on a replay: live, a run was never seen to
    start or end, so a requeued job stayed held for its old burst buffer and an
    operator's discard was never counted."""
    slurm, seen, clock = ScriptedSlurm(), list[str](), Clock()
    d = native_daemon(tmp_path, slurm, seen, clock)
    slurm.set("9", "PENDING", "BurstBufferResources", spec=OUT_ONLY)
    d.bb("setup", "9", {})
    d.poll()
    settle(d)
    slurm.set("9", "RUNNING", "None", spec=OUT_ONLY)
    d.poll()
    settle(d)
    slurm.set("9", "PENDING", "BeginTime", spec=OUT_ONLY)  # requeued
    d.poll()
    settle(d)
    assert d.native is not None
    live = d.native.to_json()["9"]
    assert live["ran"] and live["over"], live
    d.shutdown()
    d.store.close()
    again = native_daemon(tmp_path, slurm, seen, clock)
    assert again.native is not None
    assert again.native.to_json()["9"] == live


def test_a_requeued_job_is_not_held_for_its_burst_buffer_before_a_new_setup() -> None:
    """Found in the lab (issue 35): requeued, the job still counted as held by Slurm for
    its first run's burst buffer, so rsad built a new RAMDISK on the RSA nodes Slurm's
    pool then lacked for the new setup: Slurm waited for pool space (BurstBufferResources)
    that the job itself held."""
    driver = NativeDriver(Path("/x"), grace=60.0)
    for ev in (Event(1.0, "7", "bb.setup", {}),
               Event(2.0, "7", "job.state", {"from": "on-deck", "to": "running"})):
        driver.learn(ev)
    assert not driver.held("7", "RUNNING", 3.0)
    driver.learn(Event(3.0, "7", "job.state", {"from": "running", "to": "queued"}))
    assert not driver.held("7", "PENDING", 4.0)  # requeued: no burst buffer yet
    assert [e.name for e in driver.setup("7", 5.0, {})] == ["bb.setup"]  # a new run's
    assert driver.held("7", "PENDING", 6.0)
    assert driver.setup("7", 7.0, {}) == []  # slurmctld restarted: the same run's


# ---- the daemon, driven by hooks ---------------------------------------------------------------

class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        self.now += 0.001
        return self.now


def native_daemon(tmp_path: Path, slurm: ScriptedSlurm, seen: list[str], clock: Clock,
                  grace: float = 120.0, fail: set[ActionKind] | None = None,
                  policy: StagingPolicy | None = None) -> Daemon:
    store = Store.open(tmp_path / "rsa.db", durability="normal")
    policy = policy or StagingPolicy(wait_timeout=2_073_600.0)
    d = Daemon(Scheduler(make_pool(), policy), slurm=slurm,
               store=store, registry=instant_registry(seen, fail), workers=2, poll_interval=0,
               clock=clock)
    d.native = NativeDriver(tmp_path / "bb-pools.json", grace)
    d.start()
    return d


def test_data_out_says_what_the_verification_checked_also_after_a_restart(
        tmp_path: Path) -> None:
    """Issue 37 item 5: data_out's "done" said "output staged out and verified" whatever
    was checked; a POSTPROCESS job's output is checked by its exit status only, and the
    answer says so, as `rsa job` does (from the log, and from a snapshot)."""
    told = "exit status only: your POSTPROCESS exited 0 (what it wrote is not checked)"
    slurm, seen, clock = ScriptedSlurm(), list[str](), Clock()
    d = native_daemon(tmp_path, slurm, seen, clock)
    d.registry.register(ActionKind.VERIFY, lambda ctx: {"summary": told})
    spec = DirectiveSpec(data_out="/pfs/out", postprocess=("/pfs/post.sh",))
    slurm.set("9", "PENDING", "BurstBufferResources", spec=spec)
    d.bb("setup", "9", {})
    d.poll()
    settle(d)
    ran(d, "9")
    slurm.set("9", "STAGE_OUT", "None", spec=spec)
    d.poll()
    settle(d)
    answer = d.bb("data_out", "9", {})
    assert answer["status"] == "done"
    assert answer["message"] == f"stage-out finished: {told}", answer
    assert d.native is not None
    snapshot = d.native.to_json()
    d.shutdown()
    d.store.close()
    d2 = native_daemon(tmp_path, slurm, seen, clock)  # slurmctld re-runs data_out
    assert d2.bb("data_out", "9", {})["message"] == f"stage-out finished: {told}"
    again = NativeDriver(tmp_path / "bb-pools.json", grace=60.0)
    again.load(snapshot)
    assert answer_data_out(d2.sched.records["9"], again.jobs["9"]).message == \
        f"stage-out finished: {told}"


def test_a_job_is_staged_only_after_slurm_sets_it_up_and_is_never_demoted_meanwhile(
        tmp_path: Path) -> None:
    slurm, seen, clock = ScriptedSlurm(), list[str](), Clock()
    d = native_daemon(tmp_path, slurm, seen, clock)
    slurm.set("7", "PENDING", "Resources")  # on-deck in queue mode: not here
    d.poll()
    settle(d)
    assert "7" not in d.sched.records and seen == []
    assert d.bb("data_in", "7", {})["status"] == "wait"  # rsad lost the setup: takes it
    d.poll()
    settle(d)
    assert d.bb("setup", "7", {"uid": "1001"})["status"] == "done"
    slurm.set("7", "PENDING", "BurstBufferStageIn")
    d.poll()
    settle(d)
    rec = d.sched.records["7"]
    assert rec.rsa_state is RsaState.LOCKED_IN and rec.job_state is JobState.ON_DECK
    assert d.bb("data_in", "7", {})["status"] == "done"
    # Slurm keeps it pending for another reason: still the RSA's, nothing torn down
    slurm.set("7", "PENDING", "Priority")
    d.poll()
    settle(d)
    assert d.sched.records["7"].rsa_state is RsaState.LOCKED_IN
    pools = json.loads((tmp_path / "bb-pools.json").read_text())["pools"]
    assert sum(p["quantity"] for p in pools) > sum(p["free"] for p in pools)


def test_output_is_reported_staged_out_only_once_verified_also_after_a_restart(
        tmp_path: Path) -> None:
    slurm, seen, clock = ScriptedSlurm(), list[str](), Clock()
    d = native_daemon(tmp_path, slurm, seen, clock)
    slurm.set("9", "PENDING", "BurstBufferResources", spec=OUT_ONLY)
    d.bb("setup", "9", {})
    d.poll()
    settle(d)
    assert d.bb("data_in", "9", {})["status"] == "done"
    d.submit("hook", {"hook": "prolog_slurmctld", "job_id": "9"})
    settle(d)
    assert d.bb("data_out", "9", {})["status"] == "wait"  # still running
    d.submit("hook", {"hook": "epilog_slurmctld", "job_id": "9", "exit_code": "0"})
    settle(d)
    slurm.set("9", "STAGE_OUT", "None", spec=OUT_ONLY)
    d.poll()
    settle(d)
    assert d.bb("data_out", "9", {})["status"] == "done"
    assert d.bb("teardown", "9", {"hurry": "false"})["status"] == "done"
    assert d.sched.records["9"].rsa_state is RsaState.RELEASED
    d.shutdown()
    d.store.close()
    d2 = native_daemon(tmp_path, slurm, seen, clock)  # slurmctld re-runs data_out
    assert d2.bb("post_run", "9", {})["status"] == "done"
    assert d2.bb("data_out", "9", {})["status"] == "done"


def test_another_users_job_set_up_under_a_tracked_id_is_not_answered_from_its_record(
        tmp_path: Path) -> None:
    """Found by review: slurmctld lost its state and set up bob's job under the id of
    alice's job, whose output rsad still stages out. data_in answered bob's job "done:
    staged in on rsa1" from alice's record (bob's input was never staged); it waits
    until alice's cycle is over and bob's job has a record of its own."""
    slurm, seen, clock = ScriptedSlurm(), list[str](), Clock()
    d = native_daemon(tmp_path, slurm, seen, clock, fail={ActionKind.STAGE_OUT})
    slurm.set("9", "PENDING", "BurstBufferResources", spec=OUT_ONLY)
    d.bb("setup", "9", {"uid": "1001"})
    d.poll()
    settle(d)
    ran(d, "9")
    assert d.sched.records["9"].rsa_state is RsaState.STAGE_OUT_FAILED
    bobs = DirectiveSpec(data_in="/pfs/bob/in")
    slurm.rows = [QueueRow("9", "PENDING", "BurstBufferStageIn", 10, 2, "bob",
                           bobs.to_admin_comment())]
    assert d.bb("setup", "9", {"uid": "1002"})["status"] == "done"
    d.poll()
    settle(d)
    assert d.sched.records["9"].user == "alice"  # her output is not safe yet
    for hook in ("data_in", "pre_run"):
        got = d.bb(hook, "9", {})
        assert got["status"] == "wait" or hook == "pre_run", got
        assert got["rsa_state"] is None, got  # nothing of alice's job is bob's
    assert d.bb("teardown", "9", {"hurry": "false"})["status"] == "done"
    assert d.sched.records["9"].rsa_state is RsaState.STAGE_OUT_FAILED  # kept


def test_a_teardown_of_a_pending_job_keeps_its_ramdisk_for_a_new_setup_then_frees_it(
        tmp_path: Path) -> None:
    slurm, seen, clock = ScriptedSlurm(), list[str](), Clock()
    d = native_daemon(tmp_path, slurm, seen, clock, grace=120.0)
    slurm.set("7", "PENDING", "BurstBufferResources")
    d.bb("setup", "7", {})
    d.poll()
    settle(d)
    assert d.sched.records["7"].rsa_state is RsaState.LOCKED_IN
    builds = [a for a in seen if "/build-fs/" in a]
    # slurmctld restarted: it tears down (hurry), then sets up again a minute later
    assert d.bb("teardown", "7", {"hurry": "true"})["status"] == "done"
    clock.now += 60
    d.poll()
    settle(d)
    d.bb("setup", "7", {})
    d.poll()
    settle(d)
    assert d.bb("data_in", "7", {})["status"] == "done"  # at once: nothing staged twice
    assert [a for a in seen if "/build-fs/" in a] == builds
    # torn down again and never set up: after the grace the RAMDISK goes
    d.bb("teardown", "7", {"hurry": "true"})
    clock.now += 121
    d.poll()
    settle(d)
    assert d.sched.records["7"].rsa_state.value == "released"


def test_queue_mode_refuses_burst_buffer_hooks(tmp_path: Path) -> None:
    import pytest

    from rsa_scheduler.core.scheduler import CommandRefused

    slurm, seen, clock = ScriptedSlurm(), list[str](), Clock()
    d = native_daemon(tmp_path, slurm, seen, clock)
    d.native = None
    with pytest.raises(CommandRefused, match=r"slurm\.mode: native"):
        d.bb("setup", "7", {})


def test_only_root_or_slurm_may_call_the_burst_buffer_hooks(tmp_path: Path) -> None:
    import pytest

    from rsa_scheduler.daemon.api import ApiError, Caller
    from tests.unit.test_daemon import serving

    slurm, seen, clock = ScriptedSlurm(), list[str](), Clock()
    d = native_daemon(tmp_path, slurm, seen, clock)
    with serving(d) as routes:
        with pytest.raises(ApiError, match="root or SlurmUser only"):
            routes.dispatch(Caller(1001, "alice"), "POST", "/v1/bb/setup", {"job_id": "7"})
        with pytest.raises(ApiError, match="valid job_id"):
            routes.dispatch(Caller(0, "root"), "POST", "/v1/bb/setup", {"job_id": "7;x"})
        with pytest.raises(ApiError, match="no burst buffer hook"):
            routes.dispatch(Caller(0, "root"), "POST", "/v1/bb/paths", {"job_id": "7"})
        slurm.tasks["12"] = ("10", "2")  # an array task: rsad knows it as 10_2
        got = routes.dispatch(Caller(0, "root"), "POST", "/v1/bb/setup", {"job_id": "12"})
        assert got["job_id"] == "10_2" and got["status"] == "done"
        assert d.aliases["12"] == "10_2"
        # issue 36: another job, or another user's, never passes for the same task
        # (its setup fails, saying why: never served under its own id, which the queue
        # does not list, as a job without directives)
        slurm.tasks["13"] = ("10", "2")
        got = routes.dispatch(Caller(0, "root"), "POST", "/v1/bb/setup", {"job_id": "13"})
        assert got["status"] == "failed" and d.aliases == {"12": "10_2"}
        slurm.tasks["14"] = ("10", "3")
        slurm.users["14"] = "root"  # squeue's user, whose uid is 0
        got = routes.dispatch(Caller(0, "root"), "POST", "/v1/bb/setup",
                              {"job_id": "14", "uid": "1"})  # Slurm's uid: not root's
        assert got["status"] == "failed" and "14" not in d.aliases


def test_a_job_slurm_holds_for_a_limit_gets_no_rsa_nodes_until_the_limit_lets_it_go(
        tmp_path: Path) -> None:
    """Issue 33: Slurm 22.05 sets a job's burst buffer up and runs its stage-in while it
    pends for its association's ``GrpTRES=bb/lua`` (``AssocGrpBB``, seen in the lab):
    rsad built and locked in a RAMDISK for a job that could not start. Now data_in
    waits, saying why, with no RSA nodes taken; once the reason goes the job is staged.
    A job that has its RAMDISK when a limit comes keeps it until the lock-in bound."""
    slurm, seen, clock = ScriptedSlurm(), list[str](), Clock()
    d = native_daemon(tmp_path, slurm, seen, clock,
                      policy=StagingPolicy(wait_timeout=2_073_600.0, lockin_timeout=60.0))
    assert d.bb("setup", "7", {"uid": "1001"})["status"] == "done"
    slurm.set("7", "PENDING", "AssocGrpBB")
    d.poll()
    settle(d)
    rec = d.sched.records["7"]
    assert rec.rsa_state is RsaState.NONE and not rec.nodes and seen == []
    answer = d.bb("data_in", "7", {})
    assert answer["status"] == "wait" and "AssocGrpBB" in answer["message"], answer
    assert "free RSA nodes" not in answer["message"]
    slurm.set("7", "PENDING", "QOSMaxJobsPerUserLimit")  # another limit: the same
    d.poll()
    settle(d)
    assert d.sched.records["7"].rsa_state is RsaState.NONE and seen == []
    assert "QOSMaxJobsPerUserLimit" in d.bb("data_in", "7", {})["message"]
    # cancelled while Slurm held it: a data_in still asking is let go, truly
    slurm.set("8", "PENDING", "AssocGrpBB")
    d.bb("setup", "8", {"uid": "1001"})
    d.poll()
    settle(d)
    slurm.rows = [r for r in slurm.rows if r.job_id != "8"]  # scancel
    d.poll()
    settle(d)
    gone = d.bb("data_in", "8", {})
    assert gone["status"] == "failed" and "nothing was staged" in gone["message"], gone
    # the limit lets it go: Slurm waits for its stage-in, rsad stages it
    slurm.set("7", "PENDING", "BurstBufferStageIn")
    d.poll()
    settle(d)
    rec = d.sched.records["7"]
    assert rec.rsa_state is RsaState.LOCKED_IN and rec.nodes
    assert d.bb("data_in", "7", {})["status"] == "done"
    # a limit now (another job of the user's started): the staged RAMDISK is kept ...
    slurm.set("7", "PENDING", "AssocGrpBB")
    d.poll()
    settle(d)
    rec = d.sched.records["7"]
    assert rec.rsa_state is RsaState.LOCKED_IN and rec.nodes
    assert d.bb("data_in", "7", {})["status"] == "done"
    # ... until the lock-in bound: then its RSA nodes are free, and the job is told why
    clock.now += 61
    d.poll()
    settle(d)
    rec = d.sched.records["7"]
    assert rec.rsa_state in (RsaState.RELEASED, RsaState.DECLINED) and not rec.nodes, rec
    assert "slurm.lockin.timeout" in rec.message


def test_slurm_withholds_names_limits_and_holds_not_resources() -> None:
    for reason in ("AssocGrpBB", "AssocMaxBBPerJob", "AssociationJobLimit",
                   "QOSGrpBB", "QOSMaxJobsPerUserLimit", "JobHeldUser", "JobHeldAdmin"):
        assert slurm_withholds(reason), reason
    for reason in ("Resources", "Priority", "BurstBufferStageIn", "BurstBufferResources",
                   "None", "", "Dependency", "BeginTime", "ReqNodeNotAvail"):
        assert not slurm_withholds(reason), reason


def test_the_pools_are_given_to_root_or_slurm_for_a_slurmctld_host_without_rsad(
        tmp_path: Path) -> None:
    import pytest

    from rsa_scheduler.daemon.api import ApiError, Caller
    from tests.unit.test_daemon import serving

    slurm, seen, clock = ScriptedSlurm(), list[str](), Clock()
    d = native_daemon(tmp_path, slurm, seen, clock)
    with serving(d) as routes:
        with pytest.raises(ApiError, match="root or SlurmUser only"):
            routes.dispatch(Caller(1001, "alice"), "GET", "/v1/bb/pools", None)
        d.poll()
        settle(d)
        got = routes.dispatch(Caller(0, "root"), "GET", "/v1/bb/pools", None)
        assert got == json.loads((tmp_path / "bb-pools.json").read_text())
        assert got["pools"] and got["pools"][0]["id"] == "ram"
        d.native = None
        with pytest.raises(ApiError, match="queue mode"):
            routes.dispatch(Caller(0, "root"), "GET", "/v1/bb/pools", None)
