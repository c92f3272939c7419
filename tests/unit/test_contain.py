"""Containment of user processes on an RSA node: the programs run for real on this host
(as root, in its cgroup v2 hierarchy) through LocalHost, the same wrapper SshHost sends."""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest

from rsa_scheduler.contain import (
    REAPED_BEFORE,
    TOMBS,
    check_scope,
    contain_argv,
    fence_argv,
    issued_now,
    kill_leaf_argv,
    parse_fenced,
    parse_reaped,
    reap_argv,
)
from rsa_scheduler.hosts import LocalHost
from rsa_scheduler.remote import remote_argv
from rsa_scheduler.runner import CommandError, Identity


def cgroup2_root() -> Path | None:
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        if right.split()[0] == "cgroup2":
            return Path(left.split()[4])
    return None


CG = cgroup2_root()
needs_cgroup = pytest.mark.skipif(
    os.geteuid() != 0 or CG is None or not os.access(CG, os.W_OK),
    reason="needs root and a writable cgroup v2 hierarchy")


def lab_is_running() -> bool:
    """True when the local Slurm lab's rsad is alive: its RSA nodes share this host's
    cgroup tree, so a real FENCE here would kill the lab's staging commands too; or when
    a lab/sandbox runs in a PID namespace below ours: FENCE's environment-tag sweep
    (for nodes without cgroups) sees its processes too. (Inside a sandbox its own PID 1
    carries the mark, in our PID namespace: that is not another lab.)"""
    pid_file = Path("/run/rsa-lab/pids/rsad.pid")
    try:
        pid = int(pid_file.read_text().split()[0])
        if Path(f"/proc/{pid}").exists():
            return True
    except (OSError, ValueError, IndexError):
        pass
    ours = os.readlink("/proc/self/ns/pid")
    for d in Path("/proc").iterdir():
        try:
            if (d.name.isdigit() and os.readlink(d / "ns" / "pid") != ours
                    and b"RSA_SANDBOX=" in (d / "environ").read_bytes()):
                return True
        except OSError:
            continue
    return False


@pytest.mark.parametrize("scope", ["", "../x", "a/b", "1 2", "-1", "x" * 65, "1..2"])
def test_a_scope_that_is_not_a_job_id_is_refused(scope: str) -> None:
    with pytest.raises(ValueError, match="bad containment scope"):
        check_scope(scope)


@pytest.mark.parametrize("scope", ["123", "123_4", "123+1", "abc.1"])
def test_job_ids_are_scopes(scope: str) -> None:
    assert check_scope(scope) == scope
    assert reap_argv(scope, 5)[-2:] == [scope, "5"]
    assert kill_leaf_argv(scope, 7)[-2:] == [scope, "7"]


def test_a_scoped_remote_command_joins_the_cgroup_before_dropping_to_the_user() -> None:
    ident = Identity("alice", 1000, 1000, (1000, 20), "/home/alice", scope="42")
    argv = remote_argv(["true"], as_user=ident, issued=7)
    assert argv[:4] == ["setsid", "-w", "sh", "-c"] and "rsa.jobs" in argv[4]
    # umask, job, its private tmpfs, when rsad issued it (a later REAP keeps it from running)
    assert argv[5:9] == ["077", "42", str(1 << 30), "7"]
    assert argv[9:13] == ["setpriv", "--reuid=1000", "--regid=1000", "--groups=1000,20"]
    assert "RSA_SCOPE=42" in argv
    plain = remote_argv(["true"], as_user=replace(ident, scope=""))
    assert "rsa.jobs" not in plain[4] and "RSA_SCOPE=42" not in plain


