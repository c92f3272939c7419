"""Staging engines in worker processes: rsad's side of ``daemon.stagingworker``.

Owns :class:`EnginePool` (the worker processes: started when needed, a few kept idle
with their SSH connections open, one call at a time each) and :class:`WorkerEngine`
(the bulk operations of a :class:`~rsa_scheduler.staging.engine.StagingEngine` --
``stage_in``, ``stage_out``, ``verify``, and a writable input's ``record_base`` and
``write_back`` (``daemon.writeback``) -- run in a worker with the same settings,
arguments, results and errors).

Why: an engine spends ~0.15 CPU-s of Python on a 3,000-file stage-out (scan parsing,
plan, spawning). Thirty-two of them in rsad's threads held the GIL so often that a
mount, on its own lane, waited up to 2 s (bench/bench_lanes.py --copies 32); with each
engine in a process of its own the mounts' p90 was under 0.5 s (docs/benchmarks.md).

What crosses the pipe, and how the engine's ties to rsad survive it:

* progress reports come back as they happen (the action's progress events);
* the engine's log lines come back and are logged by rsad's handlers;
* a stage-out's PFS slot is taken from rsad's one FlushGate (seed 003) on the worker's
  behalf, held until the worker gives it back or the call ends;
* a cancel of the action's token (demotion, teardown, the RAMDISK's stall watch, rsad
  stopping) is sent to the worker, whose engine kills its commands' process trees and
  answers ``Cancelled``; a worker that does not answer within :data:`KILL_AFTER` s is
  killed;
* a worker that dies mid-call (or was killed so) is not reused, and the commands it left
  on the RSA nodes are killed (``on_lost``: ``DataPath.kill_left``) before the call
  fails, retryably (``Cancelled`` if it had been cancelled).

The hosts a worker rebuilds are the ones rsad fenced (``DataPath.fenced``) before the
call: a worker opens its own SSH connections with the same settings.

What the pool counts (:meth:`EnginePool.counts`: workers busy and idle, started and lost
so far) is read by rsad's metrics (``daemon.metrics``) through a protocol of their own:
this module imports nothing of Prometheus.
"""

from __future__ import annotations

import contextlib
import json
import logging
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

from rsa_scheduler.daemon.stagingworker import (
    error_from_json,
    host_spec,
    identity_to_json,
    stats_from_json,
    verification_from_json,
)
from rsa_scheduler.errors import RsaError
from rsa_scheduler.hosts import Cancelled, CancelToken
from rsa_scheduler.staging.engine import StagingEngine
from rsa_scheduler.staging.flush import Gate
from rsa_scheduler.staging.manifest import Verification
from rsa_scheduler.staging.report import Progress, Stats

log = logging.getLogger(__name__)

#: seconds a worker may take to answer a cancel before it is killed
KILL_AFTER = 60.0
#: idle workers kept (their SSH connections open) for the next calls
KEEP_IDLE = 4
WORKER_ARGV = (sys.executable, "-m", "rsa_scheduler.daemon.stagingworker")
#: characters of one line rsad reads from a worker: a result is bounded far below it
#: (stagingworker.NAMED, NAMED_BYTES: ~13 MB at most); a longer line is a broken worker,
#: never read whole into rsad's own memory
LINE_LIMIT = 64 << 20


class WorkerGone(RsaError):
    """A staging worker ended (or broke the protocol) in the middle of a call: the
    commands it had started on the RSA nodes may still run. ``cancelled``: the call had
    been cancelled (the worker was killed for not answering the cancel)."""

    def __init__(self, message: str, *, cancelled: str = "") -> None:
        super().__init__(message)
        self.cancelled = cancelled


