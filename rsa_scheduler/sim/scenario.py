"""Simulator scenarios: the documented YAML format, loaded into typed, validated objects.

Owns the YAML scenario schema (RSA node pool, policy overrides, jobs with their ``#RSA_*``
directives and scripted action outcomes, a timeline of Slurm observations, node changes,
commands and daemon crashes, and the ``expect:`` block) and every format error message:
each names the file, the line when known, the key and the reason, raised as
:class:`~rsa_scheduler.errors.ScenarioError`. The format is documented in
``docs/simulator.md``.

One YAML validator: the file is read by the configuration's reader
(:func:`~rsa_scheduler.config.yamldoc.parse_yaml`: lines, duplicate keys, tags) and every
value and the ``allocation``/``staging`` settings are converted by the configuration's
validator (:mod:`rsa_scheduler.sim.settings`); this module walks the scenario's own
structure. Reads files; imports the core's value types (never its state machine).
"""

from __future__ import annotations

import difflib
import shlex
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet

from rsa_scheduler.config.kinds import Bool, Choice, Hostlist, Int, Size
from rsa_scheduler.config.yamldoc import Doc, KeyPath, parse_yaml
from rsa_scheduler.core.actions import TRACKED, ActionKind, Result
from rsa_scheduler.core.directives import DirectiveErrors, DirectiveSpec, parse_directives
from rsa_scheduler.core.policy import (
    NODE_TIERS,
    AllocationPolicy,
    NodeState,
    StagingPolicy,
    node_tier,
)
from rsa_scheduler.core.states import (
    OPERATOR_COMMANDS,
    SLURM_FINISHED,
    SLURM_PENDING,
    SLURM_RUNNING,
    USER_COMMANDS,
    JobState,
    RsaState,
    Trigger,
)
from rsa_scheduler.core.units import MAX_DURATION, MAX_TIME, format_duration
from rsa_scheduler.errors import ConfigErrors, ScenarioError
from rsa_scheduler.sim.model import (
    GONE,
    ActionScript,
    CommandEntry,
    CrashEntry,
    Entry,
    Expect,
    JobExpect,
    JobSpec,
    NodeEntry,
    NodeGroup,
    PoolExpect,
    Scenario,
    SlurmEntry,
    Step,
)
from rsa_scheduler.sim.settings import ScenarioValidator, describe, duration

#: how long each tracked action takes unless the scenario says otherwise (seconds)
DEFAULT_DURATIONS: Mapping[ActionKind, float] = {
    ActionKind.BUILD_FS: 30.0,
    ActionKind.STAGE_IN: 300.0,
    ActionKind.LOCK_IN: 1.0,
    ActionKind.MOUNT_INPUT: 2.0,
    ActionKind.MOUNT_OUTPUT: 2.0,
    ActionKind.WRITE_BACK: 120.0,
    ActionKind.RESET: 30.0,
    ActionKind.STAGE_OUT: 300.0,
    ActionKind.VERIFY: 30.0,
    ActionKind.DESTROY_FS: 10.0,
}
DEFAULT_POLL = 5.0  # rsad's default daemon.poll_interval
DEFAULT_HORIZON = 30 * 86400.0  # safety stop after the last timeline entry
# Polls a run may need: (the timeline, then its longest action, capped by until) / poll.
# The engine stops at MAX_STEPS (10^6) and calls that a bug; a scenario that needs more
# is refused here instead. The rest of MAX_STEPS is left for events (a test keeps it so).
MAX_POLLS = 900_000
# Bounds of the integers a scenario gives; as rsad's config (docs/operator-guide.md).
MAX_NODES = 100_000  # a job's compute nodes
MAX_POOL_NODES = 10_000
MAX_PRIORITY = 0xFFFFFFFD  # Slurm's uint32 job priority below NO_VAL and INFINITE
MAX_TIMES = 1_000  # attempts one scripted outcome covers
SLURM_STATES = SLURM_PENDING | SLURM_RUNNING | SLURM_FINISHED | {GONE}
COMMANDS: frozenset[Trigger] = USER_COMMANDS | OPERATOR_COMMANDS

T = TypeVar("T")
_TRIGGERS = frozenset(t.value for t in Trigger)


# ---- loading -------------------------------------------------------------------------------

def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file. Raises ScenarioError naming file, key and reason."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ScenarioError(f"{p}: cannot read scenario: not UTF-8 text ({e.reason})") from e
    except OSError as e:
        raise ScenarioError(f"{p}: cannot read scenario: {e.strerror or e}") from e
    return parse_scenario(text, source=str(p))


