"""Prometheus metrics for rsad (prometheus-client), served on ``metrics.listen``.

Owns the metric definitions and :class:`Metrics`: counters and histograms the daemon
updates as actions finish and cycles run, plus a collector that computes the gauges at
scrape time from the snapshot the loop last published (:mod:`.published`). The collector
runs on the HTTP server's thread: it reads that immutable snapshot only, never the
daemon's live pool, records or actions. The staging workers' figures are the one other
thing read at scrape time: from the worker pool itself, through :class:`StagingWorkers`
(its ``counts()`` is thread-safe), so the pool knows nothing of Prometheus and this module
imports nothing of the pool. Names follow Prometheus conventions (``rsa_`` prefix, base
units). Imports nothing of daemon/service.py, which imports it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from rsa_scheduler.daemon.published import Published

DURATION_BUCKETS = (0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600)


class WorkerCounts(Protocol):
    """The staging workers at one moment (``daemon.engines.PoolCounts``)."""

    @property
    def busy(self) -> int: ...
    @property
    def idle(self) -> int: ...
    @property
    def started(self) -> int: ...
    @property
    def lost(self) -> int: ...


class StagingWorkers(Protocol):
    """What the metrics read of the staging-worker pool (``daemon.engines.EnginePool``):
    its figures, from any thread."""

    def counts(self) -> WorkerCounts: ...


class _WorkerCollector(Collector):
    """The staging workers' gauge and counters, read from the pool at scrape time."""

    def __init__(self, workers: StagingWorkers) -> None:
        self.workers = workers

    def collect(self) -> Iterator[Metric]:
        c = self.workers.counts()  # taken once: the figures of one scrape agree
        states = GaugeMetricFamily(
            "rsa_staging_workers",
            "Staging worker processes by state: busy (in a stage-in, stage-out or verify) "
            "or idle (kept for the next one); exported only with staging.engine_process",
            labels=["state"])
        states.add_metric(["busy"], c.busy)
        states.add_metric(["idle"], c.idle)
        yield states
        yield CounterMetricFamily("rsa_staging_workers_started",
                                  "Staging worker processes started since rsad started; "
                                  "exported only with staging.engine_process",
                                  value=c.started)
        yield CounterMetricFamily(
            "rsa_staging_workers_lost",
            "Staging workers that ended in the middle of a call (killed, OOM, crash, or "
            "killed by rsad for not answering a cancel); exported only with "
            "staging.engine_process",
            value=c.lost)


class _StateCollector(Collector):
    """Gauges computed at scrape time from the last published snapshot."""

    def __init__(self, published: Published) -> None:
        self.published = published

    def collect(self) -> Iterator[GaugeMetricFamily]:
        snap = self.published.latest  # taken once: every gauge of a scrape is of one cycle
        nodes = GaugeMetricFamily("rsa_nodes", "RSA nodes by tier and state",
                                  labels=["tier", "state"])
        counts: dict[tuple[str, str], int] = {}
        for n in snap.nodes:
            state = n.state if n.state != "up" else ("allocated" if n.job else "idle")
            counts[(n.tier, state)] = counts.get((n.tier, state), 0) + 1
        for (tier, state), c in sorted(counts.items()):
            nodes.add_metric([tier, state], c)
        yield nodes
        jobs = GaugeMetricFamily("rsa_jobs", "Tracked jobs by rsa-state", labels=["rsa_state"])
        for state, c in snap.jobs_by_rsa_state:
            jobs.add_metric([state], c)
        yield jobs
        yield GaugeMetricFamily("rsa_actions_running", "Actions in flight",
                                value=snap.running_actions)
        yield GaugeMetricFamily("rsa_slurm_up", "1 if the last squeue call worked",
                                value=1 if snap.slurm_ok else 0)


class Metrics:
    """rsad's metrics; one instance per daemon (its own registry)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.actions = Counter("rsa_actions_total", "Finished actions by kind and result",
                               ["kind", "result"], registry=r)
        self.action_seconds = Histogram("rsa_action_duration_seconds",
                                        "Duration of finished actions", ["kind"],
                                        buckets=DURATION_BUCKETS, registry=r)
        self.bytes = Counter("rsa_staged_bytes_total", "Bytes staged", ["phase"], registry=r)
        self.files = Counter("rsa_staged_files_total", "Files staged", ["phase"], registry=r)
        self.cycle = Histogram("rsa_cycle_seconds", "One scheduling cycle (squeue + decide)",
                               buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10), registry=r)
        self.alerts = Counter("rsa_alerts_total", "Alerts raised for operators", registry=r)

    def watch(self, published: Published, workers: StagingWorkers | None = None) -> None:
        """Serve the gauges from what the loop publishes (``Daemon.published``), and the
        staging workers' figures from their pool (``Daemon.staging_workers``; None, with
        ``staging.engine_process`` off or no data path: no worker metrics at all, rather
        than zeros that would say copies are not running when they run in rsad)."""
        self.registry.register(_StateCollector(published))
        if workers is not None:
            self.registry.register(_WorkerCollector(workers))

    def action_done(self, kind: str, result: str, seconds: float,
                    detail: Mapping[str, Any]) -> None:
        self.actions.labels(kind, result).inc()
        self.action_seconds.labels(kind).observe(seconds)
        stats = detail.get("stats") if isinstance(detail, Mapping) else None
        if result == "ok" and isinstance(stats, Mapping) and kind in ("stage-in", "stage-out"):
            self.bytes.labels(kind).inc(float(stats.get("bytes", 0)))
            self.files.labels(kind).inc(float(stats.get("files", 0)))

    def serve(self, host: str, port: int) -> None:
        start_http_server(port, addr=host, registry=self.registry)
