"""``rsa nodes check --compute`` (node/check.py): the parsers, the SPANK plugin's Slurm
version read from the plugin built here, what a plugin of another Slurm release means for
the node's jobs (optional or required), and a compute node that lacks everything (a
slurm.conf, plugstack.conf and client file of the test's own). The lab runs it on its
compute nodes (tests/integration/test_nodes_check.py)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from rsa_scheduler.node.check import (
    SPANK_FIX,
    _spank_lacks,
    check_compute,
    conf_value,
    plugin_version,
    release,
    spank_entries,
    spank_plugins,
    version_number,
)
from tests.unit.test_spank import build  # noqa: F401  (module-scoped fixture)


def test_slurm_conf_and_plugstack_lines() -> None:
    text = "Prolog=/a # old\nprolog = /usr/lib/rsa-scheduler/rsa-prolog\n#Epilog=/x\n"
    assert conf_value(text, "Prolog") == "/usr/lib/rsa-scheduler/rsa-prolog"
    assert conf_value(text, "Epilog") is None
    stack = ("optional /usr/lib/x/slurm-wlm/rsa_spank.so node_dir=/run/rsa/node\n"
             "# required /old/rsa_spank.so\nrequired /usr/lib/other.so\ninclude /etc/x/*\n")
    assert spank_plugins(stack) == ["/usr/lib/x/slurm-wlm/rsa_spank.so"]
    assert spank_entries(stack) == [("optional", "/usr/lib/x/slurm-wlm/rsa_spank.so")]
    assert version_number("slurm-wlm 22.05.8\n") == 0x160508
    assert version_number("slurm 23.02.1") == (23 << 16) | (2 << 8) | 1
    assert version_number("no version") is None
    assert release(0x160508) == "22.05"


@pytest.mark.skipif(not shutil.which("slurmd", path="/usr/sbin"), reason="needs slurmd")
def test_the_plugins_slurm_release_is_the_one_it_was_built_for(build: Path) -> None:  # noqa: F811
    """The plugin as its Makefile builds it against this host's libslurm-dev (test_spank's
    build) says the release slurmd says."""
    running = version_number(subprocess.run(["/usr/sbin/slurmd", "-V"], capture_output=True,
                                            text=True, check=True, timeout=30).stdout)
    assert running is not None
    assert plugin_version(str(build / "rsa_spank.so")) >> 8 == running >> 8


def test_a_plugin_of_another_release_is_told_with_what_it_means_for_jobs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Slurm upgrade's window: slurmd of 24.11, plugins built for 22.05. Optional, jobs
    run without it; required, none starts and a batch job drains the node (both seen in
    the cluster lab, tests/cluster/test_spank_release.py)."""
    monkeypatch.setattr("rsa_scheduler.node.check._slurm_version", lambda: 0x180B05)
    monkeypatch.setattr("rsa_scheduler.node.check.plugin_version", lambda path: 0x160508)
    (tmp_path / "plugstack.conf").write_text("optional /a/rsa_spank.so\n"
                                             "required /b/rsa_spank.so node_dir=/x\n")
    told = _spank_lacks(f"PlugStackConfig={tmp_path}/plugstack.conf\n",
                        tmp_path / "slurm.conf")
    refused = "the SPANK plugin {} for Slurm 24.11 (it was built for 22.05; slurmstepd " \
              "refuses it; {}): " + SPANK_FIX
    assert told == [
        refused.format("/a/rsa_spank.so", "plugstack.conf has it optional: jobs run here "
                       "without it, with no RSA_* variables and no private mounts"),
        refused.format("/b/rsa_spank.so", "plugstack.conf requires it: no job step starts "
                       "here, and a batch job drains this node")]
    monkeypatch.setattr("rsa_scheduler.node.check.plugin_version", lambda path: 0x180B02)
    assert _spank_lacks(f"PlugStackConfig={tmp_path}/plugstack.conf\n",
                        tmp_path / "slurm.conf") == []  # a point release of the same


def test_a_compute_node_that_lacks_everything_is_told_each_fix(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("rsa_scheduler.node.check.LOGIN_PATH", str(tmp_path / "bin"))
    monkeypatch.setattr("rsa_scheduler.client.DEFAULT_SOCKET", str(tmp_path / "rsad.sock"))
    monkeypatch.setattr("rsa_scheduler.munge.encode", lambda payload: "CRED")
    bad_so = tmp_path / "rsa_spank.so"
    bad_so.write_text("not a shared object")
    (tmp_path / "plugstack.conf").write_text(f"required {bad_so}\n")
    (tmp_path / "slurm.conf").write_text("Epilog=/nonexistent/rsa-epilog\n")
    env = {"SLURM_CONF": str(tmp_path / "slurm.conf"),
           "RSA_CLIENT_CONFIG": str(tmp_path / "client.conf"), "PATH": "/usr/bin:/bin"}
    report = check_compute(str(tmp_path / "rsa.yaml"), env)
    lacks = list(report.lacks)
    assert lacks[0].startswith(f"rsad's address in {tmp_path}/client.conf: write it there, "
                               "mode 0644 (api = HOST:PORT")
    assert lacks[1].startswith("rsad's API from here (rsad's socket ")
    assert lacks[2].startswith(f"command rsa on a job's PATH ({tmp_path}/bin): install "
                               "rsa-scheduler on this node")
    assert lacks[3] == (f"Prolog in {tmp_path}/slurm.conf: Prolog=/usr/lib/rsa-scheduler/"
                        "rsa-prolog (it mounts the job's RAMDISK)")
    assert lacks[4].startswith(f"Epilog /nonexistent/rsa-epilog of {tmp_path}/slurm.conf "
                               "(not an executable here)")
    assert lacks[5].startswith(f"the SPANK plugin {bad_so} of {tmp_path}/plugstack.conf "
                               "(cannot load it")
    assert "; plugstack.conf requires it: no job step starts here" in lacks[5]
    assert lacks[6].startswith("the node hooks' configuration (")
    assert len(lacks) == 7 and not report.ok