def test_reap_output_is_parsed_and_its_absence_is_an_error() -> None:
    assert parse_reaped("noise\nRSA-REAPED 3 cgroup 0\n") == (3, "cgroup", 0)
    with pytest.raises(ValueError):
        parse_reaped("")


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _wait_gone(pid: int, timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def _wait_running_as(pid: int, uid: int, comm: str, timeout: float = 30.0) -> None:
    """Until ``pid`` has exec'd ``comm`` as ``uid``: setpriv is root's until it switched
    and exec'd (/proc/PID stays root's until the exec), and REAP and FENCE never signal
    root's processes; a fixed wait lost that race on a loaded machine."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if (Path(f"/proc/{pid}").stat().st_uid == uid
                    and Path(f"/proc/{pid}/comm").read_text().strip() == comm):
                return
        except OSError:
            pass
        time.sleep(0.01)
    raise AssertionError(f"process {pid} is not {comm} as uid {uid} after {timeout}s")


SCOPE = f"9{os.getpid()}"
USER = replace(Identity.of("nobody"), scope=SCOPE)


@needs_cgroup
def test_a_daemon_a_command_leaves_behind_is_killed_when_it_ends() -> None:
    host = LocalHost()
    done = host.run(["sh", "-c", "setsid sleep 3001 </dev/null >/dev/null 2>&1 & "
                     "echo $!; id -u"], timeout=20, as_user=USER)
    pid_s, uid = done.stdout.split()
    assert uid == "65534" and done.argv[:2] == ("sh", "-c")  # ran as the user, argv shown
    assert _wait_gone(int(pid_s)), "the setsid daemon outlived its command"
    assert CG is not None and not list((CG / "rsa.jobs" / SCOPE).glob("p*"))
    reaped = host.run(reap_argv(SCOPE, issued_now()), timeout=20).stdout
    assert reaped.startswith("RSA-REAPED 0 cgroup")


@needs_cgroup
def test_exit_status_and_errors_are_the_commands_own() -> None:
    host = LocalHost()
    assert host.run(["sh", "-c", "exit 3"], timeout=20, as_user=USER,
                    check=False).returncode == 3
    with pytest.raises(CommandError, match=r"^false: exit 1"):
        host.run(["false"], timeout=20, as_user=USER)
    host.run(reap_argv(SCOPE, issued_now()), timeout=20)


@needs_cgroup
def test_reap_kills_what_a_killed_command_left_in_the_jobs_cgroup() -> None:
    assert CG is not None
    leaf = CG / "rsa.jobs" / SCOPE / "p1"
    leaf.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                             "sleep", "3002"], start_new_session=True)
    try:
        (leaf / "cgroup.procs").write_text(str(proc.pid))
        done = LocalHost().run(reap_argv(SCOPE, issued_now()), timeout=30)
        assert parse_reaped(done.stdout) == (1, "cgroup", 0)
        assert proc.wait(5) == -9
        assert not (CG / "rsa.jobs" / SCOPE).exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)


def test_without_a_cgroup_reap_kills_the_tagged_processes_of_users_only() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    scope = f"8{os.getpid()}"
    env = {"PATH": "/usr/bin:/bin", "RSA_SCOPE": scope}
    user = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                             "sleep", "3003"], env=env, start_new_session=True)
    mine = subprocess.Popen(["sleep", "3004"], env=env, start_new_session=True)
    try:
        _wait_running_as(user.pid, 65534, "sleep")
        _wait_running_as(mine.pid, 0, "sleep")
        done = LocalHost().run(reap_argv(scope, issued_now()), timeout=60)
        assert parse_reaped(done.stdout) == (1, "environment", 0)
        assert user.wait(5) == -9
        assert mine.poll() is None  # root's own processes are never signalled
    finally:
        for p in (user, mine):
            if p.poll() is None:
                p.kill()
                p.wait(5)


@needs_cgroup
def test_fence_kills_every_leftover_command_of_every_job_and_keeps_root_processes() -> None:
    assert CG is not None
    if lab_is_running():
        pytest.fail("a lab is up (make lab-up, or a lab/sandbox): a real FENCE on this host "
                    "would kill its staging commands; run the unit tests with the labs down "
                    "or in a sandbox of their own (lab/sandbox unit .venv/bin/pytest ...)")
    leaves = [CG / "rsa.jobs" / f"7{os.getpid()}" / "p1", CG / "rsa.jobs" / SCOPE / "p2"]
    procs = []
    root_tagged = subprocess.Popen(["sleep", "3005"], start_new_session=True,
                                   env={"PATH": "/usr/bin:/bin", "RSA_SCOPE": SCOPE})
    try:
        for leaf in leaves:
            leaf.mkdir(parents=True, exist_ok=True)
            p = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534",
                                  "--clear-groups", "sleep", "3006"], start_new_session=True)
            (leaf / "cgroup.procs").write_text(str(p.pid))
            procs.append(p)
        # a node without cgroups: only the tag marks the command
        procs.append(subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534",
                                       "--clear-groups", "sleep", "3007"],
                                      start_new_session=True,
                                      env={"PATH": "/usr/bin:/bin", "RSA_SCOPE": "5"}))
        for p in procs:
            _wait_running_as(p.pid, 65534, "sleep")
        _wait_running_as(root_tagged.pid, 0, "sleep")
        before = issued_now()
        done = LocalHost().run(fence_argv(issued_now()), timeout=60)
        assert parse_fenced(done.stdout) == 3
        # a command an earlier rsad issued before the fence never runs after it
        late = LocalHost().run(contain_argv(SCOPE, "077", _as_nobody("echo RAN"),
                                            issued=before), timeout=20, check=False)
        assert late.returncode == 125 and "RAN" not in late.stdout, late
        assert ".all" in late.stderr
        assert [p.wait(5) for p in procs] == [-9, -9, -9]
        assert root_tagged.poll() is None
        assert not any(leaf.exists() for leaf in leaves)
        assert (CG / "rsa.jobs" / SCOPE).is_dir()  # the job's own cgroup stays for REAP
    finally:
        for p in [*procs, root_tagged]:
            if p.poll() is None:
                p.kill()
                p.wait(5)
        for leaf in leaves:
            for d in (leaf, leaf.parent):
                if d.exists():
                    d.rmdir()


def _shm_ids() -> set[str]:
    """The ids of this IPC namespace's SysV shared memory segments of uid 65534."""
    out = subprocess.run(["ipcs", "-m"], capture_output=True, text=True, check=True).stdout
    return {f[1] for f in (line.split() for line in out.splitlines())
            if len(f) > 2 and f[0].startswith("0x") and f[2] == "nobody"}


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mount namespaces)")


