"""Native mode under trouble (issue 38), in the lab: no job starts without its input.

1. rsad's queue reads fail (its squeue, through a wrapper in its ``slurm.bin_dir``,
   fails for the queue poll only) between Slurm's setup and data_in: data_in keeps the
   job waiting, and once squeue works again the input is staged and the job reads it
   from its RAMDISK (on main data_in answered "nothing to stage" and Slurm started the
   job on the PFS).
2. An array's tasks (each known to Slurm's hooks by its own job id) stage in across an
   rsad restart from a snapshot written after their setup: the hooks still find each
   task's RAMDISK (on main the restarted rsad took the own id for a job without
   directives).
3. rsad stopped while Slurm sets a job up, for longer than rsa-bb gave a setup before
   (30 s), and again during data_in: the job waits and starts with its input.
4. rsad down while the job ends (post_run, data_out), and ``scancel --hurry`` during
   stage-in and stage-out: nothing lost, nothing left.
5. rsad killed the moment Slurm has the job staged in (Slurm runs pre_run while rsad is
   down) and again before ``scancel --hurry`` (Slurm asks teardown while rsad is down):
   the job runs on its RAMDISK and its output is still staged out and verified.
6. A DATA_IN job that requeues itself reads its input from a RAMDISK in each run.

Each stage-in is held by a ``#RSA_PREPROCESS`` that waits for a ``go`` file, so the test
decides when it ends.
"""

from __future__ import annotations

import re
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import pytest
from ClusterShell.NodeSet import NodeSet

from rsa_scheduler.store import Store
from tests.e2e.conftest import input_area, md5_of
from tests.integration.conftest import as_user, read_lab_env
from tests.integration.slurmkit import (
    lab_nodes,
    make_jobs,
    past_requeue_delay,
    restart_lab_rsad,
    root,
    start_lab_rsad,
    stop_lab_rsad,
    wait_for,
)
from tests.integration.test_rsad_staging import rsa_job, wait_state
from tests.security.test_reap import _owned_script

pytestmark = pytest.mark.native

SLURM_TOOLS = ("squeue", "scontrol", "sinfo", "sacct", "sacctmgr", "scancel", "sbatch",
               "srun", "sprio", "sshare", "sdiag")



@pytest.fixture
def area(lab: Mapping[str, str]) -> Iterator[Path]:
    with input_area(lab, "native-trouble") as base:
        yield base


@contextmanager
def rsad_with(lab: Mapping[str, str], old: str, new: str) -> Iterator[None]:
    """The lab's rsad restarted with ``old`` replaced by ``new`` in its rsa.yaml; the
    lab's own configuration and rsad back afterwards."""
    conf = Path(lab["RSA_LAB_RSA_CONFIG"])
    original = conf.read_text()
    assert original.count(old) == 1, f"the lab's rsa.yaml has no {old!r}"
    conf.write_text(original.replace(old, new, 1))
    try:
        restart_lab_rsad(signal.SIGTERM)
        yield
    finally:
        conf.write_text(original)
        restart_lab_rsad(signal.SIGTERM)


def held_stage_in(lab: Mapping[str, str], area: Path) -> Path:
    """A PREPROCESS that copies the input once ``area/in/go`` exists (made by the test)."""
    pre = area / "pre.sh"
    _owned_script(lab, pre, """#!/bin/bash
while [ ! -e "$RSA_DATA_IN/go" ]; do sleep 0.5; done
cp "$RSA_DATA_IN"/f* "$RSA_RAMDISK"/
""")
    return pre


def go(lab: Mapping[str, str], area: Path) -> None:
    done = as_user(lab, lab["RSA_LAB_USER"], ["touch", str(area / "in" / "go")])
    assert done.returncode == 0, done.stderr


def reader(area: Path, pre: Path | None = None, tag: str = "") -> str:
    """A job that records where its DATA_IN is mounted from and what it read."""
    return (f"#!/bin/bash\n#SBATCH -t 5\n#RSA_DATA_IN={area}/in\n"
            + (f"#RSA_PREPROCESS={pre}\n" if pre else "")
            + f"findmnt -n -o TARGET --target {area}/in > {area}/res/inmnt{tag}\n"
            f"(cd {area}/in && md5sum f*) > {area}/res/md5{tag}\n")


