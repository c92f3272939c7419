"""Slurm 22.05: munge, optional MariaDB + slurmdbd, slurmctld and slurmd c1..N.

Every slurmd runs as `/usr/sbin/slurmd -D -N cN` in its own mount+UTS namespace
(hostname cN), NodeAddr=127.0.0.1 with its own Port, and with the lab's `rsa` in its
/usr/local/bin (a directory of the lab's bound there in the node's namespace only): a
job runs `rsa` bare, as on a site where the package put it in /usr/bin. Daemons are
started through the /usr/sbin names (Slurm picks its role from argv[0]).
/etc/slurm/slurm.conf becomes a symlink to the generated file (only if absent), so plain
`squeue` works for everyone.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import socket
import time
from pathlib import Path

from .common import (
    CTLD_ADDR,
    CTLD_PORT,
    DATA,
    DBD_PORT,
    HOOKS_LOG,
    LOGS,
    MYSQL_PORT,
    NS,
    REPO,
    SLURMD_PORT0,
    STATE,
    LabError,
    Settings,
    as_user,
    in_node_ns,
    listening,
    log,
    make_dir,
    ns_members,
    record_ns,
    run,
    spawn,
    stop_named,
    stop_pid,
    wait_for,
)

CONF_DIR = STATE / "slurm"
CONF = CONF_DIR / "slurm.conf"
ETC_CONF = Path("/etc/slurm/slurm.conf")
ETC_MARK = STATE / "etc-slurm-conf"  # exists while the /etc symlink is ours
MYSQL_SOCK = STATE / "mysql/mysqld.sock"
ENV = {"SLURM_CONF": str(CONF)}
JOB_SUBMIT_SRC = REPO / "slurm_plugins/job_submit.lua"
JOB_SUBMIT = CONF_DIR / "job_submit.lua"  # job_submit/lua reads it next to slurm.conf
JOB_SUBMIT_LOCKIN_PRIORITY = 4_294_967_000  # job_submit.lua's default lockin_priority
# ... and job_submit.lua loads these from its own directory (docs/job_submit.md)
JOB_SUBMIT_PARTS = ("rsa_job_submit.lua", "rsa_grammar.lua", "rsa_text.lua",
                    "rsa_directives.lua")
# a site's own job_submit.lua that calls the RSA's module (docs/job_submit.md)
SITE_JOB_SUBMIT_SRC = REPO / "examples/site-job_submit.lua"
BB_LUA_SRC = REPO / "slurm_plugins/burst_buffer.lua"
BB_LUA = CONF_DIR / "burst_buffer.lua"  # burst_buffer/lua reads it next to slurm.conf
BB_CONF = CONF_DIR / "burst_buffer.conf"
BB_POOLS = STATE / "bb-pools.json"  # rsad writes it (slurm.bb_pools_file), slurm reads it
BB_API = "127.0.0.1:7820"  # rsad's TCP API (lab/rsalab/rsad.py LISTEN): slurm reaches it
SPANK_SRC = REPO / "slurm_plugins/spank"
SPANK_SO = CONF_DIR / "rsa_spank.so"  # a copy: rebuilding in the repo leaves the lab alone
PLUGSTACK = CONF_DIR / "plugstack.conf"
# The site's MailProg in the lab: a capture script (tests only), each mail kept as a file in
# MAIL_DIR (SlurmUser's: slurmctld and rsad run MailProg as SlurmUser)
MAILPROG = CONF_DIR / "mailprog"
MAIL_DIR = DATA / "slurm/mail"
NODE_BIN = STATE / "node-bin"  # the compute nodes' /usr/local/bin: `rsa` for jobs
# How the lab loads the SPANK plugin: optional (as docs/spank.md recommends), required
# (a plugin that fails to load stops every srun/sbatch/slurmstepd), or off.
SPANK_MODES = ("optional", "required", "off")


def up(s: Settings) -> None:
    ports = [CTLD_PORT, DBD_PORT, MYSQL_PORT] + [
        SLURMD_PORT0 + i for i in range(s.n_compute)]
    for port in ports:
        if listening(CTLD_ADDR, port):
            raise LabError(f"127.0.0.1:{port} already in use; run `make lab-down` first")
    for sub in ("slurm",):
        shutil.rmtree(DATA / sub, ignore_errors=True)
    make_dir(CONF_DIR, 0o755)
    make_dir(DATA / "slurm/ctld", 0o755, owner="slurm")
    for node in s.compute_nodes:
        make_dir(DATA / "slurm/d" / node, 0o755)
    make_dir(LOGS, 0o755)
    os.chown(LOGS, 0, 0)
    _hooks_log()
    _munge_up()
    password = secrets.token_hex(12)
    if s.accounting:
        _mariadb_up(password)
    install_mailprog()
    CONF.write_text(slurm_conf(s))
    install_job_submit(s)
    if s.mode == "native":
        install_burst_buffer(s)
    install_spank(os.environ.get("RSA_LAB_SPANK") or "optional")
    _link_etc_conf()
    if s.accounting:
        _slurmdbd_up(password)
        _accounts(s)
    spawn("slurmctld", ["/usr/sbin/slurmctld", "-D", "-i"], env=ENV)
    wait_for("slurmctld", lambda: listening(CTLD_ADDR, CTLD_PORT), timeout=30)
    _node_bin(s)
    for _i, node in enumerate(s.compute_nodes):
        argv = in_node_ns(node, f"mount --bind {NODE_BIN} /usr/local/bin",
                          ["/usr/sbin/slurmd", "-D", "-N", node])
        pid = spawn(f"slurmd-{node}", argv, env=ENV)
        record_ns(node, pid)
    wait_for("compute nodes idle", lambda: _all_idle(s), timeout=60, every=0.5)
    log(f"Slurm: slurmctld 127.0.0.1:{CTLD_PORT}, nodes {_hostlist(s)} idle, accounting "
        f"{f'on (slurmdbd :{DBD_PORT}, QOS {s.qos})' if s.accounting else 'off'}")


def _node_bin(s: Settings) -> None:
    """What the package puts on every node's PATH (/usr/bin/rsa), for the lab's jobs."""
    shutil.rmtree(NODE_BIN, ignore_errors=True)
    make_dir(NODE_BIN, 0o755)
    (NODE_BIN / "rsa").symlink_to(s.venv / "bin" / "rsa")


def _hostlist(s: Settings) -> str:
    return f"c[1-{s.n_compute}]"


def _hooks_log() -> None:
    # PrologSlurmctld/EpilogSlurmctld run as slurm, node Prolog/Epilog as root.
    HOOKS_LOG.touch()
    pw = pwd.getpwnam("slurm")
    os.chown(HOOKS_LOG, pw.pw_uid, pw.pw_gid)
    HOOKS_LOG.chmod(0o664)


def _munge_up() -> None:
    key = Path("/etc/munge/munge.key")
    if not key.exists():
        run(as_user("munge", ["/usr/sbin/mungekey", "--create", f"--keyfile={key}"]))
    for d in (Path("/run/munge"), Path("/var/log/munge"), Path("/var/lib/munge")):
        make_dir(d, 0o755 if d.name == "munge" and d.parent.name == "run" else 0o700,
                 owner="munge")
    sock = Path("/run/munge/munge.socket.2")
    if sock.exists() and run(["munge", "-n"], check=False).returncode == 0:
        raise LabError("a munged not started by the lab is running; stop it first")
    spawn("munged", as_user("munge", ["/usr/sbin/munged", "-F", "--force"]))
    wait_for("munged", lambda: run(["munge", "-n"], check=False).returncode == 0, timeout=20)


def _mariadb_up(password: str) -> None:
    datadir = DATA / "mysql"
    shutil.rmtree(datadir, ignore_errors=True)
    make_dir(datadir, 0o750, owner="mysql")
    make_dir(MYSQL_SOCK.parent, 0o755, owner="mysql")
    run(["mariadb-install-db", "--no-defaults", "--user=mysql", f"--datadir={datadir}",
         "--auth-root-authentication-method=socket", "--skip-test-db"], timeout=120)
    spawn("mariadbd", [
        "/usr/sbin/mariadbd", "--no-defaults", "--user=mysql", f"--datadir={datadir}",
        f"--socket={MYSQL_SOCK}", f"--pid-file={MYSQL_SOCK.parent}/mariadbd.pid",
        "--bind-address=127.0.0.1", f"--port={MYSQL_PORT}", "--skip-name-resolve",
        "--innodb-buffer-pool-size=64M", "--innodb-log-file-size=48M",
        "--skip-log-bin", "--max-connections=50", "--performance-schema=OFF",
        f"--log-error={LOGS}/mariadb.log",
    ])
    wait_for("mariadb", lambda: _sql("SELECT 1").returncode == 0, timeout=60, every=0.3)
    sql = (
        f"CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '{password}';"
        "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
        "CREATE DATABASE IF NOT EXISTS slurm_acct_db;"
    )
    r = _sql(sql)
    if r.returncode != 0:
        raise LabError(f"mariadb setup failed: {r.stderr.strip()}")


def _sql(sql: str):  # type: ignore[no-untyped-def]
    return run(["mariadb", "--no-defaults", f"--socket={MYSQL_SOCK}", "-u", "root",
                "-e", sql], check=False, timeout=10)


def _slurmdbd_up(password: str) -> None:
    conf = CONF_DIR / "slurmdbd.conf"
    conf.write_text("\n".join([
        "AuthType=auth/munge",
        "DbdHost=localhost",
        "DbdAddr=127.0.0.1",
        f"DbdPort={DBD_PORT}",
        "SlurmUser=slurm",
        "DebugLevel=info",
        f"LogFile={LOGS}/slurmdbd.log",
        f"PidFile={CONF_DIR}/slurmdbd.pid",
        "StorageType=accounting_storage/mysql",
        "StorageHost=127.0.0.1",
        f"StoragePort={MYSQL_PORT}",
        "StorageUser=slurm",
        f"StoragePass={password}",
        "StorageLoc=slurm_acct_db",
        "",
    ]))
    pw = pwd.getpwnam("slurm")
    os.chown(conf, pw.pw_uid, pw.pw_gid)
    conf.chmod(0o600)
    spawn("slurmdbd", ["/usr/sbin/slurmdbd", "-D"], env=ENV)
    wait_for("slurmdbd", lambda: listening(CTLD_ADDR, DBD_PORT), timeout=60, every=0.3)


def _sacctmgr(*args: str) -> None:
    r = run(["sacctmgr", "-i", *args], env=ENV, check=False, timeout=30)
    if r.returncode != 0 and "Nothing new added" not in r.stdout + r.stderr:
        raise LabError(f"sacctmgr {' '.join(args)}: {(r.stderr or r.stdout).strip()}")


def _accounts(s: Settings) -> None:
    _sacctmgr("add", "cluster", s.cluster)
    _sacctmgr("add", "qos", s.qos, "Priority=1000000",
              "Description=rsa-scheduler lock-in after stage-in")
    _sacctmgr("add", "account", s.account, f"Cluster={s.cluster}",
              "Description=rsa lab users", "Organization=rsa")
    _sacctmgr("add", "user", f"{s.user},{s.other_user},root", f"Account={s.account}",
              f"Cluster={s.cluster}")


def slurm_conf(s: Settings) -> str:
    host = socket.gethostname().split(".")[0]
    h = s.hooks
    lines = [
        "# Generated by lab/rsalab/slurm.py for the rsa-scheduler lab. Do not edit.",
        f"ClusterName={s.cluster}",
        f"SlurmctldHost={host}({CTLD_ADDR})",
        f"SlurmctldPort={CTLD_PORT}",
        "SlurmUser=slurm",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"StateSaveLocation={DATA}/slurm/ctld",
        f"SlurmdSpoolDir={DATA}/slurm/d/%n",
        f"SlurmctldPidFile={CONF_DIR}/slurmctld.pid",
        f"SlurmdPidFile={CONF_DIR}/slurmd-%n.pid",
        f"SlurmctldLogFile={LOGS}/slurmctld.log",
        f"SlurmdLogFile={LOGS}/slurmd-%n.log",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "SelectType=select/linear",
        "SchedulerType=sched/backfill",
        "SchedulerParameters=bf_interval=2,sched_interval=2,bf_resolution=60",
        "SlurmdParameters=config_overrides",
        "MpiDefault=none",
        "ReturnToService=2",
        "MinJobAge=600",
        "KillWait=5",
        "InactiveLimit=0",
        "OverTimeLimit=0",
        "SlurmctldTimeout=30",
        "SlurmdTimeout=60",
        "MessageTimeout=10",
        "PrologEpilogTimeout=60",
        *([f"PrologFlags={s.prolog_flags}"] if s.prolog_flags else []),
        # bench/bench_cycle.py queues 100k array tasks; each task counts against this.
        "MaxJobCount=150000",
        f"Prolog={h['RSA_LAB_PROLOG']}",
        f"Epilog={h['RSA_LAB_EPILOG']}",
        f"PrologSlurmctld={h['RSA_LAB_PROLOG_SLURMCTLD']}",
        f"EpilogSlurmctld={h['RSA_LAB_EPILOG_SLURMCTLD']}",
        "JobCompType=jobcomp/none",
        "JobSubmitPlugins=lua",
        *(["BurstBufferType=burst_buffer/lua", "DebugFlags=BurstBuffer"]
          if s.mode == "native" else []),
        f"PlugStackConfig={PLUGSTACK}",
        f"MailProg={MAILPROG}",
    ]
    if s.accounting:
        lines += [
            # native mode: the RSA allocation accounted per job (sacct), in MiB
            *(["AccountingStorageTRES=bb/lua"] if s.mode == "native" else []),
            "AccountingStorageType=accounting_storage/slurmdbd",
            f"AccountingStorageHost={CTLD_ADDR}",
            f"AccountingStoragePort={DBD_PORT}",
            "AccountingStorageEnforce=associations,limits,qos",
            # sacct -o Comment (the user's --comment, which rsad leaves alone)
            "AccountingStoreFlags=job_comment",
            "PriorityType=priority/multifactor",
            "PriorityWeightQOS=100000",
            "PriorityWeightAge=1000",
            "PriorityWeightFairshare=0",
            "PriorityWeightJobSize=0",
            "PriorityWeightPartition=0",
            "PriorityMaxAge=1-0",
        ]
    else:
        lines += ["AccountingStorageType=accounting_storage/none",
                  "PriorityType=priority/basic"]
    for i, node in enumerate(s.compute_nodes):
        lines.append(f"NodeName={node} NodeAddr=127.0.0.1 NodeHostname={node} "
                     f"Port={SLURMD_PORT0 + i} CPUs=1 RealMemory=1000 State=UNKNOWN")
    lines.append(f"PartitionName={s.partition} Nodes={_hostlist(s)} Default=YES "
                 "MaxTime=INFINITE DefaultTime=00:10:00 State=UP")
    # the same nodes, shareable by two jobs at once (SPANK private-mount tests: two users'
    # jobs on one node); jobs of the default partition still get whole nodes
    lines.append(f"PartitionName=shared Nodes={_hostlist(s)} Default=NO OverSubscribe=FORCE:2 "
                 "MaxTime=INFINITE DefaultTime=00:10:00 State=UP")
    return "\n".join(lines) + "\n"


def install_mailprog() -> None:
    """The lab's MailProg: ``mailprog -s SUBJECT RECIPIENT`` with the body on stdin, as
    mail(1) is called, writes one file to MAIL_DIR: the arguments, one a line, a blank
    line, the body."""
    make_dir(MAIL_DIR, 0o755, owner="slurm")
    MAILPROG.write_text(
        "#!/bin/sh\n# rsa lab: capture the mail (tests), do not send it\n"
        f"f={MAIL_DIR}/mail-$(date +%s%N)-$$\n"
        'umask 022\n{ for a in "$@"; do printf "%s\\n" "$a"; done; echo; cat; } > "$f.tmp"\n'
        'mv "$f.tmp" "$f"\n')
    MAILPROG.chmod(0o755)


def job_submit_files(s: Settings) -> dict[str, str]:
    """File name -> text of the job_submit plugin's files next to slurm.conf:
    slurm_plugins/job_submit.lua with the lab's SlurmUser uid and the lab's lock-in
    priority where it differs from the plugin's default; the files it loads, as they are."""
    settings = {"  slurm_user_uid = nil,":
                f"  slurm_user_uid = {pwd.getpwnam('slurm').pw_uid}, -- lab: slurm"}
    if s.lockin_priority != JOB_SUBMIT_LOCKIN_PRIORITY:
        settings[f"  lockin_priority = {JOB_SUBMIT_LOCKIN_PRIORITY},"] = (
            f"  lockin_priority = {s.lockin_priority}, -- lab: rsad's slurm.lockin.priority")
    if s.mode == "native":
        settings["  bb_directive = nil,"] = '  bb_directive = "BB_LUA", -- lab: native mode'
    files = {name: (JOB_SUBMIT_SRC.parent / name).read_text() for name in JOB_SUBMIT_PARTS}
    files[JOB_SUBMIT.name] = _configured(JOB_SUBMIT_SRC, settings)
    return files


