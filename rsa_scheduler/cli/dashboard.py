"""``rsa top``'s picture: one frame of rsad's data drawn for a terminal of a given size.

Owns :class:`Frame` (what one refresh knows: rsad's jobs, status and latest events, or
why they could not be read) and :func:`render` (frame, now, width, height → a rich
renderable of at most ``height`` lines of at most ``width`` cells). Pure: no I/O, no
clock, no terminal; cli/top.py is the loop around it. Every line is cut to the width
here, never wrapped; the sections shrink to the height: jobs first, then RSA nodes,
then the last events.
"""

from __future__ import annotations

import re
import textwrap
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich.cells import cell_len, set_cell_size
from rich.console import Group
from rich.text import Text

from rsa_scheduler.cli.events import describe
from rsa_scheduler.cli.progress import Staging, short_duration, short_size
from rsa_scheduler.cli.show import CONTROL
from rsa_scheduler.core.states import FAILURES, IDLE, MOVING

HEAD = "bold reverse"


@dataclass(frozen=True)
class Frame:
    """What one refresh of ``rsa top`` knows."""

    api: str  # rsad's address, as the title shows it
    interval: float  # seconds between refreshes
    jobs: Sequence[Mapping[str, Any]] = ()  # /v1/jobs rows (the caller's own, for users)
    status: Mapping[str, Any] | None = None  # /v1/status
    events: Sequence[Mapping[str, Any]] = ()  # the newest events, oldest first
    fetched: float | None = None  # when jobs and status were read; None: never
    error: str | None = None  # the last refresh failed: why (one actionable line)
    keys: bool = True  # a live view that reads keys (q quits); False: plain frames


def render(frame: Frame, now: float, width: int, height: int, *,
           ascii_only: bool = False) -> Group:
    """The frame as at most ``height`` lines of at most ``width`` cells."""
    return Group(*lines(frame, now, width, height, ascii_only=ascii_only))


def lines(frame: Frame, now: float, width: int, height: int, *,
          ascii_only: bool = False) -> list[Text]:
    """The lines :func:`render` shows, each a single-line :class:`~rich.text.Text`."""
    if width < 1 or height < 1:
        return []
    d = _Draw(width, ascii_only)
    top = [d.line(_title(frame, now))]
    if frame.error:
        top += [d.line([(t, "bold red")]) for t in _wrap(
            f"rsa: error: {frame.error} (retrying every {frame.interval:g}s)", width, 3, d)]
    if frame.status is not None:
        top.append(d.line(_pool(frame.status)))
    if len(top) >= height:
        return top[:height]
    order = sorted(frame.jobs, key=lambda j: (_rank(j), _natural(str(j["job_id"]))))
    jobs = _job_items(frame, order, now, d)
    node_order = _node_order(frame.status)
    nodes = [[_node_line(n, frame.status or {}, d)] for n in node_order]
    events = [[e] for e in _event_lines(frame.events, d)]
    avail = height - len(top)
    n_jobs, n_nodes, n_events = _allocate(avail, _need(jobs), _need(nodes), _need(events))

    def more_jobs(n: int) -> Text:
        done = sum(1 for j in order[-n:] if _rank(j) == 3)
        why = f" ({done} released or declined)" if done else ""
        return d.line([(f"{d.ellipsis} {n} more jobs{why}", "dim")])

    def more_nodes(n: int) -> Text:
        idle = sum(1 for x in node_order[-n:] if _shown_state(x) == "idle")
        return d.line([(f"{d.ellipsis} {n} more nodes" + (f" ({idle} idle)" if idle else ""),
                        "dim")])

    out = top + _fit(_job_head(frame, d), jobs, n_jobs, more_jobs)
    if frame.status is not None:
        out += _fit(d.line(_node_cols(frame.status, d), HEAD), nodes, n_nodes, more_nodes)
    if events:
        out += _tail(d.line([("EVENTS", "")], HEAD), events, n_events)
    return out[:height]