def queue_line(lab: Mapping[str, str], job: str) -> tuple[str, str]:
    out = root(lab, "squeue", "-h", "-t", "all", "-j", job, "-o", "%T|%r").strip()
    state, _, reason = out.partition("|")
    return state, reason


def read_its_input_from_the_ramdisk(area: Path, tag: str = "") -> None:
    assert (area / "res" / f"inmnt{tag}").read_text().strip() == f"{area}/in", \
        "the job read its input from the PFS: it started without its input"
    assert (area / "res" / f"md5{tag}").read_text() == md5_of(area / "in")


def test_a_failed_queue_read_after_setup_keeps_the_job_waiting_for_its_input(
        lab: Mapping[str, str], area: Path, tmp_path: Path) -> None:
    bin_dir = tmp_path / "slurm-bin"
    bin_dir.mkdir()
    for tool in SLURM_TOOLS:
        if Path("/usr/bin", tool).exists():
            (bin_dir / tool).symlink_to(Path("/usr/bin", tool))
    fail = tmp_path / "squeue-fails"
    (bin_dir / "squeue").unlink()
    # rsad's queue poll fails while the flag exists; one job's identity (-j) still reads
    (bin_dir / "squeue").write_text(f"""#!/bin/bash
case " $* " in *" -j "*) ;; *)
  if [ -e {fail} ]; then
    echo "squeue: error: slurm_load_jobs error: Socket timed out on send/recv" >&2
    exit 1
  fi;;
esac
exec /usr/bin/squeue "$@"
""")
    (bin_dir / "squeue").chmod(0o755)
    with rsad_with(lab, "  bin_dir: /usr/bin\n", f"  bin_dir: {bin_dir}\n"), \
            make_jobs(lab) as jobs:
        fail.touch()
        job = jobs.submit(script=reader(area))
        wait_for("Slurm's setup of the job in rsad's log", lambda: set_up(job), timeout=120,
                 every=0.5)
        time.sleep(15)  # several failed polls: data_in must keep the job waiting
        assert queue_line(lab, job) == ("PENDING", "BurstBufferStageIn"), \
            "the job left stage-in while rsad could not read the queue"
        fail.unlink()
        wait_state(lab, job, "released", timeout=300)
    read_its_input_from_the_ramdisk(area)


def rsad_store() -> Path:
    """The lab rsad's event store (lab/rsalab/rsad.py; the cluster lab's, the package's)."""
    return Path(read_lab_env()["RSA_LAB_RSAD_STORE"])


def set_up(job: str) -> bool:
    """rsad has logged Slurm's burst buffer setup of ``job``."""
    with Store.open(rsad_store(), readonly=True) as ro:
        return any(e.name == "bb.setup" for e in ro.events(job))


def snapshot_after(job: str) -> bool:
    """A snapshot of the lab rsad's state written after ``job``'s burst buffer setup."""
    with Store.open(rsad_store(), readonly=True) as ro:
        setup = [e.seq for e in ro.events(job) if e.name == "bb.setup"]
        snap = ro.latest_snapshot()
    return bool(setup) and snap is not None and snap[0] > max(setup)


def snapshot_soon(lab: Mapping[str, str], tasks: list[str]) -> None:
    """Wait for a snapshot written after the tasks' setup. rsad writes one once as many
    events as it has jobs in memory came after the last (daemon/memory.py
    SnapshotCadence): with the jobs of earlier tests still in memory, a spare RSA node
    is drained and resumed (two events each time) until it does."""
    rsa = lab["RSA_LAB_VENV"] + "/bin/rsa"
    held: set[str] = set()
    for task in tasks:
        held |= set(NodeSet(str((rsa_job(lab, task) or {}).get("nodes") or "")))
    spare = next(n for n in lab_nodes(lab, "RSA_LAB_RSA_NODES") if n not in held)
    deadline = time.monotonic() + 180
    while not all(snapshot_after(t) for t in tasks):
        assert time.monotonic() < deadline, "rsad wrote no snapshot after the setup"
        root(lab, rsa, "drain", spare, "--reason", "native trouble test: a snapshot")
        root(lab, rsa, "resume", spare)
        time.sleep(0.5)


