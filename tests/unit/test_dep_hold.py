"""The dependency hold in rsad's loop (issue 32, daemon/dephold.py), with a scripted
Slurm port: a job that depends on an RSA job with output is held from the first cycle
that sees it pending, before its parent ends, until the parent's output is verified; a
quarantined stage-out keeps it held with its reason until ``rsa retry`` verifies it; a
dependent of a job without RSA output is never held; the hold survives an rsad restart
(Slurm keeps the marker); rsad lifts only its own hold. The lab runs it against real
Slurm (tests/e2e/test_dependents.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rsa_scheduler.cli.where import verdict
from rsa_scheduler.core.dependency import LATER_BASE
from rsa_scheduler.core.directives import DirectiveSpec
from rsa_scheduler.core.policy import EarlyStart
from rsa_scheduler.daemon import api
from rsa_scheduler.daemon.dephold import DEP_HOLD
from rsa_scheduler.daemon.service import Daemon
from rsa_scheduler.slurm.parse import DependentRow, QueueRow
from tests.unit.test_daemon import (
    ALICE,
    BOB,
    ScriptedSlurm,
    flush_urgent,
    released,
    serving,
    settle,
)
from tests.unit.test_rerun_hold import (
    Gated,
    comments,
    daemon,
    requeued_while_its_output_is_on_the_ramdisk,
)
from tests.unit.test_rerun_hold import holds as all_holds

OUT = DirectiveSpec(data_out="/pfs/out")
IN = DirectiveSpec(data_in="/pfs/in")


class DepSlurm(ScriptedSlurm):
    """Plus the pending jobs' dependencies (``squeue -O Dependency``)."""

    def __init__(self) -> None:
        super().__init__()
        self.deps: dict[str, str] = {}  # job -> Slurm's dependency text
        self.begins: dict[str, int] = {}  # job -> its begin time in Slurm
        self.told: dict[str, str] = {}  # job -> the last comment written to it

    def set_comment(self, job_id: str, text: str) -> None:
        super().set_comment(job_id, text)
        self.told[job_id] = text

    def pend(self, job: str, dependency: str) -> None:
        """A job without RSA work of its own, pending on its dependency."""
        self.deps[job] = dependency
        self.rows = [r for r in self.rows if r.job_id != job] + [QueueRow(
            job, "PENDING", "Dependency", 10, 1, "alice", None)]

    def dependents(self, mark: str, ahead_of: int | None = None) -> list[DependentRow]:
        out = []
        for r in self.rows:
            comment = r.admin_comment or ""
            dep = self.deps.get(r.job_id, "")
            begin = self.begins.get(r.job_id)
            if r.state == "PENDING" and (dep or mark in comment or (
                    ahead_of is not None and begin is not None and begin > ahead_of)):
                out.append(DependentRow(r.job_id, r.user, dep, comment,
                                        self.begins.get(r.job_id)))
        return out


def holds(slurm: ScriptedSlurm) -> list[str]:
    """The holds asked for, each marker without the begin time it set (``;held=``)."""
    return [re.sub(r";held=[0-9]+", "", h) for h in all_holds(slurm)]


def cycle(d: Daemon) -> None:
    d.poll()
    d.drain(timeout=0.1)
    flush_urgent(d)


def verified(d: Daemon, gated: Gated) -> None:
    """Let the gated verify finish, then two cycles: the output verified, the release."""
    gated.gate.set()
    settle(d)
    for _ in range(2):
        cycle(d)
        settle(d)


def parent_running_with_its_output_on_the_ramdisk(d: Daemon, slurm: DepSlurm) -> None:
    slurm.set("7", "PENDING", "Resources", spec=OUT)
    d.poll()
    settle(d)
    slurm.set("7", "RUNNING", spec=OUT)
    d.poll()
    settle(d)
    assert d.sched.records["7"].rsa_state.value == "mounted-output"


