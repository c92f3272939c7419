"""The MooseFS 4 tier: the RAMDISK driver against real MooseFS 4 binaries (Debian 13's),
chrooted in namespaces of the test's own (tests/mfs4/sandbox.py). Run as root, under the
lab lock (``make mfs4-test``). Skipped, with the reason, when the Debian 13 root cannot be
built here (no Debian archive, no debootstrap)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.mfs4.sandbox import mfs4_root


@pytest.fixture(scope="session")
def root() -> Path:
    if os.geteuid() != 0:
        pytest.skip("the MooseFS 4 tests run as root (chroot, namespaces, FUSE)")
    found, why = mfs4_root()
    if found is None:
        pytest.skip(why)
    return found
