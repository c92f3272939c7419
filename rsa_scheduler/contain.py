"""Containment of the user processes rsad starts on RSA nodes.

Owns the two fixed shell programs and their pure argv builders:

* :data:`CONTAIN` wraps every command run as a job's user (staging copies, PREPROCESS,
  POSTPROCESS). As root, before dropping to the user, it puts itself into a fresh leaf
  cgroup ``rsa.jobs/<job>/p<pid>`` of the node's cgroup v2 hierarchy, runs the command,
  and when the command is over kills whatever the command left in that leaf (a daemon a
  POSTPROCESS started with ``setsid``, a ``nohup`` child) and removes the leaf. A user
  process cannot leave its cgroup: that takes a write to a root-owned ``cgroup.procs``.
* :data:`REAP` is run as root on every RSA node of a job before its filesystem is
  destroyed: it kills every process in the job's cgroup subtree (``cgroup.kill``, or
  freeze-kill-thaw on kernels before 5.14) and removes it.
* :data:`FENCE` is run as root on a node before a newly started rsad runs anything as a
  user there: it kills every command an earlier rsad left running (every leaf of every
  job), so a stale copy can never write after the new rsad re-issued its action.

REAP and FENCE each leave a tombstone before they kill: the time rsad asked for them, in
:data:`TOMBS` on the node (``<job>`` for REAP, ``.all`` for FENCE). CONTAIN is handed the
time rsad issued its command; after it joined the job's cgroup and before it runs
anything as the user, it refuses to run when a tombstone of its job (or ``.all``) is as
new as that or newer. So a command still in CONTAIN's root prelude when its job was
reaped (not yet in a cgroup REAP could see, or still root's, which the environment
fallback spares) can never run the user's command after the reap: either it joined the
cgroup before the tombstone was written and the kill that follows finds it, or it reads
the tombstone and stops. A command rsad issues after the reap (a retry) runs. Both times
are rsad's clock, never the node's.

Every command run as a user also gets, from :data:`CONTAIN` and as root before it drops
to the user, a mount and IPC namespace of its own (:data:`PRIVATE`): ``/tmp``,
``/var/tmp`` and ``/dev/shm`` are one fresh tmpfs of ``staging.private_tmp`` bytes
(private to the command, gone with its last process), and SysV IPC objects and POSIX
message queues live in the namespace and die with it. Nothing the command writes outside
the RAMDISK survives it on the node, and what it writes there while it runs is bounded
(docs/security.md, "Leftovers on RSA nodes"). Everything else of the node (the RAMDISK
mounts, the PFS) is seen as before; mounts made on the node later still propagate in
(``slave``).

Without a writable cgroup v2 hierarchy on a node (a v1-only host, a container without
cgroupns write access) commands still run, and :data:`REAP` falls back to the
environment tag ``RSA_SCOPE=<job>`` every such command carries: it kills the non-root
processes whose environment holds the tag. That is best effort (a process can exec with
a scrubbed environment) and says so in its output; docs/security.md lists it.

Pure but for :func:`issued_now` (the clock read callers stamp a command with): builds
strings and lists, runs nothing.
"""

from __future__ import annotations

import re
import time

#: the cgroup (below the cgroup v2 root) under which each job's subtree lives
CGROUP_TOP = "rsa.jobs"
#: environment variable every contained command carries (the fallback's tag)
SCOPE_ENV = "RSA_SCOPE"
#: what REAP prints, then the number of processes it signalled and how
REAPED_MARK = "RSA-REAPED"
#: what FENCE prints, then the number of processes it signalled
FENCED_MARK = "RSA-FENCED"
#: the node's directory of tombstones (root's; /run: gone at boot, as every command is)
TOMBS = "/run/rsa-reap"
#: what CONTAIN prints (stderr) when its job was reaped after its command was issued
REAPED_BEFORE = "RSA-REAPED-BEFORE-START"
#: a tombstone older than this many minutes is removed by FENCE (no command waits so long
#: in CONTAIN's prelude)
TOMB_MINUTES = 1440

