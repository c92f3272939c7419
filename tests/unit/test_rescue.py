"""A quarantine that ends (issue 33): after ``quarantine.rescue_after`` a quarantined
RAMDISK's content is staged out as the job's user to ``quarantine.rescue_dir/<user>/
<job>.<cycle>-<submitted>``, verified, and only then is the RAMDISK released; a failed rescue keeps
the quarantine (core: rows_run.py, effects.py; the rescue directory: staging/scripts).

On main (6dee349) a quarantine held its RSA nodes until an operator acted.
"""

from __future__ import annotations

import os
import stat
import subprocess
from dataclasses import replace
from pathlib import Path, PurePosixPath

import pytest

from rsa_scheduler.cli.where import verdict
from rsa_scheduler.config.loader import load_config_text
from rsa_scheduler.core.actions import ActionKind, Result
from rsa_scheduler.core.dependency import held_message, parent_verdict
from rsa_scheduler.core.payloads import MessageArgs, StageOutArgs, VerifyArgs
from rsa_scheduler.core.scheduler import Decision, Scheduler
from rsa_scheduler.core.states import Trigger
from rsa_scheduler.daemon.holds import rerun_rescued
from rsa_scheduler.staging.scripts import rescue_dir_argv
from tests.unit.corekit import Driver, make_pool, make_scheduler, make_spec, obs
from tests.unit.test_machine import to_locked_in

pytestmark = pytest.mark.unit

HOUR = 3600.0


def quarantined(d: Driver) -> None:
    """Job 10 (alice, DATA_OUT /pfs/out) ran; its stage-out failed until it gave up."""
    to_locked_in(d, data_in=None)
    d.observe(obs("10", "RUNNING"))
    d.answer("10")
    d.observe(obs("10", "COMPLETED"))
    fail_until_quarantined(d)


def fail_until_quarantined(d: Driver) -> None:
    """Job 10's stage-out fails, and each retry when it falls due, until it gives up."""
    while d.state("10") != "quarantined":
        d.answer("10", Result.FAILED, "rsync: Input/output error")
        if d.state("10") == "stage-out-failed":
            due = d.sched.next_timer()
            assert due is not None
            d.tick(due)


def kinds(dec: Decision) -> list[ActionKind]:
    return [a.kind for a in dec.actions]


def test_a_quarantine_past_rescue_after_is_rescued_verified_then_released() -> None:
    d = Driver(make_scheduler(retries=1, backoff=5.0, rescue_after=HOUR,
                              rescue_dir="/pfs/rescue"))
    quarantined(d)
    since = d.now
    assert d.sched.next_timer() == since + HOUR
    assert not d.tick(since + HOUR - 1).actions  # not yet
    dec = d.tick(since + HOUR)
    assert d.state("10") == "staging-out"
    assert kinds(dec) == [ActionKind.ALERT, ActionKind.TELL_USER, ActionKind.STAGE_OUT]
    out = dec.actions[-1].args_as(StageOutArgs)
    assert (out.data_out, out.rescue, out.user) == (
        PurePosixPath("/pfs/rescue/alice/10.1"), True, "alice")
    said = dec.actions[1].args_as(MessageArgs).message
    assert said.startswith("rescue: quarantined longer than quarantine.rescue_after: ")
    assert said == ("rescue: quarantined longer than quarantine.rescue_after: copied as the "
                    "job's user to /pfs/rescue/alice/10.1, verified before the RAMDISK is "
                    "released (a failed rescue keeps the quarantine)")
    dec = d.answer("10")  # copied: verified next, against the rescue copy
    assert dec.actions[-1].args_as(VerifyArgs).data_out == PurePosixPath(
        "/pfs/rescue/alice/10.1")
    assert d.sched.pool.holding("10")  # not released before the verify
    d.answer_all("10")
    assert d.state("10") == "released" and not d.sched.pool.holding("10")
    assert d.sched.records["10"].rescue_to == "/pfs/rescue/alice/10.1"  # where it went


def _rescued_to(submitted: str) -> str:
    """Where a fresh rsad (no memory of any earlier job 10) rescues job 10 of alice,
    submitted at ``submitted`` (squeue's SubmitTime), after its stage-out gave up."""
    d = Driver(make_scheduler(retries=1, backoff=5.0, rescue_after=HOUR,
                              rescue_dir="/pfs/rescue"))
    seen = replace(obs("10", "PENDING", "Resources", make_spec(data_in=None)),
                   submitted=submitted)
    d.observe(seen)
    while d.state("10") != "locked-in":
        d.answer("10")
    d.observe(replace(seen, state="RUNNING", reason="None"))
    d.answer("10")
    d.observe(replace(seen, state="COMPLETED", reason="None"))
    fail_until_quarantined(d)
    dec = d.tick(d.now + HOUR)
    return str(dec.actions[-1].args_as(StageOutArgs).data_out)


