"""The simulated site of a trace replay: compute cluster, RSA tiers, policies, prices.

Owns :class:`TierSpec` (RSA nodes of one tier) and :class:`ReplayConfig` (everything a
replay needs besides the trace, validated). Pure data; must not import the engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from rsa_scheduler.core.policy import AllocationPolicy, ResetTrigger, StageOut, StagingPolicy, Tier
from rsa_scheduler.sim.iomodel import IoParams

ORDERINGS = ("fifo", "sjf", "trio")
GIB = 2**30


@dataclass(frozen=True, slots=True)
class TierSpec:
    """``count`` RSA nodes of ``tier``, ``capacity`` bytes and ``bw`` bytes/s each."""

    tier: Tier
    count: int
    capacity: int
    bw: float


@dataclass(frozen=True, slots=True)
class ReplayConfig:
    """Everything a replay needs besides the trace."""

    procs: int  # processors of the compute cluster
    procs_per_node: int = 1
    tiers: tuple[TierSpec, ...] = (TierSpec(Tier.RAM, 16, 128 * GIB, 5.0 * GIB),)
    allocation: AllocationPolicy = field(default_factory=AllocationPolicy)
    staging: StagingPolicy = field(default_factory=lambda: StagingPolicy(
        reset_trigger=ResetTrigger.INPUT_DONE))
    io: IoParams = field(default_factory=IoParams)
    stage_out: StageOut | None = None  # every job's #RSA_STAGE_OUT (None: site default)
    ordering: str = "fifo"
    alpha: int = 2  # concurrent stage-outs on the PFS under sjf/trio (seed 003's α)
    #: queued jobs shown pending on Resources (on-deck): Slurm's FIFO shows the first one
    on_deck: int = 1
    poll: float = 5.0  # rsad's poll interval: waiting jobs are retried on this grid
    prices: Mapping[str, float] = field(default_factory=lambda: {
        "compute": 1.0, "ram": 4.0, "ssd": 1.0})  # per node-hour
    check_every: int = 20_000  # logged events between replay check points
    #: replay-check every Nth window of ``check_every`` events (1: the whole log); the
    #: windows between are not logged, so their cost is nil
    check_stride: int = 1
    limit: int | None = None  # replay at most this many jobs

    def __post_init__(self) -> None:
        if self.procs < 1 or self.procs_per_node < 1:
            raise ValueError("procs and procs_per_node must be >= 1")
        if self.ordering not in ORDERINGS:
            raise ValueError(f"ordering must be one of {', '.join(ORDERINGS)}")
        if self.alpha < 1 or self.on_deck < 1 or self.check_stride < 1 \
                or self.check_every < 1:
            raise ValueError("alpha, on_deck, check_every and check_stride must be >= 1")
        if not self.tiers:
            raise ValueError("at least one RSA tier is needed")
