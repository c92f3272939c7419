"""Nothing of a job stays on its RSA node (issue 36; docs/security.md, "Leftovers on RSA
nodes").

The second lab user (``rsaother``) runs a PREPROCESS that tries to fill ``/dev/shm``,
``/tmp`` and ``/var/tmp`` on its RSA node and leaves SysV shared memory there, as a hostile
job with only ``sbatch`` can. Once its job is released, nothing it wrote may be left on
the node, and the next job there, the first lab user's, stages its whole input (most of
the node's RAM pool) and reads it back intact. Before the fix the files stayed on the
node for good (with the pool in ``/dev/shm``, the old default, eating every later job's
space).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from tests.integration.conftest import as_user, read_lab_env
from tests.integration.slurmkit import in_cluster, lab_nodes, make_jobs, on_lab_node, root
from tests.integration.test_rsad_staging import fill, rsa_job, wait_state

#: the victim's input: half the lab's 2G RAM pool of one node
INPUT_BYTES = 1 << 30
#: what the attacker asks for in each place (bounded: on a node without the private
#: directories it lands on the lab host's /dev/shm and disk, and is removed after)
FILL = "1536M"
PLACES = ("/dev/shm", "/tmp", "/var/tmp")


def left_on(node: str, tag: str) -> list[str]:
    """The attacker's files in the RSA node's /dev/shm, /tmp and /var/tmp, as the node's
    own mount namespace sees them."""
    done = on_lab_node(node, ["find", *PLACES, "-maxdepth", "1", "-name", f"*{tag}*"],
                       timeout=30)
    return done.stdout.split()


def shm_of(user: str) -> list[str]:
    """The ids of SysV shared memory segments ``user`` holds: in the host lab its nodes
    share the host's IPC namespace; in the cluster lab on any RSA node (each its own)."""
    if in_cluster():
        outs = [on_lab_node(n, ["ipcs", "-m"], timeout=30, check=True).stdout
                for n in lab_nodes(read_lab_env(), "RSA_LAB_RSA_NODES")]
    else:
        outs = [subprocess.run(["ipcs", "-m"], capture_output=True, text=True, timeout=30,
                               check=True).stdout]
    return [f[1] for out in outs for f in (line.split() for line in out.splitlines())
            if len(f) > 2 and f[0].startswith("0x") and f[2] == user]


@pytest.fixture
def area(lab: Mapping[str, str]) -> Iterator[tuple[Path, Path, str]]:
    """The attacker's script in its own PFS directory and the victim's 1 GiB input."""
    tag = f"rsa-fill-{os.getpid()}-{time.monotonic_ns()}"
    other, user = lab["RSA_LAB_OTHER_USER"], lab["RSA_LAB_USER"]
    pfs = Path(lab["RSA_LAB_PFS"])
    bad, good = pfs.parent / other / tag, pfs / f"victim-{tag}"  # /pfs/home/<user>/...
    made = as_user(lab, other, ["mkdir", "-p", str(bad)])
    assert made.returncode == 0, made.stderr
    script = bad / "fill.sh"
    body = ("#!/bin/bash\n"
            f"for d in {' '.join(PLACES)}; do\n"
            f"  fallocate -l {FILL} \"$d/.{tag}\" 2>/dev/null ||\n"
            f"    dd if=/dev/zero of=\"$d/.{tag}\" bs=1M count={FILL[:-1]} 2>/dev/null\n"
            "done\n"
            "ipcmk -M 67108864 >/dev/null\n"
            f"echo \"node $(hostname) left: $(du -cb {' '.join(f'{p}/.{tag}' for p in PLACES)}"
            " 2>/dev/null | tail -1)\"\n"
            "exit 0\n")
    wrote = as_user(lab, other, ["bash", "-c", f": > {script} && chmod 700 {script}"])
    assert wrote.returncode == 0, wrote.stderr
    script.write_text(body)  # the attacker's own file (root fills it in; owner kept)
    made = as_user(lab, user, ["bash", "-c", f"set -e; mkdir -p {good}/in; head -c "
                               f"{INPUT_BYTES} /dev/urandom > {good}/in/big"], timeout=300)
    assert made.returncode == 0, made.stderr
    try:
        yield script, good, tag
    finally:
        subprocess.run(["rm", "-rf", str(bad), str(good)], check=False, timeout=120)
        # what the attack left on this host (the lab's nodes share its /tmp, /var/tmp and
        # /dev/shm when they have no private ones; the cluster lab's RSA nodes each their
        # own): only the attacker's files, by name
        if in_cluster():
            for node in lab_nodes(lab, "RSA_LAB_RSA_NODES"):
                on_lab_node(node, ["sh", "-c", f"rm -f {' '.join(f'{p}/.{tag}' for p in PLACES)}"
                                   f"; for m in $(ipcs -m | awk '$3 == \"{other}\" "
                                   "{print $2}'); do ipcrm -m $m; done"], timeout=60)
        for place in PLACES:
            path = Path(place) / f".{tag}"
            if path.exists() and path.stat().st_uid != 0:
                path.unlink()
        if not in_cluster():
            for shmid in shm_of(other):
                subprocess.run(["ipcrm", "-m", shmid], check=False, timeout=30)


