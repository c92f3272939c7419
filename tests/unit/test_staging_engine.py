"""The staging engine end to end on this machine (LocalHost), as an unprivileged user.

Needs root (to switch to the user ``nobody``); skipped otherwise. The helpers
``make_tree`` and ``tree_state`` are shared with the lab tests.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import stat
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psutil
import pytest

from rsa_scheduler.hosts import Cancelled, CancelToken, LocalHost
from rsa_scheduler.runner import Completed, Identity
from rsa_scheduler.staging import Progress, StagingEngine, StagingError, scripts

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run as a user")
ODD = os.fsdecode(b"odd \n name \xff\xfe")


def make_tree(root: Path, owner: Identity, *, files: int = 40) -> Path:
    """A source tree with what users expect to survive: odd names, symlinks (also
    dangling), hard links, empty and read-only directories, a FIFO, a sparse file,
    setgid/odd modes and old mtimes. Owned by ``owner``."""
    (root / "sub dir" / "empty").mkdir(parents=True)
    (root / "ro").mkdir()
    for i in range(files):
        (root / "sub dir" / f"f{i:03d}").write_bytes(os.urandom(i * 37))
    (root / ODD).write_bytes(b"odd")
    (root / "big").write_bytes(os.urandom(3 << 20))
    with open(root / "sparse", "wb") as f:
        f.truncate(40 << 20)
        f.seek(20 << 20)
        f.write(b"middle")
    (root / "ro" / "inside").write_text("x")
    os.link(root / "big", root / "sub dir" / "big-link")
    os.link(root / ODD, root / "ro" / "odd-link")
    os.symlink("sub dir/f001", root / "link")
    os.symlink("/nonexistent/target", root / "dangling")
    os.symlink("ro", root / "dirlink")
    os.mkfifo(root / "fifo")
    (root / "mode").write_text("m")
    for dirpath, dirnames, filenames in os.walk(root):
        for n in (*dirnames, *filenames):
            os.lchown(os.path.join(dirpath, n), owner.uid, owner.gid)
    os.chown(root, owner.uid, owner.gid)
    os.chmod(root / "mode", 0o2751)
    os.utime(root / "sub dir" / "f002", (1_000_000_000, 1_000_000_000))
    os.chmod(root / "ro", 0o555)
    os.utime(root / "ro", (1_200_000_000, 1_200_000_000))
    return root


def tree_state(root: Path, *, content: bool = True) -> dict[bytes, tuple[object, ...]]:
    """What must be identical after staging: type, size, mode, mtime (s), link target,
    content hash, and which names share an inode (named by the first name in a walk in
    name order, whatever order the filesystem lists directories in)."""
    out: dict[bytes, tuple[object, ...]] = {}
    inodes: dict[tuple[int, int], bytes] = {}
    base = os.fsencode(root)
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames.sort()  # os.walk descends in this list's order
        for n in sorted(dirnames + filenames):
            p = os.path.join(dirpath, n)
            rel = os.path.relpath(p, base)
            st = os.lstat(p)
            kind = stat.S_IFMT(st.st_mode)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = (kind, os.readlink(p))
                continue
            digest = b""
            if stat.S_ISREG(st.st_mode) and content:
                digest = hashlib.blake2b(Path(os.fsdecode(p)).read_bytes()).digest()
            first = inodes.setdefault((st.st_dev, st.st_ino), rel) if st.st_nlink > 1 else rel
            size = st.st_size if stat.S_ISREG(st.st_mode) else 0
            out[rel] = (kind, size, stat.S_IMODE(st.st_mode), int(st.st_mtime), digest, first)
    return out


def make_engine(user: Identity, **kw: Any) -> StagingEngine:
    hosts = [LocalHost("rsa1"), LocalHost("rsa2")]
    return StagingEngine(hosts, user, job_id="77", **kw)


def staged(area: Path, user: Identity, **kw: object) -> StagingEngine:
    eng = make_engine(user, **kw)
    eng.prepare_root(str(area / "ram"))
    eng.stage_in(str(area / "src"), str(area / "ram"))
    return eng


def test_stage_in_and_out_keep_everything(area: Path, user: Identity) -> None:
    reports: list[Progress] = []
    eng = make_engine(user, progress=reports.append, progress_interval=0.0)
    eng.prepare_root(str(area / "ram"))
    assert (area / "ram").stat().st_uid == user.uid
    stats = eng.stage_in(str(area / "src"), str(area / "ram"))
    assert tree_state(area / "ram") == tree_state(area / "src")
    assert os.stat(area / "ram" / "sparse").st_blocks * 512 <= 16 << 20  # 16 MiB holes kept
    assert stats.files == 51 and stats.dirs == 3 and set(stats.per_node) <= {"rsa1", "rsa2"}
    assert reports and reports[-1].files_done == reports[-1].files_total == 51
    assert reports[-1].eta == 0
    out = area / "outs" / "out"
    eng.stage_out(str(area / "ram"), str(out))
    assert tree_state(out) == tree_state(area / "src")
    v = eng.verify(str(area / "ram"), str(out))
    assert v.ok and v.checked == 54, v.summary()


def test_stage_in_is_idempotent_and_resumes(area: Path, user: Identity) -> None:
    eng = staged(area, user)
    victim = area / "ram" / "sub dir" / "f030"
    victim.chmod(0o600)
    with open(victim, "r+b") as f:  # an interrupted copy: short, mtime = now
        f.truncate(5)
    (area / "ram" / "link").unlink()
    again = eng.stage_in(str(area / "src"), str(area / "ram"))
    assert again.files == 2 and again.already == 49
    assert tree_state(area / "ram") == tree_state(area / "src")
    full = eng.stage_in(str(area / "src"), str(area / "ram"), resume=False)
    assert full.files == 51
    assert tree_state(area / "ram") == tree_state(area / "src")


def test_verify_catches_truncated_altered_missing(area: Path, user: Identity) -> None:
    eng = staged(area, user)
    out = area / "outs" / "out"
    eng.stage_out(str(area / "ram"), str(out))
    f1, f2 = out / "sub dir" / "f010", out / "sub dir" / "f011"
    st = f2.stat()
    with open(f1, "r+b") as f:
        f.truncate(3)
    data = bytearray(f2.read_bytes())
    data[0] ^= 0xFF  # same size, same mtime: only the hash sees it
    f2.write_bytes(bytes(data))
    os.utime(f2, ns=(st.st_atime_ns, st.st_mtime_ns))
    (out / ODD).unlink()
    v = eng.verify(str(area / "ram"), str(out))
    assert not v.ok
    whats = {d.path: d.what for d in v.differences}
    assert whats[b"sub dir/f010"].endswith("(truncated)")
    assert whats[b"sub dir/f011"] == "content differs (hash)"
    assert whats[os.fsencode(ODD)] == "missing"
    assert "3 of 54 objects differ" in v.summary()
    meta = make_engine(user, verify_level="metadata").verify(str(area / "ram"), str(out))
    assert {d.path for d in meta.differences} == {b"sub dir/f010", os.fsencode(ODD)}


def test_tar_stage_out_round_trips(area: Path, user: Identity) -> None:
    eng = staged(area, user)
    out = area / "outs" / "tar"
    stats = eng.stage_out(str(area / "ram"), str(out), method="tar")
    names = sorted(p.name for p in out.iterdir())
    assert names == ["rsa-77-0.tar", "rsa-77-1.tar", "rsa-77.index"]
    assert stats.archives[-1] == str(out / "rsa-77.index")
    index = (out / "rsa-77.index").read_text().splitlines()
    assert len(index) == 1 + 54 and "odd \\n name \\xff\\xfe" in "\n".join(index)
    assert eng.verify(str(area / "ram"), str(out), method="tar").ok
    back = area / "back"
    back.mkdir()
    for archive in sorted(out.glob("*.tar"), reverse=True):  # archive 0 (directories) last
        subprocess.run(["tar", "-xpf", str(archive), "-C", str(back)], check=True)
    os.chmod(back, 0o755)
    assert tree_state(back) == tree_state(area / "src")
    with open(out / "rsa-77-1.tar", "r+b") as f:  # a torn archive
        f.truncate(f.seek(0, 2) // 2)
    with pytest.raises(StagingError):
        eng.verify(str(area / "ram"), str(out), method="tar")


def test_a_requeued_runs_archives_never_replace_or_join_the_first_runs(
        area: Path, user: Identity) -> None:
    """Issue 35: with method tar a second run of a requeued job (rsad's cycle 2) replaced
    the first run's verified archives (the same names), and the first run's extra ones
    were counted in the second run's verify."""
    first = staged(area, user)
    out = area / "outs" / "tar"
    first.stage_out(str(area / "ram"), str(out), method="tar")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    second = make_engine(user, cycle=2)
    (area / "ram" / "only-in-run-2").write_text("2\n")
    second.stage_out(str(area / "ram"), str(out), method="tar")
    names = sorted(p.name for p in out.iterdir())
    assert names == ["rsa-77-0.tar", "rsa-77-1.tar", "rsa-77.c2-0.tar", "rsa-77.c2-1.tar",
                     "rsa-77.c2.index", "rsa-77.index"]
    assert {n: (out / n).read_bytes() for n in before} == before  # run 1's untouched
    assert second.verify(str(area / "ram"), str(out), method="tar").ok
    (area / "ram" / "only-in-run-2").unlink()
    assert first.verify(str(area / "ram"), str(out), method="tar").ok


def test_user_cannot_stage_what_they_cannot_read(area: Path, user: Identity) -> None:
    secret = area / "src" / "secret"
    secret.write_text("root only")
    secret.chmod(0o600)
    eng = make_engine(user)
    eng.prepare_root(str(area / "ram"))
    with pytest.raises(StagingError) as err:
        eng.stage_in(str(area / "src"), str(area / "ram"))
    assert err.value.permanent and "cannot read 1 object(s)" in str(err.value)
    assert "secret" in str(err.value)
    assert list((area / "ram").iterdir()) == []  # refused before copying anything
    with pytest.raises(StagingError) as missing:
        eng.stage_in(str(area / "nope"), str(area / "ram"))
    assert missing.value.permanent
    (area / "ram" / "result").write_text("output")  # (an empty RAMDISK copies nothing)
    os.chown(area / "ram" / "result", user.uid, user.gid)
    with pytest.raises(StagingError) as denied:  # DATA_OUT where the user may not write
        eng.stage_out(str(area / "ram"), str(area / "rootonly" / "out"))
    assert denied.value.permanent and "permission denied" in str(denied.value)


def test_scripts_get_the_environment_and_decide_success(area: Path, user: Identity) -> None:
    eng = make_engine(user)
    eng.prepare_root(str(area / "ram"))
    res = eng.run_script(["sh", "-c", 'env | grep ^RSA_ | sort; pwd; id -u; echo oops >&2; '
                          'exit 3'], "stage-out", ramdisk=str(area / "ram"),
                         data_in="/in", data_out="/out")
    assert res.returncode == 3 and not res.ok and "exited 3" in res.summary()
    lines = res.stdout_tail.splitlines()
    assert lines[:7] == ["RSA_DATA_IN=/in", "RSA_DATA_OUT=/out", "RSA_JOB_ID=77",
                         "RSA_NODE=rsa1", "RSA_NODES=rsa[1-2]", "RSA_PHASE=stage-out",
                         f"RSA_RAMDISK={area / 'ram'}"]
    assert lines[7:] == [str(area / "ram"), str(user.uid)]
    assert res.stderr_tail == "oops\n"
    ok = eng.run_script(["true"], "stage-in", ramdisk=str(area / "ram"))
    assert ok.ok
    slow = make_engine(user, timeout=0.5).run_script(["sleep", "5"], "stage-in",
                                                      ramdisk=str(area / "ram"))
    assert slow.returncode is None and "timed out" in slow.summary()


def test_cancelled_token_stops_before_any_copy(area: Path, user: Identity) -> None:
    token = CancelToken()
    eng = make_engine(user, cancel=token)
    eng.prepare_root(str(area / "ram"))
    token.cancel("demoted")
    with pytest.raises(Cancelled):
        eng.stage_in(str(area / "src"), str(area / "ram"))
    assert list((area / "ram").iterdir()) == []


@pytest.mark.parametrize("what", ["script", "scan"])
def test_a_cancel_kills_a_command_that_runs_alone_not_only_the_parallel_streams(
        area: Path, user: Identity, what: str) -> None:
    """A script, the scan or the listing runs outside the parallel streams: a cancel (a
    demotion, the RAMDISK's stall watch) must kill it too, not wait for its end."""
    token = CancelToken()
    stuck: list[str] = []
    sleeper = ["sleep", f"64.{os.getpid()}"]

    class SlowHost(LocalHost):  # the scan stands still, as on a dead FUSE mount
        def run(self, argv: Sequence[str], **kw: Any) -> Completed:
            if list(argv[2:3]) in ([scripts.SCAN], [scripts.SCAN_CAPPED]):
                stuck.append(argv[4])  # the root it scans
                argv = sleeper
            return super().run(argv, **kw)

    def cancel_once_it_runs() -> None:  # not after a fixed 0.3 s: the command may not
        deadline = time.monotonic() + 30  # have started by then on a loaded machine
        while time.monotonic() < deadline and not any(
                p.info["cmdline"] == sleeper for p in psutil.process_iter(["cmdline"])):
            time.sleep(0.01)
        token.cancel("demoted")

    eng = StagingEngine([SlowHost("rsa1")], user, job_id="77", cancel=token)
    eng.prepare_root(str(area / "ram"))
    threading.Thread(target=cancel_once_it_runs, daemon=True).start()
    t0 = time.monotonic()
    with pytest.raises(Cancelled, match="demoted"):
        if what == "script":
            eng.run_script(sleeper, "stage-out", ramdisk=str(area / "ram"))
        else:
            eng.stage_out(str(area / "ram"), str(area / "outs" / "o"))
    assert time.monotonic() - t0 < 10
    assert stuck == ([] if what == "script" else [str(area / "ram")])


def test_engine_refuses_root() -> None:
    with pytest.raises(ValueError):
        StagingEngine([LocalHost()], Identity("root", 0, 0))


def test_atomic_stage_in_keeps_everything_and_leaves_no_part_directory(
        area: Path, user: Identity) -> None:
    eng = make_engine(user, big_bytes=1 << 20)  # "big" and "sparse" take the dd path
    eng.prepare_root(str(area / "ram"))
    stats = eng.stage_in(str(area / "src"), str(area / "ram"), atomic=True)
    assert stats.files == 51
    assert tree_state(area / "ram") == tree_state(area / "src")
    assert not list((area / "ram").glob(".rsa-staging-77*"))


def test_atomic_stage_in_resumes_past_a_part_directory_left_by_a_crash(
        area: Path, user: Identity) -> None:
    eng = make_engine(user)
    eng.prepare_root(str(area / "ram"))
    part = area / "ram" / ".rsa-staging-77" / "0" / "sub dir"
    part.mkdir(parents=True)
    (part / "f003").write_bytes(b"torn")
    for p in (area / "ram" / ".rsa-staging-77", area / "ram" / ".rsa-staging-77" / "0", part,
              part / "f003"):
        os.chown(p, user.uid, user.gid)
    eng.stage_in(str(area / "src"), str(area / "ram"), atomic=True)
    assert tree_state(area / "ram") == tree_state(area / "src")


def test_atomic_stage_in_never_shows_a_partial_file(area: Path, user: Identity) -> None:
    src = area / "src"
    (src / "huge").write_bytes(os.urandom(1 << 20) * 96)  # 96 MiB: copying takes a while
    os.chown(src / "huge", user.uid, user.gid)
    ram = area / "ram"
    eng = make_engine(user, big_bytes=1 << 20)
    eng.prepare_root(str(ram))
    seen: list[int] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            with contextlib.suppress(FileNotFoundError):
                seen.append(os.stat(ram / "huge").st_size)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        eng.stage_in(str(src), str(ram), atomic=True)
    finally:
        done.set()
        watcher.join()
    assert set(seen) <= {96 << 20}  # absent, or complete
    assert (ram / "huge").stat().st_size == 96 << 20


def test_stage_out_never_shows_a_partial_file_under_its_final_name(
        area: Path, user: Identity) -> None:
    """Issue 13: a killed or interrupted stage-out copy must never leave a file cut short
    under its final name in DATA_OUT (the copy goes to the part directory first)."""
    ram = area / "ram"
    eng = make_engine(user, big_bytes=1 << 20)
    eng.prepare_root(str(ram))
    eng.stage_in(str(area / "src"), str(ram))
    (ram / "huge").write_bytes(os.urandom(1 << 20) * 96)  # dd path, takes a while
    (ram / "many").mkdir()
    for i in range(300):  # a whole directory: the recursive tar path
        (ram / "many" / f"r{i:04d}").write_bytes(os.urandom(3000))
    for q in [ram / "huge", ram / "many", *(ram / "many").iterdir()]:
        os.chown(q, user.uid, user.gid)
    out = area / "outs" / "out"
    seen: dict[str, set[int]] = {}
    want = {n: (ram / n).stat().st_size for n in ("huge", "many/r0000", "many/r0299")}
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            for name in want:
                with contextlib.suppress(FileNotFoundError):
                    seen.setdefault(name, set()).add(os.stat(out / name).st_size)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        eng.stage_out(str(ram), str(out))
    finally:
        done.set()
        watcher.join()
    for name, size in want.items():
        assert seen.get(name, set()) <= {size}, name  # absent, or complete
    assert tree_state(out) == tree_state(ram)
    assert not list(out.glob(".rsa-staging-77*"))


def test_stage_out_resumes_past_a_torn_part_directory_and_keeps_the_users_own(
        area: Path, user: Identity) -> None:
    """A crash mid-stage-out leaves only the job's part directory (torn files in it): the
    next run replaces it and removes it. A ``.rsa-staging`` of the user's own in
    DATA_OUT, or one of another job, is never touched."""
    eng = staged(area, user)
    out = area / "outs" / "out"
    torn = out / ".rsa-staging-77" / "3" / "sub dir"
    mine = out / ".rsa-staging" / "keep.txt"
    other = out / ".rsa-staging-78" / "keep.txt"
    for d in (torn, mine.parent, other.parent):
        d.mkdir(parents=True)
    (torn / "f003").write_bytes(b"torn")
    mine.write_text("mine")
    other.write_text("another job's")
    for dirpath, _, names in os.walk(out):
        os.chown(dirpath, user.uid, user.gid)
        for n in names:
            os.chown(os.path.join(dirpath, n), user.uid, user.gid)
    eng.stage_out(str(area / "ram"), str(out))
    assert not list(out.glob(".rsa-staging-77*"))
    assert mine.read_text() == "mine" and other.read_text() == "another job's"
    got = tree_state(out)
    assert {k: v for k, v in got.items() if not k.startswith(b".rsa-staging")} \
        == tree_state(area / "ram")


def test_stage_out_in_a_shared_sticky_directory_is_not_stopped_by_another_users_part_dir(
        area: Path, user: Identity) -> None:
    """Issue 13: in a shared sticky DATA_OUT another user can create names first. The
    part directory's name is unpredictable and made fresh (never reused, never entered if
    someone else's): names another user planted stay theirs and the stage-out completes;
    the user's own leftover of a killed run is removed."""
    eng = staged(area, user)
    shared = area / "outs" / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    other_uid = 12345
    planted = [shared / "out" / ".rsa-staging-77", shared / "out" / ".rsa-staging-77-0"]
    (shared / "out").mkdir()
    (shared / "out").chmod(0o1777)
    for d in planted:
        d.mkdir()
        (d / "theirs").write_text("x")
        os.chown(d / "theirs", other_uid, other_uid)
        os.chown(d, other_uid, other_uid)
    planted[1].chmod(0o777)  # writable: they could swap files in a reused name
    left = shared / "out" / ".rsa-staging-77-0badc0de"
    (left / "3").mkdir(parents=True)
    (left / "3" / "torn").write_bytes(b"torn")
    for q in (left, left / "3", left / "3" / "torn"):
        os.chown(q, user.uid, user.gid)
    out = shared / "out"
    eng.stage_out(str(area / "ram"), str(out))
    assert eng.verify(str(area / "ram"), str(out)).ok
    for d in planted:
        assert (d / "theirs").read_text() == "x"
        assert d.stat().st_uid == other_uid
    assert not left.exists()
    assert sorted(p.name for p in out.glob(".rsa-staging-77*")) == \
        sorted(p.name for p in planted)


def test_an_archive_name_another_user_holds_in_a_sticky_directory_says_whose_and_what_to_do(
        area: Path, user: Identity) -> None:
    """Archive names are predictable: in a shared sticky DATA_OUT another user can create
    one first, and only they or root can remove it there. The stage-out fails, as it
    did, permanently (the RAMDISK kept for a retry), but the line now says whose name it
    is and what to do (found by review 2026-11-30: "Operation not permitted" alone); the
    name stays theirs. In the user's own sticky directory nothing is refused."""
    eng = staged(area, user)
    out = area / "outs" / "shared"
    out.mkdir()
    out.chmod(0o1777)
    other_uid = 12345
    theirs = out / "rsa-77-1.tar"
    theirs.write_text("theirs")
    os.chown(theirs, other_uid, other_uid)
    with pytest.raises(StagingError) as e:
        eng.stage_out(str(area / "ram"), str(out), method="tar")
    assert e.value.permanent
    assert f"{theirs} is UNKNOWN's (uid {other_uid}): Operation not permitted to replace " \
        "it, in a sticky directory only its owner or root may; ask them to remove it; " \
        "then an operator's rsa retry stages the output out again" in str(e.value), str(e.value)
    assert theirs.read_text() == "theirs" and theirs.stat().st_uid == other_uid
    os.chown(out, user.uid, user.gid)  # the user's own sticky directory: theirs to replace
    eng.stage_out(str(area / "ram"), str(out), method="tar")
    assert eng.verify(str(area / "ram"), str(out), method="tar").ok


def test_part_directory_names_are_unpredictable_and_checked() -> None:
    assert scripts.part_dir("77", "ab12") == ".rsa-staging-77-ab12"
    assert scripts.is_part_dir(b".rsa-staging-77-ab12", "77")
    assert scripts.is_part_dir(b".rsa-staging-77", "77")
    assert not scripts.is_part_dir(b".rsa-staging-770-ab", "77")
    assert not scripts.is_part_dir(b".rsa-staging", "77")
    with pytest.raises(ValueError):
        scripts.part_dir("77", "../x")


def test_stage_out_replaces_an_older_file_at_the_final_name_whole(
        area: Path, user: Identity) -> None:
    """An older, longer file at a final name is replaced by the staged one (renamed over
    it), not written into."""
    eng = staged(area, user)
    out = area / "outs" / "out"
    (out / "sub dir").mkdir(parents=True)
    (out / "sub dir" / "f001").write_bytes(b"an older, longer version of the file" * 100)
    for q in (out, out / "sub dir", out / "sub dir" / "f001"):
        os.chown(q, user.uid, user.gid)
    before = (out / "sub dir" / "f001").stat().st_ino
    eng.stage_out(str(area / "ram"), str(out))
    assert (out / "sub dir" / "f001").stat().st_ino != before
    assert (out / "sub dir" / "f001").read_bytes() == \
        (area / "ram" / "sub dir" / "f001").read_bytes()
    assert tree_state(out) == tree_state(area / "ram")


def add_whole_directory(root: Path, owner: Identity) -> None:
    """A subtree the plan copies with one recursive tar: nested and read-only
    directories, odd names, a symlink, a FIFO and hard links that stay inside it."""
    (root / "whole" / "x" / "deep").mkdir(parents=True)
    (root / "whole" / "ro").mkdir()
    for i in range(5):
        (root / "whole" / "x" / f"f{i}").write_bytes(os.urandom(100 + i))
    (root / "whole" / "x" / "deep" / ODD).write_bytes(b"deep odd")
    (root / "whole" / "ro" / "inside").write_text("ro")
    os.link(root / "whole" / "x" / "f0", root / "whole" / "ro" / "f0-link")
    os.symlink("../x/f1", root / "whole" / "ro" / "sym")
    os.mkfifo(root / "whole" / "x" / "fifo")
    for dirpath, _, filenames in os.walk(root / "whole"):
        os.chown(dirpath, owner.uid, owner.gid)
        for n in filenames:
            os.lchown(os.path.join(dirpath, n), owner.uid, owner.gid)
    os.chmod(root / "whole" / "x" / "f2", 0o4750)
    os.utime(root / "whole" / "x" / "f3", (1_100_000_000, 1_100_000_000))
    os.utime(root / "whole" / "x" / "deep", (1_300_000_000, 1_300_000_000))
    os.chmod(root / "whole" / "ro", 0o500)
    os.utime(root / "whole" / "ro", (1_250_000_000, 1_250_000_000))


class SpyHost(LocalHost):
    """A LocalHost that remembers every argv it ran."""

    def __init__(self, name: str, seen: list[list[str]]) -> None:
        super().__init__(name)
        self.seen = seen

    def run(self, argv: Sequence[str], **kw: Any) -> Completed:
        self.seen.append(list(argv))
        return super().run(argv, **kw)


def test_whole_directories_are_staged_recursively_and_keep_everything(
        area: Path, user: Identity) -> None:
    add_whole_directory(area / "src", user)
    seen: list[list[str]] = []
    eng = StagingEngine([SpyHost("rsa1", seen), SpyHost("rsa2", seen)], user, job_id="77")
    eng.prepare_root(str(area / "ram"))
    stats = eng.stage_in(str(area / "src"), str(area / "ram"))
    assert tree_state(area / "ram") == tree_state(area / "src")
    trees = [a for a in seen if a[2:3] == [scripts.TREE_PIPE]]
    assert len(trees) == 1 and stats.files == 51 + 10
    out = area / "outs" / "out"
    seen.clear()
    eng.stage_out(str(area / "ram"), str(out))
    assert tree_state(out) == tree_state(area / "src")
    # stage-out places atomically: the recursive copier runs inside the placement
    assert any(a[2:3] == [scripts.ATOMIC] and a[7:8] == [scripts.TREE_PIPE] for a in seen)
    assert not list(out.glob(".rsa-staging-77*"))
    assert eng.verify(str(area / "ram"), str(out)).ok
    # Resume: a file cut short inside the whole directory is copied again by name; the
    # directory's complete files are not copied again.
    victim = area / "ram" / "whole" / "x" / "f4"
    with open(victim, "r+b") as f:
        f.truncate(5)
    seen.clear()
    again = eng.stage_in(str(area / "src"), str(area / "ram"))
    assert again.files == 1 and again.already == 51 + 9
    assert not any(a[2:3] == [scripts.TREE_PIPE] for a in seen)
    assert tree_state(area / "ram") == tree_state(area / "src")


def test_own_objects_without_owner_read_are_refused(area: Path, user: Identity) -> None:
    """The scan trusts owner bits for the user's own objects: u-r files and u-x
    directories are still found (and so is another user's unreadable file)."""
    src = area / "src"
    (src / "own-wo").write_text("write only")
    (src / "own-dir").mkdir()
    for p in (src / "own-wo", src / "own-dir"):
        os.chown(p, user.uid, user.gid)
    os.chmod(src / "own-wo", 0o200)
    os.chmod(src / "own-dir", 0o600)
    eng = make_engine(user)
    eng.prepare_root(str(area / "ram"))
    with pytest.raises(StagingError) as err:
        eng.stage_in(str(src), str(area / "ram"))
    assert err.value.permanent and "cannot read 2 object(s)" in str(err.value)
    assert "own-wo" in str(err.value) and "own-dir" in str(err.value)


def test_big_files_are_copied_with_the_block_size_of_their_direction(
        area: Path, user: Identity) -> None:
    """dd writes 16 MiB blocks into the RAMDISK and reads 128 KiB blocks out of it; holes
    of the sparse file survive both (its stage-out copy is sparse at 128 KiB)."""
    seen: list[list[str]] = []
    eng = StagingEngine([SpyHost("rsa1", seen), SpyHost("rsa2", seen)], user, job_id="77",
                        big_bytes=1 << 20, input_settle=0)  # (no second copy of a new file)
    eng.prepare_root(str(area / "ram"))
    eng.stage_in(str(area / "src"), str(area / "ram"))
    # one dd bucket: "sparse" ("big" is hard-linked, so tar copies it)
    assert [a[-1] for a in seen if a[2:3] == [scripts.BIG]] == ["16M"]
    out = area / "outs" / "out"
    seen.clear()
    eng.stage_out(str(area / "ram"), str(out))
    # stage-out places atomically: the copier is ATOMIC's $4, its block its $5
    assert [a[8] for a in seen if a[2:3] == [scripts.ATOMIC]
            and a[7:8] == [scripts.BIG]] == ["128K"]
    assert tree_state(out) == tree_state(area / "src")
    assert eng.verify(str(area / "ram"), str(out)).ok
    assert (out / "sparse").stat().st_blocks * 512 < 1 << 20  # 40 MiB, 6 bytes of data


@pytest.mark.parametrize("method", ["rsync", "tar"])
def test_an_empty_ramdisk_leaves_data_out_alone(area: Path, user: Identity, method: str) -> None:
    """No node ever mounted the RAMDISK for output (its DATA_OUT was refused at mount
    time): nothing to stage out, and a DATA_OUT the user cannot create is no reason to
    keep the (empty) RAMDISK and its RSA nodes."""
    eng = make_engine(user)
    eng.prepare_root(str(area / "ram"))
    out = area / "no-such-parent" / "out"  # its parent is root's: mkdir would be refused
    stats = eng.stage_out(str(area / "ram"), str(out), method)
    assert stats.files == 0 and not out.exists()
    result = eng.verify(str(area / "ram"), str(out), method)
    assert result.ok and result.checked == 0


@pytest.mark.parametrize("method", ["rsync", "tar"])
def test_a_ramdisk_root_that_is_not_mounted_is_never_taken_for_an_empty_ramdisk(
        area: Path, user: Identity, method: str) -> None:
    """Found by review: while a repair remounts an RSA node's mount of the RAMDISK (the
    verify's own watch repairs it), the node shows the bare directory under it, empty.
    A verify that scanned it then found "the RAMDISK held no output" and passed, and the
    RAMDISK, with every byte of the job's output, was destroyed. An empty scan counts
    only once the node shows the root mounted (rsad's engines: ``ramdisk_mounted``)."""
    eng = make_engine(user, ramdisk_mounted=True)
    eng.prepare_root(str(area / "ram"))  # a plain directory: nothing is mounted there
    out = area / "out"
    for step in (lambda: eng.stage_out(str(area / "ram"), str(out), method),
                 lambda: eng.verify(str(area / "ram"), str(out), method)):
        with pytest.raises(StagingError, match="not mounted") as got:
            step()
        assert not got.value.permanent and got.value.unanswered
    assert not out.exists()


def test_copy_tool_rsync_runs_real_rsync_for_every_bucket_and_keeps_everything(
        area: Path, user: Identity) -> None:
    """staging.copy_tool: rsync: every bucket (files, big files, whole directories) is
    copied by rsync itself, as the user; the trees are what the engine's own tools give
    (modes, times, the symlink, the odd name, holes), the stage-out is placed atomically,
    verified, and a resume copies only what is missing."""
    add_whole_directory(area / "src", user)
    seen: list[list[str]] = []
    eng = StagingEngine([SpyHost("rsa1", seen), SpyHost("rsa2", seen)], user, job_id="77",
                        copy_tool="rsync")
    eng.prepare_root(str(area / "ram"))
    stats = eng.stage_in(str(area / "src"), str(area / "ram"))
    assert tree_state(area / "ram") == tree_state(area / "src")
    assert os.stat(area / "ram" / "sparse").st_blocks * 512 <= 16 << 20  # holes kept
    copies = [a for a in seen if a[2:3] in ([scripts.RSYNC], [scripts.TAR_PIPE],
                                            [scripts.TREE_PIPE], [scripts.BIG])]
    assert copies and all(a[2] == scripts.RSYNC for a in copies)
    assert any(a[6] == "-r" for a in copies)  # the whole directory, recursively
    assert stats.files == 51 + 10
    out = area / "outs" / "out"
    seen.clear()
    eng.stage_out(str(area / "ram"), str(out))
    assert tree_state(out) == tree_state(area / "src")
    assert any(a[2:3] == [scripts.ATOMIC] and a[7:8] == [scripts.RSYNC] for a in seen)
    assert not list(out.glob(".rsa-staging-77*"))
    assert eng.verify(str(area / "ram"), str(out)).ok
    (area / "ram" / "sub dir" / "f030").unlink()
    again = eng.stage_in(str(area / "src"), str(area / "ram"))
    assert again.files == 1
    assert tree_state(area / "ram") == tree_state(area / "src")
    with pytest.raises(ValueError, match="copy tool"):
        StagingEngine([LocalHost()], user, copy_tool="scp")


def test_copy_tool_custom_runs_the_sites_template_as_the_user(
        area: Path, user: Identity) -> None:
    """staging.copy_tool: custom: the site's copy_command copies every bucket, as the
    user, with the paths as quoted arguments; what lands is checked as for the engine."""
    add_whole_directory(area / "src", user)
    seen: list[list[str]] = []
    template = ("touch {dst}/.ran-as-$(id -u); "
                "rsync -aH --from0 --files-from={list} {recursive} {src}/ {dst}/")
    eng = StagingEngine([SpyHost("rsa1", seen), SpyHost("rsa2", seen)], user, job_id="77",
                        copy_tool="custom", copy_command=template)
    eng.prepare_root(str(area / "ram"))
    eng.stage_in(str(area / "src"), str(area / "ram"))
    marker = area / "ram" / f".ran-as-{user.uid}"
    assert marker.exists() and marker.stat().st_uid == user.uid
    marker.unlink()
    assert tree_state(area / "ram") == tree_state(area / "src")
    progs = {a[2] for a in seen if a[:2] == [scripts.BASH, "-c"] and "touch" in a[2]}
    assert progs == {scripts.custom_program(template)}
    assert '"$1"' in next(iter(progs)) and str(area) not in next(iter(progs))
    out = area / "outs" / "out"
    eng.stage_out(str(area / "ram"), str(out))
    for m in out.glob(".ran-as-*"):  # written into the part directory, renamed in place
        m.unlink()
    assert tree_state(out) == tree_state(area / "src")
    assert not list(out.glob(".rsa-staging-77*"))


@pytest.mark.parametrize(("template", "message"), [
    ("cp {src} {dst}", "needs {list}"),
    ("rsync --files-from={list} {src}/ {out}/", "unknown placeholder {out}"),
    ("rsync --files-from={list} {src}/", "needs {dst}"),
])
def test_a_copy_command_without_its_placeholders_is_refused(
        user: Identity, template: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        StagingEngine([LocalHost()], user, copy_tool="custom", copy_command=template)


@contextlib.contextmanager
def small_ramdisk(path: Path, user: Identity, size: str) -> Iterator[Path]:
    """A real tmpfs of ``size`` at ``path`` (the RAMDISK root, the user's), unmounted
    afterwards whatever the test did."""
    path.mkdir(exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700",
                    "rsa-unit-small", str(path)], check=True, timeout=30)
    try:
        os.chown(path, user.uid, user.gid)
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=False, timeout=30)


