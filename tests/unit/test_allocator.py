"""Unit and property tests of the RSA node allocator (rsa_scheduler.core.allocator)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

import pytest
from ClusterShell.NodeSet import NodeSet
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    precondition,
    rule,
)

from rsa_scheduler.core.allocator import (
    PolicyViolation,
    Pool,
    Request,
    RsaNode,
    UnknownNode,
    nodes_wanted,
)
from rsa_scheduler.core.policy import AllocationPolicy, NodeState, Tier
from rsa_scheduler.errors import RsaError

G = 1 << 30
POLICY = AllocationPolicy(ratio=32, min_nodes=1, max_nodes=8, max_request=16)


def make_nodes(prefix: str, count: int, tier: Tier, capacity: int, start: int = 1) -> list[RsaNode]:
    return [RsaNode(f"{prefix}{i:02d}", tier, capacity) for i in range(start, start + count)]


def make_pool(
    ram: int = 32, ssd: int = 8, policy: AllocationPolicy = POLICY, extra: Iterable[RsaNode] = ()
) -> Pool:
    """32 RAM nodes of 128G (rsa01..32) and 8 SSD nodes of 2T (ssd01..08) by default."""
    nodes = make_nodes("rsa", ram, Tier.RAM, 128 * G) + make_nodes("ssd", ssd, Tier.SSD, 2048 * G)
    return Pool([*nodes, *extra], policy)


def ns(text: str) -> NodeSet:
    return NodeSet(text)


# -- sizing: nodes_wanted ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("compute", "expected"),
    [
        (0, 1),  # clamped up to min_nodes
        (1, 1),
        (32, 1),
        (33, 2),  # rounded up
        (64, 2),
        (65, 3),
        (256, 8),
        (257, 8),  # clamped down to max_nodes
        (100_000, 8),
    ],
)
def test_proportional_rounding_and_clamping(compute: int, expected: int) -> None:
    assert nodes_wanted(POLICY, Request("1", compute), 128 * G) == expected


def test_min_nodes_clamp() -> None:
    policy = AllocationPolicy(ratio=10, min_nodes=3, max_nodes=5)
    assert nodes_wanted(policy, Request("1", 1), G) == 3
    assert nodes_wanted(policy, Request("1", 41), G) == 5
    assert nodes_wanted(policy, Request("1", 45), G) == 5


def test_ratio_one() -> None:
    policy = AllocationPolicy(ratio=1, max_nodes=4)
    assert nodes_wanted(policy, Request("1", 3), G) == 3


@pytest.mark.parametrize("nodes", [1, 9, 16])
def test_explicit_request_replaces_proportional(nodes: int) -> None:
    assert nodes_wanted(POLICY, Request("1", 1024, nodes=nodes), G) == nodes


def test_explicit_request_over_limit() -> None:
    with pytest.raises(
        PolicyViolation, match=r"^RSA_NODES=40 exceeds the site limit of 16 RSA nodes per job$"
    ):
        nodes_wanted(POLICY, Request("1", 1, nodes=40), G)


@pytest.mark.parametrize("nodes", [0, -3])
def test_explicit_request_below_one(nodes: int) -> None:
    with pytest.raises(PolicyViolation, match=rf"RSA_NODES={nodes} is not valid"):
        nodes_wanted(POLICY, Request("1", 1, nodes=nodes), G)


@pytest.mark.parametrize(
    ("capacity", "compute", "expected"),
    [
        (1, 1, 1),
        (128 * G, 1, 1),
        (128 * G + 1, 1, 2),  # rounded up
        (1024 * G, 1, 8),
        (1536 * G, 1, 12),  # beyond max_nodes, within max_request
        (2048 * G, 1, 16),
        (G, 1024, 8),  # the proportional share wins when larger
    ],
)
def test_capacity_sizing(capacity: int, compute: int, expected: int) -> None:
    assert nodes_wanted(POLICY, Request("1", compute, capacity=capacity), 128 * G) == expected


def test_capacity_with_explicit_nodes_takes_the_larger() -> None:
    assert nodes_wanted(POLICY, Request("1", 1, nodes=3, capacity=128 * G), 128 * G) == 3
    assert nodes_wanted(POLICY, Request("1", 1, nodes=3, capacity=600 * G), 128 * G) == 5


def test_capacity_over_limit() -> None:
    with pytest.raises(
        PolicyViolation,
        match=r"^RSA_CAPACITY=3T needs 24 RSA nodes of 128G; the site limit is 16 RSA nodes",
    ):
        nodes_wanted(POLICY, Request("1", 1, capacity=3 << 40), 128 * G)


def test_capacity_must_be_positive() -> None:
    with pytest.raises(PolicyViolation, match="RSA_CAPACITY=0 is not valid"):
        nodes_wanted(POLICY, Request("1", 1, capacity=0), G)


def test_request_rejects_negative_compute_nodes() -> None:
    with pytest.raises(ValueError, match="compute_nodes"):
        Request("1", -1)


def test_policy_violation_is_a_value_error_and_an_rsa_error() -> None:
    assert issubclass(PolicyViolation, ValueError)
    assert issubclass(PolicyViolation, RsaError)


# -- sizing against the pool: check ------------------------------------------------------------


def test_check_matches_nodes_wanted_on_homogeneous_tier() -> None:
    pool = make_pool()
    for req in [Request("1", 100), Request("1", 1, nodes=12), Request("1", 1, capacity=1000 * G)]:
        assert pool.check(req) == nodes_wanted(POLICY, req, 128 * G)


def test_check_uses_tier_capacity() -> None:
    pool = make_pool()
    assert pool.check(Request("1", 1, tier=Tier.SSD, capacity=5000 * G)) == 3


def test_check_default_tier_absent() -> None:
    pool = make_pool(ram=0)
    with pytest.raises(
        PolicyViolation, match=r"no RSA nodes in the default tier ram; choose one of ssd"
    ):
        pool.check(Request("1", 1))
    assert pool.check(Request("1", 1, tier=Tier.SSD)) == 1


def test_check_requested_tier_absent() -> None:
    pool = make_pool(ssd=0)
    with pytest.raises(
        PolicyViolation,
        match=r"^RSA_TIER=ssd is not available at this site: use one of ram, auto$",
    ):
        pool.check(Request("1", 1, tier=Tier.SSD))


def test_check_tier_that_is_no_tier() -> None:
    with pytest.raises(PolicyViolation, match=r"RSA_TIER=nvme is not a tier: use one of ram, ssd"):
        make_pool().check(Request("1", 1, tier="nvme"))  # type: ignore[arg-type]


def test_check_capacity_beyond_whole_tier() -> None:
    pool = make_pool(ssd=2)
    with pytest.raises(
        PolicyViolation, match=r"^RSA_CAPACITY=5T exceeds the whole ssd tier \(4T on 2 RSA nodes\)$"
    ):
        pool.check(Request("1", 1, tier=Tier.SSD, capacity=5 << 40))


def test_check_capacity_over_limit_names_node_size() -> None:
    with pytest.raises(
        PolicyViolation,
        match=r"^RSA_CAPACITY=3T needs 24 RSA nodes of 128G in tier ram; the site limit is 16",
    ):
        make_pool().check(Request("1", 1, capacity=3 << 40))


def test_check_explicit_request_beyond_tier_size() -> None:
    pool = make_pool(ssd=4)
    with pytest.raises(
        PolicyViolation, match=r"^RSA_NODES=6 exceeds the 4 RSA nodes of tier ssd at this site$"
    ):
        pool.check(Request("1", 1, nodes=6, tier=Tier.SSD))


def test_proportional_share_is_capped_at_tier_size() -> None:
    # a small site: the biggest jobs get the whole tier instead of never running
    pool = make_pool(ram=4)
    assert pool.check(Request("1", 10_000)) == 4
    assert pool.allocate(Request("1", 10_000)) == ns("rsa[01-04]")


def test_min_nodes_is_capped_at_tier_size() -> None:
    pool = make_pool(ssd=2, policy=AllocationPolicy(min_nodes=3, max_nodes=4))
    assert pool.check(Request("1", 1, tier=Tier.SSD)) == 2


# -- selection ------------------------------------------------------------------------------


def test_allocate_lowest_indexed_free_nodes() -> None:
    pool = make_pool()
    assert pool.allocate(Request("a", 100)) == ns("rsa[01-04]")
    assert pool.allocate(Request("b", 64)) == ns("rsa[05-06]")
    assert pool.release("a") == ns("rsa[01-04]")
    # the hole is refilled first: the free space stays unfragmented
    assert pool.allocate(Request("c", 96)) == ns("rsa[01-03]")
    assert pool.allocate(Request("d", 64)) == ns("rsa[04,07]")


def test_natural_order_not_lexicographic() -> None:
    nodes = [RsaNode(n, Tier.RAM, G) for n in ["rsa10", "rsa9", "rsa100", "rsa2", "rsa1"]]
    pool = Pool(nodes, AllocationPolicy(ratio=1))
    assert pool.allocate(Request("a", 3)) == ns("rsa[1-2,9]")
    assert [n.name for n in pool.nodes()] == ["rsa1", "rsa2", "rsa9", "rsa10", "rsa100"]


def test_tier_selection() -> None:
    pool = make_pool()
    assert pool.allocate(Request("a", 1, tier=Tier.SSD)) == ns("ssd01")
    assert pool.allocate(Request("b", 1)) == ns("rsa01")  # default tier
    ssd_default = AllocationPolicy(default_tier=Tier.SSD)
    assert make_pool(policy=ssd_default).allocate(Request("c", 1)) == ns("ssd01")


def test_capacity_on_mixed_tier_largest_first() -> None:
    nodes = [
        RsaNode("rsa1", Tier.RAM, 64 * G),
        RsaNode("rsa2", Tier.RAM, 256 * G),
        RsaNode("rsa3", Tier.RAM, 64 * G),
        RsaNode("rsa4", Tier.RAM, 256 * G),
        RsaNode("rsa5", Tier.RAM, 128 * G),
    ]
    pool = Pool(nodes, AllocationPolicy(ratio=1000))
    assert pool.check(Request("a", 1, capacity=400 * G)) == 2
    assert pool.allocate(Request("a", 1, capacity=400 * G)) == ns("rsa[2,4]")
    # the big nodes are taken: covering 192G now needs rsa5 + rsa1 (ties by name)
    assert pool.check(Request("b", 1, capacity=192 * G)) == 1
    assert pool.allocate(Request("b", 1, capacity=192 * G)) == ns("rsa[1,5]")
    # what is left (rsa3, 64G) cannot cover 100G now: skip, not a violation
    assert pool.allocate(Request("c", 1, capacity=100 * G)) is None


def test_mixed_tier_capacity_limit_message() -> None:
    nodes = [RsaNode("big", Tier.RAM, 10 * G), *make_nodes("small", 20, Tier.RAM, G)]
    pool = Pool(nodes, AllocationPolicy(max_request=4))
    with pytest.raises(
        PolicyViolation, match=r"RSA_CAPACITY=20G needs at least 11 RSA nodes in tier ram"
    ):
        pool.check(Request("1", 1, capacity=20 * G))


def test_mixed_tier_capacity_beyond_max_request_now_is_a_skip() -> None:
    nodes = [RsaNode("big", Tier.RAM, 10 * G), *make_nodes("small", 20, Tier.RAM, G)]
    pool = Pool(nodes, AllocationPolicy(ratio=1000, max_request=4))
    assert pool.allocate(Request("a", 1, nodes=1)) == ns("big")
    # needs 12 small nodes while big is busy, but only 4 are allowed: wait, don't fail
    assert pool.allocate(Request("b", 1, capacity=12 * G)) is None
    pool.release("a")
    assert pool.allocate(Request("b", 1, capacity=12 * G)) == ns("big,small[01-02]")


def test_mixed_tier_proportional_prefers_largest() -> None:
    nodes = [RsaNode("a1", Tier.RAM, G), RsaNode("a2", Tier.RAM, 2 * G)]
    pool = Pool(nodes, POLICY)
    assert pool.allocate(Request("x", 1)) == ns("a2")


# -- all-or-nothing, states, release ------------------------------------------------------------


def test_not_enough_free_nodes_returns_none_and_changes_nothing() -> None:
    pool = make_pool(ram=8)
    assert pool.allocate(Request("a", 5 * 32)) == ns("rsa[01-05]")
    before = pool.snapshot()
    assert pool.allocate(Request("b", 4 * 32)) is None
    assert pool.snapshot() == before
    assert pool.holding("b") == NodeSet()
    assert pool.allocate(Request("b", 3 * 32)) == ns("rsa[06-08]")


def test_not_enough_capacity_now_returns_none() -> None:
    pool = make_pool(ssd=4)
    pool.allocate(Request("a", 1, nodes=2, tier=Tier.SSD))
    before = pool.snapshot()
    assert pool.allocate(Request("b", 1, tier=Tier.SSD, capacity=5000 * G)) is None
    assert pool.snapshot() == before


def test_violation_is_raised_by_allocate_and_changes_nothing() -> None:
    pool = make_pool()
    before = pool.snapshot()
    with pytest.raises(PolicyViolation):
        pool.allocate(Request("a", 1, nodes=17))
    assert pool.snapshot() == before


def test_allocate_twice_for_one_job_is_an_error() -> None:
    pool = make_pool()
    pool.allocate(Request("a", 1))
    with pytest.raises(ValueError, match=r"job a already holds RSA nodes rsa01"):
        pool.allocate(Request("a", 1))
    assert pool.holding("a") == ns("rsa01")


@pytest.mark.parametrize("state", [NodeState.DRAINED, NodeState.DOWN])
def test_drained_and_down_nodes_never_chosen(state: NodeState) -> None:
    pool = make_pool(ram=6)
    pool.set_state("rsa02", state)
    pool.set_state("rsa04", state)
    assert pool.state("rsa02") is state
    assert pool.free(Tier.RAM) == ns("rsa[01,03,05-06]")
    assert pool.allocate(Request("a", 1, nodes=4)) == ns("rsa[01,03,05-06]")
    assert pool.allocate(Request("b", 1)) is None
    pool.set_state("rsa04", NodeState.UP)
    assert pool.allocate(Request("b", 1)) == ns("rsa04")


def test_drained_node_stays_with_its_job_until_released() -> None:
    pool = make_pool(ram=4)
    assert pool.allocate(Request("a", 1, nodes=2)) == ns("rsa[01-02]")
    pool.set_state("rsa01", NodeState.DRAINED)
    assert pool.owner("rsa01") == "a"
    assert pool.holding("a") == ns("rsa[01-02]")
    assert pool.release("a") == ns("rsa[01-02]")
    assert pool.owner("rsa01") is None
    assert pool.free(Tier.RAM) == ns("rsa[02-04]")
    assert pool.allocate(Request("b", 1, nodes=3)) == ns("rsa[02-04]")
    pool.set_state("rsa01", NodeState.UP)
    assert pool.free() == ns("rsa01,ssd[01-08]")


def test_resuming_a_held_node_does_not_free_it() -> None:
    pool = make_pool(ram=2)
    pool.allocate(Request("a", 1))
    pool.set_state("rsa01", NodeState.DOWN)
    pool.set_state("rsa01", NodeState.UP)
    assert pool.free(Tier.RAM) == ns("rsa02")
    assert pool.owner("rsa01") == "a"


def test_set_state_is_idempotent() -> None:
    pool = make_pool(ram=2)
    pool.set_state("rsa01", NodeState.DRAINED)
    pool.set_state("rsa01", NodeState.DRAINED)
    pool.set_state("rsa01", NodeState.DOWN)
    pool.set_state("rsa01", NodeState.UP)
    pool.set_state("rsa01", NodeState.UP)
    assert pool.free(Tier.RAM) == ns("rsa[01-02]")


def test_release_returns_exactly_what_was_taken() -> None:
    pool = make_pool()
    got = pool.allocate(Request("a", 200))
    assert got is not None
    got.add("intruder1")  # the caller's copy is its own
    assert pool.holding("a") == ns("rsa[01-07]")
    assert pool.release("a") == ns("rsa[01-07]")
    assert pool.release("a") == NodeSet()
    assert pool.holding("a") == NodeSet()
    assert pool.jobs() == []


def test_release_of_unknown_job_is_empty() -> None:
    assert make_pool().release("nope") == NodeSet()


@pytest.mark.parametrize("method", ["set_state", "state", "owner"])
def test_unknown_node_is_a_clear_key_error(method: str) -> None:
    pool = make_pool()
    args = ("rsa99", NodeState.UP) if method == "set_state" else ("rsa99",)
    with pytest.raises(KeyError) as err:
        getattr(pool, method)(*args)
    assert isinstance(err.value, UnknownNode)
    assert str(err.value) == "unknown RSA node 'rsa99': it is not in the configured pool"


# -- pool construction ------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["", "rsa[1-2]", "rsa[1", "a[]", "a,b", "a b", "x!y", "@io"])
def test_bad_node_names_rejected(name: str) -> None:
    with pytest.raises(ValueError, match="invalid RSA node name"):
        Pool([RsaNode(name, Tier.RAM, G)], POLICY)


def test_duplicate_node_rejected() -> None:
    with pytest.raises(ValueError, match="rsa1 is listed twice"):
        Pool([RsaNode("rsa1", Tier.RAM, G), RsaNode("rsa1", Tier.SSD, G)], POLICY)


def test_zero_capacity_rejected() -> None:
    with pytest.raises(ValueError, match="capacity must be a positive"):
        Pool([RsaNode("rsa1", Tier.RAM, 0)], POLICY)


def test_empty_pool() -> None:
    pool = Pool([], POLICY)
    assert pool.free() == NodeSet()
    with pytest.raises(PolicyViolation, match="the RSA pool is empty"):
        pool.allocate(Request("a", 1))


def test_nodes_lists_every_node() -> None:
    pool = make_pool(ram=2, ssd=1)
    assert pool.nodes() == [
        RsaNode("rsa01", Tier.RAM, 128 * G),
        RsaNode("rsa02", Tier.RAM, 128 * G),
        RsaNode("ssd01", Tier.SSD, 2048 * G),
    ]


# -- adopt and snapshot -----------------------------------------------------------------------


def test_adopt_reattaches_and_release_returns_it() -> None:
    pool = make_pool(ram=8)
    pool.adopt("a", ns("rsa[03-04]"))
    assert pool.owner("rsa03") == "a"
    assert pool.free(Tier.RAM) == ns("rsa[01-02,05-08]")
    assert pool.allocate(Request("b", 1, nodes=3)) == ns("rsa[01-02,05]")
    assert pool.release("a") == ns("rsa[03-04]")


def test_adopt_is_idempotent_and_merges() -> None:
    pool = make_pool(ram=8)
    pool.adopt("a", ns("rsa[03-04]"))
    pool.adopt("a", "rsa[04-05]")
    assert pool.holding("a") == ns("rsa[03-05]")
    assert pool.free(Tier.RAM) == ns("rsa[01-02,06-08]")


def test_adopt_drained_node() -> None:
    pool = make_pool(ram=4)
    pool.set_state("rsa02", NodeState.DRAINED)
    pool.adopt("a", ns("rsa02"))
    assert pool.release("a") == ns("rsa02")
    assert pool.free(Tier.RAM) == ns("rsa[01,03-04]")


def test_adopt_conflict_changes_nothing() -> None:
    pool = make_pool(ram=8)
    pool.allocate(Request("a", 1, nodes=2))
    before = pool.snapshot()
    with pytest.raises(ValueError, match=r"can't adopt RSA node rsa02 for job b: job a holds it"):
        pool.adopt("b", ns("rsa[02-03]"))
    with pytest.raises(UnknownNode, match="rsa99"):
        pool.adopt("b", ns("rsa[03,99]"))
    assert pool.snapshot() == before


def test_allocate_after_adopt_is_an_error() -> None:
    pool = make_pool()
    pool.adopt("a", ns("rsa05"))
    with pytest.raises(ValueError, match="already holds"):
        pool.allocate(Request("a", 1))


def test_snapshot_round_trip_through_json() -> None:
    pool = make_pool(ram=8, ssd=3)
    pool.allocate(Request("a", 1, nodes=3))
    pool.allocate(Request("b", 1, tier=Tier.SSD))
    pool.set_state("rsa02", NodeState.DRAINED)
    pool.set_state("rsa07", NodeState.DOWN)
    data = json.loads(json.dumps(pool.snapshot()))
    clone = Pool.from_snapshot(data)
    assert clone.snapshot() == pool.snapshot()
    assert clone.policy == pool.policy
    assert clone.holding("a") == ns("rsa[01-03]")
    assert clone.state("rsa02") is NodeState.DRAINED
    # and it behaves the same from here on
    req = Request("c", 1, nodes=3)
    assert clone.allocate(req) == pool.allocate(req) == ns("rsa[04-06]")
    assert clone.release("a") == pool.release("a")


def test_snapshot_with_new_policy() -> None:
    pool = make_pool(ram=4)
    clone = Pool.from_snapshot(pool.snapshot(), AllocationPolicy(ratio=1))
    assert clone.policy.ratio == 1
    assert clone.allocate(Request("a", 3)) == ns("rsa[01-03]")


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d.update(version=99),
        lambda d: d.pop("nodes"),
        lambda d: d["nodes"][0].pop("state"),
        lambda d: d["nodes"][0].update(tier="tape"),
        lambda d: d["nodes"][0].update(state="broken"),
    ],
)
def test_malformed_snapshot(mutate: Callable[[dict[str, Any]], object]) -> None:
    data = make_pool(ram=2, ssd=0).snapshot()
    mutate(data)
    with pytest.raises(ValueError):
        Pool.from_snapshot(data)


# -- property tests ---------------------------------------------------------------------------

# a small mixed pool so that contention, skips and drains happen often
PROP_NODES = [
    *make_nodes("rsa", 10, Tier.RAM, 64 * G),
    RsaNode("big1", Tier.RAM, 256 * G),
    RsaNode("big2", Tier.RAM, 256 * G),
    *make_nodes("ssd", 5, Tier.SSD, 512 * G),
]
PROP_POLICY = AllocationPolicy(ratio=4, min_nodes=1, max_nodes=4, max_request=6)
NAMES = [n.name for n in PROP_NODES]
CAPACITY = {n.name: n.capacity for n in PROP_NODES}
TIER = {n.name: n.tier for n in PROP_NODES}

requests = st.builds(
    Request,
    job_id=st.just(""),
    compute_nodes=st.integers(0, 30),
    nodes=st.none() | st.integers(0, 8),
    tier=st.none() | st.sampled_from(Tier),
    capacity=st.none() | st.integers(1, 3000).map(lambda g: g * G),
)


def apply(pool: Pool, op: tuple[object, ...]) -> object:
    """Apply one recorded operation; return a comparable result."""
    kind = op[0]
    if kind == "allocate":
        req = op[1]
        assert isinstance(req, Request)
        try:
            got = pool.allocate(req)
        except PolicyViolation as e:
            return ("violation", str(e))
        return None if got is None else str(got)
    if kind == "release":
        return str(pool.release(str(op[1])))
    pool.set_state(str(op[1]), NodeState(str(op[2])))
    return None


def reference_choice(pool: Pool, req: Request) -> str | None:
    """The documented rule, written the slow obvious way, against the pool's public view."""
    tier = req.tier or PROP_POLICY.default_tier
    if tier is Tier.AUTO:
        return reference_auto(pool, req)
    return reference_in(pool, req, tier, pool.check(req))


