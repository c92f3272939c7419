#!/bin/bash
#RSA_DATA_IN=/gpfs/alice/in
echo hi
srun ./app
