#!/bin/bash
#SBATCH -N 128
#RSA_DATA_IN=/gpfs/alice/in
#RSA_DATA_OUT=/gpfs/alice/out
#RSA_PREPROCESS=/home/alice/bin/unpack.sh in.tar
#RSA_NODES=2
#RSA_TIER=ssd
#RSA_CAPACITY=2T
#RSA_STAGE_OUT=tar
#RSA_EARLY_START=union
#RSA_INPUT=ro
#RSA_RESET=30m
srun ./app
