"""The copiers of one bucket: tar pipes, dd for big files, rsync, the site's own command.

Owns ``TAR_PIPE`` (a list of names), ``TREE_PIPE`` (whole directories), ``BIG`` (dd with
a block size per direction: ``big_block``), ``RSYNC`` (``staging.copy_tool: rsync``), the
``copy_command`` template of ``staging.copy_tool: custom`` (``COPY_TOOLS``,
``COPY_PLACEHOLDERS``, :func:`check_copy_command`, :func:`custom_program`) and their argv
builders. Each reads its bucket's list on stdin (``shell.encode_list``). Also the
programs of a stage-in's settle check of its big files (``SETTLE_STAT``, parsed by
:func:`parse_settle`, ``COMPARE`` and ``DISCARD``; and ``UNCHECKED``, the list of those
not checked yet; ``treecopy.TreeCopy._settle``).

Pure: builds lists, runs nothing. Imports only ``shell``.
"""

from __future__ import annotations

import base64
import re

from rsa_scheduler.staging.scripts.shell import PRELUDE, bash

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
# blocks seeked over (holes kept), then cp --attributes-only for mode and mtime. An
# earlier copy is removed first (it has its source's mode, maybe read-only, which dd
# could not open for writing): a re-run after a crash is safe. The block size depends on
# which side is the RAMDISK (measured on a 4-node MooseFS RAMDISK, 2 GiB file, cold reads;
# docs/benchmarks.md#staging): writing into it favours big writes (bs=16M 403-465 MB/s,
# bs=128K 355-382, rsync 270-290), reading out of it small reads (bs=128K 324-407 MB/s,
# bs=64K 193-396, bs=256K 233-321, bs=1M 165-262, bs=16M 127-203), most likely as the
# kernel reads a FUSE file ahead only 128 KiB, asynchronously, while the reader is back
# for more: a 16 MiB read waits for all of it, then the 16 MiB write leaves the client
# idle.
# Writes never go through a symlink: dd opens with O_NOFOLLOW (a planted symlink fails
# the bucket), and cp, which would follow one, runs only on what dd wrote.
# First the node drops what its page cache holds of the source (a client keeps its cache
# across opens while the file's attributes look unchanged: a same-second rewrite by
# another client would be read back stale). A source that changed while it was copied
# (written to by someone during the stage-in: its device, inode, size, mtime or ctime,
# to the nanosecond where the filesystem keeps them, differ after the copy from before
# it) would be a torn copy carrying the source's final mtime, which a resume's quick
# check keeps: the copy is removed (a resume copies it again) and made again, at most
# BIG_TRIES times; then the bucket fails
# naming the file on stderr (the copy's own exit CHANGED_EXIT reaches xargs, which then
# exits 123: the bucket fails as any failed copy does; the stage-in is retried later).
BIG_TRIES = 3
CHANGED_EXIT = 75
BIG = PRELUDE + (
    'cd -- "$1" || exit 66; base64 -d | xargs -0 -r -n 1 sh -c \''
    'st() { stat -c "%d %i %s %y %z" -- "$1"; }; n=0; while :; do '
    'dd if="$2" iflag=nocache count=0 status=none 2>/dev/null; b=$(st "$2") && '
    '{ [ -L "$0/$2" ] || [ ! -f "$0/$2" ] || rm -f -- "$0/$2"; } && '
    'dd if="$2" of="$0/$2" bs="$1" conv=sparse oflag=nofollow status=none && '
    '! [ -L "$0/$2" ] && '
    'cp --attributes-only --preserve=mode,timestamps -- "$2" "$0/$2" && '
    'a=$(st "$2") || exit 1; [ "$a" = "$b" ] && exit 0; '
    'rm -f -- "$0/$2" || exit 1; n=$((n + 1)); '
    f'[ "$n" -lt {BIG_TRIES} ] || {{ printf "rsa: %s changed while it was copied, '
    f'%s times: not staged\\n" "$2" "$n" >&2; exit {CHANGED_EXIT}; }}; '
    'done\' "$2" "$3"')
# The settle check of a stage-in's big files (``treecopy.TreeCopy._settle``): the node's
# clock (epoch seconds, to the nanosecond), then one line "<inode> <size> <mtime> <ctime>"
# (seconds) per listed name, in order, of the name itself (never through a symlink:
# lstat), or "-" for a name that is gone or cannot be read.
SETTLE_STAT = PRELUDE + (
    'cd -- "$1" || exit 66; date +%s.%N || exit 1; base64 -d | while IFS= read -r -d "" p; do '
    'stat --printf "%i %s %Y %Z\\n" -- "$p" 2>/dev/null || echo -; done')
