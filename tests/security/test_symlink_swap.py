"""Root never acts on a path the user can change (issue 12, point 2), in the live lab.

* **The symlink swap.** A job (as the lab user) whose RAMDISK is mounted over its
  ``#RSA_DATA_IN`` renames the parent of DATA_IN during its run and puts a symlink in its
  place, pointing at a root-owned directory holding a *sentinel* mount (a small tmpfs this
  test mounts in every compute node's mount namespace). The Epilog must not detach the
  sentinel: it undoes what it mounted by the mount's recorded id, never by the path; the
  job's own RAMDISK mount, now under the renamed directory, must be gone too.
* **A planted symlink in a shared DATA_OUT.** The second lab user plants symlinks in a
  DATA_OUT both users can write, named like the job's output (a small file, a big file
  copied by dd, a directory), pointing at the job user's own files. Stage-out, run as the
  job's user, must refuse with one clear line and write nothing through them.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from ClusterShell.NodeSet import NodeSet

from rsa_scheduler.remote import SshHost
from rsa_scheduler.runner import Identity
from rsa_scheduler.staging import StagingEngine, StagingError
from tests.e2e.test_prolog_lifecycle import nothing_of_job_mounted, run_to_start
from tests.integration.conftest import as_user
from tests.integration.slurmkit import in_cluster, make_jobs, on_node, wait_for
from tests.integration.test_rsad_staging import wait_state

SENTINEL = Path(f"/run/rsa-sentinel-{os.getpid()}")


def slurmd_pids(lab: Mapping[str, str]) -> dict[str, str]:
    """Each compute node and how to reach its mount namespace: the host lab's slurmd pid,
    the cluster lab's node name (the door)."""
    if in_cluster():
        return {n: n for n in NodeSet(lab["RSA_LAB_COMPUTE_NODES"])}
    return {n: Path(f"/run/rsa-lab/pids/slurmd-{n}.pid").read_text().strip()
            for n in NodeSet(lab["RSA_LAB_COMPUTE_NODES"])}


