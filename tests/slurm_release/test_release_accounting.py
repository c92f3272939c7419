"""The adapter on a real Slurm of one release (``RSA_SLURM_RELEASE``) with accounting
(slurmdbd, MariaDB; issue 31): how jobs ended by sacct (rsad's end states), the sacct log
of ``rsa sim replay --sacct``, and the lock-in by QOS with its start-up check. Outputs kept
into ``RSA_SLURM24_CAPTURE``/``RSA_SLURM26_CAPTURE`` when set (tests/data/slurm/24.11/,
26.05/)."""

from __future__ import annotations

import io
import os
import time
from pathlib import Path

import pytest

from rsa_scheduler.sim.sacct import FIELDS, parse_sacct
from rsa_scheduler.slurm.cli import CliSlurm, lockin_problem, qos_warning
from tests.slurm_release.cluster import LOCKIN_QOS, RELEASE, UID, Cluster
from tests.slurm_release.test_release import Recorder, state, submit, wait_state

pytestmark = pytest.mark.slurm_release


@pytest.fixture
def capture(tmp_path: Path) -> Path:
    out = Path(os.environ.get(RELEASE.capture_env) or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    return out


def test_sacct_and_the_qos_lock_in(acct_cluster: Cluster, capture: Path) -> None:
    c = acct_cluster
    rec = Recorder(c)
    slurm = CliSlurm(runner=rec, lockin_method="qos", lockin_qos=LOCKIN_QOS)

    def keep(name: str) -> str:
        (capture / name).write_text(rec.outputs[-1])
        return rec.outputs[-1]

    config = slurm.show_config()
    keep("scontrol_show_config_acct.txt")
    assert config["AccountingStorageType"] == "accounting_storage/slurmdbd"
    assert lockin_problem("qos", 0, config) is None
    assert qos_warning("qos", LOCKIN_QOS, config) is None

    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 2))
    done = submit(c, "-J", "a-done", "-t", "2", "--wrap", "true")
    failed = submit(c, "-J", "a-failed", "-t", "2", "--wrap", "exit 3")
    array = submit(c, "-J", "a-array", "-t", "2", "--array=0-1", "--wrap", "true")
    running = submit(c, "-J", "a-cancel", "-t", "2", "--wrap", "sleep 60")
    wait_state(c, running, "RUNNING")
    # the lock-in: a pending job gets the QOS and jumps ahead; unlock gives its own back.
    # Both nodes busy first (select/linear: one job each), so the job stays pending
    queued = submit(c, "-J", "a-locked", "-t", "2", "--wrap", "sleep 60")
    wait_state(c, queued, "RUNNING")
    behind = submit(c, "-J", "a-behind", "-t", "2", "--wrap", "true")
    original = slurm.lock_original(behind)
    keep("squeue_lock_view_qos_before.txt")
    assert original == "normal"
    slurm.lock_in(behind)
    view = slurm._lock_view(behind)
    keep("squeue_lock_view_qos.txt")
    assert view.qos == LOCKIN_QOS and view.priority > slurm._lock_view(queued).priority
    assert "restored" in slurm.unlock(behind, original) or \
        slurm._lock_view(behind).qos == "normal"
    assert slurm._lock_view(behind).qos == "normal"
    c.out("scancel", running, queued)
    for job in (done, failed, f"{array}_0", f"{array}_1", running, queued, behind):
        wait_state(c, job, "COMPLETED", "FAILED", "CANCELLED", timeout=60)

    ids = [done, failed, f"{array}_0", f"{array}_1", running]

    def recorded() -> bool:  # slurmdbd records the ends asynchronously
        return len(slurm.end_states(ids)) == len(ids)

    c.wait("sacct to list every end", recorded)
    ends = slurm.end_states(ids)
    keep("sacct_end_states.txt")
    assert ends == {done: "COMPLETED", failed: "FAILED", f"{array}_0": "COMPLETED",
                    f"{array}_1": "COMPLETED", running: "CANCELLED"}, ends

    out = c.out("sacct", "--allusers", "--parsable2", "--starttime", since, "--endtime",
                "now", "--format", ",".join(FIELDS))
    (capture / "sacct_sim.txt").write_text(out)
    log = parse_sacct(io.StringIO(out), f"sacct {RELEASE.version}")
    by_raw = {j.job: j for j in log.jobs}
    assert by_raw[int(done)].status == 1 and by_raw[int(failed)].status == 0
    assert by_raw[int(running)].status == 5
    assert all(j.user == UID and j.procs == 1 for j in log.jobs)
    assert log.unfinished == 0 and log.cpus_per_node == 1
    assert state(c, behind) in ("COMPLETED", "CANCELLED")
    (capture / "jobs_acct.env").write_text(
        f"# Job ids of the accounting capture (Slurm {config['SLURM_VERSION']})\n"
        f"COMPLETED={done} FAILED={failed} ARRAY={array} CANCELLED_RUNNING={running} "
        f"QUEUED={queued} LOCKED_IN={behind}\n")
