"""The compute-node side in the lab, as the lab user (issue 5, seed 004 §3.2–3.3).

A 2-node job reads its input through the RAMDISK mounted over DATA_IN (contents checked
on both nodes), asks for the reset (``input-done``), writes through the RAMDISK mounted
over DATA_OUT, and its output is on the PFS after stage-out; hostile DATA_IN paths are
refused with nothing mounted; with rsad down the job still runs, from the PFS.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from tests.e2e.conftest import lab_mode
from tests.integration.conftest import as_user, read_lab_env
from tests.integration.slurmkit import (
    Jobs,
    lab_nodes,
    lab_rsad_pid,
    make_jobs,
    on_lab_node,
    restart_lab_rsad,
    root,
    wait_for,
)
from tests.integration.test_rsad_staging import fill, rsa_job, wait_state

NODE_DIR = Path("/run/rsa/node")


@pytest.fixture
def area(lab: Mapping[str, str]) -> Iterator[Path]:
    base = Path(lab["RSA_LAB_PFS"]) / f"prolog-e2e-{os.getpid()}-{time.monotonic_ns()}"
    script = (f"set -e; mkdir -p {base}/in/sub {base}/out {base}/res; "
              f"for i in $(seq 1 12); do head -c $((i*3000)) /dev/urandom > {base}/in/f$i; "
              f"done; echo deep > {base}/in/sub/deep")
    done = as_user(lab, lab["RSA_LAB_USER"], ["bash", "-c", script], timeout=120)
    assert done.returncode == 0, done.stderr
    yield base
    subprocess.run(["rm", "-rf", str(base)], check=False, timeout=120)


def node_mounts(lab: Mapping[str, str], path: str) -> dict[str, str]:
    """node -> the mount point containing ``path`` as that node (its namespace) sees it."""
    return {node: on_lab_node(node, ["findmnt", "-n", "-o", "TARGET", "--target", path],
                              timeout=10).stdout.strip()
            for node in lab_nodes(lab, "RSA_LAB_COMPUTE_NODES")}


def nothing_of_job_mounted(job: str) -> bool:
    for node in lab_nodes(read_lab_env(), "RSA_LAB_COMPUTE_NODES"):
        text = on_lab_node(node, ["cat", "/proc/self/mounts"], check=True).stdout
        if f"/run/rsa/node/{node}/{job}/" in text:
            return False
    return True


def job_script(lab: Mapping[str, str], base: Path, *, data_in: str, extra: str = "") -> str:
    rsa = f"{lab['RSA_LAB_VENV']}/bin/rsa"
    res, out = base / "res", base / "out"
    return f"""#!/bin/bash
#SBATCH -t 5
#SBATCH -N 2
#RSA_DATA_IN={data_in}
#RSA_DATA_OUT={out}
#RSA_RESET=input-done
{extra}
srun -N2 -n2 bash -c 'h=$(hostname); findmnt -n -o TARGET --target {data_in} > {res}/inmnt.$h;
  (cd {data_in} && md5sum f* sub/deep) > {res}/md5.$h'
{rsa} input-done > {res}/input-done 2>&1
# no polling: input-done returns once the RAMDISK is over DATA_OUT on both nodes
srun -N2 -n2 bash -c 'h=$(hostname); findmnt -n -o TARGET --target {out} > {res}/outmnt.$h;
  echo "written by $h" > {out}/from-$h'