def test_an_arrays_tasks_stage_in_across_an_rsad_restart_from_a_snapshot(
        lab: Mapping[str, str], area: Path) -> None:
    pre = held_stage_in(lab, area)
    script = reader(area, pre, "$SLURM_ARRAY_TASK_ID").replace(
        "#SBATCH -t 5\n", "#SBATCH -t 5\n#SBATCH --array=1-2\n")
    with rsad_with(lab, "\ndaemon:\n", "\ndaemon:\n  snapshot_every: 1\n"), \
            make_jobs(lab) as jobs:
        array = jobs.submit(script=script)
        tasks = [f"{array}_{t}" for t in (1, 2)]
        for task in tasks:
            wait_state(lab, task, "staging-in", timeout=180)
        snapshot_soon(lab, tasks)
        restart_lab_rsad(signal.SIGTERM)
        # the stage-ins are held: Slurm must keep both tasks waiting for their input (on
        # main the task known by its own id was answered "nothing to stage" and started;
        # only the node Prolog's early-start hold then covered it up)
        time.sleep(15)
        for task in tasks:
            assert queue_line(lab, task) == ("PENDING", "BurstBufferStageIn"), \
                f"task {task} left stage-in before its input was staged"
        go(lab, area)
        for task in tasks:
            wait_state(lab, task, "released", timeout=300)
    for t in (1, 2):
        read_its_input_from_the_ramdisk(area, str(t))


def test_rsad_stopped_during_setup_and_data_in_starts_no_job_without_input(
        lab: Mapping[str, str], area: Path) -> None:
    pre = held_stage_in(lab, area)
    with make_jobs(lab) as jobs:
        try:
            stop_lab_rsad(signal.SIGTERM)
            job = jobs.submit(script=reader(area, pre))
            wait_for("Slurm's setup of the job", lambda: queue_line(lab, job) == (
                "PENDING", "BurstBufferStageIn"), timeout=120, every=0.5)
            time.sleep(40)  # past the 30 s rsa-bb gave a setup before: not held
            assert queue_line(lab, job) == ("PENDING", "BurstBufferStageIn")
        finally:
            start_lab_rsad()
        wait_state(lab, job, "staging-in", timeout=180)
        try:
            stop_lab_rsad(signal.SIGKILL)  # a crash during data_in
            time.sleep(10)
            assert queue_line(lab, job) == ("PENDING", "BurstBufferStageIn")
        finally:
            start_lab_rsad()
        go(lab, area)
        wait_state(lab, job, "released", timeout=300)
        data = rsa_job(lab, job) or {}
        assert "declined" not in [e.get("to") for e in data.get("events", [])]
    read_its_input_from_the_ramdisk(area)


def writer(area: Path, post: Path | None = None) -> str:
    """An output-only job: two files, their md5 recorded beside them."""
    return (f"#!/bin/bash\n#SBATCH -t 5\n#RSA_DATA_OUT={area}/out\n"
            + (f"#RSA_POSTPROCESS={post}\n" if post else "")
            + f"head -c $((8 << 20)) /dev/urandom > {area}/out/a\necho b > {area}/out/b\n"
            f"(cd {area}/out && md5sum a b) > {area}/res/md5.out\n")