_SCOPE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_+.-]{0,63}")

# Field 5 of /proc/self/mountinfo is the mount point; the file system type follows the
# "-" separator (the optional fields before it vary in number).
_CG_ROOT = ("r=$(awk '{for(i=7;i<=NF;i++) if($i==\"-\"){if($(i+1)==\"cgroup2\")"
            "{print $5; exit} break}}' /proc/self/mountinfo); ")

# Kill everything in cgroup "$k" and wait (at most 5 s) until it is empty.
_KILL_CG = (
    'if [ -e "$k/cgroup.kill" ]; then echo 1 > "$k/cgroup.kill"; '
    'else echo 1 > "$k/cgroup.freeze" 2>/dev/null; '
    '  for q in $(find "$k" -name cgroup.procs -exec cat {} +); do kill -9 "$q" '
    '2>/dev/null; done; echo 0 > "$k/cgroup.freeze" 2>/dev/null; fi; '
    'i=0; while grep -q "populated 1" "$k/cgroup.events" 2>/dev/null && [ $i -lt 100 ]; '
    'do sleep 0.05; i=$((i+1)); done; ')

# Write tombstone "$w" (a name: the job's scope or .all) holding time "$t", atomically.
_TOMB = ('mkdir -p -m 0700 ' + TOMBS + ' && echo "$t" > "' + TOMBS + '/.$w.$$" && '
         'mv -f "' + TOMBS + '/.$w.$$" "' + TOMBS + '/$w" || '
         '{ echo "cannot write the tombstone ' + TOMBS + '/$w" >&2; exit 1; }; ')

# Refuse (exit 125) when a tombstone of job "$s" or .all is as new as "$i" (the time the
# command was issued); leaves and removes leaf "$d/p$$" first when it joined one.
_CHECK_TOMB = (
    'for w in "$s" .all; do v=; read -r v 2>/dev/null < "' + TOMBS + '/$w" || true; '
    '  case $v in ""|*[!0-9]*) continue;; esac; '
    '  if [ "$v" -ge "$i" ]; then '
    '    echo "' + REAPED_BEFORE + ': job $s'"'"'s commands on $(hostname) were killed after '
    'this one was issued ($w at $v, issued at $i); not run" >&2; '
    '    if [ -n "$d" ]; then echo $$ > "$d/cgroup.procs"; rmdir "$d/p$$" 2>/dev/null; fi; '
    '    exit 125; fi; done; ')

#: default size (bytes; ``staging.private_tmp``) and inode cap of the one tmpfs a contained
#: command sees as ``/tmp``, ``/var/tmp`` and ``/dev/shm`` (its pages are RAM the node's
#: pool does not count: keep it small; a script that needs more scratch space has
#: ``$RSA_RAMDISK``, its own)
PRIVATE_SIZE = 1 << 30
PRIVATE_INODES = 65536
#: what a command that cannot get its private directories prints before it fails
PRIVATE_FAILED = "RSA-PRIVATE-FAILED"

#: argv: unshare --mount --ipc --propagation slave -- sh -c PRIVATE NAME SIZE CMD... (as root,
#: inside the new namespaces): one fresh tmpfs on /tmp, a directory of it bound on
#: /var/tmp, one on /dev/shm, one on /tmp itself (over the tmpfs's root, which holds only
#: the three); a fresh mqueue on /dev/mqueue where the node has one. Every path here is
#: root's (the user's command has not run yet); a set-up that fails fails the command,
#: with one line on stderr.
PRIVATE = (
    'z=$1; shift; { mount -t tmpfs -o "size=$z",nr_inodes=' + str(PRIVATE_INODES) +
    ',mode=0755,nosuid,nodev "$0" /tmp && mkdir -m 1777 /tmp/.t /tmp/.v /tmp/.s '
    '&& mount --bind /tmp/.v /var/tmp && mount --bind /tmp/.s /dev/shm '
    '&& mount --bind /tmp/.t /tmp '
    '&& { [ ! -d /dev/mqueue ] || mount -t mqueue -o nosuid,nodev,noexec "$0" /dev/mqueue; }; '
    '} || { echo "' + PRIVATE_FAILED + ': cannot give the command a private /tmp, /var/tmp '
    'and /dev/shm on $(hostname) (see the lines above); not run" >&2; exit 125; }; '
    'exec "$@"')

