"""Tier ``auto``: the least-cost allocation meeting size and bandwidth (seed 000 §III.B).

Unit and property tests of rsa_scheduler.core.tiering through the allocator, the state
machine (explanation, build-fs tier) and the configuration (cost model settings).
"""

from __future__ import annotations

import pytest
from ClusterShell.NodeSet import NodeSet
from hypothesis import given, settings
from hypothesis import strategies as st

from rsa_scheduler.config import ConfigErrors, load_config_text
from rsa_scheduler.core.allocator import PolicyViolation, Pool, Request, RsaNode
from rsa_scheduler.core.directives import DirectiveSpec
from rsa_scheduler.core.payloads import AllocateArgs, BuildFsArgs
from rsa_scheduler.core.policy import AllocationPolicy, NodeState, Tier, node_tier
from rsa_scheduler.core.tiering import Option, explain, need, rank
from tests.unit.corekit import Driver, make_scheduler, obs

pytestmark = pytest.mark.unit

G = 1 << 30
M = 1 << 20
#: seed 000-like prices: a DRAM node costs 4x an SSD node; DRAM 5G/s, SSD 1.5G/s a node
POLICY = AllocationPolicy(ratio=32, min_nodes=1, max_nodes=8, max_request=16,
                          default_tier=Tier.AUTO,
                          price={Tier.RAM: 4.0, Tier.SSD: 1.0},
                          bandwidth={Tier.RAM: 5 * G, Tier.SSD: 1536 * M}, io_time=300.0)


def make_pool(ram: int = 8, ssd: int = 8, policy: AllocationPolicy = POLICY,
              ram_cap: int = 128 * G, ssd_cap: int = 1024 * G) -> Pool:
    nodes = [RsaNode(f"ram{i}", Tier.RAM, ram_cap) for i in range(1, ram + 1)]
    nodes += [RsaNode(f"ssd{i}", Tier.SSD, ssd_cap) for i in range(1, ssd + 1)]
    return Pool(nodes, policy)


def tier_of(nodes: NodeSet) -> set[str]:
    return {n.rstrip("0123456789") for n in nodes}


def test_no_capacity_gets_the_proportional_share_on_the_cheapest_tier() -> None:
    pool = make_pool()
    got = pool.allocate(Request("1", 64))  # 64 compute nodes / 32 = 2 RSA nodes
    assert got == NodeSet("ssd[1-2]")
    assert pool.explain("1") == ("tier auto chose ssd 2 nodes, 3G/s, cost 2/h; over ram 2 "
                                 "nodes, 10G/s, cost 8/h: costs more")


def test_the_cheapest_tier_that_meets_the_bandwidth_wins() -> None:
    # 100G in 5 min: 341M/s; one SSD node (1.5G/s, cost 1) beats one RAM node (cost 4)
    pool = make_pool()
    assert pool.allocate(Request("1", 1, capacity=100 * G)) == NodeSet("ssd1")


def test_bandwidth_bound_choice_takes_more_nodes_or_the_faster_tier() -> None:
    # 500G in 5 min = 1.67G/s: SSD needs 2 nodes (3G/s, cost 2) for what 1 RAM node
    # holds too little (128G): RAM needs 4 nodes for the size (20G/s, cost 16)
    pool = make_pool()
    assert pool.allocate(Request("1", 1, capacity=500 * G)) == NodeSet("ssd[1-2]")
    assert "for the 1.67G/s needed" in pool.explain("1")
    # at 8x the SSD price, RAM's 4 nodes (16) beat SSD's 2 (16): equal cost, faster wins
    dear = AllocationPolicy(default_tier=Tier.AUTO, price={Tier.RAM: 4.0, Tier.SSD: 8.0},
                            bandwidth=POLICY.bandwidth)
    pool = make_pool(policy=dear)
    assert pool.allocate(Request("1", 1, capacity=500 * G)) == NodeSet("ram[1-4]")
    assert "ssd 2 nodes, 3G/s, cost 16/h: as cheap, slower" in pool.explain("1")