def test_rsad_down_while_the_job_ends_its_output_still_staged_before_slurm_ends_it(
        lab: Mapping[str, str], area: Path) -> None:
    """rsad killed while the job runs; the job ends (post_run, data_out while rsad is
    unreachable); rsad back 40 s later: the output is staged out and verified before
    Slurm counts the job done, nothing quarantined."""
    script = writer(area).replace("(cd ", "sleep 15\n(cd ", 1)
    with make_jobs(lab) as jobs:
        job = jobs.submit(script=script)
        wait_state(lab, job, "mounted-output", timeout=240)
        try:
            stop_lab_rsad(signal.SIGKILL)
            wait_for("the job's end in Slurm", lambda: queue_line(lab, job)[0] in (
                "STAGE_OUT", "COMPLETING", "COMPLETED"), timeout=120)
            time.sleep(40)  # post_run and data_out asked while rsad is down
            assert queue_line(lab, job)[0] != "COMPLETED", \
                "Slurm ended the job while its output was only on the RAMDISK"
        finally:
            start_lab_rsad()
        wait_for("Slurm's end of the job", lambda: queue_line(lab, job)[0] == "COMPLETED",
                 timeout=300)
        data = rsa_job(lab, job) or {}
        reached = [e.get("to") for e in data.get("events", [])]
        assert "output-verified" in reached and "quarantined" not in reached, reached
    got = root(lab, "bash", "-c", f"cd {area}/out && md5sum a b")
    assert got == (area / "res" / "md5.out").read_text()


def test_scancel_hurry_during_stage_in_and_stage_out_leaves_nothing_and_loses_nothing(
        lab: Mapping[str, str], area: Path) -> None:
    """scancel --hurry while the stage-in waits: the job ends, its RAMDISK is torn down.
    scancel --hurry while the stage-out (a POSTPROCESS held by the test) runs: Slurm
    skips its stage-out, but rsad keeps the RAMDISK until the output is on the PFS."""
    pre = held_stage_in(lab, area)
    post = area / "post.sh"
    _owned_script(lab, post, f"""#!/bin/bash
while [ ! -e {area}/res/go-out ]; do sleep 0.5; done
cp "$RSA_RAMDISK"/a "$RSA_RAMDISK"/b "$RSA_DATA_OUT"/
""")
    with make_jobs(lab) as jobs:
        first = jobs.submit(script=reader(area, pre))
        wait_state(lab, first, "staging-in", timeout=180)
        root(lab, "scancel", "--hurry", first)
        assert wait_state(lab, first, "released", timeout=180) == "released"
        second = jobs.submit(script=writer(area, post))
        wait_state(lab, second, "staging-out", timeout=240)
        root(lab, "scancel", "--hurry", second)
        time.sleep(10)
        data = rsa_job(lab, second) or {}
        assert data.get("rsa_state") == "staging-out", data.get("rsa_state")
        (area / "res" / "go-out").touch()
        assert wait_state(lab, second, "released", timeout=240) == "released"
        data = rsa_job(lab, second) or {}
        reached = [e.get("to") for e in data.get("events", [])]
        assert "output-verified" in reached, reached
    got = root(lab, "bash", "-c", f"cd {area}/out && md5sum a b")
    assert got == (area / "res" / "md5.out").read_text()


def bb_state(lab: Mapping[str, str], job: str) -> str:
    """Slurm's ``BurstBufferState`` of ``job`` (staging-in, staged-in, pre-run, running,
    post-run, staging-out, teardown, complete), empty once Slurm forgot it."""
    try:
        out = root(lab, "scontrol", "show", "job", job)
    except subprocess.CalledProcessError:  # the job is gone: no state
        return ""
    found = re.search(r"\bBurstBufferState=(\S+)", out)
    return found.group(1) if found else ""


def _staged(lab: Mapping[str, str], job: str) -> bool:
    return bb_state(lab, job) in ("staged-in", "pre-run", "running")


