"""One key per job everywhere (issue 14): the name ``squeue -r`` gives it (``JobArrayID``).

A plain job's key is its job id (``123``). An array task's key is ``<array job id>_<task
id>`` (``123_4``): squeue, the event log, the API, the CLI and the metrics all use it,
although Slurm gives each started task a job id of its own, which is what its Prolog,
Epilog and tasks see as ``SLURM_JOB_ID``. PrologSlurmctld/EpilogSlurmctld and ``rsa``
inside a job see both and send both (:func:`from_env`); rsad keys by :func:`job_key` and
remembers the pair, because a node's Prolog, Epilog and agent see only the task's own id
(Slurm 22.05 gives them no ``SLURM_ARRAY_*``, seen in the lab): rsad maps it
(``Daemon.aliases``). Node-side directories stay named by the numeric job id (what every
process on the node, the SPANK plugin too, knows).

A heterogeneous job's key is its leader's job id (``SLURM_HET_JOB_ID``, ``113``): squeue
lists its components as ``113+0``, ``113+1`` (each with a job id of its own, ``113`` and
``114``), and every hook of every component, node Prolog and Epilog included, sees
``SLURM_HET_JOB_ID`` (seen in the lab). One RSA lifecycle serves the whole hetjob.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

#: Slurm's NO_VAL in SLURM_ARRAY_TASK_ID: not an array task
NO_TASK = "4294967294"
_NUM = re.compile(r"[0-9]{1,10}")


def job_key(fields: Mapping[str, object]) -> str:
    """The key of the job described by ``job_id`` and, for an array task,
    ``array_job_id`` and ``array_task_id``. Raises ValueError for malformed ids."""
    job = str(fields.get("job_id") or "")
    het = str(fields.get("het_job_id") or "")
    if het:
        if not _NUM.fullmatch(het):
            raise ValueError(f"bad heterogeneous job id {het!r}")
        return het
    array = str(fields.get("array_job_id") or "")
    task = str(fields.get("array_task_id") or "")
    if array and task and task != NO_TASK:
        if not (_NUM.fullmatch(array) and _NUM.fullmatch(task)):
            raise ValueError(f"bad array task id {array!r}_{task!r}")
        return f"{array}_{task}"
    return job


def from_env(env: Mapping[str, str]) -> dict[str, str]:
    """What a hook (or ``rsa`` inside a job) sends to name its job: ``job_id`` and, in an
    array task, ``array_job_id`` and ``array_task_id``; in a heterogeneous job's component,
    ``het_job_id`` and ``het_job_offset``."""
    out = {"job_id": env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID") or ""}
    het = env.get("SLURM_HET_JOB_ID") or env.get("SLURM_PACK_JOB_ID")
    if het:
        out["het_job_id"] = het
        offset = env.get("SLURM_HET_JOB_OFFSET") or env.get("SLURM_PACK_JOB_OFFSET")
        if offset:
            out["het_job_offset"] = offset
        return out
    array, task = env.get("SLURM_ARRAY_JOB_ID"), env.get("SLURM_ARRAY_TASK_ID")
    if array and task and task != NO_TASK:
        out.update(array_job_id=array, array_task_id=task)
    return out


def key_from_env(env: Mapping[str, str]) -> str:
    """The key of the job whose environment ``env`` is ("" outside a job)."""
    return job_key(from_env(env))
