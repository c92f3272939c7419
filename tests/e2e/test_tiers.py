"""Two tiers in real lifecycles (issue 17, seed 000): the lab with ``RSA_LAB_TIERS=mixed``
(``make lab-test-tiers``) has rsa1-2 in the ram tier (tmpfs) and rsa3-4 in the ssd tier
(ext4 on a capped loop device each), rsad with the shipped prices (ram 4, ssd 1 per
node-hour) and bandwidths.

A ``#RSA_TIER=auto`` job lands on the cheaper ssd nodes, reads its input from that
RAMDISK and has its output staged out and verified; with the ssd tier drained the same job
gets ram nodes instead of waiting; ``#RSA_TIER=ram`` is served from the ram tier; with
one node free in each tier, or for a job larger than either tier, auto builds one
RAMDISK across nodes of both (``allocation.mix``).
The ssd tier's pools are ext4 images on loop devices capped at RSA_LAB_SSD_RATE each way
(lab/rsalab/ssd.py; the cluster lab's RSA_CLUSTER_TIERS=mixed, lab/cluster/ssdpool.py): a
node's pool is such a device, the blkio root holds its rule, its dirty limit is strict,
and random data written to the pool reaches the device, each as the ssd node itself reads
its kernel's files (over SSH, as rsad reaches it: the host lab's nodes share the host's
kernel files, the cluster lab's ssd nodes see them read-only).
Skipped in a lab whose RSA nodes are all in one tier.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from ClusterShell.NodeSet import NodeSet

from rsa_scheduler.remote import SshHost
from rsa_scheduler.runner import Identity
from tests.e2e.conftest import input_area, md5_of
from tests.integration.slurmkit import make_jobs, root
from tests.integration.test_rsad_staging import rsa_job, ssh, wait_state

pytestmark = pytest.mark.tiers

SSD, RAM = NodeSet("rsa[3-4]"), NodeSet("rsa[1-2]")


@pytest.fixture(autouse=True)
def _mixed_lab(lab: Mapping[str, str]) -> None:
    if lab.get("RSA_LAB_TIERS", "ram") != "mixed":
        pytest.skip("the lab's RSA nodes are all in the ram tier: RSA_LAB_TIERS=mixed "
                    "make lab-up (make lab-test-tiers)")


@pytest.fixture
def area(lab: Mapping[str, str]) -> Iterator[Path]:
    with input_area(lab, "tiers-e2e") as base:
        yield base



def job_script(lab: Mapping[str, str], area: Path, tier: str, extra: str = "") -> str:
    """Reads its input from the RAMDISK, says it is done with it (``rsa input-done``), then
    writes its output to the same RSA nodes: a real stage-in and stage-out."""
    rsa = f"{lab['RSA_LAB_VENV']}/bin/rsa"
    return f"""#!/bin/bash