class EngineWorker:
    """One worker process; :meth:`call` runs one operation in it."""

    def __init__(self, argv: Sequence[str] = WORKER_ARGV) -> None:
        self.proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, bufsize=1,
                                     close_fds=True)
        self.pid = self.proc.pid
        self._stdin: IO[str] = self.proc.stdin  # type: ignore[assignment]
        self._stdout: IO[str] = self.proc.stdout  # type: ignore[assignment]
        self._write = threading.Lock()
        self.healthy = True  # answered every call it got, still running

    def send(self, msg: Mapping[str, Any]) -> None:
        line = json.dumps(msg, separators=(",", ":")) + "\n"
        with self._write:
            try:
                self._stdin.write(line)
                self._stdin.flush()
            except (BrokenPipeError, ValueError, OSError):
                self.healthy = False  # the read side finds out why

    def call(self, request: Mapping[str, Any], *, cancel: CancelToken,
             progress: Callable[[Progress], None] | None = None,
             gate: Gate | None = None) -> Any:
        """Run ``request`` in the worker; its result (JSON), or raise its error."""
        op = str(request.get("op"))
        ended = cancel.child()  # cancelled with ``cancel``, or when this call ends
        finished = threading.Event()
        watcher = threading.Thread(target=self._forward_cancel,
                                   args=(cancel, ended, finished),
                                   name=f"cancel-{self.pid}", daemon=True)
        watcher.start()
        slot = contextlib.ExitStack()
        answered = False
        try:
            self.send({"call": request})
            while True:
                line = self._stdout.readline(LINE_LIMIT + 1)
                if len(line) > LINE_LIMIT:
                    self.kill()
                    raise WorkerGone(f"the staging worker (pid {self.pid}) wrote a line of "
                                     f"more than {LINE_LIMIT / (1 << 20):g} MiB during "
                                     f"{op.replace('_', '-')}, not the protocol")
                if not line:
                    self.healthy = False
                    rc = self._reap()
                    raise WorkerGone(f"the staging worker (pid {self.pid}) ended during "
                                     f"{op.replace('_', '-')} (exit {rc})",
                                     cancelled=cancel.reason if cancel.cancelled else "")
                try:
                    msg = json.loads(line)
                except ValueError:
                    self.kill()
                    raise WorkerGone(f"the staging worker (pid {self.pid}) wrote "
                                     f"{line[:80]!r}, not the protocol") from None
                if "result" in msg:
                    answered = True
                    return msg["result"]
                if "error" in msg:
                    answered = True
                    if msg["error"].get("spent"):
                        self.healthy = False  # out of memory: never given another call
                    raise error_from_json(msg["error"])
                try:
                    self._follow(msg, progress, gate, cancel, slot)
                except Exception as e:  # rsad's side failed: the call cannot go on
                    self.kill()
                    raise WorkerGone(f"rsad could not follow the staging worker (pid "
                                     f"{self.pid}) during {op.replace('_', '-')} ({e!r}): "
                                     "the worker was stopped") from e
        finally:
            if not answered and self.proc.poll() is None:
                self.kill()  # never reused mid-call (an exception of the caller's own)
            slot.close()
            finished.set()
            ended.cancel("call ended")
            watcher.join()

    def _follow(self, msg: Mapping[str, Any], progress: Callable[[Progress], None] | None,
                gate: Gate | None, cancel: CancelToken, slot: contextlib.ExitStack) -> None:
        """One message of the worker's other than its answer."""
        if "progress" in msg:
            if progress is not None:
                try:
                    progress(Progress.from_json(msg["progress"]))
                except Exception:  # a report that could not be recorded stops no copy
                    log.exception("staging worker %d: progress report not recorded",
                                  self.pid)
        elif "log" in msg:
            rec = msg["log"]
            logging.getLogger(str(rec.get("name", "staging"))).log(
                int(rec.get("level", logging.INFO)), "%s", rec.get("msg", ""))
        elif "gate" in msg:
            self._grant(msg["gate"], gate, cancel, slot)
        elif "gate_release" in msg:
            slot.close()
        else:
            raise ValueError(f"unknown message {sorted(msg)}")

    def _grant(self, want: Mapping[str, Any], gate: Gate | None, cancel: CancelToken,
               slot: contextlib.ExitStack) -> None:
        """Take a PFS slot of rsad's gate for the worker's stage-out; answer it."""
        if gate is None:
            self.send({"granted": 0.0})
            return
        try:
            waited = slot.enter_context(gate.slot(str(want["job"]), str(want["path"]),
                                                  int(want["nbytes"]), cancel.check))
        except Cancelled as e:
            self.send({"refused": str(e)})
            return
        self.send({"granted": waited})

    def _forward_cancel(self, cancel: CancelToken, ended: CancelToken,
                        finished: threading.Event) -> None:
        while not ended.wait(3600.0):
            pass
        if finished.is_set() or not cancel.cancelled:
            return  # the call ended by itself
        self.send({"cancel": cancel.reason})
        # the reading thread ends the call when the worker answers; a worker that does
        # not answer is killed (what it left on the nodes: WorkerEngine's ``on_lost``)
        if not finished.wait(KILL_AFTER):
            log.warning("staging worker %d did not stop within %.0fs of a cancel (%s): "
                        "killed", self.pid, KILL_AFTER, cancel.reason)
            self.kill()

    def _reap(self) -> int | None:
        try:
            return self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self) -> None:
        self.healthy = False
        with contextlib.suppress(OSError):
            self.proc.kill()

    def close(self) -> None:
        """Close its stdin (it cancels what runs and exits); kill it if it lingers."""
        self.healthy = False
        with contextlib.suppress(OSError, ValueError):
            self._stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.kill()
            self.proc.wait()
        with contextlib.suppress(OSError, ValueError):
            self._stdout.close()


