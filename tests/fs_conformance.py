"""The contract every filesystem backend must pass (certbot ``dns_test_common`` style).

A backend's test module subclasses :class:`FsConformance` and provides three fixtures:

- ``backend`` — a configured :class:`FilesystemBackend`;
- ``make_request`` — a factory ``(suffix) -> FsRequest`` whose filesystems the fixture
  destroys at teardown, also when a test fails;
- ``leftovers`` — ``(FsRequest) -> list[str]``: every process, mount or pool entry of
  that filesystem still present on its nodes (empty = clean).

It may override :meth:`half_build` (leave a filesystem half built, as a daemon killed in
the middle of ``create`` would) and :meth:`broken_backend` (a backend whose create fails
late, to check that the cleanup stack unwinds it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from rsa_scheduler.fs.base import FilesystemBackend, FsError, FsRequest, MountSpec
from rsa_scheduler.runner import Completed

MakeRequest = Callable[[str], FsRequest]
Leftovers = Callable[[FsRequest], list[str]]


def run_on(backend: FilesystemBackend, node: str, argv: list[str]) -> Completed:
    return backend.hosts[node].run(argv, timeout=60)


class FsConformance:
    """Create → use from every node → health → reset → destroy, idempotence, half-builds."""

    def half_build(self, backend: FilesystemBackend, req: FsRequest) -> None:
        """Default: a complete create; backends override with a real partial state."""
        backend.create(req)

    def broken_backend(self, backend: FilesystemBackend) -> FilesystemBackend | None:
        """A backend whose create fails after starting something; None: not testable."""
        return None

    def _write_read_everywhere(self, backend: FilesystemBackend, spec: MountSpec) -> None:
        mnt = spec.rsa_mountpoint
        for node in spec.nodes:
            backend.hosts[node].run(["dd", f"of={mnt}/from-{node}", "status=none"],
                                    timeout=60, input=f"written on {node}\n")
        want = sorted(f"{mnt}/from-{n}:written on {n}" for n in spec.nodes)
        for reader in spec.nodes:  # every file, read back on every node
            got = run_on(backend, reader, ["grep", "-r", ".", mnt]).stdout.splitlines()
            assert sorted(got) == want, reader

    def test_create_use_health_destroy(self, backend: FilesystemBackend,
                                       make_request: MakeRequest,
                                       leftovers: Leftovers) -> None:
        req = make_request("life")
        spec = backend.create(req)
        assert spec.backend == backend.name and spec.fs_id == req.fs_id
        assert tuple(spec.nodes) == tuple(req.nodes)
        assert MountSpec.from_json(spec.to_json()) == spec
        self._write_read_everywhere(backend, spec)
        health = backend.health(spec)
        assert health.ok, health.detail
        backend.destroy(req)
        left = leftovers(req)
        assert not left, left
        assert not backend.health(spec).ok

    def test_reset_leaves_it_empty(self, backend: FilesystemBackend,
                                   make_request: MakeRequest) -> None:
        req = make_request("reset")
        spec = backend.create(req)
        self._write_read_everywhere(backend, spec)
        spec2 = backend.reset(req)
        for node in spec2.nodes:
            assert run_on(backend, node, ["ls", "-A", spec2.rsa_mountpoint]).stdout == ""
        assert backend.health(spec2).ok

    def test_the_root_is_the_jobs_users_and_private_also_after_reset(
            self, backend: FilesystemBackend, make_request: MakeRequest) -> None:
        req = dataclasses.replace(make_request("owner"), owner=(4242, 4343))
        for spec in (backend.create(req), backend.reset(req)):
            for node in spec.nodes:
                got = run_on(backend, node, ["stat", "-c", "%u:%g %a", spec.rsa_mountpoint])
                assert got.stdout.split() == ["4242:4343", "700"], node

    def test_create_and_destroy_are_idempotent(self, backend: FilesystemBackend,
                                               make_request: MakeRequest,
                                               leftovers: Leftovers) -> None:
        req = make_request("idem")
        spec = backend.create(req)
        node = spec.nodes[0]
        run_on(backend, node, ["touch", f"{spec.rsa_mountpoint}/keep"])
        again = backend.create(req)  # a re-issue after a daemon restart: same FS, same data
        assert again == spec
        assert run_on(backend, node, ["ls", spec.rsa_mountpoint]).stdout.split() == ["keep"]
        backend.destroy(req)
        backend.destroy(req)
        left = leftovers(req)
        assert not left, left

    def test_destroy_removes_a_half_built_filesystem(self, backend: FilesystemBackend,
                                                     make_request: MakeRequest,
                                                     leftovers: Leftovers) -> None:
        req = make_request("half")
        self.half_build(backend, req)
        assert leftovers(req) != []
        backend.destroy(req)
        left = leftovers(req)
        assert not left, left

    def test_failed_create_unwinds(self, backend: FilesystemBackend,
                                   make_request: MakeRequest, leftovers: Leftovers) -> None:
        broken = self.broken_backend(backend)
        if broken is None:
            pytest.skip("backend has no late-failure injection")
        req = make_request("broken")
        with pytest.raises(FsError):
            broken.create(req)
        left = leftovers(req)
        assert not left, left
