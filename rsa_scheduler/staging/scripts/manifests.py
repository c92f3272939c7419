"""What the engine reads of a tree: the scan's records and content hashes.

Owns ``SCAN_FORMAT``, ``SCAN`` and ``SCAN_CAPPED`` (one record per object below a root, as
the user; capped: stopped after a limit, the streamed mode's threshold), ``HASH``
(BLAKE2b-128 of a list of files), ``HASH_RANGE`` (of one range of a big file),
``DROP_CACHE`` (write back and drop a node's cached pages of the destination's big files
before verify hashes them), ``HASH_UNCACHED`` with ``DROP_HASH`` (verify's hashes of the
destination's other files, each dropped from the node's page cache just before) and
their argv builders; ``staging.manifest`` parses what they
print.

Pure: builds lists, runs nothing. Imports only ``shell``.
"""

from __future__ import annotations

from rsa_scheduler.staging.scripts.shell import PRELUDE, bash

# One record per object below the root: readable flag, then find -printf fields.
# Symlinks are never followed; files and directories the user cannot read are flagged
# U so the engine refuses before copying anything. For the user's own objects the
# owner bits decide (as the kernel and POSIX ACLs do for an owner): -readable calls
# access(2), which on MooseFS is one master round trip per object — 10k of them for a
# 10k-file tree (docs/benchmarks.md#staging). $2 is the user's uid.
SCAN_FORMAT = r"%y\0%s\0%m\0%T@\0%n\0%D\0%i\0%l\0%P\0"
SCAN = PRELUDE + (
    'cd -- "$1" || exit 66; '
    "find . -mindepth 1 \\( -type l -printf 'R\\0' "
    "-o -uid \"$2\" \\( -type d -perm -u=rx -o \\! -type d -perm -u=r \\) -printf 'R\\0' "
    "-o \\( -type d -o -type f \\) \\! -readable -printf 'U\\0' "
    "-o -type d \\! -executable -printf 'U\\0' "
    "-o -printf 'R\\0' \\) -printf '" + SCAN_FORMAT + "' | base64 -w0")

# The same scan of the regular files of more than $3 bytes only (a streamed stage-in's
# big files, for its settle check: ``treecopy.TreeCopy._settle_streamed``).
SCAN_BIG = SCAN.replace("find . -mindepth 1 ", 'find . -mindepth 1 -type f -size +"$3"c ', 1)

# The same scan, cut after $3 NUL-separated fields (10 per object): a tree with more
# objects than the engine lists in rsad is staged by the streamed mode instead (find is
# stopped by SIGPIPE there, which is not an error).
SCAN_CAPPED = SCAN.removesuffix(" | base64 -w0") + (
    ' | head -z -n "$3" | base64 -w0; r=("${PIPESTATUS[@]}"); '
    '[ "${r[0]}" = 0 ] || [ "${r[0]}" = 141 ] || exit "${r[0]}"; '
    '[ "${r[1]}" = 0 ] && [ "${r[2]}" = 0 ]')

# Hash a list of regular files (BLAKE2b-128, ~540 MB/s per core here).
HASH = PRELUDE + (
    'cd -- "$1" || exit 66; base64 -d | xargs -0 -r b2sum -l 128 -z -- | base64 -w0')

# Verify: hash one range of a file (name on stdin, relative to $1; offset $2, length
# $3) with BLAKE2b-128, as verify hashes whole files.
HASH_RANGE = PRELUDE + (
    'cd -- "$1" || exit 66; IFS= read -r -d "" p < <(base64 -d) || exit 1; '
    'dd if="$p" iflag=nofollow,skip_bytes,count_bytes skip="$2" count="$3" bs=1M '
    'status=none | b2sum -l 128')
# Verify: before reading big files back from the destination, write back what this
# node still holds dirty of them (sync FILE: fsync) and drop them from its page cache
# (dd iflag=nocache count=0: posix_fadvise DONTNEED of the whole file), so the hash
# reads what the filesystem's servers return, not this node's memory of what it wrote.
DROP_CACHE = PRELUDE + (
    'cd -- "$1" || exit 66; base64 -d | xargs -0 -r sh -c \'for f; do '
    '[ -f "$f" ] && [ ! -L "$f" ] || continue; sync -- "$f" && '
    'dd if="$f" iflag=nocache,nofollow count=0 status=none || exit 1; done\' sh')
# Verify, DATA_OUT's side, for the files below the ranged size (one process each is
# what dropping costs, so it is done in the hashing command itself): drop each file of
# the batch ($@) from this node's page cache (dd iflag=nocache count=0:
# posix_fadvise DONTNEED) just before b2sum reads the batch, so the hashes are of what
# the filesystem's client fetches again, not of what this node kept of the copy it (or
# another job's command on it) wrote. A file that cannot be dropped fails the batch
# (exit 255: xargs stops and exits 124).
DROP_HASH = ('for f; do if [ -f "$f" ] && [ ! -L "$f" ]; then dd if="$f" '
             'iflag=nocache,nofollow count=0 status=none || exit 255; fi; done; '
             'exec b2sum -l 128 -z -- "$@"')
# HASH of DATA_OUT's files ($2 is DROP_HASH): first write back whatever this node holds
# dirty of DATA_OUT's filesystem (sync -f: syncfs, once per command), since DONTNEED
# leaves dirty pages in place.
HASH_UNCACHED = PRELUDE + (
    'cd -- "$1" || exit 66; sync -f -- . || exit 1; '
    'base64 -d | xargs -0 -r sh -c "$2" sh | base64 -w0')


def scan_argv(root: str, uid: int) -> list[str]:
    """Scan ``root`` as the user ``uid`` (objects owned by ``uid``: owner bits decide)."""
    return bash(SCAN, root, str(uid))


def scan_big_argv(root: str, uid: int, big_bytes: int) -> list[str]:
    """``scan_argv`` of the regular files of at least ``big_bytes`` only."""
    return bash(SCAN_BIG, root, str(uid), str(max(0, big_bytes - 1)))


def mounted_argv(root: str) -> list[str]:
    """As root: exits 0 only if ``root`` is a mount point on the node (the RAMDISK's, not
    the bare directory under it while it is remounted)."""
    return ["findmnt", "-n", "-o", "TARGET", "--mountpoint", root]


def scan_capped_argv(root: str, uid: int, limit: int) -> list[str]:
    """``scan_argv`` stopped after ``limit`` + 1 objects (more: use the streamed mode)."""
    return bash(SCAN_CAPPED, root, str(uid), str((limit + 1) * 10))


def hash_range_argv(root: str, offset: int, length: int) -> list[str]:
    """BLAKE2b-128 of one range of the file named on stdin (below ``root``)."""
    return bash(HASH_RANGE, root, str(offset), str(length))


def drop_cache_argv(root: str) -> list[str]:
    """Write back and drop from this node's page cache the files listed on stdin."""
    return bash(DROP_CACHE, root)


def hash_argv(root: str) -> list[str]:
    return bash(HASH, root)


def hash_uncached_argv(root: str) -> list[str]:
    """``hash_argv`` of files this node must read from the filesystem's servers (verify's
    DATA_OUT side): written back, then each dropped from its page cache first."""
    return bash(HASH_UNCACHED, root, DROP_HASH)
