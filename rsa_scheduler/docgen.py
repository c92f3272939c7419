"""Regenerates the generated parts of ``docs/`` from the code.

Owns the marker protocol: a generated block sits between ``<!-- BEGIN GENERATED: NAME -->``
and ``<!-- END GENERATED: NAME -->`` and is replaced whole. ``python -m
rsa_scheduler.docgen`` rewrites the files; the test suite fails when they are stale.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

from rsa_scheduler import usermessages
from rsa_scheduler.core import diagram, events

DOCS = Path(__file__).resolve().parent.parent / "docs"

#: file -> block name -> generator
BLOCKS: dict[str, dict[str, Callable[[], str]]] = {
    "architecture.md": {
        "state-diagrams": diagram.diagrams,
        "transition-reference": diagram.reference,
    },
    "events.md": {
        "event-catalogue": events.reference,
    },
    "user-guide.md": {
        "user-messages": usermessages.table,
    },
}


def render(text: str, blocks: dict[str, Callable[[], str]]) -> str:
    """``text`` with every known generated block replaced by fresh output."""
    for name, gen in blocks.items():
        pattern = re.compile(
            rf"(<!-- BEGIN GENERATED: {re.escape(name)} -->\n).*?"
            rf"(<!-- END GENERATED: {re.escape(name)} -->)", re.S)
        if not pattern.search(text):
            raise ValueError(f"generated block {name!r} markers missing")
        body = gen().rstrip("\n") + "\n"
        text = pattern.sub(_replacer(body), text)
    return text


def _replacer(body: str) -> Callable[[re.Match[str]], str]:
    def replace(m: re.Match[str]) -> str:
        return m.group(1) + body + m.group(2)

    return replace


def stale(docs: Path = DOCS) -> list[str]:
    """Names of doc files whose generated blocks are out of date."""
    out = []
    for fname, blocks in BLOCKS.items():
        text = (docs / fname).read_text(encoding="utf-8")
        if render(text, blocks) != text:
            out.append(fname)
    return out


def main() -> None:
    for fname, blocks in BLOCKS.items():
        path = DOCS / fname
        text = path.read_text(encoding="utf-8")
        new = render(text, blocks)
        if new != text:
            path.write_text(new, encoding="utf-8")
            sys.stdout.write(f"updated {path}\n")


if __name__ == "__main__":
    main()
