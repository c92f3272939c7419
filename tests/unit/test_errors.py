"""The one exception tree: every exception class of the package derives from RsaError,
says what it is, and reaches the user as one line."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import rsa_scheduler
from rsa_scheduler.errors import InternalError, RsaError, ScenarioError, user_line

pytestmark = pytest.mark.unit

#: modules that need an optional dependency this machine may not have
OPTIONAL = {"rsa_scheduler.slurm.pyslurm_backend"}


def _exception_classes() -> list[type[BaseException]]:
    found: list[type[BaseException]] = []
    for info in pkgutil.walk_packages(rsa_scheduler.__path__, "rsa_scheduler."):
        try:
            module = importlib.import_module(info.name)
        except ImportError:
            if info.name in OPTIONAL:
                continue
            raise
        found.extend(obj for _, obj in inspect.getmembers(module, inspect.isclass)
                     if issubclass(obj, BaseException) and obj.__module__ == info.name)
    return found


def test_every_exception_class_of_the_package_is_in_the_tree() -> None:
    classes = _exception_classes()
    assert len(classes) >= 40  # the walk found them (a broken walk finds none)
    outside = [f"{c.__module__}.{c.__qualname__}" for c in classes
               if not issubclass(c, RsaError)]
    assert outside == []
    undocumented = [f"{c.__module__}.{c.__qualname__}" for c in classes
                    if not (c.__dict__.get("__doc__") or "").strip()]
    assert undocumented == []


def test_an_error_without_a_message_says_what_it_is() -> None:
    assert str(ScenarioError()) == "A simulator scenario file is invalid."
    assert str(ScenarioError("s.yaml:3: jobs: must not be empty")) == \
        "s.yaml:3: jobs: must not be empty"
    assert str(RsaError()) == "Base of every error rsa-scheduler raises on purpose."


def test_a_bug_says_so_and_where_its_traceback_is() -> None:
    from rsa_scheduler.core.machine import InvariantViolation

    bug = InvariantViolation("job 7: left holding-output by destroyed")
    assert isinstance(bug, AssertionError) and isinstance(bug, InternalError)
    assert user_line(bug) == (
        "job 7: left holding-output by destroyed (a bug in rsa-scheduler: report it with "
        "its traceback; run again with --debug to see it)")
    assert user_line(ScenarioError("s.yaml: bad")) == "s.yaml: bad"


@pytest.mark.parametrize(("error", "line"), [
    (ScenarioError("s.yaml:3: jobs: must not be empty"),
     "rsa: error: s.yaml:3: jobs: must not be empty\n"),
    (InternalError("the table has no row"),
     "rsa: error: the table has no row (a bug in rsa-scheduler: report it with its "
     "traceback; run again with --debug to see it)\n"),
])
def test_the_cli_prints_an_error_as_one_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        error: RsaError, line: str) -> None:
    cli_main = importlib.import_module("rsa_scheduler.cli.main")

    def fail(**_: object) -> None:
        raise error

    monkeypatch.setattr(cli_main.cli, "main", fail)
    monkeypatch.setattr("sys.argv", ["rsa", "status"])
    with pytest.raises(SystemExit) as exited:
        cli_main.main()
    assert exited.value.code == 1
    assert capsys.readouterr().err == line
