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

import difflib
import math
import os
import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import MISSING
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

import yaml
from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet, NodeSetException

from rsa_scheduler.config.backends import check_backends
from rsa_scheduler.config.schema import (
    ADDRESS_FIELDS,
    MAX_POOL_NODES,
    AbsPath,
    Address,
    Bool,
    Choice,
    Config,
    Duration,
    HooksConfig,
    HostKeyPolicy,
    Hostlist,
    HostPort,
    Int,
    Kind,
    Listen,
    ListOf,
    MapOf,
    Number,
    Optional,
    PoolConfig,
    PoolNodeGroup,
    Section,
    Size,
    StagingConfig,
    Str,
    item_default,
    node_address,
    settings_of,
)
from rsa_scheduler.core.policy import AllocationPolicy, Tier
from rsa_scheduler.core.units import format_size, parse_duration, parse_size
from rsa_scheduler.errors import ConfigError
from rsa_scheduler.staging.scripts import check_copy_command

DEFAULT_CONFIG_PATH: Final = Path("/etc/rsa/rsa.yaml")
ENV_VAR: Final = "RSA_CONFIG"
DEFAULTS_PATH: Final = Path(__file__).with_name("defaults.yaml")

KeyPath = tuple[str | int, ...]

_BAD: Final = object()  # conversion failed; the issue is already recorded
_COLLECTION_TAGS: Final = frozenset({"tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"})
_HOSTNAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
_ADDRESS_RE = re.compile(r"^[A-Za-z0-9._:-]+$")
_BRACKET_RE = re.compile(r"\[([^\]]*)\]")
_RANGE_RE = re.compile(r"(\d+)-(\d+)")
_LISTEN_RE = re.compile(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9._-]+)):(?P<port>\d+)$")


class ConfigIssue(ConfigError):
    """One located problem, rendered ``FILE[:LINE]: KEY: REASON``."""

    def __init__(self, file: str, key: str, reason: str, line: int | None = None) -> None:
        super().__init__(file, key, reason)
        self.line = line

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.key}: {self.reason}" if self.key else f"{where}: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "key": self.key, "reason": self.reason}


class ConfigErrors(ConfigError):
    """Every problem found in one load; ``issues`` holds them in file order."""

    def __init__(self, issues: Sequence[ConfigIssue]) -> None:
        if not issues:
            raise ValueError("ConfigErrors needs at least one issue")
        self.issues = tuple(issues)
        first = self.issues[0]
        super().__init__(first.file, first.key, first.reason)

    def __str__(self) -> str:
        if len(self.issues) == 1:
            return str(self.issues[0])
        lines = "\n".join(f"  {issue}" for issue in self.issues)
        return f"{len(self.issues)} errors in the configuration:\n{lines}"


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
    return _build(_defaults_doc(), _Doc(file, dict(data), {}, set()), None, require_pool)


def load_defaults() -> Config:
    """The shipped defaults alone (empty pool), e.g. for tooling and tests."""
    return _build(_defaults_doc(), None, None, require_pool=False)


def defaults_text() -> str:
    """The commented ``defaults.yaml`` shipped with the package (the reference config)."""
    return DEFAULTS_PATH.read_text(encoding="utf-8")


# --------------------------------------------------------------------------- reading


class _Doc:
    """A parsed YAML document: data plus the line of every key path."""

    def __init__(self, file: str, data: Any, lines: dict[KeyPath, int], lists: set[KeyPath]):
        self.file = file
        self.data = data
        self.lines = lines
        self.lists = lists  # key paths whose value is a list (replaces the default wholesale)


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


