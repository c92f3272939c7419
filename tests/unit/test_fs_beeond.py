"""The beeond backend's command lines, nodefiles and config files for every option a
site sets (BeeGFS cannot run here: no packages, no kernel modules), its retry/cleanup
behaviour against a scripted host, what it asks of a node, and a real run that is skipped
with the reason wherever ``beeond`` is not installed."""

from __future__ import annotations

import dataclasses
import shutil
import stat
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from rsa_scheduler.config import load_config_text
from rsa_scheduler.config.backends import make_backend
from rsa_scheduler.fs import beegfs
from rsa_scheduler.fs.base import FsError, FsRequest, MountSpec
from rsa_scheduler.fs.beeond import (
    BeeondBackend,
    BeeondOptions,
    auth_setup_argv,
    client_argv,
    needs_for,
    nodefile,
    paths,
    pick_shift,
    ports_need,
    shift_ports,
    start_argv,
    stop_argv,
)
from rsa_scheduler.fs.nodecheck import check_script, parse_check
from rsa_scheduler.fs.registry import backend_class
from rsa_scheduler.hosts import CancelToken, LocalHost
from rsa_scheduler.runner import CommandError, Completed, Identity

REQ = FsRequest(fs_id="job42-c1", job_id="42", nodes=("rsa01", "rsa02", "rsa03"),
                tier="ram", pool_dirs={n: "/dev/shm/rsa" for n in ("rsa01", "rsa02", "rsa03")},
                mount_root="/run/rsa/mnt")
SECRET = "5e" * 32
V7 = BeeondOptions(beegfs_major=7)


class ScriptedHost:
    """Records argv; fails the commands whose first words match ``fail`` (count times);
    ``cat`` of an auth file answers ``secret``, of the shift file ``shift``; ``ss``
    answers ``listening``."""

    def __init__(self, name: str, fail: Mapping[str, int] | None = None,
                 missing: Sequence[str] = (), secret: str = SECRET, shift: str = "",
                 listening: str = "") -> None:
        self.name = name
        self.calls: list[list[str]] = []
        self.inputs: list[str | None] = []
        self.timeouts: list[float] = []
        self.fail = dict(fail or {})
        self.missing = set(missing)
        self.secret = secret
        self.shift = shift
        self.listening = listening

    def run(self, argv: Sequence[str], *, timeout: float, check: bool = True,
            input: str | None = None, as_user: Identity | None = None,
            env: Mapping[str, str] | None = None,
            cancel: CancelToken | None = None, keep: int = 0) -> Completed:
        self.calls.append(list(argv))
        self.inputs.append(input)
        self.timeouts.append(timeout)
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
        out = ""
        if argv[:2] == ["cat", "--"]:
            out = self.shift if argv[2].endswith(".shift") else self.secret
        elif list(argv[:3]) == ["sh", "-c", "ss -Hltn && ss -Hlun"]:
            out = self.listening
        return Completed(tuple(argv), rc, out, "", 0.0)


def test_nodefile_is_one_host_per_line_first_is_management() -> None:
    assert nodefile(["rsa01", "rsa02"]) == "rsa01\nrsa02\n"
    with pytest.raises(FsError, match="duplicate"):
        nodefile(["rsa01", "rsa01"])
    with pytest.raises(FsError):
        nodefile([])


SHIFT = 1230
BASE = ["beeond", "start", "-n", "/run/rsa-beeond/job42-c1.nodes",
        "-d", "/dev/shm/rsa/rsa-beeond-job42-c1", "-c", "/run/rsa/mnt/job42-c1",
        "-i", "/run/rsa-beeond/job42-c1.status", "-p", str(SHIFT),
        "-L", "/var/log/rsa-beeond/job42-c1", "-F", "-q"]


def test_start_argv_with_the_shipped_options_matches_the_beeond_cli() -> None:
    # BeeGFS 8: -C after -f (beeond looks for conn.auth in the directory given before)
    assert start_argv(REQ, timeout=60, shift=SHIFT) == [
        "timeout", "-k", "10", "60", *BASE, "-s", "0", "-m", "1",
        "-f", "/run/rsa-beeond/job42-c1.conf", "-C"]


