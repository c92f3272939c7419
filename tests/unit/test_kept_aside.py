"""A stage-out never replaces a file of DATA_OUT changed after the job's RAMDISK was built
(issue 35 item 2): the file is kept, the job's copy goes beside it as
NAME.rsa-<job>[.c<cycle>], verify compares that copy, and a retry neither counts it
missing nor places it again over the newer file.

The rule on manifests (pure), then the engine end to end on this machine (LocalHost) as an
unprivileged user: the bucket placement (``scripts.ATOMIC``) and the striped one
(``STRIPE_PLACE``).
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from rsa_scheduler.runner import Identity
from rsa_scheduler.staging import StagingEngine, scripts
from rsa_scheduler.staging.aside import aside_view, aside_words, changed_since, kept_newer
from rsa_scheduler.staging.manifest import Entry
from tests.unit.test_staging_engine import SpyHost, make_engine

S = 1_000_000_000


def f(path: bytes, size: int, mtime: int, kind: str = "f") -> Entry:
    return Entry(path=path, kind=kind, size=size, mtime_ns=mtime * S)


# ---- the rule on manifests ----------------------------------------------------------------
def test_changed_since_is_after_the_second_as_find_newermt() -> None:
    assert changed_since(Entry(b"a", "f", mtime_ns=100 * S + 1), 100)
    assert not changed_since(f(b"a", 0, 100), 100)


def test_only_a_newer_different_file_keeps_the_copy_aside() -> None:
    src = [f(b"new", 5, 200), f(b"old", 5, 200), f(b"same", 5, 200), f(b"none", 1, 200),
           f(b"d", 0, 200, "d")]
    dst = [f(b"new", 9, 150),    # changed after since (100), differs: kept
           f(b"old", 9, 50),     # before since: replaced as always
           f(b"same", 5, 200),   # the job's own earlier placement: placed again
           f(b"d", 0, 300, "d")]
    assert kept_newer(src, dst, 100) == [b"new"]


def test_a_copy_kept_aside_stands_for_its_name() -> None:
    dst = [f(b"a", 9, 150), f(b"a.rsa-7", 5, 90), f(b"b", 5, 90), f(b"c.rsa-7", 1, 1, "d")]
    view, moved = aside_view(dst, {b"a", b"b", b"c"}, ".rsa-7")
    assert moved == {b"a": b"a.rsa-7"}
    assert sorted((e.path, e.size) for e in view) == [(b"a", 5), (b"b", 5),
                                                       (b"c.rsa-7", 1)]
    # a source name that itself ends in the suffix is its own, never a kept copy
    assert aside_view(dst, {b"a", b"a.rsa-7"}, ".rsa-7")[1] == {}


def test_the_suffix_carries_the_cycle_and_refuses_what_cannot_name_a_file() -> None:
    assert scripts.aside_suffix("12") == ".rsa-12"
    assert scripts.aside_suffix("12_3", 2) == ".rsa-12_3.c2"
    with pytest.raises(ValueError):
        scripts.aside_suffix("../x")


def test_the_user_reads_each_file_and_its_copy() -> None:
    line = aside_words({b"r/a": b"r/a.rsa-7"}, "/pfs/out")
    assert "1 file kept aside in /pfs/out" in line and "'r/a' as 'r/a.rsa-7'" in line


# ---- the engine, for real -----------------------------------------------------------------
pytestmark_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run as a user")


def _own(p: Path, user: Identity) -> None:
    os.lchown(p, user.uid, user.gid)


def _ramdisk(area: Path, user: Identity, files: dict[str, bytes], mtime: int) -> Path:
    ram = area / "ram"
    ram.mkdir(exist_ok=True)
    _own(ram, user)
    (ram / "sub").mkdir(exist_ok=True)
    _own(ram / "sub", user)
    for name, data in files.items():
        (ram / name).write_bytes(data)
        _own(ram / name, user)
        os.utime(ram / name, (mtime, mtime))
    return ram


@pytestmark_root
@pytest.mark.parametrize("stripe", [False, True])
def test_a_newer_pfs_file_is_kept_and_the_copy_goes_beside_it(
        area: Path, user: Identity, stripe: bool) -> None:
    big = os.urandom((20 << 20) if stripe else 3)
    built = int(time.time()) - 100
    ram = _ramdisk(area, user, {"sub/new": b"job", "sub/old": b"job", "sub/big": big,
                                "fresh": b"job"}, built + 10)
    out = area / "outs" / "out"
    (out / "sub").mkdir(parents=True)
    for p in (out, out / "sub"):
        _own(p, user)
    # someone else's, after the build: kept; an old file: replaced as always
    for name, data, when in (("sub/new", b"someone's", built + 50),
                             ("sub/big", b"someone's big", built + 50),
                             ("sub/old", b"last week's", built - 7 * 86400)):
        (out / name).write_bytes(data)
        _own(out / name, user)
        os.utime(out / name, (when, when))
    seen: list[list[str]] = []
    kw = {"stripe_bytes": 1 << 20, "stripe_min": 1 << 20, "big_bytes": 1 << 20} if stripe else {}
    eng = StagingEngine([SpyHost("rsa1", seen), SpyHost("rsa2", seen)], user, job_id="77",
                        **kw)  # type: ignore[arg-type]
    eng.stage_out(str(ram), str(out), since=built - 1)
    assert any(scripts.STRIPE_PLACE in argv for argv in seen) == stripe
    assert (out / "sub/new").read_bytes() == b"someone's"
    assert (out / "sub/new.rsa-77").read_bytes() == b"job"
    assert (out / "sub/big").read_bytes() == b"someone's big"
    assert (out / "sub/big.rsa-77").read_bytes() == big
    assert (out / "sub/old").read_bytes() == b"job"
    assert not (out / "sub/old.rsa-77").exists() and (out / "fresh").read_bytes() == b"job"
    v = eng.verify(str(ram), str(out))
    assert v.ok, v.summary()
    listed = v.details["aside"]
    assert isinstance(listed, list)
    assert sorted(bytes.fromhex(p) for p, _a in listed) == [b"sub/big", b"sub/new"]
    # a retry (resume) neither copies the kept files again nor places them over the newer
    (out / "sub/new").write_bytes(b"someone's, again")
    again = eng.stage_out(str(ram), str(out), since=built - 1)
    assert again.files == 0
    assert (out / "sub/new").read_bytes() == b"someone's, again"
    # a copy kept aside that a verify found differing is placed again, aside again
    (out / "sub/new.rsa-77").write_bytes(b"jox")
    assert not eng.verify(str(ram), str(out)).ok
    eng.stage_out(str(ram), str(out), since=built - 1, redo=[b"sub/new"])
    assert (out / "sub/new.rsa-77").read_bytes() == b"job"
    assert (out / "sub/new").read_bytes() == b"someone's, again"
    assert eng.verify(str(ram), str(out)).ok


@pytestmark_root
def test_the_jobs_own_placement_is_placed_again_after_a_failed_verify(
        area: Path, user: Identity) -> None:
    """A copy corrupted on the PFS with its size and mtime kept is the job's own (newer
    than the build, same size and mtime): replaced, never kept aside."""
    built = int(time.time()) - 100
    ram = _ramdisk(area, user, {"sub/x": b"abc"}, built + 10)
    out = area / "outs" / "out"
    eng = make_engine(user)
    eng.stage_out(str(ram), str(out), since=built - 1)
    (out / "sub/x").write_bytes(b"abd")
    os.utime(out / "sub/x", (built + 10, built + 10))
    assert not eng.verify(str(ram), str(out)).ok
    eng.stage_out(str(ram), str(out), since=built - 1, redo=[b"sub/x"])
    assert (out / "sub/x").read_bytes() == b"abc" and not (out / "sub/x.rsa-77").exists()
    assert "aside" not in eng.verify(str(ram), str(out)).details


def test_a_name_holding_the_jobs_version_stands_for_itself() -> None:
    """An older copy kept aside under the same name (a job id Slurm gave again) is not
    taken for a name that holds the source's own version."""
    src = {b"a": f(b"a", 5, 90)}
    view, moved = aside_view([f(b"a", 5, 90), f(b"a.rsa-7", 3, 10)], src, ".rsa-7")
    assert moved == {} and sorted(e.path for e in view) == [b"a", b"a.rsa-7"]


def test_always_aside_places_a_striped_file_beside_a_name_nobody_holds(
        tmp_path: Path) -> None:
    """``ALWAYS_ASIDE`` (a write-back's copy of a file someone else deleted on the PFS):
    the striped placement renames the copy to NAME.rsa-<job>, never to the name."""
    src, dst = tmp_path / "ram", tmp_path / "out"
    (src / "sub").mkdir(parents=True)
    (dst / "sub").mkdir(parents=True)
    (src / "sub" / "big").write_bytes(b"job's big file\n")
    os.utime(src / "sub" / "big", (1_600_000_000, 1_600_000_000))
    tmp = dst / "part-s0"
    tmp.write_bytes(b"job's big file\n")
    argv = scripts.stripe_place_argv(str(src), str(tmp), str(dst), 15, 1_600_000_000,
                                     since=0, suffix=".rsa-7", expect=scripts.ALWAYS_ASIDE)
    subprocess.run(argv, check=True, text=True, input=scripts.encode_list([b"sub/big"]))
    assert not (dst / "sub" / "big").exists()
    assert (dst / "sub" / "big.rsa-7").read_bytes() == b"job's big file\n"
