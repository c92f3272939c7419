"""Where a copy writes: the destination's directories, part directories, atomic renames.

Owns ``ATOMIC`` (copy a bucket into a private part directory, then rename every name into
place), the part directories' names (``PART_DIR``, :func:`part_dir`, :func:`is_part_dir`; and
:func:`unchecked_name`, the list a stage-in's settle check keeps beside them)
and ``NEW_PART`` (a fresh one, the job's own leftovers removed), ``MKDIRS`` and ``MKDIR``
(directories created as the user, never through a symlink), the root-only RAMDISK root
(:func:`prepare_root_argv`), removing a part directory, and the deletions of a
write-back (``REMOVE_SAME``, ``REMOVE_DIRS``).

Pure: builds lists, runs nothing. Imports only ``shell``.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping, Sequence

from rsa_scheduler.staging.scripts.shell import BASH, PIN, PRELUDE, bash

# Atomic placement: every stage-out (a killed or interrupted copy must never leave a
# file cut short under its final name in DATA_OUT) and the stage-in of the ``union``
# early-start policy (a running job already sees the RAMDISK over the PFS: a half-written
# file must never hide the complete PFS file). The bucket is copied into a private part
# directory ($3, below the destination root, same filesystem) with the program in $4 ($5
# is passed on to it), then every non-directory is renamed into the same directory below
# the destination root ($2), which the engine created beforehand: a file appears complete
# or not at all. Renames go one `mv -t` per directory (xargs batches the names), not one
# process per file; the part directories are made u+rwx first, since moving a name out
# of a directory needs write access to it (the engine sets every directory's mode last).
# rename(2) replaces a symlink planted at the final name; it never follows it. Each
# destination directory is entered and checked first (``PIN``: physically $2's plus its
# own name) and every name is renamed relative to it, never through the path again: a
# directory another user renames and replaces with a symlink after the check cannot send
# the copy elsewhere (exit 65 where the check fails).
# With $6 = "whole" the listed names are whole directories new at the destination, for
# which the engine created only an empty placeholder (MKDIRS, none of their
# subdirectories): each is renamed onto its placeholder in one rename (rename(2) replaces
# an empty directory, refuses a non-empty one, ENOTEMPTY, and a symlink or file there,
# ENOTDIR), so a new directory appears whole or not at all, for one metadata operation
# instead of one per file. Where that rename is refused (someone wrote into the
# placeholder, or swapped it), the names go one by one as for any bucket; a directory
# missing at the destination is created then (never through a symlink: exit 65).
# With $7 (an epoch second) a name is never renamed over a file, symlink or FIFO of the
# destination modified after $7 (someone else's since the job's RAMDISK was built, or
# since the write-back's scan) unless that one has the same size and mtime as the copy
# (this job's own earlier placement, placed again after a failed verify): the copy goes
# beside it as NAME$8 instead (``aside_suffix``: NAME.rsa-<job>[.c<cycle>], documented
# in docs/staging.md#kept-aside), or unless it is the version a write-back expects to
# replace: stdin may carry, after the list and a newline, base64 of "./<name>\0<size>
# <mtime>\0" records (``expect_input``; "-": the name is expected absent). The check and
# the rename are two steps: a file written in the instant between them is replaced.
# A name expected as ``ALWAYS_ASIDE`` goes beside its name whatever the destination
# holds, also nothing (a write-back's copy of a file someone else deleted on the PFS);
# with an expectation on stdin no whole directory is renamed in one go (its names would
# skip these checks).
ATOMIC = PRELUDE + PIN + (
    "nl=$'\\n'; " 'all=$(cat) || exit 1; list=${all%%"$nl"*}; exp=; '
    'case $all in *"$nl"*) exp=${all#*"$nl"};; esac; declare -A want=(); '
    'if [ -n "$exp" ]; then while IFS= read -r -d "" k && IFS= read -r -d "" v; do '
    'want["$k"]=$v; done < <(printf %s "$exp" | base64 -d); fi; '
    'rm -rf -- "$3" && mkdir -p -- "$3" || exit 1; prev=; '
    'printf %s "$list" | base64 -d | while IFS= read -r -d "" p; do d=${p%/*}; '
    '[ "$d" = "$prev" ] || mkdir -p -- "$3/$d" || exit 1; prev=$d; done || exit 1; '
    'printf %s "$list" | bash -c "$4" bash "$1" "$3" "$5" || exit $?; '
    'top=$(cd -P -- "$2" && { pwd -P; echo x; }) || exit 66; top=${top%?x}; '
    'cd -- "$3" || exit 1; part=$(pwd -P; echo x); part=${part%?x}; '
    'find . -type d ! -perm -u=rwx -exec chmod u+rwx -- {} + || exit 1; '
    'if [ "$6" = whole ] && [ -z "$exp" ]; then printf %s "$list" | base64 -d | '
    'while IFS= read -r -d "" p; do '
    '[ -d "$p" ] && [ ! -L "$p" ] || continue; q=${p%/*}; n=${p##*/}; '
    '( pin "$2/$q" "$top${q#.}" && [ -d "$n" ] && [ ! -L "$n" ] && '
    'mv -T -- "$part/$p" "$n" 2>/dev/null ) || true; done; fi; '
    'find . -type d -print0 | while IFS= read -r -d "" d; do '
    'if [ -L "$2/$d" ]; then echo "refusing to write through the symlink $2/$d: '
    'remove it or choose another destination" >&2; exit 65; fi; '
    '[ -d "$2/$d" ] || { q=${d%/*}; ( pin "$2/$q" "$top${q#.}" && '
    'mkdir -- "${d##*/}" ); } || true; '
    '( pin "$2/$d" "$top${d#.}" || { echo "refusing to place files in $2/$d: it is '
    'gone, not a directory, or reached through a symlink (renamed while the copy ran?)" >&2; '
    'exit 65; }; '
    'if [ -n "$7" ]; then find . -mindepth 1 -maxdepth 1 ! -type d '
    '-newermt "@$7" -printf "%f\\0" | while IFS= read -r -d "" n; do '
    'o=$part/$d/$n; { [ -e "$o" ] || [ -L "$o" ]; } && [ ! -d "$o" ] || continue; '
    's=$(stat -c "%s %Y" -- "./$n") || continue; '
    '[ "$s" != "$(stat -c "%s %Y" -- "$o")" ] || continue; '
    'if [ -n "${want["$d/$n"]+x}" ] && [ "$s" = "${want["$d/$n"]}" ]; then continue; fi; '
    'mv -f -T -- "$o" "./$n$8" || exit 1; done || exit 1; '
    'find "$part/$d" -mindepth 1 -maxdepth 1 ! -type d -printf "%f\\0" | '
    'while IFS= read -r -d "" n; do [ "${want["$d/$n"]-}" = "-1 -1" ] || continue; '
    'mv -f -T -- "$part/$d/$n" "./$n$8" || exit 1; done || exit 1; fi; '
    'find "$part/$d" -mindepth 1 -maxdepth 1 ! -type d -print0 '
    '| xargs -0 -r mv -f -t . -- ) || exit $?; done || exit $?; '
    'cd / && rm -rf -- "$3"')

# The part directories of atomic placement, below the destination root: one per copy
# run, ``<PART_DIR>-<job>-<random>`` (a name of the user's own in DATA_OUT is never
# touched), one subdirectory per bucket. The random part matters in a shared sticky
# DATA_OUT: a name another user can predict, they can create first (their directory:
# every stage-out of the job fails) or create writable (they could swap the user's
# files between the copy and the rename).
PART_DIR = ".rsa-staging"


def part_prefix(job_id: str) -> str:
    """What every part directory of ``job_id`` is named ``<prefix>-<random>``."""
    return f"{PART_DIR}-{job_id}"


def part_dir(job_id: str, token: str) -> str:
    """The name of one part directory of ``job_id`` below a destination root."""
    if not token or not token.isalnum():
        raise ValueError(f"part directory token {token!r}: expected letters and digits")
    return f"{part_prefix(job_id)}-{token}"


def is_part_dir(name: bytes, job_id: str) -> bool:
    """True for a top-level name of a part directory of ``job_id`` (also the unsuffixed
    name older versions used)."""
    prefix = part_prefix(job_id).encode()
    return name == prefix or name.startswith(prefix + b"-")


def unchecked_name(job_id: str) -> str:
    """The file below a stage-in's destination root listing the big files whose copies
    its settle check has not passed yet (``copiers.UNCHECKED``): named as the job's part
    directories are, so every scan of the destination leaves it out (``is_part_dir``),
    never a token (letters and digits only: never "-")."""
    return f"{part_prefix(job_id)}-unchecked-list"


# Make a fresh part directory: first remove the user's own leftovers of the job's earlier
# runs (a killed copy's: $2 is the prefix; only directories the user owns: in a sticky
# directory another user's are not the user's to remove anyway, and are never entered),
# then mkdir (never -p: an existing name, anyone's, fails it) private to the user.
NEW_PART = PRELUDE + (
    'cd -- "$1" || exit 66; '
    'find . -mindepth 1 -maxdepth 1 -type d \\( -name "$2" -o -name "$2-*" \\) '
    '-user "$(id -u)" -print0 | xargs -0 -r rm -rf -- || exit 1; '
    'mkdir -m 700 -- "$3"')


# Create the directory skeleton (0700 + u+rwx while staging: a directory that was
# finalised read-only by an earlier, interrupted run must accept writes again). A symlink
# where a directory goes is refused (exit 65), never followed; the list is in path
# order, so every parent was checked before its children.
REFUSE_LINK = ('for d; do if [ -L "$d" ]; then echo "refusing to write through '
               'the symlink $d: remove it or choose another destination" >&2; exit 65; '
               'fi; done; ')
MKDIRS = PRELUDE + (
    '[ ! -L "$1" ] || { echo "refusing to write through the symlink $1" >&2; exit 65; }; '
    'mkdir -p -- "$1" && cd -- "$1" || exit 66; base64 -d | xargs -0 -r '
    'sh -c \'' + REFUSE_LINK + 'mkdir -p -- "$@" && chmod u+rwx -- "$@"\' sh')
# The destination root, created as the user (fails if the user may not write); a symlink
# there is refused, not followed.
MKDIR = ('[ ! -L "$1" ] || { echo "refusing to write through the symlink $1: use the real '
         'path" >&2; exit 65; }; mkdir -p -- "$1"')


# A write-back of writable input applies the job's deletions, as the user, below $1
# (``staging.writeback``). Each stdin record is a name and the "<size> <mtime>" it must
# still have (the version the job deleted): a name that is gone, a directory, changed
# since (someone else's now) or below a directory reached through a symlink is left
# alone. REMOVE_DIRS removes the listed directories, deepest first, where empty.
# Each name is handled from inside its parent directory (``PIN``: physically DATA_IN's
# plus the name's own), so a directory swapped for a symlink after that check (by a
# teammate who may rename it) never sends the deletion elsewhere.
_ENTER = ('d=${p%/*}; n=${p##*/}; pin "$d" "$top${d#.}" || exit 0; ')
REMOVE_SAME = PRELUDE + PIN + (
    'cd -P -- "$1" || exit 66; top=$(pwd -P; echo x); top=${top%?x}; '
    'base64 -d | while IFS= read -r -d "" p && IFS= read -r -d "" want; do ( ' + _ENTER +
    '{ [ -e "$n" ] || [ -L "$n" ]; } && [ ! -d "$n" ] || exit 0; '
    '[ "$(stat -c "%s %Y" -- "$n")" = "$want" ] || exit 0; rm -f -- "$n" ) || exit 1; '
    'done')
REMOVE_DIRS = PRELUDE + PIN + (
    'cd -P -- "$1" || exit 66; top=$(pwd -P; echo x); top=${top%?x}; '
    'base64 -d | while IFS= read -r -d "" p; do ( ' + _ENTER +
    '[ -d "$n" ] && [ ! -L "$n" ] || exit 0; rmdir -- "$n" 2>/dev/null || true ); done')


#: the expectation of a name whose copy goes beside it as NAME+suffix in every case (no
#: file has size -1): what a write-back keeps aside, also where the PFS holds nothing
ALWAYS_ASIDE = (-1, -1)


def expect_input(expect: Mapping[bytes, tuple[int, int] | None]) -> str:
    """What follows the list on ATOMIC's stdin (after a newline): for each name, the
    (size, mtime in seconds) it may be replaced in, or None: only where absent
    (``ALWAYS_ASIDE``: never, the copy goes beside it)."""
    return base64.b64encode(b"".join(
        b"./" + p + b"\0" + (b"-" if v is None else f"{v[0]} {v[1]}".encode()) + b"\0"
        for p, v in expect.items())).decode("ascii")


def remove_same_argv(root: str) -> list[str]:
    """Delete below ``root`` what stdin lists (:func:`remove_same_input`) where it is
    still the version listed."""
    return bash(REMOVE_SAME, root)


def remove_same_input(items: Iterable[tuple[bytes, int, int]]) -> str:
    """stdin of :func:`remove_same_argv`: (name, size, mtime in seconds) records."""
    return base64.b64encode(b"".join(b"./" + p + b"\0" + f"{size} {mtime}".encode() + b"\0"
                                     for p, size, mtime in items)).decode("ascii")


def remove_dirs_argv(root: str) -> list[str]:
    """Remove the directories stdin lists (``encode_list``) below ``root`` where empty."""
    return bash(REMOVE_DIRS, root)


# Root-only: the RAMDISK root of a job, owned by the user, private.
def prepare_root_argv(path: str, uid: int, gid: int, mode: int = 0o700) -> list[str]:
    return ["install", "-d", "-o", str(uid), "-g", str(gid), "-m", f"{mode:o}", "--", path]


def aside_suffix(job_id: str, cycle: int = 1) -> str:
    """What a copy kept aside is named after: ``NAME.rsa-<job>`` (the job's first run),
    ``NAME.rsa-<job>.c<cycle>`` (a requeued run's, as its tar archives)."""
    if not job_id or "/" in job_id or job_id.startswith("."):
        raise ValueError(f"job id {job_id!r}: cannot name a file after it")
    return f".rsa-{job_id}" + (f".c{cycle}" if cycle > 1 else "")


def atomic_argv(copier: Sequence[str], dst: str, part: str, *,
                whole: bool = False, since: int | None = None,
                suffix: str = "") -> list[str]:
    """Run a ``tar_pipe_argv``/``big_argv``/``rsync_argv`` copier into ``part``, then
    rename each listed name from ``part`` to its place below ``dst`` (stdin: the list, as
    for the copier). ``whole``: the listed names are directories new at ``dst`` with only
    an empty placeholder there; each is placed by one rename where it can be. ``since``
    (an epoch second) with ``suffix``: a destination file modified after ``since`` that
    differs from the copy in size or mtime is kept; the copy goes beside it as
    NAME+``suffix``."""
    if copier[:2] != [BASH, "-c"] or len(copier) < 5:
        raise ValueError("atomic placement wraps a tar_pipe_argv or big_argv copier")
    if since is not None and not suffix:
        raise ValueError("keeping newer files needs the suffix of the copies kept aside")
    program, src = copier[2], copier[4]
    extra = copier[6] if len(copier) > 6 else ""
    return bash(ATOMIC, src, dst, part, program, extra, "whole" if whole else "",
                "" if since is None else str(int(since)), suffix)


def remove_tree_argv(path: str) -> list[str]:
    return ["rm", "-rf", "--", path]


def mkdirs_argv(root: str) -> list[str]:
    return bash(MKDIRS, root)


def new_part_argv(root: str, job_id: str, token: str) -> list[str]:
    """As the user: remove the job's own leftover part directories below ``root``, then
    create ``part_dir(job_id, token)`` there, mode 0700 (fails if the name exists)."""
    return bash(NEW_PART, root, part_prefix(job_id), part_dir(job_id, token))


# A quarantined RAMDISK's rescue (quarantine.rescue_dir), as the user: their own
# directory in the rescue area, made private. The area must be sticky if others may write
# it (else they could move the user's directory away and put theirs in its place); a name
# that is a symlink, or someone else's directory, is refused, never written through.
RESCUE_DIR = PRELUDE + (
    'd=$1; p=${d%/*}; m=$(stat -c %a -- "$p") || exit 65; '
    'if (( (8#$m & 8#022) && !(8#$m & 8#1000) )); then echo "the rescue area $p (mode $m) '
    'is writable by others but not sticky: chmod 1777 it" >&2; exit 65; fi; '
    '[ ! -L "$d" ] || { echo "refusing the rescue directory $d: it is a symlink" >&2; '
    'exit 65; }; mkdir -m 700 -- "$d" 2>/dev/null; '
    '[ -d "$d" ] && [ ! -L "$d" ] || { echo "cannot make the rescue directory $d" >&2; '
    'exit 65; }; o=$(stat -c %u -- "$d") || exit 65; '
    '[ "$o" = "$(id -u)" ] || { echo "the rescue directory $d belongs to uid $o, not to '
    'the job\'s user: an operator must remove it" >&2; exit 65; }; chmod 700 -- "$d"')


def rescue_dir_argv(path: str) -> list[str]:
    """As the user: their own private directory ``path`` in the rescue area."""
    return bash(RESCUE_DIR, path)


def mkdir_argv(path: str) -> list[str]:
    """The destination root, created as the user (fails if the user may not write)."""
    return bash(MKDIR, path)