"""


def md5_pfs(base: Path) -> str:
    return subprocess.run(["bash", "-c", "md5sum f* sub/deep"], cwd=base / "in",
                          capture_output=True, text=True, timeout=30, check=True).stdout


def run_to_start(lab: Mapping[str, str], jobs: Jobs, script: str,
                 before_start: Callable[[], None] | None = None,
                 staged_state: str = "locked-in") -> str:
    fill(jobs)
    job = jobs.submit(script=script)
    wait_state(lab, job, staged_state, timeout=120)
    if before_start is not None:
        before_start()
    for filler in jobs.fillers:
        root(lab, "scancel", filler)
    return job


@pytest.mark.prologflags
def test_slurm_runs_with_the_prolog_flags_this_run_asked_for(lab: Mapping[str, str]) -> None:
    """The tests marked ``prologflags`` run twice in `make test`: with no PrologFlags (the
    Prolog runs at each node's first step) and with Alloc,Contain (at allocation, on every
    node, with an extern step). This proves which one Slurm really runs."""
    want = lab.get("RSA_LAB_PROLOG_FLAGS", "")  # the lab's fact (either lab writes it)
    config = root(lab, "scontrol", "show", "config")
    line = next(ln for ln in config.splitlines() if ln.startswith("PrologFlags"))
    have = line.split("=", 1)[1].strip()
    if not want:
        assert have in ("(null)", ""), line
    else:
        assert {f.lower() for f in have.split(",")} >= {f.lower() for f in want.split(",")}, line


@pytest.mark.prologflags
def test_two_node_job_reads_input_and_writes_output_through_the_ramdisk(
        lab: Mapping[str, str], area: Path) -> None:
    with make_jobs(lab) as jobs:
        job = run_to_start(lab, jobs, job_script(lab, area, data_in=str(area / "in")))
        # the compute nodes are free before stage-out ends
        wait_state(lab, job, "staging-out", "verifying", "output-verified", "tearing-down",
                   "released", timeout=180)
        state = root(lab, "squeue", "-h", "-j", job, "-o", "%T").strip()
        # (native mode: the job itself waits in Slurm's stage-out, its nodes free)
        assert state in ("", "COMPLETING", "COMPLETED", *(
            ("STAGE_OUT",) if lab_mode(lab) == "native" else ())), state
        wait_state(lab, job, "released", timeout=180)
    res = area / "res"
    nodes = sorted(p.name.split(".", 1)[1] for p in res.glob("md5.*"))
    assert len(nodes) == 2
    for node in nodes:
        assert (res / f"inmnt.{node}").read_text().strip() == str(area / "in")
        assert (res / f"md5.{node}").read_text() == md5_pfs(area)
        assert (res / f"outmnt.{node}").read_text().strip() == str(area / "out")
        assert (area / "out" / f"from-{node}").read_text() == f"written by {node}\n"
    assert (res / "input-done").read_text() == (
        f"job {job}: input done; the RAMDISK is mounted over {area / 'out'}: write there\n")
    assert nothing_of_job_mounted(job)
    data = rsa_job(lab, job)
    assert data is not None
    outcomes = {e["action"].split("/")[2]: e["result"] for e in data["events"]
                if e["name"] == "action.outcome"}
    assert outcomes.get("mount-input") == "ok" and outcomes.get("reset") == "ok"


@pytest.fixture
def hostile_dir(lab: Mapping[str, str], area: Path, request: pytest.FixtureRequest
                ) -> Iterator[str]:
    """A DATA_IN the user can stage from but root must never mount over."""
    kind = request.param
    made: list[str] = []
    if kind == "symlink-etc":
        as_user(lab, lab["RSA_LAB_USER"], ["ln", "-s", "/etc/skel", str(area / "evil")])
        path = str(area / "evil")
    else:
        if kind == "outside":  # /pfs is not an allowed root (only /pfs/home is)
            path, owner = f"/pfs/rsa-outside-{os.getpid()}", lab["RSA_LAB_USER"]
        else:  # another user's directory, readable but not writable by the job's user
            path, owner = f"/pfs/home/rsa-other-{os.getpid()}", lab["RSA_LAB_OTHER_USER"]
        subprocess.run(["install", "-d", "-m", "0755", "-o", owner, path], check=True,
                       timeout=30)
        Path(path, "f1").write_text("x\n")
        os.chown(Path(path, "f1"), *_ids(owner))
        made.append(path)
    yield path
    for p in made:
        subprocess.run(["rm", "-rf", p], check=False, timeout=60)


def _ids(user: str) -> tuple[int, int]:
    import pwd

    pw = pwd.getpwnam(user)
    return pw.pw_uid, pw.pw_gid


# The refusal is the node agent's (root never mounts over such a path), the same in
# both modes: the native lab runs one kind (a job staged by Slurm's hooks, its mount
# refused on the node), the queue-mode lab all three.
@pytest.mark.parametrize("hostile_dir", [
    "symlink-etc",
    pytest.param("outside", marks=pytest.mark.once),
    pytest.param("other-user", marks=pytest.mark.once),
], indirect=True)
def test_hostile_data_in_is_refused_with_nothing_mounted(
        lab: Mapping[str, str], area: Path, hostile_dir: str) -> None:
    with make_jobs(lab) as jobs:
        fill(jobs)
        job = jobs.submit(script=job_script(lab, area, data_in=hostile_dir))
        reached = wait_state(lab, job, "locked-in", "declined", "released", timeout=120)
        for filler in jobs.fillers:
            root(lab, "scancel", filler)
        wait_for(f"job {job} ended", lambda: root(lab, "squeue", "-h", "-j", job, "-o",
                                                  "%T").strip() in ("", "COMPLETED"),
                 timeout=150)
        assert reached == "locked-in", "staged: the mount is what must be refused"
        wait_state(lab, job, "released", timeout=120)
    assert nothing_of_job_mounted(job)
    for node, target in node_mounts(lab, hostile_dir).items():
        assert target != hostile_dir, f"{node}: something is mounted over {hostile_dir}"
    for node, target in node_mounts(lab, "/etc/skel").items():
        assert target == "/", f"{node}: something is mounted over /etc/skel"
    data = rsa_job(lab, job)
    assert data is not None
    failed = [e for e in data["events"] if e["name"] == "action.outcome"
              and "/mount-input/" in e["action"]]
    assert failed and failed[0]["result"] != "ok"
    assert "refused" in str(failed[0].get("message", ""))
    # the job ran, from the PFS
    assert len(list((area / "res").glob("md5.*"))) == 2


@pytest.mark.queue
def test_rsad_down_during_the_prolog_the_job_runs_from_the_pfs(
        lab: Mapping[str, str], area: Path) -> None:
    pid = lab_rsad_pid()
    with make_jobs(lab) as jobs:
        try:
            # rsad alive but unresponsive when the job starts: the worst case for a hook
            job = run_to_start(lab, jobs, job_script(lab, area, data_in=str(area / "in")),
                         before_start=lambda: os.kill(pid, signal.SIGSTOP))
            wait_for(f"job {job} ran", lambda: len(list((area / "res").glob("md5.*"))) == 2,
                     timeout=90)
        finally:
            os.kill(pid, signal.SIGCONT)
    for f in (area / "res").glob("md5.*"):
        assert f.read_text() == md5_pfs(area)
    sinfo = root(lab, "sinfo", "-h", "-o", "%T").split()
    assert "drained" not in sinfo and "draining" not in sinfo


@pytest.mark.once  # the node agents' reset, in either mode
def test_busy_input_mount_is_never_forced_and_output_goes_to_the_pfs(
        lab: Mapping[str, str], area: Path) -> None:
    rsa = f"{lab['RSA_LAB_VENV']}/bin/rsa"
    res, out, data_in = area / "res", area / "out", area / "in"
    script = f"""#!/bin/bash