def test_a_tight_io_time_makes_the_slow_tier_too_slow() -> None:
    # 1.5T in 60 s = 25.6G/s: SSD would need 18 nodes (over max_request 16: 24G/s at
    # most, too slow); RAM needs 12 nodes for the size and has 60G/s
    fast = AllocationPolicy(max_request=16, default_tier=Tier.AUTO, io_time=60.0,
                            price={Tier.RAM: 4.0, Tier.SSD: 1.0}, bandwidth=POLICY.bandwidth)
    pool = make_pool(ram=16, ssd=16, policy=fast)
    got = pool.allocate(Request("1", 1, capacity=1536 * G))
    assert got is not None and tier_of(got) == {"ram"} and len(got) == 12
    assert "ssd 16 nodes, 24G/s, cost 16/h: too slow" in pool.explain("1")


def test_when_no_tier_is_fast_enough_the_fastest_is_taken() -> None:
    slow = AllocationPolicy(max_request=2, default_tier=Tier.AUTO, io_time=1.0,
                            price={Tier.RAM: 4.0, Tier.SSD: 1.0}, bandwidth=POLICY.bandwidth)
    pool = make_pool(policy=slow)
    got = pool.allocate(Request("1", 1, capacity=100 * G))  # 100G/s: nobody has that
    assert got == NodeSet("ram[1-2]")
    assert "(no tier has that within the site's limits: the fastest)" in pool.explain("1")
    assert "ssd 2 nodes, 3G/s, cost 2/h: too slow" in pool.explain("1")


def test_an_exhausted_tier_falls_back_to_the_next_cheapest() -> None:
    pool = make_pool(ram=4, ssd=2)
    assert pool.allocate(Request("a", 64)) == NodeSet("ssd[1-2]")
    got = pool.allocate(Request("b", 64))
    assert got == NodeSet("ram[1-2]")
    assert "ssd 2 nodes, 3G/s, cost 2/h: not enough free nodes now" in pool.explain("b")
    pool.release("a")
    assert pool.explain("a") == ""
    assert pool.allocate(Request("c", 64)) == NodeSet("ssd[1-2]")


def test_a_drained_tier_falls_back_and_both_busy_skips_the_cycle() -> None:
    pool = make_pool(ram=2, ssd=2)
    for n in ("ssd1", "ssd2"):
        pool.set_state(n, NodeState.DRAINED)
    assert pool.allocate(Request("a", 1)) == NodeSet("ram1")
    assert pool.allocate(Request("b", 64)) is None  # 2 nodes: ram has 1 free, ssd none
    assert pool.jobs() == ["a"]


def test_a_tier_that_cannot_hold_the_job_is_passed_over() -> None:
    pool = make_pool(ram=2, ssd=4)  # ram holds 256G in all
    got = pool.allocate(Request("1", 1, capacity=1000 * G))  # 3.33G/s: 3 SSD nodes
    assert got == NodeSet("ssd[1-3]")
    assert "ram: RSA_CAPACITY=1000G exceeds the whole ram tier" in pool.explain("1")


def test_no_tier_can_hold_it_is_one_line_naming_each() -> None:
    pool = make_pool(ram=1, ssd=1)
    with pytest.raises(PolicyViolation) as e:
        pool.allocate(Request("1", 1, capacity=4096 * G))
    text = str(e.value)
    assert "\n" not in text
    assert text.startswith("RSA_TIER=auto: no tier can serve this job (ram: ")
    assert "; ssd: RSA_CAPACITY=4T exceeds the whole ssd tier" in text


def test_an_explicit_node_count_is_kept_and_a_one_tier_pool_just_uses_it() -> None:
    pool = make_pool()
    assert pool.allocate(Request("1", 1, nodes=3, capacity=1000 * G)) == NodeSet("ssd[1-3]")
    only_ram = make_pool(ssd=0)
    assert only_ram.allocate(Request("2", 1, tier=Tier.AUTO)) == NodeSet("ram1")
    assert only_ram.check(Request("3", 64, tier=Tier.AUTO)) == 2


def test_a_fixed_tier_ignores_the_cost_model() -> None:
    pool = make_pool()
    assert pool.allocate(Request("1", 64, tier=Tier.RAM)) == NodeSet("ram[1-2]")
    assert pool.explain("1") == ""


def test_rank_and_explain_on_their_own() -> None:
    cheap_slow = Option(Tier.SSD, 2, 2.0, 3.0 * G, False)
    dear_fast = Option(Tier.RAM, 1, 4.0, 5.0 * G, True)
    assert rank([cheap_slow, dear_fast]) == [dear_fast, cheap_slow]
    line = explain(dear_fast, [dear_fast, cheap_slow], 4.0 * G)
    assert line == ("tier auto chose ram 1 node, 5G/s, cost 4/h for the 4G/s needed; over "
                    "ssd 2 nodes, 3G/s, cost 2/h: too slow")
    assert need(POLICY, None) == 0.0
    assert need(POLICY, 300 * G) == pytest.approx(G)


