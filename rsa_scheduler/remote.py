"""Remote execution on RSA nodes over SSH (paramiko): :class:`SshHost` and :class:`HostPool`.

Owns the production implementation of the :class:`~rsa_scheduler.hosts.Host` port: one
persistent SSH connection per RSA node, shared by every thread of rsad's worker pool
(paramiko multiplexes channels over one transport), reconnected when it drops.

Every command is an argv list, never a shell line written by hand. sshd hands the command
string to the login user's shell with ``-c`` (no login shell, no rc files for root's
``/bin/sh``-compatible shells); that string is built with :func:`shlex.join` and
immediately ``exec``s ``setsid -w sh -c 'echo PGID; exec "$@"'`` so the remote command
leads its own session and process group and reports its id first. A timeout or a
:class:`~rsa_scheduler.hosts.CancelToken` then kills the whole remote tree with
``kill -- -PGID`` (TERM, then KILL). ``as_user`` switches uid, gid and supplementary
groups with ``setpriv`` (no shell, no PAM) and runs with that user's clean environment
and umask 077; with ``as_user.scope`` (a job id) the command first joins the job's
cgroup and what it leaves behind is killed when it ends, and it runs with a private
``/tmp``, ``/var/tmp``, ``/dev/shm`` and SysV IPC that go with it
(:mod:`rsa_scheduler.contain`).

A connection sshd drops before its banner is tried again (:data:`CONNECT_TRIES`), and
logged here; paramiko's own ERROR report of each such drop, a traceback logged line by
line, is kept out of rsad's log by :class:`BannerNoiseFilter` (installed on paramiko's
transport logger when this module is imported). Every other paramiko record passes.

Must not import the daemon, the store or the core's scheduler; it only knows hosts.
"""

from __future__ import annotations

import logging
import random
import re
import select
import shlex
import socket
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import paramiko

from rsa_scheduler.contain import contain_argv, issued_now, kill_leaf_argv
from rsa_scheduler.hosts import Cancelled, CancelToken, HostError
from rsa_scheduler.runner import CLEAN_PATH, CommandError, Completed, Identity

if TYPE_CHECKING:
    from rsa_scheduler.config.schema import Config

log = logging.getLogger(__name__)

PGID_MARK = "RSA-PGID "
KILL_GRACE = 2.0  # seconds between SIGTERM and SIGKILL of a remote process group
EOF_GRACE = 0.5  # seconds of quiet output after the exit status, when EOF does not come
SIMPLE_TIMEOUT = 30.0  # seconds a kill/probe on the node may take (a hung node: give up)
# paramiko multiplexes channels over one connection; sshd refuses more than MaxSessions
# (default 10) at once, so stay below it.
DEFAULT_MAX_SESSIONS = 8
CONNECT_TRIES = 5  # connection attempts when sshd drops us before its banner
CONNECT_PAUSE = 0.2  # seconds before the 2nd attempt (x attempt, x 1-2 jitter)
OPEN_TRIES = 6  # session channels sshd refused in a row before giving up (same pauses)


class _Dropped(HostError):
    """sshd closed the connection before its banner (its ``__cause__`` says how)."""


def _banner_read(client: paramiko.SSHClient) -> str:
    """The server's version line if paramiko read it on ``client``'s connection, else
    "" (the connection ended before sshd's banner)."""
    transport = client.get_transport()
    return str(getattr(transport, "remote_version", "") or "") if transport else ""


def _why(cause: BaseException | None) -> str:
    """An exception as one line: its text, or its type when it has none (EOFError)."""
    return (str(cause) or type(cause).__name__) if cause is not None else "unknown"


#: paramiko's transport thread reports a failed banner read as this ERROR record, then
#: the traceback (``util.tb_strings()``), one ERROR record per line, ending with the
#: exception's own line and an empty one
_BANNER_HEAD = re.compile(r"Exception \(client\): Error reading SSH protocol banner")
_BANNER_LAST = re.compile(r"[\w.]*SSHException: Error reading SSH protocol banner")
_BANNER_MAX_LINES = 200  # a traceback longer than this is not the one expected: stop


