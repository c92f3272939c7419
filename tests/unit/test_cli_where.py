"""``rsa job``'s ``output:`` line: where a job's output is at each moment (issue 32)."""

from __future__ import annotations

from typing import Any

import pytest

from rsa_scheduler.cli import where

pytestmark = pytest.mark.unit


def where_output(record: dict[str, Any]) -> str:
    return where.where_output(record) or ""


def job(rsa_state: str, job_state: str, *steps: tuple[str, str], stage_out: str | None = None,
        cycle: int = 1, data_out: str | None = "/pfs/u/out") -> dict[str, Any]:
    events = [{"name": "job.state" if k == "job" else "rsa.transition", "to": to}
              for k, to in steps]
    return {"job_id": "7", "rsa_state": rsa_state, "job_state": job_state, "events": events,
            "nodes": "rsa[1-2]", "cycle": cycle, "message": "",
            "spec": {"data_out": data_out, "stage_out": stage_out}}


END = (("job", "running"), ("job", "finished"))


def test_each_moment_says_where_the_output_is() -> None:
    assert where.where_output(job("none", "queued", data_out=None)) is None
    assert where_output(job("locked-in", "on-deck")).startswith("none yet")
    running = where_output(job("mounted-output", "running"))
    assert running.startswith("on the RAMDISK of rsa[1-2], mounted over /pfs/u/out")
    moving = where_output(job("staging-out", "finished", *END, ("rsa", "staging-out")))
    assert "not complete there yet; 'rsa wait 7'" in moving
    done = where_output(job("released", "finished", *END, ("rsa", "output-verified"),
                            ("rsa", "released")))
    assert done == "on the PFS in /pfs/u/out, verified (every file compared with the RAMDISK's)"


def test_tar_archives_come_with_the_command_that_restores_them() -> None:
    first = where_output(job("released", "finished", *END, ("rsa", "output-verified"),
                             stage_out="tar"))
    assert "rsa-7-<n>.tar" in first and 'for a in rsa-7-*.tar; do tar -xpf "$a"; done' in first
    again = where_output(job("released", "finished", *END, ("rsa", "output-verified"),
                             stage_out="tar", cycle=2))
    assert "rsa-7.c2-*.tar" in again


def test_quarantine_says_the_data_is_kept_and_what_to_do() -> None:
    q = where_output(job("quarantined", "finished", *END, ("rsa", "quarantined")))
    assert q.startswith("kept on the RAMDISK of rsa[1-2], NOT complete in /pfs/u/out")
    assert "'rsa retry 7'" in q
