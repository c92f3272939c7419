"""rsad's API: JSON over HTTP on a unix socket (local CLI) and optionally TCP (compute-node
hooks), every request authenticated with a MUNGE credential, as Slurm does.

Owns the routes, the authorisation rule (root and the Slurm user may see and act on every
job; anyone else only on their own jobs, and sees other users' job ids nowhere), the
identity check (MUNGE, and on the unix socket the kernel's SO_PEERCRED must name the same
uid), the unix socket's mode (0660 root:``daemon.api.socket_group``, else 0600) and the
listeners. The limits on what a caller can hold live in :mod:`rsa_scheduler.daemon.httpd`.
Requests that change state are handed to the daemon's loop thread; nothing here touches
the core directly. The API answers from the moment rsad starts: until the daemon is ready
(its log replayed, the RSA nodes fenced: ``Daemon.ready``) burst_buffer.lua's hooks hear
"wait" and every other request 503 ``rsad is starting``.
"""

from __future__ import annotations

import contextlib
import grp
import json
import logging
import math
import os
import pwd
import re
import resource
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from rsa_scheduler import munge
from rsa_scheduler.config.schema import ApiConfig
from rsa_scheduler.core.hostlist import check_size
from rsa_scheduler.core.jobkey import job_key
from rsa_scheduler.core.scheduler import CommandRefused, UnknownJob
from rsa_scheduler.core.states import LEFT_QUEUE, OPERATOR_COMMANDS, USER_COMMANDS
from rsa_scheduler.daemon import httpd
from rsa_scheduler.daemon.inbox import NotTaken
from rsa_scheduler.daemon.operators import OPERATORS
from rsa_scheduler.daemon.service import Daemon, users_differ
from rsa_scheduler.daemon.views import status_for_user
from rsa_scheduler.errors import RsaError
from rsa_scheduler.node.plan import SEALED_ARGV, protocol_of

log = logging.getLogger(__name__)
AUTH_HEADER = "X-RSA-Munge"
REPLY_HEADER = "X-RSA-Munge-Reply"  # rsad's credential over its answer (node hooks check it)
NODE_HOOKS = frozenset({"prolog", "agent", "mounted", "epilog"})
EVENTS_LIMIT = 10_000  # events in one answer (rsa events pages on with since=)
#: the largest uid (uid_t's (uid_t)-1 is "no uid"): ``?as=`` takes 0 to this
MAX_UID = 2**32 - 2
#: the longest a node agent's long poll is held (its ``wait``, seconds): below the
#: agent's own client timeout (node/agent.py: POLL + 10) and rsad's per-request budget
AGENT_WAIT_MAX = 25.0
AGENT_WAIT_DEFAULT = 20.0  # a request without one (node/agent.py sends its POLL, 20 s)
#: the answer to everything but burst_buffer.lua's hooks until rsad is ready
STARTING = ("rsad is starting (replaying its event log and fencing what an earlier rsad "
            "left on the RSA nodes); retry in a moment")