@needs_root
def test_what_a_command_writes_in_tmp_var_tmp_and_dev_shm_is_its_own_and_goes_with_it(
        ) -> None:
    """The attack of docs/security.md "Leftovers on RSA nodes": files and SysV shared
    memory a PREPROCESS leaves outside the RAMDISK. Each name is unique to this run."""
    tag = f"rsa-leftover-{os.getpid()}-{time.monotonic_ns()}"
    places = [Path("/tmp"), Path("/var/tmp"), Path("/dev/shm")]
    before = _shm_ids()
    script = (f"for d in /tmp /var/tmp /dev/shm; do echo x > $d/{tag} || exit 7; done; "
              "ipcmk -M 65536 >/dev/null || exit 8; id -u; "
              "stat -c '%a %u' /tmp /var/tmp /dev/shm; "
              # the user cannot take its private /tmp away to reach the node's
              "umount /tmp 2>/dev/null && echo UNMOUNTED; "
              "df -B1 --output=size /dev/shm | tail -1")
    try:
        done = LocalHost().run(["sh", "-c", script], timeout=30, as_user=USER)
        lines = done.stdout.split("\n")
        assert lines[0] == "65534"  # the user's uid, never root
        assert lines[1:4] == ["1777 0"] * 3
        assert "UNMOUNTED" not in done.stdout
        assert int(lines[4]) <= 1 << 30
        for d in places:
            assert not (d / tag).exists(), f"{d / tag} reached the node's {d}"
        left = _shm_ids() - before
        assert not left, f"shared memory {left} outlived the command"
    finally:
        for d in places:
            (d / tag).unlink(missing_ok=True)
        for shmid in _shm_ids() - before:  # only what this test's command made
            subprocess.run(["ipcrm", "-m", shmid], check=False)
        LocalHost().run(reap_argv(SCOPE, issued_now()), timeout=20, check=False)


@needs_root
def test_a_command_cannot_fill_the_nodes_memory_through_its_private_tmp() -> None:
    done = LocalHost().run(["sh", "-c", "fallocate -l 3G /dev/shm/big; echo rc=$?; "
                            "fallocate -l 3G /var/tmp/big; echo rc=$?"],
                           timeout=60, as_user=USER, check=False)
    assert done.stdout.split() == ["rc=1", "rc=1"], done.stdout + done.stderr
    try:
        assert not Path("/dev/shm/big").exists() and not Path("/var/tmp/big").exists()
    finally:  # on a node without the private directories: remove what the test made
        for path in (Path("/dev/shm/big"), Path("/var/tmp/big")):
            if path.exists() and path.stat().st_uid == 65534:
                path.unlink()
        LocalHost().run(reap_argv(SCOPE, issued_now()), timeout=20, check=False)


