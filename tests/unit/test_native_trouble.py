"""Native mode under trouble (issue 38): a hook answers from what rsad knows for sure.

A failed queue read or an unread batch script never makes data_in answer "nothing to
stage"; an array task's own id stays matched to its task across a restart from a
snapshot; the API answers "not yet" while rsad starts; teardown's waits say what rsad
does; ``rsa-bb`` asks again while rsad is unreachable, busy, starting or without MUNGE,
within Slurm's hook timeouts, and its last line says what Slurm then does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from rsa_scheduler.bb import OTHER_WAIT, Refused, Unreachable, call_hook
from rsa_scheduler.core.directives import DirectiveSpec
from rsa_scheduler.core.policy import StagingPolicy
from rsa_scheduler.core.scheduler import Scheduler
from rsa_scheduler.core.states import JobState, RsaState
from rsa_scheduler.daemon.api import ApiError, Caller
from rsa_scheduler.daemon.native import NativeDriver
from rsa_scheduler.daemon.service import Daemon
from rsa_scheduler.slurm.port import SlurmError
from rsa_scheduler.store import Store
from tests.unit.corekit import make_pool
from tests.unit.test_daemon import ScriptedSlurm, instant_registry, serving, settle
from tests.unit.test_native import Clock

ROOT = Caller(0, "root")


class TroubledSlurm(ScriptedSlurm):
    """ScriptedSlurm whose queue read, script read and job_info can be made to fail."""

    def __init__(self) -> None:
        super().__init__()
        self.queue_fails = False
        self.script_fails = False
        self.info_fails = False
        self.script = "#!/bin/sh\n#RSA_DATA_IN /pfs/in\n"

    def queue(self) -> list[Any]:
        if self.queue_fails:
            raise SlurmError("squeue: error: slurm_load_jobs: Socket timed out")
        return super().queue()

    def batch_script(self, job_id: str) -> str:
        if self.script_fails:
            raise SlurmError(f"scontrol write batch_script {job_id}: timed out")
        return self.script

    def job_info(self, job_id: str) -> Any:
        if self.info_fails:
            raise SlurmError("squeue: error: slurm_load_jobs: Socket timed out")
        return super().job_info(job_id)


def native(tmp_path: Path, slurm: ScriptedSlurm, clock: Clock, *, start: bool = True,
           script_source: str = "job_submit", snapshot_every: int = 0) -> Daemon:
    store = Store.open(tmp_path / "rsa.db", durability="normal")
    d = Daemon(Scheduler(make_pool(), StagingPolicy(wait_timeout=2_073_600.0)), slurm=slurm,
               store=store, registry=instant_registry([]), workers=2, poll_interval=0,
               script_source=script_source, snapshot_every=snapshot_every, clock=clock)
    d.native = NativeDriver(tmp_path / "bb-pools.json", 120.0)
    if start:
        d.start()
    return d


def restart(d: Daemon, tmp_path: Path, slurm: ScriptedSlurm, clock: Clock) -> Daemon:
    d.shutdown()
    d.store.close()
    return native(tmp_path, slurm, clock)


# ---- item 1: a failed read is not "nothing to stage" ------------------------------------

def test_a_failed_queue_read_after_setup_never_makes_data_in_answer_done(
        tmp_path: Path) -> None:
    """The queue read after setup fails: data_in waits (on main it answered "nothing to
    stage" and Slurm started the job without its input); the next good read stages."""
    slurm, clock = TroubledSlurm(), Clock()
    d = native(tmp_path, slurm, clock)
    slurm.set("7", "PENDING", "BurstBufferStageIn")
    assert d.bb("setup", "7", {"uid": "1001"})["status"] == "done"
    slurm.queue_fails = True
    d.poll()
    answer = d.bb("data_in", "7", {})
    assert answer["status"] == "wait", answer
    assert answer["message"] == "waiting for rsad to read job 7's #RSA_ directives from " \
                                "the queue"
    d.poll()  # still failing: still not known
    assert d.bb("data_in", "7", {})["status"] == "wait"
    slurm.queue_fails = False
    d.poll()
    settle(d)
    assert d.sched.records["7"].rsa_state is RsaState.LOCKED_IN
    assert d.bb("data_in", "7", {})["status"] == "done"


def test_a_job_without_directives_is_done_only_after_a_good_read(tmp_path: Path) -> None:
    slurm, clock = TroubledSlurm(), Clock()
    d = native(tmp_path, slurm, clock)
    slurm.set("8", "PENDING", "BurstBufferStageIn", spec=None)  # no rsa1: marker
    d.bb("setup", "8", {})
    slurm.queue_fails = True
    d.poll()
    assert d.bb("data_in", "8", {})["status"] == "wait"
    slurm.queue_fails = False
    d.poll()
    answer = d.bb("data_in", "8", {})
    assert answer["status"] == "done" and "nothing to stage" in answer["message"], answer
    # a marker rsad cannot read: not "done" either
    slurm.rows.append(replace(slurm.rows[-1], job_id="9", admin_comment="rsa1:zz=1"))
    d.bb("setup", "9", {})
    d.poll()
    answer = d.bb("data_in", "9", {})
    assert answer["status"] == "wait" and "cannot read" in answer["message"], answer


def test_an_unread_batch_script_never_makes_data_in_answer_done(tmp_path: Path) -> None:
    """slurm.script_source: scontrol: the script cannot be read (scontrol fails), or is
    still being read: wait; read and without directives: done."""
    slurm, clock = TroubledSlurm(), Clock()
    d = native(tmp_path, slurm, clock, script_source="scontrol")
    slurm.set("7", "PENDING", "BurstBufferStageIn", spec=None)
    slurm.script_fails = True
    d.bb("setup", "7", {})
    for _ in range(3):
        poll_and_read(d)
        assert d.bb("data_in", "7", {})["status"] == "wait"
    slurm.script_fails = False
    slurm.script = "#!/bin/sh\necho no directives\n"
    for _ in range(3):
        poll_and_read(d)
    answer = d.bb("data_in", "7", {})
    assert answer["status"] == "done" and "nothing to stage" in answer["message"], answer


def poll_and_read(d: Daemon) -> None:
    """One cycle, and the script reads it started finished (they run in a worker)."""
    d.poll()
    for fut, _ in list(d.specs.parsing.values()):
        fut.result(timeout=10)


# ---- item 2: array task mappings survive a restart from a snapshot ----------------------

def test_an_array_tasks_hooks_resolve_to_the_task_after_a_restart_from_a_snapshot(
        tmp_path: Path) -> None:
    slurm, clock = TroubledSlurm(), Clock()
    d = native(tmp_path, slurm, clock)
    slurm.tasks["12"] = ("10", "2")
    slurm.set("10_2", "PENDING", "BurstBufferStageIn")
    with serving(d) as routes:
        got = routes.dispatch(ROOT, "POST", "/v1/bb/setup", {"job_id": "12"})
    assert got["job_id"] == "10_2"
    d.poll()
    settle(d)
    assert d.sched.records["10_2"].rsa_state is RsaState.LOCKED_IN
    d.snapshot()
    d = restart(d, tmp_path, slurm, clock)
    assert d.aliases == {"12": "10_2"}
    d.poll()  # a restarted rsad reads the queue before it answers data_in "done"
    settle(d)
    with serving(d) as routes:
        got = routes.dispatch(ROOT, "POST", "/v1/bb/data_in", {"job_id": "12"})
        assert (got["job_id"], got["status"]) == ("10_2", "done"), got
        got = routes.dispatch(ROOT, "POST", "/v1/bb/teardown",
                              {"job_id": "12", "hurry": "true"})
        assert got["job_id"] == "10_2" and "no RAMDISK" not in got["message"], got


def test_an_alias_learned_at_setup_survives_a_restart_without_a_snapshot(
        tmp_path: Path) -> None:
    slurm, clock = TroubledSlurm(), Clock()
    d = native(tmp_path, slurm, clock)
    slurm.tasks["12"] = ("10", "2")
    slurm.set("10_2", "PENDING", "BurstBufferStageIn")
    with serving(d) as routes:
        routes.dispatch(ROOT, "POST", "/v1/bb/setup", {"job_id": "12"})
    d = restart(d, tmp_path, slurm, clock)
    assert d.aliases == {"12": "10_2"}



def test_a_callers_own_alias_is_never_taken_for_an_array_task_match(
        tmp_path: Path) -> None:
    """Only Slurm's answer matches an own id to a task. On main a setup body's "alias"
    went into the bb.setup event as it came, and a restarted rsad took that id for the
    job (here: any hook of job 99 answered from job 7's record)."""
    slurm, clock = TroubledSlurm(), Clock()
    d = native(tmp_path, slurm, clock)
    slurm.set("7", "PENDING", "BurstBufferStageIn")
    with serving(d) as routes:
        got = routes.dispatch(ROOT, "POST", "/v1/bb/setup", {"job_id": "7", "alias": "99"})
    assert (got["job_id"], got["status"]) == ("7", "done"), got
    d = restart(d, tmp_path, slurm, clock)
    assert "99" not in d.aliases, d.aliases

def test_aliases_leave_memory_with_their_job(tmp_path: Path) -> None:
    """Retention: an alias goes once its job left memory (and is not in the next
    snapshot); an alias of a live job stays."""
    slurm, clock = TroubledSlurm(), Clock()
    d = native(tmp_path, slurm, clock)
    d.retention = 10.0
    slurm.tasks.update({"12": ("10", "2"), "13": ("10", "3")})
    slurm.set("10_2", "PENDING", "BurstBufferStageIn", spec=None)
    slurm.set("10_3", "PENDING", "BurstBufferStageIn")  # RSA work: tracked
    with serving(d) as routes:
        routes.dispatch(ROOT, "POST", "/v1/bb/setup", {"job_id": "12"})
        routes.dispatch(ROOT, "POST", "/v1/bb/setup", {"job_id": "13"})
    d.poll()
    slurm.rows = [r for r in slurm.rows if r.job_id != "10_2"]  # left the queue
    clock.now += 100
    d.poll()
    settle(d)
    assert "10_3" in d.sched.records and d.aliases == {"13": "10_3"}
    assert d.memory.to_json()["aliases"] == {"13": "10_3"}



def test_an_array_task_whose_user_this_host_cannot_resolve_is_served_as_its_task(
        tmp_path: Path) -> None:
    """slurmctld names the task's uid, squeue its user, a name rsad's host cannot
    resolve (or the uid itself): on main the uid check failed, the task went on under its
    own id, which the queue never lists (it lists 10_2), and data_in answered "nothing to
    stage": Slurm started the task without its input. Now it is the task's."""
    slurm, clock = TroubledSlurm(), Clock()
    d = native(tmp_path, slurm, clock)
    slurm.tasks.update({"12": ("10", "2"), "13": ("10", "3")})
    slurm.users.update({"12": "rsa-no-such-user", "13": "64999"})  # 13: squeue's number
    slurm.set("10_2", "PENDING", "BurstBufferStageIn")
    slurm.set("10_3", "PENDING", "BurstBufferStageIn")
    with serving(d) as routes:
        for own, key, uid in (("12", "10_2", "64998"), ("13", "10_3", "64999")):
            got = routes.dispatch(ROOT, "POST", "/v1/bb/setup", {"job_id": own, "uid": uid})
            assert (got["job_id"], got["status"]) == (key, "done"), got
    d.poll()  # the loop's own work, once the API's loop thread is gone
    settle(d)
    with serving(d) as routes:
        for own in ("12", "13"):
            got = routes.dispatch(ROOT, "POST", "/v1/bb/data_in", {"job_id": own})
            assert "nothing to stage" not in got["message"], got
    assert d.sched.records["10_2"].rsa_state is RsaState.LOCKED_IN
    assert d.sched.records["10_3"].rsa_state is RsaState.LOCKED_IN


def test_an_array_task_rsad_cannot_take_fails_its_setup_and_never_stages_nothing(
        tmp_path: Path) -> None:
    """Slurm's hook and its queue name two users for the task, or the task is matched to
    another job id already: setup fails, saying why (Slurm holds the task), instead of
    going on under the task's own id and answering data_in "nothing to stage"."""
    import pwd

    slurm, clock = TroubledSlurm(), Clock()
    d = native(tmp_path, slurm, clock)
    me = pwd.getpwuid(0).pw_name
    slurm.tasks.update({"12": ("10", "2"), "14": ("10", "2")})
    slurm.users.update({"12": me, "14": me})
    slurm.set("10_2", "PENDING", "BurstBufferStageIn")
    with serving(d) as routes:
        got = routes.dispatch(ROOT, "POST", "/v1/bb/setup", {"job_id": "12", "uid": "64998"})
        assert got["status"] == "failed", got
        assert "job 12 is array task 10_2" in got["message"], got
        assert "uid 64998" in got["message"], got
        assert "12" not in (d.native.jobs if d.native else {})
        got = routes.dispatch(ROOT, "POST", "/v1/bb/setup", {"job_id": "12", "uid": "0"})
        assert (got["job_id"], got["status"]) == ("10_2", "done"), got
        got = routes.dispatch(ROOT, "POST", "/v1/bb/setup", {"job_id": "14", "uid": "0"})
        assert got["status"] == "failed" and "task 10_2 is job 12 already" in \
            got["message"], got
        assert "14" not in (d.native.jobs if d.native else {})


# ---- item 3: the API answers while rsad starts; setup waits for Slurm's answer -----------

def test_the_api_answers_not_yet_until_rsad_has_replayed_and_fenced(tmp_path: Path) -> None:
    slurm, clock = TroubledSlurm(), Clock()
    d = native(tmp_path, slurm, clock, start=False)
    routes = serving(d)
    with routes as r:
        for hook in ("setup", "data_in", "pre_run", "post_run", "data_out", "teardown"):
            got = r.dispatch(ROOT, "POST", f"/v1/bb/{hook}", {"job_id": "7"})
            assert got["status"] == "wait" and "rsad is starting" in got["message"], hook
        with pytest.raises(ApiError, match="rsad is starting") as err:
            r.dispatch(ROOT, "GET", "/v1/status", None)
        assert err.value.status == 503
        with pytest.raises(ApiError, match="root or SlurmUser only"):  # still checked first
            r.dispatch(Caller(1001, "alice"), "POST", "/v1/bb/setup", {"job_id": "7"})
    d.start()
    slurm.set("7", "PENDING", "BurstBufferStageIn")
    with serving(d) as r:
        assert r.dispatch(ROOT, "POST", "/v1/bb/setup", {"job_id": "7"})["status"] == "done"


def test_setup_waits_while_slurm_cannot_say_whether_the_job_is_an_array_task(
        tmp_path: Path) -> None:
    """On main the job went on under its own id: an array task's hooks then missed its
    RAMDISK. Now setup answers "wait" (rsa-bb asks again within OtherTimeout)."""
    slurm, clock = TroubledSlurm(), Clock()
    d = native(tmp_path, slurm, clock)
    slurm.tasks["12"] = ("10", "2")
    slurm.set("10_2", "PENDING", "BurstBufferStageIn")
    slurm.info_fails = True
    with serving(d) as routes:
        got = routes.dispatch(ROOT, "POST", "/v1/bb/setup", {"job_id": "12"})
        assert got["status"] == "wait" and "cannot ask Slurm about job 12" in got["message"]
        assert "12" not in d.native.jobs if d.native else False
        slurm.info_fails = False
        got = routes.dispatch(ROOT, "POST", "/v1/bb/setup", {"job_id": "12"})
        assert (got["job_id"], got["status"]) == ("10_2", "done")


# ---- item 4: true waits ---------------------------------------------------------------------

def test_a_hurried_teardown_of_a_job_rsad_thinks_running_waits_for_its_stage_out(
        tmp_path: Path) -> None:
    """scancel --hurry of a running job: Slurm tears down once the job ended. rsad has
    not seen it end: on main it answered "kept 300s for a new setup" (false: the job is
    not pending); now it waits, saying so, and reads the queue at once."""
    slurm, clock = TroubledSlurm(), Clock()
    d = native(tmp_path, slurm, clock)
    slurm.set("9", "PENDING", "BurstBufferStageIn",
              spec=DirectiveSpec(data_out="/pfs/out"))
    d.bb("setup", "9", {})
    d.poll()
    settle(d)
    d.submit("hook", {"hook": "prolog_slurmctld", "job_id": "9"})
    settle(d)
    assert d.sched.records["9"].job_state is JobState.RUNNING
    answer = d.bb("teardown", "9", {"hurry": "true"})
    assert answer["status"] == "wait", answer
    assert "kept" not in answer["message"] and "staged out" in answer["message"], answer
    assert d._last_poll == 0.0  # the queue is read now


# ---- rsa-bb: transient trouble is asked again, within Slurm's hook timeouts --------------

class Rsad:
    def __init__(self, *answers: object) -> None:
        self.answers = list(answers)
        self.now = 0.0
        self.calls = 0

    def post(self, path: str, body: Mapping[str, Any]) -> Any:
        self.calls += 1
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def clock(self) -> float:
        return self.now


def hook(rsad: Rsad, name: str) -> tuple[bool, str]:
    return call_hook(rsad.post, name, {"job_id": "42"}, sleep=rsad.sleep, clock=rsad.clock)


@pytest.mark.parametrize("name", ["setup", "pre_run", "post_run", "real_size", "data_in",
                                  "data_out"])
def test_busy_starting_and_munge_trouble_are_asked_again(name: str) -> None:
    rsad = Rsad(Refused("rsad is busy: its loop did not answer in time", 503),
                Refused("rsad is busy: its loop took the request but did not answer in "
                        "time; it may still be carried out", 504),
                Refused("internal error: cannot write rsad's event log (disk full): rsad "
                        "stops; its restart replays the log", 500),
                Refused("uid 0 already has 8 connections", 429),
                Unreachable("munge_encode: Socket communication error"),
                Refused("Expired credential", 401),
                {"status": "wait", "message": "rsad is starting: not yet"},
                {"status": "done", "message": "set up"})
    assert hook(rsad, name) == (True, "set up")
    assert rsad.calls == 8


def test_a_hook_gives_up_within_slurms_other_timeout_saying_what_slurm_does() -> None:
    busy = Rsad(Refused("rsad is busy: its loop did not answer in time", 503))
    ok, line = hook(busy, "setup")
    assert not ok and busy.now == OTHER_WAIT < 300.0
    assert line.startswith("setup of job 42: rsad answered 503 (rsad is busy")
    assert line.endswith("Slurm holds job 42 (BurstBufferOperation); once rsad answers, "
                         "scancel it and submit it again"), line
    assert "start rsad" not in line and "retry" not in line
    down = Rsad(Unreachable("connection refused"))
    ok, line = hook(down, "pre_run")
    assert not ok and down.now == OTHER_WAIT
    assert "Slurm requeues job 42" in line and "start rsad" not in line
    waiting = Rsad({"status": "wait", "message": "rsad is starting: not yet"})
    ok, line = hook(waiting, "post_run")
    assert not ok and waiting.now == OTHER_WAIT and "scancel --hurry 42" in line
    refused = Rsad(Refused("no burst buffer hook 'x'", 404))
    ok, line = hook(refused, "setup")  # not transient: at once
    assert not ok and refused.now == 0.0 and refused.calls == 1


def test_a_setup_rsad_failed_to_log_is_asked_again_and_done_once_after_its_restart(
        tmp_path: Path) -> None:
    """rsad's event log cannot be written while it serves setup: the API answers 500
    (``internal error: cannot write rsad's event log ...``, api.py's respond) and rsad
    stops. On main rsa-bb took the 500 for a refusal and Slurm held the job for good;
    now it asks again, through the restart, and the restarted rsad (which never logged
    the failed setup) sets the job up: once in its log, not twice."""
    from rsa_scheduler.daemon.service import LogWriteFailed

    slurm, clock = TroubledSlurm(), Clock()
    slurm.set("9", "PENDING", "BurstBufferStageIn")
    daemons = [native(tmp_path, slurm, clock)]
    append = daemons[0].store.append

    def full(*args: Any, **kw: Any) -> Any:
        raise OSError(28, "No space left on device")

    daemons[0].store.append = full  # type: ignore[method-assign]
    answered: list[str] = []

    def post(path: str, body: Mapping[str, Any]) -> Any:
        d = daemons[-1]
        try:
            got = d.bb(path.rsplit("/", 1)[1], str(body["job_id"]), body)
        except LogWriteFailed as e:  # api.py's respond: any other exception is a 500
            answered.append("500")
            d.store.append = append  # type: ignore[method-assign]
            daemons.append(restart(d, tmp_path, slurm, clock))  # rsad stops; restarted
            raise Refused(f"internal error: {e}", 500) from e
        answered.append(got["status"])
        return got

    rsad = Rsad()
    ok, line = call_hook(post, "setup", {"job_id": "9", "uid": "1001", "gid": "1001"},
                         sleep=rsad.sleep, clock=rsad.clock)
    assert (ok, line, answered) == (True, "set up", ["500", "done"])
    assert [e.name for e in daemons[-1].store.events("9")].count("bb.setup") == 1
    daemons[-1].shutdown()


def test_an_internal_error_that_lasts_fails_the_hook_within_its_time_saying_so() -> None:
    """rsad answering 500 on and on (a fault, not a restart): setup gives up under
    Slurm's OtherTimeout, data_in 300 s after rsad last answered, each saying what rsad
    answered and what Slurm does; a polled stage (Slurm 24.05+) stays busy."""
    from rsa_scheduler.bb import UNREACHABLE, ask_once

    error = Refused("internal error: boom", 500)
    broken = Rsad(error)
    ok, line = hook(broken, "setup")
    assert not ok and broken.now == OTHER_WAIT
    assert line == ("setup of job 42: rsad answered 500 (internal error: boom) for 240s; "
                    "Slurm holds job 42 (BurstBufferOperation); once rsad answers, "
                    "scancel it and submit it again")
    staging = Rsad({"status": "wait", "message": "staging in"}, *[error] * 400)
    ok, line = hook(staging, "data_in")
    assert not ok and staging.now == UNREACHABLE, staging.now  # from its last answer
    assert line.startswith("data_in of job 42: rsad answered 500 (internal error: boom) "
                           "for 300s; Slurm holds job 42"), line
    busy, line = ask_once(Rsad(error).post, "data_out", {"job_id": "42"})
    assert busy is None and line == ("rsad answered 500 (internal error: boom); asked "
                                     "again at Slurm's next poll")
