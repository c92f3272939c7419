"""MooseFS backend pure parts: reading ``mfscli -SCS`` (real 3.0.117 output captured in the
lab) and the create-time wait for chunk servers that can take writes."""

from __future__ import annotations

import shlex
import socket
import struct
import subprocess
import sys
import threading
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
from rsa_scheduler.fs.mfsscripts import SPACE_WAIT
from rsa_scheduler.fs.mfsversion import LEGACY, Dialect, Version
from rsa_scheduler.fs.moosefs import MooseFsBackend, _ready, space_wait_ready
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
    """Answers SPACE_WAIT with a canned output (what it printed on the master's node)."""

    def __init__(self, output: str) -> None:
        self.name = "rsa1"
        self.output = output
        self.argvs: list[list[str]] = []

    def run(self, argv: Sequence[str], *, timeout: float, check: bool = True,
            input: str | None = None, as_user: object = None,
            env: Mapping[str, str] | None = None,
            cancel: CancelToken | None = None, keep: int = 0) -> Completed:
        assert list(argv[:3]) == ["python3", "-c", SPACE_WAIT]
        self.argvs.append(list(argv))
        return Completed(tuple(argv), 0 if self.output.startswith("R") else 1,
                         self.output, "", 0.0)


def _layout(host: ScriptedHost) -> tuple[MooseFsBackend, Layout]:
    backend = MooseFsBackend({"rsa1": host}, addresses={"rsa1": "10.213.0.1"})
    req = FsRequest(fs_id="job1-c1", job_id="1", nodes=("rsa1",), tier="ram",
                    pool_dirs={"rsa1": "/pool"}, mount_root="/mnt")
    # chunkserver of node 0 at base+3 = 22947
    lay = backend.layout(req, base=22944, secret="ab" * 16)
    return backend, lay


def test_create_waits_in_one_round_trip_until_every_chunkserver_has_reported_space() -> None:
    """One process on the master's node asks the master (its client port) every
    SPACE_POLL s; rsad checks the chunkservers it printed itself."""
    host = ScriptedHost("R 10.213.0.1 22947\n")
    backend, lay = _layout(host)
    backend._wait_chunkservers(lay, Deadline(10, "t"), None)
    assert len(host.argvs) == 1
    argv = host.argvs[0]
    assert argv[3:5] == ["10.213.0.1", str(lay.client_port)]
    assert 8.0 <= float(argv[5]) <= 9.0  # its own end before rsad's deadline
    assert argv[6:] == ["0.02", "69,4,8,20", "22947:10.213.0.1"]  # 3.0's records


def test_create_gives_up_when_a_chunkserver_never_reports_space() -> None:
    host = ScriptedHost("E timed out\n")
    backend, lay = _layout(host)
    with pytest.raises(FsError, match=r"0/1 chunkservers registered with the master and "
                                      r"reported their space within 0.5s \(last ask: "
                                      r"timed out\)"):
        backend._wait_chunkservers(lay, Deadline(0.5, "t"), None)


def test_another_chunkserver_with_space_is_not_taken_for_this_one() -> None:
    host = ScriptedHost("R 10.213.0.1 22950\nR 10.213.0.2 22947\n")
    backend, lay = _layout(host)
    with pytest.raises(FsError, match="0/1 chunkservers"):
        backend._wait_chunkservers(lay, Deadline(0.5, "t"), None)


