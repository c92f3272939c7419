#!/bin/bash
#RSA_DATA_IN=/gpfs/alice/in
#RSA_DATA_OUT=/gpfs/alice/out
#RSA_DATA_IN=/gpfs/alice/other
#RSA_DATA_IN /gpfs/alice/third
