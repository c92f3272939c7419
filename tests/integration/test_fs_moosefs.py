"""The MooseFS backend for real on the lab's RSA nodes over SSH: the conformance contract
on the RAM tier of rsa[1-4] and on the ssd tier of rsa3/rsa4, plus port and config checks."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from rsa_scheduler.fs.base import FilesystemBackend, FsError, FsRequest
from rsa_scheduler.fs.common import sh_chain
from rsa_scheduler.fs.mfslayout import new_secret, random_base
from rsa_scheduler.fs.mfsscripts import CS_HOME, CS_START, STANDBY_START, UMOUNT_SCRIPT
from rsa_scheduler.fs.mfsversion import Dialect
from rsa_scheduler.fs.moosefs import MooseFsBackend
from rsa_scheduler.hosts import Cancelled, CancelToken
from rsa_scheduler.remote import HostPool
from tests.fs_conformance import FsConformance, Leftovers, MakeRequest
from tests.integration.fskit import lab_hosts, lab_moosefs, moosefs_leftovers
from tests.integration.slurmkit import in_cluster


@pytest.fixture(scope="module")
def hosts(lab: Mapping[str, str]) -> Iterator[HostPool]:
    with lab_hosts(lab) as pool:
        yield pool


@pytest.fixture
def backend(lab: Mapping[str, str], hosts: HostPool) -> MooseFsBackend:
    return lab_moosefs(lab, hosts)


@pytest.fixture
def leftovers(hosts: HostPool) -> Leftovers:
    return lambda req: moosefs_leftovers(hosts, req)


def _factory(backend: MooseFsBackend, lab: Mapping[str, str], tier: str,
             nodes: tuple[str, ...]) -> Iterator[MakeRequest]:
    made: list[FsRequest] = []
    pool = lab["RSA_LAB_POOL_RAM"] if tier == "ram" else lab["RSA_LAB_POOL_SSD"]

    def make(suffix: str) -> FsRequest:
        req = FsRequest(fs_id=f"itest-{tier}-{suffix}", job_id="0", nodes=nodes, tier=tier,
                        pool_dirs={n: pool for n in nodes}, mount_root="/run/rsa/mnt")
        made.append(req)
        return req

    yield make
    for req in made:  # also when the test failed half-way
        backend.destroy(req)


class MooseFsContract(FsConformance):
    def half_build(self, backend: FilesystemBackend, req: FsRequest) -> None:
        # rsad killed after the master and one chunkserver started, before the mounts
        assert isinstance(backend, MooseFsBackend)
        lay = backend.layout(req, random_base(set(), 3 + len(req.nodes)), new_secret())
        for node in req.nodes:
            backend.hosts[node].run(
                sh_chain(["mkdir", "-p", lay.mountpoint],
                         ["tar", "-x", "-C", lay.pool_dirs[node], "-f", "-"]),
                timeout=30, input=lay.tarball(node))
        backend.hosts[lay.master].run(
            ["mfsmaster", "-c", f"{lay.dir(lay.master)}/mfsmaster.cfg", "start"], timeout=30)
        node = req.nodes[-1]
        backend.hosts[node].run(
            ["mfschunkserver", "-c", f"{lay.dir(node)}/mfschunkserver.cfg", "start"],
            timeout=30)

    def broken_backend(self, backend: FilesystemBackend) -> FilesystemBackend | None:
        # servers start, then every mfsmount fails: create must unwind all of it
        assert isinstance(backend, MooseFsBackend)
        return MooseFsBackend(backend.hosts, addresses=backend.addresses, retries=0,
                              client_options=("mfsnosuchoption=1",))


class TestMooseFsRam(MooseFsContract):
    @pytest.fixture
    def make_request(self, backend: MooseFsBackend,
                     lab: Mapping[str, str]) -> Iterator[MakeRequest]:
        yield from _factory(backend, lab, "ram", ("rsa1", "rsa2", "rsa3", "rsa4"))


class TestMooseFsSsd(MooseFsContract):
    @pytest.fixture
    def make_request(self, backend: MooseFsBackend,
                     lab: Mapping[str, str]) -> Iterator[MakeRequest]:
        if not lab.get("RSA_LAB_RSA_SSD_NODES"):
            pytest.skip("the cluster lab has no ssd pools without RSA_CLUSTER_TIERS=mixed "
                        "(lab/cluster/ssdpool.py): its RSA nodes have a RAM pool only; "
                        "make lab-test and make lane-tiers run these on ssd nodes")
        nodes = tuple(lab["RSA_LAB_RSA_SSD_NODES"].split(","))
        yield from _factory(backend, lab, "ssd", nodes)


@pytest.mark.parametrize("records", ["known", "unknown"])
def test_a_ramdisk_is_ready_only_once_every_chunkserver_takes_writes(
        backend: MooseFsBackend, lab: Mapping[str, str], records: str,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Ready means every chunkserver registered and reported its space to the master (a
    new chunk goes only to a server with space): right after create returns, MooseFS's
    own mfscli (the health check) lists all four with space, and a write with fsync on
    every node goes through. Also when the master's chunkserver records are not in a
    layout the wait knows (a future MooseFS, played by a record size of 71): the wait
    ends at once and the real mfscli is asked instead."""
    if records == "unknown":
        monkeypatch.setattr(Dialect, "cslist_record", lambda self: (71, 4, 8, 20))
    nodes = ("rsa1", "rsa2", "rsa3", "rsa4")
    req = FsRequest(fs_id="itest-ready", job_id="0", nodes=nodes, tier="ram",
                    pool_dirs={n: lab["RSA_LAB_POOL_RAM"] for n in nodes},
                    mount_root="/run/rsa/mnt")
    try:
        spec = backend.create(req)
        health = backend.health(spec)
        assert health.ok, health.detail
        assert health.detail == "4 chunkservers, mounted on every node"
        for node in nodes:
            backend.hosts[node].run(["dd", "if=/dev/zero", f"of={spec.rsa_mountpoint}/{node}",
                                     "bs=1M", "count=4", "conv=fsync", "status=none"],
                                    timeout=60)
        assert ("asking mfscli instead" in caplog.text) == (records == "unknown")
    finally:
        backend.destroy(req)


