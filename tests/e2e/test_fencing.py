"""A restarted rsad stops what the crashed one left running on the RSA nodes before it
re-issues anything (issue 13.2): a stale copy or script can never write after the new
rsad's attempt, nor run beside it."""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.integration.slurmkit import make_jobs, restart_lab_rsad, root, wait_for
from tests.integration.test_rsad_staging import fill, rsa_job, wait_state
from tests.security.test_reap import _owned_script, alive, area

__all__ = ["area"]


@pytest.mark.once  # rsad's fence; native hooks across an rsad kill: test_native_trouble
def test_a_preprocess_of_a_killed_rsad_is_stopped_before_it_is_run_again(
        lab: Mapping[str, str], area: Path) -> None:
    marker = 8100 + os.getpid() % 1000
    pre, runs, data = area / "pre.sh", area / "in" / "runs", area / "in" / "x"
    # the first run records its pid and hangs; the next one copies at once
    _owned_script(lab, pre, f"""#!/bin/bash
echo $$ >> "$RSA_DATA_IN/runs"
if [ "$(wc -l < "$RSA_DATA_IN/runs")" = 1 ]; then exec sleep {marker}; fi
cp "$RSA_DATA_IN/x" "$RSA_RAMDISK/x"
""")
    _owned_script(lab, data, "x\n")
    script = f"""#!/bin/bash
#SBATCH -t 5
#RSA_DATA_IN={area}/in
#RSA_PREPROCESS={pre}
cat {area}/in/x
"""
    with make_jobs(lab) as jobs:
        fill(jobs)
        job = jobs.submit(script=script)
        wait_for("the first PREPROCESS running",
                 lambda: runs.exists() and runs.read_text().split(), timeout=120)
        first = int(runs.read_text().split()[0])
        assert alive(first, marker)
        restart_lab_rsad(signal.SIGKILL)
        # fenced at start-up, long before its own sleep would end
        wait_for("the crashed rsad's PREPROCESS stopped",
                 lambda: not alive(first, marker), timeout=60)
        wait_state(lab, job, "locked-in", timeout=180)
        assert len(runs.read_text().split()) == 2  # the stale run did not go on
        # the re-issued attempt did not run it again: it failed as interrupted, and the
        # retry (a new attempt) ran it once from the start
        record = rsa_job(lab, job)
        assert record is not None
        said = [str(e.get("message") or "") for e in record["events"]
                if e["name"] == "action.outcome" and "/stage-in/" in str(e.get("action"))]
        assert any("interrupted when rsad restarted" in m for m in said), said
        for filler in jobs.fillers:
            root(lab, "scancel", filler)
        wait_state(lab, job, "released", timeout=120)
