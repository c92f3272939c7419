"""rsad's compute-node side: instructions handed to Prologs/agents, reports aggregated."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from pathlib import PurePosixPath
from typing import Any

import pytest

from rsa_scheduler.core.actions import Action, ActionKind, Outcome, Result
from rsa_scheduler.core.hostlist import Hostlist
from rsa_scheduler.core.payloads import MountInputArgs, MountMode, Payload
from rsa_scheduler.daemon.executors import ActionContext, Registry
from rsa_scheduler.daemon.nodeside import NodeSide, nodeside_of
from rsa_scheduler.errors import RsaError
from rsa_scheduler.fs.base import FilesystemBackend, FsRequest, Health, MountSpec
from rsa_scheduler.hosts import CancelToken
from tests.unit.corekit import make_args

#: how long a test's agent long-polls for an instruction another thread publishes: it
#: returns as soon as one comes, so only a failing test waits this long (at 2 s, a loaded
#: CI host could leave the instruction unpublished and the poll answered "idle")
SOON = 30.0

SPEC = MountSpec("fake", "job7-c1", ("rsa1",), "/mnt/rsa/job7-c1",
                 {"master_host": "10.0.0.1", "master_port": 9421})


class FakeBackend(FilesystemBackend):
    name = "fake"

    def __init__(self) -> None:
        super().__init__({})
        self.resets = 0

    def create(self, req: FsRequest, cancel: CancelToken | None = None) -> MountSpec:
        return MountSpec("fake", req.fs_id, req.nodes, "/mnt/rsa/new", {"master_port": 1})

    def destroy(self, req: FsRequest) -> None:
        self.resets += 1

    def health(self, spec: MountSpec, req: FsRequest | None = None) -> Health:
        return Health(True)

    def client_mount_argv(self, spec: MountSpec, mountpoint: str) -> list[str]:
        return ["fakemount", str(spec.client["master_port"]), mountpoint]


def make_side(timeout: float = 5.0) -> tuple[NodeSide, Registry, FakeBackend]:
    backend = FakeBackend()
    req = FsRequest("job7-c1", "7", ("rsa1",), "ram", {"rsa1": "/p"}, "/mnt/rsa")

    def backend_for(ctx: ActionContext) -> tuple[FilesystemBackend, FsRequest]:
        return backend, req

    side = NodeSide(backend_for=backend_for, mount_timeout=timeout, reset_timeout=timeout)
    reg = Registry()
    side.register(reg)
    return side, reg, backend


def start(reg: Registry, kind: ActionKind, args: Payload) -> Future[Outcome]:
    action = Action(f"7/1/{kind.value}/3", "7", kind, args)
    ctx = ActionContext(action=action, cancel=CancelToken(), progress=lambda _d: None,
                        facts={"mount": SPEC.to_json()})
    fut: Future[Outcome] = Future()
    threading.Thread(target=lambda: fut.set_result(reg.run(ctx)), daemon=True).start()
    return fut


def until(side: NodeSide, ask: Callable[[], dict[str, Any]], want: str) -> dict[str, Any]:
    """Ask until the answer is ``want`` (the executor publishes from its own thread), for
    30 s at most (a count of short waits could end in a moment of notifications)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        ans = ask()
        if ans["do"] == want:
            return ans
        with side._cond:
            side._cond.wait(0.005)
    raise AssertionError(f"never got {want}")


INPUT = make_args(ActionKind.MOUNT_INPUT, data_in=PurePosixPath("/scratch/a/in"),
                  mode=MountMode.RO)


def test_registered_for_the_three_node_side_kinds() -> None:
    side, reg, _ = make_side()
    assert {ActionKind.MOUNT_INPUT, ActionKind.MOUNT_OUTPUT, ActionKind.RESET} <= reg.kinds()
    assert nodeside_of(reg) is side


def test_untracked_job_gets_nothing_and_no_agent() -> None:
    side, _, _ = make_side()
    assert side.prolog("9", "c1", "c[1-2]", None) == {"do": "nothing", "agent": False}
    # with a guard (a MooseFS backend's), every answer names it: a plain job's node
    # loads it as well as a node that mounts
    side.guard = lambda: "rsaguard=10.0.0.5@20000-29983"
    assert side.prolog("9", "c1", "c[1-2]", None) == {
        "do": "nothing", "agent": False, "guard": "rsaguard=10.0.0.5@20000-29983"}
    assert side.prolog("7", "c1", "c1", "locked-in")["guard"] == \
        "rsaguard=10.0.0.5@20000-29983"


def test_tracked_job_before_the_mount_is_asked_to_wait() -> None:
    side, _, _ = make_side()
    ans = side.prolog("7", "c1", "c1", "locked-in")
    assert ans["do"] == "wait" and ans["agent"] is True


def test_mount_input_completes_when_every_node_reported_ok() -> None:
    side, reg, _ = make_side()
    fut = start(reg, ActionKind.MOUNT_INPUT, INPUT)
    ins = until(side, lambda: side.prolog("7", "c1", "c[1-2]", "mounting-input"), "mount")
    assert ins["target"] == "/scratch/a/in" and ins["mode"] == "ro"
    assert ins["client_argv"] == ["fakemount", "9421", "@MOUNTPOINT@"]
    # numbered per rsad: the node tells it from an earlier rsad's instruction of that
    # number (node/mounts.py; a requeued run where a killed Epilog left the record)
    assert ins["epoch"] == side.epoch
    side.report("7", "c1", {"seq": ins["seq"], "ok": True})
    assert not fut.done()
    ins2 = side.prolog("7", "c2", "c[1-2]", "mounting-input")
    assert ins2["seq"] == ins["seq"]
    # a node that already reported is not told again
    assert side.prolog("7", "c1", "c[1-2]", "mounting-input")["do"] != "mount"
    side.report("7", "c2", {"seq": ins["seq"], "ok": True})
    out = fut.result(5)
    assert out.result is Result.OK and out.detail["nodes"] == ["c1", "c2"]


def test_first_node_failure_fails_the_mount_with_its_reason() -> None:
    side, reg, _ = make_side()
    fut = start(reg, ActionKind.MOUNT_INPUT, INPUT)
    ins = until(side, lambda: side.prolog("7", "c1", "c[1-2]", "mounting-input"), "mount")
    side.report("7", "c1", {"seq": ins["seq"], "ok": False,
                            "message": "/scratch/a/in has a symlink component"})
    out = fut.result(5)
    assert out.result is Result.FAILED and "symlink component" in out.message


def test_no_prolog_at_all_times_out_with_a_hint() -> None:
    _side, reg, _ = make_side(timeout=0.2)
    out = start(reg, ActionKind.MOUNT_OUTPUT,
                make_args(ActionKind.MOUNT_OUTPUT, data_in=None)).result(5)
    assert out.result is Result.FAILED and "rsa-prolog" in out.message


def test_reset_releases_recreates_and_mounts_output_through_the_agents() -> None:
    side, reg, backend = make_side()
    side.prolog("7", "c1", "c[1-2]", "mounted-input")
    fut = start(reg, ActionKind.RESET, RESET_ARGS)
    for node in ("c1", "c2"):
        rel = side.agent("7", node, "c[1-2]", 0, wait=SOON)
        assert rel["do"] == "release"
        side.report("7", node, {"seq": rel["seq"], "ok": True})
    mounts = [side.agent("7", n, "c[1-2]", 1, wait=SOON) for n in ("c1", "c2")]
    assert all(m["do"] == "mount" and m["role"] == "output" for m in mounts)
    assert mounts[0]["target"] == "/scratch/a/out" and mounts[0]["mode"] == "rw"
    assert mounts[0]["client_argv"] == ["fakemount", "1", "@MOUNTPOINT@"]  # the new FS
    for node in ("c1", "c2"):
        side.report("7", node, {"seq": mounts[0]["seq"], "ok": True})
    out = fut.result(5)
    assert out.result is Result.OK and backend.resets == 1
    assert out.detail["mount"]["rsa_mountpoint"] == "/mnt/rsa/new"


