"""Mount and unmount by handle (rsa_scheduler.node.mounts/handles) with real mounts.

Each scenario runs in a throwaway mount namespace (``unshare --mount --propagation
private``) on a tmpfs over /media, so nothing is left behind; the RAMDISK is a tmpfs
"client mount". It plays the symlink swap of issue 12: the job renames the parent of its
DATA_IN and plants a symlink to a directory holding a sentinel mount; releasing must leave
the sentinel alone and still remove the job's mount (lazily: the Epilog), or refuse it
(not lazily: the reset). Needs root and unshare(1); skips otherwise, except under CI=true.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

PRELUDE = textwrap.dedent('''
    import json, os, subprocess, sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    from rsa_scheduler.node.mounts import JobMounts
    from rsa_scheduler.node.paths import Who
    R = Path("/media")
    subprocess.run(["mount", "-t", "tmpfs", "rsa-test", str(R)], check=True)
    pfs = R / "pfs"
    (pfs / "u" / "x" / "in").mkdir(parents=True)
    (pfs / "u" / "x" / "in" / "f").write_text("pfs\\n")
    sentinel = R / "root" / "sentinel"
    (sentinel / "in").mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "sentinel", str(sentinel / "in")], check=True)
    (sentinel / "in" / "marker").write_text("sentinel\\n")
    out = {}
    def target_of(path):
        return subprocess.run(["findmnt", "-n", "-o", "TARGET", "--target", str(path)],
                              capture_output=True, text=True).stdout.strip()
    def mount(mode, target=pfs / "u" / "x" / "in"):
        jm = JobMounts("7", "c1", str(R / "node"))
        ins = {"seq": 1, "do": "mount", "role": "input", "target": str(target),
               "mode": mode, "client_argv": ["mount", "-t", "tmpfs", "ram", "@MOUNTPOINT@"],
               "client_umount_argv": ["umount", "@MOUNTPOINT@"]}
        out["mounted"] = jm.mount(ins, Who(0, frozenset({0})), [str(pfs)])
        out["record"] = jm.entries()[-1]
        return jm
    def swap():
        os.rename(pfs / "u" / "x", pfs / "u" / "x.moved")
        os.symlink(str(sentinel), pfs / "u" / "x")
    def sentinel_ok():
        return os.path.ismount(sentinel / "in") and (sentinel / "in" / "marker").exists()
    def job_mount(n, target, role="input", mode="ro", seq=1):
        """Job n's RAMDISK (a tmpfs named ram<n>) mounted over target on c1: its
        JobMounts and the mount's message, or the error it raised as its text."""
        jm = JobMounts(n, "c1", str(R / "node"))
        ins = {"seq": seq, "do": "mount", "role": role, "target": str(target),
               "mode": mode, "client_argv": ["mount", "-t", "tmpfs", "ram" + n,
                                             "@MOUNTPOINT@"],
               "client_umount_argv": ["umount", "@MOUNTPOINT@"], "epoch": "1"}
        try:
            return jm, jm.mount(ins, Who(0, frozenset({0})), [str(pfs)])
        except Exception as e:
            return jm, f"{type(e).__name__}: {e}"
