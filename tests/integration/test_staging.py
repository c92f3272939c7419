"""The staging engine in the lab: a real 4-node MooseFS RAMDISK, SshHost, the lab user.

Stage-in DATA_IN (on the PFS) into the RAMDISK over rsa[1-4] as ``rsauser``, stage-out and
verify back to the PFS; refusal of unreadable input and of another user's DATA_OUT;
cancellation kills every transfer; tar aggregation; PRE/POSTPROCESS; verify reading what
the PFS holds, not what a node's page cache kept of it (a chunk changed on the PFS
chunkserver's disk behind its clients). The RAMDISK is
mounted inside the RSA nodes' mount namespaces only, so contents are compared through
what comes back out (and the engine's own content-hash verify).
"""

from __future__ import annotations

import base64
import logging
import os
import re
import shutil
import subprocess
import tarfile
import threading
import time
import zlib
from collections.abc import Iterator, Mapping
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import pytest

from rsa_scheduler.fs.base import FsRequest, MountSpec
from rsa_scheduler.fs.moosefs import MooseFsBackend
from rsa_scheduler.hosts import Cancelled, CancelToken
from rsa_scheduler.remote import SshHost
from rsa_scheduler.runner import Identity
from rsa_scheduler.staging import StagingEngine, StagingError
from tests.integration.fskit import lab_data_addresses
from tests.integration.slurmkit import in_cluster, lab_nodes, on_node, pfs_writes_at
from tests.unit.test_staging_engine import add_whole_directory, make_tree, tree_state

MOUNT_ROOT = "/run/rsa-staging-it"


@pytest.fixture(scope="module")
def hosts(lab: Mapping[str, str]) -> Iterator[list[SshHost]]:
    addrs = lab["RSA_LAB_RSA_ADDRESSES"].split(",")
    made = [SshHost(f"rsa{i + 1}", a, key=lab["RSA_LAB_SSH_KEY"],
                    known_hosts=lab["RSA_LAB_SSH_KNOWN_HOSTS"]) for i, a in enumerate(addrs)]
    yield made
    for h in made:
        h.close()


@pytest.fixture(scope="module")
def ramfs(lab: Mapping[str, str], hosts: list[SshHost], user: Identity) -> Iterator[MountSpec]:
    """A real MooseFS RAMDISK over every RSA node's RAM pool, destroyed afterwards; its
    root is the lab user's (as the daemon makes it the job's user's)."""
    by_name = {h.name: h for h in hosts}
    # each node's data address of the lab's rsa.yaml (the host lab: its PFS veth's host
    # end; the cluster lab: the node's own on the RSA data network)
    addresses = lab_data_addresses(lab)
    backend = MooseFsBackend(by_name, addresses={n: addresses[n] for n in by_name})
    req = FsRequest(fs_id=f"stagingit{os.getpid()}-c1", job_id=f"stagingit{os.getpid()}",
                    nodes=tuple(by_name), tier="ram",
                    pool_dirs={n: lab["RSA_LAB_POOL_RAM"] for n in by_name},
                    mount_root=MOUNT_ROOT, owner=(user.uid, user.gid))
    try:
        yield backend.create(req)
    finally:
        backend.destroy(req)


@pytest.fixture(scope="module")
def user(lab: Mapping[str, str]) -> Identity:
    return Identity.of(lab["RSA_LAB_USER"])


@pytest.fixture
def work(lab: Mapping[str, str], user: Identity, request: pytest.FixtureRequest
         ) -> Iterator[Path]:
    """A scratch directory of the lab user's on the PFS (removed afterwards)."""
    base = Path(lab["RSA_LAB_PFS"]) / f"rsa-staging-it-{os.getpid()}-{request.node.name}"
    base.mkdir()
    os.chown(base, user.uid, user.gid)
    try:
        yield base
    finally:
        subprocess.run(["chmod", "-R", "u+rwx", str(base)], check=False)
        shutil.rmtree(base, ignore_errors=True)


def make_engine(hosts: list[SshHost], user: Identity, **kw: Any) -> StagingEngine:
    return StagingEngine(hosts, user, job_id="4242", **kw)


def job_root(ramfs: MountSpec, name: str) -> str:
    return f"{ramfs.rsa_mountpoint}/{name}"


