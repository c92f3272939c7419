"""A big held array beside another user's job (issue 39), against the lab's real Slurm:
the array's tasks hold at most their share of the RSA nodes (``allocation.array_share``),
the other user's on-deck job still gets RSA nodes, and rsad's loop stays quick while it
judges and releases every held task (no Slurm call per held task on the loop:
daemon/starthold.py; at most ``FIRST_SIGHTS_PER_CYCLE`` new jobs a cycle:
daemon/cycle.py).

On d0d1991 each pending task of the array took RSA nodes with no share (the array,
ahead of the other job, took the whole pool) and every held task cost one ``scontrol
show job`` on rsad's loop. About rsad and the RSA nodes alone: queue-mode lab only.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.integration.conftest import as_user
from tests.integration.slurmkit import make_jobs, restart_lab_rsad, root, wait_for
from tests.integration.test_rsad_staging import fill, rsa_job

pytestmark = pytest.mark.once

TASKS = 200
METRICS = "http://127.0.0.1:9465/metrics"  # lab/rsalab/rsad.py METRICS
#: no cycle of rsad's loop may take longer (a bucket of rsa_cycle_seconds): on d0d1991 the
#: first cycle that saw the held array made 200 `scontrol show job` calls
SLOW_CYCLE = "2.5"


@contextmanager
def _array_share(lab: Mapping[str, str], share: str) -> Iterator[None]:
    """The lab's rsad restarted with ``allocation.array_share`` (the lab's is 1: no
    limit); back afterwards."""
    conf = Path(lab["RSA_LAB_RSA_CONFIG"])
    original = conf.read_text()
    assert original.count("\n  array_share: 1\n") == 1
    conf.write_text(original.replace("\n  array_share: 1\n", f"\n  array_share: {share}\n"))
    try:
        restart_lab_rsad(signal.SIGTERM)
        yield
    finally:
        conf.write_text(original)
        restart_lab_rsad(signal.SIGTERM)


def _slow_cycles() -> tuple[float, float]:
    """(cycles so far, of which longer than SLOW_CYCLE s), from rsad's own metrics."""
    with urllib.request.urlopen(METRICS, timeout=10) as resp:
        text = resp.read().decode()
    count = float(re.search(r"^rsa_cycle_seconds_count (\S+)$", text, re.M)[1])  # type: ignore[index]
    quick = float(re.search(  # type: ignore[index]
        rf'^rsa_cycle_seconds_bucket{{le="{SLOW_CYCLE}"}} (\S+)$', text, re.M)[1])
    return count, count - quick


def _rsa_holders(lab: Mapping[str, str]) -> tuple[dict[str, str], float]:
    """RSA node -> the job holding it ("" free), by ``rsa status``; and how long rsad
    took to answer (an API read is answered by rsad's loop between its cycles)."""
    started = time.monotonic()
    out = subprocess.run([f"{lab['RSA_LAB_VENV']}/bin/rsa", "status", "--json"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    took = time.monotonic() - started
    return {n["name"]: n["job"] or "" for n in json.loads(out)["nodes"]}, took


@pytest.fixture()
def areas(lab: Mapping[str, str]) -> Iterator[tuple[Path, Path]]:
    mine = Path(lab["RSA_LAB_PFS"]) / f"array-share-{time.monotonic_ns()}"
    other = Path(lab["RSA_LAB_OTHER_PFS"]) / f"array-share-{time.monotonic_ns()}"
    for user, base in ((lab["RSA_LAB_USER"], mine), (lab["RSA_LAB_OTHER_USER"], other)):
        done = as_user(lab, user, ["mkdir", "-p", f"{base}/out"])
        assert done.returncode == 0, done.stderr
    yield mine, other
    subprocess.run(["rm", "-rf", str(mine), str(other)], check=False, timeout=60)


def test_a_big_held_array_leaves_another_users_job_its_rsa_nodes(
        lab: Mapping[str, str], areas: tuple[Path, Path]) -> None:
    mine, other = areas
    array_script = (f"#!/bin/bash\n#SBATCH -t 1\n#SBATCH --array=0-{TASKS - 1}\n"
                    f"#RSA_DATA_OUT={mine}/out\n#RSA_EARLY_START=wait\ntrue\n")
    # rsaother's job waits for nodes in the other partition (the same nodes): on-deck
    # there while the array is next in its own
    other_script = (f"#!/bin/bash\n#SBATCH -t 1\n#SBATCH -p shared\n"
                    f"#RSA_DATA_OUT={other}/out\ntrue\n")
    pool = len(lab["RSA_LAB_RSA_ADDRESSES"].split(","))
    share = pool // 2  # array_share 0.5
    with _array_share(lab, "0.5"), make_jobs(lab) as jobs:
        fill(jobs)
        cycles0, slow0 = _slow_cycles()
        array = jobs.submit(script=array_script)
        theirs = jobs.submit(script=other_script, user=lab["RSA_LAB_OTHER_USER"])
        most, slowest = 0, 0.0

        def served() -> bool:
            nonlocal most, slowest
            holders, took = _rsa_holders(lab)
            slowest = max(slowest, took)
            most = max(most, sum(j.startswith(f"{array}_") for j in holders.values()))
            data = rsa_job(lab, theirs) or {}
            return bool(data.get("nodes")) and most > 0

        wait_for("rsaother's job gets RSA nodes beside the array", served, timeout=120,
                 every=0.5)
        # the array's tasks went on-deck too and were kept to their share meanwhile
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            served()
            time.sleep(0.5)
        queue = root(lab, "squeue", "-h", "-r", "-j", array, "-o", "%i %r")
        assert 0 < most <= share, (most, queue)
        cycles, slow = _slow_cycles()
        assert cycles - cycles0 >= 3, "rsad's loop stopped cycling"
        assert slow - slow0 == 0, f"{slow - slow0:g} cycle(s) took over {SLOW_CYCLE}s"
        assert slowest < 5, f"rsad took {slowest:.1f}s to answer `rsa status`"