def test_two_filesystems_coexist_on_the_same_nodes(backend: MooseFsBackend,
                                                   lab: Mapping[str, str]) -> None:
    nodes = ("rsa1", "rsa2")
    reqs = [FsRequest(f"itest-co-{i}", str(i), nodes, "ram",
                      {n: lab["RSA_LAB_POOL_RAM"] for n in nodes}, "/run/rsa/mnt")
            for i in (1, 2)]
    try:
        specs = [backend.create(r) for r in reqs]
        assert specs[0].client["master_port"] != specs[1].client["master_port"]
        for s in specs:
            assert backend.health(s).ok
    finally:
        for r in reqs:
            backend.destroy(r)


def test_loopback_data_address_is_refused_before_anything_starts(
        hosts: HostPool, lab: Mapping[str, str]) -> None:
    # a loopback data address: the host lab's nodes' SSH addresses (127.0.1.N), the default
    # without one; the cluster lab's are routable, so one is given
    backend = MooseFsBackend(hosts, addresses={"rsa1": "127.0.0.1"} if in_cluster() else None)
    req = FsRequest("itest-loop", "0", ("rsa1",), "ram", {"rsa1": lab["RSA_LAB_POOL_RAM"]},
                    "/run/rsa/mnt")
    with pytest.raises(FsError, match="loopback"):
        backend.create(req)


def _two_node_request(lab: Mapping[str, str], fs_id: str) -> FsRequest:
    nodes = ("rsa1", "rsa2")
    return FsRequest(fs_id, "0", nodes, "ram", {n: lab["RSA_LAB_POOL_RAM"] for n in nodes},
                     "/run/rsa/mnt")


