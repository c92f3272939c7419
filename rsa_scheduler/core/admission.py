"""Which jobs Slurm holds for the RSA wait for their RSA nodes, held (issue 32).

Owns :class:`Admission` (what becomes of a job job_submit.lua held at submission under
early start ``wait``), :class:`Candidate` (one such job: whether compute nodes are idle
for it, how many RSA nodes it needs) and :func:`admit`, the decision for the jobs rsad
sees held for the first time, highest Slurm priority first:

* ``START``: idle compute nodes would take it now. Released before its RAMDISK is ready
  it would start at once and read the PFS, so it stays held, on-deck for the core: RSA
  nodes in priority order, staged, then released (if no RSA node is free it waits for
  one, held, at most ``staging.wait_timeout``).
* ``QUEUE``: no idle compute nodes for it (a busy cluster), and enough RSA nodes left for
  it after every held job before it took theirs: released at once, it queues as any job
  and is staged when it is next to run, as in the paper.
* ``WAIT``: no idle compute nodes, and no RSA nodes left for it either: held, on-deck for
  the core like ``START``, it waits for RSA nodes in priority order (released, it would
  queue and start from the PFS while the jobs before it hold every RSA node).

A held job takes no compute node while it is held: it does not count against the idle
nodes of the jobs after it (the daemon's ``holds.startable`` judges each alone). Counting
it did release the jobs after it as "busy", and they started at once on the nodes the
held ones had left idle, from the PFS (the burst of 24 jobs of issue 32: 23 read the
PFS). RSA nodes are counted across tiers (an approximation, as the idle compute nodes
are: a job judged ``QUEUE`` wrongly may later start from the PFS, one judged ``WAIT``
wrongly waits for its stage-in, then starts).

Also :func:`rsa_need` (the RSA nodes a job needs, by the pool's sizing) and
:func:`rsa_free` (the RSA nodes free for newly held jobs).

Pure: stdlib and other core modules. :mod:`rsa_scheduler.daemon.starthold` asks it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

from rsa_scheduler.core.allocator import PolicyViolation, Pool, Request
from rsa_scheduler.core.directive_spec import DirectiveSpec
from rsa_scheduler.core.record import JobRecord


class Admission(Enum):
    """What becomes of a job held for the RSA at submission."""

    START = "start"  # compute nodes idle for it: held, staged, then released
    WAIT = "wait"  # nothing idle for it, no RSA node left: held, waits for RSA nodes
    QUEUE = "queue"  # nothing idle for it, RSA nodes left: released, queued as usual

    @property
    def held(self) -> bool:
        """Whether the job stays held, on-deck for the core (it takes RSA nodes in
        priority order)."""
        return self is not Admission.QUEUE


@dataclass(frozen=True, slots=True)
class Candidate:
    """One newly held job: idle compute nodes would take it now (``fits``), and the RSA
    nodes it needs (0: the RSA cannot serve it at all)."""

    job_id: str
    fits: bool
    need: int


def admit(held: Iterable[Candidate], free: int) -> dict[str, Admission]:
    """The admission of each of ``held`` (highest priority first), ``free`` RSA nodes
    being free for them (the pool's free nodes less those the on-deck jobs already waiting
    for RSA nodes need; 0 during a drain). A job that stays held takes its RSA nodes from
    what is left, in order; a job let go to queue takes none (it is staged when next to
    run, from what is free then)."""
    left = free
    out: dict[str, Admission] = {}
    for c in held:
        if c.fits:
            verdict = Admission.START
        elif c.need <= max(left, 0):  # (need 0: never served; declined, released)
            out[c.job_id] = Admission.QUEUE
            continue
        else:
            verdict = Admission.WAIT
        out[c.job_id] = verdict
        left -= c.need
    return out


def rsa_need(pool: Pool, job_id: str, compute_nodes: int, spec: DirectiveSpec | None) -> int:
    """The RSA nodes a job of ``compute_nodes`` with ``spec`` needs from ``pool`` (as its
    allocation will size it; a mixed tier's lower bound); 0 when the RSA can never serve
    it (it is declined and released at once) or has no spec to read."""
    if spec is None:
        return 0
    try:
        return pool.check(Request(job_id=job_id, compute_nodes=max(compute_nodes, 1),
                                  nodes=spec.nodes, tier=spec.tier, capacity=spec.capacity))
    except PolicyViolation:
        return 0


def rsa_free(pool: Pool, waiting: Iterable[JobRecord], draining: bool) -> int:
    """The RSA nodes free for jobs held from now on: the pool's free nodes (up, held by no
    job) less what the on-deck jobs ``waiting`` for RSA nodes need (they are before
    them); none during a drain (``rsa admin drain``: no job gets new RSA nodes)."""
    if draining:
        return 0
    wanted = sum(rsa_need(pool, r.job_id, r.compute_nodes, r.spec) for r in waiting)
    return len(pool.free()) - wanted
