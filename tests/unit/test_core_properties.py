"""Property tests: random interleavings of Slurm observations, action outcomes, timers,
commands and node drains must never double-book or leak a node, never destroy unverified
output, always end released when everything succeeds, and replay to the live state."""

from __future__ import annotations

import contextlib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from rsa_scheduler.core.actions import Action, ActionKind, Outcome, Result
from rsa_scheduler.core.directives import DirectiveSpec
from rsa_scheduler.core.events import Event
from rsa_scheduler.core.payloads import OnNodes, ResetArgs
from rsa_scheduler.core.policy import EarlyStart, NodeState, StagingPolicy
from rsa_scheduler.core.rules import OVER_LIMIT_NOTE
from rsa_scheduler.core.scheduler import CommandRefused, Decision, Observation, Scheduler
from rsa_scheduler.core.states import (
    AWAITING_NODES,
    HOLDING_NODES,
    HOLDS_USER_DATA,
    JobState,
    RsaState,
)
from rsa_scheduler.core.transitions import Trigger
from tests.unit.corekit import make_pool, make_spec

JOBS = ("1", "2", "3")
#: actions that start or go on serving a job on its RSA nodes or compute nodes
SERVING = frozenset({ActionKind.ALLOCATE, ActionKind.BUILD_FS, ActionKind.STAGE_IN,
                     ActionKind.LOCK_IN, ActionKind.MOUNT_INPUT, ActionKind.MOUNT_OUTPUT})
SLURM = [("PENDING", "Resources"), ("PENDING", "Priority"), ("PENDING", "JobHeldUser"),
         ("RUNNING", "None"), ("COMPLETING", "None"), ("COMPLETED", "None"),
         ("CANCELLED", "None"), ("TIMEOUT", "None"), ("REQUEUED", "BeginTime")]
specs = st.builds(
    make_spec,
    data_in=st.sampled_from(["/pfs/in", None]),
    data_out=st.sampled_from(["/pfs/out", None]),
    early=st.sampled_from([None, *EarlyStart]),
    rw=st.sampled_from([None, True]),
    nodes=st.sampled_from([None, 1, 2, 3]),
)
LIFE = [("PENDING", "Priority"), ("PENDING", "Resources"), ("RUNNING", "None"),
        ("COMPLETED", "None")]
HOLD = 1e9  # a held job's hold deadline: far beyond every step's clock
POLICY = StagingPolicy(retries=2, backoff=5.0, backoff_max=20.0, reset_delay=30.0,
                       wait_timeout=50.0, fs_build_attempts=2)


def check_pool(sched: Scheduler) -> None:
    pool = sched.pool
    held: dict[str, str] = {}
    for rec in sched.records.values():
        assert str(pool.holding(rec.job_id)) == rec.nodes, (rec.job_id, rec.rsa_state)
        if rec.rsa_state not in HOLDING_NODES:
            assert rec.nodes == "", (rec.job_id, rec.rsa_state)
        for node in pool.holding(rec.job_id):
            assert node not in held, f"{node} double-booked"
            held[node] = rec.job_id
    for job in pool.jobs():
        assert job in sched.records, f"nodes leaked to untracked job {job}"


