"""rsad's API routes: what each request of the ``rsa`` CLI, ``rsa-bb`` and Slurm's hooks
does, JSON over HTTP, every request authenticated with a MUNGE credential, as Slurm does.

Owns :class:`Routes` (the endpoints of ``/v1``), :class:`Caller` and the authorisation
rule (root and the Slurm user may see and act on every job; anyone else only on their own
jobs, and sees other users' job ids nowhere), slurmctld's and burst_buffer.lua's hooks
(an array task's own job id matched to its task from what Slurm says), and what a
request may name (``?as=`` a uid, ``since=`` an event number, a hook's job id and its
hostlist, bounded before anything expands it). The compute nodes' hooks are
:mod:`rsa_scheduler.daemon.nodehooks`'s; the transport (identity, signed answers, the
socket, the listeners) :mod:`rsa_scheduler.daemon.apiserver`'s, which imports this
module; the limits on what a caller can hold :mod:`rsa_scheduler.daemon.httpd`'s.
Requests that change state are handed to the daemon's loop thread; nothing here touches
the core directly. The API answers from the moment rsad starts: until the daemon is ready
(its log replayed, the RSA nodes fenced: ``Daemon.ready``) burst_buffer.lua's hooks hear
"wait" and every other request 503 ``rsad is starting``.
"""

from __future__ import annotations

import json
import logging
import pwd
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs, urlsplit

from rsa_scheduler.core.events import POOL, Event
from rsa_scheduler.core.hostlist import check_size
from rsa_scheduler.core.jobkey import job_key
from rsa_scheduler.core.scheduler import CommandRefused, UnknownJob
from rsa_scheduler.core.states import OPERATOR_COMMANDS, USER_COMMANDS
from rsa_scheduler.daemon.httpd import ApiError
from rsa_scheduler.daemon.nodehooks import AGENT_WAIT_MAX, NODE_HOOKS, NodeHooks, sealed
from rsa_scheduler.daemon.operators import OPERATORS
from rsa_scheduler.daemon.service import Daemon
from rsa_scheduler.daemon.views import status_for_user

__all__ = ["AGENT_WAIT_MAX", "AUTH_HEADER", "EVENTS_LIMIT", "MAX_UID", "REPLY_HEADER",
           "ApiError", "Caller", "Routes", "event_view", "sealed", "user_of"]

log = logging.getLogger(__name__)
AUTH_HEADER = "X-RSA-Munge"
REPLY_HEADER = "X-RSA-Munge-Reply"  # rsad's credential over its answer (node hooks check it)
EVENTS_LIMIT = 10_000  # events in one answer (rsa events pages on with since=)
#: the largest uid (uid_t's (uid_t)-1 is "no uid"): ``?as=`` takes 0 to this
MAX_UID = 2**32 - 2
#: context keys shown under another name beside an event's own fields, which they would
#: hide: ``node.debris`` names the job whose RAMDISK it was (``job_id``), its own job id
#: being ``@pool``
CONTEXT_SHOWN_AS = {"job_id": "job"}
#: the answer to everything but burst_buffer.lua's hooks until rsad is ready
STARTING = ("rsad is starting (replaying its event log and fencing what an earlier rsad "
            "left on the RSA nodes); retry in a moment")


@dataclass(frozen=True, slots=True)
class Caller:
    uid: int
    user: str

    @property
    def operator(self) -> bool:
        """Root or SlurmUser (daemon/operators.py), by uid."""
        return OPERATORS.is_operator(self.uid)


def user_of(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def event_view(e: Event, *, with_job: bool = True) -> dict[str, Any]:
    """An event as the API shows it (``rsa events``, ``rsa job``'s timeline): its own
    ``seq``, ``time``, ``job_id`` (without ``with_job``: a job's timeline) and ``name``,
    its context's keys beside them but ``set``. A context key never hides one of its own:
    it is shown as :data:`CONTEXT_SHOWN_AS` says (``node.debris``'s ``job_id`` as
    ``job``: the event stays ``@pool``'s, where ``rsa events --job @pool`` finds it)."""
    out: dict[str, Any] = {"seq": e.seq, "time": e.time}
    if with_job:
        out["job_id"] = e.job_id
    out["name"] = e.name
    for key, value in e.context.items():
        shown = CONTEXT_SHOWN_AS.get(key, key)
        if key != "set" and shown not in out:
            out[shown] = value
    return out


class Routes:
    """The API's operations, independent of the transport."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self.node_hooks = NodeHooks(daemon, self._call)

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
        return Caller(int(uid), user_of(int(uid)))

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
            event_view(e, with_job=False)
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
        if job == POOL:  # the RSA nodes' and the whole RSA's: other users' job ids in them
            if not caller.operator:
                raise ApiError(HTTPStatus.FORBIDDEN,
                               f"the {POOL} events (the RSA nodes', the whole RSA's) are "
                               "for operators (root, SlurmUser); rsa nodes and rsa status "
                               "show the RSA nodes")
            with self._read() as ro:
                events = list(ro.events(POOL, since=since, limit=EVENTS_LIMIT))
        elif job is not None:
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
        return {"events": [event_view(e) for e in events]}

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
            return self.node_hooks.answer(hook, payload)
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
