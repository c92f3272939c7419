"""A RAMDISK that data moves on is looked after (issue 13): checked and repaired before
the first staging command, checked every few seconds while commands run, and when a
command finds the filesystem not answering (EIO, ENOTCONN) the error names what is broken
or what was restarted, instead of a bare "will retry". Real repairs run in the lab
(tests/e2e/test_ramdisk_repair.py); here the backend is a stand-in and the logic is
DataPath's."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from pathlib import PurePosixPath
from typing import Any

import pytest

from rsa_scheduler.config import load_config_text
from rsa_scheduler.core.hostlist import Hostlist
from rsa_scheduler.daemon.data import DataPath, Repeats, Tending
from rsa_scheduler.daemon.executors import ActionContext
from rsa_scheduler.daemon.health import RamdiskTender
from rsa_scheduler.fs.base import FilesystemBackend, FsError, FsRequest, Health, MountSpec
from rsa_scheduler.hosts import CancelToken, Host
from rsa_scheduler.runner import CommandError
from rsa_scheduler.staging.report import StagingError, classify
from tests.unit.corekit import make_action

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


# ---- a teardown skips RSA nodes that are down; they are cleaned before they come back --

class AnsweringHost(Host):
    """Answers rsad's fence and reap commands; records that it was asked."""

    def __init__(self, name: str, asked: list[str]) -> None:
        self.name = name
        self.asked = asked

    def run(self, argv: Any, *, timeout: float, check: bool = True, input: Any = None,
            as_user: Any = None, env: Any = None, cancel: Any = None) -> Any:
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