class ApiError(RsaError):
    """A request the API refuses: the HTTP status and one line saying why."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class Caller:
    uid: int
    user: str

    @property
    def operator(self) -> bool:
        """Root or SlurmUser (daemon/operators.py), by uid."""
        return OPERATORS.is_operator(self.uid)


def _user_of(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


class Routes:
    """The API's operations, independent of the transport."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon

    def _call(self, fn: Callable[[], Any]) -> Any:
        return self.daemon.submit("call", fn, wait=True)

    def dispatch(self, caller: Caller, method: str, path: str, body: Any) -> Any:
        url = urlsplit(path)
        query = parse_qs(url.query)
        parts = [p for p in url.path.split("/") if p]
        if parts[:1] != ["v1"]:
            raise ApiError(HTTPStatus.NOT_FOUND, f"no such endpoint {url.path}")
        parts = parts[1:]
        if method == "GET" and parts == ["whoami"]:
            return {"uid": caller.uid, "user": caller.user, "operator": caller.operator}
        if method == "GET" and parts == ["bb", "pools"]:
            return self._bb_pools(caller)
        if method == "POST" and len(parts) == 2 and parts[0] == "bb":
            return self._bb(caller, parts[1], body)
        if not self.daemon.ready.is_set():
            raise ApiError(HTTPStatus.SERVICE_UNAVAILABLE, STARTING)
        if method == "GET" and parts == ["jobs"]:
            user = None if caller.operator else caller.user
            return {"jobs": self._call(lambda: self.daemon.jobs_view(user))}
        if method == "GET" and len(parts) == 2 and parts[0] == "jobs":
            return self._job(caller, parts[1])
        if method == "GET" and parts == ["status"]:
            viewer = self._viewer(caller, query)
            return self._call(lambda: self._status(viewer))
        if method == "GET" and parts == ["events"]:
            return self._events(caller, query)
        if method == "POST" and len(parts) == 3 and parts[0] == "jobs" and parts[2] == "command":
            return self._command(caller, parts[1], body)
        if method == "POST" and len(parts) == 2 and parts[0] == "hooks":
            return self._hook(caller, parts[1], body)
        if method == "POST" and parts == ["admin", "drain"]:
            if not caller.operator:
                raise ApiError(HTTPStatus.FORBIDDEN, "only root or SlurmUser may drain the RSA")
            on = (body or {}).get("on")
            if not isinstance(on, bool):
                raise ApiError(HTTPStatus.BAD_REQUEST, "on must be true or false")
            reason = " ".join(str((body or {}).get("reason") or "").split())[:200]
            to_pfs = (body or {}).get("pfs", False)
            if not isinstance(to_pfs, bool):
                raise ApiError(HTTPStatus.BAD_REQUEST, "pfs must be true or false")
            return self.daemon.submit("rsa-drain", (on, caller.user, reason, to_pfs),
                                      wait=True)
        if method == "POST" and len(parts) == 3 and parts[0] == "nodes" and parts[2] == "state":
            if not caller.operator:
                raise ApiError(HTTPStatus.FORBIDDEN, "only root or SlurmUser may drain nodes")
            state = str((body or {}).get("state", ""))
            reason = " ".join(str((body or {}).get("reason") or "").split())[:200]
            if state not in ("up", "drained", "down"):
                raise ApiError(HTTPStatus.BAD_REQUEST,
                               f"state must be up, drained or down, not {state[:20]!r}")
            if parts[1] not in {n.name for n in self.daemon.sched.pool.nodes()}:
                raise ApiError(HTTPStatus.NOT_FOUND, f"no RSA node {parts[1][:64]!r} in "
                                                     "the pool (see rsa nodes)")
            try:
                return self.daemon.submit("node-state", (parts[1], state, caller.user,
                                                         reason), wait=True)
            except CommandRefused as e:
                raise ApiError(HTTPStatus.CONFLICT, str(e)) from e
        raise ApiError(HTTPStatus.NOT_FOUND, f"no such endpoint {method} {url.path}")

    def _status(self, caller: Caller) -> dict[str, Any]:
        """The pool for everyone; for users, job ids (alerts, on-deck jobs, the job holding
        a node, a node's reason) only of their own jobs: another user's shows as
        ``HIDDEN_JOB`` (daemon.views.status_for_user).

        ``last_seq`` (the newest event's seq) lets a client ask ``/v1/events`` for the
        tail of the log only (``rsa top``)."""
        view = self.daemon.status_view()
        view["last_seq"] = self.daemon.store.last_seq()
        if caller.operator:
            return view
        d = self.daemon
        mine = {j for j, r in d.sched.records.items() if r.user == caller.user}
        mine |= {a for a, k in d.aliases.items() if k in mine}
        known = set(d.sched.records) | set(d.aliases) | set(d.aliases.values())
        known |= {str(item.get("job_id")) for left in d.debris.values() for item in left
                  if item.get("job_id")}
        return status_for_user(view, mine, known - mine)

    def _viewer(self, caller: Caller, query: dict[str, list[str]]) -> Caller:
        """Whose view of the status to give: the caller's, or with ``?as=UID`` (operators
        only) that uid's: ``rsa-bb status UID`` shows a ``scontrol show bbstat`` caller
        what rsad would show them."""
        uid = query.get("as", [None])[0]
        if uid is None:
            return caller
        if not caller.operator:
            raise ApiError(HTTPStatus.FORBIDDEN, "only root or SlurmUser may see the status as "
                                                 "another user")
        if not re.fullmatch(r"[0-9]{1,10}", uid) or int(uid) > MAX_UID:
            raise ApiError(HTTPStatus.BAD_REQUEST, f"as= takes a uid, a number from 0 to "
                                                   f"{MAX_UID}, not {uid[:20]!r}")
        return Caller(int(uid), _user_of(int(uid)))

    def _visible(self, caller: Caller, job_id: str) -> dict[str, Any]:
        """The job's view if the caller may see it; an array task named by its own job
        id (``$SLURM_JOB_ID`` in the task, which squeue shows as ``<array>_<task>``) is
        that task, by the match slurmctld's hooks taught rsad (its ``job_id`` says which).
        The array's own id, which one of its tasks also carries, names the array, as in
        Slurm (``scontrol show job`` of it shows every task): no task of it is answered
        for it; its owner is told that rsad tracks each task."""
        array_task: list[dict[str, Any]] = []

        def view() -> dict[str, Any] | None:
            records = self.daemon.sched.records
            rec = records.get(job_id)
            target = self.daemon.aliases.get(job_id) if rec is None else None
            if target is not None:
                task = records.get(target)
                if target.partition("_")[0] != job_id:
                    rec = task
                elif task is not None:
                    array_task.append(self.daemon.job_view(task))
            return self.daemon.job_view(rec) if rec else None

        job = self._call(view)
        if job is None and not array_task:
            job = self._archived(job_id)
        if job is None or (not caller.operator and job["user"] != caller.user):
            task = array_task[0] if array_task else None
            if task is not None and (caller.operator or task["user"] == caller.user):
                raise ApiError(HTTPStatus.NOT_FOUND,
                               f"job {job_id} is an array: the RSA tracks each of its tasks "
                               f"(rsa job {job_id}_<task>; rsa wait {job_id} waits for all)")
            # the same answer for "not yours" and "unknown": no information leak
            raise ApiError(HTTPStatus.NOT_FOUND, f"job {job_id} is not tracked by the RSA")
        return dict(job)

    def _archived(self, job_id: str) -> dict[str, Any] | None:
        """A job no longer in rsad's memory (finished, past ``daemon.retention``), rebuilt
        from its history in the store, on this API thread: from its record's start (its
        last ``job.tracked``), however many events earlier jobs of the id left."""
        from rsa_scheduler.core.machine import JobRecord, apply_event

        recs: dict[str, JobRecord] = {}
        with self._read() as ro:
            start = ro.last_named(job_id, "job.tracked")
            if not start:
                return None
            for ev in ro.events(job_id, since=start - 1):
                apply_event(recs, ev)
        rec = recs.get(job_id)
        if rec is None:
            return None
        return {**rec.to_json(), "progress": None, "ramdisk": None, "running": [],
                "archived": True}

    def _job(self, caller: Caller, job_id: str) -> dict[str, Any]:
        job = self._visible(caller, job_id)
        job["events"] = [
            {"seq": e.seq, "time": e.time, "name": e.name,
             **{k: v for k, v in e.context.items() if k != "set"}}
            for e in self._job_events(caller, str(job.get("job_id") or job_id), 0,
                                      newest=True)]
        return job

    def _read(self) -> Any:
        from rsa_scheduler.store import Store

        return Store.open(self.daemon.store.path, readonly=True)

    def _job_events(self, caller: Caller, job_id: str, since: int, *,
                    newest: bool = False) -> list[Any]:
        """``job_id``'s events after ``since`` (at most :data:`EVENTS_LIMIT`, oldest
        first; with ``newest``, the newest of them: a job's timeline, which ``rsa wait``
        reads its verdict from, ends with the job's last end and what became of its
        output, however many events came before): an operator's, all; a plain user's,
        those of the record that has the id now (:func:`_mine_since`), which
        :meth:`_visible` found theirs a moment before; if it is another user's by now,
        none (404, as an unknown job)."""
        with self._read() as ro:
            if not caller.operator:
                start = _mine_since(ro, job_id, caller.user)
                if start is None:
                    raise ApiError(HTTPStatus.NOT_FOUND,
                                   f"job {job_id} is not tracked by the RSA")
                since = max(since, start - 1)
            if newest:
                return list(ro.newest_events(job_id, since=since, limit=EVENTS_LIMIT))
            return list(ro.events(job_id, since=since, limit=EVENTS_LIMIT))

    def _events(self, caller: Caller, query: dict[str, list[str]]) -> dict[str, Any]:
        since = _seq(query, "since")
        job = query.get("job", [None])[0]
        if job is not None:
            job = str(self._visible(caller, job).get("job_id") or job)
            events = self._job_events(caller, job, since)
        elif caller.operator:
            with self._read() as ro:
                events = list(ro.events(None, since=since, limit=EVENTS_LIMIT))
        else:  # each of their jobs' own events, read by job: never the whole log's head
            user = caller.user
            mine = self._call(lambda: sorted(j for j, r in self.daemon.sched.records.items()
                                             if r.user == user))
            events = []
            with self._read() as ro:
                for j in mine:
                    start = _mine_since(ro, j, user)
                    if start is not None:
                        events += ro.events(j, since=max(since, start - 1),
                                            limit=EVENTS_LIMIT)
            events = sorted(events, key=lambda e: e.seq)[:EVENTS_LIMIT]
        return {"events": [{"seq": e.seq, "time": e.time, "job_id": e.job_id, "name": e.name,
                            **{k: v for k, v in e.context.items() if k != "set"}}
                           for e in events]}

    def _command(self, caller: Caller, job_id: str, body: Any) -> Any:
        command = str((body or {}).get("command", ""))
        # core.states: who may give which command (Trigger is a StrEnum: the name matches)
        allowed = OPERATOR_COMMANDS if caller.operator else USER_COMMANDS
        if command not in allowed:
            raise ApiError(HTTPStatus.FORBIDDEN,
                           f"{command or 'an empty command'} is not allowed for {caller.user}")
        # an array task's own job id names the task (as rsa job shows it): the command
        # is the task's, sent under its key (it was sent for the own id: "not tracked")
        job_id = str(self._visible(caller, job_id).get("job_id") or job_id)
        try:  # the loop judges whose job it is again, with the command (core.scheduler)
            return self.daemon.submit("command", (job_id, command, caller.user,
                                                  caller.operator), wait=True)
        except UnknownJob as e:
            raise ApiError(HTTPStatus.NOT_FOUND, str(e)) from e
        except CommandRefused as e:
            raise ApiError(HTTPStatus.CONFLICT, str(e)) from e

    def _hook(self, caller: Caller, hook: str, body: Any) -> Any:
        if not caller.operator:
            raise ApiError(HTTPStatus.FORBIDDEN, "hooks are accepted from root or SlurmUser only")
        payload = dict(body or {})
        payload["hook"] = hook
        # an own job id is matched to an array task here alone, from what Slurm says (the
        # pair slurmctld gives its hooks, or Slurm asked, the users compared), never as the
        # caller says: no hook sends an "alias", and one the loop took (unchecked, logged,
        # replayed) made every later hook of that id, anyone's job's, the named job's
        payload.pop("alias", None)
        if not re.fullmatch(r"\d+(_\d+)?", str(payload.get("job_id", ""))):
            raise ApiError(HTTPStatus.BAD_REQUEST, "hook without a valid job_id")
        if payload.get("nodes"):  # expanded by NodeSide: bounded before, whoever sent it
            try:
                check_size(str(payload["nodes"]))
            except ValueError as e:
                raise ApiError(HTTPStatus.BAD_REQUEST, f"{hook} hook: {e}") from e
        # an array task is known to rsad (squeue) as <array job>_<task>; its hooks see its
        # own job id too: the task's key replaces it (core.jobkey). slurmctld's hooks name
        # both (rsad remembers the pair); a node's Prolog/Epilog only the job's own id
        # (Slurm 22.05 gives them no SLURM_ARRAY_*): rsad's memory of the pair names it.
        try:
            key = job_key(payload)
        except ValueError as e:
            raise ApiError(HTTPStatus.BAD_REQUEST, str(e)) from e
        own = str(payload["job_id"])
        if key == own and hook in NODE_HOOKS:
            key = self._array_task_of(own) or own
        if key != own:
            payload["alias"] = own
        payload["job_id"] = self.daemon.aliases.get(key, key)
        if hook in NODE_HOOKS:
            return self._node_hook(hook, payload)
        return self.daemon.submit("hook", payload, wait=True)

    def _bb_pools(self, caller: Caller) -> Any:
        """The pools JSON rsad writes to ``slurm.bb_pools_file``, for ``rsa-bb pools`` on
        a slurmctld host other than rsad's (slurm_bb_pools reads a local file only)."""
        if not caller.operator:
            raise ApiError(HTTPStatus.FORBIDDEN, "burst buffer pools are given to root or "
                                                 "SlurmUser only")
        native = self.daemon.native
        if native is None:
            raise ApiError(HTTPStatus.CONFLICT, "rsad runs in queue mode: burst buffer "
                                                "pools exist only with slurm.mode: native")
        text = native.pools_text
        if not text:
            raise ApiError(HTTPStatus.SERVICE_UNAVAILABLE, "rsad has not counted its RSA "
                                                           "nodes' capacity yet: not yet")
        return json.loads(text)

    def _bb(self, caller: Caller, hook: str, body: Any) -> Any:
        """burst_buffer.lua's hooks, through ``rsa-bb`` (native mode, daemon/native.py):
        run as SlurmUser. A job array task is known to Slurm's hooks by its own job id
        and to rsad by ``<array>_<task>``: asked of Slurm at setup, remembered."""
        from rsa_scheduler.daemon.native import HOOKS

        if not caller.operator:
            raise ApiError(HTTPStatus.FORBIDDEN, "burst buffer hooks are accepted from root "
                                                 "or SlurmUser only")
        if hook not in HOOKS:
            raise ApiError(HTTPStatus.NOT_FOUND, f"no burst buffer hook {hook[:32]!r}")
        payload = dict(body or {})
        # an array task's own id is matched to its task here alone (asked of Slurm, the
        # users compared), never as the caller says: rsa-bb sends no "alias"
        payload.pop("alias", None)
        own = str(payload.get("job_id", ""))
        if not re.fullmatch(r"\d+", own):
            raise ApiError(HTTPStatus.BAD_REQUEST, "burst buffer hook without a valid job_id")
        if not self.daemon.ready.is_set():
            # nothing is known for sure before the log is replayed and the RSA nodes
            # fenced (an array task's own id, what was staged): never "done" now
            return {"job_id": own, "status": "wait", "rsa_state": None,
                    "message": "rsad is starting (replaying its event log, fencing the RSA "
                               "nodes): not yet"}
        job = self.daemon.aliases.get(own, own)
        if hook == "setup" and job == own:
            try:
                info = self.daemon.slurm.job_info(own)
            except Exception as e:  # unknown whether it is an array task: not yet
                log.warning("job %s: could not ask Slurm whether it is an array task: %s",
                            own, e)
                return {"job_id": own, "status": "wait", "rsa_state": None,
                        "message": f"rsad cannot ask Slurm about job {own} yet ({e}): "
                                   "asking again"}
            key = info.array_key
            if key is not None:
                # an array task is never served under its own id: rsad tracks it as
                # <array>_<task>, which the queue lists, so under its own id it would be
                # a job without directives ("nothing to stage") started without its input
                why = _other_uid(info.user, payload.get("uid")) or \
                    self._call(lambda: self._learn_alias(own, key, info.user, tracked=False))
                if why:
                    return {"job_id": own, "status": "failed", "rsa_state": None,
                            "message": f"job {own} is array task {key}, which rsad cannot "
                                       f"take for it: {why}; scancel the task and submit "
                                       "it again"}
                job = key
                payload["alias"] = own
        try:
            return self._call(lambda: self.daemon.bb(hook, job, payload))
        except CommandRefused as e:
            raise ApiError(HTTPStatus.CONFLICT, str(e)) from e

    def _array_task_of(self, own: str) -> str | None:
        """The key of the array task whose own job id is ``own``, when rsad tracks an
        array task it has not matched to its own id yet (a node Prolog can come before
        slurmctld's hook names the pair, or rsad restarted in between): asked of Slurm
        once, and remembered. None when ``own`` is not such a task."""
        def unmatched() -> bool:
            d = self.daemon
            if own in d.aliases or own in d.sched.records:
                return False
            named = set(d.aliases.values())
            return any("_" in k and k not in named for k in d.sched.records)

        if not self._call(unmatched):
            return None
        try:
            info = self.daemon.slurm.job_info(own)
        except Exception as e:  # any failure: the hook goes on under its own id
            log.warning("job %s: could not ask Slurm whether it is an array task: %s",
                        own, e)
            return None
        key = info.array_key
        if key is None:
            return None
        return None if self._call(lambda: self._learn_alias(own, key, info.user,
                                                            tracked=True)) else key

    def _learn_alias(self, own: str, key: str, user: str, *, tracked: bool) -> str:
        """Loop thread: remember that job ``own`` (Slurm says: ``user``'s array task
        ``key``) is rsad's ``key``, unless that would let one job pass for another: the
        RSA job ``key`` (untracked allowed only when not ``tracked``, native mode's setup
        comes first) must be ``user``'s, and neither ``own`` nor ``key`` may be matched
        to another job already. Returns why not, "" when remembered."""
        d = self.daemon
        rec = d.sched.records.get(key)
        why = None
        if rec is None and tracked:
            why = "rsad tracks no such job"
        elif rec is not None and rec.user != user:
            why = f"that job is {rec.user}'s, job {own} is {user}'s"
        elif d.aliases.get(own, key) != key:
            why = f"job {own} is task {d.aliases[own]} already"
        else:
            other = next((o for o, k in d.aliases.items() if k == key and o != own), None)
            if other is not None:
                why = f"task {key} is job {other} already"
        if why is not None:
            log.warning("job %s: not taken for array task %s: %s", own, key, why)
            return why
        d.aliases[own] = key
        return ""

    def _heard(self, node: str, hook: str, job: str, payload: Mapping[str, Any]) -> None:
        """The hook protocol a compute node's request speaks: a node whose hooks are older
        than rsad's (a package not upgraded yet, or a job's agent started before its
        node's upgrade) is logged once, and shown by rsa status, until it speaks ours."""
        said = self.daemon.hook_protocols.heard(node, hook, job, protocol_of(payload))
        if said is not None:
            level, line = said
            (log.warning if level == "warning" else log.info)("%s", line)

    def _node_hook(self, hook: str, payload: dict[str, Any]) -> Any:
        """Node Prolog / node agent / Epilog of a compute node (rsa_scheduler.node)."""
        from rsa_scheduler.daemon.nodeside import nodeside_of

        job = str(payload["job_id"])
        node = str(payload.get("node") or "")
        if not re.fullmatch(r"[A-Za-z0-9._-]+", node):
            raise ApiError(HTTPStatus.BAD_REQUEST, "node hook without a valid node name")
        nodes = str(payload.get("nodes") or "")
        self._heard(node, hook, job, payload)
        protocol = protocol_of(payload)
        if hook == "prolog" and protocol < SEALED_ARGV and \
                self.daemon.hook_protocols.seals(node, job):
            log.warning("job %s: a Prolog request of hook protocol %d from %s, whose hooks "
                        "spoke protocol %d or later before, refused: rsad sends a "
                        "RAMDISK's secret in the clear only to a node not upgraded yet",
                        job, protocol, node, SEALED_ARGV)
            raise ApiError(HTTPStatus.CONFLICT,
                           f"{node}'s hooks spoke hook protocol {SEALED_ARGV} or later "
                           f"before, this Prolog {protocol}: refused (a request replayed "
                           "from an old capture, or an rsa-scheduler package downgraded "
                           f"on {node}: upgrade it, or restart rsad after a downgrade)")
        side = nodeside_of(self.daemon.registry)
        if side is None:
            return {"do": "nothing", "agent": False, "why": "rsad has no compute-node side"}
        if hook == "mounted":
            answer = side.report(job, node, payload)
            if "held" in answer:  # a mount taken back, or a late Prolog's counted
                held, why = bool(answer["held"]), str(payload.get("message") or "")[:500]
                # recorded by the loop, without waiting for it: a node's report is
                # answered at once (a Prolog whose answer is late undoes its mount)
                self.daemon.submit("call", lambda: self.daemon.mount_noted(job, node, held,
                                                                           why))
            return answer
        if hook == "epilog":
            if payload.get("ok") is False:  # a mount of the job stays on the node
                why = str(payload.get("message") or "no reason given")[:500]
                self._call(lambda: self.daemon.mount_left(job, node, why))
            return side.epilog(job, node)
        if hook == "agent":
            wait = _agent_wait(payload.get("wait", AGENT_WAIT_DEFAULT))
            return self._sealed(side.agent(job, node, nodes,
                                           int(payload.get("last_seq", 0)), wait,
                                           str(payload.get("epoch") or "")),
                                job, node, protocol)

        user = str(payload.get("user") or "")

        def state() -> tuple[str | None, str | None, float, str]:
            rec = self.daemon.sched.records.get(job)
            if rec is None or users_differ(rec.user, user) or \
                    job in self.daemon.sched.displaced:
                # none, or another job had this id (Slurm lost its state, or its ids
                # wrapped; the same user's: the queue told them apart): nothing of that
                # job's is this one's
                return None, None, 0.0, ""
            policy = self.daemon.sched.policy
            early = rec.spec.early_start or policy.early_start
            hold = policy.wait_timeout if early.value == "wait" and not rec.wait_over else 0.0
            due = rec.timers.get("wait-expired")
            if hold and (due is not None or rec.hold_until is not None):
                # what is left of the wait (a job Slurm held has spent some already)
                end = due if due is not None else float(rec.hold_until or 0.0)
                hold = max(0.0, min(hold, end - self.daemon.clock()))
            return (rec.rsa_state.value, rec.job_state.value if rec.job_state else None,
                    hold, rec.message)

        rsa_state, job_state, hold, message = self._call(state)
        if rsa_state is not None and job_state not in LEFT_QUEUE:
            # the node Prolog runs after PrologSlurmctld; if rsad missed that, tell it now
            told = {"hook": "prolog_slurmctld", "job_id": job, "nodes": nodes}
            if payload.get("alias"):  # an array task's own id: kept in the event log
                told["alias"] = payload["alias"]
            self.daemon.submit("hook", told, wait=True)
            rsa_state, job_state, hold, message = self._call(state)
        return self._sealed(side.prolog(job, node, nodes, rsa_state, hold=hold,
                                        message=message), job, node, protocol)

    @staticmethod
    def _sealed(answer: dict[str, Any], job: str, node: str,
                protocol: int) -> dict[str, Any]:
        """:func:`sealed`; a mount command that goes in the clear (a node older than
        protocol :data:`~rsa_scheduler.node.plan.SEALED_ARGV`) is said in rsad's log
        each time, naming the job and the node to upgrade."""
        out = sealed(answer, protocol)
        if "client_argv" in out:
            log.warning("job %s: its RAMDISK's mount command went to %s with its secret in "
                        "the clear: %s speaks hook protocol %d, and only %d or later takes "
                        "it sealed; upgrade rsa-scheduler on %s (operator guide, "
                        "\"Upgrades and backups\")", job, node, node,
                        protocol, SEALED_ARGV, node)
        return out


