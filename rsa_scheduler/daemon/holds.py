"""Early start ``wait``: holding a job's start until its RAMDISK is ready (issue 14).

Owns the decisions about the *start hold* (docs/architecture.md, "Holding a job until its
RAMDISK is ready"); daemon/starthold.py keeps the held jobs and does the Slurm calls.

job_submit.lua holds every RSA job whose early-start policy is ``wait`` from the moment it
is submitted: its begin time is set to submit time + ``staging.wait_timeout`` and its
admin_comment gets the marker `` hold=<deadline>`` (core.directives.HOLD_MARK). Slurm
keeps it pending, reason ``BeginTime``, and starts it at the deadline by itself: a job
whose rsad is dead never waits longer than that. Each cycle rsad looks at every held job:

* it **could start now** (enough idle nodes in one of its partitions, judged once when
  first seen): the core treats it as on-deck, RSA nodes are allocated (in priority
  order: if none is free it waits for them, held) and the input staged while Slurm
  holds it; the hold is released (``scontrol update StartTime=now``, marker removed) as
  soon as the RAMDISK is ready, or as soon as the RSA will not serve the job (declined:
  it runs from the PFS at once);
* it **could not start now** (the cluster is busy): if RSA nodes are left for it
  (core/admission.py), the hold is released at once and the job queues as any other; it
  is staged when it is on-deck (reason ``Resources``). If none is left, it stays held
  and waits for them as one that could start now does (issue 32).

Without a record (the job has no RSA work, or its comment is unreadable) the hold is
released at once.

A requeued job is held by rsad under every early-start policy while its earlier run's
output is not yet safe (:func:`rerun_waits`, the *rerun hold*, issue 35): its next run
would start beside that run's stage-out, writing into the same DATA_OUT (or read its input
before its writable input is written back). Released once that output is verified or
quarantined; never when it was rescued to the rescue area, not to DATA_OUT
(:func:`rerun_rescued`: its user releases it). Everything here is pure: ``now`` and facts in,
verdicts out.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from rsa_scheduler.core.machine import JobRecord
from rsa_scheduler.core.states import AWAITING_NODES, PENDING, RsaState
from rsa_scheduler.core.states import READY as READY  # staged: released to start (re-exported)


@dataclass(frozen=True, slots=True)
class Release:
    """Release the hold of ``job_id`` now; ``message`` tells its user why (job comment)."""

    job_id: str
    message: str


def startable(held: Iterable[tuple[str, str, int]], idle: Mapping[str, int],
              ahead: Iterable[tuple[str, int]] = ()) -> set[str]:
    """Which newly held jobs would start at once if released now: ``held`` is (job, its
    partitions as Slurm shows them, ``a,b``, node count); ``ahead`` the pending jobs Slurm
    would start first (partitions, node count: submitted before them and not held, e.g.
    jobs that filled the cluster a moment ago and have not started yet), which take the
    idle nodes first, each from the first of its partitions that has them. Each held job
    is judged alone against what is left: the held jobs take no node while Slurm holds
    them, so ten one-node jobs held on four idle nodes would all start at once if let go
    (issue 32: judged "busy" because the jobs before them were counted on those nodes,
    they were released and started from the PFS; the RSA nodes now decide who waits:
    core/admission.py). An approximation: CPUs, memory and GRES of nodes that are partly
    used (``mixed``) and reservations are not looked at; a job judged busy wrongly may
    start at once and use the PFS (as without the hold), one judged startable wrongly
    waits for its stage-in, then queues."""
    left = dict(idle)
    for partitions, nodes in ahead:
        _take(left, partitions, nodes)
    return {job for job, partitions, nodes in held if _fits(left, partitions, nodes)}


def _fits(left: Mapping[str, int], partitions: str, nodes: int) -> bool:
    return any(left.get(part, 0) >= max(1, nodes) for part in partitions.split(",") if part)


def _take(left: dict[str, int], partitions: str, nodes: int) -> bool:
    for part in (p for p in partitions.split(",") if p):
        if left.get(part, 0) >= max(1, nodes):
            left[part] -= max(1, nodes)
            return True
    return False


# "...: job uses the PFS" and the like, which the core's notes say of a declined job
PFS_CLAUSE = re.compile(r"\s*[:;,]\s*(?:the )?(?:job|it) (?:uses|reads) the PFS")


def without_pfs_clause(message: str) -> str:
    """A core message without its "job uses the PFS" clause (said once elsewhere)."""
    return PFS_CLAUSE.sub("", message).strip()


def hold_verdict(job_id: str, rec: JobRecord | None, can_start: bool) -> Release | None:
    """What to do with a job Slurm holds for the RSA: None keeps holding it."""
    if rec is None:
        return Release(job_id, "RSA: not used for this job; released to start")
    if rec.rsa_state in READY:
        return Release(job_id, "RSA: input staged to the RAMDISK; released to start")
    if rec.declined or rec.rsa_state is RsaState.DECLINED:
        # the PFS is said once, at the end: the comment has room for the why
        why = f" ({without_pfs_clause(rec.message)})" if rec.message else ""
        return Release(job_id, f"RSA: no RAMDISK for this run{why}; released to start: "
                               "it reads from the PFS")
    if not can_start and rec.rsa_state in AWAITING_NODES:
        # staged when next to run only if RSA nodes are free then: a job queued as usual
        # that starts first reads the PFS (it is told so when it starts)
        return Release(job_id, "RSA: the cluster is busy: queued as usual; the input is "
                               "staged when the job is next to run, if RSA nodes are free "
                               "then (else it reads the PFS)")
    return None


def held_message(deadline: float) -> str:
    """What a held job's comment says while it waits."""
    return (f"RSA: held until its input is staged to the RAMDISK (at the latest until "
            f"{_utc(deadline)} UTC, then it starts and reads from the PFS)")


