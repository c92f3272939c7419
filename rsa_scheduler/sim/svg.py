"""Hand-written SVG charts of ``rsa sim replay`` and ``rsa sim plan`` (no plotting
library).

Owns :func:`line_chart` (one chart: axes with round ticks, one polyline and marker set
per series, each point's values as its ``<title>`` tooltip, a legend, optional marked
points), :func:`plan_charts` (the four charts of a sweep: mean wait, mean hold, RSA
utilisation and cost per hour against the RSA node count, one line per DRAM share),
:func:`plan_chart` (cost per hour against I/O throughput, one marker set per DRAM share,
the recommendation marked) and :func:`replay_chart` (mean wait, hold and I/O time over
the trace's time, with and without the RSA, three panels in one file). Every series is a
``<g class="series">`` with a ``data-name``, so tests and scripts can find it. Returns
text; must not write files.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from xml.sax.saxutils import escape

W, H = 640, 400
LEFT, RIGHT, TOP, BOTTOM = 80, 150, 40, 50
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf")


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values covering ``[low, high]`` (1, 2 or 5 times a power of ten apart)."""
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError("ticks of a non-finite range")
    if high <= low:
        high = low + (abs(low) or 1.0)
    raw = (high - low) / max(count, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    start = math.floor(low / step) * step
    ticks = []
    t = start
    while t <= high + step * 1e-9:
        ticks.append(round(t, 12))
        t += step
    if ticks[-1] < high:
        ticks.append(round(t, 12))
    return ticks


def _num(v: float) -> str:
    return f"{v:g}" if abs(v) < 1e6 else f"{v:.3g}"


@dataclass(frozen=True, slots=True)
class Mark:
    """A point called out on a chart: a ring and a label."""

    x: float
    y: float
    label: str


def line_chart(title: str, xlabel: str, ylabel: str,
               series: Mapping[str, Sequence[tuple[float, float]]], *,
               lines: bool = True, marks: Sequence[Mark] = ()) -> str:
    """An SVG document: one line per series of (x, y) points (sorted by x here); with
    ``lines=False`` markers only (a scatter)."""
    body = chart_body(title, xlabel, ylabel, series, lines=lines, marks=marks)
    return "\n".join([_open(W, H), *body, "</svg>"]) + "\n"


def _open(width: int, height: int) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">')


def chart_body(title: str, xlabel: str, ylabel: str,
               series: Mapping[str, Sequence[tuple[float, float]]], *,
               lines: bool = True, marks: Sequence[Mark] = ()) -> list[str]:
    """The elements of one chart, W x H, for :func:`line_chart` or a stack of charts."""
    xs = [x for pts in series.values() for x, _ in pts] + [m.x for m in marks]
    ys = [y for pts in series.values() for _, y in pts] + [m.y for m in marks]
    if not xs:
        raise ValueError(f"chart {title!r} has no points")
    xt = nice_ticks(min(xs), max(xs))
    yt = nice_ticks(min(0.0, min(ys)), max(ys))
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM

    def px(x: float) -> float:
        return LEFT + (x - xt[0]) / (xt[-1] - xt[0]) * pw

    def py(y: float) -> float:
        return TOP + ph - (y - yt[0]) / (yt[-1] - yt[0]) * ph

    out = [f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2:.1f}" y="22" text-anchor="middle" font-size="15">'
           f'{escape(title)}</text>']
    for t in yt:
        y = py(t)
        out.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{LEFT + pw}" y2="{y:.1f}" '
                   'stroke="#ddd"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{_num(t)}</text>')
    for t in xt:
        x = px(t)
        out.append(f'<line x1="{x:.1f}" y1="{TOP + ph}" x2="{x:.1f}" y2="{TOP + ph + 5}" '
                   'stroke="black"/>')
        out.append(f'<text x="{x:.1f}" y="{TOP + ph + 18}" text-anchor="middle">'
                   f'{_num(t)}</text>')
    out.append(f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" '
               'stroke="black"/>')
    out.append(f'<text x="{LEFT + pw / 2:.1f}" y="{H - 12}" text-anchor="middle">'
               f'{escape(xlabel)}</text>')
    out.append(f'<text x="18" y="{TOP + ph / 2:.1f}" text-anchor="middle" '
               f'transform="rotate(-90 18 {TOP + ph / 2:.1f})">{escape(ylabel)}</text>')
    for i, (name, pts) in enumerate(series.items()):
        colour = COLOURS[i % len(COLOURS)]
        ordered = sorted(pts)
        out.append(f'<g class="series" data-name="{escape(name, {chr(34): "&quot;"})}">')
        if lines:
            path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in ordered)
            out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" '
                       'stroke-width="2"/>')
        # each point's values as its tooltip (and for scripts: the chart is its own data)
        out += [f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{colour}">'
                f'<title>{escape(name)}: {_num(x)}, {_num(y)}</title></circle>'
                for x, y in ordered]
        out.append("</g>")
        ly = TOP + 10 + 18 * i
        out.append(f'<line x1="{LEFT + pw + 12}" y1="{ly}" x2="{LEFT + pw + 32}" y2="{ly}" '
                   f'stroke="{colour}" stroke-width="2"/>')
        out.append(f'<text x="{LEFT + pw + 38}" y="{ly + 4}">{escape(name)}</text>')
    for m in marks:
        x, y = px(m.x), py(m.y)
        # the label on the side of the ring with more room, below it near the top
        left = x > LEFT + pw / 2
        lx, anchor = (x - 11, "end") if left else (x + 11, "start")
        label_y = y + 20 if y < TOP + 20 else y - 9
        out.append(f'<g class="mark"><circle cx="{x:.1f}" cy="{y:.1f}" r="8" fill="none" '
                   f'stroke="black" stroke-width="2"/><text x="{lx:.1f}" y="{label_y:.1f}" '
                   f'text-anchor="{anchor}" font-weight="bold">{escape(m.label)}</text></g>')
    return out


