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

It also keeps each user and each Slurm account within their limits (issue 33,
:mod:`rsa_scheduler.core.limits`: RSA nodes, capacity, concurrent stage-ins), judged from
the records of the jobs that hold RSA nodes now; a refused job's reason is kept for the
machine to tell its user (:meth:`FairShare.refusal`), and a job that alone is over a limit
is refused for good (``PolicyViolation``: it reads the PFS).

Pure: must not import anything but the stdlib and other core modules.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from rsa_scheduler.core.allocator import PolicyViolation, Pool, Request
from rsa_scheduler.core.limits import Holder, Usage, judge, limits_set
from rsa_scheduler.core.record import JobRecord
from rsa_scheduler.core.states import PREPARING


def array_of(job_id: str) -> str:
    """The array a job id belongs to (``123_4`` -> ``123``); "" for a job of no array."""
    head, sep, _ = job_id.partition("_")
    return head if sep else ""


class FairShare:
    """The pool as the machine sees it: allocations kept within each user's and each
    array's share."""

    def __init__(self, pool: Pool, user_of: Callable[[str], str],
                 records: Mapping[str, JobRecord] | None = None) -> None:
        self.pool = pool
        self.user_of = user_of  # job -> its user
        self.records: Mapping[str, JobRecord] = records if records is not None else {}
        self._refused: dict[str, str] = {}  # job -> why its last allocation was refused
        #: maintenance (rsa admin drain): why no new allocation is made ("" when none)
        self.draining = ""
        #: ``rsa admin drain --pfs``: a job that would get RSA nodes is declined (it runs
        #: from the PFS now) instead of waiting for the resume
        self.drain_to_pfs = False
        self._held: dict[str, tuple[str, str, int]] = {}  # job -> (user, array, nodes)
        self._by_user: Counter[str] = Counter()
        self._by_array: Counter[str] = Counter()

    def _limit(self, share: float) -> int:
        return max(1, math.floor(share * len(self.pool.nodes()) + 1e-9))

    def allocate(self, req: Request) -> Any:
        self._refused.pop(req.job_id, None)
        if self.draining:  # in-flight jobs keep theirs; no job gets new RSA nodes
            self.pool.check(req)  # a job that can never be served is still told so
            if self.drain_to_pfs:
                raise PolicyViolation(self.draining)
            self._refused[req.job_id] = self.draining
            return None
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
        if limits_set(policy):
            refused = judge(policy, user, self._account(req.job_id),
                            self._usage(req.job_id, stage_in=self._stages_in(req.job_id)),
                            self._holders(req.job_id))
            if refused is not None:
                self.pool.release(req.job_id)
                if refused.for_good:
                    raise PolicyViolation(refused.reason)
                self._refused[req.job_id] = refused.reason
                return None
        self.track(req.job_id, user, n)
        return got

    def refusal(self, job_id: str) -> str:
        """Why the last allocation for ``job_id`` was refused by a limit ("" if it was
        not: no free nodes, or the fair share)."""
        return self._refused.get(job_id, "")

    def limit_now(self, req: Request) -> str:
        """A limit ``req``'s job is over now, judged without allocating (no node is free):
        on the fewest RSA nodes it can be given (``Pool.check``), each of the pool's
        smallest capacity, against what the other jobs hold now and under the account the
        job has now; "" when it fits that, or no limit is set. Asked only for a job that
        was told it waits for a limit (core.effects), so that what it reads stays true."""
        policy = self.pool.policy
        if not limits_set(policy):
            return ""
        try:
            n = self.pool.check(req)
        except PolicyViolation:
            return ""  # told when an allocation is tried with nodes free
        smallest = min((node.capacity for node in self.pool.nodes()), default=0)
        refused = judge(policy, self.user_of(req.job_id), self._account(req.job_id),
                        Usage(n, n * smallest, int(self._stages_in(req.job_id))),
                        self._holders(req.job_id))
        return refused.reason if refused is not None and not refused.for_good else ""

    def _account(self, job_id: str) -> str:
        rec = self.records.get(job_id)
        return rec.account if rec is not None else ""

    def _stages_in(self, job_id: str) -> bool:
        rec = self.records.get(job_id)
        return rec is not None and (rec.spec.data_in is not None or
                                    rec.spec.preprocess is not None)

    def _usage(self, job_id: str, *, stage_in: bool,
               capacity: Mapping[str, int] | None = None) -> Usage:
        held = self.pool.holding(job_id)
        if capacity is None:
            capacity = {n.name: n.capacity for n in self.pool.nodes()}
        return Usage(len(held), sum(capacity[str(h)] for h in held), int(stage_in))

    def _holders(self, job_id: str) -> list[Holder]:
        """Every other job holding RSA nodes, with what it holds (a stage-in counts
        while its RAMDISK is prepared: allocated, built, filled or being retried)."""
        out = []
        capacity = {n.name: n.capacity for n in self.pool.nodes()}  # once, not per job
        for job in self.pool.jobs():
            rec = self.records.get(job)
            if job == job_id or rec is None:
                continue
            staging = rec.rsa_state in PREPARING and self._stages_in(job)
            out.append(Holder(job, rec.user, rec.account,
                              self._usage(job, stage_in=staging, capacity=capacity)))
        return out

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
