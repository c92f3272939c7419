"""rsad's service loop and API routes, with a scripted Slurm port and instant executors.

These test the daemon's own logic (write-ahead commit, dispatch, restart, hooks,
authorisation); the same code runs against the real lab in tests/integration.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from http import HTTPStatus
from pathlib import Path
from typing import Any

import pytest
from ClusterShell.NodeSet import NodeSet

from rsa_scheduler.core.actions import Action, ActionKind
from rsa_scheduler.core.directives import DirectiveSpec, with_hold
from rsa_scheduler.core.events import Event
from rsa_scheduler.core.policy import EarlyStart, NodeState, StagingPolicy
from rsa_scheduler.core.scheduler import Scheduler
from rsa_scheduler.core.states import TERMINAL, JobState, RsaState
from rsa_scheduler.daemon.api import ApiError, Caller, Routes
from rsa_scheduler.daemon.dispatch import Running
from rsa_scheduler.daemon.executors import ActionContext, BusyError, PermanentError, Registry
from rsa_scheduler.daemon.service import Daemon, Request
from rsa_scheduler.hosts import CancelToken
from rsa_scheduler.slurm.parse import JobInfo, QueueRow
from rsa_scheduler.slurm.port import SlurmPort
from rsa_scheduler.store import JobRow, Store
from tests.unit.corekit import make_action, make_pool

SPEC = DirectiveSpec(data_in="/pfs/in", data_out="/pfs/out")


class ScriptedSlurm:
    def __init__(self) -> None:
        self.rows: list[QueueRow] = []
        self.calls: list[tuple[str, str]] = []
        self.idle = {"debug": 4}
        self.tasks: dict[str, tuple[str, str]] = {}  # own job id -> (array job, task)
        self.users: dict[str, str] = {}  # own job id -> its user, when not alice

    def set(self, job: str, state: str, reason: str = "None",
            spec: DirectiveSpec | None = SPEC, hold: int | None = None) -> None:
        comment = spec.to_admin_comment() if spec else None
        if comment and hold is not None:
            comment = with_hold(comment, hold)
        self.rows = [r for r in self.rows if r.job_id != job] + [QueueRow(
            job, state, reason, 10, 2, "alice", comment)]

    def job_info(self, job_id: str) -> JobInfo:
        self.calls.append(("job_info", job_id))
        row = next((r for r in self.rows if r.job_id == job_id), None)
        array, task = self.tasks.get(job_id, (job_id, "N/A"))
        return JobInfo(job_id=job_id, array_job_id=array, array_task_id=task,
                       user=self.users.get(job_id, row.user if row else "alice"),
                       partition="debug",
                       admin_comment=(row.admin_comment or "") if row else "")

    def hold(self, job_id: str, seconds: int, admin_comment: str) -> None:
        self.calls.append(("hold", f"{job_id}:{seconds}:{admin_comment}"))
        row = next(r for r in self.rows if r.job_id == job_id)
        self.rows = [r for r in self.rows if r.job_id != job_id] + [QueueRow(
            job_id, "PENDING", "BeginTime", row.priority, row.num_nodes, row.user,
            admin_comment)]

    def idle_nodes(self) -> dict[str, int]:
        return dict(self.idle)

    def pending_jobs(self) -> list[tuple[str, int, str, str]]:
        return [(r.job_id, r.num_nodes, r.reason, "debug") for r in self.rows
                if r.state == "PENDING"]

    def release_hold(self, job_id: str, admin_comment: str) -> None:
        self.calls.append(("release_hold", f"{job_id}:{admin_comment}"))
        row = next(r for r in self.rows if r.job_id == job_id)
        # Slurm: begin time now; until its next scheduling pass it may still say BeginTime
        self.rows = [r for r in self.rows if r.job_id != job_id] + [QueueRow(
            job_id, row.state, row.reason, row.priority, row.num_nodes, row.user,
            admin_comment)]

    def queue(self) -> list[QueueRow]:
        return list(self.rows)

    def batch_script(self, job_id: str) -> str:
        return "#!/bin/sh\n#RSA_DATA_IN /pfs/in\n"

    def lock_original(self, job_id: str) -> str:
        return "normal"

    def lock_in(self, job_id: str) -> None:
        self.calls.append(("lock_in", job_id))

    def unlock(self, job_id: str, original: str = "") -> str:
        self.calls.append(("unlock", f"{job_id}:{original}"))
        return f"QOS {original} restored"

    def set_comment(self, job_id: str, text: str) -> None:
        self.calls.append(("comment", text))

    def drain_nodes(self, nodes: Sequence[str], reason: str) -> None:
        self.calls.append(("drain", f"{','.join(nodes)}:{reason}"))


def instant_registry(seen: list[str], fail: set[ActionKind] | None = None) -> Registry:
    reg = Registry()
    for kind in ActionKind:
        def run(ctx: ActionContext, kind: ActionKind = kind) -> Mapping[str, Any]:
            seen.append(ctx.action.id)
            if fail and kind in fail:
                raise PermanentError(f"{kind.value} refused")
            return {"mount": {"fs_id": "x"}} if kind is ActionKind.BUILD_FS else {}
        reg.register(kind, run)
    return reg


def with_slurm(reg: Registry, slurm: SlurmPort) -> Registry:
    from rsa_scheduler.daemon.wiring import slurm_executors

    slurm_executors(reg, slurm)
    return reg


def make_daemon(tmp_path: Path, slurm: SlurmPort, seen: list[str],
                fail: set[ActionKind] | None = None) -> Daemon:
    store = Store.open(tmp_path / "rsa.db", durability="normal")
    clock = iter(float(t) for t in range(1000, 10**6))
    d = Daemon(Scheduler(make_pool(), StagingPolicy()), slurm=slurm, store=store,
               registry=with_slurm(instant_registry(seen, fail), slurm), workers=2, poll_interval=0,
               clock=lambda: next(clock))
    d.start()
    return d


def until(cond: Callable[[], bool], timeout: float = 30.0) -> bool:
    """Poll ``cond`` until it holds or ``timeout`` seconds pass (a loaded CI machine may
    take seconds to run a worker thread: a count of short sleeps gave up too soon)."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def drained_until(d: Daemon, cond: Callable[[], bool], timeout: float = 30.0) -> bool:
    """Drain ``d``'s loop until ``cond`` holds or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        d.drain(timeout=0.02)
    return True


def nodeside_daemon(tmp_path: Path, fail: set[ActionKind] | None = None,
                    clock: Callable[[], float] | None = None) -> tuple[Daemon, ScriptedSlurm]:
    """A started daemon whose compute-node side (daemon/nodeside.py) answers the node
    hooks, its other actions instant (``fail`` failing), on a scripted Slurm."""
    from rsa_scheduler.daemon.nodeside import NodeSide

    slurm = ScriptedSlurm()
    reg = with_slurm(instant_registry([], fail), slurm)
    NodeSide(backend_for=lambda _ctx: (None, None)).register(reg)  # type: ignore[arg-type,return-value]
    store = Store.open(tmp_path / "rsa.db", durability="normal")
    d = Daemon(Scheduler(make_pool(), StagingPolicy()), slurm=slurm, store=store,
               registry=reg, workers=2, poll_interval=0, clock=clock or time.time)
    d.start()
    return d, slurm


def settle(d: Daemon) -> None:
    """Let workers finish and the loop handle every outcome."""
    for _ in range(400):
        # a worker may wait for the loop (a milestone): drain while waiting for it
        wait_futures([r.future for r in d.running.values()], timeout=0.05)
        if d.drain(timeout=0.05) == 0 and not d.running:
            return
    raise AssertionError("daemon did not settle")


def locked_in_daemon(tmp_path: Path) -> tuple[Daemon, ScriptedSlurm, list[str]]:
    """A started daemon whose job 7 (alice) is staged and locked in; the action ids it
    ran so far."""
    slurm = ScriptedSlurm()
    seen: list[str] = []
    d = make_daemon(tmp_path, slurm, seen)
    slurm.set("7", "PENDING", "Resources")
    d.poll()
    settle(d)
    assert d.sched.records["7"].rsa_state.value == "locked-in"
    return d, slurm, seen


def test_poll_commits_before_dispatch_and_runs_to_locked_in(tmp_path: Path) -> None:
    slurm = ScriptedSlurm()
    seen: list[str] = []
    d = make_daemon(tmp_path, slurm, seen)
    slurm.set("7", "PENDING", "Resources")
    d.poll()
    settle(d)
    rec = d.sched.records["7"]
    assert rec.rsa_state.value == "locked-in"
    assert ("lock_in", "7") in slurm.calls
    assert d.facts["7"]["lock_orig"] == {"cycle": "1", "value": "normal"}
    assert d.facts["7"]["mount"] == {"fs_id": "x"}
    row = d.store.job("7")
    assert row is not None and row.rsa_state == "locked-in" and row.user == "alice"
    outcomes = [e for e in d.store.events("7") if e.name == "action.outcome"]
    assert [o.context["action"] for o in outcomes] == [*seen, "7/1/lock-in/4"]


def test_untracked_jobs_never_reach_the_log(tmp_path: Path) -> None:
    slurm = ScriptedSlurm()
    seen: list[str] = []
    d = make_daemon(tmp_path, slurm, seen)
    slurm.set("8", "PENDING", "Resources", spec=None)
    d.poll()
    # the log holds only the mode rsad started in (rsad.mode, on the pool stream)
    assert [(e.job_id, e.name) for e in d.store.events()] == [("@pool", "rsad.mode")]
    assert seen == []


def test_restart_reissues_outstanding_actions_with_the_same_ids(tmp_path: Path) -> None:
    slurm = ScriptedSlurm()
    seen: list[str] = []
    d = make_daemon(tmp_path, slurm, seen)
    slurm.set("7", "PENDING", "Resources")
    d.poll()  # build-fs dispatched; we "crash" before handling its outcome
    first = d.sched.records["7"].pending
    assert first is not None
    d.shutdown()
    d.store.close()
    seen2: list[str] = []
    d2 = make_daemon(tmp_path, slurm, seen2)
    assert d2.sched.records["7"].pending == first
    settle(d2)
    assert seen2[0] == first.id  # re-issued, same id: executors are idempotent on it
    assert d2.sched.records["7"].rsa_state.value == "locked-in"


def test_hook_event_moves_a_job_without_waiting_for_the_poll(tmp_path: Path) -> None:
    slurm = ScriptedSlurm()
    seen: list[str] = []
    d = make_daemon(tmp_path, slurm, seen)
    slurm.set("7", "PENDING", "Resources")
    d.poll()
    settle(d)
    polled = d.clock()  # a poll starts (its squeue runs) ...
    d.submit("hook", {"hook": "prolog_slurmctld", "job_id": "7"})  # ... a hook arrives
    d.drain()
    assert d.sched.records["7"].job_state is JobState.RUNNING
    # the hook is stamped by the daemon's own clock (not the wall clock: this test's clock
    # is ~1000 s after the epoch), so the poll whose squeue ran before it must not drag
    # the job back to pending
    assert polled < d._hook_seen["7"] < polled + 1000
    assert d._observation(slurm.rows[0], polled) is None


def test_refused_stage_in_declines_and_tells_the_user(tmp_path: Path) -> None:
    slurm = ScriptedSlurm()
    seen: list[str] = []
    d = make_daemon(tmp_path, slurm, seen, fail={ActionKind.STAGE_IN})
    slurm.set("7", "PENDING", "Resources")
    d.poll()
    settle(d)
    rec = d.sched.records["7"]
    # released, and still on-deck: the next allocation attempt sees it was declined
    assert rec.declined and rec.rsa_state.value == "declined"
    assert any(c == ("comment", "RSA: refused, no retry: "
                     "job uses the PFS: stage-in refused") for c in slurm.calls), slurm.calls


def test_missing_executor_is_a_failure_not_a_success(tmp_path: Path) -> None:
    slurm = ScriptedSlurm()
    store = Store.open(tmp_path / "rsa.db", durability="normal")
    d = Daemon(Scheduler(make_pool(), StagingPolicy(fs_build_attempts=1)), slurm=slurm,
               store=store, registry=Registry(), workers=1, poll_interval=0)
    d.start()
    slurm.set("7", "PENDING", "Resources")
    d.poll()
    settle(d)
    outcome = next(e for e in store.events("7") if e.name == "action.outcome")
    assert outcome.context["result"] == "failed"
    assert "rsad cannot build-fs: check the filesystem" in outcome.context["message"]


# ---- API authorisation -----------------------------------------------------------------

@contextlib.contextmanager
def serving(d: Daemon) -> Iterator[Routes]:
    """The daemon's loop in a thread, for API calls that wait for it."""
    stop = threading.Event()
    loop = threading.Thread(target=lambda: [d.drain(0.05) for _ in iter(stop.is_set, True)],
                            daemon=True)
    loop.start()
    try:
        yield Routes(d)
    finally:
        stop.set()
        loop.join(5)


@pytest.fixture
def routes(tmp_path: Path) -> Iterator[Routes]:
    slurm = ScriptedSlurm()
    seen: list[str] = []
    d = make_daemon(tmp_path, slurm, seen)
    slurm.set("7", "PENDING", "Resources")
    d.poll()
    settle(d)
    with serving(d) as r:
        yield r


ALICE, BOB, ROOT = Caller(1001, "alice"), Caller(1002, "bob"), Caller(0, "root")


def test_users_see_only_their_own_jobs(routes: Routes) -> None:
    assert [j["job_id"] for j in routes.dispatch(ALICE, "GET", "/v1/jobs", None)["jobs"]] == ["7"]
    assert routes.dispatch(BOB, "GET", "/v1/jobs", None)["jobs"] == []
    with pytest.raises(ApiError, match="not tracked"):
        routes.dispatch(BOB, "GET", "/v1/jobs/7", None)
    assert routes.dispatch(ROOT, "GET", "/v1/jobs/7", None)["user"] == "alice"


def test_another_users_commands_are_refused(routes: Routes) -> None:
    with pytest.raises(ApiError, match="not tracked"):
        routes.dispatch(BOB, "POST", "/v1/jobs/7/command", {"command": "cancel-staging"})
    with pytest.raises(ApiError, match="not allowed for alice"):
        routes.dispatch(ALICE, "POST", "/v1/jobs/7/command", {"command": "discard"})
    with pytest.raises(ApiError, match="root or SlurmUser"):
        routes.dispatch(ALICE, "POST", "/v1/hooks/prolog_slurmctld", {"job_id": "7"})
    with pytest.raises(ApiError, match="may drain"):
        routes.dispatch(ALICE, "POST", "/v1/nodes/rsa1/state", {"state": "drained"})
    out = routes.dispatch(ALICE, "POST", "/v1/jobs/7/command", {"command": "cancel-staging"})
    assert out["rsa_state"] in TERMINAL | {RsaState.TEARING_DOWN}


def test_a_command_is_judged_against_the_jobs_user_when_it_is_carried_out(
        routes: Routes, monkeypatch: pytest.MonkeyPatch) -> None:
    """The API looks at the job (bob's then) and the loop carries the command out a
    moment later: a cycle in between may have given the id to alice's job (Slurm lost its
    state, or its ids wrapped). bob's cancel-staging never reaches alice's job (found by
    review: it released her RSA nodes)."""
    before = routes.daemon.sched.records["7"].rsa_state
    assert before not in TERMINAL
    monkeypatch.setattr(routes, "_visible", lambda caller, job: {"job_id": job,
                                                                  "user": caller.user})
    with pytest.raises(ApiError, match="job 7 is not tracked by the RSA") as refused:
        routes.dispatch(BOB, "POST", "/v1/jobs/7/command", {"command": "cancel-staging"})
    assert refused.value.status == 404
    assert routes.daemon.sched.records["7"].rsa_state is before


def test_a_command_by_an_array_tasks_own_job_id_acts_on_that_task(tmp_path: Path) -> None:
    """``rsa job 131`` of array task 127_4's own job id shows the task (the match
    slurmctld's hook taught rsad); ``rsa cancel-staging 131`` was answered ``job 131 is
    not tracked by the RSA`` (found by review: the API looked the task up by its own id,
    then sent the command for the id as typed). Another user's stays "not tracked"."""
    slurm = ScriptedSlurm()
    d = make_daemon(tmp_path, slurm, [])
    slurm.set("127_4", "PENDING", "Resources")
    d.poll()
    settle(d)
    d.aliases["131"] = "127_4"
    with serving(d) as routes:
        assert routes.dispatch(ALICE, "GET", "/v1/jobs/131", None)["job_id"] == "127_4"
        with pytest.raises(ApiError, match=r"^job 131 is not tracked by the RSA$"):
            routes.dispatch(BOB, "POST", "/v1/jobs/131/command", {"command": "cancel-staging"})
        out = routes.dispatch(ALICE, "POST", "/v1/jobs/131/command",
                              {"command": "cancel-staging"})
    assert out["job_id"] == "127_4"
    assert out["rsa_state"] in TERMINAL | {RsaState.TEARING_DOWN}
    assert "131" not in d.sched.records


