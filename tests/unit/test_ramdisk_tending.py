"""A RAMDISK that data moves on is looked after (issue 13): checked and repaired before
the first staging command, checked every few seconds while commands run, and when a
command finds the filesystem not answering (EIO, ENOTCONN) the error names what is broken
or what was restarted, instead of a bare "will retry". Real repairs run in the lab
(tests/e2e/test_ramdisk_repair.py); here the backend is a stand-in and the logic is
DataPath's."""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import PurePosixPath
from types import SimpleNamespace
from typing import Any

import psutil
import pytest

from rsa_scheduler.config import load_config_text
from rsa_scheduler.core.actions import Outcome, Result
from rsa_scheduler.core.hostlist import Hostlist
from rsa_scheduler.daemon.data import DataPath, Repeats, Tending
from rsa_scheduler.daemon.executors import ActionContext, Registry
from rsa_scheduler.daemon.health import RamdiskTender
from rsa_scheduler.fs.base import FilesystemBackend, FsError, FsRequest, Health, MountSpec
from rsa_scheduler.hosts import Cancelled, CancelToken, Host, LocalHost
from rsa_scheduler.runner import CommandError, Completed, Identity
from rsa_scheduler.staging.report import StagingError, classify
from tests.unit.conftest import scratch_area
from tests.unit.corekit import make_action
from tests.unit.test_staging_engine import tree_state

SPEC = MountSpec("tmpfs", "job7-c1", ("rsa1",), "/run/rsa/mnt/job7-c1", {})
CFG = load_config_text("pool:\n  nodes:\n    - names: rsa1\n      capacity: 2G\n")
GOOD = Health(True, "1 chunkserver")
BAD = Health(False, "master: 0/1 chunkservers registered with space")


class Backend(FilesystemBackend):
    name = "probe"

    def __init__(self, health: Callable[[], Health],
                 repair: Callable[[], list[str]] = lambda: ["chunkserver on rsa1"]) -> None:
        super().__init__({})
        self._health = health
        self._repair = repair
        self.checks = 0
        self.repairs: list[FsRequest] = []

    def create(self, req: FsRequest, cancel: CancelToken | None = None) -> MountSpec:
        raise NotImplementedError

    def destroy(self, req: FsRequest) -> None:
        raise NotImplementedError

    def health(self, spec: MountSpec, req: FsRequest | None = None) -> Health:
        self.checks += 1
        return self._health()

    def repair(self, req: FsRequest, spec: MountSpec) -> list[str]:
        self.repairs.append(req)
        return self._repair()

    def client_mount_argv(self, spec: MountSpec, mountpoint: str) -> list[str]:
        raise NotImplementedError


def sequence(*answers: Health) -> Callable[[], Health]:
    """Health answers in turn, the last one for ever after."""
    left = list(answers)

    def next_answer() -> Health:
        return left.pop(0) if len(left) > 1 else left[0]
    return next_answer


def data_path(backend: Backend) -> DataPath:
    hosts: Mapping[str, Host] = {}
    return DataPath(CFG, hosts, {CFG.pool.members()[0].tier.value: backend})


def context(marks: list[Mapping[str, Any]]) -> ActionContext:
    action = make_action("7/1/stage-out/3", user="nobody",
                         data_out=PurePosixPath("/pfs/u/out"))
    return ActionContext(action=action, cancel=CancelToken(), progress=lambda _d: None,
                         milestone=marks.append)


def unanswered() -> StagingError:
    err = CommandError(["rsync"], 23, (
        'rsync: [receiver] write failed on "/run/rsa/mnt/job7-c1/a": '
        "Transport endpoint is not connected (107)\n"))
    return classify(err, "stage-out", "rsa1")


def test_classify_marks_a_filesystem_that_does_not_answer() -> None:
    e = unanswered()
    assert e.unanswered and not e.permanent and "does not answer" in str(e)
    perm = classify(CommandError(["rsync"], 23, "open: Permission denied\n"),
                    "stage-out", "rsa1")
    assert not perm.unanswered


def test_a_healthy_ramdisk_is_checked_once_and_never_repaired() -> None:
    backend, marks = Backend(lambda: GOOD), []  # type: ignore[var-annotated]
    with data_path(backend).tended(context(marks), SPEC):
        pass
    assert backend.checks == 1 and backend.repairs == [] and marks == []