def test_a_later_job_given_the_same_id_never_rescues_into_the_earlier_ones_copy() -> None:
    """Slurm gave job 10's id to a new job of the same user (it lost its state, or its
    ids wrapped) after rsad forgot the first (daemon.retention): the new record starts at
    cycle 1 again. Both quarantined and rescued: on main both went to
    /pfs/rescue/alice/10.1, the second rescue's files renamed over the first's (a
    rescue keeps nothing aside) and its verify passed."""
    first = _rescued_to("2026-11-01T10:00:00")
    second = _rescued_to("2026-11-20T09:30:05")
    assert first == "/pfs/rescue/alice/10.1-20261101T100000"
    assert second == "/pfs/rescue/alice/10.1-20261120T093005"
    assert _rescued_to("") == "/pfs/rescue/alice/10.1"  # Slurm never said: as before


def test_a_failed_rescue_keeps_the_quarantine_and_tries_again_later() -> None:
    d = Driver(make_scheduler(retries=1, backoff=5.0, rescue_after=HOUR,
                              rescue_dir="/pfs/rescue"))
    quarantined(d)
    d.tick(d.now + HOUR)
    assert d.state("10") == "staging-out"
    destroyed: list[ActionKind] = []
    while d.state("10") != "quarantined":
        dec = d.answer("10", Result.FAILED, "rescue: making /pfs/rescue/alice: refused")
        destroyed += [k for k in kinds(dec) if k is ActionKind.DESTROY_FS]
        if d.state("10") == "stage-out-failed":
            due = d.sched.next_timer()
            assert due is not None
            destroyed += [k for k in kinds(d.tick(due)) if k is ActionKind.DESTROY_FS]
    assert not destroyed and d.sched.pool.holding("10")  # the data stays where it is
    assert d.sched.records["10"].rescue_to == ""
    assert d.sched.next_timer() == d.now + HOUR  # tried again after as long
    # an operator's retry stages out to DATA_OUT again, not to the rescue area
    dec = d.take(d.sched.command("10", Trigger.RETRY, d.now, by="root", operator=True))
    out = dec.actions[-1].args_as(StageOutArgs)
    assert (out.data_out, out.rescue) == (PurePosixPath("/pfs/out"), False)


def test_an_operators_retry_during_a_failing_rescue_goes_to_data_out() -> None:
    """``rsa retry`` means one thing: stage out to DATA_OUT now. While a failed rescue
    waited for its next try it went on with the rescue instead (to the rescue area),
    unlike the same command on the quarantine the rescue falls back to."""
    d = Driver(make_scheduler(retries=2, backoff=5.0, rescue_after=HOUR,
                              rescue_dir="/pfs/rescue"))
    quarantined(d)
    d.tick(d.now + HOUR)
    d.answer("10", Result.FAILED, "rescue: making /pfs/rescue/alice: refused")
    assert d.state("10") == "stage-out-failed"
    dec = d.take(d.sched.command("10", Trigger.RETRY, d.now, by="root", operator=True))
    out = dec.actions[-1].args_as(StageOutArgs)
    assert (out.data_out, out.rescue) == (PurePosixPath("/pfs/out"), False)
    assert d.sched.records["10"].rescue_to == ""
    d.answer_all("10")  # verified at DATA_OUT: never called rescued
    assert d.state("10") == "released" and d.sched.records["10"].rescue_to == ""


def test_without_rescue_after_a_quarantine_waits_for_an_operator() -> None:
    d = Driver(make_scheduler(retries=1, backoff=5.0))
    quarantined(d)
    assert d.sched.next_timer() is None


def test_rescue_after_needs_a_rescue_dir() -> None:
    with pytest.raises(Exception, match=r"quarantine\.rescue_dir: must be set"):
        load_config_text("quarantine:\n  rescue_after: 1h\n", require_pool=False)
    cfg = load_config_text("quarantine:\n  rescue_after: 1h\n  rescue_dir: /pfs/rescue\n",
                           require_pool=False)
    policy = cfg.staging_policy()
    assert (policy.rescue_after, policy.rescue_dir) == (HOUR, "/pfs/rescue")