def test_a_command_its_caller_gave_up_on_is_never_carried_out_later(
        tmp_path: Path) -> None:
    """rsad's loop busy past the API's wait (a slow queue read): the caller is told 503
    "busy" and the rsa CLI sends the command again. The first one stayed queued and was
    carried out once the loop got to it, after the user had been told it was not (found
    by review). A request its caller stopped waiting for is withdrawn: nothing of it is
    done, and the answer says so; one the loop answers in time is carried out."""
    slurm = ScriptedSlurm()
    d = make_daemon(tmp_path, slurm, [])
    slurm.set("7", "PENDING", "Resources")
    d.poll()
    settle(d)
    before = d.sched.records["7"].rsa_state
    assert before not in TERMINAL
    with pytest.raises(TimeoutError):  # nobody drains the loop
        d.submit("command", ("7", "cancel-staging", "alice", False), wait=True,
                 timeout=0.05)
    with pytest.raises(TimeoutError):
        d.submit("call", lambda: pytest.fail("a withdrawn read ran"), wait=True,
                 timeout=0.05)
    d.drain()
    assert d.sched.records["7"].rsa_state is before
    assert not any(e.name == "rsa.transition" and e.context.get("trigger") == "cancel-staging"
                   for e in d.store.events("7"))
    with serving(d):
        out = d.submit("command", ("7", "cancel-staging", "alice", False), wait=True)
    assert out["rsa_state"] in TERMINAL | {RsaState.TEARING_DOWN}


@pytest.mark.parametrize(("method", "path", "raw", "why"), [
    ("POST", "/v1/jobs/7/command", b"[1]", "a JSON list, not an object"),
    ("POST", "/v1/jobs/7/command", b'"input-done"', "a JSON str, not an object"),
    ("POST", "/v1/admin/drain", b"[" * 50_000 + b"]" * 50_000, "nested too deeply"),
    # past the API's own bound, well within every Python's parser (3.14 parses 50,000)
    ("POST", "/v1/admin/drain", b"{\"a\": " + b"[" * 65 + b"]" * 65 + b"}",
     "nested too deeply (over 64 levels)"),
    ("POST", "/v1/jobs/7/command", b"{", "not JSON"),
    ("GET", "/v1/events?since=99999999999999999999", b"", "since= takes an event number"),
])
def test_a_malformed_request_is_one_line_400_not_a_traceback(
        routes: Routes, caplog: pytest.LogCaptureFixture, method: str, path: str,
        raw: bytes, why: str) -> None:
    """A body that is JSON but not an object, nested past the parser's depth, or a
    ``since`` past the store's integers: each was a 500 and a traceback in rsad's log,
    per request, for any user (found by review)."""
    from rsa_scheduler.daemon import httpd
    from rsa_scheduler.daemon.apiserver import Endpoint

    req = httpd.Request(httpd.Head(method, path, {}, len(raw)), raw, None)
    with caplog.at_level(logging.WARNING):
        reply = Endpoint(routes).respond(req, httpd.Identity(1001, "alice", False))
    assert (reply.status, why in json.loads(reply.body)["error"]) == (400, True), reply
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    from rsa_scheduler.daemon.apiserver import _too_deep

    assert not _too_deep(b'{"reason": "' + b"[{" * 500 + b'\\"[["}')
    assert not _too_deep(b"[" * 64 + b"]" * 64)
    assert _too_deep(b"[" * 65 + b"]" * 65)
    assert _too_deep(b'{"a": "x\\"", "b": ' + b"{" * 70)


def test_a_jobs_timeline_is_read_only_from_a_record_of_the_callers(
        routes: Routes, monkeypatch: pytest.MonkeyPatch) -> None:
    """The timeline is read from the store after the API's look at the job: if the id
    names another user's record by then, the caller gets none of it (before: alice's
    events, under bob's look)."""
    monkeypatch.setattr(routes, "_visible", lambda caller, job: {"job_id": job,
                                                                  "user": caller.user})
    for path in ("/v1/jobs/7", "/v1/events?job=7"):
        with pytest.raises(ApiError, match="job 7 is not tracked by the RSA"):
            routes.dispatch(BOB, "GET", path, None)
    assert routes.dispatch(ALICE, "GET", "/v1/jobs/7", None)["events"]


def test_a_steady_stream_of_requests_never_keeps_the_loop_from_its_own_work(
        tmp_path: Path) -> None:
    """Users' reads sent again the moment they are answered (eight at a time, the
    API's workers): the loop took requests as long as any was queued, so it never came
    back to poll Slurm, fire timers or feed systemd's watchdog (found by review). A turn
    now takes what was queued when it began; what comes meanwhile is the next turn's."""
    d = make_daemon(tmp_path, ScriptedSlurm(), [])
    handled: list[int] = []

    def read() -> None:
        handled.append(1)
        if len(handled) < 10_000:
            d.submit("call", read)  # the next read, queued as this one is answered

    for _ in range(8):
        d.submit("call", read)
    assert d.drain() == 8
    assert d.drain() == 8
    assert len(handled) == 16


class TextSlurm(ScriptedSlurm):
    """Also offers the raw squeue text, so rsad takes its incremental path."""

    def queue_text(self) -> str:
        return "".join(f"{r.job_id}|{r.state}|{r.reason}|{r.priority}|{r.num_nodes}|"
                       f"{r.user}|{r.partition}|{r.time_limit}|{r.account}|{r.submitted}|"
                       f"{r.restarts}|"
                       f"{r.admin_comment or '(null)'}|\n"
                       for r in self.rows)


def test_incremental_cycle_matches_the_full_parse(tmp_path: Path) -> None:
    results = []
    for cls in (ScriptedSlurm, TextSlurm):
        slurm = cls()
        seen: list[str] = []
        d = make_daemon(tmp_path / cls.__name__, slurm, seen)
        for i in range(50):
            slurm.set(f"{100 + i}", "PENDING", "Priority", spec=None)  # never relevant
        slurm.set("7", "PENDING", "Resources")
        slurm.set("8", "PENDING", "Priority")
        d.poll()
        settle(d)
        d.poll()  # nothing changed
        slurm.rows = [r for r in slurm.rows if r.job_id != "8"]  # 8 purged by Slurm
        slurm.set("7", "RUNNING")
        d.poll()
        settle(d)
        results.append({j: (r.job_state.value if r.job_state else None, r.rsa_state.value)
                        for j, r in d.sched.records.items()})
        d.shutdown()
    assert results[0] == results[1]
    assert results[1]["8"] == ("finished", "released")
    assert results[1]["7"][0] == "running"


def test_a_reason_with_a_bar_and_a_newline_is_read_like_any_other(tmp_path: Path) -> None:
    """A site plugin's Reason with a ``|`` and a newline (a failed hook's message) made
    every incremental read fail, leaving rsad blind for the whole cluster; now that job
    is read whole and every other job as before, as the full parse reads them."""
    results = []
    for cls in (ScriptedSlurm, TextSlurm):
        slurm = cls()
        d = make_daemon(tmp_path / cls.__name__, slurm, [])
        slurm.set("7", "PENDING", "Resources")
        slurm.set("9", "PENDING", "other_bb: a|b failed\nsee the log")
        d.poll()
        settle(d)
        results.append({j: (r.job_state.value if r.job_state else None, r.rsa_state.value)
                        for j, r in d.sched.records.items()})
        d.shutdown()
    assert results[0] == results[1]
    assert set(results[1]) == {"7", "9"} and results[1]["7"][0] == "on-deck"


class ScriptSlurm(ScriptedSlurm):
    """Jobs without job_submit.lua's admin_comment: rsad reads their scripts."""

    def __init__(self, scripts: dict[str, str]) -> None:
        super().__init__()
        self.scripts = scripts
        self.reads: list[str] = []

    def batch_script(self, job_id: str) -> str:
        self.reads.append(job_id)
        return self.scripts[job_id]


def parsed(d: Daemon) -> None:
    for fut, _started in list(d.specs.parsing.values()):
        fut.result(timeout=10)


def test_scontrol_script_cache_is_pruned(tmp_path: Path) -> None:
    slurm = ScriptSlurm({"8": "#!/bin/sh\n#RSA_DATA_IN /pfs/in\n", "9": "#!/bin/sh\ntrue\n"})
    store = Store.open(tmp_path / "rsa.db", durability="normal")
    d = Daemon(Scheduler(make_pool(), StagingPolicy()), slurm=slurm, store=store,
               registry=with_slurm(instant_registry([]), slurm), workers=2, poll_interval=0,
               script_source="scontrol")
    d.start()
    slurm.set("8", "PENDING", "Resources", spec=None)
    slurm.set("9", "RUNNING", spec=None)
    slurm.set("10", "PENDING", "Priority", spec=None)
    d.poll()  # the scripts are read off the loop thread ...
    parsed(d)
    d.poll()  # ... and used by the next cycle
    settle(d)
    assert sorted(slurm.reads) == ["8", "9"]  # never the job that is merely queued
    assert d.sched.records["8"].spec == DirectiveSpec(data_in="/pfs/in")
    assert "9" not in d.sched.records
    assert d.specs.cache == {"9": None}  # 8 is tracked: its record holds the spec
    d.poll()
    assert sorted(slurm.reads) == ["8", "9"]  # each script read once
    slurm.rows = [r for r in slurm.rows if r.job_id != "9"]  # purged from the controller
    d.poll()
    assert d.specs.cache == {}
    d.shutdown()
    store.close()


def test_a_burst_of_requests_is_one_commit_before_any_action(tmp_path: Path) -> None:
    """Group commit: hook events (and outcomes, commands) queued together are decided one
    by one, written in ONE store transaction, and only then are their actions run and
    their callers answered (write-ahead holds for the whole group)."""
    slurm = ScriptedSlurm()
    seen: list[str] = []
    d = make_daemon(tmp_path, slurm, seen)
    try:
        for job in ("7", "8", "9"):
            slurm.set(job, "PENDING", "Resources")
        d.poll()
        settle(d)
        assert {r.rsa_state.value for r in d.sched.records.values()} == {"locked-in"}
        order: list[str] = []
        append, dispatch = d.store.append, d._dispatch

        def counted_append(events: Sequence[Event], rows: Sequence[JobRow] = ()) -> list[Event]:
            order.append(f"commit {len(events)} events")
            return append(events, rows)

        def counted_dispatch(actions: Iterable[Action]) -> None:
            batch = list(actions)
            order.append(f"dispatch {len(batch)} actions")
            dispatch(batch)

        d.store.append = counted_append  # type: ignore[method-assign]
        d._dispatch = counted_dispatch  # type: ignore[method-assign]
        replies = [d.submit("hook", {"hook": "prolog_slurmctld", "job_id": job}, wait=False)
                   for job in ("7", "8")]
        assert replies == [None, None]
        waited: Future[Any] = Future()
        d.inbox.put(Request("hook", {"hook": "prolog_slurmctld", "job_id": "9"},
                            reply=waited))
        bogus: Future[Any] = Future()
        d.inbox.put(Request("hook", {"hook": "bogus", "job_id": "9"}, reply=bogus))
        assert d.drain() == 4
        assert len(order) == 2 and order[0].startswith("commit ")
        assert order[1] == "dispatch 6 actions"  # an unlock and a mount-input per started job
        assert waited.result(timeout=1)["tracked"] is True
        assert {d.sched.records[j].rsa_state.value for j in ("7", "8", "9")} == {
            "mounting-input"}
        # a bad request in the group is answered with its error; the others are not hurt
        with pytest.raises(ValueError, match="unknown hook"):
            bogus.result(timeout=1)
    finally:
        d.shutdown()


def test_a_log_that_cannot_be_written_stops_rsad_and_its_restart_replays_the_truth(
        tmp_path: Path) -> None:
    """A group commit that fails (disk full, I/O error) leaves rsad's memory ahead of its
    log: the callers are told, nothing of it is dispatched, and rsad stops (it went on
    before, serving a state its log did not have); a restart replays what the log holds."""
    from rsa_scheduler.daemon.service import LogWriteFailed

    d, slurm, seen = locked_in_daemon(tmp_path)
    append, dispatched = d.store.append, list(seen)

    def full(events: Sequence[Event], rows: Sequence[JobRow] = ()) -> list[Event]:
        raise OSError(28, "No space left on device")

    d.store.append = full  # type: ignore[method-assign]
    waited: Future[Any] = Future()
    d.inbox.put(Request("hook", {"hook": "prolog_slurmctld", "job_id": "7"}, reply=waited))
    with pytest.raises(LogWriteFailed, match="No space left on device"):
        d.drain()
    with pytest.raises(LogWriteFailed):
        waited.result(timeout=1)  # its caller was answered before rsad stopped
    assert seen == dispatched  # nothing of the unwritten decision was carried out
    d.store.append = append  # type: ignore[method-assign]
    d.shutdown()
    d.store.close()
    d2 = make_daemon(tmp_path, slurm, [])
    try:  # the log's truth: the job is still locked in, its start never written
        assert d2.sched.records["7"].rsa_state.value == "locked-in"
    finally:
        d2.shutdown()


def test_a_milestone_is_durable_before_the_executor_goes_on_and_a_restart_knows_it(
        tmp_path: Path) -> None:
    slurm = ScriptedSlurm()
    seen: list[str] = []
    d = make_daemon(tmp_path, slurm, seen)
    slurm.set("7", "PENDING", "Resources")
    d.poll()
    d.submit("milestone", ("7", "7/1/reset/9", {"reset_of": "7/1/reset/9",
                                                "mount": {"fs_id": "new"}}))
    d.drain(timeout=0.5)
    ev = [e for e in d.store.events("7") if e.name == "action.milestone"]
    assert ev and ev[0].context["action"] == "7/1/reset/9"
    assert d.facts["7"]["reset_of"] == "7/1/reset/9"
    settle(d)  # the job's actions end (a worker waiting for a milestone held the exit 60 s)
    d.shutdown()
    d.store.close()
    d2 = make_daemon(tmp_path, slurm, [])
    assert d2.facts["7"]["reset_of"] == "7/1/reset/9"
    assert d2.facts["7"]["mount"] == {"fs_id": "new"}


def test_every_milestone_an_executor_reads_back_is_remembered(tmp_path: Path) -> None:
    """Found by review: the reset's ``written_back_of`` milestone (its last write-back of
    writable input is done) was committed but never kept in the facts a re-issued reset
    reads: after rsad was killed between that write-back and the outcome, the reset
    copied the RAMDISK's input again over what the job had changed on the PFS since."""
    slurm = ScriptedSlurm()
    d = make_daemon(tmp_path, slurm, [])
    slurm.set("7", "PENDING", "Resources")
    d.poll()
    d.submit("milestone", ("7", "7/1/reset/9", {"written_back_of": "7/1/reset/9"}))
    d.drain(timeout=0.5)
    assert d.facts["7"]["written_back_of"] == "7/1/reset/9"
    settle(d)  # the job's actions end (a worker waiting for a milestone held the exit 60 s)
    d.shutdown()
    d.store.close()
    assert make_daemon(tmp_path, slurm, []).facts["7"]["written_back_of"] == "7/1/reset/9"


@pytest.mark.parametrize(("code", "said"), [("768", "exit code 3"), ("9", "signal 9"),
                                           ("0", "exit code 0"), ("", "")])
def test_the_end_hook_says_what_it_heard_and_slurms_record_says_how_the_job_ended(
        tmp_path: Path, code: str, said: str) -> None:
    slurm = ScriptedSlurm()
    d = make_daemon(tmp_path, slurm, [])
    slurm.set("7", "PENDING", "Resources")
    d.poll()
    settle(d)
    d.submit("hook", {"hook": "prolog_slurmctld", "job_id": "7"})
    d.submit("hook", {"hook": "epilog_slurmctld", "job_id": "7", "exit_code": code})
    d.drain()
    ends = [e.context for e in d.store.events("7") if e.context.get("to") == "finished"]
    # EpilogSlurmctld's exit code is no end state: the event names the hook, not one
    assert [(c.get("by"), c.get("slurm_state")) for c in ends] == [
        (f"EpilogSlurmctld, {said}" if said else "EpilogSlurmctld", None)]
    assert d.sched.records["7"].end_state == ""
    # the user cancelled it (exit code 0 or not): Slurm's own record says so, and the
    # next poll that shows it is written down; a later poll of the same changes nothing
    slurm.set("7", "COMPLETING")
    d.poll()
    slurm.set("7", "CANCELLED")
    d.poll()
    d.poll()
    told = [(e.name, e.context.get("slurm_state")) for e in d.store.events("7")
            if e.name in ("job.ended", "job.state") and e.seq > 0]
    assert told[-1] == ("job.ended", "CANCELLED")
    assert sum(1 for name, _ in told if name == "job.ended") == 1
    assert d.sched.records["7"].end_state == "CANCELLED"
    # and a replay of the log knows it too
    d.shutdown()
    d.store.close()
    assert make_daemon(tmp_path, slurm, []).sched.records["7"].end_state == "CANCELLED"


