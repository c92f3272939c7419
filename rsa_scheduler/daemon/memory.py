"""What rsad remembers beside the core's records, rebuilt from the log and snapshots.

Owns :class:`Memory`: the facts of each job's actions (its mount, lock token, manifest:
what a re-issued action needs to resume rather than redo), who set each RSA node's
state last and why, what teardowns left on RSA nodes that were down (cleaned before the
node is up again) and the array-task aliases learned from slurmctld's hooks. Each is
learnt from committed events (:meth:`Memory.learn`, at start-up and live), kept in
snapshots (:meth:`Memory.to_json`, :meth:`Memory.restore`) and let go with the job
(:meth:`Memory.forget`). And :class:`SnapshotCadence`: when a snapshot of it all (and of
the core's durable state) is due.

Imports nothing of the daemon: the daemon (service.py) owns one and commits the events.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from rsa_scheduler.core.events import Event

# outcome (and milestone) details worth remembering
FACT_KEYS = ("mount", "lock_orig", "lock_token", "manifest", "mounted", "reset_of",
             "script_started", "verify_differed", "verify_redone", "built",
             "written_back_of", "mail", "epilogs_unconfirmed")


#: what changes a node's place among the nodes that hold a job's mount outside a node step
MOUNT_NEWS = ("compute.mounted", "compute.unmounted", "compute.epilog")


def _as_of(at: object) -> tuple[str, int] | None:
    """A record's ``at`` (NodeSide._as_of: [epoch, changes]), or None (none: an event of
    an older rsad, or a node step's milestone)."""
    if isinstance(at, list | tuple) and len(at) == 2 and isinstance(at[1], int):
        return str(at[0]), at[1]
    return None


def _mount_news(facts: dict[str, Any], node: str, held: bool, at: object) -> None:
    """``node`` holds the job's mount (``held``) or no longer does, as of ``at``: the
    job's ``mounted`` follows, and the news is kept (``mounted_news``: the newest per
    node) until a node step's ``mounted`` that saw it replaces it."""
    rest = {str(n) for n in facts.get("mounted") or ()} - {node}
    facts["mounted"] = sorted(rest | ({node} if held else set()))
    when = _as_of(at)
    if when is not None:
        news = dict(facts.get("mounted_news") or {})
        news[node] = [when[0], when[1], held]
        facts["mounted_news"] = news


def _step_mounted(facts: dict[str, Any], detail: Mapping[str, Any]) -> None:
    """A node step's ``mounted`` (its outcome, or a milestone): it replaces the job's,
    and the news recorded after the step read it (the same rsad, more changes: a late
    Prolog's report, a take-back or an Epilog the loop committed before the step's
    outcome) are applied again on top of it. Before, the outcome undid them: a node
    mounted after the step read its nodes was not known to hold the mount after an rsad
    restart (not asked to release it before a reset or a teardown, nor waited for
    before a stage-out), and a node whose mount was taken back or whose Epilog ran was
    waited for."""
    mounted = {str(n) for n in detail["mounted"] or ()}
    when = _as_of(detail.get("mounted_at"))
    later: dict[str, list[Any]] = {}
    if when is not None:
        for node, (epoch, changes, held) in dict(facts.get("mounted_news") or {}).items():
            if epoch == when[0] and changes > when[1]:
                later[node] = [epoch, changes, held]
                mounted = (mounted - {node}) | ({node} if held else set())
    facts["mounted"] = sorted(mounted)
    if later:
        facts["mounted_news"] = later
    else:
        facts.pop("mounted_news", None)


