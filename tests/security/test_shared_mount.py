"""Mounting over shared directories (issue 36), in the live lab.

A job's RAMDISK mounted over ``#RSA_DATA_IN``/``#RSA_DATA_OUT`` hides that directory on
the node (node-wide in the lab's ``hooks.mounts: node``). The lab user (``rsauser``)
names as DATA_IN, then as DATA_OUT, a project directory of the second lab user
(``rsaother``) that both may write: owned by rsaother, group the job user's project
group (``RSA_LAB_PROJECT_GROUP``), mode 2775. The node must refuse the mount with one
actionable line naming the directive, the job runs from the PFS, and all along rsaother
on the job's node still sees and writes the directory, its files untouched; the job's
output is not hidden from it.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from rsa_scheduler.runner import Identity
from tests.e2e.test_prolog_lifecycle import node_mounts, nothing_of_job_mounted, run_to_start
from tests.integration.conftest import as_user
from tests.integration.slurmkit import make_jobs, root, wait_for
from tests.integration.test_rsad_staging import FILL, fill, rsa_job, wait_state
from tests.security.test_fs_access import on_node

THEIRS = {"plan.txt": "the team's plan\n", "data.bin": "0123456789" * 500}


def _tree(d: Path) -> dict[str, tuple[int, int, int, str]]:
    """name -> (uid, gid, mode, sha256) of every file below ``d``, and ``d`` itself."""
    out = {}
    for p in [d, *sorted(d.rglob("*"))]:
        st = p.lstat()
        digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else ""
        out[str(p.relative_to(d))] = (st.st_uid, st.st_gid, st.st_mode, digest)
    return out


@pytest.fixture
def project(lab: Mapping[str, str]) -> Iterator[Path]:
    """``<pfs>/home/rsa-proj-*/{in,out}``: rsaother's, the job user's project group (the
    host lab's ``rsa``, of both users; the cluster lab's ``proj1``, from the directory),
    2775, with rsaother's files; the job user is in the group and may write both."""
    other = Identity.of(lab["RSA_LAB_OTHER_USER"])
    group = lab["RSA_LAB_PROJECT_GROUP"]
    tag = f"{os.getpid()}-{time.monotonic_ns()}"
    base = Path(lab["RSA_LAB_PFS_ROOT"]) / "home" / f"rsa-proj-{tag}"
    try:
        for d in (base, base / "in", base / "out"):
            subprocess.run(["install", "-d", "-m", "2775", "-o", other.user, "-g", group,
                            str(d)], check=True, timeout=30)
        for d in (base / "in", base / "out"):
            for name, text in THEIRS.items():
                done = as_user(lab, other.user, ["bash", "-c", 'umask 002; printf %s "$1" '
                                                 '> "$2"', "bash", text, str(d / name)])
                assert done.returncode == 0, done.stderr
        yield base
    finally:
        subprocess.run(["rm", "-rf", "--one-file-system", str(base)], check=False,
                       timeout=120)


@pytest.fixture
def mine(lab: Mapping[str, str]) -> Iterator[Path]:
    """The job user's own directories: ``in`` (a small input), ``out`` and ``res``."""
    base = Path(lab["RSA_LAB_PFS"]) / f"shared-mount-{os.getpid()}-{time.monotonic_ns()}"
    script = (f"set -e; umask 022; mkdir -p {base}/in {base}/out {base}/res; "
              f"head -c 20000 /dev/urandom > {base}/in/f1")
    done = as_user(lab, lab["RSA_LAB_USER"], ["bash", "-c", script], timeout=60)
    assert done.returncode == 0, done.stderr
    yield base
    subprocess.run(["rm", "-rf", "--one-file-system", str(base)], check=False, timeout=120)


