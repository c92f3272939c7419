"""Staging engines in worker processes (daemon/engines.py, daemon/stagingworker.py), for real:
worker processes, the engine's real commands on this machine (LocalHost) as ``nobody``.

What must hold: the same results and errors as the engine in rsad's process; progress,
log lines and the PFS gate cross the pipe; a cancel kills the copy's commands and leaves
the worker usable; a worker killed mid-call fails the call (retryable) and is replaced;
a worker whose rsad is gone (pipe closed) kills its copy and exits.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil
import pytest
from prometheus_client import generate_latest

from rsa_scheduler.contain import issued_now, parse_reaped, reap_argv
from rsa_scheduler.daemon.engines import (
    EnginePool,
    EngineWorker,
    PoolCounts,
    WorkerEngine,
    WorkerGone,
)
from rsa_scheduler.daemon.metrics import Metrics
from rsa_scheduler.daemon.published import Published
from rsa_scheduler.daemon.stagingworker import error_from_json, error_to_json
from rsa_scheduler.errors import RsaError
from rsa_scheduler.hosts import Cancelled, CancelToken, LocalHost
from rsa_scheduler.runner import Identity
from rsa_scheduler.staging import Progress, StagingEngine, StagingError
from rsa_scheduler.staging.flush import FlushGate
from tests.unit.conftest import scratch_area
from tests.unit.test_staging_engine import ODD, tree_state

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run as a user")


def engine(user: Identity, **kw: Any) -> StagingEngine:
    return StagingEngine([LocalHost("rsa1"), LocalHost("rsa2")], user, job_id="77", **kw)


def marker_procs(marker: str) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["cmdline"]):
        if marker in " ".join(p.info["cmdline"] or ()):
            out.append(p)
    return out


def slow_engine(user: Identity, marker: str, **kw: Any) -> StagingEngine:
    """A copy that runs until it is killed (a site's copy_command that sleeps first)."""
    return engine(user, copy_tool="custom",
                  copy_command=f"sleep {marker} && rsync -a --from0 --files-from={{list}} "
                               "{recursive} {src}/ {dst}/",
                  **kw)


def stage_again(pool: EnginePool, area: Path, user: Identity) -> Any:
    """A fresh engine stages the tree into ram2 through ``pool`` (is the pool usable?)."""
    again = engine(user)
    again.prepare_root(str(area / "ram2"))
    return WorkerEngine.of(pool, again).stage_in(str(area / "src"), str(area / "ram2"))


def wait_for(cond: Any, timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.05)


def test_a_worker_stages_in_out_and_verifies_like_the_engine_itself(
        area: Path, user: Identity, pool: EnginePool,
        caplog: pytest.LogCaptureFixture) -> None:
    reports: list[Progress] = []
    eng = engine(user, progress=reports.append, progress_interval=0.0)
    twin = WorkerEngine.of(pool, eng)
    assert isinstance(twin, WorkerEngine)
    eng.prepare_root(str(area / "ram"))
    caplog.set_level(logging.INFO)
    stats = twin.stage_in(str(area / "src"), str(area / "ram"))
    assert tree_state(area / "ram") == tree_state(area / "src")
    assert stats.files == 51 and stats.dirs == 3 and set(stats.per_node) <= {"rsa1", "rsa2"}
    assert reports and reports[-1].files_done == reports[-1].files_total == 51
    out = area / "outs" / "out"
    assert twin.stage_out(str(area / "ram"), str(out)).files == 51
    assert tree_state(out) == tree_state(area / "src")
    v = twin.verify(str(area / "ram"), str(out))
    assert v.ok and v.checked == 54, v.summary()
    # the worker's log lines are rsad's (its handlers, its logger names)
    assert any("verified 54 objects" in r.getMessage() and r.name.startswith(
        "rsa_scheduler.staging") for r in caplog.records)
    assert pool.started == 1  # one worker, kept for the next call


def test_differences_and_errors_cross_the_pipe_intact(area: Path, user: Identity,
                                                      pool: EnginePool) -> None:
    eng = engine(user)
    twin = WorkerEngine.of(pool, eng)
    eng.prepare_root(str(area / "ram"))
    twin.stage_in(str(area / "src"), str(area / "ram"))
    out = area / "outs" / "out"
    twin.stage_out(str(area / "ram"), str(out))
    (out / ODD).unlink()
    v = twin.verify(str(area / "ram"), str(out))
    assert not v.ok and {d.path: d.what for d in v.differences} == {
        os.fsencode(ODD): "missing"}
    assert v.summary(str(out)) == eng.verify(str(area / "ram"), str(out)).summary(str(out))
    with pytest.raises(StagingError) as missing:  # the same classified error
        twin.stage_in(str(area / "nope"), str(area / "ram"))
    with pytest.raises(StagingError) as here:
        eng.stage_in(str(area / "nope"), str(area / "ram"))
    assert missing.value.permanent and str(missing.value) == str(here.value)
    assert missing.value.node == here.value.node


def test_the_error_codec_keeps_what_the_daemon_acts_on() -> None:
    e = error_from_json(error_to_json(StagingError("eio", permanent=False, node="rsa2",
                                                   unanswered=True)))
    assert isinstance(e, StagingError) and (e.permanent, e.node, e.unanswered) == (
        False, "rsa2", True)
    assert isinstance(error_from_json(error_to_json(Cancelled("demoted"))), Cancelled)
    bug = error_from_json(error_to_json(KeyError("x")))
    assert type(bug) is RsaError and "internal error" in str(bug)


def test_a_cancel_kills_the_copy_and_leaves_the_worker_usable(
        area: Path, user: Identity, pool: EnginePool) -> None:
    marker = "3601.4142"
    token = CancelToken()
    eng = slow_engine(user, marker, cancel=token)
    eng.prepare_root(str(area / "ram"))
    twin = WorkerEngine.of(pool, eng)
    def demote() -> None:
        wait_for(lambda: marker_procs(marker))
        token.cancel("demoted")

    threading.Thread(target=demote, daemon=True).start()
    t0 = time.monotonic()
    with pytest.raises(Cancelled, match="demoted"):
        twin.stage_in(str(area / "src"), str(area / "ram"))
    assert time.monotonic() - t0 < 30
    wait_for(lambda: not marker_procs(marker), 10)
    assert stage_again(pool, area, user).files == 51
    assert pool.started == 1


@pytest.fixture
def area_seen_by_contained(user: Identity) -> Iterator[Path]:
    """The scratch area outside /tmp: a contained command has a private /tmp (issue 36)
    and would not see one there."""
    if not os.access("/run", os.W_OK):
        pytest.skip("needs a writable /run (root)")
    with scratch_area(user, where="/run") as base:
        yield base


def test_a_worker_killed_mid_call_fails_the_call_and_is_replaced(
        area_seen_by_contained: Path, user: Identity, pool: EnginePool) -> None:
    area = area_seen_by_contained
    marker = "3602.7182"
    job = replace(user, scope="77")  # contained, as rsad runs every user command
    eng = slow_engine(job, marker)
    eng.prepare_root(str(area / "ram"))

    def kill_left() -> str:  # what DataPath.kill_left does on the job's nodes
        done = LocalHost().run(reap_argv("77", issued_now()), timeout=60)
        return f"killed {parse_reaped(done.stdout)[0]}"

    def kill_worker() -> None:
        # the copy itself, not its wrapper: the wrapper shows the marker before it joined
        # the job's cgroup, and REAP would not find a copy killed in that window
        wait_for(lambda: any(p.info["cmdline"] == ["sleep", marker]
                             for p in marker_procs(marker)))
        for child in psutil.Process().children():
            if "rsa_scheduler.daemon.stagingworker" in " ".join(child.cmdline()):
                child.send_signal(signal.SIGKILL)

    metrics = Metrics()
    metrics.watch(Published(), pool)
    assert "rsa_staging_workers_lost_total 0.0" in generate_latest(metrics.registry).decode()
    threading.Thread(target=kill_worker, daemon=True).start()
    with pytest.raises(WorkerGone) as gone:
        WorkerEngine.of(pool, eng, kill_left).stage_in(str(area / "src"), str(area / "ram"))
    # operators see it (the action's outcome says which worker and what it left)
    assert "rsa_staging_workers_lost_total 1.0" in generate_latest(metrics.registry).decode()
    assert not getattr(gone.value, "permanent", False)
    assert "ended during stage-in (exit -9); killed " in str(gone.value)
    assert str(gone.value).endswith("will retry")
    assert not marker_procs(marker)  # its copy is dead before the call failed
    assert stage_again(pool, area, user).files == 51
    assert pool.started == 2
    assert pool.counts() == PoolCounts(busy=0, idle=1, started=2, lost=1)


def test_a_worker_whose_rsad_is_gone_kills_its_copy_and_exits(
        area: Path, user: Identity) -> None:
    marker = "3603.1415"
    eng = slow_engine(user, marker)
    eng.prepare_root(str(area / "ram"))
    twin = WorkerEngine(EnginePool(), eng, [{"kind": "local", "name": "rsa1"}])
    worker = EngineWorker()
    worker.send({"call": twin._request("stage_in", src=str(area / "src"),
                                       ramdisk=str(area / "ram"))})
    wait_for(lambda: marker_procs(marker))
    worker._stdin.close()  # rsad died: its end of the pipe is closed
    assert worker.proc.wait(30) == 0
    wait_for(lambda: not marker_procs(marker), 10)


def test_a_stage_out_in_a_worker_waits_for_rsads_pfs_slot(
        area: Path, user: Identity, pool: EnginePool) -> None:
    gate = FlushGate("sjf", 1, [str(area / "outs")])
    eng = engine(user, gate=gate)
    eng.prepare_root(str(area / "ram"))
    eng.stage_in(str(area / "src"), str(area / "ram"))
    out = area / "outs" / "out"
    done: list[Any] = []
    with gate.slot("1", str(area / "outs" / "other"), 1):  # another job's flush holds it
        t = threading.Thread(target=lambda: done.append(WorkerEngine.of(pool, eng).stage_out(
            str(area / "ram"), str(out))))
        t.start()
        wait_for(lambda: gate.state().get(str(area / "outs"), {}).get("waiting") == 1)
        time.sleep(1.0)
        assert not done and not any(p.is_file() for p in out.rglob("*"))  # nothing copied
    t.join(60)
    assert done and done[0].files == 51 and tree_state(out) == tree_state(area / "src")
    assert gate.state() == {}  # the worker's slot was given back


def test_hosts_a_worker_cannot_rebuild_keep_the_engine_in_process(user: Identity) -> None:
    class Double(LocalHost):
        pass

    eng = StagingEngine([Double("rsa1")], user)
    assert WorkerEngine.of(EnginePool(), eng) is eng
    assert WorkerEngine.of(None, engine(user)).__class__ is StagingEngine



def test_a_call_that_arrives_while_the_last_answers_thread_returns_is_taken() -> None:
    """rsad sends the next call as soon as it read an answer: the worker must take it
    even if the thread that sent that answer has not returned yet."""
    import io

    from rsa_scheduler.daemon.stagingworker import Channel, Worker

    out = io.StringIO()
    w = Worker(io.StringIO(), Channel(out))
    w._call = threading.Thread(target=time.sleep, args=(0.5,))  # answered, still returning
    w._call.start()
    w._start({"op": "nope", "args": {}})  # joins it, then runs (and fails) the new call
    assert w._call is not None
    w._call.join(10)
    assert '"error"' in out.getvalue() and "unknown staging operation" in out.getvalue()


def test_workers_run_below_rsads_cpu_priority(area: Path, user: Identity) -> None:
    pool = EnginePool(nice=10)
    try:
        eng = engine(user)
        eng.prepare_root(str(area / "ram"))
        seen: list[int] = []

        def look(_p: Progress) -> None:
            for c in psutil.Process().children():
                if "rsa_scheduler.daemon.stagingworker" in " ".join(c.cmdline()):
                    seen.append(c.nice())

        eng.progress, eng.progress_interval = look, 0.0
        WorkerEngine.of(pool, eng).stage_in(str(area / "src"), str(area / "ram"))
        # 10 below ours, at most 19 (the kernel's floor: a test run already niced)
        assert seen and set(seen) == {min(os.nice(0) + 10, 19)}
    finally:
        pool.close()


def test_a_progress_report_rsad_cannot_record_stops_no_copy(area: Path, user: Identity,
                                                            pool: EnginePool) -> None:
    def broken(_p: Progress) -> None:
        raise RuntimeError("store busy")

    eng = engine(user, progress=broken, progress_interval=0.0)
    eng.prepare_root(str(area / "ram"))
    assert WorkerEngine.of(pool, eng).stage_in(str(area / "src"), str(area / "ram")).files == 51
    assert tree_state(area / "ram") == tree_state(area / "src")
    assert pool.started == 1  # and the worker is kept


def test_a_failure_on_rsads_side_mid_call_stops_the_worker_and_reaps(
        area: Path, user: Identity, pool: EnginePool) -> None:
    """The worker is never given back mid-call: the next call would meet the last one."""

    class BrokenGate(FlushGate):
        def slot(self, *a: Any, **kw: Any) -> Any:
            raise OSError("gate state lost")

    eng = engine(user, gate=BrokenGate("sjf", 1))
    eng.prepare_root(str(area / "ram"))
    eng.stage_in(str(area / "src"), str(area / "ram"))
    lost: list[str] = []

    def reap() -> str:
        lost.append("reaped")
        return "reaped"

    with pytest.raises(WorkerGone, match=r"could not follow the staging worker .*"
                                         r"gate state lost.*; reaped; will retry"):
        WorkerEngine.of(pool, eng, reap).stage_out(str(area / "ram"),
                                                   str(area / "outs" / "out"))
    assert lost == ["reaped"]
    again = engine(user)
    assert WorkerEngine.of(pool, again).verify(str(area / "ram"), str(area / "src")).ok
    assert pool.started == 2
    assert pool.counts().lost == 1  # stopped by rsad mid-call: lost too


def test_a_worker_line_over_the_limit_is_never_read_whole(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A line past LINE_LIMIT (a broken worker: results are bounded far below it) fails
    the call and kills the worker after LINE_LIMIT + 1 characters, not the whole line."""
    import rsa_scheduler.daemon.engines as engines

    monkeypatch.setattr(engines, "LINE_LIMIT", 1000)
    spew = ("import sys\nsys.stdin.readline()\n"
            "sys.stdout.write('{\"result\": \"' + 'x' * 5000 + '\"}\\n'); sys.stdout.flush()\n"
            "sys.stdin.readline()\n")
    worker = engines.EngineWorker([sys.executable, "-c", spew])
    try:
        with pytest.raises(engines.WorkerGone, match=r"wrote a line of more than \S+ MiB during "
                                                    "stage-out, not the protocol"):
            worker.call({"op": "stage_out"}, cancel=CancelToken())
        assert worker.proc.wait(timeout=10) != 0  # killed
    finally:
        worker.kill()
