"""staging.report.classify: one true, actionable line from a failed node command."""

from __future__ import annotations

from rsa_scheduler.runner import CommandError
from rsa_scheduler.staging.report import EXIT_ROOT, classify


def err(rc: int | None, stderr: str, timeout: float | None = None) -> CommandError:
    return CommandError(["bash", "-c", "x"], rc, stderr, timeout=timeout)


def test_a_filesystem_that_stopped_answering_is_said_so_not_blamed_on_the_user() -> None:
    """Seen in the lab: a RAMDISK whose master had died; `cd` into it gave EIO and exit 66,
    which read 'directory missing or not accessible as the job's user'."""
    e = classify(err(EXIT_ROOT, "bash: line 1: cd: /run/rsa/mnt/job10-c1: Input/output "
                                "error\n"), "stage-out: scanning the RAMDISK", "rsa2")
    assert not e.permanent and e.node == "rsa2"
    assert str(e) == ("stage-out: scanning the RAMDISK on rsa2: the filesystem does not "
                      "answer (Input/output error): bash: line 1: cd: /run/rsa/mnt/job10-c1: "
                      "Input/output error; one of its servers may have failed; will retry")
    assert "not accessible" not in str(e)
    e = classify(err(1, "ls: cannot access 'x': Transport endpoint is not connected"),
                 "verify", "rsa1")
    assert "does not answer (Transport endpoint is not connected)" in str(e)


def test_the_other_classes() -> None:
    assert classify(err(EXIT_ROOT, "cd: /pfs/in: No such file or directory"), "scan",
                    "rsa1").permanent
    denied = classify(err(1, "tar: x: Cannot open: Permission denied"), "copy", "rsa1")
    assert denied.permanent and "permission denied" in str(denied)
    assert not classify(err(1, "boom"), "copy", "rsa1").permanent
    timed = classify(err(None, "", timeout=5.0), "copy", "rsa1")
    assert "timed out" in str(timed) and not timed.permanent


def test_a_copy_killed_from_outside_is_said_so_never_did_not_exit_normally_success() -> None:
    """Seen in the lab (issue 33): a second rsad's fence killed a live rsad's copies, and
    the stage-out failed with what setsid says of a child killed by a signal."""
    e = classify(err(9, "setsid: child 23604 did not exit normally: Success\n"),
                 "stage-out", "rsa3")
    assert not e.permanent and e.node == "rsa3"
    assert str(e) == ("stage-out on rsa3 was killed by SIGKILL (not by this rsad's timeout "
                      "or cancel: by the job's teardown or cancel, a starting rsad fencing "
                      "the node, an operator, or the kernel's OOM killer); will retry")
    assert "did not exit normally" not in str(err(15, "setsid: child 1 did not exit "
                                                      "normally: Success"))


def test_a_real_setsid_wrapped_command_killed_by_a_signal() -> None:
    from rsa_scheduler.runner import run

    try:
        run(["setsid", "-w", "sh", "-c", "kill -TERM $$"], timeout=30)
    except CommandError as e:
        assert "killed by SIGTERM (not by this rsad's timeout or cancel" in str(e), str(e)
    else:
        raise AssertionError("the killed command did not fail")