def test_a_dependent_is_held_before_its_parent_ends_and_released_once_verified(
        tmp_path: Path) -> None:
    """On main nothing held it: Slurm started it as soon as the parent ended."""
    slurm, gated = DepSlurm(), Gated()
    d = daemon(tmp_path, slurm, gated, EarlyStart.FALLBACK)
    parent_running_with_its_output_on_the_ramdisk(d, slurm)
    slurm.pend("8", "afterok:7(unfulfilled)")
    slurm.pend("9", "after:7+1(unfulfilled)")  # waits for the start only: never held
    cycle(d)
    assert holds(slurm) == [f"8:{DEP_HOLD}: hold=after:7"]
    assert "held until job 7's output is staged out and verified" in comments(slurm)[-1]
    slurm.deps["8"] = ""  # Slurm: the parent ended, the dependency fulfilled and gone
    slurm.set("7", "COMPLETED", spec=OUT)
    d.poll()  # the output stages out; verify waits for the gate
    for _ in range(3):
        cycle(d)
    assert d.sched.records["7"].rsa_state.value == "verifying"
    assert released(slurm) == [] and len(holds(slurm)) == 1
    gated.gate.set()
    settle(d)
    cycle(d)
    assert released(slurm) == ["8:"]
    assert comments(slurm)[-1].endswith("released to start")
    cycle(d)
    assert len(holds(slurm)) == 1 and released(slurm) == ["8:"]  # nothing more
    d.shutdown()


def quarantined_7_holds_its_dependents(d: Daemon, slurm: DepSlurm) -> None:
    """7 ends; its stage-out fails (the gate's ``fail_out``) until it is quarantined, and
    no dependent of it is released meanwhile."""
    slurm.set("7", "COMPLETED", spec=OUT)
    for _ in range(4):
        cycle(d)
        settle(d)
    assert d.sched.records["7"].rsa_state.value == "quarantined"
    assert released(slurm) == []


def test_a_quarantined_stage_out_keeps_the_dependent_held_until_rsa_retry(
        tmp_path: Path) -> None:
    slurm, gated = DepSlurm(), Gated()
    gated.fail_out = True
    d = daemon(tmp_path, slurm, gated, EarlyStart.FALLBACK)
    parent_running_with_its_output_on_the_ramdisk(d, slurm)
    slurm.pend("8", "afterany:7(unfulfilled)")
    cycle(d)
    quarantined_7_holds_its_dependents(d, slurm)
    assert "job 7's output is quarantined" in comments(slurm)[-1]
    assert "rsa retry 7" in comments(slurm)[-1]
    # another user's dependent is held as well, told nothing of how job 7 fares
    slurm.pend("11", "afterok:7(unfulfilled)")
    slurm.rows = [r if r.job_id != "11" else QueueRow("11", "PENDING", "Dependency", 10, 1,
                                                      "bob", None) for r in slurm.rows]
    cycle(d)
    assert holds(slurm)[-1] == f"11:{DEP_HOLD}: hold=after:7"
    assert "quarantined" not in comments(slurm)[-1] and "job 7" in comments(slurm)[-1]
    gated.fail_out = False
    gated.gate.set()
    d.submit("command", ("7", "retry", "root", True))
    settle(d)
    for _ in range(3):
        cycle(d)
        settle(d)
    assert sorted(released(slurm)) == ["11:", "8:"]  # one cycle's: in either order
    d.shutdown()


def test_a_dependent_of_a_job_without_rsa_output_is_never_held(tmp_path: Path) -> None:
    slurm, gated = DepSlurm(), Gated()
    d = daemon(tmp_path, slurm, gated, EarlyStart.FALLBACK)
    slurm.set("6", "RUNNING", spec=IN)  # an RSA job without output
    slurm.pend("8", "afterok:6(unfulfilled),afterok:5(unfulfilled)")  # 5: no RSA job
    slurm.pend("9", "afterok:x(unfulfilled)")  # not understood: logged, never held
    for _ in range(2):
        cycle(d)
    assert holds(slurm) == [] and released(slurm) == []
    d.shutdown()


def test_a_dependency_text_rsad_does_not_understand_is_held_for_every_job_it_names(
        tmp_path: Path) -> None:
    """On the code before, a text the parser refused was logged and the job never held:
    it started on its parent's half-staged output."""
    slurm, gated = DepSlurm(), Gated()
    d = daemon(tmp_path, slurm, gated, EarlyStart.FALLBACK)
    parent_running_with_its_output_on_the_ramdisk(d, slurm)
    slurm.pend("8", "afterok:7(unfulfilled,remote)")
    cycle(d)
    assert holds(slurm) == [f"8:{DEP_HOLD}: hold=after:7"]
    gated.gate.set()
    d.shutdown()


