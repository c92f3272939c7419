"""Reading the Slurm queue for one cycle: which RSA jobs to observe.

Owns :class:`QueueReader`, the incremental read rsad's default cycle does when
job_submit.lua marks RSA jobs (only lines carrying an ``rsa1:`` admin_comment can
matter, and only those that changed since the last cycle are parsed; a 100k-job queue
costs little), with the squeue lines (or rows) of the last cycle it compares against;
and :func:`defer_first_sights`, how many new jobs one cycle takes on. Turning rows into
observations, and everything after (the core's decision, the start hold, snapshots), is
the daemon's (service.py).

Also :class:`EndStates`: how the tracked jobs that left the queue without an end state
ended, from Slurm's accounting.

Imports nothing of the daemon but :mod:`rsa_scheduler.daemon.specs` (the admin_comment
marker).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass, field

from rsa_scheduler.core.events import Event
from rsa_scheduler.core.record import JobRecord
from rsa_scheduler.core.states import SLURM_END_STATES, JobState
from rsa_scheduler.daemon.specs import ADMIN_COMMENT_PREFIX
from rsa_scheduler.slurm.parse import ROW_START, QueueRow, merge_hetjobs, parse_queue
from rsa_scheduler.slurm.port import Accounting, SlurmError, SlurmPort
from rsa_scheduler.staging.flush import submit_order

log = logging.getLogger(__name__)

#: new RSA jobs a cycle takes on at most, of those that need nothing yet (see
#: :func:`defer_first_sights`): a fresh rsad on a queue of 100k jobs takes them on over a
#: few cycles instead of stalling its loop for one long first cycle
FIRST_SIGHTS_PER_CYCLE = 2000

#: pending reasons of a job that is not about to start: rsad has nothing to do for it yet
NOT_YET = frozenset({"Priority", "JobHeldUser", "JobHeldAdmin", "Dependency"})


def defer_first_sights(rows: list[QueueRow], known: Mapping[str, object],
                       waiting: Iterable[str],
                       limit: int = FIRST_SIGHTS_PER_CYCLE) -> tuple[list[QueueRow], set[str]]:
    """(the rows to observe this cycle, the job ids left for a later cycle).

    A job rsad already tracks, a job that runs, ends or may start soon (any reason but
    :data:`NOT_YET`: on-deck, a start hold, a burst buffer set-up), one the core waits
    on, and a heterogeneous job's leader are always observed; of the other new jobs, at
    most ``limit``, highest priority first, then lowest job id. The rest are observed in
    a later cycle (rsad has nothing to do for them until they near the front)."""
    quiet: list[QueueRow] = []
    out: list[QueueRow] = []
    hold = set(waiting)
    for row in rows:
        if (row.state == "PENDING" and row.reason in NOT_YET and "+" not in row.job_id
                and row.job_id not in known and row.job_id not in hold):
            quiet.append(row)
        else:
            out.append(row)
    if len(quiet) <= limit:
        return rows, set()
    quiet.sort(key=lambda r: (-r.priority, submit_order(r.job_id)))
    return out + quiet[:limit], {r.job_id for r in quiet[limit:]}



@dataclass
class Changes:
    """One incremental read of the queue."""

    #: the rows to observe: changed, waited on, or a changed hetjob's (merged)
    rows: list[QueueRow] = field(default_factory=list)
    #: every RSA job Slurm lists (a hetjob by its leader's id)
    present: set[str] = field(default_factory=set)
    #: new jobs left for a later cycle (:func:`defer_first_sights`)
    later: set[str] = field(default_factory=set)


def _whole_row(lines: list[str], i: int) -> str:
    """The row line ``i`` belongs to, from the line that starts it (:data:`ROW_START`)
    through line ``i``; "" when none does (a later line of a comment: already read with
    its row, or text before the first row, which parse_queue refuses when it is a row's)."""
    j = i
    while j >= 0 and not ROW_START.match(lines[j]):
        j -= 1
    if j < 0:
        return ""
    row = "\n".join(lines[j:i + 1])
    # the marker opens the comment: a line after it that carries the marker again is
    # the comment's own, not a row's
    return row if ("|" + ADMIN_COMMENT_PREFIX) not in "\n".join(lines[j:i]) else ""


class QueueReader:
    """The RSA jobs of the queue that changed since the last read (loop thread)."""

    def __init__(self, slurm: SlurmPort) -> None:
        self.slurm = slurm
        self.prev_lines: dict[str, object] = {}  # job -> its squeue line (row) last read

    def changes(self, waiting: Set[str], known: Mapping[str, object],
                limit: int = FIRST_SIGHTS_PER_CYCLE) -> Changes:
        """The RSA jobs that changed since the last read, and those in ``waiting`` (the
        core waits on them); of new jobs (not in ``known``) at most ``limit`` quiet ones.
        With the CLI backend that is a substring test per squeue line, and only the
        changed lines are parsed; other backends give rows, compared the same way.
        Raises :class:`~rsa_scheduler.slurm.port.SlurmError`."""
        queue_text = getattr(self.slurm, "queue_text", None)
        prev = self.prev_lines
        lines: dict[str, object] = {}
        changed: list[str] = []
        # a heterogeneous job's components (N+K): only the leader carries the marker, all
        # are needed (slurm.parse.merge_hetjobs); when one changed, all are parsed
        hets: set[str] = set()
        if queue_text is not None:
            marker = "|" + ADMIN_COMMENT_PREFIX
            text_lines = queue_text().split("\n")
            for i, line in enumerate(text_lines):
                if marker not in line and "+" not in line:
                    continue  # the common case, two substring tests: not split at all
                if not ROW_START.match(line):
                    # a Reason with a newline (a site plugin's message): the row began
                    # on an earlier line; a comment's own later lines are not needed
                    line = _whole_row(text_lines, i)
                    if not line:
                        continue
                jid = line.split("|", 1)[0]
                het = "+" in jid
                if not het and marker not in line:
                    continue
                lines[jid] = line
                key = jid.split("+", 1)[0]
                if prev.get(jid) != line or key in waiting:
                    if het:
                        hets.add(key)
                    else:
                        changed.append(line)
            changed += [str(v) for j, v in lines.items()
                        if "+" in j and j.split("+", 1)[0] in hets]
            rows = merge_hetjobs(parse_queue("\n".join(changed))) if changed else []
        else:
            rows = []
            for row in self.slurm.queue():
                het = "+" in row.job_id
                if not het and not (row.admin_comment or "").startswith(
                        ADMIN_COMMENT_PREFIX):
                    continue
                lines[row.job_id] = row
                key = row.job_id.split("+", 1)[0]
                if prev.get(row.job_id) != row or key in waiting:
                    if het:
                        hets.add(key)
                    else:
                        rows.append(row)
            rows = merge_hetjobs(rows + [r for j, r in lines.items() if "+" in j and isinstance(
                r, QueueRow) and j.split("+", 1)[0] in hets])
        keys = {j.split("+", 1)[0] for j in lines}
        rows, later = defer_first_sights(rows, known, waiting, limit)
        if later:  # seen as changed again next cycle
            lines = {j: v for j, v in lines.items() if j not in later}
        self.prev_lines = lines
        return Changes(rows, keys, later)


#: jobs one cycle asks Slurm's accounting about at most (one sacct call)
END_STATES_PER_CYCLE = 500
#: cycles a job is asked about before rsad gives up (slurmdbd may record an end late)
END_STATE_TRIES = 3


class EndStates:
    """Tracked jobs that ended with no end state from Slurm's queue (EpilogSlurmctld
    said so, or they left the queue before a poll listed them ended): once Slurm no
    longer lists them, their end state is asked of its accounting (``sacct``; a port
    without it, or Slurm without accounting, leaves them without one). Loop thread."""

    def __init__(self, slurm: SlurmPort) -> None:
        self.accounting: Accounting | None = slurm if isinstance(slurm, Accounting) else None
        self.tries: dict[str, int] = {}  # job -> the cycles it was asked about

    def learn(self, events: Iterable[Event]) -> None:
        """Note the jobs ``events`` finished without an end state."""
        for ev in events:
            if ev.name == "job.state" and ev.context.get("to") == "finished" and \
                    not dict(ev.context.get("set") or {}).get("end_state"):
                self.tries.setdefault(ev.job_id, 0)

    def due(self, records: Mapping[str, JobRecord], present: Set[str]) -> dict[str, str]:
        """{job: end state} from accounting of the noted jobs Slurm no longer lists."""
        for job in [j for j in self.tries if j not in records or records[j].end_state
                    or records[j].job_state is not JobState.FINISHED]:
            del self.tries[job]
        ask = sorted(j for j in self.tries if j not in present)[:END_STATES_PER_CYCLE]
        if not ask:
            return {}
        if self.accounting is None:
            for job in ask:
                del self.tries[job]
            return {}
        try:
            found = self.accounting.end_states(ask)
        except SlurmError as e:
            log.info("no end state from Slurm's accounting for %d job(s): %s", len(ask), e)
            found = {}
        for job in ask:
            self.tries[job] += 1
            if job in found or self.tries[job] >= END_STATE_TRIES:
                del self.tries[job]
        return {j: s for j, s in found.items() if j in ask and s in SLURM_END_STATES}
