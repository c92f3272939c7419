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

from rsa_scheduler.slurm.parse import merge_hetjobs, parse_queue
from tests.integration.slurmkit import LAB_DIR, start_lab_rsad, stop_lab_rsad
from tests.unit.test_slurm_parse import taken_for_a_new_job


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
    assert [r.job_id for r in rows] == [ids["ROOT"]] * 3 + [ids["SELF"]] * 3
    for run in (rows[0:3], rows[3:6]):
        assert (run[0].state, run[0].restarts) == ("RUNNING", 0), run
        assert run[1].restarts == 1 and (run[2].state, run[2].restarts) == ("PENDING", 1), run
        assert run[2].submitted != run[0].submitted, run  # a requeue: a new submit time
        assert not taken_for_a_new_job(run), run
    if os.environ.get("RSA_QUEUE_CAPTURE"):
        _capture("capture-hetjob.sh", out)
        het = merge_hetjobs(parse_queue((out / "squeue_hetjob_running.txt").read_text()))
        assert all(r.submitted and r.restarts == 0 for r in het), het

