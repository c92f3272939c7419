"""The command-line Slurm backend: squeue and scontrol through the runner seam.

Owns the argv of every Slurm command rsa-scheduler runs (built by pure functions so
they are unit-tested) and :class:`CliSlurm`, the :class:`~rsa_scheduler.slurm.port.SlurmPort`
implementation. Queue reads are ONE ``squeue`` call per cycle.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ClusterShell.NodeSet import NodeSet

from rsa_scheduler.core.states import SLURM_FINISHED, SLURM_PENDING
from rsa_scheduler.runner import CLEAN_PATH, CommandError, LocalRunner, Runner
from rsa_scheduler.slurm.parse import (
    DEPENDENT_FORMAT,
    EPOCH_TIME,
    JOB_INFO_FORMAT,
    JOB_NODES_FORMAT,
    LOCK_VIEW_FORMAT,
    NULL,
    PENDING_FORMAT,
    QUEUE_FORMAT,
    SINFO_PARTITIONS,
    DependentRow,
    JobInfo,
    JobNodesRow,
    LockView,
    ParseError,
    QueueRow,
    parse_dependents,
    parse_end_states,
    parse_job_info,
    parse_job_nodes,
    parse_lock_view,
    parse_pending,
    parse_queue,
    parse_sinfo_partitions,
)
from rsa_scheduler.slurm.port import SlurmError, UnlockGone, UnlockLater

log = logging.getLogger(__name__)

LOCKIN_METHODS = ("qos", "priority", "none")


def squeue_argv(bin_dir: Path) -> list[str]:
    """``-t all`` keeps finished jobs visible (COMPLETED, FAILED, TIMEOUT, ...) until Slurm
    purges them after MinJobAge; a tracked job that vanishes counts as finished."""
    return [str(bin_dir / "squeue"), "-h", "-r", "-t", "all", "-O", QUEUE_FORMAT]


def batch_script_argv(bin_dir: Path, job_id: str) -> list[str]:
    return [str(bin_dir / "scontrol"), "write", "batch_script", job_id, "-"]


def update_argv(bin_dir: Path, job_id: str, **fields: str) -> list[str]:
    return [str(bin_dir / "scontrol"), "update", f"jobid={job_id}",
            *(f"{k}={v}" for k, v in fields.items())]


def comment_argv(bin_dir: Path, job_id: str) -> list[str]:
    """The job's comment (``%k``), one line per job squeue lists for ``job_id``."""
    return [str(bin_dir / "squeue"), "-h", "-t", "all", "-j", job_id, "-o", "%k"]


#: what every comment rsad writes starts with (daemon.dispatch.Dispatcher.tell's callers)
RSA_COMMENT = "RSA:"


def users_comment(squeue_out: str) -> bool:
    """Whether a comment of :func:`comment_argv`'s output is the user's own (``sbatch
    --comment``, ``scontrol update Comment=``): set and not rsad's (``RSA:`` first).
    rsad never writes over it: the user's text stays exact in squeue, scontrol and
    sacct, and rsad's status is in ``rsa job`` (and the mail, when the job asked)."""
    return any(line.strip() not in ("", NULL) and not line.startswith(RSA_COMMENT)
               for line in squeue_out.splitlines())


def drain_argv(bin_dir: Path, nodes: Sequence[str], reason: str) -> list[str]:
    """``scontrol update`` draining ``nodes`` (one argument: no shell, no quoting)."""
    if not nodes:
        raise ValueError("no nodes to drain")
    return [str(bin_dir / "scontrol"), "update", f"NodeName={NodeSet.fromlist(nodes)}",
            "State=DRAIN", f"Reason={reason[:200]}"]


def job_info_argv(bin_dir: Path, job_id: str) -> list[str]:
    """One job's identity (parse.JOB_INFO_FIELDS), in any state Slurm still keeps."""
    return [str(bin_dir / "squeue"), "-h", "-t", "all", "-j", job_id, "-O", JOB_INFO_FORMAT]


def job_nodes_argv(bin_dir: Path, job_id: str) -> list[str]:
    """Where Slurm has one job: its state and the nodes that still run it or have not
    finished it (parse.JOB_NODES_FIELDS), in any state Slurm still keeps."""
    return [str(bin_dir / "squeue"), "-h", "-t", "all", "-j", job_id, "-O", JOB_NODES_FORMAT]


#: what squeue says (on stderr, exit 1) of a job id slurmctld has no record of
UNKNOWN_JOB = "Invalid job id specified"


