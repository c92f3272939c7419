"""Node instructions and the aggregation of per-node reports."""

from __future__ import annotations

import pytest

from rsa_scheduler.node.plan import (
    MOUNTPOINT,
    PROTOCOL,
    HookProtocols,
    aggregate,
    mount_instruction,
    protocol_of,
    release_instruction,
    substitute,
)

ARGV = ["mfsmount", MOUNTPOINT, "-H", "10.0.0.1", "-P", "9421"]


def test_mount_instruction_carries_everything_the_node_needs() -> None:
    ins = mount_instruction(3, job_id="42", user="alice", role="input",
                            target="/scratch/alice/in", mode="ro", client_argv=ARGV,
                            client_umount_argv=["umount", "-l", MOUNTPOINT])
    assert ins["seq"] == 3 and ins["do"] == "mount" and ins["mode"] == "ro"
    assert substitute(ins["client_argv"], "/run/x")[1] == "/run/x"


@pytest.mark.parametrize(("role", "mode", "target", "argv"), [
    ("input", "rwx", "/a", ARGV), ("output", "ro", "/a", ARGV), ("input", "ro", "", ARGV),
    ("input", "ro", "/a", ["mfsmount", "/fixed"]), ("other", "ro", "/a", ARGV)])
def test_bad_instructions_are_refused(role: str, mode: str, target: str,
                                      argv: list[str]) -> None:
    with pytest.raises(ValueError):
        mount_instruction(1, job_id="1", user="u", role=role, target=target, mode=mode,
                          client_argv=argv, client_umount_argv=[])


def test_release_instruction() -> None:
    assert release_instruction(5, job_id="9") == {"seq": 5, "do": "release", "job_id": "9"}


def test_pending_until_every_node_reported() -> None:
    assert aggregate(None, {}, 1).state == "pending"
    v = aggregate(["c1", "c2"], {"c1": {"seq": 1, "ok": True}}, 1)
    assert v.state == "pending" and v.missing == ("c2",)
    v = aggregate(["c1", "c2"], {"c1": {"seq": 1, "ok": True}, "c2": {"seq": 1, "ok": True}}, 1)
    assert v.state == "ok"


def test_reports_for_an_older_instruction_do_not_count() -> None:
    v = aggregate(["c1"], {"c1": {"seq": 1, "ok": True}}, 2)
    assert v.state == "pending"


def test_first_failure_decides_without_waiting_for_the_rest() -> None:
    v = aggregate(["c1", "c2"], {"c2": {"seq": 1, "ok": False, "message": "refused"}}, 1)
    assert v.state == "failed" and "c2: refused" in v.message
    v = aggregate(None, {"c2": {"seq": 1, "ok": False}}, 1)
    assert v.state == "failed"


def test_busy_when_a_node_cannot_release_and_none_failed() -> None:
    reports: dict[str, dict[str, object]] = {
        "c1": {"seq": 4, "ok": True},
        "c2": {"seq": 4, "ok": False, "busy": True, "message": "in use"}}
    v = aggregate(["c1", "c2"], reports, 4)
    assert v.state == "busy" and "c2: in use" in v.message


def test_a_request_naming_no_hook_protocol_is_of_protocol_1() -> None:
    assert protocol_of({"job_id": "7"}) == 1  # every package before the field
    assert protocol_of({"protocol": PROTOCOL}) == PROTOCOL
    assert protocol_of({"protocol": "x"}) == 1 and protocol_of({"protocol": None}) == 1


def test_a_node_behind_is_said_once_shown_until_it_speaks_ours() -> None:
    seen = HookProtocols()
    assert seen.heard("c1", "prolog", "5", PROTOCOL) is None  # up to date: nothing to say
    level, line = seen.heard("c2", "agent", "7", 1) or ("", "")
    assert level == "warning"
    assert line.startswith(f"c2: the node agent of job 7 speaks hook protocol 1, rsad "
                           f"{PROTOCOL}: its rsa-scheduler package is older than rsad's; "
                           "upgrade it on c2")
    assert "compute nodes first, rsad last" in line and "guard" in line
    # the agent polls again: said once, shown as long as it is old
    assert seen.heard("c2", "agent", "7", 1) is None
    assert seen.heard("c2", "mounted", "7", 1) is None
    assert list(seen.behind) == ["c2"] and "mount report of job 7" in seen.behind["c2"]
    assert seen.heard("c2", "epilog", "7", PROTOCOL) == (
        "info", f"c2: its node hooks speak hook protocol {PROTOCOL} now (the Epilog of "
                "job 7)")
    assert seen.behind == {}
    assert seen.heard("c2", "prolog", "8", PROTOCOL) is None
    # protocol 2 loads the guard, but takes its mount commands in the clear
    assert "secret in the clear" in (seen.heard("c3", "prolog", "9", 2) or ("", ""))[1]
