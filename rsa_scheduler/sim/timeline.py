"""A replay's jobs over time, for ``rsa sim replay --plot``: mean wait, hold and I/O time
of the jobs submitted in each interval, per run (with the RSA, the baseline).

Owns :class:`Timeline`. Memory stays bounded whatever the trace's length: the intervals
start at a minute and double in width (neighbours merged) whenever a run has more than
``max_bins`` of them. Pure; must not import the engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: the metrics, by key: (title, what each job contributes from its ``job`` detail)
METRICS = ("wait", "hold", "io")


class Timeline:
    """Sums per run and submit-time interval; :meth:`series` gives the means."""

    def __init__(self, width: float = 60.0, max_bins: int = 120) -> None:
        if width <= 0 or max_bins < 2:
            raise ValueError("a timeline needs width > 0 and max_bins >= 2")
        self.width = width
        self.max_bins = max_bins
        # run -> interval index -> [jobs, wait, hold, io] (seconds summed)
        self.runs: dict[str, dict[int, list[float]]] = {}

    def add(self, run: str, detail: Mapping[str, Any]) -> None:
        """One job of ``run`` off its compute nodes (the replay's ``job`` detail)."""
        submit, start, end = (float(detail[k]) for k in ("submit", "start", "end"))
        bins = self.runs.setdefault(run, {})
        acc = bins.setdefault(int(submit // self.width), [0.0, 0.0, 0.0, 0.0])
        acc[0] += 1
        acc[1] += start - submit
        acc[2] += end - start
        acc[3] += float(detail["io_s"])
        if len(bins) > self.max_bins:
            self._coarsen()

    def _coarsen(self) -> None:
        self.width *= 2
        for run, bins in self.runs.items():
            merged: dict[int, list[float]] = {}
            for index, acc in bins.items():
                into = merged.setdefault(index // 2, [0.0, 0.0, 0.0, 0.0])
                for i, v in enumerate(acc):
                    into[i] += v
            self.runs[run] = merged

    def series(self) -> dict[str, dict[str, list[tuple[float, float]]]]:
        """metric (wait, hold, io) -> run -> [(interval middle in seconds, mean seconds)]."""
        out: dict[str, dict[str, list[tuple[float, float]]]] = {m: {} for m in METRICS}
        for run, bins in self.runs.items():
            for index in sorted(bins):
                n, *sums = bins[index]
                mid = (index + 0.5) * self.width
                for metric, total in zip(METRICS, sums, strict=True):
                    out[metric].setdefault(run, []).append((mid, total / n))
        return out