def test_health_names_the_dead_server_before_asking_a_mount_that_would_hang(
        backend: MooseFsBackend, hosts: HostPool, lab: Mapping[str, str]) -> None:
    """With the request, health looks at the servers' lock files first: a dead master is
    named as such (the mounts' statfs would hang on it until its timeout), so the RAMDISK
    tender starts the repair at once."""
    req = _two_node_request(lab, "itest-hl")
    try:
        spec = backend.create(req)
        assert backend.health(spec, req).ok
        lay = backend.layout(req)
        hosts["rsa1"].run(["mfsmaster", "-c", f"{lay.dir('rsa1')}/mfsmaster.cfg", "kill"],
                          timeout=30)
        # the chunkserver where it runs: the RAMDISK's directory or the standby it claimed
        hosts["rsa2"].run(["sh", "-c", CS_HOME + 'mfschunkserver -c "$(cshome "$0")/'
                           'mfschunkserver.cfg" kill', lay.dir("rsa2")], timeout=30)
        h = backend.health(spec, req)
        assert not h.ok and h.detail == "rsa1: master dead; rsa2: chunkserver dead", h
        assert sorted(backend.repair(req, spec)) == ["chunkserver on rsa2", "master on rsa1"]
        deadline = time.monotonic() + 60  # the mounts reconnect to the new master
        while not (h := backend.health(spec, req)).ok and time.monotonic() < deadline:
            time.sleep(1)
        assert h.ok, h
    finally:
        backend.destroy(req)


def test_a_write_waits_out_a_master_outage_longer_than_a_chaos_run_saw(
        backend: MooseFsBackend, hosts: HostPool, lab: Mapping[str, str]) -> None:
    """A chaos run (docs/reliability.md) lost a job's write to a 33 s master outage:
    mfsioretries=12 gave up after about 30 s. A write started while the master is dead
    must still wait after 45 s and succeed once the master is restarted on its data."""
    req = _two_node_request(lab, "itest-wait")
    node = hosts["rsa1"]
    rc = ""
    try:
        spec = backend.create(req)
        mnt = spec.rsa_mountpoint
        lay = backend.layout(req)
        node.run(["mfsmaster", "-c", f"{lay.dir('rsa1')}/mfsmaster.cfg", "kill"], timeout=30)
        rc = node.run(["mktemp", "-u", "/tmp/itest-wait-rc.XXXXXX"], timeout=30).stdout.strip()
        node.run(["sh", "-c", 'setsid sh -c \'echo late > "$0/late"; echo $? > "$1"\' '
                  '"$0" "$1" </dev/null >/dev/null 2>&1 &', mnt, rc], timeout=30)
        time.sleep(45)
        gone = node.run(["test", "-e", rc], timeout=30, check=False).returncode != 0
        assert gone, "the write ended while the master was still dead"
        assert backend.repair(req, spec) == ["master on rsa1"]
        deadline = time.monotonic() + 90
        while node.run(["test", "-s", rc], timeout=30, check=False).returncode != 0:
            assert time.monotonic() < deadline, "the write never finished after the repair"
            time.sleep(1)
        assert node.run(["cat", rc], timeout=30).stdout.strip() == "0"
        assert node.run(["cat", f"{mnt}/late"], timeout=30).stdout == "late\n"
    finally:
        if rc:
            node.run(["rm", "-f", rc], timeout=30, check=False)
        backend.destroy(req)


def test_dead_servers_and_a_busy_mount_never_hang_teardown(
        backend: MooseFsBackend, hosts: HostPool, lab: Mapping[str, str]) -> None:
    req = _two_node_request(lab, "itest-dead")
    sleeper = ""
    try:
        spec = backend.create(req)
        mnt = spec.rsa_mountpoint
        hosts["rsa2"].run(["dd", f"of={mnt}/f", "status=none"], timeout=30, input="x\n")
        # a process holding the mount busy on rsa2 (EBUSY for a plain umount)
        sleeper = hosts["rsa2"].run(
            ["sh", "-c", 'cd "$0" && setsid sleep 305 </dev/null >/dev/null 2>&1 & echo $!',
             mnt], timeout=30).stdout.strip()
        lay = backend.layout(req)
        for node in req.nodes:  # every server dies at once
            hosts[node].run(["sh", "-c", CS_HOME + 'mfschunkserver -c "$(cshome "$0")/'
                             'mfschunkserver.cfg" kill', lay.dir(node)], timeout=30)
        hosts["rsa1"].run(["mfsmaster", "-c", f"{lay.dir('rsa1')}/mfsmaster.cfg", "kill"],
                          timeout=30)
        assert not backend.health(spec).ok
        start = time.monotonic()
        backend.destroy(req)
        assert time.monotonic() - start < 45
        left = moosefs_leftovers(hosts, req)
        assert not left, left
    finally:
        if sleeper:
            hosts["rsa2"].run(["kill", "-KILL", sleeper], timeout=30, check=False)
        backend.destroy(req)


