"""The lock-in's Slurm side (issue 39): what it records, what its restore changes.

CliSlurm against a scripted squeue/scontrol (the runner seam), and rsad's lock-in and
unlock executors (daemon/wiring.py) with a recording milestone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from rsa_scheduler.config import load_defaults
from rsa_scheduler.core.actions import ActionKind, Result
from rsa_scheduler.daemon.executors import ActionContext, Registry
from rsa_scheduler.daemon.wiring import make_slurm, slurm_executors
from rsa_scheduler.hosts import CancelToken
from rsa_scheduler.runner import CommandError, Completed, Identity
from rsa_scheduler.slurm.cli import CliSlurm
from rsa_scheduler.slurm.parse import LockView, parse_lock_view
from rsa_scheduler.slurm.port import SlurmError, UnlockGone, UnlockLater
from tests.unit.corekit import make_action

pytestmark = pytest.mark.unit

PRIO = 4_000_000_000


class FakeSlurm:
    """squeue -j shows ``view``; scontrol update/hold/release change it as Slurm would."""

    def __init__(self, state: str = "PENDING", qos: str = "normal", prio: int = 1234) -> None:
        self.view = LockView(state, qos, prio)
        self.argv: list[list[str]] = []

    def __call__(self, argv: Sequence[str], *, timeout: float, check: bool = True,
                 input: str | None = None, as_user: Identity | None = None,
                 env: Any = None, cwd: str | None = None) -> Completed:
        args = list(argv)
        self.argv.append(args)
        out = ""
        v = self.view
        if args[0].endswith("squeue"):
            job = args[args.index("-j") + 1]
            out = "" if v.state == "GONE" else f"{job}|{v.state}|{v.qos}|{v.priority}|\n"
        elif args[1] == "update":
            for a in args[3:]:
                key, _, value = a.partition("=")
                if key == "qos":
                    self.view = LockView(v.state, value, v.priority)
                elif key == "priority":
                    self.view = LockView(v.state, v.qos, int(value))
        elif args[1] == "hold":
            self.view = LockView(v.state, v.qos, 0)
        elif args[1] == "release":
            self.view = LockView(v.state, v.qos, 1234)
        return Completed(tuple(args), 0, out, "", 0.0)

    def writes(self) -> list[str]:
        return [" ".join(a[1:]) for a in self.argv if a[0].endswith("scontrol")]


def cli(fake: FakeSlurm, method: str = "qos") -> CliSlurm:
    return CliSlurm(bin_dir=Path("/b"), runner=fake, lockin_method=method,
                    lockin_priority=PRIO)


def test_the_lock_view_is_the_line_of_the_job_or_its_leader() -> None:
    text = "12_3|PENDING|normal|77|\n113+0|PENDING|high|5|\n113+1|PENDING|high|5|\n"
    assert parse_lock_view(text, "12_3") == LockView("PENDING", "normal", 77)
    assert parse_lock_view(text, "113") == LockView("PENDING", "high", 5)
    assert parse_lock_view(text, "9").state == "GONE"


def test_the_lock_in_qos_is_never_an_original() -> None:
    fake = FakeSlurm(qos="rsa-lockin")
    with pytest.raises(SlurmError, match="already has the lock-in QOS"):
        cli(fake).lock_original("7")
    fake = FakeSlurm(prio=PRIO)
    with pytest.raises(SlurmError, match="already has the lock-in priority"):
        cli(fake, "priority").lock_original("7")


def test_qos_restore_only_of_its_own_lock_in_and_later_for_a_running_job() -> None:
    fake = FakeSlurm()
    slurm = cli(fake)
    assert slurm.lock_original("7") == "normal"
    slurm.lock_in("7")
    # Slurm 22.05 refuses a running job's QOS change (ESLURM_JOB_NOT_PENDING): later
    fake.view = LockView("RUNNING", "rsa-lockin", 1)
    with pytest.raises(UnlockLater, match="pending again"):
        slurm.unlock("7", "normal")
    fake.view = LockView("PENDING", "rsa-lockin", 1)  # requeued
    assert slurm.unlock("7", "normal") == "QOS normal restored"
    assert fake.view.qos == "normal"
    # an operator gave it another QOS since: left alone
    fake.view = LockView("PENDING", "urgent", 1)
    assert "left as it is" in slurm.unlock("7", "normal")
    assert fake.view.qos == "urgent"
    for ended in (LockView("GONE", "", 0), LockView("CANCELLED", "rsa-lockin", 0)):
        fake.view = ended
        with pytest.raises(UnlockGone):
            slurm.unlock("7", "normal")


class HeldSlurm(FakeSlurm):
    """Slurm refuses a priority on a held job (ESLURM_JOB_HELD): an operator holds the job
    between rsad's look and its update."""

    def __call__(self, argv: Sequence[str], **kw: Any) -> Completed:
        if list(argv)[1:2] == ["update"]:
            self.view = LockView("PENDING", "normal", 0)
            raise CommandError(list(argv), 1, "slurm_update error: Job is held")
        return super().__call__(argv, **kw)


