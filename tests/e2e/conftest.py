"""e2e tier: whole job lifecycles in the live lab (same facts/skip rules as integration)."""

from tests.integration.conftest import _needs_lab, lab

__all__ = ["_needs_lab", "lab"]
