"""The beeond backend's command lines and nodefiles (BeeGFS cannot run here: no packages,
no kernel modules), its retry/cleanup behaviour against a scripted host, and a real run
that is skipped with the reason wherever ``beeond`` is not installed."""

from __future__ import annotations

import shutil
import stat
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from rsa_scheduler.fs.base import FsError, FsRequest
from rsa_scheduler.fs.beeond import (
    CONFIG_FILES,
    BeeondBackend,
    auth_setup_argv,
    client_argv,
    nodefile,
    paths,
    port_shift,
    start_argv,
    stop_argv,
)
from rsa_scheduler.fs.registry import backend_class
from rsa_scheduler.hosts import CancelToken, LocalHost
from rsa_scheduler.runner import CommandError, Completed, Identity

REQ = FsRequest(fs_id="job42-c1", job_id="42", nodes=("rsa01", "rsa02", "rsa03"),
                tier="ram", pool_dirs={n: "/dev/shm/rsa" for n in ("rsa01", "rsa02", "rsa03")},
                mount_root="/run/rsa/mnt")


class ScriptedHost:
    """Records argv; fails the commands whose first words match ``fail`` (count times)."""

    def __init__(self, name: str, fail: Mapping[str, int] | None = None,
                 missing: Sequence[str] = ()) -> None:
        self.name = name
        self.calls: list[list[str]] = []
        self.inputs: list[str | None] = []
        self.fail = dict(fail or {})
        self.missing = set(missing)

    def run(self, argv: Sequence[str], *, timeout: float, check: bool = True,
            input: str | None = None, as_user: Identity | None = None,
            env: Mapping[str, str] | None = None,
            cancel: CancelToken | None = None) -> Completed:
        self.calls.append(list(argv))
        self.inputs.append(input)
        key = " ".join(argv[4:6]) if argv[0] == "timeout" else argv[0]
        rc = 0
        if self.fail.get(key, 0) > 0:
            self.fail[key] -= 1
            rc = 1
        if argv[0] == "test" and argv[-1] in self.missing:
            rc = 1
        if argv[:2] == ["sh", "-c"] and "command -v" in argv[2] and "beeond" in self.missing:
            rc = 1
        if rc and check:
            raise CommandError(argv, rc, "ERROR: something hung\n")
        return Completed(tuple(argv), rc, "", "", 0.0)


def test_nodefile_is_one_host_per_line_first_is_management() -> None:
    assert nodefile(["rsa01", "rsa02"]) == "rsa01\nrsa02\n"
    with pytest.raises(FsError, match="duplicate"):
        nodefile(["rsa01", "rsa01"])
    with pytest.raises(FsError):
        nodefile([])


def test_start_argv_matches_the_beeond_cli() -> None:
    shift = port_shift("job42-c1")
    assert start_argv(REQ, timeout=60) == [
        "timeout", "-k", "10", "60", "beeond", "start",
        "-n", "/run/rsa-beeond/job42-c1.nodes", "-d", "/dev/shm/rsa/rsa-beeond-job42-c1",
        "-c", "/run/rsa/mnt/job42-c1", "-i", "/run/rsa-beeond/job42-c1.status",
        "-p", str(shift), "-L", "/var/log/rsa-beeond/job42-c1", "-F", "-q",
        "-f", "/run/rsa-beeond/job42-c1.conf"]
    assert start_argv(REQ, timeout=60, use_pdsh=True)[-3:] == [
        "-P", "-f", "/run/rsa-beeond/job42-c1.conf"]


def test_stop_argv_deletes_data_and_logs_and_cleans_half_starts() -> None:
    assert stop_argv(REQ, timeout=30) == [
        "timeout", "-k", "10", "30", "beeond", "stop",
        "-n", "/run/rsa-beeond/job42-c1.nodes", "-i", "/run/rsa-beeond/job42-c1.status",
        "-L", "-d", "-c", "-q"]