def test_stage_in_out_identical_over_four_nodes(hosts: list[SshHost], ramfs: MountSpec,
                                                user: Identity, work: Path) -> None:
    src = make_tree(work / "in", user)
    eng = make_engine(hosts, user, parallel_per_node=2)
    ram = job_root(ramfs, "roundtrip")
    eng.prepare_root(ram)
    stats = eng.stage_in(str(src), ram)
    assert stats.files == 51 and len(stats.per_node) >= 2  # spread over the RSA nodes
    into = eng.verify(ram, str(src))  # the RAMDISK against DATA_IN, content hashes
    assert into.ok and into.checked == 54, into.summary()
    again = eng.stage_in(str(src), ram)  # a re-run after a restart: nothing to redo
    assert again.files == 0 and again.already == 51
    out = work / "out"
    eng.stage_out(ram, str(out))
    assert tree_state(out) == tree_state(src)
    assert eng.verify(ram, str(out)).ok

    tar_out = work / "tar"
    tstats = eng.stage_out(ram, str(tar_out), method="tar")
    assert len(tstats.archives) >= 2 and (tar_out / "rsa-4242.index").exists()
    assert eng.verify(ram, str(tar_out), method="tar").ok
    back = work / "back"
    back.mkdir()
    for archive in sorted(tar_out.glob("rsa-4242-*.tar"), reverse=True):
        subprocess.run(["tar", "-xpf", str(archive), "-C", str(back)], check=True)
    os.chmod(back, os.stat(src).st_mode & 0o7777)
    assert tree_state(back) == tree_state(src)


def test_a_tar_verify_reads_only_the_archives_its_index_names(
        hosts: list[SshHost], ramfs: MountSpec, user: Identity, work: Path) -> None:
    """Review 2026-11-30, on MooseFS over four RSA nodes: verify read every
    rsa-<job>-*.tar of DATA_OUT, a member in two counting as the last one's. An earlier
    job's archive with the id (rsa-4242-7.tar, its 'sub dir/f005' other bytes) failed
    this run's verify; this run's last archive cut short at its last member (``tar -t``
    lists it without an error) passed while another such file held that member."""
    src = make_tree(work / "in", user)
    eng = make_engine(hosts, user)
    ram = job_root(ramfs, "tarindex")
    eng.prepare_root(ram)
    eng.stage_in(str(src), ram)
    out = work / "tar"
    out.mkdir()
    old = work / "old"
    (old / "sub dir").mkdir(parents=True)
    (old / "sub dir" / "f005").write_bytes(b"an earlier job's output")

    def pack(root: Path, archive: Path, name: str) -> None:
        subprocess.run(["tar", "--no-recursion", "--format=posix", "-C", str(root), "-cf",
                        str(archive), "--", name], check=True)
        os.chown(archive, user.uid, user.gid)

    pack(old, out / "rsa-4242-7.tar", "sub dir/f005")
    os.chown(out, user.uid, user.gid)
    stats = eng.stage_out(ram, str(out), method="tar")
    assert str(out / "rsa-4242-7.tar") not in stats.archives
    v = eng.verify(ram, str(out), method="tar")
    assert v.ok, v.summary(str(out))
    last = Path(stats.archives[-2])  # (the index is the last)
    with tarfile.open(last) as t:
        member = [m for m in t.getmembers() if m.isfile()][-1]
    with open(last, "r+b") as f:
        f.truncate(member.offset)
    pack(src, out / "rsa-4242-9.tar", member.name)
    v = eng.verify(ram, str(out), method="tar")
    lost = os.fsencode(member.name.removeprefix("./"))
    assert not v.ok and [d.path for d in v.differences] == [lost], v.summary(str(out))


