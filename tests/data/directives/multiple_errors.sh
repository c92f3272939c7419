#!/bin/bash
#SBATCH -N 4
#RSA_DATA_IN=data
#RSA_DATA_OUT=/gpfs/out/../x
#RSA_DATA_IN=/gpfs/in
#RSA_TIER=
#RSA_NODSE=2
# RSA_IGNORED=1
srun ./app
#RSA_ALSO_IGNORED
