"""rsad's Prometheus metrics: values from a daemon with a scripted Slurm port, served from
the snapshot the loop publishes once per cycle, never from the loop's live state; the
staging workers' figures, read from a real worker pool at scrape time."""

from __future__ import annotations

import dataclasses
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from prometheus_client import generate_latest

from rsa_scheduler.daemon.engines import EnginePool, WorkerGone
from rsa_scheduler.daemon.metrics import Metrics
from rsa_scheduler.daemon.published import Published, StatusSnapshot
from rsa_scheduler.daemon.service import Daemon
from rsa_scheduler.hosts import CancelToken
from tests.unit.test_daemon import ScriptedSlurm, make_daemon, settle

GAUGES = ("rsa_nodes", "rsa_jobs", "rsa_actions_running", "rsa_slurm_up")


def one_cycle(d: Daemon) -> None:
    """One turn of the daemon's real loop (poll, publish), stopped after it."""
    stop = threading.Event()
    d.run(stop, on_cycle=stop.set)


def gauges(m: Metrics) -> list[str]:
    text = generate_latest(m.registry).decode()
    return [ln for ln in text.splitlines() if ln.startswith(GAUGES)]


def test_metrics_reflect_pool_jobs_and_actions(tmp_path: Path) -> None:
    slurm = ScriptedSlurm()
    seen: list[str] = []
    d = make_daemon(tmp_path, slurm, seen)
    d.metrics = Metrics()
    d.metrics.watch(d.published)
    slurm.set("7", "PENDING", "Resources")
    d.poll()
    settle(d)
    one_cycle(d)
    text = generate_latest(d.metrics.registry).decode()
    assert 'rsa_nodes{state="allocated",tier="ram"} 1.0' in text
    assert 'rsa_nodes{state="idle",tier="ram"} 3.0' in text
    assert 'rsa_jobs{rsa_state="locked-in"} 1.0' in text
    assert 'rsa_actions_total{kind="build-fs",result="ok"} 1.0' in text
    assert 'rsa_actions_total{kind="stage-in",result="ok"} 1.0' in text
    assert "rsa_cycle_seconds_count 2.0" in text
    assert "rsa_slurm_up 1.0" in text


def test_served_gauges_change_only_when_the_loop_publishes(tmp_path: Path) -> None:
    """The collector reads the published snapshot: live state changed after a publish
    (a new job staged, Slurm gone, the snapshot's source dict mutated) is not served until
    the loop's next cycle publishes it."""
    slurm = ScriptedSlurm()
    d = make_daemon(tmp_path, slurm, [])
    m = Metrics()
    m.watch(d.published)
    slurm.set("7", "PENDING", "Resources")
    one_cycle(d)
    served = gauges(m)
    assert 'rsa_jobs{rsa_state="fs-building"} 1.0' in served  # as the cycle left it
    assert "rsa_actions_running 1.0" in served
    settle(d)  # the loop handles the outcomes: live, job 7 is locked in, nothing runs
    assert d.sched.records["7"].rsa_state.value == "locked-in" and not d.running
    assert gauges(m) == served
    view = d.status_view()
    d.published.publish(view)
    served = gauges(m)
    # the loop's live state moves on: another job, its nodes, Slurm down ...
    slurm.set("8", "PENDING", "Resources")
    d.poll()
    settle(d)
    d.slurm_ok = False
    assert len(d.sched.records) == 2
    # ... and the dict the snapshot was made from is changed in place
    view["nodes"].clear()
    view["jobs_by_rsa_state"]["staging-in"] = 99
    view["slurm_ok"] = False
    assert gauges(m) == served
    one_cycle(d)  # the next cycle publishes: now it shows
    assert gauges(m) != served
    assert 'rsa_jobs{rsa_state="locked-in"} 2.0' in gauges(m)


def test_a_snapshot_is_immutable_and_keeps_nothing_of_its_view() -> None:
    node: dict[str, str | None] = {"name": "rsa1", "tier": "ram", "state": "up", "job": "7"}
    by_state = {"locked-in": 1}
    view: dict[str, Any] = {"nodes": [node], "jobs_by_rsa_state": by_state,
                            "running_actions": 0, "slurm_ok": True,
                            "last_cycle_seconds": 0.5}
    pub = Published()
    assert pub.latest.cycle == 0 and pub.latest.nodes == ()
    snap = pub.publish(view)
    assert pub.latest is snap and snap.cycle == 1
    node["job"] = None
    by_state["locked-in"] = 5
    assert snap.nodes[0].job == "7" and snap.jobs_by_rsa_state == (("locked-in", 1),)
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.slurm_ok = False  # type: ignore[misc]
    assert isinstance(snap.nodes, tuple) and isinstance(snap.jobs_by_rsa_state, tuple)
    assert pub.publish(view).cycle == 2 and pub.latest is not snap
    assert StatusSnapshot.of(view, 3).nodes[0].job is None


