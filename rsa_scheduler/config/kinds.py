"""The kinds of configuration keys: how each is written in YAML, and its bounds.

Owns :class:`Kind` and its subclasses (string, bool, integer, number, duration, size,
absolute path, choice, listen address, hostlist, address, section, list, mapping,
mapping by a site's own names, optional), :class:`Setting` and :func:`meta` (a key's
kind and documentation, carried in a dataclass field's metadata), the upper bounds of
numbers (``MAX_*``, ``HOUR``, ``DAY``) and the exact short forms of durations and sizes.
Pure data: the validator
(:mod:`rsa_scheduler.config.validate`) interprets the kinds, the schema
(:mod:`rsa_scheduler.config.schema`) declares the keys with them. Must not import the
rest of the configuration.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from rsa_scheduler.core.units import MAX_DURATION, format_size, parse_size

# Upper bounds of integer and duration keys: past these a value is a typo (or an
# overflow), never a site's intent. Shown in the generated reference.
HOUR, DAY = 3600.0, 86400.0
MAX_NODES = 100_000  # RSA nodes per job, compute nodes per RSA node
MAX_POOL_NODES = 10_000  # RSA nodes in the pool
MAX_RETRIES = 100
MAX_SIZE = 1 << 50  # 1P: an RSA node's pool
# Slurm job priorities are uint32; 0xfffffffe and 0xffffffff mean NO_VAL and INFINITE.
MAX_SLURM_PRIORITY = 0xFFFFFFFD

# --------------------------------------------------------------------------- kinds


@dataclass(frozen=True, slots=True)
class Kind:
    """How a key is written in YAML. The loader converts, the reference prints ``label``."""

    @property
    def label(self) -> str:
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class Str(Kind):
    @property
    def label(self) -> str:
        return "string"


@dataclass(frozen=True, slots=True)
class Bool(Kind):
    @property
    def label(self) -> str:
        return "`true` \\| `false`"


@dataclass(frozen=True, slots=True)
class Int(Kind):
    min: int | None = None
    max: int | None = None

    @property
    def label(self) -> str:
        if self.min is not None and self.max is not None:
            return f"integer {self.min}–{self.max}"
        if self.min is not None:
            return f"integer ≥ {self.min}"
        return "integer"


@dataclass(frozen=True, slots=True)
class Number(Kind):
    """A finite decimal number (an int is accepted too)."""

    min: float
    max: float

    @property
    def label(self) -> str:
        return f"number {self.min:g}–{self.max:g}"


@dataclass(frozen=True, slots=True)
class Duration(Kind):
    positive: bool = True  # False: zero is allowed
    max: float = MAX_DURATION  # seconds; longer values are rejected
    # True: a bare number is seconds (the simulator's scenarios); False: a bare number
    # other than 0 is refused as ambiguous (Slurm reads minutes, most people seconds)
    bare_seconds: bool = False

    @property
    def label(self) -> str:
        text = f"duration ≤ {format_duration_short(self.max)}"
        return text if self.positive else f"{text} (may be 0s)"


@dataclass(frozen=True, slots=True)
class Size(Kind):
    max: int = MAX_SIZE  # bytes; larger values are rejected
    positive: bool = True  # False: 0 is allowed (a setting's "off")

    @property
    def label(self) -> str:
        text = f"size ≤ {format_size(self.max)}"
        return text if self.positive else f"{text} (0: off)"


@dataclass(frozen=True, slots=True)
class AbsPath(Kind):
    @property
    def label(self) -> str:
        return "absolute path"


@dataclass(frozen=True, slots=True)
class Choice(Kind):
    values: tuple[str, ...]
    enum_cls: type[enum.StrEnum] | None = None  # convert to this enum; None keeps the string

    @classmethod
    def of(cls, enum_cls: type[enum.StrEnum],
           members: Iterable[enum.StrEnum] | None = None) -> Choice:
        """The enum's values (or only ``members``'), converted to the enum."""
        return cls(tuple(m.value for m in (enum_cls if members is None else members)), enum_cls)

    @property
    def label(self) -> str:
        return " \\| ".join(f"`{v}`" for v in self.values)


@dataclass(frozen=True, slots=True)
class Listen(Kind):
    #: the port of a value naming a host alone (None: a port is required)
    default_port: int | None = None

    @property
    def label(self) -> str:
        if self.default_port:
            return f"`host:port`, a host (port {self.default_port}) or empty"
        return "`host:port` or empty"


@dataclass(frozen=True, slots=True)
class Hostlist(Kind):
    @property
    def label(self) -> str:
        return "hostlist"


@dataclass(frozen=True, slots=True)
class Address(Kind):
    @property
    def label(self) -> str:
        return "host, IP or pattern"


@dataclass(frozen=True, slots=True)
class Section(Kind):
    cls: type

    @property
    def label(self) -> str:
        return "section"


@dataclass(frozen=True, slots=True)
class ListOf(Kind):
    item: Kind

    @property
    def label(self) -> str:
        if isinstance(self.item, Section):
            return "list of mappings"
        return f"list of {self.item.label}s"


@dataclass(frozen=True, slots=True)
class MapOf(Kind):
    keys: type[enum.StrEnum]
    value: Kind
    members: tuple[enum.StrEnum, ...] = ()  # the keys allowed; () for every member of `keys`

    @property
    def key_values(self) -> tuple[str, ...]:
        return tuple(m.value for m in (self.members or self.keys))

    @property
    def label(self) -> str:
        return f"mapping {'/'.join(self.key_values)} → {self.value.label}"


@dataclass(frozen=True, slots=True)
class NameMap(Kind):
    """A mapping whose keys are names a site chooses (users, Slurm accounts), each to a
    ``value``; ``what`` names them in messages (``user``); ``lower``: Slurm keeps such
    names in lower case (accounts), so a name with a capital never matches a job."""

    value: Kind
    what: str
    lower: bool = False

    @property
    def label(self) -> str:
        value = "mapping" if isinstance(self.value, Section) else self.value.label
        return f"mapping {self.what} name → {value}"


@dataclass(frozen=True, slots=True)
class Optional(Kind):
    inner: Kind

    @property
    def label(self) -> str:
        if isinstance(self.inner, Listen):
            return self.inner.label  # already says "or empty"
        return f"{self.inner.label}, or empty"


@dataclass(frozen=True, slots=True)
class Setting:
    """One documented key: its kind, what it does, and (for list items) its default text."""

    kind: Kind
    doc: str
    default_text: str | None = None  # shown in the reference when there is no YAML default


def meta(kind: Kind, doc: str, default_text: str | None = None) -> dict[str, Setting]:
    """Field metadata carrying a key's :class:`Setting`: ``field(metadata=meta(...))``."""
    return {"rsa": Setting(kind, doc, default_text)}


# --------------------------------------------------------------------------- short forms


def format_duration_short(seconds: float) -> str:
    """``300.0`` → ``5m``: the largest unit that is exact, so parsing gives it back."""
    if seconds == 0:
        return "0s"
    if seconds == int(seconds):
        whole = int(seconds)
        for unit, mult in (("d", 86400), ("h", 3600), ("m", 60)):
            if whole % mult == 0:
                return f"{whole // mult}{unit}"
        return f"{whole}s"
    millis = seconds * 1000
    if millis == int(millis):
        return f"{int(millis)}ms"
    return f"{seconds}s"


def format_size_exact(nbytes: int) -> str:
    """Like Slurm (``3.5T``) when that is exact, else the largest exact unit."""
    text = format_size(nbytes)
    if parse_size(text) == nbytes:
        return text
    for unit, mult in (("P", 1 << 50), ("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20)):
        if nbytes % mult == 0:
            return f"{nbytes // mult}{unit}"
    if nbytes % 1024 == 0:
        return f"{nbytes // 1024}K"
    return str(nbytes)
