"""e2e tier: whole job lifecycles in the live lab (same facts/skip rules as integration),
and the input area several e2e files stage from.

The tier runs in both modes (``make lab-test`` queue, ``make lab-test-native`` native):
a test marked ``queue`` is about what only the queue-watching mode does (the start hold,
early start on the PFS, a decline to the PFS) and is skipped in a native-mode lab; a test
marked ``native`` needs a native-mode lab; a test marked ``once`` is about rsad, the
RSA nodes or the compute nodes' agents alone (their health, a RAMDISK's repair, a lost
staging worker, the order of stage-outs on the PFS, the mid-job reset, a hostile
DATA_IN's mount refused, a streamed copy), which work the same whichever mode drives
staging, and runs in the queue-mode lab only (docs/lab.md lists why each one); what a
mode does differently around them keeps its tests in
both (a node lost during stage-in: native mode's data_in hook must keep answering
"wait"; rsad killed mid-stage-in or mid-stage-out: the hooks ride through an unreachable
rsad); every other test runs in both."""

import os
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.integration.conftest import _needs_lab, as_user, lab
from tests.integration.slurmkit import restart_lab_rsad

__all__ = ["_needs_lab", "input_area", "lab", "lab_mode", "md5_of", "rsad_configured"]


def md5_of(directory: Path, pattern: str = "f*") -> str:
    """``md5sum PATTERN`` run in ``directory``: what a job's own ``(cd DIR && md5sum
    PATTERN)`` line writes, to compare with."""
    return subprocess.run(["bash", "-c", f"md5sum {pattern}"], cwd=directory,
                          capture_output=True, text=True, timeout=120, check=True).stdout


def lab_mode(lab: Mapping[str, str]) -> str:
    """The lab's rsad mode: ``queue`` or ``native`` (RSA_LAB_MODE at lab-up)."""
    return lab.get("RSA_LAB_MODE", "queue")


@pytest.fixture(autouse=True)
def _mode_of_the_test(request: pytest.FixtureRequest, lab: Mapping[str, str]) -> None:
    if request.node.get_closest_marker("native") and lab_mode(lab) != "native":
        pytest.skip("the lab runs in queue mode: RSA_LAB_MODE=native make lab-up "
                    "(make lab-test-native)")
    if request.node.get_closest_marker("queue") and lab_mode(lab) == "native":
        pytest.skip("queue-watching mode only (the native-mode lab runs the rest)")
    if request.node.get_closest_marker("once") and lab_mode(lab) == "native":
        pytest.skip("about rsad and the RSA nodes alone, the same in both modes: run in "
                    "the queue-mode lab (make lab-test)")


@contextmanager
def input_area(lab: Mapping[str, str], prefix: str) -> Iterator[Path]:
    """A fresh directory of the lab user's on the PFS with in/ (8 small random files),
    out/ and res/; removed afterwards (made writable first: a job may leave it read-only)."""
    base = Path(lab["RSA_LAB_PFS"]) / f"{prefix}-{os.getpid()}-{time.monotonic_ns()}"
    script = (f"set -e; mkdir -p {base}/in {base}/out {base}/res; "
              f"for i in $(seq 1 8); do head -c $((i*5000)) /dev/urandom > {base}/in/f$i; "
              "done")
    done = as_user(lab, lab["RSA_LAB_USER"], ["bash", "-c", script], timeout=120)
    assert done.returncode == 0, done.stderr
    try:
        yield base
    finally:
        as_user(lab, lab["RSA_LAB_USER"], ["chmod", "-R", "u+rwx", str(base)], timeout=60)
        subprocess.run(["rm", "-rf", str(base)], check=False, timeout=120)


@contextmanager
def other_user_area(lab: Mapping[str, str], prefix: str) -> Iterator[Path]:
    """A fresh directory of the lab's second user (rsaother) on the PFS with in/f1 and
    res/; removed afterwards."""
    base = Path(lab["RSA_LAB_OTHER_PFS"]) / f"{prefix}-{time.monotonic_ns()}"
    done = as_user(lab, lab["RSA_LAB_OTHER_USER"], [
        "bash", "-c", f"mkdir -p {base}/in {base}/res && "
                      f"head -c 20000 /dev/urandom > {base}/in/f1"])
    assert done.returncode == 0, done.stderr
    try:
        yield base
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=False, timeout=120)


@contextmanager
def rsad_configured(lab: Mapping[str, str], staging: str) -> Iterator[None]:
    """The lab's rsad restarted with ``staging`` (YAML lines, two-space indented) added
    to its staging section; the lab's own configuration and rsad back afterwards."""
    conf = Path(lab["RSA_LAB_RSA_CONFIG"])
    original = conf.read_text()
    assert original.count("\nstaging:\n") == 1, "the lab's rsa.yaml has no staging section"
    conf.write_text(original.replace("\nstaging:\n", f"\nstaging:\n{staging}", 1))
    try:
        restart_lab_rsad(signal.SIGTERM)
        yield
    finally:
        conf.write_text(original)
        restart_lab_rsad(signal.SIGTERM)