class BannerNoiseFilter(logging.Filter):
    """Drops paramiko's report of a connection sshd closed before its banner: the
    ``Exception (client): Error reading SSH protocol banner...`` record and the traceback
    lines that follow it from the same thread. :meth:`SshHost._connect` retries such a
    connection and logs it (and the last error) itself. Any other record -- another
    error, its traceback, a record of another thread -- passes.

    paramiko logs from each connection's own transport thread, the traceback right
    after the error, so the filter keeps its place per thread (``threading.local``)."""

    def __init__(self) -> None:
        super().__init__()
        self._where = threading.local()  # per thread: lines of a banner report seen

    def filter(self, record: logging.LogRecord) -> bool:
        seen: int = getattr(self._where, "seen", 0)  # 0: not inside a banner report
        msg = record.msg
        if record.levelno != logging.ERROR or not isinstance(msg, str) or record.args:
            self._where.seen = 0  # not a line of paramiko's report: it is over
            return True
        if seen == 0:
            if _BANNER_HEAD.match(msg):
                self._where.seen = 1
                return False
            return True
        if seen < 0:  # after the traceback's last line: its closing empty line
            self._where.seen = 0
            return msg != "" and self.filter(record)
        self._where.seen = -1 if _BANNER_LAST.match(msg) else (
            seen + 1 if seen < _BANNER_MAX_LINES else 0)
        return False


logging.getLogger("paramiko.transport").addFilter(BannerNoiseFilter())

_WRAPPER = 'echo "RSA-PGID $$"; umask "$0"; cd /; exec "$@"'


def remote_argv(argv: Sequence[str], *, as_user: Identity | None = None,
                env: Mapping[str, str] | None = None,
                issued: int | None = None) -> list[str]:
    """The argv executed on the node for ``argv``: new session, environment, identity;
    a command in a job's scope carries ``issued`` (rsad's µs when it issued it,
    :func:`~rsa_scheduler.contain.issued_now` when None), which a later REAP of the job
    keeps from starting.

    Pure when ``issued`` is given; the remote command string is ``shlex.join`` of this
    list, prefixed by ``exec``.
    """
    if not argv:
        raise ValueError("empty argv")
    if as_user is not None:
        clean = as_user.env(env)
        umask = "077"
        ident = as_user.setpriv()
    else:
        clean = {"PATH": CLEAN_PATH, "LANG": "C.UTF-8", **(env or {})}
        umask = "022"
        ident = []
    env_argv = ["env", "-i", *(f"{k}={v}" for k, v in clean.items())]
    if as_user is not None and as_user.scope:
        # in the job's cgroup; what the command leaves behind dies when it ends
        return ["setsid", "-w", *contain_argv(
            as_user.scope, umask, [*ident, *env_argv, *argv], as_user.private_tmp,
            issued=issued_now() if issued is None else issued)]
    return ["setsid", "-w", "sh", "-c", _WRAPPER, umask, *ident, *env_argv, *argv]


def remote_command(argv: Sequence[str], *, as_user: Identity | None = None,
                   env: Mapping[str, str] | None = None) -> str:
    """The command string sent over SSH (what sshd passes to ``$SHELL -c``)."""
    return "exec " + shlex.join(remote_argv(argv, as_user=as_user, env=env))


def _host_key_policy(policy: str) -> paramiko.MissingHostKeyPolicy:
    if policy == "reject":
        return paramiko.RejectPolicy()
    if policy == "warn":
        return paramiko.WarningPolicy()
    if policy == "auto-add":
        return paramiko.AutoAddPolicy()
    raise ValueError(f"unknown host_key_policy {policy!r} (reject, warn, auto-add)")


