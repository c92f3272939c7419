"""How many RSA nodes a request needs: the request, the sizing rule, the policy error.

Owns :class:`Request` (what one job asks of the RSA), :class:`PolicyViolation` (a request
that can never be met here: one actionable line) and the sizing rule of seed 004 §2 and
§3.1 (nodes in proportion to the job's compute nodes, or its own ``#RSA_NODES``, raised
for its ``#RSA_CAPACITY``): :func:`nodes_wanted`. The pool (:mod:`.allocator`) applies it
per tier.

Pure core: stdlib and :mod:`rsa_scheduler.core` only (import-linter contract).
"""

from __future__ import annotations

from dataclasses import dataclass

from rsa_scheduler.core.policy import AllocationPolicy, Tier
from rsa_scheduler.core.units import format_size
from rsa_scheduler.errors import RsaError


class PolicyViolation(RsaError, ValueError):
    """A request that can never be satisfied under the site policy and this pool.

    ``str(err)`` is one actionable line for the user.
    """



@dataclass(frozen=True, slots=True)
class Request:
    """What one job needs from the RSA.

    ``compute_nodes`` comes from Slurm; ``nodes``, ``tier`` and ``capacity`` (total bytes)
    come from the job's ``#RSA_NODES``, ``#RSA_TIER`` and ``#RSA_CAPACITY`` directives.
    """

    job_id: str
    compute_nodes: int
    nodes: int | None = None
    tier: Tier | None = None
    capacity: int | None = None

    def __post_init__(self) -> None:
        if self.compute_nodes < 0:
            raise ValueError(f"job {self.job_id}: compute_nodes must be >= 0")


def _nodes(n: int) -> str:
    return f"{n} RSA node{'' if n == 1 else 's'}"


def _base_count(policy: AllocationPolicy, req: Request) -> int:
    """Node count before capacity: the explicit request, else the proportional share."""
    if req.nodes is not None:
        if req.nodes < 1:
            raise PolicyViolation(f"RSA_NODES={req.nodes} is not valid: ask for at least 1")
        if req.nodes > policy.max_request:
            raise PolicyViolation(
                f"RSA_NODES={req.nodes} exceeds the site limit of "
                f"{_nodes(policy.max_request)} per job"
            )
        return req.nodes
    # seed 004 §3.1: a fixed ratio of compute nodes per RSA node, rounded up
    wanted = -(-req.compute_nodes // policy.ratio)
    return min(max(wanted, policy.min_nodes), policy.max_nodes)


def _check_capacity(req: Request) -> int:
    assert req.capacity is not None
    if req.capacity < 1:
        raise PolicyViolation(f"RSA_CAPACITY={req.capacity} is not valid: ask for a size > 0")
    return req.capacity


def nodes_wanted(policy: AllocationPolicy, req: Request, node_capacity: int) -> int:
    """How many RSA nodes of ``node_capacity`` bytes each ``req`` needs under ``policy``.

    Proportional share ``ceil(compute_nodes / ratio)`` clamped to ``[min_nodes,
    max_nodes]``; an explicit ``req.nodes`` (1..``max_request``) replaces it. A
    ``req.capacity`` raises the count to ``ceil(capacity / node_capacity)``, which may
    exceed ``max_nodes`` but not ``max_request``. Raises :class:`PolicyViolation`.
    """
    count = _base_count(policy, req)
    if req.capacity is not None:
        if node_capacity < 1:
            raise ValueError("node_capacity must be >= 1")
        need = -(-_check_capacity(req) // node_capacity)
        if need > policy.max_request:
            raise PolicyViolation(
                f"RSA_CAPACITY={format_size(req.capacity)} needs {_nodes(need)} of "
                f"{format_size(node_capacity)}; the site limit is "
                f"{_nodes(policy.max_request)} per job"
            )
        count = max(count, need)
    return count