class _TripHost:
    def __init__(self, host: Any, trip: _Tripwire) -> None:
        self._host, self._trip, self.name = host, trip, host.name

    def run(self, argv: Any, **kw: Any) -> Any:
        self._trip.count += 1
        if self._trip.count == self._trip.after:
            self._trip.token.cancel("demoted")
        return self._host.run(argv, **kw)


class _Tripwire(dict):  # type: ignore[type-arg]
    """The lab's hosts, cancelling ``token`` when the ``after``-th command starts."""

    def __init__(self, hosts: Mapping[str, Any], token: CancelToken, after: int) -> None:
        super().__init__()
        self.token, self.after, self.count = token, after, 0
        for name, host in hosts.items():
            self[name] = _TripHost(host, self)


def test_cancel_during_create_unwinds_everything(
        backend: MooseFsBackend, hosts: HostPool, lab: Mapping[str, str]) -> None:
    req = _two_node_request(lab, "itest-cancel")
    token = CancelToken()
    # Cancel deterministically from inside create (after its 3rd remote command): a timer
    # raced a create that finishes in well under a second once SSH commands are fast.
    tripped = _Tripwire(hosts, token, after=3)
    cancelling = MooseFsBackend(tripped, addresses=backend.addresses, create_timeout=60,
                                destroy_timeout=60, retries=1)
    try:
        with pytest.raises(Cancelled):
            cancelling.create(req, token)
        left = moosefs_leftovers(hosts, req)
        assert not left, left
    finally:
        backend.destroy(req)


# ----------------------------------------------------------------- standby chunkservers

STANDBYS = r"""for sb in "$0"/rsa-mfs-.standby-*; do
  [ -d "$sb" ] || continue
  c=$(readlink "$sb/claim" 2>/dev/null || echo -)
  mfschunkserver -c "$sb/mfschunkserver.cfg" test >/dev/null 2>&1 && a=live || a=dead
  echo "$sb $c $a $(find "$sb/chunks" -type f -name 'chunk_*' | wc -l)"
done"""


def _standbys(backend: MooseFsBackend, node: str, pool: str) -> list[tuple[str, str, str, int]]:
    """(directory, the fs_id that claimed it or -, live|dead, chunk files) of each
    standby in ``pool`` on ``node``."""
    out = backend.hosts[node].run(["sh", "-c", STANDBYS, pool], timeout=30).stdout
    return [(d, c, a, int(n)) for d, c, a, n in (ln.split() for ln in out.splitlines())]


def _await_one_standby(backend: MooseFsBackend, nodes: tuple[str, ...], pool: str,
                       ) -> dict[str, str]:
    """Each node's one live unclaimed standby, once it has scanned its folder (a teardown
    starts it in the background: 1.5 s after it is seen alive)."""
    deadline = time.monotonic() + 30
    while True:
        found = {n: [s for s in _standbys(backend, n, pool) if s[1] == "-"] for n in nodes}
        if all(len(v) == 1 and v[0][2] == "live" for v in found.values()):
            time.sleep(1.5)
            return {n: v[0][0] for n, v in found.items()}
        assert time.monotonic() < deadline, f"no standby chunkserver came up: {found}"
        time.sleep(0.2)


# Prints the pids of this node's standby starts, waiting or running (STANDBY_START, by a
# line of its text; this program's own text never holds that line whole).
STANDBY_STARTS = r"""
import os
mark = b"stayed locked " + b"60 s"
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if mark in f.read():
                print(pid)
    except OSError:
        pass
"""


