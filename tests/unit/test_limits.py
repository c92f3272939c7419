"""Limits per user and per account: RSA nodes, capacity, stage-ins (issue 33, core/limits.py).

On 6dee349 (main) nothing limited what one user's or one account's jobs held but a share
of the pool's nodes (issue 39): no capacity, no count of stage-ins, nothing per account,
and a job that waited for its share was never told why.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import yaml

from rsa_scheduler.core.actions import ActionKind
from rsa_scheduler.core.allocator import Pool, RsaNode
from rsa_scheduler.core.limits import Holder, Usage, judge, limit_lines, limits_set
from rsa_scheduler.core.payloads import TellUserArgs
from rsa_scheduler.core.policy import AllocationPolicy, EarlyStart, NamedLimits, Tier
from rsa_scheduler.core.scheduler import Decision, Observation, Scheduler
from rsa_scheduler.core.states import RsaState
from rsa_scheduler.daemon.dispatch import COMMENT_MAX
from tests.unit.corekit import GIB, Driver, make_scheduler, make_spec, obs

pytestmark = pytest.mark.unit

POOL_YAML = "pool:\n  nodes:\n    - names: \"rsa[1-4]\"\n      capacity: 2G\n"


def pool(n: int = 4, **limits: Any) -> Pool:
    nodes = [RsaNode(f"rsa{i}", Tier.RAM, 2 * GIB) for i in range(1, n + 1)]
    policy = AllocationPolicy(ratio=2, min_nodes=1, max_nodes=4, max_request=4)
    return Pool(nodes, dataclasses.replace(policy, **limits))


def job(jid: str, user: str = "alice", account: str = "physics", nodes: int = 1,
        priority: int = 100, early: EarlyStart | None = None,
        data_in: bool = True) -> Observation:
    spec = make_spec(data_in="/pfs/in" if data_in else None, early=early)
    o = obs(jid, "PENDING", "Resources", spec, nodes=nodes, priority=priority, user=user)
    return dataclasses.replace(o, account=account)


def held(o: Observation) -> Observation:
    """``o`` as Slurm holds it for the RSA (job_submit.lua's begin time, judged able to
    start): only then is the job "held meanwhile"."""
    return dataclasses.replace(o, reason="BeginTime", hold_until=1e9, held=True)


def told(dec: Decision, jid: str) -> list[str]:
    return [a.args_as(TellUserArgs).message for a in dec.actions
            if a.kind is ActionKind.TELL_USER and a.job_id == jid]


def holders(sched: Scheduler) -> set[str]:
    return {j for j, r in sched.records.items() if r.nodes}


def test_judge_counts_per_user_and_per_account() -> None:
    policy = AllocationPolicy(user_nodes=2, account_capacity=3 * GIB)
    held = [Holder("1", "alice", "physics", Usage(1, GIB, 1)),
            Holder("2", "bob", "physics", Usage(1, GIB, 0))]
    assert judge(policy, "alice", "physics", Usage(1, GIB, 1), held) is None
    over = judge(policy, "carol", "physics", Usage(1, 2 * GIB, 0), held)
    assert over is not None and not over.for_good
    assert over.reason == ("over a limit: account physics's jobs hold 2G of the 3G of RSA "
                           "capacity allowed (allocation.account_capacity), until they give "
                           "some back")
    alone = judge(policy, "alice", "", Usage(3, GIB, 0), [])
    assert alone is not None and alone.for_good and "allocation.user_nodes" in alone.reason
    assert not limits_set(AllocationPolicy()) and limits_set(policy)


def test_a_user_over_the_node_limit_waits_with_a_reason_and_others_are_unaffected() -> None:
    d = Driver(make_scheduler(pool(user_nodes=1)))
    dec = d.observe(job("10", priority=99), held(job("11", priority=98, early=EarlyStart.WAIT)),
                    job("20", user="bob", priority=1))
    assert holders(d.sched) == {"10", "20"}
    (msg,) = told(dec, "11")
    assert msg == ("waits for RSA nodes: over a limit: user alice's jobs hold 1 RSA node of "
                   "the 1 RSA node allowed (allocation.user_nodes), until they give some "
                   "back; held meanwhile, at most staging.wait_timeout, then it reads the PFS")
    assert len(f"RSA: {msg}") <= COMMENT_MAX  # the job's comment holds it whole
    assert d.sched.records["11"].message == msg
    # told once: the next cycles retry quietly
    assert not told(d.tick(5), "11") and not told(d.tick(6), "11")
    # the first job's RAMDISK goes: the second gets nodes
    d.observe(dataclasses.replace(job("10"), state="CANCELLED"),
              job("11", early=EarlyStart.WAIT),
              job("20", user="bob"), at=10)
    d.answer_all("10")
    d.tick(11)
    assert "11" in holders(d.sched)


def test_fallback_says_the_job_reads_the_pfs_if_it_starts_first() -> None:
    d = Driver(make_scheduler(pool(user_nodes=1)))
    dec = d.observe(job("10"), job("11", priority=1, early=EarlyStart.FALLBACK))
    (msg,) = told(dec, "11")
    assert msg.endswith("; if it starts first, it reads the PFS")
    d.observe(job("10"), dataclasses.replace(job("11", early=EarlyStart.FALLBACK),
                                             state="RUNNING", reason="None"), at=5)
    assert d.sched.records["11"].rsa_state is RsaState.DECLINED


def test_the_account_limit_counts_every_user_of_the_account() -> None:
    d = Driver(make_scheduler(pool(account_nodes=2)))
    dec = d.observe(job("10", priority=99), job("11", user="bob", priority=98),
                    job("12", user="carol", priority=97),
                    job("13", user="dave", account="chem", priority=96))
    assert holders(d.sched) == {"10", "11", "13"}
    (msg,) = told(dec, "12")
    assert "account physics" in msg and "allocation.account_nodes" in msg


def test_capacity_is_the_configured_capacity_of_the_nodes_held() -> None:
    d = Driver(make_scheduler(pool(user_capacity=3 * GIB)))
    d.observe(job("10", priority=99), job("11", priority=98))
    assert holders(d.sched) == {"10"}  # 2 GiB held, 2 more would be 4 > 3
    assert "allocation.user_capacity" in d.sched.records["11"].message


def test_stage_ins_count_only_while_the_ramdisk_is_prepared() -> None:
    d = Driver(make_scheduler(pool(user_stage_ins=1)))
    d.observe(job("10", priority=99), job("11", priority=98),
              job("12", priority=97, data_in=False))  # output only: no stage-in
    assert holders(d.sched) == {"10", "12"}
    assert "allocation.user_stage_ins" in d.sched.records["11"].message
    d.answer_all("10")  # built and staged in: locked in, no longer a stage-in
    assert d.sched.records["10"].rsa_state is RsaState.LOCKED_IN
    d.tick(d.now + 1)
    assert "11" in holders(d.sched)


def test_a_job_alone_over_a_limit_reads_the_pfs_at_once() -> None:
    d = Driver(make_scheduler(pool(user_nodes=1)))
    dec = d.observe(job("10", nodes=4))  # ratio 2: 2 RSA nodes
    rec = d.sched.records["10"]
    assert rec.rsa_state is RsaState.DECLINED and not rec.nodes
    (msg,) = told(dec, "10")
    assert "this job alone needs 2 RSA nodes, over the limit of 1 RSA node per user " \
        "(allocation.user_nodes)" in msg


def test_limits_survive_a_restart() -> None:
    d = Driver(make_scheduler(pool(user_nodes=1)))
    d.observe(job("10", priority=99), job("11", priority=98))
    again = Scheduler.replay(pool(user_nodes=1), d.sched.policy, d.log)
    assert again.records["10"].account == "physics"
    again.observe([job("10"), job("11")], 20)
    assert {j for j, r in again.records.items() if r.nodes} == {"10"}


def test_an_account_change_alone_moves_the_job_to_its_new_account() -> None:
    """``scontrol update JobId=10 Account=chem``: squeue's line differs in its account
    only. On main the core took the row for unchanged and went on counting the job
    under physics: carol's physics job waited for RSA nodes it was free to take."""
    d = Driver(make_scheduler(pool(account_nodes=1)))
    d.observe(job("10", priority=99))
    assert holders(d.sched) == {"10"}
    d.observe(job("10", account="chem", priority=99), job("12", user="carol", priority=90),
              at=5)
    assert d.sched.records["10"].account == "chem"
    assert holders(d.sched) == {"10", "12"}
    again = Scheduler.replay(pool(account_nodes=1), d.sched.policy, d.log)
    assert again.records["10"].account == "chem"


