#!/bin/bash
#RSA_DATA_IN=/gpfs/alice/in
#RSA_TIER=SSD
#RSA_EARLY_START=Wait
#RSA_INPUT=RW
