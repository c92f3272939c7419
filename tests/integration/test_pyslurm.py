"""The optional pyslurm backend against the lab's Slurm, where pyslurm imports.

PyPI has no pyslurm for Slurm 22.05 (25.11.x needs Slurm 25.11), so on the lab this test
is skipped with that reason; a site with a matching pyslurm runs it to check that both
backends see the same queue.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from tests.integration.slurmkit import make_jobs, make_slurm

pyslurm = pytest.importorskip(
    "pyslurm", reason="pyslurm is not installed (none on PyPI matches Slurm 22.05)")


def test_pyslurm_and_cli_backends_see_the_same_queue(lab: Mapping[str, str]) -> None:
    from rsa_scheduler.slurm.pyslurm_backend import PySlurm

    cli = make_slurm(lab)
    with make_jobs(lab) as jobs:
        for _ in range(3):
            jobs.submit("-H", "-t", "5", "--wrap", "sleep 30")
        py = PySlurm(cli)
        view = {(r.job_id, r.state, r.user) for r in py.queue()}
        assert view == {(r.job_id, r.state, r.user) for r in cli.queue()}