def job_script(lab: Mapping[str, str], data_in: Path, data_out: Path, res: Path) -> str:
    """Reads its input and waits for ``go-in``; asks for the reset, writes its output
    and waits for ``go``: the test looks at the node in both phases."""
    rsa = f"{lab['RSA_LAB_VENV']}/bin/rsa"
    return f"""#!/bin/bash
#SBATCH -t 5
#RSA_DATA_IN={data_in}
#RSA_DATA_OUT={data_out}
#RSA_RESET=input-done
hostname > {res}/node
findmnt -n -o TARGET --target {data_in} > {res}/inmnt
ls {data_in} > {res}/inls
touch {res}/reading
while [ ! -e {res}/go-in ]; do sleep 0.5; done
{rsa} input-done > {res}/input-done 2>&1
findmnt -n -o TARGET --target {data_out} > {res}/outmnt
echo "the job's result" > {data_out}/job-result
touch {res}/written
while [ ! -e {res}/go ]; do sleep 0.5; done
"""


def owned_message(data: Mapping[str, Any], directive: str, path: Path) -> bool:
    text = json.dumps(data)
    return (f"{directive}={path} is owned by rsaother, not you: the RAMDISK is mounted "
            f"only over your own directories; use a directory of your own" in text
            and "staging.shared_dirs" in text)


def teammate_sees(lab: Mapping[str, str], node: str, d: Path, expect: list[str]) -> None:
    """On the job's node, while the job runs, rsaother lists, reads and writes ``d``
    (every observation is made before any is judged: a failure shows them all)."""
    other = lab["RSA_LAB_OTHER_USER"]
    where = on_node(node, "root", ["findmnt", "-n", "-o", "TARGET", "--target", str(d)])
    listed = on_node(node, other, ["ls", str(d)])
    read = on_node(node, other, ["cat", str(d / "plan.txt")])
    wrote = on_node(node, other, ["touch", str(d / "from-teammate")])
    report = {"mounted on": where.stdout.strip(),
              **{k: (r.returncode, r.stdout[:200], r.stderr.strip())
                 for k, r in (("ls", listed), ("cat", read), ("touch", wrote))}}
    assert where.stdout.strip() != str(d), f"the RAMDISK hides {d} on {node}: {report}"
    assert listed.returncode == 0 and set(expect) <= set(listed.stdout.split()), report
    assert read.returncode == 0 and read.stdout == THEIRS["plan.txt"], report
    assert wrote.returncode == 0, report


Check = Callable[[str], None]


def run_job(lab: Mapping[str, str], data_in: Path, data_out: Path, res: Path,
            while_reading: Check, while_writing: Check) -> dict[str, Any]:
    """Run the job; call each check with the job's node while the job reads its input
    (before the reset) and while it writes its output (after it)."""
    with make_jobs(lab) as jobs:
        job = run_to_start(lab, jobs, job_script(lab, data_in, data_out, res))
        wait_for(f"job {job} read its input", (res / "reading").exists, timeout=180)
        node = (res / "node").read_text().strip()
        while_reading(node)
        (res / "go-in").touch()
        wait_for(f"job {job} wrote its output", (res / "written").exists, timeout=120)
        while_writing(node)
        (res / "go").touch()
        wait_state(lab, job, "released", timeout=180)
        wait_for(f"job {job}'s client mounts gone", lambda: nothing_of_job_mounted(job),
                 timeout=60)
        data = rsa_job(lab, job)
    assert data is not None
    return data


def test_a_shared_group_directory_as_data_in_is_not_mounted_over(
        lab: Mapping[str, str], project: Path, mine: Path) -> None:
    shared, res = project / "in", mine / "res"
    before = _tree(shared)

    def while_reading(node: str) -> None:
        teammate_sees(lab, node, shared, list(THEIRS))

    data = run_job(lab, shared, mine / "out", res, while_reading, lambda _node: None)
    # the job ran from the PFS: its input was the team's directory itself
    assert (res / "inmnt").read_text().strip() != str(shared)
    assert set(THEIRS) <= set((res / "inls").read_text().split())
    assert owned_message(data, "#RSA_DATA_IN", shared), json.dumps(data["events"][-12:])
    after = _tree(shared)
    assert after.pop("from-teammate")[0] == Identity.of(lab["RSA_LAB_OTHER_USER"]).uid
    assert after == before, "rsaother's directory or files changed"


