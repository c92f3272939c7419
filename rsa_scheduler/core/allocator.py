"""RSA node allocation: how many nodes a job gets, which ones, and who holds what.

Owns the pool of RSA nodes (tiers ``ram``/``ssd`` with a per-node capacity, seed 000
§III), the sizing rule applied per tier (:mod:`.sizing`: seed 004 §2 and §3.1, nodes in
proportion to the job's compute nodes, plus the footnote-1 extension of a per-job
request) and the bookkeeping of which job holds which node. Allocation is
all-or-nothing: when a job cannot get every node it needs now, :meth:`Pool.allocate`
returns ``None`` and changes nothing, and the caller skips the job this cycle as the
paper does.

Tier ``auto`` (a job's ``#RSA_TIER=auto`` or the site's ``default_tier``): the cheapest
tier whose allocation meets the job's size and bandwidth need, falling back to the next
when its nodes are busy, and to a mix of tiers when no tier alone has the nodes free
(``allocation.mix``; :mod:`rsa_scheduler.core.tiering`, seed 000 §III.B).

Selection rule (a pure function of pool state and request): within the requested tier,
free UP nodes are taken in *rank* order, where rank sorts by capacity, largest first,
then by ClusterShell's natural hostlist order. In a homogeneous tier (the usual case)
that is simply the lowest-indexed free nodes, which keeps allocations compact hostlist
ranges and the free space unfragmented; in a mixed tier it lets a ``capacity`` request
be covered by the fewest nodes.

Real free space (:meth:`Pool.observe_free`): the daemon's health probe measures each
node's pool filesystem (statvfs) and hands the figure in, tagged with the node's
:meth:`Pool.epoch` when the probe began; a figure taken while a job held the node, or
since then, is dropped. A free node's *usable* bytes are then its configured capacity or
its real free space, whichever is less: a ``capacity`` request is covered with usable
bytes, and a node whose pool something outside the RSA filled (usable below capacity) is
*short*: taken only after the full ones, and :meth:`Pool.explain` says so; one with less
than :data:`SHORT_FLOOR` of its capacity usable is skipped.

Pure core: must not import I/O, clock, logging, ``os``/``pathlib`` or any other
rsa_scheduler layer (import-linter contract). ClusterShell is used only for ``NodeSet``
and always without group resolution, so no configuration file is ever read.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet, NodeSetException

from rsa_scheduler.core import tiering
from rsa_scheduler.core.policy import AllocationPolicy, NodeState, Tier
from rsa_scheduler.core.sizing import (
    PolicyViolation,
    Request,
    _base_count,
    _check_capacity,
    _nodes,
    nodes_wanted,
)
from rsa_scheduler.core.units import format_size
from rsa_scheduler.errors import RsaError

__all__ = ["SNAPSHOT_VERSION", "PolicyViolation", "Pool", "Request", "RsaNode", "UnknownNode",
           "nodes_wanted"]

SNAPSHOT_VERSION = 1
#: a node with less than this share of its capacity really free is not handed out at all
SHORT_FLOOR = 0.5


class UnknownNode(RsaError, KeyError):
    """A node name that is not part of the pool."""

    def __init__(self, node: str) -> None:
        super().__init__(node)
        self.node = node

    def __str__(self) -> str:  # KeyError would print the repr of its argument
        return f"unknown RSA node {self.node!r}: it is not in the configured pool"


@dataclass(frozen=True, slots=True)
class RsaNode:
    """One RSA node: its hostname, storage tier and usable capacity in bytes."""

    name: str
    tier: Tier
    capacity: int


def _nodeset(text: str = "") -> NodeSet:
    """Parse a hostlist without group resolution (which could read config files)."""
    return NodeSet(text, resolver=RESOLVER_NOGROUP)


class Pool:
    """The RSA node pool: states, owners and per-tier free lists kept in rank order.

    ``allocate``/``release`` cost O(k log n) comparisons plus one ``NodeSet`` build for
    the result; no method scans the whole pool except ``free``, ``nodes``, ``short`` and
    ``snapshot``, and ``allocate`` once real free-space figures reorder the free nodes.
    """

    def __init__(self, nodes: Iterable[RsaNode], policy: AllocationPolicy) -> None:
        given = list(nodes)
        by_name: dict[str, RsaNode] = {}
        single: dict[str, NodeSet] = {}
        everything = _nodeset()
        for node in given:
            single[node.name] = self._parse_node(node)
            if node.name in by_name:
                raise ValueError(f"RSA node {node.name} is listed twice")
            by_name[node.name] = node
            everything.update(single[node.name])
        natural = list(everything)
        self._policy = policy
        self._natural: list[RsaNode] = [by_name[name] for name in natural]
        position = {name: i for i, name in enumerate(natural)}
        # rank order: largest capacity first, then natural hostlist order
        self._ranked: list[RsaNode] = sorted(
            self._natural, key=lambda n: (-n.capacity, position[n.name])
        )
        self._rank: dict[str, int] = {n.name: r for r, n in enumerate(self._ranked)}
        # one parsed NodeSet per node: merging them (NodeSet.update) is ~8x faster than
        # parsing a hostlist string, and results are built once per call
        self._single: list[NodeSet] = [single[n.name] for n in self._ranked]
        self._state: list[NodeState] = [NodeState.UP] * len(self._ranked)
        self._owner: list[str | None] = [None] * len(self._ranked)
        self._free: dict[Tier, list[int]] = {}
        # static per-tier prefix sums of capacity in rank order, to size capacity requests
        self._prefix: dict[Tier, list[int]] = {}
        for r, node in enumerate(self._ranked):
            self._free.setdefault(node.tier, []).append(r)
            sums = self._prefix.setdefault(node.tier, [])
            sums.append((sums[-1] if sums else 0) + node.capacity)
        # the per-node capacity of each tier whose nodes are all alike (None if mixed)
        self._uniform: dict[Tier, int | None] = {}
        for node in self._ranked:
            seen = self._uniform.setdefault(node.tier, node.capacity)
            if seen != node.capacity:
                self._uniform[node.tier] = None
        self._held: dict[str, tuple[list[int], NodeSet]] = {}
        self._why: dict[str, str] = {}  # job -> why tier auto chose its nodes
        # per rank: bumped when the node changes hands; the real free bytes of its pool
        # last observed while no job held it (None: not observed, capacity trusted)
        self._epoch: list[int] = [0] * len(self._ranked)
        self._seen_free: list[int | None] = [None] * len(self._ranked)
        self._n_seen = 0  # how many nodes have a figure (none: the plain rank order)

    @staticmethod
    def _parse_node(node: RsaNode) -> NodeSet:
        """Validate ``node``; return its name as a one-node NodeSet."""
        name = node.name
        parsed = None
        # "@" would name a ClusterShell group wherever a default-resolver NodeSet is used
        if name and "@" not in name and not any(c.isspace() for c in name):
            try:
                parsed = _nodeset(name)
            except NodeSetException:
                parsed = None
        if parsed is None or list(parsed) != [name]:
            raise ValueError(f"invalid RSA node name {name!r}: use a plain hostname")
        if not isinstance(node.tier, Tier):
            raise ValueError(f"RSA node {name}: unknown tier {node.tier!r}")
        if node.capacity < 1:
            raise ValueError(f"RSA node {name}: capacity must be a positive number of bytes")
        return parsed

    def _build(self, ranks: Iterable[int]) -> NodeSet:
        result = _nodeset()
        single = self._single
        for r in ranks:
            result.update(single[r])
        return result

    @property
    def policy(self) -> AllocationPolicy:
        return self._policy

    # -- sizing -------------------------------------------------------------------------

    def _tier_of(self, req: Request) -> Tier:
        """The tier ``req`` asks for (``auto`` included), validated against the pool."""
        if req.tier is None:
            tier = self._policy.default_tier
            if tier is not Tier.AUTO and tier not in self._prefix:
                raise PolicyViolation(
                    f"this site has no RSA nodes in the default tier {tier}; "
                    f"choose one of {self._tiers_text()} with #RSA_TIER"
                )
            return tier
        try:
            tier = Tier(req.tier)
        except ValueError:
            raise PolicyViolation(
                f"RSA_TIER={req.tier} is not a tier: use one of {self._tiers_text()}"
            ) from None
        if tier is not Tier.AUTO and tier not in self._prefix:
            raise PolicyViolation(
                f"RSA_TIER={tier} is not available at this site: use one of {self._tiers_text()}"
            )
        return tier

    def _tiers_text(self) -> str:
        tiers = [str(t) for t in Tier if t in self._prefix]
        if tiers:
            tiers.append(str(Tier.AUTO))
        return ", ".join(tiers) if tiers else "(none: the RSA pool is empty)"

    def _size(self, req: Request, tier: Tier) -> int:
        """Validate ``req`` in ``tier``; return the fewest nodes that could satisfy it."""
        policy = self._policy
        sums = self._prefix[tier]
        size = len(sums)
        count = _base_count(policy, req)
        if req.nodes is None:
            # the proportional share never asks for more than the tier has: a site whose
            # tier is smaller than max_nodes gives big jobs the whole tier
            count = min(count, size)
        elif count > size:
            raise PolicyViolation(
                f"RSA_NODES={count} exceeds the {_nodes(size)} of tier {tier} at this site"
            )
        if req.capacity is not None:
            capacity = _check_capacity(req)
            if capacity > sums[-1]:
                raise PolicyViolation(
                    f"RSA_CAPACITY={format_size(capacity)} exceeds the whole {tier} tier "
                    f"({format_size(sums[-1])} on {_nodes(size)})"
                )
            need = bisect.bisect_left(sums, capacity) + 1
            if need > policy.max_request:
                uniform = self._uniform[tier]
                needs = (
                    f"{_nodes(need)} of {format_size(uniform)}"
                    if uniform
                    else f"at least {_nodes(need)}"
                )
                raise PolicyViolation(
                    f"RSA_CAPACITY={format_size(capacity)} needs {needs} in tier {tier}; "
                    f"the site limit is {_nodes(policy.max_request)} per job"
                )
            count = max(count, need)
        return count

    def _options(self, req: Request) -> tuple[list[tiering.Option], float, list[str]]:
        """Tier auto: every tier's option for ``req``, ranked; the bandwidth it needs; and
        why the other tiers cannot serve it. Raises :class:`PolicyViolation` if none can."""
        policy = self._policy
        bps = tiering.need(policy, req.capacity)
        options: list[tiering.Option] = []
        refused: list[str] = []
        for tier in Tier:
            if tier not in self._prefix:
                continue
            try:
                sized = self._size(req, tier)
            except PolicyViolation as e:
                refused.append(f"{tier}: {e}")
                continue
            limit = min(policy.max_request, len(self._prefix[tier]))
            count = tiering.nodes_for(policy, tier, sized, bps, limit, req.nodes is not None)
            options.append(tiering.option(policy, tier, count, bps))
        if not options:
            problem = "RSA_TIER=auto: no tier can serve this job (" + "; ".join(refused) + ")"
            if not (policy.mix and len(self._prefix) > 1):
                raise PolicyViolation(problem)
            self._pooled_size(req, problem)  # a mix of every tier could: raises if not
        return tiering.rank(options), bps, refused

    def _pooled_size(self, req: Request, problem: str) -> int:
        """Tier auto with ``policy.mix``, for a job no single tier can hold: the fewest
        nodes of all tiers together that could serve it. Raises :class:`PolicyViolation`
        (``problem``, and why not even all tiers together) if they cannot either."""
        policy = self._policy
        size = len(self._ranked)
        count = _base_count(policy, req)
        if req.nodes is None:
            count = min(count, size)
        elif count > size:
            raise PolicyViolation(f"{problem}; RSA_NODES={count} exceeds all {_nodes(size)} "
                                  "of every tier together")
        if req.capacity is not None:
            capacity = _check_capacity(req)
            total = 0
            need = 0
            for node in self._ranked:  # largest first
                if total >= capacity:
                    break
                total += node.capacity
                need += 1
            if total < capacity or need > policy.max_request:
                raise PolicyViolation(f"{problem}; not even a mix of every tier holds "
                                      f"RSA_CAPACITY={format_size(capacity)} within the "
                                      f"site limit of {_nodes(policy.max_request)} per job")
            count = max(count, need)
        return count

    def _mix_count(self, req: Request, ranked: list[tiering.Option]) -> int:
        """How many nodes a mix for ``req`` takes: as many as the largest single-tier
        option (enough size and bandwidth in any of them), or, when no tier alone can hold
        the job, the fewest of all tiers together."""
        if ranked:
            return max(o.nodes for o in ranked)
        return self._pooled_size(req, "RSA_TIER=auto")

    def check(self, req: Request) -> int:
        """Validate ``req`` against policy and pool; return how many nodes it needs.

        Exact for homogeneous tiers; in a mixed tier this is the lower bound reached when
        the largest nodes are free. Tier ``auto``: the count of its first choice. Raises
        :class:`PolicyViolation`.
        """
        tier = self._tier_of(req)
        if tier is Tier.AUTO:
            ranked = self._options(req)[0]
            return ranked[0].nodes if ranked else self._mix_count(req, ranked)
        return self._size(req, tier)

    def refusal(self, job_id: str) -> str:
        """Why the last allocation for ``job_id`` found no nodes, if more than "none
        free": never, for the pool itself (``core.share`` says why it refused)."""
        return ""

    def limit_now(self, req: Request) -> str:
        """A limit ``req`` is over now: never, for the pool itself (``core.share`` keeps
        the limits)."""
        return ""

    def explain(self, job_id: str) -> str:
        """Why tier auto chose the nodes ``job_id`` holds ("" when it asked for a tier)."""
        return self._why.get(job_id, "")

    # -- allocation -------------------------------------------------------------------------

    def _usable(self, r: int) -> int:
        """Bytes node ``r`` can hold now: its capacity, or less when its pool's real
        free space (last observed while free) is less."""
        seen = self._seen_free[r]
        cap = self._ranked[r].capacity
        return cap if seen is None else max(0, min(cap, seen))

    def _order(self, free: list[int]) -> list[int]:
        """``free`` in the order nodes are taken: full ones in rank order, then the
        short ones, most usable first; those below :data:`SHORT_FLOOR` left out."""
        if not self._n_seen:
            return free
        full, short = [], []
        for r in free:
            usable, cap = self._usable(r), self._ranked[r].capacity
            if usable >= cap:
                full.append(r)
            elif usable >= cap * SHORT_FLOOR:
                short.append(r)
        short.sort(key=lambda r: -self._usable(r))
        return full + short

    def _take(self, req: Request, tier: Tier, count: int) -> list[int] | None:
        """The free ranks of ``tier`` that would serve ``req`` with at least ``count``
        nodes, or None when too few are free now. Changes nothing."""
        free = self._order(self._free.get(tier, []))
        if req.capacity is not None:
            # fewest free nodes (largest first) whose usable bytes cover the request
            limit = min(len(free), self._policy.max_request)
            total = 0
            need = 0
            while need < limit and total < req.capacity:
                total += self._usable(free[need])
                need += 1
            if total < req.capacity:
                return None
            count = max(count, need)
        if count > len(free):
            return None
        return free[:count]

    def _take_mix(self, req: Request, ranked: list[tiering.Option], bps: float,
                  refused: list[str]) -> tuple[list[int] | None, str]:
        """Tier auto when no tier alone has the nodes free now (``policy.mix``): the free
        ranks of several tiers, cheapest tier first (then the faster), as many as
        :meth:`_mix_count` says and covering ``req.capacity``; and why. ``(None, "")`` when even
        that is not free now. Changes nothing."""
        policy = self._policy
        if not policy.mix or len(self._prefix) < 2:
            return None, ""
        count = self._mix_count(req, ranked)
        order = {t: i for i, t in enumerate(Tier)}
        tiers = sorted(self._prefix, key=lambda t: (
            policy.price_of(t), -policy.bandwidth_of(t), order[t]))
        taken: list[int] = []
        total = 0
        for t in tiers:
            for r in self._order(self._free.get(t, [])):
                if len(taken) >= count and (req.capacity is None or total >= req.capacity):
                    break
                if len(taken) >= policy.max_request:
                    break
                taken.append(r)
                total += self._usable(r)
        if len(taken) < count or (req.capacity is not None and total < req.capacity):
            return None, ""
        used = [t for t in tiers if any(self._ranked[r].tier is t for r in taken)]
        if len(used) < 2:  # one tier had them all: its own option would have been taken
            return None, ""
        mix = tiering.mixed({t: sum(self._ranked[r].tier is t for r in taken) for t in used},
                            policy, bps)
        return taken, tiering.explain_mix(mix, ranked, bps, refused)

    def allocate(self, req: Request) -> NodeSet | None:
        """Give ``req.job_id`` all the nodes it needs, or nothing.

        Returns the allocated nodes, or ``None`` (pool unchanged) when not enough free UP
        nodes of the tier exist right now. Tier ``auto`` takes the first of
        :meth:`_options` whose nodes are free (:meth:`explain` says why). Raises
        :class:`PolicyViolation` for a request that can never be met and ``ValueError`` if
        the job already holds nodes.
        """
        tier = self._tier_of(req)
        why = ""
        if tier is Tier.AUTO:
            ranked, bps, refused = self._options(req)
        else:
            ranked, bps, refused = [], 0.0, []
            count = self._size(req, tier)
        if req.job_id in self._held:
            raise ValueError(
                f"job {req.job_id} already holds RSA nodes {self._held[req.job_id][1]}; "
                "release them first"
            )
        if tier is Tier.AUTO:
            taken = None
            busy: list[Tier] = []
            for opt in ranked:
                taken = self._take(req, opt.tier, opt.nodes)
                if taken is not None:
                    why = tiering.explain(opt, ranked, bps, busy, refused)
                    break
                busy.append(opt.tier)
            if taken is None:
                taken, why = self._take_mix(req, ranked, bps, refused)
        else:
            taken = self._take(req, tier, count)
        if taken is None:
            return None
        gone = set(taken)
        for t in {self._ranked[r].tier for r in taken}:
            free = self._free[t]
            k = sum(1 for r in taken if self._ranked[r].tier is t)
            if set(free[:k]) == {r for r in taken if self._ranked[r].tier is t}:
                del free[:k]  # the usual case: a prefix of the free list (rank order)
            else:  # short nodes were passed over: O(n) once
                self._free[t] = [r for r in free if r not in gone]
        job = req.job_id
        owner = self._owner
        for r in taken:
            owner[r] = job
            self._epoch[r] += 1
        taken.sort()
        result = self._build(taken)
        self._held[job] = (taken, result)
        short = self._short_text(taken)
        if why or short:
            self._why[job] = "; ".join(x for x in (why, short) if x)
        return result.copy()

    def _short_text(self, ranks: Iterable[int]) -> str:
        """Why the nodes ``ranks`` hold less than their capacity ("" if none does)."""
        parts = [f"{self._ranked[r].name} has {format_size(self._usable(r))} of its "
                 f"{format_size(self._ranked[r].capacity)} free"
                 for r in ranks if self._usable(r) < self._ranked[r].capacity]
        if not parts:
            return ""
        return (", ".join(parts) + " (something outside the RSA uses its pool; it was "
                "taken last)")

    # -- real free space ----------------------------------------------------------------------

    def epoch(self, node: str) -> int:
        """Changes whenever ``node`` is allocated, adopted or released: a free-space figure
        is valid only for the epoch it was measured in (:meth:`observe_free`)."""
        return self._epoch[self._rank_of(node)]

    def observe_free(self, node: str, free: int | None, epoch: int) -> bool:
        """Record the real free bytes of ``node``'s pool filesystem, measured when its
        :meth:`epoch` was ``epoch`` (None: unknown, its capacity is trusted). Ignored
        (False) when the node changed hands since, or a job holds it: its RAMDISK's use
        is not a shortage. Raises :class:`UnknownNode`."""
        r = self._rank_of(node)
        if epoch != self._epoch[r] or self._owner[r] is not None:
            return False
        was = self._seen_free[r]
        self._seen_free[r] = None if free is None else max(0, int(free))
        self._n_seen += (self._seen_free[r] is not None) - (was is not None)
        return True

    def usable(self, node: str) -> int:
        """Bytes ``node`` would give a job now (:meth:`observe_free`)."""
        return self._usable(self._rank_of(node))

    def short(self) -> dict[str, str]:
        """Free UP nodes that hold less than their capacity, and why (for status views
        and logs); those below :data:`SHORT_FLOOR` are not handed out."""
        out: dict[str, str] = {}
        for ranks in self._free.values():
            for r in ranks:
                usable, cap = self._usable(r), self._ranked[r].capacity
                if usable < cap:
                    out[self._ranked[r].name] = (
                        f"{format_size(usable)} of its {format_size(cap)} pool free: "
                        "something outside the RSA uses it" +
                        ("; not handed out" if usable < cap * SHORT_FLOOR else ""))
        return out

    def release(self, job_id: str) -> NodeSet:
        """Return every node ``job_id`` holds to the pool; an empty NodeSet if none.

        Nodes that were drained or marked down meanwhile go back unowned but not free.
        """
        held = self._held.pop(job_id, None)
        self._why.pop(job_id, None)
        if held is None:
            return _nodeset()
        ranks, nodes = held
        for r in ranks:
            self._owner[r] = None
            self._epoch[r] += 1
            if self._state[r] is NodeState.UP:
                bisect.insort(self._free[self._ranked[r].tier], r)
        return nodes

    def adopt(self, job_id: str, nodes: NodeSet | str) -> None:
        """Re-attach ``nodes`` to ``job_id`` (replay after a restart); all or nothing.

        Nodes the job already holds are accepted again. Raises :class:`UnknownNode` for a
        name outside the pool and ``ValueError`` for a node another job holds.
        """
        names = list(_nodeset(nodes) if isinstance(nodes, str) else nodes)
        ranks = [self._rank_of(name) for name in names]
        for name, r in zip(names, ranks, strict=True):
            holder = self._owner[r]
            if holder is not None and holder != job_id:
                raise ValueError(
                    f"can't adopt RSA node {name} for job {job_id}: job {holder} holds it"
                )
        if not ranks:
            return
        mine = set(self._held[job_id][0]) if job_id in self._held else set()
        for r in ranks:
            if r in mine:
                continue
            mine.add(r)
            self._owner[r] = job_id
            self._epoch[r] += 1
            if self._state[r] is NodeState.UP:
                free = self._free[self._ranked[r].tier]
                del free[bisect.bisect_left(free, r)]
        taken = sorted(mine)
        self._held[job_id] = (taken, self._build(taken))

    # -- node states ------------------------------------------------------------------------

    def _rank_of(self, node: str) -> int:
        try:
            return self._rank[node]
        except KeyError:
            raise UnknownNode(node) from None

    def set_state(self, node: str, state: NodeState) -> None:
        """Mark ``node`` up, drained or down.

        A held node stays with its job until released, but a node that is not UP is never
        chosen again. Raises :class:`UnknownNode`.
        """
        r = self._rank_of(node)
        new = NodeState(state)
        old = self._state[r]
        if new is old:
            return
        self._state[r] = new
        if self._owner[r] is not None:
            return
        free = self._free[self._ranked[r].tier]
        if old is NodeState.UP:
            del free[bisect.bisect_left(free, r)]
        elif new is NodeState.UP:
            bisect.insort(free, r)

    def state(self, node: str) -> NodeState:
        return self._state[self._rank_of(node)]

    # -- queries ------------------------------------------------------------------------------

    def holding(self, job_id: str) -> NodeSet:
        held = self._held.get(job_id)
        return held[1].copy() if held else _nodeset()

    def owner(self, node: str) -> str | None:
        return self._owner[self._rank_of(node)]

    def jobs(self) -> list[str]:
        """Ids of the jobs that hold nodes, sorted."""
        return sorted(self._held)

    def free(self, tier: Tier | None = None) -> NodeSet:
        """UP, unallocated nodes (of ``tier``, or of every tier)."""
        tiers = [tier] if tier is not None else list(self._free)
        return self._build(r for t in tiers for r in self._free.get(t, ()))

    def nodes(self) -> list[RsaNode]:
        """Every node of the pool, in natural hostlist order."""
        return list(self._natural)

    # -- persistence --------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """JSON-serialisable pool: policy and, per node, tier, capacity, state and owner."""
        p = self._policy
        return {
            "version": SNAPSHOT_VERSION,
            "policy": {
                "ratio": p.ratio,
                "min_nodes": p.min_nodes,
                "max_nodes": p.max_nodes,
                "max_request": p.max_request,
                "default_tier": str(p.default_tier),
                "price": {str(t): v for t, v in p.price.items()},
                "bandwidth": {str(t): v for t, v in p.bandwidth.items()},
                "io_time": p.io_time,
            },
            "nodes": [
                {
                    "name": n.name,
                    "tier": str(n.tier),
                    "capacity": n.capacity,
                    "state": str(self._state[self._rank[n.name]]),
                    "owner": self._owner[self._rank[n.name]],
                }
                for n in self._natural
            ],
        }

    @classmethod
    def from_snapshot(cls, data: Mapping[str, Any], policy: AllocationPolicy | None = None) -> Pool:
        """Rebuild a pool from :meth:`snapshot` output.

        ``policy`` (e.g. freshly loaded configuration) overrides the recorded one.
        Raises ``ValueError`` for a malformed snapshot.
        """
        try:
            if data["version"] != SNAPSHOT_VERSION:
                raise ValueError(f"unsupported pool snapshot version {data['version']!r}")
            if policy is None:
                p = data["policy"]
                policy = AllocationPolicy(
                    ratio=int(p["ratio"]),
                    min_nodes=int(p["min_nodes"]),
                    max_nodes=int(p["max_nodes"]),
                    max_request=int(p["max_request"]),
                    default_tier=Tier(p["default_tier"]),
                    price={Tier(t): float(v) for t, v in p.get("price", {}).items()},
                    bandwidth={Tier(t): int(v) for t, v in p.get("bandwidth", {}).items()},
                    io_time=float(p.get("io_time", 300.0)),
                )
            entries = list(data["nodes"])
            pool = cls(
                (RsaNode(str(e["name"]), Tier(e["tier"]), int(e["capacity"])) for e in entries),
                policy,
            )
            owners: dict[str, list[str]] = {}
            for e in entries:
                pool.set_state(e["name"], NodeState(e["state"]))
                if e["owner"] is not None:
                    owners.setdefault(str(e["owner"]), []).append(e["name"])
        except (KeyError, TypeError) as e:
            raise ValueError(f"malformed pool snapshot: missing or bad field {e}") from e
        for job, names in owners.items():
            pool.adopt(job, _nodeset(",".join(names)))
        return pool

    def __repr__(self) -> str:
        return f"Pool({len(self._ranked)} nodes, {len(self._held)} jobs holding)"
