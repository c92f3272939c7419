"""The user guide's table of every message a user can see (issue 32), built from the code
that writes them, so it cannot drift: docgen renders it into docs/user-guide.md and a unit
test fails when it is stale.

Owns :func:`table`: the job-comment lines of the transition table (each rule that tells
the user, with its note), the comment lines rsad's holds write (start hold, rerun hold,
dependency hold, directives ignored), ``rsa wait``'s lines and ``--cluster-status``
words, and ``rsa job``'s ``output:`` line, each rendered by calling its own function with
example values (job 1234, RSA nodes rsa[1-2], DATA_OUT /pfs/alice/out). The submit
check's errors have their own table (generated from core/grammar.py: "Error messages").
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from rsa_scheduler.cli.wait import RUNNING, SUCCESS, cluster_status
from rsa_scheduler.cli.where import verdict, where_output
from rsa_scheduler.core.actions import ActionKind
from rsa_scheduler.core.dependency import ANOTHER, Waiting, released_message
from rsa_scheduler.core.dependency import held_message as dep_held_message
from rsa_scheduler.core.directive_spec import DirectiveSpec
from rsa_scheduler.core.effects import NO_FREE_NODES, over_limit_detail
from rsa_scheduler.core.record import JobRecord
from rsa_scheduler.core.rules import OVER_LIMIT_NOTE
from rsa_scheduler.core.states import RsaState
from rsa_scheduler.core.transitions import TABLE
from rsa_scheduler.daemon.holds import (
    held_message,
    hold_verdict,
    rerun_held_message,
    rerun_released_message,
)
from rsa_scheduler.daemon.specs import TOO_SLOW

JOB, OUT, NODES = "1234", "/pfs/alice/out", "rsa[1-2]"
#: where a rescue (quarantine.rescue_after) puts a run's output: <job>.<cycle>-<submitted>
RESCUED = f"/pfs/rescue/alice/{JOB}.1-20261129T043512"
DEADLINE = 1_767_225_600.0  # 2026-01-01 00:00:00 UTC

#: what to do after a comment line, by the rsa-state it leads to (default: nothing)
TO_DO = {
    "quarantined": f"fix what the line says (PFS quota, permissions), then ask your "
                   f"operator to run `rsa retry {JOB}` (an operator's command); the output "
                   "stays on the RAMDISK until then",
    "writeback-failed": "your changes to the writable input are kept on the RAMDISK: ask "
                        "your operator (retry or discard)",
    "output-verified": f"read the output (`rsa job {JOB}` says where)",
    "staging-out": f"do not read DATA_OUT yet: `rsa wait {JOB}` returns once it is complete "
                   "(a dependent job is held until then)",
}
#: what to do, by the trigger that told the user (before TO_DO's by rsa-state)
TO_DO_BY_TRIGGER = {
    "over-limit": "nothing: every RSA node is in use (the detail says `not enough RSA nodes "
                  "are free now`), or your other RSA jobs (or your account's) hold RSA nodes "
                  "up to a site limit, or the RSA is drained for maintenance; held, this one "
                  "waits for them in priority order (at most staging.wait_timeout, then it "
                  "reads the PFS); not held (early start fallback, or queued on a busy "
                  "cluster), it reads the PFS if it starts first",
    "rescue-due": f"read the output where `rsa job {JOB}` says it was rescued to (the site's "
                  "rescue area, not DATA_OUT); `rsa wait` says `rescued`",
}
NOTHING = ("nothing to do; where the line says PFS, the job reads or writes the PFS itself "
           "(slower)")


def _md(text: str) -> str:
    """A table cell: the text as code, pipes escaped."""
    return "`" + text.replace("|", "\\|") + "`"


def _told() -> Iterator[tuple[str, str, set[str]]]:
    """(note, rsa-state it leads to, triggers) of every rule that tells the user."""
    seen: dict[tuple[str, str], set[str]] = {}
    for rule in TABLE.values():
        if rule.is_stay:
            continue
        for br in rule.branches:
            if ActionKind.TELL_USER in br.actions:
                seen.setdefault((br.note or rule.note, br.dst.value), set()).add(
                    rule.trigger.value)
        if ActionKind.TELL_USER in rule.actions:
            seen.setdefault((rule.note, rule.dst.value), set()).add(rule.trigger.value)
    for (note, dst), triggers in sorted(seen.items()):
        yield note, dst, triggers


def _record(state: str, job_state: str, *, verified: bool = False,
            stage_out: str | None = None) -> dict[str, Any]:
    events: list[dict[str, Any]] = [{"name": "job.state", "to": "finished"}] \
        if job_state == "finished" else []
    if verified:
        events.append({"name": "rsa.transition", "to": "output-verified"})
    return {"job_id": JOB, "rsa_state": state, "job_state": job_state, "nodes": NODES,
            "cycle": 1, "message": "", "events": events,
            "spec": {"data_out": OUT, "stage_out": stage_out}}


def _to_do(triggers: set[str], dst: str) -> str:
    for trigger in sorted(triggers):
        if trigger in TO_DO_BY_TRIGGER:
            return TO_DO_BY_TRIGGER[trigger]
    return TO_DO.get(dst, NOTHING)


def table() -> str:
    rows = ["| where you see it | message (example) | what to do |", "|---|---|---|"]
    for note, dst, triggers in _told():
        when = f"(`{'`, `'.join(sorted(triggers))}` → `{dst}`)"
        rows.append(f"| job comment, `rsa job` {when} | {_md('RSA: ' + note)} (`: ...` adds "
                    f"the detail) | {_to_do(triggers, dst)} |")
    staged = JobRecord(JOB, "alice", DirectiveSpec(data_out=OUT),
                       rsa_state=RsaState.LOCKED_IN)
    waiting = JobRecord(JOB, "alice", DirectiveSpec(data_out=OUT))
    declined = JobRecord(JOB, "alice", DirectiveSpec(data_out=OUT),
                         rsa_state=RsaState.DECLINED,
                         message="the RSA cannot serve this job; it uses the PFS")
    releases = [hold_verdict(JOB, None, True), hold_verdict(JOB, staged, True),
                hold_verdict(JOB, declined, True), hold_verdict(JOB, waiting, False)]
    holds = [(r.message, "nothing") for r in releases if r is not None]
    holds += [
        (f"RSA: {OVER_LIMIT_NOTE}: {over_limit_detail(NO_FREE_NODES, True)}", "nothing: it "
         "gets RSA nodes in priority order as other jobs give theirs back, then is staged "
         "and released; at the deadline it starts and reads the PFS"),
        (held_message(DEADLINE), "nothing: rsad releases it once the input is staged; at "
         "the deadline it starts and reads the PFS"),
        (rerun_held_message(JOB), "nothing: it starts once the earlier run's output is "
         "verified"),
        (rerun_held_message(JOB, RESCUED, True), "nothing yet: once "
         "the rescue is over, as the next line says"),
        (rerun_held_message(JOB, RESCUED), "copy what the run needs "
         "from the rescue area into DATA_OUT (or nothing, if it starts afresh), then release "
         f"it: `scontrol update JobId={JOB} StartTime=now`"),
        (rerun_released_message(JOB, False, None), "nothing"),
        (rerun_released_message(JOB, True, None), f"the earlier run's output: `rsa job {JOB}`"),
        (dep_held_message([Waiting("1233", "staging")]), "nothing: it starts once job "
         "1233's output is verified"),
        (dep_held_message([Waiting("1233", "failed")]), "nothing: the stage-out is retried"),
        (dep_held_message([Waiting("1233", "quarantined")]), "the owner of 1233: fix the "
         "cause, then ask an operator to run `rsa retry 1233`"),
        (dep_held_message([Waiting("1233", ANOTHER)]), "nothing: it starts once job "
         "1233's output is verified (its owner can follow it)"),
        (released_message(["1233"]), "nothing"),
        (released_message([], unverified=["1233"]), "look where job 1233's output is "
         "(`rsa job 1233`) before this job reads it"),
        (released_message([], others=["1233"]), "nothing"),
    ]
    for text, todo in holds:
        rows.append(f"| job comment (a held job) | {_md(text)} | {todo} |")
    rows.append("| job comment | `RSA: directives ignored: ...` | fix the directive the "
                "line names (`rsa directives check`); the job runs from the PFS |")
    rows.append(f"| job comment | {_md(TOO_SLOW)} | as the line says; the job runs from "
                "the PFS |")
    done = _record("released", "finished", verified=True)
    cases = [
        (_record("released", "finished", verified=True), "read the output"),
        (_record("quarantined", "finished"), TO_DO["quarantined"]),
        (_record("released", "finished"), "ask your operator"),
        (None, "its files are where it wrote them"),
    ]
    for rec, todo in cases:
        got = verdict(rec)
        assert got is not None
        rows.append(f"| `rsa wait {JOB}` (exit {got.status}) | {_md(f'{JOB}: {got.word}: ')}"
                    f"... | {todo} |")
    rows.append(f"| `rsa wait {JOB}` (exit 3) | `{JOB}: timed out after ...` | wait longer; "
                f"`rsa job {JOB}` says what it is doing |")
    for rec, end in ((_record("staging-out", "finished"), "COMPLETED"), (done, "COMPLETED"),
                     (done, "TIMEOUT")):
        word, _ = cluster_status(rec, str(end).strip)
        todo = {RUNNING: "ask again later", SUCCESS: "run the next step"}.get(
            word, "stop: a line on stderr says why")
        rows.append(f"| `rsa wait --cluster-status {JOB}` | `{word}` | {todo} |")
    wheres = [
        _record("locked-in", "on-deck"), _record("mounted-input", "running"),
        _record("mounted-output", "running"), _record("staging-out", "finished"),
        done, _record("released", "finished", verified=True, stage_out="tar"),
        _record("quarantined", "finished"), _record("released", "finished"),
        _record("declined", "finished"),
    ]
    for rec in wheres:
        line = where_output(rec)
        assert line is not None
        rows.append(f"| `rsa job {JOB}` | {_md('output: ' + line)} | as the line says |")
    return "\n".join(rows)
