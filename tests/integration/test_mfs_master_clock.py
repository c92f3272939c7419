"""A RAMDISK's MooseFS master lives across a full hour (the lab's mfsmaster, for real).

MooseFS 3.0.x saves its metadata every BACK_LOGS/2 hours and takes the hour modulo that:
with the ``BACK_LOGS = 1`` rsad once wrote, the master died of a division by zero at the
first hh:00:00 of its life and every client of the RAMDISK hung (found in a lab benchmark
at 18:00). Here the master rsad configures (``Layout.master_cfg``, byte for byte) runs in
a private network namespace under faketime, started eight seconds before a full hour: it
must be alive after it and have saved its metadata at it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from rsa_scheduler.fs.mfslayout import Layout

MFSMASTER = "/usr/sbin/mfsmaster"
#: 8 s before a full hour (any hour will do; a fixed one keeps the test the same each run)
START = "@2030-01-01 00:59:52"
EMPTY_BACK = 8  # bytes of the "MFSM NEW" metadata a fresh master starts from


@pytest.fixture
def pool(lab: Mapping[str, str]) -> Iterator[Path]:
    for tool in (MFSMASTER, shutil.which("faketime")):
        if not tool or not Path(tool).exists():
            pytest.fail(f"{tool or 'faketime'} missing: lab-up installs it (lab/packages.txt)")
    base = Path(f"/var/tmp/rsa-mfs-clock-{os.getpid()}")
    base.mkdir(mode=0o700)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _write(layout: Layout, node: str) -> Path:
    top = Path(layout.dir(node))
    for rel, content in layout.files(node).items():
        path = top / rel.rstrip("/")
        if rel.endswith("/"):
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
        else:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            path.write_text(content)
    return top


def test_the_ramdisk_master_outlives_a_full_hour(lab: Mapping[str, str], pool: Path) -> None:
    layout = Layout(fs_id="clock", nodes=("n1",), addresses={"n1": "127.0.0.1"},
                    pool_dirs={"n1": str(pool)}, mount_root=str(pool / "mnt"), base=29400,
                    secret="s3cret")
    top = _write(layout, "n1")
    back = top / "master" / "metadata.mfs.back"
    # its own process group: everything it starts is stopped with it, by that group
    proc = subprocess.Popen(
        ["unshare", "-n", "sh", "-c",
         'ip link set lo up && exec faketime -f "$0" "$1" -c "$2" -f start',
         START, MFSMASTER, str(top / "mfsmaster.cfg")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None and not (
                back.exists() and back.stat().st_size > EMPTY_BACK):
            time.sleep(0.5)
        alive = proc.poll() is None
        time.sleep(2)  # and still alive a moment after the save
        alive = alive and proc.poll() is None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=30)
    assert alive, f"mfsmaster died at the full hour (rc {proc.returncode}):\n{out[-2000:]}"
    assert back.exists() and back.stat().st_size > EMPTY_BACK, \
        f"no metadata saved at the full hour:\n{out[-2000:]}"