def own_source(area: Path, user: Identity, files: dict[str, bytes | int]) -> Path:
    """``area/src2`` holding ``files``: bytes as content, an int as the size of a sparse
    file with one byte of data at its start."""
    src = area / "src2"
    src.mkdir()
    for name, what in files.items():
        with open(src / name, "wb") as f:
            if isinstance(what, int):
                f.write(b"x")
                f.truncate(what)
            else:
                f.write(what)
        os.chown(src / name, user.uid, user.gid)
    os.chown(src, user.uid, user.gid)
    return src


def test_an_input_larger_than_the_ramdisk_is_refused_before_any_copy(
        area: Path, user: Identity) -> None:
    src = own_source(area, user, {"huge": os.urandom(6 << 20), "small": b"s"})
    with small_ramdisk(area / "ram", user, "4m") as ram:
        eng = make_engine(user)
        eng.free_space_settle = 1.0  # read again for a second (a local tmpfs is settled)
        with pytest.raises(StagingError) as err:
            eng.stage_in(str(src), str(ram))
        assert list(ram.iterdir()) == []  # nothing written, the pool not filled
    msg = str(err.value)
    assert err.value.permanent
    assert msg == ("stage-in refused: the input (6M in 2 files) is larger than the "
                   "RAMDISK's free space (4M): set #RSA_CAPACITY=8M or more to get RSA "
                   "nodes that hold it"), msg
    assert (src / "huge").stat().st_size == 6 << 20  # the input is untouched


