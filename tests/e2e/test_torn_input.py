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


def rewrite(lab: Mapping[str, str], big: Path) -> subprocess.CompletedProcess[str]:
    """As the user: every 8 MiB block of ``big`` overwritten with new data, in place, last
    block first, in some 5 s (the PFS's link; the copy of the whole file takes about as
    long). Backwards: a copy reading forwards that overlaps the rewrite at all reads its
    first block old and its last block new, whoever started first."""
    script = (f"head -c 8M /dev/urandom > {big}.new-block; for i in $(seq {CHUNKS - 1} "
              f"-1 0); do dd if={big}.new-block of={big} bs=8M seek=$i "
              "conv=notrunc status=none; done; rm -f "
              f"{big}.new-block")
    return as_user(lab, lab["RSA_LAB_USER"], ["bash", "-c", script], timeout=300)


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
    with make_jobs(lab) as jobs:
        fill(jobs)
        job = jobs.submit(script=script)
        wait_state(lab, job, "staging-in", timeout=120)
        done: list[subprocess.CompletedProcess[str]] = []
        writer = threading.Thread(target=lambda: done.append(rewrite(lab, inp / "big")))
        writer.start()
        writer.join(timeout=300)
        assert done and done[0].returncode == 0, done
        final = subprocess.run(["bash", "-c", "md5sum big small"], cwd=inp,
                               capture_output=True, text=True, timeout=120,
                               check=True).stdout
        wait_state(lab, job, "locked-in", "declined", timeout=300)
        for filler in jobs.ids[:4]:
            root(lab, "scancel", filler)
        wait_state(lab, job, "released", timeout=240)
    data = rsa_job(lab, job)
    assert data is not None
    timeline = [{k: v for k, v in e.items() if k in ("name", "action", "result", "message",
                                                      "from", "to")}
                for e in data["events"]]
    assert (res / "md5-job").read_text() == final, timeline  # before: old and new blocks
    assert (res / "inmnt").read_text().split("\n")[0] == str(inp), timeline  # the RAMDISK
