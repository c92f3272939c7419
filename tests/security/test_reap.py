"""A job's processes do not outlive it on the RSA nodes (issue 12.5).

A user's PREPROCESS or POSTPROCESS starts a daemon that leaves the process group the RSA
would kill (``setsid``), as a hostile or careless script does. Each must be gone once
the command that started it ended, and the job's cgroup on the RSA node with it.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from tests.e2e.test_prolog_lifecycle import run_to_start
from tests.integration.conftest import as_user, read_lab_env
from tests.integration.slurmkit import in_cluster, lab_nodes, make_jobs, on_node
from tests.integration.test_rsad_staging import rsa_job, wait_state

# the job's cgroup below the first cgroup2 mount (rsa_scheduler/contain.py's), if it is there
_JOB_CGROUP = ("awk '{for(i=7;i<=NF;i++) if($i==\"-\"){if($(i+1)==\"cgroup2\")"
               "{print $5; exit} break}}' /proc/self/mountinfo | "
               "{ read -r r && [ -d \"$r/rsa.jobs/$0\" ] && echo \"$r/rsa.jobs/$0\"; } "
               "|| true")


def job_cgroup(job: str) -> Path | None:
    """The job's cgroup on this host (the lab's RSA nodes share its kernel), if any."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        if right.split()[0] == "cgroup2":
            return Path(left.split()[4]) / "rsa.jobs" / job
    return None


def job_cgroups_left(job: str) -> list[str]:
    """The job's cgroups still on its RSA nodes: on the host lab this host's (the nodes
    share its cgroup tree), on the cluster lab each RSA node's own (lab/cluster/
    nodecgroup.py: a cgroup v2 subtree of its own), asked through the door."""
    if not in_cluster():
        cg = job_cgroup(job)
        return [str(cg)] if cg is not None and cg.exists() else []
    return [f"{path} on {node}"
            for node in lab_nodes(read_lab_env(), "RSA_LAB_RSA_NODES")
            if (path := on_node(node, ["sh", "-c", _JOB_CGROUP, job]).stdout.strip())]


def daemon_script(marker: int, tail: str) -> str:
    """A script that leaves a session leader behind, records its pid, then does ``tail``."""
    return ("#!/bin/bash\nset -e\n"
            f"setsid bash -c 'echo $$ >> \"$RSA_DATA_OUT/daemon-$RSA_PHASE.pid\"; "
            f"exec sleep {marker}' < /dev/null > /dev/null 2>&1 &\n"
            f"for i in $(seq 50); do [ -s \"$RSA_DATA_OUT/daemon-$RSA_PHASE.pid\" ] && break; "
            "sleep 0.1; done\n" + tail)


def alive(pid: int, marker: int) -> bool:
    """Whether ``pid`` is still the ``sleep MARKER`` a script on an RSA node started: in
    the host lab the RSA nodes share this host's PID view; in the cluster lab each RSA
    node is a host of its own, asked through the door."""
    if in_cluster():
        return any(f"sleep\0{marker}" in on_node(node, ["cat", f"/proc/{pid}/cmdline"],
                                                   check=False).stdout
                   for node in lab_nodes(read_lab_env(), "RSA_LAB_RSA_NODES"))
    try:
        return f"sleep\0{marker}" in Path(f"/proc/{pid}/cmdline").read_text()
    except OSError:
        return False


def rsa_nodes_without_cgroup2() -> list[str]:
    """The cluster lab's RSA nodes with no cgroup v2 hierarchy mounted, where CONTAIN
    could not kill what a command left when it ends (rsa_scheduler/contain.py: REAP's
    environment tag, at the job's release, is the fallback there). lab/cluster gives
    each RSA node a subtree of its own (nodecgroup.py): none is expected."""
    if not in_cluster():
        return []
    return [n for n in lab_nodes(read_lab_env(), "RSA_LAB_RSA_NODES")
            if " cgroup2 " not in on_node(n, ["cat", "/proc/self/mounts"]).stdout]


