"""Path safety before root mounts over a user path: symlink tricks, roots, ownership."""

from __future__ import annotations

import os
import pwd
from pathlib import Path, PurePosixPath

import pytest

from rsa_scheduler.node.paths import (
    UnsafePath,
    Who,
    check_target,
    lexical_check,
    mount_refusal,
    open_target,
)

ME = Who(uid=os.getuid(), gids=frozenset(os.getgroups()) | {os.getgid()})
OTHER = Who(uid=os.getuid() + 4242, gids=frozenset({os.getgid() + 4242}))
OWNER = pwd.getpwuid(os.getuid()).pw_name  # who owns the test's directories
NO_SUCH_UID = 3_999_999


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "scratch"
    (r / "alice" / "in").mkdir(parents=True)
    return r


def test_own_directory_inside_a_root_is_accepted(root: Path) -> None:
    target = root / "alice" / "in"
    assert check_target(str(target), ME, [str(root)]) == str(target)


@pytest.mark.parametrize("path", ["relative/in", "/scratch/a/../../etc", "/scratch/./a", ""])
def test_relative_and_dotted_paths_are_refused(path: str) -> None:
    with pytest.raises(UnsafePath):
        lexical_check(path, ["/scratch"])


@pytest.mark.parametrize("path", ["/etc", "/etc/ssh", "/usr/lib", "/", "/proc/1", "/var/x"])
def test_system_paths_are_refused_even_if_configured(path: str) -> None:
    with pytest.raises(UnsafePath, match=r"system path|outside"):
        lexical_check(path, ["/", "/etc", "/usr", "/proc", "/var"])


def test_a_root_itself_is_never_a_target() -> None:
    with pytest.raises(UnsafePath, match="outside the allowed roots"):
        lexical_check("/scratch", ["/scratch"])


def test_prefix_that_is_not_a_parent_is_outside() -> None:
    with pytest.raises(UnsafePath, match="outside"):
        lexical_check("/scratchy/alice", ["/scratch"])


def test_outside_the_roots_is_refused(root: Path, tmp_path: Path) -> None:
    other = tmp_path / "elsewhere"
    other.mkdir()
    with pytest.raises(UnsafePath, match="outside the allowed roots"):
        check_target(str(other), ME, [str(root)])


def test_symlink_as_last_component_into_etc_is_refused(root: Path) -> None:
    link = root / "alice" / "evil"
    link.symlink_to("/etc")
    with pytest.raises(UnsafePath, match="symlink component"):
        check_target(str(link), ME, [str(root)])


def test_symlink_in_the_middle_is_refused(root: Path, tmp_path: Path) -> None:
    real = tmp_path / "scratch" / "real"
    (real / "in").mkdir(parents=True)
    (root / "alice" / "hop").symlink_to(real)
    with pytest.raises(UnsafePath, match="symlink component"):
        check_target(str(root / "alice" / "hop" / "in"), ME, [str(root)])


def test_dangling_symlink_is_refused(root: Path) -> None:
    (root / "alice" / "gone").symlink_to(root / "nowhere")
    with pytest.raises(UnsafePath, match="symlink"):
        check_target(str(root / "alice" / "gone"), ME, [str(root)])


def test_missing_directory_is_refused(root: Path) -> None:
    with pytest.raises(UnsafePath, match="does not exist"):
        check_target(str(root / "alice" / "nope"), ME, [str(root)])


def test_a_file_is_not_a_mount_target(root: Path) -> None:
    f = root / "alice" / "file"
    f.write_text("x")
    with pytest.raises(UnsafePath, match="not a directory"):
        check_target(str(f), ME, [str(root)])


# -- whose directory (issue 36): the RAMDISK hides it, so only the user's own ------------

def test_another_users_directory_is_refused_with_one_actionable_line(root: Path) -> None:
    target = root / "alice" / "in"
    target.chmod(0o755)
    with pytest.raises(UnsafePath) as err:
        open_target(str(target), OTHER, [str(root)], directive="#RSA_DATA_OUT")
    message = str(err.value)
    assert message.startswith(f"#RSA_DATA_OUT={target} is owned by {OWNER}, not you: ")
    assert "use a directory of your own" in message and "staging.shared_dirs" in message
    assert "\n" not in message


