#!/usr/bin/env bash
# Capture real Slurm 22.05 output from the live lab into tests/data/slurm/ for the
# adapter's parser tests. Run as root with the lab up (fresh is best: small job ids).
# What each file holds and the job mix behind it: tests/data/slurm/README.md.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../tests/data/slurm}
# shellcheck disable=SC1091
. /run/rsa-lab/env
export SLURM_CONF
user=$RSA_LAB_USER
pfs=$RSA_LAB_PFS
mkdir -p "$out"
sub() { runuser -u "$user" -- sbatch --parsable --chdir="$pfs" -o /dev/null "$@" | cut -d';' -f1; }
waitstate() {  # job, wanted state, timeout
  local i
  for ((i = 0; i < $3 * 2; i++)); do
    scontrol show job -o "$1" | grep -q "JobState=$2 " && return 0
    sleep 0.5
  done
  echo "job $1 never reached $2" >&2; return 1
}
BASIC='%i|%T|%r|%Q|%S|%D|%u|%Y|%j'
WIDE='%i|%T|%r|%Q|%S|%e|%D|%u|%Y|%j|%N|%l|%L|%M|%V|%q|%a|%P|%y'

scancel -u "$user" 2>/dev/null || true
: >/run/rsa-lab/hooks.log.capture
# Finished variants. TIMEOUT first: it needs a node for its 1-minute limit.
j_timeout=$(sub -J t-timeout -t 1 --wrap 'sleep 300')
j_done=$(sub -J t-completed -t 1 --wrap 'echo hello')
j_fail=$(sub -J t-failed -t 1 --wrap 'exit 3')
waitstate "$j_done" COMPLETED 60
waitstate "$j_fail" FAILED 60
# Fill the other 3 nodes, then queue more jobs than nodes.
run=()
for n in 1 2 3; do run+=("$(sub -J "t-run$n" -t 10 --wrap 'sleep 600')"); done
j_cancel=$(sub -J t-cancelled -t 5 --wrap 'sleep 60')
scancel "$j_cancel"
cat >"$out/batch_script_input.sh" <<'SCRIPT'
#!/bin/bash
#SBATCH -J rsa-directives
#SBATCH -t 5
#RSA_STAGE_IN /pfs/home/rsauser/input
#RSA_STAGE_OUT /pfs/home/rsauser/output
#RSA_TIER ram
echo "job on $(hostname)"
sleep 30
SCRIPT
chmod 644 "$out/batch_script_input.sh"
j_script=$(runuser -u "$user" -- sbatch --parsable --chdir="$pfs" -o /dev/null \
  "$out/batch_script_input.sh" | cut -d';' -f1)
pend=()
for n in 1 2 3; do pend+=("$(sub -J "t-pend$n" -t 5 --wrap 'sleep 30')"); done
j_space=$(sub -J 'name with spaces' -t 5 --wrap 'sleep 30')
j_held=$(sub -J t-held -H -t 5 --wrap 'sleep 30')
j_dep=$(sub -J t-dep -d "afterok:${run[0]}" -t 5 --wrap 'sleep 30')
j_nice=$(sub -J t-nice --nice=100 -t 5 --wrap 'sleep 30')
scontrol update jobid="${pend[1]}" admincomment='rsa={"stage_in":["/pfs/home/rsauser/input"]}'
if [ "${RSA_LAB_ACCOUNTING}" = 1 ]; then
  scontrol update jobid="${pend[2]}" qos="$RSA_LAB_QOS"  # the lock-in: jumps the queue
fi
sleep 12  # two scheduler/backfill passes (5 s intervals) assign reasons and StartTimes
squeue -h -o "$BASIC" >"$out/squeue_basic.txt"
squeue -h -o "$WIDE" >"$out/squeue_wide.txt"
squeue --json >"$out/squeue.json"
squeue -h -O 'jobid:12,admin_comment:200' >"$out/squeue_admin_comment.txt"
scontrol show job -o >"$out/scontrol_show_job.txt"
scontrol show node -o >"$out/scontrol_show_node.txt"
sinfo -h -N -o '%N|%T|%c|%m|%P|%E' >"$out/sinfo_nodes.txt"
sinfo -h -o '%P|%a|%l|%D|%T|%N' >"$out/sinfo_partitions.txt"
squeue -h -r -t PD -O "JobArrayID:0|,NumNodes:0|,Reason:0|,Partition:0|" >"$out/squeue_pending.txt"
sinfo --json >"$out/sinfo.json"
scontrol write batch_script "$j_script" - >"$out/batch_script_output.txt"
# TIMEOUT arrives once the 1-minute limit has passed and slurmctld checks it.
waitstate "$j_timeout" TIMEOUT 150
sleep 1
squeue -h -t all -o "$WIDE" >"$out/squeue_all_states.txt"
for pair in completed:$j_done failed:$j_fail cancelled:$j_cancel timeout:$j_timeout; do
  scontrol show job -o "${pair#*:}" >"$out/scontrol_show_job_${pair%%:*}.txt"
done
if [ "${RSA_LAB_ACCOUNTING}" = 1 ]; then
  sacct -P -X -j "$j_done,$j_fail,$j_cancel,$j_timeout" \
    -o JobID,JobName,State,ExitCode,Start,End,NodeList,QOS >"$out/sacct_finished.txt"
fi
scancel -u "$user"
sleep 3
cp /run/rsa-lab/hooks.log "$out/hooks_env.log"
cat >"$out/jobs.env" <<EOF2
# Job ids of this capture (for README.md and parser tests)
TIMEOUT=$j_timeout COMPLETED=$j_done FAILED=$j_fail CANCELLED=$j_cancel
RUNNING=${run[*]} SCRIPT=$j_script PENDING=${pend[*]} SPACES=$j_space HELD=$j_held
DEPENDENCY=$j_dep NICE=$j_nice ADMIN_COMMENT=${pend[1]} LOCKIN_QOS=${pend[2]}
EOF2
rm -f /run/rsa-lab/hooks.log.capture
echo "captured into $out"
