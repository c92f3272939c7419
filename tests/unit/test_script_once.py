"""PRE/POSTPROCESS run at most once per attempt (issue 13): the start is recorded
durably before the script runs; an action re-issued after an rsad restart that finds its
own start recorded does not run the script a second time (the earlier run was killed by
fencing), it fails the attempt so the retry, a new attempt, runs it from the start."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import PurePosixPath
from typing import Any, cast

import pytest

from rsa_scheduler.daemon.data import _script
from rsa_scheduler.daemon.executors import ActionContext
from rsa_scheduler.errors import RsaError
from rsa_scheduler.fs.base import MountSpec
from rsa_scheduler.hosts import CancelToken
from rsa_scheduler.staging.engine import StagingEngine
from rsa_scheduler.staging.report import ScriptResult
from tests.unit.corekit import make_action

PACK = ("/home/u/pack.sh",)
OUT = PurePosixPath("/pfs/u/out")

SPEC = MountSpec("moosefs", "job7-c1", ("rsa1",), "/run/rsa/mnt/job7-c1", {})


class Engine:
    def __init__(self) -> None:
        self.runs: list[tuple[str, ...]] = []

    def run_script(self, argv: Sequence[str], phase: str, *, ramdisk: str,
                   data_in: str = "", data_out: str = "") -> ScriptResult:
        self.runs.append(tuple(argv))
        return ScriptResult("rsa1", phase, tuple(argv), 0, "packed\n", "", 0.1)


def ctx(action_id: str, facts: Mapping[str, Any], marks: list[Mapping[str, Any]]
        ) -> ActionContext:
    action = make_action(action_id, postprocess=PACK, data_out=OUT)
    return ActionContext(action=action, cancel=CancelToken(), progress=lambda _d: None,
                         facts=facts, milestone=marks.append)


def test_the_start_is_recorded_before_the_script_runs() -> None:
    eng, marks = Engine(), []  # type: ignore[var-annotated]
    out = _script(ctx("7/1/stage-out/9", {}, marks), cast(StagingEngine, eng), SPEC, PACK,
                  "postprocess", "stage-out", data_in=None, data_out=OUT)
    assert marks == [{"script_started": {"action": "7/1/stage-out/9",
                                         "script": "postprocess"}}]
    assert eng.runs == [("/home/u/pack.sh",)] and out["script"]["stdout"] == "packed\n"


def test_a_reissued_attempt_that_already_started_it_does_not_run_it_again() -> None:
    eng, marks = Engine(), []  # type: ignore[var-annotated]
    facts = {"script_started": {"action": "7/1/stage-out/9", "script": "postprocess"}}
    with pytest.raises(RsaError, match="interrupted when rsad restarted") as e:
        _script(ctx("7/1/stage-out/9", facts, marks), cast(StagingEngine, eng), SPEC, PACK,
                "postprocess", "stage-out", data_in=None, data_out=OUT)
    assert "PermanentError" not in type(e.value).__name__  # retried, not given up
    assert eng.runs == [] and marks == []


def test_the_next_attempt_runs_it() -> None:
    eng, marks = Engine(), []  # type: ignore[var-annotated]
    facts = {"script_started": {"action": "7/1/stage-out/9", "script": "postprocess"}}
    _script(ctx("7/1/stage-out/12", facts, marks), cast(StagingEngine, eng), SPEC, PACK,
            "postprocess", "stage-out", data_in=None, data_out=OUT)
    assert len(eng.runs) == 1