def test_reset_whose_output_mount_fails_on_one_node_keeps_the_new_ramdisk() -> None:
    """The other node mounted the new RAMDISK and its job may write there: the reset is
    reported done (with what failed), never as an error that would tear it down."""
    side, reg, backend = make_side()
    side.prolog("7", "c1", "c[1-2]", "mounted-input")
    fut = start(reg, ActionKind.RESET, RESET_ARGS)
    for node in ("c1", "c2"):
        rel = side.agent("7", node, "c[1-2]", 0, wait=SOON)
        side.report("7", node, {"seq": rel["seq"], "ok": True})
    mounts = [side.agent("7", n, "c[1-2]", 1, wait=SOON) for n in ("c1", "c2")]
    side.report("7", "c1", {"seq": mounts[0]["seq"], "ok": True})
    side.report("7", "c2", {"seq": mounts[1]["seq"], "ok": False,
                            "message": "mfsmount: ETIMEDOUT"})
    out = fut.result(5)
    assert out.result is Result.OK and backend.resets == 1
    assert "ETIMEDOUT" in out.detail["partial"]
    assert "c2: mfsmount: ETIMEDOUT" in out.message and out.message.endswith(
        "nodes without the mount write to the PFS")  # the user's timeline says so
    assert out.detail["mount"]["rsa_mountpoint"] == "/mnt/rsa/new"


def test_reset_whose_output_mount_a_node_refused_over_another_jobs_says_what_is_true() -> None:
    """A node refuses the output mount over another job's RAMDISK on it (one path named by
    two jobs): its line says the job sees that RAMDISK there, so the summary does not add
    that nodes without the mount write to the PFS (untrue for that node)."""
    side, reg, _backend = make_side()
    side.prolog("7", "c1", "c1", "mounted-input")
    fut = start(reg, ActionKind.RESET, RESET_ARGS)
    rel = side.agent("7", "c1", "c1", 0, wait=SOON)
    side.report("7", "c1", {"seq": rel["seq"], "ok": True})
    mount = side.agent("7", "c1", "c1", 1, wait=SOON)
    refused = ("/scratch/a/out has the RAMDISK of your job 9 mounted over it on this node: "
               "one job's RAMDISK is never mounted over another's; this job sees job 9's "
               "RAMDISK there until it is unmounted (at that job's end), then the PFS")
    side.report("7", "c1", {"seq": mount["seq"], "ok": False, "message": refused})
    out = fut.result(5)
    assert out.result is Result.OK and "sees job 9's RAMDISK there" in out.message
    assert "nodes without the mount write to the PFS" not in out.message


def test_reset_with_a_busy_input_mount_is_busy_and_changes_nothing() -> None:
    side, reg, backend = make_side()
    side.prolog("7", "c1", "c1", "mounted-input")
    fut = start(reg, ActionKind.RESET, RESET_ARGS)
    rel = side.agent("7", "c1", "c1", 0, wait=SOON)
    side.report("7", "c1", {"seq": rel["seq"], "ok": False, "busy": True,
                            "message": "target is busy"})
    out = fut.result(5)
    assert out.result is Result.BUSY and backend.resets == 0


def test_agent_is_told_to_exit_after_the_epilog_and_idles_otherwise() -> None:
    side, _, _ = make_side()
    assert side.agent("7", "c1", "c1", 0, wait=0)["do"] == "idle"
    side.epilog("7", "c1")
    assert side.agent("7", "c1", "c1", 0, wait=0)["do"] == "exit"


def test_an_input_mount_reissued_after_a_restart_is_answered_by_the_agents() -> None:
    """rsad restarted while the Prologs mounted: they are over, their agents reconnect;
    the re-issued mount goes to the agents (who answer from what the node has) instead of
    waiting for Prologs that will never run again."""
    side, reg, _ = make_side(timeout=30)
    for node in ("c1", "c2"):  # the agents of the earlier rsad reconnect
        assert side.agent("7", node, "c[1-2]", 0, wait=0)["do"] == "idle"
    fut = start(reg, ActionKind.MOUNT_INPUT, INPUT)
    got = [side.agent("7", n, "c[1-2]", 0, wait=SOON) for n in ("c1", "c2")]
    assert all(g["do"] == "mount" and g["role"] == "input" for g in got)
    side.report("7", "c1", {"seq": got[0]["seq"], "ok": True})
    side.report("7", "c2", {"seq": got[1]["seq"], "ok": True})
    out = fut.result(5)
    assert out.result is Result.OK


@pytest.mark.parametrize("mode", ["bogus", "ro"])
def test_a_mode_that_is_no_mount_mode_never_reaches_the_executor(mode: str) -> None:
    """Once refused by the executor at run time; now the payload cannot be built with
    it, nor read from a log (a plain string is not a MountMode, even "ro")."""
    with pytest.raises(TypeError, match="mode must be a MountMode"):
        MountInputArgs("alice", Hostlist(("rsa1",)), PurePosixPath("/scratch/a/in"),
                       mode)  # type: ignore[arg-type]
    if mode == "bogus":
        with pytest.raises(ValueError, match="mode must be one of ro, rw, union"):
            MountInputArgs.from_json({**INPUT.to_json(), "mode": mode})


def test_early_start_wait_tells_the_prolog_how_long_it_may_hold() -> None:
    side, _, _ = make_side()
    ans = side.prolog("7", "c1", "c1", "staging-in", hold=120.0)
    assert ans["do"] == "wait" and ans["hold"] == 120.0
    assert side.prolog("7", "c1", "c1", "staging-in")["hold"] == 0.0


def test_the_prolog_never_holds_a_start_longer_than_hooks_max_hold() -> None:
    """Issue 14: what is left of the wait may be 30 minutes; the Prolog holds the job's
    (allocated, idle) nodes at most hooks.max_hold, which PrologEpilogTimeout allows."""
    side, _, _ = make_side()
    side.max_hold = 30.0
    assert side.prolog("7", "c1", "c1", "staging-in", hold=1800.0)["hold"] == 30.0


def test_a_node_whose_prolog_runs_late_gets_the_standing_mount() -> None:
    side, reg, _ = make_side()
    side.settle = 0.05
    fut = start(reg, ActionKind.MOUNT_INPUT, INPUT)
    ins = until(side, lambda: side.prolog("7", "c1", "c[1-2]", "mounting-input"), "mount")
    side.report("7", "c1", {"seq": ins["seq"], "ok": True})
    out = fut.result(5)  # c2 has not asked: Slurm runs its Prolog at its first step
    assert out.result is Result.OK
    late = side.prolog("7", "c2", "c[1-2]", "mounted-input")
    assert late["do"] == "mount" and late["seq"] == ins["seq"]
    assert side.prolog("7", "c1", "c[1-2]", "mounted-input")["do"] == "nothing"


def test_release_waits_for_every_nodes_agent_before_destroying() -> None:
    side, reg, backend = make_side()
    side.agent_settle = 0.3
    side.prolog("7", "c1", "c[1-2]", "mounted-input")
    fut = start(reg, ActionKind.RESET, RESET_ARGS)
    rel = side.agent("7", "c1", "c[1-2]", 0, wait=SOON)
    side.report("7", "c1", {"seq": rel["seq"], "ok": True})
    rel2 = side.agent("7", "c2", "c[1-2]", 0, wait=SOON)  # c2's agent reconnects later
    assert rel2["do"] == "release" and backend.resets == 0
    side.report("7", "c2", {"seq": rel2["seq"], "ok": True})
    mount = side.agent("7", "c1", "c[1-2]", rel["seq"], wait=SOON)
    for node in ("c1", "c2"):
        side.report("7", node, {"seq": mount["seq"], "ok": True})
    assert fut.result(5).result is Result.OK and backend.resets == 1


def test_a_short_job_ending_confirms_its_mount_at_once() -> None:
    side, reg, _ = make_side()
    side.settle = 60.0
    fut = start(reg, ActionKind.MOUNT_INPUT, INPUT)
    ins = until(side, lambda: side.prolog("7", "c1", "c[1-4]", "mounting-input"), "mount")
    side.report("7", "c1", {"seq": ins["seq"], "ok": True})
    side.epilog("7", "c1")  # the batch script was done before the others ran a step
    assert fut.result(5).result is Result.OK


