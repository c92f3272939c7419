"""Dependents never start before their parent's output is verified on the PFS (issue 32).

Job A writes 30 files through ``#RSA_DATA_OUT`` (its RAMDISK); job B, submitted with a
dependency on A, checksums every file of A's output when it starts. Slurm fulfils the
dependency when A ends, while A's output is still being staged out (the PFS is slowed
for the test so that stage-out lasts several seconds): on main B started then and read
part of the files. Now rsad holds B (begin time far ahead, its marker in B's
admin_comment) from the first cycle that sees it pending, and releases it once A's
output is verified, also across a kill -9 of rsad during A's stage-out and a restart of
slurmctld meanwhile (both modes). A
stage-out that fails for good keeps B held, with the reason in its comment, until
``rsa retry`` brings A's output to the PFS (queue mode; the hold is the same in both).
A dependency its user adds with ``scontrol update`` after A has ended, while rsad is down
and A's output is still on its RAMDISK, holds B too (job_submit.lua's job_modify), until
the output is verified (queue mode).

The dependency text Slurm prints for each type (``squeue -O Dependency``) is captured
here too: tests/data/slurm/squeue_dependency*.txt were written from it.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from rsa_scheduler.slurm.cli import dependents_argv
from rsa_scheduler.slurm.parse import EPOCH_TIME
from tests.e2e.conftest import input_area, lab_mode, other_user_area
from tests.integration.conftest import as_user, slurm_env
from tests.integration.slurmkit import (
    make_jobs,
    pfs_writes_at,
    restart_lab_slurmctld,
    root,
    show_job,
    start_lab_rsad,
    stop_lab_rsad,
    wait_for,
)
from tests.integration.test_rsad_staging import rsa_job, wait_state

DEP_MARK = "hold=after:"  # rsad's dependency hold (core/dependency.py DEP_MARK)
BEGIN = 60  # B's own --begin, seconds ahead: A's output is verified well before (~5 s
# on a quiet lab; once more than 25 s on the cluster lab beside make test's other lanes)
FILES = 30  # A's output: 30 files of 128 KiB, about 8 s through 4 Mbit/s


@pytest.fixture
def area(lab: Mapping[str, str]) -> Iterator[Path]:
    with input_area(lab, "dependents") as base:
        yield base


def parent_script(out: Path, res: Path, run_for: int) -> str:
    """A writes its output on its RAMDISK and its checksums on the PFS (res/)."""
    return f"""#!/bin/bash
#SBATCH -t 5
#RSA_DATA_OUT={out}
#RSA_EARLY_START=wait
findmnt -n -o TARGET --target {out} > {res}/outmnt || true
sleep {run_for}
for i in $(seq 1 {FILES}); do head -c 128K /dev/urandom > {out}/f$i; done
(cd {out} && md5sum f*) > {res}/a.md5
"""


def child_script(out: Path, res: Path) -> str:
    """B reads every file of A's output as soon as it starts."""
    return f"""#!/bin/bash
#SBATCH -t 5
date +%s.%N > {res}/b.start
(cd {out} && md5sum f*) > {res}/b.md5 2>&1
"""


def dependency_lines(lab: Mapping[str, str]) -> str:
    return root(lab, "squeue", "-h", "-r", "-t", "PD", "-O",
                "JobArrayID:0|,UserName:0|,Dependency:0|,admin_comment:0|")


def capture(lab: Mapping[str, str], name: str) -> None:
    """Keep what squeue printed for the parser's tests (RSA_DEP_CAPTURE: a directory)."""
    where = os.environ.get("RSA_DEP_CAPTURE")
    if where:
        path = Path(where) / f"squeue_dependency_{lab_mode(lab)}_{name}.txt"
        path.write_text(dependency_lines(lab))


def first_verified(lab: Mapping[str, str], job: str) -> float:
    data = rsa_job(lab, job) or {}
    return min(float(e["time"]) for e in data.get("events", [])
               if e["name"] == "rsa.transition" and e.get("to") == "output-verified")


