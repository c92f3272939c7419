"""The staging worker: a process of its own that runs bulk staging operations for rsad.

Owns the worker side of the engine-process protocol and its wire codec (what a call,
its result and its error look like as JSON). rsad (``daemon/engines.py``) runs each
stage-in, stage-out and verify of a tree through a worker, and a writable input's base
scan (``record_base``) and write-backs (``write_back``: ``daemon/writeback.py``, whose
bases the worker reads and replaces in rsad's state directory, as rsad would), so the
engine's Python (scan parsing, plans, the bases' JSON, spawning the copies) never holds
rsad's GIL while a mount waits (docs/architecture.md, "Engine workers").

The protocol is newline-delimited JSON on the worker's stdin and stdout, one call at a
time:

* rsad → worker: ``{"call": {...}}`` (the operation, its arguments, the job's RSA nodes
  as connection settings, the job's identity, the engine's settings);
  ``{"cancel": reason}``; ``{"granted": seconds}`` or ``{"refused": reason}`` (the
  answer to a PFS-slot request).
* worker → rsad: ``{"progress": {...}}``; ``{"log": {...}}`` (rsad logs it as its own);
  ``{"gate": {"job", "path", "nbytes"}}`` (wait for a slot of rsad's FlushGate, seed
  003) and ``{"gate_release": true}``; then exactly one ``{"result": {...}}`` or
  ``{"error": {...}}`` per call.

Memory: ``--memory BYTES`` (``staging.engine_memory``) sets the worker's RLIMIT_DATA, so
an operation that needs more than that (a manifest larger than any limit foresaw) fails
alone, with a :exc:`MemoryError` answered as a staging error naming the key (retryable;
the worker is not reused), instead of the kernel's OOM killer choosing rsad or slurmctld
on rsad's host. The bound is inherited by what the worker runs on its own host (a
``LocalHost``'s commands; the RSA nodes' run over SSH, without it).

What crosses into rsad is bounded too (rsad's own process has no such ceiling): a result
names at most :data:`NAMED` objects of each list (a verify's differences, the sockets
and devices skipped, the copies kept aside), at most ~:data:`NAMED_BYTES` of each, with
the count of all of them beside.

Crash behaviour: when rsad's end of the pipe closes (rsad stopped, or was killed) or
the worker gets SIGTERM, the running call is cancelled, which kills its commands' whole
process trees on the RSA nodes, and the worker exits: a copy never goes on writing
after its rsad is gone (the next rsad fences the nodes as well, rsa_scheduler.contain).

Every command that touches user data still runs through the engine, as the job's user.
Part of rsad (it builds SSH hosts, which the staging package may not import), but runs
in a process of its own: imports no other module of the daemon but ``daemon.writeback``
(the write-back it runs), which imports none.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import resource
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, replace
from itertools import islice
from pathlib import Path
from typing import IO, Any, TypeVar

from rsa_scheduler.core.units import format_size
from rsa_scheduler.errors import RsaError
from rsa_scheduler.hosts import Cancelled, CancelToken, Host, LocalHost
from rsa_scheduler.runner import Identity
from rsa_scheduler.staging.manifest import Difference, Verification
from rsa_scheduler.staging.report import Progress, StagingError, Stats

log = logging.getLogger(__name__)
T = TypeVar("T")

OPS = ("stage_in", "stage_out", "verify", "record_base", "write_back")
#: seconds a cancelled call may take to end once the pipe closed, before the worker exits
EXIT_GRACE = 30.0
POLL = 0.5  # seconds between looks at the cancel token while waiting for a PFS slot


# ---- the wire codec (both sides) --------------------------------------------------------

def host_spec(host: Host) -> dict[str, Any] | None:
    """How a worker rebuilds ``host`` (its connection settings), or None: this kind of
    host cannot be rebuilt in another process (a test double), run the engine here."""
    from rsa_scheduler.remote import SshHost

    if type(host) is SshHost:
        return {"kind": "ssh", "name": host.name, "address": host.address,
                "port": host.port, "user": host.user, "key": host.key,
                "known_hosts": host.known_hosts, "host_key_policy": host.host_key_policy,
                "connect_timeout": host.connect_timeout,
                "command_timeout": host.command_timeout}
    if type(host) is LocalHost:
        return {"kind": "local", "name": host.name}
    return None


def identity_to_json(who: Identity) -> dict[str, Any]:
    return {"user": who.user, "uid": who.uid, "gid": who.gid, "groups": list(who.groups),
            "home": who.home, "scope": who.scope, "private_tmp": who.private_tmp}


def identity_from_json(d: Mapping[str, Any]) -> Identity:
    who = Identity(user=str(d["user"]), uid=int(d["uid"]), gid=int(d["gid"]),
                   groups=tuple(int(g) for g in d["groups"]), home=str(d["home"]),
                   scope=str(d["scope"]), private_tmp=int(d.get("private_tmp", 0)))
    if who.uid == 0:
        raise ValueError("staging never runs as root")
    return who


#: a result names at most this many objects of each list to rsad (a verify's
#: differences, the sockets and devices skipped, the copies kept aside), and of each list
#: at most about NAMED_BYTES of JSON, the count of all of them beside
#: (``Verification.differing``, ``skipped_count``, ``aside_count``): what crosses into
#: rsad's own process, which ``staging.engine_memory`` does not bound, stays under ~13 MB
#: of JSON whatever the job's output holds (~0.2 MB for a thousand ordinary names).
#: Not below ``daemon.data.REDO_LIMIT``: a failed verify's retry copies again exactly
#: the differences named when they are all named (fewer named, it copies the whole output
#: again: safe, only slower)
NAMED = 1000
NAMED_BYTES = 4 << 20


def first_named(items: Iterable[T], named: int = NAMED) -> list[T]:
    """The first of ``items`` (each JSON-ready) while at most ``named`` of them and
    :data:`NAMED_BYTES` of their JSON; at least one (a name is at most 4,095 bytes)."""
    out: list[T] = []
    size = 0
    for item in islice(items, named):
        size += len(json.dumps(item)) + 1
        if out and size > NAMED_BYTES:
            break
        out.append(item)
    return out


def stats_to_json(s: Stats, named: int = NAMED) -> dict[str, Any]:
    """``s`` naming only the first special files it skipped (:func:`first_named`),
    the count of all of them beside."""
    shown = first_named(s.skipped, named)
    if len(shown) < len(s.skipped):
        s = replace(s, skipped=tuple(shown), skipped_count=s.skipped_total)
    return asdict(s)


def stats_from_json(d: Mapping[str, Any]) -> Stats:
    return Stats(phase=str(d["phase"]), files=int(d["files"]), bytes=int(d["bytes"]),
                 dirs=int(d["dirs"]), seconds=float(d["seconds"]), buckets=int(d["buckets"]),
                 already=int(d["already"]), skipped=tuple(d["skipped"]),
                 per_node={str(k): int(v) for k, v in d["per_node"].items()},
                 archives=tuple(d["archives"]),
                 skipped_count=int(d.get("skipped_count", -1)))


def verification_to_json(v: Verification, named: int = NAMED) -> dict[str, Any]:
    """``v`` naming only the first differences, skipped special files and copies kept
    aside (``details["aside"]``) (:func:`first_named`), each list with the count of all
    of it: ``differing``, ``skipped_count``, ``details["aside_count"]`` (a list cut short
    is never read as whole: ``Verification.count``, ``listed``, ``skipped_total``)."""
    details = dict(v.details)
    aside = details.get("aside")
    if isinstance(aside, list):
        shown_aside = first_named(aside, named)
        if len(shown_aside) < len(aside):
            details["aside"], details["aside_count"] = shown_aside, len(aside)
    diffs = first_named(([d.path.hex(), d.what,
                          list(d.same_content) if d.same_content else None]
                         for d in v.differences), named)
    skipped = first_named((p.hex() for p in v.skipped), named)
    return {"ok": v.ok, "level": v.level, "checked": v.checked,
            "checked_bytes": v.checked_bytes, "differences": diffs,
            "extra": v.extra, "details": json.loads(json.dumps(details, default=str)),
            "differing": v.count if len(diffs) < len(v.differences) else v.differing,
            "skipped": skipped,
            "skipped_count": (v.skipped_total if len(skipped) < len(v.skipped)
                              else v.skipped_count),
            "read_back": v.read_back}


def _difference(x: Sequence[Any]) -> Difference:
    same = x[2] if len(x) > 2 else None
    return Difference(bytes.fromhex(str(x[0])), str(x[1]),
                      (int(same[0]), int(same[1])) if same else None)


def verification_from_json(d: Mapping[str, Any]) -> Verification:
    return Verification(ok=bool(d["ok"]), level=str(d["level"]), checked=int(d["checked"]),
                        checked_bytes=int(d["checked_bytes"]),
                        differences=tuple(_difference(x) for x in d["differences"]),
                        extra=int(d["extra"]), details=dict(d["details"]),
                        differing=int(d["differing"]),
                        skipped=tuple(bytes.fromhex(p) for p in d.get("skipped") or ()),
                        skipped_count=int(d.get("skipped_count", -1)),
                        read_back=str(d.get("read_back", "")))


#: what each operation is called in a message
OP_WORDS = {"stage_in": "a stage-in", "stage_out": "a stage-out", "verify": "a verify",
            "record_base": "a writable input's base scan", "write_back": "a write-back"}


def out_of_memory(e: BaseException) -> bool:
    """Whether ``e`` says the worker's memory ran out: a :exc:`MemoryError`, or a
    thread that could not start (its stack is data memory too: 8 MiB each, by default)."""
    return isinstance(e, MemoryError) or (
        isinstance(e, RuntimeError) and str(e).startswith("can't start new thread"))


def memory_words(op: str, bound: int | None) -> str:
    """The line of an operation that ran out of the worker's memory (``bound``: its
    RLIMIT_DATA, ``staging.engine_memory``; None: none was set, the host's ran out)."""
    what = OP_WORDS.get(op, op.replace("_", "-") or "an operation")
    if bound is None:
        return (f"the staging worker ran out of memory during {what} (rsad's host has "
                "no more to give it): this operation alone failed; will retry")
    return (f"the staging worker ran out of its memory bound during {what} "
            f"(staging.engine_memory: {format_size(bound)}): this operation alone "
            "failed, rsad and its other operations go on; will retry (a tree this large "
            "needs a larger staging.engine_memory, or streamed mode: "
            "staging.stream_objects)")


