"""The replay's I/O model: the PFS shared max-min fairly (never above its bandwidth, no
flow above its cap, no bandwidth left idle while a flow could use it) and job volumes
taken from the trace, the job's memory, or a seeded draw."""

from __future__ import annotations

import random

import pytest

from rsa_scheduler.sim.iomodel import FlowNet, IoParams, job_volumes
from rsa_scheduler.sim.swf import parse_job

LINE = "7 0 -1 600 64 -1 {mem} 64 900 -1 1 3 1 -1 1 1 -1 -1"


def test_equal_share_and_speed_up_when_one_ends() -> None:
    net = FlowNet(10.0)
    net.start("a", 100, 100.0, 0.0)
    net.start("b", 50, 100.0, 0.0)
    assert net.rates() == {"a": 5.0, "b": 5.0}
    assert net.next_done() == (10.0, "b")
    assert net.stop("b", 10.0) == pytest.approx(0.0)
    assert net.rates() == {"a": 10.0}
    assert net.next_done() == (15.0, "a")
    assert net.stop("a", 15.0) == pytest.approx(0.0)
    assert net.busy_bytes == pytest.approx(150.0)
    assert net.peak == 10.0


def test_caps_are_met_first() -> None:
    net = FlowNet(10.0)
    net.start("slow", 10, 2.0, 0.0)
    net.start("fast", 80, 100.0, 0.0)
    assert net.rates() == {"slow": 2.0, "fast": 8.0}
    net.start("mid", 10, 3.0, 0.0)
    assert net.rates() == {"slow": 2.0, "mid": 3.0, "fast": 5.0}


def test_cancel_leaves_the_rest() -> None:
    net = FlowNet(10.0)
    net.start("a", 100, 100.0, 0.0)
    net.start("b", 100, 100.0, 0.0)
    assert net.stop("a", 4.0) == pytest.approx(80.0)
    assert "a" not in net and len(net) == 1
    nxt = net.next_done()
    assert nxt is not None and nxt[1] == "b" and nxt[0] == pytest.approx(12.0)
    with pytest.raises(ValueError, match="time went backwards"):
        net.start("c", 1, 1.0, 3.0)


def test_random_flows_never_exceed_the_link_and_leave_nothing_idle() -> None:
    rng = random.Random(4)
    net = FlowNet(1000.0)
    now = 0.0
    live: list[str] = []
    saturated = 0
    for i in range(2000):
        now += rng.random()
        if live and rng.random() < 0.45:
            net.stop(live.pop(rng.randrange(len(live))), now)
        else:
            fid = f"f{i}"
            net.start(fid, rng.uniform(1, 1e4), rng.choice([10.0, 100.0, 400.0, 5000.0]), now)
            live.append(fid)
        rates, caps = net.rates(), net.caps()
        total = sum(rates.values())
        assert total <= 1000.0 * (1 + 1e-9)
        assert all(rates[f] <= caps[f] for f in rates)
        if any(rates[f] < caps[f] for f in rates):
            # some flow wants more: the link must be full (work-conserving)
            assert total == pytest.approx(1000.0)
            saturated += 1
        else:
            assert total <= 1000.0  # everyone at its cap
    assert saturated > 100  # the link was contended often: the check above was exercised
    assert net.peak <= 1000.0 * (1 + 1e-9)


def test_volumes_from_the_trace_memory_or_a_seeded_draw() -> None:
    p = IoParams(seed=3)
    traced = parse_job(LINE.format(mem=-1) + " 100 200 64", "t:1", 1)
    assert job_volumes(traced, p).source == "trace"
    assert (job_volumes(traced, p).input_bytes, job_volumes(traced, p).output_files) == (100, 64)
    mem = job_volumes(parse_job(LINE.format(mem=1024), "t:1", 1), p)
    assert (mem.source, mem.input_bytes, mem.output_bytes) == ("memory", 64 * 2**20, 64 * 2**20)
    job = parse_job(LINE.format(mem=-1), "t:1", 1)
    drawn = job_volumes(job, p)
    assert drawn.source == "synthetic" and drawn.input_bytes > 0 and drawn.output_files == 1
    assert job_volumes(job, IoParams(seed=3)) == drawn  # same seed, same job: same draw
    assert job_volumes(job, IoParams(seed=4)) != drawn
    assert job_volumes(job, IoParams(seed=3, fpp_fraction=1.0)).output_files == 64


def test_params_are_validated() -> None:
    with pytest.raises(ValueError, match="pfs_bw must be > 0"):
        IoParams(pfs_bw=0)
    with pytest.raises(ValueError, match="fpp_fraction"):
        IoParams(fpp_fraction=2)