def test_a_node_that_is_mounting_holds_the_step_until_it_reports() -> None:
    side, reg, _ = make_side()
    side.settle = 0.05
    fut = start(reg, ActionKind.MOUNT_INPUT, INPUT)
    ins = until(side, lambda: side.prolog("7", "c1", "c[1-4]", "mounting-input"), "mount")
    assert side.prolog("7", "c2", "c[1-4]", "mounting-input")["do"] == "mount"
    side.report("7", "c1", {"seq": ins["seq"], "ok": True})
    with pytest.raises(TimeoutError):
        fut.result(0.5)
    side.report("7", "c2", {"seq": ins["seq"], "ok": False, "message": "no such dir"})
    assert fut.result(5).result is not Result.OK


RESET_ARGS = make_args(ActionKind.RESET)


def test_a_release_is_never_done_while_a_node_that_holds_the_mount_is_silent() -> None:
    side, reg, backend = make_side(timeout=1.5)
    side.agent_settle = 0.1
    side.settle = 0.05
    fut = start(reg, ActionKind.MOUNT_INPUT, INPUT)
    ins = until(side, lambda: side.prolog("7", "c1", "c[1-2]", "mounting-input"), "mount")
    side.prolog("7", "c2", "c[1-2]", "mounting-input")
    for node in ("c1", "c2"):
        side.report("7", node, {"seq": ins["seq"], "ok": True})
    done = fut.result(5)
    assert done.result is Result.OK and done.detail["mounted"] == ["c1", "c2"]
    # only c1's agent is there: c2 (which holds the input mount) never confirms
    reset = start(reg, ActionKind.RESET, RESET_ARGS)
    rel = side.agent("7", "c1", "c[1-2]", 0, wait=SOON)
    side.report("7", "c1", {"seq": rel["seq"], "ok": True})
    out = reset.result(5)
    # busy, not failed: a failed reset tears the RAMDISK down; a busy one is retried and
    # in the end leaves the job on its input RAMDISK (output to the PFS). The silent node
    # is named for rsad to drain (daemon/service.py).
    assert out.result is Result.BUSY and "c2" in out.message and "kept" in out.message
    assert out.detail == {"silent": ["c2"]}
    assert backend.resets == 0  # the RAMDISK c2 still reads was not destroyed


def test_after_a_restart_the_recorded_mounts_must_confirm_the_release() -> None:
    side, reg, backend = make_side(timeout=1.5)
    side.agent_settle = 0.1
    action = Action("7/1/reset/3", "7", ActionKind.RESET, RESET_ARGS)
    ctx = ActionContext(action=action, cancel=CancelToken(), progress=lambda _d: None,
                        facts={"mount": SPEC.to_json(), "mounted": ["c1", "c2"]})
    fut: Future[Outcome] = Future()
    threading.Thread(target=lambda: fut.set_result(reg.run(ctx)), daemon=True).start()
    rel = side.agent("7", "c1", "c[1-2]", 0, wait=SOON)  # c2's agent never comes back
    side.report("7", "c1", {"seq": rel["seq"], "ok": True})
    out = fut.result(5)
    assert out.result is Result.BUSY and out.detail == {"silent": ["c2"]}
    assert backend.resets == 0


def test_a_reset_reissued_after_a_crash_never_destroys_the_ramdisk_it_made() -> None:
    side, reg, backend = make_side()
    side.agent_settle = 0.0
    milestones: list[Mapping[str, Any]] = []

    token = CancelToken()

    def run(facts: dict[str, Any]) -> Future[Outcome]:
        action = Action("7/1/reset/3", "7", ActionKind.RESET, RESET_ARGS)
        ctx = ActionContext(action=action, cancel=token, progress=lambda _d: None,
                            facts=facts, milestone=milestones.append)
        fut: Future[Outcome] = Future()
        threading.Thread(target=lambda: fut.set_result(reg.run(ctx)), daemon=True).start()
        return fut

    side.prolog("7", "c1", "c1", "mounted-input")
    first = run({"mount": SPEC.to_json()})
    rel = side.agent("7", "c1", "c1", 0, wait=SOON)
    side.report("7", "c1", {"seq": rel["seq"], "ok": True})
    mount = side.agent("7", "c1", "c1", rel["seq"], wait=SOON)
    assert mount["do"] == "mount" and backend.resets == 1
    assert milestones == [{"reset_of": "7/1/reset/3", "mount": milestones[0]["mount"]}]
    # rsad dies here, the job writes its output; the new rsad re-issues the same action
    token.cancel("rsad stopped")
    first.result(5)  # (a crash records no outcome: this one is dropped)
    token = CancelToken()
    again = run({"mount": milestones[0]["mount"], "reset_of": "7/1/reset/3"})
    mount2 = side.agent("7", "c1", "c1", mount["seq"], wait=SOON)
    assert mount2["do"] == "mount" and mount2["role"] == "output"  # no release first
    side.report("7", "c1", {"seq": mount2["seq"], "ok": True})
    assert again.result(5).result is Result.OK
    assert backend.resets == 1  # the output RAMDISK was not destroyed again


def test_a_reset_reissued_after_the_job_ended_does_not_wait_for_its_nodes() -> None:
    """Found by the chaos harness: rsad killed after the reset recreated the RAMDISK, the
    job ended meanwhile (its Epilog told the dead rsad). The new rsad knows from Slurm
    that the job is over: no agent will ever ask again, so the re-issued reset finishes
    at once (the RAMDISK, with what the job wrote to it, is staged out), instead of
    waiting its whole mount timeout after every restart."""
    side, reg, backend = make_side()
    side.mount_timeout = 60.0
    spec = SPEC.to_json()
    action = Action("7/1/reset/3", "7", ActionKind.RESET, RESET_ARGS)
    ctx = ActionContext(action=action, cancel=CancelToken(), progress=lambda _d: None,
                        facts={"mount": spec, "reset_of": "7/1/reset/3"},
                        job_ended=True)
    t0 = time.monotonic()
    out = reg.run(ctx)
    assert out.result is Result.OK and time.monotonic() - t0 < 5
    assert out.detail["mount"] == spec and "job ended" in out.detail["partial"]
    assert backend.resets == 0


def test_a_reset_of_a_job_that_ended_before_it_ran_does_not_wait_for_a_release() -> None:
    """Found by the chaos harness (seed 20273127): rsad killed before the reset recreated
    the RAMDISK, the job ended meanwhile. The Epilogs took the job's mounts down and no
    agent will answer a release: the re-issued reset recreates the (input-only) RAMDISK
    empty once Slurm says the job is done on the recorded nodes (their Epilogs ran),
    instead of waiting its whole timeout after every restart."""
    side, reg, backend = make_side()
    side.reset_timeout = 60.0
    side.slurm_nodes = lambda _job: frozenset()  # the job ended on every node
    milestones: list[Mapping[str, Any]] = []
    action = Action("7/1/reset/3", "7", ActionKind.RESET, RESET_ARGS)
    ctx = ActionContext(action=action, cancel=CancelToken(), progress=lambda _d: None,
                        facts={"mount": SPEC.to_json(), "mounted": ["c1"]},
                        milestone=milestones.append, job_ended=True)
    t0 = time.monotonic()
    out = reg.run(ctx)
    assert out.result is Result.OK and time.monotonic() - t0 < 5
    assert backend.resets == 1 and "its output is on the PFS" in out.detail["partial"]
    assert milestones and milestones[0]["reset_of"] == "7/1/reset/3"


def reissued_reset(reg: Registry, facts: Mapping[str, Any], *, job_ended: bool = False,
                   job_running: bool = True) -> Future[Outcome]:
    """The RESET a restarted rsad re-issues, with the job's facts and how Slurm had the
    job when it was dispatched; run in a thread."""
    action = Action("7/1/reset/3", "7", ActionKind.RESET, RESET_ARGS)
    ctx = ActionContext(action=action, cancel=CancelToken(), progress=lambda _d: None,
                        facts=dict(facts), job_ended=job_ended, job_running=job_running)
    fut: Future[Outcome] = Future()
    threading.Thread(target=lambda: fut.set_result(reg.run(ctx)), daemon=True).start()
    return fut


