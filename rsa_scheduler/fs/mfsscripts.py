"""The shell MooseFS RAMDISKs run on RSA nodes.

Owns the scripts :class:`~rsa_scheduler.fs.moosefs.MooseFsBackend` runs over SSH as root
(``sh -c SCRIPT args``): unmount, the create-time probe, the start of a daemon, the
server check and repair, the mount check and the kill of a filesystem's daemons; and the
one Python program, the create's wait for the chunkservers' space (``python3 -c
SPACE_WAIT args``). What differs between MooseFS releases (and the parser of ``mfscli``)
is :mod:`rsa_scheduler.fs.mfsversion`'s. Text only: running them is the backend's, through
:class:`~rsa_scheduler.hosts.Host`. Imports nothing of the package.
"""

from __future__ import annotations

# A shell function: is process $1 alive (not gone, not a zombie)? Shell builtins only: a
# look starts no process.
ALIVE = r"""alive() {
  { read -r st < "/proc/$1/stat"; } 2>/dev/null || return 1
  st=${st##*) }; [ "${st%% *}" != Z ]
}
"""

# A shell function: the directory of a RAMDISK's chunkserver on this node, given the
# RAMDISK's directory $1 (<pool>/rsa-mfs-<fs_id>): the standby it claimed
# (<pool>/rsa-mfs-.standby-*, whose ``claim`` link names the fs_id: CS_START), else $1
# itself (a chunkserver started cold, or a RAMDISK built before standbys). Builtins and one
# readlink per standby in the pool (one or two).
CS_HOME = r"""cshome() {
  for sb in "${1%/*}"/rsa-mfs-.standby-*; do
    [ "$(readlink "$sb/claim" 2>/dev/null)" = "${1##*/rsa-mfs-}" ] && {
      echo "$sb"; return; }
  done
  echo "$1"
}
"""
# A shell function (ALIVE's alive first): SIGKILL the chunkserver of the standby directory
# $1, its pid from its lock file and only if that process works in the standby's cs/ (a
# recycled pid is not it), and wait until it is gone; 1 when it outlived SIGKILL 10 s
# (then its directory must stay). Shell builtins but the kill's wait.
SB_KILL = r"""sbkill() {
  { read -r pid < "$1/cs/.mfschunkserver.lock"; } 2>/dev/null || return 0
  case $pid in ''|*[!0-9]*) return 0;; esac
  [ "/proc/$pid/cwd" -ef "$1/cs" ] || return 0
  kill -KILL "$pid" 2>/dev/null || return 0
  i=0
  while alive "$pid"; do
    i=$((i + 1))
    [ $i -le 1000 ] || { echo "standby $1: pid $pid survived SIGKILL" >&2; return 1; }
    sleep 0.01
  done
}
"""
# Start a standby chunkserver in the pool $0 unless it has a live unclaimed one: a
# chunkserver whose folder is scanned before any create needs it (a cold one reports its
# space no sooner than 1 s after it starts: moosefs.STANDBY). Its own directory
# <pool>/rsa-mfs-.standby-<random> (a name no fs_id has: an fs_id never starts with a
# dot), root-only; it listens on the data address $1 at a free port of $3..$4 (the port
# range's last block, which no RAMDISK draws) and "connects" to port $2 of its own address,
# below 1024 (only root may listen there) and where nothing listens
# (mfslayout.STANDBY_MASTER_PORT; tried once an hour: MASTER_RECONNECTION_DELAY 3600;
# never a loopback address, which a chunkserver refuses at its start). It holds no
# data until a create claims it (CS_START), and a claimed one goes with its RAMDISK. First,
# what the pool holds that no RAMDISK owns goes: unclaimed standbys that died, claimed ones
# whose RAMDISK directory is gone (an rsad stopped between a claim and a teardown). Run in
# the background (its log: the standby's mfschunkserver.log), under a lock of the pool
# directory (flock); prints nothing but why it could not start one.
STANDBY_START = ALIVE + SB_KILL + r"""p=$0; addr=$1; parking=$2; first=$3; last=$4
# one at a time per pool (a create's and a teardown's may run at once): the pool's lock
# (not inherited by the chunkserver, which would hold it for its life)
exec 9<"$p" && flock -w 60 9 || { echo "the pool $p stayed locked 60 s" >&2; exit 1; }
live=
for sb in "$p"/rsa-mfs-.standby-*; do
  [ -d "$sb" ] || continue
  if [ -L "$sb/claim" ]; then
    [ -d "$p/rsa-mfs-$(readlink "$sb/claim")" ] && continue
  elif mfschunkserver -c "$sb/mfschunkserver.cfg" test >/dev/null 2>&1; then
    live=1; continue
  fi
  sbkill "$sb" && rm -rf --one-file-system "$sb"
done
[ -z "$live" ] || exit 0
sb="$p/rsa-mfs-.standby-$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')"
mkdir -m 0700 "$sb" "$sb/cs" "$sb/chunks" || exit 1
printf '%s\n' "$sb/chunks" > "$sb/mfshdd.cfg"
# a free port of the block, from a random one on: nodes sharing a network namespace (a
# lab) start theirs at once; a port another took first fails the start, the next is tried
used=" $(ss -Hltn | awk '{n = split($4, a, ":"); printf "%s ", a[n]}')"
span=$((last - first + 1)); at=$(( $(od -An -N2 -tu2 /dev/urandom) % span )); tries=0
while [ $tries -lt $span ]; do
  port=$((first + (at + tries) % span)); tries=$((tries + 1))
  case $used in *" $port "*) continue;; esac
  printf '%s\n' "WORKING_USER = root" "WORKING_GROUP = root" "SYSLOG_IDENT = mfscs-standby" \
    "DATA_PATH = $sb/cs" "HDD_CONF_FILENAME = $sb/mfshdd.cfg" \
    "HDD_LEAVE_SPACE_DEFAULT = 64MiB" "MASTER_HOST = $addr" "MASTER_PORT = $parking" \
    "BIND_HOST = $addr" "CSSERV_LISTEN_HOST = $addr" "CSSERV_LISTEN_PORT = $port" \
    "MASTER_RECONNECTION_DELAY = 3600" > "$sb/mfschunkserver.cfg"
  mfschunkserver -c "$sb/mfschunkserver.cfg" start </dev/null >"$sb/mfschunkserver.log" 2>&1 \
    9<&- && exit 0
  used="$used$port "
done
echo "no standby chunkserver started in $first..$last: $(tail -n 1 "$sb/mfschunkserver.log")" >&2
rm -rf --one-file-system "$sb"
exit 1
"""
# A RAMDISK's chunkserver on one node, in its create's first round trip: $0 the RAMDISK's
# directory (its files unpacked: mfschunkserver.cfg, and mfschunkserver.claim.cfg, the
# same with @HOME@ for the chunkserver's directory), $1 "1" to claim a standby, $2 its
# listen port, $3 STANDBY_START's text, then its arguments after the pool. Claims the
# pool's first live unclaimed standby (the ``claim`` link, made atomically: two creates
# never share one), gives it the RAMDISK's master and port and reloads it (SIGHUP, what
# ``mfschunkserver reload`` sends; a reload re-reads both, masterconn_reload and
# csserv_reload): it registers at the next whole second, its register carrying the space
# it scanned. A claimed standby that has not moved from its port to the new one within
# 1 s (a reload that cannot bind keeps the old port and says nothing: a listener on the
# new port is not enough) is killed and removed, and the chunkserver starts cold in $0,
# as without standbys. Shell builtins up to the wait (16 nodes of a lab share 2 CPUs).
# Prints "CS standby" or "CS cold"; with $1 "1" it then starts a new standby in the
# background (STANDBY_START, 5 s later) for the next create on the node. First, with $1
# "1" or not, a standby this fs_id claimed before goes (killed, removed with what it
# held): one an earlier build of the RAMDISK left on the node (its teardown by an rsad
# without standbys, or one that failed there) would otherwise be the one CS_HOME finds,
# not this build's chunkserver, for the health check, the repair and the teardown.
CS_START = ALIVE + SB_KILL + r"""d=$0; claim=$1; port=$2; standby=$3; shift 4
p=${d%/*}; f=${d##*/rsa-mfs-}
for sb in "$p"/rsa-mfs-.standby-*; do
  [ -L "$sb/claim" ] && [ "$(readlink "$sb/claim")" = "$f" ] || continue
  sbkill "$sb" || exit 1
  rm -rf --one-file-system "$sb"
done
# is port $1 listened on here (this network namespace)? /proc/net/tcp, shell builtins only
listened() {
  h=$(printf ':%04X' "$1")
  while read -r _ local _ st _; do
    [ "$st" = 0A ] && case $local in *"$h") return 0;; esac
  done < /proc/net/tcp
  return 1
}
got=; mine=; why=
if [ "$claim" = 1 ]; then
  for sb in "$p"/rsa-mfs-.standby-*; do
    [ -d "$sb" ] && [ ! -L "$sb/claim" ] || continue
    { read -r pid < "$sb/cs/.mfschunkserver.lock"; } 2>/dev/null || continue
    case $pid in ''|*[!0-9]*) continue;; esac
    # its chunkserver (works in its cs/: a recycled pid is not it), alive
    [ "/proc/$pid/cwd" -ef "$sb/cs" ] && alive "$pid" || continue
    ln -s "$f" "$sb/claim" 2>/dev/null || continue
    mine=$sb
    # the RAMDISK's config, its @HOME@ the standby's directory; the port it leaves
    old=; cfg=
    while IFS= read -r line; do
      case $line in "CSSERV_LISTEN_PORT = "*) old=${line#*= };; esac
    done < "$sb/mfschunkserver.cfg"
    while IFS= read -r line; do
      case $line in *@HOME@*) line="${line%%@HOME@*}$sb${line#*@HOME@}";; esac
      cfg="$cfg$line
"
    done < "$d/mfschunkserver.claim.cfg"
    printf '%s' "$cfg" > "$sb/mfschunkserver.cfg.new" &&
      mv "$sb/mfschunkserver.cfg.new" "$sb/mfschunkserver.cfg" &&
      kill -HUP "$pid" || { why="its reload failed"; break; }
    i=0
    while [ $i -lt 50 ]; do
      if ! listened "$old" && listened "$port"; then got=$sb; break; fi
      i=$((i + 1)); sleep 0.02
    done
    why="did not take port $port"
    break
  done
  if [ -z "$got" ] && [ -n "$mine" ]; then
    sbkill "$mine" || exit 1
    rm -rf --one-file-system "$mine"
    echo "standby $mine $why: removed; the chunkserver starts cold" >&2
  fi
fi
if [ -n "$got" ]; then
  echo "CS standby"
else
  log="$d/mfschunkserver.log"
  mfschunkserver -c "$d/mfschunkserver.cfg" start </dev/null >"$log" 2>&1 || {
    echo "mfschunkserver failed: $(tail -n 3 "$log" | tr '\n' ' ')" >&2; exit 1; }
  echo "CS cold"
fi
if [ "$claim" = 1 ]; then  # 5 s on: off the create's CPU (16 nodes start it at once)
  setsid sh -c 'sleep 5; exec sh -c "$0" "$@"' "$standby" "$p" "$@" </dev/null >/dev/null 2>&1 &
fi
"""
# Unmount, in the round trip of a node's teardown (then KILL_SCRIPT, then the pool's
# removal): umount; if that fails or hangs, lazy umount and abort the FUSE connection
# through fusectl so a dead server never hangs teardown; then SIGKILL this node's
# mfsmount of the mountpoint (unmounted, and the data is being discarded: nothing to
# flush; it would otherwise linger 1-3 s) and wait until it is gone (ALIVE: no process
# started per look, as a teardown runs on every node at once). pgrep --ns: nodes of one
# host share the PID namespace, not the mount namespace.
UMOUNT_SCRIPT = ALIVE + r"""mnt=$0; title=$1
minor=$(findmnt -n -o MAJ:MIN --mountpoint "$mnt" | cut -d: -f2)
if [ -n "$minor" ]; then
  timeout -s KILL 10 umount "$mnt" 2>/dev/null || ! findmnt -n --mountpoint "$mnt" \
      >/dev/null || {
    # still mounted (a node's teardown runs beside the others': its client may lose
    # the master, which another node's round trip kills, and go away by itself)
    umount -l "$mnt" || ! findmnt -n --mountpoint "$mnt" >/dev/null || exit 1
    mountpoint -q /sys/fs/fuse/connections ||
      mount -t fusectl fusectl /sys/fs/fuse/connections
    c=/sys/fs/fuse/connections/$minor/abort
    if [ -e "$c" ]; then echo 1 > "$c"; fi
    echo "lazy-unmounted $mnt, aborted FUSE connection $minor" >&2
  }
fi
pids=$(pgrep --ns $$ --nslist mnt -x -f "$title")
kill -KILL $pids 2>/dev/null
i=0
for pid in $pids; do
  while alive "$pid"; do
    i=$((i + 1))
    if [ $i -gt 500 ]; then echo "mfsmount $pid did not exit" >&2; exit 1; fi
    sleep 0.02
  done
done
rmdir "$mnt" 2>/dev/null || true
"""