def unknown_job(error: CommandError) -> bool:
    """Whether squeue failed because slurmctld has no record of the job (it purges one
    MinJobAge after the job finished on every node), not because Slurm could not be
    read."""
    return (not error.timed_out and not error.stopped and error.returncode == 1
            and UNKNOWN_JOB in error.stderr_tail)


def end_states_argv(bin_dir: Path, job_ids: Sequence[str]) -> list[str]:
    """Slurm's accounting record of how each of ``job_ids`` ended (one sacct call)."""
    return [str(bin_dir / "sacct"), "-n", "-X", "-P", "-o", "JobID,State",
            "-j", ",".join(job_ids)]


def job_qos_argv(bin_dir: Path, job_id: str) -> list[str]:
    return [str(bin_dir / "squeue"), "-h", "-j", job_id, "-O", "QOS:0"]
def lock_view_argv(bin_dir: Path, job_id: str) -> list[str]:
    """One job's state, QOS and priority (parse.LOCK_VIEW_FIELDS), in any state."""
    return [str(bin_dir / "squeue"), "-h", "-t", "all", "-j", job_id, "-O", LOCK_VIEW_FORMAT]


def dependents_argv(bin_dir: Path) -> list[str]:
    """The pending jobs' dependencies, begin times and admin_comments (the dependency
    hold, daemon/dephold.py); run with :data:`~rsa_scheduler.slurm.parse.EPOCH_TIME`."""
    return [str(bin_dir / "squeue"), "-h", "-r", "-t", "PD", "-O", DEPENDENT_FORMAT]


def job_mail_argv(bin_dir: Path, job_id: str) -> list[str]:
    """The job as ``scontrol show job`` shows it (its ``MailUser=... MailType=...`` line:
    squeue has no field for them)."""
    return [str(bin_dir / "scontrol"), "show", "job", job_id]


_MAIL_LINE = re.compile(r"^\s*MailUser=(\S*) MailType=(\S*)\s*$")


def parse_job_mail(text: str) -> tuple[str, str] | None:
    """(MailUser, MailType) from :func:`job_mail_argv`'s output, the one line that is
    exactly ``MailUser=U MailType=T``; None when there is not exactly one (a job name or
    comment over several lines could add one: then no mail, never a guess)."""
    found = [m for m in map(_MAIL_LINE.match, text.splitlines()) if m]
    if len(found) != 1:
        return None
    user, kind = found[0].groups()
    return ("" if user == NULL else user), ("" if kind == NULL else kind)


def show_config_argv(bin_dir: Path) -> list[str]:
    return [str(bin_dir / "scontrol"), "show", "config"]


# priority/basic gives each new job the previous one's priority minus one, counting down
# from 0xffff0000 (slurmctld's TOP_PRIORITY); scontrol accepts priorities up to NO_VAL - 2.
BASIC_TOP_PRIORITY = 0xFFFF0000
MAX_PRIORITY = 0xFFFFFFFD


def parse_show_config(text: str) -> dict[str, str]:
    """``scontrol show config`` as {key: value}: every ``Key = value`` line, the first
    occurrence of a key winning (later sections, e.g. cgroup.conf's, may repeat names)."""
    config: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not key or " " in key:
            continue
        config.setdefault(key, value.strip())
    return config


def no_accounting(config: Mapping[str, str]) -> bool:
    """Whether this ``scontrol show config`` says Slurm keeps no accounting: 22.05 prints
    ``accounting_storage/none``, 23.11 and later ``(null)`` (tests/data/slurm/24.11/)."""
    return config.get("AccountingStorageType") in ("accounting_storage/none", NULL)


def lockin_problem(method: str, priority: int, config: Mapping[str, str]) -> str | None:
    """Why lock-in by ``method`` cannot work on a Slurm with this ``scontrol show config``,
    as one actionable line; None when it can (or the output does not say)."""
    acct = config.get("AccountingStorageType", "")
    prio_type = config.get("PriorityType", "")
    if method == "qos":
        if no_accounting(config):
            return ("slurm.lockin.method is qos but Slurm has no accounting "
                    f"(AccountingStorageType={acct}), so it accepts qos= and ignores it: "
                    "set slurm.lockin.method: priority, or enable slurmdbd")
        if prio_type == "priority/basic":
            return ("slurm.lockin.method is qos but PriorityType=priority/basic ignores a "
                    "QOS's priority: use priority/multifactor with PriorityWeightQOS > 0, "
                    "or set slurm.lockin.method: priority")
        if prio_type == "priority/multifactor" and config.get("PriorityWeightQOS") == "0":
            return ("slurm.lockin.method is qos but PriorityWeightQOS=0, so a QOS's priority "
                    "counts for nothing: set PriorityWeightQOS (e.g. 100000) in slurm.conf, "
                    "or set slurm.lockin.method: priority")
    if method == "priority" and prio_type == "priority/basic" and \
            not BASIC_TOP_PRIORITY <= priority <= MAX_PRIORITY:
        return (f"slurm.lockin.priority {priority} is not above what PriorityType="
                f"priority/basic gives ordinary jobs (up to {BASIC_TOP_PRIORITY - 1}): set "
                f"it between {BASIC_TOP_PRIORITY} and {MAX_PRIORITY}")
    top = multifactor_top(config) if prio_type == "priority/multifactor" else None
    if method == "priority" and top is not None and priority <= top:
        return (f"slurm.lockin.priority {priority} is not above what PriorityType="
                f"priority/multifactor can give ordinary jobs (up to {top}, the sum of the "
                f"PriorityWeight* settings): set it above {top} (at most {MAX_PRIORITY}), "
                "and job_submit.lua's lockin_priority to the same value")
    return None


