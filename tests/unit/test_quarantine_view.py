"""A quarantined job is not forgotten (issue 33): ``rsa status`` shows its age and the
capacity its RAMDISK holds (a user sees only their own), and rsad alerts again each
day it waits (daemon/views.py, daemon/dispatch.py, cli/status.py)."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rsa_scheduler.cli.main import cli
from rsa_scheduler.client import ApiClient
from rsa_scheduler.core.machine import JobRecord
from rsa_scheduler.core.policy import StagingPolicy
from rsa_scheduler.core.scheduler import Scheduler
from rsa_scheduler.core.states import RsaState
from rsa_scheduler.daemon.dispatch import QUARANTINE_REMIND
from rsa_scheduler.daemon.views import status_for_user, status_view
from rsa_scheduler.node.plan import HookProtocols
from tests.clirunner import cli_runner
from tests.unit.corekit import GIB, make_pool, make_spec
from tests.unit.test_daemon import ScriptedSlurm, make_daemon


def _quarantined(sched: Scheduler, job: str, nodes: str, since: float) -> JobRecord:
    rec = JobRecord(job_id=job, user="alice", spec=make_spec(), nodes=nodes, since=since,
                    rsa_state=RsaState.QUARANTINED)
    sched.records[job] = rec
    sched.pool.adopt(job, nodes)
    return rec


def _viewed(sched: Scheduler) -> Any:
    return SimpleNamespace(sched=sched, progress={}, facts={}, node_notes={}, running={},
                           alerts=[], slurm_ok=True, last_cycle_seconds=0.01,
                           hook_protocols=HookProtocols())


def test_status_shows_each_quarantined_job_its_age_and_what_it_holds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    sched = Scheduler(make_pool(), StagingPolicy())
    now = time.time()
    _quarantined(sched, "42", "rsa[1-2]", now - 3 * 3600 - 60)
    view = status_view(_viewed(sched))
    assert view["quarantined"] == [{"job_id": "42", "user": "alice", "since": now - 10860,
                                    "nodes": "rsa[1-2]", "capacity": 4 * GIB}]
    # another user sees none of it; its owner sees theirs
    assert status_for_user(view, mine=set(), others={"42"})["quarantined"] == []
    assert status_for_user(view, mine={"42"}, others=set())["quarantined"] == \
        view["quarantined"]
    monkeypatch.setattr(ApiClient, "request", lambda _self, _m, _p, _b=None: view)
    out = cli_runner().invoke(cli, ["status"])
    assert out.exit_code == 0, out.output
    assert "  ram       8G total  2 allocated, 2 idle; 4G held by quarantined output" in \
        out.output, out.output
    assert "  job 42 (alice) for 3:01:00 on rsa[1-2], 4G held" in out.output, out.output


def test_a_quarantine_is_alerted_again_each_day_it_waits(tmp_path: Path) -> None:
    d = make_daemon(tmp_path, ScriptedSlurm(), [])
    rec = _quarantined(d.sched, "42", "rsa1", 1000.0)
    d.dispatcher.remind([rec], 1000.0 + QUARANTINE_REMIND - 1)
    assert d.alerts == []
    d.dispatcher.remind([rec], 1000.0 + QUARANTINE_REMIND)
    d.dispatcher.remind([rec], 1000.0 + QUARANTINE_REMIND + 3600)
    assert [a["message"] for a in d.alerts] == [
        "output still quarantined on its RAMDISK on rsa1 after 24 hours, holding those RSA "
        "nodes: fix the cause and `rsa retry 42`, or save the data and `rsa release 42 "
        "--discard-output`"]
    d.dispatcher.remind([rec], 1000.0 + 2 * QUARANTINE_REMIND)
    assert len(d.alerts) == 2 and "after 48 hours" in d.alerts[-1]["message"]
    d.shutdown()
    d.store.close()


SITE = """\
pool:
  nodes:
    - names: "rsa[1-2]"
      tier: ram
      capacity: 2G
      address: "192.0.2.{num}"
allocation:
  max_nodes: 2
daemon:
  state_dir: STATE
slurm:
  lockin:
    method: none
staging:
  allowed_roots: [/pfs]
"""


def test_the_reminder_interval_is_quarantine_remind_every(tmp_path: Path) -> None:
    """On main it was a constant (24 hours); now a setting, 24h by default, validated."""
    from rsa_scheduler.config import load_config_text
    from rsa_scheduler.daemon.wiring import make_daemon as wire
    from tests.unit.test_daemon import instant_registry

    site = SITE.replace("STATE", str(tmp_path / "state"))
    assert load_config_text(site).quarantine.remind_every == QUARANTINE_REMIND == 86400
    for bad, why in (("30s", "must be at least 1m"), ("0s", "must be longer than 0s"),
                     ("366d", "")):
        with pytest.raises(Exception, match=rf"quarantine\.remind_every: .*{why}"):
            load_config_text(site + f"quarantine:\n  remind_every: {bad}\n")
    cfg = load_config_text(site + "quarantine:\n  remind_every: 90m\n")
    d = wire(cfg, slurm=ScriptedSlurm(), registry=instant_registry([]))
    try:
        assert d.dispatcher.remind_every == 5400
        rec = _quarantined(d.sched, "42", "rsa1", 1000.0)
        d.dispatcher.remind([rec], 1000.0 + 5399)
        assert d.alerts == []
        d.dispatcher.remind([rec], 1000.0 + 5400)
        d.dispatcher.remind([rec], 1000.0 + 3 * 5400)
        assert [a["message"].split(",")[0] for a in d.alerts] == [
            "output still quarantined on its RAMDISK on rsa1 after 90 minutes",
            "output still quarantined on its RAMDISK on rsa1 after 270 minutes"]
    finally:
        d.shutdown()
        d.store.close()
