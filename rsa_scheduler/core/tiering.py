"""Tier ``auto``: the least-cost allocation that meets a job's size and bandwidth need.

Owns the choice among the pool's tiers for a job that asks ``#RSA_TIER=auto`` (or gets
it as the site's default): seed 000 §III.B's provisioning rule applied per job. For each
tier the allocator works out an :class:`Option` (how many nodes the job's size needs
there, raised to what its bandwidth need takes at that tier's per-node bandwidth, and
what that costs per hour at the tier's price); :func:`rank` orders them: those that meet
the bandwidth first, the cheapest first, then those that do not, the fastest first;
:func:`explain` says why in one line. The allocator takes the first option whose nodes
are free now, so a tier that is exhausted falls back to the next one.

When no tier alone has the nodes free now, an allocation may mix tiers
(``allocation.mix``; :class:`Mix`): one filesystem across nodes of several tiers, built
by the backend both tiers share (``filesystem.backend``; rsad turns the mix off when
they differ). Such a filesystem stripes evenly over its nodes, so its bandwidth is taken
as the node count times the slowest tier's per-node bandwidth, not their sum: a mix is
never cheaper than the slow tier alone with the same nodes, which is why it is only the
last resort before waiting.

Pure core: stdlib and :mod:`rsa_scheduler.core` only (import-linter contract).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rsa_scheduler.core.policy import AllocationPolicy, Tier
from rsa_scheduler.core.units import format_size


@dataclass(frozen=True, slots=True)
class Option:
    """``nodes`` RSA nodes of ``tier``: their cost per hour and bandwidth (bytes/s)."""

    tier: Tier
    nodes: int
    cost: float
    bandwidth: float
    meets: bool  # bandwidth >= the job's need

    def text(self) -> str:
        plural = "" if self.nodes == 1 else "s"
        return (f"{self.tier} {self.nodes} node{plural}, {rate(self.bandwidth)}, "
                f"cost {self.cost:g}/h")


def rate(bps: float) -> str:
    """Bytes/s as Slurm-style size per second: ``1.5G/s``."""
    return f"{format_size(int(bps))}/s"


def need(policy: AllocationPolicy, capacity: int | None) -> float:
    """The bandwidth (bytes/s) a job of ``capacity`` bytes needs: all of it moved within
    ``io_time`` (seed 000's checkpoint time target); 0 without a capacity."""
    return 0.0 if capacity is None else capacity / policy.io_time


def nodes_for(policy: AllocationPolicy, tier: Tier, sized: int, bps: float, limit: int,
              explicit: bool) -> int:
    """The node count of an option: ``sized`` (the job's size in this tier), raised to
    the nodes ``bps`` takes at the tier's bandwidth but not beyond ``limit``; an explicit
    ``#RSA_NODES`` count is kept as given."""
    if explicit or bps <= 0:
        return sized
    per = policy.bandwidth_of(tier)
    wanted = -(-int(bps) // per)
    return max(sized, min(wanted, limit))


def option(policy: AllocationPolicy, tier: Tier, nodes: int, bps: float) -> Option:
    bandwidth = float(nodes * policy.bandwidth_of(tier))
    return Option(tier, nodes, nodes * policy.price_of(tier), bandwidth,
                  bandwidth >= bps * (1 - 1e-12))


def rank(options: Sequence[Option]) -> list[Option]:
    """Those meeting the bandwidth first, cheapest first (then the fastest); then those
    that do not, fastest first (then the cheapest); ties in tier order."""
    order = {t: i for i, t in enumerate(Tier)}

    def key(o: Option) -> tuple[bool, float, float, int]:
        if o.meets:
            return (False, o.cost, -o.bandwidth, order[o.tier])
        return (True, -o.bandwidth, o.cost, order[o.tier])
    return sorted(options, key=key)


def explain(chosen: Option, ranked: Sequence[Option], bps: float,
            busy: Sequence[Tier] = (), refused: Sequence[str] = ()) -> str:
    """One line: what auto chose, what it needed, what it passed over and why."""
    head = f"tier auto chose {chosen.text()}"
    if bps > 0:
        head += f" for the {rate(bps)} needed"
        if not chosen.meets:
            head += " (no tier has that within the site's limits: the fastest)"
    others = []
    for o in ranked:
        if o is chosen:
            continue
        if o.tier in busy:
            why = "not enough free nodes now"
        elif not o.meets and (chosen.meets or o.bandwidth < chosen.bandwidth):
            why = "too slow"
        elif o.cost > chosen.cost:
            why = "costs more"
        else:
            why = "as cheap, slower" if o.bandwidth < chosen.bandwidth else "as cheap"
        others.append(f"{o.text()}: {why}")
    others += list(refused)
    return head + ("; over " + "; ".join(others) if others else "")


@dataclass(frozen=True, slots=True)
class Mix:
    """Nodes of several tiers in one allocation: count per tier, cost per hour and the
    bandwidth (bytes/s) of one filesystem striped evenly over them."""

    nodes: tuple[tuple[Tier, int], ...]
    cost: float
    bandwidth: float
    meets: bool

    def text(self) -> str:
        parts = " + ".join(f"{t} {n} node{'' if n == 1 else 's'}" for t, n in self.nodes)
        return f"a mix of {parts}, {rate(self.bandwidth)}, cost {self.cost:g}/h"


def mixed(counts: dict[Tier, int], policy: AllocationPolicy, bps: float) -> Mix:
    """The :class:`Mix` of ``counts`` nodes per tier: the slowest tier paces them all."""
    total = sum(counts.values())
    slowest = min(policy.bandwidth_of(t) for t in counts)
    bandwidth = float(total * slowest)
    return Mix(tuple(counts.items()), sum(n * policy.price_of(t) for t, n in counts.items()),
               bandwidth, bandwidth >= bps * (1 - 1e-12))


def explain_mix(mix: Mix, ranked: Sequence[Option], bps: float,
                refused: Sequence[str] = ()) -> str:
    """One line: auto chose a mix because no tier alone had the nodes free."""
    head = f"tier auto chose {mix.text()}"
    if bps > 0:
        head += f" for the {rate(bps)} needed"
        if not mix.meets:
            head += " (short of it)"
    others = [f"{o.text()}: not enough free nodes now" for o in ranked] + list(refused)
    return head + ("; over " + "; ".join(others) if others else "")
