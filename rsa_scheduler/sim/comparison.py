"""A trace replayed twice, with the RSA and without it (the baseline), checked against each
other: the result ``rsa sim --trace`` reports.

Owns :func:`replay`: both runs of :class:`~rsa_scheduler.sim.replay.Replay` over fresh
iterators of the same trace, their summaries (:mod:`rsa_scheduler.sim.report`) and the
checks that hold between them (the same jobs ran; the PFS never carried more than its
bandwidth). Must not read the clock, sleep, or touch Slurm or processes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from rsa_scheduler.sim.cluster import ReplayConfig
from rsa_scheduler.sim.engine import SimulationBroken
from rsa_scheduler.sim.iomodel import EPS
from rsa_scheduler.sim.replay import Observer, Replay
from rsa_scheduler.sim.report import summary
from rsa_scheduler.sim.swf import SwfJob


def replay(jobs: Callable[[], Iterable[SwfJob]], cfg: ReplayConfig,
           source: str = "<trace>",
           per_job: Callable[[str, Mapping[str, Any]], None] | None = None) -> dict[str, Any]:
    """Replay the trace (``jobs()`` gives a fresh iterator) with and without the RSA.

    ``per_job(run, detail)`` is called as each job leaves its compute nodes, ``run`` being
    ``"rsa"`` or ``"baseline"``."""
    def observer(name: str) -> Observer | None:
        if per_job is None:
            return None

        def see(what: str, now: float, detail: Mapping[str, Any]) -> None:
            if what == "job":
                per_job(name, detail)
        return see

    run = Replay(jobs(), cfg, rsa=True, source=source, observer=observer("rsa"))
    with_rsa = summary(run.run(), cfg, rsa=True, nodes=run.node_count)
    base = Replay(jobs(), cfg, rsa=False, source=source, observer=observer("baseline"))
    baseline = summary(base.run(), cfg, rsa=False, nodes=0)
    out = dict(with_rsa)
    out["baseline"] = baseline
    if baseline["jobs"] != with_rsa["jobs"]:
        raise SimulationBroken(f"{source}: the baseline replayed {baseline['jobs']} jobs, "
                               f"the RSA run {with_rsa['jobs']}")
    if cfg.io.pfs_bw and with_rsa["pfs_peak_bw"] > cfg.io.pfs_bw * (1 + EPS):
        raise SimulationBroken(f"{source}: PFS bandwidth exceeded")
    return out
