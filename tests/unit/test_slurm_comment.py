"""The job comment is the user's when they gave one (issue 32): CliSlurm.set_comment
reads it first and writes rsad's status only over an empty comment or rsad's own."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from rsa_scheduler.runner import Completed, Identity
from rsa_scheduler.slurm.cli import CliSlurm, users_comment

pytestmark = pytest.mark.unit


class Comments:
    """squeue -o %k shows ``comment``; scontrol update Comment= sets it."""

    def __init__(self, comment: str) -> None:
        self.comment = comment
        self.updates: list[str] = []

    def __call__(self, argv: Sequence[str], *, timeout: float, check: bool = True,
                 input: str | None = None, as_user: Identity | None = None,
                 env: Any = None, cwd: str | None = None) -> Completed:
        args = list(argv)
        out = ""
        if args[0].endswith("squeue"):
            out = f"{self.comment}\n"
        elif args[1] == "update":
            self.comment = args[3].partition("=")[2]
            self.updates.append(self.comment)
        return Completed(tuple(args), 0, out, "", 0.0)


@pytest.mark.parametrize("mine", ["mine", "  spaced  text", "rsa: lower case is not ours",
                                  "x RSA: later"])
def test_the_users_own_comment_is_never_written_over(mine: str) -> None:
    slurm = Comments(mine)
    CliSlurm(runner=slurm, bin_dir=Path("/usr/bin")).set_comment("7", "RSA: stage-out finished")
    assert (slurm.comment, slurm.updates) == (mine, [])


@pytest.mark.parametrize("before", ["(null)", "", "RSA: staging in"])
def test_an_empty_comment_or_rsads_own_gets_the_status(before: str) -> None:
    slurm = Comments(before)
    CliSlurm(runner=slurm, bin_dir=Path("/usr/bin")).set_comment("7", "RSA: stage-out finished")
    assert slurm.updates == ["RSA: stage-out finished"]


def test_any_task_of_an_array_with_the_users_comment_keeps_it() -> None:
    assert users_comment("RSA: held\nmine\n")
    assert not users_comment("(null)\nRSA: held\n")