def test_a_preprocess_leaves_nothing_and_the_next_job_gets_the_whole_pool(
        lab: Mapping[str, str], area: tuple[Path, Path, str]) -> None:
    script, good, tag = area
    other = lab["RSA_LAB_OTHER_USER"]
    assert not shm_of(other), "rsaother holds shared memory before the test"
    attack = f"""#!/bin/bash
#SBATCH -t 5
#RSA_PREPROCESS=/bin/bash {script}
true
"""
    with make_jobs(lab) as jobs:
        fill(jobs)
        job = jobs.submit(user=other, script=attack)
        wait_state(lab, job, "locked-in", timeout=180)
        nodes = str((rsa_job(lab, job) or {}).get("nodes", ""))
        for filler in jobs.fillers:
            root(lab, "scancel", filler)
        wait_state(lab, job, "released", timeout=180)
    data = rsa_job(lab, job) or {}
    said = [e["detail"]["script"] for e in data.get("events", [])
            if e.get("name") == "action.outcome" and "script" in (e.get("detail") or {})]
    assert said and said[-1]["returncode"] == 0, said
    ran_on = said[-1]["stdout"].split()[1]  # "node rsaN left: BYTES total"
    assert ran_on in nodes or nodes == "", (ran_on, nodes)
    assert not left_on(ran_on, tag), \
        f"{job}'s PREPROCESS left {left_on(ran_on, tag)} on {ran_on} ({said[-1]['stdout']})"
    assert not shm_of(other), f"{job}'s PREPROCESS left shared memory {shm_of(other)}"

    # the next job on that node (the lab's lowest free RSA node again) holds its input
    with (good / "in" / "big").open("rb") as f:
        want = hashlib.file_digest(f, "sha256").hexdigest()
    victim = f"""#!/bin/bash
#SBATCH -t 5
#RSA_DATA_IN={good}/in
sha256sum {good}/in/big > {good}/read
findmnt -n -o FSTYPE --target {good}/in >> {good}/read
"""
    with make_jobs(lab) as jobs:
        fill(jobs)
        job2 = jobs.submit(script=victim)
        wait_state(lab, job2, "locked-in", timeout=300)
        got_nodes = str((rsa_job(lab, job2) or {}).get("nodes", ""))
        for filler in jobs.fillers:
            root(lab, "scancel", filler)
        wait_state(lab, job2, "released", timeout=300)
    assert ran_on in got_nodes, f"the next job went to {got_nodes}, not {ran_on}"
    read = (good / "read").read_text().split("\n")
    assert read[0].split()[0] == want and read[1].startswith("fuse"), read
