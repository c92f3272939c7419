"""What a staging worker's result carries into rsad's own process is bounded.

A staging worker runs under ``staging.engine_memory``; rsad's process, on the Slurm
controller's host, under nothing. Before, a verify's differences crossed the pipe whole:
a job whose output of millions of files all differed at DATA_OUT (or were missing
there) had every name, in hex, in one JSON line rsad read and parsed into its own
memory. What must hold: a result names at most ``stagingworker.NAMED`` of each list (a
verify's differences, the sockets and devices skipped, the copies kept aside), with
the count of all of them; every line the user reads says the true count (never fewer
than there are); a retry after a verify whose list was cut copies the whole output
again. A real worker verifies a real tree as ``nobody`` (needs root).
"""

from __future__ import annotations

import json
import os
import tracemalloc
from dataclasses import replace
from pathlib import Path

from rsa_scheduler.daemon.data import REDO_LIMIT, _stats, differed_fact, redo_of
from rsa_scheduler.daemon.engines import EnginePool, WorkerEngine
from rsa_scheduler.daemon.stagingworker import (
    NAMED,
    NAMED_BYTES,
    stats_from_json,
    stats_to_json,
    verification_from_json,
    verification_to_json,
)
from rsa_scheduler.hosts import CancelToken
from rsa_scheduler.runner import Identity
from rsa_scheduler.staging.manifest import Difference, Entry, Verification, compare
from rsa_scheduler.staging.report import Stats
from tests.unit.conftest import root_only
from tests.unit.test_engine_worker import engine
from tests.unit.test_verify_repair import Engine, Job, Path_

MANY = NAMED + 1500


def cut_verify() -> Verification:
    """A failed verify of MANY objects, every one differing, as rsad receives it."""
    v = Verification(False, "content", MANY, 0,
                     tuple(Difference(b"out/f%05d" % i, "missing") for i in range(MANY)),
                     skipped=tuple(b"s%05d" % i for i in range(MANY)))
    return verification_from_json(json.loads(json.dumps(verification_to_json(v))))


def test_a_result_names_at_most_NAMED_of_each_list_and_counts_them_all() -> None:
    got = cut_verify()
    assert len(got.differences) == NAMED and got.count == MANY and not got.listed
    assert got.differences[0] == Difference(b"out/f00000", "missing")
    assert len(got.skipped) == NAMED and got.skipped_total == MANY
    assert got.summary("/pfs/u/out").startswith(
        f"verify failed: {MANY} of {MANY} objects differ in /pfs/u/out: "
        f"'out/f00000': missing; ")
    assert f"; and {MANY - 5} more — " in got.summary("/pfs/u/out")
    # a list within the bound crosses as it is: the retry copies exactly those again
    few = Verification(False, "content", 9, 0, (Difference(b"a", "missing"),))
    back = verification_from_json(verification_to_json(few))
    assert back == few and back.listed
    # copies kept aside, and a copy's special files
    aside = [[b"f%d" % i, b"f%d.rsa-7" % i] for i in range(MANY)]
    ok = Verification(True, "content", MANY, 0,
                      details={"aside": [[p.hex(), a.hex()] for p, a in aside]})
    sent = verification_to_json(ok)
    assert len(sent["details"]["aside"]) == NAMED
    assert sent["details"]["aside_count"] == MANY
    stats = Stats("stage-out", 3, 30, 1, 0.1, 1, 0,
                  tuple(f"s{i}" for i in range(MANY)), {})
    back_stats = stats_from_json(json.loads(json.dumps(stats_to_json(stats))))
    assert len(back_stats.skipped) == NAMED and back_stats.skipped_total == MANY
    assert _stats(back_stats)["summary"].startswith(
        f"{MANY} special files (sockets, devices) on the RAMDISK not staged")
    assert _stats(back_stats)["skipped"]["count"] == MANY


def test_long_names_are_named_up_to_NAMED_BYTES_and_counted_all() -> None:
    """The worst names a job can make (4,095 bytes, symlinks whose 4,095-byte targets
    differ, every byte unprintable): a thousand of them were ~66 MB of JSON in one line
    rsad read. Fewer than NAMED are named then, the count is all of them, and the
    retry copies everything again (the list is not whole)."""
    n = NAMED
    ram = [Entry(b"%04d" % i + b"\xff" * 4091, "l", target=b"\x01" * 4095)
           for i in range(n)]
    out = [replace(e, target=b"\x02" * 4095) for e in ram]
    sockets = [Entry(b"s%04d" % i + b"\xff" * 4090, "s") for i in range(n)]
    v = compare(ram + sockets, out, level="content")
    assert len(v.differences) == n and len(v.skipped) == n
    sent = verification_to_json(v)
    assert len(json.dumps(sent)) < 2 * NAMED_BYTES + 200_000
    got = verification_from_json(json.loads(json.dumps(sent)))
    assert 0 < len(got.differences) < n and got.count == n and not got.listed
    assert got.differences[0] == v.differences[0]
    assert 0 < len(got.skipped) < n and got.skipped_total == n
    assert got.summary().startswith(f"verify failed: {n} of {n} objects differ in ")
    assert differed_fact("7/1/verify/6", "rsync", got)["all"]  # fewer than REDO_LIMIT


