"""Lab helpers for filesystem tests: SSH hosts of the RSA nodes and a lab MooseFS backend.

The lab's RSA nodes listen on 127.0.1.N, which MooseFS refuses for chunkserver→master
traffic (any 127/8). So every node's MooseFS servers bind to its ``data_address``, which
the lab sets to the host end of its PFS veth (``10.213.0.1``): a non-loopback address
local to the host, reachable from every RSA and compute node (they share the host's
network namespace), never routed off the machine (the lab's ``unreachable
10.213.0.0/16`` guard). Ports keep the servers apart.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from rsa_scheduler.config import load_config
from rsa_scheduler.fs.base import FsRequest
from rsa_scheduler.fs.mfslayout import DIR_PREFIX
from rsa_scheduler.fs.moosefs import MooseFsBackend
from rsa_scheduler.remote import HostPool


def lab_data_addresses(lab: Mapping[str, str]) -> dict[str, str]:
    """Each RSA node's data address: ``pool.nodes[].data_address`` of the lab's rsa.yaml
    (lab-up sets the PFS veth's host end), else the host end derived from the env."""
    cfg = load_config(lab["RSA_LAB_RSA_CONFIG"])
    given = {n.name: n.data_address for n in cfg.pool.members() if n.data_address}
    if given:
        return given
    host_end = lab["RSA_LAB_PFS_MASTER"].rsplit(".", 1)[0] + ".1"
    return {n.name: host_end for n in cfg.pool.members()}


@contextmanager
def lab_hosts(lab: Mapping[str, str]) -> Iterator[HostPool]:
    pool = HostPool.from_config(load_config(lab["RSA_LAB_RSA_CONFIG"]))
    try:
        yield pool
    finally:
        pool.close()


def lab_moosefs(lab: Mapping[str, str], hosts: HostPool, **options: Any) -> MooseFsBackend:
    return MooseFsBackend(hosts, addresses=lab_data_addresses(lab), create_timeout=60,
                          destroy_timeout=60, retries=1, **options)


LEFTOVERS = r"""d=$0; mnt=$1; daemons=$2; title=$3
findmnt -n --mountpoint "$mnt" >/dev/null && echo "mount $mnt"
pgrep --ns $$ --nslist mnt -a -f "$daemons" | sed 's/^/process /'
pgrep --ns $$ --nslist mnt -a -x -f "$title" | sed 's/^/process /'
if [ -e "$d" ]; then echo "pool entry $d"; fi
for sb in "${d%/*}"/rsa-mfs-.standby-*; do
  [ "$(readlink "$sb/claim" 2>/dev/null)" = "${d##*/rsa-mfs-}" ] && echo "claimed standby $sb"
done
pgrep --ns $$ --nslist mnt -a -f "^\S*mfschunkserver -c ${d%/*}/rsa-mfs-\.standby-" |
  while read -r pid cmd; do
    cfg=${cmd##* -c }; cfg=${cfg%% *}
    [ -e "$cfg" ] || echo "process $pid $cmd (its standby directory is gone)"
  done
exit 0
"""


def moosefs_leftovers(hosts: HostPool, req: FsRequest) -> list[str]:
    """Processes, mounts and pool entries of ``req``'s MooseFS still on its nodes."""
    found: list[str] = []
    mnt = f"{req.mount_root}/{req.fs_id}"
    for node in req.nodes:
        d = f"{req.pool_dirs[node]}/{DIR_PREFIX}{req.fs_id}"
        daemons = f"^\\S*mfs(master|chunkserver) -c {re.escape(d)}/"
        title = re.escape(f"mfsmount (mounted on: {mnt})")
        out = hosts[node].run(["sh", "-c", LEFTOVERS, d, mnt, daemons, title],
                              timeout=30).stdout
        found += [f"{node}: {line}" for line in out.splitlines()]
    return found
