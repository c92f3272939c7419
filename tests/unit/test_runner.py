"""The process seam, against real processes."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil
import pytest

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
    start = time.monotonic()
    with pytest.raises(CommandError, match=r"timed out after 0\.5s") as info:
        # a grandchild that would outlive a plain kill of the child
        run(["sh", "-c", "sleep 60 & echo $! ; wait"], timeout=0.5)
    assert time.monotonic() - start < 5
    assert info.value.timed_out
    time.sleep(0.2)
    # PID 1 here does not reap orphans, so a killed grandchild may linger as a zombie.
    sleepers = [p for p in psutil.process_iter(["name", "ppid", "status"])
                if p.info["name"] == "sleep" and p.info["ppid"] == 1
                and p.info["status"] != psutil.STATUS_ZOMBIE
                and time.time() - p.create_time() < 5]
    assert sleepers == []


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


def test_unknown_user_is_a_clear_error() -> None:
    with pytest.raises(Exception, match="unknown user 'no-such-user-xyz'"):
        Identity.of("no-such-user-xyz")
