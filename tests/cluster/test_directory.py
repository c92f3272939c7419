"""Users and groups from a directory service that does not enumerate (issue 30), as most
centres run them: slapd on the host ``ldap``, every other node resolving through nslcd
(libnss-ldapd) with ``nss_disable_enumeration``, as SSSD's default is. The lab's users and
rsauser's project group ``proj1`` exist only in the directory. Input readable only through
that group is staged in (rsad computes the copy's groups with ``os.getgrouplist``, as
login's initgroups does) and read by the job from its RAMDISK: with the groups that
``grp.getgrall()`` lists, which a directory without enumeration leaves out, it was not."""

from __future__ import annotations

from tests.cluster.conftest import Cluster
from tests.cluster.test_hosts import _wait_released

NODES = ("ctl", "c1", "c2", "rsa1", "rsa2")  # every node that runs a user's processes
HOME = "/pfs/home/rsauser"
GETGRALL = ("import grp; print(' '.join(g.gr_name for g in grp.getgrall()))")


def test_lab_users_and_groups_come_from_the_directory_only(cluster: Cluster) -> None:
    for node in NODES:
        # in no node's files ...
        files = cluster.run(node, ["grep", "-E", "^(rsauser|rsaother|proj1):", "/etc/passwd",
                                   "/etc/group"], check=False)
        assert files.returncode == 1, files.stdout
        # ... but resolved on each, through nslcd from slapd on ldap: the project group too
        assert cluster.out(node, ["id", "-nG", "rsauser"]).split() == ["rsauser", "proj1"]
        assert cluster.out(node, ["id", "-nG", "rsaother"]).split() == ["rsaother"]
        # without enumeration: neither `getent group` nor grp.getgrall() (what the groups
        # of a copy were taken from before os.getgrouplist) lists a directory group
        listed = {line.split(":")[0] for line in cluster.out(node, ["getent", "group"]).split()}
        assert not listed & {"proj1", "rsauser", "rsaother"}, listed
        walked = set(cluster.out(node, ["python3", "-c", GETGRALL]).split())
        assert "slurm" in walked and not walked & {"proj1", "rsauser", "rsaother"}, walked


GROUP_JOB = f"""#!/bin/bash
#SBATCH -N 1 -t 5
#RSA_DATA_IN={HOME}/gin
{{ findmnt -n -o FSTYPE,SOURCE {HOME}/gin; sha256sum < {HOME}/gin/project/data
  id -nG; }} > {HOME}/gin.report 2>&1
"""


def test_input_readable_only_through_a_directory_group_is_staged_in(
        cluster: Cluster) -> None:
    # rsauser's input holds a project dataset of root's that only proj1 may read (a
    # directory group, never enumerated): staged in as rsauser with proj1, read from the
    # RAMDISK on c1
    cluster.run("ctl", ["sh", "-c", f"rm -rf {HOME}/gin {HOME}/gin.report && mkdir {HOME}/gin"
                        f" && cat > {HOME}/gin-job.sh"], user="rsauser", input=GROUP_JOB)
    project = f"{HOME}/gin/project"
    cluster.run("ctl", ["sh", "-ec", f"mkdir {project}\n"
                        f"head -c 262144 /dev/urandom > {project}/data\n"
                        f"chown -R root:proj1 {project}\n"
                        f"chmod 0750 {project}; chmod 0640 {project}/data"])
    want = cluster.out("ctl", ["sh", "-c", f"sha256sum < {project}/data"])
    # the group is the only way in: rsauser without proj1 is refused (on an RSA node)
    denied = cluster.run("rsa1", ["setpriv", "--reuid=5001", "--regid=5001", "--clear-groups",
                                  "cat", f"{project}/data"], check=False)
    assert denied.returncode != 0 and "Permission denied" in denied.stderr, denied
    job = cluster.out("ctl", ["sbatch", "--parsable", "-w", "c1", f"--chdir={HOME}",
                              "-o", f"{HOME}/gin-%j.log", f"{HOME}/gin-job.sh"],
                      user="rsauser").strip()
    assert job.isdigit(), job
    shown = _wait_released(cluster, job)
    assert "-> mounted-input" in shown, shown
    report = cluster.out("c2", ["cat", f"{HOME}/gin.report"]).splitlines()
    fstype, source = report[0].split()
    assert fstype == "fuse" and source.startswith(("mfs#rsa1-data:", "mfs#rsa2-data:")), report
    assert report[1] == want.strip(), report  # the dataset whole, read from the RAMDISK
    assert "proj1" in report[2].split(), report  # the job's groups, as slurmd gave them