def test_an_afterok_chain_reads_every_byte_across_an_rsad_crash_and_a_slurmctld_restart(
        lab: Mapping[str, str], area: Path) -> None:
    out, res = area / "out", area / "res"
    with make_jobs(lab) as jobs, pfs_writes_at(lab, "4mbit"):
        a = jobs.submit(script=parent_script(out, res, 6))
        b = jobs.submit(f"--dependency=afterok:{a}", script=child_script(out, res))
        # other types, for the parser's data (held by their user: never run)
        for dep in (f"afterany:{a}?afternotok:{a}", "singleton", f"after:{a}+1",
                    f"aftercorr:{a}"):
            with contextlib.suppress(AssertionError):  # a type Slurm refuses here
                jobs.submit("-H", "--array=0-1", f"--dependency={dep}", "-J", "chain",
                            script=child_script(area / "none", area / "none"))
        wait_for("A running", lambda: (res / "outmnt").exists(), timeout=120)
        capture(lab, "pending")
        wait_state(lab, a, "staging-out", "stage-out-failed", "verifying", timeout=120)
        capture(lab, "ended")
        stop_lab_rsad(signal.SIGKILL)
        try:
            restart_lab_slurmctld()  # Slurm keeps the hold in its saved state
            time.sleep(3)  # Slurm alone: B must stay pending while A's output is staged
            info = show_job(lab, b)
            # on main B had started (and read part of A's output) by now
            assert info["JobState"] == "PENDING", info
            assert DEP_MARK + a in info["AdminComment"], info
        finally:
            start_lab_rsad()
        wait_for("B's end", lambda: (res / "b.md5").exists() and root(
            lab, "squeue", "-h", "-j", b, "-o", "%T").strip() in ("", "COMPLETED"),
            timeout=240)
    assert (res / "outmnt").read_text().strip() == str(out)  # A wrote on its RAMDISK
    expected = (res / "a.md5").read_text()
    assert expected.count("\n") == FILES
    assert (res / "b.md5").read_text() == expected
    assert float((res / "b.start").read_text()) >= first_verified(lab, a)


@pytest.mark.queue
def test_a_failed_stage_out_keeps_the_dependent_held_until_rsa_retry(
        lab: Mapping[str, str], area: Path) -> None:
    """The dependency added after submission (``scontrol update``) to a job its user
    holds; A's stage-out fails until it is quarantined; B stays pending, told why, until
    the operator's ``rsa retry`` brings A's output to the PFS."""
    out, res = area / "out", area / "res"
    rsa = f"{lab['RSA_LAB_VENV']}/bin/rsa"
    with make_jobs(lab) as jobs:
        a = jobs.submit(script=parent_script(out, res, 4))
        b = jobs.submit("-H", script=child_script(out, res))
        root(lab, "scontrol", "update", f"JobId={b}", f"Dependency=afterok:{a}")
        root(lab, "scontrol", "release", b)  # its user's hold (rsad's is its own)
        wait_for("A on its RAMDISK", lambda: (res / "outmnt").exists(), timeout=120)
        out.chmod(0o555)  # the PFS side of DATA_OUT refuses the stage-out
        wait_state(lab, a, "quarantined", timeout=240)
        assert show_job(lab, b)["JobState"] == "PENDING", show_job(lab, b)
        wait_for("B told why", lambda: "quarantined" in show_job(lab, b)["Comment"],
                 timeout=60)
        info = show_job(lab, b)  # on main B had run on A's missing output
        assert info["JobState"] == "PENDING", info
        assert f"rsa retry {a}" in info["Comment"], info
        assert DEP_MARK + a in info["AdminComment"], info
        out.chmod(0o755)
        subprocess.run([rsa, "retry", a], check=True, capture_output=True, timeout=60)
        wait_for("B's end", lambda: (res / "b.md5").exists() and root(
            lab, "squeue", "-h", "-j", b, "-o", "%T").strip() in ("", "COMPLETED"),
            timeout=240)
    assert (res / "b.md5").read_text() == (res / "a.md5").read_text()
    assert float((res / "b.start").read_text()) >= first_verified(lab, a)


