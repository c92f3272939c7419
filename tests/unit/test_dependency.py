"""The dependency hold's pure parts (issue 32, core/dependency.py): Slurm's dependency
text as squeue prints it, the RSA parents a dependent waits for (every type, arrays task
by task for ``aftercorr``), whether a parent's output is settled, the marker and the
messages; and the squeue lines rsad reads them from (slurm/parse.py)."""

from __future__ import annotations

import pytest

from rsa_scheduler.core.dependency import (
    DEP_MARK,
    LATER_BASE,
    Dependency,
    DependencyError,
    DepMark,
    dep_marker,
    dep_parents,
    ended_unsettled,
    held_message,
    later_begin,
    later_hold,
    loose_dependency,
    own_begin,
    parent_verdict,
    parents_of,
    parse_dependency,
    read_dep_mark,
    released_message,
    without_dep_marker,
)
from rsa_scheduler.core.directives import DirectiveSpec, split_hold
from rsa_scheduler.core.record import JobRecord
from rsa_scheduler.core.states import JobState, RsaState
from rsa_scheduler.slurm.parse import parse_dependents

OUT = DirectiveSpec(data_out="/pfs/out")
IN = DirectiveSpec(data_in="/pfs/in")


def rec(job: str, state: RsaState = RsaState.MOUNTED_OUTPUT,
        job_state: JobState = JobState.RUNNING, spec: DirectiveSpec = OUT,
        user: str = "alice") -> JobRecord:
    return JobRecord(job_id=job, user=user, spec=spec, rsa_state=state, job_state=job_state)


@pytest.mark.parametrize(("text", "want"), [
    ("(null)", []),
    ("", []),
    ("afterok:12(unfulfilled)", [Dependency("afterok", "12", None, "unfulfilled")]),
    ("afterok:12(fulfilled)", [Dependency("afterok", "12", None, "fulfilled")]),
    ("afterany:12(unfulfilled),afternotok:13(failed)",
     [Dependency("afterany", "12", None, "unfulfilled"),
      Dependency("afternotok", "13", None, "failed")]),
    ("afterok:12(unfulfilled)?afterany:14(unfulfilled)",
     [Dependency("afterok", "12", None, "unfulfilled"),
      Dependency("afterany", "14", None, "unfulfilled")]),
    ("aftercorr:20_*(unfulfilled)", [Dependency("aftercorr", "20", "*", "unfulfilled")]),
    ("afterok:20_3(unfulfilled)", [Dependency("afterok", "20", "3", "unfulfilled")]),
    ("after:12+5(unfulfilled)", [Dependency("after", "12", None, "unfulfilled")]),
    ("singleton(unfulfilled)", [Dependency("singleton", state="unfulfilled")]),
    ("afterok:12:13", [Dependency("afterok", "12"), Dependency("afterok", "13")]),
])
def test_slurms_dependency_text_is_parsed(text: str, want: list[Dependency]) -> None:
    assert parse_dependency(text) == want


@pytest.mark.parametrize("text", ["afterok", "afterok:x(unfulfilled)", "afterok:12 (x)",
                                  "afterok:12;rm", "AFTEROK:12"])
def test_dependency_text_rsad_does_not_know_is_an_error(text: str) -> None:
    with pytest.raises(DependencyError):
        parse_dependency(text)