def test_a_reset_reissued_for_a_requeued_job_asks_no_release() -> None:
    """rsad restarted with a reset outstanding and Slurm requeued the job meanwhile; the
    Epilogs of both nodes were recorded (``compute.epilog``: the job's ``mounted`` is
    empty). On the code before, the release waited ``reset_timeout`` for nobody, then
    failed "no compute node asked rsad (is rsa-prolog the node Prolog?)": the user was
    told the reset failed, the operator alerted, and the RAMDISK torn down. No node holds
    the input of a job that is not running: no release is asked, the RAMDISK (input only)
    is recreated, and the output mount says why no node mounted it."""
    side, reg, backend = make_side(timeout=1.5)
    side.agent_settle = 0.1
    out = reissued_reset(reg, {"mount": SPEC.to_json(), "mounted": []},
                         job_running=False).result(10)
    assert out.result is Result.OK, out  # before: FAILED after reset_timeout
    assert backend.resets == 1
    assert out.detail["partial"] == ("compute nodes did not mount within 2s: no compute "
                                     "node asked rsad: the job was not running when the "
                                     "step began (requeued, or not started yet)")


def test_a_reset_reissued_for_a_requeued_job_drains_no_node_whose_epilog_was_unheard() -> None:
    """As above, but the nodes' Epilogs ran while rsad was down (unheard: the job's facts
    still count c1 and c2). On the code before, the release waited for c1 and c2, whose
    agents the Epilogs had stopped, and ended BUSY with both silent: rsad drained them in
    Slurm. Slurm says the requeued job is pending: its run is over on c1 and c2, their
    Epilogs ran."""
    side, reg, backend = make_side(timeout=1.5)
    side.slurm_nodes = lambda _job: frozenset()  # PENDING again: on no node
    out = reissued_reset(reg, {"mount": SPEC.to_json(), "mounted": ["c1", "c2"]},
                         job_running=False).result(10)
    assert out.result is Result.OK, out  # before: BUSY, {"silent": ["c1", "c2"]}
    assert backend.resets == 1 and "not running" in out.detail["partial"]


def test_a_reset_issued_before_the_job_starts_mounts_the_output_once_it_does() -> None:
    """Early start wait over while Slurm still held the job (STAGING_IN, wait-expired):
    the reset is issued before the job runs; once it starts, its nodes' agents mount the
    recreated RAMDISK over DATA_OUT (a job that is not running is not one whose run is
    over)."""
    side, reg, backend = make_side(timeout=10.0)
    side.agent_settle = 0.1
    fut = reissued_reset(reg, {"mount": SPEC.to_json()}, job_running=False)
    with pytest.raises(TimeoutError):
        fut.result(0.3)  # nobody runs the job yet
    assert side.prolog("7", "c1", "c1", "resetting")["agent"] is True  # the job starts
    last = 0
    while True:
        ins = side.agent("7", "c1", "c1", last, wait=SOON)  # old code: release first
        assert ins["do"] in ("release", "mount"), ins
        side.report("7", "c1", {"seq": ins["seq"], "ok": True})
        last = ins["seq"]
        if ins["do"] == "mount":
            break
    out = fut.result(5)
    assert out.result is Result.OK and out.detail["mounted"] == ["c1"], out
    assert "partial" not in out.detail and backend.resets == 1


def test_a_reset_whose_run_ends_while_it_waits_for_the_release_is_done_by_the_epilogs(
        ) -> None:
    """The reset asks for the release; before any node answers, the job is requeued (or
    ends) and every node of the run runs its Epilog, which takes every mount of the job
    down. On the code before, the release then waited for no node at all until
    ``reset_timeout`` and failed ("no compute node has asked yet"): the user told the
    reset failed, the operator alerted. The release is done; no node will mount the
    recreated RAMDISK, and the reset says why."""
    side, reg, backend = make_side(timeout=1.5)
    mounted_input_on(side, reg, ("c1", "c2"))
    fut = start(reg, ActionKind.RESET, RESET_ARGS)
    rel = until(side, lambda: side.agent("7", "c1", "c[1-2]", 0, wait=0.05), "release")
    assert rel["do"] == "release"
    for node in ("c1", "c2"):
        side.epilog("7", node)  # the agents are stopped before they report
    t0 = time.monotonic()
    out = fut.result(10)
    assert out.result is Result.OK, out  # before: FAILED after reset_timeout
    assert time.monotonic() - t0 < 1.5 and backend.resets == 1
    assert out.detail["partial"] == ("the job's run ended (every node of it ran its "
                                     "Epilog) before the RAMDISK was reset for its "
                                     "output: its output is on the PFS")


def test_a_reset_that_recreated_the_ramdisk_before_a_requeue_says_why_nothing_mounted(
        ) -> None:
    """rsad restarted after the reset recreated the RAMDISK; Slurm requeued the job
    meanwhile. The re-issued reset waits for the agents, which do not come; on the code
    before, its ``partial`` then said "(is rsa-prolog the node Prolog?)", a set-up error
    that is none: the job was not running."""
    _side, reg, backend = make_side(timeout=1.5)
    out = reissued_reset(reg, {"mount": SPEC.to_json(), "reset_of": "7/1/reset/3"},
                         job_running=False).result(10)
    assert out.result is Result.OK and backend.resets == 0
    assert out.detail["partial"] == ("compute nodes did not mount within 2s: no compute "
                                     "node asked rsad: the job was not running when the "
                                     "step began (requeued, or not started yet)")


def test_a_slow_start_leaves_every_agent_its_time_to_mount_the_output() -> None:
    """A reset that recreated the RAMDISK before rsad restarted is re-issued during the
    restarted rsad's start, and mounts the RAMDISK over DATA_OUT through the agents. On
    the code before, their ``agent_settle`` to reconnect, and the step's own timeout,
    counted from the step's start: a start slower than that (the log replayed, the RSA
    nodes fenced) left them none, and the step was over before any agent could reach
    rsad (a release's timeout drains the silent nodes). Both count from when rsad's API
    answers the agents."""
    now = [1000.0]
    backend = FakeBackend()
    req = FsRequest("job7-c1", "7", ("rsa1",), "ram", {"rsa1": "/p"}, "/mnt/rsa")
    side = NodeSide(backend_for=lambda _ctx: (backend, req), mount_timeout=30.0,
                    clock=lambda: now[0])
    reg = Registry()
    side.register(reg)
    reg.starting()
    fut = reissued_reset(reg, {"mount": SPEC.to_json(), "reset_of": "7/1/reset/3"})
    with pytest.raises(TimeoutError):
        fut.result(0.3)  # the step waits for agents: none can reach rsad yet
    now[0] += 60.0  # the start took a minute
    reg.ready()
    mount = until(side, lambda: side.agent("7", "c1", "c[1-2]", 0, wait=0.05), "mount")
    side.report("7", "c1", {"seq": mount["seq"], "ok": True, "epoch": side.epoch})
    with pytest.raises(TimeoutError):
        fut.result(0.5)  # c2's agent has not reconnected yet
    mount2 = until(side, lambda: side.agent("7", "c2", "c[1-2]", 0, wait=0.05), "mount")
    side.report("7", "c2", {"seq": mount2["seq"], "ok": True, "epoch": side.epoch})
    out = fut.result(5)
    assert out.result is Result.OK and out.detail["mounted"] == ["c1", "c2"], out


def test_a_reset_whose_run_ends_before_the_output_mounts_says_so_at_once() -> None:
    """The nodes released the input and the RAMDISK is recreated; before their agents
    mount it over DATA_OUT, the job is requeued (or ends) and every node runs its
    Epilog. On the code before, the mount waited ``mount_timeout`` for agents that were
    gone and its ``partial`` said "no compute node has asked yet"."""
    side, reg, backend = make_side(timeout=3.0)
    mounted_input_on(side, reg, ("c1", "c2"))
    fut = start(reg, ActionKind.RESET, RESET_ARGS)
    for node in ("c1", "c2"):
        rel = side.agent("7", node, "c[1-2]", 0, wait=SOON)
        assert rel["do"] == "release"
        side.report("7", node, {"seq": rel["seq"], "ok": True})
    mount = side.agent("7", "c1", "c[1-2]", rel["seq"], wait=SOON)
    assert mount["do"] == "mount" and mount["role"] == "output"
    for node in ("c1", "c2"):
        side.epilog("7", node)
    t0 = time.monotonic()
    out = fut.result(10)
    assert out.result is Result.OK and backend.resets == 1
    assert time.monotonic() - t0 < 3.0, out  # before: mount_timeout
    assert "ran its Epilog" in out.detail["partial"], out


