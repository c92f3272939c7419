"""``rsa nodes check`` against the lab's real RSA nodes over real SSH (issue 18): the
lab's nodes have what MooseFS and the data path need; a BeeOND site's nodes here would
not, and a node that does not answer is said so."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path

import yaml

from tests.integration.slurmkit import in_cluster, on_node


def check(lab: Mapping[str, str], config: Path | str,
          *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([f"{lab['RSA_LAB_VENV']}/bin/rsa", "nodes", "check", "--config",
                           str(config), *args], capture_output=True, text=True, timeout=120)


def variant(lab: Mapping[str, str], tmp_path: Path, **change: object) -> Path:
    data = yaml.safe_load(Path(lab["RSA_LAB_RSA_CONFIG"]).read_text())
    for path, value in change.items():
        node = data
        keys = path.split("__")
        for k in keys[:-1]:
            node = node[int(k)] if isinstance(node, list) else node.setdefault(k, {})
        node[keys[-1]] = value
    out = tmp_path / "rsa.yaml"
    out.write_text(yaml.safe_dump(data))
    return out


def mfs_version() -> str:
    """The MooseFS release of this host's tools (the lab's nodes share them)."""
    out = subprocess.run(["mfsmaster", "-v"], capture_output=True, text=True, timeout=30,
                         check=True).stdout
    found = re.search(r"(\d+\.\d+\.\d+)", out)
    assert found, out
    return found.group(1)


def test_the_labs_rsa_nodes_have_everything(lab: Mapping[str, str]) -> None:
    done = check(lab, lab["RSA_LAB_RSA_CONFIG"])
    assert done.returncode == 0, done.stdout + done.stderr
    # each with the MooseFS release its tools report (issue 31)
    version = re.escape(mfs_version())
    assert [re.fullmatch(rf"rsa{i}: ok \(MooseFS {version}\)", line) is not None
            for i, line in enumerate(done.stdout.splitlines(), 1)] == [True] * 4, done.stdout


def test_a_beeond_site_is_told_what_its_nodes_lack(lab: Mapping[str, str],
                                                   tmp_path: Path) -> None:
    cfg = variant(lab, tmp_path, filesystem__backend={"ram": "beeond", "ssd": "beeond"},
                  pool__nodes__0__pool_dir="/var/lib/rsa-node/no-such-pool")
    done = check(lab, cfg, "--json", "rsa[1-2]")
    assert done.returncode == 1, done.stderr
    nodes = json.loads(done.stdout)["nodes"]
    assert set(nodes) == {"rsa1", "rsa2"}
    for report in nodes.values():
        assert not report["ok"] and report["error"] == ""
        assert any(x.startswith("command beeond: install beeond (BeeGFS ")
                   for x in report["lacks"]), report["lacks"]
        assert any(x.startswith("kernel module beegfs") for x in report["lacks"])
        assert any(x.startswith("pool directory /var/lib/rsa-node/no-such-pool")
                   for x in report["lacks"])
        assert not any("rsync" in x or "setpriv" in x for x in report["lacks"])


def test_a_node_that_does_not_answer_is_named(lab: Mapping[str, str], tmp_path: Path) -> None:
    cfg = variant(lab, tmp_path, pool__nodes__0__ssh_port=1, ssh__connect_timeout="3s")
    done = check(lab, cfg, "rsa4")
    assert done.returncode == 1
    assert done.stdout.startswith("rsa4: cannot check: "), done.stdout
    assert len(done.stdout.splitlines()) == 1


def in_node(node: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """argv as root on the lab node ``node`` (``rsaN``, ``cN``): the host lab's, inside its
    mount and UTS namespaces (its hostname), entered by its sshd's or slurmd's pid; the
    cluster lab's, on that host through the door."""
    if in_cluster():
        return on_node(node, argv, timeout=120, check=False)
    daemon = f"sshd-{node}" if node.startswith("rsa") else f"slurmd-{node}"
    pid = Path(f"/run/rsa-lab/pids/{daemon}.pid").read_text().strip()
    return subprocess.run(["nsenter", "-t", pid, "-m", "-u", "--", *argv],
                          capture_output=True, text=True, timeout=120, check=False)


def node_file(node: str, path: Path, text: str, mode: int = 0o644) -> Path:
    """A file of ``text`` at ``path`` as the node sees it: the host lab's nodes see this
    host's /tmp; on the cluster lab it is written on the node (``path`` there)."""
    if in_cluster():
        done = on_node(node, ["sh", "-ec", 'mkdir -p "${0%/*}"; cat > "$0"; chmod "$1" "$0"',
                              str(path), f"{mode:o}"], input=text)
        assert done.returncode == 0, done.stderr
    else:
        path.write_text(text)
        path.chmod(mode)
    return path


