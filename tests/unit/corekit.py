"""Factories for core tests: pools, specs, schedulers, action payloads, and a driver that
answers actions."""

from __future__ import annotations

import dataclasses
from pathlib import PurePosixPath
from typing import Any

from rsa_scheduler.core.actions import PAYLOADS, Action, ActionKind, Outcome, Result
from rsa_scheduler.core.allocator import Pool, RsaNode
from rsa_scheduler.core.directives import DirectiveSpec, Reset
from rsa_scheduler.core.events import Event
from rsa_scheduler.core.hostlist import Hostlist
from rsa_scheduler.core.payloads import MountMode, Payload
from rsa_scheduler.core.policy import AllocationPolicy, EarlyStart, StageOut, StagingPolicy, Tier
from rsa_scheduler.core.scheduler import Decision, Observation, Scheduler
from rsa_scheduler.core.states import RsaState

GIB = 1 << 30


def make_pool(n_ram: int = 4, n_ssd: int = 0, ratio: int = 2) -> Pool:
    nodes = [RsaNode(f"rsa{i}", Tier.RAM, 2 * GIB) for i in range(1, n_ram + 1)]
    nodes += [RsaNode(f"ssd{i}", Tier.SSD, 8 * GIB) for i in range(1, n_ssd + 1)]
    return Pool(nodes, AllocationPolicy(ratio=ratio, min_nodes=1, max_nodes=4, max_request=4))


def make_spec(*, data_in: str | None = "/pfs/in", data_out: str | None = "/pfs/out",
              early: EarlyStart | None = None, rw: bool | None = None,
              reset: Reset | None = None, nodes: int | None = None) -> DirectiveSpec:
    return DirectiveSpec(data_in=data_in, data_out=data_out, early_start=early,
                         input_writable=rw, reset=reset, nodes=nodes)


#: every payload field's value in :func:`make_args` unless given: alice's job on rsa1
ARG_DEFAULTS: dict[str, Any] = {
    "user": "alice", "nodes": Hostlist(("rsa1",)), "tier": None,
    "data_in": PurePosixPath("/scratch/a/in"), "data_out": PurePosixPath("/scratch/a/out"),
    "atomic": False, "preprocess": None, "postprocess": None, "mode": MountMode.RO,
    "method": StageOut.RSYNC, "message": "", "rsa_state": RsaState.NONE,
    "target": "7/1/stage-in/1", "write_back": False, "writable": False, "rescue": False,
}


def make_args(kind: ActionKind, **fields: Any) -> Payload:
    """The typed payload of a ``kind`` action: :data:`ARG_DEFAULTS`, overridden by
    ``fields`` (typed values: a Hostlist, PurePosixPath, enums)."""
    cls = PAYLOADS[kind]
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(fields) - names
    assert not unknown, f"{cls.__name__} has no field {', '.join(sorted(unknown))}"
    return cls(**{n: fields.get(n, ARG_DEFAULTS[n]) for n in names})


def make_action(action_id: str, **fields: Any) -> Action:
    """An action of the kind its id ``JOB/CYCLE/KIND/SERIAL`` names (see make_args)."""
    job, _cycle, kind, _serial = action_id.split("/")
    return Action(action_id, job, ActionKind(kind), make_args(ActionKind(kind), **fields))


def make_scheduler(pool: Pool | None = None, **policy: Any) -> Scheduler:
    return Scheduler(pool or make_pool(), StagingPolicy(**policy))


def obs(job: str, state: str, reason: str = "None", spec: DirectiveSpec | None = None,
        nodes: int = 2, priority: int = 100, user: str = "alice") -> Observation:
    return Observation(job, user, state, reason, priority, nodes, spec)


class Driver:
    """Keeps a scheduler, its log, and answers tracked actions (OK unless told otherwise)."""

    def __init__(self, sched: Scheduler) -> None:
        self.sched = sched
        self.log: list[Event] = []
        self.now = 0.0

    def take(self, dec: Decision) -> Decision:
        self.log.extend(dec.events)
        return dec

    def observe(self, *observations: Observation, at: float | None = None) -> Decision:
        if at is not None:
            self.now = at
        return self.take(self.sched.observe(list(observations), self.now))

    def answer(self, job: str, result: Result = Result.OK, msg: str = "") -> Decision:
        rec = self.sched.records[job]
        assert rec.pending is not None, f"job {job} has nothing outstanding ({rec.rsa_state})"
        self.now += 1
        return self.take(self.sched.outcome(Outcome(rec.pending.id, result, msg), self.now))

    def answer_all(self, job: str, limit: int = 50) -> None:
        for _ in range(limit):
            if self.sched.records[job].pending is None:
                return
            self.answer(job)
        raise AssertionError("actions never stopped coming")

    def tick(self, at: float) -> Decision:
        self.now = at
        return self.take(self.sched.tick(at))

    def state(self, job: str) -> str:
        return self.sched.records[job].rsa_state.value