def sealed(answer: dict[str, Any], protocol: int) -> dict[str, Any]:
    """A node hook's answer with its mount instruction's ``client_argv``, which holds the
    RAMDISK's secret (``mfspassword=``, BeeGFS's connAuth), sealed in a MUNGE credential
    of rsad's that only root can decode (``sealed_argv``; munged encrypts a credential's
    payload, and refuses one restricted to uid 0 to every other uid). The answer goes in
    the clear over TCP to whoever passed as root: a user on rsad's host who held its TCP
    port while rsad was down kept a node Prolog's request, root's credential in it
    unused, and sent it to rsad once rsad was back (within the credential's 5 minutes):
    rsad answered it, the job's RAMDISK secret in the clear. A node whose hooks are older
    (protocol < :data:`~rsa_scheduler.node.plan.SEALED_ARGV`) gets the argv as before."""
    argv = answer.get("client_argv")
    if argv is None or protocol < SEALED_ARGV:
        return answer
    out = {k: v for k, v in answer.items() if k != "client_argv"}
    out["sealed_argv"] = munge.encode(json.dumps(argv).encode(), restrict_uid=0)
    return out


class Endpoint:
    """The API over :mod:`rsa_scheduler.daemon.httpd`: MUNGE says who is calling (and on
    the unix socket must agree with the kernel's SO_PEERCRED), :class:`Routes` answer, and
    every answer to an authenticated caller is signed with rsad's own credential,
    decodable by that caller's uid only: the node hooks act on it as root, and a user's
    ``rsa`` believes nothing else (a program on rsad's TCP port while rsad is down)."""

    def __init__(self, routes: Routes) -> None:
        self.routes = routes
        #: whether rsad may sign a plain user's answers: munged refuses root a credential
        #: restricted to another uid (asked once, on the first such answer)
        self._users_signed: bool | None = None

    def identify(self, req: httpd.Request) -> httpd.Identity:
        cred = req.head.headers.get(AUTH_HEADER.lower())
        if not cred:
            raise httpd.HttpError(HTTPStatus.UNAUTHORIZED, "missing MUNGE credential")
        try:
            sender, payload = munge.decode(cred)
        except (munge.MungeError, ValueError) as e:
            raise httpd.HttpError(HTTPStatus.UNAUTHORIZED, str(e)) from e
        if payload != munge.request_digest(req.head.method, req.head.target, req.body):
            raise httpd.HttpError(HTTPStatus.UNAUTHORIZED,
                                  "MUNGE credential does not match this request")
        if req.peer_uid is not None and req.peer_uid != sender.uid:
            raise httpd.HttpError(HTTPStatus.UNAUTHORIZED,
                                  f"the MUNGE credential is uid {sender.uid}'s but the "
                                  f"connection is uid {req.peer_uid}'s")
        caller = Caller(sender.uid, _user_of(sender.uid))
        return httpd.Identity(caller.uid, caller.user, caller.operator)

    def respond(self, req: httpd.Request, who: httpd.Identity) -> httpd.Reply:
        method, path = req.head.method, req.head.target
        try:
            body = _body(req.body)
            result = self.routes.dispatch(Caller(who.uid, who.name), method, path, body)
            return self._reply(HTTPStatus.OK, result, req, who)
        except ApiError as e:
            return self._reply(e.status, {"error": str(e)}, req, who)
        except munge.MungeError as e:
            return self._reply(HTTPStatus.UNAUTHORIZED, {"error": str(e)}, req, who)
        except (ValueError, KeyError) as e:
            return self._reply(HTTPStatus.BAD_REQUEST, {"error": str(e)}, req, who)
        except NotTaken:  # withdrawn before the loop took it: safe to send again
            return self._reply(HTTPStatus.SERVICE_UNAVAILABLE,
                               {"error": "rsad is busy: its loop did not take the request "
                                         "in time; nothing of it was done, retry in a "
                                         "moment"}, req, who)
        except TimeoutError:
            # a request that changes state is 504, never 503: clients send a 503 again
            # (rsad full, or nothing of it done), and this one may still be carried out
            late = HTTPStatus.SERVICE_UNAVAILABLE if method == "GET" else \
                HTTPStatus.GATEWAY_TIMEOUT
            return self._reply(late,
                               {"error": "rsad is busy: its loop took the request but did "
                                         "not answer in time; it may still be carried out "
                                         "(rsa job shows the job's state)"}, req, who)
        except Exception as e:
            log.exception("api: %s %s failed", method, path)
            return self._reply(HTTPStatus.INTERNAL_SERVER_ERROR,
                               {"error": f"internal error: {e}"}, req, who)

    def refuse(self, req: httpd.Request, status: HTTPStatus, message: str) -> httpd.Reply:
        """Never signed: refused before (or instead of) reading a valid credential, rsad
        does not know whose uid could decode a signature."""
        return self._reply(status, {"error": message})

    def _reply(self, status: HTTPStatus, data: Any, req: httpd.Request | None = None,
               who: httpd.Identity | None = None) -> httpd.Reply:
        """The answer; signed (``REPLY_HEADER``) when it goes to an authenticated caller,
        whatever its status, with a credential only that caller's uid can decode over the
        caller's request credential, the status and the body (:func:`munge.reply_digest`):
        rsad's credential is root's, and nobody but its caller gets it, root included
        (:meth:`_may_sign`)."""
        out = json.dumps(data, sort_keys=True).encode()
        headers: dict[str, str] = {}
        if req is not None and who is not None and self._may_sign(who):
            try:
                headers[REPLY_HEADER] = munge.encode(munge.reply_digest(
                    req.head.headers.get(AUTH_HEADER.lower(), ""), int(status), out),
                    restrict_uid=who.uid)
            except munge.MungeError as e:
                log.warning("api: reply to uid %d not signed: %s", who.uid, e)
        return httpd.Reply(int(status), out, headers)

    def _may_sign(self, who: httpd.Identity) -> bool:
        """Operators' answers always (root and SlurmUser hold Slurm's trust anyway); a
        plain user's only where munged refuses root a credential restricted to another
        uid, munge's default. A munged built to let root decode anything would make a
        user's copy a root credential slurmd (root) takes for an RPC: then no plain
        user's answer is signed, and their ``rsa`` refuses every answer, loudly."""
        if who.privileged:
            return True
        if self._users_signed is None:
            try:
                self._users_signed = not munge.root_decodes_restricted()
            except munge.MungeError as e:
                log.warning("api: cannot ask munged whether root may decode a credential "
                            "restricted to another uid (%s); this answer is not signed", e)
                return False
            if not self._users_signed:
                log.error("api: munged lets root decode credentials restricted to other "
                          "uids (built with MUNGE_AUTH_ROOT_ALLOW_FLAG): rsad signs no "
                          "plain user's answer, and their rsa refuses every answer; "
                          "install a munge built without it (Debian's)")
        return self._users_signed