def test_a_waiting_jobs_limit_message_follows_its_account_while_no_node_is_free() -> None:
    """A job told it waits for its account's limit, moved to another account while every
    RSA node is held: with none free the limits were never judged again, and its comment
    named the old account's limit until a node freed (core/share.py). Judged again on
    what it needs at least, it now reads that it waits for free nodes; moved back, the
    limit again, in the words of the account it has."""
    d = Driver(make_scheduler(pool(n=2, account_nodes=1)))
    # 10 (physics) holds rsa1; 11 (physics) finds rsa2 free but its account at its limit
    dec = d.observe(job("10", priority=99), held(job("11", priority=98)))
    (msg,) = told(dec, "11")
    assert "account physics's jobs hold 1 RSA node" in msg
    # 20 (bob, chem) takes rsa2: no node is free any more
    d.observe(job("10", priority=99), held(job("11", priority=98)),
              job("20", user="bob", account="chem", priority=97), at=5)
    assert holders(d.sched) == {"10", "20"}
    # 11 moves to biology, under no limit it is over: waits for free nodes, says so
    dec = d.observe(job("10", priority=99), held(job("11", account="biology", priority=98)),
                    job("20", user="bob", account="chem", priority=97), at=10)
    (msg,) = told(dec, "11")
    assert msg == ("waits for RSA nodes: not enough RSA nodes are free now (jobs get them in "
                   "priority order); held meanwhile, at most staging.wait_timeout, then it "
                   "reads the PFS")
    assert not told(d.tick(11), "11")  # told once
    # and to chem, whose job 20 holds its one node: the limit again, chem's
    dec = d.observe(job("10", priority=99), held(job("11", account="chem", priority=98)),
                    job("20", user="bob", account="chem", priority=97), at=15)
    (msg,) = told(dec, "11")
    assert "account chem's jobs hold 1 RSA node" in msg and "physics" not in msg