def site_job_submit(s: Settings) -> str:
    """A site's own job_submit.lua chaining the RSA's module: examples/site-job_submit.lua
    with the module's path here and the lab's settings in its ``rsa.configure``."""
    lines = [f"  slurm_user_uid = {pwd.getpwnam('slurm').pw_uid}, -- lab: slurm"]
    if s.lockin_priority != JOB_SUBMIT_LOCKIN_PRIORITY:
        lines.append(f"  lockin_priority = {s.lockin_priority}, -- lab")
    if s.mode == "native":
        lines.append('  bb_directive = "BB_LUA", -- lab: native mode')
    return _configured(SITE_JOB_SUBMIT_SRC, {
        'local RSA_MODULE = "/etc/slurm/rsa_job_submit.lua"':
            f'local RSA_MODULE = "{CONF_DIR}/rsa_job_submit.lua" -- lab',
        "  slurm_user_uid = nil, -- `id -u slurm`": "\n".join(lines)})


def install_job_submit(s: Settings, site: bool = False) -> None:
    """The job_submit plugin's files next to slurm.conf; job_submit.lua last, so a
    slurmctld that rereads it (its mtime changed) finds the files it loads in place.
    ``site``: a site's own job_submit.lua (site_job_submit) in place of the RSA's, the
    module beside it (tests/e2e/test_site_chaining.py; the RSA's own again without)."""
    files = job_submit_files(s)
    if site:
        files[JOB_SUBMIT.name] = site_job_submit(s)
    # slurmctld rereads job_submit.lua only when its mtime (whole seconds) grew
    before = JOB_SUBMIT.stat().st_mtime if JOB_SUBMIT.exists() else 0.0
    for name in sorted(files, key=lambda n: n == JOB_SUBMIT.name):
        path = CONF_DIR / name
        path.write_text(files[name])
        path.chmod(0o644)
    stamp = max(float(int(time.time())), float(int(before) + 1))
    os.utime(JOB_SUBMIT, (stamp, stamp))


