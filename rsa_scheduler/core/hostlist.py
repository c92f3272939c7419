"""An immutable set of node names, as actions carry them from the core to the executors.

Owns :class:`Hostlist`: the RSA nodes of one action, parsed once (where the core or a
log reader has Slurm's folded form, ``rsa[1-2,5]``) and then read as names by whoever
executes the action; it writes back the same folded form. Parsing and folding go
through ClusterShell's ``NodeSet`` without group resolution (a name with ``@`` would
name a group), never a hand-written parser.

Pure: ClusterShell and the stdlib only. Values are shared: :meth:`Hostlist.parse`
returns the same instance for the same text (an allocation's actions all name it), and
:meth:`Hostlist.from_nodeset` (the allocator's result) costs no parse at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet, NodeSetException

#: characters of the folded syntax (and whitespace): never part of one node's name
_SYNTAX = frozenset(",[]@ \t\n\r")


@dataclass(frozen=True, slots=True)
class Hostlist:
    """Node names in ``NodeSet`` order (sorted, numeric ranges by number), no repeats.

    Construction validates and canonicalises: ``names`` must be a tuple of plain node
    names (no folded ranges); their order and repeats do not matter.
    """

    names: tuple[str, ...] = ()
    #: the folded form (``rsa[1-2,5]``), as Slurm writes hostlists; "" when empty
    folded: str = field(default="", init=False, compare=False)

    def __post_init__(self) -> None:
        names = self.names
        if not isinstance(names, tuple):
            raise TypeError(f"Hostlist names must be a tuple of str, got {names!r}")
        for name in names:
            if not isinstance(name, str) or not name or not _SYNTAX.isdisjoint(name):
                raise ValueError(f"not a node name: {name!r} (a Hostlist takes names; "
                                 "Hostlist.parse takes a folded hostlist)")
        canonical, folded = _canonical(names)
        object.__setattr__(self, "names", canonical)
        object.__setattr__(self, "folded", folded)

    @classmethod
    def of(cls, names: Iterable[str]) -> Hostlist:
        return cls(tuple(names))

    @staticmethod
    def parse(text: str) -> Hostlist:
        """The hostlist Slurm's folded ``text`` names (``""``: none). Raises ValueError."""
        if not isinstance(text, str):
            raise TypeError(f"a hostlist is written as a string, got {text!r}")
        hit = _BY_TEXT.get(text)
        if hit is not None:
            return hit
        try:
            ns = NodeSet(text, resolver=RESOLVER_NOGROUP) if text else None
        except NodeSetException as e:
            raise ValueError(f"not a hostlist: {text!r} ({e})") from e
        got = Hostlist.from_nodeset(ns) if ns is not None else Hostlist()
        _remember(_BY_TEXT, text, got)
        return got

    @staticmethod
    def from_nodeset(ns: NodeSet) -> Hostlist:
        """The hostlist of a ``NodeSet`` the caller has (the allocator's): no parse."""
        names, folded = tuple(ns), str(ns)
        _remember(_CANONICAL, names, (names, folded))
        got = Hostlist(names)
        _remember(_BY_TEXT, folded, got)
        return got

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def __bool__(self) -> bool:
        return bool(self.names)

    def __contains__(self, name: object) -> bool:
        return name in self.names

    def __str__(self) -> str:
        return self.folded


#: the caches (a job's actions all name its nodes; a poll allocates for a few jobs):
#: names as given -> (canonical names, folded); folded text -> value. Values are
#: immutable, so sharing them is safe. Emptied when full.
_CANONICAL: dict[tuple[str, ...], tuple[tuple[str, ...], str]] = {}
_BY_TEXT: dict[str, Hostlist] = {}
_CACHED = 65536

K = TypeVar("K")
V = TypeVar("V")


def _remember(cache: dict[K, V], key: K, value: V) -> None:
    if len(cache) >= _CACHED:
        cache.clear()
    cache[key] = value


def _canonical(names: tuple[str, ...]) -> tuple[tuple[str, ...], str]:
    hit = _CANONICAL.get(names)
    if hit is None:
        if not names:
            return (), ""
        ns = NodeSet.fromlist(names, resolver=RESOLVER_NOGROUP)
        hit = (tuple(ns), str(ns))
        _remember(_CANONICAL, names, hit)
    return hit
