"""The streamed mode's programs: a tree too large to list in rsad, listed on the nodes.

Owns ``STREAM_LIST`` (the source sorted into chunk files of a spool), ``STREAM_COPY`` (a
stream claiming and copying chunks), ``STREAM_DIRS`` (the directory list into a program),
and the streamed verify: ``VERIFY_LIST`` (both trees' manifests compared on the node),
``DROP_LISTED`` and ``VERIFY_HASH`` (a stream claiming and hashing chunks); their argv
builders. ``staging.stream`` drives them (docs/staging.md#streamed-mode).

Pure: builds lists, runs nothing. Imports ``shell`` and, for the programs it hands on,
``copiers``, ``placement`` and ``manifests``.
"""

from __future__ import annotations

import re

from rsa_scheduler.staging.scripts.copiers import TAR_PIPE
from rsa_scheduler.staging.scripts.manifests import DROP_CACHE, DROP_HASH
from rsa_scheduler.staging.scripts.placement import ATOMIC, MKDIRS
from rsa_scheduler.staging.scripts.shell import PRELUDE, bash

# Streamed mode (a tree above staging's list limit; docs/staging.md#streamed-mode): the
# node lists the tree itself, never rsad. One find over the source ($1) sorts every
# object into NUL-separated lists in the spool directory $2 (below the destination's
# part directory, which every RSA node mounts): objects the user cannot read (the scan's
# rules; $4 is the user's uid), directories, sockets and devices (skipped), files with
# other hard links (one tar for all of them: links stay links), everything else; sizes
# summed by awk. Then split cuts the list into chunks of $3 names, which the streams of
# every node claim by rename (bytes: regular files' only, as the listed mode counts them).
# Prints "BAD <count>" and the first five names (base64) if
# anything is unreadable, else "LIST <files> <linked> <dirs> <skipped> <bytes> <chunks>
# <occupied>" and the first five skipped names; <occupied> is 0 when the destination $5
# holds nothing but the part directory $6 (a fresh copy: nothing to resume, the streams
# need not look), else 1. Memory: constant (find, split, awk stream; the lists are
# files).
STREAM_LIST = PRELUDE + (
    'cd -- "$1" || exit 66; mkdir -m 700 -- "$2" || exit 1; '
    'find . -mindepth 1 \\( -type l -o -uid "$4" \\( -type d -perm -u=rx -o \\! -type d '
    '-perm -u=r \\) -o \\! \\( \\( -type d -o -type f \\) \\! -readable -o -type d \\! '
    '-executable \\) \\) \\( -type d -fprint0 "$2/dirs" -o \\( -type s -o -type c -o -type b '
    '\\) -fprint0 "$2/skipped" -o -type f -links +1 -fprint0 "$2/linked" -fprintf '
    '"$2/sizes" "%s\\n" -o -fprint0 "$2/files" \\( -type f -fprintf "$2/sizes" "%s\\n" '
    '-o -true \\) \\) -o -fprint0 '
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
    'o=$(find "$5" -mindepth 1 -maxdepth 1 ! -name "$6" -printf 1 -quit) || o=1; '
    'echo "LIST $files $linked $dirs $skipped $bytes $chunks ${o:-0}"; '
    'head -z -n 5 "$2/skipped" | base64 -w0; echo')
# Resume in streamed mode, rsync's quick check as the listed mode's (plan.pending): one
# record per name of a list on stdin (NUL-separated ./names), below the current
# directory, never following a symlink (find -P: a symlink is "l <target>" whatever it
# points to): "<name>\t<f <size> <mtime s>|l <target>|<type>>", the name and the rest
# each escaped (\ -> \b, tab -> \t, newline -> \n: one tab per record, no newline, so
# any byte survives and equal records mean equal objects), sorted; a missing name has
# no record. Functions of STREAM_COPY: $sp is its spool, where sort spills.
QUICK_CHECK = (
    r"""qc() { xargs -0 -r sh -c 'exec find -P "$@" -maxdepth 0 \( -type f -printf """
    r""""%p\0f %s %Ts\0" -o -type l -printf "%p\0l %l\0" -o -printf "%p\0%y\0" \)' sh """
    r"""| sed -z -e 's/\\/\\b/g' -e 's/\t/\\t/g' -e 's/\n/\\n/g' """
    r"""| paste -z -d '\t' - - | sort -z -T "$sp"; }; """
    r"""qn() { sed -z -e 's/\t.*//' -e 's/\\n/\n/g' -e 's/\\t/\t/g' -e 's/\\b/\\/g'; }; """)
