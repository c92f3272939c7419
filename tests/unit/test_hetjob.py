"""Heterogeneous jobs (issue 14): one RSA job per hetjob, keyed by its leader's id, on
real captured Slurm 22.05 output (lab/capture-hetjob.sh, tests/data/slurm/README.md)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rsa_scheduler.core.jobkey import from_env, job_key
from rsa_scheduler.hooks import payload
from rsa_scheduler.runner import Completed, Identity
from rsa_scheduler.slurm.cli import CliSlurm
from rsa_scheduler.slurm.parse import QueueRow, merge_hetjobs, parse_queue

DATA = Path(__file__).parent.parent / "data" / "slurm"


def hook_envs() -> list[tuple[str, dict[str, str]]]:
    """(hook, environment) of every hook run in the capture."""
    out: list[tuple[str, dict[str, str]]] = []
    env: dict[str, str] | None = None
    hook = ""
    for line in (DATA / "hooks_env_hetjob.log").read_text().splitlines():
        if line.startswith("=== hook="):
            hook, env = line.split()[1].split("=", 1)[1], {}
        elif line.startswith("=== end"):
            assert env is not None
            out.append((hook, env))
            env = None
        elif env is not None and "=" in line:
            k, v = line.split("=", 1)
            env[k] = v
    return out


def squeue_ids() -> tuple[str, str]:
    """The hetjob's and the fill job's ids in the squeue captures (squeue_hetjob.env:
    taken after the queue's own capture, in the same lab, so not the hooks log's)."""
    words = (DATA / "squeue_hetjob.env").read_text().split("\n", 1)[1].split()
    ids = dict(w.split("=", 1) for w in words)
    return ids["HETJOB"], ids["FILL"]


def test_squeue_lists_each_component_and_rsad_sees_one_job() -> None:
    het_id, fill = squeue_ids()
    for name in ("squeue_hetjob_pending.txt", "squeue_hetjob_running.txt"):
        raw = parse_queue((DATA / name).read_text())
        assert {f"{het_id}+0", f"{het_id}+1"} <= {r.job_id for r in raw}
        rows = {r.job_id: r for r in merge_hetjobs(raw)}
        assert f"{het_id}+0" not in rows and f"{het_id}+1" not in rows
        het = rows[het_id]
        assert het.num_nodes == 3  # 1 + 2: the RAMDISK is sized for every component
        assert het.admin_comment == "rsa1:i=/pfs/home/rsauser/capture-hetjob/in"
        assert het.user == "rsauser" and het.submitted and het.restarts == 0
    pending = {r.job_id: r for r in merge_hetjobs(parse_queue(
        (DATA / "squeue_hetjob_pending.txt").read_text()))}
    assert pending[het_id].state == "PENDING" and pending[fill].state == "RUNNING"


def test_the_leaders_none_gives_way_to_a_components_resources() -> None:
    """Seen in the lab right after submission: ``113+0`` None, ``113+1`` Resources."""
    def row(job: str, reason: str, nodes: int, comment: str | None = None) -> QueueRow:
        return QueueRow(job, "PENDING", reason, 5, nodes, "alice", comment)

    merged = merge_hetjobs([row("113+0", "None", 1, "rsa1:i=/a"), row("113+1", "Resources", 2),
                            row("9", "Priority", 1)])
    assert [(r.job_id, r.reason, r.num_nodes, r.admin_comment) for r in merged] == [
        ("113", "Resources", 3, "rsa1:i=/a"), ("9", "Priority", 1, None)]
    # the leader's own reason wins otherwise
    assert merge_hetjobs([row("5+0", "Priority", 1), row("5+1", "Resources", 1)])[0].reason \
        == "Priority"
    # a component without its leader (not listed): left as it is
    assert [r.job_id for r in merge_hetjobs([row("7+1", "Resources", 1)])] == ["7+1"]


def test_every_hook_of_every_component_names_the_hetjob() -> None:
    envs = [(h, e) for h, e in hook_envs() if e.get("SLURM_HET_JOB_ID") == "2"]
    seen = {(h, e["SLURM_JOB_ID"]) for h, e in envs}
    # slurmctld's hooks and every node's Prolog and Epilog, of both components (2 and 3)
    assert {("prolog_slurmctld", "2"), ("prolog_slurmctld", "3"), ("prolog", "2"),
            ("prolog", "3"), ("epilog", "3"), ("epilog_slurmctld", "3")} <= seen
    for _hook, env in envs:
        assert job_key(from_env(env)) == "2"
    offsets = {e["SLURM_JOB_ID"]: from_env(e).get("het_job_offset")
               for h, e in envs if h == "prolog_slurmctld"}
    assert offsets == {"2": "0", "3": "1"}
    lead = next(e for h, e in envs if h == "prolog_slurmctld" and e["SLURM_JOB_ID"] == "2")
    assert payload("prolog_slurmctld", lead)["nodes"] == lead.get(
        "SLURM_HET_JOB_NODELIST", lead["SLURM_JOB_NODELIST"])


class QosRunner:
    """The runner seam: answers squeue's QOS query as for a two-component hetjob."""

    def __init__(self, out: str) -> None:
        self.out = out

    def __call__(self, argv: Sequence[str], *, timeout: float, check: bool = True,
                 input: str | None = None, as_user: Identity | None = None,
                 env: Any = None, cwd: str | None = None) -> Completed:
        return Completed(tuple(argv), 0, self.out if "-O" in argv else "", "", 0.0)


def test_a_hetjobs_lock_in_remembers_the_leaders_qos() -> None:
    """squeue prints one line per component: the QOS to restore is the leader's."""
    runner = QosRunner("2+0|PENDING|normal|10|\n2+1|PENDING|low|10|\n")
    slurm = CliSlurm(bin_dir=Path("/usr/bin"), runner=runner, lockin_method="qos",
                     lockin_qos="rsa-lockin")
    assert slurm.lock_original("2") == "normal"


def test_rsads_incremental_poll_tracks_the_captured_hetjob(tmp_path: Path) -> None:
    """The squeue text rsad reads when job_submit.lua marks jobs (its per-line filter): the
    captured hetjob becomes one tracked job with both components' nodes."""
    from tests.unit.test_daemon import ScriptedSlurm, make_daemon, settle

    class TextSlurm(ScriptedSlurm):
        def queue_text(self) -> str:
            return (DATA / "squeue_hetjob_pending.txt").read_text()

    slurm = TextSlurm()
    d = make_daemon(tmp_path, slurm, [])
    d.script_source = "job_submit"
    d.poll()
    settle(d)
    het_id = squeue_ids()[0]
    assert set(d.sched.records) == {het_id}
    assert d.sched.records[het_id].compute_nodes == 3
