"""The adapter's parsers on real output of the Slurm releases besides the lab's 22.05:
24.11.5 (Debian 13's) and 26.05.5 (Debian testing's), each captured by
tests/slurm_release (tests/data/slurm/24.11/README.md, 26.05/README.md); rsad's start-up
check on their ``scontrol show config`` (``(null)`` where 22.05 printed
``accounting_storage/none``), what ``rsa nodes check --compute`` reads of a node's Slurm
(``slurmd -V``), the mail line of ``scontrol show job``, and a failed stage-in's reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from rsa_scheduler.core.directives import DirectiveSpec
from rsa_scheduler.node.check import release, version_number
from rsa_scheduler.sim.sacct import read_sacct
from rsa_scheduler.slurm.cli import (
    lockin_problem,
    multifactor_top,
    parse_job_mail,
    parse_show_config,
    qos_warning,
)
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

DATA = Path(__file__).parent.parent / "data" / "slurm"
RELEASES = ("24.11", "26.05")


class Capture:
    """One release's capture directory and the job ids it recorded."""

    def __init__(self, version: str) -> None:
        self.version = version
        self.dir = DATA / version
        self.jobs = self.ids("jobs.env")
        self.acct = self.ids("jobs_acct.env")

    def ids(self, name: str) -> dict[str, str]:
        return dict(item.split("=") for item in
                    (self.dir / name).read_text().splitlines()[1].split())

    def read(self, name: str) -> str:
        return (self.dir / name).read_text()


@pytest.fixture(params=RELEASES)
def cap(request: pytest.FixtureRequest) -> Capture:
    return Capture(request.param)


def test_the_queue(cap: Capture) -> None:
    jobs = cap.jobs
    rows = {r.job_id: r for r in parse_queue(cap.read("squeue_rsa.txt"))}
    run, rsa, pend, array = jobs["RUNNING"], jobs["RSA"], jobs["PENDING"], jobs["ARRAY"]
    assert (rows[run].state, rows[run].reason, rows[run].num_nodes, rows[run].user,
            rows[run].partition, rows[run].time_limit, rows[run].admin_comment) == (
        "RUNNING", "None", 1, "rsauser", "debug", "5:00", None)
    spec = DirectiveSpec.from_admin_comment(rows[rsa].admin_comment or "")
    assert spec.data_in == "/tmp/in"
    assert DirectiveSpec.from_admin_comment(rows[pend].admin_comment or "").data_out == "/tmp/x|y"
    assert rows[pend].reason == "Priority"  # demoted by the lock-in
    assert [rows[f"{array}_{t}"].state for t in range(3)] == ["PENDING"] * 3
    assert (rows[jobs["HELD"]].reason, rows[jobs["HELD"]].priority) == ("JobHeldUser", 0)
    assert (rows[jobs["DEPENDENT"]].admin_comment or "").startswith(" hold=after:;held=")
    locked = rows[jobs["LOCKED_IN"]]
    assert (locked.priority, locked.reason) == (4294967000, "Resources")
    assert {r.state for r in rows.values()} >= {"COMPLETED", "CANCELLED"}
    # Slurm's identity of each job (core.scheduler.another_job), as 22.05 prints it
    assert all(len(r.submitted) == 19 and r.submitted[10] == "T" and r.restarts == 0
               for r in rows.values())


def test_one_jobs_identity(cap: Capture) -> None:
    array = cap.jobs["ARRAY"]
    info = parse_job_info(cap.read("squeue_job_info_array.txt"), f"{array}_1")
    assert (info.job_id, info.array_key, info.user, info.admin_comment) == (
        array, f"{array}_1", "rsauser", "")
    rsa = parse_job_info(cap.read("squeue_job_info_rsa.txt"), cap.jobs["RSA"])
    assert rsa.array_key is None and rsa.admin_comment.startswith("rsa1:")


def test_pending_dependents_and_idle_nodes(cap: Capture) -> None:
    jobs = cap.jobs
    pending = {job: (nodes, reason) for job, nodes, reason, _ in
               parse_pending(cap.read("squeue_pending.txt"))}
    assert pending[jobs["LOCKED_IN"]] == (1, "Resources")
    assert pending[jobs["DEPENDENT"]] == (1, "Dependency")
    deps = parse_dependents(cap.read("squeue_dependency.txt"), " hold=after:")
    assert [(d.job_id, d.dependency) for d in deps] == [
        (jobs["DEPENDENT"], f"afterok:{jobs['RUNNING']}(unfulfilled)")]
    assert deps[0].begin is not None  # the hold's begin time, read as epoch seconds
    assert parse_sinfo_partitions(cap.read("sinfo_partitions.txt")) == {"debug": 0}


def test_the_lock_view_before_and_after(cap: Capture) -> None:
    job = cap.jobs["LOCKED_IN"]
    before = parse_lock_view(cap.read("squeue_lock_view_before.txt"), job)
    after = parse_lock_view(cap.read("squeue_lock_view.txt"), job)
    assert before.priority == int(cap.jobs["ORIGINAL_PRIORITY"])
    assert after.priority == 4294967000
    # without accounting neither release names a QOS
    assert (after.state, after.qos) == ("PENDING", "(null)")


