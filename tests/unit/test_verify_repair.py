"""A mismatch a verify finds is repaired by the retry (issue 37, item 1).

A corrupted copy at DATA_OUT with its size and mtime kept passes the quick check of a
resumed stage-out: the retry after a failed verify copies exactly what differed again,
whatever the quick check says. What differed is recorded durably (an
``action.milestone`` of the verify, a fact of the job) before the verify fails, so an
rsad restart between the verify and the retry keeps it; the next verify that passes
clears it. The copy itself runs for real on this machine (as ``nobody``); the data
path's logic here runs with a stand-in engine; the lab test is
tests/e2e/test_verify_repair.py."""

from __future__ import annotations

import contextlib
import os
import socket
import stat as st
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from rsa_scheduler.config import load_config_text
from rsa_scheduler.core.events import Event
from rsa_scheduler.core.policy import StageOut
from rsa_scheduler.daemon.data import (
    REDO_LIMIT,
    DataPath,
    _stats,
    differed_fact,
    redo_expect,
    redo_of,
    verified_words,
)
from rsa_scheduler.daemon.executors import ActionContext
from rsa_scheduler.daemon.memory import Memory
from rsa_scheduler.errors import RsaError
from rsa_scheduler.fs.base import MountSpec
from rsa_scheduler.hosts import CancelToken
from rsa_scheduler.runner import Identity
from rsa_scheduler.staging.manifest import Difference, Entry, Verification, compare
from rsa_scheduler.staging.plan import pending
from rsa_scheduler.staging.report import Stats
from tests.unit.corekit import make_action
from tests.unit.test_staging_engine import make_engine, staged, tree_state

OUT = PurePosixPath("/pfs/u/out")
SPEC = MountSpec("tmpfs", "job7-c1", ("rsa1",), "/run/rsa/mnt/job7-c1", {})
CFG = load_config_text("pool:\n  nodes:\n    - names: rsa1\n      capacity: 2G\n")


def f(path: bytes, size: int = 10, mtime_s: int = 100, **kw: Any) -> Entry:
    return Entry(path, "f", size=size, mode=0o644, mtime_ns=mtime_s * 10**9, **kw)


# ---- the plan: redo beats the quick check -----------------------------------------------

def test_a_path_to_redo_is_copied_whatever_the_quick_check_says() -> None:
    src = [f(b"a"), f(b"b"), f(b"c")]
    assert pending(src, src) == ([], 3)  # same size and mtime: skipped
    todo, done = pending(src, src, redo={b"b"})
    assert [e.path for e in todo] == [b"b"] and done == 2


def test_a_hard_link_group_with_a_path_to_redo_is_redone_whole() -> None:
    src = [f(b"x", nlink=2, inode=(1, 5)), f(b"y", nlink=2, inode=(1, 5)), f(b"z")]
    dst = [f(b"x", nlink=2, inode=(9, 1)), f(b"y", nlink=2, inode=(9, 1)), f(b"z")]
    assert pending(src, dst) == ([], 3)
    todo, done = pending(src, dst, redo={b"y"})
    assert sorted(e.path for e in todo) == [b"x", b"y"] and done == 1


# ---- the engine, for real: a corrupted copy is repaired --------------------------------

def corrupt(path: Path) -> None:
    """One byte changed, size and mtime kept (silent corruption)."""
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run as a user")
def test_a_stage_out_told_what_differed_repairs_a_corrupted_copy(
        area: Path, user: Identity) -> None:
    eng = staged(area, user)
    out = area / "outs" / "out"
    eng.stage_out(str(area / "ram"), str(out))
    corrupt(out / "big")  # hard-linked to "sub dir/big-link": the group is one inode
    corrupt(out / "sub dir" / "f020")
    v = eng.verify(str(area / "ram"), str(out))
    assert not v.ok and v.listed
    differed = sorted(d.path for d in v.differences)
    assert b"sub dir/f020" in differed and b"big" in differed
    # what a retry did before: the quick check keeps the corrupted copies
    again = eng.stage_out(str(area / "ram"), str(out))
    assert again.files == 0
    assert not eng.verify(str(area / "ram"), str(out)).ok
    fixed = eng.stage_out(str(area / "ram"), str(out), redo=differed)
    assert fixed.files == 3  # f020, and both names of big (one group)
    assert eng.verify(str(area / "ram"), str(out)).ok
    assert tree_state(out) == tree_state(area / "src")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run as a user")
