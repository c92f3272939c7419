"""What rsad's API takes from its callers before it acts on it: the node agent's ``wait``
and ``last_seq``, ``?as=`` of ``/v1/status``, a hook's hostlist of the job's nodes, and a
mount command's secret to a node older than the sealed protocol
(rsa_scheduler.daemon.api). Each was taken as sent: NaN spun an API thread for ever,
``c[1-100000000]`` built 100 million names, a malformed uid or ``last_seq`` answered with
Python's words. MUNGE is the fake of tests/unit/test_api_server.py."""

from __future__ import annotations

import json
import logging
import math
import time
from http import HTTPStatus
from typing import Any

import pytest

from rsa_scheduler.core.hostlist import MAX_NAMES, check_size, size_bound
from rsa_scheduler.daemon.api import AGENT_WAIT_MAX, MAX_UID, ApiError, Caller, Routes
from rsa_scheduler.node.plan import SEALED_ARGV
from tests.unit.test_api_server import SECRET_ARGV, NoJobs, OneMount
from tests.unit.test_api_server import fake_munge as fake_munge  # the autouse fixture

ROOT = Caller(0, "root")
BODY = {"job_id": "7", "node": "c1", "nodes": "c1", "user": "alice"}


class Side(OneMount):
    """A compute-node side that records the wait each agent poll was given."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    def agent(self, *args: Any, **_kw: Any) -> dict[str, Any]:
        self.waits.append(args[4])
        return {"do": "idle", "epoch": "e"}


@pytest.fixture
def side(monkeypatch: pytest.MonkeyPatch) -> Side:
    from rsa_scheduler.daemon import nodeside

    got = Side()
    monkeypatch.setattr(nodeside, "nodeside_of", lambda _registry: got)
    return got


def _refused(routes: Routes, method: str, path: str, body: Any = None) -> ApiError:
    with pytest.raises(ApiError) as e:
        routes.dispatch(ROOT, method, path, body)
    return e.value


@pytest.mark.parametrize("wait", [math.nan, math.inf, -math.inf, -1, "20", None, True])
def test_an_agents_wait_that_is_no_number_of_seconds_is_refused_in_one_line(
        side: Side, wait: Any) -> None:
    """NaN went into the long poll: every comparison with it is false, so the poll never
    timed out and waited on its lock with a timeout of NaN, which returns at once: an API
    thread spinning for ever (found by review). Infinity and negative numbers, and
    anything but a number, are refused too."""
    err = _refused(Routes(NoJobs()), "POST", "/v1/hooks/agent",  # type: ignore[arg-type]
                   {**BODY, "protocol": SEALED_ARGV, "wait": wait})
    assert err.status == HTTPStatus.BAD_REQUEST
    assert str(err).startswith("agent hook: wait takes a number of seconds from 0 to 25")
    assert "\n" not in str(err) and side.waits == []


@pytest.mark.parametrize("last_seq", ["abc", "3", None, 2.9, -1, True, [3]])
def test_an_agents_last_seq_that_is_no_instruction_number_is_refused_in_one_line(
        side: Side, last_seq: Any) -> None:
    """``int()`` of it answered Python's own words (``invalid literal for int() with base
    10: 'abc'``), a 500 (``int(None)``: internal error), or took 2.9 for 2. Now one line
    saying what is taken; the agent's own 0 and 12 go through."""
    err = _refused(Routes(NoJobs()), "POST", "/v1/hooks/agent",  # type: ignore[arg-type]
                   {**BODY, "protocol": SEALED_ARGV, "last_seq": last_seq})
    assert err.status == HTTPStatus.BAD_REQUEST
    assert str(err).startswith("agent hook: last_seq takes the number of the last "
                               "instruction the node agent carried out, a whole number "
                               "from 0, not "), str(err)
    assert "\n" not in str(err) and side.waits == []
    routes = Routes(NoJobs())  # type: ignore[arg-type]
    for ok in (0, 12):
        routes.dispatch(ROOT, "POST", "/v1/hooks/agent",
                        {**BODY, "protocol": SEALED_ARGV, "last_seq": ok})
    assert len(side.waits) == 2


def test_an_agents_wait_is_held_at_most_the_documented_maximum(side: Side) -> None:
    routes = Routes(NoJobs())  # type: ignore[arg-type]
    for wait in (0, 5.5, 25, 600):
        routes.dispatch(ROOT, "POST", "/v1/hooks/agent",
                        {**BODY, "protocol": SEALED_ARGV, "wait": wait})
    routes.dispatch(ROOT, "POST", "/v1/hooks/agent", {**BODY, "protocol": SEALED_ARGV})
    assert side.waits == [0, 5.5, 25, AGENT_WAIT_MAX, 20.0]


@pytest.mark.parametrize("uid", ["²", "1" * 5000, str(MAX_UID + 1), "99999999999", "-1",
                                 "0x10"])
def test_as_takes_a_uid_and_says_which(uid: str) -> None:
    """``?as=`` with a digit Python's int() refuses (``²``), 5000 digits, or a uid past
    uid_t answered 500 or Python's own words; now a 400 saying what is taken."""
    err = _refused(Routes(NoJobs()), "GET", f"/v1/status?as={uid}")  # type: ignore[arg-type]
    assert err.status == HTTPStatus.BAD_REQUEST
    assert str(err).startswith(f"as= takes a uid, a number from 0 to {MAX_UID}, not ")