@pytest.mark.parametrize(("change", "tail"), [
    ({"beegfs_major": 7}, ["-s", "0", "-m", "1", "-f", "/run/rsa-beeond/job42-c1.conf"]),
    ({"storage_servers": 2}, ["-s", "2", "-m", "1", "-f", "/run/rsa-beeond/job42-c1.conf",
                              "-C"]),
    ({"metadata_servers": 0}, ["-s", "0", "-m", "0", "-f", "/run/rsa-beeond/job42-c1.conf",
                               "-C"]),
    ({"tmpfs": True}, ["-s", "0", "-m", "1", "-r", "-f", "/run/rsa-beeond/job42-c1.conf",
                       "-C"]),
    ({"prefer_local": True}, ["-s", "0", "-m", "1", "-l",
                              "-f", "/run/rsa-beeond/job42-c1.conf", "-C"]),
    ({"use_pdsh": True}, ["-s", "0", "-m", "1", "-P", "-f", "/run/rsa-beeond/job42-c1.conf",
                          "-C"]),
    ({"use_pdsh": True, "pdsh_path": "/opt/pdsh/bin/pdsh"},
     ["-s", "0", "-m", "1", "-P", "-b", "/opt/pdsh/bin/pdsh",
      "-f", "/run/rsa-beeond/job42-c1.conf", "-C"]),
])
def test_start_argv_for_each_option(change: dict[str, Any], tail: list[str]) -> None:
    opts = dataclasses.replace(BeeondOptions(), **change)
    assert start_argv(REQ, timeout=60, shift=SHIFT, opts=opts) == [
        "timeout", "-k", "10", "60", *BASE,
                                                      *tail]


def test_start_argv_with_every_option_at_once() -> None:
    opts = BeeondOptions(beegfs_major=7, storage_servers=4, metadata_servers=2, tmpfs=True,
                         prefer_local=True, use_pdsh=True, pdsh_path="/usr/bin/pdsh",
                         config_dir="/etc/beegfs/site", log_dir="/scratch/logs/",
                         port_shift_min=2000, port_shift_max=2000, kill_after=30.0)
    assert start_argv(REQ, timeout=90, shift=2000, opts=opts) == [
        "timeout", "-k", "30", "90", "beeond", "start",
        "-n", "/run/rsa-beeond/job42-c1.nodes", "-d", "/dev/shm/rsa/rsa-beeond-job42-c1",
        "-c", "/run/rsa/mnt/job42-c1", "-i", "/run/rsa-beeond/job42-c1.status",
        "-p", "2000", "-L", "/scratch/logs/job42-c1", "-F", "-q", "-s", "4", "-m", "2",
        "-r", "-l", "-P", "-b", "/usr/bin/pdsh", "-f", "/run/rsa-beeond/job42-c1.conf"]


def test_stop_argv_deletes_data_and_logs_and_cleans_half_starts() -> None:
    assert stop_argv(REQ, timeout=30) == [
        "timeout", "-k", "10", "30", "beeond", "stop",
        "-n", "/run/rsa-beeond/job42-c1.nodes", "-i", "/run/rsa-beeond/job42-c1.status",
        "-L", "-d", "-c", "-q"]
    opts = BeeondOptions(keep_logs=True, use_pdsh=True, pdsh_path="/usr/bin/pdsh",
                         kill_after=2.5)
    assert stop_argv(REQ, timeout=30, opts=opts) == [
        "timeout", "-k", "2.5", "30", "beeond", "stop",
        "-n", "/run/rsa-beeond/job42-c1.nodes", "-i", "/run/rsa-beeond/job42-c1.status",
        "-d", "-c", "-q", "-P", "-b", "/usr/bin/pdsh"]


