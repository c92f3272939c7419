"""Streamed mode in real lifecycles (issue 16: trees too large to list in rsad).

rsad restarted with ``staging.stream_objects: 1000``; trees of ~2,500 objects then go the
streamed way (listed and copied on the RSA nodes over SSH, through the lab's MooseFS
RAMDISK, rsad keeping counters only). The trees hold what breaks naive copies: names
with a newline, a tab, a leading dash and non-UTF-8 bytes, a hard-link pair, a symlink,
a private directory and an 8 MiB file. The oracle is a fingerprint computed as the user
with find/md5sum on both sides: every object's type, mode, size, mtime (seconds), link
count, symlink target and name, and every file's content. rsad's log must say the
transfer was streamed (else the test proves nothing about streamed mode).

1. A DATA_IN-only job reads its streamed input from the RAMDISK; a DATA_OUT-only job's
   streamed output lands on the PFS, verified, no part directory left.
2. kill -9 of rsad in the middle of a streamed stage-out: the restarted rsad stages the
   output out, verified, and leaves nothing behind.
3. A job array on an idle cluster: every task's streamed output (``%a`` in DATA_OUT)
   lands in its own directory, verified.
3 runs in both modes; 1 and 2 in the queue-mode lab only (``once``): whether a copy is
streamed or listed is rsad's own and invisible to Slurm's hooks, which answer from the
job's state as for any copy (native mode's data_in and data_out: tests/e2e/test_native.py;
a streamed stage-out in native mode: 3); resuming a streamed copy is rsad's own, and
Slurm's data_out hook riding through rsad killed mid-stage-out is tested in both modes by
test_stage_out_failures.py.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from tests.e2e.conftest import input_area, rsad_configured
from tests.integration.conftest import as_user, read_lab_env
from tests.integration.slurmkit import make_jobs, start_lab_rsad, stop_lab_rsad, wait_for
from tests.integration.test_rsad_staging import state_of, wait_state

STREAMED = "  stream_objects: 1000\n"

# bash: make the tree in "$1" (2,500 small files in 25 directories and the odd ones)
MAKE_TREE = r"""set -e; mkdir -p "$1"; cd "$1"
for d in $(seq 1 25); do mkdir d$d; for f in $(seq 1 100); do
  echo "$d-$f-$RANDOM$RANDOM" > d$d/f$f; done; done
printf n > $'new\nline'; printf t > $'tab\tand space'; printf b > $'bin-\xff\xfe'
printf d > ./-dash; ln d1/f1 d1/hard; ln -s d1/f2 link
head -c 8M /dev/urandom > big; mkdir -m 0750 priv; echo p > priv/p; chmod 0600 priv/p
touch -d @1500000000 d2/f2 d3
"""

# bash: the fingerprint of the tree in "$1" (two md5 sums on one line)
FINGERPRINT = r"""cd "$1"
{ find . -mindepth 1 -type d -printf '%y %m %Ts %P\0'
  find . -mindepth 1 -type l -printf '%y %l %P\0'
  find . -mindepth 1 -type f -printf '%y %m %s %n %Ts %P\0'; } | sort -z | md5sum | cut -c1-32
