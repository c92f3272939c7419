"""The RAMDISK driver on MooseFS 4 (issue 31): the real build, check and destroy of
:class:`MooseFsBackend` against Debian 13's MooseFS 4.x master, chunkserver and mfsmount,
on one RSA node chrooted in namespaces of the test's own. On main every MooseFS 4 build
failed: ``mfssetgoal -r 1`` asks for a storage class "1" that a 4.x master does not have."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rsa_scheduler.fs.base import FsRequest
from rsa_scheduler.fs.mfslayout import DIR_PREFIX
from rsa_scheduler.fs.moosefs import MooseFsBackend
from rsa_scheduler.fs.nodecheck import check_node
from tests.mfs4.sandbox import DATA_ADDRESS, MOUNT_ROOT, POOL, ChrootHost, make_node, shell

pytestmark = pytest.mark.mfs4

# what is left of any RAMDISK: its processes, mounts and pool entries; the pool's standby
# chunkserver (filesystem.moosefs_standby) is no RAMDISK's while unclaimed and empty
LEFT = r"""pgrep -a -f '^\S*mfs(master|chunkserver|mount)' | while read -r pid cmd; do
  case $cmd in
    "mfschunkserver -c $1/rsa-mfs-.standby-"*)
      sb=${cmd#mfschunkserver -c }; sb=${sb%/mfschunkserver.cfg*}
      [ -d "$sb" ] && [ ! -L "$sb/claim" ] && continue;;
  esac
  echo "process $pid $cmd"
done
findmnt -n -o TARGET,FSTYPE -t fuse,fuse.mfs | sed 's/^/mount /'
for e in "$1"/* "$1"/.[!.]*; do
  [ -e "$e" ] || [ -L "$e" ] || continue
  case ${e##*/} in
    rsa-mfs-.standby-*)
      [ -L "$e/claim" ] && echo "pool entry ${e##*/} claimed by $(readlink "$e/claim")"
      [ -z "$(find "$e/chunks" -type f -name 'chunk_*')" ] ||
        echo "pool entry ${e##*/} holds chunks";;
    *) echo "pool entry ${e##*/}";;
  esac
done
exit 0
"""


def left(host: ChrootHost) -> list[str]:
    return shell(host, LEFT, POOL).splitlines()


def test_a_ramdisk_is_built_used_checked_and_destroyed_on_moosefs_4(root: Path) -> None:
    with make_node(root) as host:
        backend = MooseFsBackend({"rsa1": host}, addresses={"rsa1": DATA_ADDRESS},
                                 create_timeout=30, destroy_timeout=30, retries=0)
        report = check_node("rsa1", host, backend.needs(), POOL,
                            facts=backend.node_facts())
        assert report.ok, report.lines()
        version = report.facts["MooseFS"]
        assert re.fullmatch(r"4\.\d+\.\d+", version), report.facts
        assert report.lines() == [f"rsa1: ok (MooseFS {version})"]

        req = FsRequest("job4-c1", "4", ("rsa1",), "ram", {"rsa1": POOL}, MOUNT_ROOT,
                        owner=(4242, 4242))
        try:
            spec = backend.create(req)
            assert spec.client["moosefs_version"] == version
            mnt = spec.rsa_mountpoint
            assert backend.health(spec, req).ok
            # the data path: a file written and read back through the RAMDISK
            assert shell(host, 'printf "%s" "$2" > "$1/f" && cat "$1/f"', mnt,
                         "through MooseFS 4") == "through MooseFS 4"
            # one copy, no trash, the root the job's user's
            assert "1CP" in shell(host, 'mfsgetsclass "$1/f"', mnt)
            assert re.search(r":\s*0\b", shell(host, 'mfsgettrashretention "$1"', mnt))
            assert shell(host, 'stat -c "%u %a" "$1"', mnt).split() == ["4242", "700"]
            # admin (to make the class) for the master node's own address only
            exports = shell(host, 'cat "$1/mfsexports.cfg"',
                            f"{POOL}/{DIR_PREFIX}{req.fs_id}")
            admin = [ln.split()[0] for ln in exports.splitlines() if "admin" in ln]
            assert admin == [DATA_ADDRESS], exports
            # create again: the same filesystem, found complete and healthy
            assert backend.create(req) == spec
        finally:
            backend.destroy(req)
        assert left(host) == []