def test_a_limit_is_never_negative() -> None:
    with pytest.raises(ValueError, match="user_nodes must be >= 0"):
        AllocationPolicy(user_nodes=-1)


# ---- per-name values (allocation.user_limits, allocation.account_limits) -----------------

def test_a_named_user_or_account_has_its_own_value_and_the_others_keep_the_one_for_all(
        ) -> None:
    """Issue 33: a big project allowed 3 RSA nodes at once, a student account 1, a user
    with no limit at all (0), everyone else 2. On main a limit was one value for all."""
    policy = AllocationPolicy(
        user_nodes=2, account_nodes=2,
        user_limits={"carol": NamedLimits(nodes=0)},
        account_limits={"bigproj": NamedLimits(nodes=3), "students": NamedLimits(nodes=1)})
    one = Usage(1, GIB, 0)

    def holding(n: int, user: str, account: str) -> list[Holder]:
        return [Holder(str(i), user, account, one) for i in range(n)]

    assert judge(policy, "alice", "bigproj", one, holding(2, "bob", "bigproj")) is None
    over = judge(policy, "alice", "bigproj", one, holding(3, "bob", "bigproj"))
    assert over is not None and not over.for_good
    assert over.reason == ("over a limit: account bigproj's jobs hold 3 RSA nodes of the 3 "
                           "RSA nodes allowed (allocation.account_limits), "
                           "until they give some back")
    student = judge(policy, "dave", "students", one, holding(1, "erin", "students"))
    assert student is not None and "allocation.account_limits" in \
        student.reason
    alone = judge(policy, "dave", "students", Usage(2, 2 * GIB, 0), [])
    assert alone is not None and alone.for_good and alone.reason == (
        "this job alone needs 2 RSA nodes, over the limit of 1 RSA node for account "
        "students (allocation.account_limits)")
    # the others: the value for all
    other = judge(policy, "alice", "physics", one, holding(2, "alice", "chem"))
    assert other is not None and "(allocation.user_nodes)" in other.reason
    # 0 for a name: no limit on that name's own count (its account's still holds)
    assert judge(policy, "carol", "", one, holding(5, "carol", "")) is None
    assert judge(policy, "carol", "students", one, holding(1, "carol", "students")) \
        is not None
    # a name's unset kinds keep the value for all
    mixed = AllocationPolicy(user_stage_ins=1, user_limits={"bob": NamedLimits(nodes=4)})
    staging = judge(mixed, "bob", "", Usage(1, GIB, 1), [Holder("1", "bob", "", Usage(1, GIB,
                                                                                    1))])
    assert staging is not None and "(allocation.user_stage_ins)" in staging.reason
    assert limits_set(AllocationPolicy(user_limits={"bob": NamedLimits(nodes=1)}))
    assert not limits_set(AllocationPolicy(user_limits={"bob": NamedLimits(nodes=0)}))


