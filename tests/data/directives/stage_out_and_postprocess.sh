#!/bin/bash
#RSA_DATA_OUT=/gpfs/alice/out
#RSA_POSTPROCESS=/home/alice/bin/pack.sh
#RSA_STAGE_OUT=tar
