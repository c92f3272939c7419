"""The adapter's parsers on real Slurm 24.11.5 output (Debian 13's, captured by
tests/slurm_release: tests/data/slurm/24.11/README.md), and rsad's start-up check on 24.11's
``scontrol show config`` (``(null)`` where 22.05 printed ``accounting_storage/none``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rsa_scheduler.core.directives import DirectiveSpec
from rsa_scheduler.sim.sacct import read_sacct
from rsa_scheduler.slurm.cli import lockin_problem, parse_show_config, qos_warning
from rsa_scheduler.slurm.parse import (
    parse_dependents,
    parse_end_states,
    parse_job_info,
    parse_lock_view,
    parse_pending,
    parse_queue,
    parse_sinfo_partitions,
)

pytestmark = pytest.mark.unit

DATA = Path(__file__).parent.parent / "data" / "slurm" / "24.11"
JOBS = dict(item.split("=") for item in
            (DATA / "jobs.env").read_text().splitlines()[1].split())
ACCT = dict(item.split("=") for item in
            (DATA / "jobs_acct.env").read_text().splitlines()[1].split())


def read(name: str) -> str:
    return (DATA / name).read_text()


def test_the_queue() -> None:
    rows = {r.job_id: r for r in parse_queue(read("squeue_rsa.txt"))}
    run, rsa, pend, array = JOBS["RUNNING"], JOBS["RSA"], JOBS["PENDING"], JOBS["ARRAY"]
    assert (rows[run].state, rows[run].reason, rows[run].num_nodes, rows[run].user,
            rows[run].partition, rows[run].time_limit, rows[run].admin_comment) == (
        "RUNNING", "None", 1, "rsauser", "debug", "5:00", None)
    spec = DirectiveSpec.from_admin_comment(rows[rsa].admin_comment or "")
    assert spec.data_in == "/tmp/in"
    assert DirectiveSpec.from_admin_comment(rows[pend].admin_comment or "").data_out == "/tmp/x|y"
    assert rows[pend].reason == "Priority"  # demoted by the lock-in
    assert [rows[f"{array}_{t}"].state for t in range(3)] == ["PENDING"] * 3
    assert (rows[JOBS["HELD"]].reason, rows[JOBS["HELD"]].priority) == ("JobHeldUser", 0)
    assert (rows[JOBS["DEPENDENT"]].admin_comment or "").startswith(" hold=after:;held=")
    locked = rows[JOBS["LOCKED_IN"]]
    assert (locked.priority, locked.reason) == (4294967000, "Resources")
    assert {r.state for r in rows.values()} >= {"COMPLETED", "CANCELLED"}
    # Slurm's identity of each job (core.scheduler.another_job), as 22.05 prints it
    assert all(len(r.submitted) == 19 and r.submitted[10] == "T" and r.restarts == 0
               for r in rows.values())


def test_one_jobs_identity() -> None:
    array = JOBS["ARRAY"]
    info = parse_job_info(read("squeue_job_info_array.txt"), f"{array}_1")
    assert (info.job_id, info.array_key, info.user, info.admin_comment) == (
        array, f"{array}_1", "rsauser", "")
    rsa = parse_job_info(read("squeue_job_info_rsa.txt"), JOBS["RSA"])
    assert rsa.array_key is None and rsa.admin_comment.startswith("rsa1:")


def test_pending_dependents_and_idle_nodes() -> None:
    pending = {job: (nodes, reason) for job, nodes, reason, _ in
               parse_pending(read("squeue_pending.txt"))}
    assert pending[JOBS["LOCKED_IN"]] == (1, "Resources")
    assert pending[JOBS["DEPENDENT"]] == (1, "Dependency")
    deps = parse_dependents(read("squeue_dependency.txt"), " hold=after:")
    assert [(d.job_id, d.dependency) for d in deps] == [
        (JOBS["DEPENDENT"], f"afterok:{JOBS['RUNNING']}(unfulfilled)")]
    assert deps[0].begin is not None  # the hold's begin time, read as epoch seconds
    assert parse_sinfo_partitions(read("sinfo_partitions.txt")) == {"debug": 0}


def test_the_lock_view_before_and_after() -> None:
    job = JOBS["LOCKED_IN"]
    before = parse_lock_view(read("squeue_lock_view_before.txt"), job)
    after = parse_lock_view(read("squeue_lock_view.txt"), job)
    assert before.priority == int(JOBS["ORIGINAL_PRIORITY"]) and after.priority == 4294967000
    # without accounting 24.11 names no QOS
    assert (after.state, after.qos) == ("PENDING", "(null)")


def test_no_accounting_reads_as_none_on_24_11() -> None:
    """24.11 prints ``AccountingStorageType = (null)`` without accounting: rsad's start-up
    check must still say that a QOS lock-in cannot work (on main it blamed priority/basic
    only) and must not warn about QOS enforcement of an accounting that is not there."""
    config = parse_show_config(read("scontrol_show_config.txt"))
    assert config["AccountingStorageType"] == "(null)"
    assert config["SLURM_VERSION"] == "24.11.5"
    assert lockin_problem("qos", 1_000_000, config) == (
        "slurm.lockin.method is qos but Slurm has no accounting "
        "(AccountingStorageType=(null)), so it accepts qos= and ignores it: "
        "set slurm.lockin.method: priority, or enable slurmdbd")
    assert qos_warning("qos", "rsa-lockin", config) is None
    assert lockin_problem("priority", 4294967000, config) is None


def test_with_accounting_the_qos_lock_in_and_sacct() -> None:
    config = parse_show_config(read("scontrol_show_config_acct.txt"))
    assert config["AccountingStorageType"] == "accounting_storage/slurmdbd"
    assert lockin_problem("qos", 0, config) is None
    assert qos_warning("qos", "rsa-lockin", config) is None
    job = ACCT["LOCKED_IN"]
    before = parse_lock_view(read("squeue_lock_view_qos_before.txt"), job)
    after = parse_lock_view(read("squeue_lock_view_qos.txt"), job)
    assert (before.qos, before.priority) == ("normal", 1)
    assert (after.qos, after.priority) == ("rsa-lockin", 100000)
    array = ACCT["ARRAY"]
    assert parse_end_states(read("sacct_end_states.txt")) == {
        ACCT["COMPLETED"]: "COMPLETED", ACCT["FAILED"]: "FAILED",
        f"{array}_0": "COMPLETED", f"{array}_1": "COMPLETED",
        ACCT["CANCELLED_RUNNING"]: "CANCELLED"}


def test_the_sacct_log_of_sim_replay() -> None:
    log = read_sacct(str(DATA / "sacct_sim.txt"))
    by_raw = {j.job: j for j in log.jobs}
    assert by_raw[int(ACCT["COMPLETED"])].status == 1
    assert by_raw[int(ACCT["FAILED"])].status == 0
    assert by_raw[int(ACCT["CANCELLED_RUNNING"])].status == 5  # "CANCELLED by 0"
    assert len(log.jobs) == 7 and log.steps == 7 and log.unfinished == 0
    assert all(j.user == 4242 and j.procs == 1 and j.requested_time == 120
               for j in log.jobs)
