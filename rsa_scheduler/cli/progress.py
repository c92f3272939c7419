"""A job row's staging progress as figures, and the short forms ``rsa jobs`` and ``rsa top``
print them in.

Owns :class:`Staging` (the progress of one job row at a moment: bytes and files staged of
total, rate, ETA counted down from rsad's last report) and the compact formatters for
sizes, counts, rates and durations (as squeue prints its TIME column). Pure: ``now`` is
an argument; no I/O, no clock, no rich (``rsa jobs`` must stay quick to import).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_UNITS = "KMGTP"


def short_size(nbytes: float) -> str:
    """Bytes in binary units as Slurm writes them, at most 5 characters: ``512B``, ``1.5K``,
    ``12.3G``, ``117M``, ``1023M``."""
    value = float(max(nbytes, 0))
    if value < 1024:
        return f"{value:.0f}B"
    unit = -1
    while value >= 1024 and unit < len(_UNITS) - 1:
        value /= 1024
        unit += 1
    text = f"{value:.1f}" if value < 99.95 else f"{value:.0f}"
    if text == "1024" and unit < len(_UNITS) - 1:  # 1023.6M rounds up: say 1G
        text, unit = "1", unit + 1
    return text.removesuffix(".0") + _UNITS[unit]


def short_count(n: int) -> str:
    """A file count in at most 5 characters: ``9999``, ``12.3k``, ``4.5M``."""
    if n < 10_000:
        return str(max(n, 0))
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= div:
            value = n / div
            text = f"{value:.1f}" if value < 99.95 else f"{value:.0f}"
            return text.removesuffix(".0") + unit
    return str(n)  # pragma: no cover - unreachable


def short_rate(bytes_per_second: float) -> str:
    return f"{short_size(bytes_per_second)}/s"


def short_duration(seconds: float) -> str:
    """Seconds as squeue's TIME column: ``0:05``, ``12:34``, ``1:02:03``, ``1-02:03:04``."""
    s = max(0, round(seconds))
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{s:02d}"
    if hours:
        return f"{hours}:{minutes:02d}:{s:02d}"
    return f"{minutes}:{s:02d}"


@dataclass(frozen=True, slots=True)
class Staging:
    """What a job's ``progress`` (rsad's last report of a running transfer) says at ``now``."""

    phase: str  # stage-in | stage-out
    bytes_done: int
    bytes_total: int
    files_done: int
    files_total: int
    rate: float  # bytes/s, averaged since the transfer started
    eta: float | None  # seconds left at ``now``; None until something finished

    @classmethod
    def of(cls, job: Mapping[str, Any], now: float) -> Staging | None:
        """The staging figures of a job row from ``/v1/jobs``; None when nothing is staged."""
        p = job.get("progress")
        if not isinstance(p, Mapping):
            return None
        try:
            bytes_done, bytes_total = (int(v) for v in p["bytes"])
            files_done, files_total = (int(v) for v in p["files"])
        except (KeyError, TypeError, ValueError):
            return None
        eta = p.get("eta")
        if eta is not None:
            # rsad reports every few seconds; count down from the report's time
            reported = p.get("time")
            eta = max(0.0, float(eta) - max(0.0, now - float(reported))) if reported else float(eta)
        if bytes_done >= bytes_total and files_done >= files_total:
            eta = 0.0
        return cls(str(p.get("phase") or "staging"), bytes_done, bytes_total, files_done,
                   files_total, float(p.get("rate") or 0.0), eta)

    @property
    def fraction(self) -> float:
        """Share done, 0..1: of the bytes, or of the files when there are no bytes."""
        if self.bytes_total:
            return min(1.0, self.bytes_done / self.bytes_total)
        if self.files_total:
            return min(1.0, self.files_done / self.files_total)
        return 1.0

    @property
    def percent(self) -> str:
        return f"{100 * self.fraction:.0f}%"

    @property
    def staged(self) -> str:
        """Bytes staged of total: ``1.2G/4G``."""
        return f"{short_size(self.bytes_done)}/{short_size(self.bytes_total)}"

    @property
    def files(self) -> str:
        """Files staged of total: ``120/400``."""
        return f"{short_count(self.files_done)}/{short_count(self.files_total)}"

    @property
    def speed(self) -> str:
        return short_rate(self.rate)

    @property
    def time_left(self) -> str:
        """The ETA as squeue writes times, ``-`` until it is known."""
        return "-" if self.eta is None else short_duration(self.eta)