def stack(panels: Sequence[list[str]]) -> str:
    """Charts from :func:`chart_body` one above the other in one SVG document."""
    out = [_open(W, H * len(panels))]
    for i, body in enumerate(panels):
        out += [f'<g transform="translate(0 {H * i})">', *body, "</g>"]
    return "\n".join([*out, "</svg>"]) + "\n"


#: file name -> (point key, title, y axis label)
CHARTS = {
    "wait.svg": ("mean_wait_s", "Mean wait", "seconds"),
    "hold.svg": ("mean_hold_s", "Mean hold on the compute nodes", "seconds"),
    "utilisation.svg": ("utilisation", "RSA utilisation (node-hours held / provisioned)",
                        "fraction"),
    "cost.svg": ("rsa_cost_per_hour", "RSA cost per hour", "price units per hour"),
}


def plan_charts(points: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """The sweep's four charts, by file name: x RSA nodes, one line per DRAM share."""
    out = {}
    for name, (key, title, ylabel) in CHARTS.items():
        series: dict[str, list[tuple[float, float]]] = {}
        for p in points:
            label = f"DRAM {round(100 * float(p['ram_share']))}%"
            series.setdefault(label, []).append((float(p["nodes"]), float(p[key])))
        ordered = dict(sorted(series.items(), key=lambda kv: -float(kv[0][5:-1])))
        out[name] = line_chart(title, "RSA nodes", ylabel, ordered)
    return out


GIB = 1024**3
#: the replay's panels: timeline metric -> (title, y label)
REPLAY_PANELS = {"wait": "Mean wait (jobs submitted in each interval)",
                 "hold": "Mean hold on the compute nodes",
                 "io": "Mean I/O time (reading input, writing output)"}
RUN_NAMES = {"rsa": "with the RSA", "baseline": "without (baseline)"}


def _time_unit(span_s: float) -> tuple[str, float]:
    if span_s >= 2 * 86400:
        return "days", 86400.0
    if span_s >= 2 * 3600:
        return "hours", 3600.0
    if span_s >= 120:
        return "minutes", 60.0
    return "seconds", 1.0


def replay_chart(timeline: Any) -> str:
    """Three panels (wait, hold, I/O), each the runs' means over submit time; ``timeline``
    is a :class:`~rsa_scheduler.sim.timeline.Timeline`."""
    data = timeline.series()
    span = max((x for runs in data.values() for pts in runs.values() for x, _ in pts),
               default=0.0)
    unit, per = _time_unit(span)
    panels = []
    for metric, title in REPLAY_PANELS.items():
        series = {RUN_NAMES.get(run, run): [(x / per, y) for x, y in pts]
                  for run, pts in sorted(data[metric].items(), key=lambda kv: kv[0] != "rsa")}
        panels.append(chart_body(title, f"submit time ({unit} from the first job)",
                                 "seconds", series))
    return stack(panels)


def plan_chart(points: Sequence[Mapping[str, Any]], recommended: Mapping[str, Any] | None,
               target: str) -> str:
    """RSA cost per hour against I/O throughput, one marker set per DRAM share; the
    recommendation ringed and labelled (the title says when nothing met the target)."""
    series: dict[str, list[tuple[float, float]]] = {}
    for p in points:
        label = f"DRAM {round(100 * float(p['ram_share']))}%"
        series.setdefault(label, []).append((float(p["io_throughput"]) / GIB,
                                             float(p["rsa_cost_per_hour"])))
    ordered = dict(sorted(series.items(), key=lambda kv: -float(kv[0][5:-1])))
    marks = []
    title = f"RSA cost against I/O throughput (target {target})"
    if recommended is not None:
        marks.append(Mark(float(recommended["io_throughput"]) / GIB,
                          float(recommended["rsa_cost_per_hour"]),
                          f"recommended: {recommended['ram_nodes']} DRAM + "
                          f"{recommended['ssd_nodes']} SSD"))
    else:
        title += ": none met it"
    return line_chart(title, "I/O throughput of the jobs (GiB/s)", "price units per hour",
                      ordered, lines=False, marks=marks)