def test_the_scheduler_holds_a_named_account_to_its_own_value() -> None:
    """The core's allocation decisions use it: students' second job waits (its reason
    names the key), bigproj's third job gets nodes although the value for all is 2."""
    d = Driver(make_scheduler(pool(5, account_nodes=2, account_limits={
        "students": NamedLimits(nodes=1), "bigproj": NamedLimits(nodes=3)})))
    d.observe(job("10", user="s1", account="students", priority=99),
              job("11", user="s2", account="students", priority=98),
              job("20", user="p1", account="bigproj", priority=97),
              job("21", user="p2", account="bigproj", priority=96),
              job("22", user="p3", account="bigproj", priority=95))
    assert holders(d.sched) == {"10", "20", "21", "22"}
    msg = d.sched.records["11"].message
    assert msg.startswith("waits for RSA nodes: over a limit: account students's jobs hold "
                          "1 RSA node of the 1 RSA node allowed (allocation.account_limits)")
    assert len(f"RSA: {msg}") <= COMMENT_MAX  # the job's comment holds it whole
    # a job moved out of the limited account (scontrol update Account=) counts under its
    # new account from the next cycle: 11 moved to bigproj, which is full, still waits
    d.observe(job("10", user="s1", account="students", priority=99),
              job("11", user="s2", account="bigproj", priority=98),
              job("20", user="p1", account="bigproj", priority=97),
              job("21", user="p2", account="bigproj", priority=96),
              job("22", user="p3", account="bigproj", priority=95), at=5)
    assert "11" not in holders(d.sched)
    assert "account bigproj's jobs hold 3 RSA nodes of the 3 RSA nodes allowed " \
        "(allocation.account_limits)" in d.sched.records["11"].message


def test_a_named_limit_that_sets_nothing_or_is_negative_is_refused() -> None:
    with pytest.raises(ValueError, match="sets no limit"):
        NamedLimits()
    with pytest.raises(ValueError, match="nodes must be >= 0"):
        NamedLimits(nodes=-1)


NAMED = """
allocation:
  user_nodes: 2
  user_limits:
    alice: {nodes: 3, capacity: 8G}
  account_limits:
    students: {nodes: 1, stage_ins: 1}
"""


def test_named_limits_load_render_and_show_in_rsad_check() -> None:
    from rsa_scheduler.config.loader import load_config_text

    cfg = load_config_text(POOL_YAML + NAMED)
    policy = cfg.allocation
    assert policy.user_limits == {"alice": NamedLimits(nodes=3, capacity=8 * GIB)}
    assert policy.account_limits == {"students": NamedLimits(nodes=1, stage_ins=1)}
    data = cfg.to_dict()["allocation"]
    assert data["user_limits"] == {"alice": {"nodes": 3, "capacity": "8G"}}
    assert load_config_text(POOL_YAML + yaml.safe_dump({"allocation": data})).allocation \
        == policy
    assert limit_lines(policy) == [
        "limits per user: 2 RSA nodes for all; alice: 3 RSA nodes, 8G of RSA capacity",
        "limits per account: no limit for all; students: 1 RSA node, 1 stage-in"]
    assert limit_lines(AllocationPolicy(user_limits={"carol": NamedLimits(nodes=0)})) == [
        "limits per user: no limit for all; carol: RSA nodes unlimited"]
    assert limit_lines(AllocationPolicy()) == []


@pytest.mark.parametrize(("snippet", "key", "reason"), [
    ("  user_limits:\n    alice: {node: 3}\n", "allocation.user_limits.alice.node",
     "unknown key; did you mean 'nodes'?"),
    ("  user_limits:\n    alice: {nodes: -1}\n", "allocation.user_limits.alice.nodes",
     "must be >= 0, got -1"),
    ("  user_limits:\n    alice: {capacity: lots}\n",
     "allocation.user_limits.alice.capacity", "lots"),
    ("  user_limits:\n    alice: {}\n", "allocation.user_limits.alice",
     "sets no limit: give nodes, capacity or stage_ins (a key left out keeps the value "
     "for all)"),
    ("  user_limits:\n    alice: 3\n", "allocation.user_limits.alice",
     "expected a mapping, got number 3"),
    ("  account_limits:\n    BigProj: {nodes: 3}\n", "allocation.account_limits.BigProj",
     "Slurm keeps account names in lower case: write bigproj"),
    ("  user_limits:\n    1234: {nodes: 3}\n", "allocation.user_limits",
     "key 1234 is not a string"),
    ("  user_limits:\n    \"a b\": {nodes: 3}\n", "allocation.user_limits.a b",
     "expected a user name (no spaces, '/', ':' or ','), got 'a b'"),
    ("  user_limit:\n    alice: {nodes: 3}\n", "allocation.user_limit",
     "unknown key; did you mean 'user_limits'?"),
])
def test_a_bad_named_limit_is_one_line_naming_its_key(snippet: str, key: str,
                                                      reason: str) -> None:
    from rsa_scheduler.config.loader import load_config_text
    from rsa_scheduler.errors import ConfigErrors

    with pytest.raises(ConfigErrors) as e:
        load_config_text(POOL_YAML + "allocation:\n" + snippet, file="site.yaml")
    (issue,) = e.value.issues
    assert issue.key == key, str(issue)
    assert reason in issue.reason, str(issue)
