"""bench/bench_fs.py's pure parts: where in the wall clock's second each run starts
(``--phases``), so runs cover the second evenly."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).parent.parent.parent / "bench" / "bench_fs.py"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_fs", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_fs", module)
    spec.loader.exec_module(module)
    return module


def test_runs_start_in_the_middles_of_equal_slices_of_a_second() -> None:
    bench = _bench()
    assert [bench.run_phase(i, 4) for i in range(4)] == [0.125, 0.375, 0.625, 0.875]
    assert bench.run_phase(0, 1) == 0.5


@pytest.mark.parametrize(("now", "phase", "delay"), [
    (100.25, 0.5, 0.25), (100.75, 0.5, 0.75), (100.5, 0.5, 0.0), (7.0, 0.125, 0.125)])
def test_the_delay_reaches_the_phase_within_a_second(now: float, phase: float,
                                                     delay: float) -> None:
    got = _bench().phase_delay(now, phase)
    assert 0.0 <= got < 1.0 and got == pytest.approx(delay)
    assert (now + got) % 1.0 == pytest.approx(phase)
