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

import logging
import threading
from collections.abc import Callable
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
    its re-issued stage-out waits for the Epilogs of the nodes the job's facts record as
    holding the mount, its time counted from when its API answers the nodes again. On
    the code before, the agents' time to reconnect counted from rsad's construction, not
    from the moment its API answers them (after the log is replayed and the RSA nodes are
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


def restarted_side(held: Callable[[str], frozenset[str] | None], *,
                   timeout: float = 30.0) -> NodeSide:
    """A NodeSide as an rsad restarted a moment ago has it (its API open), Slurm asked
    through ``held`` (every 0.05 s)."""
    side, _reg, _ = make_side(timeout=timeout)
    side.agent_settle = 0.1
    side.slurm_nodes = held
    side.slurm_every = 0.05
    return side


def test_after_a_restart_the_stage_out_waits_for_a_node_whose_agent_died() -> None:
    """c2's agent died (kill -9, the OOM killer) while the job ran there; rsad restarted;
    the job ends, its processes on c2 write their checkpoint on SIGTERM (KillWait). On
    the code before, c2's agent not reconnecting within ``agent_settle`` was taken for an
    Epilog that ran while rsad was away: the stage-out read and verified the RAMDISK
    while c2 still wrote, and the checkpoint was destroyed with the RAMDISK. Slurm still
    has the job on c2 (COMPLETING there): the stage-out waits for c2's Epilog."""
    where = {"7": frozenset({"c1", "c2"})}  # COMPLETING on c[1-2]
    side = restarted_side(lambda job: where.get(job, frozenset()))
    fut = awaiting(side, stage_out_ctx(mounted=("c1", "c2")))
    assert side.agent("7", "c1", "c[1-2]", 0, wait=0)["do"] == "idle"  # c1's is back
    side.epilog("7", "c1")
    where["7"] = frozenset({"c2"})
    with pytest.raises(TimeoutError):
        fut.result(1.0)  # before: [] after agent_settle, c2 still writing
    side.epilog("7", "c2")  # c2's processes are gone: its Epilog tells rsad
    assert fut.result(5) == []


def test_a_node_whose_epilog_rsad_did_not_hear_is_confirmed_by_slurm() -> None:
    """As above, but c2's Epilog could not tell rsad (it ran while rsad was away, or its
    report was lost): Slurm no longer has the job there, and the stage-out goes on."""
    where = {"7": frozenset({"c2"})}
    side = restarted_side(lambda job: where.get(job, frozenset()))
    fut = awaiting(side, stage_out_ctx(mounted=("c1", "c2")))
    side.epilog("7", "c1")
    with pytest.raises(TimeoutError):
        fut.result(0.5)
    where["7"] = frozenset()  # COMPLETED (or CANCELLED, TIMEOUT ...): done everywhere
    assert fut.result(5) == []


def test_after_a_restart_a_job_slurm_is_done_with_is_staged_out_at_once() -> None:
    """Every recorded node's Epilog ran while rsad was away: Slurm says the job is done
    on all of them, and the stage-out does not wait (before: ``agent_settle``, 12 s)."""
    side, _reg, _ = make_side()
    side.slurm_nodes = lambda _job: frozenset()
    assert awaiting(side, stage_out_ctx(mounted=("c1", "c2"))).result(5) == []


def test_while_slurm_cannot_say_the_stage_out_waits_its_whole_time(
        caplog: pytest.LogCaptureFixture) -> None:
    """slurmctld does not answer: no unheard Epilog is confirmed; the stage-out waits
    ``reset_timeout``, then goes on and says which node it did not hear, and why."""
    asked: list[str] = []

    def held(job: str) -> frozenset[str] | None:
        asked.append(job)
        return None

    side = restarted_side(held, timeout=0.6)
    with caplog.at_level(logging.WARNING, logger="rsa_scheduler.daemon.nodeside"):
        assert awaiting(side, stage_out_ctx(mounted=("c2",))).result(5) == ["c2"]
    assert len(asked) >= 2  # asked again while it waited
    assert ("c2: no Epilog confirmed within 1s of the job's end (Slurm could not be "
            "asked whether it ran): staging its output out all the same") in caplog.text