find . -type f -print0 | sort -z | xargs -0 md5sum | md5sum | cut -c1-32
"""


def fingerprint(lab: Mapping[str, str], tree: Path) -> str:
    done = as_user(lab, lab["RSA_LAB_USER"], ["bash", "-c", FINGERPRINT, "fp", str(tree)],
                   timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def streamed_lines(start: int, path: Path) -> list[str]:
    """rsad's log lines since byte ``start`` saying a transfer from or to ``path`` was
    streamed (stream.StreamedCopy's line)."""
    with Path(read_lab_env()["RSA_LAB_RSAD_LOG"]).open("rb") as f:
        f.seek(start)
        text = f.read().decode(errors="replace")
    return [line for line in text.splitlines()
            if ", streamed: " in line and re.search(rf"(^| ){re.escape(str(path))}( |$|,)",
                                                    line)]


def log_size() -> int:
    return Path(read_lab_env()["RSA_LAB_RSAD_LOG"]).stat().st_size


def job_script(area: Path, body: str, *, data_in: bool = False) -> str:
    directive = f"#RSA_DATA_IN={area}/in" if data_in else f"#RSA_DATA_OUT={area}/out"
    return f"#!/bin/bash\n#SBATCH -t 15\n{directive}\n{body}"


def fn(name: str, text: str) -> str:
    return f"{name}() {{\n{text}\n}}\n"


@pytest.fixture
def area(lab: Mapping[str, str]) -> Iterator[Path]:
    with input_area(lab, "streamed-e2e") as base:
        as_user(lab, lab["RSA_LAB_USER"], ["rm", "-rf", str(base / "in")], timeout=60)
        made = as_user(lab, lab["RSA_LAB_USER"],
                       ["bash", "-c", MAKE_TREE, "mk", str(base / "in")], timeout=600)
        assert made.returncode == 0, made.stderr
        yield base


@pytest.mark.once  # streamed or listed is rsad's own (a native streamed stage-out: 3)
def test_a_streamed_input_is_read_from_the_ramdisk_and_a_streamed_output_lands(
        lab: Mapping[str, str], area: Path) -> None:
    want_in = fingerprint(lab, area / "in")
    start = log_size()
    with rsad_configured(lab, STREAMED), make_jobs(lab) as jobs:
        reader = jobs.submit(script=job_script(area, (
            f"findmnt -n -o TARGET --target {area}/in > {area}/res/inmnt\n"
            + fn("fp", FINGERPRINT) + f"(fp {area}/in) > {area}/res/fp-in\n"
            f"touch {area}/res/done-in\n"), data_in=True))
        writer = jobs.submit(script=job_script(area, (
            fn("mk", MAKE_TREE) + fn("fp", FINGERPRINT)
            + f"(mk {area}/out/tree) && (fp {area}/out) > {area}/res/fp-out\n"
            f"touch {area}/res/done-out\n")))
        for job in (reader, writer):
            assert wait_state(lab, job, "released", timeout=600) == "released"
    assert (area / "res" / "done-in").exists() and (area / "res" / "done-out").exists()
    # the reader ran on the RAMDISK, and saw its whole input, byte for byte
    assert (area / "res" / "inmnt").read_text().strip() == str(area / "in")
    assert (area / "res" / "fp-in").read_text() == want_in
    # the writer's output is on the PFS as the job left it on the RAMDISK
    assert (area / "res" / "fp-out").read_text() == fingerprint(lab, area / "out")
    assert not [p for p in (area / "out").iterdir() if p.name.startswith(".rsa-staging-")]
    # and both went the streamed way
    assert streamed_lines(start, area / "in"), "the stage-in was not streamed"
    assert streamed_lines(start, area / "out"), "the stage-out was not streamed"


@pytest.mark.once  # rsad's own resume of a streamed copy
def test_a_crash_in_a_streamed_stage_out_loses_nothing(
        lab: Mapping[str, str], area: Path) -> None:
    start = log_size()
    with rsad_configured(lab, STREAMED), make_jobs(lab) as jobs:
        writer = jobs.submit(script=job_script(area, (
            fn("mk", MAKE_TREE) + fn("fp", FINGERPRINT)
            + f"(mk {area}/out/tree) && (fp {area}/out) > {area}/res/fp-out\n"
            f"touch {area}/res/done-out\n")))

        def copying() -> bool:  # the streamed stage-out has placed some files
            return bool(streamed_lines(start, area / "out")) and (area / "out").exists() \
                and any(p.name.startswith(".rsa-staging-") for p in (area / "out").iterdir())

        def landed() -> bool:  # some of the chunk's files are written (not the spool)
            try:
                return any(p.is_file() and "spool" not in p.relative_to(area / "out").parts[:2]
                           for p in (area / "out").rglob("*"))
            except OSError:  # a part directory renamed under the walk: files are in
                return True

        wait_for("the streamed stage-out copying", copying, timeout=600, every=0.1)
        # files in, and killed at once: not a fixed second, in which a faster machine
        # copied the whole tree (a slower one none of it)
        wait_for("the first of its files copied", landed, timeout=120, every=0.05)
        assert state_of(lab, writer) == "staging-out"
        stop_lab_rsad(signal.SIGKILL)
        start_lab_rsad()
        assert wait_state(lab, writer, "released", timeout=600) == "released"
    assert (area / "res" / "fp-out").read_text() == fingerprint(lab, area / "out")
    assert not [p for p in (area / "out").iterdir() if p.name.startswith(".rsa-staging-")]


def test_every_task_of_an_array_on_an_idle_cluster_streams_its_own_output(
        lab: Mapping[str, str], area: Path) -> None:
    made = as_user(lab, lab["RSA_LAB_USER"], ["mkdir", "-p", f"{area}/out/0", f"{area}/out/1"],
                   timeout=60)
    assert made.returncode == 0, made.stderr
    start = log_size()
    script = (f"#!/bin/bash\n#SBATCH -t 15\n#SBATCH --array=0-1\n"
              f"#RSA_DATA_OUT={area}/out/%a\n"
              + fn("mk", MAKE_TREE) + fn("fp", FINGERPRINT)
              + "t=$SLURM_ARRAY_TASK_ID\n"
              f"(mk {area}/out/$t/tree) && echo $t > {area}/out/$t/task "
              f"&& (fp {area}/out/$t) > {area}/res/fp-out.$t\n")
    with rsad_configured(lab, STREAMED), make_jobs(lab) as jobs:
        array = jobs.submit(script=script)
        for t in range(2):  # nothing else queued: each task starts as soon as it can
            assert wait_state(lab, f"{array}_{t}", "released", timeout=600) == "released"
    for t in range(2):
        out = area / "out" / str(t)
        assert (out / "task").read_text().strip() == str(t)  # its own, not the other's
        assert (area / "res" / f"fp-out.{t}").read_text() == fingerprint(lab, out)
        assert not [p for p in out.iterdir() if p.name.startswith(".rsa-staging-")]
        assert streamed_lines(start, out), f"task {t}'s stage-out was not streamed"
