"""A big input file rewritten during its stage-in is never handed to the job torn
(issue 37, item 4), in the lab.

The job's 480 MiB input file (a file of at least 32 MiB: copied by ``dd`` then ``cp
--attributes-only``) is rewritten in place on the PFS, 8 MiB at a time, while it is
staged in. Before, the copy mixed old and new blocks and took the source's final mtime:
the job read a file that never existed on the PFS (a resume would have kept it too).
Now the copier sees the source changed while it was copied and copies it again, or the
stage-in fails and is retried: the job reads exactly what the PFS holds once the writer
is done."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from tests.integration.conftest import as_user
from tests.integration.slurmkit import make_jobs, root
from tests.integration.test_rsad_staging import fill, rsa_job, wait_state

CHUNKS = 60  # of 8 MiB: 480 MiB


@pytest.fixture
def area(lab: Mapping[str, str]) -> Iterator[Path]:
    base = Path(lab["RSA_LAB_PFS"]) / f"torn-e2e-{os.getpid()}-{time.monotonic_ns()}"
    script = (f"set -e; mkdir -p {base}/in {base}/res; "
              f"head -c 8M /dev/urandom > {base}/chunk; for i in $(seq {CHUNKS}); do "
              f"cat {base}/chunk; done > {base}/in/big; rm {base}/chunk; "
              f"echo s > {base}/in/small")
    done = as_user(lab, lab["RSA_LAB_USER"], ["bash", "-c", script], timeout=300)
    assert done.returncode == 0, done.stderr
    yield base
    subprocess.run(["rm", "-rf", str(base)], check=False, timeout=300)


def rewrite(lab: Mapping[str, str], big: Path,
            block: Path) -> subprocess.CompletedProcess[str]:
    """As the user: every 8 MiB block of ``big`` overwritten with ``block`` (written
    beforehand, outside the input), in place, last block first, a short pause after
    each: some 5-10 s, longer than the RAMDISK's build, so a stage-in that starts while
    it runs overlaps it. Backwards: a copy reading forwards that overlaps the rewrite at
    all reads its first block old and its last block new, whoever started first."""
    script = (f"for i in $(seq {CHUNKS - 1} -1 0); do dd if={block} of={big} "
              "bs=8M seek=$i conv=notrunc status=none; sleep 0.05; done")
    return as_user(lab, lab["RSA_LAB_USER"], ["bash", "-c", script], timeout=300)


def overlapped(events: list[dict[str, object]], start: float, end: float) -> bool:
    """The rewrite (``start``..``end``, wall clock) overlapped the first stage-in attempt
    (rsad's events: its staging-in transition to its first stage-in outcome)."""
    began = next((float(str(e["time"])) for e in events if e["name"] == "rsa.transition"
                  and e.get("to") == "staging-in"), None)
    ended = next((float(str(e["time"])) for e in events if e["name"] == "action.outcome"
                  and "/stage-in/" in str(e.get("action"))), None)
    return began is not None and ended is not None and began < end and start < ended


@pytest.mark.once  # the staging engine and rsad: the same whichever mode drives staging
def test_a_big_input_rewritten_during_its_stage_in_is_copied_again_not_torn(
        lab: Mapping[str, str], area: Path) -> None:
    inp, res = area / "in", area / "res"
    script = f"""#!/bin/bash
#SBATCH -t 5
#RSA_DATA_IN={inp}
findmnt -n -o TARGET --target {inp} > {res}/inmnt
(cd {inp} && md5sum big small) > {res}/md5-job
"""
    made = as_user(lab, lab["RSA_LAB_USER"], [
        "bash", "-c", f"head -c 8M /dev/urandom > {area}/new-block"], timeout=120)
    assert made.returncode == 0, made.stderr
    with make_jobs(lab) as jobs:
        fill(jobs)
        job = jobs.submit(script=script)
        # from the allocation on: the rewrite outlasts the build, the copy starts within it
        wait_state(lab, job, "allocated", "fs-building", "fs-ready", "staging-in",
                   timeout=120)
        done: list[subprocess.CompletedProcess[str]] = []
        started = time.time()
        writer = threading.Thread(target=lambda: done.append(rewrite(lab, inp / "big",
                                                                   area / "new-block")))
        writer.start()
        writer.join(timeout=300)
        ended = time.time()
        assert done and done[0].returncode == 0, done
        final = subprocess.run(["bash", "-c", "md5sum big small"], cwd=inp,
                               capture_output=True, text=True, timeout=120,
                               check=True).stdout
        wait_state(lab, job, "locked-in", "declined", timeout=300)
        for filler in jobs.fillers:
            root(lab, "scancel", filler)
        wait_state(lab, job, "released", timeout=240)
    data = rsa_job(lab, job)
    assert data is not None
    timeline = [{k: v for k, v in e.items() if k in ("name", "action", "result", "message",
                                                      "from", "to")}
                for e in data["events"]]
    # the point of the test: the copy ran while the file was rewritten
    assert overlapped(data["events"], started, ended), (started, ended, timeline)
    assert (res / "md5-job").read_text() == final, timeline  # before: old and new blocks
    if (res / "inmnt").read_text().split("\n")[0] != str(inp):
        # every try overlapped the rewrite (a striped big file's copy fails at a change,
        # the stage-in is retried): the job was declined, told why, and read the PFS
        assert data.get("declined") is True, timeline
        told = " ".join(str(e.get("message")) for e in data["events"])
        assert "changed while it was copied" in told, timeline
