"""Dependents of RSA jobs: which pending job must wait for whose output (issue 32).

Slurm fulfils ``afterok:A`` (and every other ``after*`` type, and ``singleton``) when A
*ends*; A's ``#RSA_DATA_OUT`` is then still on its RAMDISK, being staged out. rsad holds
every pending job that depends on an RSA job whose output is not yet verified on the PFS
(the *dependency hold*: a begin time far ahead, :data:`DEP_MARK` and the parents it waits
for in the job's admin_comment, so a restarted rsad knows them), from the moment it
first sees it pending, before the parent ends, and releases it once every such parent's
output is verified (or the parent had none to stage). A failed or quarantined stage-out
keeps it held, with a reason its user can read.

Owns the parser of Slurm's dependency text as ``squeue -O Dependency`` prints it
(:func:`parse_dependency`, tested on real 22.05 output in tests/data/slurm/), the
parents a dependency names (:func:`parents_of`), whether a parent's output is settled
(:func:`parent_verdict`), the parents a dependent whose dependency Slurm already cleared
may have (:func:`ended_unsettled`), the marker (:func:`dep_marker`, :func:`read_dep_mark`), the
begin time job_modify gives a dependency added later (:func:`later_hold`), the
begin time of its own a held job keeps (:func:`own_begin`: the release never starts it
before its user's ``--begin`` or a ``StartTime`` set while it was held) and the messages.
Pure: no I/O, no clock.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from rsa_scheduler.core.directive_spec import DEP_TAG, HOLD_MARK
from rsa_scheduler.core.record import JobRecord
from rsa_scheduler.core.states import JobState, RsaState
from rsa_scheduler.errors import RsaError

#: the dependency hold's marker in a job's admin_comment, followed by the parents it waits
#: for (``123,124_5``): rsad lifts only the begin time it set itself
DEP_MARK = f"{HOLD_MARK}{DEP_TAG}"

#: dependency types whose dependent may read the parent's output: every type that waits
#: for the parent's end (``after`` and ``expand`` wait for its start only)
DATA_KINDS = frozenset({"afterok", "afterany", "afternotok", "aftercorr", "afterburstbuffer",
                        "singleton"})

_ENTRY = re.compile(r"^(?P<kind>[a-z]+)(?::(?P<jobs>[^()]*))?(?:\((?P<state>[a-z]+)\))?$")
_JOB = re.compile(r"^(?P<job>\d+)(?:_(?P<task>\d+|\*))?(?:\+\d+)?$")


class DependencyError(RsaError, ValueError):
    """Slurm's dependency text is not of the form :func:`parse_dependency` knows."""


@dataclass(frozen=True, slots=True)
class Dependency:
    """One parent of one dependency type: ``afterok:123_4(unfulfilled)``."""

    kind: str  #: afterok, afterany, ..., singleton
    job: str = ""  #: the parent's job id ("" for singleton)
    task: str | None = None  #: an array task's index, ``*`` for every task, None: the job
    state: str = ""  #: unfulfilled, fulfilled, failed ("" when Slurm printed none)


def parse_dependency(text: str) -> list[Dependency]:
    """Slurm's dependency text: ``afterok:12(unfulfilled),afterany:13_*(unfulfilled)``,
    ``?`` between alternatives, ``singleton(unfulfilled)``, ``(null)`` or ``""`` for
    none; the text as submitted (``afterok:12:13``) too. Raises :class:`DependencyError`
    on anything else (the caller then reads it with :func:`loose_dependency`: unsure is
    never released)."""
    text = text.strip()
    if text in ("", "(null)"):
        return []
    out: list[Dependency] = []
    for entry in re.split(r"[,?]", text):
        m = _ENTRY.match(entry.strip())
        if m is None:
            raise DependencyError(f"unknown dependency {entry!r} in {text!r}")
        kind, jobs, state = m.group("kind"), m.group("jobs"), m.group("state") or ""
        if kind == "singleton":
            out.append(Dependency(kind, state=state))
            continue
        if not jobs:
            raise DependencyError(f"dependency {entry!r} names no job")
        for part in jobs.split(":"):
            j = _JOB.match(part)
            if j is None:
                raise DependencyError(f"unknown job {part!r} in dependency {entry!r}")
            out.append(Dependency(kind, j.group("job"), j.group("task"), state))
    return out


def loose_dependency(text: str) -> list[Dependency]:
    """What a dependency text :func:`parse_dependency` refuses may still name: every job
    id in it (``12``, ``12_3``), as ``afterany`` (one that waits for the job's end), and
    ``singleton`` if the word is there. The dependency hold waits for these rather than
    for none: unsure is never released."""
    out = [Dependency("afterany", m.group(1), m.group(2))
           for m in re.finditer(r"(?<![0-9_])([0-9]+)(?:_([0-9]+))?(?![0-9])", text)]
    if "singleton" in text:
        out.append(Dependency("singleton"))
    return out


