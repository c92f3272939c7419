"""The steps of ``rsa selftest`` and their verdicts, as pure functions of what rsad and
the RSA nodes said: no I/O, no clock (``rsa_scheduler/cli/selftest.py`` asks, this
module judges).

Owns :data:`STEPS` (the order an admin reads them in), :class:`Step` (one line of the
report: passed, failed, under way or not run, its time, and on failure the fix),
:func:`job_steps` (the job's steps from its rsad record and event timeline: each step
starts and ends at given rsa-states, and a failure state or the job's end before a step
ended fails that step with rsad's message), :func:`nodes_step` (the RSA nodes as rsad
and their read-only check see them), :func:`fix_for` (one actionable line per failure)
and :func:`report` (the lines printed).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rsa_scheduler.core.states import FAILURES, RsaState

#: every step, in the order they happen (``nodes`` before anything is submitted)
STEPS = ("nodes", "submit check", "stage-in", "mount", "reset", "stage-out", "verify",
         "teardown")

#: the job's steps: (name, the rsa-state that starts it, the rsa-state that ends it)
JOB_STEPS: tuple[tuple[str, RsaState, RsaState], ...] = (
    ("stage-in", RsaState.ALLOCATED, RsaState.STAGED_IN),
    ("mount", RsaState.MOUNTING_INPUT, RsaState.MOUNTED_INPUT),
    ("reset", RsaState.RESETTING, RsaState.MOUNTED_OUTPUT),
    ("stage-out", RsaState.STAGING_OUT, RsaState.VERIFYING),
    ("verify", RsaState.VERIFYING, RsaState.OUTPUT_VERIFIED),
    ("teardown", RsaState.TEARING_DOWN, RsaState.RELEASED),
)

#: which step a failure state belongs to
FAILED_IN: Mapping[str, str] = {
    RsaState.FS_FAILED: "stage-in", RsaState.STAGE_IN_FAILED: "stage-in",
    RsaState.LOCK_FAILED: "stage-in", RsaState.RESET_FAILED: "reset",
    RsaState.WRITEBACK_FAILED: "reset", RsaState.STAGE_OUT_FAILED: "stage-out",
    RsaState.QUARANTINED: "stage-out", RsaState.TEARDOWN_FAILED: "teardown",
}

PASSED, FAILED, RUNNING, NOT_RUN = "ok", "FAILED", "running", "not run"


@dataclass(frozen=True, slots=True)
class Step:
    """One line of the report."""

    name: str
    status: str = NOT_RUN
    seconds: float | None = None
    detail: str = ""
    fix: str = ""

    @property
    def failed(self) -> bool:
        return self.status == FAILED


def _transitions(events: Sequence[Mapping[str, Any]]) -> list[tuple[float, str, str]]:
    """(time, rsa-state entered, message) of each rsa transition, in order."""
    return [(float(e.get("time") or 0.0), str(e.get("to")), str(e.get("message") or ""))
            for e in events if e.get("name") == "rsa.transition"]


#: a tool the node lacked, as a shell or rsad says it (``sh: 1: rsync: not found``,
#: ``rsync: command not found``, ``lacks command rsync``)
_MISSING = re.compile(r"(?:\b(?P<a>[\w.+-]+): (?:command )?not found"
                      r"|lacks command (?P<b>[\w.+-]+))")
_ON_NODE = re.compile(r"\b(?:on|from|at) (?P<node>[A-Za-z][\w.-]*\d)\b")


def fix_for(step: str, message: str, job: str = "") -> str:
    """One line an admin can act on for a failure of ``step`` with rsad's ``message``."""
    missing = _MISSING.search(message)
    node = _ON_NODE.search(message)
    where = f"on {node.group('node')}" if node else "on the RSA node the message names"
    if missing:
        tool = missing.group("a") or missing.group("b")
        return (f"install {tool} {where} (rsa nodes check lists what each RSA node "
                "lacks), then run rsa selftest again")
    if "Permission denied" in message or "not allowed" in message:
        return ("give the test user a directory on the PFS inside staging.allowed_roots "
                "(--dir), then run rsa selftest again")
    see = f"rsa job {job} and rsa events --job {job}" if job else "rsa events"
    return {
        "stage-in": f"{see} show why the RAMDISK was not built or filled; fix that "
                    "(rsa nodes check, docs/operator-guide.md troubleshooting)",
        "mount": "check the compute node's Prolog: rsa nodes check --compute on the job's "
                 "node (slurm.conf Prolog=rsa-prolog, rsad's address in "
                 "/etc/rsa/client.conf)",
        "reset": f"{see} show which node kept the input busy or failed the reset; check "
                 "the node agent's log there (journalctl, slurmd's log)",
        "stage-out": f"{see} show why the output did not reach the PFS; fix that, then "
                     f"rsa retry {job or 'JOB'}",
        "verify": f"{see} show which file differed; check the PFS under --dir",
        "teardown": f"{see} show why the RAMDISK was not destroyed; rsa nodes check the "
                    "nodes it held, then rsa retry",
    }.get(step, f"{see} show why")


