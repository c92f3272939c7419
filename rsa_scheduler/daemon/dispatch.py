"""Running the core's actions: the two lanes of worker threads and what is in flight.

Owns :class:`Dispatcher`: the bulk lane (core.actions.BULK: stage-in, stage-out), the
urgent lane (mounts, reset, lock-in, teardown) and the message lane (the user's comment,
draining compute nodes, mail: Slurm and MTA writes that no action waits for), the actions
running on them (:class:`Running`, cancelled when superseded or when rsad stops) and the
alerts kept for ``rsa status``. An action's progress, milestones and outcome go back to the
loop thread as requests (:meth:`Host.submit`); nothing here changes the core.

Imports nothing of the daemon but the executors' interface and the metrics; the daemon
(service.py) is its :class:`Host`.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from rsa_scheduler.core.actions import BULK, RESTORES, Action, ActionKind, Outcome, Result
from rsa_scheduler.core.payloads import AlertArgs, CancelArgs, DestroyFsArgs, OnNodes, TellUserArgs
from rsa_scheduler.core.policy import NodeState
from rsa_scheduler.core.record import JobRecord
from rsa_scheduler.core.scheduler import Scheduler
from rsa_scheduler.core.states import JobState
from rsa_scheduler.daemon.executors import ActionContext, Registry
from rsa_scheduler.daemon.metrics import Metrics
from rsa_scheduler.hosts import CancelToken
from rsa_scheduler.slurm.port import SlurmError, SlurmPort

log = logging.getLogger(__name__)

#: how long a teardown waits for the job's other steps to wind down (they were cancelled)
SIBLING_WAIT = 120.0

#: the actions that change a job's place in Slurm: run one at a time per job, in order
_SLURM_WRITES = frozenset({ActionKind.LOCK_IN, ActionKind.UNLOCK})

#: alerts kept in memory (``rsa status`` shows the newest)
KEEP_ALERTS = 100
#: a quarantined job's output is alerted about again each time it has waited this long
#: more (its first alert is the quarantine's own): it holds RSA nodes until an operator
#: acts, and must not be forgotten. The default of ``quarantine.remind_every``
QUARANTINE_REMIND = 24 * 3600.0
COMMENT_MAX = 250  # characters of a job comment rsad writes (squeue shows it whole)


def _waited(seconds: float) -> str:
    """How long a quarantine has waited, in the reminder's words: ``24 hours`` (as
    before ``quarantine.remind_every``), ``90 minutes``."""
    if seconds % 3600 == 0:
        return f"{seconds / 3600:g} hours" if seconds != 3600 else "1 hour"
    if seconds % 60 == 0:
        return f"{seconds / 60:g} minutes"
    return f"{seconds:g} seconds"


def fit_comment(text: str, limit: int = COMMENT_MAX) -> str:
    """``text`` cut to ``limit`` characters in the middle: a message says what happened
    first and what to do last, and both must stay (``rsa job`` shows it whole)."""
    if len(text) <= limit:
        return text
    head = limit * 2 // 5
    return f"{text[:head].rstrip()} … {text[-(limit - head - 3):].lstrip()}"


@dataclass
class Running:
    action: Action
    cancel: CancelToken
    future: Future[Outcome]
    started: float = 0.0


class Host(Protocol):
    """What the dispatcher reads of the daemon (loop thread) and how it reports back."""

    @property
    def sched(self) -> Scheduler: ...

    @property
    def facts(self) -> Mapping[str, Mapping[str, Any]]: ...

    @property
    def metrics(self) -> Metrics | None: ...

    def submit(self, kind: str, payload: Any, *, wait: bool = False,
               timeout: float = 10.0) -> Any: ...


class Dispatcher:
    """Starts actions on the lanes (loop thread); their results come back as requests."""

    def __init__(self, host: Host, *, registry: Registry, slurm: SlurmPort,
                 clock: Callable[[], float], workers: int = 8,
                 urgent_workers: int = 8, remind_every: float = QUARANTINE_REMIND) -> None:
        self.host = host
        self.remind_every = remind_every  # quarantine.remind_every
        self.registry = registry
        self.slurm = slurm
        self.clock = clock
        # two lanes: bulk work (core.actions.BULK) on ``workers`` threads, everything
        # else (mounts, reset, lock-in, teardown) on its own ``urgent_workers``; and the
        # messages (comments, drains, mail) on threads of their own, as many: every
        # stage-out's start and end tells its user, and with slurmctld slow to answer
        # (or an MTA hung) those writes held every urgent thread, so a mount waited for
        # them (issue 34)
        self.workers = Lane(max_workers=workers, thread_name_prefix="rsa-bulk")
        self.urgent = Lane(max_workers=urgent_workers, thread_name_prefix="rsa-urgent")
        self.messages = Lane(max_workers=urgent_workers, thread_name_prefix="rsa-tell")
        self.running: dict[str, Running] = {}
        self.alerts: list[dict[str, Any]] = []
        self._reminded: dict[tuple[str, float], int] = {}  # (job, since) -> reminders
        # the users' comments (tell): the newest unwritten message per job, and the jobs
        # whose writer is on the lane
        self._comment_lock = threading.Lock()
        self._comments: dict[str, str] = {}
        self._writing: set[str] = set()

    def dispatch(self, actions: Iterable[Action]) -> None:
        """Run (or carry out at once) committed actions."""
        for action in actions:
            if action.kind is ActionKind.CANCEL:
                target = self.running.get(action.args_as(CancelArgs).target)
                if target is not None:
                    target.cancel.cancel(f"superseded ({action.job_id})")
            elif action.kind is ActionKind.ALERT:
                self.alert(action.job_id, action.args_as(AlertArgs).message)
            elif action.kind is ActionKind.TELL_USER:
                text = f"RSA: {action.args_as(TellUserArgs).message}"
                if action.job_id in self.host.sched.displaced:
                    # the id is another user's job's now: its comment is not this job's
                    log.info("job %s (now another user's job's id): not told: %s",
                             action.job_id, text)
                else:
                    self.tell(action.job_id, text)
            elif action.kind in (ActionKind.ALLOCATE, ActionKind.RELEASE):
                log.info("job %s: %s %s", action.job_id, action.kind.value,
                         action.args_as(OnNodes).nodes)
            elif action.tracked or action.kind in RESTORES:
                self.start(action, tracked=True)

    def start(self, action: Action, *, tracked: bool) -> None:
        """Run ``action`` on its lane; a tracked one's outcome comes back as a request."""
        if action.id in self.running:
            return  # already in flight (idempotent re-dispatch)
        cancel = CancelToken()
        job = action.job_id
        host = self.host

        def progress(data: Mapping[str, Any]) -> None:
            host.submit("progress", (job, {**data, "action": action.id}))

        def milestone(data: Mapping[str, Any]) -> None:
            host.submit("milestone", (job, action.id, dict(data)), wait=True, timeout=60)

        sched = host.sched
        rec = sched.records.get(job)
        down: frozenset[str] = frozenset()
        if action.kind is ActionKind.DESTROY_FS:
            pool = sched.pool
            down = frozenset(n for n in action.args_as(DestroyFsArgs).nodes
                             if pool.state(n) is NodeState.DOWN)
        ctx = ActionContext(action=action, cancel=cancel, progress=progress,
                            facts=dict(host.facts.get(job, {})), milestone=milestone,
                            job_ended=rec is not None and rec.job_state is JobState.FINISHED,
                            job_running=rec is None or rec.job_state is JobState.RUNNING,
                            down=down)
        lane = self.workers if action.kind in BULK else self.urgent
        run: Callable[[ActionContext], Outcome] = self.registry.run
        if action.kind is ActionKind.DESTROY_FS:
            # a step of the job still winding down (a stage-in cancelled by a demotion)
            # may start one more command as the user on the RSA nodes, which makes the
            # job's cgroup again after the teardown reaped it (seen in the chaos run):
            # the teardown waits for it (bounded; the other lane, so no deadlock)
            before = [r.future for r in self.running.values()
                      if r.action.job_id == job and r.action.id != action.id]
            if before:
                def run(c: ActionContext, before: list[Future[Outcome]] = before) -> Outcome:
                    wait_futures(before, timeout=SIBLING_WAIT)
                    return self.registry.run(c)
        if action.kind in _SLURM_WRITES:
            # a job's lock-in and its restore run one after the other, in the order
            # issued, and each reads the job's facts once the one before has recorded its
            # own: a restore racing a lock-in (a demotion, `rsa cancel-staging` while
            # LOCK_IN runs) finds the job's own QOS the lock-in recorded
            before = [r.future for r in self.running.values()
                      if r.action.job_id == job and r.action.kind in _SLURM_WRITES
                      and r.action.id != action.id]
            if before:
                def run(c: ActionContext, before: list[Future[Outcome]] = before) -> Outcome:
                    wait_futures(before)
                    try:
                        facts = host.submit("call", lambda: dict(host.facts.get(job, {})),
                                            wait=True, timeout=60)
                    except Exception as e:  # rsad stopping: the action is re-issued
                        return Outcome(c.action.id, Result.FAILED,
                                       f"could not read the job's facts: {e}")
                    return self.registry.run(dataclasses.replace(c, facts=facts))
        future = lane.submit(run, ctx)
        if tracked:
            self.running[action.id] = Running(action, cancel, future, self.clock())
            future.add_done_callback(partial(_report, host))

    def alert(self, job_id: str, msg: str) -> None:
        """Loop thread: tell the operator (log, metrics, ``rsa status``)."""
        log.warning("ALERT job %s: %s", job_id, msg)
        metrics = self.host.metrics
        if metrics is not None:
            metrics.alerts.inc()
        self.alerts.append({"time": self.clock(), "job_id": job_id, "message": msg})
        del self.alerts[:-KEEP_ALERTS]

    def remind(self, records: list[JobRecord], now: float) -> None:
        """Loop thread: alert again about each quarantined job once per
        ``remind_every`` (``quarantine.remind_every``) it has waited (reminders already
        given are counted in memory: a restarted rsad reminds once more)."""
        every = self.remind_every
        for rec in records:
            due = int((now - rec.since) // every)
            key = (rec.job_id, rec.since)
            if due < 1 or self._reminded.get(key, 0) >= due:
                continue
            self._reminded[key] = due
            self.alert(rec.job_id, f"output still quarantined on its RAMDISK on {rec.nodes} "
                                   f"after {_waited(due * every)}, holding "
                                   "those RSA nodes: fix the cause and `rsa retry "
                                   f"{rec.job_id}`, or save the data and `rsa release "
                                   f"{rec.job_id} --discard-output`")
        live = {(r.job_id, r.since) for r in records}
        for key in [k for k in self._reminded if k not in live]:
            del self._reminded[key]

    def drain(self, job_id: str, nodes: list[str], reason: str) -> None:
        """Drain compute ``nodes`` in Slurm with ``reason`` (message lane), then alert the
        operator (loop thread): they did not confirm the release of ``job_id``'s
        RAMDISK."""
        def work() -> None:
            try:
                self.slurm.drain_nodes(nodes, reason)
                what = "drained"
            except SlurmError as e:
                what = f"could not be drained ({e})"
            self.host.submit("call", lambda: self.alert(
                job_id, f"compute node(s) {', '.join(nodes)} did not confirm the release "
                        f"of the job's RAMDISK (kept; retried): {what}; check them, then "
                        "scontrol update NodeName=... State=RESUME"))

        self.messages.submit(work)

    def tell(self, job_id: str, text: str) -> None:
        """Set the job's comment to ``text`` (message lane): what the user sees. Any
        thread. A job's comments are written one at a time, in the order told, and a
        message told while an earlier one is being written replaces any still unwritten:
        the lane has several workers, and a late write of an older message would leave
        the user reading something no longer true."""
        with self._comment_lock:
            self._comments[job_id] = text
            if job_id in self._writing:
                return  # the writer in flight writes it next
            self._writing.add(job_id)
        self.messages.submit(self._write_comments, job_id)

    def _write_comments(self, job_id: str) -> None:
        """Worker: write ``job_id``'s newest message until none is left unwritten."""
        while True:
            with self._comment_lock:
                text = self._comments.pop(job_id, None)
                if text is None:
                    self._writing.discard(job_id)
                    return
            try:
                self.slurm.set_comment(job_id, fit_comment(text))
            except SlurmError as e:
                log.info("job %s: could not set the comment: %s", job_id, e)

    def shutdown(self, timeout: float | None = None) -> None:
        """Cancel what runs (it resumes after a restart) and stop the lanes, the bulk lane
        first, the messages last: wait for their threads, at most ``timeout`` seconds in
        all (None: as long as they take), then return, logging what is still running (it
        runs on)."""
        for run in self.running.values():
            run.cancel.cancel("rsad stopping")
        deadline = None if timeout is None else time.monotonic() + timeout
        busy = [name for name, lane in (("bulk", self.workers), ("urgent", self.urgent),
                                        ("message", self.messages))
                if not _stop(lane, deadline)]
        if busy:
            still = sorted(r.action.id for r in self.running.values() if not r.future.done())
            log.warning("stopping: the %s %s still busy after %gs, left running; actions "
                        "in flight: %s", " and ".join(busy), "lanes" if len(busy) > 1 else "lane",
                        timeout, ", ".join(still) or "none (other work)")


def _report(host: Host, future: Future[Outcome]) -> None:
    """A tracked action's future is done: hand its outcome to the loop. A future that
    never ran (queued when rsad stopped: ``_stop`` cancels the lanes' queues) has no
    outcome: the action is still in flight in the log and runs after the restart."""
    if not future.cancelled():
        host.submit("outcome", future.result())


class Lane(ThreadPoolExecutor):
    """A pool of worker threads that knows how much of its work is not done: at
    shutdown a lane with none has nothing left running, whether or not its idle threads
    have yet woken up to exit (on a loaded host that takes a while, and a lane stopped
    after the deadline was reported busy with nothing in it)."""

    def __init__(self, max_workers: int, thread_name_prefix: str) -> None:
        super().__init__(max_workers=max_workers, thread_name_prefix=thread_name_prefix)
        self._undone = 0
        self._undone_lock = threading.Lock()

    @property
    def undone(self) -> int:
        """How many work items are queued or running (a cancelled one is done)."""
        with self._undone_lock:
            return self._undone

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        with self._undone_lock:
            self._undone += 1
        try:
            future = super().submit(fn, *args, **kwargs)
        except BaseException:
            self._done(None)
            raise
        future.add_done_callback(self._done)
        return future

    def _done(self, _future: Future[Any] | None) -> None:
        with self._undone_lock:
            self._undone -= 1


def _stop(lane: Lane, deadline: float | None) -> bool:
    """Shut ``lane`` down (its queued work cancelled) and wait for its threads until
    ``deadline`` (time.monotonic(); None: no limit). Whether nothing of it still runs:
    its threads all ended, or those left are idle (they exit on their own)."""
    lane.shutdown(wait=False, cancel_futures=True)
    if deadline is None:
        lane.shutdown(wait=True)
        return True
    # the executor waits for its threads only without a limit: wait for that wait
    waiter = threading.Thread(target=lane.shutdown, name="rsa-lane-stop", daemon=True)
    waiter.start()
    waiter.join(max(0.0, deadline - time.monotonic()))
    return not waiter.is_alive() or lane.undone == 0
