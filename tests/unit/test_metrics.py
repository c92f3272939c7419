"""rsad's Prometheus metrics: values from a daemon with a scripted Slurm port, served from
the snapshot the loop publishes once per cycle, never from the loop's live state."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from rsa_scheduler.daemon.metrics import Metrics
from rsa_scheduler.daemon.published import Published, StatusSnapshot
from rsa_scheduler.daemon.service import Daemon
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
