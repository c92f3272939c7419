"""Standard Workload Format (SWF) traces: a streaming, validating reader.

Owns the SWF record (:class:`SwfJob`), the header fields the replay needs
(:class:`SwfHeader`) and every message about a malformed trace, raised as
:class:`TraceError` with ``FILE:LINE: message``. SWF is the Parallel Workloads Archive's
format (https://www.cs.huji.ac.il/labs/parallel/workload/swf.html): lines starting with
``;`` are comments, ``; Key: value`` comments at the top form the header, every other
non-blank line is one job of 18 whitespace-separated numbers, ``-1`` meaning unknown.
Real traces are taken as they come: job numbers from 0 (tools write them so), the
archive's status values (lines of partial executions, status 2-4, passed over: the job's
summary line stands for it) and queue numbers (0 interactive); a bad line's message names
every problem of the line, and :func:`scan_swf`, run once before any replay, reports every
bad line of the file (:class:`BadLines`). Without a ``MaxProcs`` header, :func:`guess_size`
infers the cluster from the jobs that ran.

Extension (rsa-scheduler only, documented in docs/simulator.md): a job line may carry 3
more fields, 19 input bytes, 20 output bytes, 21 output files (``-1`` unknown), so a
trace can say how much data each job moves. Lines of 18 fields are plain SWF.

Reading is lazy: :func:`read_swf` yields one job at a time and keeps nothing but the
previous submit time, so a trace of any length streams in constant memory
(:func:`scan_swf` keeps at most :data:`MAX_LISTED` messages; :func:`guess_size`, run only
when the header lacks ``MaxProcs``, keeps two events per job).

Reads files only; must not import the core's state machine or the engine.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from rsa_scheduler.errors import ScenarioError

SWF_FIELDS = 18
EXT_FIELDS = 21  # SWF + input bytes, output bytes, output files
FIELD_NAMES = (
    "job number", "submit time", "wait time", "run time", "allocated processors",
    "average CPU time", "used memory", "requested processors", "requested time",
    "requested memory", "status", "user id", "group id", "executable number",
    "queue number", "partition number", "preceding job", "think time",
    "input bytes", "output bytes", "output files",
)
#: header keys whose integer values the replay uses
HEADER_INTS = ("MaxJobs", "MaxRecords", "MaxNodes", "MaxProcs", "UnixStartTime")


class TraceError(ScenarioError):
    """A trace file is unreadable or malformed: ``FILE:LINE: message``, one line per bad
    line of the file (:class:`BadLines`)."""


#: bad lines named one by one in an error; the rest are counted
MAX_LISTED = 20


class BadLines:
    """The bad lines of one file, collected so that all of them are reported at once:
    the first :data:`MAX_LISTED` by message, the rest counted."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.listed: list[str] = []
        self.count = 0

    def add(self, message: str) -> None:
        self.count += 1
        if len(self.listed) < MAX_LISTED:
            self.listed.append(message)

    def __bool__(self) -> bool:
        return self.count > 0

    def error(self) -> TraceError:
        """Every bad line, one per line of the message (``FILE:LINE: problem; ...``)."""
        lines = list(self.listed)
        if self.count > len(lines):
            lines.append(f"{self.name}: {self.count - len(lines)} more bad lines not shown "
                         f"({self.count} in all)")
        return TraceError("\n".join(lines))


@dataclass(frozen=True, slots=True)
class SwfJob:
    """One job line of an SWF trace (times in seconds, -1 or None when unknown)."""

    line: int
    job: int
    submit: float
    wait: float
    run: float
    procs: int  # allocated processors, else requested; -1 unknown or none held
    requested_time: float
    used_memory_kb: float  # per processor
    status: int
    user: int
    input_bytes: int | None = None
    output_bytes: int | None = None
    output_files: int | None = None
    queue: int = -1  # SWF's queue number: 0 interactive, 1.. the site's batch queues


@dataclass(slots=True)
class SwfHeader:
    """The ``; Key: value`` comments of the trace (integers for :data:`HEADER_INTS`)."""

    fields: dict[str, str] = field(default_factory=dict)

    def int_field(self, key: str) -> int | None:
        value = self.fields.get(key, "").split()
        try:
            n = int(value[0]) if value else None
        except ValueError:
            return None
        return n if n is not None and n > 0 else None


#: SWF's status values (field 11): 2-4 mark the lines of a checkpointed or swapped job's
#: partial executions, which follow the job's own summary line with the same job number
STATUSES = {-1: "unknown", 0: "failed", 1: "completed", 2: "partial", 3: "partial",
            4: "partial", 5: "cancelled"}
PARTIAL = frozenset((2, 3, 4))


def _number(text: str, index: int) -> tuple[float, str | None]:
    """The field's value, or NaN and the problem with it."""
    name = f"field {index + 1} ({FIELD_NAMES[index]})"
    try:
        value = float(text)
    except ValueError:
        return math.nan, f"{name} is {text!r}, not a number"
    if not math.isfinite(value):
        return math.nan, f"{name} is {text!r}, not a finite number"
    if value < 0 and value != -1:
        return math.nan, (f"{name} is {text}: negative values other than -1 (unknown) "
                          "are not SWF")
    return value, None