def _configured(src: Path, settings: dict[str, str]) -> str:
    """``src`` with each CONFIG line of ``settings`` (exactly once there) replaced."""
    text = src.read_text()
    for setting, value in settings.items():
        if text.count(setting) != 1:
            raise LabError(f"{src}: expected one line {setting.strip()!r}")
        text = text.replace(setting, value)
    return text


def slurm_polls() -> bool:
    """Whether this host's Slurm is 24.05 or later (``slurmctld -V``: e.g. slurm
    24.11.5), whose burst_buffer/lua polls a stage's end and knows PollInterval."""
    said = run(["slurmctld", "-V"], timeout=30).stdout.split()[-1]
    major, minor = (int(x) for x in said.split("-")[0].split(".")[:2])
    return (major, minor) >= (24, 5)


def burst_buffer_conf(polls: bool = True) -> str:
    """The lab's burst_buffer.conf: no TeardownFailure, so a failed stage-out keeps its
    data (and a failed stage-in its job held); timeouts and polls short enough for tests.
    ``polls``: Slurm 24.05+ (22.05 knows no PollInterval: its slurmctld stops on it,
    ``bb_load_config: ... Invalid argument``)."""
    return "\n".join([
        "# Generated by lab/rsalab/slurm.py for the rsa-scheduler lab. Do not edit.",
        "Directive=BB_LUA",
        "StageInTimeout=900",
        "StageOutTimeout=900",
        "OtherTimeout=300",
        # Slurm 24.05+ poll a stage's end (test_data_in/test_data_out) every PollInterval
        # (15 s by default, as the cluster lab keeps it): a job starts up to one poll
        # after its input is staged. Sooner here, for the tests' time.
        *(["PollInterval=5"] if polls else []),
        "",
    ])