def reference_in(pool: Pool, req: Request, tier: Tier, count: int) -> str | None:
    order = {n.name: i for i, n in enumerate(pool.nodes())}
    free = sorted(pool.free(tier), key=lambda n: (-CAPACITY[n], order[n]))
    if req.capacity is not None:
        total, need = 0, 0
        while need < len(free) and need < PROP_POLICY.max_request and total < req.capacity:
            total += CAPACITY[free[need]]
            need += 1
        if total < req.capacity:
            return None
        count = max(count, need)
    if count > len(free):
        return None
    return str(NodeSet.fromlist(free[:count]))


def reference_auto(pool: Pool, req: Request) -> str | None:
    """Tier auto (docs/allocation.md): per tier, the job's size there raised to its
    bandwidth need (capacity / io_time) within the limits; bandwidth met first, then the
    cheapest, the fastest, ram before ssd; the first whose nodes are free."""
    policy = PROP_POLICY
    bps = 0.0 if req.capacity is None else req.capacity / policy.io_time
    options = []
    for i, tier in enumerate((Tier.RAM, Tier.SSD)):
        try:
            count = pool.check(Request(req.job_id, req.compute_nodes, req.nodes, tier,
                                       req.capacity))
        except PolicyViolation:
            continue
        per = policy.bandwidth_of(tier)
        if req.nodes is None and bps > 0:
            size = sum(1 for n in PROP_NODES if n.tier is tier)
            wanted = int(bps) // per + (1 if int(bps) % per else 0)
            count = max(count, min(wanted, policy.max_request, size))
        bw = count * per
        cost = count * policy.price_of(tier)
        options.append((False, cost, -bw, i, tier, count) if bw >= bps
                       else (True, -bw, cost, i, tier, count))
    if options:
        for *_, tier, count in sorted(options):
            got = reference_in(pool, req, tier, count)
            if got is not None:
                return got
        if not policy.mix:
            return None
        mix_count = max(o[-1] for o in options)
    elif not policy.mix:
        raise PolicyViolation("no tier")
    else:
        mix_count = reference_pooled(req)
    return reference_mix(pool, req, mix_count)


