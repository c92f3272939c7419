"""A staging worker's memory is bounded (staging.engine_memory: its RLIMIT_DATA).

Before, nothing bounded it: an operation whose manifests outgrew every limit (a
writable input before staging.writable_objects, a listed tree with copy_tool rsync, a
path nobody foresaw) grew the worker until the kernel's OOM killer chose a process on
rsad's host, perhaps slurmctld or rsad. What must hold: the pool starts its workers
with the bound; a worker under it stages, verifies and writes back as before, threads
and all; an operation that needs more fails alone with one line naming the key,
retryably, and its worker is never reused; the pool goes on with a fresh one. Real
workers and real commands as ``nobody`` (needs root) where files move.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rsa_scheduler.config import load_config_text
from rsa_scheduler.daemon.data import record_base
from rsa_scheduler.daemon.engines import EnginePool, WorkerEngine
from rsa_scheduler.daemon.stagingworker import (
    error_from_json,
    error_to_json,
    main,
    memory_words,
    parse_args,
)
from rsa_scheduler.daemon.wiring import make_engines
from rsa_scheduler.daemon.writeback import Bases
from rsa_scheduler.runner import Identity
from rsa_scheduler.staging import StagingError
from tests.unit.conftest import root_only
from tests.unit.test_engine_worker import engine
from tests.unit.test_staging_engine import tree_state

MiB = 1 << 20


def status(pid: int, key: str) -> int:
    """A ``/proc/PID/status`` figure in bytes (VmData, VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


def data_limit(pid: int) -> str:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max data size"):
            return " ".join(line.split()[3:5])
    raise KeyError("Max data size")


def test_the_worker_takes_its_bound_on_its_command_line() -> None:
    assert parse_args([]) == {}
    assert parse_args(["--nice", "10", "--memory", "4096"]) == {"nice": 10, "memory": 4096}
    assert parse_args(["--memory", "4096", "--nice", "3"]) == {"nice": 3, "memory": 4096}
    for bad in (["--memory"], ["--memory", "0"], ["--memory", "x"], ["--size", "1"],
                ["--nice", "1", "--nice", "2"]):
        with pytest.raises(ValueError):
            parse_args(bad)
        assert main(bad) == 2
    assert EnginePool(memory=4 << 30, nice=10).argv[-4:] == ("--nice", "10", "--memory",
                                                             str(4 << 30))
    assert "--memory" not in EnginePool().argv


def test_rsad_starts_its_workers_with_staging_engine_memory() -> None:
    cfg = load_config_text("pool:\n  nodes:\n    - names: rsa1\n      capacity: 2G\n")
    assert cfg.staging.engine_memory == 8 << 30  # the default
    pool = make_engines(cfg)
    assert pool is not None and pool.argv[-2:] == ("--memory", str(8 << 30))
    off = load_config_text("pool:\n  nodes:\n    - names: rsa1\n      capacity: 2G\n"
                           "staging:\n  engine_memory: null\n")
    pool = make_engines(off)
    assert pool is not None and "--memory" not in pool.argv


def test_memory_that_ran_out_is_a_retryable_error_of_a_spent_worker() -> None:
    for e in (MemoryError(), RuntimeError("can't start new thread")):
        msg = error_to_json(e, "write_back", 96 * MiB)
        assert msg["spent"] is True and msg["permanent"] is False
        err = error_from_json(msg)
        assert isinstance(err, StagingError) and not err.permanent
        assert str(err) == memory_words("write_back", 96 * MiB)
    line = memory_words("write_back", 96 * MiB)
    assert "a write-back" in line and "staging.engine_memory: 96M" in line
    assert "will retry" in line and "\n" not in line
    assert "staging.engine_memory" not in memory_words("stage_in", None)
    # any other RuntimeError is no memory's
    assert "spent" not in error_to_json(RuntimeError("boom"), "stage_in", MiB)


def test_a_worker_that_answers_spent_is_never_given_another_call() -> None:
    """rsad's side: the call fails with the worker's line, the worker is retired."""
    answer = json.dumps({"error": error_to_json(MemoryError(), "verify", 64 * MiB)})
    fake = (sys.executable, "-c", "import sys; sys.stdin.readline(); "
            f"print({answer!r}, flush=True); sys.stdin.read()")
    pool = EnginePool(argv=fake)
    try:
        from rsa_scheduler.hosts import CancelToken

        for started in (1, 2):
            with pytest.raises(StagingError) as e:
                pool.run({"op": "verify"}, cancel=CancelToken())
            assert "staging.engine_memory: 64M" in str(e.value)
            assert pool.started == started and pool.counts().idle == 0
    finally:
        pool.close()


@pytest.fixture
def bounded() -> Iterator[EnginePool]:
    p = EnginePool(memory=512 * MiB)
    yield p
    p.close()


@root_only
def test_a_bounded_worker_stages_with_many_threads_as_before(
        area: Path, user: Identity, bounded: EnginePool) -> None:
    """512M (a sixteenth of the default) is plenty for a normal copy: 2 nodes x 8
    streams, each thread's 8 MiB stack counted in the bound too."""
    eng = engine(user, parallel_per_node=8)
    twin = WorkerEngine.of(bounded, eng)
    assert isinstance(twin, WorkerEngine)
    eng.prepare_root(str(area / "ram"))
    assert twin.stage_in(str(area / "src"), str(area / "ram")).files == 51
    pid = bounded._idle[0].pid
    assert data_limit(pid) == f"{512 * MiB} {512 * MiB}"
    out = area / "outs" / "out"
    assert twin.stage_out(str(area / "ram"), str(out)).files == 51
    assert tree_state(out) == tree_state(area / "src")
    assert twin.verify(str(area / "ram"), str(out)).ok
    assert status(pid, "VmHWM") < 128 * MiB
    assert bounded.started == 1


@root_only
def test_an_operation_above_the_bound_fails_alone_and_the_pool_goes_on(
        area: Path, user: Identity) -> None:
    """A real worker bounded 24 MiB above its own idle size, a writable input's base
    scan of 2,000 symlinks of 4,015-byte targets (~60 MB in a worker, as ~50,000
    plain names would be): a MemoryError, answered as one line; the next call gets a
    fresh worker and succeeds. No limit on the input: the bound is the backstop of
    what the limits did not foresee."""
    pfs = area / "outs" / "big"
    pfs.mkdir()
    os.chown(pfs, user.uid, user.gid)
    target = "t" * 250 + ("/" + "t" * 250) * 15
    for i in range(2000):
        os.symlink(target, pfs / f"l{i}")
        os.lchown(pfs / f"l{i}", user.uid, user.gid)
    probe = EnginePool()
    try:
        small = WorkerEngine.of(probe, engine(user))
        assert isinstance(small, WorkerEngine)
        small.record_base(str(area / "probe"), "job1-c1", str(area / "src"))
        idle = status(probe._idle[0].pid, "VmData")
    finally:
        probe.close()
    bound = idle + 24 * MiB
    pool = EnginePool(memory=bound)
    try:
        twin = WorkerEngine.of(pool, engine(user))
        assert isinstance(twin, WorkerEngine)
        bases = Bases(area / "state")
        with pytest.raises(StagingError) as e:
            record_base(bases, twin, "job77-c1", str(pfs))
        assert not e.value.permanent
        assert str(e.value) == memory_words("record_base", bound)
        assert bases.load("job77-c1") is None
        assert pool.counts().idle == 0  # the spent worker was not kept
        # rsad goes on: the next call, a fresh worker
        assert record_base(bases, twin, "job78-c1", str(area / "src")) > 0
        assert pool.started == 2
    finally:
        pool.close()