def epoch(lab: Mapping[str, str], *argv: str) -> str:
    """A Slurm command's output with its times as seconds since the epoch."""
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=60, check=True,
                          env={**slurm_env(lab), **EPOCH_TIME}).stdout


def verified_at(lab: Mapping[str, str], job: str) -> float | None:
    data = rsa_job(lab, job) or {}
    times = [float(e["time"]) for e in data.get("events", [])
             if e["name"] == "rsa.transition" and e.get("to") == "output-verified"]
    return min(times) if times else None


@pytest.mark.once
def test_a_dependent_keeps_its_own_begin_time_through_the_hold(
        lab: Mapping[str, str], area: Path) -> None:
    """B asks for ``--begin=now+60`` and depends on A, whose output is verified well
    before that: the release gives B its own begin time back (on main it started B at
    once: StartTime=now). The queue line rsad reads of the held B is captured for the
    parser's tests (RSA_DEP_CAPTURE)."""
    out, res = area / "out", area / "res"
    with make_jobs(lab) as jobs:
        a = jobs.submit(script=parent_script(out, res, 1))
        begin = int(time.time()) + BEGIN
        b = jobs.submit(f"--begin=now+{BEGIN}", f"--dependency=afterok:{a}",
                        script=child_script(out, res))
        held = show_job(lab, b)
        # held with its own begin time kept in the marker: job_submit.lua's (no parent
        # named yet) or, once rsad's cycle came first, rsad's naming A
        assert held["JobState"] == "PENDING" and re.search(
            rf"{DEP_MARK}({a})?;begin=", held["AdminComment"]), held
        where = os.environ.get("RSA_DEP_CAPTURE")
        if where:
            (Path(where) / "squeue_dependency_begin.txt").write_text(
                epoch(lab, *dependents_argv(Path("/usr/bin"))))
        wait_for("A's output verified", lambda: verified_at(lab, a) is not None,
                 timeout=BEGIN - 5)
        wait_for("B's end", lambda: (res / "b.md5").exists(), timeout=BEGIN + 120)
        started = epoch(lab, "squeue", "-h", "-t", "all", "-j", b, "-O", "StartTime:0")
    verified = verified_at(lab, a)
    assert verified is not None and verified < begin - 5  # B could have run before
    assert int(started.strip()) >= begin, (started, begin)  # Slurm's StartTime of B
    assert float((res / "b.start").read_text()) >= begin
    assert (res / "b.md5").read_text() == (res / "a.md5").read_text()


@pytest.mark.queue
def test_a_dependency_added_later_by_its_user_waits_for_the_output_across_rsad_down(
        lab: Mapping[str, str], area: Path) -> None:
    """A has ended and its output is being staged out when rsad is killed; its user then
    adds ``afterok:A`` to their pending B (``scontrol update``) and releases their own
    hold. Slurm met the dependency at once (A ended ``COMPLETED``): on main B started
    then, on the part of A's output staged so far (it ended FAILED within the 3 s: its
    md5sum missed files). job_submit.lua's job_modify holds B at the update;
    the next rsad keeps it held until A's output is verified, then lets it run."""
    out, res = area / "out", area / "res"
    user = lab["RSA_LAB_USER"]
    with make_jobs(lab) as jobs, pfs_writes_at(lab, "4mbit"):
        a = jobs.submit(script=parent_script(out, res, 1))
        b = jobs.submit("-H", script=child_script(out, res))  # pending: its user's hold
        wait_state(lab, a, "staging-out", "verifying", timeout=120)
        stop_lab_rsad(signal.SIGKILL)
        try:
            for argv in (["scontrol", "update", f"JobId={b}", f"Dependency=afterok:{a}"],
                         ["scontrol", "release", b]):
                done = as_user(lab, user, argv)
                assert done.returncode == 0, (argv, done.stderr)
            time.sleep(3)  # Slurm alone: B must stay pending (on main it had started)
            info = show_job(lab, b)
            assert info["JobState"] == "PENDING", info
        finally:
            start_lab_rsad()
        assert verified_at(lab, a) is None  # the update came while the output was staged
        wait_for("B's end", lambda: (res / "b.md5").exists() and root(
            lab, "squeue", "-h", "-j", b, "-o", "%T").strip() in ("", "COMPLETED"),
            timeout=240)
    assert (res / "a.md5").read_text().count("\n") == FILES
    assert (res / "b.md5").read_text() == (res / "a.md5").read_text()
    assert float((res / "b.start").read_text()) >= first_verified(lab, a)


