"""The replay's I/O model: data volumes, bandwidths, file costs and the shared PFS.

Owns :class:`IoParams` (every bandwidth, per-file cost and fixed action duration the
replay uses, with the defaults documented in docs/simulator.md), :func:`job_volumes`
(a job's input bytes, output bytes and output files: from the trace where it says, else
from its memory footprint, else a seeded synthetic draw) and :class:`FlowNet`, the
parallel filesystem as one shared link: every transfer to or from it is a flow with its
own rate cap (the compute nodes' links, or the RSA nodes' bandwidth), and the PFS
bandwidth is shared max-min fairly among the active flows, re-shared whenever a flow
starts or ends.

Pure: time comes in as ``now``; no clock, no files. Must not import the core's state
machine or the engine.
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field

from rsa_scheduler.core.policy import Tier
from rsa_scheduler.sim.swf import SwfJob

GiB = float(2**30)  # binary units, as Slurm and the CLI's sizes
MiB = float(2**20)
EPS = 1e-9  # relative slack of the bandwidth checks (float sums)


@dataclass(frozen=True, slots=True)
class IoParams:
    """Bandwidths in bytes/s, costs in seconds; see docs/simulator.md for the sources."""

    pfs_bw: float = 20 * GiB  # the PFS's aggregate bandwidth, shared by all its flows
    client_bw: float = 1 * GiB  # one compute node's link to any storage
    tier_bw: Mapping[Tier, float] = field(
        default_factory=lambda: {Tier.RAM: 5 * GiB, Tier.SSD: 1.5 * GiB})
    #: creating one file when all of a job's processes create theirs in one PFS directory
    #: (lock contention). Seed 004 Table 3: GPFS open delay 83.27 s for 2048 files.
    pfs_create_shared_s: float = 83.27 / 2048
    #: creating one file on the PFS from one process (rsync stage-out): no contention
    pfs_create_seq_s: float = 0.001
    #: creating one file on the RAMDISK. Seed 004 Table 3: 0.43 s for 2048 files (PVFS).
    rsa_create_s: float = 0.43 / 2048
    build_fs_s: float = 30.0
    lock_s: float = 1.0
    mount_s: float = 2.0
    reset_s: float = 30.0
    verify_s: float = 30.0
    destroy_s: float = 10.0
    # the synthetic volume model (used only where the trace says nothing)
    seed: int = 1
    io_per_proc: float = 1 * GiB  # median input bytes per processor
    io_sigma: float = 1.0  # log-normal spread
    out_ratio: float = 0.5  # median output / input
    fpp_fraction: float = 0.0  # share of jobs writing one file per process

    def __post_init__(self) -> None:
        for name in ("pfs_bw", "client_bw", "io_per_proc"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0")
        for tier, bw in self.tier_bw.items():
            if not bw > 0:
                raise ValueError(f"the bandwidth of tier {tier} must be > 0")
        if not 0.0 <= self.fpp_fraction <= 1.0:
            raise ValueError("fpp_fraction must be in 0..1")


@dataclass(frozen=True, slots=True)
class Volumes:
    """What one job moves: bytes read at its start, bytes and files written at its end."""

    input_bytes: int
    output_bytes: int
    output_files: int
    source: str  # "trace", "memory" or "synthetic"


def job_volumes(job: SwfJob, p: IoParams) -> Volumes:
    """A job's volumes: trace columns 19-21, else its memory, else a seeded draw.

    The draw depends only on ``p.seed`` and the job number, so it is the same in the
    baseline and the RSA run and whatever order jobs are read in.
    """
    procs = max(job.procs, 1)
    rng: random.Random | None = None

    def draw() -> random.Random:
        nonlocal rng
        if rng is None:
            rng = random.Random(p.seed * 1_000_003 + job.job)
        return rng

    if job.input_bytes is not None and job.output_bytes is not None:
        inp, out, source = job.input_bytes, job.output_bytes, "trace"
    elif job.used_memory_kb > 0:
        # a job loads its working set and writes a result of the same order
        inp = out = int(job.used_memory_kb * 1024 * procs)
        source = "memory"
    else:
        r = draw()
        inp = int(p.io_per_proc * procs * math.exp(p.io_sigma * r.gauss(0.0, 1.0)))
        out = int(inp * p.out_ratio * math.exp(0.5 * r.gauss(0.0, 1.0)))
        source = "synthetic"
    if job.output_files is not None:
        files = max(job.output_files, 1 if out else 0)
    elif p.fpp_fraction and draw().random() < p.fpp_fraction:
        files = procs
    else:
        files = 1 if out else 0
    return Volumes(inp, out, files, source)


class FlowNet:
    """The PFS as one link of ``capacity`` bytes/s shared max-min fairly by flows.

    A flow moves ``size`` bytes at no more than its ``cap``. Each start or end re-shares
    the link (water-filling: the smallest caps are met first, the rest split evenly), so
    the sum of rates never exceeds ``capacity`` and no flow exceeds its cap; both are
    checked at every re-share (:attr:`peak` keeps the largest sum seen). Cost per change:
    O(active flows).
    """

    def __init__(self, capacity: float) -> None:
        self.capacity = capacity
        self._caps: list[tuple[float, str]] = []  # (cap, id), sorted
        self._left: dict[str, float] = {}  # id -> bytes still to move
        self._rate: dict[str, float] = {}
        self._cap: dict[str, float] = {}
        self._at = 0.0  # time the remaining bytes were last brought up to date
        self.version = 0  # bumps at every re-share: older completion estimates are stale
        self.peak = 0.0  # largest total rate ever given
        self.busy_bytes = 0.0  # bytes moved in total

    def __len__(self) -> int:
        return len(self._left)

    def __contains__(self, fid: str) -> bool:
        return fid in self._left

    def rate(self, fid: str) -> float:
        return self._rate[fid]

    def _advance(self, now: float) -> None:
        dt = now - self._at
        if dt < 0:
            raise ValueError(f"FlowNet: time went backwards ({self._at} -> {now})")
        if dt > 0:
            left, rate = self._left, self._rate
            for fid in left:
                moved = rate[fid] * dt
                left[fid] = max(left[fid] - moved, 0.0)
                self.busy_bytes += moved
        self._at = now

    def _reshare(self) -> None:
        self.version += 1
        room = self.capacity
        n = len(self._caps)
        total = 0.0
        for cap, fid in self._caps:
            r = min(cap, room / n)
            self._rate[fid] = r
            room -= r
            total += r
            n -= 1
        if total > self.capacity * (1 + EPS):
            raise AssertionError(f"FlowNet: rates sum to {total} > capacity {self.capacity}")
        self.peak = max(self.peak, total)

    def start(self, fid: str, size: float, cap: float, now: float) -> None:
        """Start moving ``size`` bytes for ``fid`` at no more than ``cap`` bytes/s."""
        if fid in self._left:
            raise ValueError(f"FlowNet: flow {fid} already running")
        if not cap > 0:
            raise ValueError(f"FlowNet: flow {fid} needs a cap > 0")
        self._advance(now)
        self._left[fid] = float(size)
        self._cap[fid] = cap
        bisect.insort(self._caps, (cap, fid))
        self._reshare()

    def stop(self, fid: str, now: float) -> float:
        """End flow ``fid`` (done or cancelled); return the bytes it had left."""
        self._advance(now)
        left = self._left.pop(fid)
        cap = self._cap.pop(fid)
        del self._rate[fid]
        del self._caps[bisect.bisect_left(self._caps, (cap, fid))]
        self._reshare()
        return left

    def next_done(self) -> tuple[float, str] | None:
        """(time, id) of the flow that finishes first at the current rates, or None."""
        best: tuple[float, str] | None = None
        at, rate = self._at, self._rate
        for fid, left in self._left.items():
            t = at + left / rate[fid]
            if best is None or t < best[0]:
                best = (t, fid)
        return best

    def rates(self) -> dict[str, float]:
        """The current rate of every flow (for checks and tests)."""
        return dict(self._rate)

    def caps(self) -> dict[str, float]:
        return dict(self._cap)
