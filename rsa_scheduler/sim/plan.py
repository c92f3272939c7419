"""``rsa sim plan``: which RSA to buy for a trace — node count and DRAM:SSD mix (seed 000).

Owns the sweep (every RSA node count × every share of DRAM nodes, each one replay of the
trace with the RSA, on the real core and allocator with tier ``auto``), the target a
configuration must meet (:class:`Target`: a mean time at most, or an I/O throughput at
least), the recommendation (the configuration of least cost per hour that meets it) and
seed 000's two comparisons: the cost saving over the cheapest DRAM-only configuration
that meets the same target, and the I/O throughput gained over DRAM-only at the cost of
that configuration.

A configuration's cost is what the site provisions: every RSA node × its tier's price per
node-hour (``allocation.price``), whatever the jobs do with it, as seed 000 §III.B
counts installation cost. Pure: reads only the trace (through the caller's iterator
factory); must not print or write files.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from rsa_scheduler.core.policy import Tier
from rsa_scheduler.core.units import format_size, parse_duration, parse_size
from rsa_scheduler.sim.cluster import ReplayConfig, TierSpec
from rsa_scheduler.sim.replay import Replay
from rsa_scheduler.sim.report import summary
from rsa_scheduler.sim.swf import SwfJob

#: what a target may bound: at most (times) or at least (throughput, bytes/s)
AT_MOST = ("mean_wait_s", "mean_hold_s", "mean_io_s")
AT_LEAST = ("io_throughput",)
_TARGET_RE = re.compile(r"^\s*([a-z_]+)\s*(<=|>=|=)\s*(\S+)\s*$")


@dataclass(frozen=True, slots=True)
class Target:
    """``key`` of a run (one of :data:`AT_MOST` or :data:`AT_LEAST`) bounded by ``limit``."""

    key: str
    limit: float

    def met(self, point: dict[str, Any]) -> bool:
        value = float(point[self.key])
        return value <= self.limit if self.key in AT_MOST else value >= self.limit

    def __str__(self) -> str:
        if self.key in AT_MOST:
            return f"{self.key} <= {self.limit:g}"
        return f"{self.key} >= {format_size(int(self.limit))}/s"


def parse_target(text: str) -> Target:
    """``mean_io_s=5m`` (a duration: at most), ``io_throughput=2G`` (per second: at least);
    ``<=``/``>=`` may be written instead of ``=``. Raises ValueError naming the fix."""
    m = _TARGET_RE.match(text)
    keys = ", ".join((*AT_MOST, *AT_LEAST))
    if not m or m.group(1) not in (*AT_MOST, *AT_LEAST):
        raise ValueError(f"{text!r}: expected KEY=VALUE with KEY one of {keys}, "
                         "e.g. mean_io_s=5m or io_throughput=2G")
    key, op, value = m.groups()
    if (op == ">=" and key in AT_MOST) or (op == "<=" and key in AT_LEAST):
        raise ValueError(f"{text!r}: {key} is bounded from "
                         f"{'above (<=)' if key in AT_MOST else 'below (>=)'}")
    limit = parse_duration(value) if key in AT_MOST else float(parse_size(value))
    if limit <= 0:
        raise ValueError(f"{text!r}: the limit must be > 0")
    return Target(key, limit)


def mixes(counts: Iterable[int], ram_shares: Iterable[float]) -> list[tuple[int, int]]:
    """Every distinct (ram nodes, ssd nodes) of ``counts`` × ``ram_shares``, in order."""
    out: list[tuple[int, int]] = []
    for n in counts:
        for share in ram_shares:
            ram = round(n * share)
            if (ram, n - ram) not in out:
                out.append((ram, n - ram))
    return out


def tiers_of(ram: int, ssd: int, per_tier: dict[Tier, TierSpec]) -> tuple[TierSpec, ...]:
    """The tiers of one configuration from per-tier templates (capacity, bandwidth)."""
    return tuple(replace(per_tier[t], count=c) for t, c in ((Tier.RAM, ram), (Tier.SSD, ssd))
                 if c > 0)


def sweep(jobs: Callable[[], Iterable[SwfJob]], cfg: ReplayConfig,
          configs: Sequence[tuple[int, int]], per_tier: dict[Tier, TierSpec],
          target: Target, source: str = "<trace>") -> list[dict[str, Any]]:
    """One RSA replay per configuration; each point the run's figures and its cost."""
    points = []
    for ram, ssd in configs:
        tiers = tiers_of(ram, ssd, per_tier)
        run_cfg = replace(cfg, tiers=tiers)
        run = Replay(jobs(), run_cfg, rsa=True, source=source)
        out = summary(run.run(), run_cfg, rsa=True, nodes=run.node_count)
        per_hour = sum(t.count * cfg.allocation.price_of(t.tier) for t in tiers)
        point = {"ram_nodes": ram, "ssd_nodes": ssd, "nodes": ram + ssd,
                 "ram_share": round(ram / (ram + ssd), 4),
                 "rsa_cost_per_hour": round(per_hour, 6),
                 **{k: out[k] for k in ("mean_wait_s", "mean_hold_s", "mean_io_s",
                                        "io_throughput", "rsa_cost", "cost")},
                 "utilisation": out["rsa"]["utilisation"],
                 "declined": out["rsa"]["declined"]}
        point["meets"] = target.met(point)
        points.append(point)
    return points


def _cheapest(points: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    meeting = [p for p in points if p["meets"]]
    return min(meeting, key=lambda p: (p["rsa_cost_per_hour"], p["nodes"], -p["ram_share"]),
               default=None)


def _fastest(points: Iterable[dict[str, Any]], budget: float) -> dict[str, Any] | None:
    within = [p for p in points if p["rsa_cost_per_hour"] <= budget * (1 + 1e-9)]
    return max(within, key=lambda p: (p["io_throughput"], -p["rsa_cost_per_hour"]),
               default=None)


def recommend(points: list[dict[str, Any]], target: Target) -> dict[str, Any]:
    """The recommendation and seed 000's comparisons (``None`` where nothing qualifies).

    ``saving_vs_ram_only``: 1 − cost of the cheapest configuration meeting the target /
    cost of the cheapest DRAM-only one meeting it (seed 000 Fig. 11, fixed performance).
    ``throughput_gain_at_ram_only_cost``: the best I/O throughput of any configuration
    costing no more than that DRAM-only one, over the best DRAM-only one's − 1 (Fig. 12,
    fixed cost)."""
    best = _cheapest(points)
    ram_only = _cheapest(p for p in points if p["ssd_nodes"] == 0)
    out: dict[str, Any] = {"target": str(target), "recommended": best, "ram_only": ram_only,
                           "saving_vs_ram_only": None,
                           "throughput_gain_at_ram_only_cost": None}
    if best is not None and ram_only is not None and ram_only["rsa_cost_per_hour"] > 0:
        out["saving_vs_ram_only"] = round(
            1 - best["rsa_cost_per_hour"] / ram_only["rsa_cost_per_hour"], 4)
        budget = ram_only["rsa_cost_per_hour"]
        any_mix = _fastest(points, budget)
        ram = _fastest((p for p in points if p["ssd_nodes"] == 0), budget)
        if any_mix is not None and ram is not None and ram["io_throughput"] > 0:
            out["throughput_gain_at_ram_only_cost"] = round(
                any_mix["io_throughput"] / ram["io_throughput"] - 1, 4)
            out["fastest_at_ram_only_cost"] = any_mix
    return out
