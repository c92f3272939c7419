#!/bin/bash
#RSA_DATA_IN=/gpfs/alice/in
#RSA_PREPROCESS=prep.sh --go
#RSA_POSTPROCESS=/home/alice/../bob/pack.sh
