"""The event record: every change to a job is an append-only event (Flux RFC 18 style).

Owns :class:`Event` and the JSON value type of its context. Stdlib only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

JSON = Any  # a JSON-serialisable value: None, bool, int, float, str, list, dict


@dataclass(frozen=True, slots=True)
class Event:
    """One thing that happened to one job.

    ``seq`` is assigned by the store when the event is committed (0 = not yet stored).
    ``time`` is seconds since the epoch as given to the core by its caller (never read
    from a clock inside the core).
    """

    time: float
    job_id: str
    name: str
    context: Mapping[str, JSON] = field(default_factory=dict)
    seq: int = 0
