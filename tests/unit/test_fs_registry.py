"""Backend discovery through entry points: a broken or missing backend fails only when
selected, with one actionable line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from rsa_scheduler.core.policy import Tier
from rsa_scheduler.fs.base import Capabilities, FsError, FsRequest
from rsa_scheduler.fs.registry import GROUP, available, backend_class
from rsa_scheduler.fs.tmpfs import TmpfsBackend


def _eps(**targets: str) -> dict[str, EntryPoint]:
    return {n: EntryPoint(n, v, GROUP) for n, v in targets.items()}


def test_the_three_shipped_backends_are_registered_and_load() -> None:
    found = available()
    assert {"beeond", "moosefs", "tmpfs"} <= set(found)
    for name in ("beeond", "moosefs", "tmpfs"):
        reg = found[name]
        assert reg.usable and reg.cls is not None and reg.cls.name == name, reg.error


def test_a_missing_dependency_fails_only_when_selected() -> None:
    eps = _eps(tmpfs="rsa_scheduler.fs.tmpfs:TmpfsBackend",
               lustre="rsa_scheduler_lustre_plugin:Backend")
    found = available(eps)
    assert found["tmpfs"].usable and not found["lustre"].usable
    assert isinstance(found["lustre"].error, ImportError)
    assert backend_class("tmpfs", eps) is TmpfsBackend
    with pytest.raises(FsError) as info:
        backend_class("lustre", eps)
    msg = str(info.value)
    assert "cannot be loaded" in msg and "ModuleNotFoundError" in msg and "\n" not in msg
    assert isinstance(info.value.__cause__, ImportError)


def test_unknown_name_and_non_backend_targets() -> None:
    eps = _eps(odd="rsa_scheduler.fs.common:sh_chain")
    with pytest.raises(FsError, match=r"'nope' is not installed \(registered: odd"):
        backend_class("nope", eps)
    with pytest.raises(FsError, match="not a FilesystemBackend"):
        backend_class("odd", eps)


def test_make_backend_gives_each_backend_its_settings_from_the_configuration() -> None:
    from rsa_scheduler.config import load_config_text
    from rsa_scheduler.config.backends import make_backend
    from rsa_scheduler.fs.moosefs import MooseFsBackend

    cfg = load_config_text("""
pool:
  nodes:
    - {names: "rsa[1-2]", capacity: 1G, data_address: "10.9.0.{num}"}
filesystem:
  backend: {ram: moosefs}
  destroy_timeout: 3m
  client_networks: [10.1.0.0/16]
  moosefs_proxy: "off"
""")
    b = make_backend(cfg, "ram", {})
    assert isinstance(b, MooseFsBackend)
    assert b.addresses == {"rsa1": "10.9.0.1", "rsa2": "10.9.0.2"}
    assert (b.client_networks, b.proxy_address, b.destroy_timeout) == (
        ("10.1.0.0/16",), None, 180.0)
    # an explicit option wins over the configuration's
    explicit = make_backend(cfg, "ram", {}, proxy_address="127.83.65.9")
    assert isinstance(explicit, MooseFsBackend)
    assert explicit.proxy_address == "127.83.65.9"
    with pytest.raises(FsError, match="no filesystem backend configured for tier 'nvme'"):
        make_backend(cfg, "nvme", {})


SITE_BACKEND = """
from typing import ClassVar
from rsa_scheduler.core.policy import Tier
from rsa_scheduler.fs.base import Capabilities, FilesystemBackend

class Backend(FilesystemBackend):
    name: ClassVar[str] = "lustre"

    def create(self, req, cancel=None): raise NotImplementedError
    def destroy(self, req): raise NotImplementedError
    def health(self, spec, req=None): raise NotImplementedError
    def client_mount_argv(self, spec, mountpoint): raise NotImplementedError

class Scratch(Backend):
    name: ClassVar[str] = "scratch"
    capabilities: ClassVar[Capabilities] = Capabilities(
        tiers=frozenset({Tier.SSD}), multi_node=False, reset=False, access_control=False)