def test_staged_bytes_are_counted_from_outcome_details() -> None:
    m = Metrics()
    m.action_done("stage-out", "ok", 3.0, {"stats": {"bytes": 4096, "files": 2}})
    m.action_done("stage-out", "failed", 1.0, {})
    text = generate_latest(m.registry).decode()
    assert 'rsa_staged_bytes_total{phase="stage-out"} 4096.0' in text
    assert 'rsa_staged_files_total{phase="stage-out"} 2.0' in text
    assert 'rsa_actions_total{kind="stage-out",result="failed"} 1.0' in text


# ---- the staging workers (daemon/engines.py's pool, read at scrape time) ---------------

#: a stand-in staging worker speaking the pool's protocol: answers a call with its
#: arguments, or (op "hang") never answers; the marker finds it among our children
FAKE_WORKER = """# rsa-metrics-fake-worker
import json, sys, time
for line in sys.stdin:
    call = json.loads(line).get("call")
    if call is None:
        continue
    if call["op"] == "hang":
        time.sleep(3600)
    print(json.dumps({"result": call["args"]}), flush=True)
"""


def worker_figures(m: Metrics) -> dict[str, float]:
    """The staging workers' series as served: ``{name{labels}: value}``."""
    text = generate_latest(m.registry).decode()
    return {k: float(v) for k, v in (ln.rsplit(" ", 1) for ln in text.splitlines()
                                     if ln.startswith("rsa_staging_workers"))}


def fake_workers() -> list[psutil.Process]:
    return [c for c in psutil.Process().children()
            if "rsa-metrics-fake-worker" in " ".join(c.cmdline())]


def figures(busy: int, idle: int, started: int, lost: int) -> dict[str, float]:
    return {'rsa_staging_workers{state="busy"}': busy,
            'rsa_staging_workers{state="idle"}': idle,
            "rsa_staging_workers_started_total": started,
            "rsa_staging_workers_lost_total": lost}


def test_staging_workers_are_served_busy_idle_started_and_lost() -> None:
    """Real worker processes (a stand-in for the staging worker) in a real EnginePool: a
    worker is busy while its call runs, idle once given back, reused; one SIGKILLed
    mid-call is lost (the call fails with WorkerGone) and the next call starts another."""
    pool = EnginePool(argv=(sys.executable, "-c", FAKE_WORKER))
    m = Metrics()
    m.watch(Published(), pool)
    try:
        assert worker_figures(m) == figures(0, 0, 0, 0)
        assert pool.run({"op": "echo", "args": {"n": 1}}, cancel=CancelToken()) == {"n": 1}
        assert worker_figures(m) == figures(0, 1, 1, 0)
        failed: list[BaseException] = []

        def hang() -> None:
            try:
                pool.run({"op": "hang", "args": {}}, cancel=CancelToken())
            except BaseException as e:
                failed.append(e)

        t = threading.Thread(target=hang)
        t.start()
        deadline = time.monotonic() + 10
        while worker_figures(m) != figures(1, 0, 1, 0):  # the idle worker was taken
            assert time.monotonic() < deadline, worker_figures(m)
            time.sleep(0.01)
        (victim,) = fake_workers()
        victim.send_signal(signal.SIGKILL)
        t.join(10)
        assert len(failed) == 1 and isinstance(failed[0], WorkerGone)
        assert worker_figures(m) == figures(0, 0, 1, 1)
        assert pool.run({"op": "echo", "args": {}}, cancel=CancelToken()) == {}
        assert worker_figures(m) == figures(0, 1, 2, 1)
        # an idle worker that died while idle is not served as idle (nor as lost)
        (idle,) = fake_workers()
        idle.send_signal(signal.SIGKILL)
        idle.wait(10)
        assert worker_figures(m) == figures(0, 0, 2, 1)
    finally:
        pool.close()


def test_rsad_stopping_ends_its_idle_workers(tmp_path: Path) -> None:
    """Daemon.shutdown closes the staging-worker pool: its idle workers exit then, not
    only when rsad's process is gone and their pipe closes."""
    from tests.unit.test_daemon import ScriptedSlurm, make_daemon

    pool = EnginePool(argv=(sys.executable, "-c", FAKE_WORKER))
    d = make_daemon(tmp_path, ScriptedSlurm(), [])
    d.staging_workers = pool
    try:
        assert pool.run({"op": "echo", "args": {}}, cancel=CancelToken()) == {}
        (idle,) = fake_workers()
        d.shutdown(timeout=5)
        idle.wait(5)  # psutil.TimeoutExpired: still running
        assert not idle.is_running()
        assert pool.counts().idle == 0
    finally:
        pool.close()
        d.store.close()


def test_no_worker_series_without_a_worker_pool() -> None:
    """staging.engine_process off (or no data path): the copies run in rsad's threads,
    so no worker series at all, rather than zeros that would say nothing is copying."""
    m = Metrics()
    m.watch(Published())
    assert worker_figures(m) == {}
    assert "rsa_slurm_up" in generate_latest(m.registry).decode()
