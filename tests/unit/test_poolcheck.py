"""The pool's own-filesystem check (rsa_scheduler/fs/poolcheck.py), run for real as root
on pools made in a throwaway mount namespace (nothing is mounted on this host)."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from rsa_scheduler.fs.poolcheck import parse_pool_check, pool_check_argv

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mount namespaces)")


def check(pool: Path, setup: str = "") -> tuple[str, ...]:
    """POOL_CHECK on ``pool`` after ``setup`` (shell, as root) in a private namespace."""
    script = f"{setup}\nexec {shlex.join(pool_check_argv(str(pool)))}"
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", "--", "sh",
                           "-ec", script], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return parse_pool_check(done.stdout)


def tmpfs(pool: Path, mode: str = "0700") -> str:
    return f"mount -t tmpfs -o size=16m,mode={mode} rsa-test-pool {shlex.quote(str(pool))}"


def test_the_output_is_one_line_per_finding() -> None:
    assert parse_pool_check("SHARED\ta\nnoise\nSHARED\tb c\n") == ("a", "b c")
    assert parse_pool_check("") == ()


@needs_root
def test_a_pool_directory_on_dev_shm_shares_its_filesystem_with_every_user(
        tmp_path: Path) -> None:
    pool = Path("/dev/shm") / f"rsa-pool-test-{os.getpid()}"
    pool.mkdir(mode=0o700)
    try:
        found = check(pool)
    finally:
        pool.rmdir()
    assert len(found) == 1 and "is not a mount point" in found[0] and "/dev/shm" in found[0]


@needs_root
def test_a_tmpfs_of_its_own_roots_and_closed_is_sound(tmp_path: Path) -> None:
    pool = tmp_path / "pool"
    pool.mkdir()
    # the RAMDISKs the backends keep there are users' own and do not count
    assert check(pool, tmpfs(pool) + f"\ninstall -d -o 65534 -m 0700 {pool}/rsa-tmpfs-job1-c1"
                 f"\nmkdir -m 1777 {pool}/rsa-tmpfs-job1-c1/x") == ()


@needs_root
def test_a_pool_users_can_write_is_reported(tmp_path: Path) -> None:
    pool = tmp_path / "pool"
    pool.mkdir()
    found = check(pool, tmpfs(pool, "1777"))
    assert found == (f"{pool} is owned by uid 0, mode 1777: it must be root's and writable "
                     "by root only",)
    found = check(pool, tmpfs(pool) + f"\nmkdir -m 1777 {pool}/scratch"
                  f"\ninstall -d -o 65534 {pool}/home")
    assert sorted(found) == sorted([
        f"{pool}/scratch, on the pool's filesystem, is writable by a user",
        f"{pool}/home, on the pool's filesystem, is writable by a user"])


@needs_root
def test_a_pool_filesystem_also_mounted_elsewhere_is_reported(tmp_path: Path) -> None:
    pool, other = tmp_path / "pool", tmp_path / "shm"
    pool.mkdir()
    other.mkdir()
    found = check(pool, tmpfs(pool) + f"\nmount --bind {pool} {other}"
                  f"\nmkdir {pool}/rsa-tmpfs-j && mkdir {tmp_path}/ramdisk"
                  f"\nmount --bind {pool}/rsa-tmpfs-j {tmp_path}/ramdisk")
    assert found == (f"{pool} is also mounted at {other}",)


@needs_root
def test_a_missing_pool_is_reported(tmp_path: Path) -> None:
    assert check(tmp_path / "nope") == (f"{tmp_path / 'nope'} is not a directory",)
