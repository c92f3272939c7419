"""Fixtures and helpers shared by the staging tests (engine, stream, stripe, flush).

``user`` and ``area`` are the unprivileged user the engine tests copy as and their
scratch directory; a module that needs a different tree overrides ``area`` and builds it
with ``scratch_area``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from rsa_scheduler.daemon.engines import EnginePool
from rsa_scheduler.runner import Identity
from rsa_scheduler.staging import treecopy
from tests.unit.test_staging_engine import make_tree


@pytest.fixture(autouse=True)
def brief_input_settle(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every engine test runs the settle check of a stage-in's big files, briefly: their
    files are seconds old, and the default (``treecopy.INPUT_SETTLE``) waits for a
    cluster's clients; tests/unit/test_input_settle.py checks the check itself."""
    monkeypatch.setattr(treecopy, "INPUT_SETTLE", 0.2)


def _is(argv: Sequence[str], program: str) -> bool:
    """Whether ``argv`` runs the staging script ``program`` (``bash -c PROGRAM ...``)."""
    return list(argv[2:3]) == [program]


@contextlib.contextmanager
def scratch_area(user: Identity, *, prefix: str = "rsa-staging-",
                 files: int = 40, where: str | None = None) -> Iterator[Path]:
    """A world-traversable scratch directory with src/ (``make_tree``, owned by ``user``)
    and outs/ (owned by ``user``), removed afterwards whatever modes the test left.
    ``where``: its parent (default the system's temporary directory; a contained command
    has a private /tmp of its own and cannot see one there: pass e.g. /run)."""
    base = Path(tempfile.mkdtemp(prefix=prefix, dir=where))
    base.chmod(0o755)
    try:
        make_tree(base / "src", user, files=files)
        (base / "outs").mkdir()
        os.chown(base / "outs", user.uid, user.gid)
        yield base
    finally:
        subprocess.run(["chmod", "-R", "u+rwx", str(base)], check=False)
        shutil.rmtree(base, ignore_errors=True)


#: a test that runs commands as another user (``user``: nobody) needs root
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run as a user")


@pytest.fixture
def pool() -> Iterator[EnginePool]:
    """A pool of staging worker processes (rsad's daemon/engines.py), closed after."""
    p = EnginePool()
    yield p
    p.close()


@pytest.fixture
def user() -> Identity:
    return Identity.of("nobody")


@pytest.fixture
def area(user: Identity) -> Iterator[Path]:
    """A world-traversable scratch directory with src/ (tree), ram/ and out/ roots."""
    with scratch_area(user) as base:
        yield base