#SBATCH -t 5
#RSA_DATA_IN={data_in}
#RSA_DATA_OUT={out}
#RSA_RESET=input-done
exec 3< {data_in}/f1   # the input stays open: the reset must wait (seed 004 fn. 3)
{rsa} input-done > {res}/input-done 2>&1
sleep 6
findmnt -n -o TARGET --target {data_in} > {res}/inmnt-after
md5sum < {data_in}/f1 > {res}/md5-after
echo direct > {out}/direct
"""
    with make_jobs(lab) as jobs:
        job = run_to_start(lab, jobs, script)
        wait_state(lab, job, "released", timeout=180)
    assert (res / "inmnt-after").read_text().strip() == str(data_in)  # not forced away
    assert (out / "direct").read_text() == "direct\n"
    data = rsa_job(lab, job)
    assert data is not None
    resets = [e["result"] for e in data["events"]
              if e["name"] == "action.outcome" and "/reset/" in e["action"]]
    assert resets and resets[0] == "busy"
    assert nothing_of_job_mounted(job)


@pytest.mark.queue
def test_early_start_union_overlays_the_partial_ramdisk_on_the_pfs(
        lab: Mapping[str, str], area: Path) -> None:
    res, out, data_in = area / "res", area / "out", area / "in"
    done = as_user(lab, lab["RSA_LAB_USER"], ["bash", "-c", f"head -c 700M /dev/zero > "
                                              f"{data_in}/zz-blob"], timeout=300)
    assert done.returncode == 0, done.stderr
    script = f"""#!/bin/bash
