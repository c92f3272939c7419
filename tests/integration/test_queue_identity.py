"""rsad's one queue read against the lab's real Slurm 22.05: every row parses, and Slurm's
identity of a job (SubmitTime, RestartCnt) tells a requeue from a new job given the id
(issue 35: a requeued job taken for a new one would have its running cycle ended).

``lab/capture-queue.sh`` submits a job mix and two requeued jobs (one by root, one by
itself) with rsad stopped, and writes what squeue printed; with ``RSA_QUEUE_CAPTURE=DIR``
the files go to DIR (tests/data/slurm/ for the parser tests), and the hetjob capture
(``lab/capture-hetjob.sh``, rsad up) runs too.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path

from rsa_scheduler.core.directives import DirectiveSpec
from rsa_scheduler.core.record import JobRecord
from rsa_scheduler.core.scheduler import Observation, another_job
from rsa_scheduler.slurm.parse import merge_hetjobs, parse_queue
from tests.integration.slurmkit import LAB_DIR, start_lab_rsad, stop_lab_rsad


def _capture(script: str, out: Path) -> None:
    done = subprocess.run([str(LAB_DIR / script), str(out)], capture_output=True, text=True,
                          timeout=400, check=False)
    assert done.returncode == 0, f"{script}: {done.stdout[-2000:]}{done.stderr[-2000:]}"


def _env(path: Path) -> dict[str, str]:
    words = " ".join(line for line in path.read_text().splitlines()
                     if not line.startswith("#")).split()
    return dict(w.split("=", 1) for w in words)


def test_a_requeue_counts_a_restart_and_is_never_taken_for_a_new_job(
        lab: Mapping[str, str], tmp_path: Path) -> None:
    out = Path(os.environ.get("RSA_QUEUE_CAPTURE") or tmp_path)
    stop_lab_rsad(signal.SIGTERM)
    try:
        _capture("capture-queue.sh", out)
    finally:
        start_lab_rsad()
    for name in ("squeue_rsa.txt", "squeue_rsa_2.txt"):
        rows = parse_queue((out / name).read_text())
        assert len(rows) == 10, name  # 4 running, 2 pending, a two-node job, 3 tasks
        for row in rows:
            assert row.user == lab["RSA_LAB_USER"] and row.restarts == 0, row
            assert len(row.submitted) == 19 and row.submitted[10] == "T", row  # ISO
        assert sum(r.num_nodes == 2 for r in rows) == 1
    ids = _env(out / "requeue.env")
    rows = parse_queue((out / "squeue_requeue.txt").read_text())
    assert [r.job_id for r in rows] == [ids["ROOT"]] * 2 + [ids["SELF"]] * 2
    for before, after in (rows[0:2], rows[2:4]):
        assert (before.state, before.restarts) == ("RUNNING", 0), before
        assert after.state == "PENDING" and after.restarts == 1, after
        rec = JobRecord(job_id=before.job_id, user=before.user, spec=DirectiveSpec(),
                        submitted=before.submitted, restarts=before.restarts)
        seen = Observation(job_id=after.job_id, user=after.user, state=after.state,
                           submitted=after.submitted, restarts=after.restarts)
        assert not another_job(rec, seen), (before, after)
        # the same row with no restart counted would be a new job under the id: the
        # check is not blind to a new submit time
        new = Observation(job_id=after.job_id, user=after.user, state=after.state,
                          submitted=after.submitted, restarts=0)
        assert after.submitted == before.submitted or another_job(rec, new)
    if os.environ.get("RSA_QUEUE_CAPTURE"):
        _capture("capture-hetjob.sh", out)
        het = merge_hetjobs(parse_queue((out / "squeue_hetjob_running.txt").read_text()))
        assert all(r.submitted and r.restarts == 0 for r in het), het
