"""rsa-hook (PrologSlurmctld/EpilogSlurmctld, as SlurmUser): where it finds rsad, and what
it says when it cannot (slurmctld drops the hooks' output: syslog is their log). The lab
runs the shipped hooks under the real slurmctld with the documented file modes
(tests/integration/test_client_conf.py)."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from rsa_scheduler import hooks

JOB = {"SLURM_JOB_ID": "42", "SLURM_JOB_USER": "alice", "SLURM_JOB_UID": "1000",
       "SLURM_JOB_NODELIST": "c1", "SLURM_JOB_NUM_NODES": "1"}


@pytest.fixture
def syslog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    """A syslog socket of the test's own in place of /dev/log."""
    path = tmp_path / "log"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
        sock.settimeout(5)
        monkeypatch.setattr(hooks, "SYSLOG", str(path))
        yield sock


def test_rsad_is_found_from_the_client_file_without_reading_rsa_yaml(tmp_path: Path) -> None:
    conf = tmp_path / "client.conf"
    conf.write_text(f"socket = {tmp_path / 'no.sock'}\napi = ctl1:6820\n")
    env = {"RSA_CLIENT_CONFIG": str(conf), "RSA_CONFIG": str(tmp_path / "unreadable.yaml")}
    assert hooks._api_address(env) == ("ctl1:6820", hooks.DEFAULT_TIMEOUT)
    assert hooks._api_address({**env, "RSA_HOOK_TIMEOUT": "5"})[1] == 5.0


def test_a_hook_that_cannot_read_rsa_yaml_says_so_in_syslog_and_exits_0(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, syslog: socket.socket,
        capsys: pytest.CaptureFixture[str]) -> None:
    """As the operator guide sets it up, rsa.yaml is root's, 0640: SlurmUser cannot read
    it. Without a client file the hook must say so, not guess a socket."""
    cfg = tmp_path / "rsa.yaml"
    cfg.write_text("pool: {}\n")
    cfg.chmod(0o640)
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if str(p) == str(cfg)
                        else real_access(p, mode))
    env = {**JOB, "RSA_CONFIG": str(cfg), "RSA_CLIENT_CONFIG": str(tmp_path / "none.conf")}
    assert hooks.run("prolog_slurmctld", env) == 0
    logged = syslog.recv(4096).decode()
    assert logged.startswith(f"<28>rsa-hook[{os.getpid()}]: rsa-hook prolog_slurmctld job 42: "
                             "rsad not told (cannot find rsad: no RSA_API, no ")
    assert f"{cfg} is not readable by" in logged
    assert f"write rsad's address into {tmp_path / 'none.conf'} (api = HOST:PORT" in logged
    assert logged.split(": ", 1)[1] in capsys.readouterr().err


def test_an_unreachable_rsad_is_logged_and_the_hook_exits_0(
        tmp_path: Path, syslog: socket.socket, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("rsa_scheduler.munge.encode", lambda payload: "CRED")
    env = {**JOB, "RSA_API": str(tmp_path / "gone.sock")}
    assert hooks.run("epilog_slurmctld", env) == 0
    assert "rsa-hook epilog_slurmctld job 42: rsad not told (cannot reach rsad at " in \
        syslog.recv(4096).decode()


def test_without_a_syslog_socket_stderr_still_has_the_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(hooks, "SYSLOG", str(tmp_path / "no-log"))
    assert hooks.run("prolog_slurmctld", {}) == 0
    assert capsys.readouterr().err == ("rsa-hook prolog_slurmctld: no SLURM_JOB_ID in the "
                                       "environment\n")


def test_run_by_slurmctld_the_line_is_in_slurmctlds_own_log(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """slurmctld drops the hooks' output and logs nothing of a hook that exits 0; a host
    without syslog (the cluster lab's controller) would lose the line. Run by slurmctld
    (SLURM_SCRIPT_CONTEXT), the hook appends it to SlurmctldLogFile, SlurmUser's, in
    slurmctld's own format; never one it would have to create, never through a symlink,
    and not when run by hand."""
    monkeypatch.setattr(hooks, "SYSLOG", str(tmp_path / "no-log"))
    log = tmp_path / "slurmctld.log"
    log.write_text("[2026-11-29T04:00:00.000] slurmctld version 22.05.8 started\n")
    conf = tmp_path / "slurm.conf"
    conf.write_text(f"ClusterName=x\nslurmctldlogfile = {log}  # the controller's\n")
    client = tmp_path / "client.conf"
    client.write_text("where = ctl\n")
    env = {**JOB, "SLURM_CONF": str(conf), "RSA_CLIENT_CONFIG": str(client),
           "SLURM_SCRIPT_CONTEXT": "prolog_slurmctld"}
    assert hooks.run("prolog_slurmctld", env) == 0
    said = capsys.readouterr().err.strip()
    assert said.startswith("rsa-hook prolog_slurmctld job 42: rsad not told (")
    assert f"{client}:1: expected one of api = ..., socket = ..." in said
    lines = log.read_text().splitlines()
    assert len(lines) == 2 and lines[1].endswith(f"] error: {said}"), lines
    assert lines[1][:25].startswith("[20") and lines[1][24] == "]", lines[1]
    # by hand (no slurmctld context), a log given as a symlink, a log that is not there
    for context, target in (("", log), ("epilog_slurmctld", tmp_path / "link"),
                            ("epilog_slurmctld", tmp_path / "none.log")):
        if target.name == "link":
            target.symlink_to(log)
        conf.write_text(f"SlurmctldLogFile={target}\n")
        assert hooks.run("epilog_slurmctld", {**env, "SLURM_SCRIPT_CONTEXT": context}) == 0
    assert len(log.read_text().splitlines()) == 2
    assert not (tmp_path / "none.log").exists()
