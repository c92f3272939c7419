"""The tmpfs backend on this machine (LocalHost, a temp pool): the conformance contract,
plus its refusal to client-mount a pool that lives on another machine. Needs root for
the bind mounts (skipped otherwise)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from rsa_scheduler.fs.base import FilesystemBackend, FsError, FsRequest, MountSpec
from rsa_scheduler.fs.registry import backend_class
from rsa_scheduler.fs.tmpfs import TmpfsBackend
from rsa_scheduler.hosts import CancelToken, LocalHost
from rsa_scheduler.runner import run
from tests.fs_conformance import FsConformance, Leftovers, MakeRequest

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="bind mounts need root")


@pytest.fixture
def backend() -> TmpfsBackend:
    return TmpfsBackend({"rsa1": LocalHost("rsa1")}, create_timeout=10, destroy_timeout=10)


@pytest.fixture
def make_request(backend: TmpfsBackend, tmp_path: Path) -> Iterator[MakeRequest]:
    made: list[FsRequest] = []
    (tmp_path / "pool").mkdir()

    def make(suffix: str) -> FsRequest:
        req = FsRequest(fs_id=f"t-{suffix}", job_id="1", nodes=("rsa1",), tier="ram",
                        pool_dirs={"rsa1": str(tmp_path / "pool")},
                        mount_root=str(tmp_path / "mnt"))
        made.append(req)
        return req

    yield make
    for req in made:
        backend.destroy(req)


@pytest.fixture
def leftovers() -> Leftovers:
    def left(req: FsRequest) -> list[str]:
        found = []
        mnt = f"{req.mount_root}/{req.fs_id}"
        if run(["findmnt", "--mountpoint", mnt], timeout=10, check=False).returncode == 0:
            found.append(f"mount {mnt}")
        found += [f"pool entry {p}" for p in Path(req.pool_dirs["rsa1"]).iterdir()]
        return found
    return left


class FailsAfterMount(TmpfsBackend):
    """The last create step (writing spec.json) fails: the mount must be unwound."""

    def _run(self, node: str, argv: Sequence[str], timeout: float, *, check: bool = True,
             input: str | None = None, cancel: CancelToken | None = None) -> str:
        if argv[0] == "dd":
            raise FsError(f"{node}: injected failure")
        return super()._run(node, argv, timeout, check=check, input=input, cancel=cancel)


class TestTmpfsConformance(FsConformance):
    def half_build(self, backend: FilesystemBackend, req: FsRequest) -> None:
        # killed between mkdir and mount: data dir without a mount, no spec
        Path(req.pool_dirs["rsa1"], f"rsa-tmpfs-{req.fs_id}").mkdir()

    def broken_backend(self, backend: FilesystemBackend) -> FilesystemBackend | None:
        return FailsAfterMount(backend.hosts)


def test_registered_under_its_name() -> None:
    assert backend_class("tmpfs") is TmpfsBackend


def test_refuses_more_than_one_node(backend: TmpfsBackend, tmp_path: Path) -> None:
    req = FsRequest("t-two", "1", ("rsa1", "rsa2"), "ram",
                    {"rsa1": str(tmp_path), "rsa2": str(tmp_path)}, str(tmp_path / "m"))
    with pytest.raises(FsError, match="exactly one RSA node"):
        backend.create(req)


def test_client_mount_is_a_bind_mount_on_the_same_host(backend: TmpfsBackend) -> None:
    spec = MountSpec("tmpfs", "t-x", ("rsa1",), "/m/t-x", {"node": "rsa1", "path": "/p/d"})
    assert backend.client_mount_argv(spec, "/c") == ["mount", "--bind", "/p/d", "/c"]


def test_client_mount_refused_for_a_remote_rsa_node() -> None:
    class Remote:
        name = "rsa1"

    backend = TmpfsBackend({"rsa1": Remote()})  # type: ignore[dict-item]
    spec = MountSpec("tmpfs", "t-x", ("rsa1",), "/m/t-x", {"node": "rsa1", "path": "/p/d"})
    with pytest.raises(FsError, match="cannot mount rsa1's pool on another machine"):
        backend.client_mount_argv(spec, "/c")
    shared = TmpfsBackend({"rsa1": Remote()}, shared_pool=True)  # type: ignore[dict-item]
    assert shared.client_mount_argv(spec, "/c")[:2] == ["mount", "--bind"]
