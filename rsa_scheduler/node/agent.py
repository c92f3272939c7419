"""The per-job node agent: carries out rsad's mid-job instructions on one compute node.

Started detached by the node Prolog (in the job's mount namespace, as root), stopped by
the Epilog; with ``hooks.mounts: job`` it works inside the job's own mount namespace. It
long-polls rsad (``POST /v1/hooks/agent``) for the next instruction —
``release`` the input mount (busy is reported, never forced) and ``mount`` the fresh
RAMDISK over DATA_OUT (seed 004 §3.2); an input mount re-issued after an rsad restart is
answered from what the Prolog did (never mounted under a running job) — reports each
(``/v1/hooks/mounted``), and exits
when rsad says so, when the Epilog removed the job's directory, or after ``max_life``.
No SSH into compute nodes: the node calls rsad, as Slurm's own daemons do.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from typing import Any

from rsa_scheduler.core.jobkey import from_env
from rsa_scheduler.node.hooks import execute, settings, who_of
from rsa_scheduler.node.mounts import JobMounts
from rsa_scheduler.node.plan import PROTOCOL

POLL = 20.0


def enter_job_namespace(jm: JobMounts) -> bool:
    """``hooks.mounts: job``: work inside the job's own mount namespace (the Prolog
    started us there already; entering again is harmless). False if there is none."""
    from rsa_scheduler.node.namespace import JobNamespace, NamespaceError

    ns = JobNamespace(jm.dir)
    if not ns.exists():
        return False
    try:
        ns.enter()
    except NamespaceError as e:
        sys.stderr.write(f"rsa-node-agent job {jm.job}: {e}\n")
        return False
    return True


def note(jm: JobMounts, ins: Mapping[str, Any], report: Mapping[str, Any],
         mounts: str) -> None:
    """Keep job.env current: steps started after the reset see RSA_STATE=output."""
    from rsa_scheduler.node import jobstate

    try:
        current = jobstate.read(jm.dir)
        if current:
            jobstate.write(jm.dir, jobstate.after(current, ins, report, mounts))
    except OSError as e:
        sys.stderr.write(f"rsa-node-agent job {jm.job}: job.env not updated: {e}\n")


def input_state(jm: JobMounts, ins: Mapping[str, Any]) -> dict[str, Any]:
    """A re-issued input mount (rsad restarted while the Prologs mounted): the job is
    already running, so nothing is mounted under it now; say whether the Prolog did."""
    seq = int(ins.get("seq", 0))
    for e in jm.entries():
        if (e.get("kind") == "target" and e.get("role") == "input" and not e.get("attaching")
                and e.get("path") == ins.get("target") and e.get("mode") == ins.get("mode")):
            return {"seq": seq, "ok": True,
                    "message": f"RAMDISK already mounted over {e['path']} ({e['mode']})"}
    return {"seq": seq, "ok": False,
            "message": "the job already runs from the PFS on this node; its input is not "
                       "mounted under it"}


def serve(job: str, env: Mapping[str, str], max_life: float = 7 * 86400.0) -> int:
    from rsa_scheduler.client import ApiClient, ApiRefused, ApiUnavailable

    node = env["SLURMD_NODENAME"]
    nodes = env.get("SLURM_NODELIST", node)
    st = settings(env)
    jm = JobMounts(job, node, st.base)
    # rsad's name for the job (an array task's <array>_<task>); ``job`` names the
    # node-side directory (the numeric job id)
    ref = {**from_env(env), "job_id": job, "protocol": PROTOCOL}
    who = who_of(env)
    private = st.mounts == "job" and enter_job_namespace(jm)
    client = ApiClient(st.address, timeout=POLL + 10, trust_uid=0)
    last = 0
    epoch = ""
    end = time.monotonic() + max_life
    while time.monotonic() < end and jm.dir.exists():
        try:
            ins = client.post("/v1/hooks/agent", {**ref, "node": node,
                                                  "nodes": nodes, "last_seq": last,
                                                  "epoch": epoch, "wait": POLL})
        except (ApiUnavailable, ApiRefused) as e:
            sys.stderr.write(f"rsa-node-agent job {job}: {e}; retrying\n")
            time.sleep(5)
            continue
        epoch = str(ins.get("epoch") or epoch)
        if ins.get("do") == "exit":
            return 0
        if ins.get("do") in ("release", "mount"):
            if ins["do"] == "mount" and ins.get("role") == "input":
                report = input_state(jm, ins)
            elif ins["do"] == "mount" and st.mounts == "job" and not private:
                report = {"seq": int(ins.get("seq", 0)), "ok": False,
                          "message": "the job has no mount namespace of its own on this "
                                     "node; it uses the PFS"}
            else:
                try:
                    report = execute(ins, jm, who, st.allowed_roots, st.shared_dirs)
                except Exception as e:  # never end the agent: rsad would wait for this
                    # node's report up to reset_timeout; it hears the failure instead
                    report = {"seq": int(ins.get("seq", 0)), "ok": False,
                              "message": f"the node agent failed to {ins['do']}: "
                                         f"{type(e).__name__}: {e}"}
            note(jm, ins, report, st.mounts)
            last = int(ins.get("seq", last))
            try:
                # the epoch of the rsad that gave it: a restarted rsad's numbers restart
                given = {"epoch": str(ins["epoch"])} if ins.get("epoch") else {}
                client.post("/v1/hooks/mounted", {**ref, "node": node, **report, **given})
            except (ApiUnavailable, ApiRefused) as e:
                sys.stderr.write(f"rsa-node-agent job {job}: report lost: {e}\n")
    return 0


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1], os.environ))