# "$@" in new mount and IPC namespaces, its private directories made (PRIVATE has no ').
_UNSHARED = ("unshare --mount --ipc --propagation slave -- sh -c '" + PRIVATE +
             "' rsa-private \"$z\" \"$@\"")

#: argv: sh -c CONTAIN UMASK SCOPE SIZE ISSUED CMD... (run as root; CMD switches to the
#: user; SIZE: bytes of its private tmpfs; ISSUED: rsad's time, µs, the command was issued)
CONTAIN = (
    'u=$0; s=$1; z=$2; i=$3; shift 3; d=; ' + _CG_ROOT +
    'if [ -n "$r" ] && mkdir -p -- "$r/' + CGROUP_TOP + '/$s/p$$" 2>/dev/null '
    '&& echo $$ > "$r/' + CGROUP_TOP + '/$s/p$$/cgroup.procs" 2>/dev/null; '
    'then d="$r/' + CGROUP_TOP + '/$s"; fi; ' + _CHECK_TOMB +
    'echo "RSA-PGID $$"; umask "$u"; cd /; '
    '[ -n "$d" ] || exec ' + _UNSHARED + '; ' + _UNSHARED + '; rc=$?; '
    # leave the leaf (the job's cgroup has no controllers enabled: it may hold us), then
    # kill what the command left behind and remove the leaf
    'echo $$ > "$d/cgroup.procs"; k="$d/p$$"; ' + _KILL_CG +
    'rmdir "$k" 2>/dev/null; exit $rc')

#: argv: sh -c KILL_LEAF SCOPE PGID (run as root): what one command left, after it was
#: killed by its process group (timeout, cancel)
KILL_LEAF = (
    's=$0; ' + _CG_ROOT + '[ -n "$r" ] || exit 0; k="$r/' + CGROUP_TOP + '/$s/p$1"; '
    '[ -d "$k" ] || exit 0; ' + _KILL_CG + 'rmdir "$k" 2>/dev/null; exit 0')

#: argv: sh -c REAP SCOPE TIME (run as root; TIME: rsad's, µs, for the tombstone)
REAP = (
    's=$0; t=$1; w=$s; n=0; ' + _TOMB + _CG_ROOT +
    'if [ -n "$r" ] && [ -d "$r/' + CGROUP_TOP + '/$s" ]; then k="$r/' + CGROUP_TOP + '/$s"; '
    '  n=$(find "$k" -name cgroup.procs -exec cat {} + | wc -l); ' + _KILL_CG +
    '  left=$(find "$k" -name cgroup.procs -exec cat {} + | wc -l); '
    '  find "$k" -depth -mindepth 1 -type d -exec rmdir {} + 2>/dev/null; rmdir "$k"; '
    '  echo "' + REAPED_MARK + ' $n cgroup $left"; exit 0; fi; '
    # no cgroup of this job: the environment tag (processes that kept it, never root's)
    'for e in /proc/[0-9]*/environ; do p=${e#/proc/}; p=${p%/environ}; '
    '  [ "$p" = $$ ] && continue; '
    '  if tr "\\0" "\\n" < "$e" 2>/dev/null | grep -qxF "' + SCOPE_ENV + '=$s"; then '
    '    [ "$(stat -c %u "/proc/$p" 2>/dev/null)" = 0 ] && continue; '
    '    kill -9 "$p" 2>/dev/null && n=$((n+1)); fi; done; '
    'echo "' + REAPED_MARK + ' $n environment 0"')


