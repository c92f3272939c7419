"""The configuration's service sections: rsad, Slurm, SSH, staging, hooks, health, metrics.

Owns the frozen dataclasses of those sections (each key with its kind and documentation,
:func:`~rsa_scheduler.config.kinds.meta`), the enums their choices convert to, and
:class:`HostPort`. The pool and filesystem sections are in
:mod:`rsa_scheduler.config.storage`, :class:`~rsa_scheduler.config.schema.Config` in
:mod:`rsa_scheduler.config.schema`. Declarations only: no reading, no validation.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path

from rsa_scheduler.client import API_PORT
from rsa_scheduler.config.kinds import (
    DAY,
    HOUR,
    MAX_RETRIES,
    MAX_SLURM_PRIORITY,
    AbsPath,
    Bool,
    Choice,
    Duration,
    Int,
    Listen,
    ListOf,
    Optional,
    Section,
    Size,
    Str,
    meta,
)
from rsa_scheduler.core.policy import EarlyStart, ResetTrigger, StageOut


class LogLevel(enum.StrEnum):
    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


class SlurmBackend(enum.StrEnum):
    CLI = "cli"  # squeue/scontrol machine-readable output
    PYSLURM = "pyslurm"  # needs pyslurm matching the site's Slurm major release


class LockinMethod(enum.StrEnum):
    QOS = "qos"  # seed 004 §3.1: a quality-of-service flag (needs accounting)
    PRIORITY = "priority"  # raise the job's priority (no accounting needed)
    NONE = "none"


class ScriptSource(enum.StrEnum):
    JOB_SUBMIT = "job_submit"  # normalised spec in admin_comment, written by job_submit.lua
    SCONTROL = "scontrol"  # `scontrol write batch_script`, read once per job


class SlurmMode(enum.StrEnum):
    QUEUE = "queue"  # rsad watches the queue: on-deck, demotion, lock-in (seed 004 §3.1)
    NATIVE = "native"  # Slurm's burst_buffer/lua drives stage-in/out (docs/design/native-mode.md)


class MountScope(enum.StrEnum):
    NODE = "node"  # the RAMDISK is bind-mounted in the compute node's mount namespace
    JOB = "job"  # ... in a mount namespace of the job's own (needs the SPANK plugin)


class HostKeyPolicy(enum.StrEnum):
    REJECT = "reject"
    WARN = "warn"
    AUTO_ADD = "auto-add"


@dataclass(frozen=True, slots=True)
class HostPort:
    """A ``host:port`` to listen on (``[::1]:9465`` for IPv6)."""

    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


# --------------------------------------------------------------------------- sections


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiConfig:
    socket: Path = field(
        metadata=meta(AbsPath(), "Unix socket of rsad's API (the `rsa` CLI, local hooks).")
    )
    listen: HostPort | None = field(
        metadata=meta(
            Optional(Listen(default_port=API_PORT)),
            "TCP `host:port` the API also listens on, for the compute nodes' Prolog/Epilog "
            f"(authenticated with MUNGE); a host alone listens on port {API_PORT} (not one of "
            "Slurm's: docs/ports.md). Empty: unix socket only.",
        )
    )
    socket_group: str = field(
        metadata=meta(
            Str(),
            "Group that may connect to the unix socket (mode 0660 root:group): SlurmUser "
            "and whoever runs `rsa` on rsad's host. Missing or empty: mode 0600, root only.",
        )
    )
    read_timeout: float = field(
        metadata=meta(Duration(max=HOUR), "Time a caller has to send a whole request "
                                          "(and to take its answer); then 408.")
    )
    max_connections: int = field(
        metadata=meta(Int(min=8, max=65536), "API connections open at once, both "
                                             "listeners; the last 1/8 only for root's and "
                                             "SlurmUser's on the unix socket.")
    )
    per_user: int = field(
        metadata=meta(Int(min=1, max=1024), "Connections (requests) one user may have "
                                            "open at once; more are answered 429. Root "
                                            "and SlurmUser are exempt.")
    )
    workers: int = field(
        metadata=meta(Int(min=1, max=1024), "Users' requests served at once (root's and "
                                            "SlurmUser's hooks never wait for these).")
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class DaemonConfig:
    state_dir: Path = field(
        metadata=meta(
            AbsPath(), "rsad's state directory; the SQLite event store lives there as `rsa.db`."
        )
    )
    poll_interval: float = field(
        metadata=meta(Duration(max=HOUR), "How often rsad polls Slurm (one `squeue` call).")
    )
    workers: int = field(
        metadata=meta(Int(min=1, max=1024), "Workers for bulk operations: RAMDISK builds, "
                                            "stage-in, stage-out, verification.")
    )
    retention: float = field(
        metadata=meta(Duration(max=365 * DAY), "How long a finished job stays in rsad's "
                      "memory (and in `rsa jobs`) after its RSA cycle ended; its history "
                      "stays in the store, where `rsa job ID` and `rsa events --job ID` "
                      "read it. Bounds memory by live jobs.")
    )
    snapshot_every: int = field(
        metadata=meta(Int(min=0, max=10**9), "Write a snapshot of rsad's state every this "
                      "many events, and no sooner than as many events as jobs in memory, "
                      "never in the first cycle after a start; a restart loads the newest "
                      "and replays only the events after it (0: never, replay the whole "
                      "log).")
    )
    urgent_workers: int = field(
        metadata=meta(Int(min=1, max=1024), "Workers for everything else (mounts, the "
                                            "reset, lock-in, teardown): they never wait "
                                            "behind bulk operations; as many again write "
                                            "messages (job comments, drains, mail), so a "
                                            "slow slurmctld or MTA never holds up a mount.")
    )
    log_level: LogLevel = field(metadata=meta(Choice.of(LogLevel), "Log level of rsad."))
    api: ApiConfig = field(metadata=meta(Section(ApiConfig), "rsad's API endpoints."))

    @property
    def db_path(self) -> Path:
        return self.state_dir / "rsa.db"


@dataclass(frozen=True, slots=True, kw_only=True)
class LockinConfig:
    method: LockinMethod = field(
        metadata=meta(
            Choice.of(LockinMethod),
            "How a staged job is protected from demotion (seed 004 §3.1): a QOS (needs "
            "accounting; the job then runs and is accounted under it), a priority boost "
            "(keeps the job's own QOS: the choice of sites that bill or limit by QOS), or "
            "nothing.",
        )
    )
    qos: str = field(metadata=meta(Str(), "QOS given to locked-in jobs (method `qos`)."))
    priority: int = field(
        metadata=meta(
            Int(min=1, max=MAX_SLURM_PRIORITY),
            "Priority given to locked-in jobs (method `priority`).",
        )
    )
    timeout: float = field(
        metadata=meta(
            Duration(max=DAY),
            "A locked-in job that has not started this long after its lock-in is unlocked, "
            "its RAMDISK torn down, and it reads the PFS (0: no bound).",
        )
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class SlurmConfig:
    backend: SlurmBackend = field(
        metadata=meta(
            Choice.of(SlurmBackend),
            "`cli` parses squeue/scontrol; `pyslurm` needs pyslurm matching the site's Slurm.",
        )
    )
    bin_dir: Path = field(metadata=meta(AbsPath(), "Directory holding squeue, scontrol, ..."))
    command_timeout: float = field(
        metadata=meta(Duration(max=HOUR), "Timeout of one Slurm command.")
    )
    lockin: LockinConfig = field(metadata=meta(Section(LockinConfig), "Lock-in after stage-in."))
    script_source: ScriptSource = field(
        metadata=meta(
            Choice.of(ScriptSource),
            "Where rsad reads a job's `#RSA_` directives: `job_submit` (admin_comment written "
            "by job_submit.lua) or `scontrol` (`scontrol write batch_script`, once per job).",
        )
    )
    mode: SlurmMode = field(
        metadata=meta(
            Choice.of(SlurmMode),
            "`queue`: rsad watches the queue and stages a job in when it is on-deck (demotion, "
            "lock-in); `native`: Slurm's burst_buffer/lua plugin (slurm_plugins/"
            "burst_buffer.lua) starts stage-in and stage-out and holds the job meanwhile "
            "(docs/design/native-mode.md).",
        )
    )
    bb_pools_file: Path = field(
        metadata=meta(
            AbsPath(),
            "Native mode: the JSON file rsad rewrites with the free RSA capacity per tier; "
            "burst_buffer.lua's slurm_bb_pools reports it to Slurm (it must be readable by "
            "SlurmUser).",
        )
    )
    bb_grace: float = field(
        metadata=meta(
            Duration(max=DAY),
            "Native mode: how long a staged RAMDISK of a still-pending job outlives Slurm's "
            "teardown of it (a restarted slurmctld tears down and sets up again ~60 s "
            "later: the input is not staged twice).",
        )
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class SshConfig:
    user: str = field(metadata=meta(Str(), "User rsad logs in as on RSA nodes."))
    key: Path = field(metadata=meta(AbsPath(), "Private key."))
    known_hosts: Path = field(metadata=meta(AbsPath(), "Known-hosts file of the RSA nodes."))
    host_key_policy: HostKeyPolicy = field(
        metadata=meta(
            Choice.of(HostKeyPolicy), "Unknown host key: refuse, warn and connect, or add it."
        )
    )
    connect_timeout: float = field(metadata=meta(Duration(max=HOUR), "SSH connect timeout."))
    command_timeout: float = field(
        metadata=meta(Duration(max=DAY), "Timeout of one remote command.")
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ResetConfig:
    trigger: ResetTrigger = field(
        metadata=meta(
            Choice.of(ResetTrigger),
            "When the input RAMDISK is reset for output (seed 004 §3.2): after `delay`, or "
            "when the job runs `rsa input-done`.",
        )
    )
    delay: float = field(
        metadata=meta(
            Duration(positive=False),
            "Delay after job start (trigger `delay`); same range as `#RSA_RESET`.",
        )
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class StagingConfig:
    early_start: EarlyStart = field(
        metadata=meta(
            Choice.of(EarlyStart),
            "Default when a job could start before its RAMDISK is ready "
            "(`#RSA_EARLY_START` overrides); `wait` holds it (job_submit.lua's "
            "`CONFIG.early_start` must say the same).",
        )
    )
    stage_out: StageOut = field(
        metadata=meta(Choice.of(StageOut), "Default stage-out method (`#RSA_STAGE_OUT` overrides).")
    )
    retries: int = field(
        metadata=meta(
            Int(min=0, max=MAX_RETRIES), "Retries of a failed transfer before quarantine."
        )
    )
    backoff: float = field(
        metadata=meta(Duration(max=DAY), "First retry delay; doubles on each retry.")
    )
    backoff_max: float = field(metadata=meta(Duration(max=DAY), "Upper bound of the retry delay."))
    parallel_per_node: int = field(
        metadata=meta(Int(min=1, max=256), "Parallel transfer streams per RSA node.")
    )
    allowed_roots: tuple[Path, ...] = field(
        metadata=meta(
            ListOf(AbsPath()),
            "The RAMDISK is mounted over DATA_IN/DATA_OUT only under one of these "
            "directories (never `/`). Checked by the node hooks when they mount, not at "
            "submission: a job outside them is accepted and runs from the PFS, told why.",
        )
    )
    shared_dirs: tuple[Path, ...] = field(
        metadata=meta(
            ListOf(AbsPath()),
            "Group project directories: at or under one of these, the RAMDISK may be "
            "mounted over a DATA_IN/DATA_OUT directory the job's user does not own but "
            "that one of their groups owns and may write. Everywhere else only over the "
            "user's own directories. In `hooks.mounts: node` the mount hides the directory "
            "from every other job on the node while the job runs (operator guide: shared "
            "project directories).",
        )
    )
    reset: ResetConfig = field(
        metadata=meta(Section(ResetConfig), "The mid-job input→output reset.")
    )
    wait_timeout: float = field(
        metadata=meta(
            Duration(max=30 * DAY),
            "How long early-start policy `wait` may hold a job before falling back.",
        )
    )
    on_deck_settle: float = field(
        metadata=meta(
            Duration(positive=False, max=DAY),
            "How long a job must stay on-deck (pending `Resources`) before RSA nodes are "
            "allocated. slurmctld gives every job submitted to a full cluster `Resources` "
            "at once and `Priority` at its next scheduling pass; this keeps such a job from "
            "costing a RAMDISK build and a partial stage-in. 0s: allocate at once (the "
            "paper's behaviour).",
        )
    )
    copy_tool: str = field(
        metadata=meta(
            Choice(("engine", "rsync", "custom")),
            "What copies a tree (stage-in, and stage-out as a tree): `engine` tar pipes "
            "and dd per bucket (measured faster than one rsync -a: docs/benchmarks.md), "
            "`rsync` real rsync -aH per bucket, `custom` the site's `copy_command`; "
            "always in parallel buckets over the job's RSA nodes, as the user, placed "
            "atomically and verified the same way.",
        )
    )
    stripe_bytes: int = field(
        metadata=meta(
            Size(positive=False),
            "With `copy_tool: engine`, a file at least this large is copied as byte ranges "
            "by every stream of every RSA node at once, each range checksummed on both "
            "sides, placed only when all passed (docs/staging.md#striped-big-files). "
            "0: off, one stream per file (the default: on the lab, whose RSA nodes share "
            "two cores, a striped copy ran at 0.56–0.66× one `dd` into the RAMDISK and "
            "0.76–1.06× out of it, one stream per file at `dd`'s speed; measure on your "
            "RSA nodes before turning it on). Files below 128M are never split (ranges "
            "are at least 64M).",
        )
    )
    engine_process: bool = field(
        metadata=meta(
            Bool(),
            "Run every stage-in, stage-out and verify of a tree in a staging worker, a "
            "process of its own (a few are kept for the next copies, with their SSH "
            "connections), so the copies' Python never slows rsad's loop and mounts "
            "(docs/architecture.md#engine-workers: with 32 stage-outs at once, a "
            "mount's p90 wait fell from 0.7-1.9 s to under 0.5 s). `false`: in rsad's "
            "own threads, as before, and in rsad's own memory, which `engine_memory` "
            "does not bound: only `writable_objects` and `stream_objects` bound the "
            "lists of a job's files there, and a job with millions of files (a tar "
            "stage-out, a write-back, the DATA_OUT of a verify) can take all the memory "
            "of rsad's host (warned by `rsa config check`).",
        )
    )
    engine_nice: int = field(
        metadata=meta(
            Int(min=0, max=19),
            "With `engine_process`, how much lower the staging workers' CPU priority is "
            "than rsad's (nice): the copies' Python yields rsad's host to its loop and "
            "mounts (the copies themselves run on the RSA nodes, unaffected). 0: the same "
            "priority. On a 2-core VM, 32 stage-outs at once: a mount's p90 wait 0.12-0.16 s "
            "at 10, 0.32-1.2 s at 0 (docs/benchmarks.md).",
        )
    )
    stream_objects: int | None = field(
        metadata=meta(
            Optional(Int(min=1000, max=1_000_000_000)),
            "Streamed mode (docs/staging.md#streamed-mode): a tree of more than this many "
            "objects is listed and copied on the RSA nodes, rsad keeping counters only "
            "(constant memory in rsad; 20000: what bench/bench_manifest.py found cheap). "
            "It resumes on the nodes (the listed mode's quick check; hard-linked files "
            "are copied again) and gives up striping and the destination scan; it "
            "copies with tar, so it applies with copy_tool engine only (rsync, custom: "
            "every tree is listed); its verify checks what the listed verify checks. "
            "Empty: off, every tree is listed in rsad (a 1M-object tree costs rsad "
            "~1.2 GB).",
        )
    )
    writable_objects: int | None = field(
        metadata=meta(
            Optional(Int(min=1, max=1_000_000_000)),
            "The most objects a writable input (`#RSA_INPUT=rw`) may hold: a larger "
            "DATA_IN is refused before anything is staged (the job reads and writes the "
            "PFS, its comment says why and what to do). Its write-back compares three "
            "manifests of the whole input in a staging worker: ~2.7 KB of its memory per "
            "object (bench: docs/security.md, \"Memory of rsad's host\"; 500000: ~1.4 GB). "
            "Empty: no limit (a writable input of tens of millions of objects then takes "
            "tens of GB on rsad's host).",
        )
    )
    engine_memory: int | None = field(
        metadata=meta(
            Optional(Size(max=1 << 50)),
            "With `engine_process`, the most data memory of one staging worker "
            "(RLIMIT_DATA): an operation that needs more fails alone, with a message "
            "naming this key, and is retried, instead of the kernel's OOM killer choosing "
            "rsad or slurmctld. A listed tree costs ~1.2 KB per object, a write-back "
            "~2.7 KB per object of its input: with `copy_tool` rsync or custom, or "
            "`stream_objects` empty (every tree listed), or a larger `writable_objects`, "
            "or tar stage-outs (`#RSA_STAGE_OUT=tar`, listed whole) of many millions of "
            "files, raise it to fit. Empty: no bound.",
        )
    )
    private_tmp: int = field(
        metadata=meta(
            Size(max=1 << 40),
            "Size (at least 1M) of the one tmpfs every command rsad runs as a user on an RSA node "
            "(PREPROCESS, POSTPROCESS, staging copies) sees as its own `/tmp`, `/var/tmp` "
            "and `/dev/shm`, gone when the command ends (docs/security.md, \"Leftovers on "
            "RSA nodes\"). It is RAM beside the pool while a command writes there: keep "
            "it small; scripts that need more space write into `$RSA_RAMDISK`.",
        )
    )
    copy_command: str | None = field(
        metadata=meta(
            Optional(Str()),
            "The copier of one bucket when `copy_tool` is `custom`, run by bash as the "
            "job's user on an RSA node: it must copy the names listed in `{list}` "
            "(NUL-separated, relative to `{src}`) from `{src}` to `{dst}`; `{recursive}` "
            "is `-r` for a bucket of whole directories. E.g. `rsync -a --from0 "
            "--files-from={list} {recursive} {src}/ {dst}/`.",
        )
    )
    stage_out_order: str = field(
        metadata=meta(
            Choice(("fifo", "sjf", "trio")),
            "Which stage-out copies first when several share a PFS target (seed 003): "
            "`fifo` all at once; `sjf` at most `flushes_per_target` at once, the fewest "
            "bytes first; `trio` the same cap, the oldest job (lowest job id) first, then "
            "the fewest bytes.",
        )
    )
    flushes_per_target: int = field(
        metadata=meta(
            Int(min=1, max=1024),
            "Stage-outs copying to one PFS target at once under `sjf` and `trio` (seed "
            "003's alpha).",
        )
    )
    pfs_targets: tuple[Path, ...] = field(
        metadata=meta(
            ListOf(AbsPath()),
            "The PFS's independent targets (file systems, or directories on their own "
            "servers): a stage-out counts against the longest that holds its DATA_OUT; "
            "empty: the whole PFS is one target.",
        )
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class HooksConfig:
    timeout: float = field(
        metadata=meta(
            Duration(max=HOUR),
            "Hard timeout of a Prolog/Epilog run (of both: with `RSA_API` and "
            "`RSA_ALLOWED_ROOTS` in their environment, `RSA_PROLOG_TIMEOUT` sets it for "
            "the Epilog too). The Epilog's wrapper kills it at its backstop "
            "(`RSA_EPILOG_BACKSTOP`, 20 s): raise that with this (`rsa config check` "
            "warns past 15 s).",
        )
    )
    api_timeout: float = field(
        metadata=meta(
            Duration(max=HOUR),
            "Timeout of one hook→rsad API call (rsa-bb, native mode: never less than "
            "30 s, so that rsad's own answer to a busy moment comes first).",
        )
    )
    max_hold: float = field(
        metadata=meta(
            Duration(positive=False, max=DAY),
            "Longest the node Prolog holds a job's start for its stage-in (early start "
            "`wait` when an on-deck job's nodes freed before its input was staged; a job "
            "held from submission waits in Slurm instead). Slurm's `PrologEpilogTimeout` "
            "and the Prolog wrapper's backstop (`RSA_PROLOG_BACKSTOP`, 330 s) must exceed "
            "`hooks.timeout` + this (`rsa config check` warns when they are within 5 s "
            "of 330 s).",
        )
    )
    mounts: MountScope = field(
        metadata=meta(
            Choice.of(MountScope),
            "Where the RAMDISK is mounted over DATA_IN/DATA_OUT: `node` — in the compute "
            "node's mount namespace, seen by every process on the node; `job` — in a mount "
            "namespace of the job's own that the SPANK plugin moves its tasks into, so other "
            "jobs and users never see it (docs/spank.md).",
        )
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class QuarantineConfig:
    rescue_after: float = field(
        metadata=meta(Duration(positive=False, max=365 * DAY), "A RAMDISK quarantined this "
                      "long (its stage-out gave up) is rescued: its content copied as the "
                      "job's user to `rescue_dir`/<user>/<job> on the PFS, verified as a "
                      "stage-out is, and only then released. A failed rescue keeps the "
                      "quarantine (tried again after as long). 0s: off, a quarantine waits "
                      "for an operator (`rsa retry`, `rsa release --discard-output`).")
    )
    rescue_dir: Path | None = field(
        metadata=meta(Optional(AbsPath()), "The rescue area on the PFS (seen at this path "
                      "by the RSA nodes): a directory owned by root, mode 1777 (sticky, like "
                      "/tmp), where each user's own subdirectory is made by that user, mode "
                      "0700. Needed when `rescue_after` is set.")
    )
    remind_every: float = field(
        metadata=meta(Duration(max=365 * DAY), "A quarantined job's output is alerted about "
                      "again each time it has waited this long more (its first alert is the "
                      "quarantine's own): it holds RSA nodes until an operator acts or it is "
                      "rescued. At least 1m (rsad looks once a minute).")
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class HealthConfig:
    interval: float = field(
        metadata=meta(Duration(positive=False, max=HOUR), "How often rsad probes every RSA "
                      "node over SSH (free space of its pool directory, its clock). 0s: off.")
    )
    down_after: int = field(
        metadata=meta(Int(1, 100), "Failed probes in a row before a node is marked down "
                      "(never allocated; comes back by itself once it answers).")
    )
    min_free: int = field(
        metadata=meta(Size(), "A node with less free space in its pool directory is "
                      "drained by the health loop (and resumed once it has it again).")
    )
    max_clock_skew: float = field(
        metadata=meta(Duration(max=HOUR), "A node whose clock is further off than this "
                      "is drained (timestamps and verification compare mtimes).")
    )
    ramdisk_interval: float = field(
        metadata=meta(Duration(positive=False, max=HOUR), "How often rsad checks every live "
                      "RAMDISK (its servers and RSA-node mounts) and restarts what died, on "
                      "the data still in the pools; also while staging moves data. 0s: only "
                      "before "
                      "each staging step and when one finds the filesystem not answering.")
    )
    ramdisk_stall: float = field(
        metadata=meta(Duration(positive=False, max=DAY), "A staging step whose RAMDISK's "
                      "filesystem stays broken this long (every check meanwhile, each "
                      "`ramdisk_interval`, found it broken and could not repair it) is "
                      "stopped: its commands are killed and the step fails and is retried, "
                      "instead of waiting on a dead mount for its own timeout (24h). 0s: "
                      "never stopped for this.")
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricsConfig:
    listen: HostPort | None = field(
        metadata=meta(Optional(Listen()), "Prometheus endpoint, e.g. `127.0.0.1:9465`. Empty: off.")
    )