def _mine_since(ro: Any, job_id: str, user: str) -> int | None:
    """The seq at which the record that has ``job_id`` now began (its last
    ``job.tracked``), if that record is ``user``'s; None if it is another user's or there
    is none. The events before it are an earlier job's of the same id (Slurm lost its
    state, or its ids wrapped), perhaps another user's, and only an operator sees them.
    Asked of the store itself: a job's first 10,000 events, which this was read from
    before, could end before its newest record began."""
    start = int(ro.last_named(job_id, "job.tracked"))
    if not start:
        return None
    first = next(iter(ro.events(job_id, since=start - 1, limit=1)), None)
    made = (first.context.get("set") or {}) if first is not None else {}
    return start if made.get("user") == user else None


#: no route reads a body nested past a few levels; deeper is refused before parsing, on
#: every Python (3.14's parser takes a depth of 50,000 that 3.11-3.13's refuse)
MAX_BODY_DEPTH = 64


def _too_deep(raw: bytes, limit: int = MAX_BODY_DEPTH) -> bool:
    """Whether the JSON text ``raw`` opens more than ``limit`` arrays or objects inside
    one another (brackets inside strings do not count)."""
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    depth, in_string, escaped = 0, False, False
    for byte in raw:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > limit:
                return True
        elif byte in (0x5D, 0x7D):  # ] }
            depth -= 1
    return False


