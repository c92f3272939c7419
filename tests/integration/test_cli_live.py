"""The `rsa` commands against the lab's live rsad, as root and as the lab users."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping

from tests.integration.conftest import as_user


def rsa(lab: Mapping[str, str], *args: str, user: str = "root") -> subprocess.CompletedProcess[str]:
    argv = [f"{lab['RSA_LAB_VENV']}/bin/rsa", *args]
    if user == "root":
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    return as_user(lab, user, argv, timeout=60)


def test_read_commands_work_for_root_and_users(lab: Mapping[str, str]) -> None:
    for user in ("root", lab["RSA_LAB_USER"]):
        for args in (("status", "--json"), ("nodes", "--json"), ("jobs", "--json")):
            out = rsa(lab, *args, user=user)
            assert out.returncode == 0, (user, args, out.stderr)
            json.loads(out.stdout)
        ev = rsa(lab, "events", "--json", "--since", "0", user=user)
        assert ev.returncode == 0, ev.stderr
        for line in ev.stdout.splitlines()[-50:]:
            json.loads(line)
    names = {n["name"] for n in json.loads(rsa(lab, "nodes", "--json").stdout)["nodes"]}
    assert names == {"rsa1", "rsa2", "rsa3", "rsa4"}
    assert "RSA nodes:" in rsa(lab, "status").stdout


def test_drain_and_resume_are_operator_actions(lab: Mapping[str, str]) -> None:
    refused = rsa(lab, "drain", "rsa4", user=lab["RSA_LAB_USER"])
    assert refused.returncode == 1 and "only root or SlurmUser may drain nodes" in refused.stderr
    assert rsa(lab, "drain", "rsa4").returncode == 0
    try:
        nodes = json.loads(rsa(lab, "nodes", "--json").stdout)["nodes"]
        assert {n["name"]: n["state"] for n in nodes}["rsa4"] == "drained"
    finally:
        assert rsa(lab, "resume", "rsa4").returncode == 0
    nodes = json.loads(rsa(lab, "nodes", "--json").stdout)["nodes"]
    assert {n["name"]: n["state"] for n in nodes}["rsa4"] == "up"


def test_commands_on_unknown_jobs_fail_with_one_line(lab: Mapping[str, str]) -> None:
    user = lab["RSA_LAB_USER"]
    for args, message in ((("retry", "999999"), f"retry is not allowed for {user}"),
                          (("cancel-staging", "999999"), "job 999999 is not tracked by the RSA"),
                          (("release", "999999", "--yes"), "job 999999 is not tracked by the RSA"),
                          (("job", "999999"), "job 999999 is not tracked by the RSA")):
        out = rsa(lab, *args, user=user)
        assert out.returncode == 1
        assert out.stderr.strip().splitlines() == [f"rsa: error: {message}"], out.stderr
