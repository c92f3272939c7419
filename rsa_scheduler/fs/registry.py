"""Filesystem backend discovery through the ``rsa_scheduler.filesystems`` entry points.

Owns :func:`available` (every registered backend, loaded or not, with the reason a load
failed), :func:`backend_class` (one backend by name: a missing optional dependency fails
here, only when that backend is selected, with one actionable line) and
:func:`make_backend` (a configured instance for a tier). Must not import any backend
module directly: entry points are the only link (certbot ``plugins/disco.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any

from rsa_scheduler.fs.base import FilesystemBackend, FsError
from rsa_scheduler.hosts import Host

if TYPE_CHECKING:
    from rsa_scheduler.config.schema import Config

GROUP = "rsa_scheduler.filesystems"


@dataclass(frozen=True, slots=True)
class Registered:
    """One entry point: the class if it imported, else the import error."""

    name: str
    target: str  # "module:Class"
    cls: type[FilesystemBackend] | None
    error: BaseException | None

    @property
    def usable(self) -> bool:
        return self.cls is not None


def _load(ep: EntryPoint) -> Registered:
    try:
        obj = ep.load()
    except Exception as e:  # ImportError, or anything a broken plugin raises on import
        return Registered(ep.name, ep.value, None, e)
    if not (isinstance(obj, type) and issubclass(obj, FilesystemBackend)):
        return Registered(ep.name, ep.value, None,
                          TypeError(f"{ep.value} is not a FilesystemBackend subclass"))
    return Registered(ep.name, ep.value, obj, None)


def available(eps: Mapping[str, EntryPoint] | None = None) -> dict[str, Registered]:
    """Every backend registered in the entry-point group, each loaded (or its error)."""
    found = eps if eps is not None else {ep.name: ep for ep in entry_points(group=GROUP)}
    return {name: _load(ep) for name, ep in sorted(found.items())}


def backend_class(name: str, eps: Mapping[str, EntryPoint] | None = None
                  ) -> type[FilesystemBackend]:
    """The backend class registered as ``name``; FsError with one line if unusable."""
    found = eps if eps is not None else {ep.name: ep for ep in entry_points(group=GROUP)}
    if name not in found:
        known = ", ".join(sorted(found)) or "none"
        raise FsError(f"filesystem backend {name!r} is not installed (registered: {known}); "
                      "check filesystem.backend in the configuration")
    reg = _load(found[name])
    if reg.cls is None:
        raise FsError(f"filesystem backend {name!r} ({reg.target}) cannot be loaded: "
                      f"{type(reg.error).__name__}: {reg.error}; install its dependencies "
                      "or choose another backend") from reg.error
    return reg.cls


def make_backend(cfg: Config, tier: str, hosts: Mapping[str, Host],
                 **options: Any) -> FilesystemBackend:
    """The configured backend of ``tier`` (``ram``/``ssd``): the config's timeouts and
    retries, the backend's own settings (``config_options``), then ``options``."""
    fs = cfg.filesystem
    by_tier = {str(k): v for k, v in fs.backend.items()}
    if tier not in by_tier:
        raise FsError(f"no filesystem backend configured for tier {tier!r} "
                      "(filesystem.backend)")
    cls = backend_class(by_tier[tier])
    return cls(hosts, create_timeout=fs.create_timeout, destroy_timeout=fs.destroy_timeout,
               retries=fs.retries, **{**cls.config_options(cfg), **options})
