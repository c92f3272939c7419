"""Private mounts (``hooks.mounts: job``) with real mount namespaces, no Slurm.

Everything runs inside a throwaway mount namespace (``unshare --mount --propagation
private``) on a tmpfs over /media, so nothing is left behind and nothing of the host is
touched; the namespace dies with the scenario's process. It plays what the node side
(rsa_scheduler.node: JobNamespace, JobMounts, jobstate) and slurmstepd (the plugin's
rsa_ns_join, through rsa-spank-check) do for two jobs sharing a node:

* each job's RAMDISK is mounted over its DATA_IN inside the job's own namespace, by the
  same JobMounts code as node-wide mode (path checks, read-only bind);
* the node (every other process) still sees the PFS directories;
* a task of a job sees its own RAMDISK and not the other job's;
* a task that starts in a job container (like job_container/tmpfs: its own namespace,
  rprivate, a private /tmp) sees the RAMDISK and keeps the container's /tmp;
* the reset (release inside the namespace) and the Epilog (destroy) work.

Needs root (CAP_SYS_ADMIN) and unshare(1); skips otherwise, except under CI=true.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.unit.test_spank import build, fake_stepd  # noqa: F401  (module-scoped fixtures)

ROOT = Path(__file__).resolve().parents[2]
SANDBOX = Path("/media")  # exists on Debian; only ever covered inside the throwaway ns

SCENARIO = textwrap.dedent('''
    import json, os, subprocess, sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    from rsa_scheduler.node import jobstate
    from rsa_scheduler.node.mounts import JobMounts
    from rsa_scheduler.node.namespace import JobNamespace, propagation
    from rsa_scheduler.node.paths import Who
    driver, R = sys.argv[2], Path(sys.argv[3])
    out = {}
    subprocess.run(["mount", "-t", "tmpfs", "rsa-test", str(R)], check=True)
    subprocess.run(["mount", "--make-shared", str(R)], check=True)  # like a host's /
    pfs = R / "pfs"
    for job in ("42", "43"):
        (pfs / job).mkdir(parents=True)
        (pfs / job / "who").write_text(f"pfs {job}\\n")
    node_dir = R / "node"
    jobs = {}
    for job in ("42", "43"):
        jm = JobMounts(job, "c1", str(node_dir))
        jm.prepare()
        ns = JobNamespace(jm.dir)
        ns.create()
        ns.create()  # idempotent: a retried Prolog
        ins = {"seq": 1, "do": "mount", "role": "input", "target": str(pfs / job),
               "mode": "ro", "client_argv": ["mount", "-t", "tmpfs", f"ram-{job}",
                                             "@MOUNTPOINT@"],
               "client_umount_argv": ["umount", "@MOUNTPOINT@"]}
        with ns.entered():
            # the RAMDISK's contents: written through the client mount before the bind
            out[f"mount {job}"] = jm.mount(dict(ins), Who(0, frozenset({0})), [str(pfs)])
            (jm.ramdisk / "who").write_text(f"ram {job}\\n")
        jobstate.write(jm.dir, jobstate.mounted(ins, "job"))
        jobs[job] = (jm, ns)
    with open("/proc/self/mountinfo") as f:
        out["node dir propagation"] = propagation(f.read(), str(node_dir / "c1"))
    out["node sees"] = {j: (pfs / j / "who").read_text() for j in jobs}
    def task(job, *cmd, container=False):
        argv = [driver, "join", str(node_dir), "c1", job]
        argv += ["--container"] if container else []
        done = subprocess.run(argv + ["--", *cmd], capture_output=True, text=True)
        return done.returncode, done.stdout, done.stderr
    cat = ["sh", "-c", f"cat {pfs}/42/who {pfs}/43/who; touch {pfs}/42/w || echo read-only"]
    out["task 42"] = task("42", *cat)
    out["task 43"] = task("43", *cat)
    out["container task 42"] = task("42", "sh", "-c",
                                    f"cat {pfs}/42/who; ls /tmp", container=True)
    out["carried"] = (jobs["42"][0].dir / "carried").exists()
    out["second container task 42"] = task("42", "sh", "-c", "ls /tmp", container=True)
    # the reset: release inside the namespace; the task sees the PFS again
    jm, ns = jobs["42"]
    with ns.entered():
        out["release 42"] = jm.release(lazy=False).ok
    out["task 42 after reset"] = task("42", "cat", f"{pfs}/42/who")
    # the Epilog
    for job, (jm, ns) in jobs.items():
        with ns.entered():
            jm.release(lazy=True)
        ns.destroy()
        jm.remove()
        out[f"gone {job}"] = not jm.dir.exists() and not ns.exists()
    print(json.dumps(out))
''')


def test_two_jobs_each_see_only_their_own_mounts(build: Path) -> None:  # noqa: F811
    if os.geteuid() != 0 or not shutil.which("unshare") or not SANDBOX.is_dir():
        reason = "needs root, unshare(1) and /media"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", sys.executable, "-c", SCENARIO,
         str(ROOT), str(build / "rsa-spank-check"), str(SANDBOX)],
        capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["mount 42"] == f"RAMDISK mounted over {SANDBOX}/pfs/42 (ro)"
    assert out["node dir propagation"] == "private"
    assert out["node sees"] == {"42": "pfs 42\n", "43": "pfs 43\n"}
    rc, stdout, stderr = out["task 42"]
    assert (rc, stdout.split("\n")) == (0, ["ram 42", "pfs 43", "read-only", ""]), stderr
    rc, stdout, stderr = out["task 43"]
    assert (rc, stdout.split("\n")[:2]) == (0, ["pfs 42", "ram 43"]), stderr  # PFS: writable
    rc, stdout, stderr = out["container task 42"]
    assert (rc, stdout.split()) == (0, ["ram", "42", "container"]), stderr
    assert out["carried"] is True
    rc, stdout, stderr = out["second container task 42"]
    assert (rc, stdout.split()) == (0, ["container"]), stderr
    assert out["release 42"] is True
    assert out["task 42 after reset"][1] == "pfs 42\n"
    assert out["gone 42"] and out["gone 43"]


SYMLINKED = textwrap.dedent('''
    import json, os, subprocess, sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    from rsa_scheduler.node.namespace import JobNamespace, propagation
    R = Path(sys.argv[2])
    subprocess.run(["mount", "-t", "tmpfs", "rsa-test", str(R)], check=True)
    (R / "real").mkdir()
    (R / "alias").symlink_to(R / "real")  # node_dir=/var/run/rsa/node with /var/run -> /run
    out = {}
    for job in ("42", "43"):
        d = R / "alias" / "node" / "c1" / job
        d.mkdir(parents=True, mode=0o700)
        JobNamespace(d).create()
    with open("/proc/self/mountinfo") as f:
        info = f.read()
    out["mounts on the node dir"] = sum(
        1 for line in info.splitlines() if line.split(" ")[4] == str(R / "real/node/c1"))
    out["propagation"] = propagation(info, str(R / "real/node/c1"))
    out["handles"] = {j: JobNamespace(R / "alias/node/c1" / j).exists() for j in ("42", "43")}
    print(json.dumps(out))
''')


def test_node_dir_through_a_symlink_is_made_private_once(build: Path) -> None:  # noqa: F811
    """A second job's Prolog must not bind the node directory over itself again: a new
    bind has none of the mounts below it, so it hid the first job's namespace handle
    (its later steps then ran outside the namespace, its Epilog never released it)."""
    if os.geteuid() != 0 or not shutil.which("unshare") or not SANDBOX.is_dir():
        reason = "needs root, unshare(1) and /media"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", sys.executable, "-c", SYMLINKED,
         str(ROOT), str(SANDBOX)],
        capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out == {"mounts on the node dir": 1, "propagation": "private",
                   "handles": {"42": True, "43": True}}


def test_a_task_that_cannot_join_is_told_it_runs_on_the_pfs(
        build: Path, fake_stepd: Path) -> None:  # noqa: F811
    """The handle is a namespace file but setns refuses it (here: a UTS namespace): the
    task stays where it is, its step does not fail, and its variables say PFS -- none of
    the RAMDISK's (RSA_RAMDISK, RSA_INPUT) are left."""
    if os.geteuid() != 0 or not shutil.which("unshare") or not SANDBOX.is_dir():
        reason = "needs root, unshare(1) and /media"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    script = textwrap.dedent(f'''
        set -e
        mount -t tmpfs rsa-test {SANDBOX}
        mkdir -p -m 0755 {SANDBOX}/node/c1 && mkdir -m 0700 {SANDBOX}/node/c1/42
        printf 'RSA_STATE=input\\nRSA_RAMDISK=/pfs/in\\nRSA_DATA_IN=/pfs/in\\nRSA_INPUT=ro\\n' \\
            > {SANDBOX}/node/c1/42/job.env
        touch {SANDBOX}/node/c1/42/mnt
        mount --bind /proc/self/ns/uts {SANDBOX}/node/c1/42/mnt
        echo PATH=/usr/bin | SLURMD_NODENAME=c1 {fake_stepd} {build / "rsa_spank.so"} 42 0 \\
            node_dir={SANDBOX}/node
    ''')
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                           script], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [ln for ln in lines if not ln.startswith("ENV ")] == [
        "init 0", "post_opt 0", "task 0", "exit 0"]
    env = dict(ln[4:].partition("=")[::2] for ln in lines if ln.startswith("ENV "))
    assert set(env) == {"RSA_STATE", "RSA_DATA_IN", "RSA_MESSAGE"}, env
    assert env["RSA_STATE"] == "pfs"
    assert "cannot enter the job's RSA mount namespace" in done.stderr
