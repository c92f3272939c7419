"""rsad's API for the compute nodes' hooks: the node Prolog, the per-job node agent's
long poll, a node's mount report and the Epilog (``POST /v1/hooks/{prolog,agent,mounted,
epilog}``, rsa_scheduler.node).

Owns :class:`NodeHooks`, which :class:`rsa_scheduler.daemon.api.Routes` hands such a hook
once it has checked the caller (root or SlurmUser) and put the job under rsad's key: what
a node's request may carry (a node name, an agent's ``wait``: :func:`agent_wait`), the
hook protocol it speaks (logged and shown while a node is behind rsad, and an older
Prolog refused from a node that speaks the sealed one), and the answer, whose mount
command's secret goes sealed for root alone (:func:`sealed`). The instructions
themselves are :mod:`rsa_scheduler.daemon.nodeside`'s. Imports nothing of the API's
routes or transport.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Callable, Mapping
from http import HTTPStatus
from typing import Any

from rsa_scheduler import munge
from rsa_scheduler.core.states import LEFT_QUEUE
from rsa_scheduler.daemon.httpd import ApiError
from rsa_scheduler.daemon.service import Daemon, users_differ
from rsa_scheduler.node.plan import SEALED_ARGV, protocol_of

log = logging.getLogger(__name__)

NODE_HOOKS = frozenset({"prolog", "agent", "mounted", "epilog"})
#: the longest a node agent's long poll is held (its ``wait``, seconds): below the
#: agent's own client timeout (node/agent.py: POLL + 10) and rsad's per-request budget
AGENT_WAIT_MAX = 25.0
AGENT_WAIT_DEFAULT = 20.0  # a request without one (node/agent.py sends its POLL, 20 s)


class NodeHooks:
    """The compute nodes' hooks, answered on API threads; ``call`` runs a function on
    rsad's loop thread and returns its result (Routes._call)."""

    def __init__(self, daemon: Daemon, call: Callable[[Callable[[], Any]], Any]) -> None:
        self.daemon = daemon
        self._call = call

    def heard(self, node: str, hook: str, job: str, payload: Mapping[str, Any]) -> None:
        """The hook protocol a compute node's request speaks: a node whose hooks are older
        than rsad's (a package not upgraded yet, or a job's agent started before its
        node's upgrade) is logged once, and shown by rsa status, until it speaks ours."""
        said = self.daemon.hook_protocols.heard(node, hook, job, protocol_of(payload))
        if said is not None:
            level, line = said
            (log.warning if level == "warning" else log.info)("%s", line)

    def answer(self, hook: str, payload: dict[str, Any]) -> Any:
        """Node Prolog / node agent / mount report / Epilog of a compute node
        (rsa_scheduler.node): ``payload`` names the job by rsad's key already."""
        from rsa_scheduler.daemon.nodeside import nodeside_of

        job = str(payload["job_id"])
        node = str(payload.get("node") or "")
        if not re.fullmatch(r"[A-Za-z0-9._-]+", node):
            raise ApiError(HTTPStatus.BAD_REQUEST, "node hook without a valid node name")
        nodes = str(payload.get("nodes") or "")
        self.heard(node, hook, job, payload)
        protocol = protocol_of(payload)
        if hook == "prolog" and protocol < SEALED_ARGV and \
                self.daemon.hook_protocols.seals(node, job):
            log.warning("job %s: a Prolog request of hook protocol %d from %s, whose hooks "
                        "spoke protocol %d or later before, refused: rsad sends a "
                        "RAMDISK's secret in the clear only to a node not upgraded yet",
                        job, protocol, node, SEALED_ARGV)
            raise ApiError(HTTPStatus.CONFLICT,
                           f"{node}'s hooks spoke hook protocol {SEALED_ARGV} or later "
                           f"before, this Prolog {protocol}: refused (a request replayed "
                           "from an old capture, or an rsa-scheduler package downgraded "
                           f"on {node}: upgrade it, or restart rsad after a downgrade)")
        side = nodeside_of(self.daemon.registry)
        if side is None:
            return {"do": "nothing", "agent": False, "why": "rsad has no compute-node side"}
        if hook == "mounted":
            answer = side.report(job, node, payload)
            if "held" in answer:  # a mount taken back, or a late Prolog's counted
                held, why = bool(answer["held"]), str(payload.get("message") or "")[:500]
                at = answer.pop("at", None)
                # recorded by the loop, without waiting for it: a node's report is
                # answered at once (a Prolog whose answer is late undoes its mount)
                self.daemon.submit("call", lambda: self.daemon.mount_noted(job, node, held,
                                                                           why, at))
            return answer
        if hook == "epilog":
            if payload.get("ok") is False:  # a mount of the job stays on the node
                why = str(payload.get("message") or "no reason given")[:500]
                self._call(lambda: self.daemon.mount_left(job, node, why))
            answer = side.epilog(job, node)
            counted, at = bool(answer.pop("held", False)), answer.pop("at", None)
            # recorded by the loop for a node the job's facts may count (as a report's)
            self.daemon.submit("call", lambda: self.daemon.epilog_noted(job, node, counted,
                                                                        at))
            return answer
        if hook == "agent":
            wait = agent_wait(payload.get("wait", AGENT_WAIT_DEFAULT))
            return self._sealed(side.agent(job, node, nodes,
                                           agent_seq(payload.get("last_seq", 0)), wait,
                                           str(payload.get("epoch") or "")),
                                job, node, protocol)

        user = str(payload.get("user") or "")

        def state() -> tuple[str | None, str | None, float, str]:
            rec = self.daemon.sched.records.get(job)
            if rec is None or users_differ(rec.user, user) or \
                    job in self.daemon.sched.displaced:
                # none, or another job had this id (Slurm lost its state, or its ids
                # wrapped; the same user's: the queue told them apart): nothing of that
                # job's is this one's
                return None, None, 0.0, ""
            policy = self.daemon.sched.policy
            early = rec.spec.early_start or policy.early_start
            hold = policy.wait_timeout if early.value == "wait" and not rec.wait_over else 0.0
            due = rec.timers.get("wait-expired")
            if hold and (due is not None or rec.hold_until is not None):
                # what is left of the wait (a job Slurm held has spent some already)
                end = due if due is not None else float(rec.hold_until or 0.0)
                hold = max(0.0, min(hold, end - self.daemon.clock()))
            return (rec.rsa_state.value, rec.job_state.value if rec.job_state else None,
                    hold, rec.message)

        rsa_state, job_state, hold, message = self._call(state)
        if rsa_state is not None and job_state not in LEFT_QUEUE:
            # the node Prolog runs after PrologSlurmctld; if rsad missed that, tell it now
            told = {"hook": "prolog_slurmctld", "job_id": job, "nodes": nodes}
            if payload.get("alias"):  # an array task's own id: kept in the event log
                told["alias"] = payload["alias"]
            self.daemon.submit("hook", told, wait=True)
            rsa_state, job_state, hold, message = self._call(state)
        return self._sealed(side.prolog(job, node, nodes, rsa_state, hold=hold,
                                        message=message), job, node, protocol)

    @staticmethod
    def _sealed(answer: dict[str, Any], job: str, node: str,
                protocol: int) -> dict[str, Any]:
        """:func:`sealed`; a mount command that goes in the clear (a node older than
        protocol :data:`~rsa_scheduler.node.plan.SEALED_ARGV`) is said in rsad's log
        each time, naming the job and the node to upgrade."""
        out = sealed(answer, protocol)
        if "client_argv" in out:
            log.warning("job %s: its RAMDISK's mount command went to %s with its secret in "
                        "the clear: %s speaks hook protocol %d, and only %d or later takes "
                        "it sealed; upgrade rsa-scheduler on %s (operator guide, "
                        "\"Upgrades and backups\")", job, node, node,
                        protocol, SEALED_ARGV, node)
        return out