#SBATCH -t 5
#RSA_DATA_IN={data_in}
#RSA_DATA_OUT={out}
#RSA_EARLY_START=union
findmnt -n -o TARGET,FSTYPE --target {data_in} > {res}/inmnt
(cd {data_in} && md5sum f* sub/deep) > {res}/md5.union
stat -c %s {data_in}/zz-blob > {res}/blob-size
touch {data_in}/new 2> {res}/write-err; echo $? > {res}/write-rc
"""
    with make_jobs(lab) as jobs:
        fill(jobs)
        job = jobs.submit(script=script)
        wait_state(lab, job, "staging-in", timeout=120)
        for filler in jobs.fillers:
            root(lab, "scancel", filler)
        wait_state(lab, job, "released", timeout=240)
    assert (res / "inmnt").read_text().split() == [str(data_in), "overlay"]
    assert (res / "md5.union").read_text() == md5_pfs(area)
    assert (res / "blob-size").read_text().strip() == str(700 << 20)
    assert (res / "write-rc").read_text().strip() != "0"  # read-only
    assert nothing_of_job_mounted(job)


def test_early_start_wait_holds_the_start_until_staged(
        lab: Mapping[str, str], area: Path) -> None:
    res, out, data_in = area / "res", area / "out", area / "in"
    done = as_user(lab, lab["RSA_LAB_USER"], ["bash", "-c", f"head -c 500M /dev/zero > "
                                              f"{data_in}/zz-blob"], timeout=300)
    assert done.returncode == 0, done.stderr
    script = f"""#!/bin/bash
#SBATCH -t 5
#RSA_DATA_IN={data_in}
#RSA_DATA_OUT={out}
#RSA_EARLY_START=wait
findmnt -n -o TARGET --target {data_in} > {res}/inmnt
(cd {data_in} && md5sum f* sub/deep) > {res}/md5.wait
stat -c %s {data_in}/zz-blob > {res}/blob-size
"""
    with make_jobs(lab) as jobs:
        fill(jobs)
        job = jobs.submit(script=script)
        wait_state(lab, job, "staging-in", timeout=120)
        for filler in jobs.fillers:
            root(lab, "scancel", filler)
        wait_state(lab, job, "released", timeout=300)
    assert (res / "inmnt").read_text().strip() == str(data_in)
    assert (res / "md5.wait").read_text() == md5_pfs(area)
    assert (res / "blob-size").read_text().strip() == str(500 << 20)
    assert nothing_of_job_mounted(job)


@pytest.mark.once  # the mid-job reset is rsad's and the node agents', in either mode
def test_writable_input_changes_are_written_back_before_the_reset(
        lab: Mapping[str, str], area: Path) -> None:
    rsa = f"{lab['RSA_LAB_VENV']}/bin/rsa"
    res, out, data_in = area / "res", area / "out", area / "in"
    script = f"""#!/bin/bash
