"""Sizes and durations written the way Slurm writes them.

Owns parsing and formatting of byte sizes (``512M``, ``64G``, ``3.5T``; binary multiples
as Slurm uses, with optional ``B``/``iB`` suffix) and durations (``30s``/``5m``/``2h``/
``1d`` or Slurm's ``MM:SS``, ``HH:MM:SS``, ``D-HH[:MM[:SS]]``, or bare minutes as in
``--time``). Stdlib only.
"""

from __future__ import annotations

import math
import re

_SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}
# re.ASCII: without it IGNORECASE lets U+017F "ſ" match "s" and U+212A "K" match "k".
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGTP]?)(?:i?B)?\s*$",
                      re.IGNORECASE | re.ASCII)
_DUR_SUFFIX_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$",
                            re.IGNORECASE | re.ASCII)
_DUR_SUFFIX = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
_DUR_SLURM_RE = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$", re.ASCII)


def parse_size(text: str) -> int:
    """Parse a size such as ``64G``, ``3.5T``, ``3.5TB``, ``512MiB`` or ``1048576`` to bytes.

    Units are binary (K = 1024), as in Slurm. Raises ValueError with the accepted forms.
    """
    m = _SIZE_RE.match(str(text))
    if not m:
        raise ValueError(
            f"invalid size {text!r}: use a number with an optional unit K, M, G, T or P "
            "(binary, e.g. 512M, 64G, 3.5T)"
        )
    value = float(m.group(1)) * _SIZE_UNITS[m.group(2).upper()]
    if value != math.floor(value) and m.group(2) == "":
        raise ValueError(f"invalid size {text!r}: a size in bytes must be a whole number")
    return int(value)


def format_size(nbytes: int) -> str:
    """Format bytes the way Slurm prints sizes: largest binary unit, up to 2 decimals."""
    if nbytes < 1024:
        return f"{nbytes}B"
    for unit in ("P", "T", "G", "M", "K"):
        mult = _SIZE_UNITS[unit]
        if nbytes >= mult:
            value = nbytes / mult
            text = f"{value:.2f}".rstrip("0").rstrip(".")
            return f"{text}{unit}"
    raise AssertionError("unreachable")


def parse_duration(text: str | int | float) -> float:
    """Parse a duration to seconds.

    Accepts a number of seconds (int/float from YAML), ``30s``, ``5m``, ``2h``, ``1d``,
    ``250ms``, or Slurm's time forms ``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``,
    ``D-HH:MM``, ``D-HH:MM:SS`` (a bare string number means minutes, as ``--time`` does).
    """
    if isinstance(text, bool):
        raise ValueError(f"invalid duration {text!r}")
    if isinstance(text, int | float):
        if text < 0:
            raise ValueError(f"invalid duration {text!r}: must not be negative")
        return float(text)
    s = text.strip()
    m = _DUR_SUFFIX_RE.match(s)
    if m:
        return float(m.group(1)) * _DUR_SUFFIX[m.group(2).lower()]
    m = _DUR_SLURM_RE.match(s)
    if m:
        days, a, b, c = m.groups()
        if days is not None:
            # D-HH[:MM[:SS]]
            hours, minutes, seconds = int(a), int(b or 0), int(c or 0)
            return float(int(days) * 86400 + hours * 3600 + minutes * 60 + seconds)
        if b is None:
            return float(int(a) * 60)  # MM
        if c is None:
            return float(int(a) * 60 + int(b))  # MM:SS
        return float(int(a) * 3600 + int(b) * 60 + int(c))  # HH:MM:SS
    raise ValueError(
        f"invalid duration {text!r}: use e.g. 30s, 5m, 2h, 1d, or Slurm's "
        "MM:SS, HH:MM:SS, D-HH:MM:SS"
    )


def format_duration(seconds: float) -> str:
    """Format seconds the way Slurm prints elapsed time: ``[D-]HH:MM:SS``."""
    total = round(seconds)
    sign = "-" if total < 0 else ""
    total = abs(total)
    days, rem = divmod(total, 86400)
    hours, rem = divmod(rem, 3600)
    minutes, secs = divmod(rem, 60)
    if days:
        return f"{sign}{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{sign}{hours:02d}:{minutes:02d}:{secs:02d}"
