"""A writable input's base scan and write-backs run in a staging worker, not in rsad's
process (issue 34: nothing an urgent action needs may wait behind bulk work there).

For a large DATA_IN they are seconds of Python (the scans' parsing, the plan) and two
JSON documents of the base, each written or read in one C call that holds the GIL
throughout (~0.3 s at 200,000 names): in rsad's threads, a mount waited behind them
(bench/bench_writable.py). What must hold: the data path sends both to the worker
(``record_base``, ``write_back``) with rsad's bases directory, rsad's own process scans
nothing, and the worker does what rsad did: the same copies, deletions, files kept
aside, base and outcome; without a recorded base the input is written back whole, as
before. Real worker and real commands as ``nobody`` (needs root) where files move; a
recording pool where only the routing is checked.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from rsa_scheduler.config import load_config_text
from rsa_scheduler.core.actions import Result
from rsa_scheduler.daemon.data import DataPath, record_base, write_back_of
from rsa_scheduler.daemon.engines import EnginePool, WorkerEngine
from rsa_scheduler.daemon.executors import ActionContext, Registry
from rsa_scheduler.daemon.stagingworker import stats_to_json, verification_to_json
from rsa_scheduler.daemon.writeback import Bases
from rsa_scheduler.hosts import CancelToken, Host, LocalHost
from rsa_scheduler.runner import Identity
from rsa_scheduler.staging import StagingEngine
from rsa_scheduler.staging.manifest import Verification
from rsa_scheduler.staging.report import Stats
from tests.unit.conftest import root_only
from tests.unit.test_ramdisk_tending import GOOD, SPEC, Backend
from tests.unit.test_staging_engine import make_engine
from tests.unit.test_write_back import _expect, _job_and_someone_else, _put


def no_scan_here(self: StagingEngine, root: str, what: str) -> list[Any]:
    raise AssertionError(f"rsad's own process scanned {root} ({what})")


@root_only
def test_the_worker_records_the_base_and_writes_back_as_rsad_did(
        area: Path, user: Identity, pool: EnginePool,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The rules of tests/unit/test_write_back.py's first write-back, through a real
    worker: the job's changes copied, its deletions applied, someone else's change kept
    and the job's version beside it; the base in rsad's bases directory, readable by
    rsad; a second write-back against the base the first left."""
    pfs = area / "outs" / "in"
    (pfs / "sub").mkdir(parents=True)
    for d in (pfs, pfs / "sub"):
        os.chown(d, user.uid, user.gid)
    for name in ("keep", "mod", "del", "both", "theirs", "sub/x"):
        _put(pfs / name, f"v1 {name}\n".encode(), user, 1_600_000_000)
    eng = make_engine(user)
    ram = area / "ram"
    eng.prepare_root(str(ram))
    bases = Bases(area / "state")
    twin = WorkerEngine.of(pool, eng)
    assert isinstance(twin, WorkerEngine)
    monkeypatch.setattr(StagingEngine, "scan", no_scan_here)  # this process's engines

    n = record_base(bases, twin, "job77-c1", str(pfs))
    recorded = bases.load("job77-c1")
    assert recorded is not None and n == len(recorded.base) and b"sub/x" in recorded.base
    twin.stage_in(str(pfs), str(ram))
    _job_and_someone_else(pfs, ram, user)
    out = write_back_of(bases, twin, "job77-c1", str(ram), str(pfs))
    _expect(pfs)
    assert out is not None
    assert out["written_back"] == {"copied": 2, "deleted": 2, "aside": ["both"], "kept": []}
    assert out["verified"] == {"objects": 3}
    assert "'both' as 'both.rsa-77'" in out["summary"], out["summary"]
    _put(ram / "mod", b"v3 job, longer\n", user)
    again = write_back_of(bases, twin, "job77-c1", str(ram), str(pfs))
    assert again is not None and again["written_back"]["copied"] == 1
    assert (pfs / "mod").read_bytes() == b"v3 job, longer\n"
    # no base: the caller writes the input back whole
    assert write_back_of(bases, twin, "job78-c1", str(ram), str(pfs)) is None
    assert pool.started == 1