def test_the_parents_are_the_rsa_jobs_of_every_data_dependency() -> None:
    records = {"12": rec("12"), "13": rec("13"), "20_0": rec("20_0"), "20_1": rec("20_1"),
               "30": rec("30", user="bob"), "40": rec("40"),
               "41": rec("41", RsaState.NONE, JobState.QUEUED)}
    deps = parse_dependency("afterok:12(unfulfilled),afterany:99(unfulfilled)")
    assert parents_of("50", "alice", deps, records) == ["12"]  # 99: no RSA job
    # an array's every task, or one task
    assert parents_of("50", "alice", parse_dependency("afterok:20_*(unfulfilled)"),
                      records) == ["20_0", "20_1"]
    assert parents_of("50", "alice", parse_dependency("afterok:20(unfulfilled)"),
                      records) == ["20_0", "20_1"]
    assert parents_of("50", "alice", parse_dependency("afterok:20_1(unfulfilled)"),
                      records) == ["20_1"]
    # aftercorr: task by task
    corr = parse_dependency("aftercorr:20_*(unfulfilled)")
    assert parents_of("60_1", "alice", corr, records) == ["20_1"]
    assert parents_of("60_7", "alice", corr, records) == []
    # aftercorr on a job that is no array (seen in the lab): that job
    assert parents_of("60_1", "alice", parse_dependency("aftercorr:12(unfulfilled)"),
                      records) == ["12"]
    # after: waits for the start only, never for the output
    assert parents_of("50", "alice", parse_dependency("after:12(unfulfilled)"),
                      records) == []
    # singleton: every RSA job of the same user that runs or ran (rsad knows no job
    # names; a pending one, 41, would wait for this one in turn), itself never
    single = parse_dependency("singleton(unfulfilled)")
    assert parents_of("40", "alice", single, records) == ["12", "13", "20_0", "20_1"]
    assert parents_of("31", "bob", single, records) == ["30"]


def test_a_dependency_text_not_understood_still_names_its_jobs() -> None:
    """Unsure is never released: a form the parser does not know (a later Slurm's) is
    read for every job id in it, as a dependency on the job's end."""
    text = "afterok:7(unfulfilled,remote),afterany:20_3@other(failed)"
    with pytest.raises(DependencyError):
        parse_dependency(text)
    assert loose_dependency(text) == [Dependency("afterany", "7"),
                                      Dependency("afterany", "20", "3")]
    assert loose_dependency("afterok:x(unfulfilled)") == []
    assert loose_dependency("singleton(unfulfilled,new)") == [Dependency("singleton")]


def test_an_array_task_named_by_its_own_job_id_is_that_task() -> None:
    """Slurm keeps a parent given by an array task's own job id as that id
    (``afterok:131``); rsad's key is ``127_4``, matched from slurmctld's hooks. A job id
    that names an array of records (its tasks) or a record of its own stays that."""
    records = {"127_4": rec("127_4"), "127_5": rec("127_5"), "12": rec("12")}
    aliases = {"131": "127_4", "127": "127_5", "12": "127_5"}
    assert parents_of("50", "alice", parse_dependency("afterok:131(unfulfilled)"),
                      records) == []  # the code before: no RSA job
    assert parents_of("50", "alice", parse_dependency("afterok:131(unfulfilled)"),
                      records, aliases) == ["127_4"]
    assert parents_of("60_1", "alice", parse_dependency("aftercorr:131(unfulfilled)"),
                      records, aliases) == ["127_4"]
    assert parents_of("50", "alice", parse_dependency("afterok:127(unfulfilled)"),
                      records, aliases) == ["127_4", "127_5"]  # every task
    assert parents_of("50", "alice", parse_dependency("afterok:12(unfulfilled)"),
                      records, aliases) == ["12"]
    assert parents_of("50", "alice", parse_dependency("afterok:131_2(unfulfilled)"),
                      records, aliases) == []


