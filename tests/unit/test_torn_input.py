"""A big input file changed while it is copied is never kept torn (issue 37, item 4).

Files of at least ``big_bytes`` go through ``dd`` then ``cp --attributes-only``: a
source written to during the copy left a torn copy carrying the source's final mtime,
which a resume's quick check kept (and a stage-in has no verify). Now the copier compares
the source's device, inode, size, mtime and ctime before and after each copy: changed,
the copy is removed (a resume copies it again) and made again, at most ``BIG_TRIES``
times, then the bucket fails naming the file. Here the program runs for real, with a
``cp`` on its PATH that changes the source just before copying its attributes (one byte,
size and mtime put back: only the ctime tells); the lab test is
tests/e2e/test_torn_input.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from rsa_scheduler.runner import Identity
from rsa_scheduler.staging.scripts import big_argv, encode_list
from rsa_scheduler.staging.scripts.copiers import BIG_TRIES

#: changes byte 5 of the source (its first argument after --), mtime put back, while
#: the count file holds a positive number (decremented each time), then runs the real cp
MEDDLER = """#!/bin/bash
src=${@: -2:1}
n=$(cat "$COUNT")
if [ "$n" -gt 0 ]; then
  echo $((n - 1)) > "$COUNT"
  m=$(stat -c %Y -- "$src")
  printf 'Z%s' "$n" | dd of="$src" bs=1 seek=5 conv=notrunc status=none
  touch -m -d "@$m" -- "$src"
fi
exec /bin/cp "$@"
"""


def run_big(tmp: Path, changes: int) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    src, dst, bin_ = tmp / "src", tmp / "dst", tmp / "bin"
    for d in (src, dst, bin_):
        d.mkdir()
    (src / "big").write_bytes(os.urandom(1 << 20))
    (bin_ / "cp").write_text(MEDDLER)
    (bin_ / "cp").chmod(0o755)
    (tmp / "count").write_text(str(changes))
    env = {"PATH": f"{bin_}:/usr/bin:/bin", "COUNT": str(tmp / "count")}
    done = subprocess.run(big_argv(str(src), str(dst), "64K"), input=encode_list([b"big"]),
                          capture_output=True, text=True, env=env, timeout=60)
    return done, src / "big", dst / "big"


def test_a_source_changed_during_its_copy_is_copied_again(tmp_path: Path) -> None:
    done, src, dst = run_big(tmp_path, 1)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "count").read_text().strip() == "0"  # it did change the source
    assert dst.read_bytes() == src.read_bytes()  # before: the bytes from before the change
    assert int(dst.stat().st_mtime) == int(src.stat().st_mtime)


def test_a_source_that_keeps_changing_fails_naming_it_and_leaves_no_complete_looking_copy(
        tmp_path: Path) -> None:
    done, src, dst = run_big(tmp_path, BIG_TRIES)
    assert done.returncode != 0
    assert f"rsa: ./big changed while it was copied, {BIG_TRIES} times: not staged" \
        in done.stderr, done.stderr
    assert not dst.exists() and src.stat().st_size > 0  # a resume copies it again


def test_a_read_only_source_changed_during_its_copy_is_copied_again_as_the_user() -> None:
    """As the user (not root, who may write any file): the first copy got the source's
    mode, 0444, before the comparison found the change; the copy is removed (it cannot be
    opened for writing to truncate it) and made again."""
    user = Identity.of("nobody")
    tmp_path = Path(tempfile.mkdtemp(prefix="rsa-torn-"))
    try:
        read_only_change(tmp_path, user)
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)


def read_only_change(tmp_path: Path, user: Identity) -> None:
    tmp_path.chmod(0o755)
    src, dst, bin_ = tmp_path / "src", tmp_path / "dst", tmp_path / "bin"
    for d in (src, dst, bin_):
        d.mkdir()
        os.chown(d, user.uid, user.gid)
    (src / "big").write_bytes(os.urandom(1 << 20))
    os.chown(src / "big", user.uid, user.gid)
    (src / "big").chmod(0o444)  # (the meddler, the owner, makes it writable to change it)
    (bin_ / "cp").write_text(MEDDLER.replace('printf', 'chmod u+w -- "$src"; printf')
                             .replace('  touch', '  chmod a-w -- "$src"; touch'))
    (bin_ / "cp").chmod(0o755)
    (tmp_path / "count").write_text("1")
    os.chown(tmp_path / "count", user.uid, user.gid)
    env = {"PATH": f"{bin_}:/usr/bin:/bin", "COUNT": str(tmp_path / "count")}
    done = subprocess.run(big_argv(str(src), str(dst), "64K"), input=encode_list([b"big"]),
                          capture_output=True, text=True, env=env, timeout=60,
                          user=user.uid, group=user.gid, extra_groups=[])
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "count").read_text().strip() == "0"  # it did change the source
    assert (dst / "big").read_bytes() == (src / "big").read_bytes()