def test_a_copy_whose_ramdisk_mtime_moved_after_it_is_replaced_in_place_not_kept_aside(
        area: Path, user: Identity) -> None:
    """The RAMDISK's filesystem reported a file's mtime a second late (MooseFS: the
    final lab phase of 2026-11-28, job 546): the copy holds the job's bytes under the
    earlier mtime, the verify finds the mtime alone differing. The retry's placement
    took that copy, newer than the build, for someone else's file: kept it and put the
    RAMDISK's beside it as NAME.rsa-<job>, telling the user of a change nobody made. A
    mtime-only difference whose content hashed equal is replaced in place now."""
    import time

    eng = staged(area, user)
    ram, out = area / "ram", area / "outs" / "out"
    name = b"sub dir/f020"
    now = int(time.time())
    os.utime(ram / "sub dir" / "f020", (now - 10, now - 10))  # written after the build
    since = now - 60  # the RAMDISK's build
    eng.stage_out(str(ram), str(out), since=since)
    os.utime(ram / "sub dir" / "f020", (now - 9, now - 9))  # reported a second late
    v = eng.verify(str(ram), str(out))
    assert not v.ok and [d.path for d in v.differences] == [name]
    (d,) = v.differences
    assert d.same_content == ((out / "sub dir" / "f020").stat().st_size, now - 10), d
    fact = differed_fact("7/1/verify/9", "rsync", v)
    facts = {"verify_differed": fact}
    paths, resume = redo_of(facts, "7/1/stage-out/10") or ([], True)
    expect = redo_expect(facts, "7/1/stage-out/10")
    assert paths == [name] and expect == {name: d.same_content}
    eng.stage_out(str(ram), str(out), resume=resume, redo=paths, since=since,
                  expect=expect)
    assert not [p for p in (out / "sub dir").iterdir() if ".rsa-" in p.name]
    assert (out / "sub dir" / "f020").stat().st_mtime == now - 9
    assert eng.verify(str(ram), str(out)).ok
    assert tree_state(out) == tree_state(ram)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run as a user")
def test_a_file_changed_after_the_verify_still_goes_aside_on_the_retry(
        area: Path, user: Identity) -> None:
    """The version the verify saw is the only one the retry replaces: a write after the
    verify (someone else's) keeps its file; the RAMDISK's goes beside it."""
    import time

    eng = staged(area, user)
    ram, out = area / "ram", area / "outs" / "out"
    now = int(time.time())
    os.utime(ram / "sub dir" / "f020", (now - 10, now - 10))
    since = now - 60
    eng.stage_out(str(ram), str(out), since=since)
    os.utime(ram / "sub dir" / "f020", (now - 9, now - 9))
    v = eng.verify(str(ram), str(out))
    facts = {"verify_differed": differed_fact("7/1/verify/9", "rsync", v)}
    theirs = out / "sub dir" / "f020"
    theirs.write_bytes(b"someone else's, after the verify\n")
    os.chown(theirs, user.uid, user.gid)
    paths, resume = redo_of(facts, "7/1/stage-out/10") or ([], True)
    eng.stage_out(str(ram), str(out), resume=resume, redo=paths, since=since,
                  expect=redo_expect(facts, "7/1/stage-out/10"))
    assert theirs.read_bytes() == b"someone else's, after the verify\n"
    assert [p.name for p in (out / "sub dir").iterdir() if ".rsa-" in p.name]


# ---- the data path: recorded durably, used by the retry, cleared by a pass -------------

class Engine:
    """A stand-in for the staging engine: answers verify from a queue."""

    def __init__(self, answers: Sequence[Verification]) -> None:
        self.answers = list(answers)
        self.outs: list[dict[str, Any]] = []

    def stage_out(self, ramdisk: str, dst: str, method: str = "rsync", *,
                  resume: bool = True, redo: Sequence[bytes] = (),
                  since: int | None = None,
                  expect: Mapping[bytes, tuple[int, int]] | None = None) -> Stats:
        self.outs.append({"resume": resume, "redo": list(redo), "method": method,
                          **({"since": since} if since is not None else {}),
                          **({"expect": dict(expect)} if expect else {})})
        return Stats("stage-out", len(redo), 10 * len(redo), 0, 0.1, 1, 0, (), {})

    def verify(self, ramdisk: str, dst: str, method: str = "rsync") -> Verification:
        return self.answers.pop(0)


class Path_(DataPath):
    def __init__(self, eng: Engine) -> None:
        super().__init__(CFG, {})
        self.eng = eng

    @contextlib.contextmanager
    def tended(self, ctx: ActionContext, spec: MountSpec, every: float | None = None,
               stall: float | None = None) -> Iterator[CancelToken]:
        yield ctx.cancel

    def engine(self, ctx: ActionContext, spec: MountSpec, cancel: CancelToken) -> Any:
        return self.eng

    def bulk(self, eng: Any) -> Any:
        return eng


