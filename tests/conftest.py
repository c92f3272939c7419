"""Test-wide configuration: tier markers follow the folder a test lives in; tests that
empty slurmctld's state run last."""

from __future__ import annotations

from pathlib import Path

import pytest

# Shared assertion helpers live outside test modules: let pytest rewrite their asserts.
pytest.register_assert_rewrite("tests.fs_conformance", "tests.unit.corekit")

TIERS = ("unit", "integration", "e2e")
DATA = Path(__file__).parent / "data"


def hook_wrapper(name: str) -> Path:
    """prolog_epilog/``name`` (rsa-prolog, rsa-epilog): the repository's, or where a
    package installed it (make install-test runs the unit tests without the
    repository's prolog_epilog/: debian/rules, pyproject.toml)."""
    import sys

    places = [Path(__file__).resolve().parents[1] / "prolog_epilog" / name,
              Path("/usr/lib/rsa-scheduler") / name,
              Path(sys.prefix) / "share" / "rsa-scheduler" / "prolog_epilog" / name]
    found = [w for w in places if w.is_file()]
    assert found, f"no {name} wrapper at any of {places}"
    return found[0]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = Path(str(item.fspath)).parts
        for tier in TIERS:
            if tier in parts:
                item.add_marker(getattr(pytest.mark, tier))
    # A test that empties slurmctld's saved state restarts Slurm's job ids: every later
    # job of the same lab run would reuse an earlier test's id. Those run last.
    items.sort(key=lambda item: item.get_closest_marker("wipes_slurm_state") is not None)
