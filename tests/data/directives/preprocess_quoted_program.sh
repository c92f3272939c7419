#!/bin/bash
#RSA_DATA_IN=/gpfs/alice/in
#RSA_PREPROCESS "/home/alice/my bin/prep" --go
