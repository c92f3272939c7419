"""Sizes and durations written the way Slurm writes them.

Owns parsing and formatting of byte sizes (``512M``, ``64G``, ``3.5T``; binary multiples
as Slurm uses, with optional ``B``/``iB`` suffix) and durations (``30s``/``5m``/``2h``/
``1d`` or Slurm's ``MM:SS``, ``HH:MM:SS``, ``D-HH[:MM[:SS]]``, or bare minutes as in
``--time``). Stdlib only.
"""

from __future__ import annotations

import math
import re
from typing import Final

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
    if math.isinf(value):  # int(inf) would raise OverflowError
        raise ValueError(f"invalid size {_shorten(text)}: too large")
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


#: The longest duration a setting may have (config keys, scenario durations): one year.
MAX_DURATION: Final = 365 * 86400.0
#: The latest point in time a scenario may name (timeline ``at``, ``until``): ten years.
MAX_TIME: Final = 10 * 365 * 86400.0


def parse_duration(text: str | int | float, *, limit: float = math.inf) -> float:
    """Parse a duration to seconds.

    Accepts a number of seconds (int/float from YAML), ``30s``, ``5m``, ``2h``, ``1d``,
    ``250ms``, or Slurm's time forms ``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``,
    ``D-HH:MM``, ``D-HH:MM:SS`` (a bare string number means minutes, as ``--time`` does).

    The result is a finite number of seconds, ``0 <= seconds <= limit``: NaN, infinity,
    negative values and values above ``limit`` (e.g. :data:`MAX_DURATION`) raise
    ValueError, whose message starts ``invalid duration``.
    """
    if isinstance(text, bool):
        raise ValueError(
            "invalid duration: expected a duration, got a boolean "
            "(YAML reads yes/no/on/off/true/false as booleans)"
        )
    if isinstance(text, int | float):
        if isinstance(text, float) and math.isnan(text):
            raise ValueError(f"invalid duration {text!r}: not a number")
        if text < 0:
            raise ValueError(f"invalid duration {text!r}: must not be negative")
        return _bounded(text, text, limit)
    if not isinstance(text, str):
        raise TypeError(f"expected a duration such as 30s or 5m, got {type(text).__name__}")
    s = text.strip()
    m = _DUR_SUFFIX_RE.match(s)
    if m:
        return _bounded(text, float(m.group(1)) * _DUR_SUFFIX[m.group(2).lower()], limit)
    m = _DUR_SLURM_RE.match(s)
    if m:
        days, a, b, c = m.groups()
        if days is not None:
            # D-HH[:MM[:SS]]
            hours, minutes, seconds = int(a), int(b or 0), int(c or 0)
            total = int(days) * 86400 + hours * 3600 + minutes * 60 + seconds
        elif b is None:
            total = int(a) * 60  # MM
        elif c is None:
            total = int(a) * 60 + int(b)  # MM:SS
        else:
            total = int(a) * 3600 + int(b) * 60 + int(c)  # HH:MM:SS
        return _bounded(text, total, limit)
    raise ValueError(
        f"invalid duration {text!r}: use e.g. 30s, 5m, 2h, 1d, or Slurm's "
        "MM:SS, HH:MM:SS, D-HH:MM:SS"
    )


def _bounded(text: str | int | float, seconds: int | float, limit: float) -> float:
    """``seconds`` as a float, or ValueError when it is infinite or above ``limit``.

    Compared before converting: an int too large for a float would raise OverflowError.
    """
    if seconds > limit or (isinstance(seconds, float) and math.isinf(seconds)):
        shown = _shorten(text)
        if math.isinf(limit) or (isinstance(text, float) and math.isinf(text)):
            reason = "must be finite"
        else:
            reason = f"must be at most {_limit_text(limit)}"
        raise ValueError(f"invalid duration {shown}: {reason}")
    try:
        return float(seconds)
    except OverflowError as e:  # only reachable without a limit
        raise ValueError(f"invalid duration {_shorten(text)}: must be finite") from e


def _shorten(text: str | int | float) -> str:
    shown = repr(text)
    return shown if len(shown) <= 40 else f"{shown[:20]}...{shown[-10:]}"


def _limit_text(limit: float) -> str:
    """``31536000.0`` -> ``365d (1 year)``; other limits in the largest exact unit."""
    years = limit / (365 * 86400)
    if years == int(years):
        n = int(years)
        return f"{n * 365}d ({n} year{'s' if n != 1 else ''})"
    for unit, mult in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if limit % mult == 0:
            return f"{int(limit // mult)}{unit}"
    return f"{limit}s"


def format_duration(seconds: float) -> str:
    """Format seconds the way Slurm prints elapsed time: ``[D-]HH:MM:SS``.

    Like Slurm, infinity prints as ``UNLIMITED`` and NaN as ``INVALID``.
    """
    if math.isnan(seconds):
        return "INVALID"
    if math.isinf(seconds):
        return "UNLIMITED" if seconds > 0 else "-UNLIMITED"
    total = round(seconds)
    sign = "-" if total < 0 else ""
    total = abs(total)
    days, rem = divmod(total, 86400)
    hours, rem = divmod(rem, 3600)
    minutes, secs = divmod(rem, 60)
    if days:
        return f"{sign}{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{sign}{hours:02d}:{minutes:02d}:{secs:02d}"
