"""Whose the RAMDISK's root is: rsad names the job's user in every filesystem request."""

from __future__ import annotations

from rsa_scheduler.daemon.data import _owner


def test_the_owner_is_the_users_uid_and_gid() -> None:
    assert _owner("root") == (0, 0)


def test_an_unknown_or_missing_user_leaves_the_root_to_root_and_never_blocks_a_destroy(
        ) -> None:
    assert _owner("") is None
    assert _owner("no-such-user-rsa-test") is None
