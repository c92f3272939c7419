"""Two users' RSA jobs on one compute node (issue 30): rsauser's and rsaother's jobs run at
once on c1 (the ``shared`` partition, OverSubscribe=FORCE:2), each with a RAMDISK of its
own over its ``#RSA_DATA_OUT``. From inside its job rsaother tries everything of
rsauser's RAMDISK that the node puts within reach: its mounts on c1 (by path and through
``/proc/PID/root`` of rsauser's processes), the master proxies of the node's mfsmounts
(loopback, the ``rsa_mfsproxy`` guard), the RAMDISK's servers on the RSA nodes (the
guard's server rule), the mfsmount processes and rsauser's job processes through
``/proc`` (environment, descriptors, root, cwd, a signal), and the node hooks' root-only
directory. Each refusal is checked exactly (``ConnectionRefusedError 111``: the guard's
TCP reset; ``PermissionError 13``: the mode or ptrace check), and root (for the ports)
and rsauser (for the mount) reach the same things, so a refusal is the control's and not
a missing listener or path. Both jobs' output is then staged out and verified, each to
its own user. With the guard table deleted on c1, rsaother connected to the proxies
and servers; with the RAMDISK's root chmod 0755, it listed it (checked by hand,
2026-11-29; docs/security.md)."""

from __future__ import annotations

import time
from collections.abc import Callable

from tests.cluster.conftest import Cluster, ramdisk_listeners

HOME = "/pfs/home/rsauser"
THEIRS = "/pfs/home/rsaother"
# rsauser's project space, world-readable as a user may leave it (its home is 0700, which
# alone would keep rsaother out): only the RAMDISK's own modes keep rsaother off the data
OPEN = "/pfs/home/rsauser-open"
VICTIM = f"""#!/bin/bash
#SBATCH -p shared -N 1 -t 5
#RSA_DATA_OUT={OPEN}/sout
umask 022
head -c 65536 /dev/urandom > {OPEN}/sout/secret
sha256sum < {OPEN}/sout/secret > {HOME}/secret.sha
touch {HOME}/shared.ready
cd {OPEN}/sout
t=0; while [ ! -e {HOME}/shared.stop ] && [ $t -lt 1800 ]; do sleep 0.1; t=$((t+1)); done
"""
ATTACKER = f"""#!/bin/bash
#SBATCH -p shared -N 1 -t 5
#RSA_DATA_OUT={THEIRS}/sout
python3 {THEIRS}/shared-attack.py "$@" > {THEIRS}/shared.report 2>&1
head -c 32768 /dev/urandom > {THEIRS}/sout/mine
sha256sum < {THEIRS}/sout/mine > {THEIRS}/mine.sha
# kept running (its RAMDISK mounted) until the test has probed both RAMDISKs as root
t=0; while [ ! -e {THEIRS}/shared.stop ] && [ $t -lt 1800 ]; do sleep 0.1; t=$((t+1)); done
"""
# rsaother's job on c1 (argv: the RSA nodes' server ports host:port,..., rsauser's
# DATA_OUT, its own, rsauser's uid, rsauser's job): one line per attempt, "end" last
ATTACK = """import os, socket, sys
servers, theirs, mine = sys.argv[1].split(","), sys.argv[2], sys.argv[3]

def connect(kind, target):
    host, port = target.rsplit(":", 1)
    s = socket.socket(); s.settimeout(2)
    try:
        s.connect((host, int(port))); print(kind, target, "connected")
    except OSError as e:
        print(kind, target, type(e).__name__, e.errno)
    finally:
        s.close()

def attempt(kind, what, call):
    try:
        call(); print(kind, what, "reached")
    except OSError as e:
        print(kind, what, type(e).__name__, e.errno)

for t in servers:
    connect("server", t)
# every loopback listener of the node's mfsmounts' master proxies (127.83.65.0/24)
for line in open("/proc/net/tcp").read().splitlines()[1:]:
    local, state = line.split()[1], line.split()[3]
    ip = ".".join(str(int(local[i:i + 2], 16)) for i in (6, 4, 2, 0))
    if state == "0A" and ip.startswith("127.83.65."):
        connect("proxy", f"{ip}:{int(local.split(':')[1], 16)}")
# the RAMDISK's mounts on this node: rsauser's DATA_OUT and every fuse mount not ours
targets = {theirs}
for line in open("/proc/self/mountinfo"):
    fields = line.split()
    fstype = fields[fields.index("-") + 1]
    if fstype.startswith("fuse") and fields[4] not in ("/pfs", mine):
        targets.add(fields[4])
for t in sorted(targets):
    attempt("mount", t, lambda t=t: os.listdir(t))
attempt("file", theirs + "/secret", lambda: open(theirs + "/secret", "rb").read())
# the processes: every mfsmount (root's) and every process of rsauser's job (one that
# ended meanwhile, a sleep of its loop, is left out)
for pid in sorted((p for p in os.listdir("/proc") if p.isdigit()), key=int):
    p = f"/proc/{pid}"
    try:
        comm = open(p + "/comm").read().strip()
        uid = next(int(l.split()[1]) for l in open(p + "/status") if l.startswith("Uid:"))
        cmdline = open(p + "/cmdline", "rb").read().decode(errors="replace")
    except OSError:
        continue
    if comm != "mfsmount" and uid != int(sys.argv[4]) or comm == "sleep":
        continue
    tried = [f"cmdline {pid} {comm} {uid} {'password' in cmdline}"]
    for what, call in (("environ", lambda: open(p + "/environ", "rb").read()),
                       ("fd", lambda: os.listdir(p + "/fd")),
                       ("cwd", lambda: os.readlink(p + "/cwd")),
                       ("root", lambda: os.listdir(p + "/root" + theirs)),
                       ("mem", lambda: open(p + "/mem", "rb").read(1)),
                       ("kill", lambda: os.kill(int(pid), 0))):
        try:
            call(); tried.append(f"proc {comm} {what} reached")
        except OSError as e:
            tried.append(f"proc {comm} {what} {type(e).__name__} {e.errno}")
    if os.path.exists(p):
        for line in tried:
            print(line)
# the node hooks' directories: the node's (which would name every job with RAMDISK
# state here) and rsauser's job's (its RAMDISK's private mount), by name
for d in ("/run/rsa/node", "/run/rsa/node/c1", "/run/rsa/node/c1/" + sys.argv[5]):
    attempt("node", d, lambda d=d: os.listdir(d))
print("end")
"""


