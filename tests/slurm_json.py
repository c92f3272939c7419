"""One job's entry of ``squeue --json`` as the lab's tests read it, the same whichever
Slurm printed it: 22.05 gives ``job_state`` as a string and ``priority`` as a number;
24.11 and 26.05 (data_parser v0.0.42, v0.0.45) a list of states and an object
``{set, infinite, number}`` (tests/data/slurm/, 24.11/, 26.05/). Pure: text in, a dict out.
"""

from __future__ import annotations

import json
from typing import Any


def squeue_json_job(text: str, job: str) -> dict[str, Any]:
    """The entry of job ``job`` in ``squeue --json`` output ``text`` ({} when absent; 22.05
    ignores ``-j``, so the whole queue is read), its ``job_state`` one string (the first
    of 24.11's list: the base state, flags after it) and ``priority`` an int (0 when
    unset)."""
    entry = next((j for j in json.loads(text)["jobs"] if str(j["job_id"]) == job), None)
    if entry is None:
        return {}
    out = dict(entry)
    state = entry.get("job_state")
    if isinstance(state, list):
        out["job_state"] = str(state[0]) if state else ""
    priority = entry.get("priority")
    if isinstance(priority, dict):
        out["priority"] = int(priority.get("number", 0)) if priority.get("set") else 0
    return out