def sealed(answer: dict[str, Any], protocol: int) -> dict[str, Any]:
    """A node hook's answer with its mount instruction's ``client_argv``, which holds the
    RAMDISK's secret (``mfspassword=``, BeeGFS's connAuth), sealed in a MUNGE credential
    of rsad's that only root can decode (``sealed_argv``; munged encrypts a credential's
    payload, and refuses one restricted to uid 0 to every other uid). The answer goes in
    the clear over TCP to whoever passed as root: a user on rsad's host who held its TCP
    port while rsad was down kept a node Prolog's request, root's credential in it
    unused, and sent it to rsad once rsad was back (within the credential's 5 minutes):
    rsad answered it, the job's RAMDISK secret in the clear. A node whose hooks are older
    (protocol < :data:`~rsa_scheduler.node.plan.SEALED_ARGV`) gets the argv as before."""
    argv = answer.get("client_argv")
    if argv is None or protocol < SEALED_ARGV:
        return answer
    out = {k: v for k, v in answer.items() if k != "client_argv"}
    out["sealed_argv"] = munge.encode(json.dumps(argv).encode(), restrict_uid=0)
    return out


def agent_wait(raw: object) -> float:
    """A node agent's ``wait``: seconds to hold its long poll, 0 to
    :data:`AGENT_WAIT_MAX` (more is held that long). NaN (which made the poll spin on its
    lock for ever: every comparison with it is false), infinity, a negative number or
    anything but a number is refused in one line."""
    wait = raw if isinstance(raw, (int, float)) and not isinstance(raw, bool) else None
    if wait is None or not math.isfinite(wait) or wait < 0:
        raise ApiError(HTTPStatus.BAD_REQUEST,
                       f"agent hook: wait takes a number of seconds from 0 to "
                       f"{AGENT_WAIT_MAX:g}, not {str(raw)[:20]!r}")
    return min(float(wait), AGENT_WAIT_MAX)


def agent_seq(raw: object) -> int:
    """A node agent's ``last_seq``: the number of the last instruction it carried out (0:
    none yet), a whole number from 0. Anything else (a string, a fraction, null, true) is
    refused in one line: ``int()`` of it answered Python's own words (``invalid literal
    for int() with base 10``), or a 500 (``int(None)``), or took 2.9 for 2."""
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
        raise ApiError(HTTPStatus.BAD_REQUEST,
                       "agent hook: last_seq takes the number of the last instruction the "
                       f"node agent carried out, a whole number from 0, not {str(raw)[:20]!r}")
    return raw
