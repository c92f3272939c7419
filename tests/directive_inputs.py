"""Inputs for the directive-parser tests of the three ports (Python, Lua, C): a Hypothesis
strategy for values that stress splitting (quotes, escapes, whitespace, undecodable
bytes: mostly well-formed pieces, so most values split, plus stray characters), and
scripts that put a directive at a given byte offset."""

from __future__ import annotations

from hypothesis import strategies as st

E_ACUTE, BAD_BYTE = "\u00e9", "\udcff"  # a 2-byte character; an undecodable byte 0xff


def _chars(ascii_chars: str, *more: str) -> st.SearchStrategy[str]:
    return st.sampled_from([*ascii_chars, *more])


_DQ_PARTS = st.one_of(  # what goes between double quotes
    st.sampled_from(['\\"', "\\\\", "\\a", "\\'", "\\\n", "\\" + BAD_BYTE]),
    st.text(_chars("a '\t", E_ACUTE), max_size=3),
)
_PIECE = st.one_of(
    st.text(_chars("ab#=/\v", E_ACUTE, BAD_BYTE), min_size=1, max_size=4),
    st.text(_chars('a "\\\t', BAD_BYTE), max_size=4).map(lambda t: f"'{t}'"),
    st.lists(_DQ_PARTS, max_size=4).map(lambda parts: '"' + "".join(parts) + '"'),
    st.sampled_from(["\\ ", "\\'", '\\"', "\\\\", "\\a", "\\" + E_ACUTE, "\\" + BAD_BYTE]),
    st.sampled_from([" ", "\t", "  ", "\r"]),
    _chars(" \t\r\n\v'\"\\#=a/", E_ACUTE, BAD_BYTE),  # stray: may leave a quote open
)
SPLIT_TEXT = st.lists(_PIECE, max_size=8).map(lambda pieces: "/p " + "".join(pieces))


def far_script(start: int, pad: str = "#") -> str:
    """A script whose #RSA_DATA_IN line starts at byte offset ``start``."""
    head = "#!/bin/sh\n"
    unit = len(pad.encode()) + 1
    n, rest = divmod(start - len(head), unit)
    body = (pad + "\n") * n + "#" * (rest - 1) + "\n" if rest else (pad + "\n") * n
    text = head + body + "#RSA_DATA_IN=/far\n"
    assert len(text.encode()) - len("#RSA_DATA_IN=/far\n") == start
    return text
