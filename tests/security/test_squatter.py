"""Another user on rsad's TCP port while rsad is down, tried for real in the lab
(``make lab-test LAB_TESTS=tests/security/test_squatter.py``).

rsad's TCP API (the lab's 127.0.0.1:7820, as daemon.api.listen on a site) is not a
privileged port: when rsad is down (a restart, a crash) any local user may bind it. The
lab's rsauser finds rsad as a login or compute node's user does: /etc/rsa/client.conf,
whose socket is gone with rsad, so its ``api``. rsaother binds that address
(tests/security/squat.py) and answers every request with a forged "output verified".
Before 2026-11-29 the rsa CLI took any answer (``ApiClient(trust_uid=None)``): ``rsa job``
showed the lie and ``rsa wait`` said ``verified``, and a workflow went on to read output
that was not on the PFS, or a user deleted their copy. Now rsad signs every answer to an
authenticated caller (root's MUNGE credential, restricted to the caller's uid, over the
request's credential, the status and the body) and the CLI refuses one without it.

On the cluster lab rsaother squats rsad's address on rsad's host (the one place it can
bind it: a site that lets users log in there), and rsauser's rsa runs on the login node,
which finds rsad by its own client.conf (``api = rsad:7820``) across the network.
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from rsa_scheduler.cli.where import verdict
from tests.integration.slurmkit import start_lab_rsad, stop_lab_rsad
from tests.security import squat
from tests.security.test_visibility import ask
from tests.security.where import api_tcp, node_for, run_as

SQUAT = str(Path(squat.__file__).resolve())
JOB = "4242"
CLIENT_CONF = "/etc/rsa/client.conf"


def client_api(lab: Mapping[str, str]) -> str:
    """``api`` of the client file where rsauser's rsa runs (the host lab's names
    127.0.0.1:7820, lab/rsalab/rsad.py LISTEN; the cluster login node's ``rsad:7820``)."""
    text = run_as(lab, "root", ["cat", CLIENT_CONF], node=node_for(api_tcp(lab))).stdout
    return next(line.split("=", 1)[1].split("#", 1)[0].strip()  # a comment may follow
                for line in text.splitlines() if line.split("=", 1)[0].strip() == "api")


@contextmanager
def squatting(lab: Mapping[str, str]) -> Iterator[subprocess.Popen[str]]:
    """rsaother's program on rsad's TCP address; stopped by closing its stdin."""
    proc = subprocess.Popen(["runuser", "-u", lab["RSA_LAB_OTHER_USER"], "--",
                             "/usr/bin/python3", SQUAT, api_tcp(lab)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd="/")
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline().strip()
        assert first == "listening", (first, proc.stderr.read() if proc.stderr else "")
        yield proc
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(30)


def rsa_as_user(lab: Mapping[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """rsauser's rsa, finding rsad as on a login node (no RSA_API: the client file)."""
    return run_as(lab, lab["RSA_LAB_USER"],
                  ["env", "-u", "RSA_API", f"{lab['RSA_LAB_VENV']}/bin/rsa", *args],
                  node=node_for(api_tcp(lab)))


def test_a_users_rsa_refuses_whoever_holds_rsads_port_while_it_is_down(
        lab: Mapping[str, str]) -> None:
    tcp, named = api_tcp(lab), client_api(lab)
    stop_lab_rsad(signal.SIGTERM)
    try:
        with squatting(lab) as squatter:
            # the squatter answers: 200, no signature, the lie (rsa wait would say
            # "verified": the verdict of what it sends)
            raw = ask(lab, lab["RSA_LAB_USER"], tcp, "GET", f"/v1/jobs/{JOB}", "munge")
            assert raw["status"] == 200 and raw["reply"] is None, raw
            lie = json.loads(raw["body"])
            assert lie["rsa_state"] == "output-verified"
            said = verdict(lie)
            assert said is not None and said.word == "verified"

            shown = rsa_as_user(lab, "job", JOB)
            assert shown.returncode == 1 and shown.stdout == "", shown
            line, = shown.stderr.splitlines()
            assert line.startswith(f"rsa: error: the answer from {named} (from "
                                   f"{CLIENT_CONF}) is not signed with MUNGE by rsad; "
                                   "refusing it: whatever answered is not rsad"), line
            assert "verified" not in line

            # 10 s: under load squeue alone took 4 s, and rsad was not asked in time
            waited = rsa_as_user(lab, "wait", JOB, "--timeout", "10")
            assert waited.returncode == 3, waited  # --timeout: never "verified"
            assert "verified" not in waited.stdout, waited.stdout
            assert "is not signed with MUNGE by rsad" in waited.stdout + waited.stderr
        answered = squatter.stdout.read() if squatter.stdout else ""
        assert f"answered GET /v1/jobs/{JOB}" in answered, answered
    finally:
        start_lab_rsad()
    # rsad back on its port: its answers (a refusal too) are signed for rsauser
    back = rsa_as_user(lab, "job", JOB, "--api", tcp)
    assert back.returncode == 1, back
    assert back.stderr.strip() == f"rsa: error: job {JOB} is not tracked by the RSA", back
    status = rsa_as_user(lab, "status", "--api", tcp)
    assert status.returncode == 0, status.stderr