#: the multifactor weights of ``scontrol show config`` (PriorityWeightAssoc since 22.05)
MULTIFACTOR_WEIGHTS = ("PriorityWeightAge", "PriorityWeightAssoc", "PriorityWeightFairShare",
                       "PriorityWeightJobSize", "PriorityWeightPartition", "PriorityWeightQOS")
_TRES_WEIGHT = re.compile(r"^[^=,]+=([0-9]*\.?[0-9]+)[KMGTP]?$", re.IGNORECASE)


def multifactor_top(config: Mapping[str, str]) -> int | None:
    """The highest priority ``priority/multifactor`` computes for a job whose nice is 0:
    each factor is at most 1.0 (src/plugins/priority/multifactor), so the sum of the
    weights, each TRES weight counted whole (a unit suffix only lowers it). None when the
    configuration does not bound it: a site factor plugin, a ``NO_NORMAL_*`` flag (raw
    factors above 1.0), or a weight this cannot read."""
    if config.get("PrioritySiteFactorPlugin", NULL) not in ("", NULL) or \
            "NO_NORMAL" in config.get("PriorityFlags", "").upper():
        return None
    total = 0.0
    for key in MULTIFACTOR_WEIGHTS:
        value = config.get(key, "0")
        if not value.isdigit():
            return None
        total += int(value)
    tres = config.get("PriorityWeightTRES", NULL)
    for weight in [] if tres in ("", NULL) else tres.split(","):
        m = _TRES_WEIGHT.match(weight.strip())
        if not m:
            return None
        total += float(m.group(1))
    return int(total) + (0 if total.is_integer() else 1)


def qos_warning(method: str, qos: str, config: Mapping[str, str]) -> str | None:
    """A lock-in that works but that users can give themselves: without ``qos`` in
    AccountingStorageEnforce, Slurm does not check a requested QOS against the user's."""
    enforce = {e.strip() for e in config.get("AccountingStorageEnforce", "").split(",")}
    if method != "qos" or no_accounting(config):
        return None
    if "qos" in enforce:
        return None
    return (f"AccountingStorageEnforce={config.get('AccountingStorageEnforce', '')!s} does "
            f"not enforce QOS: users can submit with --qos={qos} and look locked in; add "
            "qos to AccountingStorageEnforce")


def guard_warning(method: str, priority: int, config: Mapping[str, str]) -> str | None:
    """A priority lock-in its user can turn into a fixed place at the head of the queue:
    without job_submit.lua's guard (JobSubmitPlugins lacks ``lua``) the owner of a
    locked-in job may lower its priority by one (Slurm lets a user lower a job's
    priority), and rsad's restore leaves a priority that is no longer the lock-in's alone.
    rsad cannot read the plugin's own ``lockin_priority``: the operator guide says to set
    it to rsad's value."""
    plugins = {p.strip() for p in config.get("JobSubmitPlugins", "").split(",")}
    if method != "priority" or "JobSubmitPlugins" not in config or \
            plugins & {"lua", "job_submit/lua"}:
        return None
    return (f"JobSubmitPlugins={config['JobSubmitPlugins']} has no lua: without job_submit.lua's "
            "lock-in guard a user can lower a locked-in job's priority to just below "
            f"{priority} and keep it above every other job's: install slurm_plugins/"
            f"job_submit.lua with lockin_priority = {priority} (docs/job_submit.md)")


