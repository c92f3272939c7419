"""``rsad --check``: what rsad would start with, read without touching anything.

Owns :func:`inspect_store` (the store opened read-only: its schema and the migrations a
start would run, its events, and a replay in memory of the jobs and the actions a start
would re-issue, the mode its last rsad ran in against ``slurm.mode``, and whether an
``rsa admin drain`` is in force), :func:`check_nodes` (``--nodes``: each RSA node's
read-only check, as ``rsa nodes check`` does it) and the report's lines. A check never
takes the store's lock, never writes the store, fences or dispatches nothing, starts no
API server and, without ``--nodes``, opens no SSH connection: run beside a live rsad
(the operator after an edit, the unit's ``ExecStartPre``) it leaves that rsad and its
copies alone.

Imports the configuration, the core (a replay is pure), the store and, for ``--nodes``
only, the node checks; nothing of the running daemon.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from rsa_scheduler.config import Config
from rsa_scheduler.core.scheduler import Scheduler
from rsa_scheduler.store import Store
from rsa_scheduler.store.lock import holder

#: the schema version that added snapshots (a store behind it is replayed from its start)
_SNAPSHOTS = 4


@dataclass(frozen=True)
class StoreReport:
    """What ``rsad --check`` found in the store (nothing was changed to find it)."""

    path: Path
    exists: bool
    schema: int = 0
    #: the migrations a start would run: "N (description)"
    pending: tuple[str, ...] = ()
    events: int = 0
    #: every job the log still tracks, by rsa-state
    jobs: dict[str, int] = field(default_factory=dict)
    #: the actions a start would re-issue (their ids)
    outstanding: tuple[str, ...] = ()
    #: the pid of the rsad running on this store, or None
    running: int | None = None
    #: ``slurm.mode`` of the configuration checked
    mode: str = ""
    #: the mode the store's last rsad started in (the running one's, if one runs): ""
    #: when the log records none (a store from before, or none yet)
    store_mode: str = ""
    #: a start's refusal of ``mode`` over the store's jobs in flight ("" when it starts)
    mode_refused: str = ""
    #: ``rsa admin drain`` in force: what jobs are told; "" when none
    draining: str = ""

    def lines(self) -> list[str]:
        """The report, one line per fact."""
        if not self.exists:
            return [f"store {self.path}: none yet (rsad creates it when it first starts)",
                    f"mode: {self.mode} (slurm.mode; no store yet)"]
        out = [f"store {self.path}: schema version {self.schema}"
               + (f"; a start migrates it: {', '.join(self.pending)}" if self.pending
                  else " (current)")]
        total = sum(self.jobs.values())
        states = ", ".join(f"{n} {s}" for s, n in sorted(self.jobs.items()))
        out.append(f"events: {self.events}; jobs tracked: {total}"
                   + (f" ({states})" if states else ""))
        shown = ", ".join(self.outstanding[:10])
        more = f" and {len(self.outstanding) - 10} more" if len(self.outstanding) > 10 else ""
        out.append(f"actions outstanding: {len(self.outstanding)}"
                   + (f" ({shown}{more})" if shown else ""))
        runs = f" in {self.store_mode} mode" if self.store_mode else ""
        out.append(f"rsad (pid {self.running}) runs on this store{runs}; the check left it "
                   "alone" if self.running else "no rsad runs on this store")
        out.append(self._mode_line())
        out.append(f"drain: in force: {self.draining}; jobs in flight finish" if self.draining
                   else "drain: none (jobs get RSA nodes)")
        return out

    def _mode_line(self) -> str:
        """slurm.mode against the mode the store's jobs were started in."""
        if self.mode_refused:
            return f"mode: a start is refused: {self.mode_refused}"
        if not self.store_mode:
            return f"mode: {self.mode} (slurm.mode; the store records none yet)"
        if self.store_mode == self.mode:
            return f"mode: {self.mode} (slurm.mode, and the store's last rsad's)"
        return (f"mode: {self.mode} (slurm.mode); the store's last rsad ran in "
                f"{self.store_mode} mode, with no job in flight: a start switches")


def inspect_store(cfg: Config) -> StoreReport:
    """Read the store of ``cfg`` read-only and replay it in memory."""
    path = Path(cfg.daemon.db_path)
    mode = cfg.slurm.mode.value
    if not path.exists():
        return StoreReport(path, exists=False, mode=mode)
    running = holder(path)
    with Store.open(path, readonly=True, older=True) as store:
        version = store.schema_version()
        pending = tuple(f"{m.version} ({m.description})" for m in store.pending_migrations())
        if version == 0:
            return StoreReport(path, True, 0, pending, running=running, mode=mode)
        snap = store.latest_snapshot() if version >= _SNAPSHOTS else None
        since, base = snap if snap is not None else (0, None)
        events = list(store.events(since=since))
        last = store.last_seq()
    sched = Scheduler.replay(cfg.make_pool(), cfg.staging_policy(), events, base=base)
    jobs = Counter(r.rsa_state.value for r in sched.records.values())
    outstanding = tuple(sorted(a.id for a in sched.outstanding()))
    store_mode, draining = sched.mode, sched.draining
    # what a start would say of the mode (pure, on this in-memory replay: nothing logged)
    refused, _ = sched.mode_switch(mode, 0.0)
    return StoreReport(path, True, version, pending, last, dict(jobs), outstanding, running,
                       mode, store_mode, refused, draining)


def check_nodes(cfg: Config, names: Sequence[str] | None = None) -> tuple[bool, list[str]]:
    """(all good, one line per finding) of each RSA node's read-only check: what it lacks
    for its tier's filesystem and the data path, over rsad's SSH settings (the check of
    ``rsa nodes check``: it changes nothing on a node)."""
    from rsa_scheduler.config.backends import make_backend
    from rsa_scheduler.fs.nodecheck import check_node
    from rsa_scheduler.remote import HostPool

    members = {n.name: n for n in cfg.pool.members()}
    wanted = list(names) if names else list(members)
    hosts = HostPool.from_config(cfg)
    needs = {str(t): make_backend(cfg, str(t), hosts).needs()
             for t in {n.tier for n in members.values()}}

    def one(name: str) -> tuple[bool, list[str]]:
        node = members[name]
        report = check_node(name, hosts[name], needs[str(node.tier)], str(node.pool_dir))
        return report.ok, list(report.lines())

    with hosts, ThreadPoolExecutor(max_workers=16) as pool:
        found = list(pool.map(one, wanted))
    return all(ok for ok, _ in found), [line for _, lines in found for line in lines]