def test_the_hold_survives_an_rsad_restart_and_only_rsads_own_hold_is_lifted(
        tmp_path: Path) -> None:
    slurm, gated = DepSlurm(), Gated()
    d = daemon(tmp_path, slurm, gated, EarlyStart.FALLBACK)
    parent_running_with_its_output_on_the_ramdisk(d, slurm)
    slurm.pend("8", "afterok:7(unfulfilled)")
    cycle(d)
    assert len(holds(slurm)) == 1
    # a job an admin holds on a begin time of their own (no marker): never touched
    slurm.rows.append(QueueRow("10", "PENDING", "BeginTime", 10, 1, "alice", None))
    slurm.deps["10"] = ""
    d.shutdown()
    d.store.close()
    slurm.deps["8"] = ""  # the parent ended while rsad was down
    slurm.set("7", "COMPLETED", spec=OUT)
    slurm.calls.clear()
    gated2 = Gated()
    d2 = daemon(tmp_path, slurm, gated2, EarlyStart.FALLBACK)
    for _ in range(3):
        cycle(d2)
    assert released(slurm) == []  # still staging: the marker alone tells it is held
    verified(d2, gated2)
    assert released(slurm) == ["8:"]
    d2.shutdown()


def test_a_dependent_with_its_own_rsa_work_under_wait_is_held_for_its_ramdisk_after(
        tmp_path: Path) -> None:
    slurm, gated = DepSlurm(), Gated()
    d = daemon(tmp_path, slurm, gated, EarlyStart.WAIT)
    parent_running_with_its_output_on_the_ramdisk(d, slurm)
    slurm.set("8", "PENDING", "Dependency", spec=IN)
    slurm.deps["8"] = "afterok:7(unfulfilled)"
    cycle(d)
    spec = IN.to_admin_comment()
    assert holds(slurm) == [f"8:{DEP_HOLD}:{spec} hold=after:7"]
    slurm.deps["8"] = ""
    slurm.set("7", "COMPLETED", spec=OUT)
    gated.gate.set()
    for _ in range(4):
        cycle(d)
        settle(d)
    assert len(holds(slurm)) == 2 and holds(slurm)[1].startswith(f"8:1800:{spec} hold=")
    # then the start hold's own: released once its input is staged
    assert released(slurm) == [f"8:{spec}"]
    names = [e.name for e in d.store.events("8")]
    assert "job.dependency-held" in names and "job.dependency-released" in names
    d.shutdown()


def test_a_job_marked_at_submission_is_released_at_the_next_cycle_unless_it_must_wait(
        tmp_path: Path) -> None:
    """job_submit.lua holds every job submitted with a data dependency (the marker
    without parents): rsad releases one whose parents have no RSA output at its next
    cycle, and names the parents of one that must wait."""
    slurm, gated = DepSlurm(), Gated()
    d = daemon(tmp_path, slurm, gated, EarlyStart.FALLBACK)
    parent_running_with_its_output_on_the_ramdisk(d, slurm)
    for job, dep in (("8", "afterok:5(unfulfilled)"), ("9", "afterok:7(unfulfilled)")):
        slurm.deps[job] = dep
        slurm.rows.append(QueueRow(job, "PENDING", "BeginTime", 10, 1, "alice",
                                   " hold=after:"))
    cycle(d)
    assert released(slurm) == ["8:"]
    assert holds(slurm) == [f"9:{DEP_HOLD}: hold=after:7"]
    assert not any("job 5" in c or "output of job" in c for c in comments(slurm))
    d.shutdown()