# ---- drawing helpers ----------------------------------------------------------------------

Segment = tuple[str, str]  # text, rich style


class _Draw:
    """Cuts and pads text to cells; knows whether the terminal can show more than ASCII."""

    def __init__(self, width: int, ascii_only: bool) -> None:
        self.width = width
        self.ascii = ascii_only
        self.ellipsis = "~" if ascii_only else "…"

    def clean(self, text: str) -> str:
        """One line of printable text: rsad's messages may quote a program's stderr
        (newlines, tabs, escape sequences)."""
        text = CONTROL.sub(" ", text)
        return text.encode("ascii", "replace").decode() if self.ascii else text

    def cell(self, text: str, width: int, *, right: bool = False) -> str:
        """``text`` in exactly ``width`` cells: cut with an ellipsis, or padded."""
        text = self.clean(text)
        if cell_len(text) > width:
            return set_cell_size(text, max(width - 1, 0)) + self.ellipsis if width else ""
        pad = " " * (width - cell_len(text))
        return pad + text if right else text + pad

    def line(self, segments: Sequence[Segment], style: str = "") -> Text:
        """One terminal line: the segments, cut to the width (never wrapped)."""
        out = Text(no_wrap=True, overflow="crop", end="\n", style=style)
        used = 0
        for text, seg_style in segments:
            room = self.width - used
            if room <= 0:
                break
            text = self.clean(text)
            if cell_len(text) > room:
                text = self.cell(text, room)
            out.append(text, seg_style)
            used += cell_len(text)
        if style:  # header bars span the whole width
            out.append(" " * (self.width - used))
        return out

    def bar(self, fraction: float, width: int) -> list[Segment]:
        done = round(fraction * width)
        full, empty = ("#", "-") if self.ascii else ("━", "─")
        return [(full * done, "green"), (empty * (width - done), "grey42")]


def _wrap(text: str, width: int, most: int, d: _Draw) -> list[str]:
    wrapped = textwrap.wrap(text, width) or [""]
    if len(wrapped) > most:
        wrapped = [*wrapped[:most - 1], d.cell(" ".join(wrapped[most - 1:]), width)]
    return wrapped


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


def _need(items: Sequence[Sequence[Text]]) -> int:
    return 1 + sum(len(i) for i in items)


