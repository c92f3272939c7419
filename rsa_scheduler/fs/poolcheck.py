"""Whether an RSA node's pool directory has a filesystem of its own that no user can write.

Owns :data:`POOL_CHECK` (one fixed shell program run as root on a node: prints one
``SHARED<TAB>why`` line for each way the pool's filesystem is open to users, nothing when
it is not), :func:`pool_check_argv` and the pure :func:`parse_pool_check`. ``rsa nodes
check`` (:mod:`rsa_scheduler.fs.nodecheck`) reports the lines; rsad's health probe
(:mod:`rsa_scheduler.daemon.health`) runs the same program and drains a node whose pool
is shared.

Why: the RAM pool's space is what the allocator hands out. Files a user leaves on the
pool's filesystem outside the RAMDISKs (``/dev/shm/rsa``, the old default, shares its
tmpfs with the world-writable ``/dev/shm``) take that space from every later job on the
node, for good. The pool is sound when its directory is the mount point of a filesystem
of its own, root's and not writable by group or others, mounted nowhere else (except the
RAMDISK directories the backends bind, ``<pool>/rsa-*``), with no directory outside the
RAMDISKs that anyone but root can write (docs/security.md, "Leftovers on RSA nodes").

Pure: builds strings and parses output; runs nothing.
"""

from __future__ import annotations

MARK = "SHARED\t"

#: argv: sh -c POOL_CHECK POOL_DIR (run as root). Backends name what they keep in the
#: pool ``rsa-<backend>-<fs_id>`` (tmpfs, moosefs, beeond): those are the RAMDISKs.
POOL_CHECK = (
    'p=$0; m="' + MARK + '"; '
    'if [ ! -d "$p" ] || [ -L "$p" ]; then '
    '  printf "%s%s\\n" "$m" "$p is not a directory"; exit 0; fi; '
    'if ! mountpoint -q -- "$p"; then '
    '  t=$(df -P -- "$p" 2>/dev/null | awk \'NR==2{print $6}\'); '
    '  printf "%s%s\\n" "$m" "$p is not a mount point: it shares the filesystem of ${t:-?}'
    ' (users can write there: /dev/shm, /tmp, /var/tmp, ...)"; exit 0; fi; '
    'set -- $(stat -c "%u %a" -- "$p"); '
    'if [ "$1" != 0 ] || [ $(( 0$2 & 022 )) != 0 ]; then '
    '  printf "%s%s\\n" "$m" "$p is owned by uid $1, mode $2: it must be root'"'"'s and '
    'writable by root only"; fi; '
    'dev=$(mountpoint -d -- "$p"); '
    'awk -v d="$dev" -v p="$p" -v m="$m" \'$3==d && $5!=p && $4 !~ /^\\/rsa-/ '
    '{printf "%s%s is also mounted at %s\\n", m, p, $5}\' /proc/self/mountinfo; '
    'find "$p" -xdev -mindepth 1 \\( -path "$p/rsa-*" -prune \\) -o -type d '
    '\\( -perm /022 -o ! -uid 0 \\) -print 2>/dev/null | head -n 3 | while IFS= read -r x; '
    'do printf "%s%s\\n" "$m" "$x, on the pool'"'"'s filesystem, is writable by a user"; '
    'done; exit 0')


def pool_check_argv(pool_dir: str) -> list[str]:
    """The argv that checks ``pool_dir`` on a node (run as root)."""
    return ["sh", "-c", POOL_CHECK, pool_dir]


def parse_pool_check(stdout: str) -> tuple[str, ...]:
    """Each way the pool is open to users, one line each; empty: it is sound."""
    return tuple(line[len(MARK):] for line in stdout.splitlines() if line.startswith(MARK))


#: how to give a node's pool a filesystem of its own (``rsa nodes check``'s fix)
FIX = ("give the pool a filesystem of its own, root's, mode 0700 (ram: `tmpfs "
       "/var/lib/rsa-ram tmpfs size=<capacity>,mode=0700,nosuid,nodev 0 0` in /etc/fstab; "
       "ssd: a filesystem on the SSD), then point pool_dir at it (operator guide, "
       "\"The pool's own filesystem\")")
