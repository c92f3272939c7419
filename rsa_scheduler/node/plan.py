"""Instructions rsad gives the compute nodes, and how their reports add up.

Owns the wire format between ``rsad`` and the node side (node Prolog and the per-job
node agent) as plain JSON-able dicts, the pure functions that build them
(:func:`mount_instruction`, :func:`release_instruction`) and :func:`aggregate`, which
turns per-node reports into one verdict for a tracked action. No I/O here.

An instruction is ``{"seq": N, "do": ...}``:

- ``mount``: client-mount the RAMDISK at the node's private per-job place (``client_argv``
  with :data:`MOUNTPOINT` replaced; on the wire to a node of protocol
  :data:`SEALED_ARGV` or later, ``sealed_argv`` instead) and bind it over ``target`` —
  ``mode`` ``ro`` (read-only bind), ``rw`` (writable bind) or ``union`` (read-only
  overlayfs, RAMDISK over the PFS directory; FUSE is accepted as an overlay lower layer,
  never as the upper one);
- ``release``: unmount everything of the job on the node, refusing (``busy``) when a
  mount is still in use — never forced (seed 004 footnote 3);
- ``nothing`` / ``wait`` (Prolog: poll again after ``retry`` seconds) / ``exit`` (agent).

Every request of the node side names the hook protocol it speaks (``protocol``,
:data:`PROTOCOL`); a package older than that field names none (protocol 1). rsad reads
it with :func:`protocol_of` and keeps, in :class:`HookProtocols`, which compute nodes'
hooks speak an older protocol than its own, with the line to log and show (``rsa
status``): a rolling upgrade leaves them for a while (operator guide, "Upgrades").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MOUNTPOINT = "@MOUNTPOINT@"
MODES = ("ro", "rw", "union")

#: The hook protocol of this package's node side (rsa-prolog, rsa-epilog, the node agent),
#: sent as ``protocol`` with every request. 1: a package that names none; such a node
#: takes every instruction of today's rsad, but one from before 2026-11-28 17:00 UTC
#: (commit 0e19855) loads no guard of the RAMDISK servers in the Prolog of a job without a
#: RAMDISK (rsad's ``guard``). 2: names it, and loads that guard. 3: takes a mount
#: instruction's ``client_argv`` sealed (``sealed_argv``: a MUNGE credential of rsad's
#: only root decodes, node.mounts.client_argv_of), which rsad sends a node of protocol 3
#: or later instead of the argv in the clear (it holds the RAMDISK's secret).
PROTOCOL = 3
#: the first protocol whose node side takes ``sealed_argv``
SEALED_ARGV = 3
#: the jobs per node whose older-protocol Prolog is remembered (HookProtocols.old_prologs):
#: more than start on one node within a Prolog's longest hold
OLD_PROLOGS = 256
_HOOKS = {"prolog": "Prolog", "epilog": "Epilog", "agent": "node agent",
          "mounted": "mount report"}


def protocol_of(body: Mapping[str, Any]) -> int:
    """The hook protocol a node-side request speaks: 1 when it names none (or nonsense)."""
    try:
        return max(1, int(body.get("protocol", 1)))
    except (TypeError, ValueError):
        return 1


def behind_line(node: str, hook: str, job: str, protocol: int) -> str:
    """What rsad says of a node whose hooks speak an older protocol than its own."""
    why = ("; such a node may load no guard of the RAMDISK servers for jobs without a "
           "RAMDISK (packages before 2026-11-28 17:00 UTC)" if protocol < 2 else
           "; rsad sends such a node its RAMDISK mount commands with their secret in the "
           "clear (packages before 2026-11-30)" if protocol < SEALED_ARGV else "")
    return (f"{node}: the {_HOOKS.get(hook, hook)} of job {job} speaks hook protocol "
            f"{protocol}, rsad {PROTOCOL}: its rsa-scheduler package is older than rsad's; "
            f"upgrade it on {node} (operator guide, \"Upgrades and backups\": compute "
            "nodes first, rsad last; a node agent started before its node's upgrade stays "
            f"old until its job ends){why}")


class HookProtocols:
    """Which compute nodes' hooks speak an older hook protocol than rsad's: the node's
    newest such request, as the line rsad logs once when the node falls behind and
    ``rsa status`` shows until a request of the current protocol comes from it."""

    def __init__(self) -> None:
        self.behind: dict[str, str] = {}  # node -> behind_line of its newest old request
        #: nodes a request of protocol :data:`SEALED_ARGV` or later came from in this
        #: rsad's life: their package takes a mount command sealed
        self.sealing: set[str] = set()
        #: node -> the jobs whose Prolog asked in an older protocol before the node
        #: sealed (the newest :data:`OLD_PROLOGS`): a Prolog that was holding its job's
        #: start (``wait``) while its node was upgraded polls on in its own protocol
        self.old_prologs: dict[str, dict[str, None]] = {}

    def seals(self, node: str, job: str) -> bool:
        """Whether a Prolog request of an older protocol than :data:`SEALED_ARGV` for
        ``job`` from ``node`` is none of today's: ``node`` spoke a protocol that takes
        ``sealed_argv`` since rsad started, and that job's Prolog there did not ask before
        it did. A node's Prolog runs from its installed package at every job start, so
        such a request is a replay of an old capture (a squatter on rsad's port) or comes
        from a package downgraded there."""
        return node in self.sealing and job not in self.old_prologs.get(node, {})

    def heard(self, node: str, hook: str, job: str, protocol: int) -> tuple[str, str] | None:
        """A request of ``hook`` for ``job`` from ``node``. Returns what to log when the
        node falls behind (``("warning", line)``) or catches up (``("info", line)``)."""
        if protocol >= SEALED_ARGV:
            self.sealing.add(node)
        elif hook == "prolog" and node not in self.sealing:
            jobs = self.old_prologs.setdefault(node, {})
            jobs[job] = None
            while len(jobs) > OLD_PROLOGS:
                del jobs[next(iter(jobs))]
        if protocol >= PROTOCOL:
            if self.behind.pop(node, None) is None:
                return None
            return ("info", f"{node}: its node hooks speak hook protocol {protocol} now "
                            f"(the {_HOOKS.get(hook, hook)} of job {job})")
        line = behind_line(node, hook, job, protocol)
        first = node not in self.behind
        self.behind[node] = line
        return ("warning", line) if first else None


def mount_instruction(seq: int, *, job_id: str, user: str, role: str, target: str,
                      mode: str, client_argv: Sequence[str],
                      client_umount_argv: Sequence[str]) -> dict[str, Any]:
    """Mount the RAMDISK over ``target`` (``role`` ``input`` = DATA_IN, ``output`` = DATA_OUT)."""
    if role not in ("input", "output"):
        raise ValueError(f"unknown mount role {role!r}")
    if mode not in MODES:
        raise ValueError(f"unknown mount mode {mode!r}; use one of {', '.join(MODES)}")
    if role == "output" and mode != "rw":
        raise ValueError("DATA_OUT is always mounted read-write")
    if not target:
        raise ValueError(f"no {'DATA_IN' if role == 'input' else 'DATA_OUT'} to mount over")
    if MOUNTPOINT not in client_argv:
        raise ValueError(f"client argv has no {MOUNTPOINT} placeholder: {list(client_argv)}")
    return {"seq": seq, "do": "mount", "job_id": job_id, "user": user, "role": role,
            "target": target, "mode": mode, "client_argv": list(client_argv),
            "client_umount_argv": list(client_umount_argv)}


def release_instruction(seq: int, *, job_id: str) -> dict[str, Any]:
    return {"seq": seq, "do": "release", "job_id": job_id}


def substitute(argv: Sequence[str], mountpoint: str) -> list[str]:
    return [mountpoint if a == MOUNTPOINT else a for a in argv]


@dataclass(frozen=True, slots=True)
class Verdict:
    """Where a node-side step stands: ``pending``, ``ok``, ``failed`` or ``busy``."""

    state: str
    message: str = ""
    missing: tuple[str, ...] = ()


def aggregate(nodes: Iterable[str] | None, reports: Mapping[str, Mapping[str, Any]],
              seq: int) -> Verdict:
    """One verdict from the reports of ``nodes`` for instruction ``seq``.

    The first failure decides (fail fast: the job must not wait for the others); a busy
    node makes the step busy once no node failed; ok only when every node said ok.
    ``nodes`` None means no node has asked yet (the job's node list is not known).
    """
    current = {n: r for n, r in reports.items() if int(r.get("seq", -1)) == seq}
    failed = sorted(n for n, r in current.items() if not r.get("ok") and not r.get("busy"))
    if failed:
        msgs = "; ".join(f"{n}: {current[n].get('message') or 'failed'}" for n in failed)
        return Verdict("failed", msgs)
    if nodes is None:
        return Verdict("pending", "no compute node has asked yet")
    expected = sorted(set(nodes))
    missing = tuple(n for n in expected if n not in current)
    if missing:
        return Verdict("pending", f"waiting for {', '.join(missing)}", missing)
    busy = sorted(n for n in expected if current[n].get("busy"))
    if busy:
        msgs = "; ".join(f"{n}: {current[n].get('message') or 'busy'}" for n in busy)
        return Verdict("busy", msgs)
    return Verdict("ok", "")