def _allocate(avail: int, jobs: int, nodes: int, events: int) -> tuple[int, int, int]:
    """Lines for the jobs, nodes and events sections (headers included): jobs first; the
    nodes get at most a third and the events a quarter unless the jobs leave room."""
    if avail < 8:  # a tiny terminal: jobs, then whatever is left
        j = min(jobs, avail)
        n = min(nodes, avail - j)
        e = avail - j - n
        return j, n, e if e >= 2 else 0
    n = min(nodes, max(2, avail // 3))
    e = min(events, avail // 4) if events > 1 else 0
    j = avail - n - e
    if j > jobs:
        spare, j = j - jobs, jobs
        more = min(spare, nodes - n)
        n, spare = n + more, spare - more
        e = min(events, e + spare)
    return j, n, e if e >= 2 else 0


def _fit(head: Text, items: Sequence[Sequence[Text]], budget: int,
         more: Callable[[int], Text]) -> list[Text]:
    """The header and as many whole items as fit in ``budget`` lines; then "... N more"."""
    if budget <= 0:
        return []
    room = budget - 1
    if sum(len(i) for i in items) <= room:
        return [head, *(t for i in items for t in i)]
    out, used = [head], 0
    for k, item in enumerate(items):
        if used + len(item) > room - 1:
            return [*out, more(len(items) - k)] if room else out
        out += item
        used += len(item)
    return out  # pragma: no cover - the sum check above returned already


def _tail(head: Text, items: Sequence[Sequence[Text]], budget: int) -> list[Text]:
    """A log's newest lines: the header and the last items that fit."""
    if budget < 2:
        return []
    keep = [t for i in items for t in i][-(budget - 1):]
    return [head, *keep]


def _natural(job_id: str) -> tuple[tuple[int, int, str], ...]:
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p)
                 for p in re.split(r"[_+]", job_id))


# ---- sections -------------------------------------------------------------------------------

def _title(frame: Frame, now: float) -> list[Segment]:
    parts: list[Segment] = [("rsa top", "bold"), (f" | {_clock(now)}", "")]
    if frame.error and frame.fetched is not None:
        parts.append((f" | data from {_clock(frame.fetched)}", "yellow"))
    quits = ", q quits" if frame.keys else ", Ctrl-C quits"
    parts += [(f" | every {frame.interval:g}s{quits}", "dim"), (f" | rsad {frame.api}", "")]
    return parts


def _pool(status: Mapping[str, Any]) -> list[Segment]:
    tiers: dict[str, list[int]] = {}  # tier -> [nodes, used, capacity, free capacity, out]
    for n in status.get("nodes", []):
        t = tiers.setdefault(str(n["tier"]), [0, 0, 0, 0, 0])
        t[0] += 1
        t[2] += int(n["capacity"])
        if n.get("job"):
            t[1] += 1
        elif n["state"] == "up":
            t[3] += int(n["capacity"])
        else:
            t[4] += 1
    ok = status.get("slurm_ok", True)
    parts: list[Segment] = [("Slurm ok" if ok else "Slurm UNREACHABLE", "" if ok else "bold red")]
    alerts = len(status.get("alerts", []))
    if alerts:
        parts.append((f" | {alerts} alerts (rsa status)", "bold red"))
    for tier, (count, used, cap, free, out) in sorted(tiers.items()):
        off = f", {out} out" if out else ""
        parts.append((f" | {tier} {used}/{count} nodes used{off}, {short_size(free)}/"
                      f"{short_size(cap)} free", ""))
    parts.append((f" | on-deck {len(status.get('on_deck', []))}"
                  f" | {status.get('running_actions', 0)} actions", ""))
    return parts


def _state_style(rsa_state: str) -> str:
    if rsa_state in FAILURES:
        return "bold red"
    if rsa_state in MOVING:
        return "cyan"
    if rsa_state in IDLE:
        return "dim"
    return "green"


@dataclass(frozen=True)
class _JobCols:
    job: int
    user: int
    rsa: int
    nodes: int


def _job_cols(jobs: Sequence[Mapping[str, Any]]) -> _JobCols:
    def widest(key: str, least: int, most: int) -> int:
        return max([least, *(min(most, len(str(j.get(key) or ""))) for j in jobs)])

    return _JobCols(widest("job_id", 5, 14), widest("user", 4, 10),
                    widest("rsa_state", 9, 16), widest("nodes", 5, 14))


def _job_head(frame: Frame, d: _Draw) -> Text:
    c = _job_cols(frame.jobs)
    return d.line([(f"{d.cell('JOBID', c.job)} {d.cell('USER', c.user)} "
                    f"{d.cell('JOB STATE', 9)} {d.cell('RSA STATE', c.rsa)} "
                    f"{d.cell('NODES', c.nodes)} {d.cell('FOR', 8, right=True)}  MESSAGE", "")],
                  HEAD)


def _rank(job: Mapping[str, Any]) -> int:
    """Staging first, then jobs holding RSA nodes, then the rest, settled ones last."""
    if job.get("progress"):
        return 0
    if job.get("nodes"):
        return 1
    if job.get("rsa_state") in IDLE and job.get("job_state") in ("finished", None, ""):
        return 3
    return 2


def _job_items(frame: Frame, order: Sequence[Mapping[str, Any]], now: float,
               d: _Draw) -> list[list[Text]]:
    if frame.fetched is None:
        return [[d.line([("waiting for rsad ...", "dim")])]]
    if not frame.jobs:
        return [[d.line([("no jobs tracked by the RSA", "dim")])]]
    c = _job_cols(frame.jobs)
    items = []
    for j in order:
        state = str(j.get("rsa_state") or "")
        since = short_duration(now - float(j["since"])) if j.get("since") else "-"
        item = [d.line([
            (f"{d.cell(str(j['job_id']), c.job)} {d.cell(str(j.get('user') or ''), c.user)} "
             f"{d.cell(str(j.get('job_state') or '-'), 9)} ", ""),
            (d.cell(state, c.rsa), _state_style(state)),
            (f" {d.cell(str(j.get('nodes') or '-'), c.nodes)} {d.cell(since, 8, right=True)}  ",
             ""),
            (str(j.get("message") or ""), "dim")])]
        st = Staging.of(j, now)
        if st is not None:
            item.append(_progress_line(st, d))
        items.append(item)
    return items


def _progress_line(st: Staging, d: _Draw) -> Text:
    """``  stage-in ━━━━━──────  31%  1.2G/4G  120/400 files  110M/s  ETA 0:32``"""
    lead = f"  {d.cell(st.phase, 9)} "
    figures = (f" {st.percent:>4}  {st.staged:>9}  {st.files:>9} files  {st.speed:>7}  "
               f"ETA {st.time_left}")
    room = d.width - cell_len(lead) - cell_len(figures)
    bar = d.bar(st.fraction, min(room, 40)) if room >= 5 else []
    return d.line([(lead, ""), *bar, (figures, "")])


def _node_cols(status: Mapping[str, Any], d: _Draw) -> list[Segment]:
    w = _node_width(status)
    return [(f"{d.cell('NODE', w)} TIER {d.cell('STATE', 9)} {d.cell('USED', 6, right=True)} "
             f"{d.cell('FREE', 6, right=True)}  JOB", "")]


def _node_width(status: Mapping[str, Any] | None) -> int:
    names = [len(str(n["name"])) for n in (status or {}).get("nodes", [])]
    return max([4, *(min(14, n) for n in names)])


def _shown_state(node: Mapping[str, Any]) -> str:
    if node["state"] != "up":
        return str(node["state"])
    return "allocated" if node.get("job") else "idle"


def _node_order(status: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    """Busy, drained and down nodes first, then idle ones (each in the pool's order)."""
    nodes = list((status or {}).get("nodes", []))
    return ([n for n in nodes if _shown_state(n) != "idle"]
            + [n for n in nodes if _shown_state(n) == "idle"])


def _node_line(n: Mapping[str, Any], status: Mapping[str, Any], d: _Draw) -> Text:
    """RSA nodes are not shared: a node held by a job has all its capacity in use, an idle
    one all of it free, a drained or down one none of it."""
    w = _node_width(status)
    job = n.get("job")
    shown = _shown_state(n)
    cap = short_size(int(n["capacity"]))
    used, free = (cap, "-") if job else ("-", cap if shown == "idle" else "-")
    style = {"down": "bold red", "drained": "yellow"}.get(shown, "")
    return d.line([
        (f"{d.cell(str(n['name']), w)} {d.cell(str(n['tier']), 4)} ", ""),
        (d.cell(shown, 9), style),
        (f" {d.cell(used, 6, right=True)} {d.cell(free, 6, right=True)}  {job or '-'}", "")])


def _event_lines(events: Sequence[Mapping[str, Any]], d: _Draw) -> list[Text]:
    out = []
    for ev in events:
        name = str(ev.get("name") or "")
        what = describe(ev) if name == "rsa.transition" else f"{name} {describe(ev)}"
        out.append(d.line([(f"{_clock(float(ev['time']))} ", "dim"),
                           (f"{d.cell(str(ev.get('job_id') or ''), 8)} ", ""), (what, "")]))
    return out


__all__ = ["Frame", "lines", "render"]