def test_a_reset_reissued_after_the_job_ended_waits_for_the_epilogs_still_to_come() -> None:
    """rsad restarted with a reset outstanding; the job ended meanwhile (EpilogSlurmctld),
    its processes on c1 still winding down (SIGTERM, then KillWait) with the input
    mounted, c1's agent reconnecting. On the code before, the reset recreated the
    RAMDISK at once, under c1's mount; with writable input its last write-back ran
    before the job's last changes, which were lost with the RAMDISK. It waits for c1's
    Epilog first, as a stage-out does (``await_epilogs``)."""
    side, reg, backend = make_side(timeout=5.0)
    side.agent_settle = 5.0
    fut = reissued_reset(reg, {"mount": SPEC.to_json(), "mounted": ["c1"]}, job_ended=True,
                         job_running=False)
    assert side.agent("7", "c1", "c1", 0, wait=0)["do"] == "idle"  # c1's agent is back
    with pytest.raises(TimeoutError):
        fut.result(0.5)
    assert backend.resets == 0  # before: 1, under c1's mount
    side.epilog("7", "c1")
    out = fut.result(5)
    assert out.result is Result.OK and backend.resets == 1
    assert "the job ended" in out.detail["partial"]


def test_a_declined_job_is_told_the_reason() -> None:
    side, _, _ = make_side()
    ans = side.prolog("7", "c1", "c1", "declined", message="no RSA node holds 9T")
    assert ans == {"do": "nothing", "agent": False, "declined": "no RSA node holds 9T"}
    assert side.prolog("7", "c1", "c1", "declined")["declined"]  # never an empty reason


def test_a_hetjobs_mount_waits_for_every_components_nodes() -> None:
    """Issue 14: a heterogeneous job's other component knows only its own nodes (c[2-3]);
    slurmctld's hook for the leader names them all (c[1-3]): the mount is done only
    when c1 reported too, whichever node's Prolog came first."""
    side, reg, _ = make_side()
    side.expect("7", "c[1-3]")
    fut = start(reg, ActionKind.MOUNT_INPUT, INPUT)
    ins = until(side, lambda: side.prolog("7", "c2", "c[2-3]", "mounting-input"), "mount")
    side.report("7", "c2", {"seq": ins["seq"], "ok": True})
    side.prolog("7", "c3", "c[2-3]", "mounting-input")
    side.report("7", "c3", {"seq": ins["seq"], "ok": True})
    time.sleep(0.2)
    assert not fut.done()  # c1 (the leader's node) has not mounted it yet
    side.prolog("7", "c1", "c1", "mounting-input")
    side.report("7", "c1", {"seq": ins["seq"], "ok": True})
    out = fut.result(5)
    assert out.result is Result.OK and out.detail["nodes"] == ["c1", "c2", "c3"]


def test_a_requeued_run_waits_for_its_new_nodes_only() -> None:
    side, reg, _ = make_side()
    side.prolog("7", "c1", "c[1-2]", "locked-in")
    side.epilog("7", "c1")
    side.epilog("7", "c2")
    # requeued: runs on c3 now; c1 and c2 of the first run are over
    side.expect("7", "c3")
    fut = start(reg, ActionKind.MOUNT_INPUT, INPUT)
    ins = until(side, lambda: side.prolog("7", "c3", "c3", "mounting-input"), "mount")
    side.report("7", "c3", {"seq": ins["seq"], "ok": True})
    out = fut.result(5)
    assert out.result is Result.OK and out.detail["nodes"] == ["c3"]


def test_a_reset_of_writable_input_writes_it_back_after_the_release() -> None:
    """Issue 35: a job with writable input may write to it after the write-back that
    came before the reset; once its input mounts are released nobody can, and the
    reset writes the input back again before it recreates the RAMDISK."""
    order: list[str] = []
    side, reg, backend = make_side()
    original = backend.destroy

    def destroy(req: FsRequest) -> None:
        order.append("recreate")
        original(req)

    def write_back(ctx: ActionContext, data_in: str) -> Mapping[str, Any]:
        order.append(f"write-back {data_in}")
        return {"summary": "writable input written back to /scratch/a/in: ...",
                "written_back": {"copied": 1}}

    backend.destroy = destroy  # type: ignore[method-assign]
    side.write_back = write_back
    # the base is forgotten before the RAMDISK is recreated empty (never taken for a job
    # that deleted its whole input)
    side.written_back = lambda fs_id: order.append(f"forget {fs_id}")
    side.prolog("7", "c1", "c1", "mounted-input")
    fut = start(reg, ActionKind.RESET, make_args(ActionKind.RESET, write_back=True))
    rel = side.agent("7", "c1", "c1", 0, wait=SOON)
    assert rel["do"] == "release" and order == []
    side.report("7", "c1", {"seq": rel["seq"], "ok": True})
    mount = side.agent("7", "c1", "c1", 1, wait=SOON)
    side.report("7", "c1", {"seq": mount["seq"], "ok": True})
    out = fut.result(5)
    assert out.result is Result.OK
    assert order == ["write-back /scratch/a/in", "forget job7-c1", "recreate"]
    assert out.message == "input released; writable input written back to /scratch/a/in: ..."


def test_a_failed_last_write_back_keeps_the_ramdisk() -> None:
    side, reg, backend = make_side()

    def fail(ctx: ActionContext, data_in: str) -> Mapping[str, Any]:
        raise RsaError("rsync: No space left on device")

    side.write_back = fail
    action = Action("7/1/reset/3", "7", ActionKind.RESET,
                    make_args(ActionKind.RESET, write_back=True))
    ctx = ActionContext(action=action, cancel=CancelToken(), progress=lambda _d: None,
                        facts={"mount": SPEC.to_json()}, job_ended=True)
    out = reg.run(ctx)
    assert out.result is Result.FAILED and "No space left" in out.message
    assert backend.resets == 0  # the RAMDISK with the job's changes is still there


def test_a_requeued_runs_prolog_never_gets_the_earlier_runs_mount() -> None:
    """Issue 35: an output-only job mounted cycle 1's RAMDISK; requeued, its second run's
    Prolog (on another node, while cycle 1 still stages out) was handed that standing
    mount, wrote into it, and the RAMDISK was destroyed under it after cycle 1's verify."""
    side, reg, _ = make_side()
    fut = start(reg, ActionKind.MOUNT_OUTPUT, make_args(ActionKind.MOUNT_OUTPUT, data_in=None))
    ins = until(side, lambda: side.prolog("7", "c1", "c1", "mounting-output"), "mount")
    side.report("7", "c1", {"seq": ins["seq"], "ok": True})
    assert fut.result(5).result is Result.OK
    side.epilog("7", "c1")  # the first run ends (requeued)
    ans = side.prolog("7", "c2", "c2", "staging-out")
    assert ans["do"] != "mount", ans
    ans = side.prolog("7", "c2", "c2", "mounted-output")  # even if rsad lags behind
    assert ans["do"] != "mount", ans


def test_a_requeued_runs_prolog_never_gets_a_mount_of_a_run_whose_node_failed() -> None:
    """Found by review: the earlier run's standing mount was forgotten only once every
    node of that run ran its Epilog. A run requeued after NODE_FAIL has a node that never
    does: the new run's Prolog (on another node, rsad already staging the first run's
    output out) was handed the first run's mount, wrote into that RAMDISK, and lost what
    it wrote there when it was destroyed after the first run's verify. A Prolog gets a
    mount only while the job's RAMDISK is to be mounted or in use (states.NODE_AGENT)."""
    side, reg, _ = make_side()
    fut = start(reg, ActionKind.MOUNT_OUTPUT, make_args(ActionKind.MOUNT_OUTPUT, data_in=None))
    ins = until(side, lambda: side.prolog("7", "c1", "c[1-2]", "mounting-output"), "mount")
    side.report("7", "c1", {"seq": ins["seq"], "ok": True})
    side.prolog("7", "c2", "c[1-2]", "mounting-output")
    side.report("7", "c2", {"seq": ins["seq"], "ok": True})
    assert fut.result(5).result is Result.OK
    side.epilog("7", "c1")  # c2 failed (NODE_FAIL): its Epilog never comes
    for state in ("staging-out", "verifying", "stage-out-failed", "tearing-down"):
        ans = side.prolog("7", "c3", "c3", state)
        assert ans["do"] != "mount", (state, ans)


