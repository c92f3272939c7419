"""The workload a replay or plan runs: an SWF trace or a centre's sacct output, and the
compute cluster it implies.

Owns :class:`Workload` (a fresh iterator of the jobs per run, the cluster's processors
and processors per node, and what was inferred to get them, said in words) and
:func:`load_workload`. The cluster comes from the options when given, else the trace's
``MaxProcs``/``MaxNodes`` header, else it is inferred from the jobs
(:func:`~rsa_scheduler.sim.swf.guess_size`): sacct output has no header, and real SWF
traces written by other tools often lack one. A trace is read whole once before any
replay (:func:`~rsa_scheduler.sim.swf.scan_swf`), so every bad line is reported at once.

Reads files only; must not import the engine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from rsa_scheduler.sim.sacct import read_sacct
from rsa_scheduler.sim.swf import (
    SwfJob,
    TraceError,
    guess_size,
    read_header,
    read_swf,
    scan_swf,
)


@dataclass(slots=True)
class Workload:
    """Jobs to replay and the cluster they ran on."""

    source: str
    kind: str  # "swf" or "sacct"
    jobs: Callable[[], Iterator[SwfJob]]
    procs: int
    procs_per_node: int
    notes: list[str] = field(default_factory=list)  # what was inferred or left out
    facts: dict[str, Any] = field(default_factory=dict)  # the same, for --json

    def to_json(self) -> dict[str, Any]:
        return {"format": self.kind, "procs": self.procs,
                "procs_per_node": self.procs_per_node, **self.facts}


def _size(jobs: Iterator[SwfJob], source: str, what: str) -> tuple[int, str]:
    """The cluster sacct output implies, and the sentence saying so."""
    guess = guess_size(jobs)
    if guess is None:
        raise TraceError(f"{source}: {what} and no job that ran says how many processors it used: "
                         "give --procs")
    return guess.procs, guess.describe("the sacct output")


def load_workload(*, swf: str | None, sacct: str | None, procs: int | None,
                  procs_per_node: int | None) -> Workload:
    """The workload of ``--swf`` or ``--sacct`` (exactly one is given). Raises TraceError
    (``FILE:LINE: ...``) for a file that cannot be read or is malformed."""
    if sacct is not None:
        return _from_sacct(sacct, procs, procs_per_node)
    assert swf is not None
    header = read_header(swf)
    notes: list[str] = []
    facts: dict[str, Any] = {}
    max_procs = procs or header.int_field("MaxProcs")
    # the whole trace is read once before any replay: every bad line is reported at once
    scan = scan_swf(swf, size=max_procs is None)
    if max_procs is None:
        if scan.size is None:
            raise TraceError(f"{swf}: the trace has no MaxProcs header and no job that ran "
                             "says how many processors it used: give --procs")
        why = scan.size.describe()
        max_procs = scan.size.procs
        notes.append(f"cluster: {why} (no MaxProcs header; --procs sets it)")
        facts["procs_inferred"] = why
    ppn = procs_per_node
    if ppn is None:
        max_nodes_h = header.int_field("MaxNodes")
        hp = header.int_field("MaxProcs")
        ppn = hp // max_nodes_h if hp and max_nodes_h and hp >= max_nodes_h else 1
    return Workload(swf, "swf", lambda: read_swf(swf), max_procs, ppn, notes, facts)


def _from_sacct(path: str, procs: int | None, procs_per_node: int | None) -> Workload:
    log = read_sacct(path)
    name = "<stdin>" if path == "-" else path
    notes: list[str] = []
    facts: dict[str, Any] = {"unfinished": log.unfinished, "steps": log.steps,
                             "jobs_with_io": log.with_io}
    max_procs = procs
    if max_procs is None:
        max_procs, why = _size(iter(log.jobs), name, "sacct output has no cluster size")
        notes.append(f"cluster: {why} (--procs sets it)")
        facts["procs_inferred"] = why
    ppn = procs_per_node
    if ppn is None:
        ppn = log.cpus_per_node or 1
        why = (f"{ppn} per node, the most CPUs per node any job held" if log.cpus_per_node
               else "1 per node (no job says how many nodes it held)")
        notes.append(f"processors: {why} (--procs-per-node sets it)")
        facts["procs_per_node_inferred"] = why
    if log.unfinished:
        notes.append(f"{log.unfinished} job{'s' if log.unfinished != 1 else ''} still "
                     "pending or running when sacct ran: left out")
    jobs = log.jobs
    return Workload(name, "sacct", lambda: iter(jobs), max_procs, ppn, notes, facts)
