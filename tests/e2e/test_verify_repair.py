"""A corrupted PFS copy is repaired by the retry (issue 37, item 1), in the lab.

The job's output file is corrupted on the PFS while its stage-out is being verified: one
byte changed, size and mtime kept, as silent corruption would leave it. The verify finds
it; the retry copies that file again (its quick check alone would keep the corrupted
copy), verifies again and releases the job with the PFS copy right. rsad is killed while
the verify runs (the corruption lands while it is down: the re-issued verify reads it)
and again while the job waits for the retry: what differed is in the event log, so the
retry after the restart still copies it. The lab's rsa.yaml retries stage-out twice, 2 s
then 4 s apart: before this, every retry kept the corrupted copy and the job ended
quarantined."""

from __future__ import annotations

import signal
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.e2e.test_prolog_lifecycle import nothing_of_job_mounted, run_to_start
from tests.e2e.test_stage_out_failures import area, events, md5_of, output_job
from tests.integration.conftest import as_user
from tests.integration.slurmkit import make_jobs, start_lab_rsad, stop_lab_rsad
from tests.integration.test_rsad_staging import rsa_job, wait_state

__all__ = ["area"]

#: one byte in the middle flipped; size, atime and mtime (to the ns) put back
CORRUPT = ("import os, sys; p = sys.argv[1]; st = os.stat(p); fd = os.open(p, os.O_RDWR); "
           "at = st.st_size // 2; b = os.pread(fd, 1, at); "
           "os.pwrite(fd, bytes([b[0] ^ 0xFF]), at); os.fsync(fd); os.close(fd); "
           "os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns)); "
           "after = os.stat(p); assert (after.st_size, after.st_mtime_ns) == "
           "(st.st_size, st.st_mtime_ns)")


@pytest.mark.once  # the staging engine and rsad: the same whichever mode drives staging
def test_a_pfs_copy_corrupted_during_verify_is_copied_again_by_the_retry(
        lab: Mapping[str, str], area: Path) -> None:
    out, res = area / "out", area / "res"
    with make_jobs(lab) as jobs:
        job = run_to_start(lab, jobs, output_job(out, res, 400))
        wait_state(lab, job, "verifying", timeout=240)
        stop_lab_rsad(signal.SIGKILL)  # the verify reads 2 x 400 MiB: still at it
        try:
            done = as_user(lab, lab["RSA_LAB_USER"],
                           ["python3", "-c", CORRUPT, str(out / "sub" / "result.bin")])
            assert done.returncode == 0, done.stderr
        finally:
            start_lab_rsad()
        wait_state(lab, job, "stage-out-failed", "quarantined", timeout=240)
        stop_lab_rsad(signal.SIGKILL)  # between the failed verify and its retry
        start_lab_rsad()
        wait_state(lab, job, "released", timeout=240)
    assert md5_of(out) == (res / "md5").read_text()
    verifies = [e for e in events(lab, job, "action.outcome") if "/verify/" in str(e["action"])]
    assert [e["result"] for e in verifies][-2:] == ["failed", "ok"], verifies
    why = str(verifies[-2]["message"])
    assert "'sub/result.bin': content differs (hash)" in why, why
    assert "the retry copies these objects again (whatever their size and mtime)" in why, why
    outs = [e for e in events(lab, job, "action.outcome")
            if "/stage-out/" in str(e["action"]) and e["result"] == "ok"]
    said = str(outs[-1]["message"])
    assert said == (f"the last verify found 1 object ('sub/result.bin') differing in {out}: "
                    "1 object copied again"), said
    data = rsa_job(lab, job)
    assert data is not None
    assert "an earlier verify found 1 object ('sub/result.bin') differing: copied again, " \
           "they match now" in str(data["message"]), data["message"]
    assert nothing_of_job_mounted(job)
