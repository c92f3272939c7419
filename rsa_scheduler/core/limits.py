"""Limits per user and per account: RSA nodes, capacity and concurrent stage-ins (issue 33).

Owns :class:`Usage` (what one job holds, or would take: RSA nodes, their capacity in
bytes, a stage-in in flight), :class:`Holder` (a job that holds RSA nodes, with its user
and Slurm account) and :func:`judge`, the decision whether one more allocation keeps a
user and an account within ``AllocationPolicy``'s ``user_*`` / ``account_*`` limits (0:
no limit), or within their own values where ``user_limits`` / ``account_limits`` name
them (:meth:`AllocationPolicy.limit`); :func:`limit_lines` says what is set (``rsad
--check``). A job over a limit waits as one that found no free RSA node (it is tried again
every cycle, and gets its nodes when its user's or account's other jobs give theirs
back); a job that alone is over a limit can never be served and reads the PFS. The words
of each refusal are what the job's user reads (its comment, ``rsa job``).

Pure: stdlib and other core modules only. :class:`~rsa_scheduler.core.share.FairShare`
asks it on every allocation.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from rsa_scheduler.core.policy import LIMIT_KINDS, AllocationPolicy
from rsa_scheduler.core.units import format_size


@dataclass(frozen=True, slots=True)
class Usage:
    """RSA nodes, their capacity (bytes) and stage-ins (0 or 1 for one job)."""

    nodes: int = 0
    capacity: int = 0
    stage_ins: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.nodes + other.nodes, self.capacity + other.capacity,
                     self.stage_ins + other.stage_ins)


@dataclass(frozen=True, slots=True)
class Holder:
    """A job that holds RSA nodes now: whose it is and what it holds."""

    job_id: str
    user: str
    account: str
    usage: Usage


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why one more allocation is refused; ``for_good``: the job alone is over the limit
    (it can never be served), else it waits for its user's / account's other jobs."""

    reason: str
    for_good: bool


_KINDS = LIMIT_KINDS
_WHO: tuple[str, ...] = ("user", "account")


def limits_set(policy: AllocationPolicy) -> bool:
    """Whether any limit per user or per account is set, for all or for a name (else
    :func:`judge` is skipped)."""
    return any(getattr(policy, f"{who}_{what}") for who in _WHO for what in _KINDS) \
        or any(getattr(named, what) for named in (*policy.user_limits.values(),
                                                  *policy.account_limits.values())
               for what in _KINDS)


def _values(values: Iterable[tuple[str, int | None]]) -> str:
    words = [_amount(what, v) if v else f"{_NOUN[what]} unlimited"
             for what, v in values if v is not None]
    return ", ".join(words)


_NOUN = {"nodes": "RSA nodes", "capacity": "RSA capacity", "stage_ins": "stage-ins"}


def limit_lines(policy: AllocationPolicy) -> list[str]:
    """What ``rsad --check`` says of the limits: per user and per account, the values
    for all and each named user's / account's own (none when nothing is set)."""
    lines: list[str] = []
    for who in _WHO:
        named = policy.user_limits if who == "user" else policy.account_limits
        common = _values((what, getattr(policy, f"{who}_{what}")) for what in _KINDS
                         if getattr(policy, f"{who}_{what}"))
        if not common and not named:
            continue
        parts = [f"{common or 'no limit'} for all"]
        parts += [f"{name}: {_values((w, getattr(lim, w)) for w in _KINDS)}"
                  for name, lim in sorted(named.items())]
        lines.append(f"limits per {who}: " + "; ".join(parts))
    return lines


def _amount(what: str, n: int) -> str:
    if what == "capacity":
        return f"{format_size(n)} of RSA capacity"
    if what == "nodes":
        return f"{n} RSA node{'s' if n != 1 else ''}"
    return f"{n} stage-in{'s' if n != 1 else ''}"


def judge(policy: AllocationPolicy, user: str, account: str, want: Usage,
          holders: Iterable[Holder]) -> Refusal | None:
    """Whether a job of ``user`` in ``account`` may take ``want`` on top of what the
    ``holders`` (every other job holding RSA nodes) hold: None if it may, else why not."""
    used_user, used_account = Usage(), Usage()
    for h in holders:
        if h.user == user:
            used_user = used_user + h.usage
        if account and h.account == account:
            used_account = used_account + h.usage
    checks = [("user", user, used_user)]
    if account:
        checks.append(("account", account, used_account))
    for who, who_name, used in checks:
        name = f"{who} {who_name}"
        for what in _KINDS:
            limit, key = policy.limit(who, what, who_name)
            need = getattr(want, what)
            if not limit or not need:
                continue
            had = getattr(used, what)
            if need > limit:
                whose = f"for {name}" if key.endswith("_limits") else f"per {who}"
                return Refusal(
                    f"this job alone needs {_amount(what, need)}, over the limit of "
                    f"{_amount(what, limit)} {whose} ({key})", True)
            if had + need > limit:
                held = "have" if what == "stage_ins" else "hold"
                # short: the job's comment keeps 250 characters (daemon/dispatch.py)
                had_text = format_size(had) if what == "capacity" else _amount(what, had)
                until = "one of them is staged in" if what == "stage_ins" else \
                    "they give some back"
                return Refusal(
                    f"over a limit: {name}'s jobs {held} {had_text} of the "
                    f"{_amount(what, limit)} allowed ({key}), until {until}", False)
    return None
