"""rsad's API transport: the listeners and what stands between them and the routes.

Owns :class:`Endpoint` (over :mod:`rsa_scheduler.daemon.httpd`: who is calling, by
MUNGE and on the unix socket SO_PEERCRED; the request body, one JSON object not nested
past :data:`MAX_BODY_DEPTH`; each answer signed for its caller; errors as one JSON
line), the unix socket's mode (0660 root:``daemon.api.socket_group``, else 0600) and
:class:`ApiServers`, the listeners (the unix socket always, TCP when configured) with the
file descriptors they need. What each request does is
:class:`rsa_scheduler.daemon.api.Routes`'s; the limits on what a caller can hold are
:mod:`rsa_scheduler.daemon.httpd`'s.
"""

from __future__ import annotations

import contextlib
import grp
import json
import logging
import os
import resource
import socket
from http import HTTPStatus
from pathlib import Path
from typing import Any

from rsa_scheduler import munge
from rsa_scheduler.config.schema import ApiConfig
from rsa_scheduler.daemon import httpd
from rsa_scheduler.daemon.api import AUTH_HEADER, REPLY_HEADER, Caller, Routes, user_of
from rsa_scheduler.daemon.httpd import ApiError
from rsa_scheduler.daemon.inbox import NotTaken
from rsa_scheduler.daemon.operators import OPERATORS

log = logging.getLogger(__name__)


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
        caller = Caller(sender.uid, user_of(sender.uid))
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