def _await_no_standby_start(backend: MooseFsBackend, node: str) -> None:
    """Until no standby start is pending on ``node`` (a create's starts 5 s after it; its
    sweep removes a claimed standby whose RAMDISK directory is gone)."""
    deadline = time.monotonic() + 60
    while out := backend.hosts[node].run(["python3", "-c", STANDBY_STARTS],
                                         timeout=30).stdout.split():
        assert time.monotonic() < deadline, f"standby starts still running: {out}"
        time.sleep(0.2)


def test_a_create_takes_the_pools_standby_and_its_teardown_leaves_a_fresh_one(
        backend: MooseFsBackend, lab: Mapping[str, str],
        caplog: pytest.LogCaptureFixture) -> None:
    """The chunkservers of a create are the standbys a teardown left (the log says so),
    registered at the RAMDISK's ports with their space (writes with fsync go through on
    every node), with the RAMDISK's chunks in their folders; the RAMDISK's teardown
    removes them with those chunks, and the next standby of each pool holds nothing."""
    nodes, pool = ("rsa1", "rsa2"), lab["RSA_LAB_POOL_RAM"]
    first, second = (FsRequest(f"itest-sb-{i}", "0", nodes, "ram", {n: pool for n in nodes},
                               "/run/rsa/mnt") for i in (1, 2))
    try:
        backend.create(first)
        backend.destroy(first)  # whatever the pools held: now each has its standby
        ahead = _await_one_standby(backend, nodes, pool)
        caplog.clear()
        with caplog.at_level("INFO", logger="rsa_scheduler.fs.moosefs"):
            spec = backend.create(second)
        assert "itest-sb-2: 2 of 2 chunkservers from standbys" in caplog.text
        assert backend.health(spec).ok
        for node in nodes:
            backend.hosts[node].run(["dd", "if=/dev/urandom", f"of={spec.rsa_mountpoint}/{node}",
                                     "bs=1M", "count=4", "conv=fsync", "status=none"],
                                    timeout=60)
        for node in nodes:
            mine = {d: (c, a, n) for d, c, a, n in _standbys(backend, node, pool)}
            assert mine[ahead[node]][:2] == ("itest-sb-2", "live"), mine
        # the chunks are in the claimed standbys' folders (one of the two holds each file)
        assert sum(n for node in nodes
                   for d, c, a, n in _standbys(backend, node, pool) if c == "itest-sb-2") >= 2
        backend.destroy(second)
        for node in nodes:
            left = _standbys(backend, node, pool)
            assert ahead[node] not in {d for d, *_ in left}, left
            assert all(c == "-" and n == 0 for _, c, _, n in left), left
        assert not moosefs_leftovers(backend.hosts, second)  # type: ignore[arg-type]
    finally:
        backend.destroy(first)
        backend.destroy(second)


def test_a_standby_left_claimed_by_a_ramdisk_that_is_gone_is_swept(
        backend: MooseFsBackend, lab: Mapping[str, str]) -> None:
    """A claimed standby whose RAMDISK's directory is gone (its teardown by an rsad that
    did not know standbys, or a pool cleaned by hand) is killed and removed, with what it
    held, by the next start of a standby in that pool (a teardown's or a create's)."""
    nodes, pool = ("rsa1",), lab["RSA_LAB_POOL_RAM"]
    gone, later = (FsRequest(f"itest-sbg-{i}", "0", nodes, "ram", {"rsa1": pool},
                             "/run/rsa/mnt") for i in (1, 2))
    host = backend.hosts["rsa1"]
    try:
        backend.create(later)
        backend.destroy(later)
        ahead = _await_one_standby(backend, nodes, pool)["rsa1"]
        spec = backend.create(gone)
        host.run(["dd", "if=/dev/urandom", f"of={spec.rsa_mountpoint}/x", "bs=1M", "count=2",
                  "conv=fsync", "status=none"], timeout=60)
        lay = backend.layout(gone, guarded=False)
        d = lay.dir("rsa1")
        # the old teardown: unmount, the master by its lock, the RAMDISK's directory
        host.run(["sh", "-c", UMOUNT_SCRIPT, lay.mountpoint, lay.mount_title], timeout=30)
        host.run(["sh", "-c", 'kill -KILL $(cat "$0/master/.mfsmaster.lock"); '
                  'rm -rf --one-file-system "$0"', d], timeout=30)
        assert [s[1:3] for s in _standbys(backend, "rsa1", pool) if s[0] == ahead] == [
            ("itest-sbg-1", "live")]
        backend.create(later)  # its background standby start sweeps the pool
        deadline = time.monotonic() + 20
        while any(s[0] == ahead for s in _standbys(backend, "rsa1", pool)):
            assert time.monotonic() < deadline, "the orphaned standby was not swept"
            time.sleep(0.2)
        assert not moosefs_leftovers(backend.hosts, gone)  # type: ignore[arg-type]
    finally:
        backend.destroy(gone)
        backend.destroy(later)


