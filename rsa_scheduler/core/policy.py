"""Typed policy values shared by the core, the config loader and the directive grammar.

Owns the small enums (tiers, early-start policies, stage-out methods) and the allocation
policy. Stdlib only; must not import any other rsa_scheduler module.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


class Tier(enum.StrEnum):
    """Storage tier of an RSA node pool (seed 000: DRAM and SSD tiers)."""

    RAM = "ram"
    SSD = "ssd"
    AUTO = "auto"  # a job's request only (#RSA_TIER=auto): the allocator chooses (seed 000)


#: The tiers an RSA node can be in (config, simulator). A job may ask for more: ``Tier``
#: values beyond these are choices the allocator makes for it.
NODE_TIERS: tuple[Tier, ...] = (Tier.RAM, Tier.SSD)


def node_tier(text: str) -> Tier:
    """The tier ``text`` names if a node can be in it; ValueError otherwise."""
    tier = Tier(text)
    if tier not in NODE_TIERS:
        raise ValueError(f"no RSA node is in tier {tier}: use {' or '.join(NODE_TIERS)}")
    return tier


#: Default price of one RSA node-hour per tier, in the site's own unit (seed 000 §III.B:
#: unit costs are the site's). 4:1 is our placeholder ratio of DRAM to SSD node prices.
DEFAULT_PRICES: Mapping[Tier, float] = MappingProxyType({Tier.RAM: 4.0, Tier.SSD: 1.0})
#: Default bandwidth of one RSA node per tier, bytes/s (docs/allocation.md says why).
DEFAULT_BANDWIDTH: Mapping[Tier, int] = MappingProxyType({Tier.RAM: 5 << 30,
                                                          Tier.SSD: 1536 << 20})


class EarlyStart(enum.StrEnum):
    """What happens when a job starts running before its stage-in finished."""

    FALLBACK = "fallback"  # seed 004 §3.1: ignore the RAMDISK, read the PFS
    WAIT = "wait"  # hold the start until staged (Slurm burst buffer behaviour)
    UNION = "union"  # seed 004 footnote 2: read-only overlay of RAMDISK over the PFS dir


class StageOut(enum.StrEnum):
    """How output is moved from the RAMDISK to persistent storage."""

    RSYNC = "rsync"  # seed 004 §3.4 default stage-out
    TAR = "tar"  # seed 004 §5.2 custom stage-out aggregating file-per-process output


class NodeState(enum.StrEnum):
    """Administrative/health state of an RSA node as the allocator sees it."""

    UP = "up"
    DRAINED = "drained"
    DOWN = "down"


@dataclass(frozen=True, slots=True)
class AllocationPolicy:
    """How many RSA nodes a job gets (seed 004 §3.1: in proportion to compute nodes).

    ``ratio`` compute nodes per RSA node (rounded up); the result is clamped to
    ``[min_nodes, max_nodes]``. A job may ask for a count itself (``#RSA_NODES``); it is
    honoured if ``<= max_request``.

    The cost model of tier ``auto`` (seed 000 §III.B; docs/allocation.md): ``price`` of one
    RSA node-hour and ``bandwidth`` (bytes/s) of one RSA node, per tier; a job with
    ``#RSA_CAPACITY`` needs ``capacity / io_time`` bytes/s (seed 000: checkpoint within a
    target time), and auto gives it the cheapest allocation that has that bandwidth.
    ``mix``: when no tier alone has the nodes free now, auto may give a job nodes of
    several tiers (one filesystem across them; its bandwidth is the node count times the
    slowest tier's).
    """

    ratio: int = 32
    min_nodes: int = 1
    max_nodes: int = 8
    max_request: int = 16
    default_tier: Tier = Tier.RAM
    price: Mapping[Tier, float] = field(default_factory=lambda: DEFAULT_PRICES)
    bandwidth: Mapping[Tier, int] = field(default_factory=lambda: DEFAULT_BANDWIDTH)
    io_time: float = 300.0
    mix: bool = True
    #: the most of the pool's RSA nodes one user's jobs (one array's tasks) hold at once,
    #: as a fraction; a user's (an array's) first job is never refused by it (core.share)
    user_share: float = 1.0
    array_share: float = 0.5
    #: limits per user and per Slurm account on what their jobs hold at once: RSA nodes,
    #: RSA capacity (bytes: the configured capacity of the nodes) and stage-ins in flight;
    #: 0: no limit (core.limits)
    user_nodes: int = 0
    user_capacity: int = 0
    user_stage_ins: int = 0
    account_nodes: int = 0
    account_capacity: int = 0
    account_stage_ins: int = 0
    #: their values for a named user / Slurm account (squeue's names), issue 33
    user_limits: Mapping[str, NamedLimits] = field(default_factory=dict)
    account_limits: Mapping[str, NamedLimits] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.ratio < 1:
            raise ValueError("ratio must be >= 1")
        if self.min_nodes < 1:
            raise ValueError("min_nodes must be >= 1")
        if self.max_nodes < self.min_nodes:
            raise ValueError("max_nodes must be >= min_nodes")
        if self.max_request < 1:
            raise ValueError("max_request must be >= 1")
        for tier, price in self.price.items():
            if tier not in NODE_TIERS:
                raise ValueError(f"price of tier {tier}: only {_tiers()} have prices")
            if not (math.isfinite(price) and price >= 0):
                raise ValueError(f"price of tier {tier} must be a number >= 0, got {price}")
        for tier, bw in self.bandwidth.items():
            if tier not in NODE_TIERS:
                raise ValueError(f"bandwidth of tier {tier}: only {_tiers()} have one")
            if bw < 1:
                raise ValueError(f"bandwidth of tier {tier} must be > 0 bytes/s")
        for name in ("user_share", "array_share"):
            share = getattr(self, name)
            if not (math.isfinite(share) and 0 < share <= 1):
                raise ValueError(f"{name} must be a fraction above 0 and at most 1, got {share}")
        if not (math.isfinite(self.io_time) and self.io_time > 0):
            raise ValueError("io_time must be > 0")
        for who in ("user", "account"):
            for what in ("nodes", "capacity", "stage_ins"):
                if getattr(self, f"{who}_{what}") < 0:
                    raise ValueError(f"{who}_{what} must be >= 0 (0: no limit)")

    def __hash__(self) -> int:  # the mappings are not hashable themselves
        return hash((self.ratio, self.min_nodes, self.max_nodes, self.max_request,
                     self.default_tier, tuple(sorted(self.price.items())),
                     tuple(sorted(self.bandwidth.items())), self.io_time, self.mix))

    def limit(self, who: str, what: str, name: str) -> tuple[int, str]:
        """The limit per ``who`` (``user`` / ``account``) on ``what`` (a LIMIT_KINDS
        word) for the user or account ``name`` (0: none), and the key that sets it: the
        name's own value if it has one, else the one for all. (The name's key is its map:
        the refusal names the user or account, and a job's comment holds 250 characters.)"""
        named = (self.user_limits if who == "user" else self.account_limits).get(name)
        value = getattr(named, what) if named is not None else None
        if value is not None:
            return value, f"allocation.{who}_limits"
        return getattr(self, f"{who}_{what}"), f"allocation.{who}_{what}"

    def price_of(self, tier: Tier) -> float:
        """Price of one RSA node-hour of ``tier`` (the default when not set)."""
        return self.price.get(tier, DEFAULT_PRICES.get(tier, 0.0))

    def bandwidth_of(self, tier: Tier) -> int:
        """Bytes/s one RSA node of ``tier`` delivers (the default when not set)."""
        return self.bandwidth.get(tier, DEFAULT_BANDWIDTH.get(tier, 1))


#: what a limit per user / per account counts (the suffix of its AllocationPolicy field)
LIMIT_KINDS: tuple[str, ...] = ("nodes", "capacity", "stage_ins")


@dataclass(frozen=True, slots=True)
class NamedLimits:
    """One user's, or one Slurm account's, own values of the limits per user / per account
    (``allocation.user_limits`` / ``account_limits``): each value set replaces the one for
    all for that name (0: no limit for it); None keeps the one for all."""

    nodes: int | None = None
    capacity: int | None = None  # bytes
    stage_ins: int | None = None

    def __post_init__(self) -> None:
        values = [getattr(self, what) for what in LIMIT_KINDS]
        for what, value in zip(LIMIT_KINDS, values, strict=True):
            if value is not None and value < 0:
                raise ValueError(f"{what} must be >= 0 (0: no limit for this name)")
        if all(v is None for v in values):
            raise ValueError("sets no limit: give nodes, capacity or stage_ins (a key left "
                             "out keeps the value for all)")


def _tiers() -> str:
    return ", ".join(t.value for t in NODE_TIERS)


class ResetTrigger(enum.StrEnum):
    """What starts the mid-job input->output reset (seed 004 §3.2) by default."""

    DELAY = "delay"  # a fixed time after the input mounts are confirmed
    INPUT_DONE = "input-done"  # when the job runs `rsa input-done`


@dataclass(frozen=True, slots=True)
class StagingPolicy:
    """Site-wide defaults and limits the state machine applies to every job.

    Per-job directives override ``early_start``, ``stage_out`` and the reset trigger.
    Retry delays double from ``backoff`` up to ``backoff_max``; after ``retries`` failed
    attempts of one step the machine gives up on it (GIVE_UP).
    """

    early_start: EarlyStart = EarlyStart.FALLBACK
    stage_out: StageOut = StageOut.RSYNC
    retries: int = 3
    backoff: float = 30.0
    backoff_max: float = 1800.0
    reset_trigger: ResetTrigger = ResetTrigger.DELAY
    reset_delay: float = 600.0
    wait_timeout: float = 1800.0
    fs_build_attempts: int = 3
    # A job must stay on-deck this long before RSA nodes are allocated: slurmctld tries
    # every new submission at once and gives it reason Resources when the cluster is full,
    # and its next scheduling pass says Priority (older jobs come first). 0: at once.
    on_deck_settle: float = 0.0
    # A locked-in job that has not started this long after its lock-in is unlocked, its
    # RAMDISK torn down and it reads the PFS (slurm.lockin.timeout, 10m by default; 0,
    # as here: no bound).
    lockin_timeout: float = 0.0
    # A quarantined RAMDISK (its stage-out gave up) is rescued after this long: its
    # content copied as the job's user to ``rescue_dir/<user>/<job>.<cycle>-<submitted>``
    # on the PFS (effects.rescue_path), verified as a stage-out is, then the RAMDISK
    # released (quarantine.rescue_after; 0, as here: never, it waits for an operator). A
    # failed rescue keeps the quarantine.
    rescue_after: float = 0.0
    rescue_dir: str = ""

    def __post_init__(self) -> None:
        if self.rescue_after < 0:
            raise ValueError("rescue_after must be >= 0")
        if self.rescue_after and not self.rescue_dir.startswith("/"):
            raise ValueError("rescue_after needs rescue_dir, an absolute path")
        if self.retries < 0:
            raise ValueError("retries must be >= 0")
        if self.backoff <= 0 or self.backoff_max < self.backoff:
            raise ValueError("backoff must be > 0 and <= backoff_max")
        if self.reset_delay <= 0:
            raise ValueError("reset_delay must be > 0")
        if self.wait_timeout <= 0:
            raise ValueError("wait_timeout must be > 0")
        if self.fs_build_attempts < 1:
            raise ValueError("fs_build_attempts must be >= 1")
        if self.on_deck_settle < 0:
            raise ValueError("on_deck_settle must be >= 0")
        if self.lockin_timeout < 0:
            raise ValueError("lockin_timeout must be >= 0")

    def retry_delay(self, failures: int) -> float:
        """Backoff before attempt ``failures + 1`` (failures >= 1)."""
        return float(min(self.backoff * (2 ** max(failures - 1, 0)), self.backoff_max))