def test_a_reused_job_id_of_another_user_gets_nothing_of_the_earlier_jobs_record(
        tmp_path: Path) -> None:
    """Slurm lost its state: job id 8, bob's RSA job with its output on its RAMDISK
    (rsad keeps the record until that output is staged), now names alice's pending
    dependent. The hold is placed, but bob's record gets none of its events and its
    early-start policy does not decide (on main both went to bob's record)."""
    slurm, gated = DepSlurm(), Gated()
    d = daemon(tmp_path, slurm, gated, EarlyStart.WAIT)
    parent_running_with_its_output_on_the_ramdisk(d, slurm)
    slurm.set("8", "PENDING", "Resources", spec=OUT)
    slurm.rows = [r if r.job_id != "8" else QueueRow("8", "PENDING", "Resources", 10, 1,
                                                     "bob", r.admin_comment)
                  for r in slurm.rows]
    d.poll()
    settle(d)
    slurm.rows = [r if r.job_id != "8" else QueueRow("8", "RUNNING", "None", 10, 1, "bob",
                                                     r.admin_comment) for r in slurm.rows]
    d.poll()
    settle(d)
    assert d.sched.records["8"].user == "bob"
    slurm.pend("8", "afterok:7(unfulfilled)")  # alice's job 8, no RSA work of its own
    cycle(d)
    assert d.sched.records["8"].user == "bob"  # displaced: kept for its stage-out
    assert holds(slurm)[-1] == f"8:{DEP_HOLD}: hold=after:7"
    assert [e.name for e in d.store.events("8")
            if e.name.startswith("job.dependency")] == []
    gated.gate.set()
    d.shutdown()


def test_a_dependents_own_begin_time_is_kept_through_the_hold(tmp_path: Path) -> None:
    """Its user's ``--begin`` (Slurm's begin time when rsad first holds it), then a
    ``StartTime`` its user sets while it is held: recorded in the marker, and the release
    gives the later one back instead of starting it at once (on main: StartTime=now)."""
    slurm, gated = DepSlurm(), Gated()
    d = daemon(tmp_path, slurm, gated, EarlyStart.WAIT)
    parent_running_with_its_output_on_the_ramdisk(d, slurm)
    slurm.pend("8", "afterok:7(unfulfilled)")
    slurm.begins["8"] = 50_000  # --begin: ahead of rsad's clock
    cycle(d)
    assert holds(slurm) == [f"8:{DEP_HOLD}: hold=after:7;begin=50000"]
    held = int(all_holds(slurm)[0].rsplit(";held=", 1)[1])
    assert held > 50_000
    slurm.begins["8"] = held  # Slurm: the hold's begin time
    cycle(d)
    assert len(holds(slurm)) == 1  # its own hold: nothing new
    slurm.begins["8"] = 60_000  # its user: scontrol update StartTime=... while held
    for _ in range(40):
        cycle(d)
        if len(holds(slurm)) > 1:
            break
    assert holds(slurm)[1] == f"8:{DEP_HOLD}: hold=after:7;begin=60000"
    slurm.begins["8"] = int(all_holds(slurm)[1].rsplit(";held=", 1)[1])
    slurm.deps["8"] = ""
    slurm.set("7", "COMPLETED", spec=OUT)
    gated.gate.set()
    for _ in range(4):
        cycle(d)
        settle(d)
    assert released(slurm) == []  # not StartTime=now
    job, seconds, comment = all_holds(slurm)[-1].split(":", 2)
    assert (job, comment) == ("8", "")  # no marker, no start hold: its own time
    assert 58_000 < int(seconds) < 60_000
    assert "released to start at its own begin time" in comments(slurm)[-1]
    d.shutdown()