def test_without_standbys_every_chunkserver_starts_cold(
        lab: Mapping[str, str], hosts: HostPool, caplog: pytest.LogCaptureFixture) -> None:
    """``filesystem.moosefs_standby: false``: a create claims none (also when the pools
    hold one) and a teardown starts none."""
    backend = lab_moosefs(lab, hosts, standby=False)
    nodes, pool = ("rsa1", "rsa2"), lab["RSA_LAB_POOL_RAM"]
    req = FsRequest("itest-sboff", "0", nodes, "ram", {n: pool for n in nodes}, "/run/rsa/mnt")
    before = {n: _standbys(backend, n, pool) for n in nodes}
    try:
        with caplog.at_level("INFO", logger="rsa_scheduler.fs.moosefs"):
            spec = backend.create(req)
        assert "itest-sboff: 0 of 2 chunkservers from standbys" in caplog.text
        assert backend.health(spec).ok
    finally:
        backend.destroy(req)
    assert {n: _standbys(backend, n, pool) for n in nodes} == before


def test_two_creates_at_once_on_a_node_never_share_its_standby(
        backend: MooseFsBackend, lab: Mapping[str, str],
        caplog: pytest.LogCaptureFixture) -> None:
    """Two creates on the same node at the same time: one claims the pool's standby, the
    other starts its chunkserver cold (the claim is atomic); both RAMDISKs work."""
    pool = lab["RSA_LAB_POOL_RAM"]
    warm, reqs = (FsRequest("itest-sbc-0", "0", ("rsa1",), "ram", {"rsa1": pool},
                            "/run/rsa/mnt"),
                  [FsRequest(f"itest-sbc-{i}", "0", ("rsa1",), "ram", {"rsa1": pool},
                             "/run/rsa/mnt") for i in (1, 2)])
    try:
        backend.create(warm)
        backend.destroy(warm)
        _await_one_standby(backend, ("rsa1",), pool)
        with caplog.at_level("INFO", logger="rsa_scheduler.fs.moosefs"), \
                ThreadPoolExecutor(max_workers=2) as both:
            specs = list(both.map(backend.create, reqs))
        said = sorted(ln for ln in caplog.text.splitlines() if "from standbys" in ln)
        assert sum("1 of 1 chunkservers from standbys" in ln for ln in said) == 1, said
        assert sum("0 of 1 chunkservers from standbys" in ln for ln in said) == 1, said
        for spec in specs:
            assert backend.health(spec).ok
        claims = [c for _, c, _, _ in _standbys(backend, "rsa1", pool) if c != "-"]
        assert len(claims) == 1 and claims[0] in {r.fs_id for r in reqs}, claims
    finally:
        for req in (warm, *reqs):
            backend.destroy(req)


HOLD_PORT = r"""
import socket, sys, time
s = socket.socket()
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen()
print("held", flush=True)
time.sleep(120)
"""


