"""``rsa job``'s ``output:`` line: where a job's output is at each moment (issue 32)."""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path
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
    assert "rsa-7-<n>.tar" in first
    assert first.endswith('cd /pfs/u/out && for a in $(cut -s -f1 rsa-7.index | sort -urV); '
                          'do tar -xpf "$a"; done')
    again = where_output(job("released", "finished", *END, ("rsa", "output-verified"),
                             stage_out="tar", cycle=2))
    assert "cut -s -f1 rsa-7.c2.index" in again


def _archive(path: Path, members: list[tuple[str, bytes | None, int]]) -> None:
    """A pax archive of (name, content or None for a directory, mtime) members."""
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as t:
        for name, data, mtime in members:
            info = tarfile.TarInfo(name)
            info.mtime = mtime
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                t.addfile(info)
            else:
                info.size, info.mode = len(data), 0o644
                t.addfile(info, io.BytesIO(data))


def test_the_restore_command_extracts_the_runs_archives_only_archive_0_last(
        tmp_path: Path) -> None:
    """Found by review 2026-11-30: the line globbed rsa-7-*.tar, archive 0 first. An
    earlier job's rsa-7-2.tar (Slurm gave the id again) was extracted after this run's
    and replaced its files; the directories' mtimes were those of the extraction. And a
    DATA_OUT with a space in its path is one word of the line's ``cd``."""
    out = tmp_path / "my out"
    out.mkdir()
    _archive(out / "rsa-7-0.tar", [("d", None, 1_000_000_000), ("d/a", b"this run", 5)])
    _archive(out / "rsa-7-1.tar", [("d/b", b"this run too", 5)])
    _archive(out / "rsa-7-2.tar", [("d/a", b"an earlier job's", 5)])
    (out / "rsa-7.index").write_text(
        "# rsa-scheduler archive index v1: archive<TAB>type<TAB>size<TAB>path\n"
        "rsa-7-0.tar\td\t0\td\nrsa-7-0.tar\tf\t8\td/a\nrsa-7-1.tar\tf\t12\td/b\n")
    line = where_output(job("released", "finished", *END, ("rsa", "output-verified"),
                            stage_out="tar", data_out=str(out)))
    command = line.split("to get the files back: ", 1)[1]
    subprocess.run(["bash", "-c", command], check=True, cwd="/")
    assert (out / "d" / "a").read_bytes() == b"this run"
    assert (out / "d" / "b").read_bytes() == b"this run too"
    assert (out / "d").stat().st_mtime == 1_000_000_000


def test_quarantine_says_the_data_is_kept_and_what_to_do() -> None:
    q = where_output(job("quarantined", "finished", *END, ("rsa", "quarantined")))
    assert q.startswith("kept on the RAMDISK of rsa[1-2], NOT complete in /pfs/u/out")
    assert "'rsa retry 7'" in q