def test_a_dependency_added_later_is_held_by_job_modify_until_rsad_looks(
        tmp_path: Path) -> None:
    """``scontrol update JobId=N Dependency=afterok:P``: job_submit.lua's job_modify holds
    the job by its begin time alone (LATER_BASE plus the begin time the update asked for;
    it cannot write the marker). rsad's next cycle replaces that hold with its own (8: a
    parent with output on its RAMDISK) or lifts it (9, 10), giving back the begin time
    the update asked for (9), also once Slurm cleared the fulfilled dependency (10). On
    main rsad kept job_modify's begin time as the job's own (8 was released to 2106) and
    never lifted it without a parent to wait for (9 and 10 held for ever)."""
    slurm, gated = DepSlurm(), Gated()
    d = daemon(tmp_path, slurm, gated, EarlyStart.FALLBACK)
    parent_running_with_its_output_on_the_ramdisk(d, slurm)
    slurm.pend("8", "afterok:7(unfulfilled)")
    slurm.begins["8"] = LATER_BASE
    slurm.pend("9", "afterok:5(unfulfilled)")  # 5: no RSA job
    slurm.begins["9"] = LATER_BASE + 50_000  # StartTime=... in the same update
    slurm.pend("10", "")  # Slurm dropped its fulfilled dependency
    slurm.begins["10"] = LATER_BASE
    slurm.rows.append(QueueRow("11", "PENDING", "BeginTime", 10, 1, "alice", None))
    slurm.begins["11"] = 40_000  # a begin time of its own, no dependency: never touched
    cycle(d)
    settle(d)
    # one cycle's holds, made on the urgent lane's workers: in either order
    of = {h.split(":", 1)[0]: h for h in all_holds(slurm)}
    assert holds(slurm).count(f"8:{DEP_HOLD}: hold=after:7") == 1
    job, seconds, comment = of["9"].split(":", 2)
    assert (job, comment) == ("9", "") and 48_000 < int(seconds) <= 50_001  # its own time
    assert released(slurm) == ["10:"]
    assert len(all_holds(slurm)) == 2
    slurm.begins["8"] = int(of["8"].rsplit(";held=", 1)[1])  # rsad's hold now
    slurm.begins.pop("9")
    slurm.begins.pop("10")
    slurm.deps["8"] = ""
    slurm.set("7", "COMPLETED", spec=OUT)
    for _ in range(3):
        cycle(d)
    assert released(slurm) == ["10:"]  # 8 waits for 7's output
    verified(d, gated)
    assert released(slurm) == ["10:", "8:"] and len(all_holds(slurm)) == 2
    d.shutdown()


def test_a_dependency_added_later_while_rsad_is_down_waits_for_the_output(
        tmp_path: Path) -> None:
    """rsad is down when the update is made and when the parent ends: Slurm keeps
    job_modify's hold and clears the fulfilled dependency; the next rsad holds the job for
    the output of every RSA job that ended with it not yet verified (one of them may have
    been its parent), with the begin time of its own the update asked for in the marker,
    and releases it once verified."""
    slurm, gated = DepSlurm(), Gated()
    d = daemon(tmp_path, slurm, gated, EarlyStart.FALLBACK)
    parent_running_with_its_output_on_the_ramdisk(d, slurm)
    d.shutdown()
    d.store.close()
    slurm.pend("8", "afterok:7(unfulfilled)")  # the update, while rsad is down
    slurm.begins["8"] = LATER_BASE + 20_000
    slurm.set("7", "COMPLETED", spec=OUT)
    slurm.deps["8"] = ""
    slurm.calls.clear()
    gated2 = Gated()
    d2 = daemon(tmp_path, slurm, gated2, EarlyStart.FALLBACK)
    for _ in range(3):
        cycle(d2)
    assert holds(slurm) == [f"8:{DEP_HOLD}: hold=after:7;begin=20000"]
    assert released(slurm) == []
    slurm.begins["8"] = int(all_holds(slurm)[0].rsplit(";held=", 1)[1])
    gated2.gate.set()
    settle(d2)
    for _ in range(3):
        cycle(d2)
        settle(d2)
    job, seconds, comment = all_holds(slurm)[-1].split(":", 2)
    assert (job, comment) == ("8", "") and 0 < int(seconds) <= 20_001  # its own time
    assert released(slurm) == []
    d2.shutdown()


def held_for_7_while_its_output_stages(tmp_path: Path, deps: str) -> None:
    """7 ended, its output staging out (verify waits for the gate); 8, submitted with
    job_submit.lua's marker, shows ``deps`` as Slurm prints its dependency: 8 is held for
    7 and released once 7's output is verified, not before."""
    slurm, gated = DepSlurm(), Gated()
    d = daemon(tmp_path, slurm, gated, EarlyStart.FALLBACK)
    parent_running_with_its_output_on_the_ramdisk(d, slurm)
    slurm.set("7", "COMPLETED", spec=OUT)
    d.poll()  # the output stages out; verify waits for the gate
    flush_urgent(d)
    slurm.deps["8"] = deps
    slurm.rows.append(QueueRow("8", "PENDING", "BeginTime", 10, 1, "alice", " hold=after:"))
    for _ in range(2):
        cycle(d)
    assert released(slurm) == []
    assert holds(slurm) == [f"8:{DEP_HOLD}: hold=after:7"]
    verified(d, gated)
    assert released(slurm) == ["8:"]
    d.shutdown()


