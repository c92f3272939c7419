"""A big held array beside another user's job (issue 39), against the lab's real Slurm:
the array's tasks that could start hold at most their share of the RSA nodes
(``allocation.array_share``), the other user's job still gets RSA nodes, and rsad's
loop stays quick while it judges and releases every held task (no Slurm call per held
task on the loop: daemon/starthold.py; at most ``FIRST_SIGHTS_PER_CYCLE`` new jobs a
cycle: daemon/cycle.py).

On d0d1991 every task judged able to start took RSA nodes with no share, and every held
task cost one ``scontrol show job`` on rsad's loop. About rsad and the RSA nodes alone:
queue-mode lab only (not marked ``lockin``: the priority lab does not run it).
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
from tests.integration.test_rsad_staging import rsa_job

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


def _rsa_view(lab: Mapping[str, str]) -> tuple[dict[str, str], list[str], float]:
    """RSA node -> the job holding it ("" free), and the on-deck jobs, by ``rsa status``;
    and how long rsad took to answer (an API read is answered by rsad's loop between its
    cycles)."""
    started = time.monotonic()
    out = subprocess.run([f"{lab['RSA_LAB_VENV']}/bin/rsa", "status", "--json"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    took = time.monotonic() - started
    view = json.loads(out)
    return {n["name"]: n["job"] or "" for n in view["nodes"]}, list(view["on_deck"]), took


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
    """On the idle lab rsaother submits one job and rsauser a 200-task array, both under
    early start `wait`: Slurm holds them all; rsad judges which could start now (the
    lab's 4 compute nodes: rsaother's job and the first tasks), stages those while held
    and releases the rest, whose tasks Slurm then shows pending for ``Resources`` (the
    lab showed 192 of them on-deck at once). The array holds at most its share (2 of the
    4 RSA nodes; on d0d1991 every on-deck task got nodes while any were free),
    rsaother's job gets its own, and no cycle of rsad's loop is slow."""
    mine, other = areas
    array_script = (f"#!/bin/bash\n#SBATCH -t 1\n#SBATCH --array=0-{TASKS - 1}\n"
                    f"#RSA_DATA_OUT={mine}/out\n#RSA_EARLY_START=wait\ntrue\n")
    other_script = (f"#!/bin/bash\n#SBATCH -t 1\n#RSA_DATA_OUT={other}/out\n"
                    "#RSA_EARLY_START=wait\ntrue\n")
    pool = len(lab["RSA_LAB_RSA_ADDRESSES"].split(","))
    share = pool // 2  # array_share 0.5
    with _array_share(lab, "0.5"), make_jobs(lab) as jobs:
        cycles0, slow0 = _slow_cycles()
        theirs = jobs.submit(script=other_script, user=lab["RSA_LAB_OTHER_USER"])
        array = jobs.submit(script=array_script)
        most, deck, slowest = 0, 0, 0.0

        def served() -> bool:
            nonlocal most, deck, slowest
            holders, on_deck, took = _rsa_view(lab)
            slowest = max(slowest, took)
            most = max(most, sum(j.startswith(f"{array}_") for j in holders.values()))
            deck = max(deck, sum(j.startswith(f"{array}_") for j in on_deck))
            return theirs in holders.values() and most > 0

        try:
            wait_for("rsaother's job gets RSA nodes beside the array", served, timeout=60,
                     every=0.3)
            # the array's tasks kept to their share meanwhile (sampled a little longer)
            deadline = time.monotonic() + 4
            while time.monotonic() < deadline:
                served()
                time.sleep(0.3)
        finally:
            data = rsa_job(lab, theirs) or {}
            said = (f"most RSA nodes held by the array at once: {most}, most of its tasks "
                    f"on-deck at once: {deck}; rsaother's job: "
                    f"{data.get('job_state')}/{data.get('rsa_state')} nodes "
                    f"{data.get('nodes')!r}; queue:\n" + root(
                        lab, "squeue", "-h", "-r", "-t", "all", "-o", "%i %u %T %r %P")[:3000])
            print(said)
        # more of its tasks could start than its share, and it held no more
        assert 0 < most <= share < deck, said
        cycles, slow = _slow_cycles()
        assert cycles - cycles0 >= 3, "rsad's loop stopped cycling"
        assert slow - slow0 == 0, f"{slow - slow0:g} cycle(s) took over {SLOW_CYCLE}s"
        assert slowest < 5, f"rsad took {slowest:.1f}s to answer `rsa status`"
