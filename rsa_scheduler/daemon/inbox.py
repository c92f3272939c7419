"""The loop thread's inbox: requests from other threads, taken in batches.

Owns :class:`Request` (something for the loop thread to do on behalf of another thread:
an action's outcome, progress or milestone, a user's or operator's command, a node
state, a hook event, or a ``call``, an API read) and :class:`Inbox`, the queue they wait
in, with :meth:`Inbox.submit` (queue one, optionally wait for its answer; one its
caller stopped waiting for is withdrawn, :meth:`Inbox.take`) and
:meth:`Inbox.batches`: the requests that only change state come in groups, so the daemon
(service.py) commits each group's decisions in ONE store transaction (group commit);
any other request comes alone.

Imports nothing of the daemon (the error tree only).
"""

from __future__ import annotations

import queue
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from rsa_scheduler.errors import RsaError

#: request kinds handled in groups with one commit (group commit); the rest one by one
GROUPED = frozenset({"outcome", "command", "hook", "progress", "node-state"})
MAX_GROUP = 256


@dataclass
class Request:
    """Something for the loop thread to do on behalf of another thread."""

    kind: str  # "outcome" | "command" | "hook" | "progress" | "node-state" | "call"
    payload: Any
    reply: Future[Any] | None = None


class NotTaken(RsaError, TimeoutError):
    """The loop did not take a request within its caller's timeout: it never will (it
    was withdrawn), so nothing of it was done."""


class Inbox(queue.Queue[Request]):
    """Requests for the loop thread (any thread puts, the loop thread takes)."""

    def submit(self, kind: str, payload: Any, *, wait: bool = False,
               timeout: float = 10.0) -> Any:
        """Queue a request for the loop thread; optionally wait for its answer.

        A request its caller stops waiting for is withdrawn: the loop skips it
        (:meth:`take`), so a caller told "busy" (an API client, which may send it again)
        is never overtaken by the first request being carried out later (:class:`NotTaken`).
        One the loop took just then is waited for up to ``timeout`` more: its answer is
        moments away (a plain TimeoutError after that: it may have been carried out)."""
        reply: Future[Any] | None = Future() if wait else None
        self.put(Request(kind, payload, reply=reply))
        if reply is None:
            return None
        try:
            return reply.result(timeout=timeout)
        except TimeoutError:
            if reply.cancel():
                raise NotTaken(f"rsad's loop did not take the {kind} request within "
                               f"{timeout:g}s; withdrawn, nothing of it was done") from None
        return reply.result(timeout=timeout)

    @staticmethod
    def take(req: Request) -> bool:
        """The loop thread, before it handles ``req``: False when its caller withdrew it."""
        return req.reply is None or req.reply.set_running_or_notify_cancel()

    def batches(self, timeout: float = 0.0) -> Iterator[Request | list[Request]]:
        """What is queued, waiting up to ``timeout`` for the first: runs of up to
        :data:`MAX_GROUP` :data:`GROUPED` requests as a list, any other request alone.
        The next request is taken once the batch before it was handled.

        One turn takes at most the requests queued when its first was taken: those that
        come meanwhile wait for the next turn. A steady stream (users' reads sent again
        the moment they are answered, eight at a time) kept the loop here for good,
        never polling Slurm, firing timers or feeding systemd's watchdog."""
        try:
            req: Request | None = (self.get(timeout=timeout) if timeout > 0
                                   else self.get_nowait())
        except queue.Empty:
            return
        left = self.qsize()  # queued before this turn began: the rest is the next turn's

        def following() -> Request | None:
            nonlocal left
            if left <= 0:
                return None
            left -= 1
            return self._next()

        while req is not None:
            if req.kind not in GROUPED:
                yield req
                req = following()
                continue
            group: list[Request] = []
            while req is not None and req.kind in GROUPED and len(group) < MAX_GROUP:
                group.append(req)
                req = following()
            yield group

    def _next(self) -> Request | None:
        try:
            return self.get_nowait()
        except queue.Empty:
            return None