def test_a_dependent_whose_dependency_slurm_cleared_before_rsad_looked_waits_for_the_output(
        tmp_path: Path) -> None:
    """Submitted with ``afterok:7`` after 7 ended, its output still staging out: Slurm
    fulfils and clears the dependency before rsad's next cycle, leaving job_submit.lua's
    marker without parents. rsad holds it for every RSA job that ended with its output
    not yet verified (on main it released it at once: it read 7's half-staged output)."""
    held_for_7_while_its_output_stages(tmp_path, "")


def test_a_begin_time_set_before_the_dependency_was_added_is_given_back(
        tmp_path: Path) -> None:
    """job_modify cannot see the begin time a job had (22.05's job record has none): its
    hold replaces it. rsad saw it before the update and gives it back at the release
    (12); an update that asked for ``StartTime=now`` with the dependency gets that (13);
    a begin time moved back to now before the update is not given back (14)."""
    slurm, gated = DepSlurm(), Gated()
    d = daemon(tmp_path, slurm, gated, EarlyStart.FALLBACK)
    for job in ("12", "13", "14"):
        slurm.rows.append(QueueRow(job, "PENDING", "BeginTime", 10, 1, "alice", None))
        slurm.begins[job] = 30_000  # its user's --begin, no dependency yet
    cycle(d)
    assert holds(slurm) == [] and released(slurm) == []  # its own: never touched
    slurm.begins["14"] = 1_000  # its user: StartTime=now (passed at once)
    cycle(d)
    for job, begin in (("12", LATER_BASE), ("13", LATER_BASE + 1), ("14", LATER_BASE)):
        slurm.deps[job] = "afterok:5(unfulfilled)"  # 5: no RSA job
        slurm.begins[job] = begin  # job_modify's hold
    cycle(d)
    settle(d)
    job, seconds, comment = all_holds(slurm)[0].split(":", 2)
    assert (job, comment) == ("12", "") and 28_000 < int(seconds) <= 29_000  # its own time
    assert sorted(released(slurm)) == ["13:", "14:"] and len(all_holds(slurm)) == 1
    d.shutdown()


def test_a_parent_slurm_no_longer_prints_is_waited_for_beside_the_ones_it_does(
        tmp_path: Path) -> None:
    """``sbatch --dependency=afterok:7:5`` just after 7 ended, its output still staging
    out: Slurm prints only the parents still to end (``afterok:5``: 7 is fulfilled and
    dropped) before rsad's next cycle, and 5 has no RSA output. On the code before, the
    text named a parent, so rsad took it for the whole dependency and released the job at
    that cycle: once 5 ended it read 7's half-staged output."""
    held_for_7_while_its_output_stages(tmp_path, "afterok:5(unfulfilled)")  # 5: no RSA


def running_task_127_4(tmp_path: Path, own: str = "131") -> tuple[DepSlurm, Gated, Daemon]:
    """A daemon whose array task 127_4 runs with its output on a RAMDISK, its own job id
    ``own`` matched to it by slurmctld's Prolog hook."""
    slurm, gated = DepSlurm(), Gated()
    d = daemon(tmp_path, slurm, gated, EarlyStart.FALLBACK)
    slurm.set("127_4", "PENDING", "Resources", spec=OUT)
    d.poll()
    settle(d)
    d.submit("hook", {"hook": "prolog_slurmctld", "job_id": "127_4", "alias": own})
    settle(d)
    slurm.set("127_4", "RUNNING", spec=OUT)
    d.poll()
    settle(d)
    return slurm, gated, d


def test_an_array_task_named_by_its_own_job_id_is_waited_for(tmp_path: Path) -> None:
    """A task's script chains its next step with ``afterok:$SLURM_JOB_ID``: its own job
    id (131), which Slurm keeps and prints as given, not ``127_4``. rsad knows the match
    from slurmctld's Prolog hook. On the code before, 131 was no RSA job: the dependent
    was never held and started on the task's half-staged output."""
    slurm, gated, d = running_task_127_4(tmp_path)
    assert d.sched.records["127_4"].rsa_state.value == "mounted-output"
    slurm.pend("8", "afterok:131(unfulfilled)")
    cycle(d)
    assert holds(slurm) == [f"8:{DEP_HOLD}: hold=after:127_4"]
    assert "job 127_4's output" in comments(slurm)[-1]
    slurm.deps["8"] = ""
    slurm.set("127_4", "COMPLETED", spec=OUT)
    for _ in range(3):
        cycle(d)
    assert released(slurm) == []
    verified(d, gated)
    assert released(slurm) == ["8:"]
    d.shutdown()