def test_rsad_down_at_pre_run_and_at_teardown_the_job_runs_on_its_ramdisk_and_keeps_output(
        lab: Mapping[str, str], area: Path) -> None:
    """rsad killed the moment Slurm has the job staged in: Slurm allocates the job and
    runs pre_run while rsad is down, and the job still runs with its RAMDISK over
    DATA_OUT once rsad is back. rsad killed again while the job runs, then
    ``scancel --hurry``: Slurm asks teardown while rsad is down; rsad, back, stages the
    output out and verifies it before the RAMDISK goes.

    Slurm may go from staged-in through pre_run to running faster than the kill lands
    (a loaded machine's poll misses the moment): then that job ends, rsad up, and the
    set-up is made again with a new job (at most three times), its own DATA_OUT and
    files, so nothing of the earlier attempt is read."""
    res = area / "res"
    with make_jobs(lab) as jobs:
        for attempt in range(3):
            out = area / f"out{attempt}"  # made by the user, as input_area makes out/
            made = as_user(lab, lab["RSA_LAB_USER"], ["mkdir", "-p", str(out)], timeout=60)
            assert made.returncode == 0, made.stderr
            script = (f"#!/bin/bash\n#SBATCH -t 5\n#RSA_DATA_OUT={out}\n"
                      f"findmnt -n -o TARGET --target {out} > {res}/outmnt{attempt}\n"
                      f"head -c $((4 << 20)) /dev/urandom > {out}/a\n"
                      f"(cd {out} && md5sum a) > {res}/md5.out{attempt}\n"
                      f"while [ ! -e {res}/go-end{attempt} ]; do sleep 0.5; done\n")
            job = jobs.submit(script=script)
            wait_for("Slurm's stage-in done", partial(_staged, lab, job), timeout=240,
                     every=0.1)
            seen: set[str] = set()
            try:
                stop_lab_rsad(signal.SIGKILL)
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline:
                    seen.add(bb_state(lab, job))
                    time.sleep(0.3)
            finally:
                start_lab_rsad()
            if "pre-run" in seen:
                break
            (res / f"go-end{attempt}").touch()  # raced past pre_run: end it, again
        assert "pre-run" in seen, f"Slurm never ran pre_run while rsad was down: {seen}"
        wait_for("the job's output written", lambda: (res / f"md5.out{attempt}").exists(),
                 timeout=240)
        assert (res / f"outmnt{attempt}").read_text().strip() == str(out), \
            "the job wrote its output to the PFS: it started without its RAMDISK"
        try:
            stop_lab_rsad(signal.SIGKILL)
            root(lab, "scancel", "--hurry", job)
            wait_for("Slurm's teardown while rsad is down",
                     lambda: bb_state(lab, job) == "teardown", timeout=60, every=0.3)
            time.sleep(10)
            assert bb_state(lab, job) == "teardown", "teardown ended while rsad was down"
        finally:
            start_lab_rsad()
        wait_state(lab, job, "released", timeout=300)
        data = rsa_job(lab, job) or {}
        reached = [e.get("to") for e in data.get("events", [])]
        assert "output-verified" in reached and "quarantined" not in reached, reached
    got = root(lab, "bash", "-c", f"cd {out} && md5sum a")
    assert got == (res / f"md5.out{attempt}").read_text()


def test_a_requeued_input_job_reads_its_input_from_a_ramdisk_in_each_run(
        lab: Mapping[str, str], area: Path) -> None:
    """A DATA_IN job that requeues itself: Slurm sets it up again, and its second run
    reads its input from a RAMDISK staged for that run, never from the PFS or from the
    first run's torn-down RAMDISK."""
    script = reader(area, tag="$n").replace(
        "#SBATCH -t 5\n", "#SBATCH -t 5\n#SBATCH --requeue\n").replace(
        "findmnt ", "n=${SLURM_RESTART_COUNT:-0}\nfindmnt ", 1)
    script += ('if [ "$n" = 0 ]; then scontrol requeue $SLURM_JOB_ID; sleep 120; fi\n')
    with make_jobs(lab) as jobs:
        job = jobs.submit(script=script)
        wait_for("the second run", past_requeue_delay(
            lab, job, lambda: (area / "res" / "md51").exists()), timeout=400)
        wait_for("the job's end", lambda: queue_line(lab, job)[0] == "COMPLETED",
                 timeout=300)
        wait_state(lab, job, "released", timeout=300)
    for n in ("0", "1"):
        read_its_input_from_the_ramdisk(area, n)
