"""The host lab's tests on the cluster lab (issue 30): ``clusterctl lab-test ARGS...``.

Owns running a pytest of this repository on rsad's host of a cluster lab that was brought
up with ``RSA_CLUSTER_HARNESS=<repository>`` (rsacluster.harness_binds: the repository
and the door's directory are bound into that node at their own paths): as root there, an
operator's seat beside rsad, with the release's venv of the repository, ``/run/rsa-lab/env``
written for this cluster (:func:`lab_env`: the keys the host lab writes, with the
package's commands, ``/usr/bin/rsa`` and ``/usr/bin/rsad``, as the lab's), and the
**door**: a unix socket served by this process while the tests run, through which a test
runs a command on another node (``tests/integration/slurmkit.py`` ``on_node``), exactly as
``lab/cluster/node NAME CMD...`` would (as root, in that node's namespaces). A test reaches
Slurm, rsad's API and the PFS from rsad's host as a site's admin would, and the lab users
through ``runuser`` there (the directory resolves them).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import socketserver
import subprocess
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import rsacluster as rc
import ssdpool

DOOR = rc.DOOR_DIR / "door.sock"
LAB_ENV = "/run/rsa-lab/env"
MAX_REQUEST = 1 << 20


def _venv(repo: Path) -> Path:
    venv = repo / rc.VENVS[rc.release()]
    if not (venv / "bin" / "pytest").exists():
        hint = ("make install" if rc.release() == "12"
                else f"lab/host-root {rc.release()}")
        raise rc.ClusterError(f"{venv}: no pytest there: run `{hint}` first")
    return venv


def mode() -> str:
    """rsad's mode on the cluster: ``native`` when its rsa.yaml says so (clusterctl mode)."""
    text = rc.on(rc.RSAD, ["cat", "/etc/rsa/rsa.yaml"]).stdout
    return "native" if "\n  mode: native\n" in text else "queue"


def lab_env() -> dict[str, str]:
    """/run/rsa-lab/env for the cluster: the host lab's keys (lab/rsalab/facts.py) with
    this cluster's values, and ``RSA_LAB_KIND=cluster``."""
    first, last = rc.RSA_NODES[0], rc.RSA_NODES[-1]
    computes = f"c[{rc.COMPUTE[0].removeprefix('c')}-{rc.COMPUTE[-1].removeprefix('c')}]"
    user, other = rc.USERS
    return {
        "RSA_LAB_KIND": "cluster",
        "RSA_LAB_USER": user,
        "RSA_LAB_OTHER_USER": other,
        # rsad's TCP API on its host's management address (rsa.yaml daemon.api.listen)
        "RSA_LAB_API_TCP": f"{rc.hosts()[rc.RSAD]}:7820",
        # the user's project group, in the directory only (lab/cluster/directory.ldif)
        "RSA_LAB_PROJECT_GROUP": rc.PROJECT_GROUP,
        "RSA_LAB_PFS": f"{rc.PFS}/home/{user}",
        "RSA_LAB_OTHER_PFS": f"{rc.PFS}/home/{other}",
        "RSA_LAB_PFS_ROOT": rc.PFS,
        "RSA_LAB_PFS_MASTER": rc.PFS_HOST,
        "RSA_LAB_COMPUTE_NODES": computes,
        "RSA_LAB_RSA_NODES": f"rsa[{first.removeprefix('rsa')}-{last.removeprefix('rsa')}]",
        # rsad reaches the RSA nodes' sshd by their names on the management network
        "RSA_LAB_RSA_ADDRESSES": ",".join(rc.RSA_NODES),
        "RSA_LAB_POOL_RAM": rc.POOL,
        "RSA_LAB_RAM_SIZE": rc.POOL_SIZE,
        # the tiers, the ssd nodes and their pools (RSA_CLUSTER_TIERS; ssdpool.py)
        **ssdpool.facts(),
        "RSA_LAB_SSH_USER": "root",
        "RSA_LAB_SSH_KEY": "/etc/rsa/id_ed25519",
        "RSA_LAB_SSH_KNOWN_HOSTS": "/etc/rsa/known_hosts",
        "RSA_LAB_ACCOUNTING": "1" if rc.accounting() else "0",
        "RSA_LAB_QOS": "",
        "RSA_LAB_LOCKIN_METHOD": "priority",
        "RSA_LAB_LOCKIN_PRIORITY": str(rc.LOCKIN_PRIORITY),
        "RSA_LAB_CLUSTER": "rsacl",
        "RSA_LAB_ACCOUNT": rc.ACCOUNT,
        "RSA_LAB_PARTITION": "debug",
        "RSA_LAB_SLURM_CONF": "/etc/slurm/slurm.conf",
        "RSA_LAB_RSA_CONFIG": "/etc/rsa/rsa.yaml",
        # the package's commands: /usr/bin/rsa, /usr/bin/rsad
        "RSA_LAB_VENV": "/usr",
        "RSA_LAB_PYTHON": "/usr/bin/python3",
        "RSA_LAB_RSA_ON_PATH": "/usr/bin/rsa",
        "RSA_LAB_HOOK_WRAPPERS": "/usr/lib/rsa-scheduler",
        "RSA_LAB_RSAD_LOG": "/var/log/rsad.log",
        "RSA_LAB_RSAD_STORE": "/var/lib/rsa/rsa.db",
        # rsad's mail, kept on rsad's host by the cluster's MailProg (/etc/slurm/mailprog)
        "RSA_LAB_MAIL_DIR": "/var/spool/slurm-mail",
        "RSA_LAB_MODE": mode(),
        "RSA_LAB_DEBIAN": rc.release(),
        "RSA_LAB_DOOR": str(DOOR),
        "SLURM_CONF": "/etc/slurm/slurm.conf",
        "RSA_LAB_PROLOG_FLAGS": rc.prolog_flags(),
        "RSA_LAB_NODE_CPU_CGROUP": "",
        "RSA_LAB_NODE_CPU_WEIGHT": "",
    }


