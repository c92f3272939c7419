"""A directory swapped for a symlink *after* the placement scripts checked it, just before
they write, rename or delete in it, never sends the write elsewhere (found by review).

The scripts checked a directory (``[ -L ]``, or its ``pwd -P``) and then named the file
through the whole path again (``rm -f -- ./sub/x``, ``mv -t DST/./sub``, ``mv -T TMP
DST/./sub/big``): another user who may rename ``sub`` (a teammate in a group-writable
DATA_IN or DATA_OUT) and won that race made the job's user delete or replace a file of
the same name wherever the symlink led, among the user's own files elsewhere. The race is
won here every time: a ``stat``/``mv`` first on PATH swaps ``sub`` the moment the script
calls it, then runs the real one. Real bash and coreutils on local directories.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from rsa_scheduler.staging import scripts

T = 1_600_000_000


def _shim(tmp: Path, tool: str, trigger: str, sub: Path, target: Path) -> dict[str, str]:
    """An environment whose ``tool`` swaps ``sub`` for a symlink to ``target`` the first
    time it is called with ``trigger`` among its arguments, then runs the real one."""
    real = shutil.which(tool)
    assert real is not None
    bin_dir = tmp / "shim"
    bin_dir.mkdir()
    done = tmp / "swapped"
    (bin_dir / tool).write_text(
        "#!/bin/bash\n"
        f'for a; do if [ "$a" = {trigger} ] && [ ! -e {done} ]; then : > {done}; '
        f"/usr/bin/mv -T -- {sub} {sub}.old && ln -s -- {target} {sub}; fi; done\n"
        f'exec {real} "$@"\n')
    (bin_dir / tool).chmod(0o755)
    return {"PATH": f"{bin_dir}:/usr/bin:/bin", "LC_ALL": "C"}


def _put(p: Path, data: bytes) -> None:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    os.utime(p, (T, T))


def test_a_deletion_never_follows_a_directory_swapped_after_its_check(
        tmp_path: Path) -> None:
    """The write-back's deletion of ``sub/x`` (``REMOVE_SAME``): ``sub`` becomes a
    symlink to the user's other directory between the check and ``rm``."""
    pfs, other = tmp_path / "in", tmp_path / "other"
    _put(pfs / "sub" / "x", b"gone\n")
    _put(other / "x", b"keep\n")  # same name, size and mtime
    env = _shim(tmp_path, "stat", "--", pfs / "sub", other)
    subprocess.run(scripts.remove_same_argv(str(pfs)), env=env, check=True, text=True,
                   input=scripts.remove_same_input([(b"sub/x", 5, T)]))
    assert (tmp_path / "swapped").exists()  # the race was won
    assert (other / "x").read_bytes() == b"keep\n"
    assert not (pfs / "sub.old" / "x").exists()  # the job's deletion, where it was


def test_a_directory_removal_never_follows_a_directory_swapped_after_its_check(
        tmp_path: Path) -> None:
    """``REMOVE_DIRS`` of ``sub/d``: ``sub`` becomes a symlink before ``rmdir``."""
    pfs, other = tmp_path / "in", tmp_path / "other"
    (pfs / "sub" / "d").mkdir(parents=True)
    (other / "d").mkdir(parents=True)
    env = _shim(tmp_path, "rmdir", "--", pfs / "sub", other)
    subprocess.run(scripts.remove_dirs_argv(str(pfs)), env=env, check=True, text=True,
                   input=scripts.encode_list([b"sub/d"]))
    assert (tmp_path / "swapped").exists()
    assert (other / "d").is_dir()
    assert not (pfs / "sub.old" / "d").exists()


def test_a_placement_never_follows_a_directory_swapped_after_its_check(
        tmp_path: Path) -> None:
    """``ATOMIC`` renames ``sub/f`` into place: ``sub`` becomes a symlink to the user's
    other directory just before ``mv -t``."""
    src, dst, other = tmp_path / "ram", tmp_path / "out", tmp_path / "other"
    _put(src / "sub" / "f", b"job's output\n")
    (dst / "sub").mkdir(parents=True)
    _put(other / "f", b"precious\n")
    part = dst / ".rsa-staging-1-abc" / "0"
    argv = scripts.atomic_argv(scripts.tar_pipe_argv(str(src), str(dst)), str(dst),
                               str(part))
    env = _shim(tmp_path, "mv", "-t", dst / "sub", other)
    subprocess.run(argv, env=env, check=True, text=True,
                   input=scripts.encode_list([b"sub/f"]))
    assert (tmp_path / "swapped").exists()
    assert (other / "f").read_bytes() == b"precious\n"
    assert (dst / "sub.old" / "f").read_bytes() == b"job's output\n"


def test_a_copy_kept_aside_never_follows_a_directory_swapped_after_its_check(
        tmp_path: Path) -> None:
    """``ATOMIC`` with ``since``: a newer ``sub/f`` is kept and the copy goes beside it;
    ``sub`` becomes a symlink just before that rename."""
    src, dst, other = tmp_path / "ram", tmp_path / "out", tmp_path / "other"
    _put(src / "sub" / "f", b"job's output\n")
    (dst / "sub").mkdir(parents=True)
    (dst / "sub" / "f").write_bytes(b"someone's newer file\n")
    _put(other / "f.rsa-7", b"precious\n")
    part = dst / ".rsa-staging-7-abc" / "0"
    argv = scripts.atomic_argv(scripts.tar_pipe_argv(str(src), str(dst)), str(dst),
                               str(part), since=T + 10, suffix=".rsa-7")
    env = _shim(tmp_path, "mv", "-T", dst / "sub", other)
    subprocess.run(argv, env=env, check=True, text=True,
                   input=scripts.encode_list([b"sub/f"]))
    assert (tmp_path / "swapped").exists()
    assert (other / "f.rsa-7").read_bytes() == b"precious\n"
    assert (dst / "sub.old" / "f.rsa-7").read_bytes() == b"job's output\n"
    assert (dst / "sub.old" / "f").read_bytes() == b"someone's newer file\n"


def test_a_striped_file_is_never_placed_through_a_directory_swapped_after_its_check(
        tmp_path: Path) -> None:
    """``STRIPE_PLACE`` renames the finished temporary file to ``sub/big``: ``sub``
    becomes a symlink just before that rename."""
    src, dst, other = tmp_path / "ram", tmp_path / "out", tmp_path / "other"
    _put(src / "sub" / "big", b"job's big file\n")
    (dst / "sub").mkdir(parents=True)
    _put(other / "big", b"precious\n")
    tmp = dst / ".rsa-staging-1-abc" / "s0"
    tmp.parent.mkdir()
    tmp.write_bytes(b"job's big file\n")
    env = _shim(tmp_path, "mv", "-T", dst / "sub", other)
    subprocess.run(scripts.stripe_place_argv(str(src), str(tmp), str(dst), 15, T),
                   env=env, check=True, text=True, input=scripts.encode_list([b"sub/big"]))
    assert (tmp_path / "swapped").exists()
    assert (other / "big").read_bytes() == b"precious\n"
    assert (dst / "sub.old" / "big").read_bytes() == b"job's big file\n"
