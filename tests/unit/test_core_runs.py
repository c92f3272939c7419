"""Issue 35's invariant over several runs of one job, as a model (Hypothesis state machine).

One job, run after run: requeued in every state (Slurm resets its submit time and counts
a restart, as a real requeue does), writable input, resets that find the input busy,
mounts and every other action failing, rsad restarted (its log replayed) between any two
events, the job's end and a due timer in one step, and Slurm giving the job's id to a new
job after losing its state (the same user's or another's: a new submit time with no
restart counted). The model follows each run's RAMDISK by the action ids
(``JOB/CYCLE/...``: the cycle names the RAMDISK, ``job<JOB>-c<CYCLE>``) and asserts from
the actions and outcomes alone, never from the core's own guards:

- no RAMDISK holding output not yet verified, or writable input not yet written back
  after the job left it, is ever destroyed or released;
- no action id is issued twice, and the new job's actions never touch an earlier job's
  RAMDISK of that id (the earlier job's own stage-out does: it is gone, its output is
  staged out as its own first);
- driven to its end with every action succeeding, every run's output, of every job that
  had the id, was verified on the PFS.
"""

from __future__ import annotations

import contextlib

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from rsa_scheduler.core.actions import Action, ActionKind, Outcome, Result
from rsa_scheduler.core.directives import DirectiveSpec
from rsa_scheduler.core.events import Event
from rsa_scheduler.core.payloads import ResetArgs
from rsa_scheduler.core.policy import EarlyStart
from rsa_scheduler.core.scheduler import CommandRefused, Decision, Observation, Scheduler
from rsa_scheduler.core.states import SLURM_FINISHED, TERMINAL
from rsa_scheduler.core.transitions import Trigger
from tests.unit.corekit import make_pool, make_spec
from tests.unit.test_core_properties import POLICY, check_pool

JOB = "1"
SLURM = [("PENDING", "Resources"), ("PENDING", "Priority"), ("RUNNING", "None"),
         ("COMPLETING", "None"), ("COMPLETED", "None"), ("FAILED", "None"),
         ("CANCELLED", "None"), ("TIMEOUT", "None")]
LIFE = [("PENDING", "Priority"), ("PENDING", "Resources"), ("RUNNING", "None"),
        ("COMPLETED", "None")]
specs = st.builds(make_spec, data_in=st.sampled_from(["/pfs/in", None]),
                  data_out=st.sampled_from(["/pfs/out", None]),
                  early=st.sampled_from([None, *EarlyStart]), rw=st.sampled_from([None, True]))

#: the actions that work on a run's RAMDISK (the others are Slurm's, the user's, the pool's)
ON_RAMDISK = frozenset({ActionKind.BUILD_FS, ActionKind.STAGE_IN, ActionKind.MOUNT_INPUT,
                        ActionKind.MOUNT_OUTPUT, ActionKind.WRITE_BACK, ActionKind.RESET,
                        ActionKind.STAGE_OUT, ActionKind.VERIFY, ActionKind.DESTROY_FS})


def ramdisk(action: Action) -> str:
    """The RAMDISK an action works on: its job's Slurm id and cycle (daemon.data.fs_id)."""
    job, cycle = action.id.rsplit("/", 3)[:2]
    return f"{job}/{cycle}"


