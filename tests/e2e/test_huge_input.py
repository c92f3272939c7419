"""An input larger than the job's RAMDISK, in the lab: refused before a byte is copied,
the user told what fits, the input untouched, the RSA node's pool never filled; and the
``#RSA_CAPACITY`` the message suggests gets the job RSA nodes enough to hold it.

The lab's RSA nodes have 2 GiB of RAM each, and a one-node job gets one of them; its
input is one 2.31 GiB file. In queue mode the job runs from the PFS (told so in its
comment); in native mode Slurm holds it with rsad's line, as for any stage-in refusal.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from tests.e2e.conftest import lab_mode, md5_of
from tests.e2e.test_native import json_job
from tests.integration.conftest import as_user
from tests.integration.slurmkit import lab_nodes, make_jobs, on_lab_node, root, wait_for
from tests.integration.test_rsad_staging import rsa_job, wait_state

CHUNKS = 37  # of 64 MiB: 2.31 GiB, more than one lab RSA node (2 GiB), less than two


@pytest.fixture(scope="module")
def area(lab: Mapping[str, str]) -> Iterator[Path]:
    base = Path(lab["RSA_LAB_PFS"]) / f"huge-e2e-{os.getpid()}-{time.monotonic_ns()}"
    script = (f"set -e; mkdir -p {base}/in {base}/res; "
              # random data, not sparse, without drawing 2.3 GiB from the kernel's RNG
              f"head -c 64M /dev/urandom > {base}/chunk; for i in $(seq {CHUNKS}); do "
              f"cat {base}/chunk; done > {base}/in/fbig; rm {base}/chunk; "
              f"echo s > {base}/in/fs; "
              f"cd {base}/in && md5sum f* > {base}/res/md5-in")
    done = as_user(lab, lab["RSA_LAB_USER"], ["bash", "-c", script], timeout=600)
    assert done.returncode == 0, done.stderr
    yield base
    subprocess.run(["rm", "-rf", str(base)], check=False, timeout=300)


def script(area: Path, tag: str, capacity: str = "") -> str:
    extra = f"#RSA_CAPACITY={capacity}\n" if capacity else ""
    return f"""#!/bin/bash
#SBATCH -t 10
#RSA_DATA_IN={area}/in
{extra}findmnt -n -o TARGET --target {area}/in > {area}/res/inmnt-{tag}
(cd {area}/in && md5sum f*) > {area}/res/md5-{tag}
touch {area}/res/done-{tag}
"""


def pool_peak(lab: Mapping[str, str], stop: threading.Event) -> int:
    """Watch the RSA nodes' RAM pools (a tmpfs each) until ``stop`` is set: the most used."""
    peak = 0
    pool = lab["RSA_LAB_POOL_RAM"]
    nodes = lab_nodes(lab, "RSA_LAB_RSA_NODES")
    while not stop.is_set():
        for node in nodes:
            out = on_lab_node(node, ["df", "-B1", "--output=used", pool],
                              timeout=30).stdout.split()
            if out and out[-1].isdigit():
                peak = max(peak, int(out[-1]))
        stop.wait(0.5)
    return peak


def test_an_input_larger_than_the_ramdisk_is_refused_before_copying_and_the_hint_fits(
        lab: Mapping[str, str], area: Path) -> None:
    stop = threading.Event()
    peak: list[int] = []
    watcher = threading.Thread(target=lambda: peak.append(pool_peak(lab, stop)))
    watcher.start()
    try:
        with make_jobs(lab) as jobs:
            job = jobs.submit(script=script(area, "small"))
            if lab_mode(lab) == "native":
                entry = wait_for("the stage-in refusal", lambda: (
                    e if (e := json_job(lab, job)).get("state_reason") ==
                    "BurstBufferOperation" else None), timeout=300)
                told = str(entry["state_description"])
                assert entry["priority"] == 0, entry  # held
                root(lab, "scancel", job)
            else:
                wait_state(lab, job, "released", timeout=300)
                wait_for("the job ran", lambda: (area / "res" / "done-small").exists(),
                         timeout=120)
                told = root(lab, "squeue", "-h", "-t", "all", "-j", job, "-o", "%k") or \
                    str((rsa_job(lab, job) or {}).get("message"))
                # it ran from the PFS, with its whole input
                assert (area / "res" / "inmnt-small").read_text().strip() != \
                    str(area / "in")
                assert (area / "res" / "md5-small").read_text() == \
                    (area / "res" / "md5-in").read_text()
    finally:
        stop.set()
        watcher.join()
    assert "stage-in refused: the input (2.31G in 2 files) is larger than the RAMDISK's " \
        "free space (" in told, told
    assert "set #RSA_CAPACITY=3G or more to get RSA nodes that hold it" in told, told
    assert " … " not in told, told  # whole
    assert "cannot read" not in told, told
    # refused before copying: the pool never held the input (a tmpfs of 2 GiB: the
    # copy would have filled it)
    assert peak and peak[0] < 512 << 20, peak
    assert md5_of(area / "in") == (area / "res" / "md5-in").read_text()  # untouched

    # the hint: with #RSA_CAPACITY=3G the job gets two RSA nodes and reads its input
    # from the RAMDISK
    with make_jobs(lab) as jobs:
        job = jobs.submit(script=script(area, "fits", "3G"))
        wait_for("the job ran", lambda: (area / "res" / "done-fits").exists(), timeout=600)
        wait_state(lab, job, "released", timeout=300)
    data = rsa_job(lab, job) or {}
    allocated = [e for e in data.get("events", []) if e["name"] == "rsa.transition"
                 and e.get("to") == "allocated"]
    assert (area / "res" / "inmnt-fits").read_text().strip() == str(area / "in"), data
    assert (area / "res" / "md5-fits").read_text() == (area / "res" / "md5-in").read_text()
    assert allocated, data
