"""A fair share of the RSA nodes per user and per array (issue 39, core/share.py).

On d0d1991 every pending task of a big array next to start got RSA nodes at once, with
no share per user or per array: other users' on-deck jobs ran from the PFS.
"""

from __future__ import annotations

import pytest

from rsa_scheduler.core.allocator import Pool, RsaNode
from rsa_scheduler.core.policy import AllocationPolicy, Tier
from rsa_scheduler.core.scheduler import Scheduler
from rsa_scheduler.core.share import array_of
from tests.unit.corekit import GIB, Driver, make_scheduler, make_spec, obs

pytestmark = pytest.mark.unit


def pool(user_share: float = 1.0, array_share: float = 1.0, n: int = 4) -> Pool:
    nodes = [RsaNode(f"rsa{i}", Tier.RAM, 2 * GIB) for i in range(1, n + 1)]
    return Pool(nodes, AllocationPolicy(ratio=2, min_nodes=1, max_nodes=4, max_request=4,
                                        user_share=user_share, array_share=array_share))


def holders(sched: Scheduler) -> set[str]:
    return {j for j, r in sched.records.items() if r.nodes}


def test_an_arrays_tasks_do_not_take_every_rsa_node() -> None:
    d = Driver(make_scheduler(pool(array_share=0.5)))
    tasks = [obs(f"100_{t}", "PENDING", "Resources", make_spec(), nodes=1) for t in range(4)]
    other = obs("200", "PENDING", "Resources", make_spec(), nodes=1, user="bob")
    d.observe(*tasks, other)
    assert holders(d.sched) == {"100_0", "100_1", "200"}  # 2 of 4 nodes for the array
    assert d.sched.share.held_by_array("100") == 2
    # a task's RAMDISK goes: the next task gets nodes at the next try
    d.observe(obs("100_0", "CANCELLED"), *tasks[1:], other, at=10)  # the whole queue
    d.answer_all("100_0")
    d.tick(11)
    assert holders(d.sched) == {"100_1", "100_2", "200"}


def test_one_user_holds_at_most_their_share_and_others_get_nodes() -> None:
    d = Driver(make_scheduler(pool(user_share=0.5)))
    mine = [obs(str(j), "PENDING", "Resources", make_spec(), nodes=1, priority=100 - j)
            for j in range(10, 14)]
    d.observe(*mine, obs("20", "PENDING", "Resources", make_spec(), nodes=1, user="bob",
                         priority=1))
    assert holders(d.sched) == {"10", "11", "20"}
    assert d.sched.share.held_by_user("alice") == 2 and d.sched.share.held_by_user("bob") == 1
    # the share survives a restart (replay of the log)
    again = Scheduler.replay(pool(user_share=0.5), d.sched.policy, d.log)
    assert again.share.held_by_user("alice") == 2


def test_a_users_first_job_is_never_refused_by_the_share() -> None:
    d = Driver(make_scheduler(pool(user_share=0.25)))
    d.observe(obs("10", "PENDING", "Resources", make_spec(), nodes=8))  # 4 RSA nodes
    assert d.sched.records["10"].nodes == "rsa[1-4]"


def test_array_of() -> None:
    assert array_of("123_4") == "123" and array_of("123") == ""


@pytest.mark.parametrize("share", [0.0, 1.5, float("nan")])
def test_a_share_is_a_fraction(share: float) -> None:
    with pytest.raises(ValueError, match="share must be a fraction"):
        AllocationPolicy(user_share=share)
