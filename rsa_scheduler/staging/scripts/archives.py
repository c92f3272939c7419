"""Tar aggregation: archives packed on the nodes, listed and hashed back for verify.

Owns ``TAR_PACK`` (a list into one POSIX archive, written to a fresh ``.part`` name and
renamed), ``TAR_LIST`` (parsed by ``manifest.parse_tar_listing``), ``TAR_HASH`` with
``TAR_HASH_MEMBER`` (every member's content hash; both read the archive after dropping
it from the node's page cache, ``UNCACHE``), ``WRITE`` (the index, written the same
way; ``FRESH``), ``READ`` (the index read back for verify, the same way as an archive)
and their argv builders.

Pure: builds lists, runs nothing. Imports only ``shell``.
"""

from __future__ import annotations

from rsa_scheduler.staging.scripts.shell import PRELUDE, bash

# Pack a list into one archive: POSIX (pax) format keeps sub-second mtimes and long or
# odd names; written to <archive>.part and renamed, so a re-run never leaves a torn file.
# The .part file is created afresh (rm, then noclobber: O_EXCL), so a symlink planted
# under that predictable name in a shared DATA_OUT is removed, never written through;
# the rename replaces one at the archive's own name: ``mv -T``, since a plain ``mv``
# takes a symlink to a directory there (or a directory) for the directory to move the
# file into (found by review 2026-11-30); a directory there fails the stage-out.
#
# In a sticky directory (a shared DATA_OUT) another user may hold an archive's (or the
# index's) name, or its .part name, first: nothing but its owner or root can remove it
# there, so the stage-out cannot write that name. TAKEN says whose it is and what to do
# in one line (rm or mv only said "Operation not permitted", which it keeps: the failure
# stays permanent, the RAMDISK kept for an operator's rsa retry).
TAKEN = ('me=$(id -u); d=${p%/*}; if [ -k "$d" ] && [ "$(stat -c %u -- "$d")" != "$me" ]; '
         'then for n in "$p" "$p.part"; do o=$(stat -c %u -- "$n" 2>/dev/null) || continue; '
         '[ "$o" = "$me" ] || { echo "$n is $(stat -c %U -- "$n")\'s (uid $o): Operation '
         'not permitted to replace it, in a sticky directory only its owner or root may; '
         'ask them to remove it; then an operator\'s rsa retry stages the output out again" '
         '>&2; exit 1; }; '
         'done; fi; ')
FRESH = TAKEN + 'rm -f -- "$p.part" && set -C && '
TAR_PACK = PRELUDE + (
    'cd -- "$1" || exit 66; p=$2; ' + FRESH + 'base64 -d | tar --null '
    '--verbatim-files-from --no-recursion -T - --format=posix '
    '--pax-option=delete=atime,delete=ctime -S -cf - > "$p.part" '
    '&& mv -f -T -- "$p.part" "$p"')

# Verify reads an archive ($1) back only after this node wrote back what it holds
# dirty of it (sync FILE: fsync) and dropped it from its page cache (dd iflag=nocache
# count=0: posix_fadvise DONTNEED), so the listing and the hashes are of what the
# filesystem's client fetches again, not of what this node kept when it packed it.
UNCACHE = ('sync -- "$1" && dd if="$1" iflag=nocache,nofollow count=0 status=none '
           '|| exit 1; ')

# List an archive (parsed by manifest.parse_tar_listing).
TAR_LIST = PRELUDE + UNCACHE + (
    'tar -tvf "$1" --full-time --quoting-style=c --numeric-owner | base64 -w0')

# Hash every regular member of an archive: <member>\0<hex>\0 per member.
TAR_HASH_MEMBER = ('h=$(b2sum -l 128) || exit 1; '
                   'printf "%s\\0%s\\0" "$TAR_FILENAME" "${h%% *}"')
TAR_HASH = PRELUDE + UNCACHE + (
    'tar -xf "$1" --to-command="$2" | base64 -w0')

# Write stdin (base64) to a file atomically (a fresh .part file, as for TAR_PACK).
WRITE = PRELUDE + ('p=$1; ' + FRESH + 'base64 -d > "$p.part" && '
                   'mv -f -T -- "$p.part" "$p"')


# Read a file ($1: the index) back for verify, as TAR_LIST reads an archive: written back
# and dropped from this node's page cache first, never through a symlink.
READ = PRELUDE + UNCACHE + 'dd if="$1" iflag=nofollow bs=1M status=none | base64 -w0'


def tar_pack_argv(root: str, archive: str) -> list[str]:
    return bash(TAR_PACK, root, archive)


def tar_list_argv(archive: str) -> list[str]:
    return bash(TAR_LIST, archive)


def tar_hash_argv(archive: str) -> list[str]:
    return bash(TAR_HASH, archive, TAR_HASH_MEMBER)


def write_argv(path: str) -> list[str]:
    return bash(WRITE, path)


def read_argv(path: str) -> list[str]:
    """``path`` (the index) as this node's filesystem client fetches it (``READ``)."""
    return bash(READ, path)
