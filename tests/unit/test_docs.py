"""Generated documentation must match the code it is generated from."""

from __future__ import annotations

from rsa_scheduler import docgen


def test_generated_docs_are_current() -> None:
    assert docgen.stale() == [], "run: .venv/bin/python -m rsa_scheduler.docgen"


def test_diagrams_cover_every_rsa_state() -> None:
    from rsa_scheduler.core.diagram import diagrams
    from rsa_scheduler.core.states import RsaState

    text = diagrams()
    missing = [s.value for s in RsaState if f": {s.value}\n" not in text]
    assert missing == []