def test_a_reused_job_ids_prolog_never_gets_the_earlier_jobs_mount() -> None:
    """Found by review: slurmctld lost its state and gave job 7's id to another job
    while a node of the earlier job 7 never ran its Epilog. The new job's record starts
    afresh (job.tracked); the node side forgets the earlier job's nodes and standing mount
    with it, or the new job's Prolog is handed the earlier job's mount (another user's
    RAMDISK and its credentials) and its own mount waits for nodes that are not its."""
    side, reg, _ = make_side()
    fut = start(reg, ActionKind.MOUNT_OUTPUT, make_args(ActionKind.MOUNT_OUTPUT, data_in=None))
    ins = until(side, lambda: side.prolog("7", "c1", "c[1-2]", "mounting-output"), "mount")
    side.report("7", "c1", {"seq": ins["seq"], "ok": True})
    side.prolog("7", "c2", "c[1-2]", "mounting-output")
    side.report("7", "c2", {"seq": ins["seq"], "ok": True})
    assert fut.result(5).result is Result.OK
    # without a word that the id is a new job's, the earlier job's mount is handed on
    assert side.prolog("7", "c3", "c3", "mounting-output")["do"] == "mount"
    side.forget("7")  # the id is a new job's now (daemon: a job.tracked event)
    ans = side.prolog("7", "c3", "c3", "mounting-output")
    assert ans["do"] == "wait", ans


def test_a_reset_reissued_after_its_last_write_back_does_not_write_back_again() -> None:
    """Found by review: rsad killed after the reset's last write-back and before the
    RAMDISK was recreated; re-issued, the reset must not copy the RAMDISK's input over
    what the job changed on the PFS since the release."""
    side, reg, backend = make_side()
    calls: list[str] = []

    def write_back(ctx: ActionContext, data_in: str) -> Mapping[str, Any]:
        calls.append(data_in)
        return {}

    side.write_back = write_back
    milestones: list[Mapping[str, Any]] = []
    action = Action("7/1/reset/3", "7", ActionKind.RESET,
                    make_args(ActionKind.RESET, write_back=True))
    for facts in ({"mount": SPEC.to_json()},
                  {"mount": SPEC.to_json(), "written_back_of": "7/1/reset/3"}):
        ctx = ActionContext(action=action, cancel=CancelToken(), progress=lambda _d: None,
                            facts=facts, milestone=milestones.append, job_ended=True)
        assert reg.run(ctx).result is Result.OK
    assert calls == ["/scratch/a/in"]
    assert {"written_back_of": "7/1/reset/3"} in milestones
    assert backend.resets == 2


def teardown_ctx(facts: Mapping[str, Any] | None = None) -> ActionContext:
    action = Action("7/1/destroy-fs/9", "7", ActionKind.DESTROY_FS,
                    make_args(ActionKind.DESTROY_FS))
    return ActionContext(action=action, cancel=CancelToken(), progress=lambda _d: None,
                         facts=dict(facts or {"mount": SPEC.to_json()}))


def releasing(side: NodeSide, ctx: ActionContext) -> Future[list[str]]:
    fut: Future[list[str]] = Future()

    def run() -> None:
        try:
            fut.set_result(side.release_mounts(ctx))
        except BaseException as e:
            fut.set_exception(e)
    threading.Thread(target=run, daemon=True).start()
    return fut


def mounted_input_on(side: NodeSide, reg: Registry, nodes: tuple[str, ...]) -> None:
    side.settle = 0.05
    fut = start(reg, ActionKind.MOUNT_INPUT, INPUT)
    ins = until(side, lambda: side.prolog("7", nodes[0], "c[1-2]", "mounting-input"),
                "mount")
    for node in nodes[1:]:
        side.prolog("7", node, "c[1-2]", "mounting-input")
    for node in nodes:
        side.report("7", node, {"seq": ins["seq"], "ok": True})
    assert fut.result(5).result is Result.OK


def test_a_teardown_asks_every_node_that_holds_the_mount_to_release_it_first() -> None:
    """Issue 35: the RAMDISK was destroyed without asking the compute nodes (a partial
    input-mount failure without DATA_OUT tears down while the nodes that did mount it
    still read it)."""
    side, reg, _ = make_side()
    mounted_input_on(side, reg, ("c1", "c2"))
    fut = releasing(side, teardown_ctx())
    for node in ("c1", "c2"):
        rel = side.agent("7", node, "c[1-2]", 0, wait=SOON)
        assert rel["do"] == "release"
        assert not fut.done()
        side.report("7", node, {"seq": rel["seq"], "ok": True})
    assert fut.result(5) == ["c1", "c2"]


def test_a_node_that_does_not_release_keeps_the_ramdisk() -> None:
    side, reg, _ = make_side(timeout=1.0)
    mounted_input_on(side, reg, ("c1", "c2"))
    fut = releasing(side, teardown_ctx())
    rel = side.agent("7", "c1", "c[1-2]", 0, wait=SOON)
    side.report("7", "c1", {"seq": rel["seq"], "ok": True})  # c2 never answers
    with pytest.raises(RsaError, match=r"c2 did not confirm .* kept"):
        fut.result(5)
    busy = releasing(side, teardown_ctx())
    for node in ("c1", "c2"):
        rel = side.agent("7", node, "c[1-2]", 0, wait=SOON)
        side.report("7", node, {"seq": rel["seq"], "ok": node == "c1", "busy": node == "c2",
                                "message": "/scratch/a/in is in use"})
    with pytest.raises(RsaError, match="kept"):
        busy.result(5)


def test_nodes_whose_epilog_ran_are_not_asked() -> None:
    side, reg, _ = make_side(timeout=1.0)
    mounted_input_on(side, reg, ("c1", "c2"))
    for node in ("c1", "c2"):
        side.epilog("7", node)
    assert releasing(side, teardown_ctx()).result(2) == []


def test_after_a_restart_a_recorded_node_slurm_is_done_with_is_not_asked() -> None:
    """A restarted rsad knows the mounts from the log (``mounted``). c2's Epilog ran while
    rsad was down (unheard): Slurm no longer has the job there, so it holds nothing and
    is not asked; c1, where Slurm still has the job, releases its mount."""
    side, _reg, _ = make_side(timeout=2.0)
    side.slurm_nodes = lambda job: frozenset({"c1"}) if job == "7" else None
    fut = releasing(side, teardown_ctx({"mount": SPEC.to_json(), "mounted": ["c1", "c2"]}))
    rel = side.agent("7", "c1", "c[1-2]", 0, wait=SOON)  # c1's agent reconnects
    assert rel["do"] == "release"
    side.report("7", "c1", {"seq": rel["seq"], "ok": True})
    assert fut.result(5) == ["c1"]


def test_after_a_restart_a_recorded_node_whose_agent_died_keeps_the_ramdisk() -> None:
    """c2's agent died (kill -9, the OOM killer) while the job still runs there, its
    processes still writing to the RAMDISK; rsad restarted. On the code before, c2's
    agent not reconnecting within ``agent_settle`` was taken for an Epilog that ran
    while rsad was away: only c1 was asked, and the teardown destroyed the RAMDISK c2
    still had mounted. Slurm still has the job on c2: its Epilog is not confirmed, it is
    asked to release, and being silent it keeps the RAMDISK (the teardown retries)."""
    side, _reg, _ = make_side(timeout=1.5)
    side.agent_settle = 0.1
    side.slurm_nodes = lambda _job: frozenset({"c1", "c2"})  # RUNNING on c[1-2]
    fut = releasing(side, teardown_ctx({"mount": SPEC.to_json(), "mounted": ["c1", "c2"]}))
    rel = side.agent("7", "c1", "c[1-2]", 0, wait=SOON)
    side.report("7", "c1", {"seq": rel["seq"], "ok": True})
    with pytest.raises(RsaError, match=r"c2 did not confirm the release of the RAMDISK "
                                       r"within 2s, nor is their Epilog confirmed "
                                       r"\(Slurm still has the job there\): it is kept"):
        fut.result(5)  # before: ["c1"], and the RAMDISK destroyed under c2