def _body(raw: bytes) -> dict[str, Any] | None:
    """A request's JSON body: an object, or none. Anything else is the caller's mistake,
    answered 400 in one line (it was a 500 and a traceback in rsad's log per request:
    a list where the routes read keys, or nesting deep enough to exhaust the parser)."""
    if not raw:
        return None
    if _too_deep(raw):
        raise ApiError(HTTPStatus.BAD_REQUEST, "the request body is nested too deeply "
                                               f"(over {MAX_BODY_DEPTH} levels): send one "
                                               "JSON object")
    try:
        body = json.loads(raw)
    except RecursionError as e:
        raise ApiError(HTTPStatus.BAD_REQUEST, "the request body is nested too deeply: "
                                               "send one JSON object") from e
    except ValueError as e:
        raise ApiError(HTTPStatus.BAD_REQUEST, f"the request body is not JSON ({e}): "
                                               "send one JSON object") from e
    if not isinstance(body, dict):
        raise ApiError(HTTPStatus.BAD_REQUEST, f"the request body is a JSON "
                                               f"{type(body).__name__}, not an object: "
                                               "send one JSON object")
    return body


def _agent_wait(raw: object) -> float:
    """A node agent's ``wait``: seconds to hold its long poll, 0 to
    :data:`AGENT_WAIT_MAX` (more is held that long). NaN (which made the poll spin on its
    lock for ever: every comparison with it is false), infinity, a negative number or
    anything but a number is refused in one line."""
    wait = raw if isinstance(raw, (int, float)) and not isinstance(raw, bool) else None
    if wait is None or not math.isfinite(wait) or wait < 0:
        raise ApiError(HTTPStatus.BAD_REQUEST,
                       f"agent hook: wait takes a number of seconds from 0 to "
                       f"{AGENT_WAIT_MAX:g}, not {str(raw)[:20]!r}")
    return min(float(wait), AGENT_WAIT_MAX)