class RecordingPool(EnginePool):
    """A pool whose "worker" records each call and answers it as a worker would."""

    def __init__(self, outcome: Mapping[str, Any] | None) -> None:
        super().__init__()
        self.outcome = outcome
        self.calls: list[Mapping[str, Any]] = []

    def run(self, request: Mapping[str, Any], *, cancel: CancelToken, progress: Any = None,
            gate: Any = None) -> Any:
        self.calls.append(request)
        op = request["op"]
        if op in ("stage_in", "stage_out"):
            return stats_to_json(Stats(op.replace("_", "-"), 3, 30, 1, 0.1, 1))
        if op == "verify":
            return verification_to_json(Verification(True, "content", 4, 30))
        if op == "record_base":
            return {"objects": 4}
        return {"outcome": None if self.outcome is None else dict(self.outcome)}

    @property
    def ops(self) -> list[str]:
        return [str(c["op"]) for c in self.calls]


def data_path(tmp_path: Path, pool: EnginePool,
              monkeypatch: pytest.MonkeyPatch) -> tuple[DataPath, Registry]:
    cfg = load_config_text("pool:\n  nodes:\n    - names: rsa1\n      capacity: 2G\n"
                           f"daemon:\n  state_dir: {tmp_path / 'state'}\n")
    hosts: dict[str, Host] = {"rsa1": LocalHost("rsa1")}
    dp = DataPath(cfg, hosts, {cfg.pool.members()[0].tier.value: Backend(lambda: GOOD)},
                  workers=pool)
    monkeypatch.setattr(dp, "fenced", lambda node: hosts[node])  # no fence on this host
    monkeypatch.setattr(StagingEngine, "scan", no_scan_here)
    registry = Registry()
    dp.register(registry)
    return dp, registry


def run(registry: Registry, tmp_path: Path, action_id: str, **fields: Any) -> Any:
    from tests.unit.corekit import make_action

    spec = replace(SPEC, rsa_mountpoint=str(tmp_path / "ram"))
    action = make_action(action_id, user="nobody", data_in=PurePosixPath("/pfs/u/in"),
                         **fields)
    return registry.run(ActionContext(action=action, cancel=CancelToken(),
                                      progress=lambda _d: None,
                                      facts={"mount": spec.to_json()}))


@root_only
def test_the_data_path_scans_a_writable_input_only_in_its_staging_worker(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: the stage-in's base scan and the write-back ran their engine in rsad's
    thread (scan, plan, base) even with staging workers; only the copies went there."""
    written = {"verified": {"objects": 2},
               "written_back": {"copied": 1, "deleted": 0, "aside": [], "kept": []},
               "summary": "writable input written back to /pfs/u/in: 1 object ..."}
    pool = RecordingPool(written)
    dp, registry = data_path(tmp_path, pool, monkeypatch)
    staged = run(registry, tmp_path, "7/1/stage-in/1", writable=True)
    assert staged.result is Result.OK, staged
    assert pool.ops == ["record_base", "stage_in"]
    assert pool.calls[0]["args"] == {"bases": str(dp.bases.root), "fs_id": "job7-c1",
                                     "data_in": "/pfs/u/in", "limit": 500_000}
    back = run(registry, tmp_path, "7/1/write-back/2")
    assert back.result is Result.OK, back
    assert pool.ops[2:] == ["write_back"]
    assert pool.calls[2]["args"] == {"bases": str(dp.bases.root), "fs_id": "job7-c1",
                                     "ramdisk": str(tmp_path / "ram"),
                                     "data_in": "/pfs/u/in"}
    assert back.message == written["summary"]
    assert back.detail["written_back"] == written["written_back"]


@root_only
def test_a_write_back_without_a_base_copies_the_input_whole_in_the_worker(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A writable input staged in by an rsad before bases: the worker finds none, and
    the input is copied back whole and verified (as before), in the worker too."""
    pool = RecordingPool(None)
    _dp, registry = data_path(tmp_path, pool, monkeypatch)
    back = run(registry, tmp_path, "7/1/write-back/2")
    assert back.result is Result.OK, back
    assert pool.ops == ["write_back", "stage_out", "verify"]
    assert back.detail["verified"] == {"objects": 4}