def job_steps(job: Mapping[str, Any] | None, submitted: float, tracked: bool,
              finished: bool) -> list[Step]:
    """The job's steps (everything after ``nodes``) from its ``GET /v1/jobs/ID`` answer
    (None: rsad does not know it yet). ``submitted``: when sbatch returned; ``tracked``:
    rsad knows the job; ``finished``: Slurm's job is over, or the wait ran out (a step
    not reached by then failed)."""
    job_id = str((job or {}).get("job_id") or "")
    first_event = min((float(e.get("time") or 0.0) for e in (job or {}).get("events") or []),
                      default=submitted)
    if not tracked:
        status = FAILED if finished else RUNNING
        submit = Step("submit check", status, detail="rsad does not know the job",
                      fix=("rsad did not pick the job up: check JobSubmitPlugins=lua with "
                           "the RSA's job_submit.lua (docs/job_submit.md) and that rsad "
                           "runs (rsa status)") if finished else "")
        return [submit, *(Step(name) for name, _, _ in JOB_STEPS)]
    steps = [Step("submit check", PASSED, max(0.0, first_event - submitted), f"job {job_id}")]
    moves = _transitions((job or {}).get("events") or [])
    last_message = str((job or {}).get("message") or "")
    failure = next(((t, s, m) for t, s, m in moves if s in FAILURES), None)
    over = finished or failure is not None or any(s == RsaState.DECLINED for _, s, _ in moves)
    stopped = False
    for name, start, end in JOB_STEPS:
        if stopped:
            steps.append(Step(name))
            continue
        began = next((t for t, s, _ in moves if s == start), None)
        ended = next((t for t, s, _ in moves if s == end and (began is None or t >= began)),
                     None)
        if ended is not None:
            steps.append(Step(name, PASSED, max(0.0, ended - (began or ended))))
            continue
        failed_here = failure is not None and FAILED_IN.get(failure[1]) == name
        if failed_here or over:
            why = (failure[2] if failed_here and failure else "") or last_message or (
                f"the job's RSA cycle ended ({(job or {}).get('rsa_state')}) before this "
                "step")
            steps.append(Step(name, FAILED, detail=why, fix=fix_for(name, why, job_id)))
            stopped = True
            continue
        steps.append(Step(name, RUNNING if began is not None else NOT_RUN))
        stopped = True  # the steps after it have not begun
    return steps


def nodes_step(status_nodes: Sequence[Mapping[str, Any]], lacks: Mapping[str, Sequence[str]],
               errors: Mapping[str, str], seconds: float) -> Step:
    """The RSA nodes: rsad's view (``/v1/status`` nodes: a ``down`` node fails the step,
    a drained one is noted) and each up node's read-only check (``lacks``: node -> the
    "what: fix" lines of :mod:`rsa_scheduler.fs.nodecheck`; ``errors``: node -> why it
    could not be checked)."""
    down = [n for n in status_nodes if n.get("state") == "down"]
    if down:
        n = down[0]
        return Step("nodes", FAILED, seconds,
                    f"{n['name']} is down: {n.get('reason') or 'no reason given'}",
                    f"rsa nodes check {n['name']}, fix what it says, then rsa resume "
                    f"{n['name']}")
    for node in sorted(lacks):
        if lacks[node]:
            what, _, fix = lacks[node][0].partition(": ")
            return Step("nodes", FAILED, seconds, f"{node} lacks {what}",
                        f"on {node}: {fix or 'provide it'}, then run rsa selftest again "
                        f"(rsa nodes check {node} lists everything it lacks)")
    for node in sorted(errors):
        return Step("nodes", FAILED, seconds, f"{node} cannot be checked: {errors[node]}",
                    f"make {node} reachable from rsad's host as rsad reaches it (ssh.* of "
                    f"the configuration), or rsa drain {node}")
    up = [str(n["name"]) for n in status_nodes if n.get("state") == "up"]
    drained = [str(n["name"]) for n in status_nodes if n.get("state") == "drained"]
    if not up:
        return Step("nodes", FAILED, seconds, "no RSA node is up",
                    "rsa resume a node (rsa nodes shows why each is out)")
    detail = f"{len(up)} up, nothing lacking" + (
        f"; drained: {','.join(drained)}" if drained else "")
    return Step("nodes", PASSED, seconds, detail)


def report(steps: Sequence[Step]) -> list[str]:
    """One line per step (``  name  status  time  detail``), a ``fix:`` line under a
    failed one."""
    out = []
    for s in steps:
        took = f"{s.seconds:.1f}s" if s.seconds is not None else "-"
        out.append(f"  {s.name:<13} {s.status:<7} {took:>7}  {s.detail}".rstrip())
        if s.failed and s.fix:
            out.append(f"  {'':<13} fix: {s.fix}")
    return out