# What a create needs to know first, in one round trip: the fs_id's pool entries (F:-
# when there is none) and the ports listening on the node.
PROBE_SCRIPT = ('if [ -e "$0" ]; then echo F:.; ls -A "$0" | sed "s/^/F:/"; else echo F:-; fi; '
                'ss -Hltn')

# Restart a job's MooseFS servers on one node if they died (kill -9, OOM), keeping their
# data: the chunks stay in the node's pool directory, and the master, started with -a,
# rebuilds its metadata from its last dump and change logs. $0: the node's dir, $1: 1 on
# the master's node. Prints "restarted: <daemon>" per restart. A node whose files are
# gone (rebooted, pool wiped) exits 3: starting empty servers there would hide the loss.
REPAIR_SCRIPT = CS_HOME + r"""d=$0
[ -f "$d/mfschunkserver.cfg" ] || {
  echo "its RAMDISK files are gone from this node (restarted? pool wiped?)" >&2; exit 3; }
h=$(cshome "$d")
if [ "$1" = 1 ] && ! mfsmaster -c "$d/mfsmaster.cfg" test >/dev/null 2>&1; then
  mfsmaster -a -c "$d/mfsmaster.cfg" start >/dev/null 2>"$d/repair.err" || {
    echo "mfsmaster would not start: $(tail -n 1 "$d/repair.err")" >&2; exit 1; }
  echo "restarted: master"
fi
if ! mfschunkserver -c "$h/mfschunkserver.cfg" test >/dev/null 2>&1; then
  mfschunkserver -c "$h/mfschunkserver.cfg" start >/dev/null 2>"$d/repair.err" || {
    echo "mfschunkserver would not start: $(tail -n 1 "$d/repair.err")" >&2; exit 1; }
  echo "restarted: chunkserver"
fi
"""