# Compare each listed source (below $1) with its copy (below $2), both read afresh (each
# file's pages dropped from this node's cache first), as ``cmp``: one line per name,
# "same", "differs", or "-" where either cannot be read.
COMPARE = PRELUDE + (
    'cd -- "$1" || exit 66; base64 -d | while IFS= read -r -d "" p; do '
    'dd if="$p" iflag=nocache count=0 status=none 2>/dev/null; '
    'dd if="$2/$p" iflag=nocache,nofollow count=0 status=none 2>/dev/null; '
    'cmp -s -- "$p" "$2/$p"; case $? in 0) echo same;; 1) echo differs;; *) echo -;; esac; '
    'done')
# The list of a stage-in's big files whose copies the settle check has not passed yet
# (``treecopy.TreeCopy._settle``), kept below the destination root as
# ``placement.unchecked_name`` from before the first copy until the check concluded: a
# stage-in killed, cancelled or failed meanwhile leaves it, and the next run copies those
# files again whatever its quick check says (a torn copy can carry the source's size and
# mtime). Written with ``archives.WRITE`` (a fresh .part file renamed over it); read here
# as base64 (nothing when absent; never through a symlink).
UNCHECKED = PRELUDE + ('[ -f "$1" ] && [ ! -L "$1" ] || exit 0; base64 -w0 < "$1"')
# Remove the listed copies (a resume's quick check then copies them again): regular
# files only, the name itself (never what a symlink points to), below $1. Removed, not
# truncated: a copy has its source's mode, often read-only, which its user cannot open
# for writing.
DISCARD = PRELUDE + (
    'cd -- "$1" || exit 66; base64 -d | while IFS= read -r -d "" p; do '
    'if [ -f "$p" ] && [ ! -L "$p" ]; then rm -f -- "$p" || exit 1; fi; done')
# The same list copied by rsync (``staging.copy_tool: rsync``): -a without the recursion
# --files-from turns off ($3 is "-r" for a bucket of whole directories), -H keeps hard
# links inside the list as the tar pipe does, -S keeps holes in big files. rsync writes
# each file under a temporary name and renames it: a planted symlink at the final name is
# replaced, never followed. $3 and $4 are rsync's own flags, never user data.
RSYNC = PRELUDE + ('base64 -d | rsync -aH --from0 --files-from=- $3 '
                   '-- "$1"/ "$2"/')
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


def settle_stat_argv(root: str) -> list[str]:
    """The node's clock, then (inode, size, mtime, ctime) of each name listed below
    ``root`` (``parse_settle``)."""
    return bash(SETTLE_STAT, root)


def discard_argv(root: str) -> list[str]:
    """Remove the regular files listed below ``root`` (never through a symlink)."""
    return bash(DISCARD, root)


def unchecked_argv(path: str) -> list[str]:
    """What the unchecked list at ``path`` holds (``parse_unchecked``)."""
    return bash(UNCHECKED, path)


def parse_unchecked(stdout: str) -> set[bytes]:
    """``UNCHECKED``'s output: the names it lists (``encode_list``'s records)."""
    raw = base64.b64decode(stdout.strip() or b"")
    return {r[2:] if r.startswith(b"./") else r for r in raw.split(b"\0") if r}


def parse_settle(stdout: str, count: int
                 ) -> tuple[float, list[tuple[int, int, int, int] | None]]:
    """``SETTLE_STAT``'s output for ``count`` names: the node's clock, and per name
    (inode, size, mtime, ctime) or None (gone or unreadable)."""
    lines = stdout.splitlines()
    if len(lines) != count + 1 or re.fullmatch(r"\d+(\.\d+)?", lines[0].strip()) is None:
        raise ValueError(f"expected the clock and {count} lines, got {stdout[:200]!r}")
    out: list[tuple[int, int, int, int] | None] = []
    for line in lines[1:]:
        m = re.fullmatch(r"(\d+) (\d+) (-?\d+) (-?\d+)", line.strip())
        if m is None and line.strip() != "-":
            raise ValueError(f"unexpected stat line {line[:200]!r}")
        out.append(None if m is None
                   else (int(m[1]), int(m[2]), int(m[3]), int(m[4])))
    return float(lines[0]), out


def compare_argv(src: str, dst: str) -> list[str]:
    """Compare the listed names below ``src`` with their copies below ``dst`` (one line
    each: "same", "differs" or "-")."""
    return bash(COMPARE, src, dst)
