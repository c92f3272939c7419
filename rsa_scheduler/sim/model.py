"""The typed form of a simulator scenario: what :mod:`rsa_scheduler.sim.scenario` loads.

Owns the frozen dataclasses of a scenario (node groups, jobs and their scripted action
outcomes, timeline entries, expectations). Pure data: no YAML, no files, no engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from rsa_scheduler.core.actions import ActionKind, Result
from rsa_scheduler.core.directives import DirectiveSpec
from rsa_scheduler.core.policy import AllocationPolicy, NodeState, StagingPolicy, Tier
from rsa_scheduler.core.states import JobState, RsaState
from rsa_scheduler.core.transitions import Trigger

GONE = "GONE"  # timeline state: the job left Slurm's queue (purged)


@dataclass(frozen=True, slots=True)
class NodeGroup:
    """RSA nodes sharing a tier and capacity (``names`` is a ClusterShell hostlist)."""

    names: str
    tier: Tier
    capacity: int
    state: NodeState = NodeState.UP


@dataclass(frozen=True, slots=True)
class Step:
    """How some attempts of one action end: result, duration (None: default) and message."""

    result: Result = Result.OK
    duration: float | None = None
    message: str = ""
    times: int = 1


@dataclass(frozen=True, slots=True)
class ActionScript:
    """Scripted outcomes of one action kind for one job.

    ``every`` applies to all attempts; otherwise ``steps`` cover attempts 1, 2, ... in
    order (a step with ``times: n`` covers n attempts) and later attempts succeed.
    """

    every: Step | None = None
    steps: tuple[Step, ...] = ()

    def step(self, attempt: int) -> Step | None:
        """The step for the ``attempt``-th (1-based) issue of the action, None: default."""
        if self.every is not None:
            return self.every
        n = attempt
        for s in self.steps:
            if n <= s.times:
                return s
            n -= s.times
        return None


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One Slurm job of the scenario."""

    job_id: str
    user: str
    compute_nodes: int
    priority: int
    spec: DirectiveSpec | None  # None: no #RSA_ directives, the RSA ignores the job
    actions: Mapping[ActionKind, ActionScript] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SlurmEntry:
    """At ``at``, Slurm reports job ``job`` as ``state``/``reason`` (GONE: purged)."""

    at: float
    key: str
    job: str
    state: str
    reason: str
    priority: int | None = None
    compute_nodes: int | None = None


@dataclass(frozen=True, slots=True)
class NodeEntry:
    """At ``at``, an operator sets RSA node(s) ``nodes`` to ``state``."""

    at: float
    key: str
    nodes: str
    state: NodeState


@dataclass(frozen=True, slots=True)
class CommandEntry:
    """At ``at``, a user or operator gives ``command`` for ``job``."""

    at: float
    key: str
    job: str
    command: Trigger
    by: str
    operator: bool
    refused: bool = False  # the scenario expects the command to be refused


@dataclass(frozen=True, slots=True)
class CrashEntry:
    """At ``at``, the daemon dies; a new one replays the log and re-issues actions."""

    at: float
    key: str


Entry = SlurmEntry | NodeEntry | CommandEntry | CrashEntry


@dataclass(frozen=True, slots=True)
class JobExpect:
    """What must be true of one job at the end of the run."""

    rsa_state: RsaState | None = None
    job_state: JobState | None = None
    visits: tuple[RsaState, ...] = ()  # in this order, other states may come between
    never: tuple[RsaState, ...] = ()
    cycles: int | None = None
    allocations: tuple[str, ...] | None = None  # hostlist of every allocation, in order
    declined: bool | None = None
    actions: Mapping[ActionKind, int] = field(default_factory=dict)  # times issued


@dataclass(frozen=True, slots=True)
class PoolExpect:
    """The RSA node pool at the end of the run (hostlists; None: not checked)."""

    free: str | None = None
    drained: str | None = None
    down: str | None = None
    held: Mapping[str, str] | None = None  # job -> hostlist; {} means nothing held


@dataclass(frozen=True, slots=True)
class Expect:
    """The scenario's ``expect:`` block."""

    jobs: Mapping[str, JobExpect] = field(default_factory=dict)
    pool: PoolExpect | None = None


@dataclass(frozen=True, slots=True)
class Scenario:
    """A whole validated scenario."""

    name: str
    source: str
    description: str
    pool: tuple[NodeGroup, ...]
    allocation: AllocationPolicy
    staging: StagingPolicy
    durations: Mapping[ActionKind, float]
    poll: float | None
    until: float
    jobs: Mapping[str, JobSpec]
    timeline: tuple[Entry, ...]
    expect: Expect
    known_bug: str = ""  # a core bug makes this scenario fail until fixed (tests: xfail)
