"""What the lab tells its users: /run/rsa-lab/env (shell KEY=VALUE) and rsa.yaml; which
daemons a complete lab runs (cli.py checks them, selftest.py compares them)."""

from __future__ import annotations

import os
import shlex

from . import nodecpu, pfs, rsad, rsanodes, slurm, ssd, users
from .common import ENV_FILE, HOOKS_LOG, PFS_NET, REPO, RSA_NET, STATE, Settings

RSA_YAML = STATE / "rsa.yaml"


def daemons(s: Settings) -> list[str]:
    """Every long-running process of a complete lab, by pidfile name."""
    names = ["munged", "slurmctld", "mfsmaster", "mfsmount", "pfsnet", "rsad"]
    names += [f"mfschunkserver{i}" for i in range(1, pfs.N_CHUNKSERVERS + 1)]
    names += [f"slurmd-{n}" for n in s.compute_nodes]
    names += [f"sshd-{n}" for n in s.rsa_nodes]
    names += ["slurmdbd", "mariadbd"] if s.accounting else []
    return names


def write(s: Settings) -> None:
    ssd_nodes = ",".join(f"rsa{i}" for i in s.ssd_nodes)
    pool = ssd.status()
    facts = {
        "RSA_LAB_USER": s.user,
        "RSA_LAB_OTHER_USER": s.other_user,
        # rsad's TCP API, where compute nodes and slurmctld's hooks reach it
        "RSA_LAB_API_TCP": rsad.LISTEN,
        # a supplementary group of the lab user's (here rsad's API group, users.py)
        "RSA_LAB_PROJECT_GROUP": users.API_GROUP,
        "RSA_LAB_PFS": f"{s.pfs_mount}/home/{s.user}",
        "RSA_LAB_OTHER_PFS": f"{s.pfs_mount}/home/{s.other_user}",
        "RSA_LAB_PFS_ROOT": str(s.pfs_mount),
        "RSA_LAB_PFS_RATE": s.pfs_rate,
        "RSA_LAB_PROLOG_FLAGS": s.prolog_flags,
        "RSA_LAB_PFS_MASTER": pfs.MASTER,
        "RSA_LAB_COMPUTE_NODES": f"c[1-{s.n_compute}]",
        "RSA_LAB_RSA_NODES": f"rsa[1-{s.n_rsa}]",
        "RSA_LAB_RSA_ADDRESSES": ",".join(rsanodes.addr(i) for i in range(1, s.n_rsa + 1)),
        "RSA_LAB_RSA_SSD_NODES": ssd_nodes,
        "RSA_LAB_POOL_RAM": str(s.pool_root / "ram"),
        "RSA_LAB_POOL_SSD": str(s.pool_root / "ssd"),
        "RSA_LAB_RAM_SIZE": s.ram_size,
        "RSA_LAB_TIERS": s.tiers,
        "RSA_LAB_SSD_SIZE": s.ssd_size,
        # the ssd pools: "loop" (ext4 image on a loop device) or "dir" (no loop device);
        # their cap in bytes/s each way; "on" or "off: why" (tests skip with the why)
        "RSA_LAB_SSD_POOL": pool["pool"],
        "RSA_LAB_SSD_RATE": pool["rate"],
        "RSA_LAB_SSD_THROTTLE": pool["throttle"],
        # the RSA nodes' cpu cgroup (nodecpu.py): its path and cpu.weight, empty if none
        "RSA_LAB_NODE_CPU_CGROUP": str(nodecpu.existing() or ""),
        "RSA_LAB_NODE_CPU_WEIGHT": s.node_cpu_weight,
        "RSA_LAB_SSH_USER": "root",
        "RSA_LAB_SSH_KEY": str(rsanodes.KEY),
        "RSA_LAB_SSH_KNOWN_HOSTS": str(rsanodes.KNOWN_HOSTS),
        "RSA_LAB_ACCOUNTING": "1" if s.accounting else "0",
        "RSA_LAB_QOS": s.qos if s.accounting else "",
        "RSA_LAB_LOCKIN_METHOD": "qos" if s.accounting else "priority",
        "RSA_LAB_LOCKIN_PRIORITY": "" if s.accounting else str(s.lockin_priority),
        "RSA_LAB_CLUSTER": s.cluster,
        "RSA_LAB_ACCOUNT": s.account,
        "RSA_LAB_PARTITION": s.partition,
        "RSA_LAB_SLURM_CONF": str(slurm.CONF),
        "SLURM_CONF": str(slurm.CONF),
        "RSA_LAB_HOOKS_LOG": str(HOOKS_LOG),
        "RSA_LAB_VENV": str(s.venv),
        # the Python that imports rsa_scheduler, the `rsa` a job finds on its PATH, the
        # directory of the shipped hook wrappers (the cluster lab's: the package's)
        "RSA_LAB_PYTHON": str(s.venv / "bin" / "python"),
        "RSA_LAB_RSA_ON_PATH": "/usr/local/bin/rsa",  # slurm.NODE_BIN, bound there
        "RSA_LAB_HOOK_WRAPPERS": str(REPO / "prolog_epilog"),
        # rsad's output and its event store (the cluster lab's: the package's paths)
        "RSA_LAB_RSAD_LOG": str(STATE / "log" / "rsad.out"),
        "RSA_LAB_RSAD_STORE": str(rsad.STATE_DIR / "rsa.db"),
        "RSA_LAB_RSA_CONFIG": str(RSA_YAML),
        "RSA_LAB_MODE": s.mode,
        "RSA_LAB_MAIL_DIR": str(slurm.MAIL_DIR),
    }
    body = "".join(f"{k}={shlex.quote(v)}\n" for k, v in facts.items())
    tmp = ENV_FILE.with_suffix(".tmp")
    tmp.write_text("# rsa-scheduler lab facts, written by `make lab-up`\n" + body)
    tmp.chmod(0o644)
    tmp.replace(ENV_FILE)  # atomic: the env file exists only once the lab is complete