def _parse(text: str, file: str) -> tuple[_Doc, list[ConfigIssue]]:
    """YAML → (_Doc, issues). Syntax errors raise; duplicate/non-string keys are issues."""
    issues: list[ConfigIssue] = []
    lines: dict[KeyPath, int] = {}
    lists: set[KeyPath] = set()
    loader = yaml.SafeLoader(text)
    active: set[int] = set()

    def walk(node: yaml.Node, path: KeyPath) -> Any:
        if path:
            lines[path] = node.start_mark.line + 1
        if not isinstance(node, yaml.ScalarNode) and node.tag not in _COLLECTION_TAGS:
            # Scalars with an unknown tag fail in construct_object; collections are
            # walked here, so refuse their tags (!foo, !!set, !!omap) explicitly.
            raise yaml.constructor.ConstructorError(
                None, None, f"unsupported YAML tag {node.tag!r}", node.start_mark
            )
        if id(node) in active:
            issues.append(ConfigIssue(file, _key(path), "recursive YAML alias", lines.get(path)))
            return None
        if isinstance(node, yaml.ScalarNode):
            # YAML 1.1 reads 5:00 as the base-60 integer 300; keep it as text so it
            # means what Slurm means by MM:SS.
            if node.tag.endswith((":int", ":float")) and ":" in node.value:
                return node.value
            return loader.construct_object(node, deep=True)
        active.add(id(node))
        try:
            if isinstance(node, yaml.SequenceNode):
                lists.add(path)
                return [walk(child, (*path, i)) for i, child in enumerate(node.value)]
            assert isinstance(node, yaml.MappingNode)
            own = {id(k) for k, _ in node.value}
            loader.flatten_mapping(node)  # YAML merge keys (<<) put merged pairs first
            out: dict[str, Any] = {}
            merged: set[str] = set()
            for key_node, value_node in node.value:
                key = loader.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                if not isinstance(key, str):
                    issues.append(
                        ConfigIssue(file, _key(path), f"key {key!r} is not a string", line)
                    )
                    continue
                if key in out and key not in merged:
                    issues.append(ConfigIssue(file, _key((*path, key)), "duplicate key", line))
                    continue
                merged.discard(key)  # an explicit key overrides a merged one
                if id(key_node) not in own:
                    merged.add(key)
                out[key] = walk(value_node, (*path, key))
            return out
        finally:
            active.discard(id(node))

    try:
        node = loader.get_single_node()
        data = {} if node is None else walk(node, ())
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        problem = e.problem or e.context or "syntax error"
        line = mark.line + 1 if mark is not None else None
        raise ConfigErrors([ConfigIssue(file, "", f"invalid YAML: {problem}", line)]) from e
    except yaml.YAMLError as e:
        raise ConfigErrors([ConfigIssue(file, "", f"invalid YAML: {e}")]) from e
    except RecursionError as e:
        reason = "invalid YAML: nested too deeply"
        raise ConfigErrors([ConfigIssue(file, "", reason)]) from e
    finally:
        loader.dispose()
    if data is None:
        data = {}
    if not isinstance(data, dict):
        issues.append(ConfigIssue(file, "", f"expected a mapping of sections, got {_got(data)}", 1))
        data = {}
    return _Doc(file, data, lines, lists), issues


_DEFAULTS_CACHE: list[_Doc] = []


def _defaults_doc() -> _Doc:
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


# --------------------------------------------------------------------------- validation