@pytest.mark.parametrize("mode", [0o700, 0o755, 0o555, 0o777, 0o1777])
def test_the_users_own_directory_is_accepted_whatever_its_mode(root: Path, mode: int) -> None:
    target = root / "alice" / "in"
    target.chmod(mode)
    assert check_target(str(target), ME, [str(root)]) == str(target)


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o773, 0o1773])
def test_a_world_writable_directory_of_another_user_is_refused(root: Path, mode: int) -> None:
    """Sticky or not, and under shared_dirs too: the other-bits never count."""
    target = root / "alice" / "in"
    target.chmod(mode)
    for shared in ((), (str(root),)):
        with pytest.raises(UnsafePath, match=f"is owned by {OWNER}, not you"):
            check_target(str(target), OTHER, [str(root)], shared)


def test_a_group_writable_directory_the_user_does_not_own_is_refused_by_default(
        root: Path) -> None:
    target = root / "alice" / "in"
    target.chmod(0o2775)
    member = Who(uid=OTHER.uid, gids=frozenset({target.stat().st_gid}))
    with pytest.raises(UnsafePath, match="mounted only over your own directories"):
        check_target(str(target), member, [str(root)])


def test_a_root_owned_directory_is_refused() -> None:
    st = _stat(0o40755, uid=0, gid=0)
    why = mount_refusal(st, Who(uid=1001, gids=frozenset({0, 1001})),
                        PurePosixPath("/scratch/alice/in"), directive="#RSA_DATA_IN")
    assert why is not None
    assert why.startswith("#RSA_DATA_IN=/scratch/alice/in is owned by root, not you: ")


def test_an_owner_without_a_name_is_shown_by_uid() -> None:
    why = mount_refusal(_stat(0o40755, uid=NO_SUCH_UID, gid=0), Who(1001, frozenset()),
                        PurePosixPath("/scratch/x"))
    assert why is not None and f"owned by uid {NO_SUCH_UID}, not you" in why


# -- staging.shared_dirs: the operator allows group project directories -----------------

PROJ = PurePosixPath("/proj/team")
MEMBER = Who(uid=1001, gids=frozenset({1001, 3000}))


@pytest.mark.parametrize(("path", "mode", "gid", "allowed"), [
    ("/proj/team/run1", 0o42775, 3000, True),    # the group's, group-writable, inside
    ("/proj/team", 0o42770, 3000, True),         # the listed directory itself
    ("/proj/team/run1", 0o40755, 3000, False),   # the group's, but not group-writable
    ("/proj/team/run1", 0o42775, 4000, False),   # group-writable, not the user's group
    ("/proj/teamx/run1", 0o42775, 3000, False),  # a sibling with the same prefix
    ("/proj/other/run1", 0o42775, 3000, False),  # outside every shared directory
    ("/proj/team/run1", 0o40777, 4000, False),   # world-writable: never through others
])
def test_shared_dirs_allow_only_group_writable_directories_of_the_users_groups(
        path: str, mode: int, gid: int, allowed: bool) -> None:
    why = mount_refusal(_stat(mode, uid=2002, gid=gid), MEMBER, PurePosixPath(path),
                        [str(PROJ)], directive="#RSA_DATA_OUT")
    assert (why is None) is allowed, why
    if not allowed:
        assert why is not None and why.startswith(f"#RSA_DATA_OUT={path} is owned by ")


def test_shared_dirs_on_a_real_directory(root: Path) -> None:
    target = root / "alice" / "in"
    target.chmod(0o2775)
    member = Who(uid=OTHER.uid, gids=frozenset({target.stat().st_gid}))
    assert check_target(str(target), member, [str(root)], [str(root / "alice")]) \
        == str(target)
    with pytest.raises(UnsafePath, match="mounted only over your own directories"):
        check_target(str(target), member, [str(root)], [str(root / "bob")])


def _stat(mode: int, *, uid: int, gid: int) -> os.stat_result:
    return os.stat_result((mode, 1, 1, 2, uid, gid, 4096, 0, 0, 0))