def test_a_broken_ramdisk_is_repaired_before_the_first_command_and_the_event_kept(
        ) -> None:
    backend, marks = Backend(sequence(BAD, GOOD)), []  # type: ignore[var-annotated]
    ran = []
    with data_path(backend).tended(context(marks), SPEC):
        ran.append(True)
    assert ran and len(backend.repairs) == 1
    req = backend.repairs[0]
    assert req.fs_id == "job7-c1" and req.nodes == ("rsa1",) and req.job_id == "7"
    assert marks == [{"repaired": {"broken": BAD.detail,
                                   "restarted": ["chunkserver on rsa1"]}}]


@pytest.mark.parametrize(("repair", "said"), [
    (lambda: [], BAD.detail),
    (lambda: (_ for _ in ()).throw(FsError("rsa1: ssh: connect to host: refused")),
     f"{BAD.detail} (repair failed: rsa1: ssh: connect to host: refused)"),
])
def test_a_ramdisk_that_cannot_be_repaired_stops_the_action_before_it_copies(
        repair: Callable[[], list[str]], said: str) -> None:
    backend, marks = Backend(lambda: BAD, repair), []  # type: ignore[var-annotated]
    ran = []
    with pytest.raises(StagingError) as caught, \
            data_path(backend).tended(context(marks), SPEC):
        ran.append(True)
    assert not ran and marks == []
    assert str(caught.value) == (f"job 7: the RAMDISK's filesystem is broken: {said}; "
                                 "will retry")
    assert not caught.value.permanent  # retried with backoff, then quarantined: data kept


def test_an_error_from_a_dead_server_names_what_was_restarted() -> None:
    backend, marks = Backend(sequence(GOOD, BAD, GOOD)), []  # type: ignore[var-annotated]
    err = unanswered()
    with pytest.raises(StagingError) as caught, \
            data_path(backend).tended(context(marks), SPEC, every=60):
        raise err
    msg = str(caught.value)
    assert msg.startswith("stage-out on rsa1: the filesystem does not answer")
    assert msg.endswith(f"; the RAMDISK's filesystem was broken ({BAD.detail}): "
                        "restarted chunkserver on rsa1")
    assert "\n" not in msg and not caught.value.permanent
    assert caught.value.__cause__ is err and len(backend.repairs) == 1


def test_an_error_on_a_healthy_ramdisk_is_left_as_it_was() -> None:
    backend, marks = Backend(lambda: GOOD), []  # type: ignore[var-annotated]
    err = unanswered()
    with pytest.raises(StagingError) as caught, \
            data_path(backend).tended(context(marks), SPEC, every=60):
        raise err
    assert caught.value is err and backend.checks == 2 and backend.repairs == []


@pytest.mark.parametrize("raised", [
    StagingError("DATA_IN /pfs/u/in does not exist", permanent=True),
    ValueError("not a staging error"),
])
def test_other_errors_are_not_probed(raised: Exception) -> None:
    backend, marks = Backend(lambda: GOOD), []  # type: ignore[var-annotated]
    with pytest.raises(type(raised)) as caught, \
            data_path(backend).tended(context(marks), SPEC, every=60):
        raise raised
    assert caught.value is raised and backend.checks == 1


def test_a_server_that_dies_while_data_moves_is_restarted_meanwhile() -> None:
    broke = threading.Event()
    backend, marks = Backend(lambda: BAD if broke.is_set() else GOOD), []  # type: ignore[var-annotated]

    def repaired() -> list[str]:
        broke.clear()
        return ["master on rsa1"]
    backend._repair = repaired
    with data_path(backend).tended(context(marks), SPEC, every=0.02):
        broke.set()  # a copy is running; the master dies
        deadline = time.monotonic() + 10
        while broke.is_set() and time.monotonic() < deadline:
            time.sleep(0.01)
    assert not broke.is_set() and len(backend.repairs) == 1
    assert marks and marks[0]["repaired"]["restarted"] == ["master on rsa1"]
    assert not [t for t in threading.enumerate() if t.name == "tend-job7-c1"]