def parents_of(job_id: str, user: str, deps: Iterable[Dependency],
               records: Mapping[str, JobRecord],
               aliases: Mapping[str, str] | None = None) -> list[str]:
    """The RSA jobs (keys of ``records``) whose output ``job_id`` (owned by ``user``) may
    read: each parent of a data dependency (:data:`DATA_KINDS`); an array's every task
    (``aftercorr``: only the task of the dependent's own index); for ``singleton`` every
    RSA job of the same user that runs or ran (rsad does not know job names: it may wait
    for more than Slurm does, never for less). A parent named by an array task's own job
    id (``afterok:$SLURM_JOB_ID`` in a task's script: Slurm keeps and prints that id,
    not ``<array>_<task>``) is that task, by ``aliases`` (own id -> key, learned from
    slurmctld's hooks). Sorted, without ``job_id`` itself."""
    found: set[str] = set()
    aliases = aliases or {}
    own_task = job_id.split("_", 1)[1] if "_" in job_id else None
    for dep in deps:
        if dep.kind not in DATA_KINDS:
            continue
        if dep.kind == "singleton":
            # only jobs that run or ran: two pending singletons must not wait for each
            # other (Slurm starts one of them; the other is held while it runs)
            found.update(k for k, r in records.items() if r.user == user
                         and r.job_state in (JobState.RUNNING, JobState.FINISHED))
            continue
        task = dep.task
        if dep.kind == "aftercorr" and own_task is not None and task in (None, "*") \
                and dep.job not in records and dep.job not in aliases:
            # an array: the task of the same index
            task = own_task
        if task is not None and task != "*":
            key = f"{dep.job}_{task}"
            if key in records:
                found.add(key)
            continue
        prefix = f"{dep.job}_"
        named = {k for k in records if k == dep.job or k.startswith(prefix)}
        own = aliases.get(dep.job) if task is None else None
        if not named and own is not None and own in records:
            named = {own}  # an array task named by its own job id
        found |= named
    found.discard(job_id)
    return sorted(found, key=lambda k: (len(k), k))


@dataclass(frozen=True, slots=True)
class Waiting:
    """A parent whose output is not settled yet, and what its dependents are told."""

    parent: str
    why: str  #: running, staging, failed, quarantined


def parent_verdict(rec: JobRecord | None) -> Waiting | None:
    """Whether a dependent must still wait for ``rec``'s output: None once it is settled
    (verified on the PFS, or the job had none on a RAMDISK: no record, no DATA_OUT nor
    writable input, or it ended without its RAMDISK holding any)."""
    if rec is None:
        return None
    if rec.spec.data_out is None and not rec.writable_input():
        return None
    if rec.rsa_state is RsaState.QUARANTINED:
        return Waiting(rec.job_id, "quarantined")
    if rec.rescued():  # its output went to the rescue area, not to DATA_OUT (issue 33)
        return Waiting(rec.job_id, "rescued")
    if rec.rsa_state is RsaState.STAGE_OUT_FAILED or \
            rec.rsa_state is RsaState.WRITEBACK_FAILED:
        return Waiting(rec.job_id, "failed")
    if rec.job_state is not JobState.FINISHED:
        return Waiting(rec.job_id, "running")
    if rec.holds_user_data():
        return Waiting(rec.job_id, "staging")
    return None


#: what a parent's output may be doing that ends by itself soon: a dependent whose
#: dependency Slurm cleared waits only for these (:func:`ended_unsettled`)
IN_FLIGHT = frozenset({"staging", "failed"})


def ended_unsettled(job_id: str, user: str, records: Mapping[str, JobRecord]) -> list[str]:
    """The parents a dependent (``job_id`` of ``user``) may have that Slurm fulfilled and
    no longer prints before rsad read its dependency (a parent that had already ended
    when the dependency was given, by ``scontrol update`` or at submission, or that ended
    while rsad was down; Slurm prints only the parents still to end): its user's RSA
    jobs that have ended with their output on its way to the PFS (staging out,
    verifying, a retry due). Such a parent with output on its way is among these when it
    is its user's own. Not waited for: another user's jobs
    (one user's stage-outs never hold another's jobs whose parents are unknown) and
    output that stays put until someone acts (quarantined, rescued: the dependent would
    wait for as long; its user reads where that output is from ``rsa job``). Sorted as
    :func:`parents_of`."""
    found = {k for k, r in records.items()
             if r.user == user and r.job_state is JobState.FINISHED
             and (w := parent_verdict(r)) is not None and w.why in IN_FLIGHT}
    found.discard(job_id)
    return sorted(found, key=lambda k: (len(k), k))