def install_burst_buffer(s: Settings) -> None:
    """Native mode: slurm_plugins/burst_buffer.lua next to slurm.conf (rsa-bb of the
    lab's venv, rsad's TCP API, the pools file rsad writes) and burst_buffer.conf."""
    text = _configured(BB_LUA_SRC, {
        '  rsa_bb = "/usr/bin/rsa-bb",': f'  rsa_bb = "{s.venv / "bin" / "rsa-bb"}", -- lab',
        "  api = nil,": f'  api = "{BB_API}", -- lab: rsad\'s TCP API',
        '  pools_file = "/run/rsa/bb-pools.json",': f'  pools_file = "{BB_POOLS}", -- lab',
    })
    BB_LUA.write_text(text)
    BB_LUA.chmod(0o644)
    BB_CONF.write_text(burst_buffer_conf(slurm_polls()))
    BB_CONF.chmod(0o644)


def plugstack_conf(mode: str, plugin: Path = SPANK_SO) -> str:
    """The lab's plugstack.conf: the rsa SPANK plugin, loaded as ``mode``."""
    if mode not in SPANK_MODES:
        raise LabError(f"RSA_LAB_SPANK={mode!r}: use one of {', '.join(SPANK_MODES)}")
    head = "# Generated by lab/rsalab/slurm.py for the rsa-scheduler lab. Do not edit.\n"
    if mode == "off":
        return head + f"# rsa SPANK plugin off (RSA_LAB_SPANK=off): {plugin}\n"
    return head + f"{mode} {plugin} node_dir=/run/rsa/node\n"