def test_a_dependent_is_told_only_what_is_true_of_each_parent(tmp_path: Path) -> None:
    """Job 7's stage-out is quarantined; an operator discards the output. alice's
    dependent 8 is released told that 7 has no verified stage-out (on the code before:
    "the output of job 7 is verified on the PFS"); bob's dependent 11 is told, while
    held, that 7 is another user's, not to run ``rsa job 7`` (which answers him "not
    tracked"), and at its release nothing of how 7's output fared (before: "verified")."""
    slurm, gated = DepSlurm(), Gated()
    gated.fail_out = True
    d = daemon(tmp_path, slurm, gated, EarlyStart.FALLBACK)
    parent_running_with_its_output_on_the_ramdisk(d, slurm)
    slurm.pend("8", "afterany:7(unfulfilled)")
    slurm.pend("11", "afterok:7(unfulfilled)")
    slurm.rows = [r if r.job_id != "11" else QueueRow("11", "PENDING", "Dependency", 10, 1,
                                                      "bob", None) for r in slurm.rows]
    cycle(d)
    told = slurm.told
    assert "rsa job 7 shows" in told["8"]
    assert "another user's" in told["11"] and "rsa job 7 shows" not in told["11"]
    quarantined_7_holds_its_dependents(d, slurm)
    gated.gate.set()
    d.submit("command", ("7", "discard", "root", True))
    settle(d)
    for _ in range(3):
        cycle(d)
        settle(d)
    assert d.sched.records["7"].rsa_state.value == "released"
    assert sorted(released(slurm)) == ["11:", "8:"]
    assert "verified" not in told["8"].replace("no verified stage-out", "")
    assert "job 7 has nothing left on its RAMDISK, but no verified stage-out" in told["8"]
    assert "verified" not in told["11"] and "job 7 (another user's)" in told["11"]
    d.shutdown()


def assert_verified_once_the_gate_opens(d: Daemon, gated: Gated, routes: api.Routes,
                                        job: str) -> None:
    """The held verify let through: a few cycles later ``rsa wait``'s verdict of ``job``
    (as its owner reads it) is ``verified``."""
    gated.gate.set()
    settle(d)
    for _ in range(3):
        cycle(d)
        settle(d)
    got = verdict(routes.dispatch(ALICE, "GET", f"/v1/jobs/{job}", None))
    assert got is not None and got.word == "verified", got


def test_rsa_wait_reads_a_long_timeline_from_its_newest_events(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A job's answer carries at most EVENTS_LIMIT events (10,000: a job long pending on
    a busy cluster, on-deck and demoted again and again, or requeued many times, has
    more). They were its oldest: a requeued job's first run verified within them, its
    second run's end and stage-out after them, and ``rsa wait`` said ``verified`` while
    the second run's output was still on its RAMDISK (and ``failed`` once it was
    verified). Now the newest: the verdict is the last run's."""
    slurm, gated = DepSlurm(), Gated()
    d = daemon(tmp_path, slurm, gated, EarlyStart.FALLBACK)
    requeued_while_its_output_is_on_the_ramdisk(d, slurm)
    gated.gate.set()
    for _ in range(3):
        cycle(d)
        settle(d)
    first = len(list(d.store.events("7")))
    assert any(e.context.get("to") == "output-verified" for e in d.store.events("7"))
    gated.gate.clear()
    parent_running_with_its_output_on_the_ramdisk(d, slurm)  # the second run
    slurm.set("7", "COMPLETED", spec=OUT)
    for _ in range(2):
        cycle(d)
    assert d.sched.records["7"].rsa_state.value == "verifying"
    assert len(list(d.store.events("7"))) > first + 2
    monkeypatch.setattr(api, "EVENTS_LIMIT", first)
    with serving(d) as routes:
        job = routes.dispatch(ALICE, "GET", "/v1/jobs/7", None)
        assert len(job["events"]) == first
        assert verdict(job) is None  # the code before: verified, the first run's
        assert_verified_once_the_gate_opens(d, gated, routes, "7")
    d.shutdown()