#: the host lab's test timings (lab/rsalab/facts.py rsa_yaml, where each is explained),
#: added to the cluster's rsa.yaml for its tests: they wait seconds, not a site's minutes
TUNING = {
    "ssh:": ("  connect_timeout: 3s",),
    "daemon:": ("  poll_interval: 1s",),
    "health:": ("  interval: 2s", "  ramdisk_interval: 5s"),
    "allocation:": ("  array_share: 1",),
    "staging:": ("  retries: 2", "  backoff: 2s", "  backoff_max: 4s", "  on_deck_settle: 3s"),
}
TUNED = "# tuned for the host lab's tests (lab/cluster/harness.py TUNING)"


def tuned_yaml(native: bool) -> str:
    """The cluster's rsa.yaml with the host lab's test timings (and ``slurm.mode:
    native`` when the cluster runs in native mode)."""
    lines: list[str] = [TUNED]
    for line in rc.rsa_yaml().splitlines():
        lines.append(line)
        lines.extend(TUNING.get(line, ()))
        if line == "slurm:":  # said, as the lab above's says them
            lines.append(f"  mode: {'native' if native else 'queue'}")
            if "\n  bin_dir:" not in rc.rsa_yaml():
                lines.append("  bin_dir: /usr/bin")
    lines += ["hooks:", "  max_hold: 30s",
              # the lab above's rsad serves its metrics there too (test_rsad reads them)
              "metrics:", '  listen: "127.0.0.1:9465"']
    return "\n".join(lines) + "\n"


def tune() -> None:
    """rsa.yaml with the test timings on rsad's host and the compute nodes (each keeps
    its owner and mode: rewritten in place), checked, then rsad restarted on it."""
    if rc.on(rc.RSAD, ["head", "-n", "1", "/etc/rsa/rsa.yaml"]).stdout.strip() == TUNED:
        return
    text = tuned_yaml(mode() == "native")
    for node in (rc.RSAD, *rc.COMPUTE):
        rc.on(node, ["sh", "-ec", "cat > /etc/rsa/rsa.yaml"], input=text)
    rc.on(rc.RSAD, ["rsa", "config", "check", "/etc/rsa/rsa.yaml"])
    rc.restart_rsad()


