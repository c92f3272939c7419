"""Directive parsing as a denial of service (issue 12, point 3), tried for real: the
second lab user (rsaother) submits the worst scripts we know through real `sbatch` to the
lab's slurmctld, whose job_submit.lua parses them under slurmctld's locks. Before the fix
a 1 MB directive value kept slurmctld busy for ~100 s. Now each submission is answered
within seconds with a bounded refusal, and root's `squeue` answers meanwhile.

The bound (DOS_SECONDS) is far above what a linear parser needs (milliseconds: see
docs/benchmarks.md) and far below what a quadratic one takes: it tells the two apart on
a noisy machine, it is not a speed target.

On the cluster lab rsaother submits from the login node (its scripts on the PFS), root's
`squeue` runs on rsad's host.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from rsa_scheduler.core.directives import MAX_ERRORS, MAX_LINE, split_hold
from tests.integration.conftest import slurm_env
from tests.integration.slurmkit import Jobs, make_jobs, root
from tests.security.where import run_as, submit_node

ATTACKER = "rsaother"
DOS_SECONDS = 5.0  # one submission of a worst-case script, end to end
SCRIPT_MAX = 4_000_000  # under Slurm's default max_script_size (4 MiB)


def _worst_scripts() -> dict[str, bytes]:
    head = b"#!/bin/sh\n"
    one_line = head + b"#RSA_DATA_IN=/" + b"a" * (SCRIPT_MAX - 40) + b"\n"
    many_unknown = head + b"#RSA_NOPE=1\n" * ((SCRIPT_MAX - 20) // 12)  # ~333k directives
    twenty_k = head + b"#RSA_FOO=x\n" * 20_000
    value = b"/bin/x " + b'"\\a' * ((MAX_LINE - 40) // 3) + b'"'
    big_values = head + b"".join(b"#RSA_PREPROCESS=" + value + b"\n"
                                 for _ in range(SCRIPT_MAX // (MAX_LINE + 20)))
    long_header = head + b"#RSA_DATA_OUT=/" + b"o" * 250 + b"\n" + b"#\n" * (SCRIPT_MAX // 2 - 200)
    return {"one_line": one_line, "many_unknown": many_unknown, "twenty_k": twenty_k,
            "big_values": big_values, "long_header": long_header}


@pytest.fixture(scope="module")
def scripts(lab: Mapping[str, str]) -> Iterator[dict[str, Path]]:
    """The worst scripts, where the attacker submits from (the cluster lab: on the PFS,
    which the login node mounts)."""
    on_pfs = submit_node() is not None
    tmp = tempfile.mkdtemp(prefix="rsa-dos-", dir=lab["RSA_LAB_OTHER_PFS"] if on_pfs else None)
    try:
        d = Path(tmp)
        d.chmod(0o755)
        paths = {}
        for name, data in _worst_scripts().items():
            assert len(data) <= SCRIPT_MAX + 100
            p = d / f"{name}.sh"
            p.write_bytes(data)
            p.chmod(0o644)
            paths[name] = p
        yield paths
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def jobs(lab: Mapping[str, str]) -> Iterator[Jobs]:
    with make_jobs(lab) as j:
        yield j


class Squeue:
    """Root runs `squeue` in a loop while the attack runs; records the slowest answer."""

    def __init__(self, lab: Mapping[str, str]) -> None:
        self.lab, self.slowest, self.failures = lab, 0.0, 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            t = time.monotonic()
            done = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True,
                                  timeout=60, env=slurm_env(self.lab), check=False)
            self.slowest = max(self.slowest, time.monotonic() - t)
            self.failures += done.returncode != 0
            self.stop.wait(0.2)

    def __enter__(self) -> Squeue:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(90)


@pytest.mark.parametrize("name", ["one_line", "many_unknown", "twenty_k", "big_values"])
def test_worst_scripts_are_refused_quickly_and_boundedly(
        lab: Mapping[str, str], jobs: Jobs, scripts: dict[str, Path], name: str) -> None:
    with Squeue(lab) as sq:
        t = time.monotonic()
        done = run_as(lab, ATTACKER, ["sbatch", "--parsable", "-H", "-o", "/dev/null",
                                      "--chdir=/tmp", str(scripts[name])],
                      node=submit_node(), timeout=300)
        took = time.monotonic() - t
    if done.stdout.strip():
        jobs.ids.append(done.stdout.strip().split(";")[0])
    assert done.returncode != 0, f"{name} was accepted"
    assert took < DOS_SECONDS, f"{name}: sbatch took {took:.1f}s"
    assert sq.failures == 0 and sq.slowest < DOS_SECONDS, (sq.failures, sq.slowest)
    said = [line.removeprefix("sbatch: error: ") for line in done.stderr.splitlines()]
    errors = [line for line in said if line[:1].isdigit()]
    assert 1 <= len(errors) <= MAX_ERRORS + 1, done.stderr[:2000]
    assert len(done.stderr) < 64 * 1024  # bounded output, whatever the script
    if name == "one_line":
        size = len(b"#RSA_DATA_IN=/") + SCRIPT_MAX - 40
        assert errors == [f"2: directive line is {size} bytes long, more than the {MAX_LINE} "
                          "allowed; shorten it"]
    if name in ("many_unknown", "twenty_k"):
        assert errors[-1].endswith("checking stopped at this line; fix the ones above and "
                                   "submit again")


def test_a_valid_huge_script_is_accepted_quickly(lab: Mapping[str, str], jobs: Jobs,
                                                 scripts: dict[str, Path]) -> None:
    """4 MB of header before the first command: parsed linearly, accepted, annotated."""
    t = time.monotonic()
    done = run_as(lab, ATTACKER, ["sbatch", "--parsable", "-H", "-o", "/dev/null",
                                  "--chdir=/tmp", str(scripts["long_header"])],
                  node=submit_node(), timeout=300)
    took = time.monotonic() - t
    assert done.returncode == 0, done.stderr[:2000]
    job = done.stdout.strip().split(";")[0]
    jobs.ids.append(job)
    assert took < DOS_SECONDS, f"sbatch took {took:.1f}s"
    comment = root(lab, "squeue", "-h", "-O", "admin_comment:0", "-j", job).strip()
    assert split_hold(comment)[0] == "rsa1:o=/" + "o" * 250  # (held: early start wait)