# Are a job's MooseFS servers on one node alive? The same tests as REPAIR_SCRIPT (each
# daemon's lock file and pid: instant, never waits on the network), without restarting
# anything. $0: the node's dir, $1: 1 on the master's node. Prints what is dead, one line
# each ("gone" when the node's RAMDISK files are gone); nothing when all live.
SERVERS_CHECK = CS_HOME + r"""d=$0
[ -f "$d/mfschunkserver.cfg" ] || { echo gone; exit 0; }
if [ "$1" = 1 ] && ! mfsmaster -c "$d/mfsmaster.cfg" test >/dev/null 2>&1; then
  echo master; fi
mfschunkserver -c "$(cshome "$d")/mfschunkserver.cfg" test >/dev/null 2>&1 || echo chunkserver
"""

# Is the node's own mount of the RAMDISK alive? "ok", "missing" (not mounted), "dead"
# (its mfsmount died: ENOTCONN) or "hung" (no answer in 8 s: a dead master, which
# REPAIR_SCRIPT restarts; the mount recovers by itself).
MOUNT_CHECK = r"""mnt=$0
findmnt -n --mountpoint "$mnt" >/dev/null || { echo missing; exit 0; }
if err=$(timeout -s KILL 8 stat -f -c %b "$mnt" 2>&1 >/dev/null); then echo ok
else case $err in *"not connected"*) echo dead;; *) echo hung;; esac; fi"""