def write_config(s: Settings) -> None:
    """rsad's configuration, written before rsad starts (and before the env file)."""
    # as the operator guide sets /etc/rsa/rsa.yaml up: root's, 0640. SlurmUser's hooks
    # (PrologSlurmctld, EpilogSlurmctld) cannot read it: they find rsad through
    # /etc/rsa/client.conf (lab/rsalab/rsad.py)
    RSA_YAML.touch(mode=0o600)
    os.chown(RSA_YAML, 0, 0)
    RSA_YAML.chmod(0o640)
    RSA_YAML.write_text(rsa_yaml(s))


def _pool_nodes(s: Settings) -> str:
    """pool.nodes: every RSA node in the ram tier, or (RSA_LAB_TIERS=mixed) the ssd nodes
    in the ssd tier on their on-disk pool and the others in the ram tier. pool.nodes
    allows each node name once."""
    groups = [("ram", f"rsa[1-{s.n_rsa}]", s.ram_size)]  # tests rewrite this exact line
    if s.tiers == "mixed":
        ssd = [f"rsa{i}" for i in s.ssd_nodes]
        groups = [("ram", ",".join(n for n in s.rsa_nodes if n not in ssd), s.ram_size),
                  ("ssd", ",".join(ssd), s.ssd_size)]
    return "".join(f"""\
    - names: "{names}"
      tier: {tier}
      capacity: {size}
      address: "{RSA_NET}.{{num}}"
      ssh_port: 22
      # MooseFS refuses loopback: the RSA nodes' filesystem servers bind to the host end
      # of the lab's PFS veth (non-loopback, local, guarded), on per-job ports.
      data_address: "{PFS_NET}.1"
      pool_dir: {s.pool_root / tier}
""" for tier, names, size in groups if names)


def rsa_yaml(s: Settings) -> str:
    # rsa3/rsa4 carry an on-disk "ssd" pool at pool_root/ssd (RSA_LAB_POOL_SSD), rsad's ssd
    # tier with RSA_LAB_TIERS=mixed.
    return f"""\
# rsad configuration for the lab (generated by lab-up; see docs/lab.md).
pool:
  nodes:
{_pool_nodes(s)}ssh:
  user: root
  key: {rsanodes.KEY}
  known_hosts: {rsanodes.KNOWN_HOSTS}
  host_key_policy: reject
  # connect, banner and authentication, each (production default 10s; the lab's nodes
  # answer in ~0.15 s): a hung node (its sshd stopped: tests/e2e/test_node_lost.py,
  # test_health.py) costs each attempt to reach it 3 s, not 10 s. rsad tries a banner
  # that never came up to 5 times, so the health loop took ~60 s to mark such a node
  # down, and a teardown without it ~90 s, at 10s.
  connect_timeout: 3s
{rsad.daemon_yaml()}allocation:
  max_nodes: {s.n_rsa}
  max_request: {s.n_rsa}
  # tests/e2e/test_job_shapes.py gives each task of a 4-task array its RAMDISK at once on
  # the lab's 4 RSA nodes (production default: an array holds half the pool at most)
  array_share: 1
staging:
  # the lab's users keep their data on the PFS
  allowed_roots: [/pfs/home, /home, /scratch]
  # short retries so tests see retry -> quarantine in seconds (production: 30s .. 30m)
  retries: 2
  backoff: 2s
  backoff_max: 4s
  # the lab's slurmctld re-evaluates a new job within ~3 s (production default: 10s)
  on_deck_settle: 3s
hooks:
  # the Prolog holds a start at most 30 s (+ hooks.timeout 10 s): lab/hooks/prolog's
  # backstop is 50 s, the lab's PrologEpilogTimeout 60 s (production: 5m, 330 s, 340 s)
  max_hold: 30s
slurm:
  bin_dir: /usr/bin
  mode: {s.mode}
  bb_pools_file: {slurm.BB_POOLS}
  lockin:
    method: {'qos' if s.accounting else 'priority'}
    qos: {s.qos}
{_lockin_priority(s)}"""


def _lockin_priority(s: Settings) -> str:
    if s.accounting:
        return ""
    return (f"    # priority/basic gives ordinary jobs up to 0xffff0000 - 1: the lock-in is above\n"
            f"    priority: {s.lockin_priority}\n")
