"""MooseFS backend pure parts: reading ``mfscli -SCS`` (real 3.0.117 output captured in the
lab) and the create-time wait for chunk servers that can take writes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from rsa_scheduler.fs.base import FsError, FsRequest
from rsa_scheduler.fs.common import Deadline
from rsa_scheduler.fs.moosefs import (
    Layout,
    MooseFsBackend,
    chunkservers_listed,
    chunkservers_ready,
)
from rsa_scheduler.hosts import CancelToken
from rsa_scheduler.runner import Completed

DATA = Path(__file__).parent.parent / "data" / "moosefs"
REGISTERED = (DATA / "mfscli-SCS-registered.txt").read_text()
SCANNED = (DATA / "mfscli-SCS-scanned.txt").read_text()


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

    def run(self, argv: Sequence[str], *, timeout: float, check: bool = True,
            input: str | None = None, as_user: object = None,
            env: Mapping[str, str] | None = None,
            cancel: CancelToken | None = None) -> Completed:
        assert argv[0] == "mfscli" and "-SCS" in argv
        out = self.outputs[min(self.calls, len(self.outputs) - 1)]
        self.calls += 1
        return Completed(tuple(argv), 0, out, "", 0.0)


def _layout(host: ScriptedHost) -> tuple[MooseFsBackend, Layout]:
    backend = MooseFsBackend({"rsa1": host}, addresses={"rsa1": "10.213.0.1"})
    req = FsRequest(fs_id="job1-c1", job_id="1", nodes=("rsa1",), tier="ram",
                    pool_dirs={"rsa1": "/pool"}, mount_root="/mnt")
    lay = backend.layout(req, base=22944)  # chunkserver of node 0 at base+3 = 22947
    return backend, lay


def test_create_waits_until_every_chunkserver_has_reported_its_space() -> None:
    host = ScriptedHost(["", REGISTERED, REGISTERED, SCANNED])
    backend, lay = _layout(host)
    backend._wait_chunkservers(lay, Deadline(10, "t"), None)
    assert host.calls == 4


def test_create_gives_up_when_a_chunkserver_never_reports_space() -> None:
    host = ScriptedHost([REGISTERED])
    backend, lay = _layout(host)
    with pytest.raises(FsError, match="0/1 chunkservers registered with the master and "
                                      "reported their space"):
        backend._wait_chunkservers(lay, Deadline(0.5, "t"), None)


def test_only_the_rsa_nodes_own_mounts_cache_file_entries() -> None:
    from rsa_scheduler.fs.base import MountSpec

    host = ScriptedHost([SCANNED])
    backend, lay = _layout(host)
    rsa_side = lay.mount_argv(lay.mountpoint, backend.rsa_node_options)
    assert "mfsentrycacheto=1" in " ".join(rsa_side)
    spec = MountSpec("moosefs", "job1-c1", ("rsa1",), "/mnt/job1-c1",
                     {"master_host": "10.213.0.1", "master_port": 22946,
                      "options": list(backend.client_options)})
    compute = backend.client_mount_argv(spec, "/run/rsa/node/c1/1/ramdisk")
    assert "mfsentrycacheto" not in " ".join(compute)
    assert compute[-2:] == ["-o", "mfsioretries=12"]
