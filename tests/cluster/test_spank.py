"""The SPANK plugin in the cluster lab (issue 30): the package's ``rsa_spank.so``, named
in every node's ``/etc/slurm/plugstack.conf`` (``optional``, as docs/spank.md
recommends). ``sbatch --rsa-data-in=...`` on the login node makes an RSA job of a script
without directives: its input is staged to a RAMDISK and the job's task on c1 gets
``RSA_STATE=input`` and ``RSA_RAMDISK`` from slurmstepd there. The compute-node check
(``rsa nodes check --compute``) passes on c1, and on c2, whose plugstack.conf names a
copy of the plugin built (its ``plugin_version``) for another Slurm release, it says
that this node's Slurm and the plugin disagree, and what to do."""

from __future__ import annotations

import time

from tests.cluster.conftest import Cluster

HOME = "/pfs/home/rsauser"
PLUGIN = "/usr/lib/x86_64-linux-gnu/slurm-wlm/rsa_spank.so"
JOB = f"""#!/bin/bash
#SBATCH -N 1 -t 5
{{ echo "$RSA_STATE $RSA_RAMDISK"; findmnt -n -o FSTYPE,SOURCE {HOME}/spin
   sha256sum < {HOME}/spin/f; }} > {HOME}/spank.report 2>&1
"""
# a copy of the plugin whose plugin_version says Slurm 23.11.0 (the constant found
# through its loaded address in /proc/self/maps, patched in the copy's file)
OTHER = """import ctypes, os, sys
src, dst = sys.argv[1], sys.argv[2]
lib = ctypes.CDLL(src, mode=os.RTLD_LAZY)
var = ctypes.c_uint.in_dll(lib, "plugin_version")
addr = ctypes.addressof(var)
for line in open("/proc/self/maps"):
    fields = line.split()
    lo, hi = (int(x, 16) for x in fields[0].split("-"))
    if lo <= addr < hi and fields[-1] == os.path.realpath(src):
        offset = addr - lo + int(fields[2], 16)
        break
data = bytearray(open(src, "rb").read())
assert int.from_bytes(data[offset:offset + 4], "little") == var.value
data[offset:offset + 4] = ((23 << 16) | (11 << 8)).to_bytes(4, "little")
open(dst, "wb").write(data)
print(hex(var.value))
"""


def test_sbatch_rsa_data_in_from_the_login_node(cluster: Cluster) -> None:
    c = cluster
    assert "--rsa-data-in" in c.out("login", ["sbatch", "--help"], user="rsauser")
    c.run("login", ["sh", "-ec", f"rm -rf {HOME}/spin {HOME}/spank.*\nmkdir -p {HOME}/spin\n"
                    f"head -c 100000 /dev/urandom > {HOME}/spin/f\n"
                    f"sha256sum < {HOME}/spin/f > {HOME}/spank.sha\n"
                    f"cat > {HOME}/spank.sh"], user="rsauser", input=JOB)
    job = c.out("login", ["sbatch", "--parsable", "-w", "c1", f"--rsa-data-in={HOME}/spin",
                          f"--chdir={HOME}", "-o", f"{HOME}/spank.log", f"{HOME}/spank.sh"],
                user="rsauser").strip()
    assert job.isdigit(), job
    shown = ""
    deadline = time.monotonic() + 120
    while "rsa_state: released" not in shown:
        assert time.monotonic() < deadline, shown
        time.sleep(0.5)
        shown = c.run("ctl", ["rsa", "job", job], check=False).stdout
    assert "mounted-input (input-mounted)" in shown, shown  # the Prolog mounted it
    report = c.out("c2", ["cat", f"{HOME}/spank.report"], user="rsauser").splitlines()
    assert report[0] == f"input {HOME}/spin", report
    assert report[1].split()[0] == "fuse" and report[1].split()[1].startswith("mfs#rsa")
    assert report[2] + "\n" == c.out("c2", ["cat", f"{HOME}/spank.sha"], user="rsauser")


def test_the_compute_node_check_says_when_slurm_and_the_plugin_disagree(
        cluster: Cluster) -> None:
    c = cluster
    conf = c.out("c1", ["cat", "/etc/slurm/plugstack.conf"])
    assert [x.split() for x in conf.splitlines() if x and not x.startswith("#")] == [
        ["optional", PLUGIN]], conf
    assert c.out("c1", ["rsa", "nodes", "check", "--compute"]) == "c1: ok\n"
    other = "/usr/local/lib/rsa_spank-23.11.so"
    built = c.out("c2", ["sh", "-ec", f"mkdir -p /usr/local/lib\npython3 -c '{OTHER}' "
                         f"{PLUGIN} {other}"]).strip()
    # the package's plugin says the node's own Slurm (22.05.8, 24.11.5, 26.05.5)
    major, minor, micro = (int(x) for x in c.out("c2", ["slurmd", "-V"]).split()[-1]
                           .split("-")[0].split(".")[:3])
    assert built == hex((major << 16) | (minor << 8) | micro), built
    release = f"{major}.{minor:02d}"
    c.run("c2", ["sh", "-ec", "cp /etc/slurm/plugstack.conf /root/plugstack.conf\n"
                 f"echo 'optional {other}' > /etc/slurm/plugstack.conf"])
    try:
        done = c.run("c2", ["rsa", "nodes", "check", "--compute"], check=False)
        assert done.returncode == 1, done
        assert done.stdout.splitlines() == [
            f"c2: lacks the SPANK plugin {other} for Slurm {release} (it was built for 23.11; "
            "slurmstepd refuses it; plugstack.conf has it optional: jobs run here without "
            "it, with no RSA_* variables and no private mounts): rebuild it on this node's "
            "image against this Slurm "
            "(make -C slurm_plugins/spank install, or the rsa-scheduler-spank package built "
            "for it)"], done.stdout
        # and what it says is true: slurmstepd on c2 refuses that plugin (a job runs;
        # plugstack.conf says optional)
        job = c.out("login", ["sbatch", "--parsable", "-w", "c2", "--chdir=/tmp", "-o",
                              "/dev/null", "--wrap", "true"], user="rsauser").strip()
        deadline = time.monotonic() + 60
        while not c.out("ctl", ["squeue", "-h", "-t", "all", "-j", job, "-o",
                                "%T"]).startswith("COMPLETED"):
            assert time.monotonic() < deadline, job
            time.sleep(0.3)
        log = c.out("c2", ["cat", "/var/log/slurm/slurmd.log"])
        assert f"Incompatible Slurm plugin {other} version (23.11.0)" in log, log[-2000:]
    finally:
        c.run("c2", ["sh", "-ec", "cat /root/plugstack.conf > /etc/slurm/plugstack.conf\n"
                     f"rm -f {other}"])
    assert c.out("c2", ["rsa", "nodes", "check", "--compute"]) == "c2: ok\n"
