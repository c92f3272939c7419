"""``rsa nodes check`` against the lab's real RSA nodes over real SSH (issue 18): the
lab's nodes have what MooseFS and the data path need; a BeeOND site's nodes here would
not, and a node that does not answer is said so."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from pathlib import Path

import yaml


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


def test_the_labs_rsa_nodes_have_everything(lab: Mapping[str, str]) -> None:
    done = check(lab, lab["RSA_LAB_RSA_CONFIG"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == [f"rsa{i}: ok" for i in range(1, 5)]


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