#SBATCH -t 5
#RSA_DATA_IN={area}/in
#RSA_DATA_OUT={area}/out
#RSA_RESET=input-done
#RSA_TIER={tier}
#RSA_CAPACITY=1G
{extra}findmnt -n -o TARGET --target {area}/in > {area}/res/inmnt
(cd {area}/in && md5sum f*) > {area}/res/md5in
{rsa} input-done > {area}/res/input-done 2>&1
findmnt -n -o TARGET --target {area}/out > {area}/res/outmnt
for i in 1 2 3; do head -c 3M /dev/urandom > {area}/out/r$i; done
(cd {area}/out && md5sum r*) > {area}/res/md5out
"""


def run_through(lab: Mapping[str, str], area: Path, tier: str,
                extra: str = "") -> dict[str, object]:
    with make_jobs(lab) as jobs:
        job = jobs.submit(script=job_script(lab, area, tier, extra))
        wait_state(lab, job, "released", timeout=300)
        data = rsa_job(lab, job)
    assert data is not None
    assert (area / "res" / "inmnt").read_text().strip() == f"{area}/in"  # the RAMDISK
    assert (area / "res" / "md5in").read_text() == md5_of(area / "in", "f*")
    assert (area / "res" / "outmnt").read_text().strip() == f"{area}/out"
    assert (area / "res" / "md5out").read_text() == md5_of(area / "out", "r*")  # on the PFS
    reached = [e.get("to") for e in data["events"] if e["name"] == "rsa.transition"]
    assert "mounted-input" in reached and "output-verified" in reached, reached
    return data


def nodes_of(data: Mapping[str, object]) -> NodeSet:
    """The RSA nodes the job's one RAMDISK was built on (its build-fs outcome's ``nodes``)."""
    events = data["events"]
    assert isinstance(events, list)
    builds = [e for e in events if e["name"] == "action.outcome"
              and "/build-fs/" in str(e.get("action")) and e.get("result") == "ok"]
    assert len(builds) == 1, builds
    found: list[str] = []

    def walk(value: object) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if key == "nodes" and isinstance(item, list):
                    found.extend(str(n) for n in item)
                else:
                    walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
    walk(builds[0])
    assert found, builds[0]
    return NodeSet.fromlist(found)


def test_tier_auto_puts_the_job_on_the_cheaper_ssd_nodes(
        lab: Mapping[str, str], area: Path) -> None:
    data = run_through(lab, area, "auto")
    assert nodes_of(data) in SSD, data
    text = json.dumps(data["events"])
    assert "tier auto chose ssd" in text and "costs more" in text, text


def test_tier_auto_takes_ram_nodes_when_the_ssd_tier_is_drained(
        lab: Mapping[str, str], area: Path) -> None:
    rsa = f"{lab['RSA_LAB_VENV']}/bin/rsa"
    for node in SSD:
        root(lab, rsa, "drain", node, "--reason", "tiers e2e")
    try:
        data = run_through(lab, area, "auto")
    finally:
        for node in SSD:
            root(lab, rsa, "resume", node)
    assert nodes_of(data) in RAM, data
    assert "tier auto chose ram" in json.dumps(data["events"])


def test_a_ram_job_is_served_from_the_ram_tier(lab: Mapping[str, str], area: Path) -> None:
    data = run_through(lab, area, "ram")
    assert nodes_of(data) in RAM, data


def test_with_one_node_free_in_each_tier_auto_builds_one_ramdisk_across_both(
        lab: Mapping[str, str], area: Path) -> None:
    rsa = f"{lab['RSA_LAB_VENV']}/bin/rsa"
    for node in ("rsa2", "rsa4"):
        root(lab, rsa, "drain", node, "--reason", "tiers e2e: mix")
    try:
        data = run_through(lab, area, "auto", "#RSA_NODES=2\n")
    finally:
        for node in ("rsa2", "rsa4"):
            root(lab, rsa, "resume", node)
    assert nodes_of(data) == NodeSet("rsa[1,3]"), data
    assert "tier auto chose a mix of ssd 1 node + ram 1 node" in json.dumps(data["events"])


def test_a_job_no_single_tier_can_hold_gets_nodes_of_both(
        lab: Mapping[str, str], area: Path) -> None:
    data = run_through(lab, area, "auto", "#RSA_NODES=3\n")
    assert nodes_of(data) == NodeSet("rsa[1,3-4]"), data
    assert "tier auto chose a mix of ssd 2 nodes + ram 1 node" in json.dumps(data["events"])


# --- the ssd tier's pools: loop devices with a bandwidth cap (lab/rsalab/ssd.py) ----------

MIB = 1 << 20
BLKIO = Path("/sys/fs/cgroup/blkio")
WRITTEN = 80 * MIB  # random: data from /dev/zero barely reaches a disk


@pytest.fixture
def ssd_node(lab: Mapping[str, str]) -> Iterator[SshHost]:
    """The first ssd node, over SSH."""
    node = lab["RSA_LAB_RSA_SSD_NODES"].split(",")[0]
    host = ssh(lab, int(node.removeprefix("rsa")))
    try:
        yield host
    finally:
        host.close()


def read(host: SshHost, path: Path | str) -> str:
    """A kernel file as the node reads it."""
    return host.run(["cat", str(path)], timeout=30).stdout


def ssd_pool_device(lab: Mapping[str, str], host: SshHost) -> tuple[str, str]:
    """The ssd node's pool as that node sees it: (/dev/loopN, MAJ:MIN); skips when the
    lab's ssd pools are no loop devices (RSA_LAB_SSD_POOL, set by lab-up)."""
    pool = lab.get("RSA_LAB_SSD_POOL", "")
    if pool != "loop":
        why = lab.get("RSA_LAB_SSD_THROTTLE", "an older lab: no RSA_LAB_SSD_POOL")
        pytest.skip(f"the lab's ssd pools are not loop devices ({pool or '?'}): {why}")
    found = host.run(["findmnt", "-n", "-o", "SOURCE,FSTYPE", lab["RSA_LAB_POOL_SSD"]],
                     timeout=30).stdout.split()
    assert len(found) == 2 and re.fullmatch(r"/dev/loop\d+", found[0]), found
    assert found[1] == "ext4", found
    majmin = read(host, Path("/sys/block", Path(found[0]).name, "dev")).strip()
    return found[0], majmin


