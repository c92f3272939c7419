"""The process seam, against real processes."""

from __future__ import annotations

import os
import pwd
import threading
import time
from pathlib import Path

import psutil
import pytest

from rsa_scheduler.hosts import Cancelled, CancelToken, LocalHost
from rsa_scheduler.runner import CommandError, Identity, run


def test_runs_argv_without_a_shell() -> None:
    done = run(["echo", "$HOME", ";", "ls"], timeout=5)
    assert done.stdout == "$HOME ; ls\n" and done.returncode == 0


def test_failure_carries_argv_code_and_stderr_tail() -> None:
    with pytest.raises(CommandError) as info:
        run(["sh", "-c", "echo first >&2; echo 'the real reason' >&2; exit 3"], timeout=5)
    err = info.value
    assert err.returncode == 3 and err.argv[0] == "sh"
    assert "exit 3: the real reason" in str(err)


def test_unchecked_failure_returns() -> None:
    assert run(["false"], timeout=5, check=False).returncode == 1


def test_timeout_kills_the_whole_process_group() -> None:
    # the grandchild's own argv names it: any other orphaned sleep on the machine (another
    # test's, the lab's) is not ours, however recent
    marker = f"sleep 61.{os.getpid()}"
    start = time.monotonic()
    with pytest.raises(CommandError, match=r"timed out after 0\.5s") as info:
        # a grandchild that would outlive a plain kill of the child
        run(["sh", "-c", f"{marker} & echo $! ; wait"], timeout=0.5)
    assert time.monotonic() - start < 5
    assert info.value.timed_out
    # PID 1 here does not reap orphans, so a killed grandchild may linger as a zombie.
    gone_within(marker)


def gone_within(marker: str, timeout: float = 10.0) -> None:
    """Every process with ``marker`` in its command line dies (is a zombie or gone) within
    ``timeout``: a SIGKILLed process on a loaded machine takes a moment to exit; one the
    kill missed (a 60 s sleep) is still there at the deadline."""
    end = time.monotonic() + timeout
    while sleepers_of(marker):
        assert time.monotonic() < end, f"still running: {sleepers_of(marker)}"
        time.sleep(0.02)


def test_missing_program_is_a_command_error() -> None:
    with pytest.raises(CommandError, match="cannot execute"):
        run(["/nonexistent/prog"], timeout=5)


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
def test_runs_as_another_user_with_clean_env() -> None:
    nobody = Identity.of("nobody")
    done = run(["sh", "-c", "id -u; id -g; umask; echo ${RSA_SECRET:-unset}"], timeout=5,
               as_user=nobody, env=nobody.env())
    uid, gid, umask, secret = done.stdout.split()
    assert (int(uid), int(gid)) == (nobody.uid, nobody.gid)
    assert umask == "0077" and secret == "unset"


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
def test_user_cannot_read_root_only_file(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("root only")
    secret.chmod(0o600)
    tmp_path.chmod(0o755)
    with pytest.raises(CommandError, match="Permission denied"):
        run(["cat", str(secret)], timeout=5, as_user=Identity.of("nobody"))


def test_groups_are_the_users_as_initgroups_gives_them_not_what_a_directory_enumerates(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Under SSSD without enumeration (its default) ``getent group`` lists no directory
    group, so grp.getgrall() misses the user's project groups; getgrouplist asks each NSS
    source for the user, as initgroups does at login. Here: no group is enumerated at all,
    and the user's own lookup says 4242, a project group of the directory's."""
    import grp

    nobody = pwd.getpwnam("nobody")
    monkeypatch.setattr(grp, "getgrall", lambda: [])
    monkeypatch.setattr(os, "getgrouplist", lambda user, gid: [gid, 4242]
                        if user == "nobody" else [gid])
    assert Identity.of("nobody").groups == tuple(sorted({nobody.pw_gid, 4242}))


def test_unknown_user_is_a_clear_error() -> None:
    with pytest.raises(Exception, match="unknown user 'no-such-user-xyz'"):
        Identity.of("no-such-user-xyz")


# ---- stopping a running command: run(stopped=...), LocalHost and CancelToken ---------

def sleepers_of(marker: str) -> list[psutil.Process]:
    """Live (not zombie) processes whose command line holds ``marker``."""
    return [p for p in psutil.process_iter(["cmdline", "status"])
            if marker in " ".join(p.info["cmdline"] or ())
            and p.info["status"] != psutil.STATUS_ZOMBIE]


def test_a_stopped_command_is_killed_with_its_process_group_at_once() -> None:
    marker = f"62.{os.getpid()}"  # in the grandchild sleep's own argv too
    start = time.monotonic()
    with pytest.raises(CommandError, match="stopped before it ended") as info:
        run(["sh", "-c", f"sleep {marker} & wait"], timeout=60,
            stopped=lambda: time.monotonic() - start > 0.3)
    assert time.monotonic() - start < 5
    assert info.value.stopped and not info.value.timed_out
    gone_within(marker)


def test_a_command_that_is_never_stopped_keeps_its_output_and_its_input() -> None:
    done = run(["sh", "-c", "sleep 0.35; cat; echo end"], timeout=10, input="in\n",
               stopped=lambda: False)
    assert done.stdout == "in\nend\n"
    with pytest.raises(CommandError, match=r"timed out after 0\.3s"):
        run(["sleep", "60"], timeout=0.3, stopped=lambda: False)


def test_a_child_token_is_cancelled_with_its_parent_never_the_other_way() -> None:
    parent = CancelToken()
    child, other = parent.child(), parent.child()
    child.cancel("copy stopped")
    assert child.cancelled and not parent.cancelled and not other.cancelled
    parent.cancel("superseded")
    assert other.cancelled and other.reason == "superseded"
    late = parent.child()  # made after the cancel: cancelled at once
    assert late.cancelled and late.reason == "superseded"
    grandchild = CancelToken()
    g = grandchild.child().child()
    grandchild.cancel("rsad stopping")
    assert g.cancelled and g.reason == "rsad stopping"


def test_localhost_kills_a_running_command_when_its_token_is_cancelled() -> None:
    """The Host contract (hosts.Host.run): a cancel kills the command, not only the next."""
    marker = f"63.{os.getpid()}"  # in the grandchild sleep's own argv too
    token = CancelToken()

    def cancel_once_it_runs() -> None:  # not after a fixed 0.3 s: on a loaded machine
        deadline = time.monotonic() + 30  # the command may not have started by then
        while not sleepers_of(marker) and time.monotonic() < deadline:
            time.sleep(0.01)
        token.cancel("demoted")

    threading.Thread(target=cancel_once_it_runs, daemon=True).start()
    start = time.monotonic()
    with pytest.raises(Cancelled, match=r"rsa1: sh -c .*: demoted"):
        LocalHost("rsa1").run(["sh", "-c", f"sleep {marker}"], timeout=60,
                              cancel=token)
    assert time.monotonic() - start < 5
    gone_within(marker)


def test_a_slow_reader_gets_all_its_input_when_the_caller_may_stop_it() -> None:
    """Input larger than a pipe, read by a child that starts late: each look at
    ``stopped`` must go on writing it (and close stdin), or the child waits for ever."""
    data = "x" * (1 << 20) + "\n"
    done = run(["sh", "-c", "sleep 0.5; wc -c"], timeout=30, input=data,
               stopped=lambda: False)
    assert done.stdout.strip() == str(len(data))