def parse_job(text: str, where: str, line: int) -> SwfJob:
    """One SWF job line (``where`` is ``FILE:LINE`` for messages). Raises TraceError naming
    every problem of the line, ``; `` separated."""
    parts = text.split()
    if len(parts) not in (SWF_FIELDS, EXT_FIELDS):
        raise TraceError(f"{where}: {len(parts)} fields, SWF has {SWF_FIELDS} "
                         f"(or {EXT_FIELDS} with rsa-scheduler's I/O columns)")
    try:  # the fast path for a good line; the slow one names every bad field
        v = [float(p) for p in parts]
        good = math.isfinite(math.fsum(v)) and (min(v) >= 0 or all(x >= 0 or x == -1
                                                                    for x in v))
    except ValueError:
        good = False
    problems: list[str] = []
    if not good:
        checked = [_number(p, i) for i, p in enumerate(parts)]
        v = [value for value, _ in checked]
        problems = [problem for _, problem in checked if problem]
    # SWF numbers jobs from 1; tools that write SWF often start at 0: both are taken
    if math.isfinite(v[0]) and (v[0] != int(v[0]) or v[0] < 0):
        problems.append(f"field 1 (job number) is {parts[0]}: a whole number >= 0")
    if v[1] == -1:
        problems.append("field 2 (submit time) is unknown (-1): a job cannot be replayed "
                        "without it")
    if math.isfinite(v[10]) and v[10] not in STATUSES:
        problems.append(f"field 11 (status) is {parts[10]}: SWF's are 1 completed, "
                        "0 failed, 5 cancelled, 2-4 partial executions, -1 unknown")
    if problems:
        raise TraceError(f"{where}: " + "; ".join(problems))
    # allocated processors, else (unknown, -1) the requested ones; 0 allocated means the
    # job held none: it never ran (a cancelled job's line may say so with run time 0)
    procs = v[4] if v[4] > 0 else v[7] if v[4] == -1 else -1

    def opt(i: int) -> int | None:
        return int(v[i]) if len(v) > i and v[i] >= 0 else None

    return SwfJob(line=line, job=int(v[0]), submit=v[1], wait=v[2], run=v[3],
                  procs=int(procs) if procs > 0 else -1, requested_time=v[8],
                  used_memory_kb=v[6], status=int(v[10]), user=int(v[11]),
                  input_bytes=opt(18), output_bytes=opt(19), output_files=opt(20),
                  queue=int(v[14]))


class SwfReader:
    """Iterate a trace's jobs in file order; ``header`` fills as the top comments pass.

    Raises :class:`TraceError` at the first malformed line (naming all its problems),
    and when submit times go backwards (SWF lists jobs in submit order; the replay
    streams them in that order); with ``bad`` given, adds each bad line to it instead and
    goes on (:func:`scan_swf`). Passes over lines of partial executions (status 2-4).
    """

    def __init__(self, stream: TextIO, name: str, bad: BadLines | None = None) -> None:
        self.stream = stream
        self.name = name
        self.header = SwfHeader()
        self.lines = 0
        self.partial = 0  # lines of partial executions passed over (status 2-4)
        self.bad = bad

    def __iter__(self) -> Iterator[SwfJob]:
        last = -math.inf
        for n, raw in enumerate(self.stream, start=1):
            self.lines = n
            text = raw.strip()
            if not text:
                continue
            where = f"{self.name}:{n}"
            if text.startswith(";"):
                key, sep, value = text[1:].partition(":")
                if sep and key.strip() and " " not in key.strip():
                    self.header.fields.setdefault(key.strip(), value.strip())
                continue
            try:
                job = parse_job(text, where, n)
            except TraceError as e:
                if self.bad is None:
                    raise
                self.bad.add(str(e))
                continue
            if job.status in PARTIAL:
                # the job's summary line (status 0, 1 or 5, the same job number) came
                # first and stands for the whole job: replaying its parts too would run it
                # twice
                self.partial += 1
                continue
            if job.submit < last:
                problem = (f"{where}: submit time {_fmt(job.submit)} is before the "
                           f"previous job's {_fmt(last)}: SWF lists jobs in submit order")
                if self.bad is None:
                    raise TraceError(problem)
                self.bad.add(problem)
                continue
            last = job.submit
            yield job


def _fmt(x: float) -> str:
    return str(int(x)) if x == int(x) else str(x)


def read_swf(path: str | Path) -> Iterator[SwfJob]:
    """Every job of the trace at ``path``, lazily. Raises TraceError (``FILE:LINE: ...``)."""
    p = Path(path)
    try:
        stream = p.open(encoding="utf-8")
    except OSError as e:
        raise TraceError(f"{p}: cannot read trace: {e.strerror or e}") from e
    with stream:
        try:
            yield from SwfReader(stream, str(p))
        except UnicodeDecodeError as e:
            raise TraceError(f"{p}: cannot read trace: not UTF-8 text ({e.reason})") from e


