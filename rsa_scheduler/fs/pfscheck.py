"""``rsa nodes check``: is an RSA node a client of the site's PFS at the same paths as
rsad's host? RSA nodes copy users' data from and to the PFS as the user: a node where
``/scratch`` is a local directory (the PFS not mounted, or mounted elsewhere) would stage
an empty tree in and write the output where nobody looks.

Owns :data:`PROBE` (one POSIX shell script, run the same way on rsad's host and on each
node: per root its filesystem type, its inode number, and the inode numbers of its first
entries by name), :func:`parse_probe` and :func:`compare` (pure). Nothing is written:
the identity of a network filesystem is its server's inode numbers, the same from every
client, where a local directory's differ. Does not import a host or runner: the caller
runs the probe.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

#: how many entries of each root are compared (by name, in byte order)
ENTRIES = 20

# LC_ALL=C: the same order of names on every host; names with a newline are left out
# (a line each); find's errors (a root-squashed directory) leave the entries out
PROBE = r"""export LC_ALL=C
nl='
'
for r in "$@"; do
  if [ -d "$r" ]; then
    printf 'R\t%s\t%s\t%s\n' "$r" "$(stat -f -c %T -- "$r")" "$(stat -c %i -- "$r")"
    find "$r" -mindepth 1 -maxdepth 1 ! -name "*$nl*" -printf 'E\t%f\t%i\n' 2>/dev/null |
      sort | head -n ENTRIES
  else
    printf 'N\t%s\n' "$r"
  fi
done
exit 0
""".replace("ENTRIES", str(ENTRIES))


@dataclass(frozen=True, slots=True)
class Seen:
    """One root as a host sees it; ``fstype`` empty: not there (not a directory)."""

    root: str
    fstype: str = ""
    inode: int = 0
    entries: dict[str, int] = field(default_factory=dict)


def probe_argv(roots: Sequence[str]) -> list[str]:
    return ["sh", "-c", PROBE, "pfs-probe", *roots]


def parse_probe(stdout: str) -> dict[str, Seen]:
    """The probe's output, by root."""
    seen: dict[str, Seen] = {}
    current: Seen | None = None
    for line in stdout.splitlines():
        kind, _, rest = line.partition("\t")
        if kind == "R":
            root, _, tail = rest.rpartition("\t")
            root, _, fstype = root.rpartition("\t")
            current = Seen(root, fstype, int(tail) if tail.isdigit() else 0, {})
            seen[root] = current
        elif kind == "N":
            current = None
            seen[rest] = Seen(rest)
        elif kind == "E" and current is not None:
            name, _, inode = rest.rpartition("\t")
            if inode.isdigit():
                current.entries[name] = int(inode)
    return seen


def compare(here: Seen, there: Seen | None) -> str:
    """'' when ``there`` (a node) sees the same filesystem at ``here.root`` as rsad's host,
    else what differs."""
    if there is None or not there.fstype:
        return "not there"
    if there.fstype != here.fstype:
        return f"{there.fstype} there, {here.fstype} on rsad's host"
    common = set(here.entries) & set(there.entries)
    differ = sorted(n for n in common if here.entries[n] != there.entries[n])
    if there.inode != here.inode or differ or (here.entries and not common):
        what = (f"{differ[0]!r} is inode {there.entries[differ[0]]} there, "
                f"{here.entries[differ[0]]} on rsad's host" if differ
                else f"its root is inode {there.inode} there, {here.inode} on rsad's host"
                if there.inode != here.inode else "none of its entries is there")
        return f"another {there.fstype} filesystem than rsad's host's ({what})"
    return ""


def pfs_lacks(here: Mapping[str, Seen], there: Mapping[str, Seen]) -> tuple[str, ...]:
    """One ``what: fix`` line per root the node does not see as rsad's host does (roots
    absent on rsad's host are not compared: the caller says so)."""
    out = []
    for root, mine in here.items():
        if not mine.fstype:
            continue
        why = compare(mine, there.get(root))
        if why:
            out.append(f"the PFS at {root} as rsad's host sees it ({why}): mount the site's "
                       f"PFS at {root} on this node as on rsad's host (RSA nodes copy as the "
                       "user from and to the same paths)")
    return tuple(out)