def test_priority_restore_never_releases_a_hold() -> None:
    """On d0d1991 the unlock was hold + release, whatever hold the job was under."""
    fake = FakeSlurm()
    slurm = cli(fake, "priority")
    slurm.lock_in("7")
    # an operator holds the locked-in job: Slurm shows priority 0
    fake.view = LockView("PENDING", "normal", 0)
    assert "held" in slurm.unlock("7", "1234")
    assert fake.writes() == [f"update jobid=7 priority={PRIO}"]
    # not held: its own priority back, by an update Slurm refuses on a held job
    fake.view = LockView("PENDING", "normal", PRIO)
    assert slurm.unlock("7", "1234") == "priority 1234 restored"
    assert fake.writes()[-1] == "update jobid=7 priority=1234"
    # running too
    fake.view = LockView("RUNNING", "normal", PRIO)
    assert slurm.unlock("7", "1234") == "priority 1234 restored"
    assert not [w for w in fake.writes() if w.startswith(("hold", "release"))]
    # held in between rsad's look and its update: the hold stays
    held = HeldSlurm(prio=PRIO)
    assert "left held" in cli(held, "priority").unlock("7", "1234")
    assert held.view.priority == 0


# ---- the executors --------------------------------------------------------------------

def run(reg: Registry, kind: ActionKind, facts: Mapping[str, Any], cycle: int = 1,
        serial: int = 4) -> tuple[Any, list[dict[str, Any]]]:
    milestones: list[dict[str, Any]] = []
    ctx = ActionContext(action=make_action(f"7/{cycle}/{kind.value}/{serial}"),
                        cancel=CancelToken(), progress=lambda _d: None, facts=facts,
                        milestone=lambda d: milestones.append(dict(d)))
    return reg.run(ctx), milestones


def test_the_original_is_recorded_durably_before_the_first_lock_in() -> None:
    fake = FakeSlurm()
    reg = Registry()
    slurm_executors(reg, cli(fake))
    qos_at_milestone: list[str] = []
    ctx = ActionContext(action=make_action("7/1/lock-in/4"), cancel=CancelToken(),
                        progress=lambda _d: None, facts={},
                        milestone=lambda _d: qos_at_milestone.append(fake.view.qos))
    assert reg.run(ctx).result is Result.OK
    assert qos_at_milestone == ["normal"] and fake.view.qos == "rsa-lockin"
    out, milestones = run(reg, ActionKind.LOCK_IN, {}, cycle=9)
    assert out.result is Result.FAILED  # Slurm shows rsa-lockin now: no original there
    fake.view = LockView("PENDING", "normal", 1)
    out, milestones = run(reg, ActionKind.LOCK_IN, {})
    assert out.result is Result.OK
    assert milestones == [{"lock_orig": {"cycle": "1", "value": "normal"}}]
    # re-issued after an rsad restart: Slurm now shows the lock-in's QOS; the record wins
    out, milestones = run(reg, ActionKind.LOCK_IN, {"lock_orig": milestones[0]["lock_orig"]})
    assert out.result is Result.OK and milestones == []
    assert out.detail["lock_orig"]["value"] == "normal"
    # a later cycle, still locked in from an earlier one whose restore never happened
    out, milestones = run(reg, ActionKind.LOCK_IN,
                          {"lock_orig": {"cycle": "1", "value": "normal"}}, cycle=2)
    assert milestones == [{"lock_orig": {"cycle": "2", "value": "normal"}}]
    # no record and already locked in: refused to guess (never rsa-lockin as the original)
    fake.view = LockView("PENDING", "rsa-lockin", 1)
    out, milestones = run(reg, ActionKind.LOCK_IN, {}, cycle=3)
    assert out.result is Result.FAILED and milestones == []
    assert "no record of its own QOS" in out.message


