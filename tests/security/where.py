"""Where the security tier's attacker stands, on either lab.

The host lab's nodes share this host: rsaother attacks from here (``runuser``). On the
cluster lab (lab/cluster, tests run on rsad's host) rsaother attacks as a site's user
would: rsad's TCP API from the login node, a job's mounts and the RAMDISKs' servers from
a compute node, through the harness's door (``slurmkit.on_node``, ``runuser`` there). A
script of this tier (attack.py, reply.py, squat.py) runs there from its text on standard
input (``python3 -``): the repository is bound into rsad's host only. rsad's unix socket
exists on rsad's host only, for group ``rsa`` (daemon.api.socket_group), which the
directory's users are not in: rsaother attacks it there as a member of that group, as the
host lab's users are (a site that puts its users in the group, with rsad on a host they
log into).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from tests.integration.conftest import slurm_env
from tests.integration.slurmkit import in_cluster, on_node, wait_for

SOCK = "/run/rsa/rsad.sock"
#: the cluster lab's users' door (lab/cluster: sbatch, rsa, the PFS; no RSA data network)
LOGIN = "login"
API_GROUP = "rsa"  # daemon.api.socket_group


def api_tcp(lab: Mapping[str, str]) -> str:
    """rsad's TCP API, as each lab's facts say it (the host lab's lab/rsalab/rsad.py
    LISTEN, the cluster lab's rsad host's address)."""
    return lab["RSA_LAB_API_TCP"]


def submit_node() -> str | None:
    """Where a user submits jobs from: this host in the host lab, the cluster lab's login
    node."""
    return LOGIN if in_cluster() else None


def node_for(address: str) -> str | None:
    """The node a user reaches ``address`` from: None for this host (the host lab; rsad's
    socket on the cluster lab), the login node for the cluster lab's TCP API."""
    if not in_cluster() or address.startswith("/"):
        return None
    return LOGIN


def posts(lab: Mapping[str, str], job_node: str | None = None
          ) -> list[tuple[str, str | None]]:
    """(address, node) of every place a user asks rsad from: the host lab's socket and TCP
    API from this host; the cluster lab's socket on rsad's host, its TCP API from the login
    node and, given ``job_node``, from that compute node (where another user's job runs)."""
    tcp = api_tcp(lab)
    found: list[tuple[str, str | None]] = [(SOCK, None), (tcp, node_for(tcp))]
    if in_cluster() and job_node:
        found.append((tcp, job_node))
    return found


def run_as(lab: Mapping[str, str], user: str, argv: Sequence[str], *,
           node: str | None = None, input: str | None = None,
           timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``argv`` as ``user`` (``root`` too) on ``node`` (None: this host), from ``/``. On
    the cluster lab, a user here is a member of rsad's socket group (the module's note)."""
    if node is not None:
        assert in_cluster(), f"node {node}: the host lab's nodes are this host"
        prefix = [] if user == "root" else ["runuser", "-u", user, "--"]
        return on_node(node, [*prefix, *argv], input=input, timeout=timeout, check=False)
    prefix = []
    if user != "root":
        prefix = ["runuser", "-u", user, "--"]
        if in_cluster():
            prefix = ["runuser", "-u", user, "-g", user, "-G", API_GROUP, "--"]
    return subprocess.run([*prefix, *argv], capture_output=True, text=True,
                          timeout=timeout, env=slurm_env(lab), cwd="/", input=input,
                          check=False)


def script_argv(lab: Mapping[str, str], script: Path, node: str | None,
                *args: str) -> tuple[list[str], str | None]:
    """(argv, standard input) that run a script of this tier with ``args`` on ``node``:
    by its path here, from its text on another node (whose Python has the package)."""
    if node is None:
        return [lab["RSA_LAB_PYTHON"], str(script), *args], None
    return ["/usr/bin/python3", "-", *args], script.read_text()


@contextmanager
def in_background(lab: Mapping[str, str], user: str, script: Path, node: str | None,
                  *args: str) -> Iterator[subprocess.Popen[str] | str]:
    """``script args`` as ``user`` on ``node``, left running for the block: here a Popen
    (its stdout a pipe), on another node the path of its output file there (the door
    runs a command to its end). Killed and gone after the block."""
    if node is None:
        argv, _ = script_argv(lab, script, None, *args)
        prefix = ["runuser", "-u", user, "--"]
        if in_cluster():
            prefix = ["runuser", "-u", user, "-g", user, "-G", API_GROUP, "--"]
        proc = subprocess.Popen([*prefix, *argv], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                cwd="/")
        try:
            yield proc
        finally:
            proc.kill()
            proc.wait(30)
        return
    tag = f"/tmp/rsa-sec-{time.monotonic_ns()}"
    on_node(node, ["sh", "-ec", f"cat > {tag}.py; chmod 0644 {tag}.py"],
            input=script.read_text())
    quoted = " ".join(f"'{a}'" for a in args)
    pid = on_node(node, ["sh", "-ec", f"setsid runuser -u {user} -- /usr/bin/python3 "
                         f"{tag}.py {quoted} </dev/null >{tag}.out 2>&1 & echo $!"]
                  ).stdout.strip()
    try:
        yield f"{tag}.out"
    finally:
        on_node(node, ["sh", "-c", f"pkill -KILL -s {pid}; rm -f {tag}.py {tag}.out"],
                check=False)


def first_line(node: str | None, running: subprocess.Popen[str] | str,
               timeout: float = 60) -> str:
    """The first line a script :func:`in_background` started printed."""
    if isinstance(running, subprocess.Popen):
        assert running.stdout is not None
        line = running.stdout.readline()
        assert line, running.stderr.read() if running.stderr else "no output"
        return line
    assert node is not None

    def printed() -> str | None:
        text = on_node(node, ["cat", running], check=False).stdout
        return text.splitlines()[0] if "\n" in text else None

    return wait_for(f"the first line of {running} on {node}", printed, timeout=timeout,
                    every=0.3)