class Interleavings(RuleBasedStateMachine):
    N_RAM = 4  # RSA nodes in the pool

    def __init__(self) -> None:
        super().__init__()
        self.sched = Scheduler(make_pool(n_ram=self.N_RAM), POLICY)
        self.log: list[Event] = []
        self.now = 0.0
        self.slurm: dict[str, tuple[str, str]] = {}
        self.spec = {j: make_spec() for j in JOBS}
        self.data_states_seen: set[str] = set()
        # The verified-output rule, tracked from the actions and outcomes alone (not from
        # the core's own guard): data written on a RAMDISK is at risk from the moment a
        # mount that lets the job write to it succeeds until it is verified on persistent
        # storage (output) or written back (writable input), or an operator discards it.
        self.output_at_risk: set[str] = set()
        self.input_at_risk: set[str] = set()
        # write-back action id -> it began after the job had left its compute nodes
        self.final_writeback: dict[str, bool] = {}
        # whose job each id names in Slurm (slurm_loses_its_state gives it to another)
        self.users: dict[str, str] = {}
        self.held: dict[str, bool] = {}  # Slurm holds the job for the RSA (BeginTime)

    def _take(self, dec: Decision) -> None:
        self.log.extend(dec.events)
        for act in dec.actions:
            job = act.job_id
            if act.kind in (ActionKind.DESTROY_FS, ActionKind.RELEASE):
                assert job not in self.output_at_risk, f"job {job}: unverified output lost"
                assert job not in self.input_at_risk, f"job {job}: written input lost"
            if act.kind is ActionKind.RESET:
                # only a reset that writes the input back after releasing its mounts
                assert job not in self.input_at_risk or act.args_as(ResetArgs).write_back, \
                    f"job {job}: reset before write-back"
            if act.kind is ActionKind.WRITE_BACK:
                # a write-back while the job runs may miss the job's later changes (a job
                # whose id names another user's job now has left the queue)
                self.final_writeback[act.id] = (
                    self.slurm.get(job, ("", ""))[0] != "RUNNING"
                    or act.args_as(OnNodes).user != self.users.get(job, "u"))
            if act.kind in SERVING:
                # a job is served only as the user whose job Slurm says it is
                assert act.args_as(OnNodes).user == self.users.get(job, "u"), \
                    f"job {job}: {act.kind.value} for another user's job"

    def _outcome_seen(self, job: str, action: Action, result: Result) -> None:
        if result is not Result.OK:
            return
        kind = action.kind
        spec = self.sched.records[job].spec
        if kind is ActionKind.RESET and action.args_as(ResetArgs).write_back:
            self.input_at_risk.discard(job)  # written back once its mounts were released
        if kind in (ActionKind.MOUNT_OUTPUT, ActionKind.RESET) and spec.data_out:
            self.output_at_risk.add(job)
        elif kind is ActionKind.MOUNT_INPUT and spec.input_writable:
            self.input_at_risk.add(job)
        elif kind is ActionKind.VERIFY:
            self.output_at_risk.discard(job)
        elif kind is ActionKind.WRITE_BACK and self.final_writeback.get(action.id):
            self.input_at_risk.discard(job)

    @rule(job=st.sampled_from(JOBS), spec=specs)
    def set_spec(self, job: str, spec: DirectiveSpec) -> None:
        if job not in self.sched.records:
            self.spec[job] = spec

    @rule(job=st.sampled_from(JOBS), obs=st.sampled_from(SLURM),
          dt=st.floats(0, 40), held=st.booleans())
    def slurm_changes(self, job: str, obs: tuple[str, str], dt: float,
                      held: bool = False) -> None:
        self.slurm[job] = obs
        # held: Slurm holds the pending job for the RSA (early start wait, judged to wait
        # on-deck: daemon/starthold.py)
        self.held[job] = held and obs[0] == "PENDING"
        self.now += dt
        snap = [Observation(j, self.users.get(j, "u"), s, r, 10 * int(j), 2, self.spec[j],
                            hold_until=HOLD if self.held.get(j) else None,
                            held=bool(self.held.get(j)))
                for j, (s, r) in sorted(self.slurm.items())]
        self._take(self.sched.observe(snap, self.now))
        self._held_jobs_told_why_they_wait()

    def _held_jobs_told_why_they_wait(self) -> None:
        """Issue 32: a job Slurm holds for the RSA that is on-deck and found no RSA nodes
        (tried in this step: observed or ticked at ``now``) has been told why it waits
        (a limit, a drain, none free), as its comment and ``rsa job`` say."""
        for rec in self.sched.records.values():
            if rec.job_state is JobState.ON_DECK and rec.rsa_state in AWAITING_NODES and \
                    not rec.declined and rec.hold_until == HOLD and \
                    self.now >= rec.not_before:
                assert rec.message.startswith(OVER_LIMIT_NOTE), (rec.job_id, rec.message)

    @rule(job=st.sampled_from(JOBS), result=st.sampled_from(list(Result)))
    def action_finishes(self, job: str, result: Result) -> None:
        rec = self.sched.records.get(job)
        if rec is None or rec.pending is None:
            return
        if result is Result.BUSY and rec.pending.kind.value != "reset":
            result = Result.FAILED
        self.now += 1
        action = rec.pending
        dec = self.sched.outcome(Outcome(action.id, result, "boom"), self.now)
        self._outcome_seen(job, action, result)
        self._take(dec)

    @rule(job=st.sampled_from(JOBS), steps=st.integers(1, 8))
    def actions_succeed(self, job: str, steps: int) -> None:
        """Fast-forward: the job's next actions all succeed, so runs reach the deep states
        (output mounted, staging out, verifying) often, not once in a blue moon."""
        for _ in range(steps):
            self.action_finishes(job, Result.OK)

    @rule(job=st.sampled_from(JOBS))
    def slurm_moves_on(self, job: str) -> None:
        """The usual life of a job, one step: its actions succeed first (the RSA kept up),
        then Slurm moves it along queued -> on-deck -> running -> completed, with the
        reset delay passing while it runs. Mixed with the random rules, runs reach the
        states holding user data (output mounted, staging out, verifying) often."""
        self.actions_succeed(job, 8)
        order = LIFE.index(self.slurm[job]) if self.slurm.get(job) in LIFE else -1
        if order + 1 < len(LIFE):
            self.slurm_changes(job, LIFE[order + 1], 1.0)
        self.actions_succeed(job, 8)
        self.time_passes(POLICY.reset_delay + 1)

    @rule(dt=st.floats(0, 100))
    def time_passes(self, dt: float) -> None:
        self.now += dt
        self._take(self.sched.tick(self.now))
        self._held_jobs_told_why_they_wait()

    @rule(job=st.sampled_from(JOBS),
          trig=st.sampled_from([Trigger.INPUT_DONE, Trigger.CANCEL_STAGING, Trigger.RETRY,
                                Trigger.DISCARD, Trigger.FORCE_RELEASE]),
          operator=st.booleans())
    def command(self, job: str, trig: Trigger, operator: bool) -> None:
        with contextlib.suppress(CommandRefused):
            dec = self.sched.command(job, trig, self.now, by="x", operator=operator)
            if trig is Trigger.DISCARD:  # accepted: the operator gave the data up
                self.output_at_risk.discard(job)
                self.input_at_risk.discard(job)
            self._take(dec)

    @rule(node=st.sampled_from(["rsa1", "rsa2", "rsa3", "rsa4"]),
          state=st.sampled_from(list(NodeState)))
    def operator_drains(self, node: str, state: NodeState) -> None:
        self._take(self.sched.set_node_state(node, state, self.now, by="root"))

    @rule(job=st.sampled_from(JOBS), spec=specs, obs=st.sampled_from(SLURM[:4]))
    def slurm_loses_its_state(self, job: str, spec: DirectiveSpec,
                              obs: tuple[str, str]) -> None:
        """slurmctld restarted without its state (or its ids wrapped): the id names
        another user's job now, whatever rsad holds for the earlier one."""
        self.users[job] = f"u{len(self.users) + 1}"
        self.spec[job] = spec
        self.slurm_changes(job, obs, 1.0)

    @invariant()
    def no_node_double_booked_or_leaked(self) -> None:
        check_pool(self.sched)

    @invariant()
    def replay_equals_live(self) -> None:
        replayed = Scheduler.replay(make_pool(n_ram=self.N_RAM), POLICY, self.log)
        assert replayed.snapshot() == self.sched.snapshot()
        assert replayed.pool.snapshot() == self.sched.pool.snapshot()