# A stream of the streamed mode, on any node: claim up to $4 chunks of the spool $3 (a
# rename to a name of this call's own, $6: one claimant wins); when $9 is set (resume),
# drop from the chunk the names whose destination already holds the same object as the
# source (QUICK_CHECK of both sides, comm: what the destination lacks is copied; any
# error reading the destination only means more is copied) and sum the sizes of both
# parts; then copy the rest from $1 to $2 with the copier program $5 (the list on its
# stdin, as for a bucket; -S: holes kept) or, when $7 is set, with the atomic placement
# program $7 into a part directory below $8, and delete the chunk. The hard-linked list
# (chunk-linked) is always copied whole (only its sizes are read). Prints "<chunks>
# <files copied> <their bytes> <files already there> <their bytes>" ("0 0 0 0 0":
# nothing left; bytes copied "-" without resume: not read).
STREAM_COPY = PRELUDE + QUICK_CHECK + (
    'sp=$3; cnt() { tr -cd "\\0" < "$1" | wc -c; }; '
    'sz() { sed -z -n "s/^.*\\tf \\([0-9]*\\) [-0-9]*\\$/\\1/p" "$1" | tr "\\0" "\\n" '
    '| awk "{s += \\$1} END {printf \\"%d\\", s}"; }; '
    'n=0; f=0; fb=0; a=0; ab=0; [ -n "$9" ] || fb=-; '
    'for c in "$3"/chunk-*; do [ "$n" -lt "$4" ] || break; [ -e "$c" ] || continue; '
    'mine="$3/claimed-$6-${c##*/}"; mv -- "$c" "$mine" 2>/dev/null || continue; '
    'todo=$mine; k=$(cnt "$mine") || exit 1; '
    'if [ -n "$9" ]; then (cd -- "$1" && qc < "$mine") > "$mine.s" || exit 1; '
    'if [ "${c##*/}" = chunk-linked ]; then : > "$mine.d"; '
    'else { (cd -- "$2" && qc < "$mine") 2>/dev/null; true; } > "$mine.d" || exit 1; fi; '
    'comm -z -12 "$mine.s" "$mine.d" > "$mine.same" && '
    'comm -z -23 "$mine.s" "$mine.d" > "$mine.new" || exit 1; '
    '[ "${c##*/}" = chunk-linked ] || { qn < "$mine.new" > "$mine.todo" && todo=$mine.todo; } '
    '|| exit 1; s=$(cnt "$mine.same") && t=$(cnt "$mine.new") && b=$(sz "$mine.same") && '
    'tb=$(sz "$mine.new") || exit 1; '
    '[ $((s + t)) = "$k" ] || { echo "quick check of $c: $s + $t of $k names" >&2; '
    'exit 1; }; k=$t; a=$((a + s)); ab=$((ab + b)); fb=$((fb + tb)); fi; '
    'if [ "$k" = 0 ]; then :; '
    'elif [ -n "$7" ]; then base64 -w0 < "$todo" | bash -c "$7" bash "$1" "$2" '
    '"$8/$6-${c##*/}" "$5" -S || exit $?; '
    'else base64 -w0 < "$todo" | bash -c "$5" bash "$1" "$2" -S || exit $?; fi; '
    'f=$((f + k)); n=$((n + 1)); rm -f -- "$mine" "$mine".*; '
    'done; echo "$n $f $fb $a $ab"')
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
# <bytes> <differing objects> <chunks> <files in the chunks>" and the first five
# differing lines (base64): rsad checks that the hashing streams claimed every chunk.
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
    'files=$(tr -cd "\\0" < "$3/files" | wc -c); '
    'echo "META $n $(cat "$3/bytes") $bad $chunks $files"; head -z -n 5 "$3/diff" '
    '| base64 -w0; echo')
