#!/bin/bash
# RSA_DATA_IN=relative/ignored
# RSA_BOGUS
#RSA_DATA_OUT=/gpfs/alice/out