def _key(path: KeyPath) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def _got(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"number {value}"
    if isinstance(value, str):
        return f"string {value!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _suggest(word: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


class _Validator:
    """Converts merged data along the schema, collecting issues with file and line."""

    def __init__(self, defaults: _Doc, user: _Doc | None) -> None:
        self.defaults = defaults
        self.user = user
        self.issues: list[ConfigIssue] = []
        self.warnings: list[ConfigIssue] = []

    def _locate(self, path: KeyPath) -> tuple[str, int | None, bool]:
        """(file, line, value came from the shipped defaults although a site file exists)."""
        if self.user is None:
            return self.defaults.file, _longest(self.defaults.lines, path), False
        user = self.user
        from_user = (
            _get(user.data, path) is not _BAD
            # inside a list the site file replaced wholesale (a key missing in an item)
            or any(isinstance(_get(user.data, path[:i]), list) for i in range(1, len(path)))
            # a key neither file has, e.g. a required key of a list item
            or _get(self.defaults.data, path) is _BAD
        )
        if from_user:
            return user.file, _longest(user.lines, path), False
        return user.file, None, True

    def error(self, path: KeyPath, reason: str, *, note_default: bool = True) -> None:
        self.issues.append(self._issue(path, reason, note_default))

    def warn(self, path: KeyPath, reason: str) -> None:
        self.warnings.append(self._issue(path, reason, True))

    def _issue(self, path: KeyPath, reason: str, note_default: bool) -> ConfigIssue:
        file, line, from_defaults = self._locate(path)
        if from_defaults and note_default:
            reason += " (the shipped default; override it in this file)"
        return ConfigIssue(file, _key(path), reason, line)

    # -- kinds

    def convert(self, kind: Kind, value: Any, path: KeyPath) -> Any:
        if isinstance(kind, Optional):
            if value is None or (value == "" and isinstance(kind.inner,
                                                            Listen | Address | AbsPath)):
                return None
            return self.convert(kind.inner, value, path)
        if isinstance(kind, Section):
            return self._section(kind.cls, value, path)
        if isinstance(kind, ListOf):
            if not isinstance(value, list):
                return self._expected(path, "a list", value)
            items = [self.convert(kind.item, v, (*path, i)) for i, v in enumerate(value)]
            return _BAD if any(v is _BAD for v in items) else tuple(items)
        if isinstance(kind, MapOf):
            return self._map(kind, value, path)
        if isinstance(kind, Choice):
            return self._choice(kind, value, path)
        if isinstance(kind, Bool):
            if not isinstance(value, bool):
                return self._expected(path, "true or false", value)
            return value
        if isinstance(kind, Int):
            return self._int(kind, value, path)
        if isinstance(kind, Number):
            return self._number(kind, value, path)
        if isinstance(kind, Duration):
            return self._duration(kind, value, path)
        if isinstance(kind, Size):
            return self._size(kind, value, path)
        if isinstance(kind, AbsPath):
            return self._abspath(value, path)
        if isinstance(kind, Listen):
            return self._listen(value, path)
        if isinstance(kind, Hostlist):
            return self._hostlist(value, path)
        if isinstance(kind, Address | Str):
            if not isinstance(value, str) or not value.strip():
                return self._expected(path, "a non-empty string", value)
            return value
        raise AssertionError(f"unknown kind {kind!r}")

    def _expected(self, path: KeyPath, what: str, value: Any) -> object:
        self.error(path, f"expected {what}, got {_got(value)}")
        return _BAD

    def _section(self, cls: type, value: Any, path: KeyPath) -> Any:
        if not isinstance(value, dict):
            return self._expected(path, "a mapping", value)
        settings = dict(settings_of(cls))
        for key in value:
            if key not in settings:
                self.error((*path, key), "unknown key" + _suggest(key, list(settings)))
        values: dict[str, Any] = {}
        for name, s in settings.items():
            if name in value:
                values[name] = self.convert(s.kind, value[name], (*path, name))
        for name in settings:
            if name not in value:
                default = item_default(cls, name, values)
                if default is MISSING:
                    self.error((*path, name), "missing required key")
                    values[name] = _BAD
                else:
                    values[name] = default
        if any(v is _BAD for v in values.values()) or any(k not in settings for k in value):
            return _BAD
        try:
            return cls(**values)
        except ValueError as e:
            # AllocationPolicy checks min/max itself; its message starts with the key.
            word = str(e).split()[0] if str(e) else ""
            self.error((*path, word) if word in settings else path, str(e))
            return _BAD

    def _map(self, kind: MapOf, value: Any, path: KeyPath) -> Any:
        if not isinstance(value, dict):
            return self._expected(path, "a mapping", value)
        keys = list(kind.key_values)
        out: dict[Any, Any] = {}
        bad = False
        for k, v in value.items():
            if k not in keys:
                self.error(
                    (*path, k), f"unknown key (one of {', '.join(keys)})" + _suggest(k, keys)
                )
                bad = True
                continue
            converted = self.convert(kind.value, v, (*path, k))
            bad = bad or converted is _BAD
            out[kind.keys(k)] = converted
        if bad:
            return _BAD
        return MappingProxyType({m: out[m] for m in kind.keys if m in out})

    def _number(self, kind: Number, value: Any, path: KeyPath) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | float) \
                or not math.isfinite(value):
            return self._expected(path, "a number", value)
        if not kind.min <= value <= kind.max:
            self.error(path, f"must be between {kind.min:g} and {kind.max:g}, got {value:g}")
            return _BAD
        return float(value)

    def _choice(self, kind: Choice, value: Any, path: KeyPath) -> Any:
        if not isinstance(value, str) or value not in kind.values:
            hint = _suggest(value, kind.values) if isinstance(value, str) else ""
            if isinstance(value, bool):
                hint = " (YAML reads yes/no/on/off as booleans; quote the value)"
            self.error(path, f"expected one of {', '.join(kind.values)}, got {_got(value)}{hint}")
            return _BAD
        return kind.enum_cls(value) if kind.enum_cls is not None else value

    def _int(self, kind: Int, value: Any, path: KeyPath) -> Any:
        if isinstance(value, bool) or not isinstance(value, int):
            return self._expected(path, "an integer", value)
        if kind.min is not None and value < kind.min:
            self.error(path, f"must be >= {kind.min}, got {value}")
            return _BAD
        if kind.max is not None and value > kind.max:
            self.error(path, f"must be <= {kind.max}, got {value}")
            return _BAD
        return value

    def _duration(self, kind: Duration, value: Any, path: KeyPath) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            return self._expected(path, "a duration such as 30s, 5m, 2h or HH:MM:SS", value)
        try:
            seconds = parse_duration(value, limit=kind.max)
        except ValueError as e:
            self.error(path, str(e))
            return _BAD
        if isinstance(value, int | float) and value != 0:
            # A bare number is minutes to Slurm (--time) and seconds to most people.
            self.error(path, f"ambiguous duration {value}: add a unit, e.g. {value}s or {value}m")
            return _BAD
        if kind.positive and seconds <= 0:
            self.error(path, f"must be longer than 0s, got {value!r}")
            return _BAD
        return seconds

    def _size(self, kind: Size, value: Any, path: KeyPath) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | str):
            return self._expected(path, "a size such as 512M, 64G or 3.5T", value)
        try:
            nbytes = parse_size(str(value))
        except ValueError as e:
            self.error(path, str(e))
            return _BAD
        if nbytes <= 0:
            self.error(path, f"must be larger than 0, got {value!r}")
            return _BAD
        if nbytes > kind.max:
            self.error(path, f"must be at most {format_size(kind.max)}, got {value!r}")
            return _BAD
        return nbytes

    def _abspath(self, value: Any, path: KeyPath) -> Any:
        if not isinstance(value, str) or not value:
            return self._expected(path, "an absolute path", value)
        if not value.startswith("/"):
            self.error(path, f"must be an absolute path, got {value!r}")
            return _BAD
        parts = value.split("/")
        if "\0" in value or ".." in parts or "." in parts:
            self.error(path, f"must be a normalised path without '.', '..' or NUL: {value!r}")
            return _BAD
        if Path(value) == Path("/"):
            self.error(path, "must not be / itself")
            return _BAD
        return Path(value)

    def _listen(self, value: Any, path: KeyPath) -> Any:
        if not isinstance(value, str):
            return self._expected(path, "host:port or empty", value)
        m = _LISTEN_RE.match(value)
        if not m or not 1 <= int(m["port"]) <= 65535:
            self.error(path, f"expected host:port (e.g. 127.0.0.1:9465, [::1]:9465), got {value!r}")
            return _BAD
        return HostPort(m["v6"] or m["host"], int(m["port"]))

    def _hostlist(self, value: Any, path: KeyPath) -> Any:
        if not isinstance(value, str) or not value.strip():
            return self._expected(path, 'a hostlist such as "rsa[01-04]"', value)
        if "@" in value:
            self.error(path, "node groups (@group) are not supported; list the nodes")
            return _BAD
        # Refuse huge ranges before ClusterShell expands them (it builds every number,
        # and only an assert stops it at 10^9).
        for bracket in _BRACKET_RE.findall(value):
            for low, high in _RANGE_RE.findall(bracket):
                if int(high) - int(low) >= MAX_POOL_NODES:
                    self.error(path, f"range {low}-{high} is too large: a pool has at most "
                                     f"{MAX_POOL_NODES} nodes")
                    return _BAD
        try:
            nodeset = NodeSet(value, resolver=RESOLVER_NOGROUP)
        except NodeSetException as e:
            self.error(path, f"invalid hostlist {value!r}: {e}")
            return _BAD
        if len(nodeset) > MAX_POOL_NODES:
            self.error(path, f"{len(nodeset)} nodes: a pool has at most {MAX_POOL_NODES}")
            return _BAD
        names = [str(n) for n in nodeset]
        bad = [n for n in names if not _HOSTNAME_RE.match(n)]
        if bad:
            self.error(path, f"invalid node name {bad[0]!r} in {value!r}")
            return _BAD
        return value


