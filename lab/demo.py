#!/usr/bin/env python3
"""`make demo`: sample jobs with ``#RSA_*`` directives through the whole RSA lifecycle in
the lab, the live dashboard while they run, and a summary of what happened.

Owns the demo's story, its job scripts and the summary; the lab itself is brought up and
down by ``make demo`` (lab/lab.mk). Needs a running lab (``make lab-up``) and root.

The story (4 compute nodes c[1-4], 4 RSA nodes rsa[1-4], the PFS throttled; on the cluster
lab, ``make cluster-demo``, every job spans its 2 compute nodes instead of 4):

1. ``busy``      — a plain 4-node job: the cluster is full, the next job waits on-deck
   (it holds the nodes until ``analysis`` is locked in, and at least 30 s).
2. ``analysis``  — RSA job: 4 nodes read a 300 MiB input and write one file per process.
   Its input is staged into a RAMDISK while ``busy`` still runs, the job is locked in,
   reads through the RAMDISK over its DATA_IN path, asks for the reset with
   ``rsa input-done``, writes through the RAMDISK over DATA_OUT, and its compute nodes are
   free as soon as it ends; the output is staged out (rsync) and verified afterwards.
3. ``many-files``— RSA job, output only, 2,000 small files, aggregated into tar archives.
4. ``demoted``   — RSA job (input only), on-deck and staging when an urgent job jumps the
   queue (its priority set above ``demoted`` but below the locked-in ``many-files``): it is
   demoted, its RAMDISK torn down, while the locked-in job keeps its place; when the
   urgent job is withdrawn it is on-deck again and staged anew.
5. ``baseline``  — ``analysis`` again without any directive: reads and writes the PFS.

The summary compares how long ``analysis`` and ``baseline`` held their compute nodes.
On a terminal the live view is ``rsa top``; otherwise (CI, ``--plain``) a line per event.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LAB_ENV = Path("/run/rsa-lab/env")


def lab_facts() -> dict[str, str]:
    if not LAB_ENV.exists():
        sys.exit("demo: the lab is not up (run `make lab-up`, or use `make demo`)")
    facts = {}
    for line in LAB_ENV.read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            k, _, v = line.partition("=")
            facts[k] = shlex.split(v)[0] if v else ""
    return facts


@dataclass
class Job:
    name: str
    title: str
    rsa: bool
    id: str = ""
    submitted: float = 0.0
    narrated: int = 0  # rsa.transition events narrated so far
    last_job_state: str = ""


class Demo:
    def __init__(self, lab: dict[str, str], plain: bool, scale: float) -> None:
        self.lab = lab
        self.plain = plain
        self.scale = scale
        self.user = lab["RSA_LAB_USER"]
        self.rsa = f"{lab['RSA_LAB_VENV']}/bin/rsa"
        self.env = {**os.environ, "SLURM_CONF": lab["RSA_LAB_SLURM_CONF"]}
        self.base = Path(lab["RSA_LAB_PFS"]) / f"rsa-demo-{int(time.time())}"
        # every job spans the whole cluster: c[1-4] in the lab, c[1-2] in the cluster lab
        first, _, last = lab["RSA_LAB_COMPUTE_NODES"].partition("[")[2].rstrip("]").partition("-")
        self.n = int(last or first) - int(first) + 1
        self.t0 = time.monotonic()
        self.jobs: dict[str, Job] = {}
        self.log: list[str] = []
        self.lock = threading.Lock()

    # ---- plumbing ------------------------------------------------------------------

    def say(self, text: str) -> None:
        line = f"[{time.monotonic() - self.t0:6.1f}s] {text}"
        with self.lock:
            self.log.append(line)
        if self.plain:
            print(line, flush=True)

    def run(self, argv: list[str], *, user: bool = False, check: bool = True,
            timeout: float = 120) -> str:
        full = ["runuser", "-u", self.user, "--", *argv] if user else argv
        done = subprocess.run(full, capture_output=True, text=True, env=self.env, cwd="/",
                              timeout=timeout, check=False)
        if check and done.returncode != 0:
            raise SystemExit(f"demo: {' '.join(argv[:3])} failed: {done.stderr.strip()}")
        return done.stdout

    def as_user_sh(self, script: str, timeout: float = 600) -> None:
        self.run(["bash", "-c", script], user=True, timeout=timeout)

    def submit(self, job: Job, script: str, *extra: str) -> None:
        path = self.base / "scripts" / f"{job.name}.sh"
        path.write_text(script)
        os.chown(path, *self.ids())
        out = self.run(["sbatch", "--parsable", "-J", f"demo-{job.name}", "-o",
                        str(self.base / "logs" / f"{job.name}.out"),
                        f"--chdir={self.base}", *extra, str(path)], user=True)
        job.id = out.strip().split(";")[0]
        job.submitted = time.monotonic()
        self.jobs[job.name] = job
        self.say(f"submitted {job.name} (job {job.id}): {job.title}")

    def ids(self) -> tuple[int, int]:
        import pwd

        pw = pwd.getpwnam(self.user)
        return pw.pw_uid, pw.pw_gid

    def rsa_job(self, job: Job) -> dict[str, Any] | None:
        done = subprocess.run([self.rsa, "job", job.id, "--json"], capture_output=True,
                              text=True, timeout=30, check=False)
        return json.loads(done.stdout) if done.returncode == 0 else None

    def squeue_state(self, job: Job) -> tuple[str, str]:
        out = self.run(["squeue", "-h", "-j", job.id, "-o", "%T|%r"], check=False).strip()
        state, _, reason = out.partition("|")
        return state, reason

    def wait(self, what: str, probe: Any, timeout: float = 300) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            got = probe()
            if got:
                return got
            if time.monotonic() > deadline:
                raise SystemExit(f"demo: gave up after {timeout:.0f}s waiting for {what}")
            time.sleep(0.5)

    def priority(self, job: Job) -> int:
        out = self.run(["squeue", "-h", "-j", job.id, "-o", "%Q"]).strip()
        if not out.isdigit():
            raise SystemExit(f"demo: no priority for {job.name} (job {job.id}): {out!r}")
        return int(out)

    def rsa_state(self, job: Job) -> str:
        data = self.rsa_job(job)
        return data["rsa_state"] if data else ""

    # ---- narration -----------------------------------------------------------------

    def narrate(self) -> None:
        """One line per rsa-state a demo job reaches, and per Slurm state change."""
        for job in list(self.jobs.values()):
            if job.rsa:
                data = self.rsa_job(job)
                trans = [e for e in (data or {}).get("events", [])
                         if e.get("name") == "rsa.transition" and e["from"] != e["to"]]
                for e in trans[job.narrated:]:
                    self.say(f"{job.name}: {e['from']} -> {e['to']}"
                             f"{' (' + e['trigger'] + ')' if e.get('trigger') else ''}")
                job.narrated = max(job.narrated, len(trans))
            state, reason = self.squeue_state(job)
            label = f"{state} ({reason})" if state == "PENDING" else state or "gone"
            if label != job.last_job_state:
                job.last_job_state = label
                self.say(f"{job.name}: Slurm says {label}")

    # ---- the story -----------------------------------------------------------------

    def prepare(self) -> None:
        mib = max(8, int(300 * self.scale))
        self.say(f"creating the demo's data on the PFS in {self.base} "
                 f"({mib} MiB input, as {self.user})")
        self.as_user_sh(
            f"set -e; mkdir -p {self.base}/scripts {self.base}/logs {self.base}/input "
            f"{self.base}/out-analysis {self.base}/out-baseline {self.base}/out-many "
            f"{self.base}/in-demoted {self.base}/out-demoted; "
            f"for i in 1 2 3 4 5 6; do head -c {mib // 6}M /dev/urandom "
            f"> {self.base}/input/part$i; done; "
            f"head -c 900M /dev/zero > {self.base}/in-demoted/blob")

    def analysis_script(self, rsa: bool, out: str) -> str:
        mib, n = max(1, int(16 * self.scale)), self.n
        directives = (f"#RSA_DATA_IN={self.base}/input\n#RSA_DATA_OUT={self.base}/{out}\n"
                      "#RSA_RESET=input-done\n") if rsa else ""
        # returns once the RAMDISK is over DATA_OUT on all its nodes (or the RSA says the
        # output goes to the PFS)
        reset = f"{self.rsa} input-done --timeout 120\n" if rsa else ""
        return f"""#!/bin/bash