def _utc(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))


def rerun_waits(rec: JobRecord) -> bool:
    """Whether the next run of a requeued job must not start yet: Slurm has it pending
    again and its RAMDISK holds its earlier run's data not yet verified on the PFS
    (output being staged out, verified or retried; writable input being written back;
    ``JobRecord.holds_user_data``), or that output was rescued (:func:`rerun_rescued`).
    Quarantined output is kept for an operator and is no longer in the way: the next run
    reads and writes the PFS. A write-back kept for an operator is (the next run would
    read its input without the earlier run's changes)."""
    return rec.job_state in PENDING and (rerun_rescued(rec) or (
        rec.rsa_state is not RsaState.QUARANTINED and rec.holds_user_data()))


def rerun_rescued(rec: JobRecord) -> bool:
    """Whether a pending job's earlier run's output was quarantined, then rescued (or is
    being rescued) to the rescue area (``JobRecord.rescue_to``, issue 33): it is not in
    DATA_OUT, and no stage-out puts it there. Its next run is held until its user (or an
    operator) releases it, having put in place what it needs: rsad never does (a
    verified rescue is not an output in DATA_OUT). A new cycle of the job (its next run's
    RAMDISK, or its start from the PFS) clears ``rescue_to``; a run started while the
    RAMDISK still held the earlier run's output makes it that run's
    (``JobRecord.rescued``)."""
    return rec.job_state in PENDING and rec.rescued()


def rerun_held_message(job_id: str, rescue_to: str = "", rescuing: bool = False) -> str:
    """What a requeued job's comment says while the rerun hold keeps it: its earlier
    run's output is being staged out, or it goes (``rescuing``) or went to the rescue
    area ``rescue_to`` instead of DATA_OUT, and its user releases the job."""
    release = f"scontrol update JobId={job_id} StartTime=now"
    if rescue_to and rescuing:
        return (f"RSA: requeued: held: the previous run's output, quarantined, is being "
                f"rescued to {rescue_to}, not to DATA_OUT; then put what this run needs in "
                f"place and release it: {release}")
    if rescue_to:
        return (f"RSA: requeued: held: the previous run's output, quarantined, was rescued "
                f"to {rescue_to}, not to DATA_OUT; put what this run needs in place, then "
                f"release it: {release}")
    return (f"RSA: requeued: held until the previous run's output is staged out and "
            f"verified on the PFS (rsa job {job_id} shows how far it is)")


def rerun_released_message(job_id: str, quarantined: bool, deadline: float | None) -> str:
    """What a requeued job's comment says once its rerun hold ends: its earlier run's
    output is quarantined, or its stage-out is over (verified, or discarded by an
    operator); it is released to start, or held until ``deadline`` for its new RAMDISK
    (early start ``wait``)."""
    if quarantined:
        return ("RSA: the previous run's output is kept on its RAMDISK for an operator "
                "(quarantined, not on the PFS); released to start: this run reads and "
                "writes the PFS")
    why = f"RSA: the previous run's stage-out is over (rsa job {job_id} says how it ended)"
    if deadline is None:
        return f"{why}; released to start"
    return f"{why}; {held_message(deadline).removeprefix('RSA: ')}"