def test_node_tier_refuses_auto() -> None:
    assert node_tier("ssd") is Tier.SSD
    with pytest.raises(ValueError, match="no RSA node is in tier auto: use ram or ssd"):
        node_tier("auto")


# -- invariants ---------------------------------------------------------------------------

requests = st.tuples(st.integers(0, 600), st.none() | st.integers(1, 6),
                     st.none() | st.integers(1, 4000))


@settings(max_examples=300, deadline=None)
@given(ops=st.lists(st.tuples(st.booleans(), requests), min_size=1, max_size=30),
       drained=st.sets(st.sampled_from(["ram1", "ram2", "ssd1", "ssd3"])))
@pytest.mark.parametrize("mix", [False, True])
def test_auto_never_gives_more_than_is_free_and_picks_the_cheapest_free(
        ops: list[tuple[bool, tuple[int, int | None, int | None]]], drained: set[str],
        mix: bool) -> None:
    policy = AllocationPolicy(**{**{f: getattr(POLICY, f) for f in (
        "ratio", "min_nodes", "max_nodes", "max_request", "default_tier", "price",
        "bandwidth", "io_time")}, "mix": mix})
    pool = make_pool(ram=4, ssd=4, ram_cap=64 * G, ssd_cap=512 * G, policy=policy)
    for n in drained:
        pool.set_state(n, NodeState.DRAINED)
    held: dict[str, set[str]] = {}
    for i, (release, (compute, nodes, cap_g)) in enumerate(ops):
        if release and held:
            pool.release(sorted(held)[0])
            held.pop(sorted(held)[0])
            continue
        req = Request(str(i), compute, nodes, None, None if cap_g is None else cap_g * G)
        free_before = {t: set(pool.free(t)) for t in (Tier.RAM, Tier.SSD)}
        try:
            got = pool.allocate(req)
        except PolicyViolation:
            continue
        if got is None:
            # nothing changed, and truly no option of any tier fits the free nodes
            assert {t: set(pool.free(t)) for t in free_before} == free_before
            continue
        names = set(got)
        tiers = {Tier.RAM if n.startswith("ram") else Tier.SSD for n in names}
        assert names <= free_before[Tier.RAM] | free_before[Tier.SSD]  # free, UP nodes
        assert not names & drained
        assert all(names.isdisjoint(h) for h in held.values())  # never double-booked
        if req.capacity is not None:
            assert sum(64 * G if n.startswith("ram") else 512 * G
                       for n in names) >= req.capacity
        held[req.job_id] = names
        why = pool.explain(req.job_id)
        if len(tiers) == 2:  # a mix: only with mix on, only when no tier alone could
            assert mix
            assert why.startswith("tier auto chose a mix of ssd ")  # the cheaper first
            ssd_free = len(free_before[Tier.SSD])
            assert sum(n.startswith("ssd") for n in names) == ssd_free  # all of it
            continue
        (tier,) = tiers
        assert why.startswith(f"tier auto chose {tier} {len(names)} node")
        # every option ranked before the chosen one said why it was passed over
        for other in (Tier.RAM, Tier.SSD):
            if other is not tier and f"over {other} " in why:
                assert any(w in why for w in ("costs more", "too slow", "not enough free",
                                               "as cheap"))


# -- the state machine: explanation in the log, build-fs on the nodes' tier ---------------

def test_the_core_logs_why_and_builds_on_the_tier_it_got() -> None:
    pool = make_pool(ram=2, ssd=2)
    d = Driver(make_scheduler(pool))
    spec = DirectiveSpec(data_in="/pfs/in", data_out="/pfs/out", tier=Tier.AUTO,
                         capacity=100 * G)
    dec = d.observe(obs("10", "PENDING", "Resources", spec))
    build = [a for a in dec.actions if a.kind.value == "build-fs"]
    # the executor reads the nodes' tier
    assert build and build[0].args_as(BuildFsArgs).tier is None
    alloc = [a for a in dec.actions if a.kind.value == "allocate"]
    assert alloc[0].args_as(AllocateArgs).nodes.names == ("ssd1",)
    details = [e.context.get("detail", "") for e in dec.events]
    assert any(t.startswith("tier auto chose ssd 1 node") for t in details)


