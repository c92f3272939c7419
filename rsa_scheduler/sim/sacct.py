"""A centre's own accounting as a workload: the output of ``sacct --parsable2`` read into
the replay's job records.

Owns :data:`FIELDS` (the ``--format`` list docs/simulator.md gives), :data:`COMMAND` (the
whole command), :func:`parse_sacct` and :func:`read_sacct`. The output is read whole (a
job's step rows, which carry its I/O figures, may come after later jobs) and the jobs are
returned in submit order as :class:`~rsa_scheduler.sim.swf.SwfJob` records, so the
replay treats them as it treats a trace:

- one record per job allocation (``JobIDRaw`` without a ``.step``; array tasks and
  heterogeneous components have their own raw id); the rows of its steps add their
  ``TRESUsageInTot``/``TRESUsageOutTot`` ``fs/disk`` bytes (what the job read and wrote,
  recorded when the site runs a ``jobacct_gather`` plugin) to the job's input and output;
  a job without such figures gets the synthetic volume model (docs/simulator.md);
- submit times in seconds from the earliest submit; wait = Start - Submit; run =
  ``ElapsedRaw``; processors ``AllocCPUS`` (``ReqCPUS`` when nothing was allocated); a
  job ran if it has a ``Start``, ``AllocCPUS`` and a step row or ``ElapsedRaw`` > 0: one
  cancelled while pending has none of the last two (Slurm gives it its cancel time as
  ``Start``) and the replay skips it;
- ``State`` to SWF's status: COMPLETED 1, CANCELLED 5, every other end 0 (failed);
  jobs still pending or running are left out and counted (:attr:`SacctLog.unfinished`).

Malformed rows raise :class:`~rsa_scheduler.sim.swf.TraceError` once the whole output is
read: one ``FILE:LINE`` line per bad row, naming every problem of that row. Pure parsing:
must not run ``sacct`` or read the clock.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TextIO

from rsa_scheduler.sim.swf import BadLines, SwfJob, TraceError

#: the --format list: the fields the replay uses, in this order
FIELDS = ("JobIDRaw", "JobID", "State", "Submit", "Start", "End", "ElapsedRaw",
          "TimelimitRaw", "AllocCPUS", "ReqCPUS", "NNodes", "UID", "Partition", "QOS",
          "TRESUsageInTot", "TRESUsageOutTot")
#: the fields a row cannot do without
REQUIRED = ("JobIDRaw", "State", "Submit", "Start", "ElapsedRaw", "AllocCPUS")
#: the command docs/simulator.md gives (a site adds its own --starttime/--endtime)
COMMAND = ("sacct --allusers --parsable2 --starttime 2026-01-01 --endtime now "
           f"--format {','.join(FIELDS)}")

#: State's first word to SWF's status (1 completed, 0 failed, 5 cancelled)
ENDED = {"COMPLETED": 1, "CANCELLED": 5, "FAILED": 0, "TIMEOUT": 0, "OUT_OF_MEMORY": 0,
         "NODE_FAIL": 0, "BOOT_FAIL": 0, "DEADLINE": 0, "PREEMPTED": 0}
#: states of a job that has not ended (left out of the replay)
NOT_ENDED = frozenset(("PENDING", "RUNNING", "SUSPENDED", "REQUEUED", "RESIZING",
                       "REVOKED", "REQUEUE_FED", "REQUEUE_HOLD", "SPECIAL_EXIT",
                       "STOPPED", "SIGNALING", "STAGE_OUT", "COMPLETING",
                       "CONFIGURING", "POWER_UP_NODE", "UPDATE_DB"))
NO_TIME = frozenset(("", "Unknown", "None"))
_RAW_ID = re.compile(r"^(\d+)(?:\.(\S+))?$")
_SIZE = re.compile(r"^(\d+(?:\.\d+)?)([KMGTP]?)$")
_UNIT = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4, "P": 1024**5}


@dataclass(slots=True)
class _Job:
    line: int
    raw: int
    submit: datetime
    start: datetime | None
    elapsed: int
    cpus: int  # allocated, else requested
    alloc: int  # AllocCPUS as sacct gives it
    nodes: int
    limit_s: float
    status: int
    uid: int
    read: int | None = None
    written: int | None = None


@dataclass(slots=True)
class SacctLog:
    """What :func:`parse_sacct` found: the ended jobs in submit order, and what it left
    out or could not read."""

    jobs: list[SwfJob] = field(default_factory=list)
    unfinished: int = 0  # jobs still pending or running when sacct ran
    steps: int = 0  # step rows read (their I/O figures added to their job)
    with_io: int = 0  # jobs whose steps recorded fs/disk figures
    cpus_per_node: int = 0  # the most CPUs per node any job held (0: unknown)


def _time(text: str) -> datetime | None:
    return None if text in NO_TIME else datetime.fromisoformat(text)


def _tres_bytes(text: str) -> int | None:
    """The ``fs/disk`` figure of a TRES usage list (``cpu=00:00:01,fs/disk=2012,...``)."""
    for part in filter(None, text.split(",")):
        name, _, value = part.partition("=")
        if name == "fs/disk":
            m = _SIZE.match(value)
            if m is None:
                raise ValueError(f"fs/disk={value}")
            return int(float(m.group(1)) * _UNIT[m.group(2)])
    return None


class _Row:
    """One data row: its fields by header name, and the problems found reading them."""

    def __init__(self, row: list[str], col: dict[str, int]) -> None:
        self.row = row
        self.col = col
        self.problems: list[str] = []

    def get(self, key: str) -> str:
        i = self.col.get(key)
        return self.row[i].strip() if i is not None else ""

    def number(self, key: str, default: int | None = None) -> int:
        text = self.get(key)
        if not text and default is not None:
            return default
        if not text.isdigit():
            self.problems.append(f"{key} is {text!r}, not a whole number >= 0")
            return 0
        return int(text)

    def when(self, key: str) -> datetime | None:
        try:
            return _time(self.get(key))
        except ValueError:
            self.problems.append(f"{key} is {self.get(key)!r}, not a time "
                                 "(YYYY-MM-DDTHH:MM:SS)")
            return None


def parse_sacct(stream: TextIO, name: str) -> SacctLog:
    """The jobs of ``sacct --parsable2 --format ...`` output (its header line first).
    Raises TraceError ``NAME:LINE: problem; problem``."""
    lines = iter(enumerate(stream, start=1))
    header: list[str] = []
    n = 0
    for n, raw in lines:  # noqa: B007 (n names the header's line below)
        if raw.strip():
            header = raw.rstrip("\n").split("|")
            break
    else:
        raise TraceError(f"{name}: no sacct output (empty): run the command "
                         "docs/simulator.md gives")
    col = {h.strip(): i for i, h in enumerate(header)}
    missing = [f for f in REQUIRED if f not in col]
    if missing:
        raise TraceError(
            f"{name}:{n}: the header lacks {', '.join(missing)}: the first line must be "
            f"sacct's header naming the fields of --format {','.join(FIELDS)} "
            "(parsable2, without --noheader; docs/simulator.md)")
    log = SacctLog()
    bad = BadLines(name)  # every bad row is reported, not only the first
    jobs: dict[int, _Job] = {}
    io: dict[int, list[int | None]] = {}  # raw id -> [read, written] summed over steps
    stepped: set[int] = set()  # raw ids of jobs with a step row
    for n, raw in lines:
        text = raw.rstrip("\n")
        if not text.strip():
            continue
        row = text.split("|")
        where = f"{name}:{n}"
        if len(row) != len(header):
            bad.add(f"{where}: {len(row)} fields, the header has {len(header)}")
            continue

        r = _Row(row, col)
        get = r.get
        problems = r.problems
        m = _RAW_ID.match(get("JobIDRaw"))
        if m is None:
            problems.append(f"JobIDRaw is {get('JobIDRaw')!r}, not a job id (123 or "
                            "123.batch)")
        raw_id, step = (int(m.group(1)), m.group(2)) if m else (0, None)
        if step is not None:  # a step: only its I/O figures matter
            log.steps += 1
            stepped.add(raw_id)
            try:
                read = _tres_bytes(get("TRESUsageInTot"))
                written = _tres_bytes(get("TRESUsageOutTot"))
            except ValueError as e:
                bad.add(f"{where}: TRES usage {e}: not a byte count")
                continue
            if read is not None or written is not None:
                acc = io.setdefault(raw_id, [None, None])
                for i, v in enumerate((read, written)):
                    if v is not None:
                        acc[i] = (acc[i] or 0) + v
            continue
        state = get("State").split(" ")[0]
        if state in NOT_ENDED:
            log.unfinished += 1
            continue
        if state not in ENDED:
            problems.append(f"State is {get('State')!r}, not a state of sacct's")

        submit, start = r.when("Submit"), r.when("Start")
        if submit is None and not any(p.startswith("Submit") for p in problems):
            problems.append("Submit is unknown: a job cannot be replayed without it")
        elapsed = r.number("ElapsedRaw")
        alloc = r.number("AllocCPUS")
        cpus = alloc or r.number("ReqCPUS", 0)
        nodes = r.number("NNodes", 0)
        uid = r.number("UID", 0)
        limit = get("TimelimitRaw")
        limit_s = float(int(limit) * 60) if limit.isdigit() else -1.0
        if raw_id in jobs:
            problems.append(f"job {raw_id} listed twice (line {jobs[raw_id].line}): run "
                            "sacct without --duplicates")
        if problems:
            bad.add(f"{where}: " + "; ".join(problems))
            continue
        assert submit is not None
        jobs[raw_id] = _Job(n, raw_id, submit, start, elapsed, cpus, alloc, nodes,
                            limit_s, ENDED[state], uid)
    if bad:
        raise bad.error()
    if not jobs and not log.unfinished:
        raise TraceError(f"{name}: no jobs, only the header: widen --starttime/--endtime")
    t0 = min((j.submit for j in jobs.values()), default=None)
    ordered = sorted(jobs.values(), key=lambda j: (j.submit, j.raw))
    for j in ordered:
        assert t0 is not None
        read, written = io.get(j.raw, (None, None))
        if read is not None or written is not None:
            log.with_io += 1
        # ran: started, held CPUs, and either ran a step or for a second at least. Slurm
        # 22.05 gives a job cancelled while pending its cancel time as Start and End,
        # ElapsedRaw 0, its request as AllocCPUS and no step (tests/data/sacct/
        # lab-cancelled-pending.txt): it never ran
        ran = j.start is not None and j.alloc > 0 and (j.elapsed > 0 or j.raw in stepped)
        if ran and j.nodes:
            log.cpus_per_node = max(log.cpus_per_node, -(-j.alloc // j.nodes))
        wait = (j.start - j.submit).total_seconds() if j.start is not None else -1.0
        log.jobs.append(SwfJob(
            line=j.line, job=j.raw, submit=(j.submit - t0).total_seconds(),
            wait=max(wait, 0.0) if ran else -1.0, run=float(j.elapsed) if ran else -1.0,
            procs=j.cpus if j.cpus > 0 else -1, requested_time=j.limit_s,
            used_memory_kb=-1.0, status=j.status, user=j.uid,
            input_bytes=(read or 0) if read is not None or written is not None else None,
            output_bytes=(written or 0) if read is not None or written is not None
            else None))
    return log


def read_sacct(path: str) -> SacctLog:
    """:func:`parse_sacct` of the file at ``path`` (``-``: standard input)."""
    if path == "-":
        return parse_sacct(sys.stdin, "<stdin>")
    p = Path(path)
    try:
        stream = p.open(encoding="utf-8")
    except OSError as e:
        raise TraceError(f"{p}: cannot read sacct output: {e.strerror or e}") from e
    with stream:
        try:
            return parse_sacct(stream, str(p))
        except UnicodeDecodeError as e:
            raise TraceError(f"{p}: cannot read sacct output: not UTF-8 text "
                             f"({e.reason})") from e