def _rescue_dir(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(rescue_dir_argv(str(path)), capture_output=True, text=True,
                          timeout=30)


def test_the_users_rescue_directory_is_made_private(tmp_path: Path) -> None:
    area = tmp_path / "rescue"
    area.mkdir()
    area.chmod(0o1777)
    done = _rescue_dir(area / "me")
    assert done.returncode == 0, done.stderr
    st = (area / "me").lstat()
    assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.getuid()
    assert _rescue_dir(area / "me").returncode == 0  # again: it is the user's own


def test_a_symlink_or_an_unsafe_area_is_refused(tmp_path: Path) -> None:
    area = tmp_path / "rescue"
    area.mkdir()
    area.chmod(0o1777)
    (area / "me").symlink_to(tmp_path)
    done = _rescue_dir(area / "me")
    assert done.returncode == 65 and "is a symlink" in done.stderr
    open_area = tmp_path / "open"
    open_area.mkdir()
    open_area.chmod(0o777)  # anyone could move the user's directory away
    done = _rescue_dir(open_area / "me")
    assert done.returncode == 65 and "not sticky: chmod 1777 it" in done.stderr
    assert not (open_area / "me").exists()


def test_a_rescued_jobs_dependents_stay_held() -> None:
    """Its output is in the rescue area, not at DATA_OUT: a dependent must not start on
    it as on verified output."""
    d = Driver(make_scheduler(retries=1, backoff=5.0, rescue_after=HOUR,
                              rescue_dir="/pfs/rescue"))
    quarantined(d)
    d.tick(d.now + HOUR)
    d.answer_all("10")
    assert d.state("10") == "released"
    wait = parent_verdict(d.sched.records["10"])
    assert wait is not None and wait.why == "rescued"
    assert "rescued to the site's rescue area, not to its DATA_OUT" in held_message([wait])


def _run_again(d: Driver) -> None:
    """Job 10 requeued, and its next run started (its user released the rerun hold, or
    none held it: a quarantine does not)."""
    d.observe(obs("10", "PENDING"))
    d.observe(obs("10", "RUNNING"))


def test_a_run_started_during_the_rescue_is_not_called_rescued() -> None:
    """Issue 33: the rerun's user released it while the earlier run's output was being
    rescued. On main the new run kept ``rescue_to``: once the rescue was verified, rsa wait
    and the run's dependents read "rescued" for the new run, whose output went to DATA_OUT
    (and its next requeue was held for a rescue that was not its earlier run's). The
    rescue itself still goes to the rescue area, also replayed after a restart."""
    d = Driver(make_scheduler(retries=1, backoff=5.0, rescue_after=HOUR,
                              rescue_dir="/pfs/rescue"))
    quarantined(d)
    d.tick(d.now + HOUR)
    assert d.state("10") == "staging-out"
    _run_again(d)
    rec = d.sched.records["10"]
    replayed = Scheduler.replay(make_pool(), d.sched.policy, d.log)  # rsad restarted
    assert replayed.snapshot() == d.sched.snapshot()
    dec = d.answer("10")  # the rescue's copy is verified where it went, not in DATA_OUT
    assert dec.actions[-1].args_as(VerifyArgs).data_out == PurePosixPath(
        "/pfs/rescue/alice/10.1")
    d.answer_all("10")
    assert d.state("10") == "released" and rec.rescue_to == "/pfs/rescue/alice/10.1"
    d.observe(obs("10", "COMPLETED"))  # the new run ends: its output is in DATA_OUT
    assert parent_verdict(rec) is None
    said = verdict({**rec.to_json(), "events": []})
    assert said is not None and said.word == "no RSA", said
    assert "this run started while the previous run's output was kept" in said.why
    d.observe(obs("10", "PENDING"))  # requeued again: not held for the old rescue
    assert not rerun_rescued(rec)
    d.observe(obs("10", "RUNNING"))
    assert rec.rescue_to == "" and not rec.rerun_started


def test_a_rescue_after_a_later_run_started_is_the_earlier_runs() -> None:
    """A quarantine does not hold the rerun: it starts from the PFS, and the rescue comes
    later (after it ended). On main that run read "rescued" (rsa wait: failed) and its
    dependents were held for good."""
    d = Driver(make_scheduler(retries=1, backoff=5.0, rescue_after=HOUR,
                              rescue_dir="/pfs/rescue"))
    quarantined(d)
    _run_again(d)
    d.observe(obs("10", "COMPLETED"))
    d.tick(d.now + HOUR)
    d.answer_all("10")
    rec = d.sched.records["10"]
    assert d.state("10") == "released" and rec.rescue_to == "/pfs/rescue/alice/10.1"
    assert parent_verdict(rec) is None
    said = verdict({**rec.to_json(), "events": []})
    assert said is not None and said.word == "no RSA", said
