#!/usr/bin/env bash
# Capture rsad's own queue read (slurm.parse.QUEUE_FORMAT) from the live lab's real Slurm
# 22.05 into tests/data/slurm/: a job mix (squeue_rsa.txt), the same after a demotion, a
# hold and a lock-in (squeue_rsa_2.txt), and a job before and after `scontrol requeue` and
# one that requeues itself (squeue_requeue.txt, ids in requeue.env). Run as root with the
# lab up and idle, rsad stopped (the output is Slurm's alone); fresh, the mix has ids 1-8
# (in a lab that ran jobs before, other ids: the files then hold the mix's lines alone).
# What the files hold: tests/data/slurm/README.md. Used by
# tests/integration/test_queue_identity.py.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../tests/data/slurm}
# shellcheck disable=SC1091
. /run/rsa-lab/env
export SLURM_CONF
user=$RSA_LAB_USER
pfs=$RSA_LAB_PFS
fmt=$("$RSA_LAB_PYTHON" -c \
  'from rsa_scheduler.slurm.parse import QUEUE_FORMAT; print(QUEUE_FORMAT)')
mkdir -p "$out"
sub() { runuser -u "$user" -- sbatch --parsable --chdir="$pfs" -o /dev/null "$@" | cut -d';' -f1; }
state() { squeue -h -t all -j "$1" -O State:0 | tr -d ' '; }
waitfor() {  # what, command...: poll for 60 s
  local what=$1 i
  shift
  for ((i = 0; i < 120; i++)); do
    "$@" && return 0
    sleep 0.5
  done
  echo "capture-queue: timed out waiting for $what" >&2
  return 1
}

# The mix: 4 one-node jobs fill c[1-4]; 5 and 6 pending, 7 two nodes and a name with a |
# and a space, 8 an array of 3 (one line per task with -r).
ids=()
for n in 1 2 3 4; do ids+=("$(sub -J "q-run$n" -t 10 --wrap 'sleep 120')"); done
ids+=("$(sub -J q-pend5 -t 10 --wrap 'sleep 60')")
ids+=("$(sub -J q-pend6 -t 10 --wrap 'sleep 60')")
ids+=("$(sub -J 'x|y z' -N 2 -t 10 --wrap 'sleep 60')")
arr=$(sub -J q-array --array=1-3 -t 10 --wrap 'sleep 60')
scontrol update jobid="${ids[4]}" admincomment='rsa1:i=/pfs/home/rsauser/in;o=/pfs/x%7Cy'
# only the mix: in a lab that ran other tests first, -t all also shows their jobs that
# ended less than MinJobAge ago
mix=$(IFS=,; echo "${ids[*]},$arr")
sleep 12  # two scheduler passes (5 s intervals) give the pending jobs their reasons
squeue -h -r -t all -j "$mix" -O "$fmt" >"$out/squeue_rsa.txt"
scontrol update jobid="${ids[5]}" priority=1000000
scontrol hold "${ids[6]}"
# (the lock-in QOS: the lab's; the cluster lab locks in by priority, its accounting has
# the QOS all the same)
scontrol update jobid="${arr}_2" qos="${RSA_LAB_QOS:-rsa-lockin}"
sleep 12
squeue -h -r -t all -j "$mix" -O "$fmt" >"$out/squeue_rsa_2.txt"
scancel "${ids[@]}" "$arr"
waitfor "the mix to leave the nodes" bash -c \
  "[ -z \"\$(squeue -h -t R,CG -u $user -o %i)\" ]"

# A requeue by root, and one the job makes itself (as its owner may), each seen before
# and after: RestartCnt counts it.
rq=$(sub -J q-requeue --requeue -t 5 --wrap 'sleep 120')
waitfor "$rq running" bash -c "[ \"\$(squeue -h -j $rq -o %T)\" = RUNNING ]"
squeue -h -r -t all -j "$rq" -O "$fmt" >"$out/squeue_requeue.txt"
sleep 1  # a requeue in the same second as the submission would keep its submit time
scontrol requeue "$rq"
# right after the requeue it is COMPLETING with RestartCnt 1 and its old submit time
waitfor "$rq requeued" bash -c "[ \"\$(squeue -h -j $rq -O RestartCnt:0)\" != 0 ]"
squeue -h -r -t all -j "$rq" -O "$fmt" >>"$out/squeue_requeue.txt"
waitfor "$rq pending" bash -c "[ \"\$(squeue -h -j $rq -o %T)\" = PENDING ]"
squeue -h -r -t all -j "$rq" -O "$fmt" >>"$out/squeue_requeue.txt"
go=$pfs/capture-queue.go
rm -f "$go"
self=$(sub -J q-self --requeue -t 5 --wrap \
  "if [ \${SLURM_RESTART_COUNT:-0} = 0 ]; then while [ ! -e $go ]; do sleep 0.2; done;
   scontrol requeue \$SLURM_JOB_ID; fi; sleep 120")
waitfor "$self running" bash -c "[ \"\$(squeue -h -j $self -o %T)\" = RUNNING ]"
squeue -h -r -t all -j "$self" -O "$fmt" >>"$out/squeue_requeue.txt"
sleep 1
runuser -u "$user" -- touch "$go"
waitfor "$self requeued" bash -c "[ \"\$(squeue -h -j $self -O RestartCnt:0)\" != 0 ]"
squeue -h -r -t all -j "$self" -O "$fmt" >>"$out/squeue_requeue.txt"
waitfor "$self pending" bash -c "[ \"\$(squeue -h -j $self -o %T)\" = PENDING ]"
squeue -h -r -t all -j "$self" -O "$fmt" >>"$out/squeue_requeue.txt"
scancel "$rq" "$self"
rm -f "$go"
cat >"$out/requeue.env" <<EOF2
# Job ids of squeue_requeue.txt: requeued by root, and by itself
ROOT=$rq SELF=$self
EOF2
echo "captured the queue into $out"