def in_node(pid: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a command (as root) in a compute node's mount namespace (:func:`slurmd_pids`)."""
    if in_cluster():
        return on_node(pid, argv, timeout=30, check=check)
    return subprocess.run(["nsenter", "-t", pid, "-m", "--", *argv], check=check,
                          capture_output=True, text=True, timeout=30)


@pytest.fixture
def sentinel(lab: Mapping[str, str]) -> Iterator[Path]:
    """``SENTINEL/in``: a tmpfs mounted in every compute node's namespace, root-owned."""
    pids = slurmd_pids(lab)
    mounted: list[str] = []
    try:
        for pid in pids.values():
            in_node(pid, "install", "-d", "-m", "0755", str(SENTINEL / "in"))
            in_node(pid, "mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "rsa-sentinel",
                    str(SENTINEL / "in"))
            mounted.append(pid)
            in_node(pid, "sh", "-c", f"echo sentinel > {SENTINEL}/in/marker")
        yield SENTINEL
    finally:
        for pid in mounted:
            # the sentinel may have been detached (the bug): then umount fails, fine
            in_node(pid, "umount", str(SENTINEL / "in"), check=False)
        for pid in pids.values():
            in_node(pid, "rm", "-rf", "--one-file-system", str(SENTINEL), check=False)


@pytest.fixture
def area(lab: Mapping[str, str]) -> Iterator[Path]:
    base = Path(lab["RSA_LAB_PFS"]) / f"symswap-{os.getpid()}-{time.monotonic_ns()}"
    script = (f"set -e; mkdir -p {base}/x/in {base}/out {base}/res; "
              f"for i in 1 2 3; do head -c $((i*4000)) /dev/urandom > {base}/x/in/f$i; done")
    done = as_user(lab, lab["RSA_LAB_USER"], ["bash", "-c", script], timeout=120)
    assert done.returncode == 0, done.stderr
    yield base
    subprocess.run(["rm", "-rf", "--one-file-system", str(base)], check=False, timeout=120)


def test_epilog_does_not_follow_a_symlink_planted_over_data_in(
        lab: Mapping[str, str], area: Path, sentinel: Path) -> None:
    data_in, res = area / "x" / "in", area / "res"
    moved = area / "x.moved" / "in"
    script = f"""#!/bin/bash
#SBATCH -t 5
#RSA_DATA_IN={data_in}
#RSA_DATA_OUT={area / 'out'}
findmnt -n -o TARGET --target {data_in} > {res}/inmnt
mv {area}/x {area}/x.moved && ln -s {sentinel} {area}/x && echo swapped > {res}/swapped
findmnt -n -o TARGET --target {moved} > {res}/movedmnt
"""
    with make_jobs(lab) as jobs:
        job = run_to_start(lab, jobs, script)
        wait_state(lab, job, "released", timeout=180)
        wait_for(f"job {job}'s client mounts gone", lambda: nothing_of_job_mounted(job),
                 timeout=60)
    # the attack really ran against a mounted RAMDISK, and the mount moved with the rename
    assert (res / "inmnt").read_text().strip() == str(data_in)
    assert (res / "swapped").read_text() == "swapped\n"
    assert (res / "movedmnt").read_text().strip() == str(moved)
    for node, pid in slurmd_pids(lab).items():
        check = in_node(pid, "mountpoint", "-q", str(sentinel / "in"), check=False)
        assert check.returncode == 0, f"{node}: the Epilog detached the sentinel mount"
        marker = in_node(pid, "cat", str(sentinel / "in" / "marker"), check=False)
        assert marker.stdout == "sentinel\n", f"{node}: {marker.stderr}"
        # the job's own mount, followed by its recorded id, is gone as well
        where = in_node(pid, "findmnt", "-n", "-o", "TARGET", "--target", str(moved),
                        check=False).stdout.strip()
        assert where != str(moved), f"{node}: the job's RAMDISK is still over {moved}"


# --- stage-out into a shared DATA_OUT ---------------------------------------------------

@pytest.fixture
def shared(lab: Mapping[str, str]) -> Iterator[tuple[Path, Path, Path]]:
    """(the job's output on the PFS, a DATA_OUT both lab users can write, the job user's
    own files the planted symlinks point at)."""
    user = Identity.of(lab["RSA_LAB_USER"])
    tag = f"{os.getpid()}-{time.monotonic_ns()}"
    home = Path(lab["RSA_LAB_PFS"])
    src, victim = home / f"symout-src-{tag}", home / f"symout-victim-{tag}"
    dst = home.parent / f"rsa-shared-out-{tag}"  # root-made, 0777 without the sticky bit
    script = (f"set -e; mkdir -p {src}/sub {victim}/dir; echo small > {src}/small; "
              f"head -c 3M /dev/urandom > {src}/big; echo deep > {src}/sub/deep; "
              f"echo precious > {victim}/small; echo precious > {victim}/big")
    done = as_user(lab, user.user, ["bash", "-c", script], timeout=120)
    assert done.returncode == 0, done.stderr
    subprocess.run(["install", "-d", "-m", "0777", str(dst)], check=True, timeout=30)
    try:
        yield src, dst, victim
    finally:
        for p in (src, dst, victim):
            subprocess.run(["rm", "-rf", "--one-file-system", str(p)], check=False,
                           timeout=120)


RSYNC_TEMPLATE = "rsync -aH --from0 --files-from={list} {recursive} {src}/ {dst}/"


@pytest.mark.parametrize("copy_tool", ["engine", "rsync", "custom"])
def test_stage_out_refuses_symlinks_planted_in_a_shared_data_out(
        lab: Mapping[str, str], shared: tuple[Path, Path, Path], copy_tool: str) -> None:
    """Whatever copies (the engine's tar and dd, real rsync, the operator's documented
    custom template), nothing is written through another user's symlinks."""
    src, dst, victim = shared
    other = lab["RSA_LAB_OTHER_USER"]
    plant = (f"ln -s {victim}/small {dst}/small && ln -s {victim}/big {dst}/big && "
             f"ln -s {victim}/dir {dst}/sub")
    done = as_user(lab, other, ["bash", "-c", plant])
    assert done.returncode == 0, done.stderr
    addr = lab["RSA_LAB_RSA_ADDRESSES"].split(",")[0]
    host = SshHost("rsa1", addr, key=lab["RSA_LAB_SSH_KEY"],
                   known_hosts=lab["RSA_LAB_SSH_KNOWN_HOSTS"])
    try:
        eng = StagingEngine([host], Identity.of(lab["RSA_LAB_USER"]), job_id="4343",
                            big_bytes=1 << 20, copy_tool=copy_tool,
                            copy_command=RSYNC_TEMPLATE if copy_tool == "custom" else "")
        with pytest.raises(StagingError) as err:
            eng.stage_out(str(src), str(dst))
    finally:
        host.close()
    message = str(err.value)
    assert "symlink" in message and "'small'" in message, message
    assert "\n" not in message
    assert (victim / "small").read_text() == "precious\n"
    assert (victim / "big").read_text() == "precious\n"
    assert list((victim / "dir").iterdir()) == []
