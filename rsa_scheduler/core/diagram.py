"""State diagrams and the transition reference, generated from the transition table.

Owns the rendering of ``core.transitions.TABLE`` into Mermaid state diagrams (one per
job-state, like Figs. 2–5 of seed 004) and a Markdown table of every row, so
``docs/architecture.md`` cannot drift from the code. Pure string building.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from rsa_scheduler.core.actions import TRACKED, ActionKind
from rsa_scheduler.core.rules import Rule
from rsa_scheduler.core.states import (
    JOB_STATE_TRIGGERS,
    POST_RUN,
    PRE_RUN,
    RUN,
    TEARDOWN,
    RsaState,
    Trigger,
)
from rsa_scheduler.core.transitions import TABLE

S, T = RsaState, Trigger
#: triggers that are no job-state observation: outcomes, timers, commands, the pool
OUTCOME_OR_TIMER = frozenset(Trigger) - set(JOB_STATE_TRIGGERS)


def _edges(rule: Rule) -> Iterable[tuple[RsaState, str]]:
    """(destination, label) for the default and each branch that moves or acts."""
    if rule.dst is not rule.src or rule.actions or rule.effects:
        yield rule.dst, rule.trigger.value
    for br in rule.branches:
        if br.dst is not rule.src or br.actions:
            yield br.dst, f"{rule.trigger.value} [{br.cond.value}]"


def _mermaid(title: str, keep: Callable[[Rule], bool]) -> str:
    lines = ["```mermaid", "stateDiagram-v2", f"    %% {title}"]
    seen: set[tuple[str, str, str]] = set()
    used: set[RsaState] = set()
    for rule in TABLE.values():
        if not keep(rule):
            continue
        for dst, label in _edges(rule):
            key = (rule.src.value, dst.value, label)
            if key in seen:
                continue
            seen.add(key)
            used.update((rule.src, dst))
            lines.append(f"    {_id(rule.src)} --> {_id(dst)}: {label}")
    for state in RsaState:
        if state in used:
            lines.append(f"    {_id(state)}: {state.value}")
    lines.append("```")
    return "\n".join(lines)


def _id(state: RsaState) -> str:
    return state.name.lower()


FIGURES: dict[str, tuple[str, Callable[[Rule], bool]]] = {
    "on-deck": ("On-deck jobs (seed 004 Fig. 2): allocate, build, stage in, lock in",
                lambda r: (r.trigger in (T.ON_DECK, T.TICK) and r.src in PRE_RUN | {S.NONE})
                or (r.src in PRE_RUN | {S.NONE, S.RELEASED}
                    and r.trigger in OUTCOME_OR_TIMER
                    and r.trigger not in (T.WAIT_EXPIRED, T.CANCEL_STAGING))),
    "demoted": ("Demoted jobs (seed 004 Fig. 3): stop staging, destroy, release",
                lambda r: r.trigger in (T.DEMOTED, T.QUEUED)
                or (r.src in TEARDOWN)),
    "running": ("Running jobs (seed 004 Fig. 4): mount input, reset, mount output; "
                "early start (§3.1, fn. 2)",
                lambda r: r.trigger in (T.RUNNING, T.WAIT_EXPIRED)
                or (r.src in RUN and r.trigger not in
                    (T.QUEUED, T.ON_DECK, T.DEMOTED, T.FINISHED))),
    "finished": ("Finished jobs (seed 004 Fig. 5): stage out, verify, tear down",
                 lambda r: r.trigger is T.FINISHED
                 or (r.src in POST_RUN and r.trigger is not T.DEMOTED)),
}


def diagrams() -> str:
    """All four figures as Markdown sections with Mermaid blocks."""
    out = []
    for name, (title, keep) in FIGURES.items():
        out.append(f"### {title}\n\n{_mermaid(name, keep)}\n")
    return "\n".join(out)


def _acts(kinds: tuple[ActionKind, ...]) -> str:
    return ", ".join(f"**{k.value}**" if k in TRACKED else k.value for k in kinds) or "—"


def reference() -> str:
    """Every row of the table (and each branch) as a Markdown table."""
    rows = ["| from | trigger | to | actions | why | seed 004 |",
            "|---|---|---|---|---|---|"]
    for rule in TABLE.values():
        if rule.is_stay:
            continue
        for br in rule.branches:
            rows.append(f"| {rule.src.value} | {rule.trigger.value} [{br.cond.value}] | "
                        f"{br.dst.value} | {_acts(br.actions)} | {br.note or rule.note} | "
                        f"{br.ref or rule.ref} |")
        rows.append(f"| {rule.src.value} | {rule.trigger.value} | {rule.dst.value} | "
                    f"{_acts(rule.actions)} | {rule.note} | {rule.ref} |")
    stays = sorted({(r.src.value, r.trigger.value) for r in TABLE.values() if r.is_stay})
    rows.append("")
    rows.append(f"{len(stays)} further (state, trigger) pairs are explicit *stay* rows "
                "(nothing happens); every (rsa-state, job-state) pair is in the table.")
    return "\n".join(rows)