def throttled(lab: Mapping[str, str]) -> int:
    """The lab's cap in bytes/s; skips, saying why, when lab-up could not set it."""
    state = lab.get("RSA_LAB_SSD_THROTTLE", "off: an older lab (no RSA_LAB_SSD_THROTTLE)")
    if state != "on":
        pytest.skip(f"the lab's ssd tier is not throttled: {state.removeprefix('off: ')}")
    return int(lab["RSA_LAB_SSD_RATE"])


def rules(host: SshHost, name: str) -> dict[str, int]:
    """{MAJ:MIN: bytes/s} of the blkio root's read or write throttle rules."""
    text = read(host, BLKIO / f"blkio.throttle.{name}_bps_device")
    return {dev: int(rate) for dev, rate in (line.split() for line in text.splitlines())}


def written_to(host: SshHost, majmin: str) -> int:
    """Bytes written to the device so far, all blkio cgroups (background writeback is
    charged to the root, an fsync to its caller's cgroup)."""
    text = read(host, BLKIO / "blkio.throttle.io_service_bytes_recursive")
    for line in text.splitlines():
        fields = line.split()
        if fields[:2] == [majmin, "Write"]:
            return int(fields[2])
    return 0


def test_an_ssd_nodes_pool_is_an_ext4_loop_device(lab: Mapping[str, str],
                                                  ssd_node: SshHost) -> None:
    device, majmin = ssd_pool_device(lab, ssd_node)
    assert majmin.startswith("7:"), (device, majmin)  # the loop driver's major


def test_the_ssd_pools_device_is_capped_and_random_writes_reach_it(
        lab: Mapping[str, str], ssd_node: SshHost) -> None:
    host = ssd_node
    _, majmin = ssd_pool_device(lab, host)
    rate = throttled(lab)
    assert rules(host, "read").get(majmin) == rate
    assert rules(host, "write").get(majmin) == rate
    bdi = Path("/sys/class/bdi", majmin)
    assert read(host, bdi / "strict_limit").strip() == "1"
    # The kernel keeps max_bytes as a share of the dirty threshold, which follows free
    # memory: 16 MiB written reads back a few percent off when memory has changed since.
    assert 0 < int(read(host, bdi / "max_bytes")) <= 2 * 16 * MIB
    assert int(read(host, bdi / "max_ratio")) < 100
    user = lab["RSA_LAB_USER"]
    work = f"{lab['RSA_LAB_POOL_SSD']}/e2e-throttle-{os.getpid()}"
    before = written_to(host, majmin)
    try:
        host.run(["install", "-d", "-o", user, "-m", "0700", work], timeout=30)
        host.run(["sh", "-c", f"head -c {WRITTEN} /dev/urandom > {work}/random && "
                              f"sync {work}/random"],
                 as_user=Identity.of(user), timeout=600)
        deadline = time.monotonic() + 120  # the journal and metadata follow on their own
        while written_to(host, majmin) - before < WRITTEN and time.monotonic() < deadline:
            time.sleep(0.5)
        grew = written_to(host, majmin) - before
        assert grew >= WRITTEN, (f"{majmin}: {grew} bytes written to the device for "
                                 f"{WRITTEN} bytes of random data in the pool")
    finally:
        host.run(["rm", "-rf", work], timeout=120, check=False)