def test_rsa_wait_of_an_array_tasks_own_job_id_is_that_tasks(tmp_path: Path) -> None:
    """``rsa wait $SLURM_JOB_ID`` (or ``rsa job``) of an array task's own job id: rsad
    answers with the task's record and timeline (the match slurmctld's hook taught it).
    On the code before: not tracked, and ``rsa wait`` said ``no RSA`` once Slurm ended
    the task, while its output was staged out. Another user still gets "not tracked"."""
    slurm, gated, d = running_task_127_4(tmp_path)
    slurm.set("127_4", "COMPLETED", spec=OUT)
    for _ in range(2):
        cycle(d)
    with serving(d) as routes:
        job = routes.dispatch(ALICE, "GET", "/v1/jobs/131", None)
        assert job["job_id"] == "127_4" and job["events"]
        assert verdict(job) is None  # staging out: not over
        with pytest.raises(api.ApiError, match="not tracked"):
            routes.dispatch(BOB, "GET", "/v1/jobs/131", None)
        events = routes.dispatch(ALICE, "GET", "/v1/events?job=131", None)["events"]
        assert events and {e["job_id"] for e in events} == {"127_4"}
        assert_verified_once_the_gate_opens(d, gated, routes, "131")
    d.shutdown()


def test_rsa_job_of_the_arrays_own_id_names_the_array_not_the_task_that_carries_it(
        tmp_path: Path) -> None:
    """Slurm gives one task of an array the array's own id (here 127_4 runs as 127):
    ``rsa job 127`` means the array, as ``scontrol show job 127`` does, so it is not
    answered with that one task's record; its owner is told rsad tracks each task,
    another user the same "not tracked" as for any job not theirs."""
    _slurm, gated, d = running_task_127_4(tmp_path, own="127")
    with serving(d) as routes:
        assert routes.dispatch(ALICE, "GET", "/v1/jobs/127_4", None)["job_id"] == "127_4"
        with pytest.raises(api.ApiError, match=r"job 127 is an array: the RSA tracks each "
                           r"of its tasks \(rsa job 127_<task>; rsa wait 127 waits for all\)"):
            routes.dispatch(ALICE, "GET", "/v1/jobs/127", None)
        with pytest.raises(api.ApiError, match=r"^job 127 is not tracked by the RSA$"):
            routes.dispatch(BOB, "GET", "/v1/jobs/127", None)
    gated.gate.set()
    d.shutdown()


def test_the_parents_named_at_submission_are_waited_for_whoever_they_are(
        tmp_path: Path) -> None:
    """alice submits ``afterok:7`` once bob's job 7 has ended, its output still staging
    out: Slurm counts 7 fulfilled and prints no dependency. job_submit.lua named 7 in the
    marker (``;named=7``): rsad holds her job for it. On the code before, rsad could only
    guess her own in-flight jobs (one user's stage-outs never hold another's guessed
    dependents) and released the job at once, onto 7's half-staged output."""
    slurm, gated = DepSlurm(), Gated()
    d = daemon(tmp_path, slurm, gated, EarlyStart.FALLBACK)

    def bobs(state: str, reason: str) -> None:
        slurm.set("7", state, reason, spec=OUT)
        slurm.rows = [r if r.job_id != "7" else QueueRow(
            "7", r.state, r.reason, 10, 1, "bob", r.admin_comment) for r in slurm.rows]
        d.poll()
        if state == "COMPLETED":
            flush_urgent(d)  # the output stages out; verify waits for the gate
        else:
            settle(d)

    bobs("PENDING", "Resources")
    bobs("RUNNING", "None")
    assert d.sched.records["7"].user == "bob"
    assert d.sched.records["7"].rsa_state.value == "mounted-output"
    bobs("COMPLETED", "None")
    flush_urgent(d)
    slurm.deps["8"] = ""
    slurm.rows.append(QueueRow("8", "PENDING", "BeginTime", 10, 1, "alice",
                               " hold=after:;held=99999;named=7"))
    for _ in range(2):
        cycle(d)
    assert released(slurm) == []
    assert holds(slurm) == [f"8:{DEP_HOLD}: hold=after:7"]
    assert "another user's" in slurm.told["8"]
    verified(d, gated)
    assert released(slurm) == ["8:"]
    assert "job 7 (another user's) has nothing on its way" in slurm.told["8"]
    d.shutdown()
