"""Every parser of Slurm output, fed jobs whose user-chosen text is hostile (issue 36).

rsaother submits held jobs whose name, comment, working directory and output path carry
spaces, ``=``, ``|``, quotes, newlines and other fields' keys (``ArrayJobId=1``,
``UserId=root(0)``, ``AdminComment=rsa1:...``). rsad's real readers of the real
slurmctld (the queue, one job's identity, the pending list, the partitions) must give
each job its own id and user, and nothing of another job. On the cluster lab rsaother
submits from the login node, its directories on the PFS.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path

from tests.integration.slurmkit import make_jobs, make_slurm
from tests.security.where import run_as, submit_node

#: what a user can put where scontrol's ``Key=value`` line has no quoting
HOSTILE = [
    "x ArrayJobId=1 ArrayTaskId=0",
    "a|b|RUNNING|None|1|1|root|rsa1:i=/etc",
    "n UserId=root(0) GroupId=root(0) AdminComment=rsa1:i=/etc hold=1",
    "q'\"`$(id)`; Partition=secret JobState=RUNNING",
    "= == =x= Reason=Resources",
]


def test_hostile_job_text_never_changes_whose_job_it_is(
        lab: Mapping[str, str], tmp_path: Path) -> None:
    other, node = lab["RSA_LAB_OTHER_USER"], submit_node()
    parent = Path(lab["RSA_LAB_OTHER_PFS"] if node else "/tmp")  # where rsaother submits
    base = parent / f"rsa-hostile {tmp_path.name} ArrayJobId=1 |x"
    base.mkdir(mode=0o777)
    try:
        base.chmod(0o777)
        submitted: dict[str, str] = {}
        with make_jobs(lab) as jobs:
            for i, text in enumerate(HOSTILE):
                work = base / f"w{i} {text.replace('/', '_')}"
                made = run_as(lab, other, ["mkdir", "-p", str(work)], node=node)
                assert made.returncode == 0, made.stderr
                done = run_as(lab, other, ["sbatch", "--parsable", "-H", "-J", text,
                                           f"--comment={text}\nUserId=root(0)",
                                           f"--chdir={work}", f"--output={work}/o {text}.%j",
                                           "--wrap", "true"], node=node)
                assert done.returncode == 0, done.stderr
                job = done.stdout.strip().split(";")[0]
                jobs.ids.append(job)
                submitted[job] = text
            slurm = make_slurm(lab)
            rows = {r.job_id: r for r in slurm.queue()}
            for job in submitted:
                row = rows[job]
                assert (row.user, row.state, row.admin_comment) == (
                    other, "PENDING", None), row
                info = slurm.job_info(job)
                assert (info.job_id, info.array_job_id, info.array_task_id, info.user) == (
                    job, job, "N/A", other), info
                assert info.array_key is None and info.admin_comment == "", info
                assert info.partition == "debug", info
            pending = {j: reason for j, _n, reason, _p in slurm.pending_jobs()}
            assert set(submitted) <= set(pending)
            assert all(pending[j] == "JobHeldUser" for j in submitted), pending
            assert slurm.idle_nodes()  # sinfo still parses
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=False, timeout=60)