def test_a_shared_group_directory_as_data_out_is_not_mounted_over(
        lab: Mapping[str, str], project: Path, mine: Path) -> None:
    shared, res = project / "out", mine / "res"
    before = _tree(shared)

    def while_writing(node: str) -> None:
        # the job's output went straight to the PFS: rsaother sees it at once
        teammate_sees(lab, node, shared, [*THEIRS, "job-result"])
        seen = on_node(node, lab["RSA_LAB_OTHER_USER"], ["cat", str(shared / "job-result")])
        assert seen.stdout == "the job's result\n", seen.stderr

    data = run_job(lab, mine / "in", shared, res, lambda _node: None, while_writing)
    assert (res / "outmnt").read_text().strip() != str(shared)
    assert owned_message(data, "#RSA_DATA_OUT", shared), json.dumps(data["events"][-12:])
    # the job itself was told the truth, from `rsa input-done`
    told = (res / "input-done").read_text()
    assert f"#RSA_DATA_OUT={shared} is owned by rsaother, not you" in told, told
    assert told.rstrip().endswith(f"{shared} is on the PFS as usual"), told
    after = _tree(shared)
    assert after.pop("from-teammate")[0] == Identity.of(lab["RSA_LAB_OTHER_USER"]).uid
    assert after.pop("job-result")[0] == Identity.of(lab["RSA_LAB_USER"]).uid
    assert after == before, "rsaother's directory or files changed"


def _two_jobs_on_c1(lab: Mapping[str, str], res: Path, script_a: str, script_b: str
                    ) -> tuple[str, str]:
    """Two jobs of the lab user side by side on c1 (the ``shared`` partition): the first
    (``script_a``) staged while on-deck and running, then the second (``script_b``) beside
    it; each script touches ``res/running.<a|b>`` and waits for ``res/go``. Once both are
    released and nothing of either is mounted on any compute node: the first's id and
    what ``rsa job`` tells of the second."""
    with make_jobs(lab) as jobs:
        fill(jobs)  # the first job waits on-deck while its input is staged
        first = jobs.submit("-p", "shared", "-w", "c1", script=script_a)
        wait_state(lab, first, "locked-in", timeout=120)
        for filler in jobs.fillers:
            root(lab, "scancel", filler)
        wait_for(f"job {first} runs", (res / "running.a").exists, timeout=120)
        slot = jobs.submit("-p", "shared", "-w", "c1", *FILL)  # c1's second place
        second = jobs.submit("-p", "shared", "-w", "c1", script=script_b)
        wait_state(lab, second, "locked-in", timeout=120)
        root(lab, "scancel", slot)
        wait_for(f"job {second} runs", (res / "running.b").exists, timeout=120)
        (res / "go").touch()
        for job in (first, second):
            wait_state(lab, job, "released", timeout=180)
        wait_for("both jobs' client mounts gone", lambda: nothing_of_job_mounted(first)
                 and nothing_of_job_mounted(second), timeout=60)
        return first, json.dumps(rsa_job(lab, second))


@pytest.mark.once  # the compute node's mounts: the same whichever mode drives staging
def test_two_jobs_naming_one_data_in_on_one_node_leave_nothing_mounted(
        lab: Mapping[str, str], mine: Path) -> None:
    """Two jobs of the lab user share c1 (the ``shared`` partition) and name the same
    DATA_IN. The second job's mount is refused with the line that says what it sees (the
    first job's RAMDISK, which it does read); after both, nothing is mounted there on
    c1. On the code before, the second RAMDISK was mounted over the first, whose Epilog
    could not unmount it (covered): it stayed over the user's directory on c1 after both
    jobs (tests/unit/test_node_mounts.py shows it with real mounts)."""
    data_in, res = mine / "in", mine / "res"

    def script(tag: str) -> str:
        return f"""#!/bin/bash
#SBATCH -t 5
#RSA_DATA_IN={data_in}
findmnt -n -o SOURCE --target {data_in} > {res}/src.{tag}
touch {res}/running.{tag}
while [ ! -e {res}/go ]; do sleep 0.2; done
"""

    first, told = _two_jobs_on_c1(lab, res, script("a"), script("b"))
    assert node_mounts(lab, str(data_in))["c1"] != str(data_in), "a RAMDISK left on c1"
    assert (f"#RSA_DATA_IN={data_in} has the RAMDISK of your job {first} mounted over "
            f"it on this node" in told), told
    # what the line says: the second job read the first job's RAMDISK there
    src = (res / "src.a").read_text().strip()
    assert src and (res / "src.b").read_text().strip() == src


