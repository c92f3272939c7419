"""RSA-node health in the lab (issue 13.5): a node whose sshd stops answering is marked
down by the health loop with its reason and comes back by itself; an operator's drain
with a reason is shown and never undone by the loop."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from tests.integration.slurmkit import in_cluster, lab_nodes, on_node, wait_for

pytestmark = pytest.mark.once  # RSA-node health is rsad's own, whichever mode drives staging

SSH_DIR = Path("/run/rsa-lab/ssh")


def nodes(lab: Mapping[str, str]) -> dict[str, dict[str, str]]:
    out = subprocess.run([f"{lab['RSA_LAB_VENV']}/bin/rsa", "nodes", "--json"],
                         capture_output=True, text=True, timeout=30, check=True).stdout
    return {n["name"]: n for n in json.loads(out)["nodes"]}


def tree(pid: int) -> list[int]:
    """``pid`` and its descendants (the sshd listener and its sessions)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def freeze(pid: int) -> list[int]:
    """SIGSTOP ``pid`` (the sshd listener: no session starts after it) and then every
    descendant, listing again until no new one appears; returns every process stopped.
    A session that ends meanwhile is skipped."""
    stopped: list[int] = []
    while todo := [p for p in tree(pid) if p not in stopped]:
        for p in todo:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGSTOP)
            stopped.append(p)
    return stopped


def thaw(pids: list[int]) -> None:
    for p in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGCONT)


#: the same as freeze(), on a node of the cluster lab (its sshd's pidfile, in the node)
FREEZE = """stopped=" " todo=$(cat /run/sshd.pid)
while [ -n "$todo" ]; do
  next=""
  for p in $todo; do kill -STOP "$p" 2>/dev/null || true; stopped="$stopped$p "
    next="$next $(ps -o pid= --ppid "$p" || true)"; done
  todo=""; for p in $next; do case "$stopped" in *" $p "*) ;; *) todo="$todo $p";; esac; done
done
echo $stopped"""


@contextlib.contextmanager
def sshd_frozen(node: str) -> Iterator[None]:
    """The RSA node's sshd and its sessions stopped (SIGSTOP) while the context lasts."""
    if in_cluster():
        frozen = on_node(node, ["sh", "-ec", FREEZE]).stdout.split()
        try:
            yield
        finally:
            on_node(node, ["kill", "-CONT", *frozen], check=False)
        return
    pids = freeze(int((SSH_DIR / node / "sshd.pid").read_text()))
    try:
        yield
    finally:
        thaw(pids)


def test_a_node_that_stops_answering_is_down_then_back(lab: Mapping[str, str]) -> None:
    node = lab_nodes(lab, "RSA_LAB_RSA_NODES")[-1]
    assert nodes(lab)[node]["state"] == "up"
    with sshd_frozen(node):
        down = wait_for(f"{node} down", lambda: n if (n := nodes(lab)[node])["state"]
                        == "down" else None, timeout=120)
        assert down["by"] == "health" and "probes in a row" in down["reason"]
        text = subprocess.run([f"{lab['RSA_LAB_VENV']}/bin/rsa", "nodes"],
                              capture_output=True, text=True, timeout=30).stdout
        assert any(ln.startswith(node) and "[health]" in ln for ln in text.splitlines())
    wait_for(f"{node} up again", lambda: nodes(lab)[node]["state"] == "up", timeout=120)


def test_an_operators_drain_keeps_its_reason_and_is_not_undone(
        lab: Mapping[str, str]) -> None:
    rsa = f"{lab['RSA_LAB_VENV']}/bin/rsa"
    node = lab_nodes(lab, "RSA_LAB_RSA_NODES")[0]
    subprocess.run([rsa, "drain", node, "--reason", "DIMM swap"], check=True,
                   capture_output=True, timeout=30)
    try:
        time.sleep(5)  # two health rounds at the lab's 2 s interval
        n = nodes(lab)[node]
        assert n["state"] == "drained" and n["reason"] == "DIMM swap" and n["by"] == "root"
    finally:
        subprocess.run([rsa, "resume", node], check=True, capture_output=True, timeout=30)
    assert nodes(lab)[node]["state"] == "up"
    bad = subprocess.run([rsa, "drain", "rsa9"], capture_output=True, text=True, timeout=30)
    assert bad.returncode != 0 and "no RSA node 'rsa9'" in bad.stderr + bad.stdout