def test_a_job_slurm_shows_ended_before_its_hook_is_heard_keeps_slurms_end_state(
        tmp_path: Path) -> None:
    slurm = ScriptedSlurm()
    d = make_daemon(tmp_path, slurm, [])
    slurm.set("7", "PENDING", "Resources")
    d.poll()
    settle(d)
    slurm.set("7", "RUNNING")
    d.poll()
    slurm.set("7", "TIMEOUT", "TimeLimit")
    d.poll()
    d.submit("hook", {"hook": "epilog_slurmctld", "job_id": "7", "exit_code": "15"})
    d.drain()
    d.poll()
    rec = d.sched.records["7"]
    assert rec.end_state == "TIMEOUT"
    finished = [e.context for e in d.store.events("7") if e.context.get("to") == "finished"]
    assert [(c.get("slurm_state"), c["set"].get("end_state")) for c in finished] == [
        ("TIMEOUT", "TIMEOUT")]
    assert not [e for e in d.store.events("7") if e.name == "job.ended"]


def test_an_executors_summary_becomes_the_outcome_message_not_detail() -> None:
    reg = Registry()
    reg.register(ActionKind.VERIFY, lambda ctx: {"verified": {"objects": 0},
                                                  "summary": "the RAMDISK held no output"})
    from rsa_scheduler.hosts import CancelToken

    ctx = ActionContext(action=make_action("7/1/verify/5"),
                        cancel=CancelToken(), progress=lambda _d: None)
    out = reg.run(ctx)
    assert out.message == "the RAMDISK held no output"
    assert out.detail == {"verified": {"objects": 0}}


def test_users_see_no_other_users_job_ids_in_the_status(routes: Routes) -> None:
    held = {n["name"]: n["job"] for n in routes.dispatch(ROOT, "GET", "/v1/status",
                                                         None)["nodes"] if n["job"]}
    assert set(held.values()) == {"7"}  # alice's job holds RSA nodes
    mine = routes.dispatch(ALICE, "GET", "/v1/status", None)
    assert {n["name"]: n["job"] for n in mine["nodes"] if n["job"]} == held
    assert mine["on_deck"] == routes.dispatch(ROOT, "GET", "/v1/status", None)["on_deck"] \
        == ["7"]
    theirs = routes.dispatch(BOB, "GET", "/v1/status", None)
    assert {n["name"]: n["job"] for n in theirs["nodes"] if n["job"]} == {
        name: "(hidden)" for name in held}  # still shown as held, by nobody bob may know
    assert "7" not in theirs["on_deck"] and "7" not in json.dumps(theirs["alerts"])
    assert routes.dispatch(BOB, "GET", "/v1/events", None)["events"] == []


def test_users_see_no_other_users_job_ids_in_node_reasons(routes: Routes) -> None:
    """A node's reason may name a job: the health loop's (what jobs left on a node while
    it was down, set through the same ``node-state`` request as rsad's wiring) and an
    operator's. Bob sees neither job id of alice's; alice and root see theirs (issue 36)."""
    import re

    free = [n["name"] for n in routes.dispatch(ROOT, "GET", "/v1/status", None)["nodes"]
            if not n["job"]]
    d = routes.daemon
    d.submit("node-state", (free[0], "down", "health", "what job(s) 7 left here while it "
             "was down is not cleaned: rm /dev/shm/rsa/7: busy"), wait=True)
    d.submit("node-state", (free[1], "drained", "health", "health: clock off by +40s "
                                                          "(limit 30s)"), wait=True)
    routes.dispatch(ROOT, "POST", f"/v1/nodes/{free[2]}/state",
                    {"state": "drained", "reason": "job 7 filled /scratch, see ticket 7x"})

    def reasons(caller: Caller) -> dict[str, str]:
        return {n["name"]: n["reason"] for n in routes.dispatch(
            caller, "GET", "/v1/status", None)["nodes"] if n["reason"]}

    assert reasons(ROOT) == reasons(ALICE) | {free[0]: reasons(ROOT)[free[0]]}
    assert "job(s) 7 left" in reasons(ROOT)[free[0]]
    theirs = reasons(BOB)
    assert theirs == {
        free[0]: "health: kept out until what earlier jobs left on it is cleaned",
        free[1]: "health: clock off by +40s (limit 30s)",
        free[2]: "job (hidden) filled /scratch, see ticket 7x"}
    assert not any(re.search(r"(?<![\w.])7(?!\w)", r) for r in theirs.values())


def test_a_script_that_takes_long_to_read_never_stalls_the_loop(tmp_path: Path) -> None:
    gate = threading.Event()

    class SlowSlurm(ScriptSlurm):
        def batch_script(self, job_id: str) -> str:
            gate.wait(10)
            return super().batch_script(job_id)

    slurm = SlowSlurm({"8": "#!/bin/sh\n#RSA_DATA_IN /pfs/in\n"})
    store = Store.open(tmp_path / "rsa.db", durability="normal")
    d = Daemon(Scheduler(make_pool(), StagingPolicy()), slurm=slurm, store=store,
               registry=with_slurm(instant_registry([]), slurm), workers=2, poll_interval=0,
               script_source="scontrol")
    d.start()
    slurm.set("8", "PENDING", "Resources", spec=None)
    for _ in range(3):
        d.poll()  # returns at once while the script is read
    assert "8" not in d.sched.records
    d.parse_timeout = 0.0
    d.poll()  # given up: told once, never retried
    assert d.specs.cache == {"8": None}
    gate.set()
    d.shutdown()  # (the user is told from a worker)
    assert any("took too long" in text for kind, text in slurm.calls if kind == "comment")


class SlowScriptSlurm(ScriptSlurm):
    """A controller whose `scontrol write batch_script` hangs until released."""

    def __init__(self, scripts: dict[str, str]) -> None:
        super().__init__(scripts)
        self.release = threading.Event()

    def batch_script(self, job_id: str) -> str:
        self.release.wait(30)
        return super().batch_script(job_id)


def test_a_slow_or_huge_script_never_stalls_the_loop(tmp_path: Path) -> None:
    """Scripts are read and parsed off the loop thread (issue 12.3): while one hangs the
    loop keeps polling; a 4 MB one (Slurm's default max_script_size) is parsed in time."""
    huge = "#!/bin/sh\n#RSA_DATA_IN=/pfs/in\n" + "# padding\n" * 400_000 + "true\n"
    slurm = SlowScriptSlurm({"8": huge})
    store = Store.open(tmp_path / "rsa.db", durability="normal")
    d = Daemon(Scheduler(make_pool(), StagingPolicy()), slurm=slurm, store=store,
               registry=with_slurm(instant_registry([]), slurm), workers=2, poll_interval=0,
               script_source="scontrol")
    d.start()
    try:
        slurm.set("8", "PENDING", "Resources", spec=None)
        for _ in range(3):  # the script is still being read: each poll returns at once
            t = time.monotonic()
            d.poll()
            assert time.monotonic() - t < 10.0  # not the read's 30 s
        assert "8" not in d.sched.records
        slurm.release.set()
        parsed(d)
        d.poll()
        settle(d)
        assert d.sched.records["8"].spec == DirectiveSpec(data_in="/pfs/in")
    finally:
        slurm.release.set()
        d.shutdown()
        store.close()


def test_a_mount_never_waits_behind_bulk_copies(tmp_path: Path) -> None:
    """Two lanes (issue 16): with every bulk worker busy on stage-outs, a job's mount,
    lock-in, teardown and messages still run at once."""
    from rsa_scheduler.core.actions import BULK

    release = threading.Event()
    ran: list[str] = []
    reg = Registry()
    for kind in ActionKind:
        def run(ctx: ActionContext, kind: ActionKind = kind) -> Mapping[str, Any]:
            ran.append(ctx.action.id)
            if kind in BULK:
                release.wait(30)
            return {}
        reg.register(kind, run)
    slurm = ScriptedSlurm()
    store = Store.open(tmp_path / "rsa.db", durability="normal")
    d = Daemon(Scheduler(make_pool(), StagingPolicy()), slurm=slurm, store=store,
               registry=reg, workers=2, urgent_workers=2, poll_interval=0)
    try:
        for n in range(6):  # more stage-outs than bulk workers: four of them queue
            d.dispatcher.start(make_action(f"{n}/1/stage-out/1"), tracked=True)
        urgent = [make_action("9/1/mount-input/3"), make_action("8/1/destroy-fs/5"),
                  make_action("7/1/lock-in/2")]
        for a in urgent:
            d.dispatcher.start(a, tracked=True)
        d.dispatcher.tell("9", "RSA: staging")
        until(lambda: all(a.id in ran for a in urgent)
              and ("comment", "RSA: staging") in slurm.calls, 20)  # the bulk waits 30 s
        assert all(a.id in ran for a in urgent), ran
        assert ("comment", "RSA: staging") in slurm.calls
        assert sum(1 for r in ran if "/stage-out/" in r) == 2  # the bulk lane is still full
    finally:
        release.set()
        d.shutdown()
        store.close()


def test_a_mount_never_waits_behind_messages_to_a_slow_slurmctld(tmp_path: Path) -> None:
    """Issue 34: every stage-out's start and end tells its user (a comment: scontrol,
    slurmctld's answer), and with slurmctld slow to answer those writes held every thread
    of the urgent lane: a mount, a teardown waited for them. Messages have a lane of their
    own; the comments are still written, in order."""
    answer = threading.Event()

    class SlowSlurm(ScriptedSlurm):
        def set_comment(self, job_id: str, text: str) -> None:
            answer.wait(30)
            super().set_comment(job_id, text)

    ran = threading.Event()

    def run(_ctx: ActionContext) -> Mapping[str, Any]:
        ran.set()
        return {}

    reg = Registry()
    for kind in (ActionKind.MOUNT_INPUT, ActionKind.DESTROY_FS):
        reg.register(kind, run)
    slurm = SlowSlurm()
    store = Store.open(tmp_path / "rsa.db", durability="normal")
    d = Daemon(Scheduler(make_pool(), StagingPolicy()), slurm=slurm, store=store,
               registry=reg, workers=2, urgent_workers=2, poll_interval=0)
    try:
        for job in ("1", "2", "3"):  # more messages than urgent threads, all waiting
            d.dispatcher.tell(job, f"RSA: job {job} staged out")
        d.dispatcher.start(make_action("9/1/mount-input/3"), tracked=True)
        assert ran.wait(10), "the mount waited for the comments"
        ran.clear()
        d.dispatcher.start(make_action("8/1/destroy-fs/5"), tracked=True)
        assert ran.wait(10), "the teardown waited for the comments"
    finally:
        answer.set()
        flush_urgent(d)
        d.shutdown()
        store.close()
    assert sorted(c for c in slurm.calls if c[0] == "comment") == [
        ("comment", f"RSA: job {j} staged out") for j in ("1", "2", "3")]