#SBATCH -t 5
#RSA_DATA_IN={data_in}
#RSA_DATA_OUT={out}
#RSA_INPUT=rw
#RSA_RESET=input-done
findmnt -n -o TARGET --target {data_in} > {res}/inmnt
echo changed > {data_in}/f1
echo added > {data_in}/added
{rsa} input-done > {res}/input-done 2>&1
findmnt -n -o TARGET --target {out} > {res}/outmnt
"""
    with make_jobs(lab) as jobs:
        job = run_to_start(lab, jobs, script)
        wait_state(lab, job, "released", timeout=180)
    assert (res / "inmnt").read_text().strip() == str(data_in)
    assert (res / "outmnt").read_text().strip() == str(out)
    assert (data_in / "f1").read_text() == "changed\n"  # on the PFS
    assert (data_in / "added").read_text() == "added\n"
    assert nothing_of_job_mounted(job)


@pytest.mark.parametrize("stage_out", ["tar", "postprocess"])
@pytest.mark.prologflags
def test_output_only_job_writes_through_data_out_from_the_start(
        lab: Mapping[str, str], area: Path, stage_out: str) -> None:
    res, out = area / "res", area / "out"
    post = area / "pack.sh"
    if stage_out == "postprocess":
        post.write_text('#!/bin/bash\nset -e\ntar -C "$RSA_RAMDISK" -cf '
                        '"$RSA_DATA_OUT/packed.tar" .\n')
        post.chmod(0o755)
        os.chown(post, *_ids(lab["RSA_LAB_USER"]))
        directive = f"#RSA_POSTPROCESS={post}"
    else:
        directive = "#RSA_STAGE_OUT=tar"
    script = f"""#!/bin/bash
#SBATCH -t 5
#SBATCH -N 2
#RSA_DATA_OUT={out}
{directive}
srun -N2 -n2 bash -c 'h=$(hostname); findmnt -n -o TARGET --target {out} > {res}/outmnt.$h;
  echo "written by $h" > {out}/from-$h'
"""
    with make_jobs(lab) as jobs:
        job = run_to_start(lab, jobs, script)
        wait_state(lab, job, "released", timeout=180)
    nodes = sorted(p.name.split(".", 1)[1] for p in res.glob("outmnt.*"))
    assert len(nodes) == 2
    for node in nodes:
        assert (res / f"outmnt.{node}").read_text().strip() == str(out)
        assert not (out / f"from-{node}").exists()  # it went to the RAMDISK, not the PFS
    archives = sorted(out.glob("*.tar"))
    assert archives, sorted(p.name for p in out.iterdir())
    listing = subprocess.run(["tar", "-tf", str(archives[0])], capture_output=True,
                             text=True, timeout=30, check=True).stdout
    for node in nodes:
        assert f"from-{node}" in listing
    assert nothing_of_job_mounted(job)



@pytest.mark.once  # the node agents' reset, in either mode
def test_rsad_restarted_mid_job_the_node_agents_still_do_the_reset(
        lab: Mapping[str, str], area: Path) -> None:
    rsa = f"{lab['RSA_LAB_VENV']}/bin/rsa"
    res, out, data_in = area / "res", area / "out", area / "in"
    script = f"""#!/bin/bash
#SBATCH -t 5
#SBATCH -N 2
#RSA_DATA_IN={data_in}
#RSA_DATA_OUT={out}
#RSA_RESET=input-done
touch {res}/started
while [ ! -e {res}/go ]; do sleep 0.5; done
until {rsa} input-done > {res}/input-done 2>&1; do sleep 1; done
for i in $(seq 1 90); do
  n=$(srun -N2 -n2 findmnt -n -o TARGET --target {out} | grep -cx {out})
  [ "$n" = 2 ] && break; sleep 1