def test_port_shift_is_deterministic_distinct_and_in_range() -> None:
    shifts = {port_shift(f"job{i}-c1") for i in range(200)}
    assert port_shift("job42-c1") == port_shift("job42-c1")
    assert len(shifts) > 190
    assert all(s >= 1000 and 8008 + s < 65536 and s % 10 == 0 for s in shifts)


def test_client_mount_argv() -> None:
    assert client_argv("rsa01", 1230, "/mnt/x") == [
        "mount", "-t", "beegfs", "beegfs_ondemand", "/mnt/x",
        "-osysMgmtdHost=rsa01,connPortShift=1230"]
    assert client_argv("rsa01", 1230, "/mnt/x", "/run/rsa-beeond/j.auth")[-1] == (
        "-osysMgmtdHost=rsa01,connPortShift=1230,connAuthFile=/run/rsa-beeond/j.auth")


def _run_auth_setup(tmp_path: Path, site: str | None) -> tuple[Path, Path]:
    auth, conf = tmp_path / "run" / "j.auth", tmp_path / "run" / "j.conf"
    argv = auth_setup_argv(REQ, site)
    assert argv[4:6] == ["/run/rsa-beeond/job42-c1.auth", "/run/rsa-beeond/job42-c1.conf"]
    argv[4:6] = [str(auth), str(conf)]
    done = subprocess.run(argv, input="s3cret", text=True, capture_output=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return auth, conf


def test_auth_setup_writes_a_root_only_secret_and_every_config_names_it(
        tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "beegfs-meta.conf").write_text("storeUseExtendedAttribs = false\n")
    auth, conf = _run_auth_setup(tmp_path, str(site))
    assert auth.read_text() == "s3cret"
    assert stat.S_IMODE(auth.stat().st_mode) == 0o600
    assert stat.S_IMODE(conf.stat().st_mode) == 0o700
    assert sorted(p.name for p in conf.iterdir()) == sorted(CONFIG_FILES)
    for f in CONFIG_FILES:
        text = (conf / f).read_text()
        assert text.rstrip().endswith(f"connAuthFile = {auth}"), f
        assert stat.S_IMODE((conf / f).stat().st_mode) == 0o600
    assert (conf / "beegfs-meta.conf").read_text().startswith("storeUseExtendedAttribs")
    # a second run (a retried create) starts from a fresh directory
    (conf / "stale").write_text("x")
    _run_auth_setup(tmp_path, None)
    assert sorted(p.name for p in conf.iterdir()) == sorted(CONFIG_FILES)


def test_one_data_path_for_all_nodes() -> None:
    req = FsRequest("j-c1", "1", ("a", "b"), "ram", {"a": "/x", "b": "/y"}, "/m")
    with pytest.raises(FsError, match="one data path"):
        paths(req)


def _backend(first: ScriptedHost, retries: int = 2) -> BeeondBackend:
    hosts = {n: (first if n == "rsa01" else ScriptedHost(n)) for n in REQ.nodes}
    b = BeeondBackend(hosts, create_timeout=60, destroy_timeout=30, retries=retries)
    b.stop_backoff = 0
    return b


def test_create_writes_the_nodefile_then_starts_on_the_first_node() -> None:
    first = ScriptedHost("rsa01", missing=["/run/rsa-beeond/job42-c1.status"])
    spec = _backend(first).create(REQ)
    starts = [c for c in first.calls if c[:1] == ["timeout"]]
    assert starts == [start_argv(REQ, timeout=60)]
    assert "rsa01\nrsa02\nrsa03\n" in first.inputs
    assert spec.rsa_mountpoint == "/run/rsa/mnt/job42-c1"
    assert _backend(first).client_mount_argv(spec, "/c")[-1] == (
        f"-osysMgmtdHost=rsa01,connPortShift={port_shift(REQ.fs_id)},"
        "connAuthFile=/run/rsa-beeond/job42-c1.auth")


def test_create_gives_every_node_the_same_fresh_secret_and_the_root_to_the_user() -> None:
    first = ScriptedHost("rsa01", missing=["/run/rsa-beeond/job42-c1.status"])
    b = _backend(first)
    req = FsRequest(REQ.fs_id, REQ.job_id, REQ.nodes, REQ.tier, REQ.pool_dirs,
                    REQ.mount_root, owner=(1001, 1002))
    spec = b.create(req)
    secrets = set()
    for node in REQ.nodes:
        host = b.hosts[node]
        assert isinstance(host, ScriptedHost)
        setups = [i for c, i in zip(host.calls, host.inputs, strict=True)
                  if c == auth_setup_argv(REQ)]
        assert len(setups) == 1 and setups[0] is not None, node  # on stdin, not in argv
        secrets.add(setups[0])
    secret = secrets.pop()
    assert not secrets and len(secret) == 64
    assert secret not in " ".join(" ".join(c) for c in first.calls)
    assert secret not in str(spec.to_json())  # the spec is recorded and shown to users
    owner = first.calls.index(["sh", "-c", 'chown "$1" "$0" && chmod 0700 "$0"',
                               "/run/rsa/mnt/job42-c1", "1001:1002"])
    assert owner > first.calls.index(start_argv(REQ, timeout=60))
    again = ScriptedHost("rsa01", missing=["/run/rsa-beeond/job42-c1.status"])
    _backend(again).create(REQ)
    assert secret not in again.inputs  # a new secret per instance


def test_destroy_removes_the_secret_from_every_node() -> None:
    b = _backend(ScriptedHost("rsa01"))
    b.destroy(REQ)
    for node in REQ.nodes:
        host = b.hosts[node]
        assert isinstance(host, ScriptedHost)
        assert ["rm", "-rf", "--", "/run/rsa-beeond/job42-c1.auth",
                "/run/rsa-beeond/job42-c1.conf"] in host.calls, node


def test_a_hung_start_is_cleaned_with_stop_then_retried() -> None:
    first = ScriptedHost("rsa01", fail={"beeond start": 2},
                         missing=["/run/rsa-beeond/job42-c1.status"])
    _backend(first).create(REQ)
    verbs = [c[5] for c in first.calls if c[:1] == ["timeout"]]
    assert verbs == ["start", "stop", "start", "stop", "start"]


def test_start_gives_up_after_the_retries() -> None:
    first = ScriptedHost("rsa01", fail={"beeond start": 9},
                         missing=["/run/rsa-beeond/job42-c1.status"])
    with pytest.raises(FsError, match="failed after 2 attempts"):
        _backend(first, retries=1).create(REQ)


def test_missing_beeond_fails_with_one_line() -> None:
    first = ScriptedHost("rsa01", missing=["beeond"])
    with pytest.raises(FsError, match="beeond is not installed on rsa01"):
        _backend(first).create(REQ)


def test_destroy_retries_stop_and_is_idempotent() -> None:
    first = ScriptedHost("rsa01", fail={"beeond stop": 1})
    b = _backend(first)
    b.destroy(REQ)
    b.destroy(REQ)
    verbs = [c[5] for c in first.calls if c[:1] == ["timeout"]]
    assert verbs == ["stop", "stop", "stop"]
    with pytest.raises(FsError, match="beeond stop failed"):
        _backend(ScriptedHost("rsa01", fail={"beeond stop": 9}), retries=1).destroy(REQ)


def test_registered_under_its_name() -> None:
    assert backend_class("beeond") is BeeondBackend


@pytest.mark.skipif(shutil.which("beeond") is None,
                    reason="BeeGFS/BeeOND not installed (not in Debian; needs kernel module)")
def test_real_beeond_on_this_host(tmp_path: object) -> None:  # pragma: no cover
    req = FsRequest("rsa-unit-beeond", "0", ("localhost",), "ram",
                    {"localhost": str(tmp_path)}, str(tmp_path))
    b = BeeondBackend({"localhost": LocalHost("localhost")})
    spec = b.create(req)
    try:
        assert b.health(spec).ok
    finally:
        b.destroy(req)