def test_a_shift_is_drawn_among_those_whose_ports_are_free() -> None:
    opts = BeeondOptions(port_shift_min=20005, port_shift_max=20100)
    drawn = {pick_shift(set(), opts) for _ in range(400)}
    assert drawn == set(range(20005, 20096, 10))  # every slot, none past the maximum
    assert beegfs.port_range(20005, 20100) == (28008, 28105)
    assert list(shift_ports(1230)) == list(range(9233, 9241))
    # a port of 20005's range (28008..28015) and of 20095's (28098..28105) are taken
    busy = {28015, 28098, 22}
    assert {pick_shift(busy, opts) for _ in range(400)} == set(range(20015, 20086, 10))
    one = BeeondOptions(port_shift_min=0, port_shift_max=9)
    assert pick_shift(set(), one) == 0
    with pytest.raises(FsError, match=r"no free BeeGFS port shift in 0\.\.9: every one has "
                                      "a port in use on the job's RSA nodes"):
        pick_shift({8010}, one)
    shipped = {pick_shift(set()) for _ in range(200)}
    assert all(1000 <= s <= 24750 and s % 10 == 0 for s in shipped) and len(shipped) > 150


def test_client_mount_argv() -> None:
    assert client_argv("rsa01", 1230, "/mnt/x") == [
        "mount", "-t", "beegfs", "beegfs_ondemand", "/mnt/x", "-o",
        "sysMgmtdHost=rsa01,connPortShift=1230"]
    assert client_argv("10.1.0.1", 1230, "/mnt/x", ["logLevel=3"], SECRET)[-1] == (
        f"sysMgmtdHost=10.1.0.1,connPortShift=1230,logLevel=3,rsaConnAuth={SECRET}")


