"""The event record and the catalogue of its names (Flux RFC 18 style event log).

Owns :class:`Event`, the JSON value type of its context, and :data:`CATALOGUE`: every
event name rsad writes, what it means, when it is written, its context keys and the
modules that write it. The catalogue lives beside the record because it is the record's
vocabulary, as ``states.py`` is the machine's: whoever writes an event imports
:class:`Event` from here, and the core (writing most names) cannot import the daemon
(writing the rest), so the one place both reach is this leaf. :func:`reference` renders
it for ``docs/events.md`` (``python -m rsa_scheduler.docgen``).

The catalogue is checked, not enforced at run time: ``tests/unit/test_event_catalogue.py``
reads every construction of an :class:`Event` in the package (and the calls that pass a
name through) and fails on a name, a context key, a writer or a stream the catalogue
does not say. Building an event never checks its name: a store written by another
release still loads. Stdlib only; imports nothing of the package.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

JSON = Any  # a JSON-serialisable value: None, bool, int, float, str, list, dict


@dataclass(frozen=True, slots=True)
class Event:
    """One thing that happened to one job.

    ``seq`` is assigned by the store when the event is committed (0 = not yet stored).
    ``time`` is seconds since the epoch as given to the core by its caller (never read
    from a clock inside the core).
    """

    time: float
    job_id: str
    name: str
    context: Mapping[str, JSON] = field(default_factory=dict)
    seq: int = 0


#: the job id of the events that belong to no job: RSA nodes and the whole RSA
#: (``core.scheduler.POOL_STREAM``)
POOL = "@pool"


@dataclass(frozen=True, slots=True)
class EventKind:
    """One name of the event log.

    ``meaning``: one line, what happened and when it is written. ``keys``: each context
    key the event may carry, with what it holds (a key may be absent when it does not
    apply). ``pool``: written under the job id :data:`POOL`, not a job's. ``writers``:
    the modules that build it, relative to ``rsa_scheduler/``."""

    meaning: str
    keys: Mapping[str, str]
    writers: tuple[str, ...]
    pool: bool = False


#: the ``set`` key: what replay folds into the job's record
SET = "the record's fields it changed (replay applies them)"

_SCHEDULER = ("core/scheduler.py",)
_MACHINE = ("core/machine.py",)
_SERVICE = ("daemon/service.py",)
_STARTHOLD = ("daemon/starthold.py",)
_DEPHOLD = ("daemon/dephold.py",)
_NATIVE = ("daemon/native.py",)

#: every event name rsad writes, in the order ``docs/events.md`` lists them
CATALOGUE: Mapping[str, EventKind] = {
    # ---- the job as Slurm shows it ------------------------------------------------------
    "job.tracked": EventKind(
        "rsad saw a job with RSA work (a DATA_IN, DATA_OUT, PREPROCESS or POSTPROCESS "
        "directive) for the first time, or its id again after `job.untracked`: the job's "
        "log starts here",
        {"set": "the whole new record: job_id, user, spec (the directives) and each field "
                "that differs from a new record's default"},
        ("core/record.py",)),
    "job.state": EventKind(
        "the job's job-state changed (queued, on-deck, demoted, running, finished), read "
        "from squeue or heard from a slurmctld hook",
        {"from": "the job-state before (none for a new record)", "to": "the job-state now",
         "slurm_state": "Slurm's state (squeue; GONE: the queue no longer lists the job)",
         "reason": "Slurm's pending reason", "by": "the hook that said it "
         "(PrologSlurmctld, EpilogSlurmctld), instead of slurm_state and reason",
         "set": SET},
        _SCHEDULER),
    "job.ended": EventKind(
        "Slurm's own word on how a finished job ended (COMPLETED, FAILED, TIMEOUT, ...) "
        "came after its job-state was already finished",
        {"slurm_state": "how the job ended", "reason": "Slurm's reason",
         "was": "the end state known before (none)", "set": SET},
        _SCHEDULER),
    "job.updated": EventKind(
        "fields of the job's record changed while its job-state did not (Slurm's priority, "
        "submit time and restart count, account, compute nodes or hold; when the RSA may "
        "allocate to it; a new run's rescue state); or its id now names another job "
        "(superseded)",
        {"superseded_by": "the user of the job that has the id now",
         "submitted": "that job's submit time", "set": SET},
        _SCHEDULER),
    "job.untracked": EventKind(
        "rsad stopped tracking a job whose id now names another job (Slurm lost its state "
        "or its job ids wrapped); replay drops its record",
        {"user": "the earlier job's user", "reason": "why, in words",
         "cycle": "the earlier job's RSA cycle count",
         "serial": "its last action serial (a new record of the id goes on from both)"},
        _SCHEDULER),
    "job.hook": EventKind(
        "slurmctld's PrologSlurmctld (the job starts) or EpilogSlurmctld (it ended) told "
        "rsad of a tracked job (of a heterogeneous job, its leader's hooks only)",
        {"hook": "prolog_slurmctld or epilog_slurmctld", "nodes": "the job's compute nodes",
         "exit_code": "the batch script's wait status (EpilogSlurmctld)",
         "alias": "an array task's own job id (the event names it ARRAYID_TASK)"},
        _SERVICE),
    # ---- the rsa-state machine ----------------------------------------------------------
    "rsa.transition": EventKind(
        "the job's rsa-state machine fired a trigger that changed its record (its "
        "rsa-state, timers, ...) or issued actions (docs/architecture.md, the transition "
        "reference)",
        {"from": "the rsa-state before", "to": "the rsa-state after",
         "trigger": "what fired it (a job-state, an outcome, a timer, a command)",
         "actions": "the ids of the actions issued", "detail": "why, in words (an "
         "outcome's message, how tier auto chose)", "by": "the user or operator whose "
         "command fired it", "set": SET},
        _MACHINE),
    "action.outcome": EventKind(
        "an action rsad ran for the job ended: its result (an `rsa.transition` follows "
        "that says what it led to, but for the restore of a lock-in)",
        {"action": "the action's id", "result": "ok, failed, refused or busy",
         "message": "the executor's words", "detail": "the executor's facts (where the "
         "RAMDISK is, bytes staged, the manifest, ...)", "actions": "ids of the actions it "
         "issued (the restore of a lock-in: an alert after repeated failures)",
         "set": SET},
        ("core/machine.py", "core/scheduler.py")),
    "action.stale": EventKind(
        "an action ended that is not (or no longer) the job's outstanding one: its "
        "outcome is ignored",
        {"action": "the action's id", "result": "how it ended"},
        _SERVICE),
    "action.milestone": EventKind(
        "a running action made a step durable before going on (e.g. the job's own QOS "
        "before its lock-in, a script started, a reset's new mount; also what the RAMDISK "
        "tender repaired): a re-issued action after a crash finds it and does not redo or "
        "undo it",
        {"action": "the action's id (JOBID/tend: the RAMDISK tender)",
         "detail": "what was done"},
        _SERVICE),
    "timer.dropped": EventKind(
        "a timer came due that no longer applies (armed in an rsa-state the job has left, "
        "or the retry of a lock-in's restore once the job is no longer locked in)",
        {"timer": "its trigger (retry-due, reset-due, unlock-due, ...)", "set": SET},
        _MACHINE),
    "unlock.retry": EventKind(
        "the restore of a locked-in job's own QOS or priority failed before; its retry "
        "timer came due: a new UNLOCK action",
        {"actions": "the new UNLOCK action's id", "failures": "failed restores so far",
         "set": SET},
        _MACHINE),
    "unlock.owed": EventKind(
        "a restore Slurm refused while the job ran (busy) is issued again now that the "
        "job's job-state changed",
        {"actions": "the new UNLOCK action's id", "failures": "failed restores so far",
         "set": SET},
        _MACHINE),
    # ---- holds rsad puts on the job -----------------------------------------------------
    "job.hold-released": EventKind(
        "rsad released the start hold of a job held from submission (early start wait): "
        "its input is staged, the RSA will not serve this run, or the cluster is busy and "
        "it could not start now anyway",
        {"deadline": "the hold's deadline (seconds since the epoch)",
         "why": "what the job's user is told"},
        _STARTHOLD),
    "job.rerun-held": EventKind(
        "a requeued job is held until its earlier run's output is staged out and verified "
        "(written once Slurm placed the hold, again when the reason changes, and by a "
        "restarted rsad for a hold no rsad told)",
        {"rsa_state": "the earlier run's rsa-state",
         "rescue_to": "where its output is rescued to instead (the rescue area)"},
        _STARTHOLD),
    "job.rerun-released": EventKind(
        "the rerun hold of a requeued job ended",
        {"why": "what the job's user is told",
         "then": "released, or held for its new RAMDISK"},
        _STARTHOLD),
    "job.dependency-held": EventKind(
        "a dependent job with RSA work of its own is held until the output of the jobs it "
        "depends on is verified on the PFS (written each time rsad asks Slurm for the "
        "hold)",
        {"parents": "the job ids it waits for"},
        _DEPHOLD),
    "job.dependency-released": EventKind(
        "rsad asks Slurm to release the dependency hold of such a job",
        {"parents": "the job ids it waited for"},
        _DEPHOLD),
    # ---- compute nodes ------------------------------------------------------------------
    "compute.mounted": EventKind(
        "a compute node's Prolog mounted the job's RAMDISK outside any node step of rsad "
        "(it ran late)",
        {"node": "the compute node",
         "at": "what the change is as of: [the epoch of the rsad that counted it, how many "
               "changes to the job's mounted nodes preceded it] (a step's outcome committed "
               "after it that did not see it does not undo it)"},
        _SERVICE),
    "compute.unmounted": EventKind(
        "a compute node's Prolog took back a mount of the RAMDISK it had reported (also "
        "one an earlier rsad counted, or that a Prolog killed by its backstop undid)",
        {"node": "the compute node", "message": "why",
         "at": "what the change is as of: [the epoch of the rsad that counted it, how many "
               "changes to the job's mounted nodes preceded it] (a step's outcome committed "
               "after it that did not see it does not undo it)"},
        _SERVICE),
    "compute.epilog": EventKind(
        "the Epilog of a compute node that held the job's RAMDISK took every mount of it "
        "down: a restarted rsad does not wait for a release from that node",
        {"node": "the compute node",
         "at": "what the change is as of: [the epoch of the rsad that counted it, how many "
               "changes to the job's mounted nodes preceded it] (a step's outcome committed "
               "after it that did not see it does not undo it)"},
        _SERVICE),
    "compute.left": EventKind(
        "a compute node's Epilog could not take every mount of the job's RAMDISK down: "
        "the mount stays there (an alert says what to do)",
        {"node": "the compute node", "message": "why"},
        _SERVICE),
    "compute.unconfirmed": EventKind(
        "compute nodes did not confirm the release of the job's RAMDISK: it is kept, the "
        "step retried, the nodes drained in Slurm",
        {"nodes": "the compute nodes", "drain": "the drain reason given to Slurm"},
        _SERVICE),
    # ---- native mode (burst_buffer/lua) -------------------------------------------------
    "bb.setup": EventKind(
        "native mode: burst_buffer.lua's slurm_bb_setup made the job Slurm's to stage "
        "(or rsad, having lost the setup, takes it at the job's next data_in or data_out: "
        "no keys then)",
        {"uid": "the job's uid", "gid": "its gid", "pool": "the burst buffer pool",
         "size": "the burst buffer size Slurm asked for",
         "alias": "an array task's own job id (the event names it ARRAYID_TASK)"},
        _NATIVE),
    "bb.teardown": EventKind(
        "native mode: slurm_bb_job_teardown of a job still pending: its RAMDISK is kept "
        "for slurm.bb_grace in case Slurm sets it up again",
        {"hurry": "Slurm's hurry flag", "kept_for": "seconds it is kept"},
        _NATIVE),
    # ---- RSA nodes and the whole RSA (job id @pool) -------------------------------------
    "node.state": EventKind(
        "an RSA node's state (up, drained, down) changed: set by an operator (rsa drain, "
        "rsa resume) or by the health loop",
        {"node": "the RSA node", "from": "its state before (up, drained, down)",
         "to": "its state now", "by": "the operator, or health (the health loop)",
         "reason": "why"},
        _SCHEDULER, pool=True),
    "node.debris": EventKind(
        "a teardown skipped an RSA node that was down: what it left there (cleaned "
        "before the node is up again)",
        {"node": "the RSA node", "fs_id": "the RAMDISK's filesystem id",
         "job_id": "the job whose RAMDISK it was (`rsa events` and the API show it as "
                   "`job`: the event's own job id is @pool)", "tier": "its tier"},
        _SERVICE, pool=True),
    "node.scrubbed": EventKind(
        "the health loop cleaned what teardowns left on an RSA node while it was down",
        {"node": "the RSA node"},
        _SERVICE, pool=True),
    "rsa.drain": EventKind(
        "an operator drained (rsa admin drain) or resumed (rsa admin resume) the whole "
        "RSA: no new job gets RSA nodes while it is drained",
        {"on": "drained (true) or resumed", "by": "the operator", "reason": "why",
         "pfs": "true: jobs that would get RSA nodes run from the PFS instead"},
        _SCHEDULER, pool=True),
    "rsad.mode": EventKind(
        "rsad started in a slurm.mode other than the log's last (its first start too)",
        {"mode": "queue or native"},
        _SCHEDULER, pool=True),
}


def reference() -> str:
    """The catalogue as Markdown tables, one for job events and one for the pool's."""
    out: list[str] = []
    for pool, head in ((False, "Events of a job (`rsa job ID`, `rsa events --job ID`)"),
                       (True, f"Events of the RSA nodes and the whole RSA (job id `{POOL}`; "
                              f"`rsa events` shows them to operators, `rsa events --job "
                              f"{POOL}` them alone)")):
        out += [f"### {head}", "", "| event | meaning | context keys | written by |",
                "|---|---|---|---|"]
        for name, kind in CATALOGUE.items():
            if kind.pool is not pool:
                continue
            keys = "; ".join(f"`{k}`: {v}" for k, v in kind.keys.items()) or "none"
            writers = ", ".join(f"`{w}`" for w in kind.writers)
            out.append(f"| `{name}` | {kind.meaning} | {keys} | {writers} |")
        out.append("")
    return "\n".join(out)
