"""Typed policy values shared by the core, the config loader and the directive grammar.

Owns the small enums (tiers, early-start policies, stage-out methods) and the allocation
policy. Stdlib only; must not import any other rsa_scheduler module.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


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
    """

    ratio: int = 32
    min_nodes: int = 1
    max_nodes: int = 8
    max_request: int = 16
    default_tier: Tier = Tier.RAM

    def __post_init__(self) -> None:
        if self.ratio < 1:
            raise ValueError("ratio must be >= 1")
        if self.min_nodes < 1:
            raise ValueError("min_nodes must be >= 1")
        if self.max_nodes < self.min_nodes:
            raise ValueError("max_nodes must be >= min_nodes")
        if self.max_request < 1:
            raise ValueError("max_request must be >= 1")


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

    def __post_init__(self) -> None:
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

    def retry_delay(self, failures: int) -> float:
        """Backoff before attempt ``failures + 1`` (failures >= 1)."""
        return float(min(self.backoff * (2 ** max(failures - 1, 0)), self.backoff_max))
