"""``rsa nodes check``: what an RSA node lacks for the configured backends, one line each.

Owns :data:`COMMON_NEEDS` (what the data path runs on every RSA node), the pure
:func:`check_script` (one POSIX shell script per node: every test of every need, one
``MISSING`` line per failure) and :func:`parse_check`, and :func:`check_node`, the
calls over the node's host seam (that script, then the pool's own-filesystem check of
:mod:`rsa_scheduler.fs.poolcheck`, then the PFS probe of :mod:`rsa_scheduler.fs.pfscheck`
against what rsad's host sees, then the backend's facts, e.g. its MooseFS release). The
backends name their own needs (``FilesystemBackend.node_needs``) and facts
(``FilesystemBackend.node_facts``). Nothing here changes a node.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from rsa_scheduler.fs.base import Need, NodeFacts, command_need
from rsa_scheduler.fs.pfscheck import Seen, parse_probe, pfs_lacks, probe_argv
from rsa_scheduler.fs.poolcheck import FIX, parse_pool_check, pool_check_argv
from rsa_scheduler.hosts import Host, HostError
from rsa_scheduler.runner import CommandError

#: what staging, verification and containment run on every RSA node (the scripts of
#: rsa_scheduler/staging/scripts, rsa_scheduler/contain.py, the health probe)
COMMON_NEEDS: tuple[Need, ...] = (
    command_need("rsync", "rsync"),
    command_need("tar", "tar"),
    command_need("bash", "bash"),
    command_need("setpriv", "util-linux"),
    command_need("unshare", "util-linux"),
    command_need("setsid", "util-linux"),
    command_need("findmnt", "util-linux"),
    command_need("mountpoint", "util-linux"),
    command_need("umount", "mount"),
    command_need("timeout", "coreutils"),
    command_need("find", "findutils"),
    command_need("xargs", "findutils"),
    command_need("dd", "coreutils"),
    command_need("sha256sum", "coreutils"),
    command_need("b2sum", "coreutils"),
    command_need("cksum", "coreutils"),
    command_need("base64", "coreutils"),
    command_need("stat", "coreutils"),
)
MARK = "MISSING\t"


@dataclass(frozen=True, slots=True)
class NodeReport:
    node: str
    lacks: tuple[str, ...]  # "what: fix", one each
    error: str = ""  # the node could not be asked at all
    #: what the backend tells of the node (``MooseFS`` -> ``4.57.5``)
    facts: Mapping[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.lacks and not self.error

    def lines(self) -> list[str]:
        if self.error:
            return [f"{self.node}: cannot check: {self.error}"]
        told = ", ".join(f"{k} {v}" for k, v in self.facts.items())
        if not self.lacks:
            return [f"{self.node}: ok ({told})" if told else f"{self.node}: ok"]
        return ([f"{self.node}: {told}"] if told else []) + [
            f"{self.node}: lacks {x}" for x in self.lacks]


def pool_need(pool_dir: str) -> Need:
    q = shlex.quote(pool_dir)
    return Need(f"pool directory {pool_dir}", f"[ -d {q} ] && [ -w {q} ]",
                f"create it (a tmpfs for ram, a file system on the SSD for ssd): "
                f"mkdir -p {pool_dir}")


def check_script(needs: Sequence[Need], pool_dir: str) -> str:
    """One shell script testing every need and the pool directory; prints one
    ``MISSING<TAB>what<TAB>fix`` line per failure, nothing else."""
    lines = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
    for n in (*needs, pool_need(pool_dir)):
        lines.append(f"{{ {n.test}; }} || printf '{MARK}%s\\t%s\\n' "
                     f"{shlex.quote(n.what)} {shlex.quote(n.fix)}")
    lines.append("exit 0")
    return "\n".join(lines) + "\n"


def parse_check(stdout: str) -> tuple[str, ...]:
    out: list[str] = []
    for line in stdout.splitlines():
        if line.startswith(MARK):
            _, what, fix = [*line.split("\t", 2), "", ""][:3]
            out.append(f"{what}: {fix}" if fix else what)
    return tuple(out)


def check_node(name: str, host: Host, needs: Sequence[Need], pool_dir: str,
               timeout: float = 30.0, pfs: Mapping[str, Seen] | None = None,
               facts: NodeFacts | None = None) -> NodeReport:
    """``pfs``: the PFS roots as rsad's host sees them (:func:`pfscheck.parse_probe`);
    the node must see the same filesystems at the same paths. ``facts``: what the
    backend asks of the node besides (its MooseFS release)."""
    unique = list({n.what: n for n in (*COMMON_NEEDS, *needs)}.values())
    try:
        done = host.run(["sh", "-c", check_script(unique, pool_dir)], timeout=timeout)
        lacks = parse_check(done.stdout)
        if not any(x.startswith(f"pool directory {pool_dir}:") for x in lacks):
            # a pool that exists must have a filesystem of its own (fs/poolcheck.py)
            shared = parse_pool_check(host.run(pool_check_argv(pool_dir),
                                               timeout=timeout).stdout)
            lacks += tuple(f"a pool no user can fill ({why}): {FIX}" for why in shared)
        if pfs:
            there = parse_probe(host.run(probe_argv(list(pfs)), timeout=timeout).stdout)
            lacks += pfs_lacks(pfs, there)
        told: dict[str, str] = {}
        if facts is not None:
            told, more = facts.read(host.run(["sh", "-c", facts.script],
                                             timeout=timeout).stdout)
            lacks += tuple(more)
    except (HostError, CommandError, OSError) as e:
        return NodeReport(name, (), str(e).splitlines()[0] if str(e) else type(e).__name__)
    return NodeReport(name, lacks, facts=told)
