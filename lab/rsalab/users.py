"""Lab users: rsauser submits jobs, rsaother is the second user for isolation tests."""

from __future__ import annotations

import pwd

from .common import Settings, log, run


def ensure(s: Settings) -> None:
    for user in (s.user, s.other_user):
        try:
            pwd.getpwnam(user)
        except KeyError:
            run(["useradd", "--create-home", "--shell", "/bin/bash", user])
            log(f"created user {user}")