# -- configuration -------------------------------------------------------------------------

POOL = """
pool:
  nodes:
    - names: "rsa[1-4]"
      capacity: 2G
    - names: "ssd[1-2]"
      capacity: 8G
      tier: ssd
filesystem:
  backend: {ram: moosefs, ssd: moosefs}
"""


def test_the_cost_model_loads_and_reaches_the_allocator() -> None:
    cfg = load_config_text(POOL + """
allocation:
  default_tier: auto
  price: {ram: 3.5}
  bandwidth: {ssd: 2G}
  io_time: 10m
""")
    p = cfg.allocation
    assert p.default_tier is Tier.AUTO
    assert p.price_of(Tier.RAM) == 3.5 and p.price_of(Tier.SSD) == 1.0  # merged default
    assert p.bandwidth_of(Tier.SSD) == 2 * G and p.bandwidth_of(Tier.RAM) == 5 * G
    assert p.io_time == 600.0
    assert cfg.make_pool().allocate(Request("1", 1)) == NodeSet("ssd1")
    assert cfg.to_dict()["allocation"]["price"] == {"ram": 3.5, "ssd": 1.0}


@pytest.mark.parametrize(("snippet", "key", "reason"), [
    ("price: {ram: -1}", "allocation.price.ram", "must be between 0 and 1e+12, got -1"),
    ("price: {ram: cheap}", "allocation.price.ram", "expected a number, got string 'cheap'"),
    ("price: {auto: 1}", "allocation.price.auto", "unknown key (one of ram, ssd)"),
    ("price: {ram: .nan}", "allocation.price.ram", "expected a number"),
    ("bandwidth: {ssd: 0}", "allocation.bandwidth.ssd", "must be larger than 0, got 0"),
    ("bandwidth: {ssd: fast}", "allocation.bandwidth.ssd", "invalid size 'fast'"),
    ("io_time: 0s", "allocation.io_time", ""),
])
def test_a_bad_cost_setting_is_one_actionable_line(snippet: str, key: str, reason: str) -> None:
    with pytest.raises(ConfigErrors) as e:
        load_config_text(POOL + "allocation:\n  " + snippet + "\n", file="site.yaml")
    (issue,) = e.value.issues
    assert issue.key == key
    assert reason in issue.reason
    assert "\n" not in str(issue)


def test_a_node_cannot_be_in_tier_auto() -> None:
    with pytest.raises(ConfigErrors) as e:
        load_config_text("pool:\n  nodes:\n    - names: rsa1\n      capacity: 2G\n"
                         "      tier: auto\n", file="site.yaml")
    assert any(i.key == "pool.nodes[0].tier" and "expected one of ram, ssd" in i.reason
               for i in e.value.issues)


def test_the_policy_stays_a_hashable_value() -> None:
    same = AllocationPolicy(default_tier=Tier.AUTO, price={Tier.RAM: 4.0, Tier.SSD: 1.0},
                            bandwidth=POLICY.bandwidth, io_time=300.0)
    assert same == POLICY and hash(same) == hash(POLICY)
    assert len({POLICY, same, AllocationPolicy()}) == 2
    with pytest.raises(ValueError, match="price of tier auto: only ram, ssd have prices"):
        AllocationPolicy(price={Tier.AUTO: 1.0})
    with pytest.raises(ValueError, match="io_time must be > 0"):
        AllocationPolicy(io_time=0.0)


# -- a mix of tiers (allocation.mix) ---------------------------------------------------


def test_when_no_tier_alone_has_the_nodes_free_auto_mixes_them_cheapest_first() -> None:
    pool = make_pool(ram=2, ssd=2)
    pool.set_state("ram2", NodeState.DRAINED)
    pool.set_state("ssd2", NodeState.DRAINED)
    assert pool.allocate(Request("a", 64)) == NodeSet("ram1,ssd1")  # 2 nodes
    assert pool.explain("a") == (
        "tier auto chose a mix of ssd 1 node + ram 1 node, 3G/s, cost 5/h; over ssd 2 "
        "nodes, 3G/s, cost 2/h: not enough free nodes now; ram 2 nodes, 10G/s, cost 8/h: "
        "not enough free nodes now")
    assert pool.free() == NodeSet()
    assert pool.release("a") == NodeSet("ram1,ssd1")
    assert pool.free(Tier.RAM) == NodeSet("ram1") and pool.free(Tier.SSD) == NodeSet("ssd1")
    # once a tier alone has them again, no mix
    pool.set_state("ssd2", NodeState.UP)
    assert pool.allocate(Request("b", 64)) == NodeSet("ssd[1-2]")