def test_a_standby_that_cannot_take_the_ramdisks_port_is_removed_not_left_claimed(
        backend: MooseFsBackend, lab: Mapping[str, str]) -> None:
    """A reload that cannot bind the RAMDISK's port keeps the old one and says nothing:
    the claim sees the standby's own socket is not on the port, kills and removes the
    standby (nothing of it left claimed) and starts the chunkserver cold, whose failure
    (the port is taken) is the step's error."""
    pool = lab["RSA_LAB_POOL_RAM"]
    req = FsRequest("itest-sbp", "0", ("rsa1",), "ram", {"rsa1": pool}, "/run/rsa/mnt")
    host = backend.hosts["rsa1"]
    warm = FsRequest("itest-sbp-0", "0", ("rsa1",), "ram", {"rsa1": pool}, "/run/rsa/mnt")
    holder = ""
    try:
        backend.create(warm)
        backend.destroy(warm)
        ahead = _await_one_standby(backend, ("rsa1",), pool)["rsa1"]
        lay = backend.layout(req, random_base(set(), 4, slots=155), new_secret())
        host.run(sh_chain(["tar", "-x", "-C", pool, "-f", "-"]), timeout=30,
                 input=lay.tarball("rsa1"))
        port, address = lay.cs_port("rsa1"), lay.addresses["rsa1"]
        holder = host.run(["sh", "-c", 'setsid python3 -c "$0" "$@" >"$3" 2>&1 & echo $!',
                           HOLD_PORT, address, str(port), f"{lay.dir('rsa1')}/held"],
                          timeout=30).stdout.strip()
        deadline = time.monotonic() + 10
        while host.run(["cat", f"{lay.dir('rsa1')}/held"], timeout=30).stdout != "held\n":
            assert time.monotonic() < deadline, "the port holder did not start"
            time.sleep(0.1)
        r = host.run(["sh", "-c", CS_START, lay.dir("rsa1"), "1", str(port), STANDBY_START,
                      *backend._standby_args(lay, "rsa1")], timeout=60, check=False)
        assert r.returncode == 1, (r.stdout, r.stderr)
        # each line true: the standby went, the cold start was tried and failed
        assert r.stderr.splitlines()[0] == (f"standby {ahead} did not take port {port}: "
                                            "removed; the chunkserver starts cold"), r.stderr
        assert r.stderr.splitlines()[1].startswith("mfschunkserver failed"), r.stderr
        assert ahead not in {d for d, *_ in _standbys(backend, "rsa1", pool)}
        left = [ln for ln in moosefs_leftovers(backend.hosts, req)  # type: ignore[arg-type]
                if "pool entry" not in ln]  # its directory: the teardown's, below
        assert not left, left
    finally:
        if holder.isdigit():
            host.run(["kill", "-KILL", holder], timeout=30, check=False)
        backend.destroy(req)
        backend.destroy(warm)


# Another user's "master" for the standbys: listens on (address, port) if it may, prints
# "held" (or "refused ERRNO"), then "connected" for the first connection within $3 s.
FAKE_MASTER = r"""
import socket, sys
s = socket.socket()
try:
    s.bind((sys.argv[1], int(sys.argv[2])))
    s.listen()
except OSError as e:
    print("refused", e.errno, flush=True)
    sys.exit(0)
print("held", flush=True)
s.settimeout(float(sys.argv[3]))
try:
    s.accept()
    print("connected", flush=True)
except OSError:
    print("none", flush=True)
"""


def test_no_user_on_an_rsa_node_can_be_a_standbys_master(
        backend: MooseFsBackend, lab: Mapping[str, str]) -> None:
    """A standby connects at its start (then hourly) to the "master" of its config, on its
    node's data address. Users run commands on RSA nodes (staging, PRE/POSTPROCESS): one
    listening there became the master of every standby started meanwhile (the guard keeps
    users off the servers' ports, not off answering root's connections), which could
    fill the standby's folder before another user's create claimed it, or make that
    create fail (MooseFS keeps the first master's metaid). The port is one only root may
    listen on: the other lab user cannot take it, and no standby connects to them."""
    pool, other = lab["RSA_LAB_POOL_RAM"], lab["RSA_LAB_OTHER_USER"]
    warm = FsRequest("itest-sbm", "0", ("rsa1",), "ram", {"rsa1": pool}, "/run/rsa/mnt")
    lay = backend.layout(warm, guarded=False)
    _, address, master_port, *_ = backend._standby_args(lay, "rsa1")
    before = {d for d, *_ in _standbys(backend, "rsa1", pool)}
    fake = subprocess.Popen(["runuser", "-u", other, "--", "python3", "-c", FAKE_MASTER,
                             address, master_port, "60"],
                            stdout=subprocess.PIPE, text=True, cwd="/")
    try:
        assert fake.stdout is not None
        first = fake.stdout.readline().strip()
        # a create claims the pool's standby (or starts cold) and starts the next one
        backend.create(warm)
        backend.destroy(warm)
        deadline = time.monotonic() + 30
        while True:
            new = [s for s in _standbys(backend, "rsa1", pool)
                   if s[0] not in before and s[1] == "-" and s[2] == "live"]
            if new:
                break
            assert time.monotonic() < deadline, "no new standby came up"
            time.sleep(0.2)
        cfg = backend.hosts["rsa1"].run(["cat", f"{new[0][0]}/mfschunkserver.cfg"],
                                        timeout=30).stdout
        assert f"MASTER_HOST = {address}\n" in cfg and f"MASTER_PORT = {master_port}\n" in cfg
        time.sleep(2)  # its first connect is at its start
    finally:
        fake.kill()
        rest = fake.communicate(timeout=30)[0]
    assert "connected" not in rest, (first, rest)
    assert first.startswith("refused"), first


