"""rsad's half of the compute-node side: MOUNT_INPUT, MOUNT_OUTPUT and RESET executors,
and the release a teardown asks for first (:meth:`NodeSide.release_mounts`).

Owns :class:`NodeSide`: per job, the one instruction currently outstanding for its
compute nodes and their reports. rsad never reaches into compute nodes (no SSH): the node
Prolog asks (``POST /v1/hooks/prolog``), and a small per-job node agent the Prolog starts
long-polls (``POST /v1/hooks/agent``) for the mid-job reset; both report each step
(``POST /v1/hooks/mounted``). An executor publishes an instruction, waits until every node
of the job reported it done (ok), the first node failed (failed), or a node could not
release a busy input mount (busy — RESET only, retried by the core), within a timeout.

Runs in worker threads (executors) and API threads (routes); never touches the core.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from ClusterShell.NodeSet import NodeSet

from rsa_scheduler.core.actions import ActionKind
from rsa_scheduler.core.epilogs import (
    SLURM_EVERY,
    epilogs_left,
    slurm_due,
    unconfirmed_words,
)
from rsa_scheduler.core.hostlist import check_size
from rsa_scheduler.core.payloads import (
    MountInputArgs,
    MountMode,
    MountOutputArgs,
    OnNodes,
    ResetArgs,
)
from rsa_scheduler.core.states import MOUNT_COMING, NODE_AGENT, RsaState
from rsa_scheduler.daemon.executors import ActionContext, BusyError, PermanentError, Registry
from rsa_scheduler.errors import RsaError
from rsa_scheduler.fs.base import FilesystemBackend, FsRequest, MountSpec
from rsa_scheduler.hosts import Cancelled
from rsa_scheduler.node.plan import (
    MOUNTPOINT,
    Verdict,
    aggregate,
    mount_instruction,
    release_instruction,
)

log = logging.getLogger(__name__)

AGENT_POLL = 20.0

_BY_REGISTRY: weakref.WeakKeyDictionary[Registry, NodeSide] = weakref.WeakKeyDictionary()


def nodeside_of(registry: Registry) -> NodeSide | None:
    """The NodeSide registered into ``registry`` (the API routes find it here)."""
    return _BY_REGISTRY.get(registry)


@dataclass
class JobNodes:
    """What rsad knows about one running job's compute nodes."""

    nodes: frozenset[str] | None = None
    seq: int = 0
    current: dict[str, Any] | None = None
    reports: dict[str, dict[str, Any]] = field(default_factory=dict)
    agents: set[str] = field(default_factory=set)
    ended: set[str] = field(default_factory=set)
    # the last mount every node of the job should have: a node whose Prolog runs late
    # (Slurm runs it at the node's first step unless PrologFlags=Alloc) still gets it
    standing: dict[str, Any] | None = None
    # node -> the mount instruction (seq) its Prolog was handed and has not yet reported
    asked: dict[str, int] = field(default_factory=dict)
    # nodes that confirmed the RAMDISK mounted (Prolog or agent) and did not release it
    mounted: set[str] = field(default_factory=set)
    # node -> the mount instruction (seq) it took back (its Prolog undid the mount: its
    # hard timeout, an error after the report): it holds nothing, whatever the recorded
    # ``mounted`` of a step issued before says (NodeSide.report); None: an earlier rsad's
    # instruction (its numbers are not this rsad's)
    undone: dict[str, int | None] = field(default_factory=dict)
    # how many times this rsad changed ``mounted``: what each record of it (a step's
    # outcome, ``compute.*``) says it is as of, so the job's facts keep the newest
    # whatever order the loop commits them in (daemon/memory.py)
    changes: int = 0