def test_a_failing_probe_never_hides_the_original_error() -> None:
    calls = iter([GOOD])

    def health() -> Health:
        try:
            return next(calls)
        except StopIteration:
            raise RuntimeError("ssh: connect to host rsa1: Connection refused") from None
    backend, marks = Backend(health), []  # type: ignore[var-annotated]
    err = unanswered()
    with pytest.raises(StagingError) as caught, \
            data_path(backend).tended(context(marks), SPEC, every=60):
        raise err
    assert caught.value is err and backend.repairs == []


def test_a_destroyed_or_rebuilt_ramdisk_is_never_repaired_from_an_older_view() -> None:
    """A check that read the jobs before a destroy or a reset must not start servers on a
    filesystem being taken apart or already replaced."""
    backend = Backend(lambda: BAD)
    dp = data_path(backend)
    marks: list[Mapping[str, Any]] = []
    dp._forget_fs(SPEC.fs_id)  # destroyed since
    assert dp.tend("7", SPEC.to_json(), marks.append) == Tending()
    newer = MountSpec("tmpfs", SPEC.fs_id, ("rsa1",), SPEC.rsa_mountpoint, {"port": 2})
    dp.learned(newer)  # rebuilt by a reset
    assert dp.tend("7", SPEC.to_json(), marks.append) == Tending()
    assert backend.checks == 0 and backend.repairs == [] and marks == []
    assert dp.tend("7", newer.to_json(), marks.append).restarted == ("chunkserver on rsa1",)


def test_a_repair_waits_for_a_destroy_of_the_same_ramdisk() -> None:
    backend = Backend(lambda: BAD)
    dp = data_path(backend)
    order: list[str] = []
    with dp.exclusive(SPEC.fs_id):
        t = threading.Thread(target=lambda: order.append(
            "tended" if dp.tend("7", SPEC.to_json(), lambda _d: None).restarted
            else "skipped"))
        t.start()
        time.sleep(0.2)
        order.append("destroying")
        dp._forget_fs(SPEC.fs_id)
    t.join(10)
    assert order == ["destroying", "skipped"] and backend.repairs == []


def test_a_check_of_one_ramdisk_never_holds_up_a_teardown_of_another() -> None:
    """Issue 34: an urgent teardown or reset of one RAMDISK never waits for the check of
    another that a bulk copy's watch (or the tender) runs: a health probe goes over SSH to
    every node and takes seconds on busy nodes. ``job426-c1`` and SPEC's ``job7-c1``
    shared one of 256 lock stripes (crc32 % 256 = 130) before each RAMDISK had its own."""
    probing, release = threading.Event(), threading.Event()

    def slow_probe() -> Health:
        probing.set()
        release.wait(30)
        return GOOD

    dp = data_path(Backend(slow_probe))
    check = threading.Thread(target=dp.tend, args=("7", SPEC.to_json(), lambda _d: None))
    check.start()
    try:
        assert probing.wait(10)
        got = threading.Event()

        def teardown() -> None:
            with dp.exclusive("job426-c1"):
                got.set()

        threading.Thread(target=teardown, daemon=True).start()
        assert got.wait(5), "the teardown of job426-c1 waited for job7-c1's check"
    finally:
        release.set()
        check.join(10)
    assert dp.locked() == 0  # no lock is kept for a RAMDISK nobody holds


def test_the_tender_checks_every_live_ramdisk_and_survives_a_failing_one() -> None:
    seen: list[str] = []

    def tend(job: str, mount: Mapping[str, Any]) -> None:
        seen.append(job)
        if job == "8":
            raise RuntimeError("ssh: connect to host rsa2: Connection refused")

    tender = RamdiskTender(lambda: [("7", {}), ("8", {}), ("9", {})], tend, interval=60)
    assert tender.round() == 3 and sorted(seen) == ["7", "8", "9"]

    def busy() -> list[tuple[str, Mapping[str, Any]]]:
        raise TimeoutError("the loop did not answer")
    assert RamdiskTender(busy, tend).round() == 0


def test_the_tender_checks_at_once_when_it_starts_not_one_interval_later() -> None:
    """rsad restarted after a RAMDISK server died while it was down: the repair must not
    wait a whole interval (a chaos run lost a job's write to a 33 s outage this way)."""
    seen = threading.Event()
    tender = RamdiskTender(lambda: [("7", {})], lambda _j, _m: seen.set(), interval=3600)
    stop = threading.Event()
    tender.start(stop)
    try:
        assert seen.wait(10), "no check in the first 10 s of a 1 h interval"
    finally:
        stop.set()