class SshHost:
    """One RSA node reached over SSH; safe to share between threads."""

    def __init__(self, name: str, address: str, *, port: int = 22, user: str = "root",
                 key: str | Path | None = None, known_hosts: str | Path | None = None,
                 host_key_policy: str = "reject", connect_timeout: float = 10.0,
                 command_timeout: float = 300.0,
                 max_sessions: int = DEFAULT_MAX_SESSIONS) -> None:
        self.name = name
        self.address = address
        self.port = port
        self.user = user
        self.key = str(key) if key else None
        self.known_hosts = str(known_hosts) if known_hosts else None
        self.host_key_policy = str(host_key_policy)
        _host_key_policy(self.host_key_policy)  # validate early
        self.connect_timeout = connect_timeout
        self.command_timeout = command_timeout
        self._lock = threading.Lock()
        self._client: paramiko.SSHClient | None = None
        self._sessions = threading.BoundedSemaphore(max_sessions)
        self.connects = 0  # how many connections were made (reuse is observable)

    def __repr__(self) -> str:
        return f"SshHost({self.name!r}, {self.user}@{self.address}:{self.port})"

    # ----------------------------------------------------------------- connection

    def _connect(self) -> paramiko.SSHClient:
        """A new connection; one sshd dropped before its banner (over its
        ``MaxStartups``: many staging workers connecting at once) is tried again, up to
        :data:`CONNECT_TRIES` times, a little later each time."""
        for attempt in range(1, CONNECT_TRIES + 1):
            try:
                return self._connect_once()
            except _Dropped as e:
                why = _why(e.__cause__)
                if attempt == CONNECT_TRIES:
                    raise HostError(f"{self.name}: SSH to {self.user}@{self.address}:"
                                    f"{self.port} failed: {why} ({attempt} tries: "
                                    "is sshd's MaxStartups too low?)") from e
                pause = CONNECT_PAUSE * attempt * (1 + random.random())
                log.info("%s: sshd dropped the connection before its banner (%s); "
                         "again in %.2fs", self.name, why, pause)
                time.sleep(pause)
        raise AssertionError("unreachable")

    def _connect_once(self) -> paramiko.SSHClient:
        client = paramiko.SSHClient()
        if self.known_hosts:
            try:
                client.load_host_keys(self.known_hosts)
            except FileNotFoundError:
                if self.host_key_policy != "auto-add":
                    raise HostError(f"{self.name}: known_hosts file {self.known_hosts} "
                                    "is missing; create it (ssh-keyscan) or use "
                                    "host_key_policy auto-add") from None
        client.set_missing_host_key_policy(_host_key_policy(self.host_key_policy))
        start = time.monotonic()
        try:
            # Our own socket with TCP_NODELAY: without it Nagle + delayed ACK add ~40 ms
            # to every channel open on a reused connection.
            sock = socket.create_connection((self.address, self.port),
                                            timeout=self.connect_timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            client.connect(self.address, port=self.port, username=self.user, sock=sock,
                           key_filename=self.key, timeout=self.connect_timeout,
                           banner_timeout=self.connect_timeout,
                           auth_timeout=self.connect_timeout, look_for_keys=False,
                           allow_agent=False)
        except paramiko.BadHostKeyException as e:
            client.close()
            raise HostError(f"{self.name}: host key of {self.address} does not match "
                            f"{self.known_hosts}: refusing to connect (possible "
                            "man-in-the-middle; fix known_hosts if the node was "
                            "reinstalled)") from e
        except paramiko.SSHException as e:
            client.close()
            if "protocol banner" in str(e):
                raise _Dropped() from e
            if "not found in known_hosts" in str(e):
                raise HostError(f"{self.name}: {self.address} is not in known_hosts "
                                f"{self.known_hosts} and host_key_policy is reject; add "
                                "its key (ssh-keyscan) and retry") from e
            raise HostError(f"{self.name}: SSH to {self.user}@{self.address}:{self.port} "
                            f"failed: {e}") from e
        except (EOFError, ConnectionResetError) as e:
            # closed or reset: before sshd's banner (as over its MaxStartups; an EOFError
            # when paramiko could not even send its version) is worth another try; after
            # it, sshd's side of the key exchange failed, which a retry does not mend
            banner = _banner_read(client)
            client.close()
            if not banner:
                raise _Dropped() from e
            raise HostError(f"{self.name}: sshd at {self.address}:{self.port} closed the "
                            f"connection during the key exchange, after its banner "
                            f"({banner}): see sshd's log on {self.name}") from e
        except OSError as e:
            client.close()
            raise HostError(f"{self.name}: cannot connect to {self.address}:{self.port}: "
                            f"{e}") from e
        transport = client.get_transport()
        if transport is not None:
            transport.set_keepalive(30)
        self.connects += 1
        log.debug("%s: connected to %s:%d in %.3fs", self.name, self.address, self.port,
                  time.monotonic() - start)
        return client

    def _transport(self, fresh: bool = False) -> paramiko.Transport:
        with self._lock:
            if fresh and self._client is not None:
                self._client.close()
                self._client = None
            if self._client is not None:
                t = self._client.get_transport()
                if t is not None and t.is_active():
                    return t
                self._client.close()
                self._client = None
                log.info("%s: SSH connection lost, reconnecting", self.name)
            self._client = self._connect()
            t = self._client.get_transport()
            assert t is not None
            return t

    def _open_channel(self) -> paramiko.Channel:
        """A new session channel. sshd refusing the channel alone (``ChannelException``:
        over its MaxSessions while the sessions just closed are still being torn down on
        its side, as under load) is asked again on the same connection, a little later
        each time: closing it would cut every other command running over it (their
        outcome unknown). A connection that went away is made again, once."""
        refused = 0
        fresh = reconnected = False
        while True:
            try:
                transport = self._transport(fresh=fresh)
                fresh = False  # (made anew once: a later refusal keeps that connection)
                return transport.open_session(timeout=self.connect_timeout)
            except paramiko.ChannelException as e:
                refused += 1
                if refused >= OPEN_TRIES:
                    raise HostError(f"{self.name}: sshd refused an SSH session {refused} "
                                    f"times ({e}): is its MaxSessions below "
                                    f"{DEFAULT_MAX_SESSIONS}?") from e
                time.sleep(CONNECT_PAUSE * refused * (1 + random.random()))
            except (paramiko.SSHException, EOFError, OSError) as e:
                if reconnected:
                    raise HostError(f"{self.name}: cannot open an SSH session: {e}") from e
                fresh = reconnected = True

    def connect(self) -> None:
        """Connect now (otherwise the first command connects)."""
        self._transport()

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    # ----------------------------------------------------------------- commands

    def run(self, argv: Sequence[str], *, timeout: float | None = None, check: bool = True,
            input: str | None = None, as_user: Identity | None = None,
            env: Mapping[str, str] | None = None,
            cancel: CancelToken | None = None, keep: int = 0) -> Completed:
        """Run argv on the node; see :class:`~rsa_scheduler.hosts.Host`."""
        if cancel is not None:
            cancel.check()
        limit = self.command_timeout if timeout is None else timeout
        command = remote_command(argv, as_user=as_user, env=env)
        with self._sessions:
            start = time.monotonic()
            chan = self._open_channel()
            try:
                chan.exec_command(command)
                if input is not None:
                    chan.sendall(input.encode())
                chan.shutdown_write()
                out, err, rc, pgid = self._collect(chan, start + limit, cancel, keep)
            except (paramiko.SSHException, EOFError, OSError) as e:
                # the connection broke mid-command: its outcome is unknown, do not re-run
                raise HostError(f"{self.name}: SSH connection lost during "
                                f"{shlex.join(argv[:4])}: {e}") from e
            finally:
                chan.close()
            seconds = time.monotonic() - start
        if rc is None:  # timed out or cancelled: kill the remote tree
            self._kill_group(pgid)
            if as_user is not None and as_user.scope and pgid is not None:
                self._kill_leaf(as_user.scope, pgid)
            if cancel is not None and cancel.cancelled:
                raise Cancelled(f"{self.name}: {shlex.join(argv[:4])}: {cancel.reason}")
            raise CommandError([f"{self.name}:", *argv], None, err, timeout=limit)
        done = Completed(tuple(argv), rc, out, err, seconds)
        if check and rc != 0:
            raise CommandError([f"{self.name}:", *argv], rc, err)
        return done

    def _collect(self, chan: paramiko.Channel, deadline: float, cancel: CancelToken | None,
                 keep: int = 0) -> tuple[str, str, int | None, int | None]:
        """Read stdout/stderr until exit, deadline or cancel. rc None = not finished.
        ``keep`` > 0: hold only about the last ``keep`` bytes of each (a user's script
        may print without end: rsad's memory would hold all of it)."""
        out = bytearray()
        err = bytearray()
        pgid: int | None = None
        headed = False  # the wrapper's first line (the process group) was looked at
        quiet_since: float | None = None  # when output last arrived after the exit status
        while True:
            got = False
            if chan.recv_ready():
                out += chan.recv(65536)
                got = True
            if chan.recv_stderr_ready():
                err += chan.recv_stderr(65536)
                got = True
            if pgid is None and b"\n" in out:
                line, _, rest = out.partition(b"\n")
                text = line.decode(errors="replace")
                if text.startswith(PGID_MARK):
                    pgid = int(text[len(PGID_MARK):])
                    out = bytearray(rest)
                headed = True
            if keep > 0:  # trimmed in batches, not at every read
                if len(err) > 2 * keep:
                    del err[:-keep]
                if len(out) > 2 * keep and headed:  # the wrapper's line is read first
                    del out[:-keep]
            # sshd may send the exit status before the last of the output: done at EOF,
            # or once output has been quiet for EOF_GRACE (a daemon the command started
            # may hold stdout open, and then EOF never comes)
            if (chan.exit_status_ready() and not chan.recv_ready()
                    and not chan.recv_stderr_ready()):
                now = time.monotonic()
                if got or quiet_since is None:
                    quiet_since = now
                if chan.eof_received or now - quiet_since >= EOF_GRACE:
                    rc = chan.recv_exit_status()
                    return (out.decode(errors="replace"), err.decode(errors="replace"), rc,
                            pgid)
            now = time.monotonic()
            if now >= deadline or (cancel is not None and cancel.cancelled):
                if pgid is None:  # the wrapper has not printed yet: give it a moment
                    pgid = self._await_pgid(chan, out)
                return (out.decode(errors="replace"), err.decode(errors="replace"), None,
                        pgid)
            select.select([chan], [], [], min(0.02 if quiet_since else 0.05,
                                              max(0.0, deadline - now)))

    @staticmethod
    def _await_pgid(chan: paramiko.Channel, out: bytearray, wait: float = 2.0) -> int | None:
        end = time.monotonic() + wait
        while time.monotonic() < end and b"\n" not in out:
            if chan.recv_ready():
                out += chan.recv(65536)
            else:
                select.select([chan], [], [], 0.05)
        line = out.partition(b"\n")[0].decode(errors="replace")
        return int(line[len(PGID_MARK):]) if line.startswith(PGID_MARK) else None

    def _kill_group(self, pgid: int | None) -> None:
        """SIGTERM the remote process group, SIGKILL it after a grace period."""
        if pgid is None or pgid <= 1:
            log.warning("%s: no process group id of a timed-out command; cannot kill it",
                        self.name)
            return
        # kill(1) from procps; a shell builtin is not needed. `kill -0` probes.
        try:
            self._simple(["kill", "-TERM", "--", f"-{pgid}"])
            end = time.monotonic() + KILL_GRACE
            while time.monotonic() < end:
                if self._simple(["kill", "-0", "--", f"-{pgid}"]) != 0:
                    return
                time.sleep(0.1)
            self._simple(["kill", "-KILL", "--", f"-{pgid}"])
        except HostError as e:
            log.warning("%s: could not kill remote process group %d: %s", self.name, pgid, e)

    def _kill_leaf(self, scope: str, pgid: int) -> None:
        """Kill what a killed command left in its cgroup (a child that left the process
        group with setsid), then remove the cgroup."""
        try:
            self._simple(kill_leaf_argv(scope, pgid))
        except HostError as e:
            log.warning("%s: could not kill the cgroup of process group %d: %s", self.name,
                        pgid, e)

    def _simple(self, argv: Sequence[str], timeout: float = SIMPLE_TIMEOUT) -> int:
        """Run a short command (a kill, a probe) and return its exit status; HostError
        when it has not ended within ``timeout`` (a hung node must not hang the caller:
        the kills after a timeout or cancel run here)."""
        chan = self._open_channel()
        try:
            chan.exec_command("exec " + shlex.join(argv))
            chan.shutdown_write()
            if not chan.status_event.wait(timeout):
                raise HostError(f"{self.name}: {shlex.join(argv[:4])} did not end within "
                                f"{timeout:g}s")
            return chan.recv_exit_status()
        except (paramiko.SSHException, EOFError, OSError) as e:
            raise HostError(f"{self.name}: SSH failed during {shlex.join(argv[:4])}: "
                            f"{e}") from e
        finally:
            chan.close()


class HostPool(Mapping[str, SshHost]):
    """Every RSA node of the configuration, by name; close them all on shutdown."""

    def __init__(self, hosts: Mapping[str, SshHost]) -> None:
        self._hosts = dict(hosts)

    @classmethod
    def from_config(cls, cfg: Config) -> HostPool:
        ssh = cfg.ssh
        return cls({
            node.name: SshHost(node.name, node.address, port=node.ssh_port, user=ssh.user,
                               key=ssh.key, known_hosts=ssh.known_hosts,
                               host_key_policy=str(ssh.host_key_policy),
                               connect_timeout=ssh.connect_timeout,
                               command_timeout=ssh.command_timeout)
            for node in cfg.pool.members()
        })

    def __getitem__(self, name: str) -> SshHost:
        return self._hosts[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._hosts)

    def __len__(self) -> int:
        return len(self._hosts)

    def close(self) -> None:
        for host in self._hosts.values():
            host.close()

    def __enter__(self) -> HostPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