class NodeSide:
    """Instructions for compute nodes and the executors that wait for their reports."""

    def __init__(self, *, backend_for: Callable[[ActionContext], tuple[FilesystemBackend,
                                                                        FsRequest]],
                 mount_timeout: float = 30.0, reset_timeout: float = 90.0,
                 settle: float = 0.5, agent_settle: float = 12.0, max_hold: float = 300.0,
                 clock: Callable[[], float] = time.monotonic,
                 exclusive: Callable[[str], AbstractContextManager[Any]] | None = None,
                 learned: Callable[[MountSpec], None] = lambda _spec: None,
                 write_back: Callable[[ActionContext, str], Mapping[str, Any]] | None = None,
                 written_back: Callable[[str], None] = lambda _fs_id: None,
                 guard: Callable[[], str | None] = lambda: None,
                 slurm_nodes: Callable[[str], frozenset[str] | None] = lambda _job: None,
                 slurm_every: float = SLURM_EVERY,
                 ) -> None:
        self.backend_for = backend_for
        # the nodes on which Slurm still has a job (running it, or its Epilog not finished
        # there: core/epilogs.py); None when Slurm cannot say. What confirms the Epilog of
        # a node rsad did not hear (it was away): never the silence of the node's agent
        self.slurm_nodes = slurm_nodes
        self.slurm_every = slurm_every  # how often it is asked while rsad waits
        # the guard every node Prolog loads, whatever its job (FilesystemBackend.node_guard)
        self.guard = guard
        # writable input's last write-back, between the release and the recreation
        self.write_back = write_back
        # ... after which its base is forgotten: the RAMDISK about to be recreated empty
        # must never be taken for a job that deleted its whole input (daemon/writeback)
        self.written_back = written_back
        # the reset recreates the RAMDISK: never beside a repair of it (daemon/data.py)
        self.exclusive = exclusive or (lambda _fs_id: contextlib.nullcontext())
        self.learned = learned
        self.mount_timeout = mount_timeout
        self.reset_timeout = reset_timeout
        self.max_hold = max_hold  # hooks.max_hold: the Prolog holds a start no longer
        self.clock = clock
        self.settle = settle
        self.agent_settle = agent_settle
        self._cond = threading.Condition()
        self._jobs: dict[str, JobNodes] = {}
        # instruction numbers restart with rsad: agents send back the epoch they saw
        self.epoch = f"{time.time():.6f}"
        # when rsad's API began to answer the agents (:meth:`opened`): they reconnect
        # within seconds of it (release_mounts); None while rsad starts (:meth:`closed`)
        self.born: float | None = clock()

    # ---- executors ----------------------------------------------------------------------
    def mount_input(self, ctx: ActionContext) -> Mapping[str, Any]:
        args = ctx.action.args_as(MountInputArgs)
        return self._mount(ctx, role="input", target=args.data_in, mode=args.mode)

    def mount_output(self, ctx: ActionContext) -> Mapping[str, Any]:
        return self._mount(ctx, role="output",
                           target=ctx.action.args_as(MountOutputArgs).data_out,
                           mode=MountMode.RW)

    def reset(self, ctx: ActionContext) -> Mapping[str, Any]:
        """§3.2: every node releases its input mount; RAMDISK recreated; mounted over DATA_OUT.

        A node whose input mount is still in use reports busy and keeps it: the step is
        BUSY (the core retries, then sends output to the PFS, footnote 3). A node that did
        release reads DATA_IN from the PFS from then on, which is always correct.
        """
        job = ctx.action.job_id
        data_out = ctx.action.args_as(ResetArgs).data_out
        backend, req = self.backend_for(ctx)
        written: Mapping[str, Any] = {}
        if ctx.facts.get("reset_of") == ctx.action.id and ctx.facts.get("mount"):
            # this reset recreated the RAMDISK before rsad restarted: the job may already
            # write its output there; never destroy it again, only finish the mounts
            spec = MountSpec.from_json(ctx.facts["mount"])
            if ctx.job_ended or self._run_ended(job):
                # no node of the run will mount it any more; whatever the job wrote
                # there before its run ended is staged out from it
                log.info("job %s: reset already recreated the RAMDISK and %s: nothing "
                         "left to mount", job, self._ended_words(ctx))
                return {"mount": spec.to_json(),
                        "partial": f"{self._ended_words(ctx)} before every node mounted "
                                   "the recreated RAMDISK over DATA_OUT"}
            log.info("job %s: reset already recreated the RAMDISK; mounting it over "
                     "DATA_OUT", job)
        else:
            if ctx.job_ended or not ctx.job_running:
                # the job was not running when the reset was (re-)issued: it ended, Slurm
                # requeued it (both: its nodes' Epilogs take every mount of the job down
                # and stop its agents, so no agent answers a release), or it has not
                # started yet (early start wait over while Slurm held it): no node holds
                # this run's input. Processes of a run that is over may still run
                # (SIGTERM, then KillWait) and change writable input: waited for as before
                # a stage-out; the RAMDISK held only input, so it is recreated empty then
                log.info("job %s: not running (Slurm: %s): no release asked; recreating "
                         "the RAMDISK once the nodes that held it ran their Epilog", job,
                         "ended" if ctx.job_ended else "pending")
                self.await_epilogs(ctx)
            else:
                v = self._step(ctx, release_instruction(0, job_id=job), self.reset_timeout)
                if v.state == "busy":
                    raise BusyError(f"input mount still in use ({v.message}); will retry")
                if v.state != "ok":
                    raise RsaError(f"releasing the input mounts failed: {v.message}")
            args = ctx.action.args_as(ResetArgs)
            if args.write_back and args.data_in is not None:
                # writable input: no compute node can write to the RAMDISK any more; what
                # the job changed since the last write-back goes to DATA_IN before the
                # RAMDISK is recreated (a failure keeps it: the core writes back again)
                if self.write_back is None:
                    raise RsaError("writable input, but rsad has no write-back path: "
                                   "the RAMDISK is kept")
                if ctx.facts.get("written_back_of") != ctx.action.id:
                    written = self.write_back(ctx, str(args.data_in))
                    # re-issued after a crash, it must not write the same copy again over
                    # what the job changed on the PFS since the release
                    ctx.milestone({"written_back_of": ctx.action.id})
                    log.info("job %s: reset: writable input written back after its "
                             "mounts were released", job)
                self.written_back(req.fs_id)
            with self.exclusive(req.fs_id):
                spec = backend.reset(req, ctx.cancel)
                self.learned(spec)
            ctx.milestone({"reset_of": ctx.action.id, "mount": spec.to_json()})
            if ctx.job_ended or self._run_ended(job):
                return {"mount": spec.to_json(),
                        "partial": f"{self._ended_words(ctx)} before the RAMDISK was reset "
                                   "for its output: its output is on the PFS"}
        try:
            detail = dict(self._mount(ctx, role="output", target=data_out,
                                      mode=MountMode.RW, spec=spec, via="agent"))
        except RsaError as e:
            # The new RAMDISK exists and some nodes may have mounted it: the job may be
            # writing there. Reporting a failure would tear it down under the job; the
            # reset is done, nodes without the mount write to the PFS (seed 004 §3.2).
            # The user's timeline says so (the outcome's message, e.g. a DATA_OUT that
            # is not theirs), and ``rsa input-done`` reads ``partial``.
            log.warning("job %s: reset: %s", ctx.action.job_id, e)
            # a node that refused it over another job's RAMDISK says what the job sees
            # there (node/mounts.py): not the PFS then
            where = ("" if "mounted over it on this node" in str(e)
                     else "; nodes without the mount write to the PFS")
            detail = {"partial": str(e), "summary": f"{e}{where}"}
        detail["mount"] = spec.to_json()
        if written.get("summary") and "summary" not in detail:
            # what the last write-back did (files kept aside, kept) is the user's to read
            detail["summary"] = f"input released; {written['summary']}"
        if written.get("written_back"):
            detail["written_back"] = written["written_back"]
        return detail

    @staticmethod
    def _ended_words(ctx: ActionContext) -> str:
        """How the job's run ended, as the reset's ``partial`` says it."""
        if ctx.job_ended:
            return "the job ended"
        return "the job's run ended (every node of it ran its Epilog)"

    def _run_ended(self, job: str) -> bool:
        """Every node of ``job``'s run ran its Epilog (:meth:`_expected`)."""
        with self._cond:
            j = self._jobs.get(job)
            return j is not None and self._over(j)

    @staticmethod
    def _over(j: JobNodes) -> bool:
        """Holding ``self._cond``: every node of the job's run ran its Epilog: none holds a
        mount of the job, no agent of it answers any more."""
        return j.nodes is not None and bool(j.nodes) and j.nodes <= j.ended

    def release_mounts(self, ctx: ActionContext) -> list[str]:
        """Before DESTROY_FS (daemon/data.py): every compute node that may hold a mount of
        the job's RAMDISK, of any run of the job, releases it first: the nodes with an
        agent and those that confirmed a mount (recorded: ``mounted``, which survives an
        rsad restart), less those whose Epilog is confirmed (:meth:`_unconfirmed`: rsad
        heard it, or Slurm no longer has the job there). A node that does not confirm the
        release within ``reset_timeout`` (busy, failed or silent: its agent may have died
        while the job still runs there) keeps the RAMDISK: the teardown fails and is
        retried. Returns the nodes that released."""
        job = ctx.action.job_id
        wait, held = self._unconfirmed(ctx)
        if not wait:
            return []
        try:
            v = self._step(ctx, release_instruction(0, job_id=job), self.reset_timeout,
                           only=wait)
        except BusyError as e:  # silent nodes
            raise RsaError(f"compute node(s) {', '.join(e.silent)} did not confirm the "
                           f"release of the RAMDISK within {self.reset_timeout:.0f}s, nor "
                           f"is their Epilog confirmed ({unconfirmed_words(held)}): it is "
                           "kept (they may still use it); the teardown will retry") from e
        if v.state != "ok":
            raise RsaError(f"compute node(s) did not release the RAMDISK before its "
                           f"teardown ({v.state}: {v.message}): the RAMDISK is kept (they "
                           "may still use it); will retry")
        log.info("job %s: %s released the RAMDISK before its teardown", job,
                 ",".join(sorted(wait)))
        return sorted(wait)

    def await_epilogs(self, ctx: ActionContext) -> list[str]:
        """Before a stage-out reads the RAMDISK (daemon/data.py): wait until every compute
        node that may hold the job's mount ran its Epilog, which Slurm runs once the
        job's processes there are gone. The job ends for rsad at EpilogSlurmctld, which
        slurmctld runs *before* it asks the nodes to end the job's processes: those get
        SIGTERM and ``KillWait`` seconds (30 by default) before SIGKILL, and a job that
        writes its last checkpoint on SIGTERM (a cancel, its time limit) wrote it to the
        RAMDISK after a quick stage-out had been verified: destroyed with the RAMDISK,
        while the user read "stage-out finished: content verified". The nodes waited for:
        those with an agent or a confirmed mount (recorded, after an rsad restart), until
        rsad hears their Epilog or Slurm no longer has the job there (asked every
        ``slurm_every`` s: :meth:`_unconfirmed`); never because an agent is silent. Waits
        at most ``reset_timeout`` (counted from when rsad's API answers the nodes: a node
        that failed never runs its Epilog): returns the nodes still not confirmed, and
        the stage-out goes on (the teardown asks them to release it)."""
        job = ctx.action.job_id
        with self._cond:
            start = self.clock()
        asked: float | None = None
        held: frozenset[str] | None = None
        while True:
            with self._cond:
                j = self._jobs.get(job)
                known = self._known(ctx, j or JobNodes())
                if j is None and not known:
                    return []
                j = self._job(job)
                left = epilogs_left(j.agents | j.mounted | known, j.ended, held)
                if not left.waiting:
                    if left.confirmed:
                        log.info("job %s: Slurm no longer has the job on %s: their Epilog "
                                 "ran (rsad did not hear it)", job,
                                 ",".join(sorted(left.confirmed)))
                    return []
                if ctx.cancel.cancelled:
                    raise Cancelled(ctx.cancel.reason)
                now = self.clock()
                wait = self._left(start, self.reset_timeout)
                if wait <= 0:
                    log.warning("job %s: %s: no Epilog confirmed within %.0fs of the "
                                "job's end (%s): staging its output out all the same; what "
                                "the job's processes there write after the copy is not in "
                                "it", job, ",".join(sorted(left.waiting)),
                                self.reset_timeout, unconfirmed_words(held))
                    return sorted(left.waiting)
                if not slurm_due(asked, now, self.slurm_every):
                    self._cond.wait(min(wait, 0.5))
                    continue
                asked = now
            held = self.slurm_nodes(job)  # outside the lock: Slurm may take seconds

    def _unconfirmed(self, ctx: ActionContext) -> tuple[frozenset[str],
                                                         frozenset[str] | None]:
        """The nodes that may hold a mount of ``ctx``'s job and whose Epilog is not
        confirmed (core/epilogs.py): with an agent, a confirmed mount or recorded as
        holding it (``mounted``, across rsad restarts), less those whose Epilog rsad
        heard and those on which Slurm (asked once, when any is left) no longer has the
        job. Also Slurm's answer (None: not asked, or it could not say)."""
        job = ctx.action.job_id
        with self._cond:
            j = self._jobs.get(job)
            known = self._known(ctx, j or JobNodes())
            if j is None and not known:
                return frozenset(), None
            j = self._job(job)
            if not epilogs_left(j.agents | j.mounted | known, j.ended, None).waiting:
                return frozenset(), None
        held = self.slurm_nodes(job)
        with self._cond:
            left = epilogs_left(j.agents | j.mounted | known, j.ended, held)
        if left.confirmed:
            log.info("job %s: Slurm no longer has the job on %s: their Epilog ran "
                     "(rsad did not hear it)", job, ",".join(sorted(left.confirmed)))
        return left.waiting, held

    def _mount(self, ctx: ActionContext, *, role: str, target: PurePosixPath | None,
               mode: MountMode, spec: MountSpec | None = None,
               via: str = "prolog") -> Mapping[str, Any]:
        backend, _req = self.backend_for(ctx)
        if spec is None:
            data = ctx.facts.get("mount")
            if not data:
                raise RsaError(f"job {ctx.action.job_id}: no RAMDISK is recorded")
            spec = MountSpec.from_json(data)
        try:
            ins = mount_instruction(
                0, job_id=ctx.action.job_id, user=ctx.action.args_as(OnNodes).user,
                role=role, target="" if target is None else str(target), mode=mode.value,
                client_argv=backend.client_mount_argv(spec, MOUNTPOINT),
                client_umount_argv=backend.client_umount_argv(spec, MOUNTPOINT))
        except ValueError as e:
            raise PermanentError(str(e)) from e
        ins["via"] = via
        v = self._step(ctx, ins, self.mount_timeout)
        if v.state != "ok":
            raise RsaError(f"mounting the RAMDISK over {target} failed: {v.message}")
        j = self._job(ctx.action.job_id)
        with self._cond:
            return {"nodes": sorted(j.nodes or ()), "mounted": sorted(j.mounted),
                    "mounted_at": self._as_of(j)}

    def _changed(self, j: JobNodes) -> list[Any]:
        """Holding ``self._cond``: ``j.mounted`` changed; what a record of it is as of."""
        j.changes += 1
        return self._as_of(j)

    def _as_of(self, j: JobNodes) -> list[Any]:
        """Holding ``self._cond``: [this rsad's epoch, the changes to ``j.mounted`` so
        far]: the job's facts take a step's ``mounted`` only with the changes recorded
        after it (a late Prolog's report committed before the step's outcome that did
        not see it: daemon/memory.py ``Memory.learn_facts``)."""
        return [self.epoch, j.changes]

    def _expected(self, j: JobNodes, ins: Mapping[str, Any],
                  known: frozenset[str] = frozenset(),
                  only: frozenset[str] | None = None) -> frozenset[str] | None:
        """The nodes a step waits for. Mounts at job start: the job's nodes (from the
        Prologs' SLURM_NODELIST). A release: every node that has an agent or holds the
        mount (``known``: what the last mount step recorded, which survives an rsad
        restart) — the RAMDISK is destroyed after it, so no node may still use it. The
        output mount the agents make: the nodes that have an agent (a node whose Prolog
        never ran has nothing to release; it gets the standing mount when it runs)."""
        if ins["do"] == "mount" and ins.get("via") != "agent":
            return j.nodes
        if only is not None:  # a teardown's release: the nodes it asks (release_mounts)
            return frozenset(only - j.ended) or frozenset()
        if ins["do"] == "release":
            # a node that took its mount back while the step waits holds nothing: no
            # agent would answer for it (a restarted rsad's re-issued reset)
            left = frozenset((j.agents | j.mounted | (known - j.undone.keys())) - j.ended)
            # every node of the run ran its Epilog (its job requeued, or ended, while the
            # reset waited): they took every mount of the job down, the release is done;
            # before, it waited ``reset_timeout`` for nobody and failed ("no compute
            # node has asked yet"): the user told the reset failed, the operator alerted
            return left or (frozenset() if self._over(j) else None)
        return frozenset(j.agents - j.ended) or None

    def _step(self, ctx: ActionContext, ins: dict[str, Any], timeout: float,
              only: frozenset[str] | None = None) -> Verdict:
        job = ctx.action.job_id
        start = self.clock()
        with self._cond:
            j = self._job(job)
            known = self._known(ctx, j)
            j.seq += 1
            # numbered per rsad: a node tells this rsad's instruction 1 from an earlier's
            ins = {**ins, "seq": j.seq, "epoch": self.epoch}
            j.current = ins
            if ins["do"] == "release":
                j.standing = None
            self._cond.notify_all()
            try:
                while True:
                    v = aggregate(self._expected(j, ins, known, only), j.reports,
                                  ins["seq"])
                    if v.state == "pending" and self._enough(j, ins, start):
                        v = Verdict("ok", f"{', '.join(v.missing)}: mount when their "
                                          "Prolog runs")
                    elif v.state == "pending" and ins.get("via") == "agent" and \
                            self._over(j):
                        # the run ended (requeued, or over) while the reset mounted: no
                        # agent is left to mount it (before: mount_timeout for nobody)
                        v = Verdict("failed", "every node of the job's run ran its "
                                              "Epilog before it mounted the RAMDISK")
                    if (v.state == "ok" and ins["do"] == "mount" and self._agent_step(ins)
                            and not (j.nodes and j.agents >= j.nodes)
                            and self._settling(start)):
                        # some nodes have no agent (yet): after an rsad restart agents
                        # reconnect within seconds; never destroy a RAMDISK one still uses
                        v = Verdict("pending", "waiting for the other nodes' agents")
                    if v.state == "ok" and ins["do"] == "mount":
                        j.standing = ins
                        j.mounted |= self._oks(j, ins)
                        self._changed(j)
                        for node in j.mounted:
                            j.undone.pop(node, None)
                    elif v.state == "ok":
                        j.mounted -= self._oks(j, ins)
                        self._changed(j)
                    if v.state != "pending":
                        log.info("job %s: node step %s %s: %s %s", job, ins["seq"],
                                 ins["do"], v.state, v.message)
                        return v
                    if ctx.cancel.cancelled:
                        raise Cancelled(ctx.cancel.reason)
                    left = self._left(start, timeout)
                    if left <= 0:
                        why = v.message if j.nodes is not None else (
                            "no compute node asked rsad (is rsa-prolog the node Prolog?)"
                            if ctx.job_running else "no compute node asked rsad: the job "
                            "was not running when the step began (requeued, or not "
                            "started yet)")
                        if ins["do"] == "release" and v.missing:
                            raise BusyError(
                                f"compute node(s) {', '.join(v.missing)} did not confirm "
                                f"the release of the input mount within {timeout:.0f}s: "
                                "the RAMDISK is kept (they may still read it); will retry",
                                silent=v.missing)
                        raise RsaError(f"compute nodes did not {ins['do']} within "
                                       f"{timeout:.0f}s: {why}")
                    self._cond.wait(min(left, 0.5))
            finally:
                if j.current is ins:
                    j.current = None

    @staticmethod
    def _oks(j: JobNodes, ins: Mapping[str, Any]) -> set[str]:
        return {n for n, r in j.reports.items() if r["seq"] == ins["seq"] and r["ok"]}

    @staticmethod
    def _agent_step(ins: Mapping[str, Any]) -> bool:
        return ins["do"] != "mount" or ins.get("via") == "agent"

    def _enough(self, j: JobNodes, ins: Mapping[str, Any], start: float) -> bool:
        """A start-of-job mount is done once some node mounted, every node that was handed
        the instruction reported, and no other node asked within ``settle`` s (or the job
        is already ending): Slurm runs a node's Prolog at its first step, and a late one
        still gets the standing mount. A short job must not end before its mount is
        confirmed: its history would say the RAMDISK was never used."""
        seq = ins["seq"]
        oks = [r for r in j.reports.values() if r["seq"] == seq and r["ok"]]
        if ins["do"] != "mount" or ins.get("via") == "agent" or not oks:
            return False
        if any(s == seq and n not in j.ended and not self._done(j, n, ins)
               for n, s in j.asked.items()):
            return False  # a node is mounting now: its report decides
        return bool(j.ended) or self.clock() - start >= self.settle

    @staticmethod
    def _run_over(j: JobNodes) -> None:
        """Every node of the job's run ran its Epilog: the run's standing mount is no
        longer anybody's. A requeued run's Prolog must never be handed it: that RAMDISK
        is the earlier run's, staged out and destroyed under the new run (issue 35)."""
        j.standing = None
        j.asked.clear()

    def _settling(self, since: float | None = None) -> bool:
        """Holding ``self._cond``: whether agents may still be reconnecting: rsad's API
        answers none yet (:meth:`closed`), or has for less than ``agent_settle``, counted
        from ``since`` (a step's start) when that is later."""
        if self.born is None:
            return True
        return self.clock() - max(self.born, self.born if since is None else since) \
            < self.agent_settle

    def _left(self, start: float, timeout: float) -> float:
        """Holding ``self._cond``: what is left of a step's ``timeout`` for the nodes to
        answer, counted from its ``start`` or from when rsad's API began to answer them,
        whichever is later (all of it while rsad starts: :meth:`closed`)."""
        if self.born is None:
            return timeout
        return timeout - (self.clock() - max(start, self.born))

    def closed(self) -> None:
        """rsad starts (Registry.starting, before it re-issues what was outstanding): its
        API answers no agent or Epilog until it is ready (:meth:`opened`). A re-issued
        step's timeout (a stage-out's wait for the Epilogs too), and the ``agent_settle``
        an output mount gives the agents to reconnect, count from then: before, they
        counted from rsad's construction, and a start that took longer (the log
        replayed, the RSA nodes fenced) left the nodes no time at all."""
        with self._cond:
            self.born = None

    def opened(self) -> None:
        """rsad is ready (Registry.ready): the agents can reconnect from now on."""
        with self._cond:
            self.born = self.clock()
            self._cond.notify_all()

    @staticmethod
    def _known(ctx: ActionContext, j: JobNodes) -> frozenset[str]:
        """The nodes ``ctx``'s facts record as holding the mount (``mounted``: what the
        last node step recorded, and the changes the API recorded since: daemon/memory),
        less those that took theirs back since the step was issued."""
        return frozenset(str(n) for n in ctx.facts.get("mounted") or ()) - j.undone.keys()

    def _job(self, job: str) -> JobNodes:
        return self._jobs.setdefault(job, JobNodes())

    def _learn_nodes(self, j: JobNodes, node: str, nodes: str) -> None:
        """The job's nodes, from what a node says it belongs to. A heterogeneous job's
        component knows only its own nodes (the leader's know them all): the union."""
        if nodes:
            check_size(nodes)  # the API refused a longer one already: never expanded
        self._add_nodes(j, (frozenset(NodeSet(nodes)) if nodes else frozenset()) | {node})

    def _add_nodes(self, j: JobNodes, names: frozenset[str]) -> None:
        if j.nodes is not None and j.nodes <= j.ended:
            j.nodes = None  # every node of an earlier run ended: a requeued run's nodes
            self._run_over(j)
        if j.nodes is None or not names <= j.nodes:
            j.nodes = names | (j.nodes or frozenset())
            self._cond.notify_all()

    def expect(self, job: str, nodes: str) -> None:
        """slurmctld named the job's nodes (PrologSlurmctld; a hetjob leader's names every
        component's): steps wait for them all, whichever node reports first."""
        if nodes:
            check_size(nodes)
            with self._cond:
                self._add_nodes(self._job(job), frozenset(NodeSet(nodes)))

    # ---- routes (API threads) -----------------------------------------------------------
    def prolog(self, job: str, node: str, nodes: str, rsa_state: str | None,
               hold: float = 0.0, message: str = "") -> dict[str, Any]:
        """What the node Prolog of ``job`` on ``node`` should do now.

        ``hold`` > 0: early start ``wait`` — the Prolog may hold the job's start up to that
        many seconds (its own hard timeout is extended; Slurm's PrologEpilogTimeout must
        allow it) while the stage-in finishes. A job the RSA declined is told so, with
        ``message`` (what its user was told), for its RSA_STATE/RSA_MESSAGE.

        Every answer, a plain job's too, carries the ``guard`` the node loads before the
        job starts (the RSA nodes' servers, mfsmount's proxy): any user's process on any
        compute node is kept off them, not only on nodes that mounted a RAMDISK.
        """
        ans = self._prolog(job, node, nodes, rsa_state, hold, message)
        guard = self.guard()
        return {**ans, "guard": guard} if guard else ans

    def _prolog(self, job: str, node: str, nodes: str, rsa_state: str | None,
                hold: float, message: str) -> dict[str, Any]:
        if rsa_state is None:
            return {"do": "nothing", "agent": False}
        if rsa_state == RsaState.DECLINED:
            return {"do": "nothing", "agent": False,
                    "declined": message or "the RSA does not serve this run"}
        with self._cond:
            j = self._job(job)
            self._learn_nodes(j, node, nodes)
            j.ended.discard(node)
            cur = j.current if j.current is not None else j.standing
            agent = rsa_state in NODE_AGENT
            # only while the job's RAMDISK is to be mounted or in use: after its run the
            # standing mount is an earlier run's (a node of it that failed never ran its
            # Epilog to say the run is over), staged out and destroyed under a new run
            if agent and cur is not None and cur["do"] == "mount" and \
                    not self._done(j, node, cur):
                j.asked[node] = int(cur["seq"])
                return {**cur, "agent": True}
            if j.current is None and rsa_state in MOUNT_COMING:
                hold = max(0.0, min(hold, self.max_hold))
                return {"do": "wait", "retry": 1.0 if hold else 0.3, "hold": hold,
                        "agent": agent, "why": f"RSA state {rsa_state}"}
            return {"do": "nothing", "agent": agent}

    def agent(self, job: str, node: str, nodes: str, last_seq: int,
              wait: float = AGENT_POLL, epoch: str = "") -> dict[str, Any]:
        """Long poll of the node agent: the next instruction for it, or idle/exit."""
        if epoch != self.epoch:
            last_seq = 0
        answer = self._agent(job, node, nodes, last_seq, wait)
        answer["epoch"] = self.epoch
        return answer

    def _agent(self, job: str, node: str, nodes: str, last_seq: int,
               wait: float) -> dict[str, Any]:
        deadline = self.clock() + wait
        with self._cond:
            j = self._job(job)
            self._learn_nodes(j, node, nodes)
            j.agents.add(node)
            while True:
                if node in j.ended:
                    return {"do": "exit"}
                cur = j.current
                # an agent exists only once its node's Prolog is over: an input mount it
                # sees was re-issued (rsad restarted mid-mount); it answers from what the
                # node has, so the step ends now instead of at its timeout
                if (cur is not None and int(cur["seq"]) > last_seq
                        and not self._done(j, node, cur)
                        and cur["do"] in ("release", "mount")):
                    return dict(cur)
                left = deadline - self.clock()
                if left <= 0:
                    return {"do": "idle"}
                self._cond.wait(min(left, 1.0))

    def report(self, job: str, node: str, data: Mapping[str, Any]) -> dict[str, Any]:
        """A node's report of the instruction it carried out. Instruction numbers restart
        with rsad: a report naming another rsad's epoch (an agent that carried out the
        earlier rsad's instruction while rsad restarted) answers none of this rsad's,
        whose own may carry the same number, except a take-back (below), which is heard
        (:meth:`_taken_back_before`). A node of an older package names no epoch: taken
        as before.

        A failed report marked ``undone`` takes the node's mount of that instruction back:
        its Prolog undid it (its hard timeout, an error after the report; node/hooks.py
        ``undo``) and the job reads the PFS there. The node holds nothing of the RAMDISK
        then: no release is asked of it (it may have no agent to answer one: the reset
        would wait for it, fail busy and drain it), and its ok report of that instruction
        arriving after (rsad answered it too late: the Prolog undid the mount on that) is
        stale. The answer says ``held`` when the node's place
        among the job's mounts changed outside a node step (taken back, or a late
        Prolog's mount counted): the API records that (``compute.unmounted``,
        ``compute.mounted``), so a restarted rsad knows it (daemon/memory.py)."""
        epoch = str(data.get("epoch") or "")
        if epoch and epoch != self.epoch:
            if data.get("undone") and not data.get("ok") and not data.get("busy"):
                return self._taken_back_before(job, node, data)
            log.info("job %s node %s: a report to an earlier rsad's instruction %s "
                     "(epoch %s): no answer to this rsad's", job, node, data.get("seq"),
                     epoch[:32])
            return {"job_id": job, "node": node, "recorded": False}
        answer: dict[str, Any] = {"job_id": job, "node": node, "recorded": True}
        with self._cond:
            j = self._job(job)
            seq = int(data.get("seq", -1))
            now: dict[str, Any] = {"seq": seq, "ok": bool(data.get("ok")),
                                   "busy": bool(data.get("busy")),
                                   "message": str(data.get("message") or "")[:500]}
            if now["ok"] and j.undone.get(node) == seq:
                log.info("job %s node %s: a report of instruction %s the node took back "
                         "since: stale", job, node, seq)
                return {**answer, "recorded": False}
            j.reports[node] = now
            if not now["ok"]:
                log.warning("job %s node %s: %s", job, node, now["message"])
                if data.get("undone") and not now["busy"]:
                    # the node took back its mount of that instruction: it holds nothing
                    j.undone[node] = seq
                    if node in j.mounted:
                        j.mounted.discard(node)
                        answer["held"] = False
                        answer["at"] = self._changed(j)
                        log.warning("job %s node %s: took back its mount of the RAMDISK; "
                                    "no longer counted as holding it", job, node)
            elif (j.current is None and j.standing is not None and node not in j.ended
                  and now["seq"] == j.standing["seq"]):
                # a late Prolog mounted the standing mount; a report that comes after
                # the node's Epilog (a requeue between the mount and its report) is
                # none: that Epilog took every mount of the job down
                j.undone.pop(node, None)
                if node not in j.mounted:
                    j.mounted.add(node)
                    answer["held"] = True
                    answer["at"] = self._changed(j)
            self._cond.notify_all()
        return answer

    def _taken_back_before(self, job: str, node: str,
                           data: Mapping[str, Any]) -> dict[str, Any]:
        """A node's Prolog took back the mount an earlier rsad's instruction gave it (it
        undid it before it said so: its hard timeout, an error after its report; rsad
        restarted meanwhile). Nothing of it is left on the node, but the earlier rsad may
        have counted the node, and recorded it in the job's ``mounted``: this one would
        have waited for its release at a reset (none comes: that Prolog started no
        agent), failed busy and drained the node. The node holds nothing of this rsad's
        instructions either (its Prolog carries out one, and this is its word on the
        earlier one's): no longer counted, recorded like a take-back of this rsad's
        (``held``). A node this rsad counts, from a report to its own instruction,
        keeps that mount: the word is not about it."""
        answer: dict[str, Any] = {"job_id": job, "node": node, "recorded": True}
        with self._cond:
            j = self._job(job)
            if node in j.mounted:
                return {**answer, "recorded": False}
            log.warning("job %s node %s: took back its mount of an earlier rsad's "
                        "instruction: %s", job, node, str(data.get("message") or "")[:500])
            j.undone[node] = None
            answer["held"] = False
            answer["at"] = self._changed(j)
            self._cond.notify_all()
        return answer

    def epilog(self, job: str, node: str) -> dict[str, Any]:
        """``node``'s Epilog ran: it took every mount of the job down and stopped its
        agent. The answer's ``held`` says whether this rsad counted the node among those
        that hold the mount, ``at`` what the change is as of (:meth:`_as_of`): the API
        records it (``compute.epilog``) for a node the job's facts may count, so a
        restarted rsad does not wait for a release from it (daemon/memory.py)."""
        answer: dict[str, Any] = {"job_id": job, "node": node}
        with self._cond:
            j = self._jobs.get(job)
            if j is not None:
                j.ended.add(node)
                j.agents.discard(node)
                answer["held"] = node in j.mounted
                j.mounted.discard(node)
                answer["at"] = self._changed(j)
                if j.nodes is not None and j.nodes <= j.ended:
                    self._run_over(j)
                self._cond.notify_all()
            self._prune()
        return answer

    def forget(self, job: str) -> None:
        """``job``'s id names a new job now (a new record: Slurm lost its state, or its
        ids wrapped): nothing of the earlier job's nodes, reports or standing mount is
        the new one's. An instruction still in flight keeps its own waiter."""
        with self._cond:
            j = self._jobs.get(job)
            if j is not None and j.current is None:
                del self._jobs[job]

    def _prune(self, keep: int = 2000) -> None:
        """Forget the oldest jobs whose every node ran its Epilog (bounded memory)."""
        if len(self._jobs) <= keep:
            return
        over = len(self._jobs) - keep
        for job in [k for k, j in self._jobs.items()
                    if j.current is None and j.nodes is not None and j.ended >= j.nodes][:over]:
            del self._jobs[job]

    @staticmethod
    def _done(j: JobNodes, node: str, cur: Mapping[str, Any]) -> bool:
        r = j.reports.get(node)
        return r is not None and r["seq"] == cur["seq"]

    def register(self, registry: Registry) -> None:
        registry.register(ActionKind.MOUNT_INPUT, self.mount_input)
        registry.register(ActionKind.MOUNT_OUTPUT, self.mount_output)
        registry.register(ActionKind.RESET, self.reset)
        registry.on_start(self.closed)
        registry.on_ready(self.opened)
        _BY_REGISTRY[registry] = self