def test_a_job_naming_a_parent_of_another_jobs_data_in_on_one_node_is_refused(
        lab: Mapping[str, str], mine: Path) -> None:
    """Found by review: two jobs of the lab user share c1; the second names as DATA_IN a
    parent of the first's (``run`` over ``run/in``). Its mount is refused with the line
    that says where the other job's RAMDISK is; the first job keeps reading its own
    RAMDISK; after both, nothing is mounted on c1. On the code before, the second RAMDISK
    hid the first job's input mount, whose Epilog could not reach it (left in place:
    the unit test with real mounts, tests/unit/test_node_mounts.py::
    test_a_jobs_ramdisk_is_never_mounted_over_a_parent_of_another_jobs_mount)."""
    run, res = mine / "run", mine / "res"
    data_in = run / "in"
    done = as_user(lab, lab["RSA_LAB_USER"], ["bash", "-c", f"set -e; umask 022; "
                                              f"mkdir -p {data_in}; echo x > {data_in}/f"],
                   timeout=60)
    assert done.returncode == 0, done.stderr

    def script(tag: str, path: Path) -> str:
        return f"""#!/bin/bash
#SBATCH -t 5
#RSA_DATA_IN={path}
findmnt -n -o SOURCE --target {data_in} > {res}/src.{tag}
touch {res}/running.{tag}
while [ ! -e {res}/go ]; do sleep 0.2; done
findmnt -n -o SOURCE --target {data_in} > {res}/end.{tag}
"""

    _first, told = _two_jobs_on_c1(lab, res, script("a", data_in), script("b", run))
    assert (f"#RSA_DATA_IN={run} has the RAMDISK of another job mounted below it on this "
            f"node, over {data_in}" in told), told
    src = (res / "src.a").read_text().strip()
    assert src and (res / "end.a").read_text().strip() == src  # its own RAMDISK to the end
    left = node_mounts(lab, str(data_in))["c1"]
    assert left not in (str(data_in), str(run)), f"a RAMDISK left on c1 at {left}"


def test_the_ramdisk_over_data_in_is_nosuid_and_nodev_on_the_node(
        lab: Mapping[str, str], mine: Path) -> None:
    """Found by review: the RAMDISK's client mount is ``nosuid,nodev`` (a root on one
    compute node of a job must not plant a setuid binary for the job's other nodes), but
    the read-only mount over DATA_IN (the default) was made read-only by a bind remount
    that cleared both: the job's tasks saw ``ro,relatime`` there. Now they see the
    client mount's flags (tests/unit/test_node_mounts.py, every mode)."""
    data_in, res = mine / "in", mine / "res"
    script = f"""#!/bin/bash
#SBATCH -t 5
#RSA_DATA_IN={data_in}
findmnt -n -o SOURCE,VFS-OPTIONS {data_in} > {res}/opts
"""
    with make_jobs(lab) as jobs:
        fill(jobs)  # the job waits on-deck while its input is staged
        job = jobs.submit("-p", "shared", "-w", "c1", script=script)
        wait_state(lab, job, "locked-in", timeout=120)
        for filler in jobs.fillers:
            root(lab, "scancel", filler)
        wait_state(lab, job, "released", timeout=180)
    text = (res / "opts").read_text()
    assert text.strip(), "no RAMDISK over DATA_IN"
    options = text.split()[-1]
    flags = options.split(",")
    assert "ro" in flags and "nosuid" in flags and "nodev" in flags, options
