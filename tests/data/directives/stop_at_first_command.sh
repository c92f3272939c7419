#!/bin/bash
#RSA_DATA_IN=/gpfs/alice/in
echo start
#RSA_DATA_OUT=/gpfs/alice/out
#RSA_BOGUS=whatever