def job_ended(lab: Mapping[str, str], job: str) -> bool:
    return root(lab, "squeue", "-h", "-j", job, "-o", "%T").strip() in ("", "COMPLETED")


@pytest.mark.queue
def test_a_parent_slurm_no_longer_prints_is_waited_for_beside_one_it_does(
        lab: Mapping[str, str], area: Path) -> None:
    """B depends on A and on P (``afterok:A:P``) and is submitted once A has ended, its
    output still staging out; P is a job without RSA work, held by its user. Slurm counts
    A fulfilled at once and prints only ``afterok:P``: on the code before, rsad took P
    for B's only parent and released B at its next cycle; once P ran, B started on the
    part of A's output staged so far. Now B waits for A's output too."""
    out, res = area / "out", area / "res"
    with make_jobs(lab) as jobs, pfs_writes_at(lab, "2mbit"):
        a = jobs.submit(script=parent_script(out, res, 1))
        p = jobs.submit("-H", script="#!/bin/bash\n#SBATCH -t 5\ntrue\n")
        wait_state(lab, a, "staging-out", "verifying", timeout=120)
        b = jobs.submit(f"--dependency=afterok:{a}:{p}", script=child_script(out, res))
        wait_for("Slurm's fulfilled A dropped from B's dependency", lambda: root(
            lab, "squeue", "-h", "-j", b, "-O", "Dependency:0").strip().startswith(
            f"afterok:{p}"), timeout=30)
        done = as_user(lab, lab["RSA_LAB_USER"], ["scontrol", "release", p])
        assert done.returncode == 0, done.stderr
        wait_for("P's end", lambda: job_ended(lab, p), timeout=60)
        assert verified_at(lab, a) is None  # P ended while A's output was still staged
        time.sleep(3)  # on the code before, B had started by now
        info = show_job(lab, b)
        assert info["JobState"] == "PENDING", info
        assert DEP_MARK + a in info["AdminComment"], info
        wait_for("B's end", lambda: (res / "b.md5").exists() and job_ended(lab, b),
                 timeout=240)
    assert (res / "a.md5").read_text().count("\n") == FILES
    assert (res / "b.md5").read_text() == (res / "a.md5").read_text()
    assert float((res / "b.start").read_text()) >= first_verified(lab, a)


def task_script(out: Path, res: Path) -> str:
    """Each task of A writes its output on its RAMDISK, over out/<task>."""
    return f"""#!/bin/bash
#SBATCH -t 5
#RSA_DATA_OUT={out}/%a
#RSA_EARLY_START=wait
echo $SLURM_JOB_ID > {res}/own.$SLURM_ARRAY_TASK_ID
sleep 8
for i in $(seq 1 {FILES}); do head -c 128K /dev/urandom > {out}/$SLURM_ARRAY_TASK_ID/f$i; done
(cd {out}/$SLURM_ARRAY_TASK_ID && md5sum f*) > {res}/a.md5.$SLURM_ARRAY_TASK_ID
"""


