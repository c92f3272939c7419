#!/bin/bash
#SBATCH -J rsa-directives
#SBATCH -t 5
#RSA_STAGE_IN /pfs/home/rsauser/input
#RSA_STAGE_OUT /pfs/home/rsauser/output
#RSA_TIER ram
echo "job on $(hostname)"
sleep 30
