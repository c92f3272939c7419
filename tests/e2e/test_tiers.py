"""Two tiers in real lifecycles (issue 17, seed 000): the lab with ``RSA_LAB_TIERS=mixed``
(``make lab-test-tiers``) has rsa1-2 in the ram tier (tmpfs) and rsa3-4 in the ssd tier
(a directory on the host's disk), rsad with the shipped prices (ram 4, ssd 1 per
node-hour) and bandwidths.

A ``#RSA_TIER=auto`` job lands on the cheaper ssd nodes, reads its input from that
RAMDISK and has its output staged out and verified; with the ssd tier drained the same job
gets ram nodes instead of waiting; ``#RSA_TIER=ram`` is served from the ram tier; with
one node free in each tier, or for a job larger than either tier, auto builds one
RAMDISK across nodes of both (``allocation.mix``).
Skipped in a lab whose RSA nodes are all in one tier.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from ClusterShell.NodeSet import NodeSet

from tests.e2e.conftest import input_area, md5_of
from tests.integration.slurmkit import make_jobs, root
from tests.integration.test_rsad_staging import rsa_job, wait_state

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