def test_whole_directories_round_trip_over_four_nodes(
        hosts: list[SshHost], ramfs: MountSpec, user: Identity, work: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    """Directories copied by one recursive tar each (read-only ones, links inside,
    odd names) come out identical through the MooseFS RAMDISK."""
    src = make_tree(work / "in", user)
    add_whole_directory(src, user)
    eng = make_engine(hosts, user, parallel_per_node=2)
    ram = job_root(ramfs, "whole")
    eng.prepare_root(ram)
    with caplog.at_level(logging.INFO, logger="rsa_scheduler.staging.engine"):
        eng.stage_in(str(src), ram)
        out = work / "out"
        eng.stage_out(ram, str(out))
    assert [r for r in caplog.messages if "(1 of whole directories" in r][:2] == [
        r for r in caplog.messages if "whole directories" in r]
    assert eng.verify(ram, str(src)).ok
    assert tree_state(out) == tree_state(src)
    assert eng.verify(ram, str(out)).ok


def test_a_striped_stage_in_keeps_the_sources_mtime_on_every_node(
        hosts: list[SshHost], ramfs: MountSpec, user: Identity, work: Path) -> None:
    """One file copied in ranges by every node's own MooseFS client: once placed, it
    has the source's mtime as every node sees it, also after the clients reported their
    writes (~1 s later). Before each range's node set the mtime itself, a client's late
    report of its write time replaced the mtime placement had set."""
    src = work / "in"
    src.mkdir()
    big = src / "big"
    with big.open("wb") as f:
        for _ in range(16):
            f.write(os.urandom(16 << 20))  # 256 MiB: 8 ranges of 32 MiB
    old = 1577880000  # 2020-01-01: far from any write time
    os.utime(big, (old, old))
    subprocess.run(["chown", "-R", f"{user.uid}:{user.gid}", str(src)], check=True)
    eng = make_engine(hosts, user, parallel_per_node=2, stripe_bytes=64 << 20,
                      stripe_min=16 << 20)
    ram = job_root(ramfs, "striped")
    eng.prepare_root(ram)
    stats = eng.stage_in(str(src), ram)
    assert len(stats.per_node) == 4, stats.per_node  # every node wrote ranges
    time.sleep(3)  # past the clients' reports of their own writes
    for h in hosts:
        seen = h.run(["stat", "-c", "%Y %s", f"{ram}/big"], timeout=30).stdout.split()
        assert seen == [str(old), str(16 << 24)], (h.name, seen)
    assert eng.verify(ram, str(src)).ok  # and the bytes are the source's


def test_verify_catches_damage(hosts: list[SshHost], ramfs: MountSpec, user: Identity,
                               work: Path) -> None:
    src = make_tree(work / "in", user, files=5)
    eng = make_engine(hosts, user)
    ram = job_root(ramfs, "damage")
    eng.prepare_root(ram)
    eng.stage_in(str(src), ram)
    out = work / "out"
    eng.stage_out(ram, str(out))
    with open(out / "big", "r+b") as f:
        f.truncate(1000)
    f3 = out / "sub dir" / "f003"
    st = f3.stat()
    f3.write_bytes(b"X" * st.st_size)
    os.utime(f3, ns=(st.st_atime_ns, st.st_mtime_ns))
    (out / "link").unlink()
    v = eng.verify(ram, str(out))
    assert not v.ok
    assert {d.path for d in v.differences} >= {b"big", b"sub dir/f003", b"link"}
    assert "truncated" in v.summary() and "content differs" in v.summary()


def test_user_cannot_stage_a_root_only_file(hosts: list[SshHost], ramfs: MountSpec,
                                            user: Identity, work: Path) -> None:
    src = work / "in"
    src.mkdir()
    (src / "mine").write_text("ok")
    (src / "shadow-copy").write_text("root only")
    os.chmod(src / "shadow-copy", 0o600)  # owned by root
    os.chown(src, user.uid, user.gid)
    eng = make_engine(hosts, user)
    ram = job_root(ramfs, "refused")
    eng.prepare_root(ram)
    with pytest.raises(StagingError) as err:
        eng.stage_in(str(src), ram)
    assert err.value.permanent and "shadow-copy" in str(err.value)


def test_user_cannot_write_into_another_users_data_out(
        lab: Mapping[str, str], hosts: list[SshHost], ramfs: MountSpec, user: Identity,
        work: Path) -> None:
    src = make_tree(work / "in", user, files=3)
    eng = make_engine(hosts, user)
    ram = job_root(ramfs, "other")
    eng.prepare_root(ram)
    eng.stage_in(str(src), ram)
    theirs = f"{lab['RSA_LAB_OTHER_PFS']}/stolen-{os.getpid()}"
    with pytest.raises(StagingError) as err:
        eng.stage_out(ram, theirs)
    assert err.value.permanent and "permission denied" in str(err.value)
    assert not os.path.exists(theirs)


def user_procs(lab: Mapping[str, str], user: Identity, token: str) -> list[str]:
    """The user's processes naming ``token``: on this host (the host lab's RSA nodes share
    its processes), or on each RSA node of the cluster lab, through the door."""
    argv = ["pgrep", "-a", "-u", str(user.uid), "-f", token]
    if in_cluster():
        return [f"{node}: {line}" for node in lab_nodes(lab, "RSA_LAB_RSA_NODES")
                for line in on_node(node, argv, check=False).stdout.splitlines()]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    return done.stdout.splitlines()


def test_cancel_kills_every_transfer_on_every_node(
        lab: Mapping[str, str], hosts: list[SshHost], user: Identity, work: Path) -> None:
    """The host lab: from this host's /var/tmp (its RSA nodes' too) to the PFS, throttled
    to ~100 MB/s by the lab. The cluster lab: from the PFS (this host's /var/tmp is no RSA
    node's) to the PFS, its writes shaped to ~100 MB/s for the test (it is not
    throttled there)."""
    token = f"rsa-staging-cancel-{os.getpid()}"
    src = work / f"{token}-src" if in_cluster() else Path("/var/tmp") / token
    src.mkdir()
    try:
        for i in range(8):  # 8 x 64 MiB of data that does not compress or sparse away
            (src / f"part{i}").write_bytes(os.urandom(64 << 20))
        subprocess.run(["chown", "-R", f"{user.uid}:{user.gid}", str(src)], check=True)
        cancel = CancelToken()
        eng = make_engine(hosts, user, cancel=cancel, big_bytes=1 << 20)
        slow = work / token  # the PFS: ~100 MB/s, so 512 MiB takes ~5 s
        result: list[BaseException] = []

        def run() -> None:
            try:
                eng.stage_in(str(src), str(slow))
            except BaseException as e:
                result.append(e)

        with pfs_writes_at(lab, "800mbit") if in_cluster() else nullcontext():
            t = threading.Thread(target=run)
            t.start()
            deadline = time.monotonic() + 10
            while not user_procs(lab, user, token) and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(1.0)
            assert user_procs(lab, user, token), "no transfer seen running"
            t0 = time.monotonic()
            cancel.cancel("demoted")
            t.join(15)
            assert not t.is_alive()
            assert time.monotonic() - t0 < 8
            assert result and isinstance(result[0], Cancelled)
            deadline = time.monotonic() + 5
            while user_procs(lab, user, token) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert user_procs(lab, user, token) == []
    finally:
        shutil.rmtree(src, ignore_errors=True)


def test_pre_and_postprocess(hosts: list[SshHost], ramfs: MountSpec, user: Identity,
                             work: Path) -> None:
    eng = make_engine(hosts, user)
    ram = job_root(ramfs, "scripts")
    eng.prepare_root(ram)
    res = eng.run_script(["sh", "-c", 'env | grep ^RSA_ | sort; id -u; pwd; '
                          'echo made > "$RSA_RAMDISK/pre-made"; echo warn >&2; exit 0'],
                         "stage-in", ramdisk=ram, data_in=str(work), data_out=str(work / "o"))
    assert res.ok, res.summary()
    lines = res.stdout_tail.splitlines()
    assert lines[:7] == [f"RSA_DATA_IN={work}", f"RSA_DATA_OUT={work / 'o'}",
                         "RSA_JOB_ID=4242", "RSA_NODE=rsa1", "RSA_NODES=rsa[1-4]",
                         "RSA_PHASE=stage-in", f"RSA_RAMDISK={ram}"]
    assert lines[7:] == [str(user.uid), ram] and res.stderr_tail == "warn\n"
    post = eng.run_script(["sh", "-c", 'cat "$RSA_RAMDISK/pre-made"; exit 7'], "stage-out",
                          ramdisk=ram)
    assert post.returncode == 7 and post.stdout_tail == "made\n" and not post.ok


def _keep_crc(block: bytearray, fix: int, want: int) -> None:
    """Set ``block[fix:fix + 4]`` so that the block's CRC-32 is ``want`` again: the CRC
    is affine in those 32 bits, so 32 probes and an elimination over GF(2) find them."""
    block[fix:fix + 4] = bytes(4)
    base = zlib.crc32(block)
    basis: dict[int, tuple[int, int]] = {}  # pivot bit -> (crc change, bits of x)
    for i in range(32):
        block[fix + i // 8] = 1 << (i % 8)
        v, x = zlib.crc32(block) ^ base, 1 << i
        block[fix + i // 8] = 0
        for bit in range(31, -1, -1):
            if v >> bit & 1:
                if bit not in basis:
                    basis[bit] = (v, x)
                    break
                v, x = v ^ basis[bit][0], x ^ basis[bit][1]
    target, x = want ^ base, 0
    for bit in range(31, -1, -1):
        if target >> bit & 1:
            target, x = target ^ basis[bit][0], x ^ basis[bit][1]
    block[fix:fix + 4] = x.to_bytes(4, "little")
    assert zlib.crc32(block) == want


def change_behind_the_clients(path: Path, marker: bytes) -> None:
    """Change one byte of ``path`` where ``marker`` is in its data, in the chunk file on
    the PFS chunkserver's disk, behind every client's back: no client is told, and the
    64 KiB block's CRC is kept (four bytes after it are set to match), so the chunkserver
    serves the new bytes as valid. Size and mtime stay."""
    info = subprocess.run(["mfsfileinfo", str(path)], capture_output=True, text=True,
                          check=True).stdout
    for cid, ver in re.findall(r"\b([0-9A-F]{16})_([0-9A-F]{8})\b", info):
        for chunk, data in pfs_chunks(f"chunk_{cid}_{ver}.mfs"):
            at = data.find(marker, 8192)  # header 4 KiB, CRCs 4 KiB, then the data
            if at < 0:
                continue
            start = 8192 + (at - 8192) // 65536 * 65536
            block = bytearray(data[start:start + 65536])
            want = zlib.crc32(block)
            block[at - start] ^= 0x01
            _keep_crc(block, at - start + 1, want)
            write_pfs_chunk(chunk, start, bytes(block))
            return
    raise AssertionError(f"{marker!r} of {path} not found in its chunks: {info}")


#: the cluster lab's PFS chunkserver: on the node ``pfs``, its chunk directory named in
#: its mfshdd.cfg (lab/cluster/rsacluster.py PFS_CHUNKS)
PFS_NODE = "pfs"


def pfs_chunks(name: str) -> list[tuple[str, bytes]]:
    """Each chunk file called ``name`` on the PFS's chunkservers, with its bytes: the host
    lab's, under /var/lib/rsa-lab/pfs on this host; the cluster lab's, on its PFS node."""
    if not in_cluster():
        return [(str(c), c.read_bytes())
                for c in Path("/var/lib/rsa-lab/pfs").glob(f"cs*/chunks/*/{name}")]
    found = on_node(PFS_NODE, ["sh", "-c", 'for d in $(cat /etc/mfs/mfshdd.cfg); do '
                               'ls "$d"/*/"$0" 2>/dev/null; done; exit 0', name]).stdout
    return [(c, base64.b64decode(on_node(PFS_NODE, ["base64", "-w0", c]).stdout))
            for c in found.split()]


def write_pfs_chunk(chunk: str, start: int, data: bytes) -> None:
    """``data`` over the chunk file's bytes from ``start`` on (where pfs_chunks found it)."""
    if not in_cluster():
        with open(chunk, "r+b") as f:
            f.seek(start)
            f.write(data)
        return
    on_node(PFS_NODE, ["sh", "-ec", 'base64 -d | dd of="$0" bs=65536 seek="$1" '
                       "oflag=seek_bytes conv=notrunc status=none", chunk, str(start)],
            input=base64.b64encode(data).decode())


@pytest.mark.parametrize("method, stream", [("rsync", 0), ("tar", 0), ("rsync", 3)],
                         ids=["listed", "tar", "streamed"])
def test_verify_reads_what_the_pfs_holds_not_a_nodes_page_cache(
        hosts: list[SshHost], user: Identity, work: Path, method: str, stream: int) -> None:
    """A small output file (or its archive) is in the RSA nodes' client's page cache, as
    the node that wrote it holds it, while the PFS's copy is changed behind that client
    (one byte in the chunk on the chunkserver's disk, CRC kept; MooseFS tells no
    client). Verify must read what the PFS holds and fail. Before it dropped the files
    from the reading client's cache, the listed, tar and streamed verifies read the
    cached bytes and passed."""
    src = work / "src"
    src.mkdir()
    body = os.urandom(192 << 10)
    (src / "result.bin").write_bytes(body)
    for i in range(3):
        (src / f"small{i}").write_bytes(os.urandom(100))
    subprocess.run(["chown", "-R", f"{user.uid}:{user.gid}", str(src)], check=True)
    eng = make_engine(hosts, user, stream_objects=stream)
    dst = work / "out"
    stats = eng.stage_out(str(src), str(dst), method=method)
    written = Path(stats.archives[0]) if method == "tar" else dst / "result.bin"
    subprocess.run(["cat", str(written)], stdout=subprocess.DEVNULL, check=True)  # cached
    change_behind_the_clients(written, body[100_000:100_016])
    v = eng.verify(str(src), str(dst), method=method)
    assert not v.ok and [d.path for d in v.differences] == [b"result.bin"], v.summary(str(dst))
    assert "content differs" in v.summary(str(dst))