# Streamed verify: on every node, before hashing, write back and drop from its page
# cache the destination's ($1) big files listed in $2 (VERIFY_LIST's $3/big), as the
# listed verify does (DROP_CACHE is $3).
DROP_LISTED = PRELUDE + 'base64 -w0 < "$2" | bash -c "$3" bash "$1"'
# A hashing stream of the streamed verify, on any node: claim up to $4 chunks of the
# spool $3 by rename (claim name $5), hash the chunk's files with BLAKE2b-128 in the
# RAMDISK ($1) and at the destination ($2), sorted; names whose hash line the
# destination lacks differ in content, counted here only when VERIFY_LIST did not
# already (not in $3/badnames: one difference per object). The destination's side is
# hashed by $6 (manifests.DROP_HASH: each file dropped from this node's page cache
# first) after a syncfs of its filesystem, as the listed verify does; a name missing
# there only differs (b2sum fails: xargs 123), a file that cannot be dropped (124)
# fails the command.
# Prints "<chunks> <files> <differing>" and the first five differing names (base64).
VERIFY_HASH = PRELUDE + (
    'n=0; f=0; bad=0; : > "$3/bad-$5"; for c in "$3"/chunk-*; do [ "$n" -lt "$4" ] || break; '
    '[ -e "$c" ] || continue; mine="$3/claimed-$5-${c##*/}"; '
    'mv -- "$c" "$mine" 2>/dev/null || continue; '
    '(cd -- "$1" && xargs -0 -r b2sum -l 128 -z -- < "$mine") | sort -z > "$mine.a" '
    '|| exit 1; (cd -- "$2" || exit 66; sync -f -- . || exit 1; xargs -0 -r sh -c "$6" sh '
    '< "$mine" 2>/dev/null; [ $? != 124 ]) | sort -z > "$mine.b" || exit 1; '
    'comm -z -23 "$mine.a" "$mine.b" | while IFS= read -r -d "" x; '
    'do p=${x#*  }; grep -qzxF -- "${p#./}" "$3/badnames" || printf "%s\\0" "$x"; '
    'done >> "$3/bad-$5"; '
    'k=$(tr -cd "\\0" < "$mine" | wc -c); f=$((f + k)); n=$((n + 1)); '
    'rm -f -- "$mine" "$mine.a" "$mine.b"; done; '
    'bad=$(tr -cd "\\0" < "$3/bad-$5" | wc -c); echo "$n $f $bad"; '
    'head -z -n 5 "$3/bad-$5" | base64 -w0; echo; rm -f -- "$3/bad-$5"')


def stream_list_argv(src: str, spool: str, uid: int, chunk: int, dst: str,
                     part: str) -> list[str]:
    """List ``src`` into chunk files below ``spool`` (streamed mode; see STREAM_LIST);
    ``dst`` holding nothing but its top-level name ``part`` is reported fresh."""
    if not part or "/" in part or any(c in part for c in "*?[\\"):
        raise ValueError(f"part {part!r}: one plain name")
    return bash(STREAM_LIST, src, spool, str(chunk), str(uid), dst, part)


def stream_copy_argv(src: str, dst: str, spool: str, chunks: int, claim: str,
                     parts: str = "", *, resume: bool = False) -> list[str]:
    """Claim and copy up to ``chunks`` chunks of ``spool`` (``parts``: placed atomically
    through part directories below it); ``claim`` names this call (letters, digits, -);
    ``resume``: names already complete at ``dst`` are not copied again."""
    if not re.fullmatch(r"[A-Za-z0-9-]+", claim):
        raise ValueError(f"claim name {claim!r}: letters, digits and - only")
    return bash(STREAM_COPY, src, dst, spool, str(chunks), TAR_PIPE, claim,
                ATOMIC if parts else "", parts, "1" if resume else "")


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
    return bash(VERIFY_HASH, ram, dst, spool, str(chunks), claim, DROP_HASH)
