#!/usr/bin/env bash
# Capture real `sacct` output of the live lab into tests/data/sacct/ for the parser of
# `rsa sim replay --sacct` (rsa_scheduler/sim/sacct.py). Run as root with the lab up.
# The job mix: one plain job, a two-node job, one that fails, one cancelled while it runs,
# one held and cancelled before it starts (sacct does not list it: never eligible), an
# array of 3. The sacct command is the one
# docs/simulator.md gives (SACCT_FIELDS below is rsa_scheduler.sim.sacct.FIELDS).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../tests/data/sacct}
# shellcheck disable=SC1091
. /run/rsa-lab/env
export SLURM_CONF
user=$RSA_LAB_USER
pfs=$RSA_LAB_PFS
mkdir -p "$out"
sub() { runuser -u "$user" -- sbatch --parsable --chdir="$pfs" -o /dev/null "$@" | cut -d';' -f1; }
state() { squeue -h -j "$1" -o %T 2>/dev/null || true; }
SACCT_FIELDS=JobIDRaw,JobID,State,Submit,Start,End,ElapsedRaw,TimelimitRaw,AllocCPUS,ReqCPUS,NNodes,UID,Partition,QOS,TRESUsageInTot,TRESUsageOutTot
since=$(date +%Y-%m-%dT%H:%M:%S)
j_plain=$(sub -J s-plain -t 2 --wrap 'sleep 2; echo hello')
j_two=$(sub -J s-two-nodes -N 2 -t 2 --wrap 'sleep 1')
j_fail=$(sub -J s-failed -t 2 --wrap 'sleep 1; exit 3')
j_run=$(sub -J s-cancel-running -t 2 --wrap 'sleep 60')
j_arr=$(sub -J s-array -a 0-2 -t 2 --wrap 'sleep 1')
j_pend=$(sub -J s-cancel-pending -H -t 2 --wrap 'sleep 1')
for ((i = 0; i < 60; i++)); do [ "$(state "$j_run")" = RUNNING ] && break; sleep 0.5; done
sleep 1
scancel "$j_run" "$j_pend"
for ((i = 0; i < 120; i++)); do
  [ -z "$(squeue -h -u "$user" -o %i)" ] && break
  sleep 0.5
done
# slurmdbd records the ends asynchronously: wait until none shows as running or pending
for ((i = 0; i < 60; i++)); do
  sacct -a -P -n -S "$since" -o State | grep -qE 'RUNNING|PENDING' || break
  sleep 0.5
done
sacct --allusers --parsable2 --starttime "$since" --endtime now \
  --format "$SACCT_FIELDS" >"$out/lab.txt"
cat >"$out/lab.env" <<EOF2
# Job ids of this capture ($(date -u +%Y-%m-%dT%H:%MZ), Slurm $(sinfo -V | cut -d' ' -f2))
PLAIN=$j_plain TWO_NODES=$j_two FAILED=$j_fail CANCELLED_RUNNING=$j_run ARRAY=$j_arr CANCELLED_PENDING=$j_pend
EOF2
echo "captured into $out"
