"""What another user gets from rsad (issue 36), tried for real against the lab's rsad as
the second lab user (rsaother), in both modes (``make lab-test``, ``make lab-test-native``):

- rsad's reply credential (``X-RSA-Munge-Reply``, root's MUNGE credential) goes with
  every answer to an authenticated caller, and only that caller's uid can decode it
  (root cannot decode a user's, nor that user root's): an unauthenticated request's
  answer carries none;
- while rsauser's job holds RSA nodes, and a node's reason names that job, no read
  endpoint (status, nodes, jobs, events), and in native mode no
  ``scontrol show bbstat``, names it to rsaother. The job itself reads its input from
  its RAMDISK: the node Prolog (root) took rsad's answers, signed for root only.

On the cluster lab rsaother asks the TCP API from the login node, the socket on rsad's
host (tests/security/where.py).
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import input_area, lab_mode
from tests.integration.conftest import LAB_ENV, as_user, read_lab_env
from tests.integration.slurmkit import make_jobs, root, wait_for
from tests.integration.test_rsad_staging import wait_state
from tests.security import reply
from tests.security.where import SOCK, api_tcp, node_for, posts, run_as, script_argv

#: rsad's TCP API (the cluster lab's on its host's address; the params need it at import)
TCP = api_tcp(read_lab_env() if LAB_ENV.exists() else {})
REPLY = Path(reply.__file__).resolve()
ROOT_DIR = str(REPLY.parents[2])


def ask(lab: Mapping[str, str], user: str, address: str, method: str, path: str,
        auth: str) -> dict[str, Any]:
    """One raw request to rsad as ``user`` (tests/security/reply.py), from where that
    user reaches ``address``."""
    node = node_for(address)
    argv, text = script_argv(lab, REPLY, node, address, method, path, auth)
    if node is None:  # this checkout's rsa_scheduler; another node's Python has its own
        argv = ["env", f"PYTHONPATH={ROOT_DIR}", *argv]
    out = run_as(lab, user, argv, node=node, input=text)
    assert out.returncode == 0, out.stderr
    got: dict[str, Any] = json.loads(out.stdout.splitlines()[-1])
    return got


def unmunge(lab: Mapping[str, str], user: str, credential: str,
            node: str | None = None) -> str:
    """What ``unmunge`` says of ``credential`` when ``user`` decodes it on ``node`` (its
    metadata; the payload, binary, is dropped)."""
    argv = ["sh", "-c", 'printf "%s" "$1" | unmunge -o /dev/null', "sh", credential]
    if user == "root" and node is None:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False,
                             cwd="/")
    else:
        out = run_as(lab, user, argv, node=node)
    return out.stdout + out.stderr


@pytest.mark.parametrize("address", [SOCK, TCP])
def test_rsad_signs_every_answer_to_a_caller_for_that_caller_only(
        lab: Mapping[str, str], address: str) -> None:
    """Before issue 36: every answer, a 401 to a request without any credential included,
    carried a root credential anyone could decode (``unmunge`` said UID root, TTL 300).
    Before 2026-11-29: only operators' answers were signed, and a user's rsa believed any
    answer (tests/security/test_squatter.py)."""
    other = lab["RSA_LAB_OTHER_USER"]
    for method, path, auth in [("GET", "/v1/status", "none"),  # no credential at all
                               ("GET", "/v1/status", "bad")]:  # one munged rejects
        got = ask(lab, other, address, method, path, auth)
        assert got["status"] == 401 and got["reply"] is None, (method, path, auth, got)
    for method, path, status in [("POST", "/v1/hooks/prolog", 403),  # hooks are root's
                                 ("GET", "/v1/whoami", 200)]:  # a plain user's answer
        got = ask(lab, other, address, method, path, "munge")
        assert got["status"] == status and got["reply"], (method, path, got)
        assert "Unauthorized credential" in unmunge(lab, "root", got["reply"])
        said = unmunge(lab, other, got["reply"], node_for(address))
        assert re.search(r"STATUS:\s+Success", said) and re.search(r"UID:\s+root \(0\)", said)
        assert re.search(rf"UID_RESTRICTION:\s+{other} ", said), said
    # root (the node hooks): signed, and only root can decode it
    got = ask(lab, "root", address, "GET", "/v1/whoami", "munge")
    assert got["status"] == 200 and got["reply"], got
    assert "Unauthorized credential" in unmunge(lab, other, got["reply"], node_for(address))
    said = unmunge(lab, "root", got["reply"])
    assert re.search(r"STATUS:\s+Success", said) and re.search(r"UID:\s+root \(0\)", said)
    assert re.search(r"UID_RESTRICTION:\s+root \(0\)", said), said


def texts(data: Any) -> list[str]:
    """Every string in a JSON value, keys included (job ids are strings in rsad's API:
    a number such as a count is not a job id)."""
    if isinstance(data, dict):
        return [s for k, v in data.items() for s in [str(k), *texts(v)]]
    if isinstance(data, list):
        return [s for v in data for s in texts(v)]
    return [data] if isinstance(data, str) else []


def test_another_users_job_is_named_nowhere_even_in_a_nodes_reason(
        lab: Mapping[str, str]) -> None:
    user, other = lab["RSA_LAB_USER"], lab["RSA_LAB_OTHER_USER"]
    rsa = f"{lab['RSA_LAB_VENV']}/bin/rsa"
    with input_area(lab, "visibility") as area, make_jobs(lab) as jobs:
        job = jobs.submit(script=f"""#!/bin/bash