@pytest.mark.parametrize(("record", "why"), [
    (None, None),
    (rec("12", spec=IN), None),  # no output of its own
    (rec("12", RsaState.ALLOCATED, JobState.QUEUED), "running"),  # not ended yet
    (rec("12", RsaState.MOUNTED_OUTPUT, JobState.RUNNING), "running"),
    (rec("12", RsaState.MOUNTED_OUTPUT, JobState.FINISHED), "staging"),
    (rec("12", RsaState.STAGING_OUT, JobState.FINISHED), "staging"),
    (rec("12", RsaState.VERIFYING, JobState.FINISHED), "staging"),
    (rec("12", RsaState.STAGE_OUT_FAILED, JobState.FINISHED), "failed"),
    (rec("12", RsaState.QUARANTINED, JobState.FINISHED), "quarantined"),
    (rec("12", RsaState.OUTPUT_VERIFIED, JobState.FINISHED), None),
    (rec("12", RsaState.TEARING_DOWN, JobState.FINISHED), None),
    (rec("12", RsaState.RELEASED, JobState.FINISHED), None),
    (rec("12", RsaState.DECLINED, JobState.FINISHED), None),  # wrote to the PFS itself
    (rec("12", RsaState.NONE, JobState.FINISHED), None),  # ran without a RAMDISK
])
def test_a_parents_output_is_settled_only_once_verified_or_never_on_a_ramdisk(
        record: JobRecord | None, why: str | None) -> None:
    got = parent_verdict(record)
    assert (got.why if got else None) == why


def test_the_marker_names_the_parents_and_is_no_start_hold() -> None:
    spec = OUT.to_admin_comment()
    comment = f"{spec}{dep_marker(['12', '20_1'])}"
    assert comment == f"{spec} hold=after:12,20_1" and DEP_MARK == " hold=after:"
    assert dep_parents(comment) == ["12", "20_1"]
    assert dep_parents(spec) is None and dep_parents(f"{spec} hold=123") is None
    assert without_dep_marker(comment) == spec
    assert split_hold(comment) == (spec, None)  # the spec reads as before, no deadline
    assert DirectiveSpec.from_admin_comment(split_hold(comment)[0]) == OUT
    # a job without RSA work of its own: the marker alone
    assert dep_parents(dep_marker(["12"])) == ["12"] and split_hold(dep_marker(["12"])) == (
        "", None)
    # should Slurm strip the leading space of a comment that is the marker alone
    assert dep_parents("hold=after:12") == ["12"] and without_dep_marker("hold=after:") == ""
    # only job ids are read back from it
    assert dep_parents(" hold=after:12,x,13_2;begin=5") == ["12", "13_2"]


def test_the_dependents_reason_says_what_happened_and_what_to_do() -> None:
    from rsa_scheduler.core.dependency import Waiting
    msg = held_message([Waiting("12", "staging"), Waiting("13", "quarantined")])
    assert "job 13's output is quarantined" in msg and "rsa retry 13" in msg
    assert "stage-out failed" in held_message([Waiting("12", "failed")])
    assert "held until job 12's output is staged out and verified" in held_message(
        [Waiting("12", "running")])
    assert released_message(["12", "13"]).endswith("released to start")
    # another user's job: neither how it fares nor a command that answers "not tracked"
    other = held_message([Waiting("12", "another")])
    assert "another user's" in other and "rsa job 12 shows" not in other
    # verified only where it is: a discarded output, another user's job
    said = released_message(["12"], unverified=["13"], others=["14"])
    assert said.startswith("RSA: the output of job 12 is verified on the PFS; job 13 has "
                           "nothing left on its RAMDISK, but no verified stage-out")
    assert "job 14 (another user's) has nothing on its way" in said
    assert "verified" not in released_message([], others=["14"])


def test_the_dependents_are_read_from_squeue_with_their_admin_comment() -> None:
    text = ("5|alice|afterok:4(unfulfilled)|N/A|(null)|\n"
            "6|alice|(null)|1764337200|(null)|\n"
            "7|bob|(null)|Unknown| hold=after:4|\n"
            "8_1|alice|aftercorr:3_*(unfulfilled)|1764337201|rsa1:o=%2Fpfs hold=after:3_1\n"
            "second line|\n")
    rows = parse_dependents(text, DEP_MARK)
    assert [(r.job_id, r.user, r.dependency) for r in rows] == [
        ("5", "alice", "afterok:4(unfulfilled)"), ("7", "bob", ""),
        ("8_1", "alice", "aftercorr:3_*(unfulfilled)")]
    assert rows[0].admin_comment == "" and rows[1].admin_comment == " hold=after:4"
    assert rows[2].admin_comment == "rsa1:o=%2Fpfs hold=after:3_1\nsecond line"
    assert [r.begin for r in rows] == [None, None, 1764337201]