def test_a_chunkserver_named_by_its_data_address_is_found_by_its_ipv4_address() -> None:
    """The pool names an RSA node's data address by name (the cluster lab's
    ``rsa1-data``); the master lists the chunkserver by its IPv4 address: the wait is
    given both (it resolves the name on the master's node too), rsad matches the
    address it resolved. Before, every RAMDISK build on 4.x with a named data address
    waited its whole create time and failed (cluster lab, Debian 13)."""
    host = ScriptedHost("R 10.213.40.1 21003\n")
    backend = MooseFsBackend({"rsa1": host}, addresses={"rsa1": "rsa1-data"})
    backend._resolved["rsa1-data"] = ["10.213.40.1"]  # as /etc/hosts resolves it
    req = FsRequest(fs_id="job1-c1", job_id="1", nodes=("rsa1",), tier="ram",
                    pool_dirs={"rsa1": "/pool"}, mount_root="/mnt")
    lay = backend.layout(req, base=21000, secret="ab" * 16)  # chunkserver at base+3
    backend._wait_chunkservers(lay, Deadline(0.5, "t"), None, Dialect(Version(4, 57, 5)))
    assert host.argvs[0][7:] == ["73,4,12,24", "21003:10.213.40.1,rsa1-data"]


def test_space_wait_output_lists_only_ready_lines() -> None:
    assert space_wait_ready("R 10.0.0.1 9422\nE boom\nR x\nR 10.0.0.2 port\n\n") == {
        ("10.0.0.1", 9422)}


def _record(size: int, ip: str, port: int, total: int, *, disconnected: bool = False) -> bytes:
    """A CSERV_LIST record as the master writes it: 3.0.117 (69 bytes) or 4.57.5 (73)."""
    flags = (1 << 24) if disconnected else 0x030075
    addr = socket.inet_aton(ip)
    if size == 69:
        head = struct.pack(">L4sHHQQ", flags, addr, port, 7, 1 << 20, total)
    else:
        head = struct.pack(">L4s4sHHQQ", flags, addr, addr, port, 7, 1 << 20, total)
    return head + bytes(size - len(head))


class FakeMaster:
    """A master's client port answering CLTOMA_CSERV_LIST (500) with the next list of
    records (the last repeats), a keep-alive (0) before every second answer."""

    def __init__(self, answers: Sequence[bytes]) -> None:
        self.answers = list(answers)
        self.asked = 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        while True:  # a client that found an answer unreadable connects again
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed
                return
            with conn:
                self.answer(conn)

    def answer(self, conn: socket.socket) -> None:
        while True:
            head = conn.recv(8, socket.MSG_WAITALL)
            if len(head) < 8:
                return
            assert struct.unpack(">LL", head) == (500, 0)
            data = self.answers[min(self.asked, len(self.answers) - 1)]
            if self.asked % 2:
                conn.sendall(struct.pack(">LL", 0, 0))
            self.asked += 1
            conn.sendall(struct.pack(">LL", 501, len(data)) + data)

    def wait(self, *groups: str, record: str, seconds: float = 5.0
             ) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                [sys.executable, "-c", SPACE_WAIT, "127.0.0.1", str(self.port),
                 str(seconds), "0.01", record, *groups],
                capture_output=True, text=True, timeout=30, check=False)
        finally:
            self.sock.close()


@pytest.mark.parametrize("release", [Version(3, 0, 117), Version(4, 57, 5)])
def test_space_wait_reads_the_masters_list_until_every_chunkserver_has_space(
        release: Version) -> None:
    """The real wait against a fake master: registered with no space, then one with
    space, then both (another RAMDISK's server and a disconnected one never count)."""
    layout = Dialect(release).cslist_record()
    size = layout[0]
    other = _record(size, "10.0.0.9", 9000, 5 << 30)
    gone = _record(size, "10.0.0.2", 9002, 5 << 30, disconnected=True)
    master = FakeMaster([
        _record(size, "10.0.0.1", 9001, 0) + _record(size, "10.0.0.2", 9002, 0) + other,
        _record(size, "10.0.0.1", 9001, 2 << 30) + gone + other,
        _record(size, "10.0.0.1", 9001, 2 << 30) + _record(size, "10.0.0.2", 9002, 2 << 30),
    ])
    r = master.wait("9001:10.0.0.1", "9002:10.0.0.2,localhost",
                    record=",".join(map(str, layout)))
    assert r.returncode == 0, r.stdout + r.stderr
    assert space_wait_ready(r.stdout) == {("10.0.0.1", 9001), ("10.0.0.2", 9002)}
    assert master.asked == 3