def test_a_ramdisk_that_stays_broken_is_logged_once_per_period_not_every_check(
        caplog: pytest.LogCaptureFixture) -> None:
    """The tender checks every 15 s: a RAMDISK that cannot be repaired must not write a
    warning every 15 s for hours; the first, a changed one and one per period, with the
    count held back."""
    def fail() -> list[str]:
        raise FsError("rsa1: ssh: connect to host: refused")
    dp = data_path(Backend(lambda: BAD, fail))
    now = [1000.0]
    dp._repeats.clock = lambda: now[0]
    marks: list[Mapping[str, Any]] = []
    with caplog.at_level("WARNING", logger="rsa_scheduler.daemon.data"):
        for _ in range(20):
            assert dp.check_and_repair("7", SPEC, marks.append).broken
            now[0] += 15
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 1 and "could not be repaired" in warned[0]
    now[0] += 600
    with caplog.at_level("WARNING", logger="rsa_scheduler.daemon.data"):
        dp.check_and_repair("7", SPEC, marks.append)
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 2 and warned[1].endswith("(again; 19 more like it not logged)")


def test_repeats_say_a_changed_text_at_once_and_forget_a_cleared_key() -> None:
    now = [0.0]
    r = Repeats(every=60, clock=lambda: now[0], kept=2)
    assert r.say("a", "x") == "x"
    assert r.say("a", "x") is None
    assert r.say("a", "y") == "y"
    r.clear("a")
    assert r.say("a", "y") == "y"
    r.say("b", "1")
    r.say("c", "1")  # "a" falls out: kept=2
    assert r.say("a", "y") == "y"


# ---- a RAMDISK that stays broken while data moves: the step is stopped and retried ----
#
# A command on a dead FUSE mount (MooseFS) waits for the step's own timeout (24 h for a
# stage-out): when every check for health.ramdisk_stall finds the filesystem broken and
# cannot repair it, the watch kills the step's commands and the step fails, retryably,
# saying what is broken and for how long.

def block(dp: DataPath, ctx: ActionContext, seconds: float, *, stall: float = 0.3) -> None:
    """A staging step on a tended RAMDISK: ``seconds`` of a command that dies when its
    token is cancelled (as Host.run's does)."""
    with dp.tended(ctx, SPEC, every=0.02, stall=stall) as cancel:
        if cancel.wait(seconds):
            cancel.check()


def fail_repair() -> list[str]:
    raise FsError("rsa2: ssh: connect to host: No route to host")


def test_a_step_on_a_ramdisk_that_stays_broken_is_stopped_and_says_why() -> None:
    backend, marks = Backend(sequence(GOOD, BAD), fail_repair), []  # type: ignore[var-annotated]
    t0 = time.monotonic()
    with pytest.raises(StagingError) as caught:
        block(data_path(backend), context(marks), 60)
    took = time.monotonic() - t0
    assert 0.3 <= took < 10, took
    e = caught.value
    assert not e.permanent and e.unanswered  # retried, with backoff; the data kept
    assert isinstance(e.__cause__, Cancelled)
    assert re.fullmatch(
        r"job 7: the RAMDISK's filesystem has been broken for (0\.[3-9]|[1-9]\.\d) s: "
        + re.escape(f"{BAD.detail} (repair failed: rsa2: ssh: connect to host: No route "
                    "to host); stage-out stopped; will retry"), str(e)), str(e)
    assert not [t for t in threading.enumerate() if t.name == "tend-job7-c1"]


def test_checks_whose_probe_failed_do_not_restart_the_stall_window() -> None:
    """A probe that fails (rsa1 does not answer SSH) says nothing: neither healthy nor
    broken; the broken checks around it still add up."""
    def health() -> Health:
        n = backend.checks
        if n == 1:
            return GOOD
        if n % 2:
            raise RuntimeError("ssh: connect to host rsa1: Connection timed out")
        return BAD
    backend, marks = Backend(health, fail_repair), []  # type: ignore[var-annotated]
    with pytest.raises(StagingError, match="has been broken for"):
        block(data_path(backend), context(marks), 60)