def _longest(lines: Mapping[KeyPath, int], path: KeyPath) -> int | None:
    for i in range(len(path), 0, -1):
        if path[:i] in lines:
            return lines[path[:i]]
    return None


def _get(data: Any, path: KeyPath) -> Any:
    """The value at ``path`` in plain data, or _BAD when absent."""
    for part in path:
        if isinstance(part, int):
            if not isinstance(data, list) or part >= len(data):
                return _BAD
        elif not isinstance(data, dict) or part not in data:
            return _BAD
        data = data[part]
    return data


# --------------------------------------------------------------------------- cross-field


def _build(
    defaults: _Doc,
    user: _Doc | None,
    source: Path | None,
    require_pool: bool,
    warnings: Sequence[str] = (),
) -> Config:
    v = _Validator(defaults, user)
    data = _merge(defaults.data, user.data) if user is not None else defaults.data
    settings = dict(settings_of(Config))
    for key in data:
        if key not in settings:
            v.error((key,), "unknown section" + _suggest(key, list(settings)))
    # Sections are converted one by one so the cross-field checks still run on the
    # sections that are valid: one load reports every problem.
    sections: dict[str, Any] = {}
    for name, setting in settings.items():
        if name in data:
            sections[name] = v.convert(setting.kind, data[name], (name,))
        else:
            v.error((name,), "missing required section")
            sections[name] = _BAD
    checks = _Checks(v, sections)
    checks.pool(require_pool)
    checks.allocation()
    checks.backends()
    checks.others()
    if v.issues:
        v.issues.sort(key=lambda i: (i.line is None, i.line or 0))
        raise ConfigErrors(v.issues)
    found = (*warnings, *(str(w) for w in v.warnings))
    return Config(**sections, source=source, warnings=found)