def test_the_unlock_executor_restores_the_recorded_original() -> None:
    fake = FakeSlurm(qos="rsa-lockin")
    reg = Registry()
    slurm_executors(reg, cli(fake))
    out, _ = run(reg, ActionKind.UNLOCK, {"lock_orig": {"cycle": "1", "value": "normal"}})
    assert out.result is Result.OK and out.message == "QOS normal restored"
    fake.view = LockView("GONE", "", 0)
    out, _ = run(reg, ActionKind.UNLOCK, {"lock_orig": {"cycle": "1", "value": "normal"}})
    assert out.result is Result.REFUSED


def test_the_default_lock_in_is_restored_after_an_rsad_kill_between_lock_in_and_start(
) -> None:
    """rsad as shipped (its defaults: method priority) SIGKILLed at each point between the
    lock-in and the job's start: the restarted rsad re-issues the lock-in with the record
    (never the lock-in's own priority as the job's), and the restore at the start gives
    the job its own priority back (tests/integration/test_lockin_ends.py runs it on the
    lab's Slurm)."""
    fake = FakeSlurm(prio=1234)
    cfg = load_defaults()
    shipped = make_slurm(cfg)
    assert isinstance(shipped, CliSlurm)  # slurm.backend cli, the default
    slurm = dataclasses.replace(shipped, runner=fake, bin_dir=Path("/b"))
    lockin = cfg.slurm.lockin.priority
    reg = Registry()
    slurm_executors(reg, slurm)
    out, milestones = run(reg, ActionKind.LOCK_IN, {})
    assert out.result is Result.OK
    assert milestones == [{"lock_orig": {"cycle": "1", "value": "1234"}}]
    assert fake.view == LockView("PENDING", "normal", lockin)
    record = milestones[0]
    # killed after the lock-in: the restart re-issues it; Slurm shows the lock-in's value
    out, milestones = run(reg, ActionKind.LOCK_IN, record)
    assert (out.result, milestones, out.detail["lock_orig"]["value"]) == (
        Result.OK, [], "1234")
    # killed after the record, before Slurm's update: the same
    fake.view = LockView("PENDING", "normal", 1234)
    out, milestones = run(reg, ActionKind.LOCK_IN, record)
    assert (out.result, milestones, fake.view.priority) == (Result.OK, [], lockin)
    # no record and Slurm shows the lock-in's value: refused, never recorded as its own
    out, milestones = run(reg, ActionKind.LOCK_IN, {}, cycle=2)
    assert out.result is Result.FAILED and milestones == []
    assert "no record of its own" in out.message
    # the job starts: its own priority back, by an update (never a hold or release)
    fake.view = LockView("RUNNING", "normal", lockin)
    out, _ = run(reg, ActionKind.UNLOCK, record)
    assert out.result is Result.OK and out.message == "priority 1234 restored"
    assert fake.view == LockView("RUNNING", "normal", 1234)
    assert not [w for w in fake.writes() if w.startswith(("hold", "release"))]
