"""`slurm.script_source: scontrol` against the lab's real Slurm: when job_submit.lua is not
deployed, rsad reads a job's `#RSA_` directives from `scontrol write batch_script`, once,
and only for jobs that matter (running or on-deck), never the whole queue.

The lab deploys job_submit.lua, so the test clears the admin_comment it writes (the job
is held meanwhile) and drives an rsad built in-process (real CliSlurm, real store, the lab's
pool and policy; no data-path executors: its stage-in fails, which is not under test here)
rather than reconfiguring the lab's rsad, which then never sees these jobs.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from rsa_scheduler.config import load_config
from rsa_scheduler.core.directives import DirectiveSpec
from rsa_scheduler.core.scheduler import Scheduler
from rsa_scheduler.daemon.executors import Registry
from rsa_scheduler.daemon.service import Daemon
from rsa_scheduler.runner import LocalRunner
from rsa_scheduler.slurm.cli import CliSlurm
from rsa_scheduler.store import Store
from tests.integration.slurmkit import make_jobs, root, wait_for

FILL = ("-t", "5", "--wrap", "sleep 300")


class CountingRunner:
    """The real LocalRunner, remembering which jobs' scripts were read."""

    def __init__(self) -> None:
        self.real = LocalRunner()
        self.scripts_read: list[str] = []

    def __call__(self, argv: Sequence[str], **kw: Any) -> Any:
        if list(argv[1:3]) == ["write", "batch_script"]:
            self.scripts_read.append(argv[3])
        return self.real(argv, **kw)


@pytest.fixture()
def daemon(lab: Mapping[str, str], tmp_path: Path) -> Iterator[Daemon]:
    cfg = load_config(lab["RSA_LAB_RSA_CONFIG"])
    slurm = CliSlurm(bin_dir=cfg.slurm.bin_dir, runner=CountingRunner(),
                     env={"PATH": "/usr/bin:/bin", "SLURM_CONF": lab["RSA_LAB_SLURM_CONF"]})
    store = Store.open(tmp_path / "rsa.db")
    d = Daemon(Scheduler(cfg.make_pool(), cfg.staging_policy()), slurm=slurm, store=store,
               registry=Registry(), workers=2, poll_interval=0, script_source="scontrol")
    d.start()
    yield d
    d.shutdown()
    store.close()


def test_directives_are_read_from_the_batch_script_once(lab: Mapping[str, str],
                                                        daemon: Daemon, tmp_path: Path) -> None:
    runner = daemon.slurm.runner  # type: ignore[attr-defined]
    pfs = lab["RSA_LAB_PFS"]
    script = tmp_path / "rsa-job.sh"
    script.write_text(f"#!/bin/bash\n#SBATCH -t 5\n#RSA_DATA_IN={pfs}/in\n"
                      f"#RSA_DATA_OUT={pfs}/out\nsleep 300\n")
    script.chmod(0o644)
    tmp_path.chmod(0o755)
    with make_jobs(lab) as jobs:
        fillers = [jobs.submit(*FILL) for _ in range(4)]
        wait_for("fillers running", lambda: all(
            root(lab, "squeue", "-h", "-j", j, "-o", "%T").strip() == "RUNNING"
            for j in fillers), timeout=60)
        job = jobs.submit("-H", script=script.read_text())
        # no job_submit.lua: no spec in the admin_comment, and no start hold either
        root(lab, "scontrol", "update", f"jobid={job}", "admincomment=", "StartTime=now")
        assert root(lab, "squeue", "-h", "-j", job, "-O", "admin_comment:0").strip() in (
            "", "(null)")
        root(lab, "scontrol", "release", job)
        queued = jobs.submit(*FILL)  # waits behind it (reason Priority): never read
        # (at submission Slurm briefly gives the newest job reason Resources too: rsad
        # would read its script then; start once a scheduler pass has settled the queue)
        wait_for("the queue settled", lambda: [
            root(lab, "squeue", "-h", "-j", j, "-o", "%r").strip() for j in (job, queued)
        ] == ["Resources", "Priority"], timeout=30)

        def tracked() -> bool:
            daemon.poll()
            return job in daemon.sched.records

        wait_for("the job tracked from its script", tracked, timeout=60)
        assert daemon.sched.records[job].spec == DirectiveSpec(data_in=f"{pfs}/in",
                                                               data_out=f"{pfs}/out")
        assert sorted(runner.scripts_read) == sorted([*fillers, job])
        assert queued not in runner.scripts_read
        for j in fillers:  # scripts without directives: read once, the job not tracked
            assert j not in daemon.sched.records
        for _ in range(3):
            time.sleep(1)
            daemon.poll()
        assert sorted(runner.scripts_read) == sorted([*fillers, job])  # once per job
        # the cache keeps only untracked jobs still in the queue: the tracked job's record
        # holds its spec
        assert set(daemon.specs.cache) == set(fillers)