# SIGKILL MooseFS daemons (a scratch FS needs no clean stop) given "lockfile cfg" pairs:
# the pid comes from the daemon's own lock file and is only killed if that process runs
# with this cfg (a recycled pid is left alone); then wait until each is gone or a zombie
# (the lock file's lock is released at exit). All of a node's daemons die at once.
KILL_SCRIPT = ALIVE + r"""pids=""
while [ $# -ge 2 ]; do
  lock=$1; cfg=$2; shift 2
  { read -r pid < "$lock"; } 2>/dev/null || continue
  case $pid in ''|*[!0-9]*) continue;; esac
  tr '\0' ' ' < /proc/$pid/cmdline 2>/dev/null | grep -qF -- "$cfg" || continue
  kill -KILL "$pid" && pids="$pids $pid"
done
for pid in $pids; do
  i=0
  while alive "$pid"; do
    i=$((i + 1))
    if [ $i -gt 1000 ]; then echo "pid $pid survived SIGKILL" >&2; exit 1; fi
    sleep 0.01
  done
done
"""


# The kill of a RAMDISK's servers on one node, in its teardown: $0 the RAMDISK's
# directory, $1 "1" on the master's node. KILL_SCRIPT on its chunkserver (where CS_HOME
# finds it) and master, then the removal of a claimed standby's directory (with the
# RAMDISK's chunks: the RAMDISK's own directory is removed after this).
KILL_SERVERS = ALIVE + CS_HOME + r"""d=$0; h=$(cshome "$d")
if [ "$1" = 1 ]; then
  set -- "$h/cs/.mfschunkserver.lock" "$h/mfschunkserver.cfg" \
    "$d/master/.mfsmaster.lock" "$d/mfsmaster.cfg"
else
  set -- "$h/cs/.mfschunkserver.lock" "$h/mfschunkserver.cfg"
fi
""" + KILL_SCRIPT[len(ALIVE):] + r"""# the chunks first: a teardown stopped half-way
# never leaves them unclaimed
[ "$h" = "$d" ] || { rm -rf --one-file-system "$h/chunks" && rm -rf --one-file-system "$h"; }
"""
# Start a MooseFS daemon or mfsmount ("$@") with its stdin, stdout and stderr on a log file
# in the RAMDISK's directory ($0): a daemon that kept the SSH channel's output open would
# hold the round trip until the channel's quiet-output grace (remote.EOF_GRACE). When it
# fails, its last lines are the error.
DAEMON_START = r"""log="$0/${1##*/}.log"
"$@" </dev/null >"$log" 2>&1 || {
  echo "$1 failed: $(tail -n 3 "$log" | tr '\n' ' ')" >&2; exit 1; }
"""


