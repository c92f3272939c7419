"""Writable input is never lost (issue 35): a reset that finds the input busy, retried,
and the same with rsad killed across the retry while the job ends. The write-back
copies only what the job changed, applies its deletions and keeps aside what someone
else changed on the PFS meanwhile (issue 37 item 2), and a file the job rewrites on the
PFS once its input mount is released is never replaced by the RAMDISK's older copy
(review finding F3). A writable input above ``staging.writable_objects`` is refused
before anything is staged, and its job runs on the PFS with its input whole.

The job holds an input file open so that the reset's release finds the mount busy
(seed 004 §3.2 fn. 3), waits until rsad says ``reset-failed`` (the write-back before
that reset is done), then changes its input once more: that change exists only on the
RAMDISK and must reach the PFS before anything recreates or destroys it.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from tests.e2e.conftest import input_area, rsad_configured
from tests.e2e.test_prolog_lifecycle import nothing_of_job_mounted, run_to_start
from tests.e2e.test_stage_out_failures import events
from tests.integration.conftest import as_user
from tests.integration.slurmkit import make_jobs, root, start_lab_rsad, stop_lab_rsad, wait_for
from tests.integration.test_rsad_staging import rsa_job, wait_state


@pytest.fixture
def area(lab: Mapping[str, str]) -> Iterator[Path]:
    with input_area(lab, "rw-input") as base:
        yield base


def _script(lab: Mapping[str, str], area: Path, *, wait_for_go: bool) -> str:
    rsa = f"{lab['RSA_LAB_VENV']}/bin/rsa"
    res, out, data_in = area / "res", area / "out", area / "in"
    go = f"while [ ! -e {res}/go ]; do sleep 0.2; done" if wait_for_go else ""
    # go: rsad is down, and `rsa input-done` rides its outage out (--timeout): the job
    # ends without it, as a job whose user does not wait for the reset would
    unwait = "kill $! 2>/dev/null" if wait_for_go else ""
    return f"""#!/bin/bash
#SBATCH -t 5
#RSA_DATA_IN={data_in}
#RSA_DATA_OUT={out}
#RSA_INPUT=rw
#RSA_RESET=input-done
findmnt -n -o TARGET --target {data_in} > {res}/inmnt
echo v1 > {data_in}/mod
exec 3< {data_in}/f1   # the input mount stays busy while this is open
{rsa} input-done > {res}/input-done 2>&1 &
for i in $(seq 600); do
  {rsa} job --json 2>/dev/null | grep -q '"rsa_state": "reset-failed"' && break
  sleep 0.2
