"""The optional pyslurm backend with a stand-in pyslurm module (PyPI has none for Slurm
22.05, so tests/integration/test_pyslurm.py skips in the lab): its import guard, how its
Job objects become queue rows, and that rsad reads the queue through it and never through
squeue, while lock-in and comments go through scontrol."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rsa_scheduler.core.directives import DirectiveSpec
from rsa_scheduler.core.states import JobState
from rsa_scheduler.runner import Completed, Identity
from rsa_scheduler.slurm.cli import CliSlurm
from rsa_scheduler.slurm.parse import QueueRow
from rsa_scheduler.slurm.port import SlurmError
from rsa_scheduler.slurm.pyslurm_backend import PySlurm, _load, rows_from_jobs
from tests.unit.test_daemon import make_daemon, settle

SPEC = DirectiveSpec(data_in="/pfs/in", data_out="/pfs/out")


def job(job_id: int, state: str = "PENDING", reason: str | None = "Resources",
        **kw: Any) -> SimpleNamespace:
    fields: dict[str, Any] = dict(id=job_id, array_id=None, state=state, state_reason=reason,
                                  priority=100, num_nodes=2, user_name="alice",
                                  admin_comment=SPEC.to_admin_comment())
    fields.update(kw)
    return SimpleNamespace(**fields)


class FakePySlurm:
    """What rsad uses of pyslurm: ``Jobs.load()`` returning a dict of Job objects."""

    def __init__(self) -> None:
        self.jobs: dict[int, SimpleNamespace] = {}
        self.loads = 0
        self.fail: Exception | None = None
        outer = self

        class Jobs:
            @staticmethod
            def load() -> dict[int, SimpleNamespace]:
                outer.loads += 1
                if outer.fail is not None:
                    raise outer.fail
                return dict(outer.jobs)

        self.Jobs = Jobs


class RecordingRunner:
    """The runner seam of the scontrol side: records argv, answers like scontrol."""

    def __init__(self) -> None:
        self.argv: list[list[str]] = []

    def __call__(self, argv: Sequence[str], *, timeout: float, check: bool = True,
                 input: str | None = None, as_user: Identity | None = None,
                 env: Any = None, cwd: str | None = None) -> Completed:
        self.argv.append(list(argv))
        out = "normal|\n" if "-o" in argv else ""
        if argv[0].endswith("squeue") and "-j" in argv:  # the lock-in's view of the job
            out = f"{argv[list(argv).index('-j') + 1]}|PENDING|normal|100|\n"
        return Completed(tuple(argv), 0, out, "", 0.0)


def test_missing_pyslurm_is_one_actionable_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyslurm", None)  # import raises ImportError
    with pytest.raises(SlurmError, match=r"pyslurm is not importable.*slurm.backend: cli"):
        _load()
    with pytest.raises(SlurmError):
        PySlurm(CliSlurm())


def test_rows_follow_the_cli_conventions() -> None:
    rows = rows_from_jobs([
        job(7),
        job(8, state="RUNNING", reason=None, priority=None, num_nodes=None,
            admin_comment=""),
        job(12, array_id=9, array_task_id=3),
    ])
    assert rows == [
        QueueRow("7", "PENDING", "Resources", 100, 2, "alice", SPEC.to_admin_comment()),
        QueueRow("8", "RUNNING", "None", 0, 1, "alice", None),
        QueueRow("9_3", "PENDING", "Resources", 100, 2, "alice", SPEC.to_admin_comment()),
    ]


def test_an_rpc_error_is_a_slurm_error() -> None:
    fake = FakePySlurm()
    fake.fail = RuntimeError("Unable to contact slurm controller")
    with pytest.raises(SlurmError, match=r"could not load the job list.*scontrol ping"):
        PySlurm(CliSlurm(), module=fake).queue()


def test_rsad_reads_the_queue_through_pyslurm_and_writes_through_scontrol(
        tmp_path: Path) -> None:
    fake, runner = FakePySlurm(), RecordingRunner()
    slurm = PySlurm(CliSlurm(bin_dir=Path("/opt/slurm/bin"), runner=runner), module=fake)
    assert not hasattr(slurm, "queue_text")  # rsad cannot fall back to squeue
    seen: list[str] = []
    d = make_daemon(tmp_path, slurm, seen)
    try:
        fake.jobs = {7: job(7), 8: job(8, reason="Priority"),
                     9: job(9, admin_comment=None)}  # 9: no RSA directives
        d.poll()
        settle(d)
        assert fake.loads == 1
        assert d.sched.records["7"].rsa_state.value == "locked-in"
        assert set(d.sched.records) == {"7", "8"}
        fake.jobs[7] = job(7, state="RUNNING", reason=None)
        d.poll()
        settle(d)
        assert fake.loads == 2 and d.sched.records["7"].job_state is JobState.RUNNING
        # the lock-in reads the job's own priority (squeue -j 7) and sets the lock-in
        # priority (the default method); the queue itself is never read with squeue
        queue_reads = [a for a in runner.argv if a[0].endswith("squeue") and "-j" not in a]
        assert queue_reads == []
        assert {a[0] for a in runner.argv} == {"/opt/slurm/bin/squeue",
                                               "/opt/slurm/bin/scontrol"}
        assert any(f"priority={slurm.cli.lockin_priority}" in a for a in runner.argv)
    finally:
        d.shutdown()