#: the format of the captures before rsad read the begin time too
OLD_FIELDS = ("JobArrayID", "UserName", "Dependency", "admin_comment")


def test_the_dependency_text_slurm_printed_in_the_lab_is_read() -> None:
    """tests/data/slurm/squeue_dependency*.txt (README there): every type as squeue
    prints it, with job_submit.lua's and rsad's markers."""
    from tests.conftest import DATA

    records = {"1": rec("1", RsaState.MOUNTED_OUTPUT, JobState.RUNNING, user="rsauser")}
    for name in ("pending", "ended", "native_pending"):
        rows = parse_dependents((DATA / "slurm" / f"squeue_dependency_{name}.txt")
                                .read_text(), DEP_MARK.lstrip(), OLD_FIELDS)
        assert len(rows) == 9, name
        got = {r.job_id: parents_of(r.job_id, r.user, parse_dependency(r.dependency),
                                    records) for r in rows}
        # every type that waits for job 1's end names it; after (its start) does not
        assert got == {"2": ["1"], "3_0": ["1"], "3_1": ["1"], "4_0": ["1"], "4_1": ["1"],
                       "5_0": [], "5_1": [], "6_0": ["1"], "6_1": ["1"]}, name
        marked = {r.job_id: dep_parents(r.admin_comment) for r in rows}
        assert marked["2"] == ["1"] and marked["5_0"] is None, name
    rows = parse_dependents((DATA / "slurm" / "squeue_dependency_pending.txt").read_text(),
                            DEP_MARK.lstrip(), OLD_FIELDS)
    assert [r.dependency for r in rows if r.job_id == "3_0"] == [
        "afterany:1(unfulfilled)?afternotok:1(unfulfilled)"]
    assert [r.admin_comment for r in rows if r.job_id in ("6_0", "5_0")] == ["", ""]


def test_the_marker_keeps_the_jobs_own_begin_time_and_tells_it_from_the_holds() -> None:
    marker = dep_marker(["12"], 5000, 9000)
    assert marker == " hold=after:12;begin=5000;held=9000"
    assert read_dep_mark("rsa1:o=x" + marker) == DepMark(["12"], 5000, 9000)
    assert read_dep_mark(" hold=after:;held=9000") == DepMark([], None, 9000)
    assert read_dep_mark("rsa1:o=x") is None
    mark = DepMark(["12"], 5000, 9000)
    assert own_begin(mark, 9000 + 30, now=100) == 5000  # Slurm shows the hold's own
    assert own_begin(mark, 7000, now=100) == 7000  # set while held: the later one
    assert own_begin(mark, 3000, now=100) == 5000
    assert own_begin(mark, 9000, now=6000) is None  # passed: start now
    assert own_begin(None, 4000, now=100) == 4000  # unmarked: its --begin
    assert own_begin(None, 4000, now=100, start_hold=4010) is None  # the start hold's
    assert own_begin(None, 50, now=100) is None
    assert own_begin(DepMark([]), 4000, now=100) is None  # a hold that recorded no time


def test_the_begin_time_slurm_printed_in_the_lab_is_read() -> None:
    """tests/data/slurm/squeue_dependency_begin.txt: a dependent with its own --begin as
    job_submit.lua marked it, read with EligibleTime as seconds since the epoch."""
    from tests.conftest import DATA

    rows = parse_dependents((DATA / "slurm" / "squeue_dependency_begin.txt").read_text(),
                            DEP_MARK.lstrip())
    assert [(r.job_id, r.dependency, r.begin) for r in rows] == [
        ("13", "afterok:12(unfulfilled)", 1827409749)]
    mark = read_dep_mark(rows[0].admin_comment)
    assert mark == DepMark([], 1795873809, 1827409749)
    # Slurm shows the hold's own begin time: the job keeps its --begin, nothing else
    assert own_begin(mark, rows[0].begin, now=1795873749) == 1795873809
    assert own_begin(mark, rows[0].begin, now=1795873810) is None