#: argv: sh -c FENCE TIME (run as root; TIME: rsad's, µs, for the tombstone .all)
FENCE = (
    't=$0; w=.all; n=0; ' + _TOMB +
    'find ' + TOMBS + ' -maxdepth 1 -type f -mmin +' + str(TOMB_MINUTES) +
    ' -delete 2>/dev/null; ' + _CG_ROOT +
    'if [ -n "$r" ] && [ -d "$r/' + CGROUP_TOP + '" ]; then '
    '  for k in "$r"/' + CGROUP_TOP + '/*/p*; do [ -d "$k" ] || continue; '
    '    n=$((n + $(wc -l < "$k/cgroup.procs"))); ' + _KILL_CG +
    '    rmdir "$k" 2>/dev/null; done; fi; '
    # commands of a node without a writable cgroup hierarchy carry only the tag
    'for e in /proc/[0-9]*/environ; do p=${e#/proc/}; p=${p%/environ}; '
    '  [ "$p" = $$ ] && continue; '
    '  if tr "\\0" "\\n" < "$e" 2>/dev/null | grep -q "^' + SCOPE_ENV + '="; then '
    '    [ "$(stat -c %u "/proc/$p" 2>/dev/null)" = 0 ] && continue; '
    '    kill -9 "$p" 2>/dev/null && n=$((n+1)); fi; done; '
    'echo "' + FENCED_MARK + ' $n"')


def check_scope(scope: str) -> str:
    """A job's containment scope: its Slurm job id (``123``, ``123_4``, ``123+1``)."""
    if not _SCOPE_RE.fullmatch(scope) or ".." in scope:
        raise ValueError(f"bad containment scope {scope!r}: expected a Slurm job id")
    return scope


def issued_now() -> int:
    """rsad's time now in µs: what a command is stamped with when it is issued, and what
    REAP and FENCE write in their tombstones (the one clock read of this module)."""
    return time.time_ns() // 1000


def contain_argv(scope: str, umask: str, argv: list[str],
                 private_tmp: int = PRIVATE_SIZE, *, issued: int) -> list[str]:
    """``argv`` (which switches to the user itself) wrapped to run in the job's cgroup,
    with a private /tmp, /var/tmp and /dev/shm of ``private_tmp`` bytes (0: the default)
    and SysV IPC of its own; refused on the node when the job's commands there were
    reaped (or fenced) after ``issued`` (:func:`issued_now` when rsad issued it)."""
    size = int(private_tmp) or PRIVATE_SIZE
    if size < 1 << 20:
        raise ValueError(f"private tmpfs of {size} bytes: at least 1M")
    return ["sh", "-c", CONTAIN, umask, check_scope(scope), str(size), str(int(issued)),
            *argv]


def kill_leaf_argv(scope: str, pgid: int) -> list[str]:
    """Kill what the command led by ``pgid`` left in its leaf cgroup and remove the leaf."""
    return ["sh", "-c", KILL_LEAF, check_scope(scope), str(int(pgid))]


def reap_argv(scope: str, now: int) -> list[str]:
    """Kill and remove everything the RSA started for job ``scope`` on one node, and keep
    any of its commands issued before ``now`` (µs, :func:`issued_now`) from starting."""
    return ["sh", "-c", REAP, check_scope(scope), str(int(now))]


def parse_reaped(stdout: str) -> tuple[int, str, int]:
    """(processes signalled, "cgroup" or "environment", processes still there)."""
    for line in stdout.splitlines():
        if line.startswith(REAPED_MARK + " "):
            _, n, how, left = line.split()
            return int(n), how, int(left)
    raise ValueError(f"no {REAPED_MARK} line in {stdout[-200:]!r}")


def fence_argv(now: int) -> list[str]:
    """Kill every command an earlier rsad started as a user on one node, and keep any
    issued before ``now`` (µs, :func:`issued_now`) from starting."""
    return ["sh", "-c", FENCE, str(int(now))]


def parse_fenced(stdout: str) -> int:
    """How many processes FENCE signalled."""
    for line in stdout.splitlines():
        if line.startswith(FENCED_MARK + " "):
            return int(line.split()[1])
    raise ValueError(f"no {FENCED_MARK} line in {stdout[-200:]!r}")
