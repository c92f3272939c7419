"""``rsa top``: a live view of the RSA — jobs with their staging progress, the RSA nodes,
the latest events — refreshed every ``--interval`` seconds; ``--once`` prints one frame.

Owns the loop around cli/dashboard.py's pure :func:`~rsa_scheduler.cli.dashboard.render`:
reading rsad (a background thread, so ``q`` answers at once even while a request hangs),
the terminal (alternate screen, and cbreak mode so ``q`` needs no Enter, both restored on
every exit, Ctrl-C included), redrawing on new data or a resize, and retrying while rsad
cannot be reached. Users see only their own jobs and events: rsad decides that.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import sys
import termios
import threading
import time
import tty
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, TextIO

import click
from rich.console import Console
from rich.live import Live

from rsa_scheduler.cli.dashboard import Frame, render
from rsa_scheduler.cli.jobs import API_OPTION
from rsa_scheduler.client import ApiClient
from rsa_scheduler.errors import RsaError

TAIL = 50  # events read back from the newest: more than any terminal's events section
QUIT = frozenset({"q", "Q"})
TICK = 0.2  # seconds between looks at the keyboard and the terminal size


class Source:
    """Reads one frame's data from rsad and remembers the newest events seen."""

    def __init__(self, client: ApiClient, keep: int = TAIL) -> None:
        self.client = client
        self.events: deque[dict[str, Any]] = deque(maxlen=keep)
        self.seq = 0

    def read(self) -> tuple[list[dict[str, Any]], dict[str, Any], list[dict[str, Any]]]:
        """``(jobs, status, events)``; raises :class:`RsaError` when rsad cannot answer.
        The frame's requests together take at most the client's timeout (each had a
        whole one: a hung rsad held a frame, and ``--once``, three times as long)."""
        client = self.client.within(time.monotonic() + self.client.timeout)
        status: dict[str, Any] = client.get("/v1/status")
        jobs: list[dict[str, Any]] = client.get("/v1/jobs")["jobs"]
        last = status.get("last_seq")
        if last is not None:  # an rsad older than `rsa top` does not say: no events then
            if last < self.seq:  # a new event log (the lab was rebuilt)
                self.events.clear()
                self.seq = 0
            if last > self.seq:
                since = max(self.seq, last - TAIL)
                for ev in client.get(f"/v1/events?since={since}")["events"]:
                    self.events.append(ev)
                    self.seq = max(self.seq, int(ev["seq"]))
                # users get only their own jobs' events: never ask for the others again
                self.seq = max(self.seq, last)
        return jobs, status, list(self.events)

    def frame(self, previous: Frame, now: float) -> Frame:
        """The next frame: fresh data, or the previous data and why it is not fresh."""
        try:
            jobs, status, events = self.read()
        except RsaError as e:
            return replace(previous, error=str(e))
        return replace(previous, jobs=jobs, status=status, events=events, fetched=now,
                       error=None)


class Poller(threading.Thread):
    """Refreshes the frame every ``interval`` seconds until stopped."""

    def __init__(self, source: Source, first: Frame, interval: float) -> None:
        super().__init__(name="rsa-top", daemon=True)  # a hung request never blocks exit
        self.source = source
        self.frame = first
        self.interval = interval
        self.fresh = threading.Event()
        self.stop = threading.Event()
        self.crash: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                self.frame = self.source.frame(self.frame, time.time())
                self.fresh.set()
                self.stop.wait(self.interval)
        except BaseException as e:  # a bug, not rsad being away: the main thread raises it
            self.crash = e
            self.fresh.set()


@contextmanager
def keyboard(stream: TextIO) -> Iterator[int | None]:
    """The terminal's fd in cbreak mode (keys arrive without Enter; Ctrl-C still
    interrupts), restored on exit; None when ``stream`` is not a terminal."""
    if not stream.isatty():
        yield None
        return
    fd = stream.fileno()
    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        yield fd
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def pressed(fd: int, timeout: float) -> str | None:
    """Keys typed within ``timeout`` seconds ("" if none); None once the input is closed."""
    ready, _, _ = select.select([fd], [], [], timeout)
    if not ready:
        return ""
    data = os.read(fd, 64)
    return data.decode(errors="replace") if data else None