def test_actions_still_queued_at_shutdown_are_left_for_the_restart(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """rsad stops with stage-outs queued behind busy workers: the lanes cancel them, and
    their done callbacks hand no outcome to the loop (the log still has them in flight:
    they run after the restart); it used to call result() on them and print
    "exception calling callback ... CancelledError" for each."""
    release, running = threading.Event(), threading.Event()

    def run(_ctx: ActionContext) -> Mapping[str, Any]:
        running.set()
        release.wait(30)
        return {}
    reg = Registry()
    for kind in ActionKind:
        reg.register(kind, run)
    slurm = ScriptedSlurm()
    store = Store.open(tmp_path / "rsa.db", durability="normal")
    d = Daemon(Scheduler(make_pool(), StagingPolicy()), slurm=slurm, store=store,
               registry=reg, workers=1, urgent_workers=1, poll_interval=0)
    submitted: list[tuple[str, object]] = []

    def submit(kind: str, payload: Any, **_: Any) -> None:
        submitted.append((kind, payload))

    d.dispatcher.host.submit = submit  # type: ignore[method-assign]
    try:
        for n in range(4):  # one runs, three queue
            d.dispatcher.start(make_action(f"{n}/1/stage-out/1"), tracked=True)
        # the worker thread has taken the first (else the shutdown cancels all four)
        assert running.wait(30)
        threading.Timer(0.3, release.set).start()
        d.dispatcher.shutdown(timeout=10)
    finally:
        release.set()
        store.close()
    assert not [r for r in caplog.records if "exception calling callback" in r.getMessage()]
    assert [k for k, _ in submitted] == ["outcome"]  # the one that ran, only


def test_finished_jobs_leave_memory_and_their_history_stays_readable(tmp_path: Path) -> None:
    """Issue 16: memory is bounded by live jobs. A finished job whose RSA cycle ended
    leaves rsad's memory after ``retention`` once Slurm no longer lists it; `rsa job`
    (and `rsa events --job`) still answer from the store, to its owner only."""
    slurm = ScriptedSlurm()
    seen: list[str] = []
    d = make_daemon(tmp_path, slurm, seen)
    d.retention = 0.0
    slurm.set("7", "PENDING", "Priority")
    d.poll()
    settle(d)
    slurm.set("7", "COMPLETED")
    d.poll()
    settle(d)
    assert d.sched.records["7"].rsa_state.value == "released"
    d._last_forget = -1e9
    d.poll()
    assert "7" in d.sched.records  # Slurm still lists it (COMPLETING, MinJobAge)
    slurm.rows = []
    d._last_forget = -1e9
    d.poll()
    assert "7" not in d.sched.records and "7" not in d.facts
    with serving(d) as routes:
        job = routes.dispatch(ALICE, "GET", "/v1/jobs/7", None)
        assert job["archived"] is True and job["rsa_state"] == "released"
        assert job["events"] and job["user"] == "alice"
        assert routes.dispatch(ALICE, "GET", "/v1/events?job=7", None)["events"]
        with pytest.raises(ApiError, match="not tracked"):
            routes.dispatch(BOB, "GET", "/v1/jobs/7", None)
        with pytest.raises(ApiError, match="not tracked"):
            routes.dispatch(ALICE, "GET", "/v1/jobs/999", None)


def test_only_ramdisks_no_step_works_on_are_tendable(tmp_path: Path) -> None:
    """The RAMDISK tender checks jobs in core.states.TENDED that have a RAMDISK and no
    action running: a staged, locked-in job is one; a job still staging is not."""
    d, _, _ = locked_in_daemon(tmp_path)
    assert d.tendable() == [("7", {"fs_id": "x"})]
    step = make_action("7/1/stage-in/9")
    d.running[step.id] = Running(step, CancelToken(), Future())
    assert d.tendable() == []  # a step works on it: it looks after the RAMDISK itself
    del d.running[step.id]
    d.facts["7"].pop("mount")
    assert d.tendable() == []


def test_compute_nodes_that_do_not_confirm_a_release_are_drained_and_alerted(
        tmp_path: Path) -> None:
    """Issue 13: completion means every node agent confirmed. A reset whose release a
    compute node never confirms keeps the RAMDISK (retried, not torn down), drains the
    node in Slurm with the reason, raises an alert and records the event."""
    slurm = DrainingSlurm()
    seen: list[str] = []
    d = make_daemon(tmp_path, slurm, seen)

    def silent_reset(ctx: ActionContext) -> Mapping[str, Any]:
        raise BusyError("compute node(s) c2 did not confirm the release", silent=["c2"])
    d.registry.register(ActionKind.RESET, silent_reset)
    slurm.set("7", "PENDING", "Resources")
    d.poll()
    settle(d)
    slurm.set("7", "RUNNING")
    d.poll()
    settle(d)
    assert d.sched.records["7"].rsa_state.value == "mounted-input"
    d.submit("command", ("7", "input-done", "alice", False))
    settle(d)
    # the drain runs on the message lane, then alerts on the loop (a no-op on that lane
    # is no barrier: it has several workers)
    assert drained_until(d, lambda: any("c2" in a["message"] for a in d.alerts))
    settle(d)
    assert d.sched.records["7"].rsa_state.value == "reset-failed"
    assert ActionKind.DESTROY_FS.value not in {a.split("/")[2] for a in seen}
    assert slurm.drained == [(["c2"], "rsa: did not confirm release of job 7's RAMDISK")]
    assert any("c2" in a["message"] and "drained" in a["message"] for a in d.alerts)
    assert [e.context["nodes"] for e in d.store.events("7")
            if e.name == "compute.unconfirmed"] == [["c2"]]


class DrainingSlurm(ScriptedSlurm):
    def __init__(self) -> None:
        super().__init__()
        self.drained: list[tuple[list[str], str]] = []

    def drain_nodes(self, nodes: Sequence[str], reason: str) -> None:
        self.drained.append((list(nodes), reason))


# ---- early start wait: the start hold (issue 14; daemon/holds.py) ----------------------

HOLD = 900_000  # the hold's deadline, far ahead of the test clock


def flush_urgent(d: Daemon) -> None:
    """Wait until every Slurm call the start, rerun and dependency holds handed the
    urgent lane so far is done (its holds and releases), and the message lane wrote every
    comment told so far. Not a no-op submitted to each lane: the lanes have several
    workers, and one finishes the no-op while another has yet to make a call submitted
    before it (seen on a loaded machine: the rerun hold not yet placed)."""
    _, late = wait_futures(d.holds.calls_in_flight() + list(d.deps.calls.values()),
                           timeout=30)
    assert not late, "hold calls still running after 30 s"
    for _ in range(1000):
        with d.dispatcher._comment_lock:
            if not d.dispatcher._writing:
                return
        time.sleep(0.01)
    raise AssertionError("comments still being written")


def released(slurm: ScriptedSlurm) -> list[str]:
    return [v for k, v in slurm.calls if k == "release_hold"]


def test_a_held_job_on_an_idle_cluster_is_staged_while_held_then_released(
        tmp_path: Path) -> None:
    """The README's job on an idle cluster: Slurm holds it from submission (BeginTime);
    rsad sees it could start now, treats it as on-deck at once, stages its input and
    releases it only when the RAMDISK is ready, with the marker removed."""
    slurm = ScriptedSlurm()
    seen: list[str] = []
    d = make_daemon(tmp_path, slurm, seen)
    slurm.set("7", "PENDING", "BeginTime", hold=HOLD)
    d.poll()
    rec = d.sched.records["7"]
    assert rec.job_state is JobState.ON_DECK and rec.hold_until == HOLD
    assert released(slurm) == []  # nothing staged yet: still held
    settle(d)
    flush_urgent(d)
    assert d.sched.records["7"].rsa_state.value == "locked-in"
    assert released(slurm) == [f"7:{SPEC.to_admin_comment()}"]
    comments = [v for k, v in slurm.calls if k == "comment"]
    assert any(c.startswith("RSA: held until its input is staged") for c in comments)
    assert comments[-1] == "RSA: input staged to the RAMDISK; released to start"
    assert [e.context["why"] for e in d.store.events("7") if e.name == "job.hold-released"]
    # Slurm still says BeginTime for a moment, without the marker: not a demotion
    d.poll()
    settle(d)
    rec = d.sched.records["7"]
    assert rec.job_state is JobState.ON_DECK and rec.rsa_state.value == "locked-in"
    assert rec.hold_until is None
    slurm.set("7", "RUNNING")
    d.poll()
    settle(d)
    assert d.sched.records["7"].rsa_state.value == "mounted-input"


def held_on_a_busy_cluster(tmp_path: Path, reason: str,
                           idle: int) -> tuple[Daemon, ScriptedSlurm, list[str]]:
    """A held job first seen pending on ``reason`` with ``idle`` debug nodes (it needs 2),
    after one poll and everything that poll started."""
    slurm = ScriptedSlurm()
    slurm.idle = {"debug": idle}
    seen: list[str] = []
    d = make_daemon(tmp_path, slurm, seen)
    slurm.set("7", "PENDING", reason, hold=HOLD)
    d.poll()
    settle(d)
    flush_urgent(d)
    return d, slurm, seen


def test_a_held_job_on_a_busy_cluster_is_released_at_once_and_queues_as_usual(
        tmp_path: Path) -> None:
    d, slurm, seen = held_on_a_busy_cluster(tmp_path, "BeginTime", idle=1)
    rec = d.sched.records["7"]
    assert rec.job_state is JobState.QUEUED and rec.rsa_state.value == "none"
    assert seen == []  # no RSA node allocated for a job that could not start anyway
    assert released(slurm) == [f"7:{SPEC.to_admin_comment()}"]
    assert [v for k, v in slurm.calls if k == "comment"][-1].startswith(
        "RSA: the cluster is busy")
    d.poll()  # still BeginTime for a moment: queued, not on-deck
    assert d.sched.records["7"].job_state is JobState.QUEUED


def test_a_held_job_slurm_first_shows_on_resources_is_judged_not_taken_on_deck(
        tmp_path: Path) -> None:
    """slurmctld tries a new submission at once: a held job can pend on ``Resources``
    before Slurm applies its begin time (lab, slow machine: over 3 s). With the marker
    live it is held; on a busy cluster it is released with no RSA node taken (it used to
    be taken on-deck and staged while held, then told "input staged")."""
    d, slurm, seen = held_on_a_busy_cluster(tmp_path, "Resources", idle=0)  # full
    rec = d.sched.records["7"]
    assert rec.job_state is JobState.QUEUED and rec.rsa_state.value == "none"
    assert seen == []
    assert released(slurm) == [f"7:{SPEC.to_admin_comment()}"]
    assert [v for k, v in slurm.calls if k == "comment"][-1].startswith(
        "RSA: the cluster is busy")


def test_a_held_job_first_on_resources_on_an_idle_cluster_is_staged_while_held(
        tmp_path: Path) -> None:
    slurm = ScriptedSlurm()
    seen: list[str] = []
    d = make_daemon(tmp_path, slurm, seen)
    slurm.set("7", "PENDING", "Resources", hold=HOLD)
    d.poll()
    assert d.sched.records["7"].job_state is JobState.ON_DECK  # judged: could start
    settle(d)
    flush_urgent(d)
    assert d.sched.records["7"].rsa_state.value == "locked-in"
    assert [v for k, v in slurm.calls if k == "comment"][-1] == \
        "RSA: input staged to the RAMDISK; released to start"


def test_a_users_comments_are_written_in_the_order_told(tmp_path: Path) -> None:
    """The urgent lane has several workers: a job's messages are still written one at a
    time, oldest first, and one told while another is written replaces any unwritten."""
    class SlowSlurm(ScriptedSlurm):
        def __init__(self) -> None:
            super().__init__()
            self.gate = threading.Event()
            self.writing = threading.Event()

        def set_comment(self, job_id: str, text: str) -> None:
            if text == "first":
                self.writing.set()
                assert self.gate.wait(10)
            super().set_comment(job_id, text)

    slurm = SlowSlurm()
    d = make_daemon(tmp_path, slurm, [])
    d.dispatcher.tell("7", "first")
    assert slurm.writing.wait(10)
    d.dispatcher.tell("7", "second")  # replaced before it is written
    d.dispatcher.tell("7", "third")
    d.dispatcher.tell("8", "other job")  # not held up by job 7's
    assert until(lambda: ("comment", "other job") in slurm.calls)
    assert slurm.calls == [("comment", "other job")]
    slurm.gate.set()
    flush_urgent(d)
    assert [v for k, v in slurm.calls if k == "comment"] == ["other job", "first", "third"]


def comments(slurm: ScriptedSlurm) -> list[str]:
    return [v for k, v in slurm.calls if k == "comment"]


WAITS = ("RSA: waits for RSA nodes: not enough RSA nodes are free now (jobs get them in "
         "priority order); held meanwhile, at most staging.wait_timeout, then it reads the PFS")


def test_a_burst_of_held_jobs_waits_held_for_rsa_nodes_none_let_go_to_the_pfs(
        tmp_path: Path) -> None:
    """Issue 32: eight 2-node jobs held at once on an idle cluster (4 idle nodes, 4 RSA
    nodes, one each). Held jobs take no compute node, so each would start at once if let
    go: none is released before its RAMDISK is ready (four were judged "busy" and
    released, and started from the PFS). Four are staged and released; four wait, held,
    told why; when a staged job ends, its RSA node goes to the next in priority order."""
    slurm = ScriptedSlurm()
    seen: list[str] = []
    d = make_daemon(tmp_path, slurm, seen)
    jobs = [str(n) for n in range(7, 15)]
    for job in jobs:
        slurm.set(job, "PENDING", "BeginTime", hold=HOLD)
    d.poll()
    settle(d)
    flush_urgent(d)
    recs = d.sched.records
    assert all(recs[j].job_state is JobState.ON_DECK for j in jobs)
    assert {j for j in jobs if recs[j].rsa_state.value == "locked-in"} == {"7", "8", "9", "10"}
    assert sorted(r.split(":")[0] for r in released(slurm)) == ["10", "7", "8", "9"]
    assert not any(c.startswith("RSA: the cluster is busy") for c in comments(slurm))
    assert comments(slurm).count(WAITS) == 4
    assert all(recs[j].message == WAITS.removeprefix("RSA: ") for j in jobs[4:])
    d.poll()  # waiting, held: nothing new is said
    settle(d)
    flush_urgent(d)
    assert comments(slurm).count(WAITS) == 4 and len(released(slurm)) == 4
    # job 7 runs and ends: staged out, verified, its RSA node freed: job 11 gets it
    slurm.set("7", "RUNNING")
    d.poll()
    settle(d)
    slurm.rows = [r for r in slurm.rows if r.job_id != "7"]
    slurm.set("7", "COMPLETED")
    d.poll()
    settle(d)
    assert recs["7"].rsa_state.value == "released"
    d.poll()
    settle(d)
    flush_urgent(d)
    assert recs["11"].rsa_state.value == "locked-in"
    assert all(recs[j].rsa_state.value == "none" for j in jobs[5:])
    assert [r.split(":")[0] for r in released(slurm)][4:] == ["11"]
    assert "RSA: held until its input is staged" in " ".join(comments(slurm))


def test_a_held_job_slurm_has_not_applied_the_begin_time_to_yet_takes_no_idle_node(
        tmp_path: Path) -> None:
    """slurmctld's first try of a submission says None (or Priority, Resources) before
    the begin time applies: a job held for the RSA is still no job Slurm starts first, so
    the held jobs judged after it are not judged busy on its account (issue 32)."""
    slurm = ScriptedSlurm()
    slurm.idle = {"debug": 2}  # room for one 2-node job: it stays free while 7 is held
    seen: list[str] = []
    d = make_daemon(tmp_path, slurm, seen)
    slurm.set("7", "PENDING", "None", hold=HOLD)
    d.poll()
    slurm.set("8", "PENDING", "None", hold=HOLD)
    d.poll()
    assert d.sched.records["8"].job_state is JobState.ON_DECK
    assert "8" not in [r.split(":")[0] for r in released(slurm)]


def test_a_held_job_on_a_busy_cluster_stays_held_while_no_rsa_node_is_left_for_it(
        tmp_path: Path) -> None:
    """Issue 32: busy cluster, but every RSA node is taken: released, the job would queue
    and start from the PFS when nodes free before its RSA nodes do. It stays held,
    on-deck for the core, and waits for RSA nodes (released once staged, as at submission
    on an idle cluster); with RSA nodes left it is released at once (the test above)."""
    slurm = ScriptedSlurm()
    seen: list[str] = []
    d = make_daemon(tmp_path, slurm, seen)
    for job in ("1", "2", "3", "4"):  # on-deck, unheld: they take the 4 RSA nodes
        slurm.set(job, "PENDING", "Resources")
    d.poll()
    settle(d)
    assert len([r for r in d.sched.records.values() if r.nodes]) == 4
    slurm.idle = {"debug": 0}
    slurm.set("7", "PENDING", "BeginTime", hold=HOLD)
    d.poll()
    settle(d)
    flush_urgent(d)
    rec = d.sched.records["7"]
    assert rec.job_state is JobState.ON_DECK and rec.rsa_state.value == "none"
    assert "7" not in [r.split(":")[0] for r in released(slurm)]
    assert comments(slurm)[-1] == WAITS


def test_held_jobs_of_one_priority_are_admitted_in_the_cores_order(tmp_path: Path) -> None:
    """Found by review: the start hold judged newly held jobs of one priority in the
    order of their ids as text ("10" before "9"), the core hands RSA nodes out by number
    ("9" before "10"). One RSA node free, a busy partition for job 9, idle nodes for job
    10: admitted as text, 10 took the node (START) and 9 was held to wait for one; the
    core then gave the node to 9, which cannot start, and 10, which could, waited held.
    Admitted in the core's order, 9 is let go to queue (an RSA node is left for it) and
    10 is staged and released."""
    slurm = ScriptedSlurm()
    seen: list[str] = []
    d = make_daemon(tmp_path, slurm, seen)
    for job in ("1", "2", "3"):  # they take 3 of the 4 RSA nodes, then run
        slurm.set(job, "PENDING", "Resources")
    d.poll()
    settle(d)
    for job in ("1", "2", "3"):
        slurm.set(job, "RUNNING")
    d.poll()
    settle(d)
    slurm.idle = {"debug": 2, "other": 0}
    comment = with_hold(SPEC.to_admin_comment(), HOLD)
    slurm.rows += [QueueRow("9", "PENDING", "BeginTime", 10, 2, "alice", comment, "other"),
                   QueueRow("10", "PENDING", "BeginTime", 10, 2, "alice", comment, "debug")]
    d.poll()
    settle(d)
    flush_urgent(d)
    recs = d.sched.records
    assert recs["10"].rsa_state.value == "locked-in", recs["10"]
    assert recs["9"].rsa_state.value == "none" and recs["9"].job_state is JobState.QUEUED
    assert sorted(r.split(":")[0] for r in released(slurm)) == ["10", "9"]


def test_a_held_job_its_user_released_is_no_longer_taken_for_held(tmp_path: Path) -> None:
    """Found by review: a held job's user moved its begin time (``scontrol update
    JobId=N StartTime=now``, which Slurm allows them) on a busy cluster; Slurm then shows
    it pending on ``Priority``, its admin_comment still marked. rsad kept it held and
    on-deck (a marked job pending on Priority is held on its first sight, before Slurm
    applies the begin time): it stayed first in line for the next free RSA node, to be
    staged, then demoted and torn down. Once Slurm showed it on ``BeginTime``, a later
    ``Priority`` says the hold was lifted: it is queued as any job."""
    slurm = ScriptedSlurm()
    seen: list[str] = []
    d = make_daemon(tmp_path, slurm, seen)
    for job in ("1", "2", "3", "4"):  # on-deck, unheld: they take the 4 RSA nodes
        slurm.set(job, "PENDING", "Resources")
    d.poll()
    settle(d)
    slurm.idle = {"debug": 0}
    slurm.set("7", "PENDING", "BeginTime", hold=HOLD)
    d.poll()
    settle(d)
    assert d.sched.records["7"].job_state is JobState.ON_DECK and "7" in d.sched.waiting
    slurm.set("7", "PENDING", "Priority", hold=HOLD)  # its user: StartTime=now
    d.poll()
    settle(d)
    rec = d.sched.records["7"]
    assert rec.job_state is not JobState.ON_DECK and "7" not in d.sched.waiting, rec
    assert "7" not in d.holds
    slurm.set("7", "PENDING", "Resources", hold=HOLD)  # next to run: staged as any job
    d.poll()
    assert d.sched.records["7"].job_state is JobState.ON_DECK


def test_a_job_that_starts_at_once_with_rsa_nodes_free_is_told_the_truth(
        tmp_path: Path) -> None:
    """Found by review: a job that started before it was ever on-deck (early start
    fallback on an idle cluster, a held job let go to queue that Slurm started at once,
    a backfilled job) was told "started before RSA nodes were free" while every RSA node
    was free: it started before it had RSA nodes (they are given when it is next to run)."""
    slurm = ScriptedSlurm()
    d = make_daemon(tmp_path, slurm, [])
    spec = DirectiveSpec(data_in="/pfs/in", early_start=EarlyStart.FALLBACK)
    slurm.set("7", "PENDING", "None", spec=spec)
    d.poll()
    slurm.set("7", "RUNNING", spec=spec)
    d.poll()
    settle(d)
    flush_urgent(d)
    assert len(d.sched.pool.free()) == 4  # every RSA node was free
    assert d.sched.records["7"].rsa_state.value == "declined"
    assert comments(slurm)[-1] == "RSA: started before it had RSA nodes: the job reads the PFS"


def test_a_released_job_its_user_holds_back_again_gives_its_rsa_nodes_up(
        tmp_path: Path) -> None:
    """Found by review: for a minute after rsad released a staged job, a pending
    ``BeginTime`` read as Slurm not having rescheduled it yet, even after Slurm had shown
    it on ``Resources``. Its user moving the begin time ahead again in that minute
    (``scontrol update JobId=N StartTime=now+1year``) kept it on-deck, locked in, its RSA
    nodes held while its line stayed the same (up to ``slurm.lockin.timeout``; for ever
    without one). Once Slurm showed it anything else, a ``BeginTime`` is a demotion."""
    slurm = ScriptedSlurm()
    seen: list[str] = []
    d = make_daemon(tmp_path, slurm, seen)
    slurm.set("7", "PENDING", "BeginTime", hold=HOLD)
    d.poll()
    settle(d)
    flush_urgent(d)
    assert released(slurm) == [f"7:{SPEC.to_admin_comment()}"]
    d.poll()  # still BeginTime, the marker gone: not rescheduled yet
    settle(d)
    slurm.set("7", "PENDING", "Resources")  # rescheduled: the cluster filled meanwhile
    d.poll()
    settle(d)
    assert d.sched.records["7"].rsa_state.value == "locked-in"
    slurm.set("7", "PENDING", "BeginTime")  # its user: StartTime=now+1year
    d.poll()
    settle(d)
    rec = d.sched.records["7"]
    assert rec.job_state is JobState.DEMOTED and not rec.nodes, rec


def test_a_held_job_the_rsa_will_not_serve_is_released_at_once(tmp_path: Path) -> None:
    slurm = ScriptedSlurm()
    seen: list[str] = []
    d = make_daemon(tmp_path, slurm, seen)
    slurm.set("7", "PENDING", "BeginTime", hold=HOLD,
              spec=DirectiveSpec(data_in="/pfs/in", nodes=99))  # more than the pool
    d.poll()
    settle(d)
    flush_urgent(d)
    assert d.sched.records["7"].rsa_state.value == "declined"
    assert len(released(slurm)) == 1
    last = [v for k, v in slurm.calls if k == "comment"][-1]
    assert last.startswith("RSA: no RAMDISK for this run") and "reads from the PFS" in last


def test_a_job_slurm_started_at_the_deadline_has_no_wait_left(tmp_path: Path) -> None:
    """rsad never released it (stage-in too slow): Slurm starts it at the deadline; the
    Prolog must not hold it for another wait_timeout."""
    slurm = ScriptedSlurm()
    seen: list[str] = []
    d = make_daemon(tmp_path, slurm, seen)
    rec_spec = DirectiveSpec(data_in="/pfs/in", data_out="/pfs/out")
    slurm.set("7", "PENDING", "BeginTime", hold=1010, spec=rec_spec)
    d.poll()  # no settle: stage-in outstanding
    slurm.set("7", "RUNNING", hold=1010, spec=rec_spec)
    d.sched.policy = StagingPolicy(early_start=EarlyStart.WAIT)
    d.poll()
    rec = d.sched.records["7"]
    due = rec.timers.get("wait-expired")
    assert rec.hold_until == 1010 and due is not None and due <= d.clock()


def test_an_array_tasks_hooks_reach_the_task_under_its_squeue_name(tmp_path: Path) -> None:
    """Issue 14: an array task's hooks see its own job id (131); rsad knows it as 127_4."""
    slurm = ScriptedSlurm()
    seen: list[str] = []
    d = make_daemon(tmp_path, slurm, seen)
    slurm.set("127_4", "PENDING", "Resources",
              spec=DirectiveSpec(data_in="/pfs/in/%a", data_out="/pfs/out/%A_%a"))
    d.poll()
    settle(d)
    rec = d.sched.records["127_4"]
    assert (rec.spec.data_in, rec.spec.data_out) == ("/pfs/in/4", "/pfs/out/127_4")
    stop = threading.Event()
    loop = threading.Thread(target=lambda: [d.drain(0.05) for _ in iter(stop.is_set, True)],
                            daemon=True)
    loop.start()
    try:
        routes = Routes(d)
        routes.dispatch(ROOT, "POST", "/v1/hooks/prolog_slurmctld",
                        {"job_id": "131", "array_job_id": "127", "array_task_id": "4"})
        assert str(d.sched.records["127_4"].job_state) == "running"
        assert "131" not in d.sched.records
        # a node's Prolog/Epilog knows only 131 (Slurm 22.05 gives them no SLURM_ARRAY_*)
        assert d.aliases == {"131": "127_4"}
        routes.dispatch(ROOT, "POST", "/v1/hooks/epilog_slurmctld",
                        {"job_id": "131", "exit_code": "0"})
        assert str(d.sched.records["127_4"].job_state) == "finished"
        with pytest.raises(ApiError, match="bad array task"):
            routes.dispatch(ROOT, "POST", "/v1/hooks/prolog_slurmctld",
                            {"job_id": "131", "array_job_id": "127", "array_task_id": "x"})
    finally:
        stop.set()
        loop.join(5)


def test_a_node_hook_before_slurmctlds_names_its_array_task_by_asking_slurm(
        tmp_path: Path) -> None:
    """Issue 14: under load a node's Prolog (own job id only) can reach rsad before
    slurmctld's hook names the pair: rsad asks Slurm once instead of treating the task
    as a job it does not track (which ran it without its RAMDISK)."""
    slurm = ScriptedSlurm()
    seen: list[str] = []
    d = make_daemon(tmp_path, slurm, seen)
    slurm.set("127_4", "PENDING", "Resources")
    slurm.tasks = {"131": ("127", "4"), "140": ("139", "1")}
    d.poll()
    settle(d)
    with serving(d):
        routes = Routes(d)
        routes.dispatch(ROOT, "POST", "/v1/hooks/epilog", {"job_id": "131", "node": "c1"})
        assert d.aliases == {"131": "127_4"}
        routes.dispatch(ROOT, "POST", "/v1/hooks/epilog", {"job_id": "131", "node": "c2"})
        # every task matched: a plain job's hooks (and an untracked array's) ask nothing
        routes.dispatch(ROOT, "POST", "/v1/hooks/epilog", {"job_id": "140", "node": "c1"})
        routes.dispatch(ROOT, "POST", "/v1/hooks/epilog", {"job_id": "55", "node": "c1"})
    assert [v for k, v in slurm.calls if k == "job_info"] == ["131"]
    assert d.aliases == {"131": "127_4"}


def test_another_users_job_never_passes_for_an_array_task(tmp_path: Path) -> None:
    """Issue 36: a job of another user, or a second job claiming a task already matched,
    is never taken for a tracked array task (its Epilog would end the task's lifecycle
    and its Prolog be handed the task's RAMDISK)."""
    slurm = ScriptedSlurm()
    seen: list[str] = []
    d = make_daemon(tmp_path, slurm, seen)
    slurm.set("127_4", "PENDING", "Resources")
    slurm.set("127_5", "PENDING", "Resources")
    # Slurm's answer would be that of a forged identity: the claim alone must not do
    slurm.tasks = {"200": ("127", "4"), "131": ("127", "4"), "201": ("127", "4"),
                   "300": ("127", "9")}
    slurm.users = {"200": "mallory"}
    d.poll()
    settle(d)
    with serving(d):
        routes = Routes(d)
        routes.dispatch(ROOT, "POST", "/v1/hooks/epilog", {"job_id": "200", "node": "c1"})
        assert d.aliases == {}  # mallory's job is not alice's task
        routes.dispatch(ROOT, "POST", "/v1/hooks/epilog", {"job_id": "131", "node": "c1"})
        assert d.aliases == {"131": "127_4"}
        routes.dispatch(ROOT, "POST", "/v1/hooks/epilog", {"job_id": "201", "node": "c1"})
        routes.dispatch(ROOT, "POST", "/v1/hooks/epilog", {"job_id": "300", "node": "c1"})
    assert d.aliases == {"131": "127_4"}  # taken already; not tracked
    assert d.sched.records["127_4"].job_state is JobState.ON_DECK


@pytest.mark.parametrize("hook", ["prolog_slurmctld", "prolog"])
def test_an_alias_in_a_hooks_body_is_never_taken_for_an_array_task_match(
        tmp_path: Path, hook: str) -> None:
    """Only rsad matches an own job id to an array task (from slurmctld's pair, or
    Slurm asked, the users compared). The hook routes kept an ``alias`` the caller put in
    the body, and the loop recorded it unchecked (logged and replayed): one hook from
    root on any compute node, or SlurmUser, naming alice's job 7 with ``alias: 900`` made
    every later hook of job 900, bob's or anybody's, alice's job 7's: 900's Epilog on c1
    marked c1 done with job 7 (its agent told to exit, its RAMDISK released and its
    output staged out without waiting for c1)."""
    d, slurm = nodeside_daemon(tmp_path)
    slurm.set("7", "PENDING", "Resources")
    d.poll()
    settle(d)
    assert state_of(d, "7") == "locked-in"
    body = {"job_id": "7", "alias": "900", "user": "alice", "node": "c1", "nodes": "c1"}
    with serving(d) as routes:
        routes.dispatch(ROOT, "POST", f"/v1/hooks/{hook}", body)
        assert "900" not in d.aliases, d.aliases
        routes.dispatch(ROOT, "POST", "/v1/hooks/epilog", {"job_id": "900", "node": "c1"})
    from rsa_scheduler.daemon.nodeside import nodeside_of

    side = nodeside_of(d.registry)
    assert side is not None
    job7 = side._jobs.get("7")
    assert job7 is None or "c1" not in job7.ended, job7
    again = Daemon(Scheduler(make_pool(), StagingPolicy()), slurm=slurm,
                   store=Store.open(tmp_path / "rsa.db", durability="normal"),
                   registry=instant_registry([]), workers=1, poll_interval=0)
    assert "900" not in again.aliases  # nor from the log


def test_a_reused_own_id_of_an_array_task_is_the_new_jobs_own(tmp_path: Path) -> None:
    """alice's array task 127_4 ran as job 131 (rsad matched the two from slurmctld's
    pair) and is released; slurmctld lost its state and gave 131 to alice's next job, an
    RSA job of its own. The match outlived the task's run (until the task leaves rsad's
    memory): the new job's PrologSlurmctld and EpilogSlurmctld were the task's, so rsad
    never heard 131 start (its node Prologs were answered from the task's record too:
    no RAMDISK mounted). A job the queue lists under a plain id is no task's: the match
    ends when its record begins, live and on replay."""
    slurm = ScriptedSlurm()
    d = make_daemon(tmp_path, slurm, [])
    slurm.set("127_4", "PENDING", "Resources")
    slurm.tasks = {"131": ("127", "4")}
    d.poll()
    settle(d)
    pair = {"job_id": "131", "array_job_id": "127", "array_task_id": "4", "user": "alice",
            "nodes": "c1"}
    with serving(d) as routes:
        routes.dispatch(ROOT, "POST", "/v1/hooks/prolog_slurmctld", pair)
    assert d.aliases == {"131": "127_4"}
    for state in ("RUNNING", "COMPLETED"):
        slurm.set("127_4", state)
        d.poll()
        settle(d)
    assert state_of(d, "127_4") == "released"
    slurm.rows, slurm.tasks = [], {}  # slurmctld without its state: 131 is a new job
    slurm.set("131", "PENDING", "Resources")
    d.poll()
    settle(d)
    assert "131" not in d.aliases, d.aliases
    with serving(d) as routes:
        got = routes.dispatch(ROOT, "POST", "/v1/hooks/prolog_slurmctld",
                              {"job_id": "131", "user": "alice", "nodes": "c1"})
    assert got["job_id"] == "131", got
    assert d.sched.records["131"].job_state is JobState.RUNNING
    again = Daemon(Scheduler(make_pool(), StagingPolicy()), slurm=slurm,
                   store=Store.open(tmp_path / "rsa.db", durability="normal"),
                   registry=instant_registry([]), workers=1, poll_interval=0)
    assert "131" not in again.aliases  # nor on replay


def test_slurmctlds_hooks_sent_again_change_nothing_more(tmp_path: Path) -> None:
    """A hook rsad took just before it was killed may come again (or be read again from
    the queue): a start heard twice, an end heard twice, and a start heard for a job that
    has ended change nothing more than the first did."""
    slurm = ScriptedSlurm()
    d = make_daemon(tmp_path, slurm, [])
    out = DirectiveSpec(data_out="/pfs/out")
    slurm.set("7", "PENDING", "Resources", spec=out)
    d.poll()
    settle(d)
    start = {"hook": "prolog_slurmctld", "job_id": "7", "user": "alice", "nodes": "c1"}
    end = {"hook": "epilog_slurmctld", "job_id": "7", "user": "alice", "exit_code": "0"}
    for _ in range(2):
        d.submit("hook", dict(start))
        settle(d)
        assert (state_of(d, "7"), d.sched.records["7"].job_state) == (
            "mounted-output", JobState.RUNNING)
    d.submit("hook", dict(end))
    settle(d)
    assert d.sched.records["7"].job_state is JobState.FINISHED
    cycle = d.sched.records["7"].cycle
    for hook in (end, start):
        d.submit("hook", dict(hook))
        settle(d)
        rec = d.sched.records["7"]
        assert (rec.job_state, rec.cycle, state_of(d, "7")) == (
            JobState.FINISHED, cycle, "released"), rec


def test_a_requeued_wait_job_is_held_again_until_its_ramdisk_is_rebuilt(
        tmp_path: Path) -> None:
    """Issue 14: requeued on an idle cluster, the job would start again before its first
    run's output is staged and a new RAMDISK built; it is held, then released staged."""
    slurm = ScriptedSlurm()
    seen: list[str] = []
    d = make_daemon(tmp_path, slurm, seen)
    d.sched.policy = StagingPolicy(early_start=EarlyStart.WAIT)
    out_only = DirectiveSpec(data_out="/pfs/out")
    slurm.set("7", "PENDING", "Resources", spec=out_only)
    d.poll()
    settle(d)
    slurm.set("7", "RUNNING", spec=out_only)
    d.poll()
    settle(d)
    assert d.sched.records["7"].rsa_state.value == "mounted-output"
    slurm.set("7", "PENDING", "BeginTime", spec=out_only)  # scontrol requeue
    d.poll()
    flush_urgent(d)
    holds = [v for k, v in slurm.calls if k == "hold"]
    # held for its first run's output first (issue 35: tests/unit/test_rerun_hold.py)
    assert len(holds) == 1 and holds[0].endswith(" hold=rerun")
    settle(d)  # the first run's output is staged out, the RAMDISK torn down
    d.poll()  # the rerun hold ends: held for its RAMDISK, as at submission
    flush_urgent(d)
    holds = [v for k, v in slurm.calls if k == "hold"]
    assert len(holds) == 2 and holds[1].startswith(f"7:1800:{out_only.to_admin_comment()} "
                                                   "hold=")
    d.poll()  # now held (the marker): on-deck again, allocated and built again
    settle(d)
    flush_urgent(d)
    rec = d.sched.records["7"]
    assert rec.cycle == 2 and rec.rsa_state.value == "locked-in", rec
    assert len(released(slurm)) == 1


def test_a_requeued_wait_job_is_held_for_its_ramdisk_only_once_slurm_finished_the_requeue(
        tmp_path: Path) -> None:
    """Found by review: the start hold of a requeued job (its earlier run holds no user
    data) was placed the cycle Slurm first showed it pending again, while Slurm still
    finished the requeue (``REQUEUED``), which then sets the requeue's own begin time
    (121 s ahead), replacing rsad's: the job was held 121 s, not until its RAMDISK is
    ready (the rerun hold waits for plain ``PENDING`` for this reason, issue 35)."""
    slurm = ScriptedSlurm()
    seen: list[str] = []
    d = make_daemon(tmp_path, slurm, seen)
    d.sched.policy = StagingPolicy(early_start=EarlyStart.WAIT)
    in_only = DirectiveSpec(data_in="/pfs/in")
    slurm.set("7", "PENDING", "Resources", spec=in_only)
    d.poll()
    settle(d)
    slurm.set("7", "RUNNING", spec=in_only)
    d.poll()
    settle(d)
    slurm.set("7", "REQUEUED", "None", spec=in_only)  # scontrol requeue, under way
    d.poll()
    settle(d)
    flush_urgent(d)
    assert [v for k, v in slurm.calls if k == "hold"] == []
    slurm.set("7", "PENDING", "BeginTime", spec=in_only)  # done: Slurm's own begin time
    d.poll()
    settle(d)
    flush_urgent(d)
    holds = [v for k, v in slurm.calls if k == "hold"]
    assert len(holds) == 1 and holds[0].startswith(f"7:1800:{in_only.to_admin_comment()} "
                                                   "hold="), holds


def test_a_heterogeneous_job_is_one_rsa_job_under_its_leaders_id(tmp_path: Path) -> None:
    """Issue 14: squeue lists 40+0 and 40+1; rsad tracks 40, sized for both components;
    only the leader's EpilogSlurmctld ends it."""
    slurm = ScriptedSlurm()
    seen: list[str] = []
    d = make_daemon(tmp_path, slurm, seen)
    slurm.set("40+0", "PENDING", "Resources")
    slurm.set("40+1", "PENDING", "Resources")
    d.poll()
    settle(d)
    assert set(d.sched.records) == {"40"}
    rec = d.sched.records["40"]
    assert rec.compute_nodes == 4 and rec.rsa_state.value == "locked-in"
    with serving(d) as routes:
        routes.dispatch(ROOT, "POST", "/v1/hooks/prolog_slurmctld",
                        {"job_id": "41", "het_job_id": "40", "het_job_offset": "1"})
        assert str(d.sched.records["40"].job_state) == "on-deck"  # the leader's says so
        routes.dispatch(ROOT, "POST", "/v1/hooks/prolog_slurmctld",
                        {"job_id": "40", "het_job_id": "40", "het_job_offset": "0"})
        assert str(d.sched.records["40"].job_state) == "running"
        routes.dispatch(ROOT, "POST", "/v1/hooks/epilog_slurmctld",
                        {"job_id": "41", "het_job_id": "40", "het_job_offset": "1",
                         "exit_code": "0"})
        assert str(d.sched.records["40"].job_state) == "running"
        routes.dispatch(ROOT, "POST", "/v1/hooks/epilog_slurmctld",
                        {"job_id": "40", "het_job_id": "40", "het_job_offset": "0",
                         "exit_code": "256"})
        assert str(d.sched.records["40"].job_state) == "finished"
    assert "heterogeneous" not in " ".join(v for k, v in slurm.calls if k == "comment")


def test_the_array_task_aliases_survive_a_restart(tmp_path: Path) -> None:
    slurm = ScriptedSlurm()
    seen: list[str] = []
    d = make_daemon(tmp_path, slurm, seen)
    slurm.set("127_4", "PENDING", "Resources")
    d.poll()
    settle(d)
    d.submit("hook", {"hook": "prolog_slurmctld", "job_id": "127_4", "alias": "131"})
    settle(d)
    assert d.aliases == {"131": "127_4"}
    d.shutdown()
    d.store.close()
    again = make_daemon(tmp_path, slurm, seen)
    assert again.aliases == {"131": "127_4"}


#: what job 7's teardown leaves on its node that went down (left_on_a_down_node)
LEFT = {"fs_id": "job7-c1", "job_id": "7", "tier": "ram"}


def left_on_a_down_node(d: Daemon, slurm: ScriptedSlurm) -> str:
    """Job 7's RAMDISK built, one of its nodes down, the job cancelled: its teardown
    leaves LEFT on that node (returned)."""
    d.registry.register(ActionKind.DESTROY_FS, lambda ctx: {"left_on": [
        {"node": n, **LEFT} for n in ctx.down]})
    slurm.set("7", "PENDING", "Resources")
    d.poll()
    settle(d)
    node = next(iter(NodeSet(d.sched.records["7"].nodes)))
    d.submit("node-state", (node, "down", "health", "ssh: no route"))
    settle(d)
    slurm.set("7", "CANCELLED")  # the job goes: its RAMDISK is destroyed without the node
    d.poll()
    settle(d)
    return str(node)


def test_what_a_teardown_left_on_a_down_node_is_remembered_until_it_is_cleaned(
        tmp_path: Path) -> None:
    slurm = ScriptedSlurm()
    seen: list[str] = []
    d = make_daemon(tmp_path, slurm, seen)
    left = LEFT
    node = left_on_a_down_node(d, slurm)
    assert d.debris == {node: [left]}
    d.submit("node-state", (node, "up", "root", ""))
    settle(d)
    assert d.sched.pool.state(node) is NodeState.DOWN  # an operator cannot resume it yet
    d.shutdown()
    d.store.close()
    again = make_daemon(tmp_path, slurm, seen)
    assert again.debris == {node: [left]}  # known after a restart
    again.submit("call", lambda: again.scrubbed(node))
    settle(again)
    assert again.debris == {}
    again.submit("node-state", (node, "up", "health", ""))
    settle(again)
    assert again.sched.pool.state(node) is NodeState.UP


def test_the_pool_events_are_found_under_at_pool_with_the_job_they_name(
        tmp_path: Path) -> None:
    """``node.debris`` names the job whose RAMDISK it was (``job_id``): the API spread its
    context over the event's own fields, so ``rsa events`` showed it under job 7, not
    ``@pool``; and ``rsa events --job @pool`` answered 404 ("job @pool is not tracked").
    Now the event is @pool's, the job shown as ``job``, and ``--job @pool`` lists the
    pool's events to operators (a user is told they are for operators)."""
    slurm = ScriptedSlurm()
    d = make_daemon(tmp_path, slurm, [])
    node = left_on_a_down_node(d, slurm)
    with serving(d) as routes:
        pool = routes.dispatch(ROOT, "GET", "/v1/events?job=@pool", None)["events"]
        assert {e["job_id"] for e in pool} == {"@pool"}
        debris = [e for e in pool if e["name"] == "node.debris"]
        assert [(e["node"], e["job"], e["fs_id"]) for e in debris] == [(node, "7", "job7-c1")]
        assert "node.state" in {e["name"] for e in pool}
        everything = routes.dispatch(ROOT, "GET", "/v1/events", None)["events"]
        assert [e["job_id"] for e in everything if e["name"] == "node.debris"] == ["@pool"]
        later = routes.dispatch(ROOT, "GET", f"/v1/events?job=@pool&since={debris[0]['seq']}",
                                None)["events"]
        assert all(e["seq"] > debris[0]["seq"] for e in later)
        with pytest.raises(ApiError, match=r"the @pool events .* are for operators") as no:
            routes.dispatch(ALICE, "GET", "/v1/events?job=@pool", None)
        assert no.value.status == HTTPStatus.FORBIDDEN
    d.shutdown()
    d.store.close()


def test_a_held_job_being_staged_is_not_demoted_by_an_rsad_restart(tmp_path: Path) -> None:
    """rsad does not keep its judgement of held jobs: after a restart the job is judged
    again; the cluster busy meanwhile must not read as a demotion of a job whose RAMDISK
    is on its way (it was judged able to start)."""
    slurm = ScriptedSlurm()
    seen: list[str] = []
    d = make_daemon(tmp_path, slurm, seen)
    slurm.set("7", "PENDING", "BeginTime", hold=HOLD)
    d.poll()  # on-deck, RSA nodes allocated, build-fs under way; then rsad dies
    assert d.sched.records["7"].nodes
    d.shutdown()
    d.store.close()
    slurm.idle = {"debug": 0}
    again = make_daemon(tmp_path, slurm, seen)
    again.poll()
    settle(again)
    rec = again.sched.records["7"]
    assert rec.job_state is JobState.ON_DECK and rec.rsa_state.value == "locked-in", rec


def test_a_job_released_just_before_an_rsad_restart_keeps_its_ramdisk(
        tmp_path: Path) -> None:
    """Found by review: rsad released a staged held job (begin time now, marker removed)
    and was killed before Slurm's next scheduling pass; Slurm still shows it pending on
    ``BeginTime``. The restarted rsad had no memory of the release and read it as a
    demotion: the RAMDISK was torn down and the job started from the PFS, its comment
    still saying "input staged to the RAMDISK; released to start"."""
    slurm = ScriptedSlurm()
    seen: list[str] = []
    d = make_daemon(tmp_path, slurm, seen)
    slurm.set("7", "PENDING", "BeginTime", hold=HOLD)
    d.poll()
    settle(d)
    flush_urgent(d)
    assert d.sched.records["7"].rsa_state.value == "locked-in"
    assert released(slurm) == [f"7:{SPEC.to_admin_comment()}"]  # Slurm: still BeginTime
    d.shutdown()  # rsad killed before it polled again
    d.store.close()
    again = make_daemon(tmp_path, slurm, seen)
    again.poll()
    settle(again)
    rec = again.sched.records["7"]
    assert rec.job_state is JobState.ON_DECK and rec.rsa_state.value == "locked-in", rec
    slurm.set("7", "RUNNING")
    again.poll()
    settle(again)
    assert again.sched.records["7"].rsa_state.value == "mounted-input"


def test_a_held_job_judged_again_after_a_restart_is_not_counted_twice(
        tmp_path: Path) -> None:
    """Found by review: after a restart every held job is judged again, and the RSA nodes
    left for the newly held counted the on-deck jobs already waiting (alice's job 7:
    held, at her limit of two RSA nodes) and then each one's nodes again as it was
    judged. The cluster busy meanwhile, bob's job 8 (it needs two of the two free RSA
    nodes) found none left for it, was kept held and given both, though it cannot start
    (it holds them locked in, waiting for compute nodes). Counted once, it is let go to
    queue, as before the restart."""
    from rsa_scheduler.core.allocator import Pool, RsaNode
    from rsa_scheduler.core.policy import AllocationPolicy, Tier

    def make(slurm: ScriptedSlurm) -> Daemon:
        pool = Pool([RsaNode(f"rsa{i}", Tier.RAM, 2 << 30) for i in range(1, 5)],
                    AllocationPolicy(ratio=2, min_nodes=1, max_nodes=4, max_request=4,
                                     user_nodes=2))
        store = Store.open(tmp_path / "rsa.db", durability="normal")
        clock = iter(float(t) for t in range(1000, 10**6))
        d = Daemon(Scheduler(pool, StagingPolicy()), slurm=slurm, store=store,
                   registry=with_slurm(instant_registry([]), slurm), workers=2,
                   poll_interval=0, clock=lambda: next(clock))
        d.start()
        return d

    slurm = ScriptedSlurm()
    d = make(slurm)
    for job in ("1", "2"):  # alice's: her two RSA nodes, then they run
        slurm.set(job, "PENDING", "Resources")
    d.poll()
    settle(d)
    for job in ("1", "2"):
        slurm.set(job, "RUNNING")
    d.poll()
    settle(d)
    slurm.set("7", "PENDING", "BeginTime", hold=HOLD)  # alice's: waits for her limit
    d.poll()
    settle(d)
    assert "7" in d.sched.waiting and len(d.sched.pool.free()) == 2
    d.shutdown()
    d.store.close()
    slurm.idle = {"debug": 0}
    comment = with_hold(SPEC.to_admin_comment(), HOLD)
    slurm.rows.append(QueueRow("8", "PENDING", "BeginTime", 5, 4, "bob", comment, "debug"))
    again = make(slurm)
    again.poll()
    settle(again)
    flush_urgent(again)
    rec = again.sched.records["8"]
    assert rec.rsa_state.value == "none" and not rec.nodes, rec.message
    assert "8" in [r.split(":")[0] for r in released(slurm)]

def test_a_teardown_waits_for_the_cancelled_stage_in_to_wind_down(tmp_path: Path) -> None:
    """Chaos run (seed 20262128): a demotion cancels the stage-in and starts the teardown
    at once; the stage-in's last command made the job's cgroup on the RSA node again after
    the teardown had reaped it. The teardown now starts once the stage-in returned."""
    slurm = ScriptedSlurm()
    seen: list[str] = []
    order: list[str] = []
    d = make_daemon(tmp_path, slurm, seen)
    staging = threading.Event()

    def stage_in(ctx: ActionContext) -> Mapping[str, Any]:
        staging.set()
        while not ctx.cancel.cancelled:
            time.sleep(0.01)
        time.sleep(0.3)  # one more command as the user, after the cancel
        order.append("stage-in over")
        return {}

    def destroy(ctx: ActionContext) -> Mapping[str, Any]:
        order.append("teardown")
        return {}

    d.registry.register(ActionKind.STAGE_IN, stage_in)
    d.registry.register(ActionKind.DESTROY_FS, destroy)
    slurm.set("7", "PENDING", "Resources")
    d.poll()
    drained_until(d, staging.is_set)
    assert staging.is_set() and d.sched.records["7"].rsa_state.value == "staging-in"
    slurm.set("7", "PENDING", "Priority")  # an urgent job came first: demoted
    d.poll()
    settle(d)
    assert order == ["stage-in over", "teardown"]
    assert d.sched.records["7"].rsa_state.value == "released"


def staging_in(d: Daemon, slurm: ScriptedSlurm, started: threading.Event) -> None:
    """Job 7 on deck, polled until its stage-in (``started`` by the executor) runs."""
    slurm.set("7", "PENDING", "Resources")
    d.poll()
    drained_until(d, started.is_set)
    assert started.is_set() and d.sched.records["7"].rsa_state.value == "staging-in"


def test_shutdown_waits_for_the_cancelled_stage_in_to_return(tmp_path: Path) -> None:
    slurm = ScriptedSlurm()
    d = make_daemon(tmp_path, slurm, [])
    started = threading.Event()
    order: list[str] = []

    def stage_in(ctx: ActionContext) -> Mapping[str, Any]:
        started.set()
        while not ctx.cancel.cancelled:
            time.sleep(0.01)
        time.sleep(0.3)  # winding down
        order.append("stage-in over")
        return {}

    d.registry.register(ActionKind.STAGE_IN, stage_in)
    staging_in(d, slurm, started)
    d.shutdown(timeout=30)
    assert order == ["stage-in over"]
    d.store.close()


def test_shutdown_gives_up_after_its_timeout_and_says_what_still_runs(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    slurm = ScriptedSlurm()
    d = make_daemon(tmp_path, slurm, [])
    started, release = threading.Event(), threading.Event()
    cancelled: list[bool] = []

    def stage_in(ctx: ActionContext) -> Mapping[str, Any]:
        started.set()
        release.wait(60)  # a command that does not answer the cancel
        cancelled.append(ctx.cancel.cancelled)
        return {}

    d.registry.register(ActionKind.STAGE_IN, stage_in)
    staging_in(d, slurm, started)
    action = next(a for a, r in d.running.items() if r.action.kind is ActionKind.STAGE_IN)
    stopper = threading.Thread(target=d.shutdown, kwargs={"timeout": 0.3})
    begun = time.monotonic()
    try:
        with caplog.at_level("WARNING", logger="rsa_scheduler.daemon.dispatch"):
            stopper.start()
            stopper.join(10)
            assert not stopper.is_alive(), "shutdown ignored its timeout"
        assert 0.3 <= time.monotonic() - begun < 5
        assert ("the bulk lane still busy after 0.3s, left running; actions in flight: "
                f"{action}") in caplog.text
    finally:
        release.set()
        stopper.join(10)
        d.dispatcher.shutdown()  # no limit: the stage-in returns
    assert cancelled == [True]
    d.store.close()


def test_a_lane_stopped_after_the_deadline_is_busy_only_while_its_work_runs() -> None:
    # CI: the bulk lane used the whole timeout, the urgent lane was stopped with none
    # left, and its idle threads had not yet woken to exit: "bulk and urgent still busy"
    from rsa_scheduler.daemon.dispatch import Lane, _stop

    idle = Lane(max_workers=64, thread_name_prefix="t-idle")
    for f in [idle.submit(time.sleep, 0.05) for _ in range(64)]:  # 64 threads to wake
        f.result()
    assert idle.undone == 0
    assert _stop(idle, time.monotonic() - 1)  # the deadline passed before it was stopped

    release = threading.Event()
    busy = Lane(max_workers=1, thread_name_prefix="t-busy")
    running = busy.submit(release.wait, 30)
    queued = busy.submit(time.sleep, 0)
    assert busy.undone == 2
    try:
        assert not _stop(busy, time.monotonic() + 0.1)
        assert queued.cancelled() and busy.undone == 1  # the cancelled one is done
    finally:
        release.set()
    assert running.result(10) is True
    assert _stop(busy, None) and busy.undone == 0


def test_new_quiet_jobs_beyond_the_limit_wait_for_a_later_cycle() -> None:
    from rsa_scheduler.daemon.cycle import defer_first_sights

    def row(job: str, reason: str, prio: int = 10, state: str = "PENDING") -> QueueRow:
        return QueueRow(job, state, reason, prio, 1, "alice", "rsa1:x")

    rows = [row("9_2", "Priority"), row("9_10", "Priority"), row("12", "JobHeldUser", 50),
            row("3", "Priority"), row("4", "Resources"), row("5", "BeginTime"),
            row("6", "Priority", state="RUNNING"), row("7", "Priority"),
            row("8+0", "Priority"), row("11", "Dependency")]
    known = {"7": object()}
    kept, later = defer_first_sights(rows, known, {"11"}, limit=2)
    # on-deck, start hold, running, known, waited on, het leader: always; then the best 2
    # of the quiet new ones (priority first, then submit order: 9_2 before 9_10)
    assert {r.job_id for r in kept} == {"4", "5", "6", "7", "8+0", "11", "12", "3"}
    assert later == {"9_2", "9_10"}
    assert defer_first_sights(rows, known, {"11"}, limit=6) == (rows, set())


@pytest.mark.parametrize("cls", [ScriptedSlurm, TextSlurm])
def test_a_fresh_rsad_takes_a_big_queue_on_over_several_cycles(
        tmp_path: Path, cls: type[ScriptedSlurm]) -> None:
    slurm = cls()
    d = make_daemon(tmp_path, slurm, [])
    d.first_sights_per_cycle = 10
    for i in range(25):
        slurm.set(f"{100 + i}", "PENDING", "Priority")
    slurm.set("7", "PENDING", "Resources")
    d.poll()
    # the on-deck job at once, 10 of the 25 quiet ones (lowest ids first)
    assert set(d.sched.records) == {"7"} | {f"{100 + i}" for i in range(10)}
    assert d.sched.records["7"].rsa_state.value != "none"
    d.poll()
    d.poll()
    assert set(d.sched.records) == {"7"} | {f"{100 + i}" for i in range(25)}
    d.poll()  # and from then on nothing is taken twice or lost
    assert len(d.sched.records) == 26
    d.shutdown()



def test_a_long_comment_keeps_what_happened_and_what_to_do() -> None:
    from rsa_scheduler.daemon.dispatch import COMMENT_MAX, fit_comment

    short = "RSA: input staged to the RAMDISK; released to start"
    assert fit_comment(short) == short
    long = ("RSA: no RAMDISK for this run (" + "why " * 60 +
            "set #RSA_CAPACITY=3G); released to start: it reads from the PFS")
    fitted = fit_comment(long)
    assert len(fitted) <= COMMENT_MAX < len(long)
    assert fitted.startswith("RSA: no RAMDISK for this run (why")
    assert fitted.endswith("set #RSA_CAPACITY=3G); released to start: it reads from the PFS")
    assert " … " in fitted


def test_redact_hides_whole_job_ids_only() -> None:
    from rsa_scheduler.daemon.views import redact

    text = "job 7 and 7_1 (array 7), not 17, 7x, 1.7 or rsa7; 71_7 too"
    assert redact(text, {"7", "7_1", "71_7"}) == (
        "job (hidden) and (hidden) (array (hidden)), not 17, 7x, 1.7 or rsa7; (hidden) too")
    assert redact(text, ()) == text


def test_an_operator_may_see_the_status_as_a_user_sees_it(routes: Routes) -> None:
    """``rsa-bb status UID`` (SlurmUser) asks for the view ``scontrol show bbstat``'s
    caller may see: bob's hides alice's job; nobody else may ask as another user."""
    def held(caller: Caller, path: str) -> set[str]:
        return {n["job"] for n in routes.dispatch(caller, "GET", path, None)["nodes"]
                if n["job"]}

    slurm = Caller(64030, "slurm")
    assert held(slurm, "/v1/status?as=4242") == {"(hidden)"} == held(BOB, "/v1/status")
    assert held(slurm, "/v1/status?as=0") == {"7"} == held(ROOT, "/v1/status")
    with pytest.raises(ApiError, match="only root or SlurmUser may see the status as another"):
        routes.dispatch(BOB, "GET", "/v1/status?as=0", None)
    with pytest.raises(ApiError, match="as= takes a uid"):
        routes.dispatch(ROOT, "GET", "/v1/status?as=root", None)


# ---- a job id Slurm gives another user's job (its state lost, or its ids wrapped) -------

BOBS = DirectiveSpec(data_in="/pfs/bob/in")


def alices_job_7_ends(d: Daemon, slurm: ScriptedSlurm) -> None:
    """alice's job 7 is on-deck, staged, then gone from the queue: released."""
    slurm.set("7", "PENDING", "Resources")
    d.poll()
    settle(d)
    slurm.rows = []
    d.poll()
    settle(d)
    assert d.sched.records["7"].rsa_state is RsaState.RELEASED


def bobs_job(slurm: ScriptedSlurm, job: str, state: str, reason: str) -> None:
    slurm.rows = [r for r in slurm.rows if r.job_id != job] + [QueueRow(
        job, state, reason, 10, 2, "bob", BOBS.to_admin_comment())]


@pytest.mark.parametrize("cls", [ScriptedSlurm, TextSlurm])
def test_a_job_id_another_user_reuses_is_theirs_with_nothing_of_the_earlier_job(
        tmp_path: Path, cls: type[ScriptedSlurm]) -> None:
    """alice's job 7 ended and was released; slurmctld lost its state and gave the id to
    bob: rsad reads bob's own directives and serves his job as bob; none of the facts of
    alice's actions (her RAMDISK's mount, lock token, a reset or verify milestone) is
    taken for his, and neither sees the other's history."""
    slurm = cls()
    seen: list[str] = []
    d = make_daemon(tmp_path, slurm, seen)
    alices_job_7_ends(d, slurm)
    assert d.facts["7"]["lock_orig"]["value"] == "normal"
    bobs_job(slurm, "7", "PENDING", "Resources")
    d.poll()
    rec = d.sched.records["7"]
    assert (rec.user, rec.spec) == ("bob", BOBS)
    assert "lock_orig" not in d.facts.get("7", {})  # alice's, before bob's lock-in
    settle(d)
    assert d.sched.records["7"].rsa_state.value == "locked-in"
    with serving(d) as routes:
        mine = routes.dispatch(BOB, "GET", "/v1/jobs/7", None)
        assert mine["user"] == "bob"
        assert mine["events"][0]["name"] == "job.tracked"
        assert not any(e.get("user") == "alice" for e in mine["events"])
        listed = routes.dispatch(BOB, "GET", "/v1/events", None)["events"]
        assert listed and listed[0]["name"] == "job.tracked"
        by_job = routes.dispatch(BOB, "GET", "/v1/events?job=7", None)["events"]
        assert [e["seq"] for e in by_job] == [e["seq"] for e in listed] == [
            e["seq"] for e in mine["events"]]
        with pytest.raises(ApiError, match="not tracked"):
            routes.dispatch(ALICE, "GET", "/v1/jobs/7", None)
        everything = routes.dispatch(ROOT, "GET", "/v1/events?job=7", None)["events"]
        assert [e["name"] for e in everything].count("job.tracked") == 2
    d2 = make_daemon(tmp_path, slurm, [])  # the same after a restart (replay)
    assert d2.sched.records["7"].user == "bob"
    assert d2.facts["7"]["lock_orig"]["value"] == "normal"  # bob's own


def filler(store: Store, job: str, count: int = 10_001) -> None:
    """``count`` events of ``job`` in the log (a long-lived rsad's history)."""
    store.append([Event(1.0, job, "job.hook", {"hook": "filler"}) for _ in range(count)])


def test_a_users_events_are_theirs_however_long_the_log_before_them(
        tmp_path: Path) -> None:
    """rsa events as a plain user read the whole log's oldest 10,000 events and kept
    theirs: on a cluster whose log is longer than that, none (found by review); now
    their own jobs' events are read by job."""
    slurm = ScriptedSlurm()
    d = make_daemon(tmp_path, slurm, [])
    filler(d.store, "8")  # other jobs' history, before alice's job
    slurm.set("7", "PENDING", "Resources")
    d.poll()
    settle(d)
    with serving(d) as routes:
        mine = routes.dispatch(ALICE, "GET", "/v1/events", None)["events"]
        assert mine and mine[0]["name"] == "job.tracked"
        assert {e["job_id"] for e in mine} == {"7"}
        later = routes.dispatch(ALICE, "GET", f"/v1/events?since={mine[0]['seq']}",
                                None)["events"]
        assert [e["seq"] for e in later] == [e["seq"] for e in mine[1:]]
        assert routes.dispatch(BOB, "GET", "/v1/events", None)["events"] == []


def test_a_reused_ids_earlier_history_stays_hidden_however_long_it_is(
        tmp_path: Path) -> None:
    """Where the record of a job id began was found in the id's first 10,000 events: past
    that many of alice's, bob's job under her reused id was shown her whole history (her
    paths, her messages) as his (found by review)."""
    slurm = ScriptedSlurm()
    d = make_daemon(tmp_path, slurm, [])
    alices_job_7_ends(d, slurm)
    filler(d.store, "7")
    bobs_job(slurm, "7", "PENDING", "Resources")
    d.poll()
    settle(d)
    assert d.sched.records["7"].user == "bob"
    with serving(d) as routes:
        for events in (routes.dispatch(BOB, "GET", "/v1/jobs/7", None)["events"],
                       routes.dispatch(BOB, "GET", "/v1/events?job=7", None)["events"],
                       routes.dispatch(BOB, "GET", "/v1/events", None)["events"]):
            assert events[0]["name"] == "job.tracked"
            assert not [e for e in events if e.get("hook") == "filler"]
            assert "alice" not in json.dumps(events)


def test_a_reused_job_id_holding_the_earlier_jobs_output_is_staged_out_first(
        tmp_path: Path) -> None:
    """alice's job 7 runs with output on its RAMDISK when Slurm's queue shows the id as
    bob's: alice's job is gone, its output staged out and verified as alice, then bob's
    job gets a record of its own."""
    slurm = TextSlurm()
    seen: list[str] = []
    d = make_daemon(tmp_path, slurm, seen)
    slurm.set("7", "PENDING", "Resources", spec=DirectiveSpec(data_out="/pfs/out"))
    d.poll()
    settle(d)
    slurm.set("7", "RUNNING", spec=DirectiveSpec(data_out="/pfs/out"))
    d.poll()
    settle(d)
    assert d.sched.records["7"].rsa_state is RsaState.MOUNTED_OUTPUT
    flush_urgent(d)
    told = len(slurm.calls)
    bobs_job(slurm, "7", "PENDING", "Priority")
    d.poll()
    assert d.sched.records["7"].user == "alice"
    assert d.sched.records["7"].rsa_state.value == "staging-out"
    settle(d)
    assert d.sched.records["7"].rsa_state.value == "released"
    d.urgent.shutdown(wait=True)
    d.dispatcher.messages.shutdown(wait=True)
    # alice's "stage-out finished: ... in /pfs/out" is never written on bob's job
    assert [c for c in slurm.calls[told:] if c[0] == "comment"] == []
    d.poll()  # the same queue line: observed again, now bob's
    assert (d.sched.records["7"].user, d.sched.records["7"].spec) == ("bob", BOBS)


def test_slurmctlds_hooks_of_another_users_job_of_a_tracked_id_are_not_its_news(
        tmp_path: Path) -> None:
    """PrologSlurmctld and EpilogSlurmctld name the job's user: those of bob's job that
    has the id of alice's tracked job (Slurm lost its state) neither move alice's record
    (her released job "started": declined, and told so in bob's job's comment) nor end
    her running job's (its output staged out and the RAMDISK destroyed under it)."""
    slurm = ScriptedSlurm()
    seen: list[str] = []
    d = make_daemon(tmp_path, slurm, seen)
    slurm.set("7", "PENDING", "Resources", spec=DirectiveSpec(data_out="/pfs/out"))
    d.poll()
    settle(d)
    slurm.set("7", "RUNNING", spec=DirectiveSpec(data_out="/pfs/out"))
    d.poll()
    settle(d)
    assert d.sched.records["7"].rsa_state is RsaState.MOUNTED_OUTPUT
    for hook in ("prolog_slurmctld", "epilog_slurmctld"):
        d.submit("hook", {"hook": hook, "job_id": "7", "user": "bob", "exit_code": "0"})
        d.drain()
        rec = d.sched.records["7"]
        assert (rec.job_state, rec.rsa_state) == (JobState.RUNNING, RsaState.MOUNTED_OUTPUT)
    d.submit("hook", {"hook": "epilog_slurmctld", "job_id": "7", "user": "alice",
                      "exit_code": "0"})
    d.drain()
    assert d.sched.records["7"].rsa_state.value == "staging-out"  # hers: it ended


def state_of(d: Daemon, job: str) -> str:
    return d.sched.records[job].rsa_state.value


def test_a_user_name_slurm_could_not_resolve_is_not_another_users_job(
        tmp_path: Path) -> None:
    """squeue prints a uid for a user it cannot resolve (a name service hiccup on rsad's
    host), and slurmctld's hooks likewise: the running job is still the same job, never
    taken for another user's (its output staged out and destroyed while it writes)."""
    slurm = ScriptedSlurm()
    d = make_daemon(tmp_path, slurm, [])
    spec = DirectiveSpec(data_out="/pfs/out")
    slurm.set("7", "PENDING", "Resources", spec=spec)
    d.poll()
    settle(d)
    slurm.set("7", "RUNNING", spec=spec)
    d.poll()
    settle(d)
    assert d.sched.records["7"].rsa_state.value == "mounted-output"
    row = slurm.rows[0]
    slurm.rows = [QueueRow(row.job_id, row.state, "Prolog", row.priority, row.num_nodes,
                           "1001", row.admin_comment)]
    d.poll()
    assert state_of(d, "7") == "mounted-output"  # runs on
    d.submit("hook", {"hook": "epilog_slurmctld", "job_id": "7", "user": "1001",
                      "exit_code": "0"})
    d.drain()
    assert state_of(d, "7") == "staging-out"  # the hook: it ended
    assert d.sched.records["7"].user == "alice"


def test_a_node_prolog_of_another_users_job_of_a_tracked_id_learns_nothing_of_it(
        tmp_path: Path) -> None:
    """The node Prolog of bob's job that has the id of alice's declined job (Slurm lost
    its state; rsad has not read the queue since) was answered from alice's record: her
    message (what she was told, her paths) went into bob's job's RSA_MESSAGE. The Prolog
    names the job's user (SLURM_JOB_USER): another user's job learns nothing of it."""
    d, slurm = nodeside_daemon(tmp_path, {ActionKind.STAGE_IN})
    slurm.set("7", "PENDING", "Resources")
    d.poll()
    settle(d)
    assert state_of(d, "7") == "declined"
    with serving(d) as routes:
        ans = routes.dispatch(ROOT, "POST", "/v1/hooks/prolog",
                              {"job_id": "7", "node": "c1", "nodes": "c1", "user": "bob"})
        assert ans["do"] == "nothing" and "declined" not in ans, ans
        ans = routes.dispatch(ROOT, "POST", "/v1/hooks/prolog",
                              {"job_id": "7", "node": "c1", "nodes": "c1", "user": "alice"})
        assert "stage-in refused" in ans["declined"], ans  # hers


class AccountedSlurm(ScriptedSlurm):
    """A Slurm with accounting: sacct knows how the jobs in ``ended`` ended."""

    def __init__(self) -> None:
        super().__init__()
        self.ended: dict[str, str] = {}
        self.asked: list[list[str]] = []

    def end_states(self, job_ids: Sequence[str]) -> dict[str, str]:
        self.asked.append(list(job_ids))
        return {j: self.ended[j] for j in job_ids if j in self.ended}


def test_a_job_gone_from_the_queue_before_its_end_state_was_seen_gets_it_from_sacct(
        tmp_path: Path) -> None:
    slurm = AccountedSlurm()
    d = make_daemon(tmp_path, slurm, [])
    slurm.set("7", "PENDING", "Resources")
    d.poll()
    settle(d)
    d.submit("hook", {"hook": "prolog_slurmctld", "job_id": "7"})
    d.submit("hook", {"hook": "epilog_slurmctld", "job_id": "7", "exit_code": "0"})
    d.drain()
    d.poll()  # still listed (COMPLETING: no end state yet): accounting is not asked
    assert slurm.asked == []
    # purged before a poll listed it ended (MinJobAge, or rsad was down): sacct says
    slurm.rows = [r for r in slurm.rows if r.job_id != "7"]
    slurm.ended["7"] = "CANCELLED"
    d.poll()
    assert slurm.asked == [["7"]]
    assert d.sched.records["7"].end_state == "CANCELLED"
    assert [e.context["slurm_state"] for e in d.store.events("7")
            if e.name == "job.ended"] == ["CANCELLED"]
    d.poll()
    assert slurm.asked == [["7"]]  # asked once


def test_without_accounting_a_gone_job_keeps_no_end_state_and_is_asked_nothing(
        tmp_path: Path) -> None:
    slurm = ScriptedSlurm()  # no end_states: a port without accounting
    d = make_daemon(tmp_path, slurm, [])
    slurm.set("7", "PENDING", "Resources")
    d.poll()
    settle(d)
    d.submit("hook", {"hook": "epilog_slurmctld", "job_id": "7", "exit_code": "0"})
    d.drain()
    slurm.rows = []
    d.poll()
    assert d.sched.records["7"].end_state == ""
    assert not d.end_states.tries


def test_held_jobs_are_judged_without_a_slurm_call_each(tmp_path: Path) -> None:
    """A big held array next to start cost one synchronous Slurm call per task on rsad's
    loop on d0d1991 (issue 39): the partition comes with the one queue read now."""
    slurm = ScriptedSlurm()
    d = make_daemon(tmp_path, slurm, [])
    for t in range(50):
        slurm.set(f"300_{t}", "PENDING", "BeginTime", hold=HOLD)
    slurm.rows = [dataclasses.replace(r, partition="debug", time_limit="5:00")
                  for r in slurm.rows]
    d.poll()
    assert [c for c in slurm.calls if c[0] == "job_info"] == []
    assert all(d.holds.can_start.get(f"300_{t}") is not None for t in range(50))


# ---- the same user's new job under a reused job id (Slurm's identity tells them apart) --

def alices_job(slurm: ScriptedSlurm, job: str, state: str, spec: DirectiveSpec,
               submitted: str, restarts: int = 0, reason: str = "None") -> None:
    slurm.rows = [r for r in slurm.rows if r.job_id != job] + [QueueRow(
        job, state, reason, 10, 2, "alice", spec.to_admin_comment(),
        submitted=submitted, restarts=restarts)]


def test_the_same_users_new_job_under_a_reused_id_is_a_job_of_its_own(
        tmp_path: Path) -> None:
    """alice's job 7 runs with output on its RAMDISK; slurmctld lost its state and gave
    the id to alice's next job (a new submit time, no restart counted). On main it was
    taken for a requeue of the earlier job and served with its directives. Now the
    earlier job is gone: its output is staged out and verified first; slurmctld's hooks
    and a node Prolog of the new job are not the earlier job's; then the new job gets a
    record of its own, with its own directives and a cycle the earlier job never had
    (its RAMDISK, action ids and tar archives never share a name with it); a requeue of
    it, counting more restarts than the earlier job did, never makes it the earlier job
    again."""
    clock = iter(float(t) for t in range(1000, 10**6))
    d, slurm = nodeside_daemon(tmp_path, clock=lambda: next(clock))
    first, second = DirectiveSpec(data_out="/pfs/out"), DirectiveSpec(data_out="/pfs/out2")
    alices_job(slurm, "7", "PENDING", first, "2026-11-28T10:00:00", reason="Resources")
    d.poll()
    settle(d)
    alices_job(slurm, "7", "RUNNING", first, "2026-11-28T10:00:00")
    d.poll()
    settle(d)
    assert state_of(d, "7") == "mounted-output"
    alices_job(slurm, "7", "PENDING", second, "2026-11-28T12:00:00", reason="Priority")
    d.poll()
    assert d.sched.records["7"].spec == first and "7" in d.sched.displaced
    for hook in ("prolog_slurmctld", "epilog_slurmctld"):  # the new job's: not its news
        d.submit("hook", {"hook": hook, "job_id": "7", "user": "alice", "exit_code": "0"})
        d.drain()
    with serving(d) as routes:
        ans = routes.dispatch(ROOT, "POST", "/v1/hooks/prolog",
                              {"job_id": "7", "node": "c1", "nodes": "c1", "user": "alice"})
        assert ans["do"] == "nothing", ans  # never the earlier job's RAMDISK
    settle(d)
    rec = d.sched.records["7"]
    assert (rec.spec, rec.rsa_state.value) == (first, "released")
    names = [e.name for e in d.store.events("7")]
    assert "job.untracked" not in names
    d.poll()  # the earlier job's cycle is over: the id is the new job's
    rec = d.sched.records["7"]
    assert (rec.spec, rec.submitted, rec.cycle) == (second, "2026-11-28T12:00:00", 1)
    alices_job(slurm, "7", "PENDING", second, "2026-11-28T12:00:00", reason="Resources")
    d.poll()
    settle(d)
    alices_job(slurm, "7", "RUNNING", second, "2026-11-28T12:00:00")
    d.poll()
    settle(d)
    assert d.sched.records["7"].cycle == 2
    actions = [a for e in d.store.events("7") if e.name == "rsa.transition"
               for a in e.context["actions"]]
    assert len(actions) == len(set(actions))  # no action id of the two jobs is the same
    # the new job requeued twice (COMPLETING with the count raised, then pending anew)
    for n, when in ((1, "2026-11-28T12:00:00"), (1, "2026-11-28T12:05:00"),
                    (2, "2026-11-28T12:10:00")):
        alices_job(slurm, "7", "PENDING" if when[-5:] != "00:00" else "COMPLETING",
                   second, when, restarts=n)
        d.poll()
        settle(d)
        assert d.sched.records["7"].spec == second and "7" not in d.sched.displaced
    d2 = make_daemon(tmp_path, slurm, [])  # the same after a restart (replay)
    assert (d2.sched.records["7"].spec, d2.sched.records["7"].restarts) == (second, 2)


class MailSlurm(ScriptedSlurm):
    """Slurm that has a job's mail request until the job's MinJobAge has passed."""

    def __init__(self) -> None:
        super().__init__()
        self.forgotten = False

    def job_mail(self, job_id: str) -> tuple[str, str] | None:
        from rsa_scheduler.slurm.port import SlurmError

        if self.forgotten:
            raise SlurmError("slurm_load_jobs error: Invalid job id specified")
        return ("alice@example.org", "END")

    def show_config(self) -> dict[str, str]:
        return {"MailProg": "/usr/bin/mail", "SlurmUser": "slurm(64030)"}


def test_the_verified_mail_goes_out_though_slurm_forgot_the_job_during_its_stage_out(
        tmp_path: Path) -> None:
    """Issue 32: the outcome mail read the job's MailUser/MailType from Slurm when the
    output was verified; a stage-out that outlasted MinJobAge sent none. What the job
    asked for is read when its stage-out begins and kept as a fact (an event: also
    across a restart); the mail goes out from it."""
    from rsa_scheduler.runner import Completed, Identity

    slurm = MailSlurm()
    seen: list[str] = []
    mails: list[list[str]] = []
    reg = with_slurm(instant_registry(seen), slurm)
    d_box: list[Daemon] = []

    def stage_out(ctx: ActionContext) -> Mapping[str, Any]:
        # the mail request is recorded before Slurm forgets the job (MinJobAge) mid-copy
        until(lambda: "mail" in d_box[0].facts.get("7", {}))
        slurm.forgotten = True
        return {}

    reg.register(ActionKind.STAGE_OUT, stage_out)
    store = Store.open(tmp_path / "rsa.db", durability="normal")
    clock = iter(float(t) for t in range(1000, 10**6))
    d = Daemon(Scheduler(make_pool(), StagingPolicy()), slurm=slurm, store=store,
               registry=reg, workers=2, poll_interval=0, clock=lambda: next(clock))
    d_box.append(d)
    assert d.mailer is not None

    def run(argv: Sequence[str], **_kw: Any) -> Completed:
        mails.append(list(argv))
        return Completed(tuple(argv), 0, "", "", 0.0)

    d.mailer.runner = run
    d.mailer.identity = lambda name: Identity(user="slurm", uid=64030, gid=64030)
    d.start()
    out = DirectiveSpec(data_out="/pfs/out")
    for state, reason in (("PENDING", "Resources"), ("RUNNING", "None"),
                          ("COMPLETED", "None")):
        slurm.set("7", state, reason, spec=out)
        d.poll()
        settle(d)
    until(lambda: bool(mails))  # the mail is sent on the urgent lane
    assert slurm.forgotten
    assert d.facts["7"]["mail"] == ["alice@example.org", "END"]
    assert mails and mails[0][-1] == "alice@example.org" and "verified" in mails[0][2]
    assert [e for e in d.store.events("7") if e.name == "action.milestone"
            and "mail" in (e.context.get("detail") or {})]


def test_a_compute_node_whose_hooks_are_older_than_rsad_is_said_once_and_shown(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A rolling upgrade: c2's node package (or a job's agent started before c2's
    upgrade) names no hook protocol. rsad logs one line naming the node, the job and the
    fix, rsa status shows it to operators (not to users: it names jobs) until c2 speaks
    rsad's protocol; the old node's requests are served as before."""
    from rsa_scheduler.node.plan import PROTOCOL

    d, _slurm = nodeside_daemon(tmp_path)
    old = {"job_id": "7", "node": "c2", "nodes": "c2", "user": "alice"}
    with caplog.at_level(logging.INFO, logger="rsa_scheduler.daemon.nodehooks"), \
            serving(d) as routes:
        for _ in range(2):
            assert routes.dispatch(ROOT, "POST", "/v1/hooks/prolog", old)["do"] == "nothing"
        routes.dispatch(ROOT, "POST", "/v1/hooks/prolog", {**old, "node": "c1",
                                                            "protocol": PROTOCOL})
        said = [r for r in caplog.records if "hook protocol" in r.getMessage()]
        assert [r.levelno for r in said] == [logging.WARNING]
        assert said[0].getMessage().startswith(
            f"c2: the Prolog of job 7 speaks hook protocol 1, rsad {PROTOCOL}: its "
            "rsa-scheduler package is older than rsad's; upgrade it on c2")
        shown = routes.dispatch(ROOT, "GET", "/v1/status", None)["hooks_behind"]
        assert shown == {"c2": said[0].getMessage()}
        assert routes.dispatch(ALICE, "GET", "/v1/status", None)["hooks_behind"] == {}
        routes.dispatch(ROOT, "POST", "/v1/hooks/epilog", {**old, "protocol": PROTOCOL})
        assert routes.dispatch(ROOT, "GET", "/v1/status", None)["hooks_behind"] == {}
    caught_up = [r.getMessage() for r in caplog.records if "now (the Epilog" in r.getMessage()]
    assert caught_up == [f"c2: its node hooks speak hook protocol {PROTOCOL} now (the Epilog "
                         "of job 7)"]


def test_a_mount_a_node_took_back_or_a_late_prolog_made_is_recorded_for_a_restart(
        tmp_path: Path) -> None:
    """A node's place among the nodes that hold the RAMDISK changes outside a node step:
    a late Prolog mounts the standing mount, or a Prolog takes back the mount it had
    reported (its hard timeout, an error after the report). On the code before, only
    the step's outcome recorded ``mounted``: a restarted rsad asked a node that had
    taken its mount back to release it (no agent answers: the reset failed busy and the
    node was drained) and did not wait for a late Prolog's node. Now each change is an
    event (``compute.mounted``, ``compute.unmounted``) the job's facts follow."""
    from rsa_scheduler.daemon.nodeside import nodeside_of

    d, slurm = nodeside_daemon(tmp_path)
    slurm.set("7", "PENDING", "Resources")
    d.poll()
    settle(d)
    d.submit("milestone", ("7", "7/1/mount-input/5", {"mounted": ["c1"]}))
    d.drain(timeout=0.5)
    side = nodeside_of(d.registry)
    assert side is not None
    with side._cond:  # the input mount done on c1; c[2-3] run their Prolog late
        side._job("7").standing = {"seq": 1, "do": "mount"}
    with serving(d) as routes:
        for node in ("c2", "c3"):
            routes.dispatch(ROOT, "POST", "/v1/hooks/mounted",
                            {"job_id": "7", "node": node, "seq": 1, "ok": True})
        routes.dispatch(ROOT, "POST", "/v1/hooks/mounted",
                        {"job_id": "7", "node": "c3", "seq": 1, "ok": False, "undone": True,
                         "message": "the Prolog did not finish: its mount was undone"})
    d.drain(timeout=0.5)
    names = [(e.name, e.context["node"]) for e in d.store.events("7")
             if e.name.startswith("compute.")]
    assert names == [("compute.mounted", "c2"), ("compute.mounted", "c3"),
                     ("compute.unmounted", "c3")]
    assert d.facts["7"]["mounted"] == ["c1", "c2"]
    settle(d)
    d.shutdown()
    d.store.close()
    again = make_daemon(tmp_path, slurm, [])
    assert again.facts["7"]["mounted"] == ["c1", "c2"]  # what a re-issued step reads



def test_a_late_mount_committed_before_the_steps_outcome_is_kept_by_it(
        tmp_path: Path) -> None:
    """The mount step read its nodes (c1, c2), then c3's late Prolog reported the standing
    mount, and the loop committed ``compute.mounted`` before the step's own outcome. On
    the code before, the outcome replaced ``mounted`` with what the step had read: a
    restarted rsad did not know c3 held the RAMDISK (its reset and teardown did not wait
    for c3's agent, a stage-out did not wait for its Epilog). Now the step's ``mounted``
    says what it is as of, and later news is applied again on top of it."""
    from rsa_scheduler.daemon.nodeside import nodeside_of

    d, slurm = nodeside_daemon(tmp_path)
    slurm.set("7", "PENDING", "Resources")
    d.poll()
    settle(d)
    side = nodeside_of(d.registry)
    assert side is not None
    with side._cond:  # the input mount done on c[1-2], read by the step as of then
        j = side._job("7")
        j.standing, j.mounted = {"seq": 1, "do": "mount"}, {"c1", "c2"}
        read = {"mounted": ["c1", "c2"], "mounted_at": [side.epoch, 0]}
    with serving(d) as routes:
        routes.dispatch(ROOT, "POST", "/v1/hooks/mounted",
                        {"job_id": "7", "node": "c3", "seq": 1, "ok": True})
    d.drain(timeout=0.5)
    d.submit("milestone", ("7", "7/1/mount-input/5", read))  # the step's, committed late
    d.drain(timeout=0.5)
    assert d.facts["7"]["mounted"] == ["c1", "c2", "c3"]
    settle(d)
    d.shutdown()
    d.store.close()
    again = make_daemon(tmp_path, slurm, [])
    assert again.facts["7"]["mounted"] == ["c1", "c2", "c3"]
    # a later step's own read (it saw every change) is the job's, as before
    again.submit("milestone", ("7", "7/1/reset/6", {"mounted": ["c1"],
                                                    "mounted_at": ["another rsad", 1]}))
    again.drain(timeout=0.5)
    assert again.facts["7"]["mounted"] == ["c1"]


def mounted_on_c1_c2(tmp_path: Path) -> tuple[Daemon, ScriptedSlurm]:
    """An rsad of the node side whose job 7's input mount step recorded c1 and c2."""
    d, slurm = nodeside_daemon(tmp_path)
    slurm.set("7", "PENDING", "Resources")
    d.poll()
    settle(d)
    d.submit("milestone", ("7", "7/1/mount-input/5", {"mounted": ["c1", "c2"]}))
    d.drain(timeout=0.5)
    return d, slurm


def test_the_agents_get_their_time_to_reconnect_from_when_rsad_is_ready(
        tmp_path: Path) -> None:
    """A restarted rsad's re-issued steps give the agents of the recorded mounts
    ``agent_settle`` to reconnect: counted from when its API answers them (``ready``),
    after the log is replayed and the RSA nodes are fenced. On the code before, it
    counted from rsad's construction: a start slower than ``agent_settle`` left the
    agents none (unit: tests/unit/test_stage_out_after_epilog.py)."""
    from rsa_scheduler.daemon.nodeside import NodeSide

    ticks = iter(float(t) for t in range(10**6))
    slurm = ScriptedSlurm()
    reg = with_slurm(instant_registry([]), slurm)
    side = NodeSide(backend_for=lambda _ctx: (None, None),  # type: ignore[arg-type,return-value]
                    clock=lambda: next(ticks))
    side.register(reg)
    during: list[float | None] = []
    reg.on_start(lambda: during.append(side.born))  # the fence, after the replay
    store = Store.open(tmp_path / "rsa.db", durability="normal")
    d = Daemon(Scheduler(make_pool(), StagingPolicy()), slurm=slurm, store=store,
               registry=reg, workers=2, poll_interval=0)
    d.start()
    assert during == [None]  # no agent can reach rsad while it starts
    assert d.ready.is_set() and side.born is not None and side.born > 0.0
    d.shutdown()


def test_a_take_back_naming_an_earlier_rsads_epoch_is_recorded(tmp_path: Path) -> None:
    """c2's Prolog undid the mount an earlier rsad gave it and recorded (rsad restarted
    between its report and the take-back). On the code before, the take-back was
    ignored (another epoch) and the job's ``mounted`` still named c2 after any number of
    restarts."""
    d, _ = mounted_on_c1_c2(tmp_path)
    with serving(d) as routes:
        routes.dispatch(ROOT, "POST", "/v1/hooks/mounted",
                        {"job_id": "7", "node": "c2", "seq": 1, "ok": False, "undone": True,
                         "epoch": "1796000000.000001",
                         "message": "the Prolog did not finish: its mount was undone"})
    d.drain(timeout=0.5)
    assert [(e.name, e.context["node"]) for e in d.store.events("7")
            if e.name.startswith("compute.")] == [("compute.unmounted", "c2")]
    assert d.facts["7"]["mounted"] == ["c1"]
    settle(d)
    d.shutdown()


def test_an_epilog_of_a_node_that_held_the_mount_is_recorded_for_a_restart(
        tmp_path: Path) -> None:
    """A node's Epilog takes every mount of the job down. On the code before, only the
    live rsad knew: a restarted one still counted the node (the job's ``mounted`` fact),
    and a reset re-issued for a job Slurm had requeued (or whose end it had not seen yet)
    waited for a release from it, which no agent gives: busy after its wait, the node
    drained. Now the Epilog of a node the job's facts count is ``compute.epilog``; the
    Epilog of a node that never held the mount records nothing."""
    from rsa_scheduler.daemon.nodeside import nodeside_of

    d, slurm = mounted_on_c1_c2(tmp_path)
    side = nodeside_of(d.registry)
    assert side is not None
    with side._cond:
        side._job("7").mounted = {"c1", "c2"}
    with serving(d) as routes:
        for node in ("c2", "c4"):
            assert routes.dispatch(ROOT, "POST", "/v1/hooks/epilog",
                                   {"job_id": "7", "node": node, "ok": True,
                                    "message": "released"}) == {"job_id": "7", "node": node}
    d.drain(timeout=0.5)
    assert [(e.name, e.context["node"]) for e in d.store.events("7")
            if e.name.startswith("compute.")] == [("compute.epilog", "c2")]
    assert d.facts["7"]["mounted"] == ["c1"]
    settle(d)
    d.shutdown()
    d.store.close()
    again = make_daemon(tmp_path, slurm, [])
    assert again.facts["7"]["mounted"] == ["c1"]  # what a re-issued reset waits for


def test_an_epilog_that_left_a_mount_is_on_the_jobs_timeline_and_alerted(
        tmp_path: Path) -> None:
    """A node's Epilog that could not take the job's mount down (the user stacked a FUSE
    mount over it, or moved it where root will not follow) says so in its report: the
    mount stays on the node, with its record, when the RAMDISK is torn down. On the code
    before, rsad dropped that report's ``ok`` and message: nothing recorded, no alert;
    only slurmd's log on the node said it."""
    d, slurm = nodeside_daemon(tmp_path)
    slurm.set("7", "PENDING", "Resources")
    d.poll()
    settle(d)
    why = ("refused to unmount /pfs/in by path (another directory or mount is there now); "
           "/pfs/in holds another mount now: mount 321 left in place")
    with serving(d) as routes:
        routes.dispatch(ROOT, "POST", "/v1/hooks/epilog",
                        {"job_id": "7", "node": "c1", "ok": True, "message": "released"})
        routes.dispatch(ROOT, "POST", "/v1/hooks/epilog",
                        {"job_id": "7", "node": "c2", "ok": False, "message": why})
    left = [e.context for e in d.store.events("7") if e.name == "compute.left"]
    assert left == [{"node": "c2", "message": why}]
    assert [a["message"] for a in d.alerts if a["job_id"] == "7"] == [
        f"compute node c2 could not unmount the job's RAMDISK in its Epilog: {why}; the "
        "mount stays on c2 (its record in the node directory's c2/<job id>/mounts.json) "
        "after the RAMDISK is torn down: unmount it there, then remove the record"]
