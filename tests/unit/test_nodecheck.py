"""``rsa nodes check`` (issue 18): the script it runs on a node, run here by a real shell."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from rsa_scheduler.fs.base import Need, command_need
from rsa_scheduler.fs.beeond import BeeondBackend, BeeondOptions, needs_for
from rsa_scheduler.fs.moosefs import MooseFsBackend
from rsa_scheduler.fs.nodecheck import COMMON_NEEDS, NodeReport, check_script, parse_check


def run(script: str) -> str:
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=30,
                          check=True).stdout


def test_what_is_missing_is_one_line_each_with_its_fix(tmp_path: Path) -> None:
    needs = [command_need("sh", "dash"), command_need("no-such-tool-rsa", "rsa-tools"),
             Need("a file with a 'quote'", "[ -e /nonexistent/'x' ]", "touch it; don't")]
    lacks = parse_check(run(check_script(needs, str(tmp_path / "pool dir"))))
    assert lacks == (
        "command no-such-tool-rsa: install rsa-tools",
        "a file with a 'quote': touch it; don't",
        f"pool directory {tmp_path}/pool dir: create it (a tmpfs for ram, a file system on "
        f"the SSD for ssd): mkdir -p {tmp_path}/pool dir")
    (tmp_path / "pool dir").mkdir()
    assert parse_check(run(check_script(needs[:1], str(tmp_path / "pool dir")))) == ()


def test_every_backends_needs_are_valid_shell_and_name_a_fix(tmp_path: Path) -> None:
    beeond7 = needs_for(BeeondOptions(beegfs_major=7, use_pdsh=True, config_dir="/a 'b",
                                      client_options=("connInterfacesList=/x y",)))
    for needs in (COMMON_NEEDS, MooseFsBackend.node_needs, BeeondBackend.node_needs,
                  beeond7):
        assert needs and all(n.what and n.fix for n in needs)
        out = run(check_script(needs, str(tmp_path)))  # runs: no shell syntax error
        assert set(parse_check(out)) <= {f"{n.what}: {n.fix}" for n in needs}
    assert any("beegfs" in n.what for n in BeeondBackend.node_needs)


def test_a_report_says_ok_what_is_lacking_or_why_it_could_not_ask() -> None:
    assert NodeReport("rsa1", ()).lines() == ["rsa1: ok"]
    assert NodeReport("rsa1", ("command nft: install nftables",)).lines() == [
        "rsa1: lacks command nft: install nftables"]
    bad = NodeReport("rsa1", (), "cannot connect to 10.0.0.1:22: refused")
    assert not bad.ok and bad.lines() == [
        "rsa1: cannot check: cannot connect to 10.0.0.1:22: refused"]


def test_rsa_nodes_check_asks_for_what_the_configured_beeond_options_need(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI builds the backend from the configuration, as rsad does: a node is asked
    for pdsh at the configured path and for the config directory (here a real shell on
    this machine stands in for the node's SSH)."""
    from rsa_scheduler.cli.main import cli
    from rsa_scheduler.hosts import LocalHost
    from rsa_scheduler.remote import HostPool
    from tests.clirunner import cli_runner

    # (a pool below /tmp is refused by the configuration check itself)
    site = tmp_path / "rsa.yaml"
    site.write_text(f"""
pool:
  nodes:
    - {{names: rsa1, capacity: 1G, pool_dir: /var/lib/rsa-ram-test-{os.getpid()}}}
allocation: {{max_nodes: 1}}
filesystem:
  backend: {{ram: beeond}}
  beeond:
    use_pdsh: true
    pdsh_path: {tmp_path}/bin/pdsh
    config_dir: {tmp_path}/beegfs
""")
    site.chmod(0o600)
    monkeypatch.setattr(HostPool, "from_config",
                        classmethod(lambda cls, cfg: cls({"rsa1": LocalHost("rsa1")})))
    result = cli_runner().invoke(cli, ["nodes", "check", "--config", str(site)])
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert (f"rsa1: lacks pdsh {tmp_path}/bin/pdsh: install pdsh there or fix "
            "filesystem.beeond.pdsh_path") in lines
    assert (f"rsa1: lacks config directory {tmp_path}/beegfs: create it on every RSA node "
            "with the site's BeeGFS config files (filesystem.beeond.config_dir)") in lines
    (tmp_path / "beegfs").mkdir()
    again = cli_runner().invoke(cli, ["nodes", "check", "--config", str(site)])
    assert not any("config directory" in line for line in again.output.splitlines())
    assert any("lacks pdsh" in line for line in again.output.splitlines())


def test_a_pool_without_a_filesystem_of_its_own_is_lacking(tmp_path: Path) -> None:
    """A pool directory that exists on a filesystem users write (here: this host's /tmp
    or wherever pytest keeps tmp_path) is reported with the fix, over the host seam."""
    from rsa_scheduler.fs.nodecheck import check_node
    from rsa_scheduler.hosts import LocalHost

    report = check_node("rsa1", LocalHost("rsa1"), [command_need("sh", "dash")],
                        str(tmp_path))
    assert not report.ok
    (line,) = report.lines()
    assert line.startswith(f"rsa1: lacks a pool no user can fill ({tmp_path} is not a "
                           "mount point: it shares the filesystem of ")
    assert "/var/lib/rsa-ram tmpfs size=<capacity>,mode=0700,nosuid,nodev" in line


def test_moosefs_nodes_are_asked_for_every_tool_a_build_runs() -> None:
    """A build waits for its chunkservers with python3, a health check asks mfscli
    (moosefs-cli, a package of its own), a build sets goal and trash time: a node without
    them failed its first build."""
    fixes = {n.what: n.fix for n in MooseFsBackend.node_needs}
    assert fixes["command mfscli"].startswith("install moosefs-cli")
    assert fixes["command python3"].startswith("install python3")
    assert {"command mfssetgoal (3.0) or mfssetsclass (4.x)",
            "command mfssettrashtime (3.0) or mfssettrashretention (4.x)", "command ss",
            "command pgrep"} <= set(fixes)
    assert {"command xargs", "command b2sum", "command findmnt"} <= {
        n.what for n in COMMON_NEEDS}
    assert {n.what for n in MooseFsBackend.client_needs} == {
        "command mfsmount", "command nft", "the fuse device"}