def _seq(query: Mapping[str, list[str]], key: str) -> int:
    """An event sequence number from the query (``since=``): 0 to 2^63-1, as the store
    keeps them (a larger one made the store's query fail: a 500 and a traceback)."""
    text = query.get(key, ["0"])[0]
    if not re.fullmatch(r"[0-9]{1,18}", text):
        raise ApiError(HTTPStatus.BAD_REQUEST,
                       f"{key}= takes an event number (0 or more), not {text[:20]!r}")
    return int(text)


def _other_uid(user: str, uid: object) -> str:
    """Why ``uid`` (a hook's, from slurmctld) is not ``user``'s (squeue's name of the
    same job), "" when it is or cannot be told otherwise: no uid given, or a name this
    host cannot resolve (squeue prints a uid it cannot resolve as the number itself;
    both answers are Slurm's own of the same job, so only two that differ count)."""
    if uid in (None, "") or not str(uid).isdigit():
        return ""
    if user.isdigit():
        known: int | None = int(user)
    else:
        try:
            known = pwd.getpwnam(user).pw_uid
        except KeyError:
            known = None
    if known is None or known == int(str(uid)):
        return ""
    return f"Slurm's hook names uid {uid}, its queue user {user} (uid {known})"


def _privileged_uid(uid: int) -> bool:
    """Asked on the accept thread: by uid, no name lookup (daemon/operators.py)."""
    return OPERATORS.is_operator(uid)


