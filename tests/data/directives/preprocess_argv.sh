#!/bin/bash
#RSA_DATA_IN=/gpfs/alice/in
#RSA_PREPROCESS /home/alice/bin/unpack.sh --dest "a b" 'c d' e\ f "" --x="1 2"
