"""The configuration's side of the filesystem backends: it asks them, they never read it.

Owns what the configuration gives a backend (:func:`backend_settings`: timeouts, the RSA
nodes' data addresses, the client networks and the backend's own keys of the
``filesystem`` section), validating the backends a site chose against what each says it
can do (:func:`check_backends`: its :class:`~rsa_scheduler.fs.base.Capabilities` and its
own :meth:`~rsa_scheduler.fs.base.FilesystemBackend.check_settings`), and the configured
backend of a tier (:func:`make_backend`). Backends are found through the registry (the
``rsa_scheduler.filesystems`` entry points), so a site's own backend package is validated
exactly like the shipped three. Must not import the loader or the CLI.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, is_dataclass
from typing import Any

from rsa_scheduler.config.schema import Config, FilesystemConfig, PoolConfig
from rsa_scheduler.config.yamldoc import KeyPath
from rsa_scheduler.core.policy import AllocationPolicy, Tier
from rsa_scheduler.fs import registry
from rsa_scheduler.fs.base import BackendSettings, FilesystemBackend, FsError
from rsa_scheduler.hosts import Host


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing wrong with the backends' configuration: ``warning`` findings are
    reported and the configuration still loads."""

    key: KeyPath
    reason: str
    warning: bool = False


def own_options(fs: FilesystemConfig, name: str) -> dict[str, Any]:
    """Backend ``name``'s own keys of ``filesystem``: the keys of section
    ``filesystem.<name>`` and ``filesystem.<name>_<key>`` as ``<key>``."""
    out: dict[str, Any] = {}
    for f in fields(fs):
        value = getattr(fs, f.name)
        if f.name == name and is_dataclass(value):
            out.update({s.name: getattr(value, s.name) for s in fields(value)})
        elif f.name.startswith(f"{name}_"):
            out[f.name.removeprefix(f"{name}_")] = value
    return out


def option_key(fs: FilesystemConfig, name: str, key: tuple[str | int, ...]) -> KeyPath:
    """Where an option :func:`own_options` gave backend ``name`` lives in the file."""
    head = key[0] if key else ""
    if any(f.name == name for f in fields(fs)) and not any(
            f.name == f"{name}_{head}" for f in fields(fs)):
        return ("filesystem", name, *key)
    return ("filesystem", f"{name}_{head}", *key[1:])


def backend_settings(fs: FilesystemConfig, name: str, pool: PoolConfig | None = None
                     ) -> BackendSettings:
    """What the configuration gives backend ``name``; ``pool`` (when valid) adds the RSA
    nodes' addresses and the tiers with nodes the backend serves."""
    addresses: dict[str, str] = {}
    tiers: frozenset[Tier] = frozenset()
    if pool is not None:
        addresses = {n.name: n.data_address or n.address for n in pool.members()}
        tiers = frozenset(t for t in pool.by_tier() if fs.backend.get(t) == name)
    return BackendSettings(create_timeout=fs.create_timeout,
                           destroy_timeout=fs.destroy_timeout, retries=fs.retries,
                           addresses=addresses, client_networks=tuple(fs.client_networks),
                           tiers=tiers, options=own_options(fs, name))


def make_backend(cfg: Config, tier: str, hosts: Mapping[str, Host],
                 **options: Any) -> FilesystemBackend:
    """The configured backend of ``tier`` (``ram``/``ssd``): the config's timeouts and
    retries, the backend's own settings (``config_options``), then ``options``."""
    fs = cfg.filesystem
    by_tier = {str(k): v for k, v in fs.backend.items()}
    if tier not in by_tier:
        raise FsError(f"no filesystem backend configured for tier {tier!r} "
                      "(filesystem.backend)")
    name = by_tier[tier]
    return registry.build(name, hosts, backend_settings(fs, name, cfg.pool), **options)


def check_backends(fs: FilesystemConfig, pool: PoolConfig | None,
                   policy: AllocationPolicy | None) -> list[Finding]:
    """Ask the registered backends: every one that loads checks its own settings (they
    are in the file whether it is chosen or not); every one a tier with nodes chose
    (``pool`` and ``policy`` valid) must load and be able to serve it."""
    found = registry.available()
    usable = {name: reg.cls for name, reg in found.items() if reg.cls is not None}
    out: list[Finding] = []
    for name, cls in usable.items():
        settings = backend_settings(fs, name, pool)
        out.extend(Finding(option_key(fs, name, p.key), p.reason)
                   for p in cls.check_settings(settings))
    if pool is None or policy is None:
        return out
    for tier in pool.by_tier():
        chosen = fs.backend.get(tier)
        key: KeyPath = ("filesystem", "backend", tier.value)
        if chosen is None:
            out.append(Finding(key, f"no backend for tier {tier.value}, which has nodes"))
            continue
        backend = usable.get(chosen)
        if backend is None:
            try:
                registry.backend_class(chosen)
            except FsError as e:
                out.append(Finding(key, str(e)))
            continue
        out.extend(_capable(backend, tier, key, policy, usable))
    return out


def _capable(cls: type[FilesystemBackend], tier: Tier, key: KeyPath,
             policy: AllocationPolicy, usable: Mapping[str, type[FilesystemBackend]]
             ) -> list[Finding]:
    caps, name = cls.capabilities, cls.name
    if tier not in caps.tiers:
        served = ", ".join(sorted(t.value for t in caps.tiers))
        return [Finding(key, f"{name} cannot serve tier {tier.value} (it serves {served})")]
    out: list[Finding] = []
    if not caps.multi_node and (policy.max_nodes > 1 or policy.max_request > 1):
        others = [n for n, c in sorted(usable.items()) if c.capabilities.multi_node
                  and tier in c.capabilities.tiers]
        use = f", or use {' or '.join(others)}" if others else ""
        out.append(Finding(key, f"{name} serves a single RSA node; set "
                                f"allocation.max_nodes and allocation.max_request to 1{use}"))
    if not caps.reset:
        out.append(Finding(key, f"{name} cannot reset a RAMDISK for output: a job with "
                                "DATA_IN and DATA_OUT writes its output to the PFS",
                           warning=True))
    if not caps.access_control:
        out.append(Finding(key, f"{name} has no access control: other users of a node "
                                "that mounts a RAMDISK can reach its data", warning=True))
    return out


__all__ = ["Finding", "backend_settings", "check_backends", "make_backend", "own_options"]
