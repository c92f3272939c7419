#!/bin/bash
#SBATCH -N 1
srun hostname
