"""A staging command that finds the RAMDISK not answering (EIO, ENOTCONN) gets a
diagnosis: rsad asks the backend whether the filesystem itself is broken and says so in
the error, instead of a bare "will retry" (issue 13)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from rsa_scheduler.config import load_config_text
from rsa_scheduler.daemon.data import DataPath
from rsa_scheduler.fs.base import FilesystemBackend, FsRequest, Health, MountSpec
from rsa_scheduler.hosts import CancelToken, Host
from rsa_scheduler.runner import CommandError
from rsa_scheduler.staging.report import StagingError, classify

SPEC = MountSpec("tmpfs", "job7-c1", ("rsa1",), "/run/rsa/mnt/job7-c1", {})
CFG = load_config_text("pool:\n  nodes:\n    - names: rsa1\n      capacity: 2G\n")


class Backend(FilesystemBackend):
    name = "probe"

    def __init__(self, health: Health | Exception) -> None:
        super().__init__({})
        self.answer = health
        self.asked: list[MountSpec] = []

    def create(self, req: FsRequest, cancel: CancelToken | None = None) -> MountSpec:
        raise NotImplementedError

    def destroy(self, req: FsRequest) -> None:
        raise NotImplementedError

    def health(self, spec: MountSpec) -> Health:
        self.asked.append(spec)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer

    def client_mount_argv(self, spec: MountSpec, mountpoint: str) -> list[str]:
        raise NotImplementedError


def data_path(backend: Backend) -> DataPath:
    hosts: Mapping[str, Host] = {}
    dp = DataPath(CFG, hosts, {CFG.pool.members()[0].tier.value: backend})
    return dp


def unanswered() -> StagingError:
    err = CommandError(["rsync"], 23, (
        'rsync: [receiver] write failed on "/run/rsa/mnt/job7-c1/a": '
        "Transport endpoint is not connected (107)\n"))
    return classify(err, "stage-out", "rsa1")


def test_classify_marks_a_filesystem_that_does_not_answer() -> None:
    e = unanswered()
    assert e.unanswered and not e.permanent and "does not answer" in str(e)
    perm = classify(CommandError(["rsync"], 23, "open: Permission denied\n"),
                    "stage-out", "rsa1")
    assert not perm.unanswered


def test_a_broken_filesystem_is_named_in_the_error() -> None:
    backend = Backend(Health(False, "chunkserver on rsa1 is not running"))
    with pytest.raises(StagingError) as caught, data_path(backend).diagnosed(SPEC):
        raise unanswered()
    msg = str(caught.value)
    assert msg.startswith("stage-out on rsa1: the filesystem does not answer")
    assert msg.endswith("the RAMDISK's filesystem is broken: "
                        "chunkserver on rsa1 is not running")
    assert not caught.value.permanent and caught.value.unanswered
    assert "\n" not in msg and backend.asked == [SPEC]


def test_a_healthy_filesystem_leaves_the_error_as_it_was() -> None:
    backend = Backend(Health(True))
    err = unanswered()
    with pytest.raises(StagingError) as caught, data_path(backend).diagnosed(SPEC):
        raise err
    assert caught.value is err and backend.asked == [SPEC]


def test_a_failing_probe_never_hides_the_original_error() -> None:
    backend = Backend(RuntimeError("ssh: connect to host rsa1: Connection refused"))
    err = unanswered()
    with pytest.raises(StagingError) as caught, data_path(backend).diagnosed(SPEC):
        raise err
    assert caught.value is err


@pytest.mark.parametrize("raised", [
    StagingError("DATA_IN /pfs/u/in does not exist", permanent=True),
    ValueError("not a staging error"),
])
def test_other_errors_are_not_probed(raised: Exception) -> None:
    backend = Backend(Health(False, "broken"))
    with pytest.raises(type(raised)) as caught, data_path(backend).diagnosed(SPEC):
        raise raised
    assert caught.value is raised and backend.asked == []


def test_success_is_not_probed() -> None:
    backend = Backend(Health(False, "broken"))
    out: dict[str, Any] = {}
    with data_path(backend).diagnosed(SPEC):
        out["done"] = True
    assert out and backend.asked == []
