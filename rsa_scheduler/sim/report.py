"""What a trace replay reports: running totals and the JSON keys built from them.

Owns :class:`Totals` (sums kept while a run goes, O(1) memory) and :func:`summary` (the
keys of ``rsa sim replay --json`` for one run: ``jobs``, ``mean_wait_s``,
``mean_hold_s``, ``mean_io_s``, ``cost`` and the rest). The cost model is the
allocator's (seed 000; docs/allocation.md): every provisioned RSA node costs its tier's
``allocation.price`` per node-hour over the makespan, and compute nodes ``compute`` per
node-hour they are held. Pure; must not import the engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rsa_scheduler.core.policy import Tier
from rsa_scheduler.sim.cluster import ReplayConfig


@dataclass(slots=True)
class Totals:
    """Running sums of one run; :meth:`to_json` gives the report's keys."""

    jobs: int = 0
    skipped: int = 0
    wait: float = 0.0
    hold: float = 0.0
    io: float = 0.0
    compute_node_s: float = 0.0
    first_submit: float | None = None
    last_end: float = 0.0
    read_rsa: int = 0
    write_rsa: int = 0
    tracked: int = 0
    declined: int = 0  # the RSA refused (too big) or gave up
    no_nodes: int = 0  # never held RSA nodes (started before any were free)
    stage_out_s: float = 0.0  # job end -> RSA nodes released
    stage_outs: int = 0
    max_active: int = 0
    events: int = 0
    checks: int = 0
    pfs_peak: float = 0.0
    pfs_bytes: float = 0.0
    io_bytes: int = 0  # read and written by jobs (both phases, RSA or PFS)
    held_s: dict[str, float] = field(default_factory=dict)  # RSA node-seconds held, per tier
    # jobs by where their I/O volumes came from: trace, memory or synthetic (iomodel)
    volumes: dict[str, int] = field(default_factory=dict)

    def held(self, tier: str, node_s: float) -> None:
        self.held_s[tier] = self.held_s.get(tier, 0.0) + node_s


def summary(t: Totals, cfg: ReplayConfig, *, rsa: bool, nodes: int) -> dict[str, Any]:
    """The report's keys for one run (times in seconds, cost in price units)."""
    n = max(t.jobs, 1)
    span = max(t.last_end - (t.first_submit or 0.0), 0.0)
    compute_nh = t.compute_node_s / 3600.0
    rsa_nh = 0.0
    rsa_cost = 0.0
    by_tier: dict[str, dict[str, float]] = {}
    if rsa:
        for tier in cfg.tiers:
            hours = tier.count * span / 3600.0
            price = cfg.allocation.price_of(Tier(tier.tier))
            rsa_nh += hours
            rsa_cost += hours * price
            held = t.held_s.get(tier.tier.value, 0.0) / 3600.0
            by_tier[tier.tier.value] = {
                "nodes": tier.count, "node_hours": round(hours, 3),
                "held_node_hours": round(held, 3), "cost": round(hours * price, 3),
                "utilisation": round(held / hours, 4) if hours else 0.0}
    compute_cost = compute_nh * cfg.prices.get("compute", 0.0)
    cost = compute_cost + rsa_cost
    held_all = sum(t.held_s.values()) / 3600.0
    out: dict[str, Any] = {
        "jobs": t.jobs,
        "skipped": t.skipped,
        "mean_wait_s": round(t.wait / n, 3),
        "mean_hold_s": round(t.hold / n, 3),
        "mean_io_s": round(t.io / n, 3),
        "cost": round(cost, 3),
        "compute_cost": round(compute_cost, 3),
        "rsa_cost": round(rsa_cost, 3),
        "io_throughput": round(t.io_bytes / t.io, 1) if t.io > 0 else 0.0,
        "makespan_s": round(span, 3),
        "compute_node_hours": round(compute_nh, 3),
        "rsa_node_hours": round(rsa_nh, 3),
        "pfs_peak_bw": round(t.pfs_peak, 1),
        "pfs_bw": cfg.io.pfs_bw,
        "max_active_jobs": t.max_active,
        "io_volumes": {k: t.volumes.get(k, 0) for k in ("trace", "memory", "synthetic")},
    }
    if rsa:
        out["rsa"] = {
            "nodes": nodes,
            "tracked": t.tracked,
            "declined": t.declined,
            "never_allocated": t.no_nodes,
            "read_from_rsa": t.read_rsa,
            "wrote_to_rsa": t.write_rsa,
            "mean_stage_out_s": round(t.stage_out_s / max(t.stage_outs, 1), 3),
            "ordering": cfg.ordering,
            "utilisation": round(held_all / rsa_nh, 4) if rsa_nh else 0.0,
            "tiers": by_tier,
            "replay_checks": t.checks,
        }
    return out