done
srun -N2 -n2 bash -c 'h=$(hostname); echo "written by $h" > {out}/from-$h'
"""
    with make_jobs(lab) as jobs:
        job = run_to_start(lab, jobs, script)
        wait_for("job started", (res / "started").exists, timeout=60)
        wait_state(lab, job, "mounted-input", timeout=60)
        restart_lab_rsad(signal.SIGTERM)
        (res / "go").write_text("")
        wait_state(lab, job, "released", timeout=240)
    files = sorted(p.name for p in out.glob("from-*"))
    assert len(files) == 2, files
    data = rsa_job(lab, job)
    assert data is not None
    resets = [e["result"] for e in data["events"]
              if e["name"] == "action.outcome" and "/reset/" in e["action"]]
    assert resets == ["ok"]
    assert nothing_of_job_mounted(job)


@pytest.mark.once  # rsad's record of the node side, in either mode
def test_a_late_prologs_mount_is_recorded_and_known_after_an_rsad_crash(
        lab: Mapping[str, str], area: Path) -> None:
    """Without ``PrologFlags=Alloc`` a node's Prolog runs at the job's first step there:
    the second node mounts the standing mount after the mount step's outcome recorded
    which nodes hold it. On the code before, that mount was counted in rsad's memory
    only: a restarted rsad did not know the node held the RAMDISK (only a reconnecting
    agent told it). Now it is the event ``compute.mounted``, the job's ``mounted`` fact
    follows it across a restart (SIGKILL here), and the reset after the restart releases
    and remounts on both nodes; nothing is drained. Each node's Epilog is recorded
    (``compute.epilog``)."""
    if "alloc" in lab.get("RSA_LAB_PROLOG_FLAGS", "").lower():
        pytest.skip("PrologFlags=Alloc runs every node's Prolog at allocation: none is late")
    rsa = f"{lab['RSA_LAB_VENV']}/bin/rsa"
    res, out, data_in = area / "res", area / "out", area / "in"
    script = f"""#!/bin/bash
#SBATCH -t 5
#SBATCH -N 2
#RSA_DATA_IN={data_in}
#RSA_DATA_OUT={out}
#RSA_RESET=input-done
echo "$SLURMD_NODENAME" > {res}/batch
sleep 4  # the mount step is done (its settle: 0.5 s) before the other node's Prolog
srun -N2 -n2 bash -c 'findmnt -n -o TARGET --target {data_in} > {res}/inmnt.$SLURMD_NODENAME'
touch {res}/stepped
while [ ! -e {res}/go ]; do sleep 0.5; done
until {rsa} input-done > {res}/input-done 2>&1; do sleep 1; done
srun -N2 -n2 bash -c 'echo "written by $SLURMD_NODENAME" > {out}/from-$SLURMD_NODENAME'
"""
    with make_jobs(lab) as jobs:
        job = run_to_start(lab, jobs, script)
        wait_for("the job's first step", (res / "stepped").exists, timeout=90)
        batch = (res / "batch").read_text().strip()
        nodes = sorted(p.name.split(".", 1)[1] for p in res.glob("inmnt.*"))
        assert len(nodes) == 2 and batch in nodes, nodes
        late = next(n for n in nodes if n != batch)
        for node in nodes:  # both read their input through the RAMDISK
            assert (res / f"inmnt.{node}").read_text().strip() == str(data_in)

        def recorded() -> list[str]:
            data = rsa_job(lab, job) or {}
            return [str(e.get("node")) for e in data.get("events") or ()
                    if e.get("name") == "compute.mounted"]

        wait_for("compute.mounted recorded", lambda: recorded() == [late], timeout=30)
        restart_lab_rsad(signal.SIGKILL)
        (res / "go").write_text("")
        wait_state(lab, job, "released", timeout=300)
    assert sorted(p.name for p in out.glob("from-*")) == [f"from-{n}" for n in nodes]
    data = rsa_job(lab, job)
    assert data is not None
    resets = [e["result"] for e in data["events"]
              if e["name"] == "action.outcome" and "/reset/" in e["action"]]
    assert resets == ["ok"], resets
    assert not [e for e in data["events"] if e["name"] == "compute.unconfirmed"]
    # each node's Epilog, of a node that held the mount, is recorded for a restart
    assert sorted(str(e["node"]) for e in data["events"]
                  if e["name"] == "compute.epilog") == nodes
    assert nothing_of_job_mounted(job)
    sinfo = root(lab, "sinfo", "-h", "-o", "%T").split()
    assert "drained" not in sinfo and "draining" not in sinfo


@pytest.mark.queue
@pytest.mark.prologflags
def test_early_start_fallback_reads_the_pfs_and_still_gets_the_output_ramdisk(
        lab: Mapping[str, str], area: Path) -> None:
    res, out, data_in = area / "res", area / "out", area / "in"
    done = as_user(lab, lab["RSA_LAB_USER"], ["bash", "-c", f"head -c 700M /dev/zero > "
                                              f"{data_in}/zz-blob"], timeout=300)
    assert done.returncode == 0, done.stderr
    script = f"""#!/bin/bash
