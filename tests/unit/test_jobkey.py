"""One job key everywhere (issue 14): an array task is ``<array>_<task>`` for rsad, the
API, the CLI and the events, although its hooks and tasks see a job id of its own."""

from __future__ import annotations

import pytest

from rsa_scheduler.core.directives import DirectiveSpec
from rsa_scheduler.core.jobkey import NO_TASK, from_env, job_key, key_from_env
from rsa_scheduler.hooks import payload

TASK_ENV = {"SLURM_JOB_ID": "131", "SLURM_ARRAY_JOB_ID": "127", "SLURM_ARRAY_TASK_ID": "4",
            "SLURM_JOB_USER": "alice"}


def test_an_array_task_is_named_as_squeue_names_it() -> None:
    assert from_env(TASK_ENV) == {"job_id": "131", "array_job_id": "127",
                                  "array_task_id": "4"}
    assert key_from_env(TASK_ENV) == "127_4"
    assert key_from_env({"SLURM_JOB_ID": "131"}) == "131"
    assert key_from_env({"SLURM_JOBID": "9"}) == "9"
    assert key_from_env({}) == ""
    # Slurm's NO_VAL task id: not an array task
    assert key_from_env({"SLURM_JOB_ID": "5", "SLURM_ARRAY_JOB_ID": "5",
                         "SLURM_ARRAY_TASK_ID": NO_TASK}) == "5"


def test_malformed_array_ids_are_refused() -> None:
    with pytest.raises(ValueError):
        job_key({"job_id": "1", "array_job_id": "1;rm", "array_task_id": "2"})
    with pytest.raises(ValueError):
        job_key({"job_id": "1", "array_job_id": "1", "array_task_id": "../2"})


def test_slurmctld_hooks_send_the_task_too() -> None:
    data = payload("prolog_slurmctld", TASK_ENV)
    assert job_key(data) == "127_4" and data["job_id"] == "131"


def test_percent_a_and_percent_capital_a_name_the_task_in_its_paths() -> None:
    spec = DirectiveSpec(data_in="/home/a/in/%a", data_out="/home/a/out/%A_%a", nodes=1)
    task = spec.for_array_task("127", "4")
    assert (task.data_in, task.data_out, task.nodes) == ("/home/a/in/4", "/home/a/out/127_4",
                                                         1)
    plain = DirectiveSpec(data_in="/home/a/in")
    assert plain.for_array_task("127", "4") is plain
    with pytest.raises(ValueError):
        spec.for_array_task("127", "4/..")
