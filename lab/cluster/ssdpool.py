"""The cluster lab's ssd tier (issue 30): ``RSA_CLUSTER_TIERS=mixed`` puts the upper half of
the RSA nodes (rsa3-4 of four, rsa2 of two) in rsad's ssd tier, each on a pool of its own,
as the host lab's ``RSA_LAB_TIERS=mixed`` does (lab/rsalab/ssd.py; docs/lab.md).

Owns which tiers a cluster runs, its ssd nodes, their pools' images, loop devices and caps
(made, capped, released and checked by lab/rsalab/ssd.py's functions, on this cluster's own
paths: :func:`paths`), each pool's mount in its node, the ssd group of the cluster's
rsa.yaml, the facts the tests read, and what ``down`` and ``check-clean`` release and
report. rsacluster.py calls it at a few points: ``up`` (:func:`check_asked`,
:func:`prepare` before the nodes boot, :func:`add_binds` for each node,
:func:`mount_pools` once they run), ``rsa_yaml`` (:func:`ram_names`, :func:`ssd_group`),
``down`` (:func:`release`) and ``leftovers``.

Each ssd node's pool is an ext4 image (sparse, :data:`SIZE`) in ``WORK/ssd[-NAME]`` on the
host's disk, attached to a loop device of its own by ``up`` and mounted at :data:`POOL_DIR`
inside that node's own mount namespace (the device reaches the node through its ``/dev``);
the device is capped at ``RSA_CLUSTER_SSD_RATE`` bytes/s each way in the host's blkio root
(the kernel every node shares, as the host lab's nodes do), with its own dirty limit. The
node sees that blkio hierarchy read-only at ``/sys/fs/cgroup/blkio``, as an RSA node of its
own would see its disk's. Where the host cannot cap it, ``up`` says why in one line and the
facts (``RSA_LAB_SSD_THROTTLE``) say it to the tests; without a loop device the pool is a
directory of the host's disk bound into the node. A loop device is the kernel's: another
cluster or a sandbox lab may have its own beside; only devices attached to this cluster's
own images (the very files) are touched or reported (ssd.is_ours).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import rsacluster as rc

LAB = Path(__file__).resolve().parent.parent  # <repo>/lab: the host lab's package
if str(LAB) not in sys.path:
    sys.path.append(str(LAB))
from rsalab import ssd  # noqa: E402
from rsalab.common import parse_bytes  # noqa: E402

TIERS = ("ram", "mixed")
POOL_DIR = "/var/lib/rsa-ssd"  # the ssd tier's pool_dir on its nodes (rsa.yaml)
SIZE = "4G"  # each ssd pool's image (sparse), and its capacity in rsa.yaml (the host lab's)
RATE = "50M"  # RSA_CLUSTER_SSD_RATE's default: the host lab's RSA_LAB_SSD_RATE
BLKIO = "/sys/fs/cgroup/blkio"  # the host's blkio hierarchy: seen read-only in ssd nodes


def wanted() -> str:
    """The tiers the environment asks for: ``RSA_CLUSTER_TIERS``, ram (the default) or
    mixed."""
    tiers = os.environ.get("RSA_CLUSTER_TIERS", "ram") or "ram"
    if tiers not in TIERS:
        raise rc.ClusterError(f"RSA_CLUSTER_TIERS={tiers!r}: ram or mixed")
    return tiers


def split(names: tuple[str, ...], tiers: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The RSA nodes in the ram tier and in the ssd tier: all in ram, or (mixed) the upper
    half in ssd (of an odd number, the larger half in ram)."""
    if tiers != "mixed":
        return names, ()
    if len(names) < 2:
        raise rc.ClusterError("RSA_CLUSTER_TIERS=mixed needs 2 RSA nodes or more "
                              "(RSA_CLUSTER_NODES)")
    half = (len(names) + 1) // 2
    return names[:half], names[half:]


def nodeset(names: tuple[str, ...]) -> str:
    """``rsa[1-2]`` of consecutive rsaN names (``rsa3`` of one)."""
    if len(names) == 1:
        return names[0]
    nums = [int(n.removeprefix("rsa")) for n in names]
    if nums != list(range(nums[0], nums[0] + len(nums))):
        raise ValueError(f"not consecutive: {names}")
    return f"rsa[{nums[0]}-{nums[-1]}]"


@dataclass
class Record:
    """What ``up`` made, for every later command on the cluster (STATE/tiers.json)."""

    tiers: str = "ram"
    ssd_nodes: list[str] = field(default_factory=list)
    size: str = SIZE
    rate: int = 0

    @property
    def numbers(self) -> list[int]:
        return [int(n.removeprefix("rsa")) for n in self.ssd_nodes]


def record_file() -> Path:
    return rc.STATE / "tiers.json"


def paths() -> ssd.Paths:
    """This cluster's images and device records; the host's kernel files (ssd.HOST's)."""
    return ssd.Paths(images=rc.WORK / f"ssd{rc.SUFFIX}", records=rc.STATE / "ssd")


def record() -> Record:
    """The cluster's tiers: as ``up`` recorded them, else as the environment asks."""
    try:
        data = json.loads(record_file().read_text())
        return Record(str(data["tiers"]), [str(n) for n in data["ssd_nodes"]],
                      str(data["size"]), int(data["rate"]))
    except (OSError, ValueError, KeyError, TypeError):
        if rc.STATE_FILE.exists():  # up, before there were tiers to record
            return Record("ram", [], SIZE, 0)
    tiers = wanted()
    return Record(tiers, list(split(rc.RSA_NODES, tiers)[1]), SIZE, _rate())