def error_to_json(e: BaseException, op: str = "", memory: int | None = None
                  ) -> dict[str, Any]:
    """What the caller must know of an error to act as if the engine ran in its process.
    Memory that ran out (:func:`out_of_memory`; ``op``, ``memory``: what ran, the
    worker's bound) is a retryable staging error whose worker is ``spent``: never
    reused."""
    if out_of_memory(e):
        return {"type": "staging", "message": memory_words(op, memory),
                "permanent": False, "node": "", "unanswered": False, "spent": True}
    if isinstance(e, Cancelled):
        return {"type": "cancelled", "message": str(e)}
    if isinstance(e, RsaError):
        return {"type": "staging", "message": str(e),
                "permanent": bool(getattr(e, "permanent", False)),
                "node": str(getattr(e, "node", "")),
                "unanswered": bool(getattr(e, "unanswered", False))}
    return {"type": "internal", "message": f"{type(e).__name__}: {e}"}


def error_from_json(d: Mapping[str, Any]) -> RsaError:
    kind, message = d.get("type"), str(d.get("message", ""))
    if kind == "cancelled":
        return Cancelled(message)
    if kind == "staging":
        return StagingError(message, permanent=bool(d.get("permanent")),
                            node=str(d.get("node", "")), unanswered=bool(d.get("unanswered")))
    return RsaError(f"internal error in the staging worker: {message}")


