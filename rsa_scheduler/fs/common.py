"""Helpers shared by the filesystem backends: parallel per-node steps, deadlines, argv.

Owns :func:`on_nodes` (run one step on many RSA nodes at once, collect every failure),
:class:`Deadline` (one budget for a multi-step create/destroy), :func:`sh_chain` and
:func:`sh_all` (several argv lists in one SSH round trip, joined with ``&&`` or run
every one, every word quoted by :func:`shlex.join`), :func:`validate_fs_id` and
:func:`listening_ports` (``ss`` output). Must not import any backend.
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from rsa_scheduler.fs.base import FsError
from rsa_scheduler.hosts import Cancelled

T = TypeVar("T")

_FS_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def validate_fs_id(fs_id: str) -> str:
    """fs_id becomes part of paths and process titles: keep it to a safe alphabet."""
    if not _FS_ID.match(fs_id):
        raise FsError(f"invalid filesystem id {fs_id!r}: use letters, digits, '.', '_', '-' "
                      "(at most 64, not starting with a punctuation mark)")
    return fs_id


def sh_chain(*argvs: Sequence[str]) -> list[str]:
    """One ``sh -c`` running each argv in turn, stopping at the first failure."""
    return ["sh", "-c", " && ".join(shlex.join(a) for a in argvs)]


def sh_all(*argvs: Sequence[str]) -> list[str]:
    """One ``sh -c`` running every argv in turn, also after one failed; its exit status
    is the first failure's (0 when all succeeded)."""
    steps = "".join(f"{shlex.join(a)} || {{ s=$?; [ $rc -ne 0 ] || rc=$s; }}\n"
                    for a in argvs)
    return ["sh", "-c", f"rc=0\n{steps}exit $rc"]


class Deadline:
    """The time left of one operation's budget."""

    def __init__(self, seconds: float, what: str) -> None:
        self.end = time.monotonic() + seconds
        self.seconds = seconds
        self.what = what

    def left(self, floor: float = 1.0) -> float:
        """Seconds left (at least ``floor``, so a last step still gets a chance)."""
        return max(floor, self.end - time.monotonic())

    def expired(self) -> bool:
        return time.monotonic() >= self.end

    def check(self) -> None:
        if self.expired():
            raise FsError(f"{self.what}: timed out after {self.seconds:g}s")


def on_nodes(nodes: Sequence[str], step: Callable[[str], T], what: str) -> dict[str, T]:
    """Run ``step(node)`` on every node in parallel; FsError naming every failed node.

    Cancellation wins over other failures so the caller can unwind as cancelled.
    """
    if len(nodes) == 1:
        try:
            return {nodes[0]: step(nodes[0])}
        except Cancelled:
            raise
        except Exception as e:
            raise FsError(f"{what} failed on {nodes[0]}: {e}") from e
    results: dict[str, T] = {}
    errors: dict[str, BaseException] = {}
    with ThreadPoolExecutor(max_workers=len(nodes), thread_name_prefix="fs") as pool:
        futures = {node: pool.submit(step, node) for node in nodes}
        for node, fut in futures.items():
            try:
                results[node] = fut.result()
            except BaseException as e:  # collected, re-raised below
                errors[node] = e
    if errors:
        for err in errors.values():
            if isinstance(err, Cancelled):
                raise err
        first = next(iter(errors.values()))
        detail = "; ".join(f"{n}: {e}" for n, e in errors.items())
        raise FsError(f"{what} failed on {len(errors)}/{len(nodes)} nodes: {detail}") from first
    return results


def listening_ports(ss_output: str) -> set[int]:
    """Ports in ``ss -Hltn`` output (any address: a wildcard listener blocks them too)."""
    ports: set[int] = set()
    for line in ss_output.splitlines():
        fields = line.split()
        if len(fields) >= 4:
            _, _, port = fields[3].rpartition(":")
            if port.isdigit():
                ports.add(int(port))
    return ports