def test_a_node_that_is_no_pfs_client_or_lacks_mfscli_is_told_the_fix(
        lab: Mapping[str, str], tmp_path: Path) -> None:
    """rsa2 sees a directory of its own at /pfs/home (the PFS not mounted there), rsa3 has
    no mfscli (the health check asks it for the chunkservers): each is named with
    its fix; rsa1 is ok."""
    rsa2, rsa3 = "rsa2", "rsa3"
    stub = node_file(rsa3, tmp_path / "mfscli", "")  # not executable: no mfscli on its PATH
    pfs_home = str(Path(lab["RSA_LAB_PFS"]).parent)
    mounted: list[tuple[str, str]] = []
    try:
        assert in_node(rsa2, "mount", "-t", "tmpfs", "rsa-test", pfs_home).returncode == 0
        mounted.append((rsa2, pfs_home))
        assert in_node(rsa3, "mount", "--bind", str(stub), "/usr/bin/mfscli").returncode == 0
        mounted.append((rsa3, "/usr/bin/mfscli"))
        done = check(lab, lab["RSA_LAB_RSA_CONFIG"], "rsa[1-3]")
    finally:
        for node, target in mounted:
            in_node(node, "umount", target)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"rsa1: ok (MooseFS {mfs_version()})", lines
    assert lines[1] == f"rsa2: MooseFS {mfs_version()}", lines
    # the PFS's type as this host (rsad's) names it, by statfs as the check does (GNU
    # stat names FUSE's magic fuseblk on Debian 12, fuse on 13)
    here = subprocess.run(["stat", "-f", "-c", "%T", "--", pfs_home], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert here in ("fuse", "fuseblk"), here
    assert lines[2].startswith(f"rsa2: lacks the PFS at {pfs_home} as rsad's host sees it "
                               f"(tmpfs there, {here} on rsad's host): mount the site's PFS "
                               f"at {pfs_home} on this node as on rsad's host"), lines
    assert lines[3:] == [f"rsa3: MooseFS {mfs_version()}",
                         "rsa3: lacks command mfscli: install moosefs-cli (the health check "
                         "asks it for the chunkservers)"], lines


def compute_check(lab: Mapping[str, str], node: str | None, client: Path) -> \
        subprocess.CompletedProcess[str]:
    argv = ["env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
            f"SLURM_CONF={lab['RSA_LAB_SLURM_CONF']}", f"RSA_CLIENT_CONFIG={client}",
            f"{lab['RSA_LAB_VENV']}/bin/rsa", "nodes", "check", "--compute", "--config",
            lab["RSA_LAB_RSA_CONFIG"]]
    if node is None:
        return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    return in_node(node, *argv)


def test_a_compute_node_has_what_jobs_and_hooks_need(lab: Mapping[str, str],
                                                     tmp_path: Path) -> None:
    """On c1 (its own namespaces, rsa in its /usr/local/bin), reaching rsad over TCP as a
    compute node without rsad's socket does: ok. Where rsad's address is wrong, and
    outside the compute nodes (no rsa on a job's PATH), each is named with its fix."""
    client = tmp_path / "client.conf"
    api = lab["RSA_LAB_API_TCP"]  # as the compute nodes reach rsad
    node_file("c1", client, f"socket = /nonexistent/rsad.sock\napi = {api}\n")
    done = compute_check(lab, "c1", client)
    assert (done.returncode, done.stdout) == (0, "c1: ok\n"), done.stdout + done.stderr

    node_file("c2", client, "socket = /nonexistent/rsad.sock\napi = 127.0.0.1:1\n")
    done = compute_check(lab, "c2", client)
    assert done.returncode == 1
    assert done.stdout.startswith("c2: lacks rsad's API from here (cannot reach rsad at "
                                  f"127.0.0.1:1 (from {client}): "), done.stdout
    assert done.stdout.rstrip().endswith(
        "open rsad's daemon.api.listen port to this node, keep munged running with the "
        f"cluster's key, and name rsad's address in {client}")
    assert len(done.stdout.splitlines()) == 1

    if in_cluster():  # every node of the cluster lab has the package: rsa in /usr/bin
        return
    client.write_text(f"socket = /nonexistent/rsad.sock\napi = {api}\n")
    done = compute_check(lab, None, client)  # the lab's host: not a compute node
    assert done.returncode == 1
    assert done.stdout.splitlines()[0].endswith(
        ": lacks command rsa on a job's PATH (/usr/local/bin:/usr/bin:/bin): install "
        "rsa-scheduler on this node (it puts rsa in /usr/bin): jobs run rsa input-done and "
        "rsa job"), done.stdout
    assert len(done.stdout.splitlines()) == 1, done.stdout