"""


def _site_package(tmp_path: Path) -> dict[str, str]:
    """A site's own backend package installed beside rsa-scheduler: a module and a
    dist-info registering three backends (one whose module is missing)."""
    (tmp_path / "rsa_site_fs.py").write_text(SITE_BACKEND)
    dist = tmp_path / "rsa_site_fs-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: rsa-site-fs\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        f"[{GROUP}]\nlustre = rsa_site_fs:Backend\nscratch = rsa_site_fs:Scratch\n"
        "gone = rsa_site_fs_missing:Backend\n")
    return {**os.environ, "PYTHONPATH": str(tmp_path)}


def _load_each(env: dict[str, str], *files: str) -> list[str]:
    """Load each config text in a fresh interpreter that sees the site package: its
    filesystem.backend and warnings, or the one line of its error."""
    check = textwrap.dedent("""
        import json, sys
        from rsa_scheduler.config import load_config_text
        from rsa_scheduler.errors import ConfigError
        for text in json.load(sys.stdin):
            try:
                cfg = load_config_text(text)
                print("ok", {str(k): v for k, v in cfg.filesystem.backend.items()},
                      list(cfg.warnings))
            except ConfigError as e:
                print("refused:", str(e).replace("\\n", " | "))
    """)
    out = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True,
                         env=env, timeout=60, input=json.dumps(files))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == len(files), out.stdout
    return lines


POOL = "pool:\n  nodes:\n    - {names: rsa1, capacity: 2G, tier: %s}\n"


def test_an_installed_backend_package_is_a_valid_config_choice(tmp_path: Path) -> None:
    """A site's own backend, registered through the entry point group, can be named in
    filesystem.backend (the config asks the registry, not a fixed list); an unregistered
    name is still refused, and one registered but not loadable is refused when chosen."""
    lustre, gpfs, gone = _load_each(
        _site_package(tmp_path),
        POOL % "ram" + "filesystem:\n  backend:\n    ram: lustre\n",
        POOL % "ram" + "filesystem:\n  backend:\n    ram: gpfs\n",
        POOL % "ram" + "filesystem:\n  backend:\n    ram: gone\n")
    assert lustre.startswith("ok {'ram': 'lustre', 'ssd': 'moosefs'} [")
    assert "reset" not in lustre and "access" not in lustre  # the default capabilities
    assert gpfs.startswith("refused:") and "gpfs" in gpfs
    assert "lustre" in gpfs and "scratch" in gpfs  # the choices offered name them
    assert gone == (
        "refused: <string>:6: filesystem.backend.ram: filesystem backend 'gone' "
        "(rsa_site_fs_missing:Backend) cannot be loaded: ModuleNotFoundError: No module "
        "named 'rsa_site_fs_missing'; install its dependencies or choose another backend")


def test_config_validation_asks_a_site_backend_what_it_can_do(tmp_path: Path) -> None:
    """The capabilities a third-party backend declares are checked as the shipped ones'
    are: a tier it does not serve and more than one node are refused, no reset and no
    access control are warned about."""
    scratch = "filesystem:\n  backend:\n    ram: moosefs\n    ssd: scratch\n"
    ssd = "allocation: {default_tier: ssd}\n"
    one_node = "allocation: {default_tier: ssd, max_nodes: 1, max_request: 1}\n"
    wrong_tier, many, single = _load_each(
        _site_package(tmp_path),
        POOL % "ram" + "filesystem:\n  backend:\n    ram: scratch\n",
        POOL % "ssd" + scratch + ssd,
        POOL % "ssd" + scratch + one_node)
    assert wrong_tier == ("refused: <string>:6: filesystem.backend.ram: scratch cannot "
                          "serve tier ram (it serves ssd)")
    assert many == ("refused: <string>:7: filesystem.backend.ssd: scratch serves a single "
                    "RSA node; set allocation.max_nodes and allocation.max_request to 1, "
                    "or use beeond or lustre or moosefs")
    assert single.startswith("ok {'ram': 'moosefs', 'ssd': 'scratch'} [")
    assert "filesystem.backend.ssd: scratch cannot reset a RAMDISK for output: a job " \
           "with DATA_IN and DATA_OUT writes its output to the PFS" in single
    assert "filesystem.backend.ssd: scratch has no access control" in single


def test_each_shipped_backend_declares_what_it_can_do() -> None:
    caps = {name: reg.cls.capabilities for name, reg in available().items()
            if name in ("beeond", "moosefs", "tmpfs") and reg.cls is not None}
    assert set(caps) == {"beeond", "moosefs", "tmpfs"}
    for c in caps.values():
        assert c.tiers == frozenset({Tier.RAM, Tier.SSD}) and c.reset and c.access_control
    assert (caps["beeond"].multi_node, caps["moosefs"].multi_node,
            caps["tmpfs"].multi_node) == (True, True, False)
    with pytest.raises(ValueError, match="at least one tier"):
        Capabilities(tiers=frozenset())


def test_a_backend_gets_its_own_keys_of_the_filesystem_section() -> None:
    from rsa_scheduler.config import load_config_text
    from rsa_scheduler.config.backends import backend_settings, option_key, own_options

    cfg = load_config_text("""
pool:
  nodes:
    - {names: "rsa[1-2]", capacity: 1G, tier: ssd, data_address: "10.9.0.{num}"}
allocation: {default_tier: ssd}
filesystem:
  backend: {ssd: beeond}
  moosefs_proxy: 127.83.65.7
  beeond: {port_shift_min: 3000, port_shift_max: 3990}
""")
    fs = cfg.filesystem
    assert own_options(fs, "moosefs") == {"proxy": "127.83.65.7", "standby": True}
    beeond = own_options(fs, "beeond")
    assert (beeond["port_shift_min"], beeond["port_shift_max"]) == (3000, 3990)
    assert own_options(fs, "tmpfs") == {} and own_options(fs, "lustre") == {}
    assert option_key(fs, "moosefs", ("proxy",)) == ("filesystem", "moosefs_proxy")
    assert option_key(fs, "beeond", ("client_options", 2)) == (
        "filesystem", "beeond", "client_options", 2)
    s = backend_settings(fs, "beeond", cfg.pool)
    assert s.tiers == {Tier.SSD} and s.addresses == {"rsa1": "10.9.0.1", "rsa2": "10.9.0.2"}
    assert backend_settings(fs, "moosefs", cfg.pool).tiers == frozenset()


def test_a_backend_that_cannot_reset_refuses_with_one_line() -> None:
    class NoReset(TmpfsBackend):
        capabilities = Capabilities(reset=False)

    req = FsRequest(fs_id="job1-c1", job_id="1", nodes=("rsa1",), tier="ram",
                    pool_dirs={"rsa1": "/p"}, mount_root="/m")
    with pytest.raises(FsError, match=r"^job1-c1: the tmpfs backend cannot reset a RAMDISK "
                                      r"for output; the job writes its output to the PFS$"):
        NoReset({}).reset(req)