@pytest.mark.parametrize("how", ["recovers", "repaired"])
def test_a_ramdisk_that_recovers_within_the_window_is_not_stopped(
        how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A healthy or a repaired check starts the window over: the step runs to its end.
    The watch's clock is the count of checks, 20 ms each (not the wall clock: on a loaded
    machine the watch's thread ran late, and two broken spells with no check between them
    were one longer than the window, or too few checks were made in 0.8 s)."""
    backend: Backend

    def at() -> float:
        return backend.checks * 0.02
    monkeypatch.setattr("rsa_scheduler.daemon.data.time",
                        SimpleNamespace(monotonic=at, time=time.time))

    def flapping() -> Health:  # broken twice for less than the window, longer in all
        return BAD if 0.05 <= at() < 0.25 or 0.35 <= at() < 0.55 else GOOD
    # repaired: every check finds it broken, and every repair works
    backend = (Backend(flapping, fail_repair) if how == "recovers"
               else Backend(sequence(GOOD, BAD)))
    deadline = time.monotonic() + 60
    with data_path(backend).tended(context([]), SPEC, every=0.02, stall=0.3) as cancel:
        while backend.checks <= 40:  # 0.8 s of the watch's clock
            assert time.monotonic() < deadline, backend.checks
            if cancel.wait(0.01):
                cancel.check()


def test_a_stall_window_of_0s_never_stops_a_step() -> None:
    backend, marks = Backend(sequence(GOOD, BAD), fail_repair), []  # type: ignore[var-annotated]
    block(data_path(backend), context(marks), 0.4, stall=0)
    assert backend.checks > 5


def test_a_cancel_from_elsewhere_still_surfaces_as_cancelled() -> None:
    """A teardown, a demotion or rsad stopping cancels the action's own token: that is
    "cancelled" as before, even on a broken RAMDISK, and kills the step's commands."""
    backend, marks = Backend(sequence(GOOD, BAD), fail_repair), []  # type: ignore[var-annotated]
    ctx = context(marks)
    threading.Timer(0.1, ctx.cancel.cancel, args=("superseded (7)",)).start()
    with pytest.raises(Cancelled, match=r"^superseded \(7\)$"):
        block(data_path(backend), ctx, 60, stall=5)
    # cancelled after the stall stopped the step: still the action's own cancel
    backend, marks = Backend(sequence(GOOD, BAD), fail_repair), []
    ctx = context(marks)
    dp = data_path(backend)
    with pytest.raises(Cancelled, match="rsad stopping"), \
            dp.tended(ctx, SPEC, every=0.02, stall=0.1) as cancel:
        assert cancel.wait(10)
        ctx.cancel.cancel("rsad stopping")
        cancel.check()


def test_the_watch_survives_a_check_that_crashes(caplog: pytest.LogCaptureFixture) -> None:
    backend, marks = Backend(lambda: GOOD), []  # type: ignore[var-annotated]
    dp = data_path(backend)
    calls = [0]
    real = dp.check_and_repair

    def crashing(job: str, spec: MountSpec, record: Any) -> Tending:
        calls[0] += 1
        if calls[0] in (2, 3):
            raise KeyError("a bug")
        return real(job, spec, record)
    dp.check_and_repair = crashing  # type: ignore[method-assign]
    with caplog.at_level("ERROR", logger="rsa_scheduler.daemon.data"):
        block(dp, context(marks), 0.3)
    assert calls[0] > 4  # it went on checking
    assert "checking RAMDISK job7-c1 while data moves failed" in caplog.text


# ---- the same with a real copy: its processes, run as the user, are killed -----------

class NodeHost(LocalHost):
    """This machine as the RSA node rsa1: rsad's fence is answered, not run (it would
    kill every job's commands on this host, the lab's too), and the user's commands run
    without the job's cgroup (as the engine tests do)."""

    def run(self, argv: Sequence[str], *, as_user: Identity | None = None,
            **kw: Any) -> Completed:
        from rsa_scheduler.contain import FENCED_MARK

        if FENCED_MARK in " ".join(argv):
            return Completed(tuple(argv), 0, f"{FENCED_MARK} 0\n", "", 0.0)
        return super().run(argv, as_user=None if as_user is None else
                           replace(as_user, scope=""), **kw)


def live(marker: str) -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["cmdline", "status"])
            if marker in " ".join(p.info["cmdline"] or ())
            and p.info["status"] != psutil.STATUS_ZOMBIE]


