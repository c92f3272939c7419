"""A real workflow manager runs a pipeline of RSA jobs (issue 32): Snakemake, with its
cluster-generic executor and the settings of the user guide ("Workflow managers"),
submits step one (``--rsa-data-out``: 30 small files and a 16 MiB one written to the
RAMDISK) and, once ``rsa wait --cluster-status`` says ``success``, step two, a plain job
that checks every file step one wrote against the checksums step one computed. Slurm
ends step one before its output has left the RAMDISK; a status that said ``success``
then would give step two missing or short files (md5sum -c fails, the workflow fails).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from tests.e2e.conftest import input_area
from tests.integration.conftest import as_user, slurm_env
from tests.integration.slurmkit import make_jobs

REPO = Path(__file__).resolve().parents[2]
#: the workflow manager's own venv (make install: Makefile WF_VENV)
WF_VENV = Path(os.environ.get("RSA_WF_VENV", REPO / ".venv-wf"))
NAME = "rsa-wf-test"

SNAKEFILE = """\
rule all:
    input: "res/check.txt"

rule step1:
    output: "out/md5"
    resources: rsa="--rsa-data-out={out}"
    shell: "head -c $((16 << 20)) /dev/urandom > out/big; "
           "for i in $(seq 1 30); do echo $i$RANDOM > out/f$i; done; "
           "(cd out && md5sum big f*) > {{output}}"

rule step2:
    input: "out/md5"
    output: "res/check.txt"
    shell: "(cd out && md5sum -c md5) > {{output}}"
"""


@pytest.fixture
def area(lab: Mapping[str, str]) -> Iterator[Path]:
    with input_area(lab, "rsa-workflow") as base:
        yield base


def test_snakemake_step_two_reads_step_ones_complete_output(lab: Mapping[str, str],
                                                           area: Path) -> None:
    user = lab["RSA_LAB_USER"]
    snakemake = WF_VENV / "bin" / "snakemake"
    assert as_user(lab, user, [str(snakemake), "--version"]).returncode == 0, (
        f"{snakemake} is not usable by {user}: make install builds it (Makefile WF_VENV)")
    draft = Path(f"/tmp/rsa-wf-{os.getpid()}.smk")
    draft.write_text(SNAKEFILE.format(out=area / "out"))
    draft.chmod(0o644)
    copied = as_user(lab, user, ["cp", str(draft), str(area / "Snakefile")])
    draft.unlink()
    assert copied.returncode == 0, copied.stderr
    rsa = f"{lab['RSA_LAB_VENV']}/bin/rsa"
    argv = ["env", f"HOME={area}", f"XDG_CACHE_HOME={area}/.cache", str(snakemake),
            "--directory", str(area), "--snakefile", str(area / "Snakefile"),
            "--executor", "cluster-generic", "--jobs", "2",
            "--default-resources", "rsa=''",
            "--cluster-generic-submit-cmd",
            f"sbatch --parsable -J {NAME} -t 5 -o {area}/res/%j.log {{resources.rsa}}",
            "--cluster-generic-status-cmd", f"{rsa} wait --cluster-status",
            "--cluster-generic-cancel-cmd", "scancel",
            "--seconds-between-status-checks", "2", "--latency-wait", "0"]
    with make_jobs(lab) as jobs:
        try:
            run = as_user(lab, user, argv, timeout=480)
        finally:
            subprocess.run(["scancel", "-u", user, "-n", NAME], env=slurm_env(lab),
                           check=False, capture_output=True, timeout=60)
            ids = subprocess.run(["squeue", "-h", "-u", user, "-n", NAME, "-o", "%i"],
                                 env=slurm_env(lab), capture_output=True, text=True,
                                 timeout=60, check=False).stdout.split()
            jobs.ids.extend(ids)
    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-3000:])
    check = (area / "res" / "check.txt").read_text().splitlines()
    assert len(check) == 31 and all(line.endswith(": OK") for line in check), check
