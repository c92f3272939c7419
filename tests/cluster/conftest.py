"""The cluster lab tier (issue 30): tests against lab/cluster, where every node is its own
host (its own namespaces and address, booted from one image with the packages installed
by apt). Run as root by ``make cluster-test``, which sets ``RSA_CLUSTER_LAB=1``; skipped
otherwise. The session brings the cluster up once and always takes it down again, then
checks that nothing of it is left (``clusterctl check-clean``), also when a test failed."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from rsa_scheduler.fs.mfslayout import standby_ports

CLUSTER = Path(__file__).resolve().parents[2] / "lab" / "cluster"
CTL = CLUSTER / "clusterctl"
#: the host rsad runs on: the controller, or a host of its own named rsad with
#: RSA_CLUSTER_RSAD=own (lab/cluster/rsacluster.py reads the same variable at up)
RSAD = "rsad" if os.environ.get("RSA_CLUSTER_RSAD", "ctl") == "own" else "ctl"


@dataclass(frozen=True)
class Cluster:
    """The door into the nodes: ``lab/cluster/node NAME CMD...``."""

    def run(self, node: str, argv: Sequence[str], *, user: str | None = None,
            timeout: float = 60, check: bool = True,
            input: str | None = None) -> subprocess.CompletedProcess[str]:
        prefix = ["runuser", "-u", user, "--"] if user else []
        done = subprocess.run([str(CLUSTER / "node"), node, *prefix, *argv], input=input,
                              capture_output=True, text=True, timeout=timeout, check=False)
        if check and done.returncode != 0:
            raise AssertionError(f"{node}: {argv} exited {done.returncode}: "
                                 f"{done.stderr.strip()[-600:]}")
        return done

    def out(self, node: str, argv: Sequence[str], *, user: str | None = None,
            timeout: float = 60) -> str:
        return self.run(node, argv, user=user, timeout=timeout).stdout


#: what of a RAMDISK an RSA node's pool still holds, one line each (nothing: none): any
#: entry but the pool's standby chunkservers (filesystem.moosefs_standby), and a standby
#: that a RAMDISK claimed or that holds chunks. $0: the pool.
POOL_LEFT = r"""for e in "$0"/* "$0"/.[!.]*; do
  [ -e "$e" ] || [ -L "$e" ] || continue
  case ${e##*/} in
    rsa-mfs-.standby-*)
      [ -L "$e/claim" ] && echo "$e: claimed by $(readlink "$e/claim")"
      n=$(find "$e/chunks" -type f -name 'chunk_*' | wc -l)
      [ "$n" = 0 ] || echo "$e: $n chunk files";;
    *) echo "$e";;
  esac
done"""


def ramdisk_listeners(c: Cluster, nodes: Sequence[str] = ("rsa1", "rsa2")) -> list[str]:
    """"ADDRESS:PORT" of every RAMDISK server listening on the RSA data network (10.231.*)
    of ``nodes`` now: masters and chunkservers, not the pools' standby chunkservers (their
    block of the port range: they hold nothing, and a create may move or start one at any
    time, so a later look would not find the same ones)."""
    _, first, last = standby_ports()
    return sorted({f"{a}:{p}" for n in nodes for a, p in (
        line.split()[3].rsplit(":", 1) for line in c.out(n, ["ss", "-Hltn"]).splitlines())
        if a.startswith("10.231.") and not first <= int(p) <= last})


def pool_left(c: Cluster, node: str, pool: str = "/var/lib/rsa-ram") -> str:
    """What of any RAMDISK ``node``'s pool still holds (POOL_LEFT); "" when nothing."""
    return c.out(node, ["sh", "-c", POOL_LEFT, pool])


def _ctl(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CTL), *args], capture_output=True, text=True,
                          timeout=timeout, check=False)


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    if os.environ.get("RSA_CLUSTER_LAB") != "1":
        pytest.skip("the cluster lab runs by make cluster-test (RSA_CLUSTER_LAB=1)")
    if os.geteuid() != 0:
        pytest.skip("the cluster lab runs as root (namespaces, mounts)")
    try:
        up = _ctl("up")
        assert up.returncode == 0, f"clusterctl up: {up.stdout}{up.stderr}"
        yield Cluster()
    finally:
        down = _ctl("down", timeout=120)
        clean = _ctl("check-clean", timeout=60)
        assert down.returncode == 0 and clean.returncode == 0, (
            f"clusterctl down: {down.stdout}{down.stderr}\n{clean.stdout}{clean.stderr}")
