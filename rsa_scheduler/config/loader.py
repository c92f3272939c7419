"""Loading, merging and validating the configuration.

Owns where the config file is found (``--config`` > ``$RSA_CONFIG`` > ``/etc/rsa/rsa.yaml``),
reading YAML with line numbers, merging the site file over the shipped ``defaults.yaml``,
converting every key to the typed objects of :mod:`rsa_scheduler.config.schema`, the
cross-field checks, and the errors: every problem is collected (not just the first) and
reported as ``FILE[:LINE]: KEY: REASON`` in one :class:`ConfigErrors`.

Merging: mappings merge key by key; a list or a scalar in the site file replaces the
default entirely (``staging.allowed_roots: [/gpfs]`` drops ``/home``).

The shipped defaults alone are a valid config with an empty pool (for tooling and tests,
:func:`load_defaults`); a site file loaded with :func:`load_config` must define at least
one RSA node, since a daemon without RSA nodes does nothing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from rsa_scheduler.config.checks import Checks
from rsa_scheduler.config.schema import Config, settings_of
from rsa_scheduler.config.validate import BAD, Validator
from rsa_scheduler.config.yamldoc import Doc, got, parse_yaml, suggest
from rsa_scheduler.errors import ConfigErrors, ConfigIssue

DEFAULT_CONFIG_PATH: Final = Path("/etc/rsa/rsa.yaml")
ENV_VAR: Final = "RSA_CONFIG"
DEFAULTS_PATH: Final = Path(__file__).with_name("defaults.yaml")


# --------------------------------------------------------------------------- public API


def resolve_config_path(
    path: str | os.PathLike[str] | None = None, *, env: Mapping[str, str] = os.environ
) -> Path:
    """The file to load: ``path`` (``--config``), else ``$RSA_CONFIG``, else the default."""
    if path is not None and str(path) != "":
        return Path(path)
    if env.get(ENV_VAR):
        return Path(env[ENV_VAR])
    return DEFAULT_CONFIG_PATH


def load_config(
    path: str | os.PathLike[str] | None = None, *, env: Mapping[str, str] = os.environ
) -> Config:
    """Load the site config merged over the shipped defaults; raise ConfigErrors.

    The site file must define at least one RSA node in ``pool.nodes``.
    """
    file = resolve_config_path(path, env=env)
    if path is not None and str(path) != "":
        origin = ""
    elif env.get(ENV_VAR):
        origin = f" (from ${ENV_VAR})"
    else:
        origin = None  # the built-in default path: say how to create or override it
    text = _read(file, origin)
    return _load(text, str(file), source=file)


def load_config_text(text: str, *, file: str = "<string>", require_pool: bool = True) -> Config:
    """Validate YAML text as a site file (merged over the defaults). For tests and tools."""
    return _load(text, file, source=None, require_pool=require_pool)


def config_from_mapping(
    data: Mapping[str, Any], *, file: str = "<mapping>", require_pool: bool = True
) -> Config:
    """Validate already-parsed data as a site file (merged over the defaults)."""
    return _build(_defaults_doc(), Doc(file, dict(data), {}, set()), None, require_pool)


def load_defaults() -> Config:
    """The shipped defaults alone (empty pool), e.g. for tooling and tests."""
    return _build(_defaults_doc(), None, None, require_pool=False)


def defaults_text() -> str:
    """The commented ``defaults.yaml`` shipped with the package (the reference config)."""
    return DEFAULTS_PATH.read_text(encoding="utf-8")


def _read(file: Path, origin: str | None) -> str:
    try:
        return file.read_text(encoding="utf-8")
    except FileNotFoundError as e:
        if origin is not None:
            reason = f"no such file{origin}"
        else:
            reason = (
                f"no such file; create {DEFAULT_CONFIG_PATH} or pass --config FILE "
                f"(or set {ENV_VAR}); start from `rsa config show --defaults`"
            )
        raise ConfigErrors([ConfigIssue(str(file), "", reason)]) from e
    except UnicodeDecodeError as e:
        raise ConfigErrors([ConfigIssue(str(file), "", f"not UTF-8 text ({e.reason})")]) from e
    except OSError as e:
        raise ConfigErrors([ConfigIssue(str(file), "", e.strerror or str(e))]) from e


def _parse(text: str, file: str) -> tuple[Doc, list[ConfigIssue]]:
    """A configuration file: a mapping of sections (an empty file is an empty one)."""
    doc, issues = parse_yaml(text, file)
    if doc.data is None:
        doc.data = {}
    if not isinstance(doc.data, dict):
        issues.append(ConfigIssue(file, "", f"expected a mapping of sections, got "
                                            f"{got(doc.data)}", 1))
        doc.data = {}
    return doc, issues


_DEFAULTS_CACHE: list[Doc] = []


def _defaults_doc() -> Doc:
    if not _DEFAULTS_CACHE:
        doc, issues = _parse(defaults_text(), str(DEFAULTS_PATH))
        if issues:
            raise ConfigErrors(issues)
        _DEFAULTS_CACHE.append(doc)
    return _DEFAULTS_CACHE[0]


def _load(text: str, file: str, *, source: Path | None, require_pool: bool = True) -> Config:
    user, issues = _parse(text, file)
    if issues:
        raise ConfigErrors(issues)
    warnings = _permission_warnings(source) if source is not None else []
    return _build(_defaults_doc(), user, source, require_pool, warnings)


def _permission_warnings(file: Path) -> list[str]:
    try:
        mode = file.stat().st_mode
    except OSError:
        return []
    if mode & 0o022:
        return [
            f"{file}: writable by group or others; rsad runs as root and trusts this file "
            f"(chmod go-w {file})"
        ]
    return []


def _merge(base: Any, override: Any) -> Any:
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for key, value in override.items():
            out[key] = _merge(base[key], value) if key in base else value
        return out
    return override


def _build(
    defaults: Doc,
    user: Doc | None,
    source: Path | None,
    require_pool: bool,
    warnings: Sequence[str] = (),
) -> Config:
    v = Validator(defaults, user)
    data = _merge(defaults.data, user.data) if user is not None else defaults.data
    settings = dict(settings_of(Config))
    for key in data:
        if key not in settings:
            v.error((key,), "unknown section" + suggest(key, list(settings)))
    # Sections are converted one by one so the cross-field checks still run on the
    # sections that are valid: one load reports every problem.
    sections: dict[str, Any] = {}
    for name, setting in settings.items():
        if name in data:
            sections[name] = v.convert(setting.kind, data[name], (name,))
        else:
            v.error((name,), "missing required section")
            sections[name] = BAD
    checks = Checks(v, sections)
    checks.pool(require_pool)
    checks.allocation()
    checks.backends()
    checks.others()
    if v.issues:
        v.issues.sort(key=lambda i: (i.line is None, i.line or 0))
        raise ConfigErrors(v.issues)
    found = (*warnings, *(str(w) for w in v.warnings))
    return Config(**sections, source=source, warnings=found)


__all__ = [
    "DEFAULTS_PATH",
    "DEFAULT_CONFIG_PATH",
    "ENV_VAR",
    "ConfigErrors",
    "ConfigIssue",
    "config_from_mapping",
    "defaults_text",
    "load_config",
    "load_config_text",
    "load_defaults",
    "resolve_config_path",
]