@pytest.mark.queue
def test_a_dependent_of_an_array_task_by_its_own_job_id_waits_for_its_output(
        lab: Mapping[str, str], area: Path) -> None:
    """``afterok:$SLURM_JOB_ID`` of an array task (its own job id, as a task's script
    chains its next step): Slurm keeps that id, not ``<array>_<task>``. On the code
    before, rsad knew no RSA job of that id: B was released at its first cycle and
    started when the task ended, on the part of its output staged so far."""
    out, res = area / "out", area / "res"
    for task in ("0", "1"):
        done = as_user(lab, lab["RSA_LAB_USER"], ["mkdir", "-p", str(out / task)])
        assert done.returncode == 0, done.stderr
    with make_jobs(lab) as jobs, pfs_writes_at(lab, "2mbit"):
        a = jobs.submit("--array=0-1", script=task_script(out, res))
        wait_for("both tasks running", lambda: all(
            (res / f"own.{t}").exists() for t in ("0", "1")), timeout=120)
        # the task whose own job id is not the array's
        task, own = next((t, (res / f"own.{t}").read_text().strip()) for t in ("0", "1")
                         if (res / f"own.{t}").read_text().strip() != a)
        b = jobs.submit(f"--dependency=afterok:{own}",
                        script=child_script(out / task, res))
        dep = root(lab, "squeue", "-h", "-j", b, "-O", "Dependency:0").strip()
        assert dep.startswith(f"afterok:{own}"), dep  # Slurm keeps the own id
        wait_for("B held for the task", lambda: f"{DEP_MARK}{a}_{task}" in show_job(
            lab, b)["AdminComment"], timeout=60)
        wait_state(lab, f"{a}_{task}", "staging-out", "verifying", timeout=120)
        time.sleep(3)  # on the code before, B had started by now
        info = show_job(lab, b)
        assert info["JobState"] == "PENDING", info
        wait_for("B's end", lambda: (res / "b.md5").exists() and job_ended(lab, b),
                 timeout=240)
    assert (res / f"a.md5.{task}").read_text().count("\n") == FILES
    assert (res / "b.md5").read_text() == (res / f"a.md5.{task}").read_text()
    assert float((res / "b.start").read_text()) >= first_verified(lab, f"{a}_{task}")


@pytest.mark.queue
def test_another_users_dependent_submitted_after_the_parent_ended_waits_for_its_output(
        lab: Mapping[str, str], area: Path) -> None:
    """rsaother submits B with ``afterok:A``, rsauser's job, once A has ended, its output
    still staging out: Slurm counts A fulfilled and prints no dependency by rsad's next
    cycle. job_submit.lua named A in B's marker (``;named=A``): rsad holds B for it,
    telling rsaother only that A is another user's. On the code before, rsad could only
    guess rsaother's own in-flight jobs and released B at once."""
    out, res = area / "out", area / "res"
    with other_user_area(lab, "dependents") as theirs, make_jobs(lab) as jobs, \
            pfs_writes_at(lab, "2mbit"):
        a = jobs.submit(script=parent_script(out, res, 1))
        wait_state(lab, a, "staging-out", "verifying", timeout=120)
        b = jobs.submit(f"--dependency=afterok:{a}", user=lab["RSA_LAB_OTHER_USER"],
                        script=f"#!/bin/bash\n#SBATCH -t 5\ndate +%s.%N > {theirs}/res/b.start\n")
        held = show_job(lab, b)["AdminComment"]  # job_submit.lua's marker, or rsad's
        told: set[str] = set()

        def ended() -> bool:
            told.add(show_job(lab, b).get("Comment", ""))
            return (theirs / "res" / "b.start").exists() and job_ended(lab, b)

        wait_for("B's end", ended, timeout=240)
        started = float((theirs / "res" / "b.start").read_text())
        verified = verified_at(lab, a)
    # on the code before, B was released at once: it had started and ended while A's
    # output was still being staged out (verified None here)
    assert verified is not None and started >= verified, (started, verified)
    assert f";named={a}" in held or f"{DEP_MARK}{a}" in held, held
    assert any("another user's" in c for c in told), told
