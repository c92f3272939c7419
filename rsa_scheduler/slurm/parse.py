"""Pure parsers of Slurm command output (tested on real 22.05 output in tests/data/slurm/).

Owns the squeue format the adapter asks for (:data:`QUEUE_FIELDS`), :class:`QueueRow`,
:func:`parse_queue`, and :func:`parse_job_info` for one job's identity (never from
``scontrol show job``, whose values can forge other fields). No I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from rsa_scheduler.errors import RsaError

#: One ``squeue -h -r -O`` call per cycle. ``Field:0|`` prints the field whole (no padding
#: or truncation) followed by ``|``; admin_comment comes last so a ``|`` inside it cannot
#: shift the other columns. ``JobArrayID`` gives ``123_4`` for array elements (with -r).
#: Partition and TimeLimit: a change to a locked-in job ends its lock-in (issue 39).
#: SubmitTime and RestartCnt: Slurm's identity of the job behind the id, which tells a
#: job from a later one given the same id after slurmctld lost its state (a requeue sets
#: a new submit time but counts a restart; core.scheduler.another_job).
#: Account: limits per account (issue 33).
QUEUE_FIELDS: tuple[str, ...] = ("JobArrayID", "State", "Reason", "PriorityLong", "NumNodes",
                                 "UserName", "Partition", "TimeLimit", "Account",
                                 "SubmitTime", "RestartCnt", "admin_comment")
QUEUE_FORMAT = ",".join(f"{f}:0|" for f in QUEUE_FIELDS)
_JOB_ID = re.compile(r"^\d+(?:_\d+)?(?:\+\d+)?$")
NULL = "(null)"


class ParseError(RsaError, ValueError):
    """Slurm printed something the parser does not understand."""


@dataclass(frozen=True, slots=True)
class QueueRow:
    """One job (or array element) in the queue."""

    job_id: str
    state: str
    reason: str
    priority: int
    num_nodes: int
    user: str
    admin_comment: str | None
    partition: str = ""  #: the partition(s) it is pending in or runs in
    time_limit: str = ""  #: as squeue prints it (``5:00``, ``1-00:00:00``)
    #: when it was submitted (or last requeued), as squeue prints it
    #: (``2026-11-28T13:05:01``), and how often Slurm requeued it
    submitted: str = ""
    restarts: int = 0
    account: str = ""  #: its Slurm account (limits per account)


#: where a row starts: a line that opens with a job id and a state. A line of a multi-line
#: admin_comment or Reason does not (rsad's own comment is JSON: its newlines are escaped).
ROW_START = re.compile(r"\d+(?:_\d+)?(?:\+\d+)?\|[A-Z_]+\|")
#: one whole row. Reason and admin_comment are free text: a site's other plugin may put a
#: ``|`` or a newline in a job's Reason (a failed burst-buffer hook's message becomes it).
#: Every field between them has a fixed shape, so the Reason is what lies between the
#: State and the first ``|`` that is followed by fields of those shapes: text after the
#: Reason (the comment, which a user's directives reach) can never move that split, and
#: one odd Reason no longer fails the whole queue read.
_ROW = re.compile(
    r"(?P<id>\d+(?:_\d+)?(?:\+\d+)?)\|(?P<state>[A-Z_]+)\|(?P<reason>.*?)\|"
    r"(?P<prio>\d+)\|(?P<nodes>\d+)\|(?P<user>[^|\n]*)\|(?P<partition>[^|\n]*)\|"
    r"(?P<time_limit>[^|\n]*)\|(?P<account>[^|\n]*)\|(?P<submitted>[^|\n]*)\|"
    r"(?P<restarts>\d+)\|(?P<comment>.*)", re.DOTALL)


def parse_queue(text: str) -> list[QueueRow]:
    """Parse ``squeue -h -r -O QUEUE_FORMAT``.

    A line that does not start a new job (:data:`ROW_START`: a line of a multi-line
    admin_comment or Reason) belongs to the row before it.
    """
    rows: list[QueueRow] = []
    pending: list[str] = []
    start = 0
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line:
            continue
        if ROW_START.match(line):
            if pending:
                rows.append(_row("\n".join(pending), start))
            pending, start = [line], lineno
        elif pending:
            pending.append(line)
        else:
            raise ParseError(f"squeue line {lineno}: unexpected {line[:80]!r}")
    if pending:
        rows.append(_row("\n".join(pending), start))
    return rows


_HET = re.compile(r"^(\d+)\+(\d+)$")
#: a component's reasons that say where the whole hetjob stands (on-deck, or behind)
_WAITING = ("Resources", "Priority")


def merge_hetjobs(rows: list[QueueRow]) -> list[QueueRow]:
    """One row per heterogeneous job, keyed by its leader's id (core.jobkey): squeue
    lists ``113+0``, ``113+1``, ... The leader (``+0``) gives the state, priority, user
    and admin_comment (job_submit.lua marks only the leader: the batch script is its);
    the node count is every component's. Slurm starts the components together. The
    leader's reason is the hetjob's, except ``None`` right after submission while another
    component already says ``Resources`` (seen in the lab): then that one's. A component
    whose leader is not in ``rows`` stays as it is."""
    groups: dict[str, list[tuple[int, QueueRow]]] = {}
    for r in rows:
        m = _HET.match(r.job_id)
        if m:
            groups.setdefault(m.group(1), []).append((int(m.group(2)), r))
    if not groups:
        return rows
    out: list[QueueRow] = []
    done: set[str] = set()
    for r in rows:
        m = _HET.match(r.job_id)
        if not m:
            out.append(r)
            continue
        het = m.group(1)
        parts = sorted(groups[het], key=lambda p: p[0])
        if parts[0][0] != 0:
            out.append(r)
            continue
        if het in done:
            continue
        done.add(het)
        lead = parts[0][1]
        reason = lead.reason
        if lead.state == "PENDING" and reason == "None":
            # the leader says None until a scheduling pass has looked at the whole hetjob
            reasons = {p.reason for _, p in parts}
            reason = next((w for w in _WAITING if w in reasons), reason)
        out.append(QueueRow(job_id=het, state=lead.state, reason=reason,
                            priority=lead.priority,
                            num_nodes=sum(p.num_nodes for _, p in parts), user=lead.user,
                            admin_comment=lead.admin_comment, partition=lead.partition,
                            time_limit=lead.time_limit, submitted=lead.submitted,
                            restarts=lead.restarts))
    return out


def _row(text: str, lineno: int) -> QueueRow:
    m = _ROW.fullmatch(text)
    if m is None:
        raise ParseError(f"squeue line {lineno}: not a row of {len(QUEUE_FIELDS)} fields: "
                         f"{text[:80]!r}")
    comment = m["comment"]
    if comment.endswith("|"):
        comment = comment[:-1]
    account = m["account"]
    return QueueRow(job_id=m["id"], state=m["state"], reason=m["reason"],
                    priority=int(m["prio"]), num_nodes=int(m["nodes"]), user=m["user"],
                    admin_comment=None if comment in (NULL, "") else comment,
                    partition=m["partition"], time_limit=m["time_limit"],
                    submitted=m["submitted"], restarts=int(m["restarts"]),
                    account="" if account == NULL else account)


#: ``squeue -h -t all -j JOB -O JOB_INFO_FORMAT``: one job's identity as Slurm keeps it.
#: None of these fields holds text a user chose (``scontrol show job -o`` does: a job
#: name, comment, working directory or output path can contain `` ArrayJobId=1`` and
#: become that field), except admin_comment, which comes last (and which only
#: job_submit.lua, rsad and operators write). ``JobID`` is the job's own id, unique to
#: each array task (``JobArrayID`` would print ``A_T``).
JOB_INFO_FIELDS: tuple[str, ...] = ("JobID", "ArrayJobID", "ArrayTaskID", "UserName",
                                    "Partition", "admin_comment")
JOB_INFO_FORMAT = ",".join(f"{f}:0|" for f in JOB_INFO_FIELDS)
_INFO_START = re.compile(r"^\d+\|\d+\|[^|\n]*\|[^|\n]*\|[^|\n]*\|", re.MULTILINE)
_NUM = re.compile(r"^\d+$")


@dataclass(frozen=True, slots=True)
class JobInfo:
    """One job as Slurm itself describes it (:data:`JOB_INFO_FIELDS`)."""

    job_id: str  #: the job's own id (an array task's too)
    array_job_id: str  #: the array's id; the job's own id when it is no array task
    array_task_id: str  #: the task's index, ``N/A`` for no array, ``0-5`` for tasks not split
    user: str
    partition: str
    admin_comment: str  #: ``""`` when unset

    @property
    def array_key(self) -> str | None:
        """``<array job id>_<task>`` when this is one array task, else None."""
        if _NUM.match(self.array_task_id) and _NUM.match(self.array_job_id):
            return f"{self.array_job_id}_{self.array_task_id}"
        return None


def parse_job_info(text: str, job_id: str) -> JobInfo:
    """The line of ``squeue -h -t all -j JOB -O JOB_INFO_FORMAT`` of job ``job_id``: its
    own id, or ``A_T`` for an array task (a task not split from its array yet has the
    array's own id). ``-j`` of an array's id lists all its tasks, of a heterogeneous
    job's all its components: only the line of that id counts. An admin_comment may run
    over several lines. A ParseError when no line, or more than one, is that job's."""
    array_key = job_id if "_" in job_id else None
    starts = [m.start() for m in _INFO_START.finditer(text)]
    found: list[JobInfo] = []
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else len(text)
        chunk = text[start:end]
        if chunk.endswith("\n"):
            chunk = chunk[:-1]
        parts = chunk.split("|", len(JOB_INFO_FIELDS) - 1)
        own, array, task, user, partition, comment = parts
        if (f"{array}_{task}" if array_key else own) != job_id:
            continue
        if comment.endswith("|"):
            comment = comment[:-1]
        found.append(JobInfo(job_id=own, array_job_id=array, array_task_id=task, user=user,
                             partition=partition,
                             admin_comment="" if comment == NULL else comment))
    if len(found) != 1:
        what = "no line" if not found else f"{len(found)} lines"
        raise ParseError(f"squeue printed {what} for job {job_id}: {text[:200]!r}")
    return found[0]


#: ``squeue -h -t all -j JOB -O JOB_NODES_FORMAT``: where Slurm has one job, per line (a
#: heterogeneous job's components each have theirs): its state and node list. For a
#: COMPLETING job the node list holds only the nodes that have not yet finished it (their
#: Epilog has not run, or is running: squeue(1), ``%N``); a pending job has none. No field
#: holds text a user chose.
JOB_NODES_FIELDS: tuple[str, ...] = ("JobArrayID", "State", "NodeList")
JOB_NODES_FORMAT = ",".join(f"{f}:0|" for f in JOB_NODES_FIELDS)


@dataclass(frozen=True, slots=True)
class JobNodesRow:
    """One line of :data:`JOB_NODES_FORMAT`: a job (or a hetjob's component), its state
    and Slurm's folded node list (``""`` for none)."""

    job_id: str
    state: str
    nodes: str


def parse_job_nodes(text: str, job_id: str) -> list[JobNodesRow]:
    """The lines of ``squeue -h -t all -j JOB -O JOB_NODES_FORMAT`` that are job
    ``job_id``'s: its own (an array task's ``A_T``) or its components' (``job_id+N``).
    No line: Slurm no longer has the job (it purges a job's record only once the job is
    done on every node). A line of another shape is a ParseError."""
    out: list[JobNodesRow] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|")
        if len(parts) < len(JOB_NODES_FIELDS) or not _JOB_ID.match(parts[0]) or \
                any(p.strip() for p in parts[len(JOB_NODES_FIELDS):]):
            raise ParseError(f"squeue job nodes line not understood: {line[:200]!r}")
        own, state, nodes = (p.strip() for p in parts[:len(JOB_NODES_FIELDS)])
        if own != job_id and own.partition("+")[0] != job_id:
            continue
        if not state:
            raise ParseError(f"squeue printed no state for job {own}: {line[:200]!r}")
        out.append(JobNodesRow(job_id=own, state=state,
                               nodes="" if nodes in (NULL, "None assigned") else nodes))
    return out


#: ``squeue -t PD`` fields of :func:`parse_pending` (as captured in tests/data/slurm/)
PENDING_FIELDS: tuple[str, ...] = ("JobArrayID", "NumNodes", "Reason", "Partition")
PENDING_FORMAT = ",".join(f"{f}:0|" for f in PENDING_FIELDS)
#: pending reasons of jobs Slurm would start as soon as nodes are free
ELIGIBLE_REASONS = frozenset({"None", "Resources", "Priority"})


def parse_pending(text: str) -> list[tuple[str, int, str, str]]:
    """``squeue -h -r -t PD -O PENDING_FORMAT``: (job, nodes, reason, partitions) each."""
    out: list[tuple[str, int, str, str]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = line.split("|")
        if len(fields) < 4 or not fields[1].isdigit():
            raise ParseError(f"pending job line not understood: {line[:200]!r}")
        out.append((fields[0], int(fields[1]), fields[2], fields[3]))
    return out


#: ``squeue -h -r -t PD -O DEPENDENT_FORMAT``: pending jobs with their dependency text
#: (core/dependency.py, the dependency hold) and begin time (``EligibleTime``: Slurm's
#: begin time of a pending job, read with ``SLURM_TIME_FORMAT=%s``, :data:`EPOCH_TIME`);
#: admin_comment last, as in QUEUE_FIELDS (no other field holds text a user chose: the
#: dependency is job ids and type names)
DEPENDENT_FIELDS: tuple[str, ...] = ("JobArrayID", "UserName", "Dependency", "EligibleTime",
                                     "admin_comment")
DEPENDENT_FORMAT = ",".join(f"{f}:0|" for f in DEPENDENT_FIELDS)

#: the environment a Slurm client prints times in as seconds since the epoch (strftime's
#: ``%s``): no time zone between slurmctld, the client and rsad
EPOCH_TIME = {"SLURM_TIME_FORMAT": "%s"}


@dataclass(frozen=True, slots=True)
class DependentRow:
    """A pending job that has a dependency, or whose admin_comment carries ``mark``."""

    job_id: str
    user: str
    dependency: str  #: Slurm's text, ``""`` for none
    admin_comment: str  #: ``""`` when unset
    begin: int | None = None  #: its begin time (seconds since the epoch), None: none


def _epoch(text: str) -> int | None:
    """A time Slurm printed with :data:`EPOCH_TIME`; None for ``N/A``, ``Unknown``,
    ``None`` (no time set)."""
    text = text.strip()
    return int(text) if re.fullmatch(r"[0-9]{1,12}", text) else None


def parse_dependents(text: str, mark: str,
                     fields: tuple[str, ...] = DEPENDENT_FIELDS,
                     ahead_of: int | None = None) -> list[DependentRow]:
    """The lines of ``squeue -h -r -t PD -O <fields>`` (:data:`DEPENDENT_FORMAT`; an
    older capture's ``fields`` without ``EligibleTime`` too) with a dependency, or with
    ``mark`` in their admin_comment (the dependency hold's: a held job whose dependency
    Slurm already cleared), or a begin time after ``ahead_of`` (now: job_submit.lua's
    hold of a dependency added later, core/dependency.py ``LATER_BASE``, whose dependency
    Slurm may have cleared too; a job's own begin time, which that hold replaces). An
    admin_comment over several lines is joined to its job."""
    out: list[DependentRow] = []
    cur: list[str] | None = None
    where = {name: i for i, name in enumerate(fields)}

    def flush() -> None:
        if cur is None:
            return
        comment, dep = cur[-1], cur[where["Dependency"]]
        comment = comment[:-1] if comment.endswith("|") else comment
        comment = "" if comment == NULL else comment
        dep = "" if dep == NULL else dep
        begin = _epoch(cur[where["EligibleTime"]]) if "EligibleTime" in where else None
        if dep or mark in comment or (ahead_of is not None and begin is not None
                                      and begin > ahead_of):
            out.append(DependentRow(cur[where["JobArrayID"]], cur[where["UserName"]], dep,
                                    comment, begin))

    for line in text.split("\n"):
        if not line:
            continue
        parts = line.split("|", len(fields) - 1)
        if len(parts) == len(fields) and _JOB_ID.match(parts[0]):
            flush()
            cur = parts
        elif cur is not None:
            cur[-1] += "\n" + line
        else:
            raise ParseError(f"squeue dependency line not understood: {line[:200]!r}")
    flush()
    return out


#: ``sinfo`` format of :func:`parse_sinfo_partitions` (as captured in tests/data/slurm/)
SINFO_PARTITIONS = "%P|%a|%l|%D|%T|%N"
#: Slurm's state of a node that can take a job now (``sinfo %T``; suffixes such as ``*``
#: not responding, ``~`` powered off, ``#`` powering up, ``@`` reboot, ``$`` maintenance
#: mean it cannot)
IDLE = "idle"


def parse_sinfo_partitions(text: str) -> dict[str, int]:
    """Idle nodes per partition from ``sinfo -h -o '%P|%a|%l|%D|%T|%N'`` (the default
    partition's ``*`` dropped; partitions that are not ``up`` count nothing). ``planned``
    nodes count as idle: they are idle nodes the backfill scheduler set aside for a
    pending job (often the held job's own components: a hetjob's second component pends
    with reason None), and the pending jobs ahead are counted by the caller."""
    idle: dict[str, int] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = line.split("|")
        if len(fields) < 5:
            raise ValueError(f"sinfo line has {len(fields)} fields, expected 6: {line!r}")
        part, avail, _limit, count, state = fields[:5]
        part = part.rstrip("*")
        idle.setdefault(part, 0)
        if avail == "up" and state in (IDLE, "planned"):
            idle[part] += int(count)
    return idle


def iter_hostlist_env(value: str) -> Iterator[str]:
    """Expand a Slurm hostlist (``c[1-3],d1``) with ClusterShell."""
    from ClusterShell.NodeSet import NodeSet

    yield from NodeSet(value)


def parse_end_states(text: str) -> dict[str, str]:
    """``sacct -n -X -P -o JobID,State -j ...`` as {job id: its state's first word}: an
    array task as ``A_T``, a heterogeneous job by its leader (``N+0`` is ``N``); a state
    such as ``CANCELLED by 1001`` as ``CANCELLED``. Lines that are not ``id|state`` are
    skipped (sacct prints nothing else with these options)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        job, sep, state = line.strip().partition("|")
        if not sep or not job or not state.strip():
            continue
        if job.endswith("+0"):
            job = job[:-2]
        elif "+" in job:
            continue
        out[job] = state.split()[0].rstrip("+").upper()
    return out
#: ``squeue -h -t all -j JOB -O LOCK_VIEW_FORMAT``: what a lock-in changes, and the job's
#: state (no field a user chose). ``JobArrayID`` names an array task ``A_T`` and a
#: heterogeneous job's components ``J+N`` (the leader, ``+0``, carries the lock-in).
LOCK_VIEW_FIELDS: tuple[str, ...] = ("JobArrayID", "State", "QOS", "PriorityLong")
LOCK_VIEW_FORMAT = ",".join(f"{f}:0|" for f in LOCK_VIEW_FIELDS)


@dataclass(frozen=True, slots=True)
class LockView:
    """One job's state, QOS and priority; state ``GONE`` when Slurm lists it no more."""

    state: str
    qos: str
    priority: int


def parse_lock_view(text: str, job_id: str) -> LockView:
    """The line of job ``job_id`` (or of its leader ``job_id+0``) in ``text``."""
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < len(LOCK_VIEW_FIELDS):
            continue
        own, state, qos, prio = (p.strip() for p in parts[:len(LOCK_VIEW_FIELDS)])
        if own not in (job_id, f"{job_id}+0"):
            continue
        if not _NUM.match(prio):
            raise ParseError(f"job {job_id}: priority {prio!r} is not a number")
        return LockView(state=state.split()[0] if state else "", qos=qos,
                        priority=int(prio))
    return LockView(state="GONE", qos="", priority=0)