def _nodes(n: int) -> str:
    return f"{n} node" if n == 1 else f"{n} nodes"


class _Checks:
    """Cross-field checks; each runs only when the sections it reads are valid."""

    def __init__(self, v: _Validator, sections: dict[str, Any]) -> None:
        self.v = v
        self.s = sections

    def ok(self, *names: str) -> bool:
        return all(self.s[name] is not _BAD for name in names)

    def pool(self, require_pool: bool) -> None:
        if self.ok("pool"):
            before = len(self.v.issues)
            _check_pool(self.v, self.s["pool"], require_pool)
            if len(self.v.issues) > before:
                self.s["pool"] = _BAD  # e.g. a bad address pattern: do not expand it

    def allocation(self) -> None:
        if not self.ok("pool", "allocation", "filesystem"):
            return
        v = self.v
        policy: AllocationPolicy = self.s["allocation"]
        pool: PoolConfig = self.s["pool"]
        by_tier = {tier: len(nodes) for tier, nodes in pool.by_tier().items()}
        if by_tier:
            tier = policy.default_tier
            if tier is Tier.AUTO:  # auto may use any tier: the largest bounds a job
                tier = max(by_tier, key=lambda t: by_tier[t])
            have = by_tier.get(tier, 0)
            if have == 0:
                present = ", ".join(t.value for t in by_tier)
                v.error(
                    ("allocation", "default_tier"),
                    f"tier {tier.value} has no nodes in pool.nodes (tiers present: {present})",
                )
            elif policy.min_nodes > have:
                v.error(
                    ("allocation", "min_nodes"),
                    f"every job needs {_nodes(policy.min_nodes)} but tier {tier.value} has "
                    f"only {_nodes(have)}",
                )
            elif policy.max_nodes > have:
                v.warn(
                    ("allocation", "max_nodes"),
                    f"tier {tier.value} has only {_nodes(have)}; jobs sized for more never "
                    "get an RSA (allocation is all-or-nothing)",
                )

    def backends(self) -> None:
        """Ask the registered backends (config/backends.py): their own settings, and
        whether each one a tier chose can serve it."""
        if not self.ok("filesystem"):
            return
        pool = self.s["pool"] if self.ok("pool") else None
        policy = self.s["allocation"] if self.ok("allocation") else None
        for finding in check_backends(self.s["filesystem"], pool, policy):
            if finding.warning:
                self.v.warn(finding.key, finding.reason)
            else:
                self.v.error(finding.key, finding.reason)

    def others(self) -> None:
        v = self.v
        if self.ok("staging"):
            staging: StagingConfig = self.s["staging"]
            if staging.backoff_max < staging.backoff:
                v.error(("staging", "backoff_max"), "must be >= staging.backoff")
            if not staging.allowed_roots:
                v.error(("staging", "allowed_roots"), "must list at least one directory")
            if staging.copy_tool == "custom":
                try:
                    check_copy_command(staging.copy_command or "")
                except ValueError as e:
                    v.error(("staging", "copy_command"), f"{e} (copy_tool is custom)")
            elif staging.copy_command:
                v.warn(("staging", "copy_command"), f"set, but copy_tool is "
                       f"{staging.copy_tool}: it is not used")
        if self.ok("hooks"):
            hooks: HooksConfig = self.s["hooks"]
            if hooks.api_timeout > hooks.timeout:
                v.error(("hooks", "api_timeout"), "must not exceed hooks.timeout")
        if self.ok("ssh") and self.s["ssh"].host_key_policy == HostKeyPolicy.AUTO_ADD:
            v.warn(("ssh", "host_key_policy"), "auto-add trusts any host key on first contact")
        if self.ok("daemon", "metrics"):
            api_listen = self.s["daemon"].api.listen
            if api_listen is not None and api_listen == self.s["metrics"].listen:
                v.error(("metrics", "listen"), f"same address as daemon.api.listen ({api_listen})")



