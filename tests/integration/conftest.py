"""Integration tier: the live lab (`make lab-up`), described by /run/rsa-lab/env.

Every test here gets the lab's facts through the session fixture ``lab``. Without a lab
the tier is skipped with the reason, except under CI (CI=true), where a missing lab is a
failure: CI must never pass by skipping the real cluster.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest

LAB_ENV = Path(os.environ.get("RSA_LAB_ENV", "/run/rsa-lab/env"))


def read_lab_env(path: Path = LAB_ENV) -> dict[str, str]:
    """Parse the lab's shell KEY=VALUE lines (values may be shell-quoted)."""
    facts: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        parts = shlex.split(value)
        facts[key] = parts[0] if parts else ""
    return facts


@pytest.fixture(scope="session")
def lab() -> Mapping[str, str]:
    if not LAB_ENV.exists():
        reason = f"lab is not up ({LAB_ENV} missing): run `make lab-up` as root"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI: {reason}", pytrace=False)
        pytest.skip(reason)
    return read_lab_env()


@pytest.fixture(autouse=True)
def _needs_lab(lab: Mapping[str, str]) -> None:
    """Every integration test needs the lab: skip (or fail under CI) without it."""


def slurm_env(lab: Mapping[str, str]) -> dict[str, str]:
    return {**os.environ, "SLURM_CONF": lab["RSA_LAB_SLURM_CONF"]}


def as_user(
    lab: Mapping[str, str], user: str, argv: list[str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run a command as a lab user (e.g. sbatch as rsauser), from a directory they own."""
    return subprocess.run(
        ["runuser", "-u", user, "--", *argv],
        capture_output=True, text=True, timeout=timeout, env=slurm_env(lab),
        cwd="/", check=False,
    )