def _run_auth_setup(tmp_path: Path, opts: BeeondOptions) -> tuple[Path, Path]:
    conf = tmp_path / "run" / "j.conf"
    auth = conf / "conn.auth" if opts.beegfs_major == 8 else tmp_path / "run" / "j.auth"
    argv = auth_setup_argv(REQ, opts)
    want = paths(REQ, opts)
    assert argv[4:6] == [want["auth"], want["conf"]]
    argv[4:6] = [str(auth), str(conf)]
    done = subprocess.run(argv, input="s3cret", text=True, capture_output=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return auth, conf


def _site(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "beegfs-meta.conf").write_text("storeUseExtendedAttribs = false\n")
    (site / "beegfs-mgmtd.toml").write_text("log-level = \"info\"\n")
    (site / "unrelated.txt").write_text("x")
    return site


def test_beegfs_8_config_dir_holds_conn_auth_for_beeond_minus_c(tmp_path: Path) -> None:
    opts = BeeondOptions(config_dir=str(_site(tmp_path)),
                         client_options=("logLevel=4", "connInterfacesList=/etc/ib.conf"))
    assert paths(REQ, opts)["auth"] == "/run/rsa-beeond/job42-c1.conf/conn.auth"
    auth, conf = _run_auth_setup(tmp_path, opts)
    assert auth.read_text() == "s3cret" and stat.S_IMODE(auth.stat().st_mode) == 0o600
    assert stat.S_IMODE(conf.stat().st_mode) == 0o700
    # the site's files beeond reads, the secret, the client's options; nothing else
    assert sorted(p.name for p in conf.iterdir()) == [
        "beegfs-client.conf", "beegfs-meta.conf", "beegfs-mgmtd.toml", "conn.auth"]
    assert (conf / "beegfs-meta.conf").read_text() == "storeUseExtendedAttribs = false\n"
    assert (conf / "beegfs-mgmtd.toml").read_text() == "log-level = \"info\"\n"
    assert (conf / "beegfs-client.conf").read_text() == (
        "\nlogLevel = 4\nconnInterfacesList = /etc/ib.conf\n")
    # -C hands conn.auth to every service: no file names it
    assert not any("connAuthFile" in p.read_text() for p in conf.iterdir())


def test_beegfs_7_every_config_file_names_the_secret(tmp_path: Path) -> None:
    opts = dataclasses.replace(V7, config_dir=str(_site(tmp_path)))
    auth, conf = _run_auth_setup(tmp_path, opts)
    assert auth.read_text() == "s3cret"
    assert stat.S_IMODE(auth.stat().st_mode) == 0o600
    assert sorted(p.name for p in conf.iterdir()) == sorted(beegfs.CONFIG_FILES[7])
    for f in beegfs.CONFIG_FILES[7]:
        text = (conf / f).read_text()
        assert text.rstrip().endswith(f"connAuthFile = {auth}"), f
        assert stat.S_IMODE((conf / f).stat().st_mode) == 0o600
    assert (conf / "beegfs-meta.conf").read_text().startswith("storeUseExtendedAttribs")
    # a second run (a retried create) starts from a fresh directory
    (conf / "stale").write_text("x")
    _run_auth_setup(tmp_path, V7)
    assert sorted(p.name for p in conf.iterdir()) == sorted(beegfs.CONFIG_FILES[7])


def test_one_data_path_for_all_nodes() -> None:
    req = FsRequest("j-c1", "1", ("a", "b"), "ram", {"a": "/x", "b": "/y"}, "/m")
    with pytest.raises(FsError, match="one data path"):
        paths(req)


def _backend(first: ScriptedHost, retries: int = 2,
             opts: BeeondOptions | None = None,
             addresses: Mapping[str, str] | None = None) -> BeeondBackend:
    hosts = {n: (first if n == "rsa01" else ScriptedHost(n)) for n in REQ.nodes}
    opts = dataclasses.replace(opts or BeeondOptions(), stop_backoff=0)
    return BeeondBackend(hosts, create_timeout=60, destroy_timeout=30, retries=retries,
                         options=opts, addresses=addresses)


def test_create_writes_the_nodefile_then_starts_on_the_first_node() -> None:
    first = ScriptedHost("rsa01", missing=["/run/rsa-beeond/job42-c1.status"])
    spec = _backend(first).create(REQ)
    starts = [c for c in first.calls if c[:1] == ["timeout"]]
    shift = int(spec.client["port_shift"])
    assert starts == [start_argv(REQ, timeout=60, shift=shift)]
    # recorded on the first node, for a create re-issued after an rsad restart
    assert f"{shift}\n" in first.inputs
    assert ["dd", "of=/run/rsa-beeond/job42-c1.shift", "status=none"] in first.calls
    assert "rsa01\nrsa02\nrsa03\n" in first.inputs
    assert spec.rsa_mountpoint == "/run/rsa/mnt/job42-c1"
    # the compute node gets the secret (read from the first node) to put in a root-only
    # file (node.mounts.secret_to_file); the RAMDISK's record never holds it
    assert _backend(first).client_mount_argv(spec, "/c") == [
        "mount", "-t", "beegfs", "beegfs_ondemand", "/c", "-o",
        f"sysMgmtdHost=rsa01,connPortShift={shift},rsaConnAuth={SECRET}"]
    assert first.calls[-1] == ["cat", "--", "/run/rsa-beeond/job42-c1.conf/conn.auth"]
    assert SECRET not in str(spec.to_json())


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
    assert owner > first.calls.index(start_argv(REQ, timeout=60,
                                                shift=int(spec.client["port_shift"])))
    again = ScriptedHost("rsa01", missing=["/run/rsa-beeond/job42-c1.status"])
    _backend(again).create(REQ)
    assert secret not in again.inputs  # a new secret per instance


def test_destroy_removes_the_secret_from_every_node() -> None:
    b = _backend(ScriptedHost("rsa01"))
    b.destroy(REQ)
    for node in REQ.nodes:
        host = b.hosts[node]
        assert isinstance(host, ScriptedHost)
        assert ["rm", "-rf", "--", "/run/rsa-beeond/job42-c1.conf/conn.auth",
                "/run/rsa-beeond/job42-c1.conf"] in host.calls, node
    b7 = _backend(ScriptedHost("rsa01"), opts=V7)
    b7.destroy(REQ)
    host = b7.hosts["rsa02"]
    assert isinstance(host, ScriptedHost)
    assert ["rm", "-rf", "--", "/run/rsa-beeond/job42-c1.auth",
            "/run/rsa-beeond/job42-c1.conf"] in host.calls


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


def test_the_configured_options_reach_every_command_line() -> None:
    opts = BeeondOptions(beegfs_major=7, storage_servers=2, tmpfs=True, use_pdsh=True,
                         keep_logs=True, kill_after=5.0,
                         client_options=("connMgmtdPortTCP=9008",))
    first = ScriptedHost("rsa01", missing=["/run/rsa-beeond/job42-c1.status"])
    b = _backend(first, opts=opts, addresses={"rsa01": "rsa01-ib", "rsa02": "rsa02-ib"})
    spec = b.create(REQ)
    o = b.options
    shift = int(spec.client["port_shift"])
    start = start_argv(REQ, timeout=60, shift=shift, opts=o)
    assert [c for c in first.calls if c[:1] == ["timeout"]] == [start]
    assert "-r" in start
    # the runner's own timeout outlasts timeout -k's SIGKILL
    assert first.timeouts[first.calls.index(start)] == 70
    assert auth_setup_argv(REQ, o) in first.calls
    assert spec.client == {"mgmtd_host": "rsa01-ib", "port_shift": shift,
                           "conn_auth_file": "/run/rsa-beeond/job42-c1.auth",
                           "options": ["connMgmtdPortTCP=9008"]}
    assert b.client_mount_argv(spec, "/c")[-1] == (
        f"sysMgmtdHost=rsa01-ib,connPortShift={shift},"
        f"connMgmtdPortTCP=9008,rsaConnAuth={SECRET}")
    b.destroy(REQ)
    assert stop_argv(REQ, timeout=30, opts=o) in first.calls
    assert "-L" not in stop_argv(REQ, timeout=30, opts=o)


def test_a_damaged_auth_file_is_one_line_not_a_mount_without_the_secret() -> None:
    first = ScriptedHost("rsa01", missing=["/run/rsa-beeond/job42-c1.status"], secret="")
    b = _backend(first)
    spec = b.create(REQ)
    with pytest.raises(FsError, match=r"rsa01:/run/rsa-beeond/job42-c1.conf/conn.auth "
                                      "holds no access secret"):
        b.client_mount_argv(spec, "/c")
    # a spec recorded before access control: no secret to fetch
    old = MountSpec("beeond", "j-c1", ("rsa01",), "/m",
                    {"mgmtd_host": "rsa01", "port_shift": 1230})
    assert b.client_mount_argv(old, "/c")[-1] == "sysMgmtdHost=rsa01,connPortShift=1230"


def test_stop_backs_off_by_the_configured_step(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr("rsa_scheduler.fs.beeond.time.sleep", slept.append)
    hosts = {n: ScriptedHost(n, fail={"beeond stop": 2}) for n in REQ.nodes}
    b = BeeondBackend(hosts, retries=2, options=BeeondOptions(stop_backoff=3.0))
    b.destroy(REQ)
    assert slept == [3.0, 6.0]


def test_options_come_from_the_configuration() -> None:
    cfg = load_config_text("""
pool:
  nodes:
    - {names: "rsa[01-02]", capacity: 2G, data_address: "{name}-ib"}
filesystem:
  backend: {ram: beeond}
  create_timeout: 2m
  retries: 1
  beeond:
    beegfs_major: 7
    storage_servers: 1
    metadata_servers: 2
    storage: tmpfs
    prefer_local: true
    use_pdsh: true
    pdsh_path: /usr/bin/pdsh
    config_dir: /etc/beegfs/beeond
    log_dir: /var/log/bo
    keep_logs: true
    port_shift_min: 3000
    port_shift_max: 3990
    kill_after: 20s
    stop_backoff: 5s
    client_options: [logLevel=2]
""")
    b = make_backend(cfg, "ram", {})
    assert isinstance(b, BeeondBackend)
    assert b.options == BeeondOptions(
        beegfs_major=7, storage_servers=1, metadata_servers=2, tmpfs=True,
        prefer_local=True, use_pdsh=True, pdsh_path="/usr/bin/pdsh",
        config_dir="/etc/beegfs/beeond", log_dir="/var/log/bo", keep_logs=True,
        port_shift_min=3000, port_shift_max=3990, kill_after=20.0, stop_backoff=5.0,
        client_options=("logLevel=2",))
    assert b.addresses == {"rsa01": "rsa01-ib", "rsa02": "rsa02-ib"}
    assert (b.create_timeout, b.retries, b.stop_backoff) == (120.0, 1, 5.0)
    shipped = make_backend(load_config_text(
        "pool:\n  nodes:\n    - {names: rsa1, capacity: 1G}\n"
        "filesystem:\n  backend: {ram: beeond}\n"), "ram", {})
    assert isinstance(shipped, BeeondBackend) and shipped.options == BeeondOptions()


@pytest.mark.parametrize(("opts", "reason"), [
    (BeeondOptions(beegfs_major=6), "BeeGFS 6 is not supported"),
    (BeeondOptions(port_shift_min=10, port_shift_max=5), "must be >= port_shift_min"),
    (BeeondOptions(client_options=("cfgFile=/x",)), "cfgFile is set by rsad"),
    (BeeondOptions(pdsh_path="/usr/bin/pdsh"), "use_pdsh is false"),
    (BeeondOptions(storage_servers=-1), "server counts"),
])
def test_options_built_by_hand_are_checked(opts: BeeondOptions, reason: str) -> None:
    with pytest.raises(FsError, match=reason):
        BeeondBackend({}, options=opts)


def _whats(opts: BeeondOptions) -> list[str]:
    return [n.what for n in needs_for(opts)]


def test_what_a_node_needs_follows_the_options() -> None:
    v8 = _whats(BeeondOptions())
    assert v8 == ["command beeond", "root's login shell /bin/bash",
                  "/opt/beegfs/sbin/beegfs-mgmtd", "/opt/beegfs/sbin/beegfs-meta",
                  "/opt/beegfs/sbin/beegfs-storage", "kernel module beegfs",
                  "mount helper mount.beegfs", "command beegfs", "command ss",
                  "BeeGFS ports 9003-32760 outside the ephemeral port range",
                  "command findmnt"]
    assert BeeondBackend({}).needs() == BeeondBackend.node_needs == needs_for(BeeondOptions())
    v7 = _whats(V7)
    assert "/opt/beegfs/sbin/beegfs-helperd" in v7 and "command beegfs-ctl" in v7
    assert "mount helper mount.beegfs" not in v7 and "command beegfs" not in v7
    assert "command pdsh" in _whats(BeeondOptions(use_pdsh=True))
    assert "command pdsh" not in v8
    assert "pdsh /opt/pdsh/pdsh" in _whats(BeeondOptions(use_pdsh=True,
                                                        pdsh_path="/opt/pdsh/pdsh"))
    assert "config directory /etc/beegfs/rsa" in _whats(
        BeeondOptions(config_dir="/etc/beegfs/rsa"))
    assert "file /etc/beegfs/ib.conf (connInterfacesList)" in _whats(
        BeeondOptions(client_options=("connInterfacesList=/etc/beegfs/ib.conf",
                                      "logLevel=3")))
    b = BeeondBackend({}, options=BeeondOptions(use_pdsh=True, config_dir="/etc/x"))
    assert [n.what for n in b.needs()] == _whats(b.options)


def test_the_needs_run_in_a_real_shell_and_find_what_lacks(tmp_path: Path) -> None:
    conf = tmp_path / "beegfs conf"
    opts = BeeondOptions(use_pdsh=True, pdsh_path=str(tmp_path / "pdsh"),
                         config_dir=str(conf),
                         client_options=(f"connInterfacesList={tmp_path}/ib.conf",))
    needs = needs_for(opts)
    script = check_script(needs, str(tmp_path))

    def lacks() -> set[str]:
        out = subprocess.run(["sh", "-c", script], capture_output=True, text=True,
                             timeout=30, check=True).stdout
        return {line.split(":")[0] for line in parse_check(out)}

    first = lacks()
    assert {f"pdsh {tmp_path}/pdsh", f"config directory {conf}",
            f"file {tmp_path}/ib.conf (connInterfacesList)"} <= first
    conf.mkdir()
    (tmp_path / "ib.conf").write_text("ib0\n")
    pdsh = tmp_path / "pdsh"
    pdsh.write_text("#!/bin/sh\n")
    pdsh.chmod(0o755)
    assert first - lacks() == {f"pdsh {tmp_path}/pdsh", f"config directory {conf}",
                               f"file {tmp_path}/ib.conf (connInterfacesList)"}


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


@pytest.mark.parametrize(("ephemeral", "reserved", "ok"), [
    ("32768\t60999\n", "\n", True),  # Linux's default: above 9003-32760
    ("1024\t65535\n", "\n", False),
    ("1024\t65535\n", "22,9003-32760,40000\n", True),  # reserved for BeeGFS
    ("1024\t65535\n", "9003-32000\n", False),
    ("40000\t45000\n", "", True),
])
def test_the_port_range_must_stay_clear_of_ephemeral_ports(
        tmp_path: Path, ephemeral: str, reserved: str, ok: bool) -> None:
    (tmp_path / "ip_local_port_range").write_text(ephemeral)
    if reserved:
        (tmp_path / "ip_local_reserved_ports").write_text(reserved)
    need = ports_need(BeeondOptions(), str(tmp_path))
    out = subprocess.run(["sh", "-c", check_script([need], str(tmp_path))],
                         capture_output=True, text=True, timeout=30, check=True).stdout
    assert parse_check(out) == (() if ok else (
        "BeeGFS ports 9003-32760 outside the ephemeral port range: set "
        "filesystem.beeond.port_shift_max so that 8010 + it is below the start of "
        "net.ipv4.ip_local_port_range, or reserve them: sysctl -w "
        "net.ipv4.ip_local_reserved_ports=9003-32760",))
    wide = ports_need(BeeondOptions(port_shift_max=50990), str(tmp_path))
    assert wide.what == "BeeGFS ports 9003-59000 outside the ephemeral port range"


def test_the_shift_avoids_every_port_listening_on_any_of_the_jobs_nodes() -> None:
    opts = BeeondOptions(port_shift_min=1000, port_shift_max=1020)  # 3 shifts
    ss_tcp = "LISTEN 0 128 0.0.0.0:9003 0.0.0.0:*\n"  # 1000's range, on rsa02
    ss_udp = "UNCONN 0 0 [::]:9020 [::]:*\n"  # 1010's range (9013..9020), on rsa03
    hosts = {"rsa01": ScriptedHost("rsa01", missing=["/run/rsa-beeond/job42-c1.status"]),
             "rsa02": ScriptedHost("rsa02", listening=ss_tcp),
             "rsa03": ScriptedHost("rsa03", listening=ss_udp)}
    b = BeeondBackend(hosts, options=opts)
    spec = b.create(REQ)
    assert spec.client["port_shift"] == 1020
    assert all(["sh", "-c", "ss -Hltn && ss -Hlun"] in h.calls for h in hosts.values())
    hosts["rsa01"].listening = "LISTEN 0 5 127.0.0.1:9030 0.0.0.0:*\n"  # 1020's last
    with pytest.raises(FsError, match=r"no free BeeGFS port shift in 1000\.\.1020"):
        BeeondBackend(hosts, options=opts, retries=0).create(REQ)


def test_a_reissued_create_reuses_the_running_instance_with_its_recorded_shift() -> None:
    first = ScriptedHost("rsa01", shift="1240\n")
    b = _backend(first)
    spec = b.create(REQ)
    assert spec.client["port_shift"] == 1240
    assert not any(c[:1] == ["timeout"] for c in first.calls)  # neither start nor stop
    # no recorded shift: the instance cannot be described, so it is rebuilt
    again = ScriptedHost("rsa01")
    rebuilt = _backend(again).create(REQ)
    verbs = [c[5] for c in again.calls if c[:1] == ["timeout"]]
    assert verbs == ["stop", "start"] and 1000 <= rebuilt.client["port_shift"] <= 24750
    assert ["rm", "-f", "/run/rsa-beeond/job42-c1.nodes", "/run/rsa-beeond/job42-c1.status",
            "/run/rsa-beeond/job42-c1.shift"] in again.calls
