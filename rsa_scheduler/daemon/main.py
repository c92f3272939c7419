"""rsad entry point. Owns process start-up: argument parsing, config and store opening."""

from __future__ import annotations

import sys


def main() -> None:
    """Start rsad."""
    sys.stderr.write("rsad: not implemented yet\n")
    sys.exit(2)
