"""Generated documentation must match the code it is generated from."""

from __future__ import annotations

import subprocess

from rsa_scheduler import docgen


def test_generated_docs_are_current() -> None:
    assert docgen.stale() == [], "run: .venv/bin/python -m rsa_scheduler.docgen"


def test_man_pages_are_current_and_groff_reads_them_without_a_warning() -> None:
    from rsa_scheduler import manpages

    assert manpages.stale() == [], "run: .venv/bin/python -m rsa_scheduler.manpages"
    for name in manpages.pages():
        page = manpages.MAN / name
        r = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z", str(page)],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and r.stderr == "", f"{name}: {r.stderr}"
        shown = subprocess.run(["groff", "-man", "-Tascii", "-P-cbou", str(page)],
                               capture_output=True, text=True, timeout=60).stdout
        assert "NAME" in shown and "SEE ALSO" in shown


def test_a_man_page_escapes_what_roff_would_read_as_requests() -> None:
    from rsa_scheduler.manpages import esc, paragraphs

    assert esc(".TH evil") == "\\&.TH evil"
    assert esc("a\\b --x \u2014") == "a\\eb \\-\\-x \\[u2014]"
    assert paragraphs("first line\nwrapped\n\n  kept:\n    as is") == (
        "first line wrapped\n.PP\n.nf\n  kept:\n    as is\n.fi")


def test_diagrams_cover_every_rsa_state() -> None:
    from rsa_scheduler.core.diagram import diagrams
    from rsa_scheduler.core.states import RsaState

    text = diagrams()
    missing = [s.value for s in RsaState if f": {s.value}\n" not in text]
    assert missing == []