#SBATCH -t 5
#RSA_DATA_IN={data_in}
#RSA_DATA_OUT={out}
#RSA_EARLY_START=fallback
findmnt -n -o TARGET --target {data_in} > {res}/inmnt
(cd {data_in} && md5sum f* sub/deep) > {res}/md5.fallback
for i in $(seq 1 60); do
  [ "$(findmnt -n -o TARGET --target {out})" = {out} ] && break; sleep 1
done
findmnt -n -o TARGET --target {out} > {res}/outmnt
echo result > {out}/result
"""
    with make_jobs(lab) as jobs:
        fill(jobs)
        job = jobs.submit(script=script)
        wait_state(lab, job, "staging-in", timeout=120)
        for filler in jobs.fillers:
            root(lab, "scancel", filler)
        wait_state(lab, job, "released", timeout=240)
    assert (res / "inmnt").read_text().strip() != str(data_in)  # the PFS
    assert (res / "md5.fallback").read_text() == md5_pfs(area)
    assert (res / "outmnt").read_text().strip() == str(out)  # RAMDISK for the output
    assert (out / "result").read_text() == "result\n"  # staged out to the PFS
    assert nothing_of_job_mounted(job)


@pytest.mark.queue
def test_a_declined_job_runs_from_the_pfs_and_its_tasks_are_told_why(
        lab: Mapping[str, str], area: Path) -> None:
    """Issue 13: a job whose request the RSA can never meet (more capacity than the whole
    pool) is declined while on-deck; when it runs, its tasks see RSA_STATE=pfs and the
    reason, as `rsa job` shows it."""
    res = area / "res"
    script = f"""#!/bin/bash
#SBATCH -t 5
#RSA_DATA_OUT={area}/out
#RSA_CAPACITY=1P
echo "$RSA_STATE|$RSA_MESSAGE" > {res}/env
echo out > {area}/out/result
"""
    with make_jobs(lab) as jobs:
        fill(jobs)
        job = jobs.submit(script=script)
        wait_state(lab, job, "declined", timeout=120)
        for filler in jobs.fillers:
            root(lab, "scancel", filler)
        wait_for(f"job {job} ran", lambda: (res / "env").exists(), timeout=120)
    state, _, message = (res / "env").read_text().strip().partition("|")
    assert state == "pfs", (state, message)
    data = rsa_job(lab, job)
    assert data is not None and data["declined"] is True  # declined, then released at its end
    prefix, suffix = "the RSA declined this job: ", f" (rsa job {job})"
    assert message.startswith(prefix) and message.endswith(suffix), message
    why = message[len(prefix):-len(suffix)]
    # what the user was told when it was declined: the rule's note and the reason, the
    # reason recorded in the declining transition (`rsa job` shows both)
    note, _, reason = why.partition(": ")
    assert note == "the RSA cannot serve this job; it uses the PFS", why
    assert "RSA_CAPACITY=1P" in reason, why
    declining = [e for e in data["events"]
                 if e["name"] == "rsa.transition" and e.get("to") == "declined"]
    assert [e.get("detail") for e in declining] == [reason], (why, json.dumps(declining))
    assert (area / "out" / "result").read_text() == "out\n"  # on the PFS: nothing to stage
