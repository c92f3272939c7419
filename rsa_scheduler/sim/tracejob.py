"""What a trace replay keeps per job: its phase, its I/O, its RSA nodes, its directives.

Owns :class:`TraceJob` (one trace job from submission until the replay forgets it: the
phase it is in, where it read and wrote, the RSA nodes it got and when),
:class:`InFlight` (the tracked action the engine is running for a job),
:class:`SpecCache` (the ``#RSA_*`` directives a job of the trace is given). The
rsa-state groups the engine asks about (``STAGING``, ``INPUT_COMING``) are
:mod:`rsa_scheduler.core.states`'.

Pure data: must not import the engine (:mod:`rsa_scheduler.sim.replay`) nor read the
clock.
"""

from __future__ import annotations

from dataclasses import dataclass

from rsa_scheduler.core.actions import Action
from rsa_scheduler.core.directives import DirectiveSpec
from rsa_scheduler.core.policy import StageOut, Tier
from rsa_scheduler.sim.cluster import GIB
from rsa_scheduler.sim.iomodel import Volumes
from rsa_scheduler.sim.swf import SwfJob

#: distinct specs kept at once (a long trace has many sizes: memory stays bounded)
SPEC_CACHE_MAX = 4096


@dataclass(slots=True)
class TraceJob:
    """One job of the trace while the replay keeps it (queued, running, or held by the
    RSA after it ended)."""

    swf: SwfJob
    jid: str
    vol: Volumes
    procs: int
    nodes: int
    submit: float
    spec: DirectiveSpec | None
    start: float = -1.0
    phase: str = "queued"  # queued, mounting, reading, computing, creating, writing, ended
    token: int = 0  # the phase event that is current
    io_s: float = 0.0
    phase_at: float = 0.0
    read_from: str = "-"
    write_to: str = "-"
    staged_at: float | None = None
    rsa_out: int = 0  # output bytes on the RAMDISK, to stage out
    rsa_nodes: int = 0
    rsa_bw: float = 0.0
    tier: str = "-"  # of the RSA nodes it got last (``ram+ssd``: a mix)
    per_tier: tuple[tuple[str, int], ...] = ()  # how many of them in each tier
    alloc_at: float = 0.0  # when it got them
    ended_at: float = -1.0
    released_at: float | None = None


@dataclass(slots=True)
class InFlight:
    """A tracked action the engine runs for a job, and which of its stages it is in."""

    action: Action
    token: int
    stage: str = "timed"  # timed, meta, queued (for a flow slot), flow


class SpecCache:
    """The ``#RSA_*`` directives of the trace's jobs, built once per distinct shape."""

    def __init__(self, stage_out: StageOut | None, tiers: int) -> None:
        self.stage_out = stage_out
        self.tiers = tiers
        self.specs: dict[tuple[bool, bool, int], DirectiveSpec] = {}

    def spec(self, vol: Volumes) -> DirectiveSpec | None:
        """The job's directives: its data in and out, ``#RSA_CAPACITY`` for the larger of
        the two (whole GiB, so the few distinct specs are built once) and, with several
        tiers, ``#RSA_TIER=auto``: the allocator picks the tier by the site's cost model,
        as rsad would (a job no tier can hold is declined: it uses the PFS). None for a
        job without data in or out."""
        has_in, has_out = vol.input_bytes > 0, vol.output_bytes > 0
        if not (has_in or has_out):
            return None
        need = -(-max(vol.input_bytes, vol.output_bytes) // GIB) * GIB
        key = (has_in, has_out, need)
        spec = self.specs.get(key)
        if spec is None:
            if len(self.specs) >= SPEC_CACHE_MAX:
                self.specs.clear()
            spec = DirectiveSpec(data_in="/pfs/input" if has_in else None,
                                 data_out="/pfs/output" if has_out else None,
                                 capacity=need, stage_out=self.stage_out,
                                 tier=Tier.AUTO if self.tiers > 1 else None)
            self.specs[key] = spec
        return spec
