"""The beeond backend's command lines and nodefiles (BeeGFS cannot run here: no packages,
no kernel modules), its retry/cleanup behaviour against a scripted host, and a real run
that is skipped with the reason wherever ``beeond`` is not installed."""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence

import pytest

from rsa_scheduler.fs.base import FsError, FsRequest
from rsa_scheduler.fs.beeond import (
    BeeondBackend,
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
        "-p", str(shift), "-L", "/var/log/rsa-beeond/job42-c1", "-F", "-q"]
    assert start_argv(REQ, timeout=60, use_pdsh=True, config_dir="/etc/beegfs/od")[-3:] == [
        "-P", "-f", "/etc/beegfs/od"]


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
    assert _backend(first).client_mount_argv(spec, "/c")[-1].startswith(
        "-osysMgmtdHost=rsa01,")


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