done
touch {res}/busy-seen
{go}
echo v2 > {data_in}/mod   # after the write-back that came before the busy reset
echo new > {data_in}/added-late
exec 3<&-
{unwait}
wait
"""


@pytest.mark.once  # the mid-job reset is rsad's and the node agents', in either mode
def test_a_busy_reset_retried_writes_back_what_the_job_changed_since(
        lab: Mapping[str, str], area: Path) -> None:
    res, data_in = area / "res", area / "in"
    with make_jobs(lab) as jobs:
        job = run_to_start(lab, jobs, _script(lab, area, wait_for_go=False))
        wait_state(lab, job, "released", timeout=300)
    assert (res / "inmnt").read_text().strip() == str(data_in)
    assert (res / "busy-seen").exists()
    assert (data_in / "mod").read_text() == "v2\n"  # on the PFS
    assert (data_in / "added-late").read_text() == "new\n"
    assert nothing_of_job_mounted(job)


def test_rsad_down_while_the_job_ends_after_a_busy_reset(
        lab: Mapping[str, str], area: Path) -> None:
    """rsad is killed while the reset waits to be retried; the job changes its input
    and ends; rsad comes back after the retry fell due: the job's end and the due retry
    meet in one step. The change is written back before the RAMDISK is torn down."""
    res, data_in = area / "res", area / "in"
    with make_jobs(lab) as jobs:
        job = run_to_start(lab, jobs, _script(lab, area, wait_for_go=True))
        wait_for("the busy reset", lambda: (res / "busy-seen").exists(), timeout=240)
        stop_lab_rsad(signal.SIGKILL)
        try:
            (res / "go").touch()
            wait_for("the job's end", lambda: root(
                lab, "squeue", "-h", "-t", "all", "-j", job, "-O", "State:0").strip()
                not in ("RUNNING", "COMPLETING"), timeout=120)
            time.sleep(6)  # past the lab's whole retry back-off (2 s, at most 4 s)
        finally:
            start_lab_rsad()
        wait_state(lab, job, "released", timeout=300)
    assert (data_in / "mod").read_text() == "v2\n"
    assert (data_in / "added-late").read_text() == "new\n"
    assert nothing_of_job_mounted(job)


def _released(data_in: Path) -> str:
    """A job's shell loop that waits until DATA_IN is no longer the RAMDISK's mount (the
    reset released it: the job sees the PFS there)."""
    return (f'for i in $(seq 1200); do [ "$(findmnt -n -o TARGET --target {data_in})" '
            f'= "{data_in}" ] || break; sleep 0.05; done')


@pytest.mark.once  # the write-back is rsad's and the staging engine's, in either mode
def test_the_write_back_applies_deletions_and_keeps_what_someone_else_changed(
        lab: Mapping[str, str], area: Path) -> None:
    """The job changes f1 and f3 and deletes f2; meanwhile the user (on a login node:
    here the host, which sees the PFS) rewrites f3 on the PFS. The write-back copies
    f1, deletes f2 on the PFS, and keeps the user's f3, placing the job's beside it as
    f3.rsa-<job>; the user reads which. Before: f2 stayed and the job's f3 replaced the
    user's."""
    res, data_in = area / "res", area / "in"
    rsa = f"{lab['RSA_LAB_VENV']}/bin/rsa"
    f4 = (data_in / "f4").read_bytes()
    script = f"""#!/bin/bash
#SBATCH -t 5
#RSA_DATA_IN={data_in}
#RSA_DATA_OUT={area / "out"}
#RSA_INPUT=rw
#RSA_RESET=input-done
findmnt -n -o TARGET --target {data_in} > {res}/inmnt
echo job > {data_in}/f1
rm {data_in}/f2
echo job > {data_in}/f3
touch {res}/changed
while [ ! -e {res}/go ]; do sleep 0.2; done
{rsa} input-done > {res}/input-done 2>&1 &
{_released(data_in)}
wait
"""
    with make_jobs(lab) as jobs:
        job = run_to_start(lab, jobs, script)
        wait_for("the job's changes", lambda: (res / "changed").exists(), timeout=120)
        done = as_user(lab, lab["RSA_LAB_USER"], ["bash", "-c",
                       f"echo someone > {data_in}/f3 && touch {res}/go"])
        assert done.returncode == 0, done.stderr
        wait_state(lab, job, "released", timeout=240)
    assert (res / "inmnt").read_text().strip() == str(data_in)
    assert (data_in / "f1").read_text() == "job\n"
    assert not (data_in / "f2").exists()
    assert (data_in / "f3").read_text() == "someone\n"
    assert (data_in / f"f3.rsa-{job}").read_text() == "job\n"
    assert (data_in / "f4").read_bytes() == f4
    said = [str(e["message"]) for e in events(lab, job, "action.outcome")
            if "kept aside" in str(e["message"])]
    assert said and f"'f3' as 'f3.rsa-{job}'" in said[0], said
    assert nothing_of_job_mounted(job)