@dataclass(frozen=True, slots=True)
class Scan:
    """What :func:`scan_swf` found in a whole trace."""

    jobs: int  # job lines to replay (partial executions not counted)
    partial: int  # lines of partial executions passed over
    size: SizeGuess | None  # the cluster the jobs imply (when asked for and known)


def scan_swf(path: str | Path, *, size: bool = False) -> Scan:
    """Read the whole trace once before any replay: every bad line is reported, not only
    the first (TraceError, one ``FILE:LINE: ...`` line each), and with ``size`` the
    cluster the jobs imply is inferred on the way (:func:`guess_size`). A trace without
    jobs is refused."""
    p = Path(path)
    bad = BadLines(str(p))
    sizer = _Sizer() if size else None
    try:
        stream = p.open(encoding="utf-8")
    except OSError as e:
        raise TraceError(f"{p}: cannot read trace: {e.strerror or e}") from e
    jobs = 0
    with stream:
        reader = SwfReader(stream, str(p), bad)
        try:
            for job in reader:
                jobs += 1
                if sizer is not None:
                    sizer.add(job)
        except UnicodeDecodeError as e:
            raise TraceError(f"{p}: cannot read trace: not UTF-8 text ({e.reason})") from e
    if bad:
        raise bad.error()
    if jobs == 0:
        raise TraceError(f"{p}: no jobs, only {reader.lines} line"
                         f"{'' if reader.lines == 1 else 's'} of comments: an SWF trace has "
                         "one line of 18 numbers per job")
    return Scan(jobs, reader.partial, sizer.guess() if sizer is not None else None)


def read_header(path: str | Path, limit: int = 200) -> SwfHeader:
    """The header comments at the top of the trace (the first ``limit`` lines at most)."""
    header = SwfHeader()
    p = Path(path)
    try:
        with p.open(encoding="utf-8", errors="replace") as stream:
            for n, raw in enumerate(stream):
                text = raw.strip()
                if n >= limit or (text and not text.startswith(";")):
                    break
                key, sep, value = text[1:].partition(":")
                if sep and key.strip() and " " not in key.strip():
                    header.fields.setdefault(key.strip(), value.strip())
    except OSError as e:
        raise TraceError(f"{p}: cannot read trace: {e.strerror or e}") from e
    return header


@dataclass(frozen=True, slots=True)
class SizeGuess:
    """The compute cluster a trace without a ``MaxProcs`` header implies: at least its
    largest job, and at least the most processors its jobs held at once (known when the
    trace has wait and run times). Only jobs that ran count (a run time and processors
    known): a job cancelled before it started may have asked for more than the cluster
    has."""

    procs: int
    largest: int  # processors of the largest job
    largest_line: int
    peak: int  # most processors in use at once (0: no job has both wait and run time)
    peak_at: float  # the submit-time clock when that peak began

    def describe(self, source: str = "the trace") -> str:
        """One line saying what was inferred and from what (``source``: the file's kind)."""
        why = f"its largest job (line {self.largest_line}) uses {self.largest}"
        if self.peak > self.largest:
            why = (f"its jobs held {self.peak} at once (at {_fmt(self.peak_at)} s); "
                   f"{why}")
        return f"{self.procs} processors, inferred from {source}: {why}"


class _Sizer:
    """:func:`guess_size` one job at a time; keeps two events per job that ran."""

    def __init__(self) -> None:
        self.largest = 0
        self.largest_line = 0
        self.events: list[tuple[float, int]] = []

    def add(self, job: SwfJob) -> None:
        if job.procs <= 0 or job.run < 0:
            return  # it never ran (the replay skips it): what it asked says nothing
        if job.procs > self.largest:
            self.largest, self.largest_line = job.procs, job.line
        if job.procs > 0 and job.wait >= 0 and job.run >= 0:
            start = job.submit + job.wait
            self.events += ((start + job.run, -job.procs), (start, job.procs))

    def guess(self) -> SizeGuess | None:
        if self.largest == 0:
            return None
        self.events.sort()  # at equal times ends (negative) come before starts
        peak, peak_at, used = 0, 0.0, 0
        for at, delta in self.events:
            used += delta
            if used > peak:
                peak, peak_at = used, at
        return SizeGuess(max(self.largest, peak), self.largest, self.largest_line, peak,
                         peak_at)


def guess_size(jobs: Iterable[SwfJob]) -> SizeGuess | None:
    """The cluster size ``jobs`` imply (None: no job that ran says how many processors it
    used).

    Reads every job once; keeps two events per job that ran (O(jobs) memory)."""
    sizer = _Sizer()
    for job in jobs:
        sizer.add(job)
    return sizer.guess()
