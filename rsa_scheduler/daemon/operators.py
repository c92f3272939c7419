"""Who is an operator of rsad's API: root and Slurm's own SlurmUser, by uid.

Operators see every job and run operator commands; the node hooks (as root) and
burst_buffer.lua and the PrologSlurmctld/EpilogSlurmctld hooks (as SlurmUser) are among
them. SlurmUser is read from ``scontrol show config`` (``SlurmUser = NAME(UID)``), so a
site whose SlurmUser is not named ``slurm`` (``slurmadm``, ``slurmsvc``) has its hooks
answered, and a plain user who happens to be named ``slurm`` on a site whose SlurmUser
is another is not an operator. Until slurmctld has answered once (rsad may start before
it), the account named ``slurm`` stands in for SlurmUser, as rsad always did; rsad asks
again in the background until Slurm answers (:func:`learn_in_background`).
"""

from __future__ import annotations

import logging
import pwd
import re
import threading
from collections.abc import Callable, Mapping

log = logging.getLogger(__name__)

#: the name that stands for SlurmUser until Slurm's own configuration says who it is
DEFAULT_SLURM_USER = "slurm"
_SLURM_USER = re.compile(r"^\s*([^\s(]+)\s*(?:\((\d+)\))?\s*$")


class Operators:
    """The operator uids: 0 and SlurmUser's. Thread-safe to read while it is learned."""

    def __init__(self, lookup: Callable[[str], int] | None = None) -> None:
        self._slurm_uid: int | None = None  # None: not learned from Slurm yet
        self._lookup = lookup or (lambda name: pwd.getpwnam(name).pw_uid)
        self._stand_in: int | None = None  # the account named slurm's uid; -2: none
        self._lock = threading.Lock()

    @property
    def learned(self) -> bool:
        return self._slurm_uid is not None

    def is_operator(self, uid: int) -> bool:
        """By uid alone: the API's accept thread asks this of every unix-socket peer, and
        a name lookup there (NSS: a slow directory) would stall every connection. The
        stand-in's uid is looked up once in rsad's life."""
        if uid == 0:
            return True
        known = self._slurm_uid
        if known is None:
            known = self._stand_in_uid()
        return uid == known

    def _stand_in_uid(self) -> int:
        with self._lock:
            if self._stand_in is None:
                try:
                    self._stand_in = self._lookup(DEFAULT_SLURM_USER)
                except KeyError:
                    self._stand_in = -2  # no caller's uid (peers are 0..2^32-2)
            return self._stand_in

    def learn(self, config: Mapping[str, str]) -> str:
        """Take SlurmUser from a parsed ``scontrol show config``; returns what was learned
        (a line for rsad's log). A value that names no user leaves the default and says
        so (ValueError)."""
        uid = slurm_user_uid(config.get("SlurmUser", ""))
        self._slurm_uid = uid
        return f"operators of rsad's API: root and SlurmUser (uid {uid})"


def slurm_user_uid(value: str) -> int:
    """The uid of ``scontrol show config``'s SlurmUser value: ``slurm(64030)`` gives its
    uid as Slurm resolved it; a name alone is looked up. ValueError when it names none."""
    m = _SLURM_USER.match(value)
    if not m:
        raise ValueError(f"SlurmUser {value!r} in Slurm's configuration is not NAME(UID)")
    name, uid = m.groups()
    if uid is not None:
        return int(uid)
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        raise ValueError(f"SlurmUser {name!r} in Slurm's configuration is no user on "
                         "rsad's host") from None


#: rsad's (one per process: the API and its server's lanes read it)
OPERATORS = Operators()


def learn_in_background(show_config: Callable[[], Mapping[str, str]],
                        stop: threading.Event, every: float = 10.0,
                        operators: Operators = OPERATORS) -> threading.Thread:
    """Ask Slurm for SlurmUser until it answers once (slurmctld may be down at rsad's
    start), in a daemon thread; each failure is logged once."""

    def run() -> None:
        said = False
        while not stop.is_set():
            try:
                log.info("%s", operators.learn(show_config()))
                return
            except ValueError as e:
                log.warning("%s: the account named %r stands in for SlurmUser",
                            e, DEFAULT_SLURM_USER)
                return
            except Exception as e:  # slurmctld down, scontrol missing: ask again
                if not said:
                    log.warning("SlurmUser not known yet (%s): the account named %r "
                                "stands in for it until Slurm answers", e,
                                DEFAULT_SLURM_USER)
                    said = True
            stop.wait(every)

    thread = threading.Thread(target=run, name="rsa-operators", daemon=True)
    thread.start()
    return thread
