#!/bin/bash
#RSA_DATA_IN=/gpfs/alice/in
#RSA_DATA_OUT=/gpfs/alice/out
#RSA_TIER=ssd
#RSA_STAGE_OUT=tar
#RSA_EARLY_START=wait
#RSA_INPUT=rw
#RSA_RESET=10m