def gone_within(marker: str, timeout: float = 10.0) -> None:
    """Every process with ``marker`` in its command line dies within ``timeout``: a killed
    process on a loaded machine takes a moment to exit; one the kill missed (a 60 s
    sleep) is still there at the deadline."""
    end = time.monotonic() + timeout
    while live(marker):
        assert time.monotonic() < end, f"still running: {live(marker)}"
        time.sleep(0.02)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the copy as a user")
def test_a_stage_out_copy_stalled_on_a_broken_ramdisk_is_killed_and_retried_intact(
        ) -> None:
    """The copy (the site's copy_command, as nobody) stands still as on a dead mount;
    the RAMDISK stays broken: the copy's processes are killed within the window, the
    stage-out fails retryably, nothing of the RAMDISK is touched, nothing half-written
    is left under its final name in DATA_OUT, and the retry stages everything out."""
    user = Identity.of("nobody")
    with scratch_area(user, files=3) as area:
        flags = area / "flags"
        flags.mkdir()
        flags.chmod(0o777)
        (flags / "hang").touch()
        sleeper = f"sleep 60.{os.getpid()}"
        cfg = load_config_text(
            "pool:\n  nodes:\n    - names: rsa1\n      capacity: 2G\n"
            "health:\n  ramdisk_interval: 50ms\n  ramdisk_stall: 300ms\n"
            "staging:\n  copy_tool: custom\n  copy_command: >-\n"
            f"    if [ -e {flags}/hang ]; then touch {flags}/started; {sleeper}; fi;\n"
            "    rsync -aH --from0 --files-from={list} {recursive} {src}/ {dst}/\n")
        # healthy until the copy runs, then broken for good: a dead chunkserver
        backend = Backend(lambda: BAD if (flags / "started").exists() else GOOD,
                          fail_repair)
        dp = DataPath(cfg, {"rsa1": NodeHost("rsa1")},
                      {cfg.pool.members()[0].tier.value: backend})
        ram, out = area / "src", area / "outs" / "out"
        before = tree_state(ram)
        spec = replace(SPEC, rsa_mountpoint=str(ram))
        registry = Registry()
        dp.register(registry)

        def stage_out(serial: int) -> Outcome:
            action = make_action(f"7/1/stage-out/{serial}", user="nobody",
                                 data_out=PurePosixPath(out))
            return registry.run(ActionContext(
                action=action, cancel=CancelToken(), progress=lambda _d: None,
                facts={"mount": spec.to_json()}))

        t0 = time.monotonic()
        first = stage_out(3)
        took = time.monotonic() - t0
        assert (flags / "started").exists(), first.message  # the copy did run
        assert took < 20, took  # not the copy's 60 s, nor the step's 24 h
        assert first.result is Result.FAILED, first  # retried: never REFUSED
        assert first.message.startswith("job 7: the RAMDISK's filesystem has been "
                                        "broken for "), first.message
        assert first.message.endswith("(repair failed: rsa2: ssh: connect to host: No "
                                      "route to host); stage-out stopped; will retry")
        gone_within(sleeper)  # killed, with everything it started
        assert tree_state(ram) == before  # the RAMDISK's data is all there
        placed = [p for p in out.rglob("*") if not p.is_dir()
                  and not p.relative_to(out).parts[0].startswith(".rsa-staging-")]
        assert placed == []  # nothing cut short under its final name
        # the retry, once the filesystem is back: everything, no part directory left
        (flags / "hang").unlink()
        (flags / "started").unlink()
        again = stage_out(4)
        assert again.result is Result.OK, again
        assert tree_state(out) == before
        assert not list(out.glob(".rsa-staging-*"))


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the script as a user")
def test_a_cancel_from_elsewhere_kills_a_real_postprocess_and_says_cancelled() -> None:
    user = Identity.of("nobody")
    with scratch_area(user, files=3) as area:
        sleeper = f"60.{os.getpid()}1"
        backend = Backend(lambda: GOOD)
        dp = DataPath(CFG, {"rsa1": NodeHost("rsa1")},
                      {CFG.pool.members()[0].tier.value: backend})
        registry = Registry()
        dp.register(registry)
        action = make_action("7/1/stage-out/5", user="nobody",
                             postprocess=("sleep", sleeper))
        ctx = ActionContext(action=action, cancel=CancelToken(), progress=lambda _d: None,
                            facts={"mount": replace(SPEC, rsa_mountpoint=str(
                                area / "src")).to_json()})
        threading.Timer(0.5, ctx.cancel.cancel, args=("superseded (7)",)).start()
        t0 = time.monotonic()
        outcome = registry.run(ctx)
        assert time.monotonic() - t0 < 20
        assert outcome.result is Result.FAILED
        assert outcome.message.startswith("cancelled: ") and "superseded (7)" in (
            outcome.message), outcome.message
        gone_within(f"sleep {sleeper}")