BAD = Verification(False, "content", 40, 4000, (Difference(b"sub/result.bin", "content "
                                                           "differs (hash)"),))
GOOD = Verification(True, "content", 40, 4000)


class Job:
    """One job's facts as rsad keeps them: learnt from the events its actions record."""

    def __init__(self) -> None:
        self.memory = Memory()
        self.log: list[Event] = []

    def run(self, dp: DataPath, action_id: str, method: str = "rsync"
            ) -> tuple[Mapping[str, Any] | None, str]:
        facts = {"mount": SPEC.to_json(), **self.memory.facts.get("7", {})}

        def milestone(data: Mapping[str, Any]) -> None:
            self.record(Event(0.0, "7", "action.milestone",
                              {"action": action_id, "detail": dict(data)}))

        action = make_action(action_id, data_out=OUT, method=StageOut(method))
        ctx = ActionContext(action=action, cancel=CancelToken(), progress=lambda _d: None,
                            facts=facts, milestone=milestone)
        kind = action_id.split("/")[2]
        try:
            out = dict((dp.stage_out if kind == "stage-out" else dp.verify)(ctx) or {})
        except RsaError as e:
            self.record(Event(0.0, "7", "action.outcome",
                              {"action": action_id, "result": "failed", "detail": {}}))
            return None, str(e)
        message = str(out.pop("summary", ""))
        self.record(Event(0.0, "7", "action.outcome",
                          {"action": action_id, "result": "ok", "detail": out}))
        return out, message

    def record(self, ev: Event) -> None:
        self.log.append(ev)
        self.memory.learn(ev)

    def restart(self) -> None:
        """rsad restarted: its memory is what the event log replays to."""
        self.memory = Memory()
        for ev in self.log:
            self.memory.learn(ev)


def test_the_retry_after_a_failed_verify_copies_what_differed_even_after_a_restart() -> None:
    eng = Engine([BAD, GOOD])
    dp, job = Path_(eng), Job()
    assert job.run(dp, "7/1/stage-out/5")[0] is not None
    assert eng.outs[-1] == {"resume": True, "redo": [], "method": "rsync"}
    _, why = job.run(dp, "7/1/verify/6")
    assert "'sub/result.bin': content differs (hash)" in why
    assert "retry copies these objects again (whatever their size and mtime)" in why
    assert "retry the stage-out or inspect" not in why
    job.restart()  # between the verify and the retry
    _, said = job.run(dp, "7/1/stage-out/8")
    assert eng.outs[-1] == {"resume": True, "redo": [b"sub/result.bin"], "method": "rsync"}
    assert said == ("the last verify found 1 object ('sub/result.bin') differing in "
                    "/pfs/u/out: 1 object copied again")
    _, said = job.run(dp, "7/1/verify/9")
    assert said.startswith("content verified: 40 objects (")
    assert said.endswith("(an earlier verify found 1 object ('sub/result.bin') differing: "
                         "copied again, they match now)")
    # passed: nothing is left to copy again, also after another restart
    job.restart()
    job.run(dp, "7/1/stage-out/11")
    assert eng.outs[-1]["redo"] == [] and eng.outs[-1]["resume"] is True


def test_rsa_retry_from_quarantine_takes_the_same_path() -> None:
    """Three failed verifies (the same corruption each time before): the operator's
    retry copies it again."""
    eng = Engine([BAD, BAD, GOOD])
    dp, job = Path_(eng), Job()
    job.run(dp, "7/1/verify/6")
    job.run(dp, "7/1/stage-out/8")
    job.run(dp, "7/1/verify/9")
    job.run(dp, "7/1/stage-out/14")  # rsa retry
    assert eng.outs[-1]["redo"] == [b"sub/result.bin"]
    assert job.run(dp, "7/1/verify/15")[0] is not None