class Memory:
    """Facts, node notes, debris and aliases (loop thread)."""

    def __init__(self) -> None:
        self.facts: dict[str, dict[str, Any]] = {}
        # node -> who set its state last, why and when (from the log, then live)
        self.node_notes: dict[str, dict[str, Any]] = {}
        # RSA node -> what teardowns left there while it was down (each: fs_id, job_id,
        # tier); cleaned before it is up again (daemon/data.py DataPath.scrub)
        self.debris: dict[str, list[dict[str, Any]]] = {}
        # an array task's own job id -> its key (<array>_<task>): a node's hooks and
        # burst_buffer.lua's know only the former (core.jobkey); learned from slurmctld's
        # hooks and native mode's setup, kept in their events (job.hook, bb.setup) and in
        # snapshots: a restarted rsad answers a task's hooks for the task
        self.aliases: dict[str, str] = {}

    def restore(self, base: Mapping[str, Any]) -> None:
        """Take what a snapshot kept (:meth:`to_json`)."""
        self.facts = {str(j): dict(f) for j, f in dict(base.get("facts") or {}).items()}
        self.node_notes = {str(n): dict(v)
                           for n, v in dict(base.get("node_notes") or {}).items()}
        self.debris = {str(n): [dict(x) for x in v]
                       for n, v in dict(base.get("debris") or {}).items()}
        self.aliases = {str(own): str(key)
                        for own, key in dict(base.get("aliases") or {}).items()}

    def to_json(self) -> dict[str, Any]:
        """What a snapshot keeps (the live tables: written at once)."""
        return {"facts": self.facts, "node_notes": self.node_notes, "debris": self.debris,
                "aliases": self.aliases}

    def learn(self, ev: Event) -> None:
        """Replay: whatever ``ev`` (a committed event) says worth remembering."""
        self.learn_facts(ev)
        if ev.name == "node.debris":
            item = {k: v for k, v in ev.context.items() if k != "node"}
            self.debris.setdefault(str(ev.context["node"]), []).append(item)
        elif ev.name == "node.scrubbed":
            self.debris.pop(str(ev.context["node"]), None)
        if ev.name in ("job.hook", "bb.setup") and ev.context.get("alias"):
            self.aliases[str(ev.context["alias"])] = ev.job_id
        if ev.name == "node.state":
            self.node_notes[str(ev.context["node"])] = {
                "by": ev.context.get("by", ""), "reason": ev.context.get("reason", ""),
                "time": ev.time}

    def learn_facts(self, ev: Event) -> None:
        """The details of a milestone or a successful outcome worth remembering; none
        of an earlier job's of the same id once a new record starts (``job.tracked``;
        ``job.untracked``: the id names another user's job now). A reused id's actions
        have the same ids as the earlier job's: its ``reset_of`` or ``written_back_of``
        would make a reset skip its work.

        A record tracked under a plain id also ends that id's match to an array task: the
        queue lists a task under its key (``127_4``) and never under its own id, so a job
        the queue lists as ``131`` is no task's. Slurm gave the id to a new job (it lost
        its state, or its ids wrapped) while the task it was matched to is still
        remembered: the new job's hooks were the task's (its start and end never heard,
        its node Prologs answered from the task's record, its RAMDISK never mounted)."""
        if ev.name in ("job.tracked", "job.untracked"):
            self.facts.pop(ev.job_id, None)
            if ev.name == "job.tracked":
                self.aliases.pop(ev.job_id, None)
            return
        if ev.name in MOUNT_NEWS:
            # a node's mount counted, or taken back, or taken down by its Epilog, outside
            # the node step that recorded ``mounted`` (daemon/nodeside.py
            # NodeSide.report, NodeSide.epilog); a job rsad let go of keeps no facts
            facts = self.facts.get(ev.job_id)
            if facts is not None:
                _mount_news(facts, str(ev.context["node"]), ev.name == "compute.mounted",
                            ev.context.get("at"))
            return
        if not (ev.name == "action.milestone" or (
                ev.name == "action.outcome" and ev.context.get("result") == "ok")):
            return
        detail = ev.context.get("detail") or {}
        for key in FACT_KEYS:
            if key in detail:
                facts = self.facts.setdefault(ev.job_id, {})
                if key == "mounted":
                    _step_mounted(facts, detail)
                else:
                    facts[key] = detail[key]

    def forget(self, gone: Iterable[str]) -> None:
        """Jobs that left memory: their facts and aliases go with them."""
        left = set(gone)
        for job in left:
            self.facts.pop(job, None)
        if left and self.aliases:
            self.aliases = {k: v for k, v in self.aliases.items() if v not in left}


class SnapshotCadence:
    """When the daemon writes a snapshot of its state (loop thread)."""

    def __init__(self, every: int) -> None:
        self.every = every  # events between snapshots, at least (0: never)
        self.seq = 0  # the event the newest snapshot (or the replay) is as of
        self.first_cycle = True  # no snapshot in it (see :meth:`due`)
        self.catching_up = False  # new jobs left for later cycles (defer_first_sights)

    def due(self, last_seq: Callable[[], int], jobs: int) -> bool:
        """Whether a snapshot is due: once ``every`` events, and at least as many events
        as there are ``jobs`` in memory, came after the last one. A snapshot costs about
        as much per job as the replay of an event (docs/benchmarks.md): so its cost is
        spread over at least as many events as it saves from a restart's replay, whatever
        the number of jobs (at 300k live jobs a snapshot every 10,000 events would cost
        more than the cycles that wrote them). Not in the first cycle after a start: that
        one sees every job of the queue at once, mostly first sights a restart replays
        cheaply; the next due cycle takes it. Nor while new jobs are still being taken on
        over several cycles (daemon/cycle.py ``defer_first_sights``): one snapshot after
        them, not one of every size on the way."""
        if self.catching_up:
            return False
        if self.first_cycle:
            self.first_cycle = False
            return False
        return bool(self.every) and last_seq() - self.seq >= max(self.every, jobs)
