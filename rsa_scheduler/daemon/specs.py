"""What a queued job asks of the RSA: its ``#RSA_*`` directives, read for the loop.

Owns :class:`SpecReader`: the directives of a queue row, from the ``rsa1:``
admin_comment job_submit.lua wrote (each distinct comment parsed once), or, without
job_submit.lua (``script_source: scontrol``), from the batch script, read and parsed by
its own worker threads (never on the loop thread: a huge script must not stall the loop
or the watchdog) and cached while the job is queued; the split of an admin_comment into
its spec and its start-hold deadline (core.directives.split_hold), also cached.

Imports nothing else of rsad: the daemon (service.py) owns it and tells it, per row,
whether the job is already tracked (its record then holds the spec) and whether it
matters yet.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Container, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, cast

from rsa_scheduler.core.directives import (
    DirectiveErrors,
    DirectiveSpec,
    parse_directives,
    split_hold,
)
from rsa_scheduler.slurm.parse import QueueRow
from rsa_scheduler.slurm.port import SlurmError, SlurmPort

log = logging.getLogger(__name__)

#: what job_submit.lua puts in front of an RSA job's admin_comment
ADMIN_COMMENT_PREFIX = "rsa1:"

#: what a job's user is told when its batch script took too long to read
TOO_SLOW = ("RSA: directives ignored: the batch script took too long to read; shorten it "
            "or move the #RSA_ lines to its top")
_UNREAD = object()  # a batch script that could not be read this cycle

#: distinct admin_comments remembered at most (their parsed spec, their split)
_MAX_COMMENTS = 100_000


class SpecReader:
    """The directives of queue rows (loop thread), scripts read by its own workers."""

    def __init__(self, slurm: SlurmPort, tell: Callable[[str, str], None], *,
                 parse_timeout: float = 30.0) -> None:
        self.slurm = slurm
        self.tell = tell  # (job, text): the user's comment (Dispatcher.tell)
        self.parse_timeout = parse_timeout
        # script_source=scontrol: job -> its directives (None: none or unreadable)
        self.cache: dict[str, DirectiveSpec | None] = {}
        # scripts being read and parsed off the loop thread: job -> (future, started)
        self.parsing: dict[str, tuple[Future[tuple[Any, str]], float]] = {}
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="rsa-parse")
        self._comment_specs: dict[str, DirectiveSpec | None] = {}  # admin_comment -> spec
        self._holds_split: dict[str, tuple[str, int | None]] = {}  # admin_comment -> split

    def spec_of(self, row: QueueRow, *, tracked: bool, from_script: bool,
                staged: bool) -> DirectiveSpec | None:
        """``row``'s directives (array tasks' ``%A``/``%a`` filled in); None while its
        script is being read, for a tracked job (its record holds the spec) and for a
        job without any. ``from_script``: no job_submit.lua, read batch scripts;
        ``staged``: native mode set up a burst buffer for it (it matters already)."""
        if tracked:
            return None  # already tracked: the record holds the spec
        spec = self._spec_of_job(row, from_script, staged)
        array, sep, task = row.job_id.partition("_")
        if spec is not None and sep and task.isdigit():
            try:  # %A / %a in an array task's paths
                return spec.for_array_task(array, task)
            except ValueError as e:
                log.error("job %s: %s", row.job_id, e)
                return None
        return spec

    def split_hold(self, comment: str) -> tuple[str, int | None]:
        """``split_hold`` of an admin_comment, once per distinct comment: all tasks of an
        array share theirs, and the first cycle after a start reads every RSA job's."""
        got = self._holds_split.get(comment)
        if got is None:
            if len(self._holds_split) > _MAX_COMMENTS:
                self._holds_split.clear()
            got = self._holds_split[comment] = split_hold(comment)
        return got

    def _spec_of_job(self, row: QueueRow, from_script: bool,
                     staged: bool) -> DirectiveSpec | None:
        comment = row.admin_comment or ""
        if comment.startswith(ADMIN_COMMENT_PREFIX):
            # Pending jobs keep their comment for many cycles: parse each distinct one once.
            if comment in self._comment_specs:
                return self._comment_specs[comment]
            try:
                parsed: DirectiveSpec | None = DirectiveSpec.from_admin_comment(
                    split_hold(comment)[0])
            except ValueError as e:
                log.error("job %s: unreadable RSA admin_comment: %s", row.job_id, e)
                parsed = None
            if len(self._comment_specs) > _MAX_COMMENTS:
                self._comment_specs.clear()
            self._comment_specs[comment] = parsed
            return parsed
        if not from_script:
            return None
        # Without job_submit.lua: read the script once, only when the job matters
        # (on-deck or started), never for the whole queue; read and parsed by a worker,
        # never on this thread (a huge script must not stall the loop or the watchdog).
        if row.job_id in self.cache:
            return self.cache[row.job_id]
        if not (row.state == "RUNNING" or (row.state == "PENDING" and
                                           row.reason == "Resources") or staged):
            return None
        now = time.monotonic()
        job = row.job_id
        if job not in self.parsing:
            self.parsing[job] = (self._pool.submit(self._read_spec, job), now)
            return None
        fut, started = self.parsing[job]
        if not fut.done():
            if now - started > self.parse_timeout:
                del self.parsing[job]
                self.cache[job] = None
                log.error("job %s: reading its #RSA_ directives took over %.0fs: ignored",
                          job, self.parse_timeout)
                self.tell(job, TOO_SLOW)
            return None
        del self.parsing[job]
        spec, told = fut.result()
        if told:
            self.tell(job, told)
        if spec is _UNREAD:
            return None
        self.cache[job] = spec
        return cast("DirectiveSpec | None", spec)

    def _read_spec(self, job: str) -> tuple[Any, str]:
        """Worker thread: the job's directives (None: none), and what to tell the user.
        ``_UNREAD``: the script could not be read now (tried again next cycle)."""
        try:
            spec: DirectiveSpec | None = parse_directives(self.slurm.batch_script(job),
                                                          f"job {job}")
        except DirectiveErrors as e:
            log.warning("job %s: invalid #RSA_ directives, ignored: %s", job, e)
            return None, f"RSA: directives ignored: {e}"
        except SlurmError as e:
            log.error("job %s: cannot read the batch script: %s", job, e)
            return _UNREAD, ""
        return (None if spec == DirectiveSpec() else spec), ""

    def prune(self, rows: Iterable[QueueRow], tracked: Container[str]) -> None:
        """Forget the scripts read for jobs that left the queue, and for jobs now tracked
        (their record holds the spec): the cache is as large as the queue's running and
        on-deck jobs, not every job rsad ever read."""
        queued = {r.job_id for r in rows}
        for job in [j for j in self.parsing if j not in queued]:
            del self.parsing[job]  # left the queue while its script was read
        if not self.cache:
            return
        self.cache = {j: spec for j, spec in self.cache.items()
                      if j in queued and j not in tracked}

    def forget(self, job: str) -> None:
        """``job`` left rsad's memory."""
        self.cache.pop(job, None)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
