"""The PFS probe of ``rsa nodes check`` (fs/pfscheck.py): the real script on this host's
real filesystems (a tmpfs of the test's own in a throwaway mount namespace stands for a
node's local directory at the PFS's path), and the comparison."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from rsa_scheduler.fs.pfscheck import Seen, compare, parse_probe, pfs_lacks, probe_argv


def probe(*roots: str, prefix: tuple[str, ...] = ()) -> dict[str, Seen]:
    done = subprocess.run([*prefix, *probe_argv(list(roots))], capture_output=True, text=True,
                          timeout=30, check=True)
    return parse_probe(done.stdout)


def test_the_same_directory_is_the_same_filesystem(tmp_path: Path) -> None:
    for i in range(3):
        (tmp_path / f"user{i}").mkdir()
    (tmp_path / "odd\tname").mkdir()
    (tmp_path / "new\nline").mkdir()  # left out: one line each
    a, b = probe(str(tmp_path)), probe(str(tmp_path))
    assert a == b and pfs_lacks(a, b) == ()
    here = a[str(tmp_path)]
    assert here.fstype and here.inode == os.stat(tmp_path).st_ino
    assert set(here.entries) == {"user0", "user1", "user2", "odd\tname"}
    assert here.entries["user1"] == os.stat(tmp_path / "user1").st_ino


@pytest.mark.skipif(os.geteuid() != 0, reason="a mount namespace of the test's own needs root")
def test_a_local_directory_at_the_pfss_path_is_not_the_pfs(tmp_path: Path) -> None:
    """What a node sees where the PFS was not mounted: a filesystem of its own there."""
    (tmp_path / "alice").mkdir()
    here = probe(str(tmp_path))
    script = f"mount -t tmpfs none {tmp_path} && mkdir {tmp_path}/alice && exec \"$@\""
    there = probe(str(tmp_path), prefix=("unshare", "--mount", "--propagation", "private",
                                          "sh", "-c", script, "ns"))
    (lack,) = pfs_lacks(here, there)
    # tmpfs there; whatever /tmp is here, another filesystem
    assert lack.startswith(f"the PFS at {tmp_path} as rsad's host sees it (")
    assert "tmpfs there" in lack or "another tmpfs filesystem" in lack, lack
    assert lack.endswith(f"mount the site's PFS at {tmp_path} on this node as on rsad's host "
                         "(RSA nodes copy as the user from and to the same paths)")


def test_what_differs_is_said() -> None:
    here = Seen("/scratch", "fuseblk", 1, {"alice": 10, "bob": 11})
    assert compare(here, None) == "not there"
    assert compare(here, Seen("/scratch")) == "not there"
    assert compare(here, Seen("/scratch", "fuseblk", 1, {"alice": 10})) == ""  # bob is new
    assert compare(here, Seen("/scratch", "fuseblk", 1, {"alice": 99})) == (
        "another fuseblk filesystem than rsad's host's ('alice' is inode 99 there, 10 on "
        "rsad's host)")
    assert compare(here, Seen("/scratch", "fuseblk", 7, {})) == (
        "another fuseblk filesystem than rsad's host's (its root is inode 7 there, 1 on "
        "rsad's host)")
    assert compare(here, Seen("/scratch", "fuseblk", 1, {"carol": 3})) == (
        "another fuseblk filesystem than rsad's host's (none of its entries is there)")


def test_a_root_rsads_host_has_not_is_not_compared() -> None:
    assert pfs_lacks({"/gone": Seen("/gone")}, {}) == ()
    assert parse_probe(subprocess.run(probe_argv(["/no/such/root"]), capture_output=True,
                                      text=True, check=True, timeout=30).stdout) == {
        "/no/such/root": Seen("/no/such/root")}