# ---- a teardown skips RSA nodes that are down; they are cleaned before they come back --

class AnsweringHost(Host):
    """Answers rsad's fence and reap commands; records that it was asked."""

    def __init__(self, name: str, asked: list[str]) -> None:
        self.name = name
        self.asked = asked

    def run(self, argv: Any, *, timeout: float, check: bool = True, input: Any = None,
            as_user: Any = None, env: Any = None, cancel: Any = None, keep: int = 0) -> Any:
        from rsa_scheduler.contain import FENCED_MARK, REAPED_MARK
        from rsa_scheduler.runner import Completed

        self.asked.append(self.name)
        text = " ".join(argv)
        out = f"{REAPED_MARK} 0 cgroup 0\n" if REAPED_MARK in text else f"{FENCED_MARK} 0\n"
        return Completed(tuple(argv), 0, out, "", 0.0)


class Destroyer(Backend):
    def __init__(self) -> None:
        super().__init__(lambda: GOOD)
        self.destroyed: list[FsRequest] = []

    def destroy(self, req: FsRequest) -> None:
        self.destroyed.append(req)


CFG2 = load_config_text("pool:\n  nodes:\n    - names: rsa[1-2]\n      capacity: 2G\n")


def test_a_teardown_skips_a_node_that_is_down_and_says_what_it_left_there() -> None:
    asked: list[str] = []
    backend = Destroyer()
    dp = DataPath(CFG2, {n: AnsweringHost(n, asked) for n in ("rsa1", "rsa2")},
                  {CFG2.pool.members()[0].tier.value: backend})
    action = make_action("7/2/destroy-fs/9", nodes=Hostlist(("rsa1", "rsa2")),
                         user="nobody")
    ctx = ActionContext(action=action, cancel=CancelToken(), progress=lambda _d: None,
                        down=frozenset({"rsa2"}))
    out = dp.destroy_fs(ctx)
    assert [r.nodes for r in backend.destroyed] == [("rsa1",)]
    assert "rsa2" not in asked  # never waited for
    assert out["left_on"] == [{"node": "rsa2", "fs_id": "job7-c2", "job_id": "7",
                               "tier": "ram"}]
    # back up: its part alone is destroyed, the job's processes there killed first
    asked.clear()
    dp.scrub("rsa2", [{"fs_id": "job7-c2", "job_id": "7", "tier": "ram"}])
    assert backend.destroyed[-1].nodes == ("rsa2",) and backend.destroyed[-1].fs_id == "job7-c2"
    assert set(asked) == {"rsa2"}


@pytest.mark.parametrize("key", ["postprocess", "preprocess"])
def test_a_script_killed_by_its_cancel_says_cancelled_not_its_exit_status(key: str) -> None:
    """The cancel kills the script; the script's end may come back before anything else
    looks at the token: the action still ends as cancelled, with the cancel's reason
    (not "POSTPROCESS exited -9", and never a PREPROCESS's permanent failure)."""
    from rsa_scheduler.daemon import data
    from rsa_scheduler.staging.report import ScriptResult

    cancel = CancelToken()

    class KilledByCancel:
        def run_script(self, argv: list[str], phase: str, **_kw: str) -> ScriptResult:
            cancel.cancel("superseded (7)")  # the kill happens while the script runs
            return ScriptResult("rsa1", phase, tuple(argv), -9, "", "", 0.1)

    ctx = SimpleNamespace(facts={}, milestone=lambda _f: None, cancel=cancel,
                          action=SimpleNamespace(id="7/1/stage-out/5"))
    with pytest.raises(Cancelled, match=r"superseded \(7\)"):
        data._script(ctx, KilledByCancel(), SPEC, ["sleep", "60"],  # type: ignore[arg-type]
                     key, "stage-out", data_in=None, data_out=PurePosixPath("/pfs/out"))
