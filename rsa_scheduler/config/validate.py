"""Converting plain YAML data to typed values along the kinds of a schema.

Owns :class:`Validator`: it walks merged data along the declared kinds
(:mod:`rsa_scheduler.config.kinds`), converts every value (durations, sizes, paths,
hostlists, choices, sections to their dataclasses, ...) and collects every problem as a
:class:`~rsa_scheduler.errors.ConfigIssue` located in the site file or the shipped
defaults, with its line. A value that failed is :data:`BAD` (its issue is recorded).
Must not import the loader or the CLI.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import MISSING
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet, NodeSetException

from rsa_scheduler.config.kinds import (
    MAX_POOL_NODES,
    AbsPath,
    Address,
    Bool,
    Choice,
    Duration,
    Hostlist,
    Int,
    Kind,
    Listen,
    ListOf,
    MapOf,
    NameMap,
    Number,
    Optional,
    Section,
    Size,
    Str,
)
from rsa_scheduler.config.schema import HostPort, item_default, settings_of
from rsa_scheduler.config.yamldoc import Doc, KeyPath, got, key_text, suggest
from rsa_scheduler.core.units import format_size, parse_duration, parse_size
from rsa_scheduler.errors import ConfigIssue

BAD: Final = object()  # conversion failed; the issue is already recorded
_HOSTNAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
_BRACKET_RE = re.compile(r"\[([^\]]*)\]")
_RANGE_RE = re.compile(r"(\d+)-(\d+)")
#: a user or Slurm account name: no blank, nor what Slurm's lists and paths use
_NAME_RE = re.compile(r"^[^\s/:,]+$")
_LISTEN_RE = re.compile(
    r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9._-]+))(?::(?P<port>\d+))?$")


class Validator:
    """Converts merged data along the schema, collecting issues with file and line.

    The configuration and the simulator's scenarios (``sim/settings.py``) both convert
    with it; a scenario words two things its own way (how a wrong value is described, a
    wrong choice), by overriding :meth:`describe` and :meth:`not_a_choice`.
    """

    def __init__(self, defaults: Doc, user: Doc | None) -> None:
        self.defaults = defaults
        self.user = user
        self.issues: list[ConfigIssue] = []
        self.warnings: list[ConfigIssue] = []

    def _locate(self, path: KeyPath) -> tuple[str, int | None, bool]:
        """(file, line, value came from the shipped defaults although a site file exists)."""
        if self.user is None:
            return self.defaults.file, longest(self.defaults.lines, path), False
        user = self.user
        from_user = (
            get_path(user.data, path) is not BAD
            # inside a list the site file replaced wholesale (a key missing in an item)
            or any(isinstance(get_path(user.data, path[:i]), list) for i in range(1, len(path)))
            # a key neither file has, e.g. a required key of a list item
            or get_path(self.defaults.data, path) is BAD
        )
        if from_user:
            return user.file, longest(user.lines, path), False
        return user.file, None, True

    def error(self, path: KeyPath, reason: str, *, note_default: bool = True) -> None:
        self.issues.append(self._issue(path, reason, note_default))

    def warn(self, path: KeyPath, reason: str) -> None:
        self.warnings.append(self._issue(path, reason, True))

    def _issue(self, path: KeyPath, reason: str, note_default: bool) -> ConfigIssue:
        file, line, from_defaults = self._locate(path)
        if from_defaults and note_default:
            reason += " (the shipped default; override it in this file)"
        return ConfigIssue(file, key_text(path), reason, line)

    # -- wording

    def describe(self, value: Any) -> str:
        """A wrong value, as the end of ``expected ..., got <this>``."""
        return got(value)

    def not_a_choice(self, kind: Choice, value: Any) -> str:
        """Why ``value`` is not one of a choice's values (a hint may follow)."""
        return f"expected one of {', '.join(kind.values)}, got {self.describe(value)}"

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
            return BAD if any(v is BAD for v in items) else tuple(items)
        if isinstance(kind, MapOf):
            return self._map(kind, value, path)
        if isinstance(kind, NameMap):
            return self._names(kind, value, path)
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
            return self._listen(value, path, kind.default_port)
        if isinstance(kind, Hostlist):
            return self._hostlist(value, path)
        if isinstance(kind, Address | Str):
            if not isinstance(value, str) or not value.strip():
                return self._expected(path, "a non-empty string", value)
            return value
        raise AssertionError(f"unknown kind {kind!r}")

    def _expected(self, path: KeyPath, what: str, value: Any) -> object:
        self.error(path, f"expected {what}, got {self.describe(value)}")
        return BAD

    def _section(self, cls: type, value: Any, path: KeyPath) -> Any:
        if not isinstance(value, dict):
            return self._expected(path, "a mapping", value)
        settings = dict(settings_of(cls))
        for key in value:
            if key not in settings:
                self.error((*path, key), "unknown key" + suggest(key, list(settings)))
        values: dict[str, Any] = {}
        for name, s in settings.items():
            if name in value:
                values[name] = self.convert(s.kind, value[name], (*path, name))
        for name in settings:
            if name not in value:
                default = item_default(cls, name, values)
                if default is MISSING:
                    self.error((*path, name), "missing required key")
                    values[name] = BAD
                else:
                    values[name] = default
        if any(v is BAD for v in values.values()) or any(k not in settings for k in value):
            return BAD
        try:
            return cls(**values)
        except ValueError as e:
            # AllocationPolicy checks min/max itself; its message starts with the key.
            word = str(e).split()[0] if str(e) else ""
            self.error((*path, word) if word in settings else path, str(e))
            return BAD

    def _map(self, kind: MapOf, value: Any, path: KeyPath) -> Any:
        if not isinstance(value, dict):
            return self._expected(path, "a mapping", value)
        keys = list(kind.key_values)
        out: dict[Any, Any] = {}
        bad = False
        for k, v in value.items():
            if k not in keys:
                self.error(
                    (*path, k), f"unknown key (one of {', '.join(keys)})" + suggest(k, keys)
                )
                bad = True
                continue
            converted = self.convert(kind.value, v, (*path, k))
            bad = bad or converted is BAD
            out[kind.keys(k)] = converted
        if bad:
            return BAD
        return MappingProxyType({m: out[m] for m in kind.keys if m in out})

    def _names(self, kind: NameMap, value: Any, path: KeyPath) -> Any:
        if value is None:  # the key written with every entry commented out
            return MappingProxyType({})
        if not isinstance(value, dict):
            return self._expected(path, "a mapping", value)
        out: dict[str, Any] = {}
        bad = False
        for k, v in value.items():
            where = (*path, k)
            # (YAML's loader refuses a key that is not a string: 1234 unquoted)
            if not _NAME_RE.match(k) or k.startswith("-"):
                self.error(where, f"expected a {kind.what} name (no spaces, '/', ':' or ','), "
                                  f"got {k!r}")
                bad = True
                continue
            if kind.lower and k != k.lower():
                word = kind.what.split()[-1]
                self.error(where, f"Slurm keeps {word} names in lower case: write "
                                  f"{k.lower()}")
                bad = True
                continue
            converted = self.convert(kind.value, v, where)
            bad = bad or converted is BAD
            out[k] = converted
        return BAD if bad else MappingProxyType(out)

    def _number(self, kind: Number, value: Any, path: KeyPath) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | float) \
                or not math.isfinite(value):
            return self._expected(path, "a number", value)
        if not kind.min <= value <= kind.max:
            self.error(path, f"must be between {kind.min:g} and {kind.max:g}, got {value:g}")
            return BAD
        return float(value)

    def _choice(self, kind: Choice, value: Any, path: KeyPath) -> Any:
        if not isinstance(value, str) or value not in kind.values:
            hint = suggest(value, kind.values) if isinstance(value, str) else ""
            if isinstance(value, bool):
                hint = " (YAML reads yes/no/on/off as booleans; quote the value)"
            self.error(path, self.not_a_choice(kind, value) + hint)
            return BAD
        return kind.enum_cls(value) if kind.enum_cls is not None else value

    def _int(self, kind: Int, value: Any, path: KeyPath) -> Any:
        if isinstance(value, bool) or not isinstance(value, int):
            return self._expected(path, "an integer", value)
        if kind.min is not None and value < kind.min:
            self.error(path, f"must be >= {kind.min}, got {value}")
            return BAD
        if kind.max is not None and value > kind.max:
            self.error(path, f"must be <= {kind.max}, got {value}")
            return BAD
        return value

    def _duration(self, kind: Duration, value: Any, path: KeyPath) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            return self._expected(path, "a duration such as 30s, 5m, 2h or HH:MM:SS", value)
        try:
            seconds = parse_duration(value, limit=kind.max)
        except ValueError as e:
            self.error(path, str(e))
            return BAD
        if isinstance(value, int | float) and value != 0 and not kind.bare_seconds:
            # A bare number is minutes to Slurm (--time) and seconds to most people.
            self.error(path, f"ambiguous duration {value}: add a unit, e.g. {value}s or {value}m")
            return BAD
        if kind.positive and seconds <= 0:
            self.error(path, f"must be longer than 0s, got {value!r}")
            return BAD
        return seconds

    def _size(self, kind: Size, value: Any, path: KeyPath) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | str):
            return self._expected(path, "a size such as 512M, 64G or 3.5T", value)
        try:
            nbytes = parse_size(str(value))
        except ValueError as e:
            self.error(path, str(e))
            return BAD
        if nbytes < 0 or (nbytes == 0 and kind.positive):
            self.error(path, f"must be larger than 0, got {value!r}")
            return BAD
        if nbytes > kind.max:
            self.error(path, f"must be at most {format_size(kind.max)}, got {value!r}")
            return BAD
        return nbytes

    def _abspath(self, value: Any, path: KeyPath) -> Any:
        if not isinstance(value, str) or not value:
            return self._expected(path, "an absolute path", value)
        if not value.startswith("/"):
            self.error(path, f"must be an absolute path, got {value!r}")
            return BAD
        parts = value.split("/")
        if "\0" in value or ".." in parts or "." in parts:
            self.error(path, f"must be a normalised path without '.', '..' or NUL: {value!r}")
            return BAD
        if Path(value) == Path("/"):
            self.error(path, "must not be / itself")
            return BAD
        return Path(value)

    def _listen(self, value: Any, path: KeyPath, default_port: int | None = None) -> Any:
        if not isinstance(value, str):
            return self._expected(path, "host:port or empty", value)
        m = _LISTEN_RE.match(value)
        port = int(m["port"]) if m and m["port"] else default_port
        if not m or port is None or not 1 <= port <= 65535:
            example = (f"e.g. 10.0.0.1:{default_port}, [::1]:{default_port}, or a host alone: "
                       f"port {default_port}" if default_port else
                       "e.g. 127.0.0.1:9465, [::1]:9465")
            self.error(path, f"expected host:port ({example}), got {value!r}")
            return BAD
        return HostPort(m["v6"] or m["host"], port)

    def _hostlist(self, value: Any, path: KeyPath) -> Any:
        if not isinstance(value, str) or not value.strip():
            return self._expected(path, 'a hostlist such as "rsa[01-04]"', value)
        if "@" in value:
            self.error(path, "node groups (@group) are not supported; list the nodes")
            return BAD
        # Refuse huge ranges before ClusterShell expands them (it builds every number,
        # and only an assert stops it at 10^9).
        for bracket in _BRACKET_RE.findall(value):
            for low, high in _RANGE_RE.findall(bracket):
                if int(high) - int(low) >= MAX_POOL_NODES:
                    self.error(path, f"range {low}-{high} is too large: a pool has at most "
                                     f"{MAX_POOL_NODES} nodes")
                    return BAD
        try:
            nodeset = NodeSet(value, resolver=RESOLVER_NOGROUP)
        except NodeSetException as e:
            self.error(path, f"invalid hostlist {value!r}: {e}")
            return BAD
        if len(nodeset) > MAX_POOL_NODES:
            self.error(path, f"{len(nodeset)} nodes: a pool has at most {MAX_POOL_NODES}")
            return BAD
        names = [str(n) for n in nodeset]
        bad = [n for n in names if not _HOSTNAME_RE.match(n)]
        if bad:
            self.error(path, f"invalid node name {bad[0]!r} in {value!r}")
            return BAD
        return value


def longest(lines: Mapping[KeyPath, int], path: KeyPath) -> int | None:
    for i in range(len(path), 0, -1):
        if path[:i] in lines:
            return lines[path[:i]]
    return None


def get_path(data: Any, path: KeyPath) -> Any:
    """The value at ``path`` in plain data, or BAD when absent."""
    for part in path:
        if isinstance(part, int):
            if not isinstance(data, list) or part >= len(data):
                return BAD
        elif not isinstance(data, dict) or part not in data:
            return BAD
        data = data[part]
    return data