def test_space_wait_ends_at_its_time_saying_what_it_saw() -> None:
    master = FakeMaster([_record(73, "10.0.0.1", 9001, 2 << 30)])
    r = master.wait("9001:10.0.0.1", "9002:10.0.0.2", record="73,4,12,24", seconds=0.3)
    assert r.returncode == 1
    assert r.stdout == "R 10.0.0.1 9001\n"
    assert master.asked >= 2


def test_space_wait_says_why_it_could_not_ask() -> None:
    """No master listening: exit 1, the reason last; an answer of another layout: exit 3
    at once, saying so (the caller asks mfscli instead)."""
    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]
    r = subprocess.run([sys.executable, "-c", SPACE_WAIT, "127.0.0.1", str(port), "0.2",
                        "0.01", "73,4,12,24", "9001:10.0.0.1"],
                       capture_output=True, text=True, timeout=30, check=False)
    assert r.returncode == 1 and r.stdout.startswith("E "), r.stdout
    master = FakeMaster([_record(69, "10.0.0.1", 9001, 2 << 30)])
    r = master.wait("9001:10.0.0.1", record="73,4,12,24", seconds=30)
    assert r.returncode == 3 and master.asked == 1
    assert r.stdout == ("P the master's chunkserver list of 69 bytes is not a list of "
                        "73-byte records\n")


class MfscliHost(ScriptedHost):
    """SPACE_WAIT finds the master's records in another layout; mfscli lists the
    chunkserver without space, then with it."""

    def __init__(self) -> None:
        super().__init__("P the master's chunkserver list of 69 bytes is not a list of "
                         "73-byte records\n")
        self.mfscli = [REGISTERED, SCANNED]

    def run(self, argv: Sequence[str], *, timeout: float, check: bool = True,
            input: str | None = None, as_user: object = None,
            env: Mapping[str, str] | None = None,
            cancel: CancelToken | None = None, keep: int = 0) -> Completed:
        if argv[0] == "python3":
            return super().run(argv, timeout=timeout, check=check, cancel=cancel)
        self.argvs.append(list(argv))
        assert argv[0] == "mfscli"
        return Completed(tuple(argv), 0, self.mfscli.pop(0) if len(self.mfscli) > 1
                         else self.mfscli[0], "", 0.0)


def test_a_master_answering_in_another_layout_is_asked_by_mfscli_instead(
        caplog: pytest.LogCaptureFixture) -> None:
    """A MooseFS release whose chunkserver records SPACE_WAIT cannot read: the build
    does not wait its whole create time and fail, it polls mfscli (a kept format)."""
    host = MfscliHost()
    backend, lay = _layout(host)
    backend._wait_chunkservers(lay, Deadline(10, "t"), None)
    assert [a[0] for a in host.argvs] == ["python3", "mfscli", "mfscli"]
    assert "asking mfscli instead" in caplog.text


def test_only_the_rsa_nodes_own_mounts_cache_file_entries() -> None:
    from rsa_scheduler.fs.base import MountSpec

    host = ScriptedHost("")
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

    backend = MooseFsBackend({"rsa1": ScriptedHost(""), "rsa2": ScriptedHost("")},
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
    from rsa_scheduler.fs.mfsscripts import KILL_SERVERS, STANDBY_START, UMOUNT_SCRIPT

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
        # then the pool's next standby chunkserver, in the background
        free = "rm -rf --one-file-system /pool/rsa-mfs-job1-c1"
        assert (script.index("findmnt") < script.index("lock") < script.index(free)
                < script.index("setsid") < script.index("mfscs-standby"))
        assert UMOUNT_SCRIPT.splitlines()[0] in script and shlex.quote(KILL_SERVERS) in script
        assert shlex.quote(STANDBY_START) in script
        # the master's kill on its node only
        flag = "1" if name == "rsa1" else "0"
        assert f"/pool/rsa-mfs-job1-c1 {flag} ||" in script