#: the marker's fields after the parents: the begin time the job had of its own (its
#: user's ``--begin``, an admin's ``StartTime``), which the release keeps, and the begin
#: time the hold set (a different one is someone else's since: kept too)
BEGIN_FIELD, HELD_FIELD = ";begin=", ";held="

#: the marker's field job_submit.lua writes at submission: the parents the dependency
#: names (``7,8_3``; an array by its id), which Slurm no longer prints once it counts one
#: fulfilled (it had ended). Not a hold's parents (the marker's head): rsad reads them as
#: a dependency on each one's end
NAMED_FIELD = ";named="

#: seconds a job's begin time may differ from the one the hold asked for and still be the
#: hold's (rsad asks for ``now+N``; slurmctld's ``now`` is a moment later)
HELD_SLACK = 600

#: the begin time job_submit.lua's job_modify gives a pending job whose update sets a
#: dependency that waits for a job's end (``scontrol update JobId=N Dependency=...``): this
#: (2^32 s: 2106-02-07T06:28:16 UTC) plus the begin time the same update asked for if
#: ahead, plus 1 if it asked for one not ahead (``StartTime=now``), plus 0 if it asked for
#: none. It cannot write the marker (Slurm 22.05 refuses an admin_comment a plugin sets
#: in a user's update): a begin time no one asks for is the mark
#: (slurm_plugins/rsa_job_submit.lua ``hold_later`` writes it)
LATER_BASE = 1 << 32


def later_hold(begin: int | None) -> bool:
    """Whether ``begin`` (a job's begin time) is job_modify's hold of a dependency added
    later (:data:`LATER_BASE`)."""
    return begin is not None and begin >= LATER_BASE


def later_begin(begin: int | None) -> int | None:
    """The begin time of its own the update that set job_modify's hold asked for (1: one
    not ahead; None: none, or ``begin`` is no such hold)."""
    if begin is None or begin < LATER_BASE:
        return None
    own = begin - LATER_BASE
    return own if own > 0 else None


@dataclass(frozen=True, slots=True)
class DepMark:
    """What a dependency hold's marker says."""

    parents: list[str]  #: the parents it waits for ([] when job_submit.lua placed it)
    begin: int | None = None  #: the job's own begin time, kept at the release
    held: int | None = None  #: the begin time the hold set (None: not recorded)
    #: job_submit.lua's: the parents the dependency named at submission (None: not
    #: written: a plugin before this field, ``singleton``, or too many)
    named: list[str] | None = None


def dep_marker(parents: Iterable[str], begin: int | None = None,
               held: int | None = None) -> str:
    """The admin_comment marker of a job held for ``parents``' output, until ``held``,
    whose own begin time is ``begin`` (job_submit.lua writes the same)."""
    text = DEP_MARK + ",".join(parents)
    if begin is not None:
        text += f"{BEGIN_FIELD}{int(begin)}"
    if held is not None:
        text += f"{HELD_FIELD}{int(held)}"
    return text


def _time_field(tail: str, name: str) -> int | None:
    m = re.search(re.escape(name) + r"([0-9]{1,12})(?:;|$)", tail)
    return int(m.group(1)) if m else None


def read_dep_mark(comment: str) -> DepMark | None:
    """The dependency hold's marker in ``comment``; None when it has none."""
    _, tail = _split_marker(comment)
    if tail is None:
        return None
    head, _, _ = tail.partition(";")
    m = re.search(re.escape(NAMED_FIELD) + r"([0-9_,]*)(?:;|$)", tail)
    return DepMark(_ids(head), _time_field(tail, BEGIN_FIELD), _time_field(tail, HELD_FIELD),
                   None if m is None else _ids(m.group(1)))


def _ids(text: str) -> list[str]:
    """The job ids (``123``, ``124_5``) of a comma-separated list, nothing else."""
    return [p for p in text.split(",") if re.fullmatch(r"\d+(?:_\d+)?", p)]


def named_dependency(named: Iterable[str]) -> list[Dependency]:
    """The marker's :data:`NAMED_FIELD` as a dependency on each parent's end."""
    return [Dependency("afterany", *(p.split("_", 1) if "_" in p else (p, None)))
            for p in named]


