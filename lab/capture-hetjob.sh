#!/usr/bin/env bash
# Capture real Slurm 22.05 output of a heterogeneous job (two components, 1 + 2 nodes)
# from the live lab into tests/data/slurm/: the squeue lines rsad reads (pending with
# the cluster full, then running) and every hook's environment. Run as root with the lab
# up and idle. What the files hold: tests/data/slurm/README.md.
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
work=$pfs/capture-hetjob
runuser -u "$user" -- mkdir -p "$work/in"
cat >"$work/job.sh" <<'SCRIPT'
#!/bin/bash
#SBATCH -t 5 -N 1
#SBATCH hetjob
#SBATCH -N 2
#RSA_DATA_IN=@IN@
srun --het-group=0,1 true
SCRIPT
sed -i "s|@IN@|$work/in|" "$work/job.sh"
chown "$user:" "$work/job.sh"
: >/run/rsa-lab/hooks.log
fill=$(runuser -u "$user" -- sbatch --parsable -N4 -t 2 --chdir="$pfs" -o /dev/null \
  --wrap 'sleep 20')
het=$(runuser -u "$user" -- sbatch --parsable --chdir="$work" -o /dev/null "$work/job.sh")
sleep 12
{ squeue -h -r -j "$fill,$het" -t all -O "$fmt"; } >"$out/squeue_hetjob_pending.txt"
for _ in $(seq 1 120); do
  squeue -h -r -j "$het" -o %T | grep -q RUNNING && break
  sleep 0.5
done
squeue -h -r -j "$het" -t all -O "$fmt" >"$out/squeue_hetjob_running.txt"
for _ in $(seq 1 120); do
  [ -z "$(squeue -h -j "$het" -o %T)" ] && break
  sleep 0.5
done
sleep 2
cp /run/rsa-lab/hooks.log "$out/hooks_env_hetjob.log"
echo "# the hetjob's leader and fill job of this capture" >"$out/hetjob.env"
echo "HETJOB=$het FILL=$fill" >>"$out/hetjob.env"
rm -rf "$work"
echo "captured hetjob $het into $out"
