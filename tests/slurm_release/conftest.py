"""The Slurm release tier (issue 31): a real slurmctld and two slurmd of one Slurm release
(``RSA_SLURM_RELEASE``: 24.11, Debian 13's; 26.05, Debian testing's), chrooted in
namespaces of the test's own (tests/slurm_release/cluster.py), with our SPANK plugin built
against that release's headers, job_submit.lua and burst_buffer.lua loaded. Run as root
(``make slurm24-test``, ``make slurm26-test``); no lab. Skipped, with the reason, when the
release's Debian root cannot be built here (no Debian archive, no debootstrap)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from rsa_scheduler.core.policy import NodeState
from rsa_scheduler.daemon.native import pools_json
from tests.slurm_release.cluster import (
    RELEASE,
    REPO,
    RUN,
    Cluster,
    holder,
    release_root,
    slurm_conf,
    start_daemons,
    write,
)

PLUGINS = REPO / "slurm_plugins"
JOB_SUBMIT_PARTS = ("rsa_job_submit.lua", "rsa_grammar.lua", "rsa_text.lua",
                    "rsa_directives.lua")
BB_LOG = f"{RUN}/bb.log"  # every rsa-bb call the stub below answered, one line each
# rsa-bb as rsad answers it (burst_buffer.lua runs it): each call logged, "ok" answered,
# a status with two lines; `--once data_in|data_out JOB` (Slurm's polls) "busy" the first
# time, "ok" the next; while the file FAIL_DATA_IN exists, its text is the answer to
# every `--once data_in` (a failed stage-in). The hooks' calling of it is the Slurm
# release's, for real.
FAIL_DATA_IN = f"{RUN}/fail-data_in"
RSA_BB = f"""#!/bin/sh
echo "$*" >> {BB_LOG}
if [ "$1" = --once ] && [ "$2" = data_in ] && [ -e {FAIL_DATA_IN} ]; then
  cat {FAIL_DATA_IN}
  exit 0
fi
if [ "$1" = --once ]; then
  seen={RUN}/once-$2-$3
  if [ -e "$seen" ]; then echo "ok $2 done"; else : > "$seen"; echo "busy $2 running"; fi
  exit 0
fi
case "$1" in
  status) echo "ok RSA nodes: 1 free"; echo "jobs: 0" ;;
  *) echo ok ;;
esac
"""


def configured(src: Path, settings: dict[str, str]) -> str:
    """``src`` with each of its CONFIG lines in ``settings`` (exactly once there) replaced."""
    text = src.read_text()
    for line, value in settings.items():
        assert text.count(line) == 1, f"{src}: expected one line {line.strip()!r}"
        text = text.replace(line, value)
    return text


def install(c: Cluster, accounting: bool = False) -> None:
    """slurm.conf, the SPANK plugin (built here, against the release's spank.h, -Werror, by its
    own Makefile) in plugstack.conf as ``required``, job_submit.lua and its parts in native
    mode, burst_buffer.lua with the stub rsa-bb, burst_buffer.conf, rsad's pools file."""
    etc = c.path(f"{RUN}/etc")
    write(etc / "slurm.conf", slurm_conf(accounting))
    # 24.11's slurmd starts a cgroup plugin unless told not to (22.05's did not): none here
    # (proctrack/linuxproc, task/none), and nothing touches the host's cgroup tree
    write(etc / "cgroup.conf", "CgroupPlugin=disabled\n")
    src = c.path(f"{RUN}/spank-src")
    shutil.copytree(PLUGINS / "spank", src, ignore=shutil.ignore_patterns("*.so", "*.o",
                                                                          "rsa-spank-check"))
    c.path(f"{RUN}/spank").mkdir()
    # a compile: its own bound (the default 30 s is for Slurm's commands), as the lab's
    # build of the plugin has; under make test's lanes on 2 cores gcc takes its time
    c.run(["make", "-s", "-C", f"{RUN}/spank-src", f"BUILD={RUN}/spank"], timeout=300)
    write(etc / "plugstack.conf", f"required {RUN}/spank/rsa_spank.so node_dir={RUN}/node\n")
    for name in JOB_SUBMIT_PARTS:
        write(etc / name, (PLUGINS / name).read_text())
    write(etc / "job_submit.lua", configured(PLUGINS / "job_submit.lua", {
        "  bb_directive = nil,": '  bb_directive = "BB_LUA", -- slurm_release: native mode'}))
    write(c.path(f"{RUN}/rsa-bb"), RSA_BB, 0o755)
    write(c.path(BB_LOG), "")
    write(etc / "burst_buffer.lua", configured(PLUGINS / "burst_buffer.lua", {
        '  rsa_bb = "/usr/bin/rsa-bb",': f'  rsa_bb = "{RUN}/rsa-bb",',
        '  pools_file = "/run/rsa/bb-pools.json",': f'  pools_file = "{RUN}/bb-pools.json",'}))
    write(etc / "burst_buffer.conf", "Directive=BB_LUA\nStageInTimeout=30\n"
          "StageOutTimeout=30\nOtherTimeout=30\nPollInterval=1\n")
    write(c.path(f"{RUN}/bb-pools.json"),
          pools_json([("ram", 1 << 30, NodeState.UP, None)]))


@pytest.fixture(scope="session")
def root() -> Path:
    if os.geteuid() != 0:
        pytest.skip(f"the Slurm {RELEASE.version} tests run as root (chroot, namespaces)")
    found, why = release_root()
    if found is None:
        pytest.skip(why)
    return found


@pytest.fixture(scope="session")
def cluster(root: Path) -> Iterator[Cluster]:
    """The cluster without accounting (accounting_storage/none, priority/basic)."""
    with holder(root) as c:
        install(c)
        start_daemons(c)
        yield c


@pytest.fixture(scope="module")
def acct_cluster(root: Path) -> Iterator[Cluster]:
    """A second cluster, with slurmdbd (MariaDB) and priority/multifactor: its own
    namespaces, so its ports never meet the first's."""
    with holder(root) as c:
        install(c, accounting=True)
        start_daemons(c, accounting=True)
        yield c