def install_spank(mode: str) -> None:
    """Build slurm_plugins/spank (its Makefile, -Werror), copy it next to slurm.conf and
    name it in plugstack.conf. slurmd and every slurmstepd read plugstack.conf."""
    if mode != "off":
        build = CONF_DIR / "spank-build"
        make_dir(build, 0o755)
        r = run(["make", "-s", "-C", str(SPANK_SRC), f"BUILD={build}"], check=False,
                timeout=300)
        if r.returncode != 0:
            raise LabError(f"building the SPANK plugin failed: {(r.stderr or r.stdout)[-800:]}")
        shutil.copy2(build / "rsa_spank.so", SPANK_SO)
        SPANK_SO.chmod(0o755)
    PLUGSTACK.write_text(plugstack_conf(mode))
    PLUGSTACK.chmod(0o644)


def _link_etc_conf() -> None:
    if ETC_CONF.is_symlink() and os.readlink(ETC_CONF) == str(CONF):
        ETC_MARK.touch()
        return
    if ETC_CONF.exists() or ETC_CONF.is_symlink():
        log(f"{ETC_CONF} exists and is not ours: clients need SLURM_CONF={CONF}")
        return
    ETC_CONF.parent.mkdir(parents=True, exist_ok=True)
    ETC_MARK.touch()
    ETC_CONF.symlink_to(CONF)