Interleavings.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestInterleavings = Interleavings.TestCase


# ---- a burst: jobs Slurm holds for the RSA wait for one RSA node --------------------------

class HeldBurst(Interleavings):
    """Issue 32: three jobs and one RSA node, the jobs often held by Slurm for the RSA
    (early start wait, on-deck for the core): every held job that finds the node taken
    is told why it waits (``_held_jobs_told_why_they_wait``), and the node is never
    double-booked or leaked, and the log replays, whatever else happens meanwhile."""

    N_RAM = 1

    @rule(job=st.sampled_from(JOBS), dt=st.floats(0, 10))
    def held_at_submission(self, job: str, dt: float) -> None:
        self.slurm_changes(job, ("PENDING", "BeginTime"), dt, held=True)

    @rule(node=st.just("rsa1"), state=st.sampled_from(list(NodeState)))
    def operator_drains(self, node: str, state: NodeState) -> None:
        super().operator_drains(node, state)


HeldBurst.TestCase.settings = settings(
    max_examples=100, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestHeldBurst = HeldBurst.TestCase


# ---- writable input: every path that could lose the job's changes -----------------------

rw_specs = st.builds(make_spec, data_out=st.sampled_from(["/pfs/out", None]),
                     early=st.sampled_from([None, *EarlyStart]), rw=st.just(True))


class WritableInput(Interleavings):
    """Issue 35: jobs with ``#RSA_INPUT=rw`` only, pushed into the paths that lost their
    changes: busy resets and their retries, a job's end and a due timer in one step (rsad
    down across both), failed mounts, write-backs the job outlived, rsad restarts (a
    replay of the log) between any two events. The model's rule (Interleavings._take):
    changes are at risk from a read-write input mount until a write-back that began
    after the job left its nodes, or a reset that wrote back after releasing them."""

    @initialize(spec=rw_specs)
    def writable(self, spec: DirectiveSpec) -> None:
        self.spec = {j: spec for j in JOBS}

    @rule(job=st.sampled_from(JOBS), spec=rw_specs)
    def set_spec(self, job: str, spec: DirectiveSpec) -> None:
        if job not in self.sched.records:
            self.spec[job] = spec

    @rule(job=st.sampled_from(JOBS))
    def reset_finds_input_busy(self, job: str) -> None:
        rec = self.sched.records.get(job)
        if rec is not None and rec.pending is not None and \
                rec.pending.kind is ActionKind.RESET:
            self.action_finishes(job, Result.BUSY)

    @rule(job=st.sampled_from(JOBS), end=st.sampled_from(["COMPLETED", "REQUEUED"]),
          dt=st.floats(0, 60))
    def ends_as_a_timer_falls_due(self, job: str, end: str, dt: float) -> None:
        """The job ends (or is requeued) and its retry or reset timer falls due in the
        same step: rsad was down across both."""
        self.slurm_changes(job, (end, "None" if end == "COMPLETED" else "BeginTime"),
                           POLICY.backoff_max + POLICY.reset_delay + dt)

    @rule()
    def rsad_restarts(self) -> None:
        self.sched = Scheduler.replay(make_pool(n_ram=4), POLICY, self.log)


WritableInput.TestCase.settings = settings(
    max_examples=300, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestWritableInput = WritableInput.TestCase


# ---- with every action succeeding, a finished job always ends released ------------------

paths = st.lists(st.sampled_from([*SLURM[:5], ("REQUEUED", "BeginTime")]), max_size=8)
ends = st.sampled_from([("COMPLETED", "None"), ("FAILED", "None"), ("CANCELLED", "None"),
                        ("TIMEOUT", "None"), ("GONE", "")])


@settings(max_examples=300, deadline=None)
@given(spec=specs, path=paths, end=ends, gaps=st.lists(st.floats(0, 100), min_size=10,
                                                        max_size=10))
def test_finished_job_with_successful_actions_ends_released(
        spec: DirectiveSpec, path: list[tuple[str, str]], end: tuple[str, str],
        gaps: list[float]) -> None:
    sched = Scheduler(make_pool(n_ram=4), POLICY)
    log: list[Event] = []
    now = 0.0

    def drain() -> None:
        nonlocal now
        for _ in range(60):
            rec = sched.records.get("7")
            if rec is None or rec.pending is None:
                return
            now += 1
            log.extend(sched.outcome(Outcome(rec.pending.id, Result.OK), now).events)

    for i, (state, reason) in enumerate([*path, end]):
        now += gaps[i % len(gaps)]
        snap = [] if state == "GONE" else [Observation("7", "u", state, reason, 1, 2, spec)]
        log.extend(sched.observe(snap, now).events)
        drain()
        log.extend(sched.tick(now + 10_000).events)
        now += 10_000
        drain()
    rec = sched.records.get("7")
    if rec is None:
        return  # never tracked (spec None is impossible here) — nothing to check
    assert rec.job_state is JobState.FINISHED
    assert rec.rsa_state is RsaState.RELEASED, rec.rsa_state
    assert not sched.pool.jobs()
    replayed = Scheduler.replay(make_pool(n_ram=4), POLICY, log)
    assert replayed.snapshot() == sched.snapshot()


def test_user_data_states_are_covered_by_the_interleavings() -> None:
    """Guard against a vacuous property test: random runs do reach the risky states."""
    reached: set[RsaState] = set()

    @settings(max_examples=200, deadline=None, database=None)
    @given(path=st.lists(st.sampled_from(SLURM), min_size=3, max_size=10))
    def run(path: list[tuple[str, str]]) -> None:
        sched = Scheduler(make_pool(n_ram=4), POLICY)
        now = 0.0
        for state, reason in [("PENDING", "Resources"), *path]:
            now += 40
            sched.observe([Observation("7", "u", state, reason, 1, 2, make_spec())], now)
            rec = sched.records["7"]
            reached.add(rec.rsa_state)
            if rec.pending is not None:
                sched.outcome(Outcome(rec.pending.id, Result.OK), now)
                reached.add(rec.rsa_state)

    run()
    assert reached & HOLDS_USER_DATA, reached


def test_interleavings_reach_the_output_states() -> None:
    """Guard against a vacuous stateful test: its runs do mount output, verify it and
    tear down after verification, so the verified-output check above has teeth (found
    when a mutation that destroyed unverified output went unnoticed)."""
    from hypothesis.stateful import run_state_machine_as_test

    kinds: set[ActionKind] = set()

    class Counting(Interleavings):
        def _take(self, dec: Decision) -> None:
            super()._take(dec)
            kinds.update(a.kind for a in dec.actions)

    run_state_machine_as_test(Counting, settings=settings(
        max_examples=60, stateful_step_count=40, deadline=None, database=None,
        suppress_health_check=[HealthCheck.too_slow]))
    assert {ActionKind.RESET, ActionKind.STAGE_OUT, ActionKind.VERIFY} <= kinds, kinds