def test_too_many_or_unlisted_differences_copy_everything_again() -> None:
    many = Verification(False, "content", 10**6, 0,
                        tuple(Difference(b"f%d" % i, "content differs (hash)")
                              for i in range(5)), differing=70000)
    fact = differed_fact("7/1/verify/6", "rsync", many)
    assert fact["all"] and fact["paths"] == [] and fact["count"] == 70000
    assert redo_of({"verify_differed": fact}, "7/1/stage-out/8") == ([], False)
    eng = Engine([many])
    dp, job = Path_(eng), Job()
    _, why = job.run(dp, "7/1/verify/6")
    assert "70000 of 1000000 objects differ" in why and "copies the whole output" in why
    job.run(dp, "7/1/stage-out/8")
    assert eng.outs[-1] == {"resume": False, "redo": [], "method": "rsync"}
    listed = Verification(False, "content", 5000, 0,
                          tuple(Difference(b"g%d" % i, "missing")
                                for i in range(REDO_LIMIT + 1)))
    assert differed_fact("7/1/verify/6", "rsync", listed)["all"]
    streamed = Verification(False, "content", 10**6, 0, BAD.differences, differing=1)
    assert differed_fact("7/1/verify/6", "rsync", streamed)["all"]


def test_a_failed_verify_of_another_cycle_is_not_redone() -> None:
    fact = differed_fact("7/1/verify/6", "rsync", BAD)
    assert redo_of({"verify_differed": fact}, "7/1/stage-out/8") == ([b"sub/result.bin"], True)
    assert redo_of({"verify_differed": fact}, "7/2/stage-out/3") is None
    assert redo_of({"verify_differed": None}, "7/1/stage-out/8") is None


def test_tar_archives_are_written_again_and_the_message_says_so() -> None:
    eng = Engine([BAD, GOOD])
    dp, job = Path_(eng), Job()
    _, why = job.run(dp, "7/1/verify/6", method="tar")
    assert "the retry writes the archives again" in why
    _, said = job.run(dp, "7/1/stage-out/8", method="tar")
    assert said.endswith("the archives were written again")


# ---- special files: one rule in every mode and direction (issue 37, item 3) -------------

def test_a_verify_does_not_expect_sockets_and_devices_and_names_them() -> None:
    ram = [f(b"a"), Entry(b"sock", "s", mode=0o755), Entry(b"null", "c", mode=0o666),
           Entry(b"fifo", "p", mode=0o644)]
    out = [f(b"a"), Entry(b"fifo", "p", mode=0o644)]
    v = compare(ram, out, level="content")
    assert v.ok, v.summary()
    assert v.checked == 2 and v.skipped == (b"sock", b"null") and v.skipped_total == 2


def special_tree(root: Path, user: Identity) -> None:
    """A socket (the user's own) and a character device (1:3, made by root) in a tree
    with files and a FIFO (make_tree's: a FIFO is staged)."""
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(root / "sock"))
    os.lchown(root / "sock", user.uid, user.gid)
    os.mknod(root / "null", 0o666 | st.S_IFCHR, os.makedev(1, 3))


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run as a user")
@pytest.mark.parametrize("method", ["rsync", "tar"])
def test_sockets_and_devices_are_skipped_and_told_in_both_directions(
        area: Path, user: Identity, method: str) -> None:
    special_tree(area / "src", user)
    eng = make_engine(user)
    eng.prepare_root(str(area / "ram"))
    stats = eng.stage_in(str(area / "src"), str(area / "ram"))
    assert stats.skipped_total == 2 and set(stats.skipped) == {"sock", "null"}
    said = _stats(stats)
    assert said["skipped"] == {"count": 2, "paths": list(stats.skipped)}
    assert said["summary"].startswith("2 special files (sockets, devices) in DATA_IN not "
                                      "staged (never are): ")
    # the job's own socket and a device node in its output (made here as root)
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(area / "ram" / "out.sock"))
    os.lchown(area / "ram" / "out.sock", user.uid, user.gid)
    os.mknod(area / "ram" / "dev", 0o666 | st.S_IFCHR, os.makedev(1, 3))
    out = area / "outs" / "out"
    done = eng.stage_out(str(area / "ram"), str(out), method)
    assert done.skipped_total == 2 and set(done.skipped) == {"out.sock", "dev"}
    v = eng.verify(str(area / "ram"), str(out), method)
    assert v.ok, v.summary()  # before: both "missing", every retry failed
    assert sorted(v.skipped) == [b"dev", b"out.sock"]


# ---- messages claim no more than was checked (issue 37, item 5) --------------------------

