"""Striped big files (issue 16): one file copied as checked byte ranges by many streams.

Owns ``STRIPE_NEW`` (the temporary file, created afresh at full size), ``STRIPE_RANGE``
(one range copied in place, each chunk's CRC-32 taken on both sides; ``CHUNK``),
``STRIPE_PLACE`` (renamed into place once the source is unchanged), their argv builders
and :func:`parse_sums` (``STRIPE_RANGE``'s output); ``staging.stripe`` plans the ranges
and checks the sums.

Pure: builds lists, runs nothing. Imports only ``shell`` and ``copiers`` (the dd block).
"""

from __future__ import annotations

import re

from rsa_scheduler.staging.scripts.copiers import BLOCK_INTO_RAMDISK
from rsa_scheduler.staging.scripts.shell import PIN, PRELUDE, bash

# Striped big files (issue 16): one file of at least ``stripe_bytes`` is copied as byte
# ranges by several streams on several RSA nodes at once, each range written in place
# into one temporary file below the part directory, which is renamed to the final name
# only once every range is copied and checked (a killed copy leaves only the temporary
# file, removed by the next run). STRIPE_NEW creates it afresh (noclobber: O_EXCL, never
# through a symlink) at the file's full size ($2): unwritten ranges read as zeros, so
# dd's conv=sparse can skip all-zero blocks and holes survive.
STRIPE_NEW = PRELUDE + 'set -C && : > "$1" && truncate -s "$2" -- "$1"'
# One range: name on stdin (relative to $1), temporary file $2, offset $3, length $4,
# dd block $5, checked in chunks of $6 bytes. Per chunk: dd copies it in place (notrunc,
# seek in bytes, all-zero blocks skipped: holes survive; never through a symlink on
# either side) and fsyncs it, then cksum takes the CRC-32 and byte count of the chunk as
# the source returns it (the read side, from this node's page cache) and as the
# temporary file returns it after this node dropped the file from its page cache (the
# write side: what the destination's servers hold): one line "<offset> <crc> <count>
# <crc> <count>" per chunk, compared by the engine (stripe.check_range). A source changed
# under the copy, a short or misplaced write, or a destination that returns other bytes
# than it was given fails the range. Last, the node sets the temporary file's mtime to
# the source's through its own client: every node writes its ranges through its own
# filesystem client, and a client reports the mtime of its writes to the servers later
# (MooseFS 3.0 on the lab: ~1 s after the last write, fsync or not), so the placed
# file's mtime became another node's write time after the placement had set the
# source's (docs/staging.md). A client's own setattr of the file replaces what it would
# report; so once every range has reported, no client has a write time of its own left
# to send. CRC-32 (cksum, ~2 GB/s per core here, b2sum ~0.45) catches accidents, not
# forgery; nobody else can write in the user's private 0700 part directory.
STRIPE_RANGE = PRELUDE + (
    'cd -- "$1" || exit 66; IFS= read -r -d "" p < <(base64 -d) || exit 1; '
    'o=$3; end=$(($3 + $4)); while [ "$o" -lt "$end" ]; do '
    'n=$((end - o)); [ "$n" -le "$6" ] || n=$6; '
    'dd if="$p" of="$2" iflag=nofollow,skip_bytes,count_bytes oflag=nofollow,seek_bytes '
    'skip="$o" seek="$o" count="$n" bs="$5" conv=notrunc,sparse,fsync status=none '
    '|| exit $?; '
    'r=$(dd if="$p" iflag=nofollow,skip_bytes,count_bytes skip="$o" count="$n" bs=1M '
    'status=none | cksum) || exit $?; '
    'dd if="$2" iflag=nocache,nofollow count=0 status=none || exit $?; '
    'w=$(dd if="$2" iflag=nofollow,skip_bytes,count_bytes skip="$o" count="$n" bs=1M '
    'status=none | cksum) || exit $?; '
    'echo "$o $r $w"; o=$((o + n)); done; touch -h -m -r "$p" -- "$2"')