''')


def run(scenario: str) -> dict[str, Any]:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        if os.environ.get("CI") == "true":
            pytest.fail("CI: needs root and unshare(1)")
        pytest.skip("needs root and unshare(1)")
    code = PRELUDE + textwrap.dedent(scenario) + "\nprint(json.dumps(out))\n"
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", sys.executable,
                           "-c", code, str(ROOT)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


@pytest.mark.parametrize("mode", ["ro", "rw", "union"])
def test_epilog_release_never_follows_a_planted_symlink(mode: str) -> None:
    out = run(f'''
        jm = mount({mode!r})
        out["over"] = target_of(pfs / "u" / "x" / "in")
        swap()
        out["moved"] = target_of(pfs / "u" / "x.moved" / "in")
        rel = jm.release(lazy=True)
        out["ok"], out["message"] = rel.ok, rel.message
        out["sentinel"] = sentinel_ok()
        out["after"] = target_of(pfs / "u" / "x.moved" / "in")
        out["left"] = jm.entries()
    ''')
    assert out["record"]["mount"]["mnt_id"] > 0
    assert out["over"] == out["moved"].replace("x.moved", "x") == "/media/pfs/u/x/in"
    assert out["sentinel"] is True
    assert out["ok"] is True and out["left"] == []
    assert out["after"] == "/media"  # the job's mount is gone from where it was moved
    msg = out["message"]
    assert msg.startswith("refused to unmount /media/pfs/u/x/in by path (") and "\n" not in msg
    assert "symlink component (/media/pfs/u/x)" in msg
    assert "where it is now, /media/pfs/u/x.moved/in" in msg


def test_reset_release_refuses_a_moved_mount_and_keeps_the_record() -> None:
    out = run('''
        jm = mount("ro")
        swap()
        rel = jm.release(lazy=False)
        out["ok"], out["busy"], out["message"] = rel.ok, rel.busy, rel.message
        out["sentinel"] = sentinel_ok()
        out["still"] = target_of(pfs / "u" / "x.moved" / "in")
        out["left"] = [e["kind"] for e in jm.entries()]
    ''')
    assert out["ok"] is False and out["busy"] is False
    assert out["sentinel"] is True
    assert out["still"] == "/media/pfs/u/x.moved/in"  # refused: not forced
    assert out["left"] == ["client", "bind", "target"]
    assert "the RAMDISK is now at /media/pfs/u/x.moved/in" in out["message"]


def test_a_mount_moved_twice_is_still_found_by_its_id() -> None:
    out = run('''
        jm = mount("rw")
        os.rename(pfs / "u" / "x", pfs / "u" / "x.moved")
        (pfs / "u" / "real").mkdir()
        os.rename(pfs / "u" / "x.moved", pfs / "u" / "real" / "x")
        os.symlink("real", pfs / "u" / "via")
        os.rename(pfs / "u" / "via", pfs / "u" / "x")  # x -> real: a path with a symlink
        os.rename(pfs / "u" / "real", pfs / "u" / "hidden")
        os.symlink("hidden", pfs / "u" / "real")  # where the mount is now: via a symlink
        rel = jm.release(lazy=True)
        out["ok"], out["message"] = rel.ok, rel.message
        out["sentinel"] = sentinel_ok()
        out["still"] = target_of(pfs / "u" / "hidden" / "x" / "in")
    ''')
    # mountinfo names it /media/pfs/u/hidden/x/in: reachable, so detached by its id
    assert out["ok"] is True and out["still"] == "/media"
    assert "detached mount" in out["message"]


def test_normal_release_unmounts_and_a_busy_mount_is_never_forced() -> None:
    out = run('''
        jm = mount("ro")
        busy = os.open(pfs / "u" / "x" / "in", os.O_RDONLY)  # a working directory, say
        rel = jm.release(lazy=False)
        out["busy"] = [rel.ok, rel.busy, rel.message]
        out["still"] = target_of(pfs / "u" / "x" / "in")
        os.close(busy)
        rel = jm.release(lazy=False)
        out["free"] = [rel.ok, rel.message]
        out["after"] = target_of(pfs / "u" / "x" / "in")
        out["pfs"] = (pfs / "u" / "x" / "in" / "f").read_text()
        out["left"] = jm.entries()
        out["sentinel"] = sentinel_ok()
    ''')
    assert out["busy"][:2] == [False, True] and "is in use" in out["busy"][2]
    assert out["still"] == "/media/pfs/u/x/in"
    assert out["free"] == [True, "released"]
    assert out["after"] == "/media" and out["pfs"] == "pfs\n" and out["left"] == []
    assert out["sentinel"] is True


def test_a_mount_replaced_by_another_at_the_same_path_is_not_taken_for_ours() -> None:
    out = run('''
        jm = mount("rw")
        swap()
        os.mkdir(pfs / "u" / "x2")
        os.unlink(pfs / "u" / "x")
        os.rename(pfs / "u" / "x2", pfs / "u" / "x")
        (pfs / "u" / "x" / "in").mkdir()
        # another mount where ours was (say, another job's): never unmounted for ours
        subprocess.run(["mount", "-t", "tmpfs", "other", str(pfs / "u" / "x" / "in")],
                       check=True)
        rel = jm.release(lazy=True)
        out["ok"], out["message"] = rel.ok, rel.message
        out["other"] = os.path.ismount(pfs / "u" / "x" / "in")
        out["ours"] = target_of(pfs / "u" / "x.moved" / "in")
    ''')
    assert out["other"] is True
    assert out["ok"] is True and out["ours"] == "/media"
    assert "another directory or mount is there now" in out["message"]


def test_a_record_without_a_mount_id_is_undone_only_without_symlinks() -> None:
    out = run('''
        jm = mount("rw")
        entries = jm.entries()
        entries[-1].pop("mount")  # as written by a version before mount ids
        jm._save(entries)
        swap()
        rel = jm.release(lazy=True)
        out["ok"], out["message"] = rel.ok, rel.message
        out["sentinel"] = sentinel_ok()
    ''')
    assert out["sentinel"] is True
    assert out["ok"] is False and "no mount id recorded: left in place" in out["message"]


def test_mount_ids_in_mountinfo() -> None:
    from rsa_scheduler.node.handles import MountRef, mount_point, unescape

    info = ("22 1 0:21 / / rw - ext4 /dev/sda1 rw\n"
            "271 22 0:48 / /pfs/a\\040b/in ro,relatime shared:5 - tmpfs ram rw\n")
    assert mount_point(info, 271) == "/pfs/a b/in"
    assert mount_point(info, 27) is None
    assert unescape("a\\011b") == "a\tb"
    ref = MountRef(5, "0:48")
    assert MountRef.from_json(ref.to_json()) == ref
    assert MountRef.from_json({"mnt_id": "x"}) is None and MountRef.from_json(None) is None


def test_node_state_lives_only_below_directories_no_user_can_change(tmp_path: Path) -> None:
    from rsa_scheduler.node.mounts import JobMounts, MountError

    if os.geteuid() != 0:
        pytest.skip("needs root (chown)")
    base = tmp_path / "run" / "rsa" / "node"
    jm = JobMounts("7", "c1", str(base))
    jm.prepare()
    assert oct(jm.dir.stat().st_mode & 0o7777) == "0o700"
    # the node directory and the node's own are root's alone (a user listing them would
    # learn every job with RAMDISK state here); above them 0755, never the umask's say
    assert oct(base.stat().st_mode & 0o7777) == "0o700"
    assert oct((base / "c1").stat().st_mode & 0o7777) == "0o700"
    assert oct(base.parent.stat().st_mode & 0o7777) == "0o755"
    # a user-made node directory (say, world-writable, or a user's own) is refused
    other = JobMounts("8", "c2", str(base))
    (base / "c2").mkdir(mode=0o777)
    os.chmod(base / "c2", 0o777)
    with pytest.raises(MountError, match=r"c2 is not a root-only directory .*mode 0777"):
        other.prepare()
    os.chmod(base / "c2", 0o755)
    os.chown(base / "c2", 65534, 65534)
    with pytest.raises(MountError, match="owner uid 65534"):
        other.prepare()
    # the job's own directory planted as a symlink
    os.chown(base / "c2", 0, 0)
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", base / "c2" / "8")
    with pytest.raises(MountError, match="a symlink"):
        other.prepare()
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_an_older_versions_listable_node_directories_are_made_root_only(
        tmp_path: Path) -> None:
    """An upgrade: an older version left ``<node_dir>`` and ``<node_dir>/<node>`` 0755
    (any user on the node could list which jobs have RAMDISK state there). The next job's
    Prolog (prepare) and any job's guard load (ensure_root_dirs of the node directory)
    make them 0700; a parent such as /run/rsa (rsad's socket directory on its host) and
    a sticky node directory (/tmp named as one) are left as they are."""
    from rsa_scheduler.node.mounts import JobMounts, ensure_root_dirs

    if os.geteuid() != 0:
        pytest.skip("needs root (the directories are root's)")
    base = tmp_path / "run" / "rsa" / "node"
    (base / "c1" / "5").mkdir(parents=True)
    for d in (base.parent, base, base / "c1"):
        os.chmod(d, 0o755)
    os.chmod(base / "c1" / "5", 0o700)  # a running job's, left as it is
    JobMounts("7", "c1", str(base)).prepare()
    modes = {d.name: stat.S_IMODE(d.stat().st_mode)
             for d in (base.parent, base, base / "c1", base / "c1" / "5", base / "c1" / "7")}
    assert modes == {"rsa": 0o755, "node": 0o700, "c1": 0o700, "5": 0o700, "7": 0o700}
    # a plain job's Prolog makes no job directory: its guard load keeps the node
    # directory, and tightens it too
    os.chmod(base, 0o711)
    ensure_root_dirs(base, private=base)
    assert stat.S_IMODE(base.stat().st_mode) == 0o700
    shared = tmp_path / "tmp"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    ensure_root_dirs(shared / "c1", private=shared)
    assert stat.S_IMODE(shared.stat().st_mode) == 0o1777
    assert stat.S_IMODE((shared / "c1").stat().st_mode) == 0o700


def test_the_access_secret_never_reaches_the_process_table(tmp_path: Path) -> None:
    from rsa_scheduler.node.mounts import secret_to_file

    argv, files = secret_to_file(["mfsmount", "/m", "-H", "h", "-P", "1", "-o",
                                  "nosuid,mfspassword=abc123,nodev"], tmp_path)
    assert argv == ["mfsmount", "/m", "-H", "h", "-P", "1", "-o", "nosuid,nodev", "-c",
                    str(tmp_path / "mfsmount.cfg")]
    (path,) = files
    assert path.read_text() == "mfspassword=abc123\n"
    assert path.stat().st_mode & 0o777 == 0o600
    assert not any("abc123" in a for a in argv)
    only, _ = secret_to_file(["mfsmount", "/m", "-o", "mfspassword=x"], tmp_path)
    assert only == ["mfsmount", "/m", "-c", str(tmp_path / "mfsmount.cfg")]
    plain = ["mount", "-t", "tmpfs", "x", "/m"]
    assert secret_to_file(plain, tmp_path) == (plain, [])


def test_a_beegfs_secret_becomes_a_root_only_conn_auth_file_named_by_a_cfg_file(
        tmp_path: Path) -> None:
    from rsa_scheduler.node.mounts import secret_to_file

    secret = "ab" * 32
    (tmp_path / "beegfs-conn.auth").symlink_to(tmp_path / "planted")  # replaced, not used
    argv, files = secret_to_file(
        ["mount", "-t", "beegfs", "beegfs_ondemand", "/m", "-o",
         f"sysMgmtdHost=rsa01,connPortShift=1230,logLevel=3,rsaConnAuth={secret}"],
        tmp_path)
    conf, auth = tmp_path / "beegfs-client.conf", tmp_path / "beegfs-conn.auth"
    assert argv == ["mount", "-t", "beegfs", "beegfs_ondemand", "/m", "-o",
                    f"sysMgmtdHost=rsa01,connPortShift=1230,logLevel=3,cfgFile={conf}"]
    assert files == [conf, auth]
    assert auth.read_text() == secret  # byte for byte what the servers hash
    assert conf.read_text() == f"connAuthFile = {auth}\n"
    assert not auth.is_symlink() and not (tmp_path / "planted").exists()
    assert {p.stat().st_mode & 0o777 for p in files} == {0o600}
    assert not any(secret in a for a in argv)


KILLS = {  # where the Prolog dies: just after the client mount, the read-only bind, the
    # attach over the user's directory (each before its record was written, on main), or
    # just before that attach (its record written, the mount not made)
    "client": ("M", "run", True), "bind": ("M", "sys_mount", True),
    "target": ("H", "attach", True), "record": ("H", "attach", False)}


@pytest.mark.parametrize(("mode", "step"), [("ro", "client"), ("ro", "bind"),
                                             ("ro", "target"), ("rw", "target"),
                                             ("union", "target"), ("rw", "record")])
def test_a_prolog_killed_at_any_step_of_a_mount_leaves_nothing_its_epilog_misses(
        mode: str, step: str) -> None:
    """SIGKILL (the wrapper's backstop, slurmd's) at a step of a mount; then the Prolog
    of the job's next run (the same instruction) and its Epilog. Every mount made is in
    mounts.json, so the retried mount starts clean and the Epilog's release takes each
    down. On the code before, the record was written after each mount: the RAMDISK
    stayed mounted over the user's directory (or in the job's directory) after the
    Epilog."""
    where, name, after = KILLS[step]
    out = run(f'''
        import signal
        from rsa_scheduler.node import mounts as M, handles as H
        pid = os.fork()
        if pid == 0:
            mod = {where}
            real = getattr(mod, {name!r})
            def killed(*a, **k):
                if not {after}:
                    os.kill(os.getpid(), signal.SIGKILL)
                got = real(*a, **k)
                os.kill(os.getpid(), signal.SIGKILL)
                return got
            setattr(mod, {name!r}, killed)
            try:
                mount({mode!r})
            finally:
                os._exit(3)
        _, status = os.waitpid(pid, 0)
        out["killed"] = os.WIFSIGNALED(status)
        out["before"] = target_of(pfs / "u" / "x" / "in")
        jm = mount({mode!r})  # the retried Prolog: a mount of its own, really made
        out["ramdisk"] = sorted(os.listdir(pfs / "u" / "x" / "in"))
        rel = jm.release(lazy=True)
        out["ok"], out["message"] = rel.ok, rel.message
        out["after"] = target_of(pfs / "u" / "x" / "in")
        out["left"] = [str(p) for p in (jm.ramdisk, jm.ro) if os.path.ismount(p)]
        out["pfs"] = (pfs / "u" / "x" / "in" / "f").read_text()
        out["sentinel"] = sentinel_ok()
    ''')
    assert out["killed"] is True
    if step == "target":
        assert out["before"] == "/media/pfs/u/x/in"  # killed with the mount in place
    assert out["mounted"].startswith("RAMDISK mounted over /media/pfs/u/x/in")
    assert out["ramdisk"] == ([] if mode != "union" else ["f"])  # the fresh RAMDISK
    assert out["ok"] is True, out["message"]
    assert out["after"] == "/media" and out["left"] == []
    assert out["pfs"] == "pfs\n" and out["sentinel"] is True


@pytest.mark.parametrize("mode", ["ro", "rw", "union"])
def test_a_prolog_timed_out_just_after_the_attach_unwinds_the_mount_over_the_target(
        mode: str) -> None:
    """The Prolog's hard timeout (SIGALRM, raised as HookTimeout) between the attach and
    the record: the unwind takes the mount over the user's directory down too. On the
    code before, only the client mount and the bind were unwound: the job, told it uses
    the PFS, read the RAMDISK, and no Epilog ever unmounted it."""
    out = run(f'''
        from rsa_scheduler.node import handles as H
        from rsa_scheduler.node.hooks import HookTimeout
        real = H.attach
        def timed_out(*a, **k):
            real(*a, **k)
            raise HookTimeout("hard timeout of 10s")
        H.attach = timed_out
        try:
            mount({mode!r})
        except HookTimeout as e:
            out["raised"] = str(e)
        H.attach = real
        jm = JobMounts("7", "c1", str(R / "node"))
        out["after"] = target_of(pfs / "u" / "x" / "in")
        out["left"] = [str(p) for p in (jm.ramdisk, jm.ro) if os.path.ismount(p)]
        out["entries"] = jm.entries()
    ''')
    assert out["raised"] == "hard timeout of 10s"
    assert out["after"] == "/media" and out["left"] == [] and out["entries"] == []


def test_a_record_an_earlier_rsad_numbered_is_not_taken_for_the_mount_asked_now() -> None:
    """Instruction numbers restart with rsad. A requeued job's Prolog on a node where the
    earlier run's Epilog was killed (its record and mount left) is asked for mount 1 of
    the new rsad: it is not the earlier rsad's mount 1 still in place. On the code
    before, the node said "already mounted" and the job read the earlier run's RAMDISK
    (torn down after that run) instead of its own."""
    out = run('''
        jm = JobMounts("7", "c1", str(R / "node"))
        ins = {"seq": 1, "do": "mount", "role": "input", "target": str(pfs / "u" / "x" / "in"),
               "mode": "rw", "client_argv": ["mount", "-t", "tmpfs", "ram", "@MOUNTPOINT@"],
               "client_umount_argv": ["umount", "@MOUNTPOINT@"], "epoch": "1000.0"}
        jm.mount(dict(ins), Who(0, frozenset({0})), [str(pfs)])
        (pfs / "u" / "x" / "in" / "old").write_text("earlier run\\n")
        out["again"] = jm.mount(dict(ins), Who(0, frozenset({0})), [str(pfs)])  # a retry
        out["new"] = jm.mount({**ins, "epoch": "2000.0"}, Who(0, frozenset({0})), [str(pfs)])
        out["seen"] = sorted(os.listdir(pfs / "u" / "x" / "in"))
        rel = jm.release(lazy=True)
        out["ok"] = rel.ok
        out["after"] = target_of(pfs / "u" / "x" / "in")
    ''')
    assert out["again"] == "/media/pfs/u/x/in already mounted"  # the same rsad's retry
    assert out["new"] == "RAMDISK mounted over /media/pfs/u/x/in (rw)"
    assert out["seen"] == []  # the new RAMDISK, not the earlier run's
    assert out["ok"] is True and out["after"] == "/media"


def test_a_jobs_ramdisk_is_never_mounted_over_another_jobs_on_the_node() -> None:
    """Two jobs of one user on one node (cons_tres, an array's tasks) that name the same
    DATA_IN. On the code before, the second job's RAMDISK was mounted over the first's:
    the first job's tasks read the second's RAMDISK from then on, the first's Epilog
    could not unmount its own (covered: "holds another mount now", left in place), and
    once the second job ended, the first's RAMDISK, torn down meanwhile, stayed mounted
    over the user's directory on that node for good. Now the second mount is refused
    with a line that says what the second job sees there; both Epilogs leave nothing."""
    out = run('''
        target = pfs / "u" / "x" / "in"
        first, out["first"] = job_mount("7", target)
        second, out["second"] = job_mount("8", target)
        out["source"] = subprocess.run(["findmnt", "-n", "-o", "SOURCE", str(target)],
                                       capture_output=True, text=True).stdout.split()
        out["left2"] = second.entries()
        r1 = first.release(lazy=True)
        r2 = second.release(lazy=True)
        out["rel"] = [r1.ok, r1.message, r2.ok, r2.message]
        out["after"] = target_of(target)
        out["pfs"] = (target / "f").read_text()
    ''')
    assert out["first"] == "RAMDISK mounted over /media/pfs/u/x/in (ro)"
    assert out["second"] == (
        "UnsafePath: #RSA_DATA_IN=/media/pfs/u/x/in has the RAMDISK of your job 7 mounted "
        "over it on this node: one job's RAMDISK is never mounted over another's; this "
        "job sees job 7's RAMDISK there until it is unmounted (at that job's end), then "
        "the PFS (give each job a directory of its own)")
    assert out["source"] == ["ram7"] and out["left2"] == []
    assert out["rel"] == [True, "released", True, "released"]
    assert out["after"] == "/media" and out["pfs"] == "pfs\n"


def test_a_jobs_ramdisk_is_never_mounted_over_a_parent_of_another_jobs_mount() -> None:
    """Found by review: the check above looked only at the mount the target directory
    is on. A job whose DATA_OUT is a parent of another running job's DATA_IN on the node
    (``/u/x`` over ``/u/x/in``) had its RAMDISK mounted over the parent: the first job's
    tasks lost their input (``/u/x/in`` led into the second RAMDISK), its Epilog could not
    reach its own mount ("not safely reachable": left in place, with its client mount),
    and once the second job ended the first's torn-down RAMDISK stayed over ``/u/x/in``
    on that node, node-wide, for whatever ran there next. Now such a mount is refused."""
    out = run('''
        first, out["first"] = job_mount("7", pfs / "u" / "x" / "in", "input", "ro")
        second, out["second"] = job_mount("8", pfs / "u" / "x", "output", "rw")
        try:
            out["input"] = sorted(os.listdir(pfs / "u" / "x" / "in"))
        except OSError as e:
            out["input"] = str(e)
        out["left2"] = second.entries()
        r1 = first.release(lazy=True)
        r2 = second.release(lazy=True)
        out["rel"] = [r1.ok, r2.ok]
        for n in ("7", "8"):  # what a failing run left: undone, so nothing stays
            for e in reversed(JobMounts(n, "c1", str(R / "node")).entries()):
                subprocess.run(["umount", "-l", e["path"]], capture_output=True)
        out["after"] = [target_of(pfs / "u" / "x" / "in"), target_of(pfs / "u" / "x")]
    ''')
    assert out["first"] == "RAMDISK mounted over /media/pfs/u/x/in (ro)"
    assert out["input"] == [] and out["left2"] == []  # job 7 still reads its own RAMDISK
    assert out["rel"] == [True, True]
    assert out["after"] == ["/media", "/media"]
    assert out["second"] == (
        "UnsafePath: #RSA_DATA_OUT=/media/pfs/u/x has the RAMDISK of another job mounted "
        "below it on this node, over /media/pfs/u/x/in: one job's RAMDISK is never "
        "mounted over another's; give each job a directory of its own, none inside "
        "another's")


def test_a_dead_fuse_mount_at_the_target_is_refused_in_the_report_not_raised() -> None:
    """Found by review: a user's FUSE mount at DATA_IN or DATA_OUT whose daemon is gone
    (the user killed it; its mount stays) answers every stat with ENOTCONN. The path
    check read the owner with an unguarded ``fstat``, so the OSError went past
    ``execute`` (which returns a report for every node problem): the Prolog sent rsad no
    report, started no node agent and wrote no job.env (rsad waited for the node; the
    reset had no agent there), and the node agent, on DATA_OUT at the reset, died. Now it
    is a refused path, reported like any other. The FUSE mount here is a real one whose
    connection is closed (``/dev/fuse`` opened, mounted, closed)."""
    if not os.path.exists("/dev/fuse"):
        pytest.skip("needs /dev/fuse")
    out = run('''
        import ctypes
        from rsa_scheduler.node.hooks import execute
        target = pfs / "u" / "x" / "in"
        fuse = os.open("/dev/fuse", os.O_RDWR)
        rc = ctypes.CDLL(None, use_errno=True).mount(
            b"userfs", str(target).encode(), b"fuse", ctypes.c_ulong(0),
            f"fd={fuse},rootmode=40000,user_id=0,group_id=0".encode())
        assert rc == 0, ctypes.get_errno()
        os.close(fuse)  # the user's daemon is gone: ENOTCONN from now on
        jm = JobMounts("7", "c1", str(R / "node"))
        for role, mode in (("input", "ro"), ("output", "rw")):
            ins = {"seq": 1, "do": "mount", "role": role, "target": str(target),
                   "mode": mode, "client_argv": ["mount", "-t", "tmpfs", "ram",
                                                 "@MOUNTPOINT@"],
                   "client_umount_argv": ["umount", "@MOUNTPOINT@"], "epoch": "1"}
            try:
                out[role] = execute(ins, jm, Who(0, frozenset({0})), [str(pfs)])
            except Exception as e:
                out[role] = f"raised {type(e).__name__}: {e}"
        out["left"] = jm.entries()
    ''')
    for role, directive in (("input", "#RSA_DATA_IN"), ("output", "#RSA_DATA_OUT")):
        assert out[role] == {
            "seq": 1, "ok": False,
            "message": f"refused: {directive}=/media/pfs/u/x/in: cannot inspect it "
                       "(Transport endpoint is not connected)"}
    assert out["left"] == []


def test_two_prologs_at_once_never_mount_one_jobs_ramdisk_over_anothers() -> None:
    """Found by review: the check that no other job's RAMDISK is at the target ran
    before the client mount (an mfsmount: seconds), the attach after it, with nothing
    between two jobs' Prologs. Two Prologs at once on one node (an array's tasks
    starting together, one DATA_IN) both passed the check and both attached: the second
    RAMDISK covered the first, as before that check existed (the first job read the
    second's RAMDISK; its Epilog could not reach its own mount, left for good). Job 8's
    Prolog here reaches its attach just as job 7's Prolog runs whole; now the check is
    made again, under a lock on the node, with the attach and its record."""
    out = run('''
        import threading
        from rsa_scheduler.node import handles
        target = pfs / "u" / "x" / "in"
        def job(n):
            jm, out[n] = job_mount(n, target)
            return jm
        attach = handles.attach
        other = threading.Thread(target=job, args=("7",))
        def late_attach(tree, onto):
            if not other.is_alive() and "7" not in out:  # job 8's, the first attach
                other.start()
                other.join(timeout=1.5)  # job 7's Prolog, whole, meanwhile (or blocked)
            attach(tree, onto)
        handles.attach = late_attach
        second = job("8")
        other.join()
        first = JobMounts("7", "c1", str(R / "node"))
        out["source"] = subprocess.run(["findmnt", "-n", "-o", "SOURCE", str(target)],
                                       capture_output=True, text=True).stdout.split()
        r1, r2 = first.release(lazy=True), second.release(lazy=True)
        out["rel"] = [r1.ok, r1.message, r2.ok, r2.message]
        for n in ("7", "8"):  # what a failing run left: undone, so nothing stays
            for e in reversed(JobMounts(n, "c1", str(R / "node")).entries()):
                subprocess.run(["umount", "-l", e["path"]], capture_output=True)
        out["after"] = target_of(target)
    ''')
    assert out["8"] == "RAMDISK mounted over /media/pfs/u/x/in (ro)"
    assert out["source"] == ["ram8"]  # one RAMDISK there, never two stacked
    assert out["7"] == (
        "UnsafePath: #RSA_DATA_IN=/media/pfs/u/x/in has the RAMDISK of another job mounted "
        "over it on this node: one job's RAMDISK is never mounted over another's; give "
        "each job a directory of its own")
    assert out["rel"] == [True, "released", True, "released"]
    assert out["after"] == "/media"


@pytest.mark.parametrize("mode", ["ro", "rw", "union"])
def test_the_mount_over_the_target_keeps_the_client_mounts_nosuid_nodev_noexec(
        mode: str) -> None:
    """Found by review: the client mount is ``nosuid,nodev`` (moosefs.CLIENT_OPTIONS: a
    root on one compute node of a job could otherwise plant a setuid binary for the
    job's other nodes), but the read-only bind over DATA_IN was made read-only by a
    bind remount naming MS_RDONLY alone, which clears every other per-mount flag, and the
    union overlay was made with none: the default DATA_IN mount honoured setuid bits and
    device nodes. Now each keeps the client mount's ``nosuid``, ``nodev`` and ``noexec``
    (the union is ``nosuid,nodev`` whatever the client: its lower layer is the PFS
    directory, whose own mount's flags it would not keep)."""
    out = run(f'''
        jm = JobMounts("7", "c1", str(R / "node"))
        target = pfs / "u" / "x" / "in"
        ins = {{"seq": 1, "do": "mount", "role": "input", "target": str(target),
               "mode": "{mode}", "client_argv": ["mount", "-t", "tmpfs", "-o",
                                                 "nosuid,nodev,noexec", "ram",
                                                 "@MOUNTPOINT@"],
               "client_umount_argv": ["umount", "@MOUNTPOINT@"]}}
        jm.mount(ins, Who(0, frozenset({{0}})), [str(pfs)])
        out["options"] = subprocess.run(["findmnt", "-n", "-o", "VFS-OPTIONS",
                                         str(target)], capture_output=True,
                                        text=True).stdout.strip().split(",")
        out["rel"] = jm.release(lazy=True).ok
    ''')
    for flag in ("nosuid", "nodev", "noexec"):
        assert flag in out["options"], out["options"]
    assert ("ro" in out["options"]) is (mode != "rw")
    assert out["rel"] is True


def test_a_mount_over_a_parent_made_during_the_client_mount_refuses_the_attach() -> None:
    """Found by review: the directory is opened and checked first; the attach comes
    after the client mount (seconds). Another job's RAMDISK mounted meanwhile over a
    parent of it (its DATA_OUT ``/u/x`` over this job's DATA_IN ``/u/x/in``) was not seen
    by the checks made again under the node's lock (the descriptor still holds the PFS
    directory, now hidden): this job's RAMDISK was attached beneath the other's, where
    its tasks never see it and its Epilog cannot reach it (left in place). Now the path
    must still lead to the very directory checked, else the attach is refused."""
    out = run('''
        from rsa_scheduler.node import mounts
        def ins(n, target, role, mode):
            return {"seq": 1, "do": "mount", "role": role, "target": str(target),
                    "mode": mode, "client_argv": ["mount", "-t", "tmpfs", "ram" + n,
                                                  "@MOUNTPOINT@"],
                    "client_umount_argv": ["umount", "@MOUNTPOINT@"], "epoch": "1"}
        def mount(jm, i):
            try:
                return jm.mount(i, Who(0, frozenset({0})), [str(pfs)])
            except Exception as e:
                return f"{type(e).__name__}: {e}"
        first = JobMounts("7", "c1", str(R / "node"))
        second = JobMounts("8", "c1", str(R / "node"))
        client = mounts.run
        def slow_client(argv, **kw):  # job 8's client mount; job 7's Prolog meanwhile
            client(argv, **kw)
            if "ram8" in argv and "7" not in out:
                out["7"] = mount(first, ins("7", pfs / "u" / "x", "output", "rw"))
        mounts.run = slow_client
        out["8"] = mount(second, ins("8", pfs / "u" / "x" / "in", "input", "ro"))
        mounts.run = client
        r2, r1 = second.release(lazy=True), first.release(lazy=True)
        out["rel"] = [r2.ok, r1.ok]
        for n in ("7", "8"):  # what a failing run left: undone, so nothing stays
            for e in reversed(JobMounts(n, "c1", str(R / "node")).entries()):
                subprocess.run(["umount", "-l", e["path"]], capture_output=True)
        out["after"] = target_of(pfs / "u" / "x" / "in")
    ''')
    assert out["7"] == "RAMDISK mounted over /media/pfs/u/x (rw)"
    assert out["rel"] == [True, True]
    assert out["after"] == "/media"
    assert out["8"] == (
        "UnsafePath: #RSA_DATA_IN=/media/pfs/u/x/in is no longer the directory checked: "
        "it was moved, or something was mounted over it or a directory above it on this "
        "node, while its RAMDISK was being mounted")
