"""A user's PRE/POSTPROCESS that prints without end never fills rsad's memory.

rsad ran the script with its stdout and stderr read whole into its own memory (the
result kept only the last ``TAIL`` characters of each, after the end): a POSTPROCESS
printing ``yes`` for its 24 h timeout held all of it in rsad, until the kernel's OOM
killer took rsad down (every job's stage-out with it), again at every retry. Now only
the tails are held while the script runs (``Host.run(keep=)``, ``SCRIPT_KEEP``).

Real processes on this machine (LocalHost) as an unprivileged user; allocations counted
by ``tracemalloc``. Needs root (to switch to the user ``nobody``).
"""

from __future__ import annotations

import os
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from rsa_scheduler.hosts import LocalHost
from rsa_scheduler.runner import Identity
from rsa_scheduler.staging import StagingEngine
from rsa_scheduler.staging.report import TAIL

T = TypeVar("T")

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run as a user")

#: what the script prints: far more than any tail, well within a unit test's time
PRINTED = 48 << 20
#: the most rsad may allocate for it at once (the tails, the pipes' read chunks)
HELD = 4 << 20


def _peak(fn: Callable[[], T]) -> tuple[T, int]:
    tracemalloc.start()
    try:
        got = fn()
        return got, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.fixture
def ram(area: Path) -> Iterator[str]:
    yield str(area / "ram")


def _engine(user: Identity, **kw: object) -> StagingEngine:
    return StagingEngine([LocalHost("rsa1")], user, job_id="88", **kw)  # type: ignore[arg-type]


def test_a_script_printing_without_end_holds_only_its_tails(ram: str, user: Identity) -> None:
    eng = _engine(user)
    eng.prepare_root(ram)
    script = ["sh", "-c", f"head -c {PRINTED} /dev/zero | tr '\\0' o; echo; echo last; "
              f"head -c {PRINTED} /dev/zero | tr '\\0' e >&2; echo oops >&2; exit 4"]
    res, peak = _peak(lambda: eng.run_script(script, "stage-out", ramdisk=ram))
    assert peak < HELD, f"rsad held {peak >> 20} MiB of a script's output"
    assert res.returncode == 4
    assert res.stdout_tail.endswith("o\nlast\n")
    assert len(res.stdout_tail) == TAIL
    assert res.stderr_tail.endswith("eeeoops\n")


def test_a_script_that_times_out_printing_still_shows_its_last_words(
        ram: str, user: Identity) -> None:
    eng = _engine(user, timeout=1.5)
    eng.prepare_root(ram)
    script = ["sh", "-c", "echo started >&2; while :; do echo still going >&2; done"]
    res, peak = _peak(lambda: eng.run_script(script, "stage-out", ramdisk=ram))
    assert peak < HELD, f"rsad held {peak >> 20} MiB of a script's output"
    assert res.returncode is None and "timed out" in res.summary()
    assert "still going" in res.stderr_tail.splitlines()
    quiet = _engine(user, timeout=1.0).run_script(
        ["sh", "-c", "echo started >&2; exec sleep 30"], "stage-out", ramdisk=ram)
    assert quiet.returncode is None and quiet.stderr_tail == "started\n"  # not lost


def test_keep_holds_the_tails_and_the_exit_status_of_a_plain_command() -> None:
    host = LocalHost()
    done, peak = _peak(lambda: host.run(
        ["sh", "-c", f"head -c {PRINTED} /dev/zero; printf end; printf err >&2"],
        timeout=60, keep=1000, input="ignored"))
    assert peak < HELD
    assert done.stdout.endswith("\0end") and len(done.stdout) == 1000
    assert done.stderr == "err"
    whole = host.run(["sh", "-c", "cat; printf x"], timeout=60, input="in ")
    assert whole.stdout == "in x"  # without keep: all of it, as before
    fed = host.run(["sh", "-c", "cat; printf x"], timeout=60, input="in ", keep=10)
    assert fed.stdout == "in x"  # input reaches the command with keep too
