"""Filesystem backend discovery through the ``rsa_scheduler.filesystems`` entry points.

Owns :func:`names` (every registered name, nothing imported), :func:`available` (every
registered backend, loaded or not, with the reason a load failed), :func:`backend_class`
(one backend by name: a missing optional dependency fails here, only when that backend is
selected, with one actionable line) and :func:`build` (an instance with the settings the
configuration gives it). Must not import any backend module directly: entry points are
the only link. Must not import the configuration (``config.backends`` asks this module).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from rsa_scheduler.fs.base import BackendSettings, FilesystemBackend, FsError
from rsa_scheduler.hosts import Host

GROUP = "rsa_scheduler.filesystems"
# The shipped backends are always known: a source tree that was never installed has no
# entry points (pyproject.toml registers exactly these).
SHIPPED: tuple[str, ...] = ("beeond", "moosefs", "tmpfs")
_SHIPPED_TARGETS: Mapping[str, str] = {
    "beeond": "rsa_scheduler.fs.beeond:BeeondBackend",
    "moosefs": "rsa_scheduler.fs.moosefs:MooseFsBackend",
    "tmpfs": "rsa_scheduler.fs.tmpfs:TmpfsBackend",
}


def _registered() -> dict[str, EntryPoint]:
    try:
        found = {ep.name: ep for ep in entry_points(group=GROUP)}
    except Exception:  # broken metadata must not hide the shipped backends
        found = {}
    for name, target in _SHIPPED_TARGETS.items():
        found.setdefault(name, EntryPoint(name, target, GROUP))
    return found


def names() -> tuple[str, ...]:
    """Every backend name a site may choose: the registered entry points and the shipped
    ones (names only: nothing is imported)."""
    return tuple(sorted(_registered()))


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
    found = eps if eps is not None else _registered()
    return {name: _load(ep) for name, ep in sorted(found.items())}


def backend_class(name: str, eps: Mapping[str, EntryPoint] | None = None
                  ) -> type[FilesystemBackend]:
    """The backend class registered as ``name``; FsError with one line if unusable."""
    found = eps if eps is not None else _registered()
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


def build(name: str, hosts: Mapping[str, Host], settings: BackendSettings,
          **options: Any) -> FilesystemBackend:
    """Backend ``name`` with the configuration's timeouts and retries, its own settings
    (``config_options``), then ``options``."""
    cls = backend_class(name)
    return cls(hosts, create_timeout=settings.create_timeout,
               destroy_timeout=settings.destroy_timeout, retries=settings.retries,
               **{**cls.config_options(settings), **options})
