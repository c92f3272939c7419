"""argv builders for everything the staging engine runs on an RSA node.

Owns the constant bash programs and the pure functions that wrap them into argv lists.
User data never reaches a shell as code: each program is a fixed string run as
``bash -c PROGRAM bash ARG...``; paths arrive as positional arguments (``"$1"``), file
lists arrive on stdin as base64 of NUL-separated ``./<name>`` records (so names with
newlines or bytes that are not UTF-8 survive any transport), and binary answers leave
base64-encoded on stdout. Every program runs ``set -o pipefail`` so a failing reader in
a pipe fails the command.

Pure: builds lists, runs nothing. Must not import ``engine``.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Sequence

BASH = "/bin/bash"
PRELUDE = "set -o pipefail; export LC_ALL=C TZ=UTC; "

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

# The same scan, cut after $3 NUL-separated fields (10 per object): a tree with more
# objects than the engine lists in rsad is staged by the streamed mode instead (find is
# stopped by SIGPIPE there, which is not an error).
SCAN_CAPPED = SCAN.removesuffix(" | base64 -w0") + (
    ' | head -z -n "$3" | base64 -w0; r=("${PIPESTATUS[@]}"); '
    '[ "${r[0]}" = 0 ] || [ "${r[0]}" = 141 ] || exit "${r[0]}"; '
    '[ "${r[1]}" = 0 ] && [ "${r[2]}" = 0 ]')

# Streamed mode (a tree above staging's list limit; docs/staging.md#streamed-mode): the
# node lists the tree itself, never rsad. One find over the source ($1) sorts every
# object into NUL-separated lists in the spool directory $2 (below the destination's
# part directory, which every RSA node mounts): objects the user cannot read (the scan's
# rules; $4 is the user's uid), directories, sockets and devices (skipped), files with
# other hard links (one tar for all of them: links stay links), everything else; sizes
# summed by awk. Then split cuts the list into chunks of $3 names, which the streams of
# every node claim by rename. Prints "BAD <count>" and the first five names (base64) if
# anything is unreadable, else "LIST <files> <linked> <dirs> <skipped> <bytes> <chunks>"
# and the first five skipped names. Memory: constant (find, split, awk stream; the lists
# are files).
STREAM_LIST = PRELUDE + (
    'cd -- "$1" || exit 66; mkdir -m 700 -- "$2" || exit 1; '
    'find . -mindepth 1 \\( -type l -o -uid "$4" \\( -type d -perm -u=rx -o \\! -type d '
    '-perm -u=r \\) -o \\! \\( \\( -type d -o -type f \\) \\! -readable -o -type d \\! '
    '-executable \\) \\) \\( -type d -fprint0 "$2/dirs" -o \\( -type s -o -type c -o -type b '
    '\\) -fprint0 "$2/skipped" -o -type f -links +1 -fprint0 "$2/linked" -fprintf '
    '"$2/sizes" "%s\\n" -o -fprint0 "$2/files" -fprintf "$2/sizes" "%s\\n" \\) -o -fprint0 '
    '"$2/bad" || exit 1; '
    'count() { tr -cd "\\0" < "$1" | wc -c; }; '
    'if [ -s "$2/bad" ]; then echo "BAD $(count "$2/bad")"; head -z -n 5 "$2/bad" '
    '| base64 -w0; echo; exit 0; fi; '
    'files=$(count "$2/files") && linked=$(count "$2/linked") && dirs=$(count "$2/dirs") '
    '&& skipped=$(count "$2/skipped") && bytes=$(awk "{s += \\$1} END {printf \\"%d\\", s}" '
    '"$2/sizes") || exit 1; '
    'split -t "\\0" -l "$3" -a 8 -d -- "$2/files" "$2/chunk-" && rm -f -- "$2/files" || exit 1; '
    '[ ! -s "$2/linked" ] || mv -- "$2/linked" "$2/chunk-linked" || exit 1; '
    'chunks=$(find "$2" -maxdepth 1 -name "chunk-*" | wc -l); '
    'echo "LIST $files $linked $dirs $skipped $bytes $chunks"; '
    'head -z -n 5 "$2/skipped" | base64 -w0; echo')
# A stream of the streamed mode, on any node: claim up to $4 chunks of the spool $3 (a
# rename to a name of this call's own, $6: one claimant wins), copy each from $1 to $2
# with the copier program $5 (the list on its stdin, as for a bucket; -S: holes kept)
# or, when $7 is set, with the atomic placement program $7 into a part directory below
# $8, then delete the chunk; prints "<chunks> <files>" ("0 0": nothing left).
STREAM_COPY = PRELUDE + (
    'n=0; f=0; for c in "$3"/chunk-*; do [ "$n" -lt "$4" ] || break; [ -e "$c" ] || continue; '
    'mine="$3/claimed-$6-${c##*/}"; mv -- "$c" "$mine" 2>/dev/null || continue; '
    'if [ -n "$7" ]; then base64 -w0 < "$mine" | bash -c "$7" bash "$1" "$2" '
    '"$8/$6-${c##*/}" "$5" -S || exit $?; '
    'else base64 -w0 < "$mine" | bash -c "$5" bash "$1" "$2" -S || exit $?; fi; '
    'k=$(tr -cd "\\0" < "$mine" | wc -c); f=$((f + k)); n=$((n + 1)); rm -f -- "$mine"; '
    'done; echo "$n $f"')
# The directory list of the spool ($1/dirs) into a program ($2) that reads a list on
# stdin, with the rest of the arguments: MKDIRS before the copy, the directory tar pipe
# (modes and mtimes) after it.
STREAM_DIRS = PRELUDE + 'l=$1 p=$2; shift 2; base64 -w0 < "$l/dirs" | bash -c "$p" bash "$@"'

# Streamed verify (a tree above the list limit; docs/staging.md#streamed-mode), on the
# first node: one manifest line per object of the RAMDISK ($1) and of the destination
# ($2), "<path>\t<type> <size> <mode> <mtime s>" ("<path>\tl <target>" for a symlink),
# and one more per regular file sharing its inode with another name of the same tree,
# "<path>\t= <lead>", the lead being the group's first name (groups of one name are not
# listed: links to names outside the tree are not the tree's); each side sorted into
# the spool $3 (sort spills there: constant memory; only the linked names pass through
# bash). comm lists the RAMDISK's lines the destination does not have: missing, another
# type, size, mode, mtime or target, or a hard link broken (objects only at the
# destination are not an error); the objects they name, once each, go to $3/badnames.
# The RAMDISK's regular files are cut into chunks of $4 names for VERIFY_HASH, and those
# larger than $5 bytes listed in $3/big (dropped from every node's page cache before
# hashing). $6: the part directory holding the spool, relative to $2: left out of the
# destination's walk (sort's spill files come and go in it). Prints "META <objects>
# <bytes> <differing objects> <chunks>" and the first five differing lines (base64).
VERIFY_LIST = PRELUDE + (
    'mkdir -m 700 -- "$3" || exit 1; s=$3; P=$6; T=$(printf "\\t"); '
    'fl() { [ "${#g[@]}" -lt 2 ] || for q in "${g[@]}"; do '
    'printf "%s\\t= %s\\0" "$q" "${g[0]}"; done; }; '
    'lk() { k0=; g=(); while IFS= read -r -d "" x; do k=${x%%"$T"*}; p=${x#*"$T"}; '
    'if [ "$k" != "$k0" ]; then fl; k0=$k; g=(); fi; g+=("$p"); done; fl; }; '
    'm() { find . -mindepth 1 -path "./$P" -prune -o ! -type s ! -type c ! -type b \\( '
    '-type l -printf "%P\\tl %l\\0" -o -type f \\( -links +1 -fprintf "$s/$1.ln" '
    '"%D:%i\\t%P\\0" -o -true \\) -printf "%P\\tf %s %m %Ts\\0" -o -printf '
    '"%P\\t%y %m %Ts\\0" \\) '
    '| sort -z -S 64M -T "$s" > "$s/$1.m" || exit 1; '
    'sort -z -S 64M -T "$s" -- "$s/$1.ln" | lk | sort -z -S 64M -T "$s" > "$s/$1.l" '
    '|| exit 1; sort -z -m -S 64M -T "$s" -- "$s/$1.m" "$s/$1.l" > "$s/$1"; }; '
    '(cd -- "$1" && m exp) || exit 66; (cd -- "$2" && m act) || exit 66; '
    '(cd -- "$1" && find . -mindepth 1 -type f -fprint0 "$3/files" \\( -size "+$5c" '
    '-fprint0 "$3/big" -o -true \\) -printf "%s\\n" '
    '| awk "{s += \\$1} END {printf \\"%d\\", s}") > "$3/bytes" || exit 1; '
    'comm -z -23 "$3/exp" "$3/act" > "$3/diff" || exit 1; '
    'sed -z -E "s/\\t(l .*|= .*|[fdp] [-0-9 ]+)\\$//" "$3/diff" | sort -z -u -T "$s" '
    '> "$3/badnames" || exit 1; '
    'n=$(tr -cd "\\0" < "$3/exp.m" | wc -c); bad=$(tr -cd "\\0" < "$3/badnames" | wc -c); '
    'split -t "\\0" -l "$4" -a 8 -d -- "$3/files" "$3/chunk-" || exit 1; '
    'chunks=$(find "$3" -maxdepth 1 -name "chunk-*" | wc -l); '
    'echo "META $n $(cat "$3/bytes") $bad $chunks"; head -z -n 5 "$3/diff" | base64 -w0; echo')
# Streamed verify: on every node, before hashing, write back and drop from its page
# cache the destination's ($1) big files listed in $2 (VERIFY_LIST's $3/big), as the
# listed verify does (DROP_CACHE is $3).
DROP_LISTED = PRELUDE + 'base64 -w0 < "$2" | bash -c "$3" bash "$1"'
# A hashing stream of the streamed verify, on any node: claim up to $4 chunks of the
# spool $3 by rename (claim name $5), hash the chunk's files with BLAKE2b-128 in the
# RAMDISK ($1) and at the destination ($2), sorted; names whose hash line the
# destination lacks differ in content, counted here only when VERIFY_LIST did not
# already (not in $3/badnames: one difference per object).
# Prints "<chunks> <files> <differing>" and the first five differing names (base64).
VERIFY_HASH = PRELUDE + (
    'n=0; f=0; bad=0; : > "$3/bad-$5"; for c in "$3"/chunk-*; do [ "$n" -lt "$4" ] || break; '
    '[ -e "$c" ] || continue; mine="$3/claimed-$5-${c##*/}"; '
    'mv -- "$c" "$mine" 2>/dev/null || continue; '
    '(cd -- "$1" && xargs -0 -r b2sum -l 128 -z -- < "$mine") | sort -z > "$mine.a" '
    '|| exit 1; (cd -- "$2" && xargs -0 -r b2sum -l 128 -z -- < "$mine" 2>/dev/null) '
    '| sort -z > "$mine.b"; comm -z -23 "$mine.a" "$mine.b" | while IFS= read -r -d "" x; '
    'do p=${x#*  }; grep -qzxF -- "${p#./}" "$3/badnames" || printf "%s\\0" "$x"; '
    'done >> "$3/bad-$5"; '
    'k=$(tr -cd "\\0" < "$mine" | wc -c); f=$((f + k)); n=$((n + 1)); '
    'rm -f -- "$mine" "$mine.a" "$mine.b"; done; '
    'bad=$(tr -cd "\\0" < "$3/bad-$5" | wc -c); echo "$n $f $bad"; '
    'head -z -n 5 "$3/bad-$5" | base64 -w0; echo; rm -f -- "$3/bad-$5"')

# Copy a list of non-directories with a tar pipe (hard links inside the list are kept,
# symlinks copied as links, sparse files kept sparse with -S).
TAR_PIPE = PRELUDE + (
    'base64 -d | tar -C "$1" --null --verbatim-files-from --no-recursion -T - $3 -cf - '
    '| tar -C "$2" -xpf -')

# Copy whole directories (the list names directories) with a recursive tar pipe: tar
# reads each directory and looks its entries up relative to it while holding it open,
# and a MooseFS client answers those lookups from that open directory: 2 master requests
# per file (open, chunk location) instead of 4 for a list of paths (measured, 10k files;
# docs/benchmarks.md#staging). The extracting tar sets directory modes and mtimes after
# their contents.
TREE_PIPE = PRELUDE + (
    'base64 -d | tar -C "$1" --null --verbatim-files-from -T - $3 -cf - '
    '| tar -C "$2" -xpf -')

# Copy a list of big regular files, one at a time: dd with the block size in $3, all-zero
# blocks seeked over (holes kept), then cp --attributes-only for mode and mtime. dd
# truncates first: a re-run after a crash is safe. The block size depends on which side
# is the RAMDISK (measured on a 4-node MooseFS RAMDISK, 2 GiB file, cold reads;
# docs/benchmarks.md#staging): writing into it favours big writes (bs=16M 403-465 MB/s,
# bs=128K 355-382, rsync 270-290), reading out of it small reads (bs=128K 324-407 MB/s,
# bs=64K 193-396, bs=256K 233-321, bs=1M 165-262, bs=16M 127-203), most likely as the
# kernel reads a FUSE file ahead only 128 KiB, asynchronously, while the reader is back
# for more: a 16 MiB read waits for all of it, then the 16 MiB write leaves the client
# idle.
# Writes never go through a symlink: dd opens with O_NOFOLLOW (a planted symlink fails
# the bucket), and cp, which would follow one, runs only on what dd wrote.
BIG = PRELUDE + (
    'cd -- "$1" || exit 66; base64 -d | xargs -0 -r -n 1 sh -c \''
    'dd if="$2" of="$0/$2" bs="$1" conv=sparse oflag=nofollow status=none && '
    '! [ -L "$0/$2" ] && '
    'cp --attributes-only --preserve=mode,timestamps -- "$2" "$0/$2"\' "$2" "$3"')
# The same list copied by rsync (``staging.copy_tool: rsync``): -a without the recursion
# --files-from turns off ($3 is "-r" for a bucket of whole directories), -H keeps hard
# links inside the list as the tar pipe does, -S keeps holes in big files. rsync writes
# each file under a temporary name and renames it: a planted symlink at the final name is
# replaced, never followed. $3 and $4 are rsync's own flags, never user data.
RSYNC = PRELUDE + ('base64 -d | rsync -aH --from0 --files-from=- $3 '
                   '-- "$1"/ "$2"/')
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
# either side), then cksum takes the CRC-32 and byte count of the chunk as the source
# returns it (the read side) and as the temporary file returns it (the write side),
# while both are still in this node's page cache: one line "<offset> <crc> <count> <crc>
# <count>" per chunk, compared by the engine (stripe.check_range). A source changed
# under the copy, a short or misplaced write, or a destination that returns other bytes
# than it was given fails the range. CRC-32 (cksum, ~2 GB/s per core here, b2sum ~0.45)
# catches accidents, not forgery; nobody else can write in the user's private 0700 part
# directory.
STRIPE_RANGE = PRELUDE + (
    'cd -- "$1" || exit 66; IFS= read -r -d "" p < <(base64 -d) || exit 1; '
    'o=$3; end=$(($3 + $4)); while [ "$o" -lt "$end" ]; do '
    'n=$((end - o)); [ "$n" -le "$6" ] || n=$6; '
    'dd if="$p" of="$2" iflag=nofollow,skip_bytes,count_bytes oflag=nofollow,seek_bytes '
    'skip="$o" seek="$o" count="$n" bs="$5" conv=notrunc,sparse status=none || exit $?; '
    'r=$(dd if="$p" iflag=nofollow,skip_bytes,count_bytes skip="$o" count="$n" bs=1M '
    'status=none | cksum) || exit $?; '
    'w=$(dd if="$2" iflag=nofollow,skip_bytes,count_bytes skip="$o" count="$n" bs=1M '
    'status=none | cksum) || exit $?; '
    'echo "$o $r $w"; o=$((o + n)); done')
CHUNK = 64 << 20  # bytes of a range checked at once (stays in the page cache)
# Place a striped file once every range passed: the source must still have the size and
# mtime (seconds) the scan saw ($4: "<size> <mtime>"; a file changed while it was copied
# is refused, the next run copies it again), its mode and mtime go onto the temporary
# file ($2), which is renamed to the final name below $3: rename(2) replaces whatever
# is there (a symlink too) whole, never writes through it.
STRIPE_PLACE = PRELUDE + (
    'cd -- "$1" || exit 66; IFS= read -r -d "" p < <(base64 -d) || exit 1; '
    'now=$(stat -c "%s %Y" -- "$p") || exit 1; [ "$now" = "$4" ] || { echo '
    '"$p changed while it was copied (size and mtime $now, expected $4)" >&2; exit 1; }; '
    '[ ! -L "$2" ] && cp --attributes-only --preserve=mode,timestamps -- "$p" "$2" '
    '&& mv -f -T -- "$2" "$3/$p"')
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
COPY_TOOLS = ("engine", "rsync", "custom")  # staging.copy_tool
# staging.copy_command (copy_tool: custom): the site's own copier of one bucket, run as
# the user on an RSA node in place of rsync above. Placeholders: {src} and {dst} (the
# source and destination roots: quoted positional arguments, never user text pasted
# into the program), {list} (the bucket's names, NUL-separated, relative to {src}, as
# a file the command reads: /dev/stdin), {recursive} ("-r" for a bucket of whole
# directories, else empty). The template itself comes from the root-owned config.
COPY_PLACEHOLDERS = {"src": '"$1"', "dst": '"$2"', "recursive": "$3", "list": "/dev/stdin"}


def check_copy_command(template: str) -> None:
    """Raise ValueError (one actionable line) unless ``template`` is a usable copier."""
    if not template.strip():
        raise ValueError("is not set: give the command that copies the names in {list} "
                         "from {src} to {dst}")
    names = set(re.findall(r"{([^{}]*)}", template))
    unknown = sorted(names - set(COPY_PLACEHOLDERS))
    if unknown:
        raise ValueError(f"unknown placeholder {{{unknown[0]}}}: use {{src}}, {{dst}}, "
                         "{list}, {recursive}")
    missing = [n for n in ("src", "dst", "list") if n not in names]
    if missing:
        raise ValueError(f"needs {{{missing[0]}}}: the command must copy the names in "
                         "{list} from {src} to {dst}")


def custom_program(template: str) -> str:
    """The bash program of ``copy_command``: the decoded list on the command's stdin."""
    check_copy_command(template)
    body = template
    for name, value in COPY_PLACEHOLDERS.items():
        body = body.replace("{" + name + "}", value)
    return PRELUDE + "base64 -d | { " + body + "; }"
