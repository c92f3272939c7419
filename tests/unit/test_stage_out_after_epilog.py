"""A stage-out reads the RAMDISK only once the job's processes are gone.

rsad learns that a job ended from EpilogSlurmctld, which slurmctld runs before it asks
the compute nodes to end the job's processes (``deallocate_nodes``): they get SIGTERM
and ``KillWait`` seconds (30 by default) before SIGKILL. A job that writes its last
checkpoint on SIGTERM (a cancel, its time limit) wrote it to the RAMDISK after a quick
stage-out had been verified: the RAMDISK was destroyed with it, and the user read
"stage-out finished: content verified". Now the stage-out first waits for the Epilog
of every compute node that may hold the job's mount (``NodeSide.await_epilogs``, wired
into ``DataPath.stage_out``). The lab test: ``tests/e2e/test_late_write.py``.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from pathlib import PurePosixPath

import pytest

from rsa_scheduler.daemon.data import DataPath
from rsa_scheduler.daemon.executors import ActionContext, Registry
from rsa_scheduler.daemon.nodeside import NodeSide
from rsa_scheduler.hosts import CancelToken
from tests.unit.corekit import make_action
from tests.unit.test_node_side import make_side, mounted_input_on
from tests.unit.test_ramdisk_tending import SPEC, Backend, data_path

pytestmark = pytest.mark.unit


def stage_out_ctx(*, rescue: bool = False, mounted: tuple[str, ...] = ()) -> ActionContext:
    out = "/pfs/rescue/u/7.1" if rescue else "/pfs/u/out"
    action = make_action("7/1/stage-out/12", user="nobody", data_out=PurePosixPath(out),
                         rescue=rescue)
    return ActionContext(action=action, cancel=CancelToken(), progress=lambda _d: None,
                         facts={"mount": SPEC.to_json(),
                                **({"mounted": list(mounted)} if mounted else {})})


def awaiting(side: NodeSide, ctx: ActionContext) -> Future[list[str]]:
    fut: Future[list[str]] = Future()

    def run() -> None:
        try:
            fut.set_result(side.await_epilogs(ctx))
        except BaseException as e:
            fut.set_exception(e)
    threading.Thread(target=run, daemon=True).start()
    return fut


def test_a_stage_out_waits_until_every_node_that_held_the_mount_ran_its_epilog() -> None:
    side, reg, _ = make_side()
    mounted_input_on(side, reg, ("c1", "c2"))
    fut = awaiting(side, stage_out_ctx())
    side.epilog("7", "c1")
    assert not fut.done()  # c2's processes may still write
    side.epilog("7", "c2")
    assert fut.result(5) == []


def test_a_node_that_never_runs_its_epilog_delays_the_stage_out_only_so_long() -> None:
    side, reg, _ = make_side(timeout=0.5)  # reset_timeout: a failed node never answers
    mounted_input_on(side, reg, ("c1", "c2"))
    side.epilog("7", "c1")
    assert awaiting(side, stage_out_ctx()).result(5) == ["c2"]


def test_a_job_whose_nodes_held_no_mount_is_not_waited_for() -> None:
    side, _reg, _ = make_side()
    assert awaiting(side, stage_out_ctx()).result(1) == []


class Asked(Exception):
    """What the Epilog wait of :func:`asking_data_path` raises: it was asked."""


def asking_data_path() -> tuple[DataPath, list[str]]:
    """A DataPath whose Epilog wait records the action it was asked for and raises
    :class:`Asked`, and which fails the test if the RAMDISK is looked at first."""
    dp = data_path(Backend(lambda: pytest.fail("the RAMDISK was looked at first")))
    seen: list[str] = []

    def await_epilogs(ctx: ActionContext) -> None:
        seen.append(ctx.action.id)
        raise Asked

    dp.await_epilogs = await_epilogs
    return dp, seen


def test_the_stage_out_asks_before_it_reads_the_ramdisk_and_a_rescue_does_not() -> None:
    dp, seen = asking_data_path()
    with pytest.raises(Asked):
        dp.stage_out(stage_out_ctx())
    assert seen == ["7/1/stage-out/12"]
    # a rescue comes after rescue_after (hours): the job is long over; never held up
    with pytest.raises(BaseException) as other:
        dp.stage_out(stage_out_ctx(rescue=True))
    assert not isinstance(other.value, Asked) and seen == ["7/1/stage-out/12"]


def write_back_ctx(*, job_ended: bool, job_running: bool) -> ActionContext:
    action = make_action("7/1/write-back/12", user="nobody", data_in=PurePosixPath("/pfs/in"))
    return ActionContext(action=action, cancel=CancelToken(), progress=lambda _d: None,
                         facts={"mount": SPEC.to_json()}, job_ended=job_ended,
                         job_running=job_running)


def test_the_write_back_after_the_run_waits_too_and_one_while_it_runs_does_not() -> None:
    """Writable input (#RSA_INPUT=rw): the write-back issued at the job's end (or at its
    requeue) is the last before the teardown destroys the RAMDISK; what the job changed
    in DATA_IN on SIGTERM, during KillWait, after it was lost the same way. A write-back
    while the job runs (before a reset) is followed by another: it does not wait."""
    dp, seen = asking_data_path()
    with pytest.raises(Asked):
        dp.write_back(write_back_ctx(job_ended=True, job_running=False))
    with pytest.raises(Asked):  # requeued: its processes are killed as at an end
        dp.write_back(write_back_ctx(job_ended=False, job_running=False))
    assert seen == ["7/1/write-back/12"] * 2
    with pytest.raises(BaseException) as other:
        dp.write_back(write_back_ctx(job_ended=False, job_running=True))
    assert not isinstance(other.value, Asked) and len(seen) == 2


def test_a_slow_start_leaves_the_agents_their_time_to_reconnect() -> None:
    """rsad restarted while the job's processes were winding down (SIGTERM, KillWait):
    its re-issued stage-out waits for the nodes the job's facts record as holding the
    mount once their agents reconnect, and their agents get ``agent_settle`` to do so.
    On the code before, that time counted from rsad's construction, not from the moment
    its API answers the agents again (after the log is replayed and the RSA nodes are
    fenced): a start slower than ``agent_settle`` left them none, and the stage-out read
    the RAMDISK at once while c1 still had it mounted and its job still wrote."""
    now = [1000.0]
    side = NodeSide(backend_for=lambda _ctx: pytest.fail("no backend needed"),
                    reset_timeout=5.0, clock=lambda: now[0])
    reg = Registry()
    side.register(reg)
    reg.starting()  # rsad starts: its log replayed, the RSA nodes fenced ...
    now[0] += 60.0  # ... for a minute, more than agent_settle (12 s)
    # the job's facts: c1 holds the mount (no Epilog of it recorded)
    fut = awaiting(side, stage_out_ctx(mounted=("c1",)))  # re-issued before rsad answers any agent
    with pytest.raises(TimeoutError):
        fut.result(0.5)
    reg.ready()  # the API answers the agents from now on
    assert side.agent("7", "c1", "c1", 0, wait=0)["do"] == "idle"  # c1's agent is back
    with pytest.raises(TimeoutError):
        fut.result(0.5)  # c1's processes may still write
    side.epilog("7", "c1")
    assert fut.result(5) == []
