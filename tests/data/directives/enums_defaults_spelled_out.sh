#!/bin/bash
#RSA_DATA_IN=/gpfs/alice/in
#RSA_DATA_OUT=/gpfs/alice/out
#RSA_TIER=ram
#RSA_STAGE_OUT=rsync
#RSA_EARLY_START=fallback
#RSA_INPUT=ro
#RSA_RESET=input-done
