"""`make demo`'s story against the live lab (small data, narrated): every sample job goes
through its lifecycle, the demoted job is torn down and staged again, and the summary
says what happened. The full-size demo with the live view is `make demo`."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping
from pathlib import Path

from tests.integration.slurmkit import wait_for

DEMO = Path(__file__).resolve().parents[2] / "lab" / "demo.py"


def test_the_demo_runs_its_whole_story_and_summarises_it(lab: Mapping[str, str]) -> None:
    wait_for("nodes idle", lambda: subprocess.run(
        ["sinfo", "-h", "-o", "%t"], capture_output=True, text=True,
        env={"SLURM_CONF": lab["RSA_LAB_SLURM_CONF"], "PATH": "/usr/bin:/bin"}
    ).stdout.split() == ["idle"], timeout=120)
    done = subprocess.run([lab["RSA_LAB_PYTHON"], str(DEMO), "--plain",
                           "--scale", "0.2"], capture_output=True, text=True, timeout=1200)
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-2000:]
    summary = out[out.index("What happened"):]
    for name in ("busy", "many-files", "demoted", "baseline"):
        assert re.search(rf"^{name}\s+job \d+\s+COMPLETED", summary, re.M), summary
    assert re.search(r"^urgent\s+job \d+\s+CANCELLED", summary, re.M), summary
    rsa_paths = re.findall(r"^\s+rsa: (.*)$", summary, re.M)
    analysis, many, demoted = rsa_paths
    for step in ("staged-in", "locked-in", "mounted-input", "resetting", "mounted-output",
                 "output-verified", "released"):
        assert step in analysis, analysis
    assert "output-verified" in many and many.endswith("released"), many
    # demoted while staging, torn down, on-deck again, staged anew, ran from the RAMDISK
    assert "staging-in > tearing-down > released > allocated" in demoted, demoted
    assert demoted.endswith("locked-in > mounting-input > mounted-input > tearing-down > "
                            "released"), demoted
    assert "(16 files)" in summary and "tar archives + index" in summary
    assert "Compute nodes held: with the RSA" in summary
    assert "demoted: staging-in -> tearing-down (demoted)" in out
    # 16 ranks write new files right after the reset into a fresh RAMDISK: once failed
    # with ENOSPC (MooseFS's per-chunkserver write cap, docs/filesystems.md)
    assert re.search(r"^analysis\s+job \d+\s+COMPLETED", summary, re.M), summary