def _state(cluster: Cluster, job: str) -> str:
    shown = cluster.run("ctl", ["rsa", "job", job], check=False).stdout
    return next((line.split(":", 1)[1].strip() for line in shown.splitlines()
                 if line.strip().startswith("rsa_state:")), "")


def _wait(what: str, ok: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def _released(cluster: Cluster, job: str) -> str:
    shown = ""

    def done() -> bool:
        nonlocal shown
        shown = cluster.run("ctl", ["rsa", "job", job], check=False).stdout
        return "rsa_state: released" in shown or "quarantine" in shown
    _wait(f"job {job} released", done, 120)
    assert "rsa_state: released" in shown, shown
    return shown


def _probe(cluster: Cluster, user: str | None, targets: list[str]) -> list[str]:
    code = ("import socket, sys\nfor t in sys.argv[1:]:\n    s = socket.socket(); "
            "s.settimeout(2)\n    try:\n        s.connect((t.rsplit(':', 1)[0], "
            "int(t.rsplit(':', 1)[1]))); print(t, 'connected')\n    except OSError as e:\n"
            "        print(t, type(e).__name__, e.errno)\n")
    return cluster.out("c1", ["python3", "-c", code, *targets], user=user).splitlines()


def test_rsaother_beside_rsausers_job_on_one_node_reaches_nothing_of_it(
        cluster: Cluster) -> None:
    cluster.run("ctl", ["sh", "-ec", f"rm -rf {OPEN}\ninstall -d -o rsauser -g rsauser "
                        f"-m 0755 {OPEN} {OPEN}/sout"])
    cluster.run("ctl", ["sh", "-c", f"rm -f {HOME}/shared.* {HOME}/secret.sha && "
                        f"cat > {HOME}/shared.sh"], user="rsauser", input=VICTIM)
    cluster.run("login", ["sh", "-c", f"rm -rf {THEIRS}/shared.* {THEIRS}/sout "
                          f"{THEIRS}/mine.sha && mkdir -p {THEIRS}/sout && "
                          f"cat > {THEIRS}/shared.sh"], user="rsaother", input=ATTACKER)
    cluster.run("login", ["sh", "-c", f"cat > {THEIRS}/shared-attack.py"], user="rsaother",
                input=ATTACK)
    # the node hooks' directories as an older version left them: listable by anyone
    cluster.run("c1", ["sh", "-ec", "install -d -m 0755 /run/rsa/node /run/rsa/node/c1\n"
                       "chmod 0755 /run/rsa/node /run/rsa/node/c1"])
    victim = cluster.out("login", ["sbatch", "--parsable", "-w", "c1", f"--chdir={HOME}",
                                   "-o", f"{HOME}/shared.log", f"{HOME}/shared.sh"],
                         user="rsauser").strip()
    assert victim.isdigit(), victim
    try:
        _wait("rsauser's job to write its secret on its RAMDISK", lambda: cluster.run(
            "c1", ["test", "-e", f"{HOME}/shared.ready"], check=False).returncode == 0, 120)
        # the RAMDISK's servers on the RSA data network (master, chunkserver)
        servers = ramdisk_listeners(cluster)
        assert len(servers) >= 4, servers
        uid = cluster.out("c1", ["id", "-u", "rsauser"]).strip()
        attacker = cluster.out("login", [
            "sbatch", "--parsable", "-w", "c1", f"--chdir={THEIRS}", "-o",
            f"{THEIRS}/shared.log", f"{THEIRS}/shared.sh", ",".join(servers),
            f"{OPEN}/sout", f"{THEIRS}/sout", uid, victim], user="rsaother").strip()
        assert attacker.isdigit(), attacker
        report: list[str] = []

        def ended() -> bool:
            nonlocal report
            report = cluster.run("c1", ["cat", f"{THEIRS}/shared.report"],
                                 check=False).stdout.splitlines()
            return report[-1:] == ["end"]
        _wait(f"rsaother's job {attacker}'s report", ended, 150)
        # both jobs ran on c1 at once, each with its RAMDISK mounted there
        running = cluster.out("ctl", ["squeue", "-h", "-t", "all", "-j",
                                      f"{victim},{attacker}", "-o", "%i %T %N"])
        assert f"{victim} RUNNING c1" in running, running
        shown = cluster.out("ctl", ["rsa", "job", attacker])
        assert "-> mounted-output" in shown, shown

        lines = report[:-1]
        by = {kind: [x for x in lines if x.startswith(kind + " ")] for kind in (
            "server", "proxy", "mount", "file", "cmdline", "proc", "node")}
        assert sum(map(len, by.values())) == len(lines), report
        # the guard: every server of rsauser's RAMDISK and every master proxy refused
        # with the guard's TCP reset, which root, the control, gets through
        assert by["server"] == [f"server {t} ConnectionRefusedError 111" for t in servers]
        proxies = [x.split()[1] for x in by["proxy"]]
        assert len(proxies) >= 2, report  # both RAMDISKs' mfsmounts
        assert by["proxy"] == [f"proxy {t} ConnectionRefusedError 111" for t in proxies]
        assert _probe(cluster, None, servers + proxies) == [
            f"{t} connected" for t in servers + proxies]
        # the mounts: rsauser's DATA_OUT and the node's other RAMDISK mounts, by path
        mounts = [x.split()[1] for x in by["mount"]]
        assert f"{OPEN}/sout" in mounts, report
        assert by["mount"] == [f"mount {m} PermissionError 13" for m in mounts]
        assert by["file"] == [f"file {OPEN}/sout/secret PermissionError 13"]
        assert cluster.out("c1", ["ls", f"{OPEN}/sout"], user="rsauser") == "secret\n"
        # the processes: every mfsmount and rsauser's job, nothing through /proc, no
        # secret in a command line
        owners = [x.split()[3] for x in by["cmdline"] if x.split()[2] != "mfsmount"]
        assert owners and set(owners) == {uid}, report  # rsauser's job script
        assert sum(x.split()[2] == "mfsmount" for x in by["cmdline"]) >= 3, report
        assert all(x.endswith(" False") for x in by["cmdline"]), by["cmdline"]
        assert by["proc"] and len(by["proc"]) == 6 * len(by["cmdline"]), report
        for line in by["proc"]:
            assert line.endswith(" PermissionError 13") or line.endswith(
                " PermissionError 1"), line  # EACCES, or EPERM for kill
        # the node hooks' directories, left 0755 as an older version made them
        # (before the jobs): tightened to 0700 by the jobs' Prologs (on main rsaother listed the
        # node's two and read every job id in them)
        nodedirs = ["/run/rsa/node", "/run/rsa/node/c1", f"/run/rsa/node/c1/{victim}"]
        assert by["node"] == [f"node {d} PermissionError 13" for d in nodedirs], report
        assert cluster.out("c1", ["stat", "-c", "%a", *nodedirs[:2]]).split() == [
            "700", "700"]
        # rsauser's job still has its RAMDISK, as it left it
        assert _state(cluster, victim) == "mounted-output"
        assert cluster.out("c1", ["sh", "-c", f"sha256sum < {OPEN}/sout/secret"],
                           user="rsauser") == cluster.out("c1", ["cat", f"{HOME}/secret.sha"],
                                                          user="rsauser")
    finally:
        cluster.run("ctl", ["touch", f"{HOME}/shared.stop"], user="rsauser", check=False)
        cluster.run("login", ["touch", f"{THEIRS}/shared.stop"], user="rsaother",
                    check=False)
    # each job's output is staged out and verified, as its own user's
    for job, out, home, name, user in ((victim, OPEN, HOME, "secret", "rsauser"),
                                       (attacker, THEIRS, THEIRS, "mine", "rsaother")):
        shown = _released(cluster, job)
        assert "ok content verified: 1 object " in shown and f" in {out}/sout " in shown, \
            shown
        assert cluster.out("rsa2", ["stat", "-c", "%U", f"{out}/sout/{name}", f"{out}/sout"],
                           user=user) == f"{user}\n{user}\n"
        want = cluster.out("rsa2", ["cat", f"{home}/{name}.sha"], user=user)
        assert cluster.out("rsa2", ["sh", "-c", f"sha256sum < {out}/sout/{name}"],
                           user=user) == want
    # rsaother's output holds its own file only
    assert cluster.out("rsa2", ["ls", f"{THEIRS}/sout"], user="rsaother") == "mine\n"
    cluster.run("ctl", ["rm", "-rf", OPEN])
