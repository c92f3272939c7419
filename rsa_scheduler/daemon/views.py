"""What the API and the published status show of the daemon's state (loop thread).

Owns the views: one job (:func:`job_view`: its record, progress, RAMDISK and running
actions), the jobs of a user or of all (:func:`jobs_view`), the status
(:func:`status_view`: nodes with who set their state and why, jobs by RSA state, the
quarantined jobs with their age and the capacity they hold, alerts, Slurm's health,
on-deck jobs, compute nodes whose hooks are older than rsad's), what a user who is not
an operator sees of the status (:func:`status_for_user`: no other user's job id
anywhere) and the RAMDISKs the tender may check (:func:`tendable`). Plain dicts, built
on the loop thread (via a ``call`` request, or once per cycle for
:mod:`rsa_scheduler.daemon.published`).

Imports nothing of the daemon but the dispatcher's :class:`Running` and the health
loop's reasons; the daemon (service.py) is its :class:`Viewed`.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any, Protocol

from rsa_scheduler.core.machine import JobRecord
from rsa_scheduler.core.scheduler import Scheduler
from rsa_scheduler.core.states import TENDED, JobState, RsaState
from rsa_scheduler.daemon.dispatch import Running
from rsa_scheduler.daemon.health import HEALTH_BY, public_reason
from rsa_scheduler.node.plan import HookProtocols

HIDDEN_JOB = "(hidden)"  # a job the caller may not see, wherever it would be named


class Viewed(Protocol):
    """What the views read of the daemon."""

    @property
    def sched(self) -> Scheduler: ...

    @property
    def progress(self) -> Mapping[str, Any]: ...

    @property
    def facts(self) -> Mapping[str, Mapping[str, Any]]: ...

    @property
    def node_notes(self) -> Mapping[str, Mapping[str, Any]]: ...

    @property
    def running(self) -> Mapping[str, Running]: ...

    @property
    def alerts(self) -> list[dict[str, Any]]: ...

    @property
    def slurm_ok(self) -> bool: ...

    @property
    def last_cycle_seconds(self) -> float: ...

    @property
    def hook_protocols(self) -> HookProtocols: ...


def job_view(d: Viewed, rec: JobRecord) -> dict[str, Any]:
    view = rec.to_json()
    view["progress"] = d.progress.get(rec.job_id)
    mount = d.facts.get(rec.job_id, {}).get("mount")
    view["ramdisk"] = mount if rec.nodes else None  # where it lives while held
    view["running"] = [r.action.id for r in d.running.values()
                       if r.action.job_id == rec.job_id]
    return view


def jobs_view(d: Viewed, user: str | None = None) -> list[dict[str, Any]]:
    return [job_view(d, r) for r in sorted(d.sched.records.values(), key=lambda r: r.job_id)
            if user is None or r.user == user]


def status_view(d: Viewed) -> dict[str, Any]:
    pool = d.sched.pool
    nodes = []
    held: dict[str, int] = {}  # job -> capacity of the RSA nodes it holds
    for node in pool.nodes():
        note = d.node_notes.get(node.name, {})
        state = pool.state(node.name).value
        owner = pool.owner(node.name)
        if owner:
            held[owner] = held.get(owner, 0) + node.capacity
        nodes.append({"name": node.name, "tier": node.tier.value,
                      "capacity": node.capacity, "state": state,
                      "job": pool.owner(node.name),
                      "reason": note.get("reason", "") if state != "up" else "",
                      "by": note.get("by", "") if state != "up" else ""})
    by_state: dict[str, int] = {}
    quarantined: list[dict[str, Any]] = []
    for rec in d.sched.records.values():
        by_state[rec.rsa_state.value] = by_state.get(rec.rsa_state.value, 0) + 1
        if rec.rsa_state is RsaState.QUARANTINED:
            quarantined.append({"job_id": rec.job_id, "user": rec.user, "since": rec.since,
                                "nodes": rec.nodes, "capacity": held.get(rec.job_id, 0)})
    quarantined.sort(key=lambda q: (q["since"], q["job_id"]))
    return {"nodes": nodes, "jobs_by_rsa_state": by_state, "quarantined": quarantined,
            "alerts": d.alerts[-20:], "slurm_ok": d.slurm_ok,
            "draining": d.sched.draining,
            # compute nodes whose hooks are older than rsad's (node.plan.HookProtocols)
            "hooks_behind": dict(sorted(d.hook_protocols.behind.items())),
            "last_cycle_seconds": d.last_cycle_seconds,
            "running_actions": len(d.running),
            "on_deck": [r.job_id for r in d.sched.records.values()
                        if r.job_state is JobState.ON_DECK]}


def redact(text: str, others: Collection[str]) -> str:
    """``text`` with every whole job id of ``others`` replaced by ``HIDDEN_JOB``."""
    if not text or not others:
        return text
    ids = "|".join(re.escape(j) for j in sorted(others, key=len, reverse=True))
    return re.sub(rf"(?<![\w.])(?:{ids})(?![\w])", HIDDEN_JOB, text)


def status_for_user(view: Mapping[str, Any], mine: Collection[str],
                    others: Collection[str]) -> dict[str, Any]:
    """What a user who is not an operator sees of :func:`status_view`'s ``view``: alerts
    and on-deck jobs of their own jobs (``mine``) only; a node held by another job shows
    ``HIDDEN_JOB``; a node's reason without other users' jobs: a reason the health loop
    gave is its verdict about the node, or one line instead of the one naming what jobs
    left there (:func:`rsa_scheduler.daemon.health.public_reason`), and an operator's
    reason is shown as typed (as ``sinfo -R`` shows Slurm's), with the ids of the jobs
    in ``others`` (every other job rsad knows of) hidden."""
    out = dict(view)
    out["alerts"] = [a for a in view["alerts"] if a["job_id"] in mine]
    out["quarantined"] = [q for q in view.get("quarantined", ()) if q["job_id"] in mine]
    out["hooks_behind"] = {}  # the operator's: they name other users' jobs
    out["on_deck"] = [j for j in view["on_deck"] if j in mine]
    nodes = []
    for node in view["nodes"]:
        node = dict(node)
        if node["job"] and node["job"] not in mine:
            node["job"] = HIDDEN_JOB
        if node.get("reason"):
            reason = (public_reason(node["reason"]) if node.get("by") == HEALTH_BY
                      else node["reason"])
            node["reason"] = redact(reason, others)
        nodes.append(node)
    out["nodes"] = nodes
    return out


def tendable(d: Viewed) -> list[tuple[str, Mapping[str, Any]]]:
    """(job, mount spec) of every RAMDISK no step is working on: the RAMDISK tender
    checks these (core.states.TENDED)."""
    busy = {r.action.job_id for r in d.running.values()}
    out: list[tuple[str, Mapping[str, Any]]] = []
    for job, rec in d.sched.records.items():
        mount = d.facts.get(job, {}).get("mount")
        if mount and rec.rsa_state in TENDED and job not in busy:
            out.append((job, dict(mount)))
    return out
