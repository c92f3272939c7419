"""rsad's API: JSON over HTTP on a unix socket (local CLI) and optionally TCP (compute-node
hooks), every request authenticated with a MUNGE credential, as Slurm does.

Owns the routes, the authorisation rule (root and the Slurm user may see and act on every
job; anyone else only on their own jobs) and the servers. Requests that change state are
handed to the daemon's loop thread; nothing here touches the core directly.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pwd
import re
import socket
import socketserver
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from rsa_scheduler.core.scheduler import CommandRefused
from rsa_scheduler.daemon import munge
from rsa_scheduler.daemon.service import Daemon

log = logging.getLogger(__name__)
AUTH_HEADER = "X-RSA-Munge"
REPLY_HEADER = "X-RSA-Munge-Reply"  # rsad's credential over its answer (node hooks check it)
MAX_BODY = 1 << 20
OPERATOR_USERS = frozenset({"root", "slurm"})
USER_COMMANDS = {"input-done", "cancel-staging"}
NODE_HOOKS = frozenset({"prolog", "agent", "mounted", "epilog"})
OPERATOR_COMMANDS = {"retry", "discard", "force-release", "input-done", "cancel-staging"}


class ApiError(Exception):
    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class Caller:
    uid: int
    user: str

    @property
    def operator(self) -> bool:
        return self.uid == 0 or self.user in OPERATOR_USERS


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
        if method == "GET" and parts == ["jobs"]:
            user = None if caller.operator else caller.user
            return {"jobs": self._call(lambda: self.daemon.jobs_view(user))}
        if method == "GET" and len(parts) == 2 and parts[0] == "jobs":
            return self._job(caller, parts[1])
        if method == "GET" and parts == ["status"]:
            return self._call(lambda: self._status(caller))
        if method == "GET" and parts == ["events"]:
            return self._events(caller, query)
        if method == "POST" and len(parts) == 3 and parts[0] == "jobs" and parts[2] == "command":
            return self._command(caller, parts[1], body)
        if method == "POST" and len(parts) == 2 and parts[0] == "hooks":
            return self._hook(caller, parts[1], body)
        if method == "POST" and len(parts) == 3 and parts[0] == "nodes" and parts[2] == "state":
            if not caller.operator:
                raise ApiError(HTTPStatus.FORBIDDEN, "only root or slurm may drain nodes")
            state = str((body or {}).get("state", ""))
            reason = " ".join(str((body or {}).get("reason") or "").split())[:200]
            if state not in ("up", "drained", "down"):
                raise ApiError(HTTPStatus.BAD_REQUEST,
                               f"state must be up, drained or down, not {state[:20]!r}")
            if parts[1] not in {n.name for n in self.daemon.sched.pool.nodes()}:
                raise ApiError(HTTPStatus.NOT_FOUND, f"no RSA node {parts[1][:64]!r} in "
                                                     "the pool (see rsa nodes)")
            return self.daemon.submit("node-state", (parts[1], state, caller.user, reason),
                                      wait=True)
        raise ApiError(HTTPStatus.NOT_FOUND, f"no such endpoint {method} {url.path}")

    def _status(self, caller: Caller) -> dict[str, Any]:
        """The pool for everyone; alerts only about the caller's own jobs for users.

        ``last_seq`` (the newest event's seq) lets a client ask ``/v1/events`` for the
        tail of the log only (``rsa top``)."""
        view = self.daemon.status_view()
        view["last_seq"] = self.daemon.store.last_seq()
        if not caller.operator:
            recs = self.daemon.sched.records
            view["alerts"] = [a for a in view["alerts"]
                              if (r := recs.get(a["job_id"])) and r.user == caller.user]
        return view

    def _visible(self, caller: Caller, job_id: str) -> dict[str, Any]:
        def view() -> dict[str, Any] | None:
            rec = self.daemon.sched.records.get(job_id)
            return self.daemon.job_view(rec) if rec else None

        job = self._call(view)
        if job is None or (not caller.operator and job["user"] != caller.user):
            # the same answer for "not yours" and "unknown": no information leak
            raise ApiError(HTTPStatus.NOT_FOUND, f"job {job_id} is not tracked by the RSA")
        return dict(job)

    def _job(self, caller: Caller, job_id: str) -> dict[str, Any]:
        job = self._visible(caller, job_id)
        job["events"] = [
            {"seq": e.seq, "time": e.time, "name": e.name,
             **{k: v for k, v in e.context.items() if k != "set"}}
            for e in self._store_events(job_id)]
        return job

    def _store_events(self, job_id: str | None, since: int = 0) -> list[Any]:
        from rsa_scheduler.store import Store

        with Store.open(self.daemon.store.path, readonly=True) as ro:
            return list(ro.events(job_id, since=since, limit=10_000))

    def _events(self, caller: Caller, query: dict[str, list[str]]) -> dict[str, Any]:
        since = int(query.get("since", ["0"])[0])
        job = query.get("job", [None])[0]
        if job is not None:
            self._visible(caller, job)
        events = self._store_events(job, since)
        if not caller.operator:
            mine = {j["job_id"] for j in self._call(lambda: self.daemon.jobs_view(caller.user))}
            events = [e for e in events if e.job_id in mine]
        return {"events": [{"seq": e.seq, "time": e.time, "job_id": e.job_id, "name": e.name,
                            **{k: v for k, v in e.context.items() if k != "set"}}
                           for e in events]}

    def _command(self, caller: Caller, job_id: str, body: Any) -> Any:
        command = str((body or {}).get("command", ""))
        allowed = OPERATOR_COMMANDS if caller.operator else USER_COMMANDS
        if command not in allowed:
            raise ApiError(HTTPStatus.FORBIDDEN,
                           f"{command or 'an empty command'} is not allowed for {caller.user}")
        self._visible(caller, job_id)
        try:
            return self.daemon.submit("command", (job_id, command, caller.user,
                                                  caller.operator), wait=True)
        except CommandRefused as e:
            raise ApiError(HTTPStatus.CONFLICT, str(e)) from e

    def _hook(self, caller: Caller, hook: str, body: Any) -> Any:
        if not caller.operator:
            raise ApiError(HTTPStatus.FORBIDDEN, "hooks are accepted from root or slurm only")
        payload = dict(body or {})
        payload["hook"] = hook
        if not re.fullmatch(r"\d+(_\d+)?", str(payload.get("job_id", ""))):
            raise ApiError(HTTPStatus.BAD_REQUEST, "hook without a valid job_id")
        if hook in NODE_HOOKS:
            return self._node_hook(hook, payload)
        return self.daemon.submit("hook", payload, wait=True)

    def _node_hook(self, hook: str, payload: dict[str, Any]) -> Any:
        """Node Prolog / node agent / Epilog of a compute node (rsa_scheduler.node)."""
        from rsa_scheduler.daemon.nodeside import nodeside_of

        job = str(payload["job_id"])
        node = str(payload.get("node") or "")
        if not re.fullmatch(r"[A-Za-z0-9._-]+", node):
            raise ApiError(HTTPStatus.BAD_REQUEST, "node hook without a valid node name")
        nodes = str(payload.get("nodes") or "")
        side = nodeside_of(self.daemon.registry)
        if side is None:
            return {"do": "nothing", "agent": False, "why": "rsad has no compute-node side"}
        if hook == "mounted":
            return side.report(job, node, payload)
        if hook == "epilog":
            return side.epilog(job, node)
        if hook == "agent":
            wait = min(float(payload.get("wait", 20.0)), 25.0)
            return side.agent(job, node, nodes, int(payload.get("last_seq", 0)), wait,
                              str(payload.get("epoch") or ""))

        def state() -> tuple[str | None, str | None, float]:
            rec = self.daemon.sched.records.get(job)
            if rec is None:
                return None, None, 0.0
            policy = self.daemon.sched.policy
            early = rec.spec.early_start or policy.early_start
            hold = policy.wait_timeout if early.value == "wait" and not rec.wait_over else 0.0
            return (rec.rsa_state.value, rec.job_state.value if rec.job_state else None,
                    hold)

        rsa_state, job_state, hold = self._call(state)
        if rsa_state is not None and job_state not in ("running", "finished"):
            # the node Prolog runs after PrologSlurmctld; if rsad missed that, tell it now
            self.daemon.submit("hook", {"hook": "prolog_slurmctld", "job_id": job,
                                        "nodes": nodes}, wait=True)
            rsa_state, job_state, hold = self._call(state)
        return side.prolog(job, node, nodes, rsa_state, hold=hold)


def make_handler(routes: Routes) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "rsad/1"
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt: str, *args: Any) -> None:
            log.debug("api: " + fmt, *args)

        def _serve(self, method: str) -> None:
            try:
                length = int(self.headers.get("Content-Length") or 0)
                if length > MAX_BODY:
                    raise ApiError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "request too large")
                raw = self.rfile.read(length) if length else b""
                caller = self._authenticate(method, raw)
                body = json.loads(raw) if raw else None
                result = routes.dispatch(caller, method, self.path, body)
                self._reply(HTTPStatus.OK, result)
            except ApiError as e:
                self._reply(e.status, {"error": str(e)})
            except munge.MungeError as e:
                self._reply(HTTPStatus.UNAUTHORIZED, {"error": str(e)})
            except (ValueError, KeyError) as e:
                self._reply(HTTPStatus.BAD_REQUEST, {"error": str(e)})
            except TimeoutError:
                self._reply(HTTPStatus.SERVICE_UNAVAILABLE, {"error": "rsad is busy; retry"})
            except Exception as e:
                log.exception("api: %s %s failed", method, self.path)
                self._reply(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"internal error: {e}"})

        def _authenticate(self, method: str, raw: bytes) -> Caller:
            cred = self.headers.get(AUTH_HEADER)
            if not cred:
                raise ApiError(HTTPStatus.UNAUTHORIZED, "missing MUNGE credential")
            sender, payload = munge.decode(cred)
            if payload != munge.request_digest(method, self.path, raw):
                raise ApiError(HTTPStatus.UNAUTHORIZED,
                               "MUNGE credential does not match this request")
            return Caller(sender.uid, _user_of(sender.uid))

        def _reply(self, status: HTTPStatus, data: Any) -> None:
            out = json.dumps(data, sort_keys=True).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            try:  # sign the answer: the node hooks act as root on what it says
                self.send_header(REPLY_HEADER, munge.encode(munge.reply_digest(
                    self.headers.get(AUTH_HEADER) or "", int(status), out)))
            except munge.MungeError as e:
                log.warning("api: reply not signed: %s", e)
            self.end_headers()
            self.wfile.write(out)

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

    return Handler


class UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def get_request(self) -> tuple[socket.socket, Any]:
        conn, _ = super().get_request()
        return conn, ("local", 0)


class ApiServers:
    """The unix-socket server (always) and the TCP server (when configured)."""

    def __init__(self, routes: Routes, socket_path: Path,
                 listen: tuple[str, int] | None = None) -> None:
        handler = make_handler(routes)
        socket_path.parent.mkdir(parents=True, exist_ok=True)
        if socket_path.exists() or socket_path.is_symlink():
            socket_path.unlink()
        self.unix = UnixHTTPServer(str(socket_path), handler)
        os.chmod(socket_path, 0o666)  # every user may connect; MUNGE says who they are
        self.tcp = ThreadingHTTPServer(listen, handler) if listen else None
        if self.tcp is not None:
            self.tcp.daemon_threads = True
        self.socket_path = socket_path
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        for srv in (self.unix, self.tcp):
            if srv is not None:
                t = threading.Thread(target=srv.serve_forever, name="rsa-api", daemon=True)
                t.start()
                self._threads.append(t)

    def stop(self) -> None:
        for srv in (self.unix, self.tcp):
            if srv is not None:
                srv.shutdown()
                srv.server_close()
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