@pytest.fixture
def area(lab: Mapping[str, str]) -> Iterator[Path]:
    base = Path(lab["RSA_LAB_PFS"]) / f"reap-{os.getpid()}-{time.monotonic_ns()}"
    done = as_user(lab, lab["RSA_LAB_USER"], ["mkdir", "-p", f"{base}/in", f"{base}/out"])
    assert done.returncode == 0, done.stderr
    yield base
    subprocess.run(["rm", "-rf", str(base)], check=False, timeout=120)


def _owned_script(lab: Mapping[str, str], path: Path, text: str) -> None:
    done = as_user(lab, lab["RSA_LAB_USER"], ["bash", "-c", f"cat > {path}; chmod 755 {path}"])
    assert done.returncode == 0, done.stderr
    path.write_text(text)


def test_a_postprocess_daemon_dies_with_its_command(lab: Mapping[str, str],
                                                    area: Path) -> None:
    marker = 6100 + os.getpid() % 1000
    post = area / "post.sh"
    _owned_script(lab, post, daemon_script(
        marker, 'tar -C "$RSA_RAMDISK" -cf "$RSA_DATA_OUT/packed.tar" .\necho packed-ok\n'))
    out = area / "out"
    script = f"""#!/bin/bash
#SBATCH -t 5
#RSA_DATA_OUT={out}
#RSA_POSTPROCESS={post}
echo result > {out}/result
"""
    with make_jobs(lab) as jobs:
        job = run_to_start(lab, jobs, script)
        wait_state(lab, job, "released", "output-failed", timeout=180)
    data = rsa_job(lab, job) or {}
    assert data.get("rsa_state") == "released", data.get("events", [])[-6:]
    # the POSTPROCESS's own output stays with the job
    scripts = [e["detail"]["script"] for e in data["events"] if e.get("name") ==
               "action.outcome" and "script" in (e.get("detail") or {})]
    assert scripts and scripts[-1]["stdout"].strip() == "packed-ok", scripts
    pids = [int(p) for p in (out / "daemon-stage-out.pid").read_text().split()]
    assert pids
    assert not [p for p in pids if alive(p, marker)], f"POSTPROCESS daemons outlived {job}"
    listing = subprocess.run(["tar", "-tf", str(out / "packed.tar")], capture_output=True,
                             text=True, timeout=30, check=True).stdout
    assert "./result" in listing
    assert not (left := job_cgroups_left(job)), f"job {job}'s cgroups are left: {left}"


def test_a_preprocess_daemon_dies_before_the_job_starts(lab: Mapping[str, str],
                                                        area: Path) -> None:
    # killing at a command's end needs cgroup v2 on the node (the cluster lab's RSA nodes
    # have a subtree of their own): a node without one fails the test, never skips it
    assert not (without := rsa_nodes_without_cgroup2()), \
        f"no cgroup v2 on {','.join(without)}: CONTAIN cannot kill at a command's end"
    marker = 7100 + os.getpid() % 1000
    pre = area / "pre.sh"
    # PREPROCESS runs with RSA_DATA_OUT unset when the job has no DATA_OUT: write the
    # pid next to the input instead
    _owned_script(lab, pre, daemon_script(marker, 'cp -r "$RSA_DATA_IN/." "$RSA_RAMDISK/"\n')
                  .replace("$RSA_DATA_OUT", "$RSA_DATA_IN"))
    (area / "in" / "x").write_text("x\n")
    os.chown(area / "in" / "x", *_ids(lab))
    script = f"""#!/bin/bash
#SBATCH -t 5
#RSA_DATA_IN={area}/in
#RSA_PREPROCESS={pre}
cat {area}/in/x
"""
    with make_jobs(lab) as jobs:
        job = run_to_start(lab, jobs, script)
        pids = [int(p) for p in (area / "in" / "daemon-stage-in.pid").read_text().split()]
        # killed when the PREPROCESS command ended: before the job started
        assert pids and not [p for p in pids if alive(p, marker)], \
            f"PREPROCESS daemons {pids} outlived their command"
        wait_state(lab, job, "released", timeout=180)
    assert not (left := job_cgroups_left(job)), f"job {job}'s cgroups are left: {left}"


def _ids(lab: Mapping[str, str]) -> tuple[int, int]:
    import pwd

    pw = pwd.getpwnam(lab["RSA_LAB_USER"])
    return pw.pw_uid, pw.pw_gid