CHUNK = 64 << 20  # bytes of a range checked at once (the source side stays in the page cache)
# Place a striped file once every range passed: the source must still have the size and
# mtime (seconds) the scan saw ($4: "<size> <mtime>"; a file changed while it was copied
# is refused, the next run copies it again), its mode and mtime go onto the temporary
# file ($2), which is renamed to the final name below $3: rename(2) replaces whatever
# is there (a symlink too) whole, never writes through it. With $5 (an epoch second),
# a destination file modified after $5 that differs from the copy in size or mtime is
# kept: the copy goes beside it as NAME$6 (as ``placement.ATOMIC``), unless it is the
# version $7 ("<size> <mtime>", or "-") a write-back expects to replace ("-1 -1",
# ``ALWAYS_ASIDE``: the copy goes beside it in every case). The rename is
# made from inside the destination directory (``PIN``), never through its path again.
STRIPE_PLACE = PRELUDE + PIN + (
    'top=$(cd -P -- "$3" && { pwd -P; echo x; }) || exit 66; top=${top%?x}; '
    'cd -- "$1" || exit 66; IFS= read -r -d "" p < <(base64 -d) || exit 1; '
    'now=$(stat -c "%s %Y" -- "$p") || exit 1; [ "$now" = "$4" ] || { echo '
    '"$p changed while it was copied (size and mtime $now, expected $4)" >&2; exit 1; }; '
    '[ ! -L "$2" ] && cp --attributes-only --preserve=mode,timestamps -- "$p" "$2" '
    '|| exit 1; d=${p%/*}; pin "$3/$d" "$top${d#.}" || { echo "refusing to place $3/$p: '
    'its directory is gone, not a directory, or reached through a symlink (renamed '
    'while the copy ran?)" >&2; exit 65; }; t=./${p##*/}; if [ -n "$5" ] && '
    '{ [ -e "$t" ] || [ -L "$t" ]; } && '
    '[ ! -d "$t" ] && [ -n "$(find "$t" -maxdepth 0 -newermt "@$5" -print)" ] && '
    's=$(stat -c "%s %Y" -- "$t") && [ "$s" != "$4" ] && [ "$s" != "$7" ]; then '
    't=$t$6; elif [ -n "$5" ] && [ "$7" = "-1 -1" ]; then t=$t$6; fi; '
    'mv -f -T -- "$2" "$t"')


def stripe_new_argv(tmp: str, size: int) -> list[str]:
    """Create the temporary file of a striped file afresh, ``size`` bytes (a hole)."""
    return bash(STRIPE_NEW, tmp, str(size))


def stripe_range_argv(src: str, tmp: str, offset: int, length: int,
                      block: str = BLOCK_INTO_RAMDISK, chunk: int = CHUNK) -> list[str]:
    """Copy one range of the file named on stdin (below ``src``) into ``tmp``; prints
    the read and write sides' checksums of every chunk (``parse_sums``)."""
    return bash(STRIPE_RANGE, src, tmp, str(offset), str(length), block, str(chunk))


def parse_sums(stdout: str) -> list[tuple[int, tuple[int, int], tuple[int, int]]]:
    """``stripe_range_argv``'s lines: (offset, (crc, count) read, (crc, count) written)."""
    out = []
    for line in stdout.strip().splitlines():
        m = re.fullmatch(r"(\d+) (\d+) (\d+) (\d+) (\d+)", line.strip())
        if m is None:
            raise ValueError(f"unexpected checksum line {line[:200]!r}")
        v = [int(x) for x in m.groups()]
        out.append((v[0], (v[1], v[2]), (v[3], v[4])))
    return out


def stripe_place_argv(src: str, tmp: str, dst: str, size: int, mtime_s: int, *,
                      since: int | None = None, suffix: str = "",
                      expect: tuple[int, int] | None = None) -> list[str]:
    """Rename ``tmp`` to the name on stdin below ``dst`` once the source is unchanged
    (``since``, ``suffix``: a newer destination file is kept, as ``atomic_argv``;
    ``expect``: the (size, mtime) a write-back may replace, as ``expect_input``)."""
    if since is not None and not suffix:
        raise ValueError("keeping newer files needs the suffix of the copies kept aside")
    return bash(STRIPE_PLACE, src, tmp, dst, f"{size} {mtime_s}",
                "" if since is None else str(int(since)), suffix,
                "-" if expect is None else f"{expect[0]} {expect[1]}")