class Runs(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.sched = Scheduler(make_pool(n_ram=4), POLICY)
        self.log: list[Event] = []
        self.now = 0.0
        self.spec = make_spec()
        self.slurm = ("PENDING", "Priority")
        self.submitted = 0  # Slurm's submit time of the job now under the id
        self.restarts = 0
        self.user = "alice"
        # per RAMDISK (JOB/CYCLE): written by the job and not yet safe elsewhere
        self.output_at_risk: set[str] = set()
        self.input_at_risk: set[str] = set()
        self.output_runs: set[str] = set()  # every RAMDISK the job's output was written to
        self.verified: set[str] = set()
        self.final_writeback: dict[str, bool] = {}
        # Slurm showed this run ended (a state of SLURM_FINISHED): a RUNNING row after it
        # with no pending one between is a poll taken before the end and read after it,
        # which the core rightly ignores (states.derive_job_state); a pending row (a
        # requeue, a new job of the id) starts the next run
        self.run_ended = False
        self.given_away: set[str] = set()  # RAMDISKs of a job whose id Slurm gave away
        self.issued: set[str] = set()  # every action id issued (replays re-issue none)

    @initialize(spec=specs)
    def first_spec(self, spec: DirectiveSpec) -> None:
        self.spec = spec

    # ---- the model's bookkeeping ---------------------------------------------------------
    def _take(self, dec: Decision) -> None:
        self.log.extend(dec.events)
        for act in dec.actions:
            disk = ramdisk(act)
            assert act.job_id == JOB, act
            assert act.id not in self.issued, f"{act.id}: issued twice"
            self.issued.add(act.id)
            rec = self.sched.records.get(JOB)
            if act.kind in ON_RAMDISK and rec is not None and \
                    rec.submitted == f"t{self.submitted}":  # the job that has the id now
                assert disk not in self.given_away, f"{act.id}: an earlier job's RAMDISK"
            if act.kind in (ActionKind.DESTROY_FS, ActionKind.RELEASE):
                assert disk not in self.output_at_risk, f"{act.id}: unverified output lost"
                assert disk not in self.input_at_risk, f"{act.id}: written input lost"
            if act.kind is ActionKind.RESET:
                assert disk not in self.input_at_risk or act.args_as(ResetArgs).write_back, \
                    f"{act.id}: reset before write-back"
            if act.kind is ActionKind.WRITE_BACK:
                self.final_writeback[act.id] = self.slurm[0] != "RUNNING" or self.run_ended

    def _outcome_seen(self, action: Action, result: Result) -> None:
        if result is not Result.OK:
            return
        disk, kind = ramdisk(action), action.kind
        spec = self.sched.records[JOB].spec
        if kind is ActionKind.RESET and action.args_as(ResetArgs).write_back:
            self.input_at_risk.discard(disk)
        if kind in (ActionKind.MOUNT_OUTPUT, ActionKind.RESET) and spec.data_out:
            self.output_at_risk.add(disk)
            self.output_runs.add(disk)
        elif kind is ActionKind.MOUNT_INPUT and spec.input_writable:
            self.input_at_risk.add(disk)
        elif kind is ActionKind.VERIFY:
            self.output_at_risk.discard(disk)
            self.verified.add(disk)
        elif kind is ActionKind.WRITE_BACK and self.final_writeback.get(action.id):
            self.input_at_risk.discard(disk)

    def _observe(self, dt: float) -> None:
        self.now += dt
        state, reason = self.slurm
        if state in SLURM_FINISHED:
            self.run_ended = True
        elif state == "PENDING":
            self.run_ended = False
        obs = Observation(JOB, self.user, state, reason, 10, 2, self.spec,
                          submitted=f"t{self.submitted}", restarts=self.restarts)
        self._take(self.sched.observe([obs], self.now))

    # ---- what can happen -----------------------------------------------------------------
    @rule(obs=st.sampled_from(SLURM), dt=st.floats(0, 40))
    def slurm_changes(self, obs: tuple[str, str], dt: float) -> None:
        self.slurm = obs
        self._observe(dt)

    @rule(dt=st.floats(0, 40), seen_completing=st.booleans())
    def requeued(self, dt: float, seen_completing: bool) -> None:
        """Requeued in whatever state it is: one more restart, and a new submit time once
        pending again (as the lab showed, tests/data/slurm/squeue_requeue.txt: in between
        it is COMPLETING with the restart counted and its old submit time)."""
        rec = self.sched.records.get(JOB)
        tracked = rec is not None and not rec.superseded
        self.restarts += 1
        if seen_completing:
            self.slurm = ("COMPLETING", "None")
            self._observe(dt)
        self.submitted += 1
        self.slurm = ("PENDING", "BeginTime")
        self._observe(dt)
        rec = self.sched.records.get(JOB)
        # the same job: its cycle is not ended as a gone job's (the next run would not
        # wait for its output, and start beside its stage-out)
        assert not tracked or (rec is not None and not rec.superseded), \
            "a requeue taken for a new job"

    @rule(end=st.sampled_from(["COMPLETED", "REQUEUED"]), dt=st.floats(0, 60))
    def ends_as_a_timer_falls_due(self, end: str, dt: float) -> None:
        """The job ends (or is requeued) and a retry or reset timer falls due in the same
        step: rsad was down across both."""
        if end == "REQUEUED":
            self.submitted += 1
            self.restarts += 1
            self.slurm = ("PENDING", "BeginTime")
        else:
            self.slurm = ("COMPLETED", "None")
        self._observe(POLICY.backoff_max + POLICY.reset_delay + dt)

    @rule(spec=specs, user=st.sampled_from(["alice", "bob"]))
    def slurm_loses_its_state(self, spec: DirectiveSpec, user: str) -> None:
        """slurmctld numbers jobs from FirstJobId again: the id is a new job's, the same
        user's or another's (the earlier job is gone: its output is staged out first)."""
        self.given_away |= {d for d in self.output_runs | self.output_at_risk
                            | self.input_at_risk}
        self.given_away |= {f"{JOB}/{c}" for c in range(1, self._max_cycle() + 1)}
        self.spec, self.user = spec, user
        self.submitted += 100
        self.restarts = 0
        self.slurm = ("PENDING", "Priority")
        self._observe(1.0)

    def _max_cycle(self) -> int:
        return max((int(i.split("/")[1]) for i in self.issued), default=0)

    @rule(result=st.sampled_from(list(Result)))
    def action_finishes(self, result: Result) -> None:
        rec = self.sched.records.get(JOB)
        if rec is None or rec.pending is None:
            return
        if result is Result.BUSY and rec.pending.kind is not ActionKind.RESET:
            result = Result.FAILED
        self.now += 1
        action = rec.pending
        dec = self.sched.outcome(Outcome(action.id, result, "boom"), self.now)
        self._outcome_seen(action, result)
        self._take(dec)

    @rule()
    def reset_finds_input_busy(self) -> None:
        rec = self.sched.records.get(JOB)
        if rec is not None and rec.pending is not None and \
                rec.pending.kind is ActionKind.RESET:
            self.action_finishes(Result.BUSY)

    @rule(steps=st.integers(1, 8))
    def actions_succeed(self, steps: int) -> None:
        for _ in range(steps):
            self.action_finishes(Result.OK)

    @rule()
    def slurm_moves_on(self) -> None:
        """The usual life, one step: the RSA keeps up, then Slurm moves the job along."""
        self.actions_succeed(8)
        order = LIFE.index(self.slurm) if self.slurm in LIFE else -1
        if order + 1 < len(LIFE):
            self.slurm_changes(LIFE[order + 1], 1.0)
        self.actions_succeed(8)
        self.time_passes(POLICY.reset_delay + 1)

    @rule(steps=st.integers(1, 4), dt=st.floats(0, 40), seen_completing=st.booleans())
    def a_run_then_a_requeue(self, steps: int, dt: float, seen_completing: bool) -> None:
        """A run goes some way (to its output mounted, often), then Slurm requeues it: runs
        after runs reach the states holding user data, not once in a blue moon."""
        for _ in range(steps):
            self.slurm_moves_on()
        self.requeued(dt, seen_completing)

    @rule(dt=st.floats(0, 100))
    def time_passes(self, dt: float) -> None:
        self.now += dt
        self._take(self.sched.tick(self.now))

    @rule(trig=st.sampled_from([Trigger.INPUT_DONE, Trigger.CANCEL_STAGING, Trigger.RETRY]))
    def command(self, trig: Trigger) -> None:
        with contextlib.suppress(CommandRefused):
            self._take(self.sched.command(JOB, trig, self.now, by="root", operator=True))

    @rule()
    def rsad_restarts(self) -> None:
        self.sched = Scheduler.replay(make_pool(n_ram=4), POLICY, self.log)

    @rule()
    def runs_to_its_end(self) -> None:
        """The job completes and every action succeeds from now on (an operator retries
        what gave up): every run's output ends verified on the PFS."""
        self.slurm = ("COMPLETED", "None")
        self._observe(1.0)
        for _ in range(12):
            rec = self.sched.records.get(JOB)
            if rec is not None and rec.superseded and rec.rsa_state in TERMINAL:
                self._observe(0.0)  # the earlier job's cycle is over: the id is the new's
                rec = self.sched.records.get(JOB)
            if rec is None or (rec.rsa_state in TERMINAL and rec.pending is None):
                break
            self.actions_succeed(10)
            self.command(Trigger.RETRY)
            self.time_passes(POLICY.backoff_max + POLICY.reset_delay + 1)
        rec = self.sched.records.get(JOB)
        assert rec is None or rec.rsa_state in TERMINAL, rec.rsa_state if rec else None
        unstaged = self.output_runs - self.verified
        assert not unstaged, f"runs whose output was never verified: {sorted(unstaged)}"
        assert not self.input_at_risk, "writable input never written back"

    # ---- always --------------------------------------------------------------------------
    @invariant()
    def pool_consistent(self) -> None:
        check_pool(self.sched)

    @invariant()
    def one_record_under_the_id(self) -> None:
        assert set(self.sched.records) <= {JOB}

    @invariant()
    def replay_equals_live(self) -> None:
        replayed = Scheduler.replay(make_pool(n_ram=4), POLICY, self.log)
        assert replayed.snapshot() == self.sched.snapshot()
        assert replayed.pool.snapshot() == self.sched.pool.snapshot()


Runs.TestCase.settings = settings(
    max_examples=200, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestRuns = Runs.TestCase
