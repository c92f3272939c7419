"""Who is an operator of rsad's API (daemon/operators.py): root and SlurmUser by uid,
read from Slurm's own configuration (captured ``scontrol show config`` of 22.05, 24.11
and 26.05), not the name ``slurm``."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from rsa_scheduler.daemon import api
from rsa_scheduler.daemon.operators import (
    OPERATORS,
    Operators,
    learn_in_background,
    slurm_user_uid,
)
from rsa_scheduler.slurm.cli import parse_show_config

pytestmark = pytest.mark.unit
DATA = Path(__file__).resolve().parent.parent / "data" / "slurm"


@pytest.mark.parametrize("capture,uid", [
    ("scontrol_show_config.txt", 64030),
    ("24.11/scontrol_show_config.txt", 0),
    ("26.05/scontrol_show_config_acct.txt", 0),
])
def test_slurm_user_is_read_from_each_releases_show_config(capture: str, uid: int) -> None:
    config = parse_show_config((DATA / capture).read_text())
    assert slurm_user_uid(config["SlurmUser"]) == uid


def test_a_slurm_user_of_another_name_is_an_operator_and_a_user_named_slurm_is_not(
) -> None:
    looked: list[str] = []

    def lookup(name: str) -> int:
        looked.append(name)
        return 64030

    ops = Operators(lookup)
    # before Slurm answered: the account named slurm stands in, as rsad always did,
    # looked up once (the accept thread asks by uid, never by name)
    assert ops.is_operator(64030) and not ops.is_operator(990)
    assert ops.is_operator(0) and not ops.is_operator(1001)
    assert looked == ["slurm"]
    line = ops.learn({"SlurmUser": "slurmadm(990)"})
    assert "uid 990" in line
    assert ops.is_operator(990)  # the site's SlurmUser: its hooks answered
    assert not ops.is_operator(64030)  # a plain account that is named slurm
    assert ops.is_operator(0) and looked == ["slurm"]


def test_without_an_account_named_slurm_only_root_is_an_operator_until_slurm_answers(
) -> None:
    def lookup(name: str) -> int:
        raise KeyError(name)

    ops = Operators(lookup)
    assert ops.is_operator(0) and not ops.is_operator(64030)


def test_a_slurm_user_that_names_no_account_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="no user on rsad's host"):
        slurm_user_uid("no-such-user-xq")
    with pytest.raises(ValueError, match="not NAME"):
        slurm_user_uid("")


def test_the_api_callers_operator_flag_follows_what_was_learned(
        monkeypatch: pytest.MonkeyPatch) -> None:
    ops = Operators(lambda name: 64030)
    monkeypatch.setattr(api, "OPERATORS", ops)
    assert not api.Caller(990, "slurmadm").operator
    ops.learn({"SlurmUser": "slurmadm(990)"})
    assert api.Caller(990, "slurmadm").operator
    assert not api.Caller(64030, "slurm").operator
    assert OPERATORS is not ops  # rsad's own untouched


def test_rsad_asks_slurm_again_until_it_answers() -> None:
    ops = Operators(lambda name: 64030)
    answers: list[object] = [OSError("slurmctld down"), OSError("still down"),
                             {"SlurmUser": "slurmadm(990)"}]
    asked = threading.Event()

    def show_config() -> dict[str, str]:
        answer = answers.pop(0)
        if not answers:
            asked.set()
        if isinstance(answer, Exception):
            raise answer
        assert isinstance(answer, dict)
        return answer

    stop = threading.Event()
    thread = learn_in_background(show_config, stop, every=0.0, operators=ops)
    thread.join(timeout=10)
    assert not thread.is_alive() and asked.is_set()
    assert ops.learned and ops.is_operator(990)