def _rate() -> int:
    text = os.environ.get("RSA_CLUSTER_SSD_RATE", RATE) or RATE
    try:
        return parse_bytes(text, "RSA_CLUSTER_SSD_RATE")
    except ValueError as e:
        raise rc.ClusterError(str(e)) from e


# ---- up ----

def check_asked() -> None:
    """An ``up`` that asks for other tiers than the cluster that is up runs is refused
    (as another shape is: rsacluster.up)."""
    if "RSA_CLUSTER_TIERS" not in os.environ or not rc.STATE_FILE.exists():
        return
    running = record().tiers
    if wanted() != running:
        raise rc.ClusterError(f"a cluster lab with RSA_CLUSTER_TIERS={running} is up: "
                              "lab/cluster/clusterctl down first to bring it up with "
                              f"RSA_CLUSTER_TIERS={wanted()}")


def prepare() -> None:
    """Before the nodes boot: the tiers recorded; with mixed, each ssd node's image,
    device and cap (ssd.prepare: one line says the pools and their cap, or why not)."""
    rec = record()
    rc.STATE.mkdir(parents=True, exist_ok=True)
    tmp = record_file().with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(rec)) + "\n")
    tmp.replace(record_file())
    if rec.ssd_nodes:
        ssd.prepare(_Shape(rec), paths(), rate_setting="RSA_CLUSTER_SSD_RATE")


@dataclass(frozen=True)
class _Shape:
    """A Record as ssd.Shape (ssd_nodes as numbers)."""

    rec: Record

    @property
    def ssd_nodes(self) -> list[int]:
        return self.rec.numbers

    @property
    def n_rsa(self) -> int:
        return max(self.rec.numbers, default=0)

    @property
    def ssd_size(self) -> str:
        return self.rec.size

    @property
    def ssd_rate(self) -> int:
        return self.rec.rate


def add_binds(name: str, binds: list[Path], ro_binds: list[Path]) -> None:
    """What an ssd node gets bound in at boot: the host's blkio hierarchy read-only (its
    disk's caps, as its kernel has them), and its pool's directory when no loop device
    could be had."""
    rec = record()
    if name not in rec.ssd_nodes:
        return
    ro_binds.append(Path(BLKIO))
    if ssd.status(paths())["pool"] == "dir":
        binds.append(paths().images / name)


def mount_pools() -> None:
    """Each ssd node mounts its pool at POOL_DIR in its own mount namespace (its device,
    ext4; or its directory)."""
    for name in record().ssd_nodes:
        step = ssd.mount_setup(name, Path(POOL_DIR), paths())
        rc.sh(name, f"mkdir -p {POOL_DIR}\n{step}")


# ---- rsa.yaml and the facts ----

def ram_names() -> str:
    """The ram tier's names in rsa.yaml (every RSA node, or the lower half)."""
    return nodeset(split(rc.RSA_NODES, record().tiers)[0])


def ssd_group(data_suffix: str) -> str:
    """rsa.yaml's pool.nodes group of the ssd tier ("" with one tier): the ssd nodes on
    their pools, their servers on the RSA data network as the ram tier's."""
    rec = record()
    if not rec.ssd_nodes:
        return ""
    return f"""\
    - names: "{nodeset(tuple(rec.ssd_nodes))}"
      tier: ssd
      capacity: {rec.size}
      # an ext4 image on a capped loop device of each node's own (lab/cluster/ssdpool.py)
      pool_dir: {POOL_DIR}
      data_address: "{{name}}{data_suffix}"
"""


def facts() -> dict[str, str]:
    """The host lab's ssd keys (lab/rsalab/facts.py), with this cluster's values."""
    rec = record()
    if rec.ssd_nodes:
        status = ssd.status(paths())
    else:
        status = {"pool": "none", "rate": "0",
                  "throttle": "off: the cluster has no ssd tier (RSA_CLUSTER_TIERS=ram)"}
    return {
        "RSA_LAB_TIERS": rec.tiers,
        "RSA_LAB_RSA_SSD_NODES": ",".join(rec.ssd_nodes),
        "RSA_LAB_POOL_SSD": POOL_DIR,
        "RSA_LAB_SSD_SIZE": rec.size,
        "RSA_LAB_SSD_POOL": status["pool"],
        "RSA_LAB_SSD_RATE": status["rate"],
        "RSA_LAB_SSD_THROTTLE": status["throttle"],
    }


# ---- down and check-clean ----

def release() -> None:
    """After the nodes are gone (their mounts with them): the caps reset, the devices
    detached (ssd.release: only those on this cluster's images), the images removed."""
    where = paths()
    ssd.release(where)
    shutil.rmtree(where.images, ignore_errors=True)
    record_file().unlink(missing_ok=True)


def leftovers() -> list[str]:
    """This cluster's device records, loop devices on its images, caps still set on them
    (ssd.leftovers), its images, its tiers record."""
    where = paths()
    left = ssd.leftovers(where)
    if where.images.exists():
        left.append(f"the ssd pools' images {where.images}")
    if record_file().exists():
        left.append(f"the tiers record {record_file()}")
    return left