@dataclass
class CliSlurm:
    """SlurmPort over squeue/scontrol."""

    bin_dir: Path = Path("/usr/bin")
    timeout: float = 30.0
    lockin_method: str = "priority"
    lockin_qos: str = "rsa-lockin"
    lockin_priority: int = 4_294_967_000
    runner: Runner = field(default_factory=LocalRunner)
    env: Mapping[str, str] = field(default_factory=lambda: _slurm_env(os.environ))

    def __post_init__(self) -> None:
        if self.lockin_method not in LOCKIN_METHODS:
            raise ValueError(f"lock-in method must be one of {', '.join(LOCKIN_METHODS)}")

    def _run(self, argv: list[str], env: Mapping[str, str] | None = None) -> str:
        try:
            return self.runner(argv, timeout=self.timeout,
                               env={**self.env, **(env or {})}).stdout
        except CommandError as e:
            raise SlurmError(f"Slurm command failed: {e}; is slurmctld reachable "
                             f"(scontrol ping)?") from e

    def queue(self) -> list[QueueRow]:
        return parse_queue(self.queue_text())

    def queue_text(self) -> str:
        """The raw output of the one squeue call (for rsad's incremental parse)."""
        return self._run(squeue_argv(self.bin_dir))

    def batch_script(self, job_id: str) -> str:
        return self._run(batch_script_argv(self.bin_dir, job_id))

    def _lock_view(self, job_id: str) -> LockView:
        return parse_lock_view(self._run(lock_view_argv(self.bin_dir, job_id)), job_id)

    def lock_original(self, job_id: str) -> str:
        """What :meth:`lock_in` will change, as it is now: the job's QOS (method qos) or
        priority (method priority). Raises SlurmError when that is the lock-in's own value
        (an earlier lock-in never undone: it is no original) or the job is gone."""
        view = self._lock_view(job_id)
        if view.state in ("", "GONE"):
            raise SlurmError(f"job {job_id} is no longer in Slurm's queue")
        if self.lockin_method == "qos":
            if view.qos == self.lockin_qos:
                raise SlurmError(f"job {job_id} already has the lock-in QOS {view.qos} and "
                                 "rsad has no record of its own QOS")
            return view.qos
        if self.lockin_method == "priority":
            if view.priority == self.lockin_priority:
                raise SlurmError(f"job {job_id} already has the lock-in priority "
                                 f"{view.priority} and rsad has no record of its own")
            return str(view.priority)
        return ""

    def lock_in(self, job_id: str) -> None:
        """Lock the job in (the caller recorded :meth:`lock_original` first)."""
        if self.lockin_method == "qos":
            self._run(update_argv(self.bin_dir, job_id, qos=self.lockin_qos))
        elif self.lockin_method == "priority":
            self._run(update_argv(self.bin_dir, job_id, priority=str(self.lockin_priority)))

    def unlock(self, job_id: str, original: str = "") -> str:
        """Give the job back its own QOS / priority; returns what was done, in words.

        Idempotent, and it only ever undoes rsad's own lock-in: a job whose QOS or
        priority is no longer the lock-in's (an operator changed it, or it was restored
        already) is left alone. It never releases a hold: method priority sets the
        recorded priority back with ``scontrol update``, which Slurm refuses on a held
        job (ESLURM_JOB_HELD), so an operator's or the user's hold stays whatever
        happens in between. Raises :class:`UnlockGone` when the job has ended (nothing
        is left to restore) and :class:`UnlockLater` for method qos on a running job:
        Slurm 22.05 changes no running job's QOS (ESLURM_JOB_NOT_PENDING); it is
        restored when the job is pending again (a requeue)."""
        view = self._lock_view(job_id)
        if view.state in ("", "GONE") or view.state in SLURM_FINISHED:
            raise UnlockGone(f"job {job_id} has ended: nothing to restore")
        pending = view.state in SLURM_PENDING
        if self.lockin_method == "qos":
            if view.qos != self.lockin_qos:
                return f"QOS is {view.qos or '(none)'}, not the lock-in's: left as it is"
            if not pending:
                raise UnlockLater(f"job {job_id} runs under QOS {self.lockin_qos}: Slurm "
                                  "changes no running job's QOS; its own QOS "
                                  f"{original or '(unknown)'} is set back if it is "
                                  "pending again (a requeue)")
            if not original or original == self.lockin_qos:
                raise SlurmError(f"job {job_id}: no record of its own QOS to restore")
            self._run(update_argv(self.bin_dir, job_id, qos=original))
            return f"QOS {original} restored"
        if self.lockin_method == "priority":
            if view.priority != self.lockin_priority:
                held = " (held: Slurm recomputes it at the release)" if view.priority == 0 \
                    else ""
                return f"priority is {view.priority}, not the lock-in's: left as it is{held}"
            if not original.isdigit() or int(original) in (0, self.lockin_priority):
                raise SlurmError(f"job {job_id}: no record of its own priority to restore")
            try:
                self._run(update_argv(self.bin_dir, job_id, priority=original))
            except SlurmError:
                if self._lock_view(job_id).priority == 0:  # held in between: it stays
                    return "held since: left held (Slurm recomputes it at the release)"
                raise
            return f"priority {original} restored"
        return "no lock-in method: nothing to restore"

    def set_comment(self, job_id: str, text: str) -> None:
        """Write ``text`` as the job's comment unless the comment is the user's own
        (:func:`users_comment`; read first, one squeue call)."""
        if users_comment(self._run(comment_argv(self.bin_dir, job_id))):
            log.info("job %s: its comment is its user's own: left as it is; not told: %s",
                     job_id, text)
            return
        self._run(update_argv(self.bin_dir, job_id, comment=text))

    def job_mail(self, job_id: str) -> tuple[str, str] | None:
        """(MailUser, MailType) the job asked Slurm for (``--mail-user``,
        ``--mail-type``; "" for none), None when ``scontrol show job`` does not say it in
        one line. Raises SlurmError when Slurm no longer has the job (MinJobAge)."""
        return parse_job_mail(self._run(job_mail_argv(self.bin_dir, job_id)))

    def end_states(self, job_ids: Sequence[str]) -> dict[str, str]:
        """How each job of ``job_ids`` ended, by Slurm's accounting (``sacct``): only the
        jobs it knows. Raises SlurmError without accounting (sacct fails)."""
        if not job_ids:
            return {}
        return parse_end_states(self._run(end_states_argv(self.bin_dir, job_ids)))

    def job_nodes(self, job_id: str) -> list[JobNodesRow]:
        """Where Slurm has ``job_id`` (one squeue call): a line per job or hetjob
        component, none when Slurm no longer has it (:func:`unknown_job`). Raises
        SlurmError when Slurm cannot be read."""
        try:
            text = self._run(job_nodes_argv(self.bin_dir, job_id))
        except SlurmError as e:
            cause = e.__cause__
            if isinstance(cause, CommandError) and unknown_job(cause):
                return []
            raise
        try:
            return parse_job_nodes(text, job_id)
        except ParseError as e:
            raise SlurmError(f"job {job_id}: {e}") from e

    def drain_nodes(self, nodes: Sequence[str], reason: str) -> None:
        self._run(drain_argv(self.bin_dir, nodes, reason))

    def job_info(self, job_id: str) -> JobInfo:
        try:
            return parse_job_info(self._run(job_info_argv(self.bin_dir, job_id)), job_id)
        except ParseError as e:
            raise SlurmError(f"job {job_id}: {e}") from e

    def idle_nodes(self) -> dict[str, int]:
        return parse_sinfo_partitions(self._run([str(self.bin_dir / "sinfo"), "-h", "-o",
                                                 SINFO_PARTITIONS]))

    def pending_jobs(self) -> list[tuple[str, int, str, str]]:
        return parse_pending(self._run([str(self.bin_dir / "squeue"), "-h", "-r", "-t",
                                        "PD", "-O", PENDING_FORMAT]))

    def dependents(self, mark: str, ahead_of: int | None = None) -> list[DependentRow]:
        """Pending jobs with a dependency, with ``mark`` in their admin_comment, or with a
        begin time after ``ahead_of``, with their begin times (one ``squeue`` call: the
        dependency hold, daemon/dephold.py)."""
        return parse_dependents(self._run(dependents_argv(self.bin_dir), EPOCH_TIME), mark,
                                ahead_of=ahead_of)

    def hold(self, job_id: str, seconds: int, admin_comment: str) -> None:
        self._run(update_argv(self.bin_dir, job_id, StartTime=f"now+{int(seconds)}",
                              AdminComment=admin_comment))

    def release_hold(self, job_id: str, admin_comment: str) -> None:
        self._run(update_argv(self.bin_dir, job_id, StartTime="now",
                              AdminComment=admin_comment))

    def show_config(self) -> dict[str, str]:
        """slurmctld's running configuration (``scontrol show config``), parsed."""
        return parse_show_config(self._run(show_config_argv(self.bin_dir)))


def _slurm_env(environ: Mapping[str, str]) -> dict[str, str]:
    """A clean environment for Slurm clients, keeping only what selects the cluster."""
    env = {"PATH": CLEAN_PATH, "LANG": "C.UTF-8"}
    for key in ("SLURM_CONF", "SLURM_CLUSTERS"):
        if key in environ:
            env[key] = environ[key]
    return env