def test_a_sparse_input_counts_by_what_it_occupies(area: Path, user: Identity) -> None:
    """64 MiB by size, one 16 MiB block by what dd writes: it fits a 20 MiB RAMDISK."""
    src = own_source(area, user, {"sparse": 64 << 20, "small": b"s"})
    with small_ramdisk(area / "ram", user, "20m") as ram:
        make_engine(user).stage_in(str(src), str(ram))
        assert tree_state(ram) == tree_state(src)


def test_free_space_that_grows_soon_is_waited_for(area: Path, user: Identity) -> None:
    """A fresh MooseFS shows its nodes' space a moment after it is up: a RAMDISK that
    grows within ``free_space_settle`` takes the input (here a tmpfs remounted larger)."""
    src = own_source(area, user, {"huge": os.urandom(6 << 20)})
    with small_ramdisk(area / "ram", user, "4m") as ram:
        grow = threading.Timer(1.0, lambda: subprocess.run(
            ["mount", "-o", "remount,size=16m", str(ram)], check=True, timeout=30))
        grow.start()
        try:
            make_engine(user).stage_in(str(src), str(ram))
        finally:
            grow.cancel()
            grow.join()
        assert tree_state(ram) == tree_state(src)


def test_a_streamed_input_larger_than_the_ramdisk_is_refused_before_any_copy(
        area: Path, user: Identity) -> None:
    """Streamed mode (a tree of more than ``stream_objects`` objects) checks the size its
    listing found against the free space before copying, as the listed mode does."""
    files: dict[str, bytes | int] = {f"f{i:04d}": os.urandom(4096) for i in range(1200)}
    src = own_source(area, user, files)
    with small_ramdisk(area / "ram", user, "4m") as ram:
        eng = make_engine(user, stream_objects=1000)
        eng.free_space_settle = 1.0
        with pytest.raises(StagingError) as err:
            eng.stage_in(str(src), str(ram))
        left = [p for p in ram.rglob("*") if p.is_file() and "spool" not in p.parts]
        assert left == []  # nothing copied (the part directory's list files aside)
    assert err.value.permanent
    assert str(err.value).startswith("stage-in refused: the input (4.69M in 1200 files) is "
                                     "larger than the RAMDISK's free space"), err.value


def test_streamed_mode_is_for_the_engine_only(area: Path, user: Identity) -> None:
    """With copy_tool rsync (or custom) a tree above ``stream_objects`` is listed and
    copied with the operator's tool: streamed mode would copy it with tar."""
    files: dict[str, bytes | int] = {f"f{i:04d}": b"x" for i in range(1100)}
    src = own_source(area, user, files)
    seen: list[list[str]] = []
    eng = StagingEngine([SpyHost("rsa1", seen)], user, job_id="77", stream_objects=1000,
                        copy_tool="rsync")
    eng.prepare_root(str(area / "ram"))
    eng.stage_in(str(src), str(area / "ram"))
    assert tree_state(area / "ram") == tree_state(src)
    assert not [a for a in seen if scripts.STREAM_COPY in a]
    assert [a for a in seen if a[:1] == ["rsync"] or "rsync" in " ".join(a[:3])]