def test_a_claim_left_by_an_earlier_build_never_hides_the_ramdisks_chunkserver(
        backend: MooseFsBackend, lab: Mapping[str, str], hosts: HostPool) -> None:
    """A standby claimed by a RAMDISK whose directory went without it (a teardown by an
    rsad without standbys), then the same fs_id built again on the node (its chunkserver
    cold: ``moosefs_standby: false``): the health check looks at the new build's
    chunkserver, not the old claim's (which lived on, pointed at the old master), and
    the teardown kills it (it was left running, its directory removed)."""
    pool = lab["RSA_LAB_POOL_RAM"]
    req = FsRequest("itest-sbr", "0", ("rsa1",), "ram", {"rsa1": pool}, "/run/rsa/mnt")
    warm = FsRequest("itest-sbr-0", "0", ("rsa1",), "ram", {"rsa1": pool}, "/run/rsa/mnt")
    host, cold = backend.hosts["rsa1"], lab_moosefs(lab, hosts, standby=False)
    lay = backend.layout(req, guarded=False)
    d, pid = lay.dir("rsa1"), ""
    try:
        backend.create(warm)
        backend.destroy(warm)
        ahead = _await_one_standby(backend, ("rsa1",), pool)["rsa1"]
        backend.create(req)  # claims `ahead`
        _await_one_standby(backend, ("rsa1",), pool)  # its next: the sweep kept `ahead`
        # no sweep after the directory goes (the creates' starts would remove `ahead`)
        _await_no_standby_start(backend, "rsa1")
        # the old teardown: unmount, the master by its lock, the RAMDISK's directory
        host.run(["sh", "-c", UMOUNT_SCRIPT, lay.mountpoint, lay.mount_title], timeout=30)
        host.run(["sh", "-c", 'kill -KILL $(cat "$0/master/.mfsmaster.lock"); '
                  'rm -rf --one-file-system "$0"', d], timeout=30)
        assert [s[1:3] for s in _standbys(backend, "rsa1", pool) if s[0] == ahead] == [
            ("itest-sbr", "live")]
        spec = cold.create(req)
        pid = host.run(["cat", f"{d}/cs/.mfschunkserver.lock"], timeout=30).stdout.strip()
        assert pid.isdigit(), pid
        assert cold.health(spec, req).ok
        host.run(["kill", "-KILL", pid], timeout=30)
        deadline = time.monotonic() + 10  # its lock goes once it has exited
        while (dead := cold._dead_servers(req, spec)) != {"rsa1": "chunkserver dead"}:
            assert time.monotonic() < deadline, dead
            time.sleep(0.1)
        cold.repair(req, spec)
        pid = host.run(["cat", f"{d}/cs/.mfschunkserver.lock"], timeout=30).stdout.strip()
        cold.destroy(req)
        assert not moosefs_leftovers(backend.hosts, req)  # type: ignore[arg-type]
    finally:
        if pid.isdigit():  # the old code left it running
            host.run(["sh", "-c", 'tr "\\0" " " < /proc/$0/cmdline | grep -qF -- "$1" && '
                      'kill -KILL "$0"', pid, f"{d}/mfschunkserver.cfg"],
                     timeout=30, check=False)
        backend.destroy(req)
        backend.destroy(warm)