def _check_pool(v: _Validator, pool: PoolConfig, require_pool: bool) -> None:
    groups = pool.nodes
    if not groups:
        if require_pool:
            v.error(
                ("pool", "nodes"),
                "no RSA nodes defined; add at least one entry with names and capacity "
                "(see `rsa config show --defaults`)",
                note_default=False,
            )
        return
    total = sum(len(NodeSet(g.names, resolver=RESOLVER_NOGROUP)) for g in groups)
    if total > MAX_POOL_NODES:
        v.error(("pool", "nodes"), f"{total} nodes: a pool has at most {MAX_POOL_NODES}")
        return
    seen: dict[str, int] = {}
    endpoints: dict[tuple[str, int], str] = {}
    for i, group in enumerate(groups):
        path: KeyPath = ("pool", "nodes", i)
        hosts = group.hosts()
        for name in hosts:
            if name in seen:
                v.error(
                    (*path, "names"), f"node {name} is already defined in pool.nodes[{seen[name]}]"
                )
                break
            seen[name] = i
        if not _check_address(v, group, hosts, (*path, "address")):
            continue
        for name in hosts:
            endpoint = (node_address(group.address, name), group.ssh_port)
            if endpoint in endpoints and endpoints[endpoint] != name:
                v.error(
                    (*path, "address"),
                    f"{name} and {endpoints[endpoint]} have the same address and port "
                    f"{endpoint[0]}:{endpoint[1]}",
                )
                break
            endpoints[endpoint] = name


def _check_address(
    v: _Validator, group: PoolNodeGroup, hosts: tuple[str, ...], path: KeyPath
) -> bool:
    if group.address is None:
        return True
    try:
        used = {f for _, f, _, _ in string.Formatter().parse(group.address) if f is not None}
    except ValueError as e:
        v.error(path, f"invalid pattern {group.address!r}: {e}")
        return False
    unknown = used - set(ADDRESS_FIELDS)
    if unknown:
        field = sorted(unknown)[0]
        v.error(
            path,
            f"unknown placeholder {{{field}}} (use {{name}} or {{num}})"
            + _suggest(field, ADDRESS_FIELDS),
        )
        return False
    if not used and len(hosts) > 1:
        v.error(
            path,
            f"a fixed address cannot serve {len(hosts)} nodes; use a pattern such as "
            "'{name}-ib' or '10.0.0.{num}', or one entry per node",
        )
        return False
    for name in hosts:
        if "num" in used and not re.search(r"\d$", name):
            v.error(path, f"{{num}} needs a trailing number in the node name, got {name!r}")
            return False
        try:
            address = node_address(group.address, name)
        except (ValueError, KeyError, IndexError) as e:
            v.error(path, f"invalid pattern {group.address!r}: {e}")
            return False
        if not _ADDRESS_RE.match(address):
            v.error(path, f"invalid address {address!r} for node {name}")
            return False
    return True


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
