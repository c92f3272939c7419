"""Path safety before root mounts over a user path: symlink tricks, roots, ownership."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rsa_scheduler.node.paths import UnsafePath, Who, check_target, lexical_check

ME = Who(uid=os.getuid(), gids=frozenset(os.getgroups()) | {os.getgid()})
OTHER = Who(uid=os.getuid() + 4242, gids=frozenset({os.getgid() + 4242}))


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


def test_another_users_directory_is_refused(root: Path) -> None:
    target = root / "alice" / "in"
    target.chmod(0o755)
    with pytest.raises(UnsafePath, match="neither owned by nor writable"):
        check_target(str(target), OTHER, [str(root)])


def test_world_writable_sticky_dir_is_not_enough(root: Path) -> None:
    target = root / "alice" / "in"
    target.chmod(0o1777)
    with pytest.raises(UnsafePath, match="neither owned"):
        check_target(str(target), OTHER, [str(root)])
    target.chmod(0o777)
    assert check_target(str(target), OTHER, [str(root)]) == str(target)


def test_group_writable_counts_for_group_members(root: Path) -> None:
    target = root / "alice" / "in"
    target.chmod(0o775)
    member = Who(uid=OTHER.uid, gids=frozenset({target.stat().st_gid}))
    assert check_target(str(target), member, [str(root)]) == str(target)
