"""A fair share of the RSA nodes per user and per job array (issue 39).

Owns :class:`FairShare`, the pool port the state machine allocates through
(``core.effects.PoolPort``): it asks the real pool (``core.allocator.Pool``) and takes the
answer back when it would give one user's jobs, or one array's tasks, more of the pool's
nodes than their share (``AllocationPolicy.user_share`` / ``array_share``, fractions of the
pool). A user's (an array's) first job is never refused by it: a share smaller than one
job is no reason to run it from the PFS. A refused job waits as one that found no free
nodes (NODES_BUSY), and is tried again when nodes come back, so the tasks of a big array
next to start no longer take every RSA node at once and other users' on-deck jobs get
theirs. What each job holds is known from the records (``track``; the scheduler tells it
at every replay), so the share needs no state of its own in the log.

Pure: must not import anything but the stdlib and other core modules.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from typing import Any

from rsa_scheduler.core.allocator import Pool, Request


def array_of(job_id: str) -> str:
    """The array a job id belongs to (``123_4`` -> ``123``); "" for a job of no array."""
    head, sep, _ = job_id.partition("_")
    return head if sep else ""


class FairShare:
    """The pool as the machine sees it: allocations kept within each user's and each
    array's share."""

    def __init__(self, pool: Pool, user_of: Callable[[str], str]) -> None:
        self.pool = pool
        self.user_of = user_of  # job -> its user
        self._held: dict[str, tuple[str, str, int]] = {}  # job -> (user, array, nodes)
        self._by_user: Counter[str] = Counter()
        self._by_array: Counter[str] = Counter()

    def _limit(self, share: float) -> int:
        return max(1, math.floor(share * len(self.pool.nodes()) + 1e-9))

    def allocate(self, req: Request) -> Any:
        got = self.pool.allocate(req)
        if got is None:
            return None
        user = self.user_of(req.job_id)
        array = array_of(req.job_id)
        n = len(got)
        policy = self.pool.policy
        over_user = policy.user_share < 1 and self._by_user[user] > 0 and \
            self._by_user[user] + n > self._limit(policy.user_share)
        over_array = array and policy.array_share < 1 and self._by_array[array] > 0 and \
            self._by_array[array] + n > self._limit(policy.array_share)
        if over_user or over_array:
            self.pool.release(req.job_id)
            return None
        self.track(req.job_id, user, n)
        return got

    def release(self, job_id: str) -> Any:
        self._forget(job_id)
        return self.pool.release(job_id)

    def explain(self, job_id: str) -> str:
        return self.pool.explain(job_id)

    def track(self, job_id: str, user: str, nodes: int) -> None:
        """``job_id`` (of ``user``) holds ``nodes`` RSA nodes (an allocation, a replay)."""
        self._forget(job_id)
        array = array_of(job_id)
        self._held[job_id] = (user, array, nodes)
        self._by_user[user] += nodes
        if array:
            self._by_array[array] += nodes

    def _forget(self, job_id: str) -> None:
        held = self._held.pop(job_id, None)
        if held is None:
            return
        user, array, n = held
        self._by_user[user] -= n
        if self._by_user[user] <= 0:
            del self._by_user[user]
        if array:
            self._by_array[array] -= n
            if self._by_array[array] <= 0:
                del self._by_array[array]

    def held_by_user(self, user: str) -> int:
        return self._by_user[user]

    def held_by_array(self, array: str) -> int:
        return self._by_array[array]