def test_a_cut_list_is_told_whole_and_its_retry_copies_everything_again() -> None:
    """The data path with what crossed: the user's line counts every difference, the
    durable fact says all, and the retry copies the whole output again, no resume."""
    assert NAMED >= REDO_LIMIT  # a list the retry could use always crosses whole
    got = cut_verify()
    assert len(got.differences) == NAMED  # what rsad holds: the first NAMED
    fact = differed_fact("7/1/verify/6", "rsync", got)
    assert fact["all"] and fact["count"] == MANY and fact["paths"] == []
    assert redo_of({"verify_differed": fact}, "7/1/stage-out/8") == ([], False)
    eng = Engine([got])
    dp, job = Path_(eng), Job()
    _, why = job.run(dp, "7/1/verify/6")
    assert f"verify failed: {MANY} of {MANY} objects differ" in why
    assert "copies the whole output again" in why
    _, said = job.run(dp, "7/1/stage-out/8")
    assert eng.outs[-1] == {"resume": False, "redo": [], "method": "rsync"}
    assert said.startswith(f"the last verify found {MANY} objects ('out/f00000', ")
    assert f" and {MANY - 5} more) differing in /pfs/u/out: the whole output was copied " \
           "again" in said


def test_a_verify_that_passed_counts_every_copy_kept_aside() -> None:
    aside = [[b"f%d" % i, b"f%d.rsa-7" % i] for i in range(MANY)]
    ok = Verification(True, "content", MANY, 0,
                      details={"aside": [[p.hex(), a.hex()] for p, a in aside]})
    got = verification_from_json(json.loads(json.dumps(verification_to_json(ok))))
    assert len(got.details["aside"]) == NAMED  # type: ignore[arg-type]
    out, said = Job().run(Path_(Engine([got])), "7/1/verify/6")
    assert out is not None and out["verified"]["aside_count"] == MANY
    assert out["verified"]["aside"][:2] == ["f0.rsa-7", "f1.rsa-7"]
    assert f"{MANY} files kept aside in /pfs/u/out" in said
    assert "'f0' as 'f0.rsa-7'; 'f1' as 'f1.rsa-7'" in said
    assert f"; and {MANY - 5} more" in said


@root_only
def test_a_real_verify_of_many_differing_files_names_NAMED_of_them_to_rsad(
        area: Path, user: Identity, pool: EnginePool) -> None:
    """A real worker verifies a RAMDISK of 4 x NAMED files (long names) against a
    DATA_OUT that holds none of them: rsad's side reads NAMED names, and every count;
    what rsad's own process allocates for the answer stays that of NAMED names."""
    many = 4 * NAMED
    ram = area / "ram"
    eng = engine(user)
    eng.prepare_root(str(ram))
    stem = "d" * 200
    for i in range(many):
        (ram / f"{stem}{i:05d}").touch()
        os.chown(ram / f"{stem}{i:05d}", user.uid, user.gid)
    out = area / "outs" / "out"
    out.mkdir()
    os.chown(out, user.uid, user.gid)
    twin = WorkerEngine.of(pool, eng)
    assert isinstance(twin, WorkerEngine)
    # the result as rsad's process reads it off the pipe
    raw = pool.run(twin._request("verify", ramdisk=str(ram), dst=str(out), method="rsync"),
                   cancel=CancelToken())
    line = json.dumps(raw)
    assert len(raw["differences"]) == NAMED and raw["differing"] == many
    named = NAMED * (2 * len(stem) + 64)  # NAMED names in hex, and their words
    assert len(line) < named + 4096  # measured 0.43 MB; whole: 1.7 MB
    tracemalloc.start()
    try:
        got = twin.verify(str(ram), str(out))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 * named, peak  # measured 1.0 MB; whole: 4.1 MB
    assert not got.ok and got.count == many and got.checked == many
    assert len(got.differences) == NAMED
    assert got.summary(str(out)).startswith(f"verify failed: {many} of {many} objects "
                                            f"differ in {out}: '{stem}")
    assert differed_fact("7/1/verify/6", "rsync", got)["all"]