# ---- the worker side --------------------------------------------------------------------

class Channel:
    """The worker's stdout: one JSON object per line, from any thread. Once rsad's end
    is gone (``closed``) messages are dropped: there is nobody to tell."""

    def __init__(self, out: IO[str]) -> None:
        self._out = out
        self._lock = threading.Lock()
        self.closed = False

    def send(self, msg: Mapping[str, Any]) -> None:
        line = json.dumps(msg, separators=(",", ":"))
        with self._lock:
            if self.closed:
                return
            try:
                self._out.write(line + "\n")
                self._out.flush()
            except (OSError, ValueError):  # EPIPE: rsad stopped or died
                self.closed = True


class PipeLog(logging.Handler):
    """The worker's log records, sent to rsad (which logs them with its own handlers)."""

    def __init__(self, chan: Channel) -> None:
        super().__init__()
        self.chan = chan

    def emit(self, record: logging.LogRecord) -> None:
        try:
            msg = record.getMessage()
            if record.exc_info:
                msg += "\n" + logging.Formatter().formatException(record.exc_info)
            if self.chan.closed:  # rsad is gone: its stderr (journal, log file) may not be
                sys.stderr.write(f"rsa staging worker: {record.levelname} {record.name}: "
                                 f"{msg}\n")
                return
            self.chan.send({"log": {"level": record.levelno, "name": record.name,
                                    "msg": msg}})
        except Exception:  # never let logging kill a copy
            self.handleError(record)


