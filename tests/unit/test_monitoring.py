"""The shipped Prometheus rules and Grafana dashboard (docs/monitoring/) name only
metrics, labels and states rsad really exports (issue 18)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import yaml
from prometheus_client import generate_latest

from rsa_scheduler.core.policy import NodeState
from rsa_scheduler.core.states import RsaState
from rsa_scheduler.daemon.engines import EnginePool
from rsa_scheduler.daemon.metrics import Metrics
from tests.unit.test_daemon import ScriptedSlurm, make_daemon, settle

DOCS = Path(__file__).parents[2] / "docs" / "monitoring"
METRIC = re.compile(r"\b(rsa_[a-z_]+)")
LABELS = {"rsa_state"}  # rsa_jobs' label: not a metric
STATE = re.compile(r'rsa_state=~?"([^"]+)"')
NODE_STATE = re.compile(r'[^_]state=~?"([^"]+)"')


def exported(tmp_path: Path) -> set[str]:
    """Every series name rsad's registry exposes (with a tracked job, so the gauges
    carry samples)."""
    slurm = ScriptedSlurm()
    d = make_daemon(tmp_path, slurm, [])
    slurm.set("7", "PENDING", "Resources")
    d.poll()
    settle(d)
    d.published.publish(d.status_view())
    m = Metrics()
    pool = EnginePool(argv=(sys.executable, "-c", "import sys; sys.stdin.read()"))
    m.watch(d.published, pool)  # the worker series: served with staging.engine_process
    for kind in ("stage-in", "stage-out"):
        m.action_done(kind, "ok", 1.0, {"stats": {"bytes": 1, "files": 1}})
    m.cycle.observe(0.1)
    m.alerts.inc()
    text = generate_latest(m.registry).decode()
    return {ln.split("{")[0].split(" ")[0] for ln in text.splitlines()
            if ln and not ln.startswith("#")}


def exprs() -> list[str]:
    rules = yaml.safe_load((DOCS / "rsa-alerts.yml").read_text())
    out = [r["expr"] for g in rules["groups"] for r in g["rules"]]
    dash = json.loads((DOCS / "grafana-rsa.json").read_text())
    out += [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    return out


def test_every_metric_the_rules_and_dashboard_use_is_exported(tmp_path: Path) -> None:
    have = exported(tmp_path)
    used = {m for e in exprs() for m in METRIC.findall(e)} - LABELS
    assert used, "no rsa_ metric used at all"
    assert used <= have, f"not exported by rsad: {sorted(used - have)}"


def test_every_state_the_rules_and_dashboard_name_exists() -> None:
    jobs = {s.value for s in RsaState}
    nodes = {s.value for s in NodeState} | {"idle", "allocated"}
    for e in exprs():
        for alt in STATE.findall(e):
            assert set(alt.split("|")) <= jobs, (e, set(alt.split("|")) - jobs)
        for alt in NODE_STATE.findall(e):
            assert set(alt.split("|")) <= nodes, (e, set(alt.split("|")) - nodes)


def test_the_rules_file_is_what_prometheus_loads() -> None:
    rules = yaml.safe_load((DOCS / "rsa-alerts.yml").read_text())
    for group in rules["groups"]:
        assert group["name"] and group["rules"]
        for r in group["rules"]:
            assert set(r) <= {"alert", "expr", "for", "labels", "annotations"}, r
            assert r["alert"] and r["expr"] and r["labels"]["severity"] in ("critical",
                                                                           "warning")
            assert r["annotations"]["summary"] and r["annotations"]["description"]
