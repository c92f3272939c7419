"""What the MooseFS driver says to each release (issue 31): the versions a node's tools
report and the commands and ``mfscli`` parsers of 3.0 and 4.x, on output captured from the
real tools (3.0.117: this host's Debian 12; 4.x: Debian 13's, tests/mfs4)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rsa_scheduler.fs.base import FsError, FsRequest, MountSpec
from rsa_scheduler.fs.mfsversion import (
    LEGACY,
    ONE_COPY_CLASS,
    Dialect,
    Version,
    chunkservers_json,
    chunkservers_plain,
    node_version,
    parse_versions,
    same_release,
    version_facts,
)
from rsa_scheduler.fs.moosefs import MooseFsBackend, _dialect_of
from rsa_scheduler.fs.nodecheck import NodeReport
from rsa_scheduler.hosts import Host, LocalHost

pytestmark = pytest.mark.unit

DATA = Path(__file__).parent.parent / "data" / "moosefs"
V3 = (DATA / "versions-3.0.117.txt").read_text()
V4 = (DATA / "versions-4.57.5.txt").read_text()
CS3 = (DATA / "mfscli-SCS-scanned.txt").read_text()
V4_NUMBER = parse_versions(V4)["mfsmaster"]


def test_each_tool_of_a_node_says_its_version() -> None:
    three = parse_versions(V3)
    assert three == dict.fromkeys(("mfsmaster", "mfschunkserver", "mfsmount", "mfscli"),
                                  Version(3, 0, 117))
    four = parse_versions(V4)
    assert set(four) == set(three)
    assert V4_NUMBER is not None and V4_NUMBER.major == 4
    assert set(four.values()) == {V4_NUMBER}
    assert node_version(three) == Version(3, 0, 117)
    assert node_version(four) == V4_NUMBER


def test_a_node_without_tools_or_with_tools_of_two_releases_is_told_the_fix() -> None:
    missing = parse_versions("V:mfsmaster:\nV:mfschunkserver:\nV:mfsmount:\nV:mfscli:\n")
    assert missing == dict.fromkeys(("mfsmaster", "mfschunkserver", "mfsmount", "mfscli"))
    with pytest.raises(FsError, match=r"^no MooseFS tool answered with a version .*: "
                                      r"install moosefs-master"):
        node_version(missing)
    mixed = V3.replace("V:mfscli:version: 3.0.117", V4.splitlines()[-1])
    facts, lacks = version_facts(mixed)
    assert facts == {}
    assert lacks == [f"MooseFS tools of different releases (mfschunkserver 3.0.117, mfscli "
                     f"{V4_NUMBER}, mfsmaster 3.0.117, mfsmount 3.0.117): install one "
                     "release of moosefs-master, -chunkserver, -client and -cli"]
    assert version_facts(V4) == ({"MooseFS": str(V4_NUMBER)}, [])


def test_nodes_check_names_each_nodes_release() -> None:
    assert NodeReport("rsa1", (), facts={"MooseFS": "4.57.5"}).lines() == [
        "rsa1: ok (MooseFS 4.57.5)"]
    assert NodeReport("rsa2", ("command ss: install iproute2",),
                      facts={"MooseFS": "3.0.117"}).lines() == [
        "rsa2: MooseFS 3.0.117", "rsa2: lacks command ss: install iproute2"]


def test_a_ramdisk_is_built_only_over_nodes_of_one_release() -> None:
    same_release({"rsa1": Version(4, 57, 5), "rsa2": Version(4, 59, 2)})
    same_release({"rsa1": Version(3, 0, 117), "rsa2": Version(3, 0, 117)})
    with pytest.raises(FsError, match=r"different MooseFS releases \(rsa1 3\.0\.117, rsa2 "
                                      r"4\.57\.5\): rsad builds a RAMDISK only over"):
        same_release({"rsa1": Version(3, 0, 117), "rsa2": Version(4, 57, 5)})


def test_one_copy_and_no_trash_in_each_releases_words() -> None:
    assert LEGACY.one_copy("/m") == [["mfssetgoal", "-r", "1", "/m"],
                                     ["mfssettrashtime", "-r", "0", "/m"]]
    four = Dialect(Version(4, 57, 5)).one_copy("/m")
    assert four[0][:5] == ["mfscreatesclass", "-M", "/m", "-K", "*"]
    assert four[0][-1] == ONE_COPY_CLASS
    assert four[1:] == [["mfssetsclass", "-r", ONE_COPY_CLASS, "/m"],
                        ["mfssettrashretention", "-r", "0", "/m"]]
    assert not any(c[0] in ("mfssetgoal", "mfssettrashtime") for c in four)


def test_chunkservers_are_read_from_4x_json_and_plain_output() -> None:
    plain = {s: (DATA / f"mfscli4-SCS-{s}.txt").read_text()
                 for s in ("registered", "scanned")}
    as_json = {s: (DATA / f"mfscli4-SCS-{s}.json").read_text()
                for s in ("registered", "scanned")}
    four = Dialect(Version(4, 57, 5))
    assert four.chunkservers_argv("10.0.0.5", 20002)[-1] == "-j"
    assert "-j" not in LEGACY.chunkservers_argv("10.0.0.5", 20002)
    registered = chunkservers_json(as_json["registered"])
    scanned = chunkservers_json(as_json["scanned"])
    assert list(registered) == list(scanned) == [("10.213.40.1", 21003)]
    assert list(registered.values()) == [0]
    assert next(iter(scanned.values())) > 0
    assert four.chunkservers(as_json["scanned"]) == scanned
    # the plain form gained a column in 4.x: the same totals from it
    assert chunkservers_plain(plain["registered"]) == registered
    assert chunkservers_plain(plain["scanned"]) == scanned
    assert chunkservers_plain(CS3) == {("10.213.0.1", 22947): 2147483648}
    for garbage in ("", "not json", '{"dataset": 1}', '{"dataset": {"chunkservers": 3}}'):
        assert chunkservers_json(garbage) == {}


def test_the_release_a_ramdisk_was_built_with_is_recorded_and_read_back() -> None:
    spec = MountSpec("moosefs", "j", ("rsa1",), "/m", {"moosefs_version": "4.57.5"})
    assert _dialect_of(spec) == Dialect(Version(4, 57, 5))
    # built before the release was recorded: MooseFS 3.0, the only one rsad built then
    assert _dialect_of(MountSpec("moosefs", "j", ("rsa1",), "/m", {})) == LEGACY


def test_on_4x_the_master_nodes_own_address_alone_is_exported_with_admin() -> None:
    nodes: dict[str, Host] = {"rsa1": LocalHost("rsa1"), "rsa2": LocalHost("rsa2")}
    backend = MooseFsBackend(nodes, addresses={"rsa1": "10.0.0.5", "rsa2": "10.0.0.6"},
                             client_networks=("*",))
    req = FsRequest("job1-c1", "1", ("rsa1", "rsa2"), "ram",
                    {"rsa1": "/pool", "rsa2": "/pool"}, "/mnt")
    secret = "ab" * 16
    four = backend.layout(req, 22944, secret, admin=True).files("rsa1")["mfsexports.cfg"]
    assert four == (f"10.0.0.5 / rw,alldirs,admin,maproot=0:0,password={secret}\n"
                    f"* / rw,alldirs,maproot=0:0,password={secret}\n")
    three = backend.layout(req, 22944, secret).files("rsa1")["mfsexports.cfg"]
    assert "admin" not in three
