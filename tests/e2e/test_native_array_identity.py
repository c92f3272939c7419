"""Native mode, in the lab: an array task whose user rsad's host cannot resolve still gets
its input staged before it starts.

slurmctld's setup hook names the task's own job id and its uid; rsad asks squeue which
array task that id is and whose (``parse.JOB_INFO_FIELDS``). Where rsad's host cannot
resolve the user's name (a directory only the compute and login nodes use, a name
service hiccup), the uid check failed on main: the task went on under its own id, which
the queue never lists (it lists ``A_T``), so rsad took it for a job without directives,
data_in answered "nothing to stage", and Slurm started the task on the PFS without its
input. Here rsad's ``slurm.bin_dir`` has a squeue that prints, for that one query, a
user name this host does not have; everything else is the lab's own Slurm.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from tests.e2e.conftest import input_area
from tests.e2e.test_native_trouble import (
    SLURM_TOOLS,
    queue_line,
    read_its_input_from_the_ramdisk,
    reader,
    rsad_with,
)
from tests.integration.slurmkit import make_jobs, wait_for
from tests.integration.test_rsad_staging import wait_state

pytestmark = pytest.mark.native

UNKNOWN = "rsa-ldap-only"  # a user name no host of the lab resolves



@pytest.fixture
def area(lab: Mapping[str, str]) -> Iterator[Path]:
    with input_area(lab, "native-identity") as base:
        yield base


def test_an_array_task_whose_user_rsads_host_cannot_resolve_starts_with_its_input(
        lab: Mapping[str, str], area: Path, tmp_path: Path) -> None:
    bin_dir = tmp_path / "slurm-bin"
    bin_dir.mkdir()
    for tool in SLURM_TOOLS:
        if Path("/usr/bin", tool).exists():
            (bin_dir / tool).symlink_to(Path("/usr/bin", tool))
    (bin_dir / "squeue").unlink()
    user = lab["RSA_LAB_USER"]
    # one job's identity (-O ...ArrayTaskID...): its user as a name this host lacks
    (bin_dir / "squeue").write_text(f"""#!/bin/bash
case " $* " in *ArrayTaskID*)
  /usr/bin/squeue "$@" | sed 's/|{user}|/|{UNKNOWN}|/'; exit "${{PIPESTATUS[0]}}";;
esac
exec /usr/bin/squeue "$@"
""")
    (bin_dir / "squeue").chmod(0o755)
    script = reader(area, tag="$SLURM_ARRAY_TASK_ID").replace(
        "#SBATCH -t 5\n", "#SBATCH -t 5\n#SBATCH --array=1-2\n")
    with rsad_with(lab, "  bin_dir: /usr/bin\n", f"  bin_dir: {bin_dir}\n"), \
            make_jobs(lab) as jobs:
        array = jobs.submit(script=script)
        tasks = [f"{array}_{t}" for t in (1, 2)]
        wait_for("both tasks' end", lambda: all(
            queue_line(lab, t)[0] == "COMPLETED" for t in tasks), timeout=300)
        for t in ("1", "2"):  # on main: from the PFS, the RSA never told of the task
            read_its_input_from_the_ramdisk(area, t)
        for task in tasks:
            wait_state(lab, task, "released", timeout=120)
