"""An immutable set of node names, as actions carry them from the core to the executors.

Owns :class:`Hostlist`: the RSA nodes of one action, parsed once (where the core or a
log reader has Slurm's folded form, ``rsa[1-2,5]``) and then read as names by whoever
executes the action; it writes back the same folded form. Parsing and folding go
through ClusterShell's ``NodeSet`` without group resolution (a name with ``@`` would
name a group), never a hand-written parser. Also owns the bound on a hostlist that comes
from outside rsad (:func:`check_size`, :data:`MAX_NAMES`): counted from its ranges' ends
before ``NodeSet`` expands it, since ``c[1-100000000]`` expands to that many names.

Pure: ClusterShell and the stdlib only. Values are shared: :meth:`Hostlist.parse`
returns the same instance for the same text (an allocation's actions all name it), and
:meth:`Hostlist.from_nodeset` (the allocator's result) costs no parse at all.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet, NodeSetException

#: characters of the folded syntax (and whitespace): never part of one node's name
_SYNTAX = frozenset(",[]@ \t\n\r")
#: the most names a hostlist from outside rsad (a hook's job nodes) may expand to: more
#: compute nodes than one job of any Slurm cluster rsad serves has (Slurm's largest
#: clusters have some 10,000 nodes); a longer list is refused before it is expanded
MAX_NAMES = 65536
#: one numeric range of the folded syntax, ``a``, ``a-b`` or ``a-b/step``
_RANGE = re.compile(r"\s*([0-9]+)\s*(?:-\s*([0-9]+)\s*)?(?:/\s*([0-9]+)\s*)?")


def size_bound(text: str) -> int:
    """At least as many as the names Slurm's folded ``text`` expands to, counted from its
    ranges' ends alone, without expanding them (``c[1-100000000]``: 100000000, at once;
    ClusterShell's ``NodeSet`` would build every name first). Each comma-separated item
    counts the product of its bracket groups' sizes (``c[1-4]-[1-2]``: 8); ClusterShell's
    operators (``!``, ``&``, ``^``) count as commas, which only counts more. What is not
    a range counts one: ``NodeSet`` refuses it afterwards. A bound, not a parser."""
    total, item, depth, group = 0, 1, 0, ""
    for ch in text + ",":
        if depth:
            if ch == "]":
                depth = 0
                size = 0
                for part in group.split(","):
                    m = _RANGE.fullmatch(part)
                    if m is None or m[2] is None:
                        size += 1
                        continue
                    first, last, step = int(m[1]), int(m[2]), int(m[3] or 1)
                    size += (last - first) // max(step, 1) + 1 if last >= first else 1
                item *= max(size, 1)
                group = ""
            else:
                group += ch
        elif ch == "[":
            depth = 1
        elif ch in ",!&^":
            total += item
            item = 1
    return total + (item if depth else 0)


def check_size(text: str, limit: int = MAX_NAMES) -> None:
    """Refuse (ValueError, one line) a folded hostlist that would expand to more than
    ``limit`` names, before anything expands it."""
    if len(text) > limit * 8 or size_bound(text) > limit:
        raise ValueError(f"the hostlist {text[:40]!r}{'...' if len(text) > 40 else ''} "
                         f"names more than {limit} nodes: a job's nodes are at most "
                         f"{limit}; send Slurm's own folded list of its nodes")


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