#SBATCH -N {n} -t 10
{directives}# read the input on every node, then write one file per process
srun -N{n} -n{n} bash -c 'cat {self.base}/input/part* | md5sum > /dev/null'
{reset}srun -N{n} -n{4 * n} --overcommit bash -c \\
  'head -c {mib}M /dev/urandom > {self.base}/{out}/rank-$SLURM_PROCID'
"""

    @staticmethod
    def uncache(path: Path) -> None:
        """Drop this host's page cache of the demo input (compute nodes share the host's
        kernel): the baseline must read the PFS, not memory."""
        for f in path.iterdir():
            fd = os.open(f, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)

    def main(self) -> None:
        self.prepare()
        self.uncache(self.base / "input")
        busy_s = max(10, int(30 * self.scale))
        # busy holds the nodes at least busy_s, and until the demo says go: analysis is
        # staged and locked in meanwhile however slow this machine is today
        started = time.monotonic()
        n = self.n
        self.submit(Job("busy", f"plain {n}-node job: the cluster is full", False),
                    f"#!/bin/bash\n#SBATCH -N {n} -t 5\n"
                    f"for i in $(seq 1 600); do [ -e {self.base}/go-busy ] && break; "
                    "sleep 0.5; done\n")
        mib = max(8, int(300 * self.scale))
        self.submit(Job("analysis", f"RSA job: {mib} MiB input, {4 * n} output files", True),
                    self.analysis_script(True, "out-analysis"))
        self.wait("analysis locked in", lambda: self.rsa_state(self.jobs["analysis"])
                  == "locked-in")
        time.sleep(max(0.0, busy_s - (time.monotonic() - started)))
        self.as_user_sh(f"touch {self.base}/go-busy")
        files = max(50, int(2000 * self.scale))
        self.submit(Job("many-files", f"RSA job: {files} small files, tar stage-out", True),
                    f"#!/bin/bash\n#SBATCH -N {n} -t 5\n#RSA_DATA_OUT={self.base}/out-many\n"
                    "#RSA_STAGE_OUT=tar\n"
                    f"srun -N{n} -n{n} bash -c 'for i in $(seq 1 {files // n}); do "
                    f"echo $SLURM_PROCID-$i > {self.base}/out-many/f-$SLURM_PROCID-$i; "
                    "done'\n# hold the nodes until the demo says go: the demoted job is staged "
                    "meanwhile\n"
                    f"for i in $(seq 1 600); do [ -e {self.base}/go-many ] && break; "
                    "sleep 0.5; done\n")
        self.submit(Job("demoted", "RSA job that an urgent job will push back", True),
                    f"#!/bin/bash\n#SBATCH -N {n} -t 5\n#RSA_DATA_IN={self.base}/in-demoted\n"
                    f"md5sum {self.base}/in-demoted/blob > {self.base}/out-demoted/md5\n")
        demoted = self.jobs["demoted"]
        # The urgent job must find analysis running and many-files locked in (the busy
        # job may still hold the nodes when demoted is staging).
        self.wait("analysis running", lambda: self.squeue_state(
            self.jobs["analysis"])[0] in ("RUNNING", "COMPLETING", ""), timeout=600)
        self.wait("many-files locked in", lambda: self.rsa_state(self.jobs["many-files"])
                  in ("locked-in", "mounting-output", "mounted-output"), timeout=600)
        self.wait("demoted on-deck and staging", lambda: self.rsa_state(demoted)
                  == "staging-in", timeout=600)
        self.submit(Job("urgent", "plain job, high priority: jumps the queue", False),
                    f"#!/bin/bash\n#SBATCH -N {n} -t 5\nsleep 2\n")
        # Above demoted, below any locked-in job: lock-in keeps a staged job ahead (seed
        # 004 §3.1); only the job still staging is pushed back. The gap is twice the lab's
        # PriorityWeightAge, so demoted's ageing can never catch up while the demo waits
        # (a midpoint towards many-files was a tie whenever many-files started before
        # its lock-in); lock-in adds 100000 (QOS) or sets 1000000, far above.
        urgent = self.priority(demoted) + 2000
        self.run(["scontrol", "update", f"jobid={self.jobs['urgent'].id}",
                  f"priority={urgent}"])
        self.say(f"urgent: an operator raised its priority to {urgent}: above demoted's, "
                 "below a locked-in job's")
        self.wait("demoted torn down", lambda: self.rsa_state(demoted)
                  in ("released", "tearing-down", "none"), timeout=300)
        self.run(["scancel", self.jobs["urgent"].id])
        self.say("urgent: withdrawn (scancel); demoted is next in line again")
        self.wait("demoted staged again", lambda: self.rsa_state(demoted) == "locked-in",
                  timeout=600)
        self.as_user_sh(f"touch {self.base}/go-many")
        self.say("many-files: told to finish; demoted starts on its staged input")
        self.wait("all RSA jobs released", self.all_released, timeout=900)
        self.uncache(self.base / "input")
        self.submit(Job("baseline", "the analysis job again, without RSA directives", False),
                    self.analysis_script(False, "out-baseline"))
        self.wait("baseline done", lambda: self.squeue_state(self.jobs["baseline"])[0]
                  in ("", "COMPLETED"), timeout=900)

    def all_released(self) -> bool:
        return all(self.rsa_state(j) in ("released", "declined")
                   for j in self.jobs.values() if j.rsa)

    # ---- summary -------------------------------------------------------------------

    def sacct(self, job: Job) -> dict[str, str]:
        out = self.run(["sacct", "-X", "-n", "-P", "-j", job.id, "-o",
                        "State,ElapsedRaw,NodeList,Start,End"], check=False)
        line = out.strip().splitlines()[0] if out.strip() else "|||||"
        state, elapsed, nodes, start, end = (line.split("|") + [""] * 5)[:5]
        # sacct says "CANCELLED by 0" (a uid) and "None assigned" for a job that never ran
        if state.startswith("CANCELLED by "):
            uid = state.rsplit(" ", 1)[1]
            try:
                state = f"CANCELLED (by {pwd.getpwuid(int(uid)).pw_name})"
            except (KeyError, ValueError):
                state = f"CANCELLED (by uid {uid})"
        if nodes.startswith("None"):
            nodes, elapsed = "", "" if elapsed in ("", "0") else elapsed
        return {"state": state, "elapsed": elapsed, "nodes": nodes, "start": start,
                "end": end}

    def summary(self) -> str:
        rows = ["", "What happened", "=" * 72]
        for job in self.jobs.values():
            acct = self.sacct(job)
            line = f"{job.name:<11} job {job.id:<5} {acct['state']:<10}"
            if acct["elapsed"] and acct["nodes"]:
                line += f" held {acct['nodes']} for {acct['elapsed']}s"
            elif not acct["nodes"]:
                line += " never ran"
            rows.append(line)
            if acct["state"].startswith(("FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_ME")):
                log = self.base / "logs" / f"{job.name}.out"
                tail = log.read_text(errors="replace").splitlines()[-4:] if log.exists() else []
                rows += [f"{'':11} log: {t}" for t in tail] or [f"{'':11} (no job log)"]
            if job.rsa:
                data = self.rsa_job(job) or {}
                trans = [e for e in data.get("events", []) if e.get("name") == "rsa.transition"
                         and e["from"] != e["to"]]
                path = " > ".join([trans[0]["from"], *(e["to"] for e in trans)]
                                  if trans else ["(no RSA activity)"])
                rows.append(f"{'':11} rsa: {path}")
                timing = self._phases(data)
                if timing:
                    rows.append(f"{'':11} {timing}")
        a, b = self.jobs.get("analysis"), self.jobs.get("baseline")
        if a and b:
            ea, eb = self.sacct(a)["elapsed"], self.sacct(b)["elapsed"]
            if ea.isdigit() and eb.isdigit() and int(ea) > 0:
                rows += ["", f"Compute nodes held: with the RSA {ea}s, without {eb}s "
                         f"({int(eb) / int(ea):.1f}x); the RSA did the PFS I/O before and "
                         "after the job, off the compute nodes."]
        rows += ["", f"Output on the PFS: {self.base}/out-analysis "
                 f"({len(list((self.base / 'out-analysis').glob('rank-*')))} files), "
                 f"{self.base}/out-many "
                 f"({len(list((self.base / 'out-many').glob('*.tar')))} tar archives + index)",
                 f"Event log: {self.rsa} events; one job: {self.rsa} job ID",
                 "Docs: docs/user-guide.md (directives), docs/operator-guide.md (commands)"]
        return "\n".join(rows)

    @staticmethod
    def _phases(data: dict[str, Any]) -> str:
        """Stage-in and stage-out durations from the action outcomes' transitions."""
        times: dict[str, float] = {}
        for e in data.get("events", []):
            if e.get("name") == "rsa.transition":
                times.setdefault(f"{e['from']}>{e['to']}", e["time"])
                times.setdefault(f"to:{e['to']}", e["time"])
                times[f"last:{e['to']}"] = e["time"]
        parts = []
        if "last:staging-in" in times and "last:staged-in" in times:
            parts.append(f"stage-in {times['last:staged-in'] - times['last:staging-in']:.1f}s")
        if "to:staging-out" in times and "to:output-verified" in times:
            parts.append(f"stage-out+verify "
                         f"{times['to:output-verified'] - times['to:staging-out']:.1f}s")
        return ", ".join(parts)


