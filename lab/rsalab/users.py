"""Lab users: rsauser submits jobs, rsaother is the second user for isolation tests.

Both, and slurm (PrologSlurmctld), are in group ``rsa``: rsad's API socket is 0660
root:rsa (daemon.api.socket_group, docs/security-api.md), as the operator guide says."""

from __future__ import annotations

import grp
import pwd

from .common import Settings, log, run


def ensure(s: Settings) -> None:
    for user in (s.user, s.other_user):
        try:
            pwd.getpwnam(user)
        except KeyError:
            run(["useradd", "--create-home", "--shell", "/bin/bash", user])
            log(f"created user {user}")
    try:
        members = set(grp.getgrnam(API_GROUP).gr_mem)
    except KeyError:
        run(["groupadd", "--system", API_GROUP])
        log(f"created group {API_GROUP}")
        members = set()
    for user in (s.user, s.other_user, "slurm"):
        if user not in members:
            run(["usermod", "--append", "--groups", API_GROUP, user])


API_GROUP = "rsa"  # daemon.api.socket_group's default
