"""Running one staging operation's commands on a job's RSA nodes, as the job's user.

Owns :class:`Commands`, the base of the engine's parts (``treecopy``, ``packing``,
``verifier``; :class:`~rsa_scheduler.staging.engine.StagingEngine` puts them together):
the settings every part reads, an operation's deadline and internal cancel token
(``_start``/``_stop``), the PFS slot a stage-out waits for (``_take_slot``), one command
as the user (``_user``: failures become :class:`StagingError`, a cancel
:class:`Cancelled`), the parallel streams over the nodes (``_parallel``: the first failure
or a cancel stops every stream), the scan (``_scan``) and the refusals that come before
any copy (unreadable sources, symlinks planted at the destination, an input larger than
the RAMDISK's free space).

Cancellation: the caller's :class:`CancelToken` (and the first failing bucket) cancel an
internal token (a child of the caller's: ``CancelToken.child``) handed to every running
``Host.run``, whose implementation kills the remote process tree; the engine then raises
:class:`Cancelled` (or the first error).

Must not import the daemon, the store or Slurm, nor any other part of the engine.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import logging
import queue
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from rsa_scheduler.core.units import format_size
from rsa_scheduler.hosts import Cancelled, CancelToken, Host
from rsa_scheduler.runner import CommandError, Completed, Identity
from rsa_scheduler.staging import scripts
from rsa_scheduler.staging.flush import Gate
from rsa_scheduler.staging.manifest import (
    Entry,
    display,
    parse_scan_fields,
    planted_symlinks,
    scan_fields,
)
from rsa_scheduler.staging.report import Progress, ProgressMeter, StagingError, classify

# The engine's one logger, whichever of its parts logs (sites and tests filter on it).
log = logging.getLogger("rsa_scheduler.staging.engine")
T = TypeVar("T")


def capacity_hint(nbytes: int) -> str:
    """A ``#RSA_CAPACITY`` value a quarter above ``nbytes``, in whole G (or M)."""
    want = nbytes * 5 // 4
    gib, mib = 1 << 30, 1 << 20
    if want >= gib:
        return f"{-(-want // gib)}G"
    return f"{max(1, -(-want // mib))}M"


