"""Security tier: each attack of docs/security.md tried for real against the live lab,
as the second lab user (rsaother) or a hostile job; same facts/skip rules as integration."""

from tests.integration.conftest import _needs_lab, lab

__all__ = ["_needs_lab", "lab"]
