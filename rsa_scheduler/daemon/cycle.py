"""Reading the Slurm queue for one cycle: which RSA jobs to observe.

Owns :class:`QueueReader`, the incremental read rsad's default cycle does when
job_submit.lua marks RSA jobs (only lines carrying an ``rsa1:`` admin_comment can
matter, and only those that changed since the last cycle are parsed; a 100k-job queue
costs little), with the squeue lines (or rows) of the last cycle it compares against;
and :func:`defer_first_sights`, how many new jobs one cycle takes on. Turning rows into
observations, and everything after (the core's decision, the start hold, snapshots), is
the daemon's (service.py).

Imports nothing of the daemon but :mod:`rsa_scheduler.daemon.specs` (the admin_comment
marker).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass, field

from rsa_scheduler.daemon.specs import ADMIN_COMMENT_PREFIX
from rsa_scheduler.slurm.parse import QueueRow, merge_hetjobs, parse_queue
from rsa_scheduler.slurm.port import SlurmPort
from rsa_scheduler.staging.flush import submit_order

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
            for line in queue_text().split("\n"):
                if marker not in line and "+" not in line:
                    continue  # the common case, two substring tests: not split at all
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
