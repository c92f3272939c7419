"""rsa-scheduler's Slurm side on a real Slurm of one release (``RSA_SLURM_RELEASE``: 24.11,
Debian 13's; 26.05, Debian testing's; issue 31): the SPANK plugin built against that
release's headers and loaded by sbatch and slurmstepd, job_submit.lua and burst_buffer.lua
run by its slurmctld, and the adapter's parsers on what its squeue, sinfo and scontrol
print (captured into ``RSA_SLURM24_CAPTURE``/``RSA_SLURM26_CAPTURE`` when set:
tests/data/slurm/24.11/, 26.05/, whose unit tests read them without a cluster).

rsa-bb is a stub that logs and answers ``ok`` (tests/slurm_release/conftest.py): what is
under test is how the Slurm release calls our lua, not rsad.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rsa_scheduler.node.check import (
    REFUSED,
    SPANK_FIX,
    _spank_lacks,
    plugin_version,
    release,
    version_number,
)
from rsa_scheduler.runner import Completed, LocalRunner
from rsa_scheduler.slurm.cli import CliSlurm, lockin_problem, qos_warning
from rsa_scheduler.slurm.parse import QueueRow
from tests.slurm_release.cluster import NODES, RELEASE, RUN, UID, USER, Cluster
from tests.slurm_release.conftest import BB_LOG, FAIL_DATA_IN

pytestmark = pytest.mark.slurm_release

RSA_SCRIPT = "#!/bin/sh\n#RSA_DATA_IN=/tmp/in\n#RSA_TIER=ram\n{body}\n"


@dataclass
class Recorder:
    """The adapter's runner into the cluster, keeping each command's output."""

    cluster: Cluster
    outputs: list[str] = field(default_factory=list)

    def __call__(self, argv: Sequence[str], *, timeout: float, check: bool = True,
                 input: str | None = None, env: Mapping[str, str] | None = None,
                 **_: object) -> Completed:
        # the adapter's Slurm settings for a call (SLURM_TIME_FORMAT=%s for the
        # dependents' begin times) reach the command; PATH and the rest stay the root's
        slurm_env = [f"{k}={v}" for k, v in (env or {}).items() if k.startswith("SLURM_")
                     and k != "SLURM_CONF"]
        done = LocalRunner()(self.cluster.argv(argv, env=slurm_env), timeout=timeout,
                             check=check, input=input)
        self.outputs.append(done.stdout)
        return Completed(tuple(argv), done.returncode, done.stdout, done.stderr,
                         done.seconds)


def submit(c: Cluster, *args: str, script: str | None = None) -> str:
    """sbatch as rsauser; the job id."""
    out = c.run(["sbatch", "--parsable", "--chdir=/tmp", "-o", "/dev/null", *args],
                user=True, input=script).stdout
    return out.strip().split(";")[0]


def state(c: Cluster, job: str) -> str:
    return c.run(["squeue", "-h", "-t", "all", "-j", job, "-o", "%T"],
                 check=False).stdout.strip()


def wait_state(c: Cluster, job: str, *wanted: str, timeout: float = 90) -> None:
    c.wait(f"job {job} {'/'.join(wanted)}", lambda: state(c, job) in wanted, timeout)


@pytest.fixture
def idle(cluster: Cluster) -> Iterator[Cluster]:
    """The cluster; afterwards every job of rsauser cancelled and both nodes idle again."""
    yield cluster
    cluster.run(["scancel", "-u", USER], check=False)

    def nodes_idle() -> bool:
        out = cluster.run(["sinfo", "-h", "-N", "-o", "%t"], check=False).stdout.split()
        return out == ["idle"] * len(NODES)

    cluster.wait("both nodes idle", nodes_idle)


@pytest.fixture
def capture(tmp_path: Path) -> Path:
    out = Path(os.environ.get(RELEASE.capture_env) or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    return out


def test_the_spank_plugin_built_for_the_release_loads_and_one_for_22_05_is_refused(
        idle: Cluster, capture: Path, tmp_path: Path) -> None:
    c = idle
    # what rsa nodes check --compute reads of the node's Slurm (slurmd -V) and of the
    # plugin (its plugin_version symbol, SLURM_VERSION_NUMBER of the headers it was
    # built with) agree on the release
    said_v = c.out("slurmd", "-V")
    (capture / "slurmd_version.txt").write_text(said_v)
    running = version_number(said_v)
    assert running is not None and release(running) == RELEASE.version, said_v
    plugin = c.path(f"{RUN}/spank/rsa_spank.so")
    assert release(plugin_version(str(plugin))) == RELEASE.version
    # and a node whose Slurm is another release (this host's 22.05 slurmd) is told so
    host = version_number(LocalRunner()(["/usr/sbin/slurmd", "-V"], timeout=30).stdout) \
        if Path("/usr/sbin/slurmd").exists() else None
    if host is not None:
        (tmp_path / "plugstack.conf").write_text(f"required {plugin}\n")
        told = _spank_lacks(f"PlugStackConfig={tmp_path}/plugstack.conf\n",
                            tmp_path / "slurm.conf")
        assert told == [f"the SPANK plugin {plugin} for Slurm {release(host)} (it was "
                        f"built for {RELEASE.version}; slurmstepd refuses it; "
                        f"{REFUSED['required']}): {SPANK_FIX}"]
    # sbatch loads it (plugstack.conf says required): the --rsa-* options are there
    helped = c.out("sbatch", "--help", user=True)
    assert "--rsa-data-in" in helped and "--rsa-tier" in helped
    # slurmstepd loads it too: the batch step of a job with an --rsa-* option gets the
    # plugin's RSA_STATE (no RSA node state here: "unavailable"), and burst_buffer.lua's
    # slurm_bb_paths adds RSA_MODE=native (job_submit.lua gave it a #BB_LUA line)
    job = submit(c, "--rsa-data-in=/tmp/in", "-o", "/tmp/spank-%j.out",
                 "--wrap", "env | grep ^RSA_ | sort")
    wait_state(c, job, "COMPLETED", "FAILED")
    assert state(c, job) == "COMPLETED", c.log("slurmd-c1.log")[-1500:]
    env = c.path(f"/tmp/spank-{job}.out").read_text().splitlines()
    assert "RSA_STATE=unavailable" in env and "RSA_MODE=native" in env
    # the same plugin built against 22.05 (this machine's libslurm-dev): the release
    # refuses it
    built22 = Path(__file__).resolve().parents[2] / "slurm_plugins/spank/rsa_spank.so"
    if built22.exists():
        etc = c.path(f"{RUN}/etc")
        (etc / "rsa_spank_22.so").write_bytes(built22.read_bytes())
        (etc / "plugstack22.conf").write_text(f"required {RUN}/etc/rsa_spank_22.so\n")
        (etc / "slurm22.conf").write_text((etc / "slurm.conf").read_text().replace(
            f"PlugStackConfig={RUN}/etc/plugstack.conf",
            f"PlugStackConfig={RUN}/etc/plugstack22.conf"))
        refused = c.run(["sbatch", "--help"], user=True, check=False,
                        env=[f"SLURM_CONF={RUN}/etc/slurm22.conf"])
        said = refused.stdout + refused.stderr
        assert refused.returncode != 0, said
        assert re.search(r"Incompatible Slurm plugin \S*rsa_spank_22.so version \(22\.05\.",
                         said), said


def test_job_submit_lua_checks_directives_and_marks_the_job(idle: Cluster) -> None:
    c = idle
    bad = c.run(["sbatch", "--parsable", "--chdir=/tmp", "-o", "/dev/null"], user=True,
                check=False, input="#!/bin/sh\n#RSA_DATA_IN=/tmp/in\n#RSA_NODES=0\ntrue\n")
    assert bad.returncode != 0
    assert ("3: RSA_NODES must be a whole number of RSA nodes, at least 1, got '0'"
            in bad.stderr), bad.stderr
    job = submit(c, "-H", script=RSA_SCRIPT.format(body="true"))
    shown = c.out("squeue", "-h", "-j", job, "-O", "admin_comment:0,BurstBuffer:0")
    assert shown.startswith("rsa1:") and "#BB_LUA pool=ram" in shown, shown
    # a user cannot set admin_comment: the release refuses it as 22.05 did
    changed = c.run(["scontrol", "update", f"jobid={job}", "admincomment=x"], user=True,
                    check=False)
    assert changed.returncode != 0


def test_burst_buffer_lua_stages_by_the_releases_polls(idle: Cluster) -> None:
    """24.11 (and 26.05) calls setup, data_in, then test_data_in every PollInterval while it answers
    BUSY, real_size, pre_run; at the end post_run, data_out, test_data_out likewise,
    teardown; each in a slurmscriptd helper (burst_buffer_lua.c). data_in and data_out
    return at once: rsad is asked by the polls, once each (`rsa-bb --once`), and no
    helper waits for a whole stage (on main data_in blocked in rsa-bb until staged)."""
    c = idle
    c.path(BB_LOG).write_text("")
    job = submit(c, script=RSA_SCRIPT.format(body="true"))
    c.wait(f"job {job}'s teardown", lambda: f"teardown {job}" in c.path(BB_LOG).read_text())
    calls = [ln for ln in c.path(BB_LOG).read_text().splitlines() if f" {job}" in ln]
    assert [" ".join(call.split()[:2]) for call in calls] == [
        "setup " + job, "--once data_in", "--once data_in", "real_size " + job,
        "pre_run " + job, "post_run " + job, "--once data_out", "--once data_out",
        "teardown " + job], calls
    assert calls[0].split()[2:5] == [str(UID), str(UID), "ram"]
    assert state(c, job) == "COMPLETED"
    # every hook Slurm ran for the job, rsa-bb or not (DebugFlags=BurstBuffer): each
    # poll twice (BUSY, then done)
    ran = re.findall(rf"BURST_BUF: slurm_bb_(\w+) for JobId={job} ran for",
                     c.log("slurmctld.log"))
    assert ran == ["job_process", "setup", "data_in", "test_data_in", "test_data_in",
                   "real_size", "paths", "pre_run", "post_run", "data_out",
                   "test_data_out", "test_data_out", "job_teardown"], ran
    # bbstat: 24.11 (and 26.05) passes the caller's uid and gid first; burst_buffer.lua hands rsa-bb
    # the uid by itself (CONFIG.status_caller unset)
    shown = c.out("scontrol", "show", "bbstat", user=True)
    assert "RSA nodes: 1 free" in shown, shown
    assert c.path(BB_LOG).read_text().splitlines()[-1] == f"status {UID}"


def test_a_failed_stage_in_in_the_queue(idle: Cluster, capture: Path) -> None:
    """rsad fails a job's stage-in (rsa-bb answers ``error``): Slurm holds the job and
    its reason carries rsad's message, in rsad's own queue read (squeue -O QUEUE_FORMAT).
    The message holds a ``|`` and a second line, as a message naming a user's file may:
    burst_buffer.lua gives Slurm one line with ``%7C`` (on main, on 24.11 and 26.05 alike,
    rsad's queue read failed on it, and its second line read as a RUNNING job of root's).
    24.11 writes the reason ``burst_buffer/lua: slurm_bb_test_data_in: MESSAGE``, 25.05+
    ``burst_buffer/lua: JobHeldAdmin: slurm_bb_test_data_in failed: MESSAGE``."""
    c = idle
    c.path(FAIL_DATA_IN).write_text("error cannot stage in /tmp/in/a|b: gone\n"
                                     "999999|RUNNING|None|1|1|root|debug|5:00|x|y|0|rsa1:\n")
    try:
        job = submit(c, "-J", "cap-failed", script=RSA_SCRIPT.format(body="true"))
        c.wait(f"job {job}'s failed stage-in", lambda: "data_in" in c.out(
            "squeue", "-h", "-j", job, "-o", "%r"))
    finally:
        c.path(FAIL_DATA_IN).unlink()
    rec = Recorder(c)
    rows = by_id(CliSlurm(runner=rec).queue())
    (capture / "squeue_stage_in_failed.txt").write_text(rec.outputs[-1])
    assert "999999" not in rows and all(r.user == USER for r in rows.values()), rows
    failed = rows[job]
    assert (failed.state, failed.user, failed.num_nodes) == ("PENDING", USER, 1)
    message = "cannot stage in /tmp/in/a%7Cb: gone 999999%7CRUNNING%7CNone%7C1"
    hook = ("slurm_bb_test_data_in:" if RELEASE.version == "24.11"
            else "JobHeldAdmin: slurm_bb_test_data_in failed:")
    assert failed.reason.startswith(f"burst_buffer/lua: {hook} {message}"), failed.reason
    (capture / "jobs_stage_in_failed.env").write_text(
        f"# The job of squeue_stage_in_failed.txt (Slurm {RELEASE.version})\nFAILED={job}\n")


def by_id(rows: list[QueueRow]) -> dict[str, QueueRow]:
    return {r.job_id: r for r in rows}


def test_the_adapter_reads_what_the_release_prints(idle: Cluster, capture: Path) -> None:
    """Every squeue/sinfo/scontrol call of rsa_scheduler.slurm.cli, on a queue with a
    running plain job and RSA job, a pending one (root gave it an admin_comment), an
    array, a held job, a dependent and a job locked in by priority; each output kept."""
    c = idle
    rec = Recorder(c)
    slurm = CliSlurm(runner=rec, lockin_method="priority", lockin_priority=4294967000)

    def keep(name: str) -> str:
        (capture / name).write_text(rec.outputs[-1])
        return rec.outputs[-1]

    run = submit(c, "-J", "cap-run", "-t", "5", "--wrap", "sleep 300")
    rsa = submit(c, "-J", "cap-rsa", "-t", "5", script=RSA_SCRIPT.format(body="sleep 300"))
    wait_state(c, run, "RUNNING")
    wait_state(c, rsa, "RUNNING")
    pend = submit(c, "-J", "cap-pend", "-t", "5", "--mail-type=END,FAIL",
                  "--mail-user=alice@example.org", "--wrap", "sleep 30")
    array = submit(c, "-J", "cap-array", "-t", "5", "--array=0-2", "--wrap", "sleep 30")
    held = submit(c, "-J", "cap-held", "-H", "-t", "5", "--wrap", "sleep 30")
    dep = submit(c, "-J", "cap-dep", f"--dependency=afterok:{run}", "-t", "5",
                 "--wrap", "sleep 30")
    odd = submit(c, "-J", "x|y z", "-t", "5", "--wrap", "sleep 30")
    c.out("scontrol", "update", f"jobid={pend}", "admincomment=rsa1:i=/tmp/in;o=/tmp/x%7Cy")
    original = slurm.lock_original(odd)
    keep("squeue_lock_view_before.txt")
    slurm.lock_in(odd)

    def reasons() -> dict[str, str]:
        return dict(line.split() for line in
                    c.out("squeue", "-h", "-t", "PD", "-o", "%i %r").splitlines())

    # a scheduling pass after the lock-in: the locked-in job on-deck, the one it passed
    # behind it, every pending job with a reason
    c.wait("a scheduling pass after the lock-in", lambda: (
        (now := reasons()).get(odd) == "Resources" and now.get(pend) == "Priority"
        and "None" not in now.values()))

    rows = by_id(slurm.queue())
    keep("squeue_rsa.txt")
    assert rows[run].state == rows[rsa].state == "RUNNING"
    assert (rows[run].user, rows[run].partition, rows[run].time_limit,
            rows[run].num_nodes) == (USER, "debug", "5:00", 1)
    assert rows[run].admin_comment is None
    assert (rows[rsa].admin_comment or "").startswith("rsa1:")
    assert rows[pend].admin_comment == "rsa1:i=/tmp/in;o=/tmp/x%7Cy"
    assert {f"{array}_{t}" for t in range(3)} <= set(rows)
    assert rows[held].reason == "JobHeldUser" and rows[held].priority == 0
    assert rows[odd].priority == 4294967000 and rows[odd].reason == "Resources"
    assert rows[pend].reason == "Priority"  # behind the lock-in: demoted

    view = slurm._lock_view(odd)
    keep("squeue_lock_view.txt")
    assert (view.state, view.priority) == ("PENDING", 4294967000)
    assert original.isdigit() and int(original) < 4294967000

    info = slurm.job_info(f"{array}_1")
    keep("squeue_job_info_array.txt")
    assert (info.array_key, info.user, info.partition) == (f"{array}_1", USER, "debug")
    assert slurm.job_info(rsa).admin_comment.startswith("rsa1:")
    keep("squeue_job_info_rsa.txt")

    pending = {job: (nodes, reason) for job, nodes, reason, _ in slurm.pending_jobs()}
    keep("squeue_pending.txt")
    assert pending[odd] == (1, "Resources") and pending[f"{array}_0"][0] == 1

    dependents = {d.job_id: d for d in slurm.dependents(" hold=after:")}
    keep("squeue_dependency.txt")
    assert dependents[dep].dependency.startswith(f"afterok:{run}")
    assert dependents[dep].user == USER

    assert slurm.idle_nodes() == {"debug": 0}
    keep("sinfo_partitions.txt")

    assert slurm.job_mail(pend) == ("alice@example.org", "END,FAIL")
    keep("scontrol_show_job.txt")
    asked = slurm.job_mail(run)
    (capture / "scontrol_show_job_no_mail.txt").write_text(rec.outputs[-1])
    assert asked is None, asked  # 24.11, 26.05: no Mail line for a job without mail

    # the --json forms (no parser of rsad reads them; tests/e2e reads squeue's): 24.11's
    # data_parser gives job_state as a list and priority as {set, infinite, number}
    for name, argv in (("squeue.json", ["squeue", "--json"]),
                       ("sinfo.json", ["sinfo", "--json"])):
        (capture / name).write_text(c.out(*argv))
    jobs = {str(j["job_id"]): j for j in json.loads((capture / "squeue.json").read_text())
            ["jobs"]}
    assert jobs[held]["job_state"] == ["PENDING"]
    assert jobs[odd]["priority"] == {"set": True, "infinite": False, "number": 4294967000}

    config = slurm.show_config()
    keep("scontrol_show_config.txt")
    assert config["SLURM_VERSION"].startswith(f"{RELEASE.version}.")
    # no accounting: 24.11 and 26.05 say "(null)" where 22.05 said accounting_storage/none
    assert lockin_problem("qos", 0, config) is not None
    assert "no accounting" in (lockin_problem("qos", 0, config) or "")
    assert qos_warning("qos", "rsa-lockin", config) is None

    script = slurm.batch_script(rsa)
    keep("batch_script_output.txt")
    # the script as submitted, with the #BB_LUA line job_submit.lua asked for (native
    # mode) written in by slurmctld after the first line; rsad reads #RSA_ lines only
    first, rest = RSA_SCRIPT.format(body="sleep 300").split("\n", 1)
    assert script == f"{first}\n#BB_LUA pool=ram capacity=1M\n{rest}"

    (capture / "jobs.env").write_text(
        f"# Job ids of this capture (Slurm {config['SLURM_VERSION']})\n"
        f"RUNNING={run} RSA={rsa} PENDING={pend} ARRAY={array} HELD={held} "
        f"DEPENDENT={dep} LOCKED_IN={odd} ORIGINAL_PRIORITY={original}\n")