def test_each_verify_message_says_what_was_checked() -> None:
    assert verified_words(GOOD, "/pfs/u/out", "rsync") == (
        "content verified: 40 objects (3.91K) in /pfs/u/out (every file's bytes hashed on "
        "both sides; files under 256M possibly read back from an RSA node's page cache)")
    assert verified_words(GOOD, "/pfs/u/out", "tar").startswith(
        "content verified: 40 objects (3.91K) in the archives in /pfs/u/out (every member's "
        "bytes hashed on both sides; each archive read back by the RSA node that wrote it, "
        "possibly from its page cache)")
    meta = Verification(True, "metadata", 40, 4000)
    assert verified_words(meta, "/pfs/u/out", "rsync").startswith(
        "metadata verified (types, sizes, modes, mtimes, links; content not read)")
    job = Job()
    action_id = "7/1/verify/6"
    ctx = ActionContext(action=make_action(action_id, data_out=OUT,
                                           postprocess=("/home/u/pack.sh",)),
                        cancel=CancelToken(), progress=lambda _d: None,
                        facts={"mount": SPEC.to_json()})
    out = dict(Path_(Engine([])).verify(ctx) or {})
    assert out["summary"] == ("exit status only: your POSTPROCESS exited 0 (what it wrote is "
                              "not checked)")
    assert not job.log


def test_a_write_back_copies_again_what_its_verify_found_differing() -> None:
    """Found in the lab (issue 35): a job changed its writable input within the second
    the write-back copied it (same size, same mtime second); the write-back's own resume
    skipped it again at every retry, until the job was given up. Each write-back now
    copies what its verify found differing again, at most WRITE_BACK_ROUNDS times."""
    from rsa_scheduler.daemon.data import WRITE_BACK_ROUNDS

    eng = Engine([BAD, GOOD])
    dp = Path_(eng)
    action = make_action("7/1/write-back/5", data_in=PurePosixPath("/pfs/in"))
    ctx = ActionContext(action=action, cancel=CancelToken(), progress=lambda _d: None,
                        facts={"mount": SPEC.to_json()})
    assert dp.write_back(ctx) == {"verified": {"objects": 40}}
    assert eng.outs == [{"resume": True, "redo": [], "method": "rsync"},
                        {"resume": True, "redo": [b"sub/result.bin"], "method": "rsync"}]
    eng = Engine([BAD] * WRITE_BACK_ROUNDS)
    dp = Path_(eng)
    with pytest.raises(RsaError, match="content differs"):
        dp.write_back(ctx)
    assert len(eng.outs) == WRITE_BACK_ROUNDS


def test_the_stage_out_keeps_pfs_files_newer_than_the_build_and_verify_says_which() -> None:
    """issue 35 item 2: the build's time (fact ``built``, kept across a restart) is what
    the stage-out keeps newer PFS files after; verify names the copies kept aside."""
    aside = Verification(True, "content", 40, 4000,
                         details={"aside": [[b"sub/a".hex(), b"sub/a.rsa-7".hex()]]})
    eng = Engine([aside])
    dp, job = Path_(eng), Job()
    job.record(Event(0.0, "7", "action.outcome", {
        "action": "7/1/build_fs/1", "result": "ok",
        "detail": {"mount": SPEC.to_json(), "built": {"fs_id": "job7-c1", "at": 1000}}}))
    job.restart()
    job.run(dp, "7/1/stage-out/5")
    assert eng.outs[-1]["since"] == 999
    out, said = job.run(dp, "7/1/verify/6")
    assert out is not None and out["verified"]["aside"] == ["sub/a.rsa-7"]
    assert "1 file kept aside in /pfs/u/out" in said and "'sub/a' as 'sub/a.rsa-7'" in said
    # another run's RAMDISK: its build is not this one's
    job.run(dp, "7/2/stage-out/9")
    assert "since" not in eng.outs[-1]


def test_a_stage_out_begun_without_every_nodes_end_confirmed_says_so_when_verified() -> None:
    """The Epilog wait gives up after reset_timeout (a node that failed never runs its
    Epilog): the stage-out goes on, and only rsad's log said which nodes were never
    confirmed; the user read "stage-out finished: content verified" though what the job
    wrote there after the copy read the RAMDISK is not in it (found by review
    2026-11-30). The verify's message now says so, also after an rsad restart between
    the stage-out and its verify, and the next stage-out whose nodes all ended clears it."""
    eng = Engine([GOOD, GOOD])
    dp, job = Path_(eng), Job()
    dp.await_epilogs = lambda ctx: ["c2"]
    job.run(dp, "7/1/stage-out/5")
    job.restart()
    _, said = job.run(dp, "7/1/verify/6")
    assert said.startswith("content verified: 40 objects (")
    assert said.endswith(
        "; but the job's end on compute node c2 was never confirmed (no Epilog heard, and "
        "Slurm did not say it was done there) before the stage-out read the RAMDISK: "
        "anything the job wrote there after that is not in the output"), said
    dp.await_epilogs = lambda ctx: []
    job.run(dp, "7/1/stage-out/8")
    _, said = job.run(dp, "7/1/verify/9")
    assert "never confirmed" not in said
