"""Which MooseFS an RSA node runs, and what the RAMDISK driver says to each release.

Owns :data:`VERSION_SCRIPT` (the shell that asks a node's MooseFS tools their versions;
:data:`FINGERPRINT_SCRIPT` asks only when the tools' files changed),
:func:`parse_versions` and :func:`node_version` (those answers, and the one release a node
runs), and :class:`Dialect`: the commands of a build that differ between MooseFS 3.0 and
4.x, and the parser of what ``mfscli`` says about the chunk servers.

What differs (MooseFS v3.0.117 and v4.57.5 sources; docs/filesystems.md, "MooseFS
versions"):

- 3.0 names its storage classes ``1`` to ``9`` (the number of copies): ``mfssetgoal -r 1``.
  4.x defines only ``2CP``, ``3CP``, ``EC4+1`` and ``EC8+1`` on a fresh master and
  ``mfssetgoal`` is a wrapper of ``mfssetsclass``: a class of one copy is made first
  (``mfscreatesclass``, which needs an ``admin`` export), then set with ``mfssetsclass``.
- 4.x deprecates ``mfssettrashtime`` for ``mfssettrashretention``.
- 4.x ``mfscli`` prints JSON (``-j``); its plain ``-SCS`` gained a column (queue state).

Pure text: running anything is :mod:`rsa_scheduler.fs.moosefs`'s. Imports nothing of the
package but :class:`FsError`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from rsa_scheduler.errors import FsError

#: the tools whose versions a node reports, as the packages install them
TOOLS = ("mfsmaster", "mfschunkserver", "mfsmount", "mfscli")
#: the storage class of one copy a 4.x RAMDISK's root gets (3.0: class "1")
ONE_COPY_CLASS = "1CP"

# One line per tool: "V:<tool>:<its first line of version output>" ("V:<tool>:" when the
# tool is missing or says nothing). -v for the daemons and mfscli, -V for mfsmount.
VERSION_SCRIPT = r"""PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
for t in mfsmaster mfschunkserver mfsmount mfscli; do
  f=-v; [ "$t" = mfsmount ] && f=-V
  printf 'V:%s:%s\n' "$t" "$(command -v "$t" >/dev/null 2>&1 && "$t" $f 2>&1 | head -n 1)"
done
"""

# The tools' files as they are now ("P:" then tool=inode.size.mtime of each, "-" when
# missing), and the versions only when that differs from "$1", what they were when the
# versions were last asked (MooseFsBackend keeps it per node): `mfscli -v` alone starts a
# Python interpreter (0.1-0.3 s, every node at once at each create). A package upgrade
# replaces the files (new inode): the next create asks again.
FINGERPRINT_SCRIPT = r"""fp=P:
for t in mfsmaster mfschunkserver mfsmount mfscli; do
  p=$(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin command -v "$t") &&
    s=$(stat -L -c %i.%s.%Y "$p" 2>/dev/null) || s=-
  fp="$fp$t=$s,"
done
echo "$fp"
if [ "$fp" != "$1" ]; then
""" + VERSION_SCRIPT + "fi\n"


def parse_fingerprint(stdout: str) -> str:
    """The ``P:`` line of :data:`FINGERPRINT_SCRIPT`'s output ("" when there is none)."""
    return next((ln for ln in stdout.splitlines() if ln.startswith("P:")), "")


_NUMBER = re.compile(r"\bversion:?\s*(\d+)\.(\d+)\.(\d+)", re.IGNORECASE)


@dataclass(frozen=True, slots=True, order=True)
class Version:
    major: int
    minor: int
    patch: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"

    @property
    def release(self) -> str:
        """The release series a RAMDISK's nodes must share: ``3.0``, ``4``."""
        return f"{self.major}.{self.minor}" if self.major < 4 else str(self.major)

    @classmethod
    def parse(cls, text: str) -> Version:
        found = _NUMBER.search(text) or re.search(r"^\s*(\d+)\.(\d+)\.(\d+)\b", text)
        if not found:
            raise ValueError(f"no MooseFS version in {text.strip()[:80]!r}")
        return cls(*(int(g) for g in found.groups()))


def parse_versions(stdout: str) -> dict[str, Version | None]:
    """Tool -> its version from :data:`VERSION_SCRIPT`'s output (None: missing or no
    version in what it said)."""
    found: dict[str, Version | None] = {}
    for line in stdout.splitlines():
        if not line.startswith("V:"):
            continue
        _, tool, said = [*line.split(":", 2), ""][:3]
        try:
            found[tool] = Version.parse(said)
        except ValueError:
            found[tool] = None
    return found


def node_version(tools: Mapping[str, Version | None]) -> Version:
    """The one MooseFS release a node runs: every tool it has must belong to it.
    FsError (one line, what to do) when it has none or a mix."""
    have = {t: v for t, v in tools.items() if v is not None}
    if not have:
        raise FsError(f"no MooseFS tool answered with a version ({', '.join(TOOLS)}"
                      "): install moosefs-master, -chunkserver, -client and -cli")
    if len({v.release for v in have.values()}) > 1:
        mix = ", ".join(f"{t} {v}" for t, v in sorted(have.items()))
        raise FsError(f"MooseFS tools of different releases ({mix}): install one "
                      "release of moosefs-master, -chunkserver, -client and -cli")
    return have.get("mfsmaster") or max(have.values())