# Wait on the master's node, in one round trip, until every chunkserver of a RAMDISK has
# registered with the master and reported its space, i.e. can take writes (the master gives
# a new chunk only to a server whose total space > 0: matocsserv.c). MooseFS has no event
# for it; this asks the master what mfscli -SCS asks (CLTOMA_CSERV_LIST, 500 -> 501) on one
# connection every $4 s, in one Python process: mfscli is a 0.5 MB script that Python
# compiles at every start (0.15-0.4 s on the lab's loaded CPUs), which was most of the
# time from the last space report to the create's end. python3 is there wherever mfscli is.
# Arguments: master host, port, seconds, poll, the record's "size,ip,port,total" offsets
# (Dialect.cslist_record), then one "PORT:ADDR[,ADDR...]" per chunkserver (its listen port
# and its data addresses, resolved here as the master resolves them). Prints "R IP PORT"
# for every connected chunkserver with space>0 of the last answer (and "E what" when the
# last ask failed); exit 0 once every chunkserver is among them, 1 when the time is up,
# 3 at once ("P what") when the answer is not in the layout it was given (a MooseFS
# release whose records differ: the caller asks mfscli instead, whose format is kept).
SPACE_WAIT = r"""import socket, struct, sys, time
host, port, seconds, poll = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
size, ip_at, port_at, total_at = (int(x) for x in sys.argv[5].split(","))
want = []
for arg in sys.argv[6:]:
    cs_port, _, addrs = arg.partition(":")
    keys = set()
    for a in addrs.split(","):
        try:
            keys |= {(i[4][0], int(cs_port))
                     for i in socket.getaddrinfo(a, None, socket.AF_INET, socket.SOCK_STREAM)}
        except OSError:
            pass
    want.append(keys)
end = time.monotonic() + seconds
conn, ready, err = None, set(), ""

def recv(n):
    buf = b""
    while len(buf) < n:
        part = conn.recv(n - len(buf))
        if not part:
            raise OSError("the master closed the connection")
        buf += part
    return buf

while True:
    try:
        if conn is None:
            conn = socket.create_connection((host, port), timeout=5)
        conn.settimeout(max(0.05, min(5.0, end - time.monotonic())))
        conn.sendall(struct.pack(">LL", 500, 0))
        kind = 0
        while kind != 501:  # the master may send keep-alives (0) first
            kind, n = struct.unpack(">LL", recv(8))
            data = recv(n)
        if len(data) % size:
            print("P the master's chunkserver list of %d bytes is not a list of %d-byte records"
                  % (len(data), size))
            sys.exit(3)
        ready, err = set(), ""
        for at in range(0, len(data), size):
            r = data[at:at + size]
            if r[0] & 1 == 0 and struct.unpack_from(">Q", r, total_at)[0] > 0:
                ready.add((socket.inet_ntoa(r[ip_at:ip_at + 4]),
                           struct.unpack_from(">H", r, port_at)[0]))
    except (OSError, struct.error) as e:
        err = str(e) or type(e).__name__
        if conn is not None:
            conn.close()
        conn = None
    done = all(keys & ready for keys in want)
    if done or time.monotonic() >= end:
        for ip, p in sorted(ready):
            print("R", ip, p)
        if err:
            print("E", err)
        sys.exit(0 if done else 1)
    time.sleep(poll)
"""
