"""Stage-out ordering on the PFS (seed 003, TRIO; staging.flush): the pure rules, the gate
under threads, and real stage-outs (LocalHost, tar, as an unprivileged user) that wait
for their slot and keep everything."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from rsa_scheduler.hosts import Cancelled, CancelToken
from rsa_scheduler.runner import Identity
from rsa_scheduler.staging.flush import FlushGate, Waiter, admit, rank, submit_order, target_of
from tests.unit.test_staging_engine import make_engine, staged, tree_state


def test_the_target_is_the_longest_configured_parent_by_components() -> None:
    targets = ["/pfs", "/pfs/fast", "/scratch"]
    assert target_of("/pfs/fast/u/out", targets) == "/pfs/fast"
    assert target_of("/pfs/faster/u", targets) == "/pfs"  # a component, not a prefix
    assert target_of("/pfs", targets) == "/pfs"
    assert target_of("/home/u/out", targets) == "/"
    assert target_of("/pfs/./fast/../fast/x", targets) == "/pfs/fast"


def test_submit_order_reads_array_tasks_and_het_components() -> None:
    ids = ["120", "99", "100_7", "100_3", "100+1", "bogus"]
    assert sorted(ids, key=submit_order) == ["99", "100+1", "100_3", "100_7", "120", "bogus"]


def until(cond: Callable[[], object], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def w(job: str, nbytes: int, arrived: int, target: str = "/") -> Waiter:
    return Waiter(job, target, nbytes, arrived)


def test_fifo_admits_everyone_sjf_the_smallest_trio_the_oldest_then_smallest() -> None:
    waiting = [w("30", 10, 0), w("10", 500, 1), w("20", 5, 2), w("10", 50, 3)]
    assert admit(waiting, {}, "fifo", 2) == waiting
    assert [x.arrived for x in admit(waiting, {}, "sjf", 2)] == [2, 0]
    assert [x.arrived for x in admit(waiting, {}, "trio", 2)] == [3, 1]
    # one copying already: one free slot
    assert [x.arrived for x in admit(waiting, {"/": 1}, "sjf", 2)] == [2]
    assert admit(waiting, {"/": 2}, "trio", 2) == []
    assert sorted(waiting, key=lambda x: rank(x, "fifo")) == waiting


def test_targets_have_their_own_slots() -> None:
    waiting = [w("1", 9, 0, "/a"), w("2", 1, 1, "/a"), w("3", 5, 2, "/b")]
    got = admit(waiting, {"/a": 1}, "sjf", 2)
    assert sorted(x.job for x in got) == ["2", "3"]


def test_at_most_alpha_copy_at_once() -> None:
    gate = FlushGate("sjf", alpha=2)
    inside = []
    order: list[str] = []
    peak = [0]
    lock = threading.Lock()
    release = threading.Event()

    def stage_out(job: str, nbytes: int) -> None:
        with gate.slot(job, "/pfs/u/out", nbytes):
            with lock:
                inside.append(job)
                order.append(job)
                peak[0] = max(peak[0], len(inside))
            release.wait(10)
            with lock:
                inside.remove(job)

    first = [threading.Thread(target=stage_out, args=(j, 100)) for j in ("a", "b")]
    for t in first:
        t.start()
    until(lambda: len(order) == 2)
    later = [threading.Thread(target=stage_out, args=(j, n))
             for j, n in (("big", 10**9), ("small", 1), ("mid", 10**6))]
    for t in later:
        t.start()
    until(lambda: gate.state().get("/", {}).get("waiting", 0) == 3)
    assert gate.state() == {"/": {"copying": 2, "waiting": 3}}
    release.set()
    for t in first + later:
        t.join(10)
    assert peak[0] == 2
    assert sorted(order) == ["a", "b", "big", "mid", "small"]  # (order: one slot, below)
    assert gate.state() == {}


def test_with_one_slot_the_waiters_copy_smallest_first() -> None:
    gate = FlushGate("sjf", alpha=1)
    order: list[str] = []
    hold = threading.Event()

    def stage_out(job: str, nbytes: int) -> None:
        with gate.slot(job, "/pfs/u/out", nbytes):
            order.append(job)
            if job == "first":
                hold.wait(10)

    first = threading.Thread(target=stage_out, args=("first", 5))
    first.start()
    until(lambda: order == ["first"])
    later = [threading.Thread(target=stage_out, args=(j, n))
             for j, n in (("big", 10**9), ("small", 1), ("mid", 10**6))]
    for t in later:
        t.start()
    until(lambda: gate.state().get("/", {}).get("waiting", 0) == 3)
    hold.set()
    for t in [first, *later]:
        t.join(10)
    assert order == ["first", "small", "mid", "big"]


def test_a_cancelled_stage_out_gives_up_its_wait_and_its_place() -> None:
    gate = FlushGate("trio", alpha=1)
    token = CancelToken()
    got: list[BaseException] = []
    with gate.slot("5", "/pfs/x", 1):
        def wait() -> None:
            try:
                with gate.slot("6", "/pfs/y", 1, token.check):
                    pass
            except Cancelled as e:
                got.append(e)
        t = threading.Thread(target=wait)
        t.start()
        until(lambda: gate.state().get("/", {}).get("waiting"))
        token.cancel("demoted")
        t.join(5)
    assert got and gate.state() == {}


def test_fifo_and_no_cap_never_wait() -> None:
    for gate in (FlushGate("fifo", alpha=1), FlushGate("sjf", alpha=0)):
        with gate.slot("1", "/p", 1) as a, gate.slot("2", "/p", 1) as b:
            assert a == b == 0.0
    with pytest.raises(ValueError, match="expected one of"):
        FlushGate("lifo")


def test_real_stage_outs_wait_for_their_slot_and_keep_everything(
        area: Path, user: Identity) -> None:
    """Two jobs' stage-outs (real tar pipes, as the user) through one gate with alpha 1:
    the second copies only after the first gave its slot back, and both land whole."""
    gate = FlushGate("sjf", alpha=1)
    engines = []
    for n in (1, 2):
        eng = staged(area, user, gate=gate) if n == 1 else make_engine(user, gate=gate)
        engines.append(eng)
    ram = area / "ram"
    outs = [area / "outs" / "o1", area / "outs" / "o2"]
    for o in outs:
        o.mkdir()
        os.chown(o, user.uid, user.gid)
    held = threading.Event()
    go = threading.Event()
    results: dict[int, object] = {}

    def hold_slot() -> None:  # a third stage-out, elsewhere, holding the one slot
        with gate.slot("1", str(area / "outs"), 1):
            held.set()
            go.wait(10)

    holder = threading.Thread(target=hold_slot)
    holder.start()
    held.wait(5)

    def run(i: int) -> None:
        results[i] = engines[i].stage_out(str(ram), str(outs[i]))

    t = threading.Thread(target=run, args=(0,))
    t.start()
    until(lambda: gate.state().get("/", {}).get("waiting") or not t.is_alive())
    assert t.is_alive(), "the stage-out did not wait for the slot"
    assert not any(outs[0].iterdir())  # waiting: nothing copied yet
    go.set()
    holder.join(10)
    t.join(60)
    run(1)
    want = tree_state(ram)
    assert tree_state(outs[0]) == want and tree_state(outs[1]) == want
    assert gate.state() == {}
