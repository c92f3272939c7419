"""A writable input's size is bounded before anything is staged (staging.writable_objects).

Its write-back keeps three manifests of the whole input in a staging worker on rsad's
host (the base, the RAMDISK, the PFS): ~2.7 KB per object measured in a real worker
(docs/security.md, "Memory of rsad's host"), so a user pointing a writable DATA_IN at a
shared dataset of tens of millions of names took tens of GB there. Before, the base scan
listed DATA_IN whole whatever it held. What must hold: a DATA_IN of more objects than
the limit is refused, permanently, with one line saying the limit, that it was
exceeded and what to do; the scan never reads more than limit + 1 objects into the
process; no base is recorded; the data path refuses the stage-in before any copy. At
the limit, the input is taken as before. Real commands as ``nobody`` (needs root) where
a tree is scanned; a recording pool where only the routing is checked.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from rsa_scheduler.core.actions import Result
from rsa_scheduler.daemon.dispatch import fit_comment
from rsa_scheduler.daemon.engines import EnginePool, WorkerEngine
from rsa_scheduler.daemon.writeback import Bases, record_stage_in, too_many_words
from rsa_scheduler.hosts import CancelToken
from rsa_scheduler.runner import Identity
from rsa_scheduler.staging import StagingEngine
from rsa_scheduler.staging.manifest import Entry
from rsa_scheduler.staging.report import StagingError
from tests.unit.conftest import root_only
from tests.unit.test_staging_engine import make_engine
from tests.unit.test_write_back import _put
from tests.unit.test_write_back_worker import RecordingPool, data_path, run


def dataset(area: Path, user: Identity, files: int) -> Path:
    """DATA_IN with ``files`` files in 4 directories (``files`` + 4 objects)."""
    pfs = area / "outs" / "in"
    for d in range(4):
        (pfs / f"d{d}").mkdir(parents=True)
        os.chown(pfs / f"d{d}", user.uid, user.gid)
    os.chown(pfs, user.uid, user.gid)
    for i in range(files):
        _put(pfs / f"d{i % 4}" / f"f{i}", b"x", user)
    return pfs


@root_only
def test_a_writable_input_above_the_limit_is_refused_before_anything_is_recorded(
        area: Path, user: Identity, monkeypatch: pytest.MonkeyPatch) -> None:
    pfs = dataset(area, user, 200)  # 204 objects
    eng = make_engine(user)
    bases = Bases(area / "state")
    read: list[int] = []
    scan = StagingEngine._scan

    def counted(self: StagingEngine, *a: Any, **kw: Any) -> list[Entry]:
        out = scan(self, *a, **kw)
        read.append(len(out))
        return out

    monkeypatch.setattr(StagingEngine, "_scan", counted)
    with pytest.raises(StagingError) as e:
        record_stage_in(bases, "job77-c1", eng, str(pfs), limit=50)
    assert e.value.permanent
    line = str(e.value)
    assert line == too_many_words(50)
    assert line == ("stage-in refused: this writable input holds more than 50 objects, "
                    "the most #RSA_INPUT=rw may hold here: use #RSA_INPUT=ro, or a "
                    "smaller DATA_IN")
    # whole in the job's comment, with the words around it, at the largest limit
    said = f"RSA: no RAMDISK for this run (refused, no retry: {too_many_words(10**9)}" \
        "); released to start: it reads from the PFS"
    assert fit_comment(said) == said
    assert read == [51]  # never the whole tree: limit + 1 objects read, then refused
    assert bases.load("job77-c1") is None  # nothing recorded
    assert not (area / "state").exists() or not list((area / "state").iterdir())


@root_only
def test_a_writable_input_at_the_limit_is_taken_whole(area: Path, user: Identity) -> None:
    pfs = dataset(area, user, 46)  # 50 objects
    bases = Bases(area / "state")
    assert record_stage_in(bases, "job77-c1", make_engine(user), str(pfs), limit=50) == 50
    stored = bases.load("job77-c1")
    assert stored is not None and len(stored.base) == 50
    # without a limit (staging.writable_objects empty) as before
    assert record_stage_in(bases, "job78-c1", make_engine(user), str(pfs)) == 50


@root_only
def test_the_refusal_crosses_the_staging_worker_intact(area: Path, user: Identity,
                                                       pool: EnginePool) -> None:
    pfs = dataset(area, user, 60)
    twin = WorkerEngine.of(pool, make_engine(user))
    assert isinstance(twin, WorkerEngine)
    bases = Bases(area / "state")
    with pytest.raises(StagingError) as e:
        twin.record_base(str(bases.root), "job77-c1", str(pfs), 10)
    assert e.value.permanent and str(e.value) == too_many_words(10)
    assert bases.load("job77-c1") is None
    # the worker stays usable (a refusal is no crash)
    assert twin.record_base(str(bases.root), "job77-c1", str(pfs), 64) == 64
    assert pool.started == 1


class LimitedPool(RecordingPool):
    """A recording pool whose base scan refuses, as a worker would, a DATA_IN of 4
    objects above the limit it was sent."""

    def run(self, request: Mapping[str, Any], *, cancel: CancelToken, progress: Any = None,
            gate: Any = None) -> Any:
        args = request["args"]
        if request["op"] == "record_base" and args["limit"] is not None \
                and args["limit"] < 4:
            self.calls.append(request)
            raise StagingError(too_many_words(args["limit"]), permanent=True)
        return super().run(request, cancel=cancel, progress=progress, gate=gate)


def test_the_data_path_refuses_the_stage_in_of_a_writable_input_above_the_limit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """staging.writable_objects reaches the base scan; its refusal ends the stage-in
    as refused (no retry) before any copy."""
    pool = LimitedPool(None)
    dp, registry = data_path(tmp_path, pool, monkeypatch)
    monkeypatch.setattr(dp, "cfg", replace(dp.cfg, staging=replace(dp.cfg.staging,
                                                                    writable_objects=3)))
    staged = run(registry, tmp_path, "7/1/stage-in/1", writable=True)
    assert staged.result is Result.REFUSED, staged
    assert pool.ops == ["record_base"]  # nothing copied
    assert pool.calls[0]["args"]["limit"] == 3
    assert staged.message == too_many_words(3)
    # a read-only input of the same DATA_IN is never scanned for a base, nor limited
    ro = run(registry, tmp_path, "8/1/stage-in/1")
    assert ro.result is Result.OK, ro
    assert pool.ops[1:] == ["stage_in"]