def test_size_bound_counts_without_expanding() -> None:
    assert [size_bound(t) for t in ("c1", "c[1-4]", "c[1-4]-[1-2]", "a,b,c[1-3,5]",
                                    "c[1-10/2]", "c[01-10]")] == [1, 4, 8, 6, 5, 10]
    start = time.monotonic()
    assert size_bound("c[1-100000000]") == 100_000_000
    assert size_bound("c[1-100000000]!c[1-100000000]") >= 100_000_000  # an upper bound
    assert time.monotonic() - start < 0.1
    check_size(f"c[1-{MAX_NAMES}]")
    with pytest.raises(ValueError, match=rf"names more than {MAX_NAMES} nodes"):
        check_size(f"c[1-{MAX_NAMES + 1}]")


@pytest.mark.parametrize("hook", ["prolog", "agent", "mounted", "epilog",
                                  "prolog_slurmctld"])
def test_a_hooks_hostlist_is_bounded_before_it_is_expanded(side: Side, hook: str) -> None:
    """A hook's ``nodes`` went to ClusterShell's NodeSet as sent: ``c[1-100000000]`` from
    root or SlurmUser built a hundred million names in rsad (minutes, gigabytes; found by
    review). Refused with one line before anything expands it."""
    routes = Routes(NoJobs())  # type: ignore[arg-type]
    start = time.monotonic()
    err = _refused(routes, "POST", f"/v1/hooks/{hook}",
                   {**BODY, "nodes": "c[1-100000000]", "protocol": SEALED_ARGV})
    assert time.monotonic() - start < 1
    assert err.status == HTTPStatus.BAD_REQUEST
    assert f"names more than {MAX_NAMES} nodes" in str(err) and "\n" not in str(err)


def test_the_node_side_expands_no_hostlist_over_the_bound() -> None:
    from rsa_scheduler.daemon.nodeside import NodeSide

    side = NodeSide(backend_for=lambda _ctx: (_ for _ in ()).throw(AssertionError()))
    with pytest.raises(ValueError, match="names more than"):
        side.expect("7", f"c[1-{MAX_NAMES + 1}]")
    with pytest.raises(ValueError, match="names more than"):
        side.agent("7", "c1", f"c[1-{MAX_NAMES + 1}]", 0, wait=0)
    side.expect("7", "c[1-4]")
    assert side._jobs["7"].nodes == frozenset({"c1", "c2", "c3", "c4"})


def test_an_old_prolog_from_a_node_that_takes_sealed_commands_gets_no_secret(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A node older than protocol 3 gets the mount command's secret in the clear (it
    cannot open a sealed one): the rolling upgrade's window, said in rsad's log at each
    such answer. A node whose hooks spoke protocol 3 since rsad started has the package
    that seals; its Prolog, run from that package at every job start, speaks 3 too, so a
    Prolog request of an older protocol from it (one a squatter on rsad's port kept from
    before, or a downgraded package) is refused: no secret. Its old node agent (a job
    started before the node's upgrade) still gets it, as the upgrade order needs."""
    from rsa_scheduler.daemon import nodeside

    monkeypatch.setattr(nodeside, "nodeside_of", lambda _registry: OneMount())
    routes = Routes(NoJobs())  # type: ignore[arg-type]
    caplog.set_level(logging.WARNING, logger="rsa_scheduler.daemon.nodehooks")
    old = routes.dispatch(ROOT, "POST", "/v1/hooks/prolog", {**BODY, "protocol": 2})
    assert old["client_argv"] == SECRET_ARGV  # c1 never spoke 3: not upgraded yet
    assert "job 7: its RAMDISK's mount command went to c1 with its secret in the clear: " \
           "c1 speaks hook protocol 2" in caplog.text
    new = routes.dispatch(ROOT, "POST", "/v1/hooks/agent", {**BODY, "protocol": 3})
    assert "client_argv" not in new and "sealed_argv" in new
    caplog.clear()
    err = _refused(routes, "POST", "/v1/hooks/prolog", {**BODY, "job_id": "12",
                                                         "protocol": 2})
    assert err.status == HTTPStatus.CONFLICT
    assert str(err).startswith("c1's hooks spoke hook protocol 3 or later before, this "
                               "Prolog 2: refused")
    assert "5ecre7" not in json.dumps(str(err)) and "5ecre7" not in caplog.text
    agent = routes.dispatch(ROOT, "POST", "/v1/hooks/agent", {**BODY, "protocol": 2})
    assert agent["client_argv"] == SECRET_ARGV  # an agent started before the upgrade
    c2 = routes.dispatch(ROOT, "POST", "/v1/hooks/prolog",
                         {**BODY, "node": "c2", "protocol": 2})
    assert c2["client_argv"] == SECRET_ARGV  # another node, not upgraded yet
    # a Prolog holding its job's start while its node is upgraded polls on in its own
    # protocol: served as before (the rolling upgrade, jobs running)
    routes.dispatch(ROOT, "POST", "/v1/hooks/prolog",
                    {**BODY, "job_id": "8", "node": "c2", "protocol": 2})
    routes.dispatch(ROOT, "POST", "/v1/hooks/agent",  # c2 upgraded: another job's agent
                    {**BODY, "job_id": "9", "node": "c2", "protocol": 3})
    again = routes.dispatch(ROOT, "POST", "/v1/hooks/prolog",
                            {**BODY, "job_id": "8", "node": "c2", "protocol": 2})
    assert again["client_argv"] == SECRET_ARGV
    err = _refused(routes, "POST", "/v1/hooks/prolog",
                   {**BODY, "job_id": "10", "node": "c2", "protocol": 2})
    assert err.status == HTTPStatus.CONFLICT