class RemoteGate:
    """The engine's FlushGate, in rsad: a slot is asked for over the pipe and held until
    the operation ends (rsad's gate orders every stage-out of every worker, seed 003)."""

    def __init__(self, chan: Channel, answers: queue.Queue[Mapping[str, Any]],
                 gates: bool, order: str) -> None:
        self.chan = chan
        self.answers = answers
        self.gates = gates
        self.order = order

    @contextlib.contextmanager
    def slot(self, job: str, path: str, nbytes: int,
             check: Callable[[], None] = lambda: None) -> Iterator[float]:
        if not self.gates:
            yield 0.0
            return
        self.chan.send({"gate": {"job": job, "path": path, "nbytes": nbytes}})
        while True:
            try:
                answer = self.answers.get(timeout=POLL)
                break
            except queue.Empty:
                check()  # a cancel ends the wait; rsad sees the call end and gives it up
        if "refused" in answer:
            raise Cancelled(str(answer["refused"]))
        try:
            yield float(answer.get("granted", 0.0))
        finally:
            self.chan.send({"gate_release": True})


class Worker:
    """Serves calls read from ``inp``, one at a time, answering on ``chan``."""

    def __init__(self, inp: IO[str], chan: Channel, memory: int | None = None) -> None:
        self.inp = inp
        self.chan = chan
        self.memory = memory  # its RLIMIT_DATA (--memory), for the message
        self._hosts: dict[str, Host] = {}  # connection settings -> host (SSH kept open)
        self._cancel: CancelToken | None = None
        self._answers: queue.Queue[Mapping[str, Any]] = queue.Queue()
        self._call: threading.Thread | None = None
        self._lock = threading.Lock()

    def host(self, spec: Mapping[str, Any]) -> Host:
        key = json.dumps(spec, sort_keys=True)
        if key not in self._hosts:
            if spec["kind"] == "local":
                self._hosts[key] = LocalHost(str(spec["name"]))
            elif spec["kind"] == "ssh":
                from rsa_scheduler.remote import SshHost

                args = {k: v for k, v in spec.items() if k not in ("kind", "name", "address")}
                self._hosts[key] = SshHost(str(spec["name"]), str(spec["address"]), **args)
            else:
                raise ValueError(f"unknown host kind {spec['kind']!r}")
        return self._hosts[key]

    def cancel(self, reason: str) -> None:
        with self._lock:
            token = self._cancel
        if token is not None:
            token.cancel(reason)

    def serve(self) -> None:
        """Read messages until rsad closes the pipe; then cancel what runs and return."""
        try:
            for line in self.inp:
                msg = json.loads(line)
                if "call" in msg:
                    self._start(msg["call"])
                elif "cancel" in msg:
                    self.cancel(str(msg["cancel"]))
                elif "granted" in msg or "refused" in msg:
                    self._answers.put(msg)
                else:
                    log.warning("staging worker: unknown message %r ignored", sorted(msg))
        finally:
            self.cancel("rsad closed its pipe to the staging worker (stopped or died)")
            call = self._call
            if call is not None:
                call.join(EXIT_GRACE)

    def _start(self, call: Mapping[str, Any]) -> None:
        if self._call is not None:
            # rsad sends a call only once it read the last one's answer, but the thread
            # that sent it may not have returned yet
            self._call.join(EXIT_GRACE)
            if self._call.is_alive():
                raise RuntimeError("a call arrived while one runs (rsad broke the protocol)")
        token = CancelToken()
        with self._lock:
            self._cancel = token
        while not self._answers.empty():  # answers of an earlier call's gate are stale
            self._answers.get_nowait()
        self._call = threading.Thread(target=self._run, args=(call, token),
                                      name="staging-call", daemon=True)
        self._call.start()

    def _run(self, call: Mapping[str, Any], token: CancelToken) -> None:
        try:
            self.chan.send({"result": self.execute(call, token)})
        except BaseException as e:  # every failure is the call's answer
            op = str(call.get("op", ""))
            if out_of_memory(e):
                e.__traceback__ = None  # its frames hold what filled the memory
                log.error("staging worker: %s (%s)", memory_words(op, self.memory),
                          e or type(e).__name__)
            elif not isinstance(e, RsaError):
                log.exception("staging worker: %s crashed", op)
            self.chan.send({"error": error_to_json(e, op, self.memory)})

    def execute(self, call: Mapping[str, Any], token: CancelToken) -> dict[str, Any]:
        from rsa_scheduler.staging.engine import StagingEngine

        op, args = str(call["op"]), dict(call["args"])
        if op not in OPS:
            raise ValueError(f"unknown staging operation {op!r}")
        hosts = [self.host(h) for h in call["hosts"]]
        settings = dict(call["engine"])
        gate = dict(call.get("gate") or {})
        chan = self.chan

        def progress(p: Progress) -> None:
            chan.send({"progress": p.to_json()})

        eng = StagingEngine(hosts, identity_from_json(call["identity"]), progress=progress,
                            cancel=token,
                            gate=RemoteGate(chan, self._answers, bool(gate.get("gates")),
                                            str(gate.get("order", "fifo"))),
                            **settings)
        if op == "stage_in":
            return stats_to_json(eng.stage_in(args["src"], args["ramdisk"],
                                              atomic=bool(args.get("atomic"))))
        if op == "stage_out":
            return stats_to_json(eng.stage_out(
                args["ramdisk"], args["dst"], str(args.get("method", "rsync")),
                resume=bool(args.get("resume", True)),
                redo=[bytes.fromhex(str(p)) for p in args.get("redo") or ()],
                since=None if args.get("since") is None else int(args["since"]),
                expect={bytes.fromhex(str(p)): (int(v[0]), int(v[1]))
                        for p, v in dict(args.get("expect") or {}).items()}))
        if op == "verify":
            return verification_to_json(eng.verify(args["ramdisk"], args["dst"],
                                                   str(args.get("method", "rsync"))))
        # writable input: the base in rsad's state directory, as rsad names it
        from rsa_scheduler.daemon.writeback import Bases, record_stage_in, written_back

        bases = Bases(Path(str(args["bases"])))
        if op == "record_base":
            limit = args.get("limit")
            return {"objects": record_stage_in(bases, str(args["fs_id"]), eng,
                                               str(args["data_in"]),
                                               None if limit is None else int(limit))}
        return {"outcome": written_back(bases, str(args["fs_id"]), eng,
                                        str(args["ramdisk"]), str(args["data_in"]))}