def reference_pooled(req: Request) -> int:
    """No tier alone can hold the job: the nodes of every tier together, by the same
    rules (an explicit count kept, the share clamped, capacity from the largest)."""
    policy = PROP_POLICY
    if req.nodes is not None:
        if not 1 <= req.nodes <= min(policy.max_request, len(PROP_NODES)):
            raise PolicyViolation("not even all tiers")
        count = req.nodes
    else:
        count = min(max(-(-req.compute_nodes // policy.ratio), policy.min_nodes),
                    policy.max_nodes, len(PROP_NODES))
    if req.capacity is not None:
        if req.capacity < 1:
            raise PolicyViolation("bad capacity")
        caps = sorted((n.capacity for n in PROP_NODES), reverse=True)
        total, need = 0, 0
        while need < len(caps) and total < req.capacity:
            total += caps[need]
            need += 1
        if total < req.capacity or need > policy.max_request:
            raise PolicyViolation("not even all tiers")
        count = max(count, need)
    return count


def reference_mix(pool: Pool, req: Request, count: int) -> str | None:
    """Free nodes of the cheapest tier first (then the faster; ram before ssd on a tie),
    each tier's largest first, until ``count`` nodes cover ``req.capacity`` (at most
    max_request); a mix only if it took from two tiers."""
    policy = PROP_POLICY
    order = {n.name: i for i, n in enumerate(pool.nodes())}
    tiers = sorted((Tier.RAM, Tier.SSD), key=lambda t: (
        policy.price_of(t), -policy.bandwidth_of(t), 0 if t is Tier.RAM else 1))
    taken: list[str] = []
    for tier in tiers:
        for n in sorted(pool.free(tier), key=lambda n: (-CAPACITY[n], order[n])):
            enough = len(taken) >= count and (
                req.capacity is None or sum(CAPACITY[t] for t in taken) >= req.capacity)
            if enough or len(taken) >= policy.max_request:
                break
            taken.append(n)
    if len(taken) < count or (req.capacity is not None
                              and sum(CAPACITY[t] for t in taken) < req.capacity):
        return None
    if len({TIER[n] for n in taken}) < 2:
        return None
    return str(NodeSet.fromlist(taken))


class PoolMachine(RuleBasedStateMachine):
    jobs = Bundle("jobs")

    @initialize()
    def start(self) -> None:
        self.pool = Pool(PROP_NODES, PROP_POLICY)
        self.held: dict[str, set[str]] = {}
        self.states = {n: NodeState.UP for n in NAMES}
        self.ops: list[tuple[object, ...]] = []
        self.results: list[object] = []
        self.next_job = 0

    def record(self, op: tuple[object, ...], result: object) -> None:
        self.ops.append(op)
        self.results.append(result)

    @rule(target=jobs, req=requests)
    def allocate(self, req: Request) -> str:
        self.next_job += 1
        job = str(self.next_job)
        req = Request(job, req.compute_nodes, req.nodes, req.tier, req.capacity)
        before = self.pool.snapshot()
        try:
            expected = reference_choice(self.pool, req)
        except PolicyViolation:
            expected = "violation"
        result = apply(self.pool, ("allocate", req))
        self.record(("allocate", req), result)
        if expected == "violation":
            assert isinstance(result, tuple)
            assert result[0] == "violation"
            assert self.pool.snapshot() == before
            return job
        assert result == expected
        if result is None:
            assert self.pool.snapshot() == before  # all-or-nothing
            return job
        got = set(NodeSet(str(result)))
        for name in got:
            assert before["nodes"][NAMES_INDEX[name]]["state"] == "up"  # never a drained node
            assert before["nodes"][NAMES_INDEX[name]]["owner"] is None
        asked = req.tier or PROP_POLICY.default_tier
        tiers = {TIER[name] for name in got}
        # a named tier: only its nodes; auto: one tier, or a mix when none alone could
        assert tiers == {asked} if asked is not Tier.AUTO else len(tiers) in (1, 2)
        if req.capacity is not None:
            assert sum(CAPACITY[n] for n in got) >= req.capacity
        self.held[job] = got
        return job

    @rule(job=consumes(jobs))
    def release(self, job: str) -> None:
        result = apply(self.pool, ("release", job))
        self.record(("release", job), result)
        assert set(NodeSet(str(result))) == self.held.pop(job, set())

    @rule(name=st.sampled_from(NAMES), state=st.sampled_from(NodeState))
    def set_state(self, name: str, state: NodeState) -> None:
        self.record(("state", name, state.value), apply(self.pool, ("state", name, state.value)))
        self.states[name] = state

    @precondition(lambda self: self.held)
    @rule()
    def allocate_existing_job_fails(self) -> None:
        job = sorted(self.held)[0]
        before = self.pool.snapshot()
        try:
            self.pool.allocate(Request(job, 1))
        except ValueError:
            pass
        else:
            raise AssertionError("allocate for a job that holds nodes must fail")
        assert self.pool.snapshot() == before

    @invariant()
    def no_double_booking_and_no_leak(self) -> None:
        pool = self.pool
        seen: set[str] = set()
        for job, names in self.held.items():
            assert set(pool.holding(job)) == names
            assert not (seen & names)
            seen |= names
            for name in names:
                assert pool.owner(name) == job
        assert pool.jobs() == sorted(self.held)
        free = set(pool.free())
        not_up = {n for n, s in self.states.items() if s is not NodeState.UP}
        assert not (free & seen)
        assert not (free & not_up)
        assert free | seen | not_up == set(NAMES)
        for name in NAMES:
            assert pool.state(name) is self.states[name]
            if name not in seen:
                assert pool.owner(name) is None
        for tier in Tier:
            assert set(pool.free(tier)) == {n for n in free if TIER[n] is tier}

    @invariant()
    def snapshot_round_trips(self) -> None:
        snap = self.pool.snapshot()
        assert Pool.from_snapshot(json.loads(json.dumps(snap))).snapshot() == snap

    def teardown(self) -> None:
        if not hasattr(self, "pool"):
            return
        # determinism: the same operations on a fresh pool give the same results and state
        fresh = Pool(PROP_NODES, PROP_POLICY)
        assert [apply(fresh, op) for op in self.ops] == self.results
        assert fresh.snapshot() == self.pool.snapshot()


NAMES_INDEX = {n.name: i for i, n in enumerate(Pool(PROP_NODES, PROP_POLICY).nodes())}

PoolMachine.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestPoolMachine = PoolMachine.TestCase
