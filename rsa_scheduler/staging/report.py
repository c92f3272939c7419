"""What the staging engine reports: errors, progress, statistics, script results.

Owns :class:`StagingError` (``permanent`` tells the daemon whether a retry can help),
:func:`classify` (a failed command → StagingError), :class:`Progress` and
:class:`ProgressMeter` (rate and ETA, throttled to one report per interval),
:class:`Stats` and :class:`ScriptResult`.

Pure apart from reading the injected clock. Must not import ``engine``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rsa_scheduler.errors import RsaError
from rsa_scheduler.runner import KILLED_FROM_OUTSIDE, CommandError, killed_by

TAIL = 4000
EXIT_ROOT = 66  # scripts: cannot enter the root directory
# A filesystem that stopped answering (a dead server behind a FUSE mount): not the user's
# fault and not a missing directory, whatever the exit status says
_NOT_ANSWERING = ("Input/output error", "Transport endpoint is not connected",
                  "Software caused connection abort")
_PERMANENT = (("Permission denied", "permission denied"),
              ("Operation not permitted", "operation not permitted"),
              ("No space left on device", "no space left (RAMDISK or quota too small)"),
              ("Disk quota exceeded", "disk quota exceeded"),
              ("Read-only file system", "read-only file system"))


class StagingError(RsaError):
    """A transfer, scan, verification or script could not be done.

    ``permanent``: retrying cannot help (permission denied, DATA_IN missing, no space);
    otherwise the failure may be transient (I/O error, timeout, node lost).
    ``unanswered``: the filesystem did not answer (EIO, ENOTCONN): worth asking the
    backend whether the RAMDISK itself is broken."""

    def __init__(self, message: str, *, permanent: bool, node: str = "",
                 unanswered: bool = False) -> None:
        self.permanent = permanent
        self.node = node
        self.unanswered = unanswered
        super().__init__(message)


def classify(err: CommandError, what: str, node: str) -> StagingError:
    """One actionable line from a failed node command."""
    tail = err.stderr_tail.strip().splitlines()
    last = tail[-1] if tail else "no error output"
    if err.timed_out:
        return StagingError(f"{what} on {node} timed out (transfer killed); will retry",
                            permanent=False, node=node)
    sig = killed_by(err.stderr_tail, err.returncode)
    if sig is not None:
        return StagingError(f"{what} on {node} was killed by {sig} ({KILLED_FROM_OUTSIDE}); "
                            "will retry", permanent=False, node=node)
    for needle in _NOT_ANSWERING:
        if needle in err.stderr_tail:
            hit = next((ln for ln in tail if needle in ln), last)
            return StagingError(f"{what} on {node}: the filesystem does not answer "
                                f"({needle}): {hit.strip()}; one of its servers may have "
                                "failed; will retry", permanent=False, node=node,
                                unanswered=True)
    for needle, why in _PERMANENT:
        if needle in err.stderr_tail:
            hit = next((ln for ln in tail if needle in ln), last)
            return StagingError(f"{what} refused on {node}: {why}: {hit.strip()}",
                                permanent=True, node=node)
    if err.returncode == EXIT_ROOT:
        return StagingError(f"{what} on {node}: directory missing or not accessible as "
                            f"the job's user: {last.strip()}", permanent=True, node=node)
    return StagingError(f"{what} failed on {node} (exit {err.returncode}): {last.strip()}",
                        permanent=False, node=node)


@dataclass(frozen=True, slots=True)
class Progress:
    """One progress report (the daemon records it as an event)."""

    phase: str  # stage-in | stage-out | verify
    files_done: int
    files_total: int
    bytes_done: int
    bytes_total: int
    elapsed: float
    rate: float  # bytes/s so far
    files_rate: float  # files/s so far
    eta: float | None  # seconds left, None until something finished

    def to_json(self) -> dict[str, object]:
        return {"phase": self.phase, "files": [self.files_done, self.files_total],
                "bytes": [self.bytes_done, self.bytes_total],
                "elapsed": round(self.elapsed, 3), "rate": round(self.rate),
                "files_rate": round(self.files_rate, 1),
                "eta": None if self.eta is None else round(self.eta, 1)}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Progress:
        """The inverse of :meth:`to_json` (a report that crossed a process boundary)."""
        files, nbytes, eta = d["files"], d["bytes"], d.get("eta")
        return cls(str(d["phase"]), int(files[0]), int(files[1]), int(nbytes[0]),
                   int(nbytes[1]), float(d["elapsed"]), float(d["rate"]),
                   float(d["files_rate"]), None if eta is None else float(eta))


class ProgressMeter:
    """Counts finished work; calls ``sink`` at most once per ``interval`` seconds."""

    def __init__(self, phase: str, files_total: int, bytes_total: int,
                 sink: Callable[[Progress], None] | None, interval: float,
                 clock: Callable[[], float]) -> None:
        self.phase = phase
        self.files_total = files_total
        self.bytes_total = bytes_total
        self._sink = sink
        self._interval = interval
        self._clock = clock
        self._start = clock()
        self._last = self._start
        self._lock = threading.Lock()
        self.files = 0
        self.bytes = 0

    def add(self, files: int, nbytes: int) -> None:
        with self._lock:
            self.files += files
            self.bytes += nbytes

    def found_done(self, files: int, nbytes: int) -> None:
        """Objects found already complete at the destination while copying (streamed
        resume): not to be copied, so out of the totals, as the listed mode leaves them
        out of its plan."""
        with self._lock:
            self.files_total -= files
            self.bytes_total = max(self.bytes_total - nbytes, self.bytes)

    def left(self) -> tuple[int, int]:
        """(files, bytes) still to copy."""
        with self._lock:
            return self.files_total - self.files, self.bytes_total - self.bytes

    def snapshot(self) -> Progress:
        with self._lock:
            files, nbytes = self.files, self.bytes
        elapsed = max(self._clock() - self._start, 1e-9)
        # ETA from the share of the planned cost done so far (bytes and files both count).
        done = (nbytes / self.bytes_total if self.bytes_total else 1.0,
                files / self.files_total if self.files_total else 1.0)
        frac = sum(done) / 2
        eta = elapsed * (1 - frac) / frac if frac > 0 else None
        return Progress(self.phase, files, self.files_total, nbytes, self.bytes_total,
                        elapsed, nbytes / elapsed, files / elapsed, eta)

    def tick(self, *, final: bool = False) -> None:
        now = self._clock()
        if self._sink is None or (not final and now - self._last < self._interval):
            return
        self._last = now
        self._sink(self.snapshot())


@dataclass(frozen=True, slots=True)
class Stats:
    """A finished stage-in or stage-out."""

    phase: str
    files: int  # non-directories copied (files, symlinks, FIFOs)
    bytes: int
    dirs: int
    seconds: float
    buckets: int
    already: int = 0  # found complete at the destination (resumed run)
    skipped: tuple[str, ...] = ()  # sockets/devices not staged (display form; streamed: 5)
    per_node: dict[str, int] = field(default_factory=dict)  # node -> bytes copied
    archives: tuple[str, ...] = ()  # tar method: archive paths, then the index
    skipped_count: int = -1  # how many were skipped, when ``skipped`` names only some

    @property
    def skipped_total(self) -> int:
        """How many sockets and devices were not staged."""
        return self.skipped_count if self.skipped_count >= 0 else len(self.skipped)

    @property
    def rate(self) -> float:
        return self.bytes / self.seconds if self.seconds > 0 else 0.0

    @property
    def files_rate(self) -> float:
        return self.files / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True, slots=True)
class ScriptResult:
    """A PREPROCESS/POSTPROCESS run. Its exit status decides success."""

    node: str
    phase: str
    argv: tuple[str, ...]
    returncode: int | None  # None: killed at the timeout
    stdout_tail: str
    stderr_tail: str
    seconds: float

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def summary(self) -> str:
        if self.ok:
            return f"{self.phase} script {self.argv[0]} succeeded on {self.node}"
        sig = killed_by(self.stderr_tail, self.returncode)
        if sig is not None:
            return (f"{self.phase} script {self.argv[0]} was killed by {sig} on {self.node} "
                    f"({KILLED_FROM_OUTSIDE})")
        how = "timed out" if self.returncode is None else f"exited {self.returncode}"
        last = (self.stderr_tail.strip().splitlines() or ["no error output"])[-1]
        return f"{self.phase} script {self.argv[0]} {how} on {self.node}: {last}"
