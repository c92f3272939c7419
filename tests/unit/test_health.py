"""RSA-node health: the probe parser, the pure verdict, and the loop's bookkeeping (only
ever undoing what it did itself)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from rsa_scheduler.core.policy import NodeState
from rsa_scheduler.daemon.health import HealthLoop, Probe, Thresholds, parse_probe, verdict
from rsa_scheduler.runner import Completed

LIMITS = Thresholds(down_after=2, min_free=1 << 30, max_skew=30.0)
GOOD = Probe(True, free=8 << 30, skew=0.2)
BAD = Probe(False, error="rsa2: cannot connect to 10.0.0.2:22: timed out")


def test_probe_output_is_parsed_with_the_round_trip_halved() -> None:
    p = parse_probe("free 2147483648\nclock 1010.5\nprobe ok\n", sent=1000.0, received=1001.0)
    assert p.ok and p.free == 2147483648 and p.skew == pytest.approx(10.0)
    assert parse_probe("free -1\nclock 5\nprobe ok\n", 5, 5).free is None
    cut = parse_probe("free 1\n", 0, 0)
    assert not cut.ok and "incomplete" in cut.error


def test_one_failed_probe_is_not_enough_two_take_the_node_down() -> None:
    assert verdict([GOOD, BAD], NodeState.UP, False, LIMITS) is None
    state, why = verdict([GOOD, BAD, BAD], NodeState.UP, False, LIMITS) or (None, "")
    assert state is NodeState.DOWN and "2 probes in a row" in why and "timed out" in why


def test_low_space_and_a_wrong_clock_drain() -> None:
    low = Probe(True, free=100 << 20, skew=0.0)
    state, why = verdict([low], NodeState.UP, False, LIMITS) or (None, "")
    assert state is NodeState.DRAINED and "only 100M free" in why and "needs 1G" in why
    skewed = Probe(True, free=8 << 30, skew=-95.0)
    state, why = verdict([skewed], NodeState.UP, False, LIMITS) or (None, "")
    assert state is NodeState.DRAINED and "-95s" in why


def test_a_node_the_loop_took_out_comes_back_an_operators_drain_stays() -> None:
    assert verdict([BAD, BAD, GOOD], NodeState.DOWN, True, LIMITS) == (
        NodeState.UP, "health: healthy again")
    assert verdict([GOOD], NodeState.DRAINED, False, LIMITS) is None
    assert verdict([BAD, BAD], NodeState.DRAINED, False, LIMITS) is None
    assert verdict([GOOD], NodeState.UP, False, LIMITS) is None


class Hosts:
    """name -> a host whose probe answers from a script."""

    def __init__(self, answers: Mapping[str, list[str | Exception]]) -> None:
        self.answers = {k: list(v) for k, v in answers.items()}

    def __getitem__(self, name: str) -> Hosts:
        self.current = name
        return self

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.answers)

    def run(self, argv: Sequence[str], **_kw: object) -> Completed:
        ans = self.answers[self.current].pop(0)
        if isinstance(ans, Exception):
            raise ans
        return Completed(tuple(argv), 0, ans, "", 0.01)


def test_the_loop_moves_nodes_through_the_daemon_and_remembers_what_it_did() -> None:
    from rsa_scheduler.hosts import HostError

    ok = "free 9000000000\nclock 100.0\nprobe ok\n"
    hosts = Hosts({"rsa1": [ok, ok, ok, ok], "rsa2": [HostError("down"), HostError("down"),
                                                      ok, ok]})
    states = {"rsa1": NodeState.UP, "rsa2": NodeState.UP}
    moves: list[tuple[str, NodeState, str]] = []

    def set_state(node: str, state: NodeState, reason: str) -> None:
        states[node] = state
        moves.append((node, state, reason))

    loop = HealthLoop(hosts, {"rsa1": "/p", "rsa2": "/p"},  # type: ignore[arg-type]
                      state_of=states.__getitem__, set_state=set_state, limits=LIMITS,
                      clock=lambda: 100.0)
    loop.round()
    assert moves == []
    loop.round()
    assert [(n, s) for n, s, _ in moves] == [("rsa2", NodeState.DOWN)]
    assert loop.taken_out == {"rsa2"}
    loop.round()
    assert moves[-1][:2] == ("rsa2", NodeState.UP) and loop.taken_out == set()
    states["rsa1"] = NodeState.DRAINED  # an operator's drain: never undone
    loop.round()
    assert states["rsa1"] is NodeState.DRAINED and len(moves) == 2


def test_a_node_that_answers_again_is_cleaned_before_it_is_used() -> None:
    """Issue 13: a teardown skipped the node while it was down; what it left there (RAMDISK
    servers, mounts, pool files) is cleaned before the node is up again; if that fails the
    node stays out, with the reason."""
    moved: list[tuple[str, NodeState, str]] = []
    state = {"rsa1": NodeState.DOWN}
    answers = ["cannot reach rsa1 to clean job 7's RAMDISK", None]
    cleaned: list[str] = []

    def before_up(node: str) -> str | None:
        cleaned.append(node)
        return answers.pop(0)

    def set_state(node: str, st: NodeState, why: str) -> None:
        moved.append((node, st, why))
        state[node] = st

    loop = HealthLoop({}, {}, state_of=state.__getitem__, set_state=set_state,
                      limits=LIMITS, taken_out={"rsa1"}, before_up=before_up)
    loop.check("rsa1", GOOD)
    assert state["rsa1"] is NodeState.DOWN and cleaned == ["rsa1"]
    assert moved == [("rsa1", NodeState.DOWN, "cannot reach rsa1 to clean job 7's RAMDISK")]
    loop.check("rsa1", GOOD)
    assert str(state["rsa1"]) == "up" and cleaned == ["rsa1", "rsa1"]


def test_a_pool_users_can_fill_drains_the_node() -> None:
    shared = Probe(True, free=8 << 30, skew=0.0,
                   shared=("/dev/shm/rsa is not a mount point: it shares the filesystem "
                           "of /dev/shm (users can write there: /dev/shm, /tmp, /var/tmp, "
                           "...)",))
    state, why = verdict([shared], NodeState.UP, False, LIMITS) or (None, "")
    assert state is NodeState.DRAINED
    assert why.startswith("health: users can fill its pool: /dev/shm/rsa is not a mount "
                          "point") and why.endswith("(rsa nodes check)")
    # fixed (its own tmpfs mounted there): the loop brings back what it took out
    assert verdict([shared, GOOD], NodeState.DRAINED, True, LIMITS) == (
        NodeState.UP, "health: healthy again")


def test_the_real_probe_finds_a_pool_on_dev_shm_shared() -> None:
    import os
    from pathlib import Path

    from rsa_scheduler.daemon.health import probe_argv
    from rsa_scheduler.hosts import LocalHost

    pool = Path("/dev/shm") / f"rsa-probe-test-{os.getpid()}"
    pool.mkdir(mode=0o700)
    try:
        done = LocalHost().run(probe_argv(str(pool)), timeout=30)
    finally:
        pool.rmdir()
    p = parse_probe(done.stdout, 0.0, 0.0)
    assert p.ok and p.free is not None and p.free > 0
    assert len(p.shared) == 1 and "shares the filesystem of /dev/shm" in p.shared[0]


def test_the_loop_hands_each_nodes_real_free_space_to_the_allocator(
        caplog: pytest.LogCaptureFixture) -> None:
    """The probe's statvfs figure reaches the pure allocator with the node's epoch from
    before the probe: a node filled by something else is counted short, and logged once."""
    from rsa_scheduler.core.allocator import Pool, Request, RsaNode
    from rsa_scheduler.core.policy import AllocationPolicy, Tier

    pool = Pool([RsaNode("rsa1", Tier.RAM, 4 << 30), RsaNode("rsa2", Tier.RAM, 4 << 30)],
                AllocationPolicy(ratio=1, max_nodes=2, max_request=2))
    filled = "free 1073741824\nclock 100.0\nprobe ok\n"
    empty = "free 4294967296\nclock 100.0\nprobe ok\n"
    hosts = Hosts({"rsa1": [filled, filled, empty], "rsa2": [empty, empty, empty]})

    def observe(node: str, free: int | None, epoch: int) -> str | None:
        pool.observe_free(node, free, epoch)
        return pool.short().get(node)

    loop = HealthLoop(hosts, {"rsa1": "/p", "rsa2": "/p"},  # type: ignore[arg-type]
                      state_of=pool.state, set_state=lambda *_a: None, limits=LIMITS,
                      epoch_of=pool.epoch, observe=observe, clock=lambda: 100.0)
    with caplog.at_level("INFO", logger="rsa_scheduler.daemon.health"):
        loop.round()
        loop.round()
        assert pool.usable("rsa1") == 1 << 30
        assert str(pool.allocate(Request("1", compute_nodes=1))) == "rsa2"
        pool.release("1")
        loop.round()
    assert pool.usable("rsa1") == 4 << 30
    said = [r.getMessage() for r in caplog.records]
    assert said == ["RSA node rsa1: 1G of its 4G pool free: something outside the RSA "
                    "uses it; not handed out", "RSA node rsa1: its pool is free again"]


def test_the_probe_counts_a_pools_standby_servers_as_free_and_nothing_else() -> None:
    """A backend's standby server in the pool (fs/moosefs.py: a chunkserver started ahead,
    its files a few KB) is the RSA's own: the probe counts it free, so an idle node with a
    standby is neither "something outside the RSA uses it" nor ranked below the others;
    anything else in the pool (a RAMDISK's leftovers) still counts against it. On a tmpfs
    of its own (a mount namespace of the test's)."""
    import subprocess

    from rsa_scheduler.daemon.health import probe_argv

    script = r"""set -e
p=$(mktemp -d); mount -t tmpfs -o size=64m,mode=0700 rsa-probe "$p"
mkdir -p "$p/rsa-mfs-.standby-0a1b2c/chunks"
head -c 1048576 /dev/zero > "$p/rsa-mfs-.standby-0a1b2c/mfschunkserver.log"
sh -c "$1" "$p" "$2"
mkdir "$p/rsa-mfs-job1-c1"; head -c 1048576 /dev/zero > "$p/rsa-mfs-job1-c1/left"
sh -c "$1" "$p" "$2"
umount "$p"; rmdir "$p"
"""
    _sh, _c, probe, _pool, check = probe_argv("POOL")
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                           script, "sh", probe, check], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    first, second = (parse_probe(out + "probe ok\n", 0.0, 0.0)
                     for out in done.stdout.split("probe ok\n")[:2])
    assert first.free == 64 << 20  # the standby's MiB counted free
    assert second.free == 63 << 20  # a RAMDISK's leftover is not