def parse_scenario(text: str, source: str = "<scenario>") -> Scenario:
    """Validate scenario YAML text (``source`` names it in errors)."""
    try:
        # a later key replaces an earlier one (scenarios are often built by appending)
        doc, issues = parse_yaml(text, source, keys_as_text=True, later_key_wins=True)
    except ConfigErrors as e:
        raise ScenarioError(str(e.issues[0])) from e
    if issues:
        raise ScenarioError(str(issues[0]))
    return _Parser(doc).scenario(doc.data)


def _dotted(path: KeyPath) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


class _Parser:
    """Converts the plain YAML data, raising located ScenarioErrors."""

    def __init__(self, doc: Doc) -> None:
        self.source = doc.file
        self.lines = doc.lines
        self.v = ScenarioValidator(doc)

    # -- errors and primitives --------------------------------------------------------------
    def fail(self, path: KeyPath, reason: str) -> NoReturn:
        line = self.lines.get(tuple(str(p) if not isinstance(p, int) else p for p in path))
        where = f"{self.source}:{line}" if line else self.source
        raise ScenarioError(f"{where}: {_dotted(path)}: {reason}")

    def mapping(self, value: Any, path: KeyPath, known: Sequence[str],
                required: Sequence[str] = ()) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.fail(path, f"expected a mapping, got {describe(value)}")
        out: dict[str, Any] = {}
        for key, item in value.items():
            name = str(key)
            if name not in known:
                hint = difflib.get_close_matches(name, list(known), n=1)
                tail = f"; did you mean {hint[0]!r}?" if hint else \
                    f"; known keys: {', '.join(known)}"
                self.fail((*path, name), f"unknown key{tail}")
            out[name] = item
        for name in required:
            if name not in out:
                self.fail(path, f"missing required key {name!r}")
        return out

    def seq(self, value: Any, path: KeyPath) -> list[Any]:
        if not isinstance(value, list):
            self.fail(path, f"expected a list, got {describe(value)}")
        return value

    def text(self, value: Any, path: KeyPath) -> str:
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            self.fail(path, f"expected a string, got {describe(value)}")
        return str(value)

    def integer(self, value: Any, path: KeyPath, lo: int = 0, hi: int | None = None) -> int:
        out = self.v.take(Int(min=lo, max=hi), value, path)
        assert isinstance(out, int)
        return out

    def boolean(self, value: Any, path: KeyPath) -> bool:
        return bool(self.v.take(Bool(), value, path))

    def duration(self, value: Any, path: KeyPath, limit: float = MAX_DURATION) -> float:
        """A finite duration ``0 <= d <= limit`` (a year; points in time: ten years)."""
        return float(self.v.take(duration(limit), value, path))

    def choice(self, value: Any, path: KeyPath, conv: Callable[[str], T],
               choices: Sequence[str]) -> T:
        if isinstance(value, int | float) and not isinstance(value, bool):
            value = str(value)
        return conv(self.v.take(Choice(tuple(choices)), value, path))

    def hostlist(self, value: Any, path: KeyPath) -> NodeSet:
        text = self.text(value, path)
        return NodeSet(self.v.take(Hostlist(), text, path), resolver=RESOLVER_NOGROUP)

    # -- the document -------------------------------------------------------------------------
    def scenario(self, data: Any) -> Scenario:
        if data is None:
            self.fail((), "the file is empty; a scenario needs pool, jobs and timeline "
                          "(docs/simulator.md)")
        top = self.mapping(data, (), ("name", "description", "known_bug", "pool",
                                      "allocation", "staging", "durations", "poll", "until",
                                      "jobs", "timeline", "expect"),
                           required=("pool", "jobs", "timeline"))
        pool = self.pool(top["pool"], ("pool",))
        allocation: AllocationPolicy = self.v.allocation(top.get("allocation"),
                                                         ("allocation",))
        staging: StagingPolicy = self.v.staging(top.get("staging"), ("staging",))
        durations = dict(DEFAULT_DURATIONS)
        for name, value in self.mapping(top.get("durations", {}), ("durations",),
                                        [k.value for k in DEFAULT_DURATIONS]).items():
            durations[ActionKind(name)] = self.duration(value, ("durations", name))
        poll: float | None = DEFAULT_POLL
        if "poll" in top:
            poll = None if top["poll"] in (None, False, 0, "off") else \
                self.duration(top["poll"], ("poll",))
            if poll == 0:
                poll = None
        jobs = self.jobs(top["jobs"], ("jobs",))
        timeline = self.timeline(top["timeline"], ("timeline",), jobs, pool)
        last = max((e.at for e in timeline), default=0.0)
        until = self.duration(top["until"], ("until",), MAX_TIME) if "until" in top \
            else last + DEFAULT_HORIZON
        # The daemon polls while an action runs: one action can outlast the timeline.
        longest = max([*durations.values(),
                       *(st.duration or 0.0 for job in jobs.values()
                         for script in job.actions.values()
                         for st in (*script.steps, *([script.every] if script.every else [])))])
        span = min(last + longest, until)
        if poll is not None and span / poll > MAX_POLLS:
            given = "" if "poll" in top else " (the default)"
            self.fail(("poll",) if "poll" in top else ("timeline",),
                      f"the run spans up to {_seconds(span)} (the timeline, then the longest "
                      f"action): at poll {_seconds(poll)}{given} that is up to "
                      f"{int(span / poll)} polls, more than the simulator runs "
                      f"({MAX_POLLS}); set a longer poll or 'poll: off', or shorten the "
                      "timeline or the action")
        expect = self.expect(top.get("expect", {}), ("expect",), jobs)
        name = self.text(top.get("name", Path(self.source).stem), ("name",))
        return Scenario(name=name, source=self.source,
                        description=self.text(top.get("description", ""), ("description",)),
                        pool=pool, allocation=allocation, staging=staging,
                        durations=durations, poll=poll, until=until, jobs=jobs,
                        timeline=timeline, expect=expect,
                        known_bug=self.text(top.get("known_bug", ""), ("known_bug",)))

    def pool(self, value: Any, path: KeyPath) -> tuple[NodeGroup, ...]:
        groups: list[NodeGroup] = []
        seen: set[str] = set()
        items = self.seq(value, path)
        if not items:
            self.fail(path, "the pool needs at least one entry")
        for i, item in enumerate(items):
            p = (*path, i)
            d = self.mapping(item, p, ("names", "tier", "capacity", "state"),
                             required=("names",))
            names = self.hostlist(d["names"], (*p, "names"))
            if len(seen) + len(names) > MAX_POOL_NODES:
                self.fail((*p, "names"), f"a pool has at most {MAX_POOL_NODES} nodes")
            for n in names:
                if n in seen:
                    self.fail((*p, "names"), f"RSA node {n} is listed twice")
                seen.add(n)
            tier = self.choice(d.get("tier", "ram"), (*p, "tier"), node_tier,
                               [t.value for t in NODE_TIERS])
            capacity = int(self.v.take(Size(), d.get("capacity", "64G"), (*p, "capacity")))
            state = self.choice(d.get("state", "up"), (*p, "state"), NodeState,
                                [s.value for s in NodeState])
            groups.append(NodeGroup(str(names), tier, capacity, state))
        return tuple(groups)

    # -- jobs -----------------------------------------------------------------------------------
    def jobs(self, value: Any, path: KeyPath) -> dict[str, JobSpec]:
        if not isinstance(value, dict):
            self.fail(path, f"expected a mapping of job id to job, got {describe(value)}")
        if not value:
            self.fail(path, "must not be empty: define at least one job (job id: job)")
        jobs: dict[str, JobSpec] = {}
        for raw_id, item in value.items():
            jid = str(raw_id)
            p = (*path, jid)
            if not jid or not all(c.isalnum() or c in "_+" for c in jid):
                self.fail(p, "a job id is a Slurm job id such as 1234 or 1234_5")
            d = self.mapping(item if item is not None else {}, p,
                             ("user", "nodes", "priority", "directives", "actions"))
            spec = self.directives(d.get("directives"), (*p, "directives"))
            actions = self.actions(d.get("actions", {}), (*p, "actions"))
            jobs[jid] = JobSpec(
                job_id=jid, user=self.text(d.get("user", "alice"), (*p, "user")),
                compute_nodes=self.integer(d.get("nodes", 1), (*p, "nodes"), 1, MAX_NODES),
                priority=self.integer(d.get("priority", 0), (*p, "priority"), 0, MAX_PRIORITY),
                spec=spec, actions=actions)
        return jobs

    def directives(self, value: Any, path: KeyPath) -> DirectiveSpec | None:
        if value is None:
            return None
        if isinstance(value, str):
            script = value
        elif isinstance(value, dict):
            # The mapping form is turned into #RSA_ lines so the real parser validates it.
            lines = []
            for k, v in value.items():
                if isinstance(v, list):
                    v = shlex.join(str(x) for x in v)
                elif isinstance(v, bool) or v is None or not isinstance(v, str | int | float):
                    self.fail((*path, str(k)), f"expected a string, number or list, "
                                               f"got {describe(v)}")
                lines.append(f"#RSA_{str(k).upper()} {v}")
            script = "\n".join(lines) + "\n"
        else:
            self.fail(path, f"expected a script snippet or a mapping, got {describe(value)}")
        try:
            spec = parse_directives(script, source="directives")
        except DirectiveErrors as e:
            first = e.errors[0]
            if isinstance(value, dict):
                key = list(value)[first.line - 1]
                self.fail((*path, str(key)), first.message)
            self.fail(path, f"line {first.line}: {first.message}")
        return None if spec.is_empty else spec

    def actions(self, value: Any, path: KeyPath) -> dict[ActionKind, ActionScript]:
        known = sorted(k.value for k in TRACKED)
        d = self.mapping(value or {}, path, known)
        out: dict[ActionKind, ActionScript] = {}
        for name, item in d.items():
            kind = ActionKind(name)
            p = (*path, name)
            if isinstance(item, list):
                steps = tuple(self.step(s, (*p, i), kind, with_times=True)
                              for i, s in enumerate(item))
                out[kind] = ActionScript(steps=steps)
            else:
                out[kind] = ActionScript(every=self.step(item, p, kind, with_times=False))
        return out

    def step(self, value: Any, path: KeyPath, kind: ActionKind, *, with_times: bool) -> Step:
        if isinstance(value, str):  # shorthand: "failed"
            value = {"result": value}
        keys = ("result", "duration", "message", "times") if with_times else \
            ("result", "duration", "message")
        d = self.mapping(value, path, keys)
        result = self.choice(d.get("result", "ok"), (*path, "result"), Result,
                             [r.value for r in Result])
        if result is Result.BUSY and kind is not ActionKind.RESET:
            self.fail((*path, "result"), "busy is only a result of reset (input still "
                                         "open, seed 004 footnote 3); use ok, failed or refused")
        duration = self.duration(d["duration"], (*path, "duration")) if "duration" in d \
            else None
        times = self.integer(d.get("times", 1), (*path, "times"), 1, MAX_TIMES)
        return Step(result, duration, self.text(d.get("message", ""), (*path, "message")),
                    times)

    # -- timeline -------------------------------------------------------------------------------
    def timeline(self, value: Any, path: KeyPath, jobs: Mapping[str, JobSpec],
                 pool: Sequence[NodeGroup]) -> tuple[Entry, ...]:
        nodes = NodeSet(",".join(g.names for g in pool), resolver=RESOLVER_NOGROUP)
        entries: list[Entry] = []
        for i, item in enumerate(self.seq(value, path)):
            entries.append(self.entry(item, (*path, i), jobs, nodes))
        # stable: equal times keep file order
        return tuple(sorted(entries, key=lambda e: e.at))

    def entry(self, value: Any, p: KeyPath, jobs: Mapping[str, JobSpec],
              nodes: NodeSet) -> Entry:
        if not isinstance(value, dict) or "at" not in value:
            self.fail(p, "each timeline entry is a mapping with 'at' and one of "
                         "'state', 'node', 'command' or 'crash'")
        at = self.duration(value["at"], (*p, "at"), MAX_TIME)
        key = _dotted(p)
        kinds = [k for k in ("state", "node", "command", "crash") if k in value]
        if len(kinds) != 1:
            self.fail(p, "give exactly one of 'state' (Slurm observation), 'node' "
                         "(drain/resume), 'command' (user/operator) or 'crash'")
        what = kinds[0]
        if what == "crash":
            d = self.mapping(value, p, ("at", "crash"))
            if d["crash"] is not True:
                self.fail((*p, "crash"), "write 'crash: true'")
            return CrashEntry(at, key)
        if what == "node":
            d = self.mapping(value, p, ("at", "node", "set"), required=("set",))
            names = self.hostlist(d["node"], (*p, "node"))
            unknown = NodeSet(names, resolver=RESOLVER_NOGROUP)
            unknown.difference_update(nodes)
            if unknown:
                self.fail((*p, "node"), f"{unknown} is not in the pool")
            state = self.choice(d["set"], (*p, "set"), NodeState, [s.value for s in NodeState])
            return NodeEntry(at, key, str(names), state)
        if what == "command":
            d = self.mapping(value, p, ("at", "job", "command", "by", "operator", "refused"),
                             required=("job",))
            job = self.job_ref(d["job"], (*p, "job"), jobs)
            names = sorted(c.value for c in COMMANDS)
            if d.get("command") in _TRIGGERS and Trigger(d["command"]) not in COMMANDS:
                self.fail((*p, "command"), f"{d['command']!r} is not a command; use one of "
                          f"{', '.join(names)}")
            command = self.choice(d.get("command"), (*p, "command"), Trigger, names)
            operator = self.boolean(d["operator"], (*p, "operator")) if "operator" in d \
                else command not in USER_COMMANDS
            by = self.text(d.get("by", "root" if operator else jobs[job].user), (*p, "by"))
            refused = self.boolean(d.get("refused", False), (*p, "refused"))
            return CommandEntry(at, key, job, command, by, operator, refused)
        d = self.mapping(value, p, ("at", "job", "state", "reason", "priority", "nodes"),
                         required=("job",))
        job = self.job_ref(d["job"], (*p, "job"), jobs)
        slurm = self.text(d["state"], (*p, "state")).upper()
        if slurm not in SLURM_STATES:
            hint = difflib.get_close_matches(slurm, sorted(SLURM_STATES), n=1)
            self.fail((*p, "state"), f"unknown Slurm job state {slurm!r}"
                      + (f"; did you mean {hint[0]}?" if hint else ""))
        reason = self.text(d.get("reason", "None" if slurm != "PENDING" else "Priority"),
                           (*p, "reason"))
        priority = self.integer(d["priority"], (*p, "priority"), 0, MAX_PRIORITY) \
            if "priority" in d else None
        cn = self.integer(d["nodes"], (*p, "nodes"), 1, MAX_NODES) if "nodes" in d else None
        return SlurmEntry(at, key, job, slurm, reason, priority, cn)

    def job_ref(self, value: Any, path: KeyPath, jobs: Mapping[str, JobSpec]) -> str:
        jid = self.text(value, path)
        if jid not in jobs:
            self.fail(path, f"job {jid} is not defined under 'jobs'")
        return jid

    # -- expectations -------------------------------------------------------------------------
    def expect(self, value: Any, path: KeyPath, jobs: Mapping[str, JobSpec]) -> Expect:
        d = self.mapping(value or {}, path, ("jobs", "pool"))
        out: dict[str, JobExpect] = {}
        for raw, item in (d.get("jobs") or {}).items():
            jid = str(raw)
            p = (*path, "jobs", jid)
            if jid not in jobs:
                self.fail(p, f"job {jid} is not defined under 'jobs'")
            out[jid] = self.job_expect(item, p)
        pool = None
        if "pool" in d:
            pd = self.mapping(d["pool"], (*path, "pool"), ("free", "drained", "down", "held"))
            held = None
            if "held" in pd:
                hd = pd["held"] or {}
                if not isinstance(hd, dict):
                    self.fail((*path, "pool", "held"), "expected a mapping of job to hostlist")
                held = {str(k): str(self.hostlist(v, (*path, "pool", "held", str(k))))
                        for k, v in hd.items()}
            pool = PoolExpect(
                **{k: str(self.hostlist(pd[k], (*path, "pool", k))) if pd[k] else ""
                   for k in ("free", "drained", "down") if k in pd}, held=held)
        return Expect(out, pool)

    def job_expect(self, value: Any, p: KeyPath) -> JobExpect:
        d = self.mapping(value, p, ("rsa_state", "job_state", "visits", "never", "cycles",
                                    "allocations", "declined", "actions"))
        rsa_names = [s.value for s in RsaState]

        def states(key: str) -> tuple[RsaState, ...]:
            return tuple(self.choice(s, (*p, key, i), RsaState, rsa_names)
                         for i, s in enumerate(self.seq(d.get(key, []), (*p, key))))

        counts: dict[ActionKind, int] = {}
        for k, v in self.mapping(d.get("actions", {}), (*p, "actions"),
                                 [a.value for a in ActionKind]).items():
            counts[ActionKind(k)] = self.integer(v, (*p, "actions", k))
        allocs = None
        if "allocations" in d:
            allocs = tuple(str(self.hostlist(a, (*p, "allocations", i)))
                           for i, a in enumerate(self.seq(d["allocations"],
                                                          (*p, "allocations"))))
        return JobExpect(
            rsa_state=self.choice(d["rsa_state"], (*p, "rsa_state"), RsaState, rsa_names)
            if "rsa_state" in d else None,
            job_state=self.choice(d["job_state"], (*p, "job_state"), JobState,
                                  [s.value for s in JobState]) if "job_state" in d else None,
            visits=states("visits"), never=states("never"),
            cycles=self.integer(d["cycles"], (*p, "cycles")) if "cycles" in d else None,
            allocations=allocs,
            declined=self.boolean(d["declined"], (*p, "declined")) if "declined" in d else None,
            actions=counts)


def _seconds(value: float) -> str:
    return format_duration(value) if value >= 60 else f"{value:g}s"