def live_view(demo: Demo, done: threading.Event) -> None:
    """``rsa top`` in the foreground until the story ends (then SIGINT: a clean quit)."""
    top = subprocess.Popen([demo.rsa, "top", "--interval", "1"])
    try:
        while not done.wait(0.5):
            if top.poll() is not None:  # the user quit it with q: narrate instead
                demo.plain = True
                with demo.lock:
                    print("\n".join(demo.log), flush=True)
                return
    finally:
        if top.poll() is None:
            top.send_signal(signal.SIGINT)
            try:
                top.wait(10)
            except subprocess.TimeoutExpired:
                top.kill()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plain", action="store_true",
                    help="narrate line by line instead of the live view (default off a tty)")
    ap.add_argument("--scale", type=float, default=1.0,
                    help="scale the data and the busy time (tests use 0.2)")
    ap.add_argument("--keep", action="store_true", help="keep the demo's files on the PFS")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("demo: run as root (it submits jobs as the lab user and reads the lab)")
    demo = Demo(lab_facts(), plain=args.plain or not sys.stdout.isatty(), scale=args.scale)
    done = threading.Event()
    viewer = None if demo.plain else threading.Thread(target=live_view, args=(demo, done))
    stop_narrator = threading.Event()

    def narrator() -> None:
        while not stop_narrator.wait(1.0):
            try:
                demo.narrate()
            except Exception as e:  # narration must never end the demo
                demo.say(f"(narration: {e})")

    thread = threading.Thread(target=narrator, daemon=True)
    try:
        if viewer:
            viewer.start()
        thread.start()
        demo.main()
        demo.narrate()
    except KeyboardInterrupt:
        demo.say("interrupted")
    finally:
        stop_narrator.set()
        done.set()
        if viewer:
            viewer.join()
        for job in demo.jobs.values():
            subprocess.run(["scancel", job.id], env=demo.env, check=False,
                           capture_output=True)
    if not demo.plain:
        print("\n".join(demo.log))
    print(demo.summary(), flush=True)
    if not args.keep:
        subprocess.run(["rm", "-rf", str(demo.base)], check=False)


if __name__ == "__main__":
    main()
