"""rsad's Prometheus metrics: values from a daemon with a scripted Slurm port."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import generate_latest

from rsa_scheduler.daemon.metrics import Metrics
from tests.unit.test_daemon import ScriptedSlurm, make_daemon, settle


def test_metrics_reflect_pool_jobs_and_actions(tmp_path: Path) -> None:
    slurm = ScriptedSlurm()
    seen: list[str] = []
    d = make_daemon(tmp_path, slurm, seen)
    d.metrics = Metrics()
    d.metrics.watch(d)
    slurm.set("7", "PENDING", "Resources")
    d.poll()
    settle(d)
    text = generate_latest(d.metrics.registry).decode()
    assert 'rsa_nodes{state="allocated",tier="ram"} 1.0' in text
    assert 'rsa_nodes{state="idle",tier="ram"} 3.0' in text
    assert 'rsa_jobs{rsa_state="locked-in"} 1.0' in text
    assert 'rsa_actions_total{kind="build-fs",result="ok"} 1.0' in text
    assert 'rsa_actions_total{kind="stage-in",result="ok"} 1.0' in text
    assert "rsa_cycle_seconds_count 1.0" in text
    assert "rsa_slurm_up 1.0" in text


def test_staged_bytes_are_counted_from_outcome_details() -> None:
    m = Metrics()
    m.action_done("stage-out", "ok", 3.0, {"stats": {"bytes": 4096, "files": 2}})
    m.action_done("stage-out", "failed", 1.0, {})
    text = generate_latest(m.registry).decode()
    assert 'rsa_staged_bytes_total{phase="stage-out"} 4096.0' in text
    assert 'rsa_staged_files_total{phase="stage-out"} 2.0' in text
    assert 'rsa_actions_total{kind="stage-out",result="failed"} 1.0' in text