#SBATCH -t 5
#RSA_DATA_IN={area}/in
#RSA_DATA_OUT={area}/out
findmnt -n -o TARGET --target {area}/in > {area}/res/inmnt
for i in $(seq 1 240); do [ -e {area}/res/go ] && break; sleep 0.5; done
""")
        inmnt = area / "res" / "inmnt"
        wait_for("the job running", inmnt.exists, timeout=240, every=0.5)
        # the node Prolog mounted the RAMDISK on what rsad answered (signed for root)
        assert inmnt.read_text().strip() == f"{area}/in"
        status = json.loads(root(lab, rsa, "status", "--json"))
        held = [n["name"] for n in status["nodes"] if n["job"] == job]
        free = [n["name"] for n in status["nodes"] if not n["job"] and n["state"] == "up"]
        assert held and free, status["nodes"]
        # a reason naming the job, through the real API (an operator's `rsa drain`)
        reason = f"job {job} filled its pool"
        root(lab, rsa, "drain", free[0], "--reason", reason)
        try:
            seen = {n["name"]: n["reason"] for n in json.loads(
                root(lab, rsa, "nodes", "--json"))["nodes"]}
            assert seen[free[0]] == reason  # operators see it as typed
            # the job id as a word: not the seconds or day of a timestamp (09:21:47)
            named = re.compile(rf"(?<![\w.:-]){re.escape(job)}(?![\w:])")
            job_node = root(lab, "squeue", "-h", "-j", job, "-o", "%N").strip()
            for api, where in posts(lab, job_node):  # the cluster's: also from job's node
                for args in (("status", "--json"), ("nodes", "--json"), ("jobs", "--json"),
                             ("events", "--json", "--since", "0")):
                    out = run_as(lab, other, [rsa, *args, "--api", api], node=where)
                    assert out.returncode == 0, (args, where, out.stderr)
                    said = [t for line in out.stdout.splitlines()  # events: a line each
                            for t in texts(json.loads(line)) if named.search(t)]
                    assert said == [], (args, where, out.stdout[:3000])
                    assert user not in out.stdout and str(area) not in out.stdout, args
                nodes = {n["name"]: n for n in json.loads(run_as(
                    lab, other, [rsa, "nodes", "--json", "--api", api],
                    node=where).stdout)["nodes"]}
                assert {nodes[n]["job"] for n in held} == {"(hidden)"}
                assert nodes[free[0]]["reason"] == "job (hidden) filled its pool"
            if lab_mode(lab) == "native":
                # Slurm 22.05 does not tell slurm_bb_get_status who asks: totals only
                for who in (other, user):
                    text = as_user(lab, who, ["scontrol", "show", "bbstat"]).stdout
                    assert "RSA nodes: " in text, text
                    assert not re.search(r"\bjob \S", text), text  # no job named at all
                    assert all(f"  {n} up held" in text for n in held), text
        finally:
            root(lab, rsa, "resume", free[0])
            as_user(lab, user, ["touch", f"{area}/res/go"])
        wait_state(lab, job, "released", timeout=240)
