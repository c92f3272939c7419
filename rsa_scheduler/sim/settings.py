"""A scenario's settings and values, converted by the configuration's validator.

Owns the scenario's policy sections declared with the configuration's kinds
(``allocation:`` is rsad's own ``allocation`` section; ``staging:`` is
:class:`StagingSettings`, the core's :class:`~rsa_scheduler.core.policy.StagingPolicy`
as a scenario writes it) and :class:`ScenarioValidator`: the configuration's
:class:`~rsa_scheduler.config.validate.Validator` with the scenario's wording, stopping at
the first problem with a :class:`~rsa_scheduler.errors.ScenarioError`
(``FILE:LINE: KEY: REASON``). A scenario's durations may be bare numbers of seconds;
zero is allowed. Imports the core's value types and the configuration's validation
machinery only.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from rsa_scheduler.config.kinds import (
    MAX_RETRIES,
    Choice,
    Duration,
    Int,
    Kind,
    Section,
    meta,
)
from rsa_scheduler.config.validate import Validator
from rsa_scheduler.config.yamldoc import Doc, KeyPath
from rsa_scheduler.core.policy import (
    AllocationPolicy,
    EarlyStart,
    ResetTrigger,
    StageOut,
    StagingPolicy,
)
from rsa_scheduler.core.units import MAX_DURATION
from rsa_scheduler.errors import ScenarioError

_DEFAULT: dict[str, Any] = {f.name: f.default for f in fields(StagingPolicy)}


def duration(limit: float = MAX_DURATION) -> Duration:
    """A scenario's duration: ``0 <= d <= limit``, a bare number is seconds."""
    return Duration(positive=False, max=limit, bare_seconds=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class ResetSettings:
    trigger: ResetTrigger = field(default=_DEFAULT["reset_trigger"], metadata=meta(
        Choice.of(ResetTrigger), "When the input RAMDISK is reset for output."))
    delay: float = field(default=_DEFAULT["reset_delay"], metadata=meta(
        duration(), "Delay after job start (trigger `delay`)."))


@dataclass(frozen=True, slots=True, kw_only=True)
class StagingSettings:
    """A scenario's ``staging:`` (every key optional: the core's defaults)."""

    early_start: EarlyStart = field(default=_DEFAULT["early_start"], metadata=meta(
        Choice.of(EarlyStart), "When a job could start before its RAMDISK is ready."))
    stage_out: StageOut = field(default=_DEFAULT["stage_out"], metadata=meta(
        Choice.of(StageOut), "Stage-out method."))
    retries: int = field(default=_DEFAULT["retries"], metadata=meta(
        Int(min=0, max=MAX_RETRIES), "Retries of a failed step."))
    backoff: float = field(default=_DEFAULT["backoff"], metadata=meta(
        duration(), "First retry delay."))
    backoff_max: float = field(default=_DEFAULT["backoff_max"], metadata=meta(
        duration(), "Upper bound of the retry delay."))
    reset: ResetSettings = field(default=ResetSettings(), metadata=meta(
        Section(ResetSettings), "The mid-job input→output reset."))
    wait_timeout: float = field(default=_DEFAULT["wait_timeout"], metadata=meta(
        duration(), "Longest hold of early-start policy `wait`."))
    fs_build_attempts: int = field(default=_DEFAULT["fs_build_attempts"], metadata=meta(
        Int(min=0, max=MAX_RETRIES), "Attempts to build a RAMDISK."))
    on_deck_settle: float = field(default=_DEFAULT["on_deck_settle"], metadata=meta(
        duration(), "How long a job stays on-deck before RSA nodes are allocated."))

    def policy(self) -> StagingPolicy:
        """The core's policy (it checks how the values fit together: ValueError)."""
        return StagingPolicy(
            early_start=self.early_start, stage_out=self.stage_out, retries=self.retries,
            backoff=self.backoff, backoff_max=self.backoff_max,
            reset_trigger=self.reset.trigger, reset_delay=self.reset.delay,
            wait_timeout=self.wait_timeout, fs_build_attempts=self.fs_build_attempts,
            on_deck_settle=self.on_deck_settle)


def _describe(value: Any) -> str:
    if value is None:
        return "nothing"
    return {bool: "a boolean", int: "a number", float: "a number", str: f"{value!r}",
            list: "a list", dict: "a mapping"}.get(type(value), type(value).__name__)


class ScenarioValidator(Validator):
    """The configuration's validator over one scenario document, in the scenario's
    words; :meth:`take` converts one value or raises the first problem."""

    def __init__(self, doc: Doc) -> None:
        super().__init__(Doc(doc.file, {}, {}, set()), doc)

    def describe(self, value: Any) -> str:
        return _describe(value)

    def not_a_choice(self, kind: Choice, value: Any) -> str:
        return f"{value!r} is not one of {', '.join(kind.values)}"

    def take(self, kind: Kind, value: Any, path: KeyPath) -> Any:
        """``value`` at ``path`` converted to ``kind``; ScenarioError if it is wrong."""
        out = self.convert(kind, value, path)
        self.raise_first()
        return out

    def raise_first(self) -> None:
        if self.issues:
            first = self.issues[0]
            self.issues.clear()
            raise ScenarioError(str(first))

    def allocation(self, value: Any, path: KeyPath) -> AllocationPolicy:
        """rsad's ``allocation`` section, every key optional."""
        policy = self.take(Section(AllocationPolicy), value or {}, path)
        assert isinstance(policy, AllocationPolicy)
        return policy

    def staging(self, value: Any, path: KeyPath) -> StagingPolicy:
        settings = self.take(Section(StagingSettings), value or {}, path)
        assert isinstance(settings, StagingSettings)
        try:
            return settings.policy()
        except ValueError as e:
            self.error(path, str(e))
            self.raise_first()
            raise  # not reached: raise_first raised


def describe(value: Any) -> str:
    """How a scenario names a wrong value (``got <this>``)."""
    return _describe(value)


__all__ = ["ResetSettings", "ScenarioValidator", "StagingSettings", "describe", "duration"]