def own_begin(mark: DepMark | None, begin: int | None, now: float,
              start_hold: int | None = None) -> int | None:
    """The begin time of its own a dependent keeps through the dependency hold, if still
    ahead of ``now``: the marker's, or the job's begin time in Slurm (``begin``) when it
    is none of rsad's: not the hold's (recorded in the marker; a marker that recorded
    none holds the job on its own time) nor the start hold's (``start_hold``, its
    deadline); job_modify's hold of a dependency added later (:func:`later_hold`) gives
    the begin time its update asked for. The release starts the job at the latest of
    ``now`` and these."""
    times = [mark.begin] if mark is not None and mark.begin is not None else []
    if later_hold(begin):
        asked = later_begin(begin)
        if asked is not None:
            times.append(asked)
    elif begin is not None:
        ours: list[int | None] = [start_hold] if start_hold is not None else []
        if mark is not None:
            ours.append(mark.held)
        if not any(t is None or abs(begin - t) <= HELD_SLACK for t in ours):
            times.append(begin)
    ahead = [t for t in times if t > now]
    return max(ahead) if ahead else None


def _split_marker(comment: str) -> tuple[str, str | None]:
    """(``comment`` before the marker, the parents' text after it; None: no marker). A
    job without RSA work has the marker alone, read without its leading space too (should
    Slurm strip it)."""
    bare = DEP_MARK.lstrip()
    if comment.startswith(bare):
        return "", comment[len(bare):]
    head, sep, tail = comment.partition(DEP_MARK)
    return (head, tail) if sep else (comment, None)


def dep_parents(comment: str) -> list[str] | None:
    """The parents a dependency hold's marker names; None when ``comment`` has none."""
    mark = read_dep_mark(comment)
    return None if mark is None else mark.parents


def without_dep_marker(comment: str) -> str:
    """``comment`` without the dependency hold's marker."""
    return _split_marker(comment)[0]


#: a parent's ``Waiting.why`` when it is another user's job: its dependent is told
#: nothing of how that job's stage-out fares, nor to look at it (``rsa job`` shows only
#: one's own jobs)
ANOTHER = "another"


def held_message(waits: list[Waiting]) -> str:
    """What a dependent's comment says while it is held (the worst parent first)."""
    order = {"rescued": 0, "quarantined": 0, "failed": 1, "staging": 2, ANOTHER: 2,
             "running": 3}
    worst = min(waits, key=lambda w: (order.get(w.why, 9), w.parent))
    p = worst.parent
    if worst.why == ANOTHER:
        return (f"RSA: held until job {p}'s output is staged out and verified on the PFS "
                f"(job {p} is another user's: only its owner can follow it, with rsa job "
                f"{p})")
    if worst.why == "quarantined":
        return (f"RSA: held: job {p}'s output is quarantined on its RAMDISK, not on the "
                f"PFS; an operator's 'rsa retry {p}' stages it out once the cause is "
                f"fixed, or an operator decides otherwise (rsa job {p} says why)")
    if worst.why == "rescued":
        return (f"RSA: held: job {p}'s output was quarantined, then rescued to the "
                f"site's rescue area, not to its DATA_OUT (rsa job {p} says where); once "
                f"it is in place an operator releases this job (scontrol update "
                f"JobId=<this job> StartTime=now)")
    if worst.why == "failed":
        return (f"RSA: held: job {p}'s stage-out failed and is retried; this job starts "
                f"once its output is verified on the PFS (rsa job {p} says why)")
    return (f"RSA: held until job {p}'s output is staged out and verified on the PFS "
            f"(rsa job {p} shows how far it is)")


def released_message(parents: Iterable[str], begin: str | None = None, *,
                     unverified: Iterable[str] = (), others: Iterable[str] = ()) -> str:
    """What a dependent's comment says once the hold ends: ``parents``, whose output is
    verified on the PFS; ``unverified``, its user's own jobs whose RAMDISK holds nothing
    any more though their output was not verified (an operator discarded it, the job
    ended before its RAMDISK was mounted, or it wrote the PFS itself); ``others``, other
    users' jobs, of which it is told no more than that (``begin``: the job's own begin
    time it now waits for, as Slurm writes times)."""
    parts = []
    if names := ", ".join(parents):
        parts.append(f"the output of job {names} is verified on the PFS")
    unverified = list(unverified)
    if names := ", ".join(unverified):
        parts.append(f"job {names} has nothing left on its RAMDISK, but no verified "
                     f"stage-out of its output (rsa job {unverified[0]} says why)")
    if names := ", ".join(others):
        parts.append(f"job {names} (another user's) has nothing on its way to the PFS "
                     "any more")
    said = "; ".join(parts)
    if begin is not None:
        return f"RSA: {said}; released to start at its own begin time, {begin}"
    return f"RSA: {said}; released to start"