def test_after_a_restart_a_recorded_node_is_asked_while_slurm_cannot_say() -> None:
    """slurmctld does not answer: no Epilog of c2 is confirmed, so c2 is asked, and
    keeps the RAMDISK while it does not answer; the error says why."""
    side, _reg, _ = make_side(timeout=1.0)
    side.slurm_nodes = lambda _job: None
    fut = releasing(side, teardown_ctx({"mount": SPEC.to_json(), "mounted": ["c2"]}))
    with pytest.raises(RsaError, match=r"c2 did not confirm .*\(Slurm could not be asked "
                                       r"whether it ran\): it is kept"):
        fut.result(5)


def test_a_node_slurm_is_done_with_is_not_asked_though_its_epilog_was_unheard() -> None:
    """The live rsad: c2's Epilog ran but its report was lost (rsad busy, the network):
    Slurm no longer has the job there; its stale agent is not waited for."""
    side, reg, _ = make_side(timeout=5.0)
    mounted_input_on(side, reg, ("c1", "c2"))
    side.epilog("7", "c1")
    side.slurm_nodes = lambda _job: frozenset()  # COMPLETED: done on every node
    assert releasing(side, teardown_ctx()).result(2) == []


def test_a_teardown_never_destroys_what_a_node_did_not_release() -> None:
    from tests.unit.test_ramdisk_tending import SPEC as TSPEC
    from tests.unit.test_ramdisk_tending import Backend, data_path

    backend = Backend(lambda: Health(True))  # its destroy raises: must not be reached
    dp = data_path(backend)
    asked: list[str] = []

    def refuse(ctx: ActionContext) -> list[str]:
        asked.append(ctx.action.id)
        raise RsaError("compute node(s) c2 did not confirm the release: kept")

    dp.release_mounts = refuse
    action = Action("7/1/destroy-fs/9", "7", ActionKind.DESTROY_FS,
                    make_args(ActionKind.DESTROY_FS, nodes=Hostlist.parse("rsa1")))
    ctx = ActionContext(action=action, cancel=CancelToken(), progress=lambda _d: None,
                        facts={"mount": TSPEC.to_json()})
    with pytest.raises(RsaError, match="kept"):
        dp.destroy_fs(ctx)
    assert asked == ["7/1/destroy-fs/9"]


def test_a_report_to_an_earlier_rsads_instruction_never_answers_this_ones() -> None:
    """Instruction numbers restart with rsad (its epoch): an agent that carried out the
    earlier rsad's release while rsad restarted reports it once the new rsad is up, and
    the new rsad's own release may carry the same number. On the code before, that
    report answered it: the RAMDISK was recreated while c2, which had not been asked,
    still held its input mount. A report names the epoch of its instruction now, and one
    of another epoch is no answer (a node of an older package names none: as before)."""
    side, reg, backend = make_side(timeout=1.5)
    side.prolog("7", "c1", "c[1-2]", "mounted-input")
    for node in ("c1", "c2"):  # both agents connected to this rsad
        assert side.agent("7", node, "c[1-2]", 0, wait=0)["do"] == "idle"
    fut = start(reg, ActionKind.RESET, RESET_ARGS)
    rel = side.agent("7", "c1", "c[1-2]", 0, wait=SOON, epoch=side.epoch)
    assert rel["do"] == "release" and rel["epoch"] == side.epoch
    side.report("7", "c1", {"seq": rel["seq"], "ok": True, "epoch": side.epoch})
    got = side.report("7", "c2", {"seq": rel["seq"], "ok": True, "epoch": "1795000000.0"})
    assert got["recorded"] is False
    out = fut.result(10)
    assert out.result is Result.BUSY and out.detail == {"silent": ["c2"]}, out
    assert backend.resets == 0


def test_a_node_that_undid_its_reported_mount_is_no_longer_held_to_release_it() -> None:
    """The bug: c2's Prolog reported its input mount, then met its hard timeout (or an
    error) before it started the job's agent and undid the mount: the job reads the PFS
    there. rsad went on counting c2 among the nodes that hold the RAMDISK (a failed
    report never dropped a node from ``mounted``, nor from the recorded ``mounted``): the
    reset (``rsa input-done``) waited for c2's release, which no agent would give,
    failed busy after ``reset_timeout``, drained c2 in Slurm ("did not confirm release")
    and left the job's output on the PFS; a teardown while the job ran was refused
    ("they may still use it") until c2's Epilog. The Prolog now reports the undone mount
    (failed, the same instruction): c2 holds nothing, the reset and the teardown do not
    ask it, and the API records that (``held``) durably."""
    side, reg, backend = make_side(timeout=1.5)
    side.agent_settle = 0.1
    side.settle = 0.05
    fut = start(reg, ActionKind.MOUNT_INPUT, INPUT)
    ins = until(side, lambda: side.prolog("7", "c1", "c[1-2]", "mounting-input"), "mount")
    side.prolog("7", "c2", "c[1-2]", "mounting-input")
    for node in ("c1", "c2"):
        side.report("7", node, {"seq": ins["seq"], "ok": True})
    done = fut.result(5)
    assert done.result is Result.OK and done.detail["mounted"] == ["c1", "c2"]
    got = side.report("7", "c2", {"seq": ins["seq"], "ok": False, "undone": True,
                                  "message": "the Prolog did not finish (hard timeout of "
                                             "10s): what it had mounted of the RAMDISK "
                                             "over /scratch/a/in was undone"})
    # as of a change after the step's own record of ``mounted`` (daemon/memory.py)
    at = got.pop("at")
    assert at[0] == done.detail["mounted_at"][0] and at[1] > done.detail["mounted_at"][1]
    assert got == {"job_id": "7", "node": "c2", "recorded": True, "held": False}
    # what rsad recorded of the mount step still names c2 (its outcome was committed
    # before the report; the API records the change as compute.unmounted)
    facts = {"mount": SPEC.to_json(), "mounted": ["c1", "c2"]}
    teardown = releasing(side, teardown_ctx(facts))
    rel = side.agent("7", "c1", "c[1-2]", 0, wait=SOON)
    side.report("7", "c1", {"seq": rel["seq"], "ok": True})
    assert teardown.result(5) == ["c1"]
    action = Action("7/1/reset/3", "7", ActionKind.RESET, RESET_ARGS)
    ctx = ActionContext(action=action, cancel=CancelToken(), progress=lambda _d: None,
                        facts=facts)
    reset: Future[Outcome] = Future()
    threading.Thread(target=lambda: reset.set_result(reg.run(ctx)), daemon=True).start()
    rel = side.agent("7", "c1", "c[1-2]", rel["seq"], wait=SOON)
    assert rel["do"] == "release"
    side.report("7", "c1", {"seq": rel["seq"], "ok": True})
    mount = side.agent("7", "c1", "c[1-2]", rel["seq"], wait=SOON)
    assert mount["do"] == "mount" and mount["role"] == "output"
    side.report("7", "c1", {"seq": mount["seq"], "ok": True})
    out = reset.result(5)
    assert out.result is Result.OK, out  # before: BUSY, {"silent": ["c2"]} (drained)
    assert backend.resets == 1


