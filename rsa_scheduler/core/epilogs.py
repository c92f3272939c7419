"""Whether the compute nodes that may hold a job's RAMDISK mount are done with the job.

Owns :func:`slurm_holds` (the nodes Slurm still has a job on), :func:`epilogs_left` (the
nodes rsad must still wait for before it reads or destroys the job's RAMDISK, and those
Slurm confirmed done), :func:`slurm_due` (when to ask Slurm again) and
:func:`unconfirmed_words` (why rsad gave up waiting for a node, as it says so).

A node's Epilog takes every mount of the job down and stops the job's node agent; rsad
hears it (``POST /v1/hooks/epilog``) unless it was away or not yet answering then. A
node whose agent does not reconnect after an rsad restart proves nothing: its Epilog may
have run while rsad was away, or its agent died (``kill -9``, the OOM killer) while the
job still runs there and writes to the RAMDISK. Slurm knows: a job is RUNNING on a node,
then COMPLETING there, until that node's Epilog finished (squeue(1): a COMPLETING job's
node list holds only the nodes not yet returned to service). So a node counts as done
when rsad heard its Epilog or when Slurm no longer has the job there, never because its
agent is silent.

Pure: no I/O, no clock (``now`` is an argument).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from rsa_scheduler.core.hostlist import Hostlist
from rsa_scheduler.core.states import SLURM_FINISHED, SLURM_PENDING, SLURM_RUNNING

#: how often rsad asks Slurm again while it waits for nodes whose Epilog it has not heard
SLURM_EVERY = 5.0


def slurm_holds(rows: Iterable[tuple[str, str]]) -> frozenset[str] | None:
    """The nodes on which Slurm still has a job, from the (state, folded node list) of its
    rows in Slurm (one per heterogeneous job component). A running state's
    (:data:`~rsa_scheduler.core.states.SLURM_RUNNING`) nodes hold it; COMPLETING lists
    only the nodes that have not finished it. A pending state holds none (a requeued job
    is pending once every node of its run finished it), nor a finished one, nor a job
    Slurm no longer lists (no rows: slurmctld purges a job's record only once every node
    finished it). None when a state is one this does not know, or a node list is not
    one: nothing is confirmed."""
    held: set[str] = set()
    for state, nodes in rows:
        word = state.split()[0].rstrip("+").upper() if state.strip() else ""
        if word in SLURM_RUNNING:
            try:
                held.update(Hostlist.parse(nodes))
            except ValueError:
                return None
        elif word not in SLURM_PENDING and word not in SLURM_FINISHED:
            return None
    return frozenset(held)


@dataclass(frozen=True, slots=True)
class EpilogWait:
    """Which nodes that may hold a job's mount rsad waits for (or asks to release it)."""

    #: neither rsad heard their Epilog nor does Slurm say it ran: the job may still run
    #: there (its agent dead) and use the RAMDISK
    waiting: frozenset[str]
    #: Slurm no longer has the job there: their Epilog ran, though rsad did not hear it
    #: (it was away, or the report was lost)
    confirmed: frozenset[str]


def epilogs_left(holders: Iterable[str], ended: Iterable[str],
                 held: frozenset[str] | None) -> EpilogWait:
    """Of ``holders`` (the nodes that may hold the job's mount: a live agent, a confirmed
    mount, or recorded as holding it before an rsad restart), those whose Epilog is not
    confirmed: rsad did not hear it (``ended``) and Slurm still has the job there
    (``held``, :func:`slurm_holds`; None: Slurm was not read, or could not say)."""
    left = frozenset(holders) - frozenset(ended)
    if held is None:
        return EpilogWait(left, frozenset())
    return EpilogWait(left & held, left - held)


def slurm_due(last: float | None, now: float, every: float = SLURM_EVERY) -> bool:
    """Whether to ask Slurm again: never asked yet (``last`` None), or ``every`` seconds
    since the last time."""
    return last is None or now - last >= every


def unconfirmed_words(held: frozenset[str] | None) -> str:
    """Why a node's Epilog is not confirmed, as rsad says it: Slurm still has the job on
    it (``held`` is Slurm's answer), or Slurm could not say (None)."""
    if held is None:
        return "Slurm could not be asked whether it ran"
    return "Slurm still has the job there"