def test_job_modifys_hold_of_a_dependency_added_later_is_told_by_its_begin_time() -> None:
    """job_submit.lua's job_modify cannot write the marker: its hold is LATER_BASE plus
    the begin time the update asked for. It is rsad's, never the job's own (on main the
    release kept it: the job waited until 2106), and gives that begin time back."""
    assert LATER_BASE == 4294967296  # 2106-02-07T06:28:16 UTC
    assert not later_hold(None) and not later_hold(LATER_BASE - 1) and later_hold(LATER_BASE)
    assert later_begin(LATER_BASE) is None and later_begin(LATER_BASE + 5000) == 5000
    assert later_begin(4000) is None
    assert own_begin(None, LATER_BASE, now=100) is None
    assert own_begin(None, LATER_BASE + 5000, now=100) == 5000
    assert own_begin(None, LATER_BASE + 50, now=100) is None  # passed
    assert own_begin(DepMark(["12"], 7000, 9000), LATER_BASE + 5000, now=100) == 7000
    assert own_begin(DepMark(["12"], None, 9000), LATER_BASE, now=100) is None
    # squeue lists a pending job with job_modify's hold even once Slurm cleared its
    # fulfilled dependency (and with no marker)
    text = (f"5|alice|(null)|{LATER_BASE}|(null)|\n"
            "6|alice|(null)|1764337200|(null)|\n"
            f"7|alice|(null)|{LATER_BASE + 1764337200}|rsa1:i=%2Fpfs|\n")
    assert [r.job_id for r in parse_dependents(text, DEP_MARK)] == []
    assert [(r.job_id, r.begin) for r in parse_dependents(text, DEP_MARK,
                                                          ahead_of=1764337200)
            ] == [("5", LATER_BASE), ("7", LATER_BASE + 1764337200)]
    # and one with a begin time of its own ahead (job_modify's hold replaces it)
    assert [r.job_id for r in parse_dependents(text, DEP_MARK, ahead_of=1764337199)
            ] == ["5", "6", "7"]
    assert later_begin(LATER_BASE + 1) == 1  # StartTime=now in the update


def test_the_parents_of_a_job_whose_dependency_slurm_cleared_are_its_users_in_flight_jobs(
        ) -> None:
    """Which parents are gone: the dependent waits for its user's ended jobs whose output
    is on its way to the PFS; never for another user's (one user's stage-outs, or a
    quarantine lasting a day, would hold every such job of every user) nor for output
    that stays put until someone acts (quarantined, rescued)."""
    records = {
        "7": rec("7", RsaState.STAGING_OUT, JobState.FINISHED),
        "8": rec("8", RsaState.QUARANTINED, JobState.FINISHED, user="bob"),
        "13": rec("13", RsaState.STAGING_OUT, JobState.FINISHED, user="bob"),
        "14": rec("14", RsaState.QUARANTINED, JobState.FINISHED),  # stays until acted on
        "15": rec("15", RsaState.STAGE_OUT_FAILED, JobState.FINISHED),  # a retry due
        "9": rec("9", RsaState.MOUNTED_OUTPUT, JobState.RUNNING),  # not ended
        "10": rec("10", RsaState.OUTPUT_VERIFIED, JobState.FINISHED),  # settled
        "11": rec("11", RsaState.STAGING_OUT, JobState.FINISHED, spec=IN),  # no output
        "12": rec("12", RsaState.STAGING_OUT, JobState.FINISHED),
    }
    assert ended_unsettled("12", "alice", records) == ["7", "15"]
    assert ended_unsettled("12", "bob", records) == ["13"]
    assert ended_unsettled("5", "alice", {}) == []