BLOCK_INTO_RAMDISK = "16M"  # stage-in: dd writes into the RAMDISK
BLOCK_OUT_OF_RAMDISK = "128K"  # stage-out: dd reads out of the RAMDISK

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
# rename(2) replaces a symlink planted at the final name; it never follows it.
ATOMIC = PRELUDE + (
    'list=$(cat) || exit 1; rm -rf -- "$3" && mkdir -p -- "$3" || exit 1; prev=; '
    'printf %s "$list" | base64 -d | while IFS= read -r -d "" p; do d=${p%/*}; '
    '[ "$d" = "$prev" ] || mkdir -p -- "$3/$d" || exit 1; prev=$d; done || exit 1; '
    'printf %s "$list" | bash -c "$4" bash "$1" "$3" "$5" || exit $?; '
    'cd -- "$3" || exit 1; '
    'find . -type d ! -perm -u=rwx -exec chmod u+rwx -- {} + || exit 1; '
    'find . -type d -print0 | while IFS= read -r -d "" d; do '
    'find "$d" -mindepth 1 -maxdepth 1 ! -type d -print0 '
    '| xargs -0 -r mv -f -t "$2/$d" -- || exit 1; done || exit 1; '
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

# Hash a list of regular files (BLAKE2b-128, ~540 MB/s per core here).
HASH = PRELUDE + (
    'cd -- "$1" || exit 66; base64 -d | xargs -0 -r b2sum -l 128 -z -- | base64 -w0')

# Pack a list into one archive: POSIX (pax) format keeps sub-second mtimes and long or
# odd names; written to <archive>.part and renamed, so a re-run never leaves a torn file.
# The .part file is created afresh (rm, then noclobber: O_EXCL), so a symlink planted
# under that predictable name in a shared DATA_OUT is removed, never written through;
# the rename replaces one at the archive's own name.
FRESH = 'rm -f -- "$p.part" && set -C && '
TAR_PACK = PRELUDE + (
    'cd -- "$1" || exit 66; p=$2; ' + FRESH + 'base64 -d | tar --null '
    '--verbatim-files-from --no-recursion -T - --format=posix '
    '--pax-option=delete=atime,delete=ctime -S -cf - > "$p.part" '
    '&& mv -f -- "$p.part" "$p"')

# List an archive (parsed by manifest.parse_tar_listing).
TAR_LIST = PRELUDE + (
    'tar -tvf "$1" --full-time --quoting-style=c --numeric-owner | base64 -w0')

# Hash every regular member of an archive: <member>\0<hex>\0 per member.
TAR_HASH_MEMBER = ('h=$(b2sum -l 128) || exit 1; '
                   'printf "%s\\0%s\\0" "$TAR_FILENAME" "${h%% *}"')
TAR_HASH = PRELUDE + (
    'tar -xf "$1" --to-command="$2" | base64 -w0')

# Write stdin (base64) to a file atomically (a fresh .part file, as for TAR_PACK).
WRITE = PRELUDE + ('p=$1; ' + FRESH + 'base64 -d > "$p.part" && '
                   'mv -f -- "$p.part" "$p"')

# Root-only: the RAMDISK root of a job, owned by the user, private.
def prepare_root_argv(path: str, uid: int, gid: int, mode: int = 0o700) -> list[str]:
    return ["install", "-d", "-o", str(uid), "-g", str(gid), "-m", f"{mode:o}", "--", path]


def encode_list(paths: Iterable[bytes]) -> str:
    """stdin for the list-reading programs: base64 of ``./<path>\\0`` records."""
    return base64.b64encode(b"".join(b"./" + p + b"\0" for p in paths)).decode("ascii")


def decode_output(stdout: str) -> bytes:
    return base64.b64decode(stdout.strip() or b"")


def bash(program: str, *args: str) -> list[str]:
    return [BASH, "-c", program, "bash", *args]


def scan_argv(root: str, uid: int) -> list[str]:
    """Scan ``root`` as the user ``uid`` (objects owned by ``uid``: owner bits decide)."""
    return bash(SCAN, root, str(uid))


def scan_capped_argv(root: str, uid: int, limit: int) -> list[str]:
    """``scan_argv`` stopped after ``limit`` + 1 objects (more: use the streamed mode)."""
    return bash(SCAN_CAPPED, root, str(uid), str((limit + 1) * 10))


def stream_list_argv(src: str, spool: str, uid: int, chunk: int) -> list[str]:
    """List ``src`` into chunk files below ``spool`` (streamed mode; see STREAM_LIST)."""
    return bash(STREAM_LIST, src, spool, str(chunk), str(uid))


def stream_copy_argv(src: str, dst: str, spool: str, chunks: int, claim: str,
                     parts: str = "") -> list[str]:
    """Claim and copy up to ``chunks`` chunks of ``spool`` (``parts``: placed atomically
    through part directories below it); ``claim`` names this call (letters, digits, -)."""
    if not re.fullmatch(r"[A-Za-z0-9-]+", claim):
        raise ValueError(f"claim name {claim!r}: letters, digits and - only")
    return bash(STREAM_COPY, src, dst, spool, str(chunks), TAR_PIPE, claim,
                ATOMIC if parts else "", parts)


def stream_mkdirs_argv(spool: str, dst: str) -> list[str]:
    """Create every directory of the spool's list below ``dst`` (MKDIRS)."""
    return bash(STREAM_DIRS, spool, MKDIRS, dst)


def stream_dir_times_argv(spool: str, src: str, dst: str) -> list[str]:
    """Copy the listed directories' modes and mtimes from ``src`` to ``dst``, last."""
    return bash(STREAM_DIRS, spool, TAR_PIPE, src, dst, "")


def verify_list_argv(ram: str, dst: str, spool: str, chunk: int,
                     big_bytes: int = 0, skip: str = "") -> list[str]:
    """Compare the two trees' manifests on the node (streamed verify; VERIFY_LIST);
    files of at least ``big_bytes`` (0: none) are listed for :func:`drop_listed_argv`;
    ``skip``: a top-level name of ``dst`` left out of its walk (the spool's part
    directory)."""
    if "/" in skip or any(c in skip for c in "*?[\\"):
        raise ValueError(f"skip {skip!r}: one plain name")
    over = big_bytes - 1 if big_bytes > 0 else 1 << 62
    return bash(VERIFY_LIST, ram, dst, spool, str(chunk), str(over), skip or "/")


def drop_listed_argv(root: str, listing: str) -> list[str]:
    """DROP_CACHE of the files below ``root`` named in the NUL-separated file ``listing``
    (on the node: the streamed verify's list of big files)."""
    return bash(DROP_LISTED, root, listing, DROP_CACHE)


def verify_hash_argv(ram: str, dst: str, spool: str, chunks: int, claim: str) -> list[str]:
    """Claim and hash up to ``chunks`` chunks on both sides (streamed verify)."""
    if not re.fullmatch(r"[A-Za-z0-9-]+", claim):
        raise ValueError(f"claim name {claim!r}: letters, digits and - only")
    return bash(VERIFY_HASH, ram, dst, spool, str(chunks), claim)


def tar_pipe_argv(src: str, dst: str, *, sparse: bool = False,
                  recursive: bool = False) -> list[str]:
    """Copy the listed names (``recursive``: the listed directories, whole)."""
    return bash(TREE_PIPE if recursive else TAR_PIPE, src, dst, "-S" if sparse else "")


def rsync_argv(src: str, dst: str, *, sparse: bool = False,
               recursive: bool = False) -> list[str]:
    """Copy the listed names with rsync (``recursive``: the listed directories, whole)."""
    flags = " ".join(f for f, on in (("-r", recursive), ("-S", sparse)) if on)
    return bash(RSYNC, src, dst, flags)


def custom_argv(template: str, src: str, dst: str, *, recursive: bool = False) -> list[str]:
    """Copy the listed names with the site's ``copy_command``."""
    return bash(custom_program(template), src, dst, "-r" if recursive else "")


def big_block(phase: str) -> str:
    """dd's block size for big files: big writes into the RAMDISK (stage-in), small
    reads out of it (stage-out)."""
    if phase == "stage-in":
        return BLOCK_INTO_RAMDISK
    if phase == "stage-out":
        return BLOCK_OUT_OF_RAMDISK
    raise ValueError(f"phase {phase!r}: expected stage-in or stage-out")


def big_argv(src: str, dst: str, block: str = BLOCK_INTO_RAMDISK) -> list[str]:
    """Copy the listed big files with dd in ``block``-sized blocks (see ``big_block``)."""
    return bash(BIG, src, dst, block)


def atomic_argv(copier: Sequence[str], dst: str, part: str) -> list[str]:
    """Run a ``tar_pipe_argv``/``big_argv``/``rsync_argv`` copier into ``part``, then
    rename each listed
    name from ``part`` to its place below ``dst`` (stdin: the list, as for the copier)."""
    if copier[:2] != [BASH, "-c"] or len(copier) < 5:
        raise ValueError("atomic placement wraps a tar_pipe_argv or big_argv copier")
    program, src = copier[2], copier[4]
    extra = copier[6] if len(copier) > 6 else ""
    return bash(ATOMIC, src, dst, part, program, extra)


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


def stripe_place_argv(src: str, tmp: str, dst: str, size: int, mtime_s: int) -> list[str]:
    """Rename ``tmp`` to the name on stdin below ``dst`` once the source is unchanged."""
    return bash(STRIPE_PLACE, src, tmp, dst, f"{size} {mtime_s}")


def hash_range_argv(root: str, offset: int, length: int) -> list[str]:
    """BLAKE2b-128 of one range of the file named on stdin (below ``root``)."""
    return bash(HASH_RANGE, root, str(offset), str(length))


def drop_cache_argv(root: str) -> list[str]:
    """Write back and drop from this node's page cache the files listed on stdin."""
    return bash(DROP_CACHE, root)


def remove_tree_argv(path: str) -> list[str]:
    return ["rm", "-rf", "--", path]


def mkdirs_argv(root: str) -> list[str]:
    return bash(MKDIRS, root)


def hash_argv(root: str) -> list[str]:
    return bash(HASH, root)


def tar_pack_argv(root: str, archive: str) -> list[str]:
    return bash(TAR_PACK, root, archive)


def tar_list_argv(archive: str) -> list[str]:
    return bash(TAR_LIST, archive)


def tar_hash_argv(archive: str) -> list[str]:
    return bash(TAR_HASH, archive, TAR_HASH_MEMBER)


def write_argv(path: str) -> list[str]:
    return bash(WRITE, path)


def new_part_argv(root: str, job_id: str, token: str) -> list[str]:
    """As the user: remove the job's own leftover part directories below ``root``, then
    create ``part_dir(job_id, token)`` there, mode 0700 (fails if the name exists)."""
    return bash(NEW_PART, root, part_prefix(job_id), part_dir(job_id, token))


def mkdir_argv(path: str) -> list[str]:
    """The destination root, created as the user (fails if the user may not write)."""
    return bash(MKDIR, path)


def script_argv(argv: Sequence[str], cwd: str) -> list[str]:
    """A user's PRE/POSTPROCESS argv, started in ``cwd`` (the RAMDISK), no shell."""
    if not argv:
        raise ValueError("empty PREPROCESS/POSTPROCESS argv")
    return ["env", "-C", cwd, "--", *argv]
