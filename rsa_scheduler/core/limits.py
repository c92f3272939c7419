"""Limits per user and per account: RSA nodes, capacity and concurrent stage-ins (issue 33).

Owns :class:`Usage` (what one job holds, or would take: RSA nodes, their capacity in
bytes, a stage-in in flight), :class:`Holder` (a job that holds RSA nodes, with its user
and Slurm account) and :func:`judge`, the decision whether one more allocation keeps a
user and an account within ``AllocationPolicy``'s ``user_*`` / ``account_*`` limits (0:
no limit). A job over a limit waits as one that found no free RSA node (it is tried again
every cycle, and gets its nodes when its user's or account's other jobs give theirs
back); a job that alone is over a limit can never be served and reads the PFS. The words
of each refusal are what the job's user reads (its comment, ``rsa job``).

Pure: stdlib and other core modules only. :class:`~rsa_scheduler.core.share.FairShare`
asks it on every allocation.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from rsa_scheduler.core.policy import AllocationPolicy
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


#: what a limit counts (the suffix of its ``AllocationPolicy`` field)
_KINDS: tuple[str, ...] = ("nodes", "capacity", "stage_ins")


def limits_set(policy: AllocationPolicy) -> bool:
    """Whether any limit per user or per account is set (else :func:`judge` is skipped)."""
    return any(getattr(policy, f"{who}_{what}") for who in ("user", "account")
               for what in _KINDS)


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
    checks = [("user", f"user {user}", used_user)]
    if account:
        checks.append(("account", f"account {account}", used_account))
    for who, name, used in checks:
        for what in _KINDS:
            limit = getattr(policy, f"{who}_{what}")
            need = getattr(want, what)
            if not limit or not need:
                continue
            key = f"allocation.{who}_{what}"
            had = getattr(used, what)
            if need > limit:
                return Refusal(
                    f"this job alone needs {_amount(what, need)}, over the limit of "
                    f"{_amount(what, limit)} per {who} ({key})", True)
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
