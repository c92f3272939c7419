"""Backend discovery through entry points: a broken or missing backend fails only when
selected, with one actionable line."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from rsa_scheduler.fs.base import FsError
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
    from rsa_scheduler.fs.moosefs import MooseFsBackend
    from rsa_scheduler.fs.registry import make_backend

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


def test_an_installed_backend_package_is_a_valid_config_choice(tmp_path: Path) -> None:
    """A site's own backend, registered through the entry point group, can be named in
    filesystem.backend (the config asks the registry's group, not a fixed list); an
    unregistered name is still refused."""
    dist = tmp_path / "rsa_site_fs-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: rsa-site-fs\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[{GROUP}]\nlustre = rsa_site_fs:Backend\n")
    check = textwrap.dedent("""
        from rsa_scheduler.config import load_config_text
        from rsa_scheduler.errors import ConfigError
        pool = "pool:\\n  nodes:\\n    - names: rsa1\\n      capacity: 2G\\n"
        cfg = load_config_text(pool + "filesystem:\\n  backend:\\n    ram: lustre\\n")
        print(cfg.filesystem.backend)
        try:
            load_config_text(pool + "filesystem:\\n  backend:\\n    ram: gpfs\\n")
        except ConfigError as e:
            print("refused:", e)
    """)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True,
                         env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "'lustre'" in out.stdout and "refused:" in out.stdout and "gpfs" in out.stdout
    assert "lustre" in out.stdout.split("refused:")[1]  # the choices offered name it
