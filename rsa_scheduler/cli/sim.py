"""``rsa sim``: run a scenario through the real core and show what happened.

Owns the command line, exit codes and the human-readable rendering of a run; loading
and running a scenario is :mod:`rsa_scheduler.sim`.

Exit codes: 0 every expectation met; 1 an expectation failed (one ``FAILED`` line each on
stderr); 65 (EX_DATAERR) the scenario file is invalid; 70 (EX_SOFTWARE) an invariant broke
or the core raised — a bug, described on one line.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from rsa_scheduler.core.units import format_duration
from rsa_scheduler.errors import ScenarioError
from rsa_scheduler.sim import SimResult, SimulationBroken, load_scenario, simulate

EX_FAILED = 1
EX_DATAERR = 65
EX_SOFTWARE = 70


@click.command()
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the run as one JSON document.")
def sim(scenario: str, as_json: bool) -> None:
    """Simulate SCENARIO (a YAML file) with the real scheduler core.

    Prints each job's job-state and rsa-state timeline and the final RSA node pool, then
    checks the scenario's expect: block. Simulated time only: runs in milliseconds.
    """
    # sys.exit, not ctx.exit: rsa's main() runs click with standalone_mode=False.
    try:
        result = simulate(load_scenario(scenario))
    except ScenarioError as e:
        click.echo(f"rsa sim: {e}", err=True)
        sys.exit(EX_DATAERR)
    except SimulationBroken as e:
        click.echo(f"rsa sim: invariant violated: {e}", err=True)
        sys.exit(EX_SOFTWARE)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2, ensure_ascii=False))
    else:
        click.echo(render(result))
    for failure in result.failures:
        click.echo(f"rsa sim: {scenario}: FAILED: {failure}", err=True)
    if not result.passed:
        sys.exit(EX_FAILED)


def render(result: SimResult) -> str:
    """The run as text: a timeline table per job, notes, the final pool, the verdict."""
    sc = result.scenario
    verdict = "PASS" if result.passed else "FAIL"
    out = [f"scenario {sc.name!r} ({sc.source}): {verdict} — "
           f"{format_duration(result.end)} simulated, {result.steps} steps"]
    if sc.known_bug:
        out.append(f"known core bug (expected to fail until fixed): {sc.known_bug}")
    for jid, job in result.jobs.items():
        spec = sc.jobs[jid]
        out.append("")
        head = (f"job {jid} (user {spec.user}, {spec.compute_nodes} compute node"
                f"{'' if spec.compute_nodes == 1 else 's'}, priority {spec.priority})")
        if not job.tracked:
            out.append(f"{head}: no #RSA_ directives, not tracked")
            continue
        out.append(head)
        rows: list[tuple[str, ...]] = [("TIME", "JOB-STATE", "RSA-STATE", "TRIGGER",
                                        "ACTIONS")]
        for r in job.rows:
            trigger = r.trigger + (f" [{r.detail}]" if r.detail else "")
            rows.append((format_duration(r.t), r.job_state, r.rsa_state, trigger,
                         ", ".join(_action_text(a) for a in r.actions)))
        out += _table(rows, indent="  ")
        fin = job.final
        out.append(f"  final: {fin['job_state']} / {fin['rsa_state']}, cycle {fin['cycle']}"
                   + (f", holds {fin['nodes']}" if fin["nodes"] else "")
                   + (", declined" if fin["declined"] else ""))
    if result.notes:
        out += ["", "notes:"]
        for note in result.notes:
            rest = ", ".join(f"{k} {_short(v)}" for k, v in note.items()
                             if k not in ("t", "event"))
            out.append(f"  {format_duration(note['t'])}  {note['event']}: {rest}")
    pool = result.pool
    held = ", ".join(f"{j}: {n}" for j, n in pool["held"].items()) or "-"
    out += ["", f"pool: free {pool['free'] or '-'}; held {held}; "
                f"drained {pool['drained'] or '-'}; down {pool['down'] or '-'}"]
    if result.failures:
        out.append(f"expectations: {len(result.failures)} of {result.checked} failed")
        out += [f"  FAILED: {f}" for f in result.failures]
    else:
        out.append(f"expectations: {result.checked} checked, all met")
    return "\n".join(out)


def _action_text(action: dict[str, Any]) -> str:
    kind = str(action["kind"])
    for key in ("nodes", "mode", "target"):
        if action.get(key):
            return f"{kind} {action[key]}"
    return kind


def _short(value: Any) -> str:
    if isinstance(value, list):
        return "[" + " ".join(str(v) for v in value) + "]"
    return str(value)


def _table(rows: list[tuple[str, ...]], indent: str) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return [(indent + "  ".join(c.ljust(w) for c, w in zip(r[:-1], widths, strict=False))
            + "  " + r[-1]).rstrip() for r in rows]
