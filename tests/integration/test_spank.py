"""slurm_plugins/spank in the lab: --rsa-* options, RSA_* variables, private mounts.

The lab builds the plugin at lab-up and names it in its plugstack.conf
(lab/rsalab/slurm.py; RSA_LAB_SPANK=optional|required|off, default optional).

* Options are accepted and refused exactly as the directives are: every directive line
  of the shared vectors is given to real ``sbatch`` as an option instead; a good one ends
  up in the job's admin_comment as job_submit.lua encodes it, a bad one is refused by the
  plugin with the directive's message before the job reaches slurmctld.
* An option conflicting with a #RSA_ line is refused by job_submit.lua naming both;
  ``#SBATCH --rsa-*`` lines and ``srun``/``salloc`` options work too.
* A job without RSA options or directives is untouched: no RSA_* variable, no per-job
  state on the node, its tasks in the node's own mount namespace.
* The plugin loads as ``optional`` and as ``required`` in sbatch (a client-side
  plugstack.conf); slurmd/slurmstepd use the lab's (see RSA_LAB_SPANK).
* Private mounts (``hooks.mounts: job``; the lab's hooks read /run/rsa-lab/mounts): a
  staged job sees its RAMDISK over DATA_IN and RSA_STATE=input, RSA_MOUNTS=job, while the
  node's namespace -- every other job and user on that node -- sees the PFS directory; a
  second user's job on the same node, where the lab's scheduler lets two jobs share one,
  sees only its own.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest

from rsa_scheduler.core.directives import (
    DIRECTIVES,
    SubmissionErrors,
    check_submission,
    decode_script,
    option_of,
    split_hold,
)
from rsa_scheduler.node import jobstate
from tests.integration.conftest import as_user, slurm_env
from tests.integration.slurmkit import (
    Jobs,
    in_cluster,
    lab_nodes,
    lab_private_mounts,
    make_jobs,
    node_path_exists,
    on_lab_node,
    on_node,
    root,
    slurmd_mnt_ns,
    wait_for,
)
from tests.integration.test_rsad_staging import fill, wait_state
from tests.unit.test_spank import vector_values

NODE_DIR = Path("/run/rsa/node")
VARIABLES = jobstate.KEYS  # what the plugin may export (the runner's own RSA_* aside)


def plugstack(lab: Mapping[str, str]) -> Path:
    return Path(lab["RSA_LAB_SLURM_CONF"]).parent / "plugstack.conf"


@pytest.fixture(scope="module")
def plugin(lab: Mapping[str, str]) -> str:
    """The lab's plugstack.conf line for the plugin (its load mode first)."""
    conf = Path(lab["RSA_LAB_SLURM_CONF"]).read_text()
    if in_cluster():  # a site's slurm.conf names none: Slurm reads the one beside it
        assert "PlugStackConfig=" not in conf
    else:
        assert f"PlugStackConfig={plugstack(lab)}" in conf, \
            "lab/rsalab/slurm.py names no plugstack"
    lines = [ln for ln in plugstack(lab).read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    if not lines:
        pytest.skip("the lab runs without the SPANK plugin (RSA_LAB_SPANK=off)")
    assert lines[0].split()[1].endswith("rsa_spank.so")
    return lines[0]


@pytest.fixture(scope="module")
def jobs(lab: Mapping[str, str], plugin: str) -> Iterator[Jobs]:
    with make_jobs(lab) as j:
        yield j


def sbatch_bytes(lab: Mapping[str, str], jobs: Jobs, *args: bytes | str,
                 user: str | None = None) -> tuple[int, str | None, list[str]]:
    """(exit code, job id, stderr lines) of sbatch as the lab user; args may be bytes."""
    argv: list[bytes | str] = ["runuser", "-u", user or lab["RSA_LAB_USER"], "--", "sbatch",
                               "--parsable", "-o", "/dev/null", "--chdir=/tmp", *args]
    done = subprocess.run(argv, capture_output=True, timeout=60, env=slurm_env(lab),
                          cwd="/", check=False)
    job = done.stdout.decode().strip().split(";")[0] or None
    if job:
        jobs.ids.append(job)
    return done.returncode, job, done.stderr.decode("utf-8", "replace").splitlines()


def admin_comment(lab: Mapping[str, str], job: str) -> str:
    """The spec part (without the start hold's marker of early start wait)."""
    return split_hold(root(lab, "squeue", "-h", "-O", "admin_comment:0", "-j",
                           job).strip())[0]


# --- options accepted and refused as the directives are ---------------------------------


def test_help_lists_the_options(lab: Mapping[str, str], plugin: str) -> None:
    done = as_user(lab, lab["RSA_LAB_USER"], ["sbatch", "--help"])
    assert done.returncode == 0
    for name in DIRECTIVES:
        assert f"{option_of(name)}=" in done.stdout


def test_every_vector_line_as_an_option(lab: Mapping[str, str], jobs: Jobs) -> None:
    failures = []
    for stem, name, value, want in vector_values():
        rc, job, err = sbatch_bytes(lab, jobs, "-H", "-t", "1",
                                    f"{option_of(name)}=".encode() + value, "--wrap", "true")
        if want != "OK" and want[0] == "ERR":
            line = f"sbatch: error: {option_of(name)}: {want[1]}"
            if rc == 0 or not err or err[0] != line:
                failures.append(f"{stem} {name}: want {line!r}, got rc {rc} {err[:2]}")
            continue
        try:
            spec = check_submission(None, {name: decode_script(value)})
        except SubmissionErrors as e:
            failures.append(f"{stem} {name}: python refuses it: {e}")
            continue
        if rc != 0 or job is None or admin_comment(lab, job) != spec.to_admin_comment():
            failures.append(f"{stem} {name}: want {spec.to_admin_comment()}, got rc {rc} "
                            f"{err[:2]} {job and admin_comment(lab, job)}")
    assert not failures, "\n".join(failures)


def test_option_conflicting_with_a_directive_is_refused(lab: Mapping[str, str],
                                                        jobs: Jobs) -> None:
    with tempfile.TemporaryDirectory(prefix="rsa-spank-") as tmp:
        script = Path(tmp) / "job.sh"
        script.write_text("#!/bin/sh\n#RSA_DATA_IN=/pfs/home/a\n#SBATCH --rsa-tier=ssd\ntrue\n")
        Path(tmp).chmod(0o755)
        script.chmod(0o644)
        rc, _job, err = sbatch_bytes(lab, jobs, "-H", "-t", "1", "--rsa-data-in=/pfs/home/b",
                                     str(script))
        assert rc != 0
        assert err[0] == ("sbatch: error: 2: #RSA_DATA_IN='/pfs/home/a' conflicts with "
                          "--rsa-data-in='/pfs/home/b'; keep one")
        rc, job, err = sbatch_bytes(lab, jobs, "-H", "-t", "1", "--rsa-data-in=/pfs/home//a/",
                                    "--rsa-nodes=1", str(script))
        assert rc == 0 and job, err
        assert admin_comment(lab, job) == "rsa1:i=/pfs/home/a;n=1;t=ssd"


def test_srun_and_salloc_options(lab: Mapping[str, str], jobs: Jobs) -> None:
    done = as_user(lab, lab["RSA_LAB_USER"], [
        "srun", "-t", "1", "--rsa-data-out=/pfs/home/x/out", "--rsa-stage-out=tar",
        "bash", "-c", "echo $SLURM_JOB_ID"], timeout=120)
    assert done.returncode == 0, done.stderr
    job = done.stdout.strip().splitlines()[-1]
    jobs.ids.append(job)
    text = root(lab, "scontrol", "show", "job", "-o", job)
    assert "AdminComment=rsa1:o=/pfs/home/x/out;so=tar" in text
    done = as_user(lab, lab["RSA_LAB_USER"], ["salloc", "--no-shell", "-t", "1",
                                              "--rsa-tier=ram", "--rsa-nodes=0"])
    assert done.returncode != 0
    assert ("salloc: error: --rsa-nodes: RSA_NODES must be a whole number of RSA nodes, at "
            "least 1, got '0'") in done.stderr


@pytest.mark.parametrize("how", ["optional", "required"])
def test_plugin_loads_as(lab: Mapping[str, str], jobs: Jobs, plugin: str, how: str) -> None:
    """Client side: sbatch with a plugstack.conf naming the lab's plugin as ``how``."""
    with tempfile.TemporaryDirectory(prefix="rsa-plugstack-") as tmp:
        d = Path(tmp)
        d.chmod(0o755)
        conf = Path(lab["RSA_LAB_SLURM_CONF"]).read_text()
        conf = re.sub(r"^PlugStackConfig=.*\n", "", conf, flags=re.M)
        conf += f"PlugStackConfig={d / 'plugstack.conf'}\n"
        (d / "slurm.conf").write_text(conf)
        (d / "plugstack.conf").write_text(f"{how} {' '.join(plugin.split()[1:])}\n")
        for f in d.iterdir():
            f.chmod(0o644)
        env = {**slurm_env(lab), "SLURM_CONF": str(d / "slurm.conf")}
        run = subprocess.run(["runuser", "-u", lab["RSA_LAB_USER"], "--", "sbatch",
                              "--parsable", "-H", "-t", "1", "-o", "/dev/null",
                              "--chdir=/tmp", "--rsa-data-in=/pfs/home/in", "--wrap", "true"],
                             capture_output=True, text=True, timeout=60, env=env, check=False)
        assert run.returncode == 0, run.stderr
        job = run.stdout.strip().split(";")[0]
        jobs.ids.append(job)
        assert admin_comment(lab, job) == "rsa1:i=/pfs/home/in"


@pytest.mark.parametrize("how", ["optional", "required"])
def test_nodes_run_jobs_with_the_plugin_loaded_as(lab: Mapping[str, str], jobs: Jobs,
                                                  plugin: str, how: str) -> None:
    """Node side: slurmstepd reads plugstack.conf for every step; with the plugin
    ``optional`` or ``required`` a job with an option gets its RSA_* variables (here
    RSA_STATE=pfs: a job that started at once, with nothing staged, reads the PFS), and a
    plain job runs untouched. The cluster lab: the plugstack.conf of every compute node
    (each node's own file, beside its slurm.conf)."""
    with plugin_on_the_nodes(lab, f"{how} {' '.join(plugin.split()[1:])}\n"):
        base = Path(lab["RSA_LAB_PFS"]) / f"spank-{how}-{os.getpid()}-{time.monotonic_ns()}"
        with_opt, plain = Path(f"{base}-opt"), Path(f"{base}-plain")
        jobs.submit("--rsa-tier=ram", script=probe_script(with_opt))
        jobs.submit(script=probe_script(plain))
        wait_for("both probes", lambda: with_opt.exists() and plain.exists(), timeout=120)
        assert parse_probe(with_opt).get("RSA_STATE") == "pfs"
        assert [k for k in parse_probe(plain) if k in VARIABLES] == []
        for p in (with_opt, plain):
            p.unlink()


@contextmanager
def plugin_on_the_nodes(lab: Mapping[str, str], line: str) -> Iterator[None]:
    """plugstack.conf saying ``line`` where slurmstepd reads it for a block, put back
    afterwards: the host lab's one file, or each compute node's of the cluster lab."""
    conf = plugstack(lab)
    nodes = lab_nodes(lab, "RSA_LAB_COMPUTE_NODES") if in_cluster() else []
    saved = {n: on_node(n, ["cat", str(conf)]).stdout for n in nodes}
    here = "" if nodes else conf.read_text()
    try:
        for n in nodes:
            on_node(n, ["sh", "-ec", 'cat > "$0"', str(conf)], input=line)
        if not nodes:
            conf.write_text(line)
        yield
    finally:
        for n, text in saved.items():
            on_node(n, ["sh", "-ec", 'cat > "$0"', str(conf)], input=text)
        if not nodes:
            conf.write_text(here)


# --- the job's side ---------------------------------------------------------------------


def probe_script(out: Path, extra: str = "") -> str:
    """A job that records what its task sees: RSA_* variables, namespace, mounts. The
    record appears complete or not at all (written aside, renamed): a test reads it as
    soon as it exists (a make test once read it half written)."""
    return f"""#!/bin/bash
#SBATCH -t 5
{extra}
{{ env | grep -E '^({"|".join(VARIABLES)})=' | sort; echo "ns=$(stat -L -c %i /proc/self/ns/mnt)";
   echo "node=$SLURMD_NODENAME"; }} > {out}.part && mv {out}.part {out}
"""


def wait_done(lab: Mapping[str, str], job: str, timeout: float = 120) -> None:
    wait_for(f"job {job} done", lambda: root(lab, "squeue", "-h", "-j", job, "-o",
                                             "%T").strip() in ("", "COMPLETED"),
             timeout=timeout)


def parse_probe(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def test_job_without_rsa_is_untouched(lab: Mapping[str, str], jobs: Jobs) -> None:
    out = Path(lab["RSA_LAB_PFS"]) / f"spank-plain-{os.getpid()}-{time.monotonic_ns()}"
    job = jobs.submit(script=probe_script(out))
    wait_for(f"{out}", out.exists, timeout=120)
    seen = parse_probe(out)
    assert [k for k in seen if k in VARIABLES] == []
    assert int(seen["ns"]) == slurmd_mnt_ns(seen["node"])  # tasks stay in the node's namespace
    assert not node_path_exists(seen["node"], NODE_DIR / seen["node"] / job)
    out.unlink()


@pytest.fixture
def private_mounts(lab: Mapping[str, str]) -> Iterator[None]:
    """The lab's node hooks in ``hooks.mounts: job`` for the jobs of one test."""
    with lab_private_mounts(lab):
        yield


@pytest.fixture
def area(lab: Mapping[str, str]) -> Iterator[Path]:
    base = Path(lab["RSA_LAB_PFS"]) / f"spank-it-{os.getpid()}-{time.monotonic_ns()}"
    script = f"set -e; mkdir -p {base}/in {base}/res; echo pfs > {base}/in/who"
    done = as_user(lab, lab["RSA_LAB_USER"], ["bash", "-c", script], timeout=120)
    assert done.returncode == 0, done.stderr
    yield base
    subprocess.run(["rm", "-rf", str(base)], check=False, timeout=120)


def node_view(node: str, path: Path) -> str:
    """What the node's own namespace (every other job and user there) has at ``path``."""
    return on_lab_node(node, ["findmnt", "-n", "-o", "TARGET", "--target", str(path)],
                       timeout=10).stdout.strip()


@pytest.mark.prologflags
def test_private_mounts_only_the_job_sees_its_ramdisk(
        lab: Mapping[str, str], area: Path, private_mounts: None) -> None:
    res = area / "res" / "probe"
    script = probe_script(res, extra=f"#RSA_DATA_IN={area / 'in'}") + (
        f"findmnt -n -o TARGET --target {area / 'in'} > {area / 'res' / 'mnt'}\n"
        f"sleep 20\n")
    with make_jobs(lab) as jobs:
        fill(jobs)  # the job waits on-deck while its input is staged
        job = jobs.submit("-p", "shared", script=script)  # a node two jobs may share
        wait_state(lab, job, "locked-in", timeout=120)
        for filler in jobs.fillers:
            root(lab, "scancel", filler)
        wait_for("the job's probe", res.exists, timeout=120)
        seen = parse_probe(res)
        node = seen["node"]
        assert seen["RSA_STATE"] == "input" and seen["RSA_MOUNTS"] == "job", seen
        assert seen["RSA_RAMDISK"] == str(area / "in")
        assert int(seen["ns"]) != slurmd_mnt_ns(node)  # the task is in the job's namespace
        # the job writes mnt after its probe (a busy machine: read it once it is written)
        mnt = wait_for("the job's findmnt", lambda: (area / "res" / "mnt").read_text().strip()
                       if (area / "res" / "mnt").exists() else None, timeout=60)
        assert mnt == str(area / "in")
        assert node_view(node, area / "in") != str(area / "in")  # the node sees the PFS
        handle = NODE_DIR / node / job / "mnt"
        assert on_lab_node(node, ["findmnt", str(handle)], timeout=10).returncode == 0
        shared = _second_user_on(lab, jobs, node, area)
        # ... while this job still ran there: the two really shared the node
        assert root(lab, "squeue", "-h", "-j", job, "-o", "%T").strip() == "RUNNING"
        wait_done(lab, job)
    # the other user's job ran on the same node at the same time and saw none of it
    assert shared.get("RSA_STATE") is None, shared
    assert shared["mounts"] == "0"  # no mount point at the first job's DATA_IN
    wait_for("the Epilog's cleanup", lambda: not node_path_exists(node, NODE_DIR / node / job),
             timeout=60)


def _second_user_on(lab: Mapping[str, str], jobs: Jobs, node: str,
                    area: Path) -> dict[str, str]:
    """rsaother's job on the same node at the same time (the lab's ``shared`` partition
    lets two jobs share a node)."""
    other = lab["RSA_LAB_OTHER_USER"]
    # in the other user's PFS home: the compute node's /tmp is not this host's on the
    # cluster lab
    out = Path(lab["RSA_LAB_OTHER_PFS"]) / f"rsa-spank-other-{os.getpid()}"
    # the other user cannot enter rsauser's home: read the mount table, not the path
    script = (f"#!/bin/bash\n#SBATCH -t 2\n{{ env | grep '^RSA_STATE='; echo mounts=$(awk "
              f"'$5 == \"{area / 'in'}\"' /proc/self/mountinfo | wc -l); }} > {out}\n")
    jobs.submit("-p", "shared", "-w", node, user=other, script=script)
    wait_for("the other user's probe", out.exists, timeout=120)
    seen = parse_probe(out)
    out.unlink()
    return seen