def _all_idle(s: Settings) -> bool:
    r = run(["sinfo", "-h", "-N", "-o", "%N %t"], env=ENV, check=False, timeout=15)
    states = dict(line.split() for line in r.stdout.splitlines() if line.strip())
    return all(states.get(n) == "idle" for n in s.compute_nodes)


def down(s: Settings) -> None:
    for node in reversed(s.compute_nodes):
        nsfile = NS / node
        ns_id = nsfile.read_text().strip() if nsfile.exists() else None
        stop_named(f"slurmd-{node}", grace=5)
        if ns_id:  # job steps left behind in the node
            for pid in ns_members(ns_id):
                stop_pid(pid, f"process {pid} left in {node}", grace=2)
            nsfile.unlink(missing_ok=True)
    stop_named("slurmctld", grace=10)
    stop_named("slurmdbd", grace=10)
    stop_named("mariadbd", grace=20)
    stop_named("munged", grace=5)
    if ETC_MARK.exists():
        if ETC_CONF.is_symlink() and os.readlink(ETC_CONF) == str(CONF):
            ETC_CONF.unlink()
        ETC_MARK.unlink()
    shutil.rmtree(DATA / "slurm", ignore_errors=True)
    shutil.rmtree(DATA / "mysql", ignore_errors=True)
    shutil.rmtree(CONF_DIR, ignore_errors=True)
    shutil.rmtree(NODE_BIN, ignore_errors=True)
    BB_POOLS.unlink(missing_ok=True)
