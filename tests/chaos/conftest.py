"""Chaos tier: whole lifecycles in the live lab under seeded random kills (same facts and
skip rules as integration)."""

from tests.integration.conftest import _needs_lab, lab

__all__ = ["_needs_lab", "lab"]