def test_a_mix_is_paced_by_its_slowest_tier() -> None:
    # 600G in 5 min = 2G/s: ram cannot hold it (256G), ssd needs 2 nodes for the
    # bandwidth (3G/s); with one ssd and one ram free the mix has 2 x 1.5G/s = 3G/s (the
    # slowest paces an even stripe: not 1.5G + 5G)
    pool = make_pool(ram=2, ssd=2)
    pool.set_state("ram2", NodeState.DRAINED)
    pool.set_state("ssd2", NodeState.DRAINED)
    assert pool.allocate(Request("a", 1, capacity=600 * G)) == NodeSet("ram1,ssd1")
    assert pool.explain("a").startswith(
        "tier auto chose a mix of ssd 1 node + ram 1 node, 3G/s, cost 5/h for the 2G/s "
        "needed; over ssd 2 nodes, 3G/s, cost 2/h: not enough free nodes now; ram: ")
    # 1200G: 4G/s needed, the mix of the two free nodes is short of it, still the best now
    pool2 = make_pool(ram=2, ssd=2, ram_cap=512 * G)
    pool2.set_state("ram2", NodeState.DRAINED)
    pool2.set_state("ssd2", NodeState.DRAINED)
    assert pool2.allocate(Request("a", 1, capacity=1200 * G)) == NodeSet("ram1,ssd1")
    assert pool2.explain("a").startswith(
        "tier auto chose a mix of ssd 1 node + ram 1 node, 3G/s, cost 5/h for the 4G/s "
        "needed (short of it)")


def test_a_job_no_single_tier_can_hold_gets_a_mix_of_all() -> None:
    pool = make_pool(ram=2, ssd=2)
    req = Request("a", 1, nodes=3)
    assert pool.check(req) == 3
    assert pool.allocate(req) == NodeSet("ssd[1-2],ram1")
    why = pool.explain("a")
    assert why.startswith("tier auto chose a mix of ssd 2 nodes + ram 1 node, 4.5G/s")
    assert "; over ram: RSA_NODES=3 exceeds the 2 RSA nodes of tier ram at this site" in why
    with pytest.raises(PolicyViolation, match=r"RSA_NODES=5 exceeds all 4 RSA nodes of every "
                                              r"tier together"):
        pool.check(Request("b", 1, nodes=5))


def test_with_mix_off_auto_waits_or_refuses_as_before() -> None:
    off = AllocationPolicy(default_tier=Tier.AUTO, price=POLICY.price,
                           bandwidth=POLICY.bandwidth, mix=False)
    pool = make_pool(ram=2, ssd=2, policy=off)
    with pytest.raises(PolicyViolation, match=r"^RSA_TIER=auto: no tier can serve this job"):
        pool.check(Request("a", 1, nodes=3))
    pool.set_state("ram2", NodeState.DRAINED)
    pool.set_state("ssd2", NodeState.DRAINED)
    assert pool.allocate(Request("b", 64)) is None


def test_mix_is_on_by_default_and_off_with_one_line_when_the_tiers_backends_differ() -> None:
    cfg = load_config_text(POOL + "allocation: {default_tier: auto, max_nodes: 6}\n")
    assert cfg.allocation.mix and cfg.warnings == ()  # 6 nodes in all: no max_nodes warning
    pool = cfg.make_pool()
    assert pool.allocate(Request("1", 1, nodes=5)) == NodeSet("ssd[1-2],rsa[1-3]")
    split = load_config_text(POOL.replace("{ram: moosefs, ssd: moosefs}",
                                          "{ram: tmpfs, ssd: moosefs}") +
                             "allocation: {default_tier: auto, max_nodes: 1, max_request: 1}\n")
    assert [w for w in split.warnings if "allocation.mix" in w] == [
        "<string>: allocation.mix: the tiers use different backends (ram tmpfs, ssd "
        "moosefs): one filesystem cannot span them, so tier auto never mixes tiers; give "
        "them one filesystem.backend, or set mix: false (the shipped default; override it "
        "in this file)"]
    assert not split.make_pool().policy.mix
    off = load_config_text(POOL + "allocation: {default_tier: auto, mix: false}\n")
    assert not off.make_pool().policy.mix
    assert not [w for w in off.warnings if "allocation.mix" in w]
