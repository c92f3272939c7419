#!/bin/bash
#RSA_DATA_IN=/gpfs/alice/in
#RSA_DATA_OUT=/gpfs/alice/out
#RSA_TIER=nvme
#RSA_STAGE_OUT=rsynk
#RSA_EARLY_START=later
#RSA_INPUT=readonly