def test_a_mount_taken_back_before_the_step_was_done_fails_it_whatever_comes_late() -> None:
    """A Prolog that undid its mount before rsad's step was done: the step fails with
    its reason (the first failure decides), and there is nothing to record. Its report
    of the mount, which rsad answered too late (the Prolog gave up waiting and undid the
    mount), may reach the node side after the take-back: stale, it counts nothing."""
    side, reg, _ = make_side()
    side.settle = 60.0
    fut = start(reg, ActionKind.MOUNT_INPUT, INPUT)
    ins = until(side, lambda: side.prolog("7", "c1", "c[1-2]", "mounting-input"), "mount")
    side.prolog("7", "c2", "c[1-2]", "mounting-input")
    side.report("7", "c1", {"seq": ins["seq"], "ok": True})
    got = side.report("7", "c2", {"seq": ins["seq"], "ok": False, "undone": True,
                                  "message": "undone"})
    assert "held" not in got
    late = side.report("7", "c2", {"seq": ins["seq"], "ok": True})
    assert late["recorded"] is False
    out = fut.result(5)
    assert out.result is Result.FAILED and "c2: undone" in out.message


def test_a_late_mount_report_of_a_node_whose_epilog_ran_holds_nothing() -> None:
    """A requeue between a node's mount and its report: the report (ok, to the run's
    standing mount) reaches rsad after that node's Epilog took every mount of the job
    down (c1 failed and never runs its Epilog, so the run's standing mount stays). It
    counted c2 as holding the RAMDISK: once the requeued run's Prolog ran on c2, the
    earlier run's teardown asked c2 to release a mount it never had, and was refused
    until the new run ended. A late Prolog's mount, counted, is recorded (``held``)."""
    side, reg, _ = make_side(timeout=1.5)
    side.settle = 0.05
    fut = start(reg, ActionKind.MOUNT_INPUT, INPUT)
    ins = until(side, lambda: side.prolog("7", "c1", "c[1-3]", "mounting-input"), "mount")
    side.report("7", "c1", {"seq": ins["seq"], "ok": True})
    assert fut.result(5).result is Result.OK
    assert side.prolog("7", "c3", "c[1-3]", "mounted-input")["do"] == "mount"
    got = side.report("7", "c3", {"seq": ins["seq"], "ok": True})  # a late Prolog
    assert got["held"] is True  # recorded by the API: a restarted rsad knows it
    assert side.prolog("7", "c2", "c[1-3]", "mounted-input")["do"] == "mount"
    for node in ("c2", "c3"):
        side.epilog("7", node)  # the run ends (requeued) before c2's report arrives
    got = side.report("7", "c2", {"seq": ins["seq"], "ok": True})
    assert "held" not in got
    side.prolog("7", "c2", "c2", "staged-in")  # the requeued run's Prolog on c2
    teardown = releasing(side, teardown_ctx())
    rel = side.agent("7", "c1", "c[1-3]", 0, wait=SOON)
    side.report("7", "c1", {"seq": rel["seq"], "ok": True})
    assert teardown.result(5) == ["c1"]  # before: c2 asked too, silent: refused


def test_a_reset_after_a_restart_does_not_wait_for_a_node_whose_epilog_was_recorded() -> None:
    """c2's Epilog ran (the job was requeued, or its end not yet seen), then rsad was
    restarted with the reset outstanding. On the code before, the Epilog was known only
    to the rsad that heard it: the next one's facts still counted c2, the re-issued
    reset waited for a release from c2, which no agent gives, and ended BUSY with c2
    silent (drained in Slurm, alerted). Now the API records it (``compute.epilog``, as
    of after the step's record of ``mounted``) and the job's facts follow."""
    from rsa_scheduler.core.events import Event
    from rsa_scheduler.daemon.memory import Memory

    side, reg, _ = make_side(timeout=1.5)
    side.settle = 0.05
    fut = start(reg, ActionKind.MOUNT_INPUT, INPUT)
    ins = until(side, lambda: side.prolog("7", "c1", "c[1-2]", "mounting-input"), "mount")
    side.prolog("7", "c2", "c[1-2]", "mounting-input")
    for node in ("c1", "c2"):
        side.report("7", node, {"seq": ins["seq"], "ok": True})
    done = fut.result(5)
    ended = side.epilog("7", "c2")
    # what the log holds, replayed by the next rsad: the Epilog's record committed
    # before the step's outcome (the loop takes them in the order they came)
    memory = Memory()
    memory.learn(Event(1.0, "7", "action.outcome", {"result": "ok", "detail": {
        "mount": SPEC.to_json()}}))
    memory.learn(Event(2.0, "7", "compute.epilog", {"node": "c2",
                                                    "at": ended.get("at")}))
    memory.learn(Event(3.0, "7", "action.outcome", {"result": "ok",
                                                   "detail": dict(done.detail)}))
    assert memory.facts["7"]["mounted"] == ["c1"]
    again, reg2, backend = make_side(timeout=1.5)  # the restarted rsad
    again.agent_settle = 0.1
    action = Action("7/1/reset/3", "7", ActionKind.RESET, RESET_ARGS)
    ctx = ActionContext(action=action, cancel=CancelToken(), progress=lambda _d: None,
                        facts=dict(memory.facts["7"]))
    reset: Future[Outcome] = Future()
    threading.Thread(target=lambda: reset.set_result(reg2.run(ctx)), daemon=True).start()
    rel = until(again, lambda: again.agent("7", "c1", "c[1-2]", 0, wait=0.05), "release")
    again.report("7", "c1", {"seq": rel["seq"], "ok": True, "epoch": again.epoch})
    mount = until(again, lambda: again.agent("7", "c1", "c[1-2]", rel["seq"], wait=0.05),
                  "mount")
    again.report("7", "c1", {"seq": mount["seq"], "ok": True, "epoch": again.epoch})
    out = reset.result(5)
    assert out.result is Result.OK, out  # before: BUSY, {"silent": ["c2"]} (drained)
    assert backend.resets == 1
    assert ended["held"] is True and ended["at"][1] > done.detail["mounted_at"][1]


def test_a_take_back_of_an_earlier_rsads_mount_is_heard_by_the_restarted_one() -> None:
    """c2's Prolog reported the mount an earlier rsad gave it (counted, recorded in the
    job's ``mounted``), then rsad restarted, then the Prolog met its hard timeout before
    it started the job's agent and undid the mount: its take-back names the earlier
    epoch. On the code before, the restarted rsad ignored it (another epoch: its
    numbers are not this rsad's): its reset waited for a release from c2, which no agent
    gives, and ended BUSY with c2 silent (drained in Slurm, alerted). Nothing of the
    mount is left on c2: it no longer counts, and the API records that (``held``)."""
    side, reg, backend = make_side(timeout=1.5)  # the restarted rsad
    side.agent_settle = 0.1
    action = Action("7/1/reset/3", "7", ActionKind.RESET, RESET_ARGS)
    ctx = ActionContext(action=action, cancel=CancelToken(), progress=lambda _d: None,
                        facts={"mount": SPEC.to_json(), "mounted": ["c1", "c2"]})
    reset: Future[Outcome] = Future()
    threading.Thread(target=lambda: reset.set_result(reg.run(ctx)), daemon=True).start()
    rel = until(side, lambda: side.agent("7", "c1", "c[1-2]", 0, wait=0.05), "release")
    got = side.report("7", "c2", {"seq": 1, "ok": False, "undone": True,
                                  "epoch": "1796000000.000001",
                                  "message": "the Prolog did not finish (hard timeout of "
                                             "10s): what it had mounted of the RAMDISK "
                                             "over /scratch/a/in was undone"})
    side.report("7", "c1", {"seq": rel["seq"], "ok": True, "epoch": side.epoch})
    mount = until(side, lambda: side.agent("7", "c1", "c[1-2]", rel["seq"], wait=0.05),
                  "mount")
    side.report("7", "c1", {"seq": mount["seq"], "ok": True, "epoch": side.epoch})
    out = reset.result(5)
    assert out.result is Result.OK, out  # before: BUSY, {"silent": ["c2"]} (drained)
    assert backend.resets == 1
    assert got["recorded"] is True and got["held"] is False
    # an earlier rsad's ok, or a take-back by a node this rsad counts a mount of, is not
    # about this rsad's instructions: nothing changes
    assert side.report("7", "c2", {"seq": 1, "ok": True, "epoch": "1796000000.000001"}) \
        == {"job_id": "7", "node": "c2", "recorded": False}
    assert side.report("7", "c1", {"seq": 1, "ok": False, "undone": True,
                                   "epoch": "1796000000.000001", "message": "undone"}) \
        == {"job_id": "7", "node": "c1", "recorded": False}