def test_the_private_set_up_is_roots_and_happens_before_the_switch_to_the_user() -> None:
    ident = Identity("alice", 1000, 1000, (1000, 20), "/home/alice", scope="42")
    argv = remote_argv(["true"], as_user=ident)
    program = argv[4]
    assert program.index("unshare --mount --ipc") < len(program)
    # setpriv comes after the program (as its "$@"): the mounts are made before it runs
    assert argv.index("setpriv") > 4
    assert '"size=$z"' in program and "/var/tmp" in program and "/dev/shm" in program
    sized = remote_argv(["true"], as_user=replace(ident, private_tmp=64 << 20))
    assert sized[7] == str(64 << 20)
    with pytest.raises(ValueError, match="at least 1M"):
        remote_argv(["true"], as_user=replace(ident, private_tmp=4096))


@needs_root
def test_the_private_tmpfs_has_the_configured_size() -> None:
    done = LocalHost().run(["df", "-B1", "--output=size", "/tmp", "/var/tmp", "/dev/shm"],
                           timeout=30, as_user=replace(USER, private_tmp=16 << 20))
    assert done.stdout.split()[1:] == [str(16 << 20)] * 3
    LocalHost().run(reap_argv(SCOPE, issued_now()), timeout=20, check=False)


def _as_nobody(script: str) -> list[str]:
    return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sh", "-c", script]


@needs_cgroup
def test_a_command_issued_before_its_jobs_reap_never_runs_and_a_later_one_does() -> None:
    """A command still in CONTAIN's root prelude when its job was reaped (before it made
    the job's cgroup, or while still root's, which the fallback spares) ran the user's
    command after the reap, beside the retry (a copy of a lost staging worker). REAP
    leaves a tombstone with rsad's time; a command issued before it stops before it runs
    anything as the user, one issued after runs."""
    scope = f"8{os.getpid()}"
    host = LocalHost()
    try:
        before = issued_now()
        host.run(reap_argv(scope, issued_now()), timeout=20)
        late = host.run(contain_argv(scope, "077", _as_nobody("echo RAN"), issued=before),
                        timeout=20, check=False)
        assert late.returncode == 125 and "RAN" not in late.stdout
        assert REAPED_BEFORE in late.stderr and f"job {scope}" in late.stderr
        assert CG is not None and not list((CG / "rsa.jobs" / scope).glob("p*"))  # no leaf
        retry = host.run(contain_argv(scope, "077", _as_nobody("echo RAN"),
                                      issued=issued_now()), timeout=20)
        assert "RAN" in retry.stdout
    finally:
        host.run(reap_argv(scope, issued_now()), timeout=20, check=False)
        Path(TOMBS, scope).unlink(missing_ok=True)


@needs_cgroup
def test_a_command_that_joined_the_cgroup_before_the_reap_is_killed_by_it() -> None:
    """The other order: the command's prelude read no tombstone and it runs in the job's
    cgroup: the REAP that writes the tombstone after it kills it there."""
    scope = f"7{os.getpid()}"
    host = LocalHost()
    proc = subprocess.Popen(contain_argv(scope, "077", _as_nobody("exec sleep 3003"),
                                         issued=issued_now()), start_new_session=True)
    try:
        assert CG is not None
        _wait_cgroup_pid(CG / "rsa.jobs" / scope)
        done = host.run(reap_argv(scope, issued_now()), timeout=30)
        assert parse_reaped(done.stdout)[0] >= 1
        assert proc.wait(10) != 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        Path(TOMBS, scope).unlink(missing_ok=True)


def _wait_cgroup_pid(job_cg: Path, timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if any(p.read_text().strip() for p in job_cg.glob("p*/cgroup.procs")):
            return
        time.sleep(0.02)
    raise AssertionError(f"no process in {job_cg} after {timeout}s")