def test_no_accounting_reads_as_none(cap: Capture) -> None:
    """24.11 and 26.05 print ``AccountingStorageType = (null)`` without accounting: rsad's
    start-up check must still say that a QOS lock-in cannot work (before 24.11's capture it
    blamed priority/basic only) and must not warn about QOS enforcement of an accounting
    that is not there."""
    config = parse_show_config(cap.read("scontrol_show_config.txt"))
    assert config["AccountingStorageType"] == "(null)"
    assert config["SLURM_VERSION"] == f"{cap.version}.5"
    assert lockin_problem("qos", 1_000_000, config) == (
        "slurm.lockin.method is qos but Slurm has no accounting "
        "(AccountingStorageType=(null)), so it accepts qos= and ignores it: "
        "set slurm.lockin.method: priority, or enable slurmdbd")
    assert qos_warning("qos", "rsa-lockin", config) is None
    assert lockin_problem("priority", 4294967000, config) is None
    assert config["MailProg"] == "/bin/mail" and config["SlurmUser"] == "root(0)"


def test_with_accounting_the_qos_lock_in_and_sacct(cap: Capture) -> None:
    config = parse_show_config(cap.read("scontrol_show_config_acct.txt"))
    assert config["AccountingStorageType"] == "accounting_storage/slurmdbd"
    assert lockin_problem("qos", 0, config) is None
    assert qos_warning("qos", "rsa-lockin", config) is None
    # priority/multifactor with only the QOS weight: rsad's bound of what it computes
    assert multifactor_top(config) == 100000
    assert lockin_problem("priority", 100000, config) is not None
    job = cap.acct["LOCKED_IN"]
    before = parse_lock_view(cap.read("squeue_lock_view_qos_before.txt"), job)
    after = parse_lock_view(cap.read("squeue_lock_view_qos.txt"), job)
    assert (before.qos, before.priority) == ("normal", 1)
    assert (after.qos, after.priority) == ("rsa-lockin", 100000)
    array = cap.acct["ARRAY"]
    assert parse_end_states(cap.read("sacct_end_states.txt")) == {
        cap.acct["COMPLETED"]: "COMPLETED", cap.acct["FAILED"]: "FAILED",
        f"{array}_0": "COMPLETED", f"{array}_1": "COMPLETED",
        cap.acct["CANCELLED_RUNNING"]: "CANCELLED"}


def test_the_sacct_log_of_sim_replay(cap: Capture) -> None:
    log = read_sacct(str(cap.dir / "sacct_sim.txt"))
    by_raw = {j.job: j for j in log.jobs}
    assert by_raw[int(cap.acct["COMPLETED"])].status == 1
    assert by_raw[int(cap.acct["FAILED"])].status == 0
    assert by_raw[int(cap.acct["CANCELLED_RUNNING"])].status == 5  # "CANCELLED by 0"
    assert len(log.jobs) == 7 and log.steps == 7 and log.unfinished == 0
    assert all(j.user == 4242 and j.procs == 1 and j.requested_time == 120
               for j in log.jobs)


def test_the_mail_line_of_scontrol_show_job(cap: Capture) -> None:
    """rsad's mail asks ``scontrol show job`` (daemon/mail.py): the job submitted with
    ``--mail-type=END,FAIL --mail-user=alice@example.org`` has the one line; a job that
    asked for none has no Mail line at all on 24.11 and 26.05 (None: no mail)."""
    shown = cap.read("scontrol_show_job.txt")
    assert shown.startswith(f"JobId={cap.jobs['PENDING']} ")
    assert parse_job_mail(shown) == ("alice@example.org", "END,FAIL")
    assert parse_job_mail(cap.read("scontrol_show_job_no_mail.txt")) is None


def test_the_nodes_slurm_release(cap: Capture) -> None:
    """``rsa nodes check --compute`` compares ``slurmd -V``'s release with the SPANK
    plugin's plugin_version (tests/slurm_release reads both from the same node)."""
    number = version_number(cap.read("slurmd_version.txt"))
    assert number is not None and release(number) == cap.version


def test_a_failed_stage_in_is_one_job_with_its_reason(cap: Capture) -> None:
    """rsad failed a job's stage-in with a message naming a file ``a|b`` and a second line
    that reads as a job row of root's: Slurm's reason holds burst_buffer.lua's one line
    (``%7C``), and rsad's queue read sees the job as it is and no other. 25.05 and later
    name the hold in the reason (``JobHeldAdmin: ... failed:``)."""
    failed = cap.ids("jobs_stage_in_failed.env")["FAILED"]
    rows = {r.job_id: r for r in parse_queue(cap.read("squeue_stage_in_failed.txt"))}
    assert "999999" not in rows and {r.user for r in rows.values()} == {"rsauser"}
    row = rows[failed]
    assert (row.state, row.priority, row.num_nodes) == ("PENDING", 0, 1)
    assert DirectiveSpec.from_admin_comment(row.admin_comment or "").data_in == "/tmp/in"
    hook = {"24.11": "slurm_bb_test_data_in:",
            "26.05": "JobHeldAdmin: slurm_bb_test_data_in failed:"}[cap.version]
    assert row.reason.startswith(f"burst_buffer/lua: {hook} cannot stage in /tmp/in/a%7Cb: "
                                 "gone 999999%7CRUNNING%7C"), row.reason