USAGE = "usage: python -m rsa_scheduler.daemon.stagingworker [--nice N] [--memory BYTES]"


def parse_args(args: Sequence[str]) -> dict[str, int]:
    """``--nice N`` and ``--memory BYTES``, each at most once; ValueError otherwise."""
    out: dict[str, int] = {}
    rest = list(args)
    while rest:
        if len(rest) < 2 or rest[0] not in ("--nice", "--memory") or rest[0][2:] in out:
            raise ValueError(" ".join(args))
        out[rest[0][2:]] = int(rest[1])
        del rest[:2]
    if out.get("memory", 1) <= 0:
        raise ValueError(" ".join(args))
    return out


def bound_memory(nbytes: int) -> None:
    """This process's data memory (RLIMIT_DATA: heap and private writable mappings,
    thread stacks included) at most ``nbytes``; soft and hard, for good."""
    resource.setrlimit(resource.RLIMIT_DATA, (nbytes, nbytes))


def main(argv: list[str] | None = None) -> int:
    """``python -m rsa_scheduler.daemon.stagingworker [--nice N] [--memory BYTES]``:
    serve rsad on stdin/stdout, ``N`` lower in CPU priority than rsad
    (staging.engine_nice), its data memory at most ``BYTES`` (staging.engine_memory)."""
    args = sys.argv[1:] if argv is None else argv
    try:
        opts = parse_args(args)
    except ValueError:
        sys.stderr.write(f"{USAGE} (not {' '.join(args)})\n")
        return 2
    if "nice" in opts:
        os.nice(opts["nice"])
    if "memory" in opts:
        bound_memory(opts["memory"])
    out = sys.stdout
    sys.stdout = sys.stderr  # a stray print must never corrupt the protocol
    chan = Channel(out)
    root = logging.getLogger()
    root.handlers[:] = [PipeLog(chan)]
    root.setLevel(logging.INFO)
    logging.getLogger("paramiko").setLevel(logging.WARNING)
    worker = Worker(sys.stdin, chan, opts.get("memory"))

    def stop(_sig: int, _frame: object) -> None:
        worker.cancel("the staging worker was told to stop (SIGTERM)")
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    t0 = time.monotonic()
    worker.serve()  # on SIGTERM too: its end cancels the running call and waits for it
    log.debug("staging worker: done after %.0fs", time.monotonic() - t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