def bind_unix(path: Path, group: str) -> socket.socket:
    """rsad's unix socket, mode 0660 root:``group`` (0600 without a group), put in place
    atomically: it never exists at ``path`` with a looser mode."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.unlink(missing_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(tmp))
        gid: int | None = None
        if group:
            try:
                gid = grp.getgrnam(group).gr_gid
            except KeyError:
                log.warning("daemon.api.socket_group %s does not exist: %s is mode 0600 "
                            "(root only); create it (groupadd --system %s), add slurm and "
                            "the users who run rsa on this host, and restart rsad",
                            group, path, group)
        if gid is None:
            os.chmod(tmp, 0o600)
        else:
            os.chown(tmp, -1, gid)
            os.chmod(tmp, 0o660)
        if path.exists() or path.is_symlink():
            path.unlink()
        os.replace(tmp, path)
        sock.listen(socket.SOMAXCONN)
    except BaseException:
        sock.close()
        tmp.unlink(missing_ok=True)
        raise
    return sock


def _raise_fd_limit(needed: int) -> None:
    """Connections are file descriptors: make room for ``needed`` more than rsad's own."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = needed + 256
    if soft != resource.RLIM_INFINITY and soft < want:
        new = want if hard == resource.RLIM_INFINITY else min(want, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
        if new < want:
            log.warning("daemon.api.max_connections %d needs %d file descriptors; the hard "
                        "limit is %d (LimitNOFILE= in rsad.service)", needed, want, hard)


class ApiServers:
    """The unix-socket listener (always) and the TCP listener (when configured), served
    by one bounded :class:`rsa_scheduler.daemon.httpd.Server`."""

    def __init__(self, routes: Routes, socket_path: Path,
                 listen: tuple[str, int] | None = None, *, socket_group: str = "",
                 limits: httpd.Limits | None = None) -> None:
        self.limits = limits or httpd.Limits()
        _raise_fd_limit(self.limits.max_connections)
        listeners = [bind_unix(socket_path, socket_group)]
        if listen is not None:
            family = socket.AF_INET6 if ":" in listen[0] else socket.AF_INET
            try:
                listeners.append(socket.create_server(listen, family=family,
                                                      backlog=socket.SOMAXCONN))
            except BaseException:
                listeners[0].close()
                raise
        self.socket_path = socket_path
        self.server = httpd.Server(listeners, Endpoint(routes), self.limits, _privileged_uid)

    @classmethod
    def from_config(cls, routes: Routes, api: ApiConfig) -> ApiServers:
        listen = (api.listen.host, api.listen.port) if api.listen else None
        return cls(routes, api.socket, listen, socket_group=api.socket_group,
                   limits=httpd.Limits(read_timeout=api.read_timeout,
                                       max_connections=api.max_connections,
                                       per_user=api.per_user, workers=api.workers))

    def start(self) -> None:
        self.server.start()

    def stop(self) -> None:
        self.server.stop()
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