class Commands:
    """What every part of the staging engine shares: its settings (set by
    ``StagingEngine.__init__``, documented there) and the running of commands."""

    hosts: list[Host]
    identity: Identity
    parallel_per_node: int
    progress: Callable[[Progress], None] | None
    cancel: CancelToken
    timeout: float
    progress_interval: float
    job_id: str
    cycle: int
    verify_level: str
    big_bytes: int
    clock: Callable[[], float]
    gate: Gate | None
    copy_tool: str
    copy_command: str
    stripe_bytes: int
    stripe_min: int
    stream_objects: int
    verify_range_bytes: int
    input_settle: float
    # seconds a fresh RAMDISK's free space may take to count all its nodes
    free_space_settle: float = 10.0
    _deadline: float
    _abort: CancelToken
    _held: contextlib.ExitStack

    # --- the scan, and the refusals before any copy -----------------------------------

    def _scan(self, host: Host, root: str, what: str, *, limit: int = -1) -> list[Entry]:
        """The objects below ``root``; with ``limit`` >= 0 at most ``limit`` + 1 of them
        (more than ``limit``: the tree is too large to list in rsad)."""
        argv = (scripts.scan_argv(root, self.identity.uid) if limit < 0
                else scripts.scan_capped_argv(root, self.identity.uid, limit))
        done = self._user(host, argv, what)
        return parse_scan_fields(scan_fields(done.stdout))

    def _stream_limit(self) -> int:
        """The capped scan's limit: ``stream_objects``, or -1 (no cap) when streamed mode
        is off (``staging.stream_objects`` empty: every tree is listed here) or the copy
        tool is the operator's (``rsync``, ``custom``: streamed mode copies with tar, so
        those trees are listed, whatever their size, and copied with what was chosen)."""
        if self.copy_tool != "engine":
            return -1
        return self.stream_objects if self.stream_objects > 0 else -1

    def _refuse_planted(self, entries: Iterable[Entry], existing: Iterable[Entry],
                        dst: str, phase: str) -> None:
        bad = planted_symlinks(entries, existing)
        if bad:
            shown = ", ".join(repr(display(p)) for p in bad[:5])
            more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
            raise StagingError(
                f"{phase} refused: {dst} has a symlink where the copy writes "
                f"{len(bad)} object(s): {shown}{more}; the RSA never writes through a "
                f"symlink: remove them (someone else may have planted them) and retry",
                permanent=True)

    def _refuse_unreadable(self, entries: Iterable[Entry], root: str, phase: str) -> None:
        bad = [e for e in entries if not e.readable]
        if bad:
            shown = ", ".join(repr(display(e.path)) for e in bad[:5])
            more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
            raise StagingError(
                f"{phase} refused: user {self.identity.user} cannot read {len(bad)} "
                f"object(s) in {root}: {shown}{more}; fix their permissions or remove them",
                permanent=True)

    def _refuse_too_big(self, host: Host, src: str, dst: str, nbytes: int, files: int,
                        phase: str) -> None:
        """Refuse a copy larger than the free space of ``dst`` (the RAMDISK) before any of
        it is written: a copy that runs the RAMDISK full fails anyway, after minutes, and
        meanwhile fills its RSA nodes' pools. ``nbytes`` counts sizes; a sparse input takes
        less, so what the source really occupies (``du``, only then) decides."""
        free = self._free_bytes(host, dst, phase)
        if free is None or nbytes <= free:
            return
        used = self._used_bytes(host, src, phase)
        need = nbytes if used is None else min(nbytes, used)
        # A fresh MooseFS counts its chunkservers' space into statfs a moment after they
        # registered (seen in the lab: 0, then one node's, then all): a short reading is
        # read again for ``free_space_settle`` seconds before the input is refused.
        deadline = self.clock() + self.free_space_settle
        while free is not None and need > free and self.clock() < deadline:
            self._abort.wait(0.5)
            free = self._free_bytes(host, dst, phase)
        if free is None or need <= free:
            return
        raise StagingError(
            f"{phase} refused: the input ({format_size(need)} in {files} files) is larger "
            f"than the RAMDISK's free space ({format_size(free)}): set #RSA_CAPACITY="
            f"{capacity_hint(need)} or more to get RSA nodes that hold it", permanent=True)

    def _free_bytes(self, host: Host, path: str, phase: str) -> int | None:
        done = self._user(host, ["df", "-B1", "--output=avail", "--", path],
                          f"{phase}: free space of {path}")
        try:
            return int(done.stdout.split()[-1])
        except (IndexError, ValueError):
            log.warning("%s: %s: could not read the free space of %s: %r", self.job_id,
                        phase, path, done.stdout[-200:])
            return None

    def _used_bytes(self, host: Host, path: str, phase: str) -> int | None:
        done = self._user(host, ["du", "-s", "-B1", "--", path],
                          f"{phase}: space used by {path}")
        try:
            return int(done.stdout.split()[0])
        except (IndexError, ValueError):
            return None

    # --- running commands -------------------------------------------------------------

    def _start(self) -> None:
        self.cancel.check()
        # cancelled with the caller's token: a command running alone (a scan, a script,
        # the listing) is killed on cancel as the parallel streams' are
        self._abort = self.cancel.child()
        self._deadline = self.clock() + self.timeout
        self._held = contextlib.ExitStack()

    def _stop(self) -> None:
        self._abort.cancel("operation finished")
        self._held.close()  # a PFS slot (_take_slot) is given back

    def _take_slot(self, dst: str, nbytes: int) -> None:
        """Wait for a slot on ``dst``'s PFS target (staging.flush, seed 003) before a
        stage-out copies; held until the operation ends. The wait does not count against
        the copy's timeout."""
        if self.gate is None or not self.gate.gates:
            return
        waited = self._held.enter_context(
            self.gate.slot(self.job_id, dst, nbytes, self.cancel.check))
        if waited >= 1.0:
            log.info("%s: stage-out waited %.0fs for a slot on the PFS (%s, %d bytes)",
                     self.job_id, waited, self.gate.order, nbytes)
        self._deadline = self.clock() + self.timeout

    def _left(self) -> float:
        left = self._deadline - self.clock()
        if left <= 0:
            self._abort.cancel("timeout")
            raise StagingError(f"staging timed out after {self.timeout:g}s", permanent=False)
        return left

    def _user(self, host: Host, argv: Sequence[str], what: str, *,
              input: str | None = None) -> Completed:
        """Run argv on ``host`` as the job's user; failures become StagingError."""
        if self.cancel.cancelled:
            self._abort.cancel(self.cancel.reason)
            raise Cancelled(self.cancel.reason)
        try:
            return host.run(argv, timeout=self._left(), input=input, as_user=self.identity,
                            env=self.identity.env(), cancel=self._abort)
        except (CommandError, Cancelled) as e:
            if self.cancel.cancelled:
                raise Cancelled(self.cancel.reason) from e
            if isinstance(e, Cancelled):
                raise
            raise classify(e, what, host.name) from e

    def _parallel(self, items: Iterable[T], fn: Callable[[Host, T], None],
                  meter: ProgressMeter | None, *, spread: bool = False,
                  on: Callable[[T], int] | None = None) -> None:
        """Run ``fn(host, item)`` for every item on the RSA nodes, ``parallel_per_node``
        at a time per node, items taken in order by whichever stream is free (so the
        most expensive buckets start first). ``spread``: one stream per node (archives).
        ``on``: the item runs on ``hosts[on(item) % len(hosts)]`` only (an archive read
        back by another node than the one that packed it). The first failure or a
        cancel stops every stream."""
        queues: list[queue.SimpleQueue[T]] = [
            queue.SimpleQueue() for _ in (self.hosts if on is not None else (0,))]
        for item in items:
            queues[on(item) % len(self.hosts) if on is not None else 0].put(item)
        per = 1 if spread else self.parallel_per_node
        errors: list[BaseException] = []
        lock = threading.Lock()

        def worker(host: Host, work: queue.SimpleQueue[T]) -> None:
            while not self._abort.cancelled:
                try:
                    item = work.get_nowait()
                except queue.Empty:
                    return
                try:
                    fn(host, item)
                except BaseException as e:
                    with lock:
                        errors.append(e)
                    self._abort.cancel(f"{host.name}: {e}")
                    return

        with cf.ThreadPoolExecutor(len(self.hosts) * per,
                                   thread_name_prefix="rsa-staging") as pool:
            futures = [pool.submit(worker, h, queues[i % len(queues)])
                       for _ in range(per) for i, h in enumerate(self.hosts)]
            while True:
                _, running = cf.wait(futures, timeout=0.2)
                if meter is not None:
                    meter.tick()
                if not running:
                    break
        if self.cancel.cancelled:
            raise Cancelled(self.cancel.reason)
        if errors:
            first = next((e for e in errors if isinstance(e, StagingError)), errors[0])
            raise first