def _ascii_only(console: Console) -> bool:
    return not console.encoding.lower().startswith("utf")


def measure(console: Console) -> tuple[int, int]:
    """The terminal's size now. Asked of the terminal itself: exported COLUMNS/LINES (tmux
    sets them in some sessions) are stale after a resize."""
    try:
        cols, rows = os.get_terminal_size(console.file.fileno())
    except (OSError, ValueError, AttributeError):
        return console.size.width, console.size.height
    return (cols, rows) if cols and rows else (console.size.width, console.size.height)


def live(poller: Poller, console: Console, keys: int | None) -> None:
    """Draw until ``q`` (or Ctrl-C, raised as KeyboardInterrupt)."""
    with Live(console=console, screen=True, auto_refresh=False, redirect_stdout=False,
              redirect_stderr=False) as view:
        size = (0, 0)
        while True:
            if poller.fresh.is_set() or measure(console) != size:
                poller.fresh.clear()
                if poller.crash is not None:
                    raise poller.crash
                size = measure(console)
                console.size = size  # rich draws the alternate screen at this size
                view.update(render(poller.frame, time.time(), *size,
                                   ascii_only=_ascii_only(console)), refresh=True)
            if keys is None:
                poller.fresh.wait(TICK)
                continue
            typed = pressed(keys, TICK)
            if typed is None:
                keys = None  # input closed: only Ctrl-C (or a signal) ends the view now
            elif QUIT & set(typed):
                return


def _plain(client: ApiClient, source: Source, interval: float) -> None:
    """Without a terminal (``rsa top | tee log``, a cron job): print a plain frame every
    ``interval`` s, separated by a blank line, until interrupted; rsad away: one line."""
    width, height = shutil.get_terminal_size((80, 24))
    try:
        while True:
            try:
                jobs, status, events = source.read()
            except RsaError as e:
                click.echo(f"rsa: error: {e} (retrying every {interval:g}s)", err=True)
            else:
                now = time.time()
                frame = Frame(client.address, interval, jobs, status, events, fetched=now,
                              keys=False)
                console = Console(width=width, height=height, force_terminal=False,
                                  no_color=True)
                console.print(render(frame, now, width, height, ascii_only=True))
                click.echo("")
            sys.stdout.flush()
            time.sleep(interval)
    except (KeyboardInterrupt, BrokenPipeError):
        pass


@click.command("top")
@API_OPTION
@click.option("--interval", "-n", type=click.FloatRange(min=0.1), default=2.0,
              show_default=True, envvar="RSA_TOP_INTERVAL",
              help="Seconds between refreshes.")
@click.option("--once", is_flag=True,
              help="Print one frame (the terminal's size, else $COLUMNS x $LINES, else "
                   "80x24) to stdout and exit.")
@click.option("--json", "as_json", is_flag=True,
              help="One frame's data as one JSON object {\"jobs\", \"status\", \"events\"}; "
                   "implies --once.")
def top(api: str | None, interval: float, once: bool, as_json: bool) -> None:
    """Live view: jobs with staging progress, RSA nodes, latest events (q quits)."""
    client = ApiClient(api)
    source = Source(client)
    if once or as_json:
        jobs, status, events = source.read()  # rsad away: `rsa: error: ...`, exit 1
        if as_json:
            click.echo(json.dumps({"jobs": jobs, "status": status, "events": events},
                                  sort_keys=True))
            return
        width, height = shutil.get_terminal_size((80, 24))
        now = time.time()
        frame = Frame(client.address, interval, jobs, status, events, fetched=now)
        console = Console(width=width, height=height)
        console.print(render(frame, now, width, height, ascii_only=_ascii_only(console)))
        return
    console = Console()
    if not console.is_terminal:
        _plain(client, source, interval)  # piped or logged: one frame after another
        return
    poller = Poller(source, Frame(client.address, interval), interval)
    poller.start()
    try:
        with keyboard(sys.stdin) as keys:
            live(poller, console, keys)
    except KeyboardInterrupt:
        pass  # Ctrl-C quits like q; the terminal is already restored
    finally:
        poller.stop.set()