class _Door(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class _Request(socketserver.StreamRequestHandler):
    """One request: a JSON line {"node", "argv", "input", "timeout"}; one JSON answer
    {"rc", "stdout", "stderr"} (rc 124 and a line on stderr when it timed out, 2 for a
    request that names no node of the cluster). The node ``switch`` runs the command in
    the switch's network namespace only (rsacluster.on_switch)."""

    def handle(self) -> None:
        try:
            ask = json.loads(self.rfile.readline(MAX_REQUEST))
            node, argv = str(ask["node"]), [str(a) for a in ask["argv"]]
            timeout = float(ask.get("timeout", 60))
            stdin = ask.get("input")
        except (ValueError, KeyError, TypeError) as e:
            self._answer(2, "", f"door: a bad request: {e}")
            return
        if (node not in rc.ROLES and node != "switch") or not argv:
            self._answer(2, "", f"door: {node!r} is no node of the cluster lab "
                                f"({', '.join(rc.ROLES)}, switch), or no command")
            return
        try:
            if node == "switch":
                done = rc.on_switch(argv, timeout=timeout, check=False)
            else:
                done = rc.on(node, argv, timeout=timeout, check=False,
                             input=None if stdin is None else str(stdin))
        except rc.ClusterError as e:
            self._answer(124, "", f"door: {node}: {e}")
            return
        self._answer(done.returncode, done.stdout, done.stderr)

    def _answer(self, code: int, out: str, err: str) -> None:
        self.wfile.write(json.dumps({"rc": code, "stdout": out, "stderr": err}).encode()
                         + b"\n")


@contextlib.contextmanager
def door() -> Iterator[None]:
    """The door, served by threads of this process for as long as the context lasts
    (a socket only root reaches, in a directory only root reaches)."""
    DOOR.unlink(missing_ok=True)
    server = _Door(str(DOOR), _Request)
    os.chmod(DOOR, 0o600)
    thread = threading.Thread(target=server.serve_forever, name="door", daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        DOOR.unlink(missing_ok=True)


def lab_test(args: Sequence[str]) -> int:
    """pytest ``args`` on rsad's host, from the repository the cluster was brought up with;
    its exit status."""
    repo = _repo()
    venv = _venv(repo)
    return lab_run(["env", "PYTHONDONTWRITEBYTECODE=1", str(venv / "bin" / "pytest"),
                    "-p", "no:cacheprovider", *args], what="lab-test")


def _repo() -> Path:
    repo = os.environ.get("RSA_CLUSTER_HARNESS")
    if not repo:
        raise rc.ClusterError("RSA_CLUSTER_HARNESS=<repository> names the repository whose "
                              "tests run (and must have named it at clusterctl up)")
    path = Path(repo).resolve()
    if rc.on(rc.RSAD, ["test", "-d", str(path / "tests")], check=False).returncode:
        raise rc.ClusterError(f"{path} is not on {rc.RSAD}: the cluster was brought up "
                              "without RSA_CLUSTER_HARNESS: clusterctl down, then up with it")
    return path


def lab_run(argv: Sequence[str], what: str = "lab-run") -> int:
    """``argv`` as root on rsad's host, in the repository the cluster was brought up with,
    with /run/rsa-lab/env written there and the door served (as for lab-test: e.g. the
    demo, ``python3 lab/demo.py``); its exit status."""
    repo = _repo()
    tune()
    env = lab_env()
    rc.on(rc.RSAD, ["sh", "-ec", f"mkdir -p {Path(LAB_ENV).parent}\ncat > {LAB_ENV}"],
          input="".join(f"{k}={shlex.quote(v)}\n" for k, v in env.items()))
    # (the chaos tier's seed and rounds: make chaos-cluster)
    passed = [f"{k}={os.environ[k]}" for k in ("CI", "RSA_CHAOS_SEED", "RSA_CHAOS_ROUNDS")
              if k in os.environ]
    # the workflow tools' venv for the image's Python (make's WF_VENV; lab/host-root)
    passed.append(f"RSA_WF_VENV={rc.wf_venv(repo)}")
    full = ["sh", "-c", 'cd "$1" && shift && exec "$@"', "sh", str(repo),
            "env", *passed, *argv]
    rc.log(f"{what} on {rc.RSAD} ({env['RSA_LAB_MODE']} mode, Debian {rc.release()}): "
           f"{shlex.join(argv)}")
    try:
        with door():
            done = subprocess.run(rc.node_argv(rc._init(rc.RSAD), full), check=False,
                                  env={"PATH": rc.HOST_PATH, rc.MARK: rc.RSAD})
    finally:
        rc.on(rc.RSAD, ["rm", "-f", LAB_ENV], check=False)
    return done.returncode
