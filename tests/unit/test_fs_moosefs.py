"""MooseFS backend pure parts: reading ``mfscli -SCS`` (real 3.0.117 output captured in the
lab) and the create-time wait for chunk servers that can take writes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from rsa_scheduler.fs.base import FsError, FsRequest
from rsa_scheduler.fs.common import Deadline
from rsa_scheduler.fs.mfslayout import (
    PASS_FILE,
    Layout,
    export_ranges,
    exports_cfg,
    new_secret,
    random_base,
)
from rsa_scheduler.fs.mfsversion import LEGACY, Dialect, Version
from rsa_scheduler.fs.moosefs import MooseFsBackend, _ready
from rsa_scheduler.hosts import CancelToken
from rsa_scheduler.runner import Completed

DATA = Path(__file__).parent.parent / "data" / "moosefs"
REGISTERED = (DATA / "mfscli-SCS-registered.txt").read_text()
SCANNED = (DATA / "mfscli-SCS-scanned.txt").read_text()


def chunkservers_listed(text: str) -> dict[tuple[str, int], int]:
    return LEGACY.chunkservers(text)


def chunkservers_ready(text: str) -> set[tuple[str, int]]:
    return _ready(LEGACY, text)


def test_a_registered_chunkserver_reports_no_space_until_it_scanned_its_disk() -> None:
    assert chunkservers_listed(REGISTERED) == {("10.213.0.1", 22947): 0}
    assert chunkservers_ready(REGISTERED) == set()
    assert chunkservers_listed(SCANNED) == {("10.213.0.1", 22947): 2147483648}
    assert chunkservers_ready(SCANNED) == {("10.213.0.1", 22947)}


def test_other_sections_and_garbage_are_ignored() -> None:
    text = ("metadata servers:\t10.213.0.1\t3.0.117\t-\n"
            "chunk servers:\tbad\tport\n" + SCANNED + "\n")
    assert chunkservers_ready(text) == {("10.213.0.1", 22947)}


class ScriptedHost:
    """Answers ``mfscli -SCS`` with the next canned output (the last one repeats)."""

    def __init__(self, outputs: Sequence[str]) -> None:
        self.name = "rsa1"
        self.outputs = list(outputs)
        self.calls = 0
        self.argvs: list[list[str]] = []

    def run(self, argv: Sequence[str], *, timeout: float, check: bool = True,
            input: str | None = None, as_user: object = None,
            env: Mapping[str, str] | None = None,
            cancel: CancelToken | None = None, keep: int = 0) -> Completed:
        assert "mfscli" in argv and "-SCS" in argv
        self.argvs.append(list(argv))
        out = self.outputs[min(self.calls, len(self.outputs) - 1)]
        self.calls += 1
        return Completed(tuple(argv), 0, out, "", 0.0)


def _layout(host: ScriptedHost) -> tuple[MooseFsBackend, Layout]:
    backend = MooseFsBackend({"rsa1": host}, addresses={"rsa1": "10.213.0.1"})
    req = FsRequest(fs_id="job1-c1", job_id="1", nodes=("rsa1",), tier="ram",
                    pool_dirs={"rsa1": "/pool"}, mount_root="/mnt")
    # chunkserver of node 0 at base+3 = 22947
    lay = backend.layout(req, base=22944, secret="ab" * 16)
    return backend, lay


def test_create_waits_until_every_chunkserver_has_reported_its_space() -> None:
    host = ScriptedHost(["", REGISTERED, REGISTERED, SCANNED])
    backend, lay = _layout(host)
    backend._wait_chunkservers(lay, Deadline(10, "t"), None)
    assert host.calls == 4


def test_mfscli_is_not_asked_before_the_chunkservers_could_have_reported_space() -> None:
    """A chunkserver reports its space >= 1 s after it started (MooseFS's folder thread):
    the master's node is not asked before then, and every 50 ms after."""
    import time

    host = ScriptedHost([REGISTERED, SCANNED])
    times: list[float] = []
    run = host.run

    def timed(argv: Sequence[str], **kw: object) -> Completed:
        times.append(time.monotonic())
        return run(argv, **kw)  # type: ignore[arg-type]

    host.run = timed  # type: ignore[method-assign]
    backend, lay = _layout(host)
    not_before = time.monotonic() + 0.1
    backend._wait_chunkservers(lay, Deadline(10, "t"), None, not_before=not_before)
    assert len(times) == 2 and times[0] >= not_before and times[1] - times[0] >= 0.05
    assert host.argvs[0][0] == "mfscli"


def test_create_gives_up_when_a_chunkserver_never_reports_space() -> None:
    host = ScriptedHost([REGISTERED])
    backend, lay = _layout(host)
    with pytest.raises(FsError, match="0/1 chunkservers registered with the master and "
                                      "reported their space"):
        backend._wait_chunkservers(lay, Deadline(0.5, "t"), None)


def test_a_chunkserver_named_by_its_data_address_is_found_in_moosefs_4s_json() -> None:
    """The pool names an RSA node's data address by name (the cluster lab's
    ``rsa1-data``); MooseFS 4's ``mfscli -SCS -j`` lists the chunkserver by its IPv4
    address (real 4.57.5 output): it is matched through that name's address. Before,
    every RAMDISK build on 4.x with a named data address waited its whole create time
    and failed ("only 0/1 chunkservers registered ...", seen in the cluster lab on
    Debian 13)."""
    scanned = (DATA / "mfscli4-SCS-scanned.json").read_text()  # 10.213.40.1:21003
    host = ScriptedHost([scanned])
    backend = MooseFsBackend({"rsa1": host}, addresses={"rsa1": "rsa1-data"})
    backend._resolved["rsa1-data"] = ["10.213.40.1"]  # as /etc/hosts resolves it
    req = FsRequest(fs_id="job1-c1", job_id="1", nodes=("rsa1",), tier="ram",
                    pool_dirs={"rsa1": "/pool"}, mount_root="/mnt")
    lay = backend.layout(req, base=21000, secret="ab" * 16)  # chunkserver at base+3
    backend._wait_chunkservers(lay, Deadline(0.5, "t"), None, Dialect(Version(4, 57, 5)))
    assert host.calls == 1


def test_only_the_rsa_nodes_own_mounts_cache_file_entries() -> None:
    from rsa_scheduler.fs.base import MountSpec

    host = ScriptedHost([SCANNED])
    backend, lay = _layout(host)
    rsa_side = lay.mount_argv("rsa1", backend.rsa_node_options)
    assert "mfsentrycacheto=1" in " ".join(rsa_side)
    spec = MountSpec("moosefs", "job1-c1", ("rsa1",), "/mnt/job1-c1",
                     {"master_host": "10.213.0.1", "master_port": 22946,
                      "options": list(backend.client_options)})
    compute = backend.client_mount_argv(spec, "/run/rsa/node/c1/1/ramdisk")
    assert "mfsentrycacheto" not in " ".join(compute)
    # a spec recorded before access control: mounted as it was exported, without secret
    # (and rsad's rsaguard=: the node guards the RSA nodes' servers, then drops it)
    assert compute[-2:] == ["-o", "mfsioretries=20,nosuid,nodev,default_permissions,"
                                  "mfsproxy=127.83.65.1,rsaguard=10.213.0.1@20000-29983"]
    # and one recorded before the kernel checked modes gets it too
    old = MountSpec("moosefs", "job1-c1", ("rsa1",), "/mnt/job1-c1",
                    {"master_host": "10.213.0.1", "master_port": 22946,
                     "options": ["mfsioretries=20", "nosuid", "nodev"]})
    assert backend.client_mount_argv(old, "/m")[-1] == \
        "mfsioretries=20,nosuid,nodev,default_permissions,rsaguard=10.213.0.1@20000-29983"


SECRET = "0123456789abcdef" * 2


def test_exports_need_the_password_and_grant_no_admin() -> None:
    text = exports_cfg(["10.0.0.5", "10.1.0.0/16"], SECRET)
    assert text == (f"10.0.0.5 / rw,alldirs,maproot=0:0,password={SECRET}\n"
                    f"10.1.0.0/16 / rw,alldirs,maproot=0:0,password={SECRET}\n")
    assert "admin" not in text
    with pytest.raises(FsError, match="needs a secret"):
        exports_cfg(["*"], "")


def test_export_ranges_are_the_rsa_nodes_and_the_client_networks() -> None:
    assert export_ranges(["10.0.0.5", "10.0.0.6", "10.0.0.5"], ["10.1.0.0/16"]) == [
        "10.0.0.5", "10.0.0.6", "10.1.0.0/16"]
    assert export_ranges(["localhost"], ["10.1.0.0/16"]) == ["127.0.0.1", "10.1.0.0/16"]
    assert export_ranges(["10.0.0.5"], ["*"]) == ["*"]
    # an address that cannot be resolved here cannot be written as a range: any address
    assert export_ranges(["no-such-host.invalid"], ["10.1.0.0/16"]) == ["*"]
    assert export_ranges(["10.0.0.5"], ["10.1.0.1-10.1.0.9", "10.2.0.0/255.255.0.0"]) == [
        "10.0.0.5", "10.1.0.1-10.1.0.9", "10.2.0.0/255.255.0.0"]
    for bad in ("10.1.0.0/33", "compute-net", "10.1.0.9-10.1.0.1", "10.0.0.1 / rw"):
        with pytest.raises(FsError, match="is not an export range"):
            export_ranges(["10.0.0.5"], [bad])


def test_secrets_are_random_and_hex() -> None:
    seen = {new_secret() for _ in range(50)}
    assert len(seen) == 50
    assert all(len(s) == 32 and int(s, 16) >= 0 for s in seen)


def test_port_blocks_are_random_and_skip_busy_ports() -> None:
    bases = {random_base(set(), 5) for _ in range(200)}
    assert len(bases) > 50  # not derived from anything public: ~156 blocks drawn at random
    assert all(20000 <= b <= 29920 and (b - 20000) % 64 == 0 for b in bases)
    busy = {p for b in range(20000, 29984, 64) for p in (b + 4,)} - {20000 + 7 * 64 + 4}
    assert random_base(busy, 5) == 20000 + 7 * 64  # the only block with 5 free ports
    assert random_base(busy, 4) in range(20000, 29984, 64)  # base+4 is outside the block
    with pytest.raises(FsError, match="no free port block"):
        random_base(busy | {20000 + 7 * 64 + 4}, 5)


def test_the_secret_reaches_rsa_nodes_in_a_root_only_file_never_in_argv() -> None:
    import io
    import tarfile

    backend = MooseFsBackend({"rsa1": ScriptedHost([]), "rsa2": ScriptedHost([])},
                             addresses={"rsa1": "10.0.0.5", "rsa2": "10.0.0.6"},
                             client_networks=("10.1.0.0/16",))
    req = FsRequest(fs_id="job1-c1", job_id="1", nodes=("rsa1", "rsa2"), tier="ram",
                    pool_dirs={"rsa1": "/pool", "rsa2": "/p2"}, mount_root="/mnt")
    lay = backend.layout(req, base=22944, secret=SECRET)
    assert lay.export_ranges == ("10.0.0.5", "10.0.0.6", "10.1.0.0/16")
    for node, pool in (("rsa1", "/pool"), ("rsa2", "/p2")):
        argv = lay.mount_argv(node, backend.rsa_node_options)
        assert SECRET not in " ".join(argv)
        assert argv[6:8] == ["-c", f"{pool}/rsa-mfs-job1-c1/{PASS_FILE}"]
        assert "nosuid" in argv[-1] and "nodev" in argv[-1]
        with tarfile.open(fileobj=io.BytesIO(lay.tarball(node).encode())) as tar:
            modes = {m.name: (m.mode, m.isdir()) for m in tar.getmembers()}
            assert all(mode == (0o700 if isdir else 0o600) for mode, isdir in modes.values())
            f = tar.extractfile(f"rsa-mfs-job1-c1/{PASS_FILE}")
            assert f is not None and f.read().decode() == f"mfspassword={SECRET}\n"
    exports = lay.files("rsa1")["mfsexports.cfg"]
    assert exports == exports_cfg(["10.0.0.5", "10.0.0.6", "10.1.0.0/16"], SECRET)
    assert "mfsexports.cfg" not in lay.files("rsa2")


class PassHost:
    """An RSA node whose pass file holds ``secret``."""

    def __init__(self, secret: str) -> None:
        self.name, self.secret = "rsa1", secret
        self.calls: list[list[str]] = []

    def run(self, argv: Sequence[str], *, timeout: float, check: bool = True,
            input: str | None = None, as_user: object = None,
            env: Mapping[str, str] | None = None,
            cancel: CancelToken | None = None, keep: int = 0) -> Completed:
        self.calls.append(list(argv))
        return Completed(tuple(argv), 0, f"mfspassword={self.secret}\n", "", 0.0)


def test_compute_nodes_get_the_secret_from_the_rsa_node_and_the_spec_never_holds_it(
        ) -> None:
    from rsa_scheduler.fs.base import MountSpec

    host = PassHost(SECRET)
    backend = MooseFsBackend({"rsa1": host}, addresses={"rsa1": "10.0.0.5"})
    spec = MountSpec("moosefs", "job1-c1", ("rsa1",), "/mnt/job1-c1",
                     {"master_host": "10.0.0.5", "master_port": 22946,
                      "options": ["mfsioretries=12"],
                      "pass_file": "/pool/rsa-mfs-job1-c1/mfsmount.cfg"})
    argv = backend.client_mount_argv(spec, "@MOUNTPOINT@")
    assert argv == ["mfsmount", "@MOUNTPOINT@", "-H", "10.0.0.5", "-P", "22946", "-o",
                    "mfsioretries=12,default_permissions,rsaguard=10.0.0.5@20000-29983,"
                    f"mfspassword={SECRET}"]
    assert host.calls == [["cat", "--", "/pool/rsa-mfs-job1-c1/mfsmount.cfg"]]
    # a failed mount's error message names the first 6 words only (runner.CommandError):
    # the secret must stay out of them, or it would reach the job's events
    from rsa_scheduler.runner import CommandError

    assert SECRET not in str(CommandError(argv, 1, "mfsmaster register error"))
    with pytest.raises(FsError, match="holds no access secret"):
        MooseFsBackend({"rsa1": PassHost("")}, addresses={"rsa1": "10.0.0.5"}
                       ).client_mount_argv(spec, "@MOUNTPOINT@")
    # a data address that does not resolve: no mount (its servers could not be guarded)
    with pytest.raises(FsError, match=r"cannot resolve the RSA node data address "
                                      r"'no-such-host\.invalid' to keep users off its"):
        MooseFsBackend({"rsa1": PassHost(SECRET)}, addresses={
            "rsa1": "no-such-host.invalid"}).client_mount_argv(spec, "@MOUNTPOINT@")


def test_only_what_may_mount_resolves_the_pools_addresses() -> None:
    """A data address rsad cannot resolve stops builds and mounts (their servers could not
    be guarded) but never a teardown or a look at the servers (guarded=False); one that
    resolved once stays resolved."""
    from rsa_scheduler.fs.base import FsRequest

    req = FsRequest(fs_id="job1-c1", job_id="1", nodes=("rsa1",), tier="ram",
                    pool_dirs={"rsa1": "/pool"}, mount_root="/mnt")
    bad = MooseFsBackend({"rsa1": PassHost(SECRET)}, addresses={"rsa1": "no-such-host.invalid"})
    assert bad.layout(req, guarded=False).guard == ""
    with pytest.raises(FsError, match="cannot resolve the RSA node data address"):
        bad.layout(req)
    good = MooseFsBackend({"rsa1": PassHost(SECRET)}, addresses={"rsa1": "localhost"})
    assert good.servers().addresses == ("127.0.0.1",)
    good._resolved["localhost"] = ["10.9.9.9"]  # resolved before: not asked again
    assert good.servers().addresses == ("10.9.9.9",)


class ProbeHost:
    """Answers the create-time probe with a fingerprint of the node's MooseFS tools and,
    when it differs from the one the backend sent, their versions."""

    def __init__(self) -> None:
        self.name = "rsa1"
        self.fingerprint, self.version = "P:mfsmaster=1.2.3,", "3.0.117"
        self.sent: list[str] = []
        self.asked = 0

    def run(self, argv: Sequence[str], *, timeout: float, check: bool = True,
            input: str | None = None, as_user: object = None,
            env: Mapping[str, str] | None = None,
            cancel: CancelToken | None = None, keep: int = 0) -> Completed:
        self.sent.append(argv[-1])
        out = f"F:-\n{self.fingerprint}\n"
        if argv[-1] != self.fingerprint:
            self.asked += 1
            out += f"V:mfsmaster:version: {self.version}-1 ; build: 1\n"
        return Completed(tuple(argv), 0, out, "", 0.0)


def test_a_nodes_tools_are_asked_their_version_only_when_their_files_changed() -> None:
    host = ProbeHost()
    backend = MooseFsBackend({"rsa1": host}, addresses={"rsa1": "10.0.0.5"})
    req = FsRequest(fs_id="job1-c1", job_id="1", nodes=("rsa1",), tier="ram",
                    pool_dirs={"rsa1": "/pool"}, mount_root="/mnt")
    lay = backend.layout(req, guarded=False)
    assert str(backend._probe(lay)["rsa1"][2]) == "3.0.117"
    assert str(backend._probe(lay)["rsa1"][2]) == "3.0.117"
    assert host.sent == ["", "P:mfsmaster=1.2.3,"] and host.asked == 1
    host.fingerprint, host.version = "P:mfsmaster=4.5.6,", "4.57.5"  # upgraded
    assert str(backend._probe(lay)["rsa1"][2]) == "4.57.5"
    assert host.asked == 2


def test_the_fingerprint_script_prints_the_versions_only_for_another_fingerprint() -> None:
    import subprocess

    from rsa_scheduler.fs.mfsversion import FINGERPRINT_SCRIPT, parse_fingerprint

    def probe(known: str) -> str:
        return subprocess.run(["sh", "-c", FINGERPRINT_SCRIPT, "-", known],
                              capture_output=True, text=True, check=True).stdout

    first = probe("")
    fingerprint = parse_fingerprint(first)
    assert fingerprint.startswith("P:mfsmaster=") and fingerprint.count("=") == 4
    assert [ln[:7] for ln in first.splitlines() if ln.startswith("V:")] == [
        "V:mfsma", "V:mfsch", "V:mfsmo", "V:mfscl"]
    assert probe(fingerprint) == fingerprint + "\n"


def test_every_step_of_a_teardown_runs_and_the_first_failure_is_its_status() -> None:
    import subprocess

    from rsa_scheduler.fs.common import sh_all

    done = subprocess.run(sh_all(["true"], ["sh", "-c", "echo no >&2; exit 3"],
                                 ["sh", "-c", "exit 4"], ["echo", "still ran"]),
                          capture_output=True, text=True)
    assert (done.returncode, done.stdout, done.stderr) == (3, "still ran\n", "no\n")
    assert subprocess.run(sh_all(["true"], ["true"])).returncode == 0


class RecordingHost:
    """Records every command; fails those that contain ``fail`` (exit 1, ``why``)."""

    def __init__(self, name: str, fail: str = "", why: str = "") -> None:
        self.name, self.fail, self.why = name, fail, why
        self.argvs: list[list[str]] = []

    def run(self, argv: Sequence[str], *, timeout: float, check: bool = True,
            input: str | None = None, as_user: object = None,
            env: Mapping[str, str] | None = None,
            cancel: CancelToken | None = None, keep: int = 0) -> Completed:
        self.argvs.append(list(argv))
        bad = bool(self.fail) and any(self.fail in a for a in argv)
        return Completed(tuple(argv), 1 if bad else 0, "", self.why if bad else "", 0.0)


def test_a_destroy_is_one_round_trip_per_node_and_names_the_node_that_failed() -> None:
    from rsa_scheduler.fs.mfsscripts import KILL_SCRIPT, UMOUNT_SCRIPT

    hosts = {"rsa1": RecordingHost("rsa1"),
             "rsa2": RecordingHost("rsa2", fail="umount", why="mfsmount 9 did not exit")}
    backend = MooseFsBackend(hosts, addresses={"rsa1": "10.0.0.5", "rsa2": "10.0.0.6"})
    req = FsRequest(fs_id="job1-c1", job_id="1", nodes=("rsa1", "rsa2"), tier="ram",
                    pool_dirs={"rsa1": "/pool", "rsa2": "/pool"}, mount_root="/mnt")
    with pytest.raises(FsError, match=r"job1-c1: moosefs destroy incomplete: .*rsa2: "
                                      "mfsmount 9 did not exit"):
        backend.destroy(req)
    for name, host in hosts.items():
        (argv,) = host.argvs
        script = argv[2]
        assert argv[:2] == ["sh", "-c"]
        # unmount, kill, free the pool: in this order, every one whatever the one before did
        assert (script.index("findmnt") < script.index("lock") < script.index("rm -rf"))
        assert UMOUNT_SCRIPT.splitlines()[0] in script and KILL_SCRIPT.splitlines()[0] in script
        assert ("mfsmaster.lock" in script) == (name == "rsa1")