def version_facts(stdout: str) -> tuple[dict[str, str], list[str]]:
    """``rsa nodes check``: the node's MooseFS release from :data:`VERSION_SCRIPT`'s
    output, or what is wrong with its tools (one "what: fix" line)."""
    try:
        return {"MooseFS": str(node_version(parse_versions(stdout)))}, []
    except FsError as e:  # already "what: fix"
        return {}, [str(e)]


def same_release(versions: Mapping[str, Version]) -> None:
    """A RAMDISK's nodes must run one MooseFS release; FsError naming them otherwise."""
    if len({v.release for v in versions.values()}) > 1:
        seen = ", ".join(f"{n} {v}" for n, v in versions.items())
        raise FsError(f"RSA nodes of one RAMDISK run different MooseFS releases ({seen}): "
                      "rsad builds a RAMDISK only over nodes of one release; upgrade them "
                      "together (rsa nodes check shows each node's version)")


@dataclass(frozen=True, slots=True)
class Dialect:
    """The commands of one MooseFS release that differ from the others."""

    version: Version

    @property
    def classes(self) -> bool:
        """Named storage classes (4.x): a one-copy class must be made, by an admin."""
        return self.version.major >= 4

    def one_copy(self, mountpoint: str) -> list[list[str]]:
        """Make the RAMDISK's root, and all below it, keep one copy and no trash."""
        if not self.classes:
            return [["mfssetgoal", "-r", "1", mountpoint],
                    ["mfssettrashtime", "-r", "0", mountpoint]]
        return [["mfscreatesclass", "-M", mountpoint, "-K", "*", "-c",
                 "rsa-scheduler RAMDISK: one copy", ONE_COPY_CLASS],
                ["mfssetsclass", "-r", ONE_COPY_CLASS, mountpoint],
                ["mfssettrashretention", "-r", "0", mountpoint]]

    def chunkservers_argv(self, host: str, port: int) -> list[str]:
        return ["mfscli", "-H", host, "-P", str(port), "-SCS",
                *(["-j"] if self.version.major >= 4 else [])]

    def cslist_record(self) -> tuple[int, int, int, int]:
        """The master's answer to CLTOMA_CSERV_LIST (no mode byte) as mfsscripts'
        SPACE_WAIT reads it: (record size, offset of the IPv4 address, of the port, of
        the total space); every record starts with a byte whose bit 0 says
        "disconnected". 4.26 and later (4.57.5's ``csdb_servlist_data``, mode 0):
        version 4, ip 4, ip as the client sees it 4, port 2, csid 2, used 8, total 8,
        ... (73); 3.0.38 to 4.25 (3.0.117's): flags+version 4, ip 4, port 2, csid 2,
        used 8, total 8, ... (69). mfscli's ``get_chunkservers`` reads them so."""
        if self.version >= Version(4, 26, 0):
            return 73, 4, 12, 24
        return 69, 4, 8, 20

    def chunkservers(self, mfscli_output: str) -> dict[tuple[str, int], int]:
        if self.version.major >= 4:
            return chunkservers_json(mfscli_output)
        return chunkservers_plain(mfscli_output)


def chunkservers_json(mfscli_output: str) -> dict[tuple[str, int], int]:
    """(ip, port) -> total space in bytes of every connected chunk server in
    ``mfscli -SCS -j`` (4.x): ``dataset.chunkservers[]`` with ``ip``, ``port``,
    ``hdd_regular_total``. Unreadable output (master not up yet) lists none."""
    try:
        data = json.loads(mfscli_output)
        servers = data["dataset"].get("chunkservers") or []
    except (ValueError, KeyError, TypeError, AttributeError):
        return {}
    found: dict[tuple[str, int], int] = {}
    for cs in servers if isinstance(servers, list) else []:
        if not isinstance(cs, dict) or not cs.get("connected", True):
            continue
        ip = str(cs.get("ip") or "").split(" -> ")[-1].strip()
        port, total = cs.get("port"), cs.get("hdd_regular_total")
        if ip and isinstance(port, int):
            found[(ip, port)] = total if isinstance(total, int) else 0
    return found


def chunkservers_plain(mfscli_output: str) -> dict[tuple[str, int], int]:
    """(ip, port) -> total space in bytes of every chunk server ``mfscli -SCS`` lists
    (tab-separated rows: ip, port, id, labels, version, load, [queue state (4.x)],
    maintenance, chunks, used, total, ...: the total is the third field after the
    maintenance one). A chunk server registers with total 0 and reports its space only
    after it scanned its chunk directory; writes before that fail with ENOSPC."""
    found: dict[tuple[str, int], int] = {}
    for line in mfscli_output.splitlines():
        fields = [f.strip() for f in line.split("\t")]
        if len(fields) >= 3 and fields[0] == "chunk servers:" and fields[2].isdigit():
            maint = next((i for i, f in enumerate(fields) if f.startswith("maintenance_")),
                         7)
            total = fields[maint + 3] if len(fields) > maint + 3 else ""
            found[(fields[1], int(fields[2]))] = int(total) if total.isdigit() else 0
    return found


#: what a filesystem recorded before its nodes' versions were known ran MooseFS 3.0
LEGACY = Dialect(Version(3, 0, 117))