@pytest.mark.once
def test_a_file_the_job_rewrites_on_the_pfs_after_the_release_is_kept(
        lab: Mapping[str, str], area: Path) -> None:
    """Review F3: the job changes ``big`` on the RAMDISK (written back once while still
    mounted), says input-done, and as soon as its input mount is released rewrites
    ``big`` on the PFS. The reset's last write-back must not copy the RAMDISK's older
    ``big`` over it. Before: it did (the job's last version was gone)."""
    res, data_in = area / "res", area / "in"
    rsa = f"{lab['RSA_LAB_VENV']}/bin/rsa"
    script = f"""#!/bin/bash
#SBATCH -t 5
#RSA_DATA_IN={data_in}
#RSA_DATA_OUT={area / "out"}
#RSA_INPUT=rw
#RSA_RESET=input-done
head -c 48M /dev/urandom > {data_in}/big
{rsa} input-done > {res}/input-done 2>&1 &
{_released(data_in)}
echo v3 > {data_in}/big
findmnt -n -o TARGET --target {data_in} > {res}/inmnt-after
wait
"""
    with make_jobs(lab) as jobs:
        job = run_to_start(lab, jobs, script)
        wait_state(lab, job, "released", timeout=240)
    assert (res / "inmnt-after").read_text().strip() != str(data_in)
    assert (data_in / "big").read_bytes() == b"v3\n"
    assert nothing_of_job_mounted(job)


@pytest.mark.once  # the refusal is rsad's own (native mode holds a refused stage-in
# with rsad's line, whatever refused it: tests/e2e/test_huge_input.py)
def test_a_writable_input_above_staging_writable_objects_is_refused_and_the_job_runs(
        lab: Mapping[str, str], area: Path) -> None:
    """rsad with ``staging.writable_objects: 20``, a writable DATA_IN of 8 + 24 files:
    the stage-in is refused before anything is staged, the user reads the limit, the
    count and what to do; the job runs on the PFS, reading its whole input and writing
    there; nothing is written back over its changes, nothing of the input is lost."""
    res, data_in = area / "res", area / "in"
    made = as_user(lab, lab["RSA_LAB_USER"], ["bash", "-c", (
        f"set -e; mkdir {data_in}/more; for i in $(seq 1 24); do echo $i > "
        f"{data_in}/more/m$i; done; cd {data_in} && find . -type f | sort | "
        f"xargs md5sum > {res}/md5-in")], timeout=120)
    assert made.returncode == 0, made.stderr
    script = f"""#!/bin/bash
#SBATCH -t 5
#RSA_DATA_IN={data_in}
#RSA_INPUT=rw
findmnt -n -o TARGET --target {data_in} > {res}/inmnt
(cd {data_in} && find . -type f | sort | xargs md5sum) > {res}/md5-job
echo job > {data_in}/f1
rm {data_in}/more/m1
echo new > {data_in}/added
touch {res}/done
"""
    with rsad_configured(lab, "  writable_objects: 20\n"), make_jobs(lab) as jobs:
        job = jobs.submit(script=script)
        wait_state(lab, job, "released", timeout=300)
        wait_for("the job ran", lambda: (res / "done").exists(), timeout=120)
        told = root(lab, "squeue", "-h", "-t", "all", "-j", job, "-o", "%k") or \
            str((rsa_job(lab, job) or {}).get("message"))
    assert told.strip() == (
        "RSA: no RAMDISK for this run (refused, no retry: stage-in refused: this writable "
        "input holds more than 20 objects, the most #RSA_INPUT=rw may hold here: use "
        "#RSA_INPUT=ro, or a smaller DATA_IN); released to start: it reads from the PFS"
    ), told  # whole, in the job's comment
    # it ran on the PFS, with its whole input, and its changes are there as it left them
    assert (res / "inmnt").read_text().strip() != str(data_in)
    assert (res / "md5-job").read_text() == (res / "md5-in").read_text()
    assert (data_in / "f1").read_text() == "job\n"
    assert (data_in / "added").read_text() == "new\n"
    assert not (data_in / "more" / "m1").exists()
    assert (data_in / "more" / "m2").read_text() == "2\n"
    assert not list(data_in.glob("*.rsa-*"))  # nothing placed aside: nothing written back
    assert nothing_of_job_mounted(job)
