#!/bin/bash
#SBATCH -N 64

#SBATCH --time=1:00:00
   
	
#RSA_DATA_IN=/gpfs/alice/in
## a comment
#RSA_DATA_OUT=/gpfs/alice/out
module load app