@dataclass(frozen=True)
class PoolCounts:
    """The staging workers of a pool at one moment: ``busy`` in a call, ``idle`` kept
    alive for the next calls; ``started`` and ``lost`` (ended mid-call:
    :class:`WorkerGone`) since the pool was made."""

    busy: int
    idle: int
    started: int
    lost: int


class EnginePool:
    """The staging workers of one rsad: a call takes an idle worker (or starts one),
    runs, and gives it back; at most ``keep_idle`` idle workers are kept."""

    def __init__(self, argv: Sequence[str] = WORKER_ARGV, keep_idle: int = KEEP_IDLE,
                 nice: int = 0, memory: int | None = None) -> None:
        # memory: each worker's RLIMIT_DATA (staging.engine_memory; None: unbounded)
        self.argv = (tuple(argv) + (("--nice", str(nice)) if nice else ())
                     + (("--memory", str(memory)) if memory else ()))
        self.keep_idle = keep_idle
        self._idle: list[EngineWorker] = []
        self._lock = threading.Lock()  # guards the idle list and the figures below
        self._closed = False
        self._busy = 0  # workers taken by a call, not given back yet
        self.started = 0  # workers started (reuse is observable)
        self.lost = 0  # calls that ended in WorkerGone (the worker died or was killed)

    def counts(self) -> PoolCounts:
        """The pool's figures now (any thread: rsad's metrics read them at scrape time).
        An idle worker that died while idle is not counted (the next call drops it)."""
        with self._lock:
            idle = sum(1 for w in self._idle if w.proc.poll() is None)
            return PoolCounts(busy=self._busy, idle=idle, started=self.started,
                              lost=self.lost)

    def run(self, request: Mapping[str, Any], *, cancel: CancelToken,
            progress: Callable[[Progress], None] | None = None,
            gate: Gate | None = None) -> Any:
        cancel.check()
        worker = self._take()
        try:
            return worker.call(request, cancel=cancel, progress=progress, gate=gate)
        except WorkerGone:
            with self._lock:
                self.lost += 1
            raise
        finally:
            self._give_back(worker)

    def _take(self) -> EngineWorker:
        with self._lock:
            if self._closed:
                raise RsaError("rsad is stopping: no staging worker is started")
            while self._idle:
                worker = self._idle.pop()
                if worker.proc.poll() is None:
                    self._busy += 1
                    return worker
        try:
            worker = EngineWorker(self.argv)
        except OSError as e:
            raise RsaError(f"cannot start a staging worker ({' '.join(self.argv)}): "
                           f"{e}; will retry") from e
        with self._lock:
            self.started += 1
            self._busy += 1
        return worker

    def _give_back(self, worker: EngineWorker) -> None:
        with self._lock:
            self._busy -= 1
            if (worker.healthy and worker.proc.poll() is None and not self._closed
                    and len(self._idle) < self.keep_idle):
                self._idle.append(worker)
                return
        worker.close()

    def close(self) -> None:
        """rsad stops: idle workers exit (a worker still in a call is closed when the
        call gives it back; its call was cancelled with every action)."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.close()


class WorkerEngine:
    """``eng``'s bulk operations, run in a worker of ``pool`` with ``eng``'s settings,
    hosts (as connection settings), identity, cancel token, progress callback and PFS
    gate. Build it with :meth:`of`, which says when a worker cannot be used.

    ``on_lost`` is called when a worker ended mid-call (killed, crashed, or killed for
    not answering a cancel): the commands it started on the RSA nodes may still run,
    and must be killed before the action is retried. It returns what it did (one
    phrase for the message) or raises."""

    def __init__(self, pool: EnginePool, eng: StagingEngine,
                 hosts: Sequence[Mapping[str, Any]],
                 on_lost: Callable[[], str] | None = None) -> None:
        self.pool = pool
        self.eng = eng
        self.hosts = [dict(h) for h in hosts]
        self.on_lost = on_lost

    @classmethod
    def of(cls, pool: EnginePool | None, eng: StagingEngine,
           on_lost: Callable[[], str] | None = None) -> WorkerEngine | StagingEngine:
        """A worker-backed twin of ``eng``, or ``eng`` itself when there is no pool or
        one of its hosts cannot be rebuilt in another process (a test double)."""
        if pool is None:
            return eng
        specs = [host_spec(h) for h in eng.hosts]
        if any(s is None for s in specs):
            return eng
        return cls(pool, eng, [s for s in specs if s is not None], on_lost)

    def _request(self, op: str, **args: Any) -> dict[str, Any]:
        e = self.eng
        gate = e.gate
        return {"op": op, "args": args, "hosts": self.hosts,
                "identity": identity_to_json(e.identity),
                "engine": {"parallel_per_node": e.parallel_per_node, "timeout": e.timeout,
                           "progress_interval": e.progress_interval, "job_id": e.job_id,
                           "cycle": e.cycle,
                           "verify_level": e.verify_level, "big_bytes": e.big_bytes,
                           "copy_tool": e.copy_tool, "copy_command": e.copy_command,
                           "stripe_bytes": e.stripe_bytes, "stripe_min": e.stripe_min,
                           "stream_objects": e.stream_objects,
                           "verify_range_bytes": e.verify_range_bytes,
                           "ramdisk_mounted": e.ramdisk_mounted,
                           "input_settle": e.input_settle},
                "gate": {"gates": bool(gate is not None and gate.gates),
                         "order": gate.order if gate is not None else "fifo"}}

    def _run(self, request: Mapping[str, Any]) -> Any:
        try:
            return self.pool.run(request, cancel=self.eng.cancel,
                                 progress=self.eng.progress, gate=self.eng.gate)
        except WorkerGone as e:
            done = self.on_lost() if self.on_lost is not None else ""
            if e.cancelled:
                raise Cancelled(e.cancelled + (f" ({done})" if done else "")) from e
            raise WorkerGone(f"{e}{f'; {done}' if done else ''}; will retry") from e

    def stage_in(self, src: str, ramdisk: str, *, atomic: bool = False) -> Stats:
        return stats_from_json(self._run(self._request("stage_in", src=src, ramdisk=ramdisk,
                                                       atomic=atomic)))

    def stage_out(self, ramdisk: str, dst: str, method: str = "rsync", *,
                  resume: bool = True, redo: Sequence[bytes] = (),
                  since: int | None = None,
                  expect: Mapping[bytes, tuple[int, int]] | None = None) -> Stats:
        return stats_from_json(self._run(self._request(
            "stage_out", ramdisk=ramdisk, dst=dst, method=method, resume=resume,
            redo=[p.hex() for p in redo], since=since,
            expect={p.hex(): list(v) for p, v in (expect or {}).items()})))

    def verify(self, ramdisk: str, dst: str, method: str = "rsync") -> Verification:
        return verification_from_json(self._run(self._request("verify", ramdisk=ramdisk,
                                                              dst=dst, method=method)))

    def record_base(self, bases: str, fs_id: str, data_in: str,
                    limit: int | None = None) -> int:
        """``daemon.writeback.record_stage_in`` in the worker, the base kept in the
        directory ``bases`` (rsad's ``Bases.root``); how many objects it holds
        (``limit``: a larger DATA_IN is refused)."""
        return int(self._run(self._request("record_base", bases=bases, fs_id=fs_id,
                                           data_in=data_in, limit=limit))["objects"])

    def write_back(self, bases: str, fs_id: str, ramdisk: str,
                   data_in: str) -> dict[str, Any] | None:
        """``daemon.writeback.written_back`` in the worker: the outcome, or None when no
        base is recorded in ``bases``."""
        out = self._run(self._request("write_back", bases=bases, fs_id=fs_id,
                                      ramdisk=ramdisk, data_in=data_in))["outcome"]
        return None if out is None else dict(out)
