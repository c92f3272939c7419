"""Results of a simulator run: per-job timelines, the final pool, the JSON document.

Owns :class:`Row`, :class:`JobResult` and :class:`SimResult` (whose ``to_json`` is the
stable ``rsa sim --json`` document) and how actions and the pool are described in them.
Pure data and formatting; must not import the engine.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet

from rsa_scheduler.core.actions import Action
from rsa_scheduler.core.allocator import Pool
from rsa_scheduler.core.payloads import (
    AllocateArgs,
    CancelArgs,
    MessageArgs,
    MountInputArgs,
    ReleaseArgs,
)
from rsa_scheduler.core.policy import NodeState
from rsa_scheduler.core.states import RsaState
from rsa_scheduler.sim.model import Scenario


@dataclass(slots=True)
class Row:
    """One line of a job's timeline."""

    t: float
    job_state: str
    rsa_state: str
    trigger: str
    actions: list[dict[str, Any]] = field(default_factory=list)
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"t": num(self.t), "job_state": self.job_state,
                               "rsa_state": self.rsa_state, "trigger": self.trigger,
                               "actions": self.actions}
        if self.detail:
            out["detail"] = self.detail
        return out


@dataclass(slots=True)
class JobResult:
    """Everything the run produced for one job."""

    job_id: str
    tracked: bool
    rows: list[Row] = field(default_factory=list)
    allocations: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)  # action kind -> times issued
    final: dict[str, Any] = field(default_factory=dict)

    def visited(self) -> list[str]:
        """RSA-states in the order entered (consecutive repeats merged), from ``none``."""
        out = [RsaState.NONE.value] if self.tracked else []
        for row in self.rows:
            if row.rsa_state != out[-1]:
                out.append(row.rsa_state)
        return out


@dataclass(slots=True)
class SimResult:
    """The outcome of one run: timelines, final pool, notes and expectation failures."""

    scenario: Scenario
    end: float
    steps: int
    jobs: dict[str, JobResult]
    pool: dict[str, Any]
    notes: list[dict[str, Any]]
    failures: list[str]
    checked: int

    @property
    def passed(self) -> bool:
        return not self.failures

    def to_json(self) -> dict[str, Any]:
        """A stable JSON document: same scenario, byte-identical ``json.dumps``."""
        sc = self.scenario
        jobs: dict[str, Any] = {}
        for jid, job in self.jobs.items():
            spec = sc.jobs[jid].spec
            jobs[jid] = {
                "user": sc.jobs[jid].user,
                "compute_nodes": sc.jobs[jid].compute_nodes,
                "priority": sc.jobs[jid].priority,
                "directives": spec.to_json() if spec else None,
                "tracked": job.tracked,
                "final": job.final,
                "visited": job.visited(),
                "allocations": job.allocations,
                "actions": dict(sorted(job.counts.items())),
                "timeline": [r.to_json() for r in job.rows],
            }
        return {
            "scenario": sc.name,
            "file": Path(sc.source).name,
            "passed": self.passed,
            "known_bug": sc.known_bug or None,
            "end": num(self.end),
            "steps": self.steps,
            "jobs": jobs,
            "pool": self.pool,
            "notes": self.notes,
            "expectations": {"checked": self.checked, "failures": self.failures},
        }


def num(t: float) -> float | int:
    return int(t) if float(t).is_integer() else t


def pool_view(pool: Pool) -> dict[str, Any]:
    """Free / drained / down hostlists and job -> held hostlist."""
    by: dict[str, list[str]] = {"free": [], "drained": [], "down": []}
    held: dict[str, list[str]] = {}
    for node in pool.nodes():
        owner = pool.owner(node.name)
        state = pool.state(node.name)
        if owner is not None:
            held.setdefault(owner, []).append(node.name)
        if state is NodeState.UP and owner is None:
            by["free"].append(node.name)
        elif state is NodeState.DRAINED:
            by["drained"].append(node.name)
        elif state is NodeState.DOWN:
            by["down"].append(node.name)
    out: dict[str, Any] = {k: hostlist(v) for k, v in by.items()}
    out["held"] = {j: hostlist(held[j]) for j in sorted(held, key=job_key)}
    return out


def hostlist(names: Iterable[str]) -> str:
    names = list(names)
    return str(NodeSet(",".join(names), resolver=RESOLVER_NOGROUP)) if names else ""


def describe(act: Action) -> dict[str, Any]:
    out: dict[str, Any] = {"id": act.id, "kind": act.kind.value}
    args = act.args
    if isinstance(args, AllocateArgs | ReleaseArgs):
        out["nodes"] = args.nodes.folded
    elif isinstance(args, CancelArgs):
        out["target"] = args.target
    elif isinstance(args, MessageArgs):
        out["message"] = args.message
    elif isinstance(args, MountInputArgs):
        out["mode"] = args.mode.value
    return out


def job_key(job_id: str) -> tuple[int, str]:
    head = job_id.split("_", 1)[0]
    return (int(head), job_id) if head.isdigit() else (1 << 62, job_id)
